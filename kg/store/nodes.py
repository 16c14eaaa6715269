"""Nodes: path-addressed, versioned per branch (put, patch, get, delete, children, prefix)."""

from __future__ import annotations

import base64
import functools
import json
import math
import re
import unicodedata
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import ColumnElement, Select, and_, bindparam, or_, select
from sqlalchemy.orm import Session, defer

from kg.errors import Conflict, InvalidInput, NotFound
from kg.store.models import Branch, NodeVersion, RelationVersion, Workspace, utcnow
from kg.store.paths import ancestors_of, name_of, parent_of, path_has_prefix, validate_prefix, validate_prefix_mode
from kg.store.paths import validate_path as validate_path  # re-exported: kg.ops.nodes, kg.ragnode.service
from kg.store.references import index_references
from kg.store.repos import BranchView, WriteContext, workspace_id
from kg.store.visibility import Chain, visible_select

FOLDER_TYPE = "kg:Folder"
MAX_PROPERTIES_BYTES = 8 * 1024 * 1024
#: The namespace of node ids (RFC 9562 name-based UUIDs, SHA-1): see :func:`node_uid`.
NODE_ID_NAMESPACE = uuid.UUID("6f1c9f0e-4d0b-5b8e-9a51-2f7e0c3d9b11")


def node_uid(repo_uid: str, workspace_id: int, path: str) -> str:
    """The id of the node at ``path`` of a workspace: the same on every branch, for ever.

    A node's identity across branches is its address (DESIGN.md, "Branches"): two branches
    that both create ``/entities/acme`` made one node, and a node deleted and created again
    at its path is that node again. The id is therefore derived from the address, so every
    table keyed by node id (relations, references, index placements) is keyed by address.

    Parameters
    ----------
    repo_uid : str
        The repository's uid (a UUID string; ids never collide across repositories).
    workspace_id : int
        The workspace's id.
    path : str
        The node's path (validated).

    Returns
    -------
    str
        A name-based UUID (version 5) in its 36-character text form.

    References
    ----------
    RFC 9562, "Universally Unique IDentifiers (UUIDs)", section 5.5 (UUIDv5).

    Examples
    --------
    >>> a = node_uid("00000000-0000-0000-0000-000000000001", 1, "/entities/acme")
    >>> a == node_uid("00000000-0000-0000-0000-000000000001", 1, "/entities/acme")
    True
    >>> a == node_uid("00000000-0000-0000-0000-000000000001", 2, "/entities/acme")
    False
    """
    return str(uuid.uuid5(NODE_ID_NAMESPACE, f"{repo_uid}\x1f{workspace_id}\x1f{path}"))


@dataclass(frozen=True)
class NodeWrite:
    """What a write asks for, before it is stored (the content key is computed by the caller)."""

    node_type: str
    properties: dict[str, Any]
    order: float | None
    content_key: str | None


def validate_node_input(node_type: Any, properties: Any, order: Any) -> None:
    """Check a node's type, properties and order.

    Parameters
    ----------
    node_type : str
        A non-empty type name of at most 255 characters.
    properties : dict
        A JSON object, at most ``MAX_PROPERTIES_BYTES`` (8 MiB) as compact JSON, no NaN or
        infinity.
    order : float or None
        A finite sort position among siblings, or None.

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
    try:
        size = len(json.dumps(properties, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"properties must be plain JSON: {exc}") from exc
    if size > MAX_PROPERTIES_BYTES:
        raise InvalidInput(f"properties are larger than {MAX_PROPERTIES_BYTES} bytes")


@functools.lru_cache(maxsize=256)
def _find_node_stmt(chain: tuple[tuple[int, int], ...]) -> Select[Any]:
    """The address lookup of a branch state (its chain), built once: the values are bound
    parameters, so a write touching many nodes does not rebuild the window query per node."""
    stmt, _ = visible_select(
        NodeVersion, Chain(chain), (NodeVersion.workspace_id, NodeVersion.path),
        NodeVersion.workspace_id == bindparam("find_wid"), NodeVersion.path == bindparam("find_path"),
    )
    return stmt


def find_node(session: Session, view: BranchView, workspace: str, path: str) -> NodeVersion | None:
    """The version of the node at ``workspace:path`` that ``view`` sees, or None.

    Parameters
    ----------
    session : Session
        The caller's transaction.
    view : BranchView
        The branch state read.
    workspace : str
        Workspace name.
    path : str
        The node's path (not validated here; looked up in NFC, as :func:`validate_path` stores it).

    Returns
    -------
    NodeVersion or None
        The visible, live version; None when there is none (never created, or deleted).

    Raises
    ------
    kg.errors.NotFound
        Unknown workspace.
    """
    wid = workspace_id(view, workspace)
    path = unicodedata.normalize("NFC", path) if isinstance(path, str) else path
    found: NodeVersion | None = session.scalar(_find_node_stmt(view.chain), {"find_wid": wid, "find_path": path})
    return found


def get_node(session: Session, view: BranchView, workspace: str, path: str) -> NodeVersion:
    """The node at ``workspace:path``.

    Parameters
    ----------
    session : Session
        The caller's transaction.
    view : BranchView
        The branch state read.
    workspace : str
        Workspace name.
    path : str
        The node's path.

    Returns
    -------
    NodeVersion
        The visible version.

    Raises
    ------
    kg.errors.InvalidInput
        Bad path.
    kg.errors.NotFound
        Unknown workspace, or no node there on this branch.
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
    """The visible versions of the given node ids (deleted or unknown ids are absent).

    Parameters
    ----------
    session : Session
        The caller's transaction.
    view : BranchView
        The branch state read.
    node_ids : iterable of str
        Node ids (:func:`node_uid`); duplicates are read once.

    Returns
    -------
    dict of str to NodeVersion
        Node id -> its visible, live version.

    Notes
    -----
    One window query per 500 ids (``visible_select`` by node id).
    """
    return {version.node_id: version for stmt in _by_id_selects(view, node_ids) for version in session.scalars(stmt)}


def _by_id_selects(view: BranchView, node_ids: Iterable[str]) -> Iterator[Any]:
    """The visible versions of ``node_ids`` (each once), a statement per 500 ids."""
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


def check_if_revision(current: NodeVersion | None, if_revision: int | None, workspace: str, path: str) -> None:
    """Refuse a write based on a stale view of the node (optimistic concurrency).

    ``if_revision`` is the revision the writer read the node at: the write is refused when the
    node changed after it (or was deleted, or appeared when the writer saw none: ``0``).

    Parameters
    ----------
    current : NodeVersion or None
        The node's visible version in the write transaction (None: no node).
    if_revision : int or None
        The revision the writer read; None checks nothing.
    workspace, path : str
        The node's address, for the message.

    Raises
    ------
    kg.errors.InvalidInput
        ``if_revision`` is not an integer >= 0.
    kg.errors.Conflict
        The node changed, was deleted or appeared after ``if_revision``.
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
    """Create or replace the node at ``workspace:path`` on the context's branch.

    Parameters
    ----------
    session : Session
        The write transaction.
    ctx : WriteContext
        The transaction's revision.
    workspace : str
        Workspace name.
    path : str
        The node's path.
    write : NodeWrite
        Type, properties (replaced whole), order and content key.
    parents : bool
        Create missing ancestors as ``kg:Folder`` nodes instead of refusing.
    if_revision : int or None
        Refuse the write if the node changed after this revision (:func:`check_if_revision`),
        checked on the one lookup of the node this write makes.
    validated : bool
        The caller has checked ``write`` with :func:`validate_node_input` already (the
        text-writing path does, before planning the text), so it is not checked twice.

    Returns
    -------
    (NodeVersion, created)
        ``created`` is False when an existing node was replaced. The id is the address's
        (:func:`node_uid`) either way.

    Raises
    ------
    kg.errors.InvalidInput
        Bad path or properties.
    kg.errors.NotFound
        Unknown workspace, or a missing parent without ``parents``.
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


def merge_properties(current: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """Shallow merge: keys of ``patch`` replace, a ``None`` value removes the key.

    Parameters
    ----------
    current : dict
        The node's properties (not modified).
    patch : dict
        The keys to set, or to remove with a ``None`` value.

    Returns
    -------
    dict
        A new dict.

    Examples
    --------
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
    """Whether the node at ``path`` has at least one visible child.

    Parameters
    ----------
    session : Session
        The caller's transaction.
    view : BranchView
        The branch state read.
    workspace : str
        Workspace name.
    path : str
        The parent's path.

    Returns
    -------
    bool
        True when some live node has ``path`` as its parent.

    Raises
    ------
    kg.errors.NotFound
        Unknown workspace.
    """
    wid = workspace_id(view, workspace)
    stmt, _ = visible_select(NodeVersion, view, (NodeVersion.workspace_id, NodeVersion.path),
                             NodeVersion.workspace_id == wid, NodeVersion.parent_path == path)
    return session.execute(stmt.limit(1)).first() is not None


def descendants(session: Session, view: BranchView, workspace: str, path: str) -> list[NodeVersion]:
    """Every visible node strictly below ``path``.

    Parameters
    ----------
    session : Session
        The caller's transaction.
    view : BranchView
        The branch state read.
    workspace : str
        Workspace name.
    path : str
        The ancestor's path (itself not included).

    Returns
    -------
    list of NodeVersion
        The live versions whose path starts with ``path + "/"``, in no particular order.

    Raises
    ------
    kg.errors.NotFound
        Unknown workspace.
    """
    wid = workspace_id(view, workspace)
    stmt, alias = visible_select(
        NodeVersion, view, (NodeVersion.workspace_id, NodeVersion.path),
        NodeVersion.workspace_id == wid, NodeVersion.path.startswith(path + "/", autoescape=True),
    )
    return list(session.scalars(stmt))


def delete_node(session: Session, ctx: WriteContext, workspace: str, path: str, *,
                recursive: bool = False) -> list[NodeVersion]:
    """Tombstone the node (and, with ``recursive``, its descendants) on the branch, and the
    relations that touch them.

    A deleted node's relations are removed with it (a tombstone per edge, in the same
    revision): an edge never outlives an endpoint, so a node created again at the path starts
    with no edges, and a merge carries the removals like any other relation change.

    Parameters
    ----------
    session : Session
        The write transaction.
    ctx : WriteContext
        The transaction's revision on the branch.
    workspace : str
        Workspace name.
    path : str
        The node's path.
    recursive : bool
        Also delete every descendant (otherwise a node with children is refused).

    Returns
    -------
    list of NodeVersion
        The versions that were hidden (the node first, then its descendants by path).

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
    """Tombstone, on the context's branch, every visible relation touching one of the nodes.

    Parameters
    ----------
    session : Session
        The write transaction.
    ctx : WriteContext
        The revision the tombstones are written at.
    node_ids : iterable of str
        The nodes (by id) whose incoming and outgoing edges go.

    Returns
    -------
    int
        How many edges were removed.

    Notes
    -----
    One window query per 500 ids over the relation versions the branch's chain allows
    (``ix_relation_versions_key`` and ``ix_relation_versions_to``); O(e) for e edges touched.
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
    """The version that removes ``edge`` on the context's branch at its revision.

    Parameters
    ----------
    ctx : WriteContext
        The revision the tombstone is written at.
    edge : RelationVersion
        The visible version of the edge to remove.
    now : datetime
        Its ``created_at``, timezone-aware UTC.

    Returns
    -------
    RelationVersion
        A new, unsaved tombstone (``deleted=True``, empty properties, the edge's weight).
    """
    return RelationVersion(
        repo_id=ctx.repo.id, branch_id=ctx.branch.id, revision=ctx.revision,
        from_node_id=edge.from_node_id, to_node_id=edge.to_node_id, rel_type=edge.rel_type,
        weight=edge.weight, properties={}, deleted=True, created_at=now,
        from_address=edge.from_address, to_address=edge.to_address,
    )


def node_addresses(session: Session, repo_id: int, node_ids: Iterable[str]) -> dict[str, str]:
    """``{node id: "workspace:path"}`` of nodes that have a version on any branch of a repository.

    A node id is derived from its address (:func:`node_uid`), so any version tells it, live or
    not. Relation versions keep their endpoints' addresses (NEIGHBORS' sort key).

    Parameters
    ----------
    session : Session
        The caller's transaction.
    repo_id : int
        The repository.
    node_ids : iterable of str
        The ids wanted.

    Returns
    -------
    dict of str to str
        The address of each id found (an id without any version is absent).

    Notes
    -----
    500 ids per statement, each an index probe of ``ix_node_versions_node_id`` per branch.
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
    """How children are sorted: by ``order`` (the default), ``name`` or one property.

    Parameters
    ----------
    field : str
        ``"order"``, ``"name"`` or ``"properties.<key>"``.
    descending : bool
        Largest value first; children without the value stay last and ties stay by name.
    """

    field: str = "order"
    descending: bool = False

    @property
    def spec(self) -> str:
        """The field with a leading ``-`` when descending (what cursors record)."""
        return ("-" if self.descending else "") + self.field

    def key(self, v: NodeVersion) -> SortKey:
        """The sort key of a child.

        Parameters
        ----------
        v : NodeVersion
            The child.

        Returns
        -------
        SortKey
            ``(missing, rank, value, name)``: ``missing`` when the child has no sortable value
            (absent, null, a list or an object), ``rank`` 0 for numbers, 1 strings, 2 booleans.
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
        """Whether the child with key ``a`` comes before, with or after the one with ``b``.

        Parameters
        ----------
        a, b : SortKey
            Keys from :meth:`key`.

        Returns
        -------
        int
            -1 (before), 0 (same key) or 1 (after).
        """
        if a[0] != b[0]:
            return -1 if b[0] else 1
        if (a[1], a[2]) != (b[1], b[2]):
            before = (a[1], a[2]) < (b[1], b[2])  # same rank: same type
            return (1 if before else -1) if self.descending else (-1 if before else 1)
        return (a[3] > b[3]) - (a[3] < b[3])


def child_order(order_by: str | None = None, direction: str | None = None) -> ChildOrder:
    """Parse a children sort: ``order`` (default), ``name``, ``properties.<key>``, ``-`` for descending.

    Parameters
    ----------
    order_by : str or None
        ``order``, ``name`` or ``properties.<key>``, optionally with a leading ``-``
        (descending); None: ``order``.
    direction : {"asc", "desc"} or None
        The direction; None: ascending unless ``order_by`` starts with ``-``.

    Returns
    -------
    ChildOrder
        The parsed sort.

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
    """The children of ``parent`` (``/`` for top level), by default in ``order``, then name.

    Parameters
    ----------
    session : Session
        The caller's transaction.
    view : BranchView
        The branch state read.
    workspace : str
        Workspace name.
    parent : str
        The parent's path, or ``/`` for the top level.
    order : ChildOrder or None, optional
        The sort (:func:`child_order`); None: ``order`` ascending.
    node_type : str or None, optional
        Only children of this node type.

    Returns
    -------
    list of NodeVersion
        Children with the sort value first (ascending or descending; numbers, then strings,
        then booleans), then those without it; ties by name.

    Raises
    ------
    kg.errors.InvalidInput
        Bad parent path.
    kg.errors.NotFound
        Unknown workspace or parent node.
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
    """One page of the children of ``parent`` in their order (:func:`list_children`).

    Parameters
    ----------
    session : Session
        The caller's transaction.
    view : BranchView
        The branch state read.
    workspace : str
        Workspace name.
    parent : str
        The parent's path, or ``/`` for the top level.
    limit : int, default 100
        Page size, 1 to 10000.
    cursor : str or None, optional
        The previous page's ``next_cursor`` (made with the same ``order``); None or ``""`` for
        the first page.
    order : ChildOrder or None, optional
        The sort (:func:`child_order`); None: ``order`` ascending.
    node_type : str or None, optional
        Only children of this node type.

    Returns
    -------
    (nodes, next_cursor)
        ``next_cursor`` (opaque: the sort and the sort key of the page's last child) is None
        on the last page.

    Raises
    ------
    kg.errors.InvalidInput
        Bad parent path or limit; a cursor that is not one, or one made with another sort.
    kg.errors.NotFound
        Unknown workspace or parent node.

    Notes
    -----
    Keyset paging over the sort key: a child written or deleted between two pages neither
    repeats nor hides another. Sorted by ``order`` or ``name``, the database sorts the winning
    versions and reads only the page (``limit + 1`` rows; the visibility window still runs over
    the children's version keys, from the indexes). Sorted by a property, each page reads and
    sorts every child in Python (O(n log n) for n children): a JSON value's order by type is not
    one the databases share.
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
    """:func:`list_children_page` sorted by ``order`` or ``name`` in the database: the same
    order as :meth:`ChildOrder.compare` (names compared by code point: ``COLLATE "C"`` on
    PostgreSQL, SQLite's default binary collation), keyset-filtered after the cursor's key."""
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
    """The cursor after the child with sort key ``key`` under ``order``."""
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
    """Which of ``paths`` have at least one visible child.

    Parameters
    ----------
    session : Session
        The caller's transaction.
    view : BranchView
        The branch state read.
    workspace : str
        Workspace name.
    paths : sequence of str
        Node paths (a page of a tree).

    Returns
    -------
    set of str
        The paths among ``paths`` that are the parent of some live node.

    Raises
    ------
    kg.errors.NotFound
        Unknown workspace.

    Notes
    -----
    One window query per 500 paths; it returns parent paths only, never the children's rows.
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
    """An opaque pagination cursor after ``path``.

    Parameters
    ----------
    path : str
        The last path of a page.

    Returns
    -------
    str
        URL-safe base64 of the path's UTF-8 bytes, unpadded; :func:`decode_cursor` inverts it.

    Examples
    --------
    >>> encode_cursor("/a/b")
    'L2EvYg'
    >>> decode_cursor(encode_cursor("/entities/acmé"))
    '/entities/acmé'
    """
    return base64.urlsafe_b64encode(path.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> str:
    """The path a cursor points after.

    Parameters
    ----------
    cursor : str
        A cursor from :func:`encode_cursor`.

    Returns
    -------
    str
        The path.

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
    """The SQL condition of :func:`kg.store.paths.path_has_prefix` on ``NodeVersion.path``.

    Parameters
    ----------
    prefix : str
        ``/``, a path, or a path with a trailing ``/``.
    mode : {"segments", "raw"}
        Match whole segments (``/a`` is ``/a`` and ``/a/...``, not ``/ab``), or any string prefix.

    Returns
    -------
    ColumnElement or None
        The condition; None for ``/`` (every path).

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
    """The path a prefix listing's cursor points after: a path under ``prefix``, encoded as
    :func:`encode_cursor` does, or a 422 (never a silent restart at page 1)."""
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
    """Nodes under ``prefix`` (:func:`kg.store.paths.path_has_prefix`), by path, one page at a time.

    Parameters
    ----------
    session : Session
        The caller's transaction.
    view : BranchView
        The branch state read.
    workspace : str
        Workspace name.
    prefix : str
        ``/`` for every node, or a path prefix (:func:`kg.store.paths.validate_prefix`).
    limit : int, default 1000
        Page size, 1 to 10000.
    cursor : str or None, optional
        The previous page's ``next_cursor``; None for the first page.
    mode : {"segments", "raw"}, default "segments"
        ``/docs`` matches ``/docs`` and ``/docs/...`` (not ``/docs-old``); ``raw``: any path
        that starts with the string.

    Returns
    -------
    (nodes, next_cursor)
        ``next_cursor`` is None on the last page.

    Raises
    ------
    kg.errors.InvalidInput
        Bad prefix, mode, cursor or limit.
    kg.errors.NotFound
        Unknown workspace.
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
    """Every visible node, optionally in some workspaces and under a path prefix.

    ``with_properties=False`` leaves the (possibly large) properties unloaded: reading them
    afterwards is an error, so use it only when they are not needed.

    Parameters
    ----------
    session : Session
        The caller's transaction.
    view : BranchView
        The branch state read.
    workspace_ids : list of int or None, optional
        Only these workspaces (by id); None for all.
    path_prefix : str or None, optional
        Only paths under it (:func:`kg.store.paths.path_has_prefix`); None or ``/`` for all.
    path_prefix_mode : {"segments", "raw"}, default "segments"
        Whole segments (``/a`` is ``/a`` and ``/a/...``), or a plain string prefix.
    with_properties : bool, default True
        Load the properties.

    Returns
    -------
    list of NodeVersion
        The live versions, in no particular order.
    """
    stmt = _visible_nodes_select(view, workspace_ids, path_prefix, path_prefix_mode)
    if not with_properties:
        stmt = stmt.options(defer(NodeVersion.properties, raiseload=True))
    return list(session.scalars(stmt))


def _visible_nodes_select(view: BranchView, workspace_ids: list[int] | None, path_prefix: str | None,
                          path_prefix_mode: str) -> Any:
    """The winners' statement of :func:`visible_nodes` and :func:`visible_node_heads`."""
    where: list[ColumnElement[bool]] = []
    if workspace_ids is not None:
        where.append(NodeVersion.workspace_id.in_(workspace_ids))
    under = path_under(path_prefix, path_prefix_mode) if path_prefix else None
    if under is not None:
        where.append(under)
    stmt, _ = visible_select(NodeVersion, view, (NodeVersion.workspace_id, NodeVersion.path), *where)
    return stmt


class NodeHead(NamedTuple):
    """The columns of a visible node version that search needs (no properties)."""

    node_id: str
    workspace_id: int
    branch_id: int
    path: str
    node_type: str
    content_key: str | None


_HEAD_COLUMNS = (NodeVersion.node_id, NodeVersion.workspace_id, NodeVersion.branch_id, NodeVersion.path,
                 NodeVersion.node_type, NodeVersion.content_key)


def visible_node_heads(session: Session, view: BranchView, *, workspace_ids: list[int] | None = None,
                       path_prefix: str | None = None, path_prefix_mode: str = "segments") -> list[NodeHead]:
    """:func:`visible_nodes` as plain rows of six columns: no ORM instance per node.

    Parameters
    ----------
    session : Session
        The caller's transaction.
    view : BranchView
        The branch state read.
    workspace_ids : list of int or None, optional
        Only these workspaces (by id); None for all.
    path_prefix : str or None, optional
        Only paths under it (:func:`kg.store.paths.path_has_prefix`); None or ``/`` for all.
    path_prefix_mode : {"segments", "raw"}, default "segments"
        Whole segments, or a plain string prefix.

    Returns
    -------
    list of NodeHead
        The live versions, in no particular order.

    Notes
    -----
    The same statement as :func:`visible_nodes`, selecting six columns, executed by Core and
    fetched at once. Building an ORM instance per row was most of the time: at 100,000 nodes,
    search's first call after a write (which reads the searchable nodes anew) took 3.7 s, now
    about 1 s (``bench/scale.py``'s data; the read is still O(nodes) per new branch state).
    """
    stmt = _visible_nodes_select(view, workspace_ids, path_prefix, path_prefix_mode).with_only_columns(
        *_HEAD_COLUMNS)
    # Core, not the ORM's result machinery: the rows are plain tuples of columns.
    return list(map(NodeHead._make, session.connection().execute(stmt).all()))


def node_heads_by_id(session: Session, view: BranchView, node_ids: Iterable[str]) -> dict[str, NodeHead]:
    """:func:`nodes_by_id` as plain rows of the six columns of :class:`NodeHead`.

    Parameters
    ----------
    session : Session
        The caller's transaction.
    view : BranchView
        The branch state read.
    node_ids : iterable of str
        Node ids; duplicates are read once.

    Returns
    -------
    dict of str to NodeHead
        Node id -> its visible, live version (deleted or unknown ids are absent).

    Notes
    -----
    One window query per 500 ids (``visible_select`` by node id), executed by Core.
    """
    out: dict[str, NodeHead] = {}
    for stmt in _by_id_selects(view, node_ids):
        for row in session.connection().execute(stmt.with_only_columns(*_HEAD_COLUMNS)):
            out[row[0]] = NodeHead._make(row)
    return out


def node_workspaces(session: Session, branches: Sequence[int], node_ids: Iterable[str]) -> dict[str, int]:
    """The workspace of each node id (a node's id is derived from its workspace and path).

    Parameters
    ----------
    session : Session
        The caller's transaction.
    branches : sequence of int
        Branches where a version of the nodes is (a view's chain; several views' chains).
    node_ids : iterable of str
        Node ids.

    Returns
    -------
    dict of str to int
        Node id -> workspace id, for the ids with a version on ``branches``.

    Notes
    -----
    One statement per 500 ids (``ix_node_versions_node_id``).
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
    """The workspace row with id ``wid``.

    Parameters
    ----------
    session : Session
        The caller's transaction.
    wid : int
        The workspace's id.

    Returns
    -------
    Workspace
        The row.
    """
    return session.get_one(Workspace, wid)


def written_workspaces(session: Session, branch: Branch) -> set[int]:
    """The workspaces that hold what was written on ``branch`` itself (not what it inherits):
    those of its node versions and those of the source nodes of its relation versions.

    Parameters
    ----------
    session : Session
        The caller's transaction.
    branch : Branch
        The branch.

    Returns
    -------
    set of int
        Workspace ids (empty: nothing was written on the branch).

    Notes
    -----
    Two statements on ``ix_node_versions_branch_revision`` and ``ix_relation_versions_branch_revision``,
    then :func:`node_workspaces` for the relations' sources.
    """
    written = set(session.scalars(select(NodeVersion.workspace_id).where(NodeVersion.branch_id == branch.id)
                                  .distinct()))
    sources = list(session.scalars(select(RelationVersion.from_node_id)
                                   .where(RelationVersion.branch_id == branch.id).distinct()))
    if sources:
        branches = list(session.scalars(select(Branch.id).where(Branch.repo_id == branch.repo_id)))
        written |= set(node_workspaces(session, branches, sources).values())
    return written
