"""Search: vector KNN, BM25 or hybrid rank fusion, branch-aware."""

from __future__ import annotations

from fastapi import APIRouter

from api.deps import BranchQ, CallerDep, RepoP, RevisionQ, ServicesDep
from api.guard import GuardedRoute
from kg.context import run
from kg.ops import queries
from kg.ops import repos as repo_ops
from kg.rag.search import SearchRequest, search_branch
from kg.types import IndexRetried, IndexStatus, SearchResponse

router = APIRouter(route_class=GuardedRoute, prefix="/api/repos/{repo}", tags=["search"])


@router.post("/search", response_model=SearchResponse, response_model_exclude_unset=True)
def search_route(repo: RepoP, body: SearchRequest, services: ServicesDep, caller: CallerDep,
                 branch: BranchQ = "main", at_revision: RevisionQ = None) -> dict:
    """Search the chunks of the nodes the branch sees."""
    return search_branch(services, caller, repo, branch, body, at_revision=at_revision).as_dict()


@router.get("/index/status", response_model=IndexStatus, response_model_exclude_unset=True)
def index_status(repo: RepoP, services: ServicesDep, caller: CallerDep) -> IndexStatus:
    """What the indexer has pending, running and failed for this repository, and what the
    search index holds."""
    return queries.index_status(services, caller, repo)


@router.post("/index/retry-failed", response_model=IndexRetried)
def retry_failed(repo: str, services: ServicesDep, caller: CallerDep) -> IndexRetried:
    """Embed the repository's failed texts again: their jobs go back to pending, afresh (admin)."""
    return run(services, caller, repo_ops.retry_failed_index, repo)
