"""Lineage of a merge, planned before it is applied: its derived writes, and the mentions it
leaves to the reviewer.

A merge changes texts on the target and brings derived edges whose source text the target
holds in another version (``mentioned_in`` of another ``source_hash``, ``cites``). What lineage
then does is worked out here from the two branches and the plan, without writing: the dry run
lists it, the merge applies exactly that list in its revision. The rules are
:func:`kg.ops.lineage.refresh_derived`'s but one: every ``mentioned_in`` edge a merge looks at
is asserted by a side, so a mention the merged text no longer names is never removed on the
merge's own. It is a *lineage decision*, a conflict of kind ``"lineage"`` the reviewer resolves
with ``{"from", "to", "type", "take": "keep" | "drop"}`` (drop: remove it, flagging the entity
``orphan`` if left with no edge).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Literal

from sqlalchemy.orm import Session

from kg.context import Resources, UnitOfWork
from kg.errors import InvalidInput
from kg.ops.lineage import (
    CITES,
    DERIVED_EDGE_TYPES,
    MENTIONED_IN,
    derived_edges,
    source_hash,
    source_text,
    stale_citations,
)
from kg.ops.text_store import chunk_hashes, put_text
from kg.store import history
from kg.store import nodes as node_store
from kg.store import relations as relation_store
from kg.store.repos import BranchView, WriteContext
from kg.text.names import mentions
from kg.types.branches import DerivedRefresh

RelKey = tuple[str, str, str]
Take = Literal["keep", "drop"]
#: What a lineage decision's resolution may take.
LINEAGE_TAKES = ("keep", "drop")
#: The derived write kinds, in the order a merge applies them (and counts them).
KINDS = ("unlinked", "restamped", "orphaned", "stale", "queued")


@dataclass(frozen=True)
class _Node:
    """A node as the merge leaves it on the target (``properties`` None: deleted)."""

    node_id: str
    workspace: str
    path: str
    node_type: str
    order: float | None
    properties: dict[str, Any] | None


@dataclass
class DerivedPlan:
    """What lineage does in a merge: ``writes``, in the order applied, and ``decisions`` (conflicts
    of kind ``"lineage"``). A write is ``{"kind", ...}``: ``restamped`` (with its new
    ``source_hash``) and ``unlinked`` name an edge (``from``, ``type``, ``to``); ``orphaned`` and
    ``queued`` a node; ``stale`` an answer and its ``stale_citations`` (the merge adds the revision).
    """

    writes: list[dict[str, Any]] = field(default_factory=list)
    decisions: list[dict[str, Any]] = field(default_factory=list)
    _ids: list[tuple[str, str]] = field(default_factory=list)  # per write: (from or node id, to id)

    def counts(self) -> DerivedRefresh:
        """The writes by kind."""
        out = dict.fromkeys(KINDS, 0)
        for write in self.writes:
            out[write["kind"]] += 1
        return DerivedRefresh(**out)

    def _add(self, write: dict[str, Any], ids: tuple[str, str]) -> None:
        """Add a write in its kind's place (:data:`KINDS` order, then the order added)."""
        at = len(self.writes)
        while at and KINDS.index(self.writes[at - 1]["kind"]) > KINDS.index(write["kind"]):
            at -= 1
        self.writes.insert(at, write)
        self._ids.insert(at, ids)


def split_resolutions(resolutions: list[dict[str, Any]] | None) -> tuple[list[dict[str, Any]] | None,
                                                                          dict[RelKey, Take]]:
    """Split off the lineage decisions' resolutions (``take`` ``keep``/``drop``) as ``{(from, type,
    to): take}``; the merge's own are returned first (None when there are none).

    Raises
    ------
    kg.errors.InvalidInput
        A ``keep`` / ``drop`` resolution that does not name a relation.
    """
    rest: list[dict[str, Any]] = []
    decided: dict[RelKey, Take] = {}
    for raw in resolutions or []:
        if isinstance(raw, dict) and raw.get("take") in LINEAGE_TAKES:
            if not all(isinstance(raw.get(k), str) for k in ("from", "to", "type")):
                raise InvalidInput("a lineage resolution ('keep' or 'drop') names the edge: 'from', 'to' and "
                                   "'type' (strings)", details={"resolution": raw})
            decided[(raw["from"], raw["type"], raw["to"])] = raw["take"]
        else:
            rest.append(raw)
    return rest or None, decided


def plan_derived(services: Resources, session: Session, view: BranchView, plan: history.MergePlan,
                 decided: dict[RelKey, Take] | None = None) -> DerivedPlan:
    """What lineage would do on the target (``view``: the head, or in the merge's transaction the
    revision before it) when ``plan`` is applied with the decisions ``decided``; writes nothing.
    A lookup of the derived edges at the changed texts, of the nodes at their ends, of the
    relations of each entity that may be left orphan; a chunking of each changed text an answer
    cites. Equal branches, plan and resolutions give an equal plan: the dry run's is the merge's.

    Raises
    ------
    kg.errors.InvalidInput
        A ``keep`` / ``drop`` resolution that names no lineage decision of this merge.
    """
    decided = dict(decided or {})
    out = DerivedPlan()
    changes = {c.node_id: c for c in plan.node_changes}
    rel_after = {c.key: c.value for c in plan.relation_changes}
    # The texts whose derived edges are checked: those the merge changes (all their edges, as
    # the merge leaves them), and those whose derived edges it brings from another version of
    # the text than the target holds (those edges only).
    changed = [c.node_id for c in plan.node_changes if c.existed and c.source != "ours"]
    checked: dict[RelKey, dict[str, Any] | None] = {}
    for edge in derived_edges(session, view, changed):
        checked[(edge.from_node_id, edge.rel_type, edge.to_node_id)] = history.relation_value(edge)
    for key, value in rel_after.items():
        if key[1] in DERIVED_EDGE_TYPES and (key[2] in changed or key in checked):
            checked[key] = value
    brought = [(c.key, c.value) for c in plan.relation_changes  # not the target's own, kept ('ours')
               if c.value is not None and c.taken != "ours" and c.key[1] in DERIVED_EDGE_TYPES
               and c.key[2] not in changes]
    if brought:
        held = node_store.nodes_by_id(session, view, {key[2] for key, _ in brought})
        for key, value in brought:
            stamp = (value.get("properties") or {}).get("source_hash")
            text = held.get(key[2])
            if text is not None and (key[1] == CITES or (stamp is not None and stamp != source_hash(text.properties))):
                checked[key] = value
    if not checked:
        _unused(decided, out)
        return out
    ends = _after(session, view, plan, {i for key in checked for i in (key[0], key[2])})
    addresses = {n.node_id: f"{n.workspace}:{n.path}" for n in ends.values()}
    llm = getattr(services.llm, "name", "none") != "none"
    touched: set[str] = set()
    dropped: set[RelKey] = set()
    queued: set[str] = set()
    stale: dict[str, list[dict[str, Any]]] = {}
    hashes: dict[str, list[str] | None] = {}
    for key in sorted(checked):
        value = checked[key]
        entity_id, rel_type, source_id = key
        source, derived = ends.get(source_id), ends.get(entity_id)
        if derived is None or derived.properties is None or source is None:
            continue
        if rel_type == CITES:
            if value is not None:
                _stale_citations(services, session, view, derived, source, hashes, stale)
            continue
        if value is None or source.properties is None:  # removed by the merge, or with its text
            touched.add(entity_id)
            continue
        if llm:
            if source_id not in queued:
                queued.add(source_id)
                out._add({"kind": "queued", "workspace": source.workspace, "path": source.path}, (source_id, ""))
            continue
        digest = source_hash(source.properties)
        props = value.get("properties") or {}
        if props.get("source_hash") == digest:
            continue
        spellings = [derived.properties.get("name"), *(derived.properties.get("aliases") or [])]
        spelled = [n for n in spellings if isinstance(n, str)] or [derived.path.rsplit("/", 1)[-1]]
        address = (addresses[entity_id], rel_type, addresses[source_id])
        if mentions(source_text(source.properties), spelled):
            out._add({"kind": "restamped", "from": address[0], "type": rel_type, "to": address[2],
                      "source_hash": digest}, (entity_id, source_id))
            continue
        take = decided.pop(address, None)
        if take == "drop":
            out._add({"kind": "unlinked", "from": address[0], "type": rel_type, "to": address[2]},
                     (entity_id, source_id))
            dropped.add(key)
            touched.add(entity_id)
        elif take is None:
            out.decisions.append({
                "kind": "lineage", "from": address[0], "to": address[2], "type": rel_type,
                "reason": f"the merged text of {address[2]} no longer names {spelled[0]!r}: take 'keep' to "
                          "keep this mention, 'drop' to remove it (and flag the entity orphan if it is left "
                          "with no edge)",
                "resolutions": list(LINEAGE_TAKES),
                "base": None, "ours": history.relation_value(
                    relation_store.find_relation(session, view, entity_id, source_id, rel_type)),
                "theirs": rel_after.get(key, value)})
    _orphans(session, view, plan, ends, touched, dropped, out)
    for answer_id in sorted(stale):
        answer = ends[answer_id]
        out._add({"kind": "stale", "workspace": answer.workspace, "path": answer.path,
                  "stale_citations": stale[answer_id]}, (answer_id, ""))
    _unused(decided, out)
    return out


def _unused(decided: dict[RelKey, Take], out: DerivedPlan) -> None:
    if decided:
        raise InvalidInput(f"{len(decided)} lineage resolution(s) name no lineage decision of this merge",
                           details={"unused": [{"from": k[0], "type": k[1], "to": k[2]} for k in decided]})


def _after(session: Session, view: BranchView, plan: history.MergePlan, ids: set[str]) -> dict[str, _Node]:
    """The nodes ``ids`` as the merge leaves them on the target (deleted: no properties; held by
    neither side: absent).
    """
    out: dict[str, _Node] = {}
    names = plan.workspaces
    for change in plan.node_changes:
        if change.node_id in ids:
            value = change.value
            out[change.node_id] = _Node(change.node_id, names[change.key[0]], change.key[1],
                                        value["node_type"] if value else "", value["order"] if value else None,
                                        value["properties"] if value else None)
    for node_id, version in node_store.nodes_by_id(session, view, ids - set(out)).items():
        out[node_id] = _Node(node_id, view.workspaces[version.workspace_id], version.path, version.node_type,
                             version.order, version.properties)
    return out


def _stale_citations(services: Resources, session: Session, view: BranchView, answer: _Node, source: _Node,
                     hashes: dict[str, list[str] | None], stale: dict[str, list[dict[str, Any]]]) -> None:
    """Add to ``stale[answer]`` the citations of ``source`` the merged text no longer holds."""
    assert answer.properties is not None
    if source.node_id not in hashes:
        hashes[source.node_id] = (None if source.properties is None else
                                  chunk_hashes(services, session, view.repo, source.workspace, source.properties))
    now = hashes[source.node_id]
    listed = stale.setdefault(answer.node_id, [])
    known = {(s.get("marker"), s.get("path")) for s in answer.properties.get("stale_citations") or []
             if isinstance(s, dict)} | {(s["marker"], s["path"]) for s in listed}
    listed += stale_citations(answer.properties, source.workspace, source.path, now, known)
    if not listed:
        del stale[answer.node_id]


def _orphans(session: Session, view: BranchView, plan: history.MergePlan, ends: dict[str, _Node],
             touched: set[str], dropped: set[RelKey], out: DerivedPlan) -> None:
    """Flag ``orphan`` the entities of ``touched`` the merge leaves with no edge at all."""
    candidates = sorted(e for e in touched if (n := ends.get(e)) is not None and n.properties is not None
                        and n.properties.get("orphan") is not True)
    if not candidates:
        return
    rel_after = {c.key: c.value for c in plan.relation_changes}
    edges = {(e.from_node_id, e.rel_type, e.to_node_id) for e in
             relation_store.visible_relations(session, view, node_ids=candidates)}
    edges |= {key for key, value in rel_after.items() if value is not None
              and (key[0] in candidates or key[2] in candidates)}
    edges -= {key for key, value in rel_after.items() if value is None} | dropped
    others = {i for key in edges for i in (key[0], key[2])} - set(ends)
    alive = {**{i: True for i in node_store.nodes_by_id(session, view, others)},
             **{c.node_id: c.value is not None for c in plan.node_changes},
             **{i: n.properties is not None for i, n in ends.items()}}
    for entity_id in candidates:
        if any(alive.get(key[0]) and alive.get(key[2]) for key in edges if entity_id in (key[0], key[2])):
            continue
        entity = ends[entity_id]
        out._add({"kind": "orphaned", "workspace": entity.workspace, "path": entity.path}, (entity_id, ""))


def plan_digest(applied: dict[str, Any], derived: DerivedPlan) -> str:
    """12 hex digits of sha256 over what a merge applies and lineage writes: what the heads in a
    plan token (:func:`kg.ops.merge.plan_token`) do not fix (resolutions, configuration).
    """
    text = json.dumps({"applied": applied, "derived": derived.writes}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def apply_derived(uow: UnitOfWork, ctx: WriteContext, derived: DerivedPlan) -> DerivedRefresh:
    """Write ``derived`` in the merge's revision after its own writes; :meth:`DerivedPlan.counts`.
    These writes derive nothing (:func:`kg.ops.text_store.put_text`).
    """
    session = uow.session
    if derived.writes:
        session.flush()
    for write, (first, second) in zip(derived.writes, derived._ids, strict=True):
        kind = write["kind"]
        if kind == "restamped":
            edge = relation_store.find_relation(session, ctx.view, first, second, MENTIONED_IN)
            if edge is not None:
                relation_store.restamp_relation(session, ctx, edge, {
                    **(edge.properties or {}), "source_path": write["to"].partition(":")[2],
                    "source_hash": write["source_hash"]})
        elif kind == "unlinked":
            relation_store.unrelate(session, ctx, write["from"], write["to"], MENTIONED_IN)
        elif kind == "queued":
            uow.services.jobs.queue_own(uow, ctx.view.repo.name, "extract-entities",
                                        {"workspace": write["workspace"], "path": write["path"]},
                                        ctx.view.branch.name)
        else:
            session.flush()
            node = node_store.find_node(session, ctx.view, write["workspace"], write["path"])
            if node is None:
                continue
            if kind == "orphaned":
                properties = {**node.properties, "orphan": True}
            else:
                held = [s for s in node.properties.get("stale_citations") or [] if isinstance(s, dict)]
                properties = {**node.properties, "stale": True, "stale_citations": held + [
                    {**s, "revision": ctx.revision} for s in write["stale_citations"]]}
            put_text(uow, ctx, write["workspace"], node.path, node_type=node.node_type, properties=properties,
                     order=node.order)
    return derived.counts()
