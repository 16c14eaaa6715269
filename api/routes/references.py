"""References: the nodes whose properties point at a node."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from api.deps import AddressQ, BranchQ, CallerDep, RepoP, RevisionQ, ServicesDep
from api.guard import GuardedRoute
from kg.ops import queries
from kg.store.references import MAX_LIMIT
from kg.types import ReferenceList

router = APIRouter(route_class=GuardedRoute, prefix="/api/repos/{repo}", tags=["references"])


@router.get("/references", response_model=ReferenceList)
def references(repo: RepoP, target: AddressQ,
               services: ServicesDep, caller: CallerDep, branch: BranchQ = "main", at_revision: RevisionQ = None,
               limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 1000) -> ReferenceList:
    """Nodes whose visible version holds a reference ``{"kg:ref": path, "kg:workspace": ws}`` to
    ``target`` (top-level property values and items of top-level lists), with the property key;
    answered through the reference index."""
    return queries.references(services, caller, repo, branch, target, limit=limit, at_revision=at_revision)
