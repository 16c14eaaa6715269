"""Nodes: path-addressed, versioned per branch (put, patch, get, delete, children, prefix)."""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import math
import re
import unicodedata
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import ColumnElement, Select, and_, bindparam, insert, or_, select
from sqlalchemy.orm import Session, defer

from kg.errors import Conflict, InvalidInput, NotFound
from kg.store.driver import DriverStatement, in_list_statement, in_params, json_value
from kg.store.models import Branch, NodeVersion, Reference, RelationVersion, Workspace, utcnow
from kg.store.paths import ancestors_of, name_of, parent_of, path_has_prefix, validate_prefix, validate_prefix_mode
from kg.store.paths import validate_path as validate_path  # re-exported: kg.ops.nodes, kg.ragnode.service
from kg.store.references import extract_references, index_references
from kg.store.repos import BranchView, WriteContext, workspace_id
from kg.store.rows import insert_node_versions
from kg.store.visibility import Chain, visible_select

FOLDER_TYPE = "kg:Folder"
MAX_PROPERTIES_BYTES = 8 * 1024 * 1024
#: The namespace of node ids (RFC 9562 name-based UUIDs, SHA-1): see :func:`node_uid`.
NODE_ID_NAMESPACE = uuid.UUID("6f1c9f0e-4d0b-5b8e-9a51-2f7e0c3d9b11")


def node_uid(repo_uid: str, workspace_id: int, path: str) -> str:
    """The id of the node at ``path`` of a workspace: the same on every branch, for ever.

    A node's identity across branches is its address (docs/concepts/branches.md): two branches that
    both create ``/entities/acme`` made one node, a node deleted and created again is that node
    again. So the id is a name-based UUID (version 5, RFC 9562 section 5.5) of the repository's
    uid, the workspace and the path: relations, references, index placements are keyed by address.

    >>> a = node_uid("00000000-0000-0000-0000-000000000001", 1, "/entities/acme")
    >>> a == node_uid("00000000-0000-0000-0000-000000000001", 1, "/entities/acme")
    True
    >>> a == node_uid("00000000-0000-0000-0000-000000000001", 2, "/entities/acme")
    False
    """
    return str(uuid.uuid5(NODE_ID_NAMESPACE, f"{repo_uid}\x1f{workspace_id}\x1f{path}"))


def node_uids(repo_uid: str, workspace_id: int, paths: Iterable[str]) -> list[str]:
    """:func:`node_uid` of many paths of one workspace: the name-based UUID (version 5, RFC 9562
    section 5.5: SHA-1 of the namespace and the name, version and variant bits set) computed with
    the shared prefix hashed once and no :class:`uuid.UUID` object per path (a bulk import's ids).

    >>> repo = "00000000-0000-0000-0000-000000000001"
    >>> node_uids(repo, 1, ["/entities/acme", "/é"]) == [node_uid(repo, 1, "/entities/acme"), node_uid(repo, 1, "/é")]
    True
    """
    prefix = hashlib.sha1(NODE_ID_NAMESPACE.bytes + f"{repo_uid}\x1f{workspace_id}\x1f".encode())
    out = []
    for path in paths:
        digest = prefix.copy()
        digest.update(path.encode())
        raw = bytearray(digest.digest()[:16])
        raw[6] = (raw[6] & 0x0F) | 0x50  # version 5
        raw[8] = (raw[8] & 0x3F) | 0x80  # RFC 9562 variant
        h = raw.hex()
        out.append(f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}")
    return out


@dataclass(frozen=True)
class NodeWrite:
    """What a write asks for, before it is stored (the content key is computed by the caller)."""

    node_type: str
    properties: dict[str, Any]
    order: float | None
    content_key: str | None


def validate_node_input(node_type: Any, properties: Any, order: Any, *, json_size_bound: int | None = None) -> None:
    """Check a node's type (1 to 255 characters), properties (a JSON object of at most
    ``MAX_PROPERTIES_BYTES`` as compact JSON, no NaN or infinity) and order (finite, or None).
    ``json_size_bound``: the caller parsed the properties from JSON text (so they are plain JSON,
    finite) and knows their serialisation is at most this long; within the limit they are not
    serialised again.

    Raises
    ------
    kg.errors.InvalidInput
        Which of the three is wrong, and why.
    """
    if not isinstance(node_type, str) or not node_type.strip() or len(node_type) > 255:
        raise InvalidInput("node_type must be a non-empty string of at most 255 characters")
    if not isinstance(properties, dict):
        raise InvalidInput("properties must be a JSON object")
    if order is not None and (isinstance(order, bool) or not isinstance(order, (int, float))
                              or not math.isfinite(order)):
        raise InvalidInput("order must be a finite number")
    if json_size_bound is not None and json_size_bound <= MAX_PROPERTIES_BYTES:
        return
    try:
        size = len(json.dumps(properties, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"properties must be plain JSON: {exc}") from exc
    if size > MAX_PROPERTIES_BYTES:
        raise InvalidInput(f"properties are larger than {MAX_PROPERTIES_BYTES} bytes")


@functools.lru_cache(maxsize=256)
def _find_node_stmt(chain: tuple[tuple[int, int], ...]) -> Select[Any]:
    """The address lookup of a chain, built once (bound parameters): a write touching many nodes
    does not rebuild the window query per node.
    """
    stmt, _ = visible_select(
        NodeVersion, Chain(chain), (NodeVersion.workspace_id, NodeVersion.path),
        NodeVersion.workspace_id == bindparam("find_wid"), NodeVersion.path == bindparam("find_path"),
    )
    return stmt


def find_node(session: Session, view: BranchView, workspace: str, path: str) -> NodeVersion | None:
    """The live version of the node at ``workspace:path``, or None; ``path`` is not validated but
    looked up in NFC, as :func:`validate_path` stores it.
    """
    wid = workspace_id(view, workspace)
    path = unicodedata.normalize("NFC", path) if isinstance(path, str) else path
    found: NodeVersion | None = session.scalar(_find_node_stmt(view.chain), {"find_wid": wid, "find_path": path})
    return found


def get_node(session: Session, view: BranchView, workspace: str, path: str) -> NodeVersion:
    """The visible version of the node at ``workspace:path``.

    Raises
    ------
    kg.errors.NotFound
        No node there on this branch.
    """
    path = validate_path(path)
    found = find_node(session, view, workspace, path)
    if found is None:
        raise NotFound(
            f"node {workspace}:{path} not found on branch {view.branch.name!r}",
            details={"workspace": workspace, "path": path},
        )
    return found


def nodes_by_id(session: Session, view: BranchView, node_ids: Iterable[str]) -> dict[str, NodeVersion]:
    """The live versions of the given node ids (deleted or unknown ids absent); a window query per
    500 ids.
    """
    return {version.node_id: version for stmt in _by_id_selects(view, node_ids) for version in session.scalars(stmt)}


def node_properties_by_id(session: Session, view: BranchView, node_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
    """The properties of the live versions of ``node_ids`` (deleted or unknown ids absent): what
    :func:`nodes_by_id` answers of them, as one Core statement of two columns per 500 ids (no ORM
    instance, no other column read); the same visibility (chain, revision, tombstones, reader).
    """
    connection = session.connection()
    return {node_id: properties for stmt in _by_id_selects(view, node_ids)
            for node_id, properties in connection.execute(
                stmt.with_only_columns(NodeVersion.node_id, NodeVersion.properties))}


#: One statement object, built once: its compiled form and result columns are reused as they are.
_VERSION_PROPERTIES = (select(NodeVersion.id, NodeVersion.properties)
                       .where(NodeVersion.id.in_(bindparam("ids", expanding=True))))


def version_properties(session: Session, version_ids: Iterable[int]) -> dict[int, dict[str, Any]]:
    """The properties of node versions by their ids (primary keys): one statement of two columns.

    For versions a view was found to see (:class:`NodeHead` rows of :func:`visible_node_heads` or
    :func:`node_heads_by_id`): their properties are those :func:`node_properties_by_id` answers for
    that view, read without its window query (what search attaches to its hits).
    """
    ids = list(dict.fromkeys(version_ids))
    if not ids:
        return {}
    if len(ids) > _DRIVER_IN_MAX:
        return {vid: properties for vid, properties in session.connection().execute(_VERSION_PROPERTIES, {"ids": ids})}
    statement = in_list_statement(_properties_of, _PROPERTIES_BY_COUNT, len(ids))
    return {vid: json_value(properties) for vid, properties in statement.rows_in(session, in_params(ids))}


#: A search's page of hits (k <= 100 at chunk or node granularity, a few more with context) reads
#: its properties on the driver's cursor, one statement compiled per length; more by SQLAlchemy.
_DRIVER_IN_MAX = 128
_PROPERTIES_BY_COUNT: dict[int, DriverStatement] = {}


def _properties_of(names: list[str]) -> Any:
    return select(NodeVersion.id, NodeVersion.properties).where(NodeVersion.id.in_([bindparam(n) for n in names]))


def _by_id_selects(view: BranchView, node_ids: Iterable[str]) -> Iterator[Any]:
    ids = list(dict.fromkeys(node_ids))
    for start in range(0, len(ids), 500):
        stmt, _ = visible_select(NodeVersion, view, (NodeVersion.node_id,),
                                 NodeVersion.node_id.in_(ids[start:start + 500]))
        yield stmt


def _insert_version(session: Session, ctx: WriteContext, wid: int, path: str, *,
                    node_id: str, write: NodeWrite, created_at: datetime | None,
                    deleted: bool = False) -> NodeVersion:
    now = utcnow()
    version = NodeVersion(
        repo_id=ctx.repo.id, branch_id=ctx.branch.id, workspace_id=wid, revision=ctx.revision,
        node_id=node_id, path=path, parent_path=parent_of(path), name=name_of(path),
        node_type=write.node_type, properties=write.properties, order=write.order,
        deleted=deleted, content_key=write.content_key, created_at=created_at or now,
        updated_at=now,
    )
    session.add(version)
    session.flush()
    index_references(session, version, workspace=ctx.view.workspaces[wid])
    return version


def live_rows(session: Session, view: BranchView, addresses: Iterable[tuple[int, str]],
              columns: tuple[Any, ...], *, lookup_batch: int = 500,
              scan_above: int = 5_000) -> Iterator[Sequence[Any]]:
    """``(workspace id, path, *columns)`` of the live nodes among ``addresses`` (``(workspace id,
    path)``, paths in NFC) as ``view`` sees them, in no order: a statement per ``lookup_batch``
    paths of a workspace, or one scan of a workspace when more than ``scan_above`` of its paths are
    asked; plain Core rows, no ORM row per node. What the session flushed is seen; flush the ORM's
    pending writes first.
    """
    by_ws: dict[int, list[str]] = {}
    for wid, path in addresses:
        by_ws.setdefault(wid, []).append(path)
    if not by_ws or view.repo.head_revision == 0:
        return
    cols = (NodeVersion.workspace_id, NodeVersion.path, *columns)
    connection = session.connection()
    for wid, paths in by_ws.items():
        if len(paths) > scan_above:
            stmt, _ = visible_select(NodeVersion, view, (NodeVersion.workspace_id, NodeVersion.path),
                                     NodeVersion.workspace_id == wid)
            wanted = set(paths)
            yield from (row for row in connection.execute(stmt.with_only_columns(*cols)) if row[1] in wanted)
            continue
        for start in range(0, len(paths), lookup_batch):
            part = paths[start:start + lookup_batch]
            if view.readable is None:  # one statement per chain length, built once (a small write's cost)
                params: dict[str, Any] = {"wid": wid, "paths": part}
                for i, (branch_id, revision) in enumerate(view.chain):
                    params[f"chain_b{i}"], params[f"chain_r{i}"] = branch_id, revision
                yield from connection.execute(_lookup_stmt(len(view.chain), cols), params)
                continue
            stmt, _ = visible_select(NodeVersion, view, (NodeVersion.workspace_id, NodeVersion.path),
                                     NodeVersion.workspace_id == wid, NodeVersion.path.in_(part))
            yield from connection.execute(stmt.with_only_columns(*cols))


@functools.lru_cache(maxsize=64)
def _lookup_stmt(depth: int, columns: tuple[Any, ...]) -> Any:
    """:func:`live_rows`'s lookup of paths of a workspace (``wid``, ``paths``) on a chain of
    ``depth`` branches, each ``(chain_b<i>, chain_r<i>)`` a bound parameter: the window query is
    built once for every branch as deep (a new branch's first write builds none)."""
    chain: Any = tuple((bindparam(f"chain_b{i}"), bindparam(f"chain_r{i}")) for i in range(depth))
    stmt, _ = visible_select(NodeVersion, Chain(chain), (NodeVersion.workspace_id, NodeVersion.path),
                             NodeVersion.workspace_id == bindparam("wid"),
                             NodeVersion.path.in_(bindparam("paths", expanding=True)))
    return stmt.with_only_columns(*columns)



def check_if_revision(current: NodeVersion | None, if_revision: int | None, workspace: str, path: str) -> None:
    """Refuse a write based on a stale read (optimistic concurrency): ``current``, the node in the
    write transaction, changed after ``if_revision``, was deleted, or appeared when the writer saw
    none (``0``). None checks nothing.

    Raises
    ------
    kg.errors.InvalidInput
        ``if_revision`` is not an integer >= 0.
    kg.errors.Conflict
        The node changed, was deleted or appeared.
    """
    if if_revision is None:
        return
    if isinstance(if_revision, bool) or not isinstance(if_revision, int) or if_revision < 0:
        raise InvalidInput("if_revision must be an integer >= 0", details={"if_revision": if_revision})
    if current is None and if_revision > 0:
        raise Conflict(f"node {workspace}:{path} no longer exists (if_revision={if_revision})",
                       details={"workspace": workspace, "path": path, "if_revision": if_revision})
    if current is not None and current.revision > if_revision:
        raise Conflict(
            f"node {workspace}:{path} changed at revision {current.revision}, after {if_revision}",
            details={"workspace": workspace, "path": path, "if_revision": if_revision,
                     "revision": current.revision},
        )


def put_node(
    session: Session,
    ctx: WriteContext,
    workspace: str,
    path: str,
    write: NodeWrite,
    *,
    parents: bool = False,
    if_revision: int | None = None,
    validated: bool = False,
) -> tuple[NodeVersion, bool]:
    """Create or replace (properties whole) the node at ``workspace:path``: ``(version, created)``.
    ``parents`` makes missing ancestors ``kg:Folder`` nodes; ``if_revision`` is checked on the one
    lookup this write makes; ``validated``: the caller ran :func:`validate_node_input` already.

    Raises
    ------
    kg.errors.InvalidInput
        Bad type, properties or order.
    kg.errors.NotFound
        A missing parent without ``parents``.
    kg.errors.Conflict
        The node changed after ``if_revision``.
    """
    path = validate_path(path)
    if not validated:
        validate_node_input(write.node_type, write.properties, write.order)
    view = ctx.view
    wid = workspace_id(view, workspace)
    existing = find_node(session, view, workspace, path)
    check_if_revision(existing, if_revision, workspace, path)
    parent = parent_of(path)
    if parent != "/" and find_node(session, view, workspace, parent) is None:
        if not parents:
            raise NotFound(
                f"parent {workspace}:{parent} does not exist (use parents=true to create it)",
                details={"workspace": workspace, "path": path, "parent": parent},
            )
        for ancestor in ancestors_of(path):
            if find_node(session, view, workspace, ancestor) is None:
                _insert_version(session, ctx, wid, ancestor, node_id=node_uid(ctx.repo.uid, wid, ancestor),
                                write=NodeWrite(FOLDER_TYPE, {}, None, None), created_at=None)
    node_id = node_uid(ctx.repo.uid, wid, path)
    if existing is None:
        return _insert_version(session, ctx, wid, path, node_id=node_id, write=write,
                               created_at=None), True
    return _insert_version(session, ctx, wid, path, node_id=node_id, write=write,
                           created_at=existing.created_at), False


@dataclass(frozen=True)
class NodePut:
    """A node version :func:`put_nodes` wrote, as stored; ``created``: no live node was there."""

    workspace: str
    workspace_id: int
    version_id: int
    node_id: str
    path: str
    node_type: str
    properties: dict[str, Any]
    order: float | None
    content_key: str | None
    revision: int
    created_at: datetime
    updated_at: datetime
    created: bool

    def api_dict(self) -> dict[str, Any]:
        """The API shape of the version, as :func:`kg.store.models.node_dict` gives it."""
        return {"id": self.node_id, "workspace": self.workspace, "path": self.path, "name": name_of(self.path),
                "parent_path": parent_of(self.path), "node_type": self.node_type, "properties": self.properties,
                "order": self.order, "revision": self.revision, "created_at": self.created_at.isoformat(),
                "updated_at": self.updated_at.isoformat()}


def put_nodes(session: Session, ctx: WriteContext, writes: Sequence[tuple[str, str, NodeWrite]], *,
              parents: bool = False) -> list[NodePut]:
    """Create or replace many nodes, ``(workspace, path, write)`` each, as :func:`put_node` would one
    after the other, ancestors first (by depth, stably): the versions written, in the order given.

    The same rows as those calls (versions, ``kg:Folder`` ancestors made by ``parents``, reference
    rows; ids in write order, a folder before the node it was made for), set-based: one lookup of
    the paths and their ancestors on the branch chain per workspace, one insert of the versions
    and one of the references, whatever the number of writes. The caller validated the paths (NFC,
    :func:`validate_path`) and inputs (:func:`validate_node_input`), and names each address once
    (a second version at one revision would be refused nowhere).

    Raises
    ------
    kg.errors.NotFound
        An unknown workspace, or a parent neither on the branch nor written here, without
        ``parents`` (the first such write, shallowest first).
    kg.errors.InvalidInput
        A malformed reference in some properties.
    """
    view = ctx.view
    wids = [workspace_id(view, ws) for ws, _, _ in writes]
    wanted: set[tuple[int, str]] = set()
    for wid, (_, path, _) in zip(wids, writes, strict=True):
        wanted.add((wid, path))
        wanted.update((wid, ancestor) for ancestor in ancestors_of(path))
    session.flush()  # what this transaction wrote through the ORM (a batch's deletes) is seen
    live: dict[tuple[int, str], datetime] = {
        (wid, path): created_at
        for wid, path, created_at in live_rows(session, view, wanted, (NodeVersion.created_at,))}
    present = set(live)
    now = utcnow()
    rows: list[tuple[int, str, NodeWrite, datetime]] = []  # (wid, path, write, created_at), in write order
    row_of = [0] * len(writes)
    folder = NodeWrite(FOLDER_TYPE, {}, None, None)
    for i in sorted(range(len(writes)), key=lambda i: writes[i][1].count("/")):
        workspace, path, write = writes[i]
        wid, parent = wids[i], parent_of(path)
        if parent != "/" and (wid, parent) not in present:
            if not parents:
                raise NotFound(
                    f"parent {workspace}:{parent} does not exist (use parents=true to create it)",
                    details={"workspace": workspace, "path": path, "parent": parent},
                )
            for ancestor in ancestors_of(path):
                if (wid, ancestor) not in present:
                    rows.append((wid, ancestor, folder, now))
                    present.add((wid, ancestor))
        row_of[i] = len(rows)
        rows.append((wid, path, write, live.get((wid, path), now)))
        present.add((wid, path))
    references = [extract_references(write.properties, workspace=view.workspaces[wid]) if write.properties else []
                  for wid, _, write, _ in rows]
    by_workspace: dict[int, list[str]] = {}
    for wid, path, _, _ in rows:
        by_workspace.setdefault(wid, []).append(path)
    uids = {(wid, path): uid for wid, paths in by_workspace.items()
            for path, uid in zip(paths, node_uids(ctx.repo.uid, wid, paths), strict=True)}
    revision = ctx.revision
    columns: dict[str, list[Any]] = {
        "workspace_id": [r[0] for r in rows],
        "node_id": [uids[(r[0], r[1])] for r in rows],
        "path": [r[1] for r in rows],
        "parent_path": [parent_of(r[1]) for r in rows],
        "name": [name_of(r[1]) for r in rows],
        "node_type": [r[2].node_type for r in rows],
        "properties": [r[2].properties for r in rows],
        "sort_order": [r[2].order for r in rows],
        "content_key": [r[2].content_key for r in rows],
        "created_at": [r[3] for r in rows],
        "updated_at": [now] * len(rows),
    }
    ids = insert_node_versions(session, columns, revision, repo_id=ctx.repo.id, branch_id=ctx.branch.id,
                               deleted=False)
    reference_rows = [
        {"repo_id": ctx.repo.id, "branch_id": ctx.branch.id, "revision": revision, "source_node_id": node_id,
         "source_version_id": vid, "property_key": key, "target_workspace": ws, "target_path": target}
        for refs, vid, node_id in zip(references, ids, columns["node_id"], strict=True)
        for key, ws, target in refs]
    if reference_rows:
        session.execute(insert(Reference), reference_rows)
    out = []
    for i, (workspace, path, write) in enumerate(writes):
        at = row_of[i]
        out.append(NodePut(workspace, wids[i], ids[at], columns["node_id"][at], path, write.node_type,
                           write.properties, write.order, write.content_key, revision, rows[at][3], now,
                           (wids[i], path) not in live))
    return out


def merge_properties(current: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """Shallow merge into a new dict: keys of ``patch`` replace, a ``None`` value removes the key.

    >>> merge_properties({"a": 1, "b": 2}, {"b": None, "c": 3})
    {'a': 1, 'c': 3}
    """
    merged = dict(current)
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    return merged


def children_exist(session: Session, view: BranchView, workspace: str, path: str) -> bool:
    """Whether some live node has ``path`` as its parent."""
    wid = workspace_id(view, workspace)
    stmt, _ = visible_select(NodeVersion, view, (NodeVersion.workspace_id, NodeVersion.path),
                             NodeVersion.workspace_id == wid, NodeVersion.parent_path == path)
    return session.execute(stmt.limit(1)).first() is not None


def descendants(session: Session, view: BranchView, workspace: str, path: str) -> list[NodeVersion]:
    """Every visible node strictly below ``path``, in no particular order."""
    wid = workspace_id(view, workspace)
    stmt, alias = visible_select(
        NodeVersion, view, (NodeVersion.workspace_id, NodeVersion.path),
        NodeVersion.workspace_id == wid, NodeVersion.path.startswith(path + "/", autoescape=True),
    )
    return list(session.scalars(stmt))


def delete_node(session: Session, ctx: WriteContext, workspace: str, path: str, *,
                recursive: bool = False) -> list[NodeVersion]:
    """Tombstone the node (with ``recursive``, its descendants) and every relation touching them, in
    one revision: an edge never outlives an endpoint, so a node created again starts with none.
    Returns the versions hidden, the node first, then its descendants by path.

    Raises
    ------
    kg.errors.NotFound
        No such node.
    kg.errors.Conflict
        The node has children and ``recursive`` is False.
    """
    node = get_node(session, ctx.view, workspace, path)
    path = node.path  # in NFC
    below = descendants(session, ctx.view, workspace, path)
    if below and not recursive:
        raise Conflict(
            f"node {workspace}:{path} has {len(below)} descendant(s); use recursive=true",
            details={"workspace": workspace, "path": path, "descendants": len(below)},
        )
    wid = workspace_id(ctx.view, workspace)
    hidden = [node, *sorted(below, key=lambda v: v.path)]
    for version in hidden:
        _insert_version(
            session, ctx, wid, version.path, node_id=version.node_id,
            write=NodeWrite(version.node_type, {}, None, None), created_at=version.created_at,
            deleted=True,
        )
    remove_relations_of(session, ctx, [v.node_id for v in hidden])
    return hidden


def remove_relations_of(session: Session, ctx: WriteContext, node_ids: Iterable[str]) -> int:
    """Tombstone every visible relation touching one of the nodes; how many. A window query per 500
    ids over ``ix_relation_versions_key`` and ``ix_relation_versions_to``: O(e) for e edges.
    """
    ids = list(dict.fromkeys(node_ids))
    key = (RelationVersion.from_node_id, RelationVersion.rel_type, RelationVersion.to_node_id)
    seen: set[tuple[str, str, str]] = set()
    now = utcnow()
    for start in range(0, len(ids), 500):
        part = ids[start:start + 500]
        stmt, _ = visible_select(RelationVersion, ctx.view, key,
                                 RelationVersion.from_node_id.in_(part) | RelationVersion.to_node_id.in_(part))
        for edge in session.scalars(stmt).all():
            edge_key = (edge.from_node_id, edge.rel_type, edge.to_node_id)
            if edge_key in seen:
                continue
            seen.add(edge_key)
            session.add(relation_tombstone(ctx, edge, now))
    session.flush()
    return len(seen)


def relation_tombstone(ctx: WriteContext, edge: RelationVersion, now: Any) -> RelationVersion:
    """A new, unsaved tombstone of ``edge`` at the context's revision (``now``: its ``created_at``)."""
    return RelationVersion(
        repo_id=ctx.repo.id, branch_id=ctx.branch.id, revision=ctx.revision,
        from_node_id=edge.from_node_id, to_node_id=edge.to_node_id, rel_type=edge.rel_type,
        weight=edge.weight, properties={}, deleted=True, created_at=now,
        from_address=edge.from_address, to_address=edge.to_address,
    )


def node_addresses(session: Session, repo_id: int, node_ids: Iterable[str]) -> dict[str, str]:
    """``{node id: "workspace:path"}`` of nodes with a version, live or not, on any branch: 500 ids a
    statement, an index probe of ``ix_node_versions_node_id`` per branch.
    """
    ids = sorted(set(node_ids))
    if not ids:
        return {}
    branches = list(session.scalars(select(Branch.id).where(Branch.repo_id == repo_id)))
    out: dict[str, str] = {}
    for start in range(0, len(ids), 500):
        stmt = (select(NodeVersion.node_id, Workspace.name, NodeVersion.path)
                .join(Workspace, Workspace.id == NodeVersion.workspace_id)
                .where(NodeVersion.branch_id.in_(branches), NodeVersion.node_id.in_(ids[start:start + 500]))
                .distinct())
        for node_id, workspace, path in session.execute(stmt):
            out[node_id] = f"{workspace}:{path}"
    return out


#: A child's sort key: (has no value, value's type rank, value, name); JSON-encodable.
SortKey = tuple[bool, int, "float | str | bool", str]
_ORDER_BY_RE = r"^-?(order|name|properties\.[^.\s][^\s]{0,254})$"
#: A children sort (:func:`child_order`), for the OpenAPI document.
ORDER_BY_PATTERN = _ORDER_BY_RE


@dataclass(frozen=True)
class ChildOrder:
    """A children sort: ``field`` is ``"order"``, ``"name"`` or ``"properties.<key>"``; either way
    children without the value come last and ties go by name.
    """

    field: str = "order"
    descending: bool = False

    @property
    def spec(self) -> str:
        """The field with a leading ``-`` when descending (what cursors record)."""
        return ("-" if self.descending else "") + self.field

    def key(self, v: NodeVersion) -> SortKey:
        """``(missing, rank, value, name)``: ``missing`` when the child has no sortable value (absent,
        null, a list or an object); ``rank`` 0 for numbers, 1 strings, 2 booleans.
        """
        if self.field == "order":
            value: Any = v.order
        elif self.field == "name":
            value = v.name
        else:
            props = v.properties if isinstance(v.properties, dict) else {}
            value = props.get(self.field[len("properties."):])
        if isinstance(value, bool):
            return (False, 2, value, v.name)
        if isinstance(value, (int, float)) and math.isfinite(value):
            return (False, 0, float(value), v.name)
        if isinstance(value, str):
            return (False, 1, value, v.name)
        return (True, 0, 0.0, v.name)

    def compare(self, a: SortKey, b: SortKey) -> int:
        """-1, 0 or 1 as ``a`` sorts before, with or after ``b``."""
        if a[0] != b[0]:
            return -1 if b[0] else 1
        if (a[1], a[2]) != (b[1], b[2]):
            before = (a[1], a[2]) < (b[1], b[2])  # same rank: same type
            return (1 if before else -1) if self.descending else (-1 if before else 1)
        return (a[3] > b[3]) - (a[3] < b[3])


def child_order(order_by: str | None = None, direction: str | None = None) -> ChildOrder:
    """Parse a children sort: ``order`` (default), ``name`` or ``properties.<key>``, a leading ``-``
    for descending; ``direction`` (``asc``/``desc``) overrides it.

    Raises
    ------
    kg.errors.InvalidInput
        An unknown field or direction, or ``-field`` with ``direction="asc"``.

    Examples
    --------
    >>> child_order("properties.position", "desc").spec
    '-properties.position'
    """
    spec = "order" if order_by is None else order_by
    if not isinstance(spec, str) or not re.match(_ORDER_BY_RE, spec):
        raise InvalidInput("order_by must be 'order', 'name' or 'properties.<key>', optionally with a "
                           "leading '-' for descending", details={"order_by": order_by})
    if direction not in (None, "asc", "desc"):
        raise InvalidInput("direction must be 'asc' or 'desc'", details={"direction": direction})
    descending = spec.startswith("-")
    if descending and direction == "asc":
        raise InvalidInput("order_by with '-' is descending: it contradicts direction=asc",
                           details={"field": "direction", "order_by": order_by, "direction": direction})
    return ChildOrder(spec.lstrip("-"), descending or direction == "desc")


def _children_select(session: Session, view: BranchView, workspace: str, parent: str) -> Select[Any]:
    """The winning versions of ``parent``'s children (the parent checked to exist)."""
    if parent != "/":
        get_node(session, view, workspace, parent)
    wid = workspace_id(view, workspace)
    stmt, _ = visible_select(NodeVersion, view, (NodeVersion.workspace_id, NodeVersion.path),
                             NodeVersion.workspace_id == wid, NodeVersion.parent_path == parent)
    return stmt


def list_children(session: Session, view: BranchView, workspace: str, parent: str, *,
                  order: ChildOrder | None = None, node_type: str | None = None) -> list[NodeVersion]:
    """The children of ``parent`` (``/``: top level), of ``node_type`` if given, sorted by ``order``
    (:func:`child_order`; numbers, then strings, then booleans, then those without the value).

    Raises
    ------
    kg.errors.NotFound
        No parent node.
    """
    stmt = _children_select(session, view, workspace, parent)
    how = order or ChildOrder()

    def cmp(a: NodeVersion, b: NodeVersion) -> int:
        return how.compare(how.key(a), how.key(b))

    # The type is filtered on each child's winning version: a node's type can change between
    # versions, and filtering the versions first would pick an older one as the winner.
    children = [v for v in session.scalars(stmt) if node_type is None or v.node_type == node_type]
    return sorted(children, key=functools.cmp_to_key(cmp))


def list_children_page(session: Session, view: BranchView, workspace: str, parent: str, *, limit: int = 100,
                       cursor: str | None = None, order: ChildOrder | None = None,
                       node_type: str | None = None) -> tuple[list[NodeVersion], str | None]:
    """One page of :func:`list_children`; ``cursor`` (the sort and the last child's sort key) must
    come from the same ``order``. Keyset paging: a child written or deleted between two pages
    neither repeats nor hides another. By ``order`` or ``name`` the database sorts the winners and
    reads ``limit + 1`` rows; by a property each page sorts every child in Python, O(n log n): the
    databases order JSON values by type differently.

    Raises
    ------
    kg.errors.InvalidInput
        A limit outside 1..10000, or a cursor of another sort.
    kg.errors.NotFound
        No parent node.
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 10_000:
        raise InvalidInput("limit must be between 1 and 10000", details={"limit": limit})
    how = order or ChildOrder()
    after = _decode_child_cursor(cursor, how) if cursor else None
    if how.field in ("order", "name"):
        return _children_page_in_sql(session, view, workspace, parent, limit, after, how, node_type)
    rows = list_children(session, view, workspace, parent, order=how, node_type=node_type)
    if after is not None:
        rows = [v for v in rows if how.compare(how.key(v), after) > 0]
    next_cursor = _encode_child_cursor(how, how.key(rows[limit - 1])) if len(rows) > limit else None
    return rows[:limit], next_cursor


def _children_page_in_sql(session: Session, view: BranchView, workspace: str, parent: str, limit: int,
                          after: SortKey | None, how: ChildOrder,
                          node_type: str | None) -> tuple[list[NodeVersion], str | None]:
    """:func:`list_children_page` sorted in SQL as :meth:`ChildOrder.compare` sorts (names by code
    point: ``COLLATE "C"`` on PostgreSQL, SQLite's binary collation), after the cursor's key.
    """
    stmt, model = _children_select(session, view, workspace, parent), NodeVersion
    if node_type is not None:  # on the winning version (see list_children)
        stmt = stmt.where(model.node_type == node_type)
    binary = "C" if session.get_bind().dialect.name == "postgresql" else "BINARY"
    name = model.name.collate(binary)
    by_order = how.field == "order"
    value: Any = model.order if by_order else name
    ranked = value.desc() if how.descending else value.asc()
    if after is not None:
        after_missing, _, after_value, after_name = after
        if after_missing:  # past the valued children: the valueless ones after the name
            stmt = stmt.where(model.order.is_(None), name > after_name)
        else:
            beyond = value < after_value if how.descending else value > after_value
            later = or_(beyond, and_(value == after_value, name > after_name))
            stmt = stmt.where(or_(model.order.is_(None), later) if by_order else later)
    keys = (model.order.is_(None).asc(), ranked, name.asc()) if by_order else (ranked,)
    stmt = stmt.order_by(*keys).limit(limit + 1)
    rows = list(session.scalars(stmt))
    next_cursor = _encode_child_cursor(how, how.key(rows[limit - 1])) if len(rows) > limit else None
    return rows[:limit], next_cursor


def _encode_child_cursor(order: ChildOrder, key: SortKey) -> str:
    return encode_cursor(json.dumps({"o": order.spec, "k": list(key)}))


def _decode_child_cursor(cursor: str, order: ChildOrder) -> SortKey:
    """The sort key a children cursor points after; it must have been made with ``order``."""
    bad = InvalidInput("invalid cursor: not one of this listing's next_cursor values",
                       details={"field": "cursor", "cursor": cursor})
    try:
        data = json.loads(decode_cursor(cursor))
        missing, rank, value, name = data["k"]
        spec = data["o"]
    except (InvalidInput, ValueError, TypeError, KeyError) as exc:
        raise bad from exc
    kinds = {0: (int, float), 1: (str,), 2: (bool,)}
    if not (isinstance(missing, bool) and rank in kinds and not isinstance(rank, bool) and isinstance(name, str)
            and isinstance(value, kinds[rank]) and (rank == 2 or not isinstance(value, bool))):
        raise bad
    if spec != order.spec:
        raise InvalidInput(f"the cursor was made for order_by {spec!r}, not {order.spec!r}",
                           details={"field": "cursor", "cursor": cursor})
    return (missing, rank, float(value) if rank == 0 else value, name)


def parents_with_children(session: Session, view: BranchView, workspace: str, paths: Sequence[str]) -> set[str]:
    """Which of ``paths`` (a page of a tree) have a live child: a window query per 500 paths,
    returning parent paths only.
    """
    wid = workspace_id(view, workspace)
    out: set[str] = set()
    unique = list(dict.fromkeys(paths))
    for start in range(0, len(unique), 500):
        part = unique[start:start + 500]
        stmt, _ = visible_select(NodeVersion, view, (NodeVersion.workspace_id, NodeVersion.path),
                                 NodeVersion.workspace_id == wid, NodeVersion.parent_path.in_(part))
        out.update(session.scalars(stmt.with_only_columns(NodeVersion.parent_path).distinct()))
    return out


def encode_cursor(path: str) -> str:
    """An opaque cursor after ``path``: URL-safe base64 of its UTF-8 bytes, unpadded.

    >>> encode_cursor("/a/b")
    'L2EvYg'
    >>> decode_cursor(encode_cursor("/entities/acmé"))
    '/entities/acmé'
    """
    return base64.urlsafe_b64encode(path.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> str:
    """The path a cursor of :func:`encode_cursor` points after.

    Raises
    ------
    kg.errors.InvalidInput
        Not base64 of UTF-8 text.
    """
    try:
        return base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidInput("invalid cursor", details={"field": "cursor", "cursor": cursor}) from exc


def path_under(prefix: str, mode: str = "segments") -> ColumnElement[bool] | None:
    """:func:`kg.store.paths.path_has_prefix` as SQL on ``NodeVersion.path``; None for ``/``.

    Raises
    ------
    kg.errors.InvalidInput
        An unknown mode.
    """
    validate_prefix_mode(mode)
    if prefix == "/":
        return None
    if mode == "raw" or prefix.endswith("/"):
        return NodeVersion.path.startswith(prefix, autoescape=True)
    return or_(NodeVersion.path == prefix, NodeVersion.path.startswith(prefix + "/", autoescape=True))


def _decode_prefix_cursor(cursor: str, prefix: str, mode: str) -> str:
    """The path under ``prefix`` a listing's cursor points after, or a 422 (never a silent restart)."""
    bad = InvalidInput("invalid cursor: not one of this listing's next_cursor values",
                       details={"field": "cursor", "cursor": cursor})
    try:
        after = decode_cursor(cursor)
        validate_path(after)
    except InvalidInput as exc:
        raise bad from exc
    if encode_cursor(after) != cursor or not path_has_prefix(after, prefix, mode):
        raise bad
    return after


def list_prefix(session: Session, view: BranchView, workspace: str, prefix: str, *,
                limit: int = 1000, cursor: str | None = None,
                mode: str = "segments") -> tuple[list[NodeVersion], str | None]:
    """One page of the nodes under ``prefix`` (:func:`kg.store.paths.path_has_prefix`), by path.

    Raises
    ------
    kg.errors.InvalidInput
        Bad prefix, mode, cursor, or a limit outside 1..10000.
    """
    prefix = validate_prefix(prefix)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 10_000:
        raise InvalidInput("limit must be between 1 and 10000", details={"limit": limit})
    wid = workspace_id(view, workspace)
    where = [NodeVersion.workspace_id == wid]
    under = path_under(prefix, mode)
    if under is not None:
        where.append(under)
    after = _decode_prefix_cursor(cursor, prefix, mode) if cursor else None
    if after is not None:
        where.append(NodeVersion.path > after)
    stmt, alias = visible_select(NodeVersion, view, (NodeVersion.workspace_id, NodeVersion.path), *where)
    rows = list(session.scalars(stmt.order_by(alias.path).limit(limit + 1)))
    next_cursor = encode_cursor(rows[limit - 1].path) if len(rows) > limit else None
    return rows[:limit], next_cursor


def visible_nodes(session: Session, view: BranchView, *, workspace_ids: list[int] | None = None,
                  path_prefix: str | None = None, path_prefix_mode: str = "segments",
                  with_properties: bool = True) -> list[NodeVersion]:
    """Every live node (in no order), optionally of some workspace ids and under a path prefix.
    ``with_properties=False`` leaves the properties unloaded: reading them is then an error.
    """
    stmt = _visible_nodes_select(view, workspace_ids, path_prefix, path_prefix_mode)
    if not with_properties:
        stmt = stmt.options(defer(NodeVersion.properties, raiseload=True))
    return list(session.scalars(stmt))


def _visible_nodes_select(view: BranchView, workspace_ids: list[int] | None, path_prefix: str | None,
                          path_prefix_mode: str) -> Any:
    where: list[ColumnElement[bool]] = []
    if workspace_ids is not None:
        where.append(NodeVersion.workspace_id.in_(workspace_ids))
    under = path_under(path_prefix, path_prefix_mode) if path_prefix else None
    if under is not None:
        where.append(under)
    stmt, _ = visible_select(NodeVersion, view, (NodeVersion.workspace_id, NodeVersion.path), *where)
    return stmt


class NodeHead(NamedTuple):
    """The columns of a visible node version that search needs (no properties); ``id`` is the
    version's (:func:`version_properties` reads its properties by it)."""

    node_id: str
    workspace_id: int
    branch_id: int
    path: str
    node_type: str
    content_key: str | None
    id: int


_HEAD_COLUMNS = (NodeVersion.node_id, NodeVersion.workspace_id, NodeVersion.branch_id, NodeVersion.path,
                 NodeVersion.node_type, NodeVersion.content_key, NodeVersion.id)


def visible_node_heads(session: Session, view: BranchView, *, workspace_ids: list[int] | None = None,
                       path_prefix: str | None = None, path_prefix_mode: str = "segments") -> list[NodeHead]:
    """:func:`visible_nodes` as plain rows of :class:`NodeHead`, by Core: at 100,000 nodes an ORM
    instance per row made search's first call after a write 3.7 s, this about 1 s
    (``bench/scale.py``; still O(nodes) per new branch state).
    """
    stmt = _visible_nodes_select(view, workspace_ids, path_prefix, path_prefix_mode).with_only_columns(
        *_HEAD_COLUMNS)
    # Core, not the ORM's result machinery: the rows are plain tuples of columns.
    return list(map(NodeHead._make, session.connection().execute(stmt).all()))


def node_heads_by_id(session: Session, view: BranchView, node_ids: Iterable[str]) -> dict[str, NodeHead]:
    """:func:`nodes_by_id` as plain rows of :class:`NodeHead`, by Core."""
    out: dict[str, NodeHead] = {}
    for stmt in _by_id_selects(view, node_ids):
        for row in session.connection().execute(stmt.with_only_columns(*_HEAD_COLUMNS)):
            out[row[0]] = NodeHead._make(row)
    return out


def node_workspaces(session: Session, branches: Sequence[int], node_ids: Iterable[str]) -> dict[str, int]:
    """Node id -> workspace id of the ids with a version on ``branches`` (one or several chains);
    a statement per 500 ids (``ix_node_versions_node_id``).
    """
    ids = list(dict.fromkeys(node_ids))
    out: dict[str, int] = {}
    for start in range(0, len(ids), 500):
        rows = session.execute(
            select(NodeVersion.node_id, NodeVersion.workspace_id)
            .where(NodeVersion.branch_id.in_(list(branches)), NodeVersion.node_id.in_(ids[start:start + 500]))
            .distinct())
        out.update({node_id: wid for node_id, wid in rows})
    return out


def workspace_by_id(session: Session, wid: int) -> Workspace:
    """The workspace row with id ``wid``."""
    return session.get_one(Workspace, wid)


def written_workspaces(session: Session, branch: Branch) -> set[int]:
    """The workspace ids of what was written on ``branch`` itself (node versions, relation versions'
    sources): two statements on the ``(branch, revision)`` indexes.
    """
    written = set(session.scalars(select(NodeVersion.workspace_id).where(NodeVersion.branch_id == branch.id)
                                  .distinct()))
    sources = list(session.scalars(select(RelationVersion.from_node_id)
                                   .where(RelationVersion.branch_id == branch.id).distinct()))
    if sources:
        branches = list(session.scalars(select(Branch.id).where(Branch.repo_id == branch.repo_id)))
        written |= set(node_workspaces(session, branches, sources).values())
    return written
