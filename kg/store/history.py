"""History of branches: the revision log, diff, three-way merge, reset, ahead / behind.

Merge model (docs/concepts/branches.md): the *base* is the last point both branches shared (the fork, or the
last merge between them); *ours* is the target, *theirs* the source. Only entities that the
source changed since the base are candidates, so diff and merge cost grows with the changes,
not with the repository. Nodes merge at property level (``node_type`` and ``order`` count as
properties); relations merge as whole values (weight and properties). A change on both sides
that disagrees is a conflict; with any unresolved conflict nothing is written.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Literal, cast

from sqlalchemy import ColumnElement, Table, exists, func, or_, select
from sqlalchemy.orm import Session

from kg.errors import Conflict, InvalidInput
from kg.store.ingest_records import carry_records, flat_value
from kg.store.models import (
    Branch,
    IngestRecord,
    Merge,
    NodeVersion,
    RelationVersion,
    Repository,
    Revision,
    utcnow,
)
from kg.store.nodes import node_addresses, node_uid, nodes_by_id, validate_node_input
from kg.store.paths import ancestors_of, name_of, parent_of, parse_address, validate_path
from kg.store.references import index_references
from kg.store.relations import visible_relations
from kg.store.repos import BranchView, WriteContext, _view, bump_layout, get_branch, parent_name
from kg.store.visibility import readable_node, reader_scope, visible_select

NodeKey = tuple[int, str]                 # (workspace id, path)
RelKey = tuple[str, str, str]             # (from node id, type, to node id)
ChangeSource = Literal["theirs", "merged", "value", "ours"]
_MISSING = object()


# -- values ---------------------------------------------------------------------------------


def node_value(version: NodeVersion | None) -> dict[str, Any] | None:
    """The mergeable value ``{"node_type", "properties", "order"}`` of a node version; None for no
    version or a tombstone.
    """
    if version is None or version.deleted:
        return None
    return {"node_type": version.node_type, "properties": version.properties, "order": version.order}


def relation_value(version: RelationVersion | None) -> dict[str, Any] | None:
    """The mergeable value ``{"weight", "properties", "valid_from", "valid_to", "invalidated_by"}``
    (times ISO 8601 UTC) of a relation version, None for none or a tombstone; an invalidation
    changes it, so it shows in a diff and merges like a re-weighting.
    """
    if version is None or version.deleted:
        return None
    return {"weight": version.weight, "properties": version.properties,
            "valid_from": _iso(version.valid_from), "valid_to": _iso(version.valid_to),
            "invalidated_by": version.invalidated_by}


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(UTC).isoformat()


def _time(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


def _flat(value: dict[str, Any]) -> dict[str, Any]:
    flat = dict(value["properties"])
    flat["kg:node_type"] = value["node_type"]
    flat["kg:order"] = value["order"]
    return flat


def _unflat(flat: dict[str, Any]) -> dict[str, Any]:
    props = {k: v for k, v in flat.items() if k not in ("kg:node_type", "kg:order")}
    return {"node_type": flat["kg:node_type"], "properties": props, "order": flat.get("kg:order")}


def property_changes(old: dict[str, Any] | None, new: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """``{key: {"old", "new"}}``, keys sorted, of what differs between two node values (None: no
    node); ``node_type`` and ``order`` as ``kg:node_type`` and ``kg:order``.

    >>> old = {"node_type": "Note", "properties": {"a": 1, "b": 2}, "order": None}
    >>> property_changes(old, {**old, "properties": {"a": 1, "b": 3, "c": 4}})
    {'b': {'old': 2, 'new': 3}, 'c': {'old': None, 'new': 4}}
    """
    a = _flat(old) if old else {}
    b = _flat(new) if new else {}
    out = {}
    for key in sorted(set(a) | set(b)):
        if a.get(key, _MISSING) != b.get(key, _MISSING):
            out[key] = {"old": a.get(key), "new": b.get(key)}
    return out


def three_way_properties(base: dict[str, Any], ours: dict[str, Any],
                         theirs: dict[str, Any]) -> tuple[dict[str, Any] | None, list[str]]:
    """Merge two node values at property level against their base: ``(merged, conflicting_keys)``,
    ``merged`` None when some key changed differently on both sides. Per key, as diff3 per line
    (S. Khanna, K. Kunal, B. C. Pierce, "A formal investigation of diff3", FSTTCS 2007): a key
    changed on one side takes that side's value; changed on both, it must be changed alike.
    ``node_type`` and ``order`` merge like properties. O(k) for k keys.

    >>> base = {"node_type": "Note", "properties": {"a": 1, "b": 2}, "order": None}
    >>> ours = {**base, "properties": {"a": 9, "b": 2}}
    >>> three_way_properties(base, ours, {**base, "properties": {"a": 1, "b": 3}})[0]["properties"]
    {'a': 9, 'b': 3}
    >>> three_way_properties(base, ours, {**base, "properties": {"a": 5, "b": 2}})
    (None, ['a'])
    """
    b, o, t = _flat(base), _flat(ours), _flat(theirs)
    merged: dict[str, Any] = {}
    conflicts = []
    for key in sorted(set(b) | set(o) | set(t)):
        bv, ov, tv = b.get(key, _MISSING), o.get(key, _MISSING), t.get(key, _MISSING)
        if tv == bv:
            result = ov
        elif ov == bv or ov == tv:
            result = tv
        else:
            conflicts.append(key)
            continue
        if result is not _MISSING:
            merged[key] = result
    if conflicts:
        return None, conflicts
    return _unflat(merged), []


# -- state lookups --------------------------------------------------------------------------


def node_states(session: Session, view: BranchView, keys: Iterable[NodeKey]) -> dict[NodeKey, NodeVersion]:
    """The live versions the view sees at the (workspace id, path) keys; absent keys have none."""
    by_ws: dict[int, list[str]] = defaultdict(list)
    for wid, path in set(keys):
        by_ws[wid].append(path)
    out: dict[NodeKey, NodeVersion] = {}
    for wid, paths in by_ws.items():
        for start in range(0, len(paths), 500):
            part = paths[start:start + 500]
            stmt, _ = visible_select(NodeVersion, view, (NodeVersion.workspace_id, NodeVersion.path),
                                     NodeVersion.workspace_id == wid, NodeVersion.path.in_(part))
            for version in session.scalars(stmt):
                out[(wid, version.path)] = version
    return out


def relation_states(session: Session, view: BranchView, keys: Iterable[RelKey]) -> dict[RelKey, RelationVersion]:
    """The live relation versions the view sees at the (from id, type, to id) keys, endpoints not
    checked.
    """
    wanted = set(keys)
    by_from: dict[str, set[RelKey]] = defaultdict(set)
    for key in wanted:
        by_from[key[0]].add(key)
    out: dict[RelKey, RelationVersion] = {}
    froms = list(by_from)
    for start in range(0, len(froms), 500):
        part = froms[start:start + 500]
        stmt, _ = visible_select(
            RelationVersion, view,
            (RelationVersion.from_node_id, RelationVersion.rel_type, RelationVersion.to_node_id),
            RelationVersion.from_node_id.in_(part),
        )
        for version in session.scalars(stmt):
            key = (version.from_node_id, version.rel_type, version.to_node_id)
            if key in wanted:
                out[key] = version
    return out


def seen_relations(session: Session, view: BranchView, keys: Iterable[RelKey]) -> dict[RelKey, RelationVersion]:
    """The relation versions a reader sees at the keys: live, with both endpoints live."""
    states = relation_states(session, view, keys)
    alive = nodes_by_id(session, view, {k[0] for k in states} | {k[2] for k in states})
    return {k: v for k, v in states.items() if k[0] in alive and k[2] in alive}


def _changed_node_keys(session: Session, branch_id: int, since: int, upto: int, *,
                       readable: frozenset[int] | None = None) -> list[NodeKey]:
    scope = [] if readable is None else [NodeVersion.workspace_id.in_(sorted(readable))]
    rows = session.execute(
        select(NodeVersion.workspace_id, NodeVersion.path)
        .where(NodeVersion.branch_id == branch_id, NodeVersion.revision > since,
               NodeVersion.revision <= upto, *scope)
        .distinct()
    ).all()
    return sorted((r[0], r[1]) for r in rows)


def _changed_relation_keys(session: Session, branch_id: int, since: int, upto: int, *,
                           readable: frozenset[int] | None = None,
                           branches: Sequence[int] = ()) -> list[RelKey]:
    scope = [] if readable is None else [readable_node(c, readable, branches)
                                         for c in (RelationVersion.from_node_id, RelationVersion.to_node_id)]
    rows = session.execute(
        select(RelationVersion.from_node_id, RelationVersion.rel_type, RelationVersion.to_node_id)
        .where(RelationVersion.branch_id == branch_id, RelationVersion.revision > since,
               RelationVersion.revision <= upto, *scope)
        .distinct()
    ).all()
    return sorted((r[0], r[1], r[2]) for r in rows)


def _target_moved(session: Session, branch_id: int, since: int, before: int | None) -> bool:
    stmt = select(Revision.id).where(Revision.branch_id == branch_id, Revision.number > since)
    if before is not None:
        stmt = stmt.where(Revision.number < before)
    return session.execute(stmt.limit(1)).first() is not None


# -- merge base -----------------------------------------------------------------------------


@dataclass(frozen=True)
class MergeBase:
    """The last state two branches shared. ``since``: the source's versions after it are the
    candidates; ``time``: the fork or the last merge's revision (a branch with later ones has
    moved); ``revision``: what is reported, the fork or the last merge's source revision (not
    ``view.revision``, capped at a head that a merge's own revision moves: a dry run and its merge
    would disagree on the base).
    """

    view: BranchView
    since: int
    kind: Literal["fork", "merge"]
    time: int
    revision: int

    def report(self) -> dict[str, Any]:
        """``{"kind": "fork" | "merge", "branch", "revision"}``."""
        return {"kind": self.kind, "branch": self.view.branch.name, "revision": self.revision}


def merge_base(session: Session, repo: Repository, source: Branch, target: Branch, *,
               field: str = "into") -> MergeBase:
    """The merge base of a parent and its child (in either order): their fork point or their
    last merge. ``field`` names the request's field that named the other branch (``into``,
    ``against``) in the refusal's ``details.field``.

    Raises
    ------
    kg.errors.InvalidInput
        The branches are not parent and child (the only merges kg supports).
    """
    if source.parent_id == target.id:
        child = source
    elif target.parent_id == source.id:
        child = target
    else:
        raise InvalidInput(
            f"branches {source.name!r} and {target.name!r} are not parent and child; "
            "merge a branch into its parent or its parent into it",
            details={"field": field, "source": source.name, "target": target.name},
        )
    parent = target if child is source else source
    fork = child.base_revision or 0
    best = MergeBase(_view(session, repo, parent.name, fork), fork, "fork", fork, fork)
    merges = session.scalars(
        select(Merge).where(
            or_((Merge.source_branch_id == source.id) & (Merge.target_branch_id == target.id),
                (Merge.source_branch_id == target.id) & (Merge.target_branch_id == source.id))
        ).order_by(Merge.target_revision.desc(), Merge.id.desc())
    ).all()
    # The source's candidates: everything it wrote since it last merged into the target.
    since = next((m.source_revision for m in merges if m.source_branch_id == source.id), fork)
    last = merges[0] if merges else None
    if last is not None and last.target_revision >= fork:
        merged_from = source if last.source_branch_id == source.id else target
        best = MergeBase(_view(session, repo, merged_from.name, last.source_revision),
                         since, "merge", last.target_revision, last.source_revision)
    return best


# -- diff -----------------------------------------------------------------------------------


def _node_entry(view: BranchView, key: NodeKey, version: NodeVersion | None) -> dict[str, Any]:
    value = node_value(version)
    return {"workspace": view.workspaces.get(key[0]), "path": key[1],
            "node_id": version.node_id if version is not None else None,
            "node_type": value["node_type"] if value else None,
            "properties": value["properties"] if value else None}


def _addresses(session: Session, views: list[BranchView], ids: set[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for view in views:
        missing = ids - set(out)
        if not missing:
            break
        for node_id, version in nodes_by_id(session, view, missing).items():
            out[node_id] = f"{view.workspaces.get(version.workspace_id)}:{version.path}"
    if ids - set(out):
        rows = session.execute(
            select(NodeVersion.node_id, NodeVersion.workspace_id, NodeVersion.path)
            .where(NodeVersion.node_id.in_(list(ids - set(out))))
        ).all()
        for node_id, wid, path in rows:
            out.setdefault(node_id, f"{views[0].workspaces.get(wid)}:{path}")
    return out


def diff_branches(session: Session, repo: Repository, branch_name: str, against: str | None = None, *,
                  readable: frozenset[int] | None = None) -> dict[str, Any]:
    """What ``branch_name`` changed since its merge base with ``against`` (its parent by default, a
    child, or itself: an empty diff based on its head): :class:`kg.types.branches.Diff`'s shape.
    ``readable`` (workspace ids) keeps a restricted reader's scope, in the queries that find the
    changes. O(c log n) for c changed entities and n versions.

    Raises
    ------
    kg.errors.InvalidInput
        ``against`` is neither the branch's parent, nor its child, nor itself
        (``details.field``: ``against``).
    kg.errors.Conflict
        ``against`` is None and the branch (``main``) has no parent.
    """
    source = get_branch(session, repo, branch_name)
    if against is None:
        against = parent_name(session, source)
        if against is None:
            raise Conflict("main has no parent: name a branch to diff against with 'against'",
                           details={"branch": source.name})
    target = get_branch(session, repo, against)
    theirs = _view(session, repo, source.name, None)
    if target.id == source.id:
        # A branch against itself: nothing changed since its own head (an empty diff).
        return {"branch": source.name, "against": target.name,
                "base": {"kind": "head", "branch": source.name, "revision": theirs.revision},
                "nodes": {"added": [], "modified": [], "deleted": []},
                "relations": {"added": [], "removed": [], "modified": []}}
    base = merge_base(session, repo, source, target, field="against")
    node_keys = _changed_node_keys(session, source.id, base.since, theirs.revision, readable=readable)
    before = node_states(session, base.view, node_keys)
    after = node_states(session, theirs, node_keys)
    nodes: dict[str, list[dict[str, Any]]] = {"added": [], "modified": [], "deleted": []}
    for key in node_keys:
        old, new = before.get(key), after.get(key)
        if old is None and new is not None:
            nodes["added"].append(_node_entry(theirs, key, new))
        elif old is not None and new is None:
            nodes["deleted"].append(_node_entry(base.view, key, old))
        elif old is not None and new is not None:
            changes = property_changes(node_value(old), node_value(new))
            if changes:
                entry = _node_entry(theirs, key, new)
                entry["changes"] = changes
                nodes["modified"].append(entry)
    rel_keys = _changed_relation_keys(session, source.id, base.since, theirs.revision, readable=readable,
                                      branches=sorted({b for b, _ in theirs.chain + base.view.chain}))
    rel_before = seen_relations(session, base.view, rel_keys)
    rel_after = seen_relations(session, theirs, rel_keys)
    addresses = _addresses(session, [theirs, base.view], {k[0] for k in rel_keys} | {k[2] for k in rel_keys})
    relations: dict[str, list[dict[str, Any]]] = {"added": [], "removed": [], "modified": []}
    for rkey in rel_keys:
        ov, nv = relation_value(rel_before.get(rkey)), relation_value(rel_after.get(rkey))
        entry = {"from": addresses.get(rkey[0]), "to": addresses.get(rkey[2]), "type": rkey[1]}
        if ov is None and nv is not None:
            relations["added"].append({**entry, **nv})
        elif ov is not None and nv is None:
            relations["removed"].append({**entry, **ov})
        elif ov is not None and nv is not None and ov != nv:
            relations["modified"].append({**entry, "old": ov, "new": nv})
    return {
        "branch": source.name, "against": target.name,
        "base": base.report(),
        "nodes": nodes, "relations": relations,
    }


# -- merge ----------------------------------------------------------------------------------


@dataclass
class NodeChange:
    """One node write a merge makes on the target."""

    key: NodeKey
    value: dict[str, Any] | None          # None: delete
    node_id: str                          # the address's id (kg.store.nodes.node_uid)
    content_key: str | None
    needs_content: bool                   # merged text: its content key must be computed
    source: ChangeSource
    existed: bool = False                 # the target had a live node at the path


@dataclass
class RelationChange:
    """One relation write a merge makes on the target."""

    key: RelKey
    value: dict[str, Any] | None
    taken: Literal["ours", "theirs"] | None = None   # the resolution that chose it, if any


@dataclass
class MergePlan:
    """What a merge would do: its writes, or its conflicts."""

    source: str
    target: str
    base: MergeBase
    source_revision: int
    fast_forward: bool
    node_changes: list[NodeChange] = field(default_factory=list)
    relation_changes: list[RelationChange] = field(default_factory=list)
    conflicts: list[dict[str, Any]] = field(default_factory=list)
    workspaces: dict[int, str] = field(default_factory=dict)

    def preview(self) -> dict[str, Any]:
        """The dry run's ``applied``: the report :func:`apply_merge` gives, so a dry run says exactly
        what the merge does.
        """
        nodes: dict[str, list[Any]] = {"added": [], "modified": [], "deleted": [], "kept": []}
        for change in self.node_changes:
            address = {"workspace": self.workspaces.get(change.key[0]), "path": change.key[1]}
            nodes[_node_outcome(change)].append(address)
        relations = {"upserted": 0, "removed": 0, "kept": 0}
        for rel in self.relation_changes:
            relations[_relation_outcome(rel)] += 1
        return {"nodes": nodes, "relations": relations}


def _node_outcome(change: NodeChange) -> str:
    """How a reader of the target sees a node change: ``kept`` re-asserts the target's value (a
    conflict resolved 'ours', recorded so that a merge the other way carries it).
    """
    if change.value is None:
        return "deleted"
    if change.source == "ours":
        return "kept"
    return "modified" if change.existed else "added"


def _relation_outcome(change: RelationChange) -> str:
    if change.value is None:
        return "removed"
    return "kept" if change.taken == "ours" else "upserted"


def _resolution_index(resolutions: list[dict[str, Any]] | None,
                      view: BranchView) -> tuple[dict[NodeKey, dict[str, Any]], dict[RelKey, dict[str, Any]]]:
    by_node: dict[NodeKey, dict[str, Any]] = {}
    by_rel: dict[RelKey, dict[str, Any]] = {}
    names = {name: wid for wid, name in view.workspaces.items()}
    for raw in resolutions or []:
        if not isinstance(raw, dict):
            raise InvalidInput("each resolution is an object")
        take = raw.get("take")
        if take not in ("ours", "theirs", "value"):
            raise InvalidInput("a resolution's 'take' is 'ours', 'theirs' or 'value'", details={"resolution": raw})
        if take == "value":
            if not isinstance(raw.get("value"), dict):
                raise InvalidInput("take 'value' needs 'value': the node's properties (an object)",
                                   details={"resolution": raw})
            validate_node_input("kg:Node", raw["value"], None)
        if "path" in raw:
            ws = raw.get("workspace")
            if not isinstance(ws, str) or not isinstance(raw["path"], str):
                raise InvalidInput("a node resolution's 'workspace' and 'path' are strings",
                                   details={"resolution": raw})
            if ws not in names:
                raise InvalidInput(f"resolution names unknown workspace {ws!r}",
                                   details={"field": "resolutions", "resolution": raw})
            by_node[(names[ws], validate_path(raw["path"]))] = raw
        elif {"from", "to", "type"} <= set(raw):
            if not all(isinstance(raw[key], str) for key in ("from", "to", "type")):
                raise InvalidInput("a relation resolution's 'from', 'to' and 'type' are strings",
                                   details={"resolution": raw})
            if take == "value":
                raise InvalidInput("a relation conflict is resolved with 'ours' or 'theirs'")
            by_rel[(raw["from"], raw["type"], raw["to"])] = raw
        else:
            raise InvalidInput("a resolution names a node (workspace, path) or a relation (from, to, type)",
                               details={"resolution": raw})
    return by_node, by_rel


def plan_merge(session: Session, repo: Repository, source_name: str, target_name: str, *,
               resolutions: list[dict[str, Any]] | None = None, writing_revision: int | None = None) -> MergePlan:
    """Plan a merge of ``source_name`` into ``target_name`` (parent and child, either way), writing
    nothing; unresolved conflicts are in the plan's ``conflicts``. O(c log n) for c entities the
    source changed since the base; node values merge by :func:`three_way_properties`.
    ``writing_revision``: the merge's own revision, not counted as the target having moved.
    ``resolutions``: ``{"workspace", "path", "take": "ours" | "theirs" | "value", "value"}`` for a
    node conflict (``value``: all its properties) or a node whose parent one side deleted,
    ``{"from", "to", "type", "take"}`` for a relation.

    Raises
    ------
    kg.errors.InvalidInput
        Not parent and child, the same branch, a malformed resolution or one naming no conflict.
    """
    if source_name == target_name:
        raise InvalidInput("a branch cannot be merged into itself", details={"field": "into", "branch": source_name})
    source = get_branch(session, repo, source_name)
    target = get_branch(session, repo, target_name)
    base = merge_base(session, repo, source, target)
    theirs_view = _view(session, repo, source.name, None)
    ours_view = _view(session, repo, target.name, None)
    plan = MergePlan(source=source.name, target=target.name, base=base,
                     source_revision=theirs_view.revision,
                     fast_forward=not _target_moved(session, target.id, base.time, writing_revision),
                     workspaces=dict(ours_view.workspaces))
    node_res, rel_res = _resolution_index(resolutions, ours_view)
    if node_res or rel_res:
        _check_resolutions_name_conflicts(session, repo, source_name, target_name, node_res, rel_res,
                                          ours_view, writing_revision)

    keys = _changed_node_keys(session, source.id, base.since, theirs_view.revision)
    decided: set[NodeKey] = set()  # the node conflicts a resolution decided
    b_states = node_states(session, base.view, keys)
    o_states = node_states(session, ours_view, keys)
    t_states = node_states(session, theirs_view, keys)
    for key in keys:
        bv, ov, tv = (node_value(s.get(key)) for s in (b_states, o_states, t_states))
        o_ver, t_ver = o_states.get(key), t_states.get(key)
        if tv == bv or ov == tv:
            continue
        if ov == bv:
            plan.node_changes.append(_change(key, tv, o_ver, t_ver, "theirs"))
            continue
        reason: str | None = None
        keys_in_conflict: list[str] = []
        merged: dict[str, Any] | None = None
        if bv is None:
            reason = "added on both sides with different content"
        elif ov is None or tv is None:
            reason = "deleted on one side, modified on the other"
        else:
            merged, keys_in_conflict = three_way_properties(bv, ov, tv)
            if merged is None:
                reason = "the same properties changed differently on both sides"
        if reason is None:
            if merged != ov:  # theirs' changes may all be ours already: nothing to write
                plan.node_changes.append(_change(key, merged, o_ver, t_ver, "merged"))
            continue
        resolution = node_res.get(key)
        if resolution is not None:
            decided.add(key)
        if resolution is None:
            conflict: dict[str, Any] = {"kind": "node", "workspace": ours_view.workspaces.get(key[0]),
                                        "path": key[1],
                                        "reason": reason, "base": bv, "ours": ov, "theirs": tv}
            if keys_in_conflict:
                conflict["properties"] = keys_in_conflict
            plan.conflicts.append(conflict)
            continue
        take = resolution["take"]
        if take == "ours":
            # Re-assert ours on the target: the decision is recorded as a change of the
            # target, so a later merge in the other direction carries it.
            if o_ver is not None:
                plan.node_changes.append(_change(key, ov, o_ver, o_ver, "ours"))
            continue
        if take == "theirs":
            plan.node_changes.append(_change(key, tv, o_ver, t_ver, "theirs"))
        else:
            like = tv or ov or bv
            assert like is not None  # a conflict has a value on at least one side
            value = {"node_type": like["node_type"], "properties": resolution["value"], "order": like["order"]}
            plan.node_changes.append(_change(key, value, o_ver, t_ver, "ours" if value == ov else "value"))

    resolved = _resolved_relations(ours_view, rel_res)
    rel_keys = _changed_relation_keys(session, source.id, base.since, theirs_view.revision)
    addresses: dict[str, str] = {}
    if rel_keys:
        rb, ro, rt = (seen_relations(session, v, rel_keys) for v in (base.view, ours_view, theirs_view))
        addresses = _addresses(session, [theirs_view, ours_view, base.view],
                               {k[0] for k in rel_keys} | {k[2] for k in rel_keys})
        for rkey in rel_keys:
            if rkey in resolved:
                continue
            rbv, rov, rtv = (relation_value(s.get(rkey)) for s in (rb, ro, rt))
            if rtv == rbv or rov == rtv:
                continue
            if rov == rbv:
                plan.relation_changes.append(RelationChange(rkey, rtv))
                continue
            address = (addresses.get(rkey[0]), rkey[1], addresses.get(rkey[2]))
            plan.conflicts.append({"kind": "relation", "from": address[0], "to": address[2], "type": rkey[1],
                                   "reason": "changed differently on both sides",
                                   "base": rbv, "ours": rov, "theirs": rtv})
    if resolved:
        _apply_relation_resolutions(session, plan, resolved, ours_view, theirs_view)
    orphans = {key: r for key, r in node_res.items() if key not in decided}
    if orphans:  # before the checks: a restored parent or a deleted subtree changes what they see
        _apply_orphan_resolutions(session, plan, orphans, decided, ours_view, theirs_view)
    _check_endpoints(session, plan, base.view, ours_view, theirs_view, set(resolved), addresses)
    _check_orphans(session, ours_view, plan)
    return plan


def _conflict_name(conflict: dict[str, Any]) -> tuple[Any, ...]:
    if conflict["kind"] == "relation":
        return ("relation", conflict["from"], conflict["type"], conflict["to"])
    return ("node", conflict["workspace"], conflict["path"])


def _check_resolutions_name_conflicts(session: Session, repo: Repository, source: str, target: str,
                                      node_res: dict[NodeKey, dict[str, Any]],
                                      rel_res: dict[RelKey, dict[str, Any]], ours: BranchView,
                                      writing_revision: int | None) -> None:
    """Every resolution must name a conflict of the merge without resolutions (resolving one can make
    another disappear: its resolution still decides it).
    """
    open_conflicts = plan_merge(session, repo, source, target, writing_revision=writing_revision).conflicts
    named = {_conflict_name(c) for c in open_conflicts}
    # Named back as the caller wrote them (workspace name, not its internal id).
    unused = [{"workspace": ours.workspaces.get(k[0], k[0]), "path": k[1]} for k in node_res
              if ("node", ours.workspaces.get(k[0]), k[1]) not in named]
    unused += [{"from": k[0], "type": k[1], "to": k[2]} for k in rel_res
               if ("relation", k[0], k[1], k[2]) not in named]
    if unused:
        raise InvalidInput(f"{len(unused)} resolution(s) name no conflict of this merge",
                           details={"field": "resolutions", "unused": unused})


def _resolved_relations(view: BranchView, rel_res: dict[RelKey, dict[str, Any]]) -> dict[RelKey, str]:
    """``{relation key: "ours" | "theirs"}`` of the relation resolutions (addresses to ids)."""
    names = {name: wid for wid, name in view.workspaces.items()}
    out: dict[RelKey, str] = {}
    for (source, rel_type, target), resolution in rel_res.items():
        ids = []
        for address in (source, target):
            workspace, path = parse_address(address)
            ids.append(node_uid(view.repo.uid, names[workspace], path))
        out[(ids[0], rel_type, ids[1])] = resolution["take"]
    return out


def _apply_relation_resolutions(session: Session, plan: MergePlan, resolved: dict[RelKey, str],
                                ours: BranchView, theirs: BranchView) -> None:
    """A resolution decides its relation: the merged edge is what the taken side's reader sees, and
    keeps its endpoints: 'ours' keeps the target's nodes (the source's delete is not applied),
    'theirs' restores the source's nodes the target deleted.
    """
    keys = list(resolved)
    seen_ours = seen_relations(session, ours, keys)
    seen_theirs = seen_relations(session, theirs, keys)
    plan.relation_changes = [c for c in plan.relation_changes if c.key not in resolved]
    keep: set[str] = set()
    restore: set[str] = set()
    for key, take in sorted(resolved.items()):
        ov = relation_value(seen_ours.get(key))
        value = ov if take == "ours" else relation_value(seen_theirs.get(key))
        if value is None:
            if ov is not None:
                plan.relation_changes.append(RelationChange(key, None, take))  # type: ignore[arg-type]
        elif take == "ours":
            plan.relation_changes.append(RelationChange(key, value, "ours"))
            keep.update((key[0], key[2]))
        else:
            if value != ov:
                plan.relation_changes.append(RelationChange(key, value, "theirs"))
            restore.update((key[0], key[2]))
    if keep:
        # A delete of the source's that a kept edge needs is not applied: the target's node is
        # re-asserted as it is ('kept' in the report, and recorded, as a node conflict resolved
        # 'ours' is), never dropped without a word.
        _undo_deletes(session, plan, ours, lambda c: c.node_id in keep)
    if restore:
        result = {c.node_id: c.value is not None for c in plan.node_changes}
        alive = set(nodes_by_id(session, ours, restore - set(result)))
        dead = {i for i in restore if not result.get(i, i in alive)}
        for version in sorted(nodes_by_id(session, theirs, dead).values(), key=lambda v: (v.workspace_id, v.path)):
            nkey = (version.workspace_id, version.path)
            plan.node_changes = [c for c in plan.node_changes if c.key != nkey]
            plan.node_changes.append(_change(nkey, node_value(version), None, version, "theirs"))


def _undo_deletes(session: Session, plan: MergePlan, ours: BranchView, undo: Callable[[NodeChange], bool]) -> None:
    """Replace the deletes ``undo`` picks by the target's node re-asserted ('kept', recorded as a
    node conflict resolved 'ours' is).
    """
    undone = [c for c in plan.node_changes if c.value is None and undo(c)]
    if not undone:
        return
    plan.node_changes = [c for c in plan.node_changes if not (c.value is None and undo(c))]
    held = node_states(session, ours, [c.key for c in undone])
    for change in undone:
        version = held.get(change.key)
        if version is not None:
            plan.node_changes.append(_change(change.key, node_value(version), version, None, "ours"))


def _change(key: NodeKey, value: dict[str, Any] | None, ours: NodeVersion | None, theirs: NodeVersion | None,
            source: ChangeSource) -> NodeChange:
    change = _make_change(key, value, ours, theirs, source)
    change.existed = ours is not None
    return change


def _make_change(key: NodeKey, value: dict[str, Any] | None, ours: NodeVersion | None, theirs: NodeVersion | None,
                 source: ChangeSource) -> NodeChange:
    # Both sides hold the address's id (kg.store.nodes.node_uid): one node, whoever wrote it.
    either = theirs or ours
    node_id = either.node_id if either is not None else None
    if node_id is None:
        raise AssertionError(f"a merge change at {key} with no version on either side")
    if value is None:
        return NodeChange(key, None, node_id, None, False, source)
    if theirs is not None and node_value(theirs) == value:
        return NodeChange(key, value, node_id, theirs.content_key, False, source)
    if ours is not None and node_value(ours) == value:
        return NodeChange(key, value, node_id, ours.content_key, False, source)
    return NodeChange(key, value, node_id, None, True, source)


def _check_endpoints(session: Session, plan: MergePlan, base: BranchView, ours: BranchView,
                     theirs: BranchView, resolved: set[RelKey], addresses: dict[str, str]) -> None:
    """A merge never leaves an edge whose endpoint is deleted on the target: (a) an edge of the
    source to a node the target deleted, (b) a node deleted (as the source did) that the target
    has an edge to the source never saw. Either is a relation conflict (base / ours / theirs as
    each side's reader sees the edge); ``take: "theirs"`` keeps the source's edge and restores its
    endpoint (a), ``take: "ours"`` keeps the target's edge and its endpoint (b), the other side
    drops the edge.
    """
    deletes = {c.node_id for c in plan.node_changes if c.value is None and c.existed}
    planned = {c.key for c in plan.relation_changes} | resolved
    if deletes:
        edges = visible_relations(session, ours, node_ids=deletes)
        for edge in sorted(edges, key=lambda e: (e.from_node_id, e.rel_type, e.to_node_id)):
            key = (edge.from_node_id, edge.rel_type, edge.to_node_id)
            if key in planned:
                continue
            address = _relation_address(session, [ours, theirs, base], key, addresses)
            reason = ("the source deleted an endpoint of this relation, which the target "
                      "changed: take 'ours' to keep both, 'theirs' to drop the relation")
            deleted_ends = [addresses[i] for i in (key[0], key[2]) if i in deletes]
            listed = next((c for c in plan.conflicts if c["kind"] == "relation" and c["from"] == address[0]
                           and c["type"] == key[1] and c["to"] == address[2]), None)
            if listed is not None:
                # Already a conflict (both sides changed the edge): one conflict per relation,
                # with the reason that tells what each resolution does.
                listed.update(reason=reason, deleted_endpoints=deleted_ends)
                continue
            plan.conflicts.append({
                "kind": "relation", "from": address[0], "to": address[2], "type": key[1],
                "reason": reason,
                "deleted_endpoints": deleted_ends,
                "base": relation_value(seen_relations(session, base, [key]).get(key)),
                "ours": relation_value(edge), "theirs": None})
    writes = [c for c in plan.relation_changes if c.value is not None and c.key not in resolved]
    if not writes:
        return
    result = {c.node_id: c.value is not None for c in plan.node_changes}
    ends = {i for c in writes for i in (c.key[0], c.key[2])}
    alive_ours = set(nodes_by_id(session, ours, ends - set(result)))
    dead = {i for i in ends if not result.get(i, i in alive_ours)}
    for change in writes:
        gone = [i for i in (change.key[0], change.key[2]) if i in dead]
        if not gone:
            continue
        key = change.key
        address = _relation_address(session, [theirs, ours, base], key, addresses)
        plan.conflicts.append({
            "kind": "relation", "from": address[0], "to": address[2], "type": key[1],
            "reason": "the target deleted an endpoint of this relation, which the source "
                      "changed: take 'theirs' to keep the relation and restore the node, 'ours' "
                      "to drop the relation",
            "deleted_endpoints": [address[0] if i == key[0] else address[2] for i in gone],
            "base": relation_value(seen_relations(session, base, [key]).get(key)),
            "ours": relation_value(seen_relations(session, ours, [key]).get(key)),
            "theirs": change.value})


def _relation_address(session: Session, views: list[BranchView], key: RelKey,
                      addresses: dict[str, str]) -> tuple[str | None, str, str | None]:
    """``(from address, type, to address)`` of a relation key, as resolutions name it."""
    missing = {key[0], key[2]} - set(addresses)
    if missing:
        addresses.update(_addresses(session, views, missing))
    return (addresses.get(key[0]), key[1], addresses.get(key[2]))


def _apply_orphan_resolutions(session: Session, plan: MergePlan, resolutions: dict[NodeKey, dict[str, Any]],
                              decided: set[NodeKey], ours: BranchView, theirs: BranchView) -> None:
    """Decide the parent conflicts (:func:`_check_orphans`) that resolutions name.

    A node written under a parent the target deleted: ``ours`` leaves it unwritten; ``theirs``
    writes it and restores its deleted ancestors as the source has them; ``value`` too, with the
    given properties. A node of the target under one the merge deletes: ``ours`` keeps it and
    re-asserts its ancestors (``kept``); ``theirs`` deletes it and what is under it; ``value``
    keeps it with the given properties. A resolution whose conflict an earlier one made disappear
    still decides its node; an ancestor ``decided`` by its own resolution stays as decided (a child
    under a parent resolved to stay deleted is still a conflict).
    """
    changes = {c.key: c for c in plan.node_changes}
    restore: set[NodeKey] = set()  # ancestors of written nodes to bring back
    keep: set[NodeKey] = set()  # ancestors of kept nodes not to delete
    deleted_trees: list[NodeKey] = []
    valued: list[NodeKey] = []  # nodes written with the resolution's properties
    for key, resolution in sorted(resolutions.items()):
        take, change = resolution["take"], changes.get(key)
        written = change is not None and change.value is not None  # (a), else (b)
        if take == "ours" and written:
            plan.node_changes.remove(cast(NodeChange, change))
            continue
        if take == "theirs" and not written:
            deleted_trees.append(key)
            continue
        if take == "value":
            valued.append(key)
        (restore if written else keep).update((key[0], a) for a in ancestors_of(key[1]))
    if valued:
        held = node_states(session, ours, valued)
        for key in valued:
            old, version = changes.get(key), held.get(key)
            properties = resolutions[key]["value"]
            if old is not None and old.value is not None:  # (a): the source's node
                made = replace(old, value={**old.value, "properties": properties}, content_key=None,
                               needs_content=True, source="value")
            elif version is not None and (like := node_value(version)) is not None:  # (b): the target's
                made = _change(key, {**like, "properties": properties}, version, None, "value")
            else:
                continue  # nothing of the target's there: the check below reports what is left
            plan.node_changes = [c for c in plan.node_changes if c.key != key] + [made]
    if keep - decided:
        kept = keep - decided
        _undo_deletes(session, plan, ours, lambda c: c.key in kept)
    if restore - decided:
        wanted = restore - decided
        result = {c.key: c.value is not None for c in plan.node_changes}
        alive = set(node_states(session, ours, wanted - set(result)))
        dead = sorted(k for k in wanted if not result.get(k, k in alive))
        for key, version in sorted(node_states(session, theirs, dead).items()):
            plan.node_changes = [c for c in plan.node_changes if c.key != key]
            plan.node_changes.append(_change(key, node_value(version), None, version, "theirs"))
    for wid, path in deleted_trees:
        stmt, alias = visible_select(NodeVersion, ours, (NodeVersion.workspace_id, NodeVersion.path),
                                     NodeVersion.workspace_id == wid,
                                     or_(NodeVersion.path == path,
                                         NodeVersion.path.startswith(path + "/", autoescape=True)))
        planned = {c.key for c in plan.node_changes}
        for node in session.scalars(stmt.order_by(alias.path)):
            nkey = (wid, node.path)
            if nkey not in planned:
                plan.node_changes.append(_change(nkey, None, node, None, "theirs"))


def _check_orphans(session: Session, ours: BranchView, plan: MergePlan) -> None:
    """A merge must not leave a node without its parent on the target."""
    result = {c.key: c.value for c in plan.node_changes}
    parents = {(c.key[0], parent_of(c.key[1])) for c in plan.node_changes
               if c.value is not None and parent_of(c.key[1]) != "/"}
    alive = node_states(session, ours, parents)
    for change in plan.node_changes:
        wid, path = change.key
        parent = (wid, parent_of(path))
        if change.value is not None and parent[1] != "/":
            parent_alive = result[parent] is not None if parent in result else parent in alive
            if not parent_alive:
                plan.conflicts.append({"kind": "node", "workspace": ours.workspaces.get(wid), "path": path,
                                       "reason": "its parent is deleted on the target", "base": None,
                                       "ours": None, "theirs": change.value})
    # The target's children of the nodes this merge deletes: one query per 500 deleted paths.
    deleted: dict[int, list[str]] = defaultdict(list)
    for change in plan.node_changes:
        if change.value is None:
            deleted[change.key[0]].append(change.key[1])
    for wid, paths in sorted(deleted.items()):
        for start in range(0, len(paths), 500):
            stmt, alias = visible_select(NodeVersion, ours, (NodeVersion.workspace_id, NodeVersion.path),
                                         NodeVersion.workspace_id == wid,
                                         NodeVersion.parent_path.in_(paths[start:start + 500]))
            for child in session.scalars(stmt.order_by(alias.path)):
                if result.get((wid, child.path), "alive") is not None:
                    plan.conflicts.append({
                        "kind": "node", "workspace": ours.workspaces.get(wid), "path": child.path,
                        "reason": "the target has a child under a node the source deleted",
                        "base": None, "ours": node_value(child), "theirs": None})


def apply_merge(session: Session, ctx: WriteContext, plan: MergePlan,
                content_keys: dict[tuple[int, str], str | None]) -> dict[str, Any]:
    """Write a conflict-free plan as the context's revision; returns ``applied``
    (:meth:`MergePlan.preview`). ``content_keys`` maps ``(workspace id, canonical properties
    JSON)`` of each change with ``needs_content`` to its merged text's content key (chunks stored).

    Raises
    ------
    kg.errors.Conflict
        The plan still has conflicts.
    """
    if plan.conflicts:
        raise Conflict("cannot apply a merge with conflicts")
    now = utcnow()
    current = node_states(session, ctx.view, [c.key for c in plan.node_changes])
    written: list[NodeVersion] = []
    for change in plan.node_changes:
        wid, path = change.key
        ours = current.get(change.key)
        if change.value is None:
            if ours is None:
                continue
            live = node_value(ours)
            assert live is not None  # node_states holds live versions only
            session.add(_version(ctx, wid, path, ours.node_id, live, None, True, ours.created_at, now))
            continue
        key = change.content_key
        if change.needs_content:
            key = content_keys[(wid, canonical(change.value["properties"]))]
        created = ours.created_at if ours is not None else now
        version = _version(ctx, wid, path, change.node_id, change.value, key, False, created, now)
        session.add(version)
        written.append(version)
    session.flush()  # one flush for every version: the references need their ids
    for version in written:
        index_references(session, version, workspace=ctx.view.workspaces[version.workspace_id])
    addresses = node_addresses(session, ctx.repo.id, {end for rel in plan.relation_changes
                                                      for end in (rel.key[0], rel.key[2])})
    for rel in plan.relation_changes:
        f, t, to = rel.key
        value = rel.value
        session.add(RelationVersion(
            repo_id=ctx.repo.id, branch_id=ctx.branch.id, revision=ctx.revision, from_node_id=f,
            to_node_id=to, rel_type=t, weight=value["weight"] if value else None,
            properties=value["properties"] if value else {}, deleted=value is None, created_at=now,
            from_address=addresses.get(f), to_address=addresses.get(to),
            valid_from=_time(value.get("valid_from")) if value else None,
            valid_to=_time(value.get("valid_to")) if value else None,
            invalidated_by=value.get("invalidated_by") if value else None,
        ))
    applied = plan.preview()
    # The source's ingest records follow the nodes (kg.store.ingest_records.carry_records).
    taken = {c.key: (c.source, None if c.value is None else flat_value(c.value["node_type"], c.value["properties"]))
             for c in plan.node_changes}
    carry_records(session, ctx, _view(session, ctx.repo, plan.source, plan.source_revision), plan.base.view,
                  plan.base.since, taken)
    record_merge(session, ctx.repo, plan, ctx.revision)
    return applied


def record_merge(session: Session, repo: Repository, plan: MergePlan, target_revision: int) -> None:
    """Record the target (at ``target_revision``) as holding the source as of
    ``plan.source_revision``: the next merge's base; recorded even when nothing was applied.
    """
    source = get_branch(session, repo, plan.source)
    target = get_branch(session, repo, plan.target)
    session.add(Merge(repo_id=repo.id, source_branch_id=source.id, target_branch_id=target.id,
                      source_revision=plan.source_revision, target_revision=target_revision,
                      created_at=utcnow()))
    session.flush()


def _version(ctx: WriteContext, wid: int, path: str, node_id: str, value: dict[str, Any], content_key: str | None,
             deleted: bool, created_at: datetime | None, now: datetime) -> NodeVersion:
    return NodeVersion(
        repo_id=ctx.repo.id, branch_id=ctx.branch.id, workspace_id=wid, revision=ctx.revision,
        node_id=node_id, path=path, parent_path=parent_of(path), name=name_of(path),
        node_type=value["node_type"], properties={} if deleted else value["properties"],
        order=value["order"], deleted=deleted, content_key=None if deleted else content_key,
        created_at=created_at or now, updated_at=now,
    )


def canonical(properties: dict[str, Any]) -> str:
    """Compact JSON of properties, keys sorted, non-ASCII unescaped: the key of a merged value.

    >>> canonical({"b": 1, "a": "é"})
    '{"a":"é","b":1}'
    """
    return json.dumps(properties, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


# -- log, ahead / behind, reset -------------------------------------------------------------


#: Changes listed per revision of the log by default, and at most (``max_changes``).
DEFAULT_LOG_CHANGES = 100
MAX_LOG_CHANGES = 10_000


def revision_log(session: Session, view: BranchView, *, limit: int = 100, before: int | None = None,
                 max_changes: int = DEFAULT_LOG_CHANGES) -> list[dict[str, Any]]:
    """The revisions of a branch's history (its own, its ancestors' up to the fork), newest first,
    with their changes (:class:`kg.types.branches.Revision`). A restricted reader sees only those
    that changed a node it reads or a relation between two, and only those changes.
    ``max_changes`` (0 to 10,000) caps the changes listed (nodes, then relations, in write order),
    ``change_count`` counts all: at most ``max_changes + 1`` rows a revision and an index count,
    as a bulk import is one revision of millions of writes (a page at 20,000 nodes and 100,000
    relations took 3,950 ms listed whole, 33 ms so).

    Raises
    ------
    kg.errors.InvalidInput
        ``limit`` outside 1..1000, ``max_changes`` outside 0..10,000.
    """
    if isinstance(max_changes, bool) or not isinstance(max_changes, int) \
            or not 0 <= max_changes <= MAX_LOG_CHANGES:
        raise InvalidInput(f"changes must be between 0 and {MAX_LOG_CHANGES}", details={"changes": max_changes})
    revisions = last_revisions(session, view, limit=limit, before=before)
    names = {b.id: b.name for b in session.scalars(select(Branch).where(Branch.repo_id == view.repo.id))}
    return [revision_entry(session, view, rev, names, max_changes) for rev in revisions]


def revision_entry(session: Session, view: BranchView, rev: Revision, names: dict[int, str],
                   max_changes: int = DEFAULT_LOG_CHANGES) -> dict[str, Any]:
    """One revision of the log (:class:`kg.types.branches.Revision`) as the view's reader sees it:
    its changes in the workspaces it reads (``change_count`` 0 when it sees none), at most
    ``max_changes`` listed; ``names`` the repository's branch names by id.
    """
    node_scope, rel_scope = reader_scope(NodeVersion, view), reader_scope(RelationVersion, view)
    node_where = (NodeVersion.branch_id == rev.branch_id, NodeVersion.revision == rev.number, *node_scope)
    rel_where = (RelationVersion.branch_id == rev.branch_id, RelationVersion.revision == rev.number,
                 *rel_scope)
    # One row past the cap says whether the rows read are all there are; only then is a
    # count needed (a small revision costs no count at all).
    nodes = session.execute(
        select(NodeVersion.workspace_id, NodeVersion.path, NodeVersion.deleted)
        .where(*node_where).order_by(NodeVersion.id).limit(max_changes + 1)
    ).all()
    rels = session.execute(
        select(RelationVersion.from_node_id, RelationVersion.rel_type, RelationVersion.to_node_id,
               RelationVersion.deleted)
        .where(*rel_where).order_by(RelationVersion.id).limit(max_changes - len(nodes) + 1)
    ).all() if len(nodes) <= max_changes else []
    if len(nodes) > max_changes:
        count = (session.scalar(select(func.count()).select_from(NodeVersion).where(*node_where)) or 0) + (
            session.scalar(select(func.count()).select_from(RelationVersion).where(*rel_where)) or 0)
    elif len(nodes) + len(rels) > max_changes:
        count = len(nodes) + (session.scalar(select(func.count()).select_from(RelationVersion)
                                             .where(*rel_where)) or 0)
    else:
        count = len(nodes) + len(rels)
    nodes = nodes[:max_changes]
    rels = rels[:max_changes - len(nodes)]
    changes = [{"kind": "node", "op": "delete" if d else "put", "workspace": view.workspaces.get(w), "path": p}
               for w, p, d in nodes]
    if rels:
        addresses = _addresses(session, [view], {r[0] for r in rels} | {r[2] for r in rels})
        changes += [{"kind": "relation", "op": "delete" if d else "put", "from": addresses.get(f),
                     "type": t, "to": addresses.get(to)} for f, t, to, d in rels]
    return {"revision": rev.number, "branch": names.get(rev.branch_id),
            "created_at": rev.created_at.isoformat(),
            "message": rev.message, "actor": rev.actor, "changes": changes, "change_count": count}


def last_revisions(session: Session, view: BranchView, *, limit: int = 100,
                   before: int | None = None) -> list[Revision]:
    """The revision rows of the branch's history the reader sees, newest first, without changes.

    Raises
    ------
    kg.errors.InvalidInput
        ``limit`` outside 1..1000.
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 1000:
        raise InvalidInput("limit must be between 1 and 1000", details={"limit": limit})
    cond = or_(*((Revision.branch_id == b) & (Revision.number <= r) for b, r in view.chain))
    stmt = select(Revision).where(Revision.repo_id == view.repo.id, cond)
    if before is not None:
        stmt = stmt.where(Revision.number < before)
    if view.readable is not None:
        # A restricted reader sees the revisions that changed something it may read, and only
        # those changes: chosen in the query, so that a page holds ``limit`` of them.
        stmt = stmt.where(_changed_readable(view.readable, [b for b, _ in view.chain]))
    return list(session.scalars(stmt.order_by(Revision.number.desc()).limit(limit)))


def _changed_readable(readable: frozenset[int], branches: Sequence[int]) -> ColumnElement[bool]:
    """A revision wrote a node of ``readable`` or a relation between two such nodes."""
    node_scope = [NodeVersion.workspace_id.in_(sorted(readable))]
    rel_scope = [readable_node(c, readable, branches)
                 for c in (RelationVersion.from_node_id, RelationVersion.to_node_id)]
    return or_(
        exists().where(NodeVersion.branch_id == Revision.branch_id, NodeVersion.revision == Revision.number,
                       *node_scope),
        exists().where(RelationVersion.branch_id == Revision.branch_id,
                       RelationVersion.revision == Revision.number, *rel_scope))


def ahead_behind(session: Session, repo: Repository, branch: Branch, *,
                 readable: frozenset[int] | None = None) -> tuple[int, int]:
    """``(ahead, behind)``: revisions on the branch since its merge base with its parent, and on the
    parent since ((0, 0) for ``main``), counting with ``readable`` only those that touched it.
    """
    if branch.parent_id is None:
        return 0, 0
    parent = session.get(Branch, branch.parent_id)
    assert parent is not None  # branches.parent_id is a foreign key
    base = merge_base(session, repo, branch, parent)
    since_ours = base.since
    scope = [] if readable is None else [
        _changed_readable(readable, list(session.scalars(select(Branch.id).where(Branch.repo_id == repo.id))))]
    ahead = session.scalar(select(func.count()).select_from(Revision).where(
        Revision.branch_id == branch.id, Revision.number > since_ours, *scope)) or 0
    last_into_parent = session.scalar(select(func.max(Merge.target_revision)).where(
        Merge.source_branch_id == branch.id, Merge.target_branch_id == parent.id))
    last_from_parent = session.scalar(select(func.max(Merge.source_revision)).where(
        Merge.source_branch_id == parent.id, Merge.target_branch_id == branch.id))
    floor = max(x for x in (branch.base_revision or 0, last_into_parent or 0, last_from_parent or 0))
    behind = session.scalar(select(func.count()).select_from(Revision).where(
        Revision.branch_id == parent.id, Revision.number > floor, *scope)) or 0
    return ahead, behind


def reset_branch(session: Session, repo: Repository, branch_name: str) -> Branch:
    """Drop everything written on a branch and fork it again from its parent's head.

    Raises
    ------
    kg.errors.Conflict
        ``main``, or a branch with child branches (their view would change under them).
    """
    branch = get_branch(session, repo, branch_name)
    if branch.parent_id is None:
        raise Conflict("main has no parent to reset to", details={"branch": branch_name})
    children = session.scalars(select(Branch.name).where(Branch.parent_id == branch.id)).all()
    if children:
        raise Conflict(f"branch {branch_name!r} has child branches: {', '.join(sorted(children))}",
                       details={"branch": branch_name, "children": sorted(children)})
    for model in (RelationVersion, NodeVersion, IngestRecord, Revision):
        session.execute(cast(Table, model.__table__).delete().where(model.branch_id == branch.id))
    session.execute(cast(Table, Merge.__table__).delete().where(
        (Merge.source_branch_id == branch.id) | (Merge.target_branch_id == branch.id)))
    branch.base_revision = repo.head_revision
    branch.head_revision = repo.head_revision
    session.flush()
    bump_layout(session, repo)
    return branch
