"""Nodes: PUT / PATCH / GET / DELETE by path, children in order, prefix listing."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query, Response

from api.deps import (
    MAX_REVISION,
    ActorQ,
    BranchQ,
    CallerDep,
    MessageQ,
    NodePathP,
    RepoP,
    RevisionQ,
    ServicesDep,
    WorkspaceP,
)
from api.errors import refusal
from api.guard import GuardedRoute
from kg.context import run
from kg.errors import InvalidInput
from kg.ops import nodes as node_ops
from kg.ops import queries
from kg.store.paths import MAX_PATH_CHARS, NON_BLANK_PATTERN, PATH_PATTERN, PREFIX_PATTERN, validate_path
from kg.types import Node, NodeList, NodePatch, NodePut, NodesDeleted

router = APIRouter(route_class=GuardedRoute, prefix="/api/repos/{repo}/workspaces/{ws}/nodes", tags=["nodes"])


def _path(raw: str) -> str:
    return validate_path("/" + raw)


@router.put("/{path:path}", response_model=Node,
            responses={200: {"description": "Replaced: the node"},
                       201: {"description": "Created: the node", "model": Node}})
def put_node(repo: RepoP, ws: WorkspaceP, path: NodePathP, body: NodePut, services: ServicesDep, caller: CallerDep,
             response: Response, branch: BranchQ = "main", parents: bool = False) -> Node:
    """Create (201) or replace (200) the node at ``path``; its text is chunked and embedded."""
    node, created = run(
        services, caller, node_ops.put_node, repo, branch, ws, _path(path), node_type=body.node_type,
        properties=body.properties, order=body.order, parents=parents,
        message=body.message, actor=body.actor, if_revision=body.if_revision,
    )
    response.status_code = 201 if created else 200
    return node


@router.patch("/{path:path}", response_model=Node)
def patch_node(repo: RepoP, ws: WorkspaceP, path: NodePathP, body: NodePatch, services: ServicesDep, caller: CallerDep,
               branch: BranchQ = "main") -> Node:
    """Merge properties into the node (``null`` removes a key)."""
    return run(services, caller, node_ops.patch_node, repo, branch, ws, _path(path),
               properties=body.properties, node_type=body.node_type, order=body.order,
               message=body.message, actor=body.actor, if_revision=body.if_revision)


@router.get("/{path:path}", response_model=Node)
def get_node(repo: RepoP, ws: WorkspaceP, path: NodePathP, services: ServicesDep, caller: CallerDep,
             branch: BranchQ = "main", at_revision: RevisionQ = None) -> Node:
    """The node at ``path`` on the branch."""
    return queries.get_node(services, caller, repo, branch, ws, _path(path), at_revision=at_revision)


@router.delete("/{path:path}", response_model=NodesDeleted)
def delete_node(repo: RepoP, ws: WorkspaceP, path: NodePathP, services: ServicesDep, caller: CallerDep,
                branch: BranchQ = "main", recursive: bool = False, message: MessageQ = None, actor: ActorQ = None,
                if_revision: Annotated[int | None, Query(ge=0, le=MAX_REVISION)] = None) -> NodesDeleted:
    """Delete the node (a tombstone on the branch); with children only when ``recursive``."""
    return run(services, caller, node_ops.delete_node, repo, branch, ws, _path(path), recursive=recursive,
               message=message, actor=actor, if_revision=if_revision)


#: ``order_by`` as :func:`kg.store.nodes.child_order` reads it (no NUL: the store's text).
ORDER_BY_PATTERN = r"^-?(order|name|properties\.[^.\s\x00][^\s\x00]{0,254})$"


@router.get("", response_model=NodeList, response_model_exclude_unset=True,
            responses={422: refusal("`invalid_input`: not exactly one of `parent` and `prefix` (`details.field`: "
                                    "`parent`); `order_by`, `direction` or `node_type` with `prefix`, "
                                    "`prefix_mode` with `parent`, an `order_by` with `-` and `direction=asc` "
                                    "(the field named); a `cursor` that is not this listing's `next_cursor` "
                                    "(`cursor`)")})
def list_nodes(repo: RepoP, ws: WorkspaceP, services: ServicesDep, caller: CallerDep, branch: BranchQ = "main",
               at_revision: RevisionQ = None,
               parent: Annotated[str | None, Query(
                   description="List the children of this path (`/`: the top level). Exactly one of `parent` "
                               "and `prefix`.", max_length=MAX_PATH_CHARS,
                   json_schema_extra={"pattern": f"^/$|{PATH_PATTERN}"})] = None,
               prefix: Annotated[str | None, Query(
                   description="List every node under this prefix. Exactly one of `parent` and `prefix`.",
                   max_length=MAX_PATH_CHARS, json_schema_extra={"pattern": PREFIX_PATTERN})] = None,
               order_by: Annotated[str | None, Query(
                   description="Children only: `order` (default: `order`, then name), `name` or "
                               "`properties.<key>`; a leading `-` for descending (then not with "
                               "`direction=asc`). Children without the value come last; ties by name.",
                   json_schema_extra={"pattern": ORDER_BY_PATTERN})] = None,
               direction: Annotated[Literal["asc", "desc"] | None, Query(
                   description="Children only: the direction of `order_by`.")] = None,
               node_type: Annotated[str | None, Query(description="Children only: only this node type.",
                                                      min_length=1, max_length=255,
                                                      json_schema_extra={"pattern": NON_BLANK_PATTERN})] = None,
               prefix_mode: Annotated[Literal["segments", "raw"], Query(
                   description="Prefix listing only: `segments` (default): `/docs` is `/docs` and "
                               "`/docs/...`, not `/docs-old`; `raw`: any path starting with the string.")]
               = "segments",
               limit: Annotated[int, Query(ge=1, le=10000)] = 1000,
               cursor: Annotated[str | None, Query(min_length=1, description="The previous page's next_cursor "
                                                   "(of this listing: same parent or prefix, same order).")]
               = None) -> NodeList:
    """Children of ``parent`` in order, or all nodes under ``prefix`` by path, paginated.

    Rules across the query parameters, each a 422 ``invalid_input`` naming its parameter in
    ``details.field``: exactly one of ``parent`` and ``prefix``; ``order_by``, ``direction``
    and ``node_type`` with ``parent`` only, ``prefix_mode`` with ``prefix`` only; an
    ``order_by`` with a leading ``-`` is descending, not with ``direction=asc``; ``cursor`` is a
    ``next_cursor`` of this listing."""
    if (parent is None) == (prefix is None):
        raise InvalidInput("give exactly one of parent and prefix", details={"field": "parent"})
    if parent is not None:
        if prefix_mode != "segments":
            raise InvalidInput("prefix_mode applies to a prefix listing (prefix=...), not to children",
                               details={"field": "prefix_mode", "prefix_mode": prefix_mode})
        return queries.children_page(services, caller, repo, branch, ws, parent, limit=limit, cursor=cursor,
                                     at_revision=at_revision, order_by=order_by, direction=direction,
                                     node_type=node_type)
    assert prefix is not None
    for name, value in (("order_by", order_by), ("direction", direction), ("node_type", node_type)):
        if value is not None:
            raise InvalidInput(f"{name} applies to children (parent=...), not to a prefix listing",
                               details={"field": name, name: value})
    return queries.list_prefix(services, caller, repo, branch, ws, prefix, limit=limit, cursor=cursor,
                               at_revision=at_revision, mode=prefix_mode)
