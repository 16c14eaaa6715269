"""History: the revision log, batches, diff, merge and reset."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from api.deps import MAX_REVISION, BranchP, BranchQ, CallerDep, RepoP, RevisionQ, ServicesDep
from api.guard import GuardedRoute
from kg.context import run
from kg.ops import nodes as node_ops
from kg.ops import queries
from kg.ops.branches import reset_branch
from kg.ops.merge import merge_branch, preview_merge
from kg.types import BatchBody, BatchResult, BranchReset, Diff, MergeBody, MergeResult, RevisionLog

router = APIRouter(route_class=GuardedRoute, prefix="/api/repos/{repo}", tags=["history"])


@router.get("/log", response_model=RevisionLog)
def log(repo: RepoP, services: ServicesDep, caller: CallerDep, branch: BranchQ = "main", at_revision: RevisionQ = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
        before: Annotated[int | None, Query(ge=0, le=MAX_REVISION,
                                            description="Only revisions older than this.")] = None,
        changes: Annotated[int, Query(ge=0, le=queries.MAX_LOG_CHANGES, description=(
            "Changes listed per revision (nodes first, then relations, in write order); "
            "`change_count` counts them all."))] = queries.DEFAULT_LOG_CHANGES,
        ) -> dict:
    """Revisions of the branch's history (its own, then its ancestors' up to the fork), newest first."""
    return {"revisions": queries.revision_log(services, caller, repo, branch, limit=limit, before=before,
                                              at_revision=at_revision, max_changes=changes)}


@router.post("/nodes:batch", response_model=BatchResult)
def batch(repo: RepoP, body: BatchBody, services: ServicesDep, caller: CallerDep, branch: BranchQ = "main") -> dict:
    """Deletes then upserts as one revision: all or nothing."""
    return run(services, caller, node_ops.batch, repo, branch, upserts=body.upserts, deletes=body.deletes,
               parents=body.parents, message=body.message, actor=body.actor)


@router.get("/branches/{branch:path}/diff", response_model=Diff)
def diff(repo: RepoP, branch: BranchP, services: ServicesDep, caller: CallerDep, against: str | None = None) -> dict:
    """What the branch changed since its merge base with ``against`` (default: its parent)."""
    return queries.diff(services, caller, repo, branch, against)


@router.post("/branches/{branch:path}/merge", response_model=MergeResult, response_model_exclude_unset=True)
def merge(repo: RepoP, branch: BranchP, body: MergeBody, services: ServicesDep, caller: CallerDep) -> dict:
    """Merge the branch into ``into`` (default: its parent): fast-forward or three-way."""
    if body.dry_run:
        return preview_merge(services, caller, repo, branch, body.into, resolutions=body.resolutions,
                             if_plan=body.if_plan)
    return run(services, caller, merge_branch, repo, branch, body.into, resolutions=body.resolutions,
               message=body.message, actor=body.actor, if_plan=body.if_plan)


@router.post("/branches/{branch:path}/reset", response_model=BranchReset)
def reset(repo: RepoP, branch: BranchP, services: ServicesDep, caller: CallerDep) -> dict:
    """Drop what was written on the branch and fork it again from its parent's head."""
    return run(services, caller, reset_branch, repo, branch)
