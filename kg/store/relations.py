"""Relations: typed, weighted edges between nodes, versioned per branch.

A relation is unique per (from node, to node, type) on a branch; re-asserting it replaces it.
Endpoints are node ids, which are their addresses' (``node_uid``): an edge joins two paths on
every branch, across workspaces; deleting a node removes its edges. Besides writes: the reads
behind the graph (``kg.rag.graph``): the rows of a branch's networkx view (columns, streamed),
and NEIGHBORS in SQL with ``ORDER BY ... LIMIT`` for reads the view cannot serve.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Select,
    and_,
    bindparam,
    case,
    exists,
    false,
    func,
    or_,
    select,
)
from sqlalchemy.orm import Session

from kg.errors import InvalidInput, NotFound
from kg.store.models import NodeVersion, RelationVersion, UTCDateTime, Workspace, utcnow
from kg.store.nodes import get_node, nodes_by_id, relation_tombstone
from kg.store.paths import parse_address
from kg.store.repos import BranchView, WriteContext
from kg.store.visibility import visible_select

#: A relation type (:func:`validate_relation_type`; at most 255 characters): the JSON-schema
#: pattern of the HTTP API's OpenAPI document.
RELATION_TYPE_PATTERN = r"^[A-Za-z_][A-Za-z0-9_:\-.]*$"
_TYPE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_:\-.]{0,254}$")
#: A relation's identity on a branch: the versions of one key are one relation's history.
RELATION_KEY = (RelationVersion.from_node_id, RelationVersion.rel_type, RelationVersion.to_node_id)


def validate_relation_type(rel_type: Any) -> str:
    """Check a relation type: at most 255 characters, a letter or ``_``, then letters, digits,
    ``_:-.``.

    Raises
    ------
    kg.errors.InvalidInput
        Not a string of that form.

    Examples
    --------
    >>> validate_relation_type("schema:mentions")
    'schema:mentions'
    """
    if not isinstance(rel_type, str) or not _TYPE_RE.match(rel_type):
        raise InvalidInput(
            f"invalid relation type {rel_type!r}: start with a letter or '_', then letters, "
            "digits, '_', ':', '-', '.'",
            details={"type": rel_type},
        )
    return rel_type


def _utc(value: datetime) -> datetime:
    """A time read by Core (SQLite keeps no zone): timezone-aware, UTC."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def _validate_weight(weight: Any) -> float | None:
    if weight is None:
        return None
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight):
        raise InvalidInput("weight must be a finite number or null", details={"weight": weight})
    return float(weight)


def relate(
    session: Session,
    ctx: WriteContext,
    source: str,
    target: str,
    rel_type: str,
    *,
    weight: float | None = None,
    properties: dict[str, Any] | None = None,
    valid_from: datetime | None = None,
    valid_to: datetime | None = None,
    now: datetime | None = None,
) -> tuple[RelationVersion, bool]:
    """Assert the edge ``source -[rel_type]-> target``: ``(version, created)``; a re-assertion
    replaces weight (None: last in NEIGHBORS), properties and validity whole. ``valid_from`` and
    ``valid_to`` are UTC, checked by the caller (:mod:`kg.graph.validity`). A ``rel_type``
    single-valued in the source's workspace invalidates the source's other ones current at
    ``valid_from`` or ``now``, in this revision (``invalidated_by``: :func:`relation_ref`).

    Raises
    ------
    kg.errors.InvalidInput
        Bad type, weight or properties.
    kg.errors.NotFound
        An endpoint does not exist on the branch.
    """
    validate_relation_type(rel_type)
    weight = _validate_weight(weight)
    properties = properties or {}
    if not isinstance(properties, dict):
        raise InvalidInput("relation properties must be a JSON object")
    try:
        json.dumps(properties, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"relation properties must be plain JSON: {exc}") from exc
    src = get_node(session, ctx.view, *parse_address(source))
    dst = get_node(session, ctx.view, *parse_address(target))
    existing = find_relation(session, ctx.view, src.node_id, dst.node_id, rel_type)
    version = RelationVersion(
        repo_id=ctx.repo.id, branch_id=ctx.branch.id, revision=ctx.revision,
        from_node_id=src.node_id, to_node_id=dst.node_id, rel_type=rel_type, weight=weight,
        properties=properties, deleted=False, created_at=utcnow(),
        from_address=f"{ctx.view.workspaces[src.workspace_id]}:{src.path}",
        to_address=f"{ctx.view.workspaces[dst.workspace_id]}:{dst.path}",
        valid_from=valid_from, valid_to=valid_to, invalidated_by=None,
    )
    if rel_type in single_valued_types(session, src.workspace_id):
        start = valid_from or now or utcnow()
        ref = relation_ref(version.from_address, rel_type, version.to_address)
        stmt, _ = visible_select(RelationVersion, ctx.view, RELATION_KEY, RelationVersion.from_node_id == src.node_id,
                                 RelationVersion.rel_type == rel_type, RelationVersion.to_node_id != dst.node_id)
        for old in session.scalars(stmt).all():
            if (old.valid_from is None or old.valid_from <= start) and (old.valid_to is None or start < old.valid_to):
                session.add(_successor(ctx, old, valid_to=start, invalidated_by=ref))
    session.add(version)
    session.flush()
    return version, existing is None


#: The key of a workspace's ``config`` that lists its single-valued relation types.
SINGLE_VALUED_KEY = "single_valued_relation_types"


def single_valued_types(session: Session, workspace_id: int) -> frozenset[str]:
    """The types a workspace declares single-valued (``config["single_valued_relation_types"]``)."""
    ws = session.get(Workspace, workspace_id)
    declared = (ws.config or {}).get(SINGLE_VALUED_KEY) if ws is not None else None
    return frozenset(declared or ())


def relation_ref(from_address: str | None, rel_type: str, to_address: str | None) -> str:
    """The reference of a relation kept in ``invalidated_by``.

    >>> relation_ref("library:/dana", "works_at", "library:/acme")
    'library:/dana|works_at|library:/acme'
    """
    return f"{from_address}|{rel_type}|{to_address}"


def _successor(ctx: WriteContext, old: RelationVersion, *, valid_to: datetime | None,
               invalidated_by: str | None) -> RelationVersion:
    return RelationVersion(
        repo_id=ctx.repo.id, branch_id=ctx.branch.id, revision=ctx.revision,
        from_node_id=old.from_node_id, to_node_id=old.to_node_id, rel_type=old.rel_type, weight=old.weight,
        properties=old.properties, deleted=False, created_at=utcnow(),
        from_address=old.from_address, to_address=old.to_address,
        valid_from=old.valid_from, valid_to=valid_to, invalidated_by=invalidated_by,
    )


def restamp_relation(session: Session, ctx: WriteContext, edge: RelationVersion,
                     properties: dict[str, Any]) -> RelationVersion:
    """:func:`relate` with other properties for a live edge just read: no endpoint lookups, not
    flushed.
    """
    version = RelationVersion(
        repo_id=ctx.repo.id, branch_id=ctx.branch.id, revision=ctx.revision,
        from_node_id=edge.from_node_id, to_node_id=edge.to_node_id, rel_type=edge.rel_type, weight=edge.weight,
        properties=properties, deleted=False, created_at=utcnow(),
        from_address=edge.from_address, to_address=edge.to_address,
        valid_from=edge.valid_from, valid_to=edge.valid_to, invalidated_by=edge.invalidated_by,
    )
    session.add(version)
    return version


def invalidate(session: Session, ctx: WriteContext, source: str, target: str, rel_type: str, *,
               valid_to: datetime, invalidated_by: str | None = None) -> RelationVersion:
    """Close the edge's interval at ``valid_to`` with ``invalidated_by`` in a new version
    (``include_invalid`` and an earlier ``as_of`` still read it).

    Raises
    ------
    kg.errors.InvalidInput
        Bad type, or ``valid_to`` earlier than the edge's ``valid_from``.
    kg.errors.NotFound
        An endpoint or the edge does not exist on the branch.
    """
    validate_relation_type(rel_type)
    src = get_node(session, ctx.view, *parse_address(source))
    dst = get_node(session, ctx.view, *parse_address(target))
    old = find_relation(session, ctx.view, src.node_id, dst.node_id, rel_type)
    if old is None:
        raise NotFound(f"no relation {source} -[{rel_type}]-> {target} on this branch",
                       details={"from": source, "to": target, "type": rel_type})
    if old.valid_from is not None and valid_to < old.valid_from:
        raise InvalidInput("valid_to must not be earlier than the relation's valid_from",
                           details={"field": "valid_to", "valid_from": old.valid_from.isoformat(),
                                    "valid_to": valid_to.isoformat()})
    version = _successor(ctx, old, valid_to=valid_to, invalidated_by=invalidated_by)
    session.add(version)
    session.flush()
    return version


def find_relation(session: Session, view: BranchView, from_id: str, to_id: str,
                  rel_type: str) -> RelationVersion | None:
    """The live version of one edge (endpoints not checked), or None."""
    stmt, _ = visible_select(
        RelationVersion, view, RELATION_KEY,
        RelationVersion.from_node_id == from_id, RelationVersion.to_node_id == to_id,
        RelationVersion.rel_type == rel_type,
    )
    found: RelationVersion | None = session.scalar(stmt)
    return found


def unrelate(session: Session, ctx: WriteContext, source: str, target: str,
             rel_type: str | None = None) -> int:
    """Tombstone the edges from ``source`` to ``target`` of ``rel_type`` (None: every type); how many.

    Raises
    ------
    kg.errors.InvalidInput
        Bad type.
    kg.errors.NotFound
        An endpoint does not exist.
    """
    if rel_type is not None:
        validate_relation_type(rel_type)
    src = get_node(session, ctx.view, *parse_address(source))
    dst = get_node(session, ctx.view, *parse_address(target))
    where = [RelationVersion.from_node_id == src.node_id, RelationVersion.to_node_id == dst.node_id]
    if rel_type is not None:
        where.append(RelationVersion.rel_type == rel_type)
    stmt, _ = visible_select(RelationVersion, ctx.view, RELATION_KEY, *where)
    removed = 0
    now = utcnow()
    for edge in session.scalars(stmt).all():
        session.add(relation_tombstone(ctx, edge, now))
        removed += 1
    session.flush()
    return removed


def visible_relations(session: Session, view: BranchView, *, node_ids: Iterable[str] | None = None,
                      ) -> list[RelationVersion]:
    """Live edges between live nodes (touching ``node_ids`` if given), in no order."""
    where = []
    if node_ids is not None:
        ids = list(node_ids)
        if not ids:
            return []
        where.append(or_(RelationVersion.from_node_id.in_(ids), RelationVersion.to_node_id.in_(ids)))
    stmt, _ = visible_select(RelationVersion, view, RELATION_KEY, *where)
    edges = list(session.scalars(stmt))
    endpoints = {e.from_node_id for e in edges} | {e.to_node_id for e in edges}
    alive = nodes_by_id(session, view, endpoints)
    return [e for e in edges if e.from_node_id in alive and e.to_node_id in alive]


# -- reads behind the graph view and NEIGHBORS ----------------------------------------------

#: Above this many ids, live node addresses are read by one scan of the branch instead of by id.
_SCAN_ABOVE_IDS = 5_000


@dataclass(frozen=True, slots=True)
class NeighborRow:
    """One edge seen from a node, with the other node's address (a row of :func:`list_neighbors`)."""

    node_id: str
    workspace: str
    path: str
    relation_type: str
    weight: float | None
    properties: dict[str, Any]
    direction: str
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    invalidated_by: str | None = None


def stream_visible_edges(session: Session, view: BranchView, *, batch: int = 20_000,
                      ) -> Iterator[tuple[str, str, str, float | None, dict[str, Any] | None,
                                          datetime | None, datetime | None, str | None]]:
    """Stream the live relations (endpoints not checked) as ``(from id, type, to id, weight,
    properties, valid_from, valid_to, invalidated_by)``: one window query read ``batch`` rows at a
    time (a server-side cursor on PostgreSQL) while the session stays open.
    """
    stmt, _ = visible_select(RelationVersion, view, RELATION_KEY)
    stmt = stmt.with_only_columns(RelationVersion.from_node_id, RelationVersion.rel_type,
                                  RelationVersion.to_node_id, RelationVersion.weight,
                                  RelationVersion.properties, RelationVersion.valid_from,
                                  RelationVersion.valid_to, RelationVersion.invalidated_by)
    # Core, not ORM, execution: a third less time per row on a million rows.
    utc = _utc
    for row in session.connection().execute(stmt.execution_options(yield_per=batch)):
        vf, vt = row[5], row[6]
        yield (row[0], row[1], row[2], row[3], row[4], vf if vf is None else utc(vf),
               vt if vt is None else utc(vt), row[7])


def read_node_addresses(session: Session, view: BranchView, node_ids: Collection[str] | None = None,
                        ) -> dict[str, tuple[int, str]]:
    """``{node id: (workspace id, path)}`` of the live nodes among ``node_ids`` (None: all): up to
    5,000 by id, 500 a statement; more by one scan of the branch's nodes (columns only).
    """
    out: dict[str, tuple[int, str]] = {}
    cols = (NodeVersion.node_id, NodeVersion.workspace_id, NodeVersion.path)
    if node_ids is None or len(node_ids) > _SCAN_ABOVE_IDS:
        wanted = None if node_ids is None else set(node_ids)
        stmt, _ = visible_select(NodeVersion, view, (NodeVersion.node_id,))
        rows = session.connection().execute(stmt.with_only_columns(*cols).execution_options(yield_per=20_000))
        for node_id, wid, path in rows:
            if wanted is None or node_id in wanted:
                out[node_id] = (wid, path)
        return out
    ids = list(node_ids)
    for start in range(0, len(ids), 500):
        stmt, _ = visible_select(NodeVersion, view, (NodeVersion.node_id,),
                                 NodeVersion.node_id.in_(ids[start:start + 500]))
        for node_id, wid, path in session.execute(stmt.with_only_columns(*cols)):
            out[node_id] = (wid, path)
    return out


def count_relation_versions(session: Session, view: BranchView, *, at_most: int) -> int:
    """The relation versions the chain allows, counted up to ``at_most + 1`` (O(at_most), on
    ``ix_relation_versions_branch_revision``): whether to build a view in the request.
    """
    chain = or_(*(and_(RelationVersion.branch_id == b, RelationVersion.revision <= r) for b, r in view.chain)) \
        if view.chain else false()
    inner = select(RelationVersion.id).where(chain).limit(at_most + 1).subquery()
    return int(session.scalar(select(func.count()).select_from(inner)) or 0)


def list_relation_changes(session: Session, *, branch_id: int, after: int, upto: int,
                            ) -> list[tuple[str, str, str, float | None, dict[str, Any] | None, bool,
                                            datetime | None, datetime | None]]:
    """The relation versions written on the branch itself with ``after < revision <= upto``, in
    revision then id order: ``(from id, type, to id, weight, properties, deleted, valid_from,
    valid_to, invalidated_by)``. O(changes) on ``ix_relation_versions_branch_revision``.
    """
    stmt = (select(RelationVersion.from_node_id, RelationVersion.rel_type, RelationVersion.to_node_id,
                   RelationVersion.weight, RelationVersion.properties, RelationVersion.deleted,
                   RelationVersion.valid_from, RelationVersion.valid_to, RelationVersion.invalidated_by)
            .where(RelationVersion.branch_id == branch_id, RelationVersion.revision > after,
                   RelationVersion.revision <= upto)
            .order_by(RelationVersion.revision, RelationVersion.id))
    return [tuple(row) for row in session.execute(stmt)]


def list_node_changes(session: Session, *, branch_id: int, after: int, upto: int,
                        ) -> list[tuple[str, int, str, bool]]:
    """The node versions written on the branch itself with ``after < revision <= upto``, in revision
    then id order: ``(node id, workspace id, path, deleted)``. O(changes).
    """
    stmt = (select(NodeVersion.node_id, NodeVersion.workspace_id, NodeVersion.path, NodeVersion.deleted)
            .where(NodeVersion.branch_id == branch_id, NodeVersion.revision > after,
                   NodeVersion.revision <= upto)
            .order_by(NodeVersion.revision, NodeVersion.id))
    return [tuple(row) for row in session.execute(stmt)]  # type: ignore[misc]


def _chain_binds(cols: Any, depth: int, *, plain: bool = True) -> ColumnElement[bool]:
    """The versions a chain of ``depth`` allows, bound as ``b0, r0, b1, r1, ...``; ``plain=False``
    writes ``branch_id + 0`` and ``revision + 0``, which no index serves.
    """
    branch, revision = (cols.branch_id, cols.revision) if plain else (cols.branch_id + 0, cols.revision + 0)
    return or_(*(and_(branch == bindparam(f"b{i}"), revision <= bindparam(f"r{i}")) for i in range(depth)))


def _priority_binds(cols: Any, depth: int) -> ColumnElement[Any]:
    return case(*((cols.branch_id == bindparam(f"b{i}"), i) for i in range(depth)), else_=depth)


@functools.lru_cache(maxsize=64)
def _candidates_statement(side: str, null_weights: bool, typed: bool) -> Select[Any]:
    """The first ``:scan`` versions of ``:node_id``'s edges on one side, with or without a weight,
    in index order and nothing else: no filter the planner could trade the order for.
    """
    v = RelationVersion.__table__.alias("v")
    out = side == "OUT"
    mine, other = (v.c.from_node_id, v.c.to_node_id) if out else (v.c.to_node_id, v.c.from_node_id)
    address = v.c.to_address if out else v.c.from_address
    return (select(v.c.id, v.c.branch_id, v.c.revision, v.c.deleted, other.label("other"), address.label("address"),
                   v.c.rel_type, v.c.weight)
            .where(mine == bindparam("node_id"), v.c.weight.is_(None) if null_weights else v.c.weight.is_not(None),
                   *([v.c.rel_type.in_(bindparam("types", expanding=True))] if typed else []))
            .order_by(*(() if null_weights else (v.c.weight.desc(),)), address, v.c.rel_type)
            .limit(bindparam("scan")))


@functools.lru_cache(maxsize=256)
def _winners_statement(side: str, depth: int, restricted: bool, temporal: bool = False) -> Select[Any]:
    """Which of ``:ids`` are their edge's winner on the chain with a live (``:readable``) node at the
    other end, valid at ``:at`` when ``temporal``: index probes per version.
    """
    v = RelationVersion.__table__.alias("v")
    w = RelationVersion.__table__.alias("w")
    nv = NodeVersion.__table__.alias("nv")
    alive = NodeVersion.__table__.alias("alive")
    other = v.c.to_node_id if side == "OUT" else v.c.from_node_id
    winner = (select(w.c.id)
              .where(w.c.from_node_id == v.c.from_node_id, w.c.rel_type == v.c.rel_type,
                     w.c.to_node_id == v.c.to_node_id, _chain_binds(w.c, depth))
              .order_by(_priority_binds(w.c, depth), w.c.revision.desc(), w.c.id.desc())
              .limit(1).correlate(v).scalar_subquery())
    live = (select(nv.c.id)
            .where(nv.c.node_id == other, _chain_binds(nv.c, depth))
            .order_by(_priority_binds(nv.c, depth), nv.c.revision.desc(), nv.c.id.desc())
            .limit(1).correlate(v).scalar_subquery())
    other_live = exists().where(
        alive.c.id == live, alive.c.deleted == false(),
        *([alive.c.workspace_id.in_(bindparam("readable", expanding=True))] if restricted else []))
    valid: list[ColumnElement[bool]] = []
    if temporal:
        at = bindparam("at", type_=UTCDateTime())
        valid = [or_(v.c.valid_from.is_(None), v.c.valid_from <= at), or_(v.c.valid_to.is_(None), v.c.valid_to > at)]
    return (select(v.c.id, v.c.properties, v.c.valid_from, v.c.valid_to, v.c.invalidated_by)
            .where(v.c.id.in_(bindparam("ids", expanding=True)), *valid, v.c.id == winner, other_live))


def _neighbor_sort_key(row: NeighborRow) -> tuple[bool, float, str, str, str]:
    return (row.weight is None, -row.weight if row.weight is not None else 0.0,
            f"{row.workspace}:{row.path}", row.relation_type, row.direction)


def list_neighbors(session: Session, view: BranchView, node_id: str, *, direction: str = "BOTH",
                  types: Collection[str] | None = None, limit: int, offset: int = 0,
                  at: datetime | None = None) -> list[NeighborRow]:
    """NEIGHBORS of one node in SQL: its visible edges to live nodes, by weight descending (null
    last), the other node's address (code point), type, direction; ``limit`` + ``offset`` cut the
    page (ask ``limit + 1`` to learn whether more exist); ``at``: only edges valid then
    (``valid_from <= at < valid_to``, null unbounded), before the page is cut.

    Up to four ordered streams (out and in, with and without a weight). Each reads the first ``s``
    versions in the stable order from ``ix_relation_versions_out`` or ``_in`` (an index range cut
    by the database, whatever the degree), keeps those visible on the branch (on the chain, not a
    tombstone: in Python; the edge's winner with a live, readable node at the other end: one
    statement of index probes), and is final once the versions read go past the ``limit +
    offset``-th kept; else ``s`` grows fourfold and the stream is read again. The streams merge in
    Python. A hub costs O(limit + offset + skipped versions), not O(degree), on SQLite and
    PostgreSQL alike; a restricted reader's unreadable ends are dropped before the cut.
    """
    if not view.chain:
        return []
    need = limit + offset
    chain = view.chain
    allowed = dict(chain)  # branch id -> the newest revision of it the chain reads
    base: dict[str, Any] = {"node_id": node_id}
    winner_params: dict[str, Any] = {}
    for i, (branch_id, revision) in enumerate(chain):
        winner_params[f"b{i}"], winner_params[f"r{i}"] = branch_id, revision
    if view.readable is not None:
        winner_params["readable"] = sorted(view.readable)
    if at is not None:
        winner_params["at"] = at
    if types:
        base["types"] = sorted(types)
    found: list[NeighborRow] = []
    for side in ("OUT", "IN"):
        if direction not in (side, "BOTH"):
            continue
        winners = _winners_statement(side, len(chain), view.readable is not None, at is not None)
        for null_weights in (False, True):
            candidates = _candidates_statement(side, null_weights, bool(types))
            scan = max(32, 2 * need + 8)
            while True:
                rows = session.execute(candidates, {**base, "scan": scan}).all()
                seen = [r for r in rows if not r.deleted and r.revision <= allowed.get(r.branch_id, -1)]
                ok: dict[int, Any] = {}  # winner version id -> (properties, valid_from, valid_to, invalidated_by)
                kept: list[Any] = []
                i, step = 0, max(32, 2 * need)
                while i < len(seen):  # probe in order, only as far as the page needs
                    part = seen[i:i + step]
                    ok.update((vid, rest) for vid, *rest in
                              session.execute(winners, {**winner_params, "ids": [r.id for r in part]}))
                    kept += [r for r in part if r.id in ok]
                    i += len(part)
                    if len(kept) >= need and (i == len(seen) or (seen[i].weight, seen[i].address)
                                              != (kept[need - 1].weight, kept[need - 1].address)):
                        break  # what is not probed sorts after the page
                if len(rows) < scan:  # the stream is read to its end
                    break
                edge = (rows[-1].weight, rows[-1].address)
                # versions tied with the last one read on (weight, address) may continue past it
                kept = [r for r in kept if (r.weight, r.address) != edge]
                if len(kept) >= need:
                    break
                scan *= 4
            # in the stable order (the index orders types in the database's collation)
            kept.sort(key=lambda r: (r.weight is None, -r.weight if r.weight is not None else 0.0, r.address,
                                     r.rel_type))
            for r in kept[:need]:
                workspace, _, path = r.address.partition(":")
                props, vf, vt, inv = ok[r.id]
                found.append(NeighborRow(r.other, workspace, path, r.rel_type, r.weight, props or {}, side,
                                         vf if vf is None else _utc(vf), vt if vt is None else _utc(vt), inv))
    found.sort(key=_neighbor_sort_key)
    return found[offset:need]
