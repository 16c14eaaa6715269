"""Search: vector KNN, BM25 or hybrid rank fusion, branch-aware."""

from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy import select

from api.deps import BranchQ, RevisionQ, ServicesDep
from api.schemas import IndexStatus, SearchResponse
from kg.errors import KGError
from kg.indexing import index_jobs
from kg.rag.search import SearchRequest, search_answer
from kg.store.models import Branch, Workspace
from kg.store.repos import branch_view, get_repository

router = APIRouter(prefix="/api/repos/{repo}", tags=["search"])


@router.post("/search", response_model=SearchResponse, response_model_exclude_unset=True)
def search_route(repo: str, body: SearchRequest, services: ServicesDep, branch: BranchQ = "main",
                 at_revision: RevisionQ = None) -> dict:
    """Search the chunks of the nodes the branch sees."""
    with services.db.read() as session:
        view = branch_view(session, repo, branch, at_revision=at_revision)
        answer = search_answer(session, services, view, body)
    out = {"results": [r.as_dict() for r in answer.results], "took_ms": answer.took_ms}
    if answer.fusion is not None:
        out["fusion"] = answer.fusion
    if answer.warnings:
        out["warnings"] = answer.warnings
    return out


@router.get("/index/status", response_model=IndexStatus, response_model_exclude_unset=True)
def index_status(repo: str, services: ServicesDep) -> dict:
    """What the indexer has pending, running and failed for this repository, and what the
    search index holds."""
    with services.db.read() as session:
        r = get_repository(session, repo)
        out = index_jobs.index_status(session, r)
        names = {
            "workspace": dict(session.execute(select(Workspace.id, Workspace.name).where(Workspace.repo_id == r.id)).all()),
            "branch": dict(session.execute(select(Branch.id, Branch.name).where(Branch.repo_id == r.id)).all()),
        }
    try:
        stats = services.index.stats(r.uid)
    except KGError as exc:
        # The queue is in SQL and still worth seeing when the index cannot answer.
        stats = {"error": {"code": exc.code, "message": exc.message}}
    for c in stats.get("collections") or []:
        if isinstance(c, dict):
            c["workspace"] = names["workspace"].get(c.get("workspace_id"))
            c["branch"] = names["branch"].get(c.get("branch_id"))
    out["index"] = stats
    return out
