"""Nodes: PUT / PATCH / GET / DELETE by path, children in order, prefix listing."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response

from api.deps import MAX_REVISION, ActorQ, BranchQ, MessageQ, RevisionQ, ServicesDep
from api.models import NodePatch, NodePut
from api.schemas import Node, NodeList, NodesDeleted
from kg.errors import InvalidInput
from kg.ops import nodes as node_ops
from kg.store import nodes as store
from kg.store.models import node_dict
from kg.store.paths import validate_path
from kg.store.repos import branch_view

router = APIRouter(prefix="/api/repos/{repo}/workspaces/{ws}/nodes", tags=["nodes"])


def _path(raw: str) -> str:
    return validate_path("/" + raw)


@router.put("/{path:path}", response_model=Node,
            responses={200: {"description": "Replaced: the node"},
                       201: {"description": "Created: the node", "model": Node}})
def put_node(repo: str, ws: str, path: str, body: NodePut, services: ServicesDep, response: Response,
             branch: BranchQ = "main", parents: bool = False) -> dict:
    """Create (201) or replace (200) the node at ``path``; its text is chunked and embedded."""
    node, created = node_ops.put_node(
        services, repo, branch, ws, _path(path), node_type=body.node_type,
        properties=body.properties, order=body.order, parents=parents,
        message=body.message, actor=body.actor, if_revision=body.if_revision,
    )
    response.status_code = 201 if created else 200
    return node


@router.patch("/{path:path}", response_model=Node)
def patch_node(repo: str, ws: str, path: str, body: NodePatch, services: ServicesDep,
               branch: BranchQ = "main") -> dict:
    """Merge properties into the node (``null`` removes a key)."""
    return node_ops.patch_node(services, repo, branch, ws, _path(path), properties=body.properties,
                             node_type=body.node_type, order=body.order, message=body.message,
                             actor=body.actor, if_revision=body.if_revision)


@router.get("/{path:path}", response_model=Node)
def get_node(repo: str, ws: str, path: str, services: ServicesDep, branch: BranchQ = "main",
             at_revision: RevisionQ = None) -> dict:
    """The node at ``path`` on the branch."""
    p = _path(path)
    with services.db.read() as session:
        view = branch_view(session, repo, branch, at_revision=at_revision)
        return node_dict(store.get_node(session, view, ws, p), ws)


@router.delete("/{path:path}", response_model=NodesDeleted)
def delete_node(repo: str, ws: str, path: str, services: ServicesDep, branch: BranchQ = "main",
                recursive: bool = False, message: MessageQ = None, actor: ActorQ = None,
                if_revision: Annotated[int | None, Query(ge=0, le=MAX_REVISION)] = None) -> dict:
    """Delete the node (a tombstone on the branch); with children only when ``recursive``."""
    return node_ops.delete_node(services, repo, branch, ws, _path(path), recursive=recursive,
                              message=message, actor=actor, if_revision=if_revision)


@router.get("", response_model=NodeList, response_model_exclude_unset=True)
def list_nodes(repo: str, ws: str, services: ServicesDep, branch: BranchQ = "main",
               at_revision: RevisionQ = None,
               parent: Annotated[str | None, Query(description="List the children of this path.")] = None,
               prefix: Annotated[str | None, Query(description="List every node under this prefix.")] = None,
               limit: Annotated[int, Query(ge=1, le=10000)] = 1000,
               cursor: str | None = None) -> dict:
    """Children of ``parent`` in order, or all nodes under ``prefix`` by path, paginated."""
    if (parent is None) == (prefix is None):
        raise InvalidInput("give exactly one of parent and prefix")
    with services.db.read() as session:
        view = branch_view(session, repo, branch, at_revision=at_revision)
        if parent is not None:
            if parent != "/":
                validate_path(parent)
            rows = store.list_children(session, view, ws, parent)
            return {"nodes": [node_dict(v, ws) for v in rows]}
        rows, next_cursor = store.list_prefix(session, view, ws, prefix, limit=limit, cursor=cursor)
        return {"nodes": [node_dict(v, ws) for v in rows], "next_cursor": next_cursor}
