"""Model-based test: kg's copy-on-write branches against a naive model that copies whole
branches (hypothesis stateful testing), on SQLite and PostgreSQL.

The model keeps, per branch, a full copy of its nodes (path -> (node id, properties)) and
relation values ((from id, type, to id) -> weight); creating a branch copies the parent; a
merge of a child into its parent is the three-way merge of DESIGN.md computed on the copies
against the base copy (the fork, then the last merge). Every read of kg must equal the model;
every merge kg refuses must be one the model predicts a conflict for, and the other way round.
"""

from __future__ import annotations

import os
import uuid

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule
from sqlalchemy import create_engine, text

from kg.errors import MergeConflict, NotFound
from kg.index.embedded import EmbeddedVectorIndex
from kg.providers.registry import make_embedder
from kg.rag.merge import merge_branch
from kg.services import Services
from kg.settings import Settings
from kg.store import nodes as node_store
from kg.store import relations as rel_store
from kg.store.db import Database
from kg.store.nodes import NodeWrite
from kg.store.repos import begin_write, branch_view, create_branch, create_repository, create_workspace, get_repository

PATHS = ["/a", "/b", "/c"]
KEYS = ["k1", "k2"]
VALUES = [1, 2, 3]
TYPES = ["t1", "t2"]
STEPS = int(os.environ.get("KG_MODEL_STEPS", "50"))
EXAMPLES = int(os.environ.get("KG_MODEL_EXAMPLES", "40"))   # 40 x 50 = 2,000 steps per run
POSTGRES_URL = os.environ.get("KG_TEST_POSTGRES_URL")

props_st = st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=2)


class Model:
    """A naive store: every branch is a full copy."""

    def __init__(self):
        self.nodes = {"main": {}}        # branch -> path -> (id, props)
        self.edges = {"main": {}}        # branch -> (fid, type, tid) -> weight
        self.parent = {"main": None}
        self.base = {}                   # child -> (nodes copy, edges copy): the merge base
        self.property_merges = 0

    def fork(self, name, parent):
        self.nodes[name] = dict(self.nodes[parent])
        self.edges[name] = dict(self.edges[parent])
        self.parent[name] = parent
        self.base[name] = (dict(self.nodes[parent]), dict(self.edges[parent]))

    def visible_edges(self, branch):
        alive = {node_id: path for path, (node_id, _) in self.nodes[branch].items()}
        return {(alive[f], t, alive[to]): w for (f, t, to), w in self.edges[branch].items()
                if f in alive and to in alive}

    def merge(self, source, target):
        """Three-way merge; returns the conflicts (and changes nothing when there are some)."""
        bn, be = self.base[source]
        on, oe = self.nodes[target], self.edges[target]
        tn, te = self.nodes[source], self.edges[source]
        conflicts, node_writes = [], {}
        for path in sorted(set(bn) | set(on) | set(tn)):
            b, o, t = (x.get(path) for x in (bn, on, tn))
            bv, ov, tv = (None if x is None else x[1] for x in (b, o, t))
            if tv == bv or ov == tv:
                continue
            if ov == bv:
                node_writes[path] = _pick_id(o, t, tv)
                continue
            if bv is None or ov is None or tv is None:
                conflicts.append(path)
                continue
            merged, bad = {}, False
            for key in set(bv) | set(ov) | set(tv):
                bk, ok, tk = bv.get(key, "∅"), ov.get(key, "∅"), tv.get(key, "∅")
                res = ok if tk == bk else tk if (ok == bk or ok == tk) else None
                if res is None:
                    bad = True
                    break
                if res != "∅":
                    merged[key] = res
            if bad:
                conflicts.append(path)
            else:
                self.property_merges += 1
                node_writes[path] = _pick_id(o, t, merged)
        edge_writes = {}
        for key in set(be) | set(oe) | set(te):
            b, o, t = (x.get(key, "∅") for x in (be, oe, te))
            if t == b or o == t:
                continue
            if o == b:
                edge_writes[key] = t
            else:
                conflicts.append(key)
        if conflicts:
            return conflicts
        for path, value in node_writes.items():
            if value is None:
                on.pop(path, None)
            else:
                on[path] = value
        for key, weight in edge_writes.items():
            if weight == "∅":
                oe.pop(key, None)
            else:
                oe[key] = weight
        self.base[source] = (dict(tn), dict(te))
        return []


def _pick_id(ours, theirs, value):
    """kg's identity rule: the source's node id when the sides differ, else the target's."""
    if value is None:
        return None
    if ours is not None and theirs is not None and ours[0] != theirs[0]:
        return (theirs[0], value)
    if ours is not None:
        return (ours[0], value)
    return (theirs[0], value)


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
                                     embedder_factory=lambda name: make_embedder(name))
            with db.write() as s:
                repo = create_repository(s, name="m")
                create_workspace(s, repo, name="w")
            self.model = Model()
            self.snapshots = {}  # (branch, revision) -> (nodes, visible edges) the model had
            self.ids = {}        # kg node id -> model id
            self.counter = 0

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

        def _model_id(self, kg_id):
            if kg_id not in self.ids:
                self.counter += 1
                self.ids[kg_id] = self.counter
            return self.ids[kg_id]

        # -- rules ------------------------------------------------------------------------

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
            with self.services.db.write() as s:
                ctx = begin_write(s, "m", branch)
                version, created = node_store.put_node(s, ctx, "w", path, NodeWrite("t", props, None, None))
                kg_id = version.node_id
            current = self.model.nodes[branch].get(path)
            assert created == (current is None)
            model_id = current[0] if current is not None else self._model_id(kg_id)
            self.ids[kg_id] = model_id
            self.model.nodes[branch][path] = (model_id, props)
            self.check(branch)

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
                node_store.put_node(s, ctx, "w", path, NodeWrite("t", merged, None, None))
            self.model.nodes[branch][path] = (current[0], node_store.merge_properties(current[1], patch))
            self.check(branch)

        def _patch(self, branch, path, patch):
            with self.services.db.write() as s:
                ctx = begin_write(s, "m", branch)
                found = node_store.find_node(s, ctx.view, "w", path)
                merged = node_store.merge_properties(found.properties, patch)
                node_store.put_node(s, ctx, "w", path, NodeWrite("t", merged, None, None))
            current = self.model.nodes[branch][path]
            self.model.nodes[branch][path] = (current[0], node_store.merge_properties(current[1], patch))

        @precondition(lambda self: len(self.model.nodes) > 1)
        @rule(data=st.data(), path=st.sampled_from(PATHS), v1=st.sampled_from(VALUES), v2=st.sampled_from(VALUES),
              keys=st.permutations(KEYS))
        def patch_both_sides(self, data, path, v1, v2, keys):
            """A child and its parent patch one node: different keys merge, the same key may conflict."""
            child = data.draw(st.sampled_from([b for b in self.branches() if b != "main"]))
            parent = self.model.parent[child]
            if path not in self.model.nodes[child] or path not in self.model.nodes[parent]:
                return
            same_key = data.draw(st.booleans())
            self._patch(parent, path, {keys[0]: v1})
            self._patch(child, path, {keys[0] if same_key else keys[1]: v2})
            self.check(parent)
            self.check(child)
            if data.draw(st.booleans()):
                self._merge(child)

        @rule(data=st.data(), path=st.sampled_from(PATHS))
        def delete(self, data, path):
            branch = data.draw(st.sampled_from(self.branches()))
            exists = path in self.model.nodes[branch]
            try:
                with self.services.db.write() as s:
                    node_store.delete_node(s, begin_write(s, "m", branch), "w", path)
                assert exists
                del self.model.nodes[branch][path]
            except NotFound:
                assert not exists
            self.check(branch)

        @rule(data=st.data(), a=st.sampled_from(PATHS), b=st.sampled_from(PATHS), t=st.sampled_from(TYPES),
              w=st.sampled_from([0.5, 1.0, 2.0]))
        def relate(self, data, a, b, t, w):
            branch = data.draw(st.sampled_from(self.branches()))
            nodes = self.model.nodes[branch]
            try:
                with self.services.db.write() as s:
                    rel_store.relate(s, begin_write(s, "m", branch), f"w:{a}", f"w:{b}", t, weight=w)
                assert a in nodes and b in nodes
                self.model.edges[branch][(nodes[a][0], t, nodes[b][0])] = w
            except NotFound:
                assert a not in nodes or b not in nodes
            self.check(branch)

        @rule(data=st.data(), a=st.sampled_from(PATHS), b=st.sampled_from(PATHS), t=st.sampled_from(TYPES))
        def unrelate(self, data, a, b, t):
            branch = data.draw(st.sampled_from(self.branches()))
            nodes = self.model.nodes[branch]
            try:
                with self.services.db.write() as s:
                    removed = rel_store.unrelate(s, begin_write(s, "m", branch), f"w:{a}", f"w:{b}", t)
                key = (nodes[a][0], t, nodes[b][0])
                assert removed == (1 if key in self.model.edges[branch] else 0)
                self.model.edges[branch].pop(key, None)
            except NotFound:
                assert a not in nodes or b not in nodes
            self.check(branch)

        @precondition(lambda self: len(self.model.nodes) > 1)
        @rule(data=st.data())
        def merge(self, data):
            self._merge(data.draw(st.sampled_from([b for b in self.branches() if b != "main"])))

        def _merge(self, child):
            parent = self.model.parent[child]
            before = {b: (dict(self.model.nodes[b]), dict(self.model.edges[b])) for b in self.branches()}
            expected = self.model.merge(child, parent)
            event(f"merge: {'conflict' if expected else 'clean'}")
            try:
                merge_branch(self.services, "m", child, parent)
                assert not expected, f"kg merged, the model expected conflicts at {expected}"
            except MergeConflict as exc:
                assert expected, f"kg refused a merge the model accepts: {exc.details}"
                assert {b: (self.model.nodes[b], self.model.edges[b]) for b in self.branches()} == before
            self.check(parent)
            self.check(child)

        def teardown_stats(self):
            event(f"property-level merges: {min(self.model.property_merges, 3)}")

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

        # -- comparison -------------------------------------------------------------------

        def read(self, branch, at_revision=None):
            with self.services.db.read() as s:
                view = branch_view(s, "m", branch, at_revision=at_revision)
                listed, _ = node_store.list_prefix(s, view, "w", "/")
                got_nodes = {v.path: (self._model_id(v.node_id), v.properties) for v in listed}
                edges = rel_store.visible_relations(s, view)
                by_id = {v.node_id: v.path for v in listed}
                got_edges = {(by_id[e.from_node_id], e.rel_type, by_id[e.to_node_id]): e.weight for e in edges}
            return got_nodes, got_edges, view.revision

        def check(self, branch):
            got_nodes, got_edges, revision = self.read(branch)
            assert got_nodes == self.model.nodes[branch], branch
            assert got_edges == self.model.visible_edges(branch), branch
            self.snapshots[(branch, revision)] = (dict(got_nodes), dict(got_edges))

    BranchMachine.TestCase.settings = settings(
        max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    return BranchMachine


@pytest.mark.parametrize("kind", ["sqlite"] + (["postgresql"] if POSTGRES_URL else []))
def test_branches_match_the_copying_model(kind, tmp_path):
    machine_for(kind, tmp_path).TestCase().runTest()
