"""History: the revision log, batches, diff, merge and reset."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from api.deps import MAX_REVISION, BranchP, BranchQ, CallerDep, RepoP, RevisionQ, ServicesDep
from api.errors import refusal
from api.guard import GuardedRoute
from kg.context import run
from kg.ops import nodes as node_ops
from kg.ops import queries
from kg.ops.branches import reset_branch
from kg.ops.merge import merge_branch, preview_merge
from kg.store.paths import BRANCH_PATTERN
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
        ) -> RevisionLog:
    """Revisions of the branch's history (its own, then its ancestors' up to the fork), newest first."""
    return queries.revision_log(services, caller, repo, branch, limit=limit, before=before, at_revision=at_revision,
                                max_changes=changes)


@router.post("/nodes:batch", response_model=BatchResult,
             responses={422: refusal("`invalid_input`: a (workspace, path) named twice in the batch, an upsert "
                                     "below a node the batch deletes, more than 10,000 items in all "
                                     "(`details.field`: `upserts` or `deletes`)")})
def batch(repo: RepoP, body: BatchBody, services: ServicesDep, caller: CallerDep,
          branch: BranchQ = "main") -> BatchResult:
    """Deletes then upserts as one revision: all or nothing.

    Rules across the items, each a 422 ``invalid_input`` naming the list in ``details.field``
    (and the items in ``details.items``): a batch names each (workspace, path) once, in either
    list; no upsert below a node the batch deletes (the deletes come first); at most 10,000
    items in all."""
    return run(services, caller, node_ops.batch, repo, branch, upserts=body.upserts, deletes=body.deletes,
               parents=body.parents, message=body.message, actor=body.actor)


@router.get("/branches/{branch:path}/diff", response_model=Diff,
            responses={409: refusal("`conflict`: no `against` and the branch (`main`) has no parent"),
                       422: refusal("`invalid_input`: `against` is neither the branch's parent, nor one of "
                                    "its children, nor the branch itself (`details.field`: `against`)")})
def diff(repo: RepoP, branch: BranchP, services: ServicesDep, caller: CallerDep,
         against: Annotated[str | None, Query(min_length=1, max_length=255, json_schema_extra={
             "pattern": BRANCH_PATTERN}, description="The branch's parent, one of its children, or the branch "
                                                     "itself (an empty diff); default: its parent.")] = None) -> Diff:
    """What the branch changed since its merge base with ``against`` (default: its parent).

    ``against`` names the branch's parent, one of its children, or the branch itself (an empty
    diff whose base is the branch's head); any other branch is a 422 ``invalid_input``
    (``details.field``: ``against``), a rule with the branches' state."""
    return queries.diff(services, caller, repo, branch, against)


@router.post("/branches/{branch:path}/merge", response_model=MergeResult, response_model_exclude_unset=True,
             responses={409: refusal("`merge_conflict`: conflicts without resolutions; `conflict`: the branches "
                                     "changed since the dry run `if_plan` names, or `main` merged with no `into`"),
                        422: refusal("`invalid_input`: `into` is the branch itself or neither its parent nor "
                                     "its child (`details.field`: `into`); a resolution naming no conflict of "
                                     "the merge or an unknown workspace (`resolutions`); an `if_plan` that is "
                                     "not a plan of these two branches (`if_plan`)")})
def merge(repo: RepoP, branch: BranchP, body: MergeBody, services: ServicesDep, caller: CallerDep) -> MergeResult:
    """Merge the branch into ``into`` (default: its parent): fast-forward or three-way.

    Rules with the branches' state, each a 422 ``invalid_input`` naming its field in
    ``details.field``: ``into`` is the branch's parent or one of its children, never the branch
    itself (``into``); each resolution names a conflict of this merge, as its dry run lists them,
    in a workspace of the repository (``resolutions``); ``if_plan`` is the ``plan`` of a dry run
    of these two branches (``if_plan``; 409 ``conflict`` when either branch changed since)."""
    if body.dry_run:
        return preview_merge(services, caller, repo, branch, body.into, resolutions=body.resolutions,
                             if_plan=body.if_plan)
    return run(services, caller, merge_branch, repo, branch, body.into, resolutions=body.resolutions,
               message=body.message, actor=body.actor, if_plan=body.if_plan)


@router.post("/branches/{branch:path}/reset", response_model=BranchReset)
def reset(repo: RepoP, branch: BranchP, services: ServicesDep, caller: CallerDep) -> BranchReset:
    """Drop what was written on the branch and fork it again from its parent's head."""
    return run(services, caller, reset_branch, repo, branch)
