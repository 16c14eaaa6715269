"""Branches: create (one row, nothing copied), list, get, delete."""

from __future__ import annotations

from fastapi import APIRouter, Response

from api.deps import ServicesDep
from api.models import BranchCreate
from api.schemas import Branch, BranchList
from kg.ops import branches as branch_ops
from kg.ops.branches import branch_dict
from kg.store import repos as store

router = APIRouter(prefix="/api/repos/{repo}/branches", tags=["branches"])


@router.post("", status_code=201, response_model=Branch, response_model_exclude_unset=True)
def create_branch(repo: str, body: BranchCreate, services: ServicesDep) -> dict:
    """Create a branch from ``from`` (at ``at_revision``, default now)."""
    return branch_ops.create_branch(services, repo, name=body.name, from_branch=body.from_,
                                    at_revision=body.at_revision)


@router.get("", response_model=BranchList, response_model_exclude_unset=True)
def list_branches(repo: str, services: ServicesDep) -> dict:
    """Every branch of the repository."""
    with services.db.read() as session:
        r = store.get_repository(session, repo)
        return {"branches": [branch_dict(session, b, r) for b in store.list_branches(session, r)]}


@router.get("/{branch:path}", response_model=Branch, response_model_exclude_unset=True)
def get_branch(repo: str, branch: str, services: ServicesDep) -> dict:
    """One branch (its name may contain '/')."""
    with services.db.read() as session:
        r = store.get_repository(session, repo)
        return branch_dict(session, store.get_branch(session, r, branch), r)


@router.delete("/{branch:path}", status_code=204)
def delete_branch(repo: str, branch: str, services: ServicesDep) -> Response:
    """Delete a branch and what was written on it (not ``main``, not a branch with children)."""
    branch_ops.delete_branch(services, repo, branch)
    return Response(status_code=204)
