"""Branches: create (one row, nothing copied), list, get, delete."""

from __future__ import annotations

from fastapi import APIRouter, Response

from api.deps import ServicesDep
from api.models import BranchCreate
from api.schemas import Branch, BranchList
from kg.indexing.chunks import forget_branch
from kg.store import repos as store
from kg.store.history import ahead_behind

router = APIRouter(prefix="/api/repos/{repo}/branches", tags=["branches"])


def _branch(session, branch, repo=None) -> dict:
    out = {
        "name": branch.name,
        "parent": store.parent_name(session, branch),
        "base_revision": branch.base_revision,
        "head_revision": branch.head_revision,
        "created_at": branch.created_at.isoformat(),
    }
    if repo is not None:
        out["ahead"], out["behind"] = ahead_behind(session, repo, branch)
    return out


@router.post("", status_code=201, response_model=Branch, response_model_exclude_unset=True)
def create_branch(repo: str, body: BranchCreate, services: ServicesDep) -> dict:
    """Create a branch from ``from`` (at ``at_revision``, default now)."""
    with services.db.write() as session:
        r = store.get_repository(session, repo, lock=True)
        branch = store.create_branch(session, r, name=body.name, from_branch=body.from_,
                                     at_revision=body.at_revision)
        return _branch(session, branch)


@router.get("", response_model=BranchList, response_model_exclude_unset=True)
def list_branches(repo: str, services: ServicesDep) -> dict:
    """Every branch of the repository."""
    with services.db.read() as session:
        r = store.get_repository(session, repo)
        return {"branches": [_branch(session, b, r) for b in store.list_branches(session, r)]}


@router.get("/{branch:path}", response_model=Branch, response_model_exclude_unset=True)
def get_branch(repo: str, branch: str, services: ServicesDep) -> dict:
    """One branch (its name may contain '/')."""
    with services.db.read() as session:
        r = store.get_repository(session, repo)
        return _branch(session, store.get_branch(session, r, branch), r)


@router.delete("/{branch:path}", status_code=204)
def delete_branch(repo: str, branch: str, services: ServicesDep) -> Response:
    """Delete a branch and what was written on it (not ``main``, not a branch with children)."""
    with services.db.write() as session:
        r = store.get_repository(session, repo, lock=True)
        branch_id = store.get_branch(session, r, branch).id
        store.delete_branch(session, r, branch)
        repo_key = r.uid
    forget_branch(services.index, repo_key, branch_id)
    return Response(status_code=204)
