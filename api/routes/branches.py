"""Branches: create (one row, nothing copied), list, get, delete."""

from __future__ import annotations

from fastapi import APIRouter, Response

from api.deps import BranchP, CallerDep, RepoP, ServicesDep
from api.guard import GuardedRoute
from kg.context import run
from kg.ops import branches as branch_ops
from kg.types import Branch, BranchCreate, BranchList

router = APIRouter(route_class=GuardedRoute, prefix="/api/repos/{repo}/branches", tags=["branches"])


@router.post("", status_code=201, response_model=Branch, response_model_exclude_unset=True)
def create_branch(repo: RepoP, body: BranchCreate, services: ServicesDep, caller: CallerDep) -> Branch:
    """Create a branch from ``from`` (at ``at_revision``, default now)."""
    return run(services, caller, branch_ops.create_branch, repo, name=body.name, from_branch=body.from_,
               at_revision=body.at_revision)


@router.get("", response_model=BranchList, response_model_exclude_unset=True)
def list_branches(repo: RepoP, services: ServicesDep, caller: CallerDep) -> BranchList:
    """Every branch of the repository."""
    return branch_ops.list_branches(services, caller, repo)


@router.get("/{branch:path}", response_model=Branch, response_model_exclude_unset=True)
def get_branch(repo: RepoP, branch: BranchP, services: ServicesDep, caller: CallerDep) -> Branch:
    """One branch (its name may contain '/')."""
    return branch_ops.get_branch(services, caller, repo, branch)


@router.delete("/{branch:path}", status_code=204)
def delete_branch(repo: RepoP, branch: BranchP, services: ServicesDep, caller: CallerDep) -> Response:
    """Delete a branch and what was written on it (not ``main``, not a branch with children)."""
    run(services, caller, branch_ops.delete_branch, repo, branch)
    return Response(status_code=204)
