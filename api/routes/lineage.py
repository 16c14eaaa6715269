"""Lineage: what was derived from a node, and from what it was derived (docs/concepts/lineage.md).

The route is ``/workspaces/{ws}/lineage/{path}``, not ``/nodes/{path}/lineage``: ``nodes/{path:path}``
takes every segment, so a suffix would be ambiguous with a node whose last segment is
``lineage``.
"""

from __future__ import annotations

from fastapi import APIRouter

from api.deps import BranchQ, CallerDep, NodePathP, RepoP, RevisionQ, ServicesDep, WorkspaceP
from api.guard import GuardedRoute
from kg.ops import lineage as lineage_ops
from kg.store.paths import validate_path
from kg.types import Lineage

router = APIRouter(route_class=GuardedRoute, prefix="/api/repos/{repo}/workspaces/{ws}", tags=["lineage"])


@router.get("/lineage/{path:path}", response_model=Lineage)
def lineage(
    repo: RepoP,
    ws: WorkspaceP,
    path: NodePathP,
    services: ServicesDep,
    caller: CallerDep,
    branch: BranchQ = "main",
    at_revision: RevisionQ = None,
) -> Lineage:
    """Records derived from the node at ``path`` (chunks, entity mentions, its extraction record,
    stored answers citing it) with the source revision each recorded and whether it is current,
    and what the node itself was derived from."""
    return lineage_ops.node_lineage(
        services, caller, repo, branch, ws, validate_path("/" + path), at_revision=at_revision
    )
