"""History: the revision log, batches, diff, merge and reset."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from api.deps import BranchQ, RevisionQ, ServicesDep
from api.models import BatchBody, MergeBody
from api.schemas import BatchResult, BranchReset, Diff, MergeResult, RevisionLog
from kg.ops import nodes as node_ops
from kg.ops.branches import reset_branch
from kg.ops.merge import merge_branch
from kg.store import history
from kg.store.repos import branch_view, get_repository

router = APIRouter(prefix="/api/repos/{repo}", tags=["history"])


@router.get("/log", response_model=RevisionLog)
def log(repo: str, services: ServicesDep, branch: BranchQ = "main", at_revision: RevisionQ = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
        before: Annotated[int | None, Query(ge=0, le=2_147_483_647, description="Only revisions older than this.")] = None) -> dict:
    """Revisions of the branch's history (its own, then its ancestors' up to the fork), newest first."""
    with services.db.read() as session:
        view = branch_view(session, repo, branch, at_revision=at_revision)
        return {"revisions": history.revision_log(session, view, limit=limit, before=before)}


@router.post("/nodes:batch", response_model=BatchResult)
def batch(repo: str, body: BatchBody, services: ServicesDep, branch: BranchQ = "main") -> dict:
    """Deletes then upserts as one revision: all or nothing."""
    return node_ops.batch(services, repo, branch, upserts=body.upserts, deletes=body.deletes,
                        parents=body.parents, message=body.message, actor=body.actor)


@router.get("/branches/{branch:path}/diff", response_model=Diff)
def diff(repo: str, branch: str, services: ServicesDep, against: str | None = None) -> dict:
    """What the branch changed since its merge base with ``against`` (default: its parent)."""
    with services.db.read() as session:
        return history.diff_branches(session, get_repository(session, repo), branch, against)


@router.post("/branches/{branch:path}/merge", response_model=MergeResult, response_model_exclude_unset=True)
def merge(repo: str, branch: str, body: MergeBody, services: ServicesDep) -> dict:
    """Merge the branch into ``into`` (default: its parent): fast-forward or three-way."""
    return merge_branch(services, repo, branch, body.into, resolutions=body.resolutions, dry_run=body.dry_run,
                        message=body.message, actor=body.actor)


@router.post("/branches/{branch:path}/reset", response_model=BranchReset)
def reset(repo: str, branch: str, services: ServicesDep) -> dict:
    """Drop what was written on the branch and fork it again from its parent's head."""
    return reset_branch(services, repo, branch)
