"""Model-based test: kg's copy-on-write branches against a naive model that copies whole
branches (hypothesis stateful testing), on SQLite and PostgreSQL.

The model keeps, per branch, a full copy of what a reader sees: its nodes (path -> value) and
its relations, keyed by endpoint *addresses* ((from path, type, to path) -> weight), as docs/concepts/merge.md
states identity: a node is its (workspace, path), a relation is (from path, to path, type).
Creating a branch copies the parent; deleting a node removes its edges; a merge of a child into
its parent is the three-way merge (docs/concepts/merge.md) computed on the copies against the base copy
(the fork, then the last merge), and a merge that would leave an edge on a deleted endpoint or
a node under a deleted parent is a conflict. Every read of kg must equal the model; every merge
kg refuses must be refused by the model with the same conflicts, and the other way round; a
conflicted merge is retried with resolutions ('ours' or 'theirs' for every conflict) which the
model applies too. After every merge, what kg reports (``applied``, the dry run's preview and
the revision log) is exactly what a reader of the target sees change.

The generator creates one path on several branches, deletes and re-creates nodes that have
edges, renames (delete + create elsewhere in one revision), relates to nodes that the other
side deletes, nests nodes (a parent deleted under a child), and runs ``extract-entities`` on
branches (its writes are adopted into the model after checking they touch only what
extraction may touch).

Lineage: documents are also rewritten through the write path (lineage unlinks and restamps the
branch's mentions) and mentions asserted by hand. A merge runs the model's lineage rule on the
target; a mention either side holds that the merged text no longer names is a ``lineage``
conflict, resolved ``keep`` or ``drop``. Every merge is asked from its dry run's ``plan``, and
its ``applied``, ``derived`` and ``derived_writes`` must be the dry run's and the model's.

Ingest (``docs/guides/ingest.md``): a small folder of text files, their texts drawn (unchanged,
changed, a heading and a body both a person and the file changed), is ingested on a branch
through ``kg.ops.ingest.ingest_path``, between people's edits, deletes and re-creations of the
files' nodes. The model keeps, per branch, the last ingested hash and parse of each file (a
branch sees its parent's up to the fork; a merge carries the source's records with its nodes,
as ``kg.store.ingest_records.carry_records`` says) and applies the
documented rule: an unchanged file is skipped, a changed one is merged per property with the
node against the last parse (the person's value kept and listed where both changed it; a
deleted node stays deleted). kg's nodes, its report and the revisions it wrote must be the
model's.
"""

from __future__ import annotations

import hashlib
import os
import re
import unicodedata
import uuid
from collections import Counter

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis.errors import InvalidArgument
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from sqlalchemy import create_engine, text

from kg.context import OPERATOR, run
from kg.errors import Conflict, MergeConflict, NotFound
from kg.index.embedded import EmbeddedVectorIndex
from kg.ops.ingest import ingest_path
from kg.ops.merge import merge_branch, preview_merge
from kg.ops.texts import write_node
from kg.providers.registry import make_embedder
from kg.rag.functions import invoke
from kg.services import Services
from kg.settings import Settings
from kg.store import history
from kg.store import nodes as node_store
from kg.store import relations as rel_store
from kg.store.db import Database
from kg.store.nodes import NodeWrite
from kg.store.repos import begin_write, branch_view, create_branch, create_repository, create_workspace, get_repository

PATHS = ["/a", "/b", "/c", "/a/x"]
DOCS = ["/d1", "/d2"]
ENTITY = "/entities/dgia"
ENDPOINTS = ["/a", "/b", "/c", "/a/x", "/d1", ENTITY]
DELETABLE = PATHS + DOCS + [ENTITY, "/entities", "/kg"]
TEXTS = ["The audit of DGIA was completed on time.", "The board of DGIA met Dana Weber.",
         "Dana Weber approved funding."]
KEYS = ["k1", "k2"]
VALUES = [1, 2, 3]
TYPES = ["t1", "t2"]
STEPS = int(os.environ.get("KG_MODEL_STEPS", "60"))
EXAMPLES = int(os.environ.get("KG_MODEL_EXAMPLES", "50"))   # at most 3,000 steps; about 2,500 run
POSTGRES_URL = os.environ.get("KG_TEST_POSTGRES_URL")
ABSENT = "∅"
CONFLICT = object()

props_st = st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=2)

#: The ingested folder's files (``f1.md`` is the node ``/f1``) and the texts they may hold: the
#: second changes the body only, the third the heading (the node's ``title``) and the body.
FILES = ["f1", "f2"]
FILE_TEXTS = ["# Alpha\n\nfirst draft\n", "# Alpha\n\nsecond draft\n", "# Beta\n\nfirst draft\n"]
#: What a file holds at an ingest: the text the branch last ingested, one of FILE_TEXTS, or no file.
file_st = st.sampled_from(["same", "same", 0, 1, 2, None])
#: A person's edits of an ingested node: the file's keys (``Beta``: the file's own next heading,
#: a change both make alike), a key of their own, a key removed.
EDITS = [("title", "Mine"), ("title", "Beta"), ("content", "my text"), ("note", 1), ("title", None)]


STATS: Counter = Counter()   # what the run did: steps, merges by outcome, extractions


def _event(value):
    """hypothesis.event (also usable outside a hypothesis run: explicit replays), counted."""
    STATS[value] += 1
    try:
        event(value)
    except InvalidArgument:
        pass


def text_hash(text):
    """sha256 of a document's one text field, stripped: what a mention records it read."""
    return hashlib.sha256(text.strip().encode("utf-8")).hexdigest()


def _tokens(text):
    """A name's or a text's tokens, the naive way: case folded, every character that is not a
    letter, a digit, ``+`` or ``#`` a separator (the rule of kg.text.names for these texts)."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return re.sub(r"[^\w+#]|_", " ", folded).split()


def names_in(text, names):
    """Whether the text names one of ``names``: a name's tokens in a row among the text's."""
    hay = _tokens(text)
    for name in names:
        needle = _tokens(name)
        if needle and any(hay[i:i + len(needle)] == needle for i in range(len(hay))):
            return True
    return False


def parent_path(path):
    return path.rsplit("/", 1)[0] or "/"


def value(props, node_type="t"):
    """The model's node value: what a three-way merge compares (type and order included)."""
    return {**props, "@type": node_type, "@order": None}


def props_of(val):
    return {k: v for k, v in val.items() if not k.startswith("@")}


class Model:
    """A naive store: every branch is a full copy of what a reader sees."""

    def __init__(self):
        self.nodes = {"main": {}}        # branch -> path -> value
        self.edges = {"main": {}}        # branch -> (from path, type, to path) -> weight
        self.parent = {"main": None}
        self.base = {}                   # child -> (nodes copy, edges copy): the merge base
        self.records = {"main": {}}      # branch -> path -> (sha256, flat parse) of its last ingest
        self.record_base = {}            # child -> its records at the merge base
        self.property_merges = 0

    def fork(self, name, parent):
        self.nodes[name] = dict(self.nodes[parent])
        self.edges[name] = dict(self.edges[parent])
        self.records[name] = dict(self.records[parent])
        self.record_base[name] = dict(self.records[parent])
        self.parent[name] = parent
        self.base[name] = (dict(self.nodes[parent]), dict(self.edges[parent]))

    def ingest(self, branch, path, parse):
        """The documented ingest rule for one file on ``branch``; its node and record follow.

        ``parse`` is the file's flat parse (its properties and ``kg:node_type``, ``sha256`` the
        file's hash). Returns ``(outcome, kept, kept_deleted)``: ``outcome`` is the report's
        list (``inserted``, ``replaced``, ``skipped``) and whether a revision is written
        (``skipped`` may record the hash alone), ``kept`` the report's ``kept_edits`` of it.
        """
        sha = parse["sha256"]
        record = self.records[branch].get(path)
        node = self.nodes[branch].get(path)
        ours = None if node is None else {**props_of(node), "kg:node_type": node["@type"]}
        if record is not None and record[0] == sha:          # unchanged: whatever the node became
            return ("skipped", False), [], False
        if record is None:
            if ours is None:
                self._write(branch, path, parse, sha, parse)
                return ("inserted", True), [], False
            if ours == parse or ours.get("sha256") == sha:   # no record, the file's version already
                return ("skipped", False), [], False
            # No ingest of the file on this branch's history (the model's records and kg's
            # ingest revisions go together: a node a merge brought, or a person made): the base
            # is unknown, every value that differs from the file's is the node's to keep.
            base = None
        else:
            base = record[1]
            if ours is None:                                 # deleted is an edit: it stays deleted
                self.records[branch][path] = (sha, parse)
                return ("skipped", True), [], True
        merged, kept = {}, []
        for key in sorted(set(base or {}) | set(ours) | set(parse)):
            b = ABSENT if base is None else base.get(key, ABSENT)
            o, t = ours.get(key, ABSENT), parse.get(key, ABSENT)
            if key == "sha256" or o == t:
                r = t
            elif base is not None and t == b:                # only the person changed it
                r = o
            elif base is not None and o == b:                # only the file changed it
                r = t
            else:                                            # both: the person's value, listed
                r = o
                kept.append({"path": path, "key": key, "kept": None if o == ABSENT else o,
                             "file": None if t == ABSENT else t})
            if r != ABSENT:
                merged[key] = r
        if merged == ours:
            self.records[branch][path] = (sha, parse)
            return ("skipped", True), kept, False
        self._write(branch, path, merged, sha, parse)
        return ("replaced", True), kept, False

    def _write(self, branch, path, flat, sha, parse):
        self.nodes[branch][path] = value({k: v for k, v in flat.items() if k != "kg:node_type"},
                                         flat["kg:node_type"])
        self.records[branch][path] = (sha, parse)

    def delete(self, branch, path):
        """Remove the node, its descendants and every edge touching them."""
        gone = {p for p in self.nodes[branch] if p == path or p.startswith(path + "/")}
        for p in gone:
            del self.nodes[branch][p]
        for key in [k for k in self.edges[branch] if k[0] in gone or k[2] in gone]:
            del self.edges[branch][key]

    def merge(self, source, target, resolutions=None):
        """Three-way merge of ``source`` into ``target``.

        ``resolutions``: ``{("node", path) | ("rel", key): "ours" | "theirs"}``. Returns
        ``(conflicts, report)``: the set of conflict ids (nothing changes when it is not
        empty), and what the merge changes (``nodes``: path -> outcome, ``relations``:
        key -> outcome, outcomes as kg reports them).
        """
        res = resolutions or {}
        bn, be = self.base[source]
        on, oe = self.nodes[target], self.edges[target]
        on_before, be_target = set(on), dict(oe)
        tn, te = self.nodes[source], self.edges[source]
        conflicts = set()
        node_writes = {}                 # path -> ("write", value) | ("kept", value) | ("delete", None)
        decided = set()                  # paths whose node conflict a resolution decided
        for path in sorted(set(bn) | set(on) | set(tn)):
            bv, ov, tv = (x.get(path) for x in (bn, on, tn))
            if tv == bv or ov == tv:
                continue
            if ov == bv:
                node_writes[path] = ("delete", None) if tv is None else ("write", tv)
                continue
            merged = None
            if bv is not None and ov is not None and tv is not None:
                merged = {}
                for key in set(bv) | set(ov) | set(tv):
                    bk, ok, tk = bv.get(key, ABSENT), ov.get(key, ABSENT), tv.get(key, ABSENT)
                    r = ok if tk == bk else tk if (ok == bk or ok == tk) else CONFLICT
                    if r is CONFLICT:
                        merged = None
                        break
                    if r != ABSENT:
                        merged[key] = r
            if merged is not None:
                self.property_merges += 1
                if merged != ov:
                    node_writes[path] = ("write", merged)
                continue
            take = res.get(("node", path))
            if take is not None:
                decided.add(path)
            if take is None:
                conflicts.add(("node", path))
            elif take == "ours":
                if ov is not None:
                    node_writes[path] = ("kept", ov)
            else:
                node_writes[path] = ("delete", None) if tv is None else ("write", tv)
        edge_writes = {}                 # key -> (resolution taken or None, weight or ABSENT)
        resolved = {cid[1]: take for cid, take in res.items() if cid[0] == "rel"}
        for key in sorted(set(be) | set(oe) | set(te)):
            if key in resolved:
                continue
            b, o, t = (x.get(key, ABSENT) for x in (be, oe, te))
            if t == b or o == t:
                continue
            if o == b:
                edge_writes[key] = (None, t)
            else:
                conflicts.add(("rel", key))
        # a resolution decides its relation, and an edge it keeps keeps its endpoints
        keep, restore = set(), set()
        for key, take in sorted(resolved.items()):
            o = oe.get(key, ABSENT)
            w = o if take == "ours" else te.get(key, ABSENT)
            if w == ABSENT:
                if o != ABSENT:
                    edge_writes[key] = (take, ABSENT)
            elif take == "ours":
                edge_writes[key] = ("ours", w)
                keep |= {key[0], key[2]}
            else:
                if w != o:
                    edge_writes[key] = ("theirs", w)
                restore |= {key[0], key[2]}
        for p in keep:  # the source's delete is not applied: the target's node is re-asserted
            if p in node_writes and node_writes[p][0] == "delete":
                if p in on:
                    node_writes[p] = ("kept", on[p])
                else:
                    del node_writes[p]

        def alive(p):
            if p in node_writes:
                return node_writes[p][0] != "delete"
            return p in on
        for p in sorted(p for p in restore if not alive(p)):
            node_writes[p] = ("restore", tn[p])
        # A resolution naming a node whose parent is deleted on one side decides it (ancestors
        # decided by their own resolution are left as decided): a node the merge writes, 'ours'
        # leaves it out, 'theirs' writes it and restores its dead ancestors as the source has
        # them; a node of the target, 'theirs' deletes it and what is under it, 'ours' keeps it
        # and undoes the deletes of its ancestors.
        orphan_res = {cid[1]: take for cid, take in res.items() if cid[0] in ("node", "orphan")
                      and cid[1] not in decided}
        restore_up, keep_up, trees = set(), set(), []
        for p, take in sorted(orphan_res.items()):
            if p in node_writes and node_writes[p][0] != "delete":
                if take == "ours":
                    del node_writes[p]
                else:
                    restore_up |= set(ancestors(p))
            elif take == "theirs":
                trees.append(p)
            else:
                keep_up |= set(ancestors(p))
        for a in sorted(keep_up - decided):
            if a in node_writes and node_writes[a][0] == "delete":
                if a in on:
                    node_writes[a] = ("kept", on[a])
                else:
                    del node_writes[a]
        for a in sorted(a for a in restore_up - decided if not alive(a) and a in tn):
            node_writes[a] = ("restore", tn[a])
        for p in trees:
            for q in sorted(q for q in on if q == p or q.startswith(p + "/")):
                node_writes.setdefault(q, ("delete", None))
        # (b) the target's edges to nodes the merge deletes
        deletes = {p for p, (op, _) in node_writes.items() if op == "delete" and p in on}
        for key in sorted(k for k in oe if k[0] in deletes or k[2] in deletes):
            if key not in edge_writes and key not in resolved:
                conflicts.add(("rel", key))
        # (a) edges the merge writes need live endpoints
        for key, (_take, w) in edge_writes.items():
            if w != ABSENT and key not in resolved and not (alive(key[0]) and alive(key[2])):
                conflicts.add(("rel", key))
        # a node never lives under a deleted parent
        for p in sorted(set(on) | set(node_writes)):
            if alive(p) and parent_path(p) != "/" and not alive(parent_path(p)):
                if p in node_writes and node_writes[p][0] != "delete":
                    conflicts.add(("orphan", p))
                elif p in on:
                    conflicts.add(("orphan", p))
        if conflicts:
            return conflicts, None
        saved = (dict(on), dict(oe))
        report_nodes, report_edges = {}, {}
        for p, (op, val) in node_writes.items():
            if op == "delete":
                on.pop(p, None)
                report_nodes[p] = "deleted"
            elif op == "kept":
                report_nodes[p] = "kept"
            else:
                report_nodes[p] = "modified" if p in on else "added"
                on[p] = val
        for key, (take, w) in edge_writes.items():
            if w == ABSENT:
                if key in oe:
                    del oe[key]
                report_edges[key] = "removed"
            elif take == "ours":
                report_edges[key] = "kept"
            else:
                oe[key] = w
                report_edges[key] = "upserted"
        changed = {p for p, (op, _) in node_writes.items() if op in ("write", "delete") and p in on_before}
        # the mentions lineage checks: the target's and the merge's to the texts it changes,
        # and those it brings, stamped, for a text it leaves as the target has another version of
        checked = {k for k in set(be_target) | set(edge_writes) if k[1] == "mentioned_in" and k[2] in changed}
        checked |= {key for key, (take, w) in edge_writes.items()
                    if w != ABSENT and take != "ours" and key[1] == "mentioned_in" and key[2] not in node_writes
                    and key[2] in on and w[1] is not None and w[1] != text_hash(on[key[2]].get("content", ""))}
        decided = {cid[1]: "keep" if take == "ours" else "drop" for cid, take in res.items() if cid[0] == "lineage"}
        lineage, decisions = self.refresh_derived(target, checked, decided)
        if decisions:  # left to the reviewer: nothing changes
            on.clear()
            on.update(saved[0])
            oe.clear()
            oe.update(saved[1])
            return decisions, None
        if node_writes or edge_writes:  # a merge with nothing to apply writes no revision, no record
            self._carry_records(source, target, node_writes)
        self.base[source] = (dict(tn), dict(te))
        self.record_base[source] = dict(self.records[source])
        return set(), {"nodes": report_nodes, "relations": report_edges, "lineage": lineage}

    def _carry_records(self, source, target, node_writes):
        """The documented rule: the source's records merge three-way with the target's (the
        same record: the same file hash); one both sides changed follows its node, the source's
        unless the merge kept the target's node."""
        def same(a, b):
            return a is not None and b is not None and a[0] == b[0]
        was_records, ours_records = self.record_base[source], self.records[target]
        for path, theirs in sorted(self.records[source].items()):
            was, ours = was_records.get(path), ours_records.get(path)
            if same(was, theirs) or same(ours, theirs):
                continue
            op = node_writes[path][0] if path in node_writes else None
            if op == "kept" or (op is None and ours is not None and not same(ours, was)):
                continue
            ours_records[path] = theirs

    def refresh_derived(self, branch, checked, decided=None):
        """kg's lineage rule (no LLM) over the ``mentioned_in`` edge keys ``checked`` on
        ``branch`` as it is now: an edge gone, or whose document is gone, may leave its entity
        orphan; one stamped with its text's hash is current; one whose entity the text still
        names is restamped; one it no longer names is dropped, or, in a merge (``decided`` not
        None: every such edge is asserted by one side), a lineage decision unless ``decided``
        keeps or drops it. An entity left with no edge is flagged ``orphan``. Returns what
        changed (``{"unlinked", "restamped"}`` edge keys and ``"orphaned"`` paths) and the
        decisions left (conflict ids)."""
        nodes, edges = self.nodes[branch], self.edges[branch]
        out = {"unlinked": set(), "restamped": set(), "orphaned": set()}
        decisions = set()
        touched = set()
        for key in sorted(checked):
            entity, _, doc = key
            if entity not in nodes:
                continue
            if doc not in nodes or key not in edges:
                touched.add(entity)
                continue
            text = nodes[doc].get("content", "")
            weight, stamp, extracted = edges[key]   # a restamp keeps what the extraction recorded
            if stamp == text_hash(text):
                continue
            names = [nodes[entity].get("name"), *(nodes[entity].get("aliases") or [])]
            if names_in(text, [n for n in names if isinstance(n, str)] or [entity.rsplit("/", 1)[1]]):
                edges[key] = (weight, text_hash(text), extracted)
                out["restamped"].add(key)
                continue
            if decided is not None and key not in decided:
                decisions.add(("lineage", key))
                continue
            if decided is not None and decided[key] == "keep":
                continue
            del edges[key]
            out["unlinked"].add(key)
            touched.add(entity)
        for entity in sorted(touched):
            if nodes[entity].get("orphan") is True or any(entity in (k[0], k[2]) for k in edges):
                continue
            nodes[entity] = {**nodes[entity], "orphan": True}
            out["orphaned"].add(entity)
        return out, decisions


def _write_document(uow, branch, path, text_):
    """A document written through the write path (lineage refreshes what was derived from it);
    returns how many edges the branch held before."""
    ctx = uow.begin("m", branch)
    before = len(rel_store.visible_relations(uow.session, ctx.view))
    write_node(uow, ctx, "w", path, node_type="kb:Doc", properties={"content": text_})
    return before


def ancestors(path):
    """Every ancestor path of ``path``, top level first, without ``/`` and ``path`` itself."""
    parts = path.strip("/").split("/")
    return ["/" + "/".join(parts[:i]) for i in range(1, len(parts))]


def _edge_value(edge):
    """What the model compares of an edge: its weight; a mention's also the text hash it read
    (lineage's stamp) and, when an extraction wrote it (its ``extractor``), the ``spans`` it
    recorded, ``False`` for a mention asserted by hand (restamped or not). A merge compares a
    mention's properties like any edge's, spans included, and a restamp keeps the extraction's
    spans (docs/concepts/entities.md), so a mention restamped after an edit is not the one an
    extraction of the new text writes: ``Model.refresh_derived`` keeps this third part as it is."""
    if edge.rel_type == "mentioned_in":
        props = edge.properties or {}
        spans = tuple(tuple(sorted(s.items())) for s in props.get("spans") or ()) if "extractor" in props else False
        return (edge.weight, props.get("source_hash"), spans)
    return edge.weight


def _fresh_url(kind, tmp_root):
    if kind == "sqlite":
        return f"sqlite:///{tmp_root}/m-{uuid.uuid4().hex[:10]}.sqlite3", None
    schema = f"kg_model_{uuid.uuid4().hex[:10]}"
    admin = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    admin.dispose()
    sep = "&" if "?" in POSTGRES_URL else "?"
    return f"{POSTGRES_URL}{sep}options=-csearch_path%3D{schema}", schema


def _conflict_id(conflict):
    """A kg conflict as the model names it."""
    if conflict["kind"] == "lineage":
        return ("lineage", (conflict["from"].split(":", 1)[1], conflict["type"], conflict["to"].split(":", 1)[1]))
    if conflict["kind"] == "relation":
        return ("rel", (conflict["from"].split(":", 1)[1], conflict["type"], conflict["to"].split(":", 1)[1]))
    if "parent" in conflict["reason"] or "child under" in conflict["reason"]:
        return ("orphan", conflict["path"])
    return ("node", conflict["path"])


def _resolution(cid, take):
    if cid[0] == "lineage":  # keep the mention (as 'ours' keeps), or drop it
        f, t, to = cid[1]
        return {"from": f"w:{f}", "type": t, "to": f"w:{to}", "take": "keep" if take == "ours" else "drop"}
    if cid[0] in ("node", "orphan"):
        return {"workspace": "w", "path": cid[1], "take": take}
    f, t, to = cid[1]
    return {"from": f"w:{f}", "type": t, "to": f"w:{to}", "take": take}


def machine_for(kind, tmp_root):
    class BranchMachine(RuleBasedStateMachine):
        @initialize()
        def setup(self):
            url, self.schema = _fresh_url(kind, tmp_root)
            settings_ = Settings(database_url=url, data_dir=tmp_root / uuid.uuid4().hex[:8],
                                 embedding_model="fake:hash-16")
            db = Database(url)
            db.upgrade()
            self.services = Services(settings=settings_, db=db, index=EmbeddedVectorIndex(None),
                                     embedder_factory=lambda name: make_embedder(name, allow_fake=True))
            with db.write() as s:
                repo = create_repository(s, name="m")
                create_workspace(s, repo, name="w")
            self.model = Model()
            self.tmp = tmp_root / "files"   # the ingested folders
            self.snapshots = {}  # (branch, revision) -> (nodes, edges) the model had

        def teardown(self):
            if hasattr(self, "model"):
                self.teardown_stats()
            if hasattr(self, "services"):
                self.services.close()
                if self.schema:
                    admin = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
                    with admin.connect() as conn:
                        conn.execute(text(f'DROP SCHEMA "{self.schema}" CASCADE'))
                    admin.dispose()

        def branches(self):
            return sorted(self.model.nodes)

        def children(self):
            return [b for b in self.branches() if b != "main"]

        # -- writes -----------------------------------------------------------------------

        def _put(self, branch, path, props, node_type="t"):
            """Put through the store; the model follows (or expects the missing parent)."""
            nodes = self.model.nodes[branch]
            parent_ok = parent_path(path) == "/" or parent_path(path) in nodes
            try:
                with self.services.db.write() as s:
                    ctx = begin_write(s, "m", branch)
                    _, created = node_store.put_node(s, ctx, "w", path, NodeWrite(node_type, props, None, None))
                assert parent_ok, (branch, path)
                assert created == (path not in nodes)
                nodes[path] = value(props, node_type)
            except NotFound:
                assert not parent_ok, (branch, path)

        @precondition(lambda self: len(self.model.nodes) < 4)
        @rule(data=st.data())
        def create_branch(self, data):
            parent = data.draw(st.sampled_from(self.branches()))
            name = f"{parent}/b{len(self.model.nodes)}" if parent != "main" else f"b{len(self.model.nodes)}"
            with self.services.db.write() as s:
                create_branch(s, get_repository(s, "m", lock=True), name=name, from_branch=parent)
            self.model.fork(name, parent)
            self.check(name)

        @rule(data=st.data(), path=st.sampled_from(PATHS), props=props_st)
        def put(self, data, path, props):
            branch = data.draw(st.sampled_from(self.branches()))
            self._put(branch, path, props)
            self.check(branch)

        @rule(data=st.data(), path=st.sampled_from(DOCS), text_=st.sampled_from(TEXTS))
        def put_document(self, data, path, text_):
            branch = data.draw(st.sampled_from(self.branches()))
            self._put(branch, path, {"content": text_}, "kb:Doc")
            self.check(branch)

        @precondition(lambda self: len(self.model.nodes) > 1)
        @rule(data=st.data(), path=st.sampled_from(PATHS + DOCS), props=props_st, same=st.booleans())
        def create_on_both_sides(self, data, path, props, same):
            """One path created (or replaced) on a child and its parent, alike or not."""
            child = data.draw(st.sampled_from(self.children()))
            parent = self.model.parent[child]
            self._put(parent, path, props)
            self._put(child, path, props if same else {**props, "side": "child"})
            self.check(parent)
            self.check(child)

        @rule(data=st.data(), path=st.sampled_from(PATHS), patch=st.dictionaries(
            st.sampled_from(KEYS), st.one_of(st.none(), st.sampled_from(VALUES)), min_size=1, max_size=2))
        def patch(self, data, path, patch):
            branch = data.draw(st.sampled_from(self.branches()))
            current = self.model.nodes[branch].get(path)
            with self.services.db.write() as s:
                ctx = begin_write(s, "m", branch)
                found = node_store.find_node(s, ctx.view, "w", path)
                assert (found is None) == (current is None)
                if found is None:
                    return
                merged = node_store.merge_properties(found.properties, patch)
                node_store.put_node(s, ctx, "w", path, NodeWrite(found.node_type, merged, None, None))
            self.model.nodes[branch][path] = {**current, **{k: v for k, v in patch.items() if v is not None}}
            for k, v in patch.items():
                if v is None:
                    self.model.nodes[branch][path].pop(k, None)
            self.check(branch)

        def _patch(self, branch, path, patch):
            with self.services.db.write() as s:
                ctx = begin_write(s, "m", branch)
                found = node_store.find_node(s, ctx.view, "w", path)
                merged = node_store.merge_properties(found.properties, patch)
                node_store.put_node(s, ctx, "w", path, NodeWrite(found.node_type, merged, None, None))
            self.model.nodes[branch][path] = {**self.model.nodes[branch][path], **patch}

        @precondition(lambda self: len(self.model.nodes) > 1)
        @rule(data=st.data(), path=st.sampled_from(PATHS), v1=st.sampled_from(VALUES), v2=st.sampled_from(VALUES),
              keys=st.permutations(KEYS))
        def patch_both_sides(self, data, path, v1, v2, keys):
            """A child and its parent patch one node: different keys merge, the same key may conflict."""
            child = data.draw(st.sampled_from(self.children()))
            parent = self.model.parent[child]
            if path not in self.model.nodes[child] or path not in self.model.nodes[parent]:
                return
            same_key = data.draw(st.booleans())
            self._patch(parent, path, {keys[0]: v1})
            self._patch(child, path, {keys[0] if same_key else keys[1]: v2})
            self.check(parent)
            self.check(child)
            if data.draw(st.booleans()):
                self._merge(child, data)

        def _delete(self, branch, path, recursive):
            nodes = self.model.nodes[branch]
            exists = path in nodes
            has_children = any(p.startswith(path + "/") for p in nodes)
            try:
                with self.services.db.write() as s:
                    node_store.delete_node(s, begin_write(s, "m", branch), "w", path, recursive=recursive)
                assert exists and (recursive or not has_children), (branch, path)
                self.model.delete(branch, path)
            except NotFound:
                assert not exists, (branch, path)
            except Conflict:
                assert exists and has_children and not recursive, (branch, path)

        @rule(data=st.data(), path=st.sampled_from(DELETABLE), recursive=st.booleans())
        def delete(self, data, path, recursive):
            branch = data.draw(st.sampled_from(self.branches()))
            self._delete(branch, path, recursive)
            self.check(branch)

        @rule(data=st.data(), path=st.sampled_from(ENDPOINTS), props=props_st)
        def delete_and_create_again(self, data, path, props):
            """A node with edges deleted, then created again at its path (edges gone)."""
            branch = data.draw(st.sampled_from(self.branches()))
            self._delete(branch, path, True)
            self._put(branch, path, props, "kg:Entity" if path == ENTITY else "t")
            self.check(branch)

        @rule(data=st.data(), old=st.sampled_from(["/a", "/b", "/c", "/d1"]), new=st.sampled_from(["/r1", "/r2"]))
        def rename(self, data, old, new):
            """Delete + create elsewhere in one revision (a node without children)."""
            branch = data.draw(st.sampled_from(self.branches()))
            nodes = self.model.nodes[branch]
            if old not in nodes or new in nodes or any(p.startswith(old + "/") for p in nodes):
                return
            moved = nodes[old]
            with self.services.db.write() as s:
                ctx = begin_write(s, "m", branch)
                node_store.delete_node(s, ctx, "w", old)
                node_store.put_node(s, ctx, "w", new, NodeWrite(moved["@type"], props_of(moved), None, None))
            self.model.delete(branch, old)
            nodes[new] = moved
            self.check(branch)

        def _relate(self, branch, a, b, t, w):
            nodes = self.model.nodes[branch]
            try:
                with self.services.db.write() as s:
                    rel_store.relate(s, begin_write(s, "m", branch), f"w:{a}", f"w:{b}", t, weight=w)
                assert a in nodes and b in nodes
                self.model.edges[branch][(a, t, b)] = w
            except NotFound:
                assert a not in nodes or b not in nodes

        @rule(data=st.data(), a=st.sampled_from(ENDPOINTS), b=st.sampled_from(ENDPOINTS), t=st.sampled_from(TYPES),
              w=st.sampled_from([0.5, 1.0, 2.0]))
        def relate(self, data, a, b, t, w):
            branch = data.draw(st.sampled_from(self.branches()))
            self._relate(branch, a, b, t, w)
            self.check(branch)

        @precondition(lambda self: len(self.model.nodes) > 1)
        @rule(data=st.data(), a=st.sampled_from(ENDPOINTS), b=st.sampled_from(ENDPOINTS), t=st.sampled_from(TYPES),
              child_deletes=st.booleans())
        def relate_to_what_the_other_side_deletes(self, data, a, b, t, child_deletes):
            child = data.draw(st.sampled_from(self.children()))
            parent = self.model.parent[child]
            deleter, relater = (child, parent) if child_deletes else (parent, child)
            self._relate(relater, a, b, t, 1.0)
            self._delete(deleter, b, True)
            self.check(child)
            self.check(parent)
            if data.draw(st.booleans()):
                self._merge(child, data)

        @rule(data=st.data(), a=st.sampled_from(ENDPOINTS), b=st.sampled_from(ENDPOINTS), t=st.sampled_from(TYPES))
        def unrelate(self, data, a, b, t):
            branch = data.draw(st.sampled_from(self.branches()))
            nodes = self.model.nodes[branch]
            try:
                with self.services.db.write() as s:
                    removed = rel_store.unrelate(s, begin_write(s, "m", branch), f"w:{a}", f"w:{b}", t)
                assert removed == (1 if (a, t, b) in self.model.edges[branch] else 0)
                self.model.edges[branch].pop((a, t, b), None)
            except NotFound:
                assert a not in nodes or b not in nodes
            self.check(branch)

        @rule(data=st.data(), doc=st.sampled_from(DOCS), text_=st.sampled_from(TEXTS))
        def edit_document(self, data, doc, text_):
            """Rewrite a document through the write path: lineage unlinks, on that branch, the
            mentions the new text no longer names and restamps the others."""
            self._edit(data.draw(st.sampled_from(self.branches())), doc, text_)

        def _edit(self, branch, doc, text_):
            nodes = self.model.nodes[branch]
            before = {k for k in self.model.edges[branch] if k[1] == "mentioned_in" and k[2] == doc}
            existed = doc in nodes
            out = run(self.services, OPERATOR, _write_document, branch, doc, text_)
            nodes[doc] = value({"content": text_}, "kb:Doc")
            if existed:
                self.model.refresh_derived(branch, before)
            _event(f"edit a document: {'unlinked' if len(self.model.edges[branch]) < out else 'kept'} mentions")
            self.check(branch)

        @rule(data=st.data(), doc=st.sampled_from(DOCS))
        def assert_mention(self, data, doc):
            """A mention asserted by hand (no stamp): lineage checks it like an extracted one."""
            branch = data.draw(st.sampled_from(self.branches()))
            nodes = self.model.nodes[branch]
            try:
                with self.services.db.write() as s:
                    rel_store.relate(s, begin_write(s, "m", branch), f"w:{ENTITY}", f"w:{doc}", "mentioned_in")
                assert ENTITY in nodes and doc in nodes
                self.model.edges[branch][(ENTITY, "mentioned_in", doc)] = (None, None, False)
            except NotFound:
                assert ENTITY not in nodes or doc not in nodes
            self.check(branch)

        @rule(data=st.data(), doc=st.sampled_from(DOCS))
        def extract_entities(self, data, doc):
            """Run extract-entities; adopt what it wrote after checking it wrote only that."""
            self._extract(data.draw(st.sampled_from(self.branches())), doc)

        def _extract(self, branch, doc):
            if doc not in self.model.nodes[branch]:
                with pytest.raises(NotFound):
                    invoke(self.services, OPERATOR, "m", "extract-entities", {"workspace": "w", "path": doc},
                           branch=branch)
                return
            before_nodes, before_edges = dict(self.model.nodes[branch]), dict(self.model.edges[branch])
            out = invoke(self.services, OPERATOR, "m", "extract-entities", {"workspace": "w", "path": doc},
                         branch=branch)
            _event(f"extract-entities: {'skipped' if out.skipped else 'wrote'}")
            got_nodes, got_edges, _ = self.read(branch)
            for path, val in got_nodes.items():
                if path not in before_nodes or before_nodes[path] != val:
                    assert path.startswith(("/entities", "/kg")), (path, val)
            assert all(p in got_nodes for p in before_nodes), "extraction deleted a node"
            for key in set(got_edges) | set(before_edges):
                if got_edges.get(key, ABSENT) != before_edges.get(key, ABSENT):
                    assert key[1] == "mentioned_in" and key[2] == doc, key
            if out.skipped:
                assert (got_nodes, got_edges) == (before_nodes, before_edges)
            # what the record lists is there: a trusted record never hides a lost edge
            for entity in out.entities:
                assert (entity.path, "mentioned_in", doc) in got_edges
            for key in got_edges:
                if key[1] == "mentioned_in" and key[2] == doc and got_edges[key] != before_edges.get(key, ABSENT):
                    assert got_edges[key][1] == text_hash(before_nodes[doc]["content"]), key
            self.model.nodes[branch], self.model.edges[branch] = got_nodes, got_edges
            self.check(branch)

        @precondition(lambda self: len(self.model.nodes) > 1)
        @rule(data=st.data(), doc=st.sampled_from(DOCS), text_=st.sampled_from(TEXTS),
              extract_on_child=st.booleans())
        def extract_on_one_side_edit_on_the_other(self, data, doc, text_, extract_on_child):
            """Lineage across a merge: one side extracts a document, the other rewrites it
            through the write path; then the merge (mentions to restamp, to decide)."""
            both = [c for c in self.children()
                    if doc in self.model.nodes[c] and doc in self.model.nodes[self.model.parent[c]]]
            if not both:  # a document and its mentions for the branches forked later
                branch = data.draw(st.sampled_from(self.branches()))
                self._put(branch, doc, {"content": text_}, "kb:Doc")
                self._extract(branch, doc)
                return
            child = data.draw(st.sampled_from(both))
            parent = self.model.parent[child]
            extractor, editor = (child, parent) if extract_on_child else (parent, child)
            self._extract(extractor, doc)
            self._edit(editor, doc, text_)
            self._merge(child, data)

        # -- ingest -----------------------------------------------------------------------

        @rule(data=st.data(), held=st.lists(file_st, min_size=len(FILES), max_size=len(FILES)))
        def ingest(self, data, held):
            """Ingest a folder of text files on a branch through the use case."""
            self._ingest(data.draw(st.sampled_from(self.branches())), held)

        @rule(data=st.data(), name=st.sampled_from(FILES), first=st.sampled_from([0, 1, 2]),
              edit=st.one_of(st.none(), st.sampled_from(EDITS)), then=st.sampled_from([0, 1, 2]))
        def ingest_edit_ingest(self, data, name, first, edit, then):
            """A file ingested, its node edited (a property set or removed) or deleted (None) by
            a person, then the file, changed or not, ingested again."""
            branch = data.draw(st.sampled_from(self.branches()))
            held = [first if f == name else None for f in FILES]
            self._ingest(branch, held)
            self._edit_ingested(branch, name, edit)
            self._ingest(branch, [then if h is not None else None for h in held])

        @precondition(lambda self: len(self.model.nodes) > 1)
        @rule(data=st.data(), held=st.lists(file_st, min_size=len(FILES), max_size=len(FILES)),
              again=st.lists(file_st, min_size=len(FILES), max_size=len(FILES)))
        def ingest_on_a_branch_then_merge(self, data, held, again):
            """A child ingests, is merged into its parent (which keeps its own records), and the
            parent ingests (the same files or others)."""
            # "keeps its own records": where the child ingested no other version of a file; the
            # merge carries the child's records with its nodes (Model._carry_records). The
            # docstring is part of the machine's source, which seeds the derandomized run.
            child = data.draw(st.sampled_from(self.children()))
            self._ingest(child, held)
            self._merge(child, data)
            self._ingest(self.model.parent[child], again)

        def _ingest(self, branch, held):
            """Write the files ``held`` names (per FILES: "same" as the branch last ingested, an
            index of FILE_TEXTS, None for no file) and ingest them on ``branch`` through
            ``ingest_path``: kg's nodes, its report and the revisions it wrote are the model's."""
            records = self.model.records[branch]
            if all(h is None for h in held):
                held = ["same", *held[1:]]
            folder = self.tmp / uuid.uuid4().hex[:8]
            folder.mkdir(parents=True)
            expected = {"inserted": [], "replaced": [], "skipped": [], "kept_edits": [], "kept_deleted": []}
            writes = 0
            for name, h in zip(FILES, held, strict=True):
                if h is None:
                    continue
                path = f"/{name}"
                if h == "same":
                    text_ = records[path][1]["content"] if path in records else FILE_TEXTS[0]
                else:
                    text_ = FILE_TEXTS[h]
                raw = text_.encode("utf-8")
                (folder / f"{name}.md").write_bytes(raw)
                parse = {"title": text_.splitlines()[0].lstrip("# "), "content": text_, "source": f"{name}.md",
                         "sha256": hashlib.sha256(raw).hexdigest(), "kg:node_type": "kg:Document"}
                (outcome, wrote), kept, kept_deleted = self.model.ingest(branch, path, parse)
                expected[outcome].append(path)
                expected["kept_edits"] += kept
                if kept_deleted:
                    expected["kept_deleted"].append(path)
                writes += wrote
            before = self._head(branch)
            report = ingest_path(self.services, OPERATOR, folder, repo="m", workspace="w", branch=branch)
            got = {"inserted": report.inserted, "replaced": report.replaced, "skipped": report.skipped,
                   "kept_edits": [k.model_dump() for k in report.kept_edits], "kept_deleted": report.kept_deleted}
            assert got == expected, (branch, held, got, expected)
            assert report.review_branch is None
            with self.services.db.read() as s:
                log = history.revision_log(s, branch_view(s, "m", branch), limit=len(FILES) + 1)
            new = [r for r in log if r["revision"] > before]
            assert len(new) == writes, (new, expected)   # one revision per file written or recorded
            if writes == 0:
                assert self._head(branch) == before
                _event("ingest: nothing changed, no revision")
            for outcome in ("inserted", "replaced", "skipped"):
                if expected[outcome]:
                    _event(f"ingest: {outcome}")
            if expected["kept_edits"]:
                _event("ingest: kept edits")
            if expected["kept_deleted"]:
                _event("ingest: kept deleted")
            if writes > len(expected["inserted"]) + len(expected["replaced"]):
                _event("ingest: recorded the hash alone")
            self.check(branch)

        def _head(self, branch):
            with self.services.db.read() as s:
                return branch_view(s, "m", branch).revision

        @rule(data=st.data(), name=st.sampled_from(FILES), edit=st.one_of(st.none(), st.sampled_from(EDITS)))
        def edit_ingested(self, data, name, edit):
            """A person edits a file's node (a property set or removed), deletes it (None), or
            makes a node of their own at its path."""
            self._edit_ingested(data.draw(st.sampled_from(self.branches())), name, edit)

        def _edit_ingested(self, branch, name, edit):
            path = f"/{name}"
            if path not in self.model.nodes[branch]:
                self._put(branch, path, {"title": "Mine"}, "kg:Document")
            elif edit is None:
                self._delete(branch, path, True)
            else:
                key, val = edit
                self._patch(branch, path, {key: val})
                if val is None:
                    self.model.nodes[branch][path].pop(key, None)
            self.check(branch)

        # -- merges -----------------------------------------------------------------------

        @precondition(lambda self: len(self.model.nodes) > 1)
        @rule(data=st.data())
        def merge(self, data):
            self._merge(data.draw(st.sampled_from(self.children())), data)

        def _merge(self, child, data):
            parent = self.model.parent[child]
            before = {b: (dict(self.model.nodes[b]), dict(self.model.edges[b])) for b in self.branches()}
            expected, report = self.model.merge(child, parent)
            _event(f"merge: {'conflict' if expected else 'clean'}")
            try:
                got, preview = self._merge_kg(child, parent, None)
                assert not expected, f"kg merged, the model expected conflicts at {expected}"
            except MergeConflict as exc:
                got_conflicts = {_conflict_id(c) for c in exc.details["conflicts"]}
                assert got_conflicts == expected, (got_conflicts, expected)
                if any(c[0] == "lineage" for c in expected):
                    _event("merge: lineage decisions")
                assert {b: (self.model.nodes[b], self.model.edges[b]) for b in self.branches()} == before
                self.check(parent)
                self.check(child)
                take = data.draw(st.sampled_from(["none", "ours", "theirs"]))
                resolvable = set(expected)
                if take == "none" or not resolvable:
                    return
                _event(f"merge: resolved {take}")
                if any(c[0] == "orphan" for c in resolvable):
                    _event(f"merge: resolved an orphan {take}")
                wanted = {c: take for c in resolvable}
                for _round in range(3):  # resolving the merge's conflicts may leave lineage decisions
                    expected, report = self.model.merge(child, parent, wanted)
                    try:
                        got, preview = self._merge_kg(child, parent,
                                                      [_resolution(c, take) for c in sorted(wanted)])
                        assert not expected, f"kg merged with resolutions, the model expected {expected}"
                        break
                    except MergeConflict as exc2:
                        got_conflicts = {_conflict_id(c) for c in exc2.details["conflicts"]}
                        assert got_conflicts == expected, (got_conflicts, expected)
                        self.check(parent)
                        self.check(child)
                        if not expected or any(c[0] != "lineage" for c in expected):
                            return
                        _event(f"merge: lineage decisions {take}")
                        wanted.update({c: take for c in expected})
                else:
                    return
            self._check_report(parent, before[parent], got, preview, report)
            if any(p.startswith("/f") for p in report["nodes"]):
                _event("merge: ingested nodes")
            self.check(parent)
            self.check(child)

        def _merge_kg(self, child, parent, resolutions):
            """The dry run, then the merge: the dry run must say what the merge then does."""
            try:
                preview = preview_merge(self.services, OPERATOR, "m", child, parent,
                                        resolutions=resolutions).as_json()
            except MergeConflict as dry:
                with pytest.raises(MergeConflict) as real:
                    run(self.services, OPERATOR, merge_branch, "m", child, parent, resolutions=resolutions)
                assert real.value.details == dry.details
                raise real.value from dry
            # the merge is asked from the dry run's plan: it applies that plan, derived writes included
            got = run(self.services, OPERATOR, merge_branch, "m", child, parent, resolutions=resolutions,
                      if_plan=preview["plan"]).as_json()
            for key in ("applied", "base", "fast_forward", "derived", "derived_writes"):
                assert preview[key] == got[key], (key, preview[key], got[key])
            return got, preview

        def _check_report(self, target, before, got, preview, report):
            """What kg reported is what a reader of the target sees change, and what the model did."""
            old_nodes, old_edges = before
            new_nodes, new_edges = self.model.nodes[target], self.model.edges[target]
            applied = got["applied"]
            lin = report["lineage"]
            # lineage's own writes (in the merge's revision, not in ``applied``): orphan flags,
            # dropped and restamped mentions
            orphaned = lin["orphaned"] - set(report["nodes"])
            relinked = lin["unlinked"] | lin["restamped"]
            # kg's derived writes are the model's lineage, one for one
            writes = got["derived_writes"]
            edge_of = {w["kind"]: set() for w in writes}
            for w in writes:
                edge_of[w["kind"]].add((w["from"].split(":", 1)[1], w["type"], w["to"].split(":", 1)[1])
                                       if "from" in w else w["path"])
            for kind in ("unlinked", "restamped", "orphaned"):
                assert edge_of.get(kind, set()) == lin[kind], (kind, edge_of, lin)
            assert len(writes) == sum(len(lin[k]) for k in ("unlinked", "restamped", "orphaned"))
            assert got["derived"] == {"unlinked": len(lin["unlinked"]), "restamped": len(lin["restamped"]),
                                      "orphaned": len(lin["orphaned"]), "stale": 0, "queued": 0}
            _event(f"merge: lineage {'wrote' if orphaned or relinked else 'nothing'}")
            for outcome in ("added", "modified", "deleted", "kept"):
                listed = {n["path"] for n in applied["nodes"][outcome]}
                assert listed == {p for p, o in report["nodes"].items() if o == outcome}, outcome
            assert {n["path"] for n in applied["nodes"]["added"]} == set(new_nodes) - set(old_nodes)
            assert {n["path"] for n in applied["nodes"]["deleted"]} == set(old_nodes) - set(new_nodes)
            # a node the merge wrote that lineage then flagged orphan as the target had it: written
            reverted = {p for p in lin["orphaned"] if report["nodes"].get(p) == "modified"
                        and old_nodes.get(p) == new_nodes.get(p)}
            assert {n["path"] for n in applied["nodes"]["modified"]} == {
                p for p in set(old_nodes) & set(new_nodes) if old_nodes[p] != new_nodes[p]} - orphaned | reverted
            changed = {k for k in set(old_edges) | set(new_edges)
                       if old_edges.get(k, ABSENT) != new_edges.get(k, ABSENT)}
            if relinked:
                assert changed - relinked <= set(report["relations"])
                assert applied["relations"]["upserted"] == sum(o == "upserted" for o in report["relations"].values())
                assert applied["relations"]["removed"] == sum(o == "removed" for o in report["relations"].values())
            else:
                assert applied["relations"]["upserted"] == len({k for k in changed if k in new_edges})
                assert applied["relations"]["removed"] == len({k for k in changed if k not in new_edges})
            assert applied["relations"]["kept"] == sum(1 for o in report["relations"].values() if o == "kept")
            if got["revision"] is None:
                assert not changed and not report["nodes"] and not report["relations"]
                return
            with self.services.db.read() as s:
                view = branch_view(s, "m", target)
                [entry] = [r for r in history.revision_log(s, view, limit=5) if r["revision"] == got["revision"]]
            puts = {c["path"] for c in entry["changes"] if c["kind"] == "node" and c["op"] == "put"}
            deletes = {c["path"] for c in entry["changes"] if c["kind"] == "node" and c["op"] == "delete"}
            assert puts == {p for p, o in report["nodes"].items() if o != "deleted"} | lin["orphaned"]
            assert deletes == {p for p, o in report["nodes"].items() if o == "deleted"}
            rel_ops = [c for c in entry["changes"] if c["kind"] == "relation"]
            assert sum(1 for c in rel_ops if c["op"] == "delete") == (
                applied["relations"]["removed"] + len(lin["unlinked"]))
            assert sum(1 for c in rel_ops if c["op"] == "put") == (
                applied["relations"]["upserted"] + applied["relations"]["kept"] + len(lin["restamped"]))

        def teardown_stats(self):
            _event(f"property-level merges: {min(self.model.property_merges, 3)}")

        @rule()
        def check_all(self):
            for branch in self.branches():
                self.check(branch)

        @rule(data=st.data())
        def time_travel(self, data):
            """Every branch, read at an earlier revision, is what the model held then: a
            write on one branch never changes what another sees, at any revision."""
            if not self.snapshots:
                return
            keys = sorted(self.snapshots)
            for branch, revision in data.draw(st.lists(st.sampled_from(keys), min_size=1, max_size=4)):
                nodes, edges = self.snapshots[(branch, revision)]
                got_nodes, got_edges, _ = self.read(branch, revision)
                assert got_nodes == nodes, (branch, revision)
                assert got_edges == edges, (branch, revision)

        @invariant()
        def count_steps(self):
            STATS["steps"] += 1

        # -- comparison -------------------------------------------------------------------

        def read(self, branch, at_revision=None):
            """What a reader of kg sees: nodes by path, edges by endpoint paths."""
            with self.services.db.read() as s:
                view = branch_view(s, "m", branch, at_revision=at_revision)
                listed, _ = node_store.list_prefix(s, view, "w", "/")
                got_nodes = {v.path: {**v.properties, "@type": v.node_type, "@order": v.order} for v in listed}
                by_id = {v.node_id: v.path for v in listed}
                assert len(by_id) == len(listed), "two paths share a node id"
                got_edges = {(by_id[e.from_node_id], e.rel_type, by_id[e.to_node_id]): _edge_value(e)
                             for e in rel_store.visible_relations(s, view)}
            return got_nodes, got_edges, view.revision

        def check(self, branch):
            got_nodes, got_edges, revision = self.read(branch)
            assert got_nodes == self.model.nodes[branch], branch
            assert got_edges == self.model.edges[branch], branch
            self.snapshots[(branch, revision)] = (dict(got_nodes), dict(got_edges))

    BranchMachine.TestCase.settings = settings(
        max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None,
        suppress_health_check=list(HealthCheck),
        # the same draws on every run: an unseeded run drew 1,984 steps once (about 2,700 as
        # a rule) and failed the bar below in CI; a fixed draw makes the bar a fact, not luck
        derandomize=True, database=None,
    )
    return BranchMachine


@pytest.mark.parametrize("kind", ["sqlite"] + (["postgresql"] if POSTGRES_URL else []))
def test_branches_match_the_copying_model(kind, tmp_path):
    STATS.clear()
    machine_for(kind, tmp_path).TestCase().runTest()
    print(f"model-based run on {kind}: {dict(sorted(STATS.items()))}")
    if (STEPS, EXAMPLES) == (60, 50):
        # the invariant runs after every step and once per example after set-up
        assert STATS["steps"] - EXAMPLES >= 2_000, STATS
        assert STATS["merge: clean"] > 0 and STATS["merge: conflict"] > 0, STATS
        assert STATS["merge: lineage wrote"] > 0 and STATS["merge: lineage decisions"] > 0, STATS
        for seen in ("ingest: kept edits", "ingest: kept deleted", "ingest: nothing changed, no revision",
                     "ingest: recorded the hash alone", "merge: ingested nodes"):
            assert STATS[seen] > 0, f"{seen}: {dict(STATS)}"


class Draws:
    """A stand-in for hypothesis' ``data``: answers the recorded draws in order."""

    def __init__(self, *values):
        self.values = list(values)

    def draw(self, strategy):
        return self.values.pop(0)


def replay(kind, tmp_path, steps):
    """Run recorded steps on a fresh machine: ``(rule name, kwargs, draws)``."""
    machine = machine_for(kind, tmp_path)()
    try:
        machine.setup()
        for name, kwargs, draws in steps:
            if draws is not None:
                kwargs = {**kwargs, "data": Draws(*draws)}
            getattr(machine, name)(**kwargs)
        machine.check_all()
    finally:
        machine.teardown()


#: Sequences the model-based test found, kept as explicit examples (each failed before its fix).
FOUND = {
    # the real merge's own revision moved the parent's head: its base revision differed from
    # the dry run's
    "dry_run_base": [
        ("create_branch", {}, ["main"]),
        ("create_on_both_sides", {"path": "/a", "props": {}, "same": False}, ["b1"]),
        ("create_branch", {}, ["main"]),
        ("merge", {}, ["b2"]),
    ],
    # a property-level merge whose result equals ours was reported as a modification
    "merge_equal_to_ours": [
        ("create_branch", {}, ["main"]),
        ("put", {"path": "/a", "props": {"k1": 1}}, ["main"]),
        ("create_branch", {}, ["main"]),
        ("patch", {"path": "/a", "patch": {"k1": 2, "k2": 3}}, ["main"]),
        ("patch", {"path": "/a", "patch": {"k2": 3}}, ["b2"]),
        ("merge", {}, ["b2"]),
    ],
    # a relation resolution whose conflict a node resolution made disappear was 'unused'
    "resolution_of_a_vanishing_conflict": [
        ("create_branch", {}, ["main"]),
        ("create_on_both_sides", {"path": "/a", "props": {}, "same": False}, ["b1"]),
        ("create_branch", {}, ["b1"]),
        ("create_on_both_sides", {"path": "/a", "props": {"k1": 1}, "same": False}, ["b1/b2"]),
        ("relate_to_what_the_other_side_deletes", {"a": "/a", "b": "/a", "child_deletes": False, "t": "t1"},
         ["b1/b2", True, "theirs"]),
    ],
    # lineage (issue 17): a merge that changes a document main extracted drops the mention of
    # an entity the new text no longer names, and flags the entity orphan; the model had no rule
    "merge_changes_an_extracted_text": [
        ("put_document", {"path": "/d1", "text_": TEXTS[0]}, ["main"]),
        ("extract_entities", {"doc": "/d1"}, ["main"]),
        ("create_branch", {}, ["main"]),
        ("put_document", {"path": "/d1", "text_": TEXTS[2]}, ["b1"]),
        ("merge", {}, ["b1", "none"]),
    ],
    # lineage: a mention stamped with the text's revision made one text, written and extracted
    # on both sides, a merge conflict on every mention; the hash of the text merges cleanly
    "one_text_extracted_on_both_sides": [
        ("put_document", {"path": "/d1", "text_": TEXTS[0]}, ["main"]),
        ("create_branch", {}, ["main"]),
        ("put_document", {"path": "/d1", "text_": TEXTS[0]}, ["b1"]),
        ("put_document", {"path": "/d1", "text_": TEXTS[0]}, ["main"]),
        ("extract_entities", {"doc": "/d1"}, ["main"]),
        ("extract_entities", {"doc": "/d1"}, ["b1"]),
        ("merge", {}, ["b1", "none"]),
    ],
    # lineage: mentions extracted on the branch from a text main then changed came in by the
    # merge stamped with the old text (found by a new user's pass)
    "extraction_on_the_branch_of_a_text_main_changed": [
        ("put_document", {"path": "/d1", "text_": TEXTS[0]}, ["main"]),
        ("create_branch", {}, ["main"]),
        ("extract_entities", {"doc": "/d1"}, ["b1"]),
        ("put_document", {"path": "/d1", "text_": TEXTS[2]}, ["main"]),
        ("merge", {}, ["b1", "none"]),
    ],
    # a mention main extracted after the fork, which the branch's rewritten text no longer
    # names, was unlinked by the merge on its own; it is the reviewer's to keep or drop
    "lineage_decision_kept": [
        ("put_document", {"path": "/d1", "text_": TEXTS[0]}, ["main"]),
        ("create_branch", {}, ["main"]),
        ("extract_entities", {"doc": "/d1"}, ["main"]),
        ("edit_document", {"doc": "/d1", "text_": TEXTS[2]}, ["b1"]),
        ("merge", {}, ["b1", "ours"]),
    ],
    "lineage_decision_dropped": [
        ("put_document", {"path": "/d1", "text_": TEXTS[0]}, ["main"]),
        ("put_document", {"path": "/d2", "text_": TEXTS[2]}, ["main"]),
        ("create_branch", {}, ["main"]),
        ("extract_entities", {"doc": "/d1"}, ["main"]),
        ("assert_mention", {"doc": "/d2"}, ["main"]),
        ("edit_document", {"doc": "/d1", "text_": TEXTS[2]}, ["b1"]),
        ("merge", {}, ["b1", "theirs"]),
    ],
    # a mention main extracted from another text and restamped after main's edit keeps that
    # extraction's spans: it is not the branch's mention of the same text, a relation conflict
    # beside the extraction record's (the model compared the stamp and not the spans)
    "restamped_mention_against_one_extracted_from_the_same_text": [
        ("create_branch", {}, ["main"]),
        ("put_document", {"path": "/d2", "text_": TEXTS[2]}, ["main"]),
        ("extract_entities", {"doc": "/d2"}, ["main"]),
        ("put_document", {"path": "/d2", "text_": TEXTS[1]}, ["b1"]),
        ("extract_entities", {"doc": "/d2"}, ["b1"]),
        ("edit_document", {"doc": "/d2", "text_": TEXTS[1]}, ["main"]),
        ("merge", {}, ["b1", "theirs"]),
    ],
    "delete_under_relation_then_merge": [
        ("create_branch", {}, ["main"]),
        ("create_on_both_sides", {"path": "/a", "props": {}, "same": True}, ["b1"]),
        ("patch_both_sides", {"path": "/a", "v1": 1, "v2": 1, "keys": ["k1", "k2"]}, ["b1", False, True, "none"]),
        ("relate_to_what_the_other_side_deletes", {"a": "/a", "b": "/a", "child_deletes": False, "t": "t1"},
         ["b1", True, "theirs"]),
    ],
}


@pytest.mark.parametrize("kind", ["sqlite"] + (["postgresql"] if POSTGRES_URL else []))
@pytest.mark.parametrize("name", sorted(FOUND))
def test_sequences_the_model_found(kind, name, tmp_path):
    replay(kind, tmp_path, FOUND[name])


#: A sequence the model-based test found with ingest's rules: SQLite 3.40.1, once the ingest's
#: ANALYZE has written ``sqlite_stat1``, answered ``branch_id = 1 AND revision <= 1 AND
#: workspace_id = 1 AND path IN (<10 paths>)`` (``ix_node_versions_path``) with main's ``/f2`` of
#: revision 4 too. The merge base's read of the changed paths (``node_states``) then saw main's
#: ``/f2``, so a node added on both sides with different content merged as the branch's, silently
#: replacing main's, instead of a conflict. PostgreSQL answered right; a lookup now keeps the
#: revision bound out of SQLite's index seek (``kg.store.visibility.Unindexed``).
BOTH_ADDED_READ_AS_BASE = [
    ("edit_ingested", {"name": "f1", "edit": None}, ["main"]),
    ("create_branch", {}, ["main"]),
    ("edit_document", {"doc": "/d2", "text_": TEXTS[1]}, ["b1"]),
    ("put_document", {"path": "/d1", "text_": TEXTS[0]}, ["b1"]),
    ("edit_ingested", {"name": "f2", "edit": None}, ["main"]),
    ("ingest", {"held": [1, 0]}, ["b1"]),
    ("extract_entities", {"doc": "/d2"}, ["b1"]),
    ("merge", {}, ["b1", "none"]),
]


@pytest.mark.parametrize("kind", [
    "sqlite",
] + (["postgresql"] if POSTGRES_URL else []))
def test_a_node_added_on_both_sides_is_a_conflict_after_an_ingest(kind, tmp_path):
    replay(kind, tmp_path, BOTH_ADDED_READ_AS_BASE)
