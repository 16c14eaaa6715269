"""Node writes with their text indexed: put, patch, delete, batch, nodes with relations.

Each use case is one revision at most, all or nothing; every node with content is written by
:func:`kg.ops.texts.write_node`, so its text is queued in the same transaction and indexed once
the unit of work has committed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from kg.context import UnitOfWork
from kg.errors import InvalidInput
from kg.ops.lineage import Changed, refresh_derived
from kg.ops.texts import write_node, write_nodes
from kg.store import nodes as node_store
from kg.store import relations as relation_store
from kg.store.models import node_dict, utcnow
from kg.store.nodes import check_if_revision, merge_properties
from kg.store.paths import ancestors_of, parent_of, parse_address
from kg.store.repos import BranchView
from kg.types.nodes import BatchResult, GraphWritten, Node, NodesDeleted
from kg.types.relations import RelationKey

__all__ = ["GraphWrite", "batch", "delete_node", "patch_node", "put_node", "write_graph"]


def put_node(uow: UnitOfWork, repo_name: str, branch: str, workspace: str, path: str, *, node_type: str,
             properties: dict[str, Any], order: float | None = None, parents: bool = False,
             message: str | None = None, actor: str | None = None,
             if_revision: int | None = None) -> tuple[Node, bool]:
    """Create or replace a node (``parents``: missing ancestors as ``kg:Folder``), refused if it
    changed after ``if_revision``; ``(node, created)``.

    Raises
    ------
    kg.errors.NotFound, kg.errors.InvalidInput, kg.errors.Conflict
        As :func:`kg.store.nodes.put_node`.
    """
    uow.authorize("write", repo_name, branch, workspace)
    ctx = uow.begin(repo_name, branch, message=message, actor=actor)
    version, created = write_node(uow, ctx, workspace, path, node_type=node_type, properties=properties,
                                  order=order, parents=parents, if_revision=if_revision)
    return Node.model_validate(node_dict(version, workspace)), created


def patch_node(uow: UnitOfWork, repo_name: str, branch: str, workspace: str, path: str, *,
               properties: dict[str, Any], node_type: str | None = None, order: float | None = None,
               message: str | None = None, actor: str | None = None,
               if_revision: int | None = None) -> Node:
    """Merge ``properties`` into a node (a ``None`` value removes the key; ``node_type`` and
    ``order`` None keep theirs); the stored node.

    Raises
    ------
    kg.errors.InvalidInput
        Properties not a JSON object, or a type, order or properties refused.
    kg.errors.NotFound
        No node there.
    kg.errors.Conflict
        The node changed after ``if_revision``.
    """
    if not isinstance(properties, dict):
        raise InvalidInput("properties must be a JSON object")
    session = uow.session
    uow.authorize("write", repo_name, branch, workspace)
    ctx = uow.begin(repo_name, branch, message=message, actor=actor)
    current = node_store.get_node(session, ctx.view, workspace, path)
    check_if_revision(current, if_revision, workspace, path)
    merged = merge_properties(current.properties, properties)
    new_type = node_type if node_type is not None else current.node_type
    new_order = order if order is not None else current.order
    version, _ = write_node(uow, ctx, workspace, path, node_type=new_type, properties=merged, order=new_order)
    return Node.model_validate(node_dict(version, workspace))


def delete_node(uow: UnitOfWork, repo_name: str, branch: str, workspace: str, path: str, *,
                recursive: bool = False, message: str | None = None, actor: str | None = None,
                if_revision: int | None = None) -> NodesDeleted:
    """Tombstone a node (with ``recursive`` its descendants; else one with children is refused) and
    their edges: the revision and how many nodes it tombstoned.

    Raises
    ------
    kg.errors.NotFound, kg.errors.Conflict
        As :func:`kg.store.nodes.delete_node`, or the node changed after ``if_revision``.
    """
    session = uow.session
    uow.authorize("write", repo_name, branch, workspace)
    ctx = uow.begin(repo_name, branch, message=message, actor=actor)
    check_if_revision(node_store.find_node(session, ctx.view, workspace, path), if_revision, workspace, path)
    hidden = node_store.delete_node(session, ctx, workspace, path, recursive=recursive)
    refresh_derived(uow, ctx, [Changed(workspace, v.path, v.node_id, None) for v in hidden])
    return NodesDeleted(revision=ctx.revision, deleted=len(hidden))


_BATCH_KEYS = {"upserts": {"workspace", "path", "node_type", "properties", "order"},
               "deletes": {"workspace", "path", "recursive"}}


def _batch_item(raw: Any, kind: str, index: int) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise InvalidInput(f"{kind}[{index}] must be an object")
    unknown = sorted(set(raw) - _BATCH_KEYS[kind])
    if unknown:
        raise InvalidInput(f"{kind}[{index}] has unknown field(s): {', '.join(unknown)}",
                           details={"index": index, "unknown": unknown})
    if "recursive" in raw and not isinstance(raw["recursive"], bool):
        raise InvalidInput(f"{kind}[{index}].recursive must be true or false", details={"index": index})
    if "node_type" in raw and not isinstance(raw["node_type"], str):
        raise InvalidInput(f"{kind}[{index}].node_type must be a string", details={"index": index})
    if not isinstance(raw.get("workspace"), str) or not isinstance(raw.get("path"), str):
        raise InvalidInput(f"{kind}[{index}] needs 'workspace' and 'path'", details={"index": index})
    return {**raw, "path": node_store.validate_path(raw["path"])}


def _refuse_repeated_paths(upserts: list[dict[str, Any]], deletes: list[dict[str, Any]]) -> None:
    """Refuse a batch that names one (workspace, path) twice (two versions at one revision)."""
    seen: dict[tuple[str, str], str] = {}
    for kind, items in (("deletes", deletes), ("upserts", upserts)):
        for index, item in enumerate(items):
            key = (item["workspace"], item["path"])
            where = f"{kind}[{index}]"
            if key in seen:
                raise InvalidInput(
                    f"{where} names {key[0]}:{key[1]}, which {seen[key]} names already: a batch names each "
                    "node once (one revision holds one version of a node)",
                    details={"field": kind, "workspace": key[0], "path": key[1], "items": [seen[key], where]})
            seen[key] = where


def _refuse_writes_under_deletes(upserts: list[dict[str, Any]], deletes: list[dict[str, Any]]) -> None:
    """Refuse an upsert below a node the batch deletes: deletes come first, so its parent would be
    gone (a folder made again would be a second version at one revision).
    """
    deleted = {(item["workspace"], item["path"]): f"deletes[{index}]" for index, item in enumerate(deletes)}
    if not deleted:
        return
    for index, item in enumerate(upserts):
        for ancestor in ancestors_of(item["path"]):
            where = deleted.get((item["workspace"], ancestor))
            if where is None:
                continue
            workspace, path, parent = item["workspace"], item["path"], parent_of(item["path"])
            raise InvalidInput(
                f"upserts[{index}] writes {workspace}:{path} below {workspace}:{ancestor}, which {where} deletes: "
                f"its parent {workspace}:{parent} would not exist (a batch applies its deletes first, and names "
                "each node once)",
                details={"field": "upserts", "workspace": workspace, "path": path, "parent": parent,
                         "deleted": ancestor,
                         "items": [where, f"upserts[{index}]"]})


def batch(uow: UnitOfWork, repo_name: str, branch: str, *, upserts: list[dict[str, Any]] | None = None,
          deletes: list[dict[str, Any]] | None = None, parents: bool = False, message: str | None = None,
          actor: str | None = None) -> BatchResult:
    """Apply node deletes (``{"workspace", "path", "recursive"}``), then upserts (``{"workspace",
    "path", "node_type", "properties", "order"}``), as one revision, all or nothing.

    Raises
    ------
    kg.errors.InvalidInput
        An empty or too large batch, a malformed item, one address named twice (NFC and NFD are
        one), or an upsert below a deleted node (``details["parent"]``, ``details["deleted"]``).
    kg.errors.NotFound
        A delete of no node, or a missing parent without ``parents``.
    kg.errors.Conflict
        A delete of a node with children without ``recursive``.
    """
    upserts = [_batch_item(u, "upserts", i) for i, u in enumerate(upserts or [])]
    deletes = [_batch_item(d, "deletes", i) for i, d in enumerate(deletes or [])]
    if not upserts and not deletes:
        raise InvalidInput("a batch needs at least one upsert or delete", details={"field": "upserts"})
    if len(upserts) + len(deletes) > 10_000:
        raise InvalidInput("a batch holds at most 10000 items", details={"field": "upserts"})
    _refuse_repeated_paths(upserts, deletes)
    _refuse_writes_under_deletes(upserts, deletes)
    for item in upserts:
        node_store.validate_node_input(item.get("node_type", "kg:Node"), item.get("properties", {}), item.get("order"))
    uow.authorize_workspaces("write", repo_name, branch, [i["workspace"] for i in deletes + upserts])
    session = uow.session
    ctx = uow.begin(repo_name, branch, message=message, actor=actor)
    deleted = 0
    gone: list[Changed] = []
    for item in deletes:
        hidden = node_store.delete_node(session, ctx, item["workspace"], item["path"],
                                        recursive=bool(item.get("recursive", False)))
        deleted += len(hidden)
        gone.extend(Changed(item["workspace"], v.path, v.node_id, None) for v in hidden)
    refresh_derived(uow, ctx, gone)
    out = [Node.model_validate(p.api_dict()) for p in write_nodes(uow, ctx, upserts, parents=parents,
                                                                validated=True)]
    if len(upserts) + len(deletes) >= 1000:
        uow.after_commit(uow.services.db.analyze)  # fresh planner statistics after a large write
    return BatchResult(revision=ctx.revision, upserted=out, deleted=deleted)


# -- nodes and relations in one revision ----------------------------------------------------


@dataclass
class GraphWrite:
    """Nodes and relations to write as one revision (:func:`write_graph`): ``upserts`` (as
    :func:`batch`'s, missing ancestors made ``kg:Folder``, answered in list order), then
    ``relations`` (``{"from", "to", "type", "weight"?, "properties"?}``), ``unrelations`` and
    ``invalidations`` (``{"from", "to", "type", "invalidated_by"?}``: edges that stop holding
    now); an unrelation or invalidation of no current edge is ignored.
    """

    upserts: list[dict[str, Any]] = field(default_factory=list)
    relations: list[dict[str, Any]] = field(default_factory=list)
    unrelations: list[dict[str, Any]] = field(default_factory=list)
    invalidations: list[dict[str, Any]] = field(default_factory=list)


def write_graph(uow: UnitOfWork, repo_name: str, branch: str,
                plan: Callable[[Session, BranchView], GraphWrite | None], *,
                message: str | None = None, actor: str | None = None) -> GraphWritten | None:
    """Write nodes and the relations between them as one revision, all or nothing, as :func:`batch`.
    ``plan(session, view)`` runs in the write transaction once the branch is locked, on the head
    as the caller may read it, so what it reads cannot change before the commit; its None writes
    nothing and answers None.

    Raises
    ------
    kg.errors.InvalidInput, kg.errors.NotFound, kg.errors.Conflict
        Any failing item fails the write; a plan naming one address twice is InvalidInput.
    kg.errors.Forbidden
        As :meth:`kg.context.UnitOfWork.authorize_relation`, per node and relation.
    """
    session = uow.session
    ctx = uow.begin(repo_name, branch, message=message, actor=actor)
    todo = plan(session, uow.reader_view(ctx.view))
    if todo is None:
        return None
    todo.upserts = [{**u, "path": node_store.validate_path(u["path"])} for u in todo.upserts]
    _refuse_repeated_paths(todo.upserts, [])
    uow.authorize_workspaces("write", repo_name, branch, [u["workspace"] for u in todo.upserts])
    for r in [*todo.unrelations, *todo.relations, *todo.invalidations]:
        uow.authorize_relation(repo_name, branch, r["from"], r["to"])
    out = [Node.model_validate(p.api_dict()) for p in write_nodes(uow, ctx, todo.upserts, parents=True)]
    unrelated = sum(relation_store.unrelate(session, ctx, u["from"], u["to"], u["type"])
                    for u in todo.unrelations)
    now = utcnow()
    for r in todo.relations:
        relation_store.relate(session, ctx, r["from"], r["to"], r["type"], weight=r.get("weight"),
                              properties=r.get("properties"), now=now)
    invalidated: list[RelationKey] = []
    for r in todo.invalidations:
        src = node_store.find_node(session, ctx.view, *parse_address(r["from"]))
        dst = node_store.find_node(session, ctx.view, *parse_address(r["to"]))
        edge = relation_store.find_relation(session, ctx.view, src.node_id, dst.node_id, r["type"]) \
            if src is not None and dst is not None else None
        if edge is None or not ((edge.valid_from is None or edge.valid_from <= now)
                                and (edge.valid_to is None or now < edge.valid_to)):
            continue
        relation_store.invalidate(session, ctx, r["from"], r["to"], r["type"], valid_to=now,
                                  invalidated_by=r.get("invalidated_by"))
        invalidated.append(RelationKey.model_validate({"from": r["from"], "type": r["type"], "to": r["to"]}))
    return GraphWritten(revision=ctx.revision, upserted=out, related=len(todo.relations), unrelated=unrelated,
                        invalidated=invalidated)
