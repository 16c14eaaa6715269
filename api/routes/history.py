"""History: the revision log, batches, diff, merge and reset."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from api.deps import BranchQ, RevisionQ, ServicesDep
from api.models import BatchBody, MergeBody
from api.schemas import BatchResult, BranchReset, Diff, MergeResult, RevisionLog
from kg.errors import InvalidInput
from kg.indexing.chunks import forget_branch
from kg.ops import nodes as node_ops
from kg.ops.merge import merge_branch
from kg.store import history
from kg.store.repos import branch_view, get_branch, get_repository, parent_name

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
    into = body.into
    if into is None:
        with services.db.read() as session:
            into = parent_name(session, get_branch(session, get_repository(session, repo), branch))
        if into is None:
            raise InvalidInput("main has no parent: say where to merge with 'into'")
    return merge_branch(services, repo, branch, into, resolutions=body.resolutions, dry_run=body.dry_run,
                        message=body.message, actor=body.actor)


@router.post("/branches/{branch:path}/reset", response_model=BranchReset)
def reset(repo: str, branch: str, services: ServicesDep) -> dict:
    """Drop what was written on the branch and fork it again from its parent's head."""
    with services.db.write() as session:
        r = get_repository(session, repo, lock=True)
        b = history.reset_branch(session, r, branch)
        out = {"name": b.name, "parent": parent_name(session, b), "base_revision": b.base_revision,
               "head_revision": b.head_revision}
        repo_key, branch_id = r.uid, b.id
    forget_branch(services.index, repo_key, branch_id)
    return out
