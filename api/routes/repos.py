"""Repositories and workspaces."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response

from api.deps import CallerDep, RepoP, ServicesDep, WorkspaceP
from api.errors import refusal
from api.guard import GuardedRoute
from kg.context import run
from kg.ops import repos as repo_ops
from kg.types import (
    EmbeddingChange,
    Repo,
    RepoCreate,
    RepoList,
    Workspace,
    WorkspaceCreate,
    WorkspaceList,
    WorkspacePatch,
)

router = APIRouter(route_class=GuardedRoute, prefix="/api/repos", tags=["repositories"])


@router.post("", status_code=201, response_model=Repo)
def create_repo(body: RepoCreate, services: ServicesDep, caller: CallerDep) -> Repo:
    """Create a repository; it starts with the branch ``main``."""
    return run(services, caller, repo_ops.create_repository, body.name)


@router.get("", response_model=RepoList,
            responses={422: refusal("`invalid_input`: a `cursor` that is not a `next_cursor` of this listing "
                                    "(`details.field`: `cursor`)")})
def list_repos(services: ServicesDep, caller: CallerDep,
               limit: Annotated[int, Query(ge=1, le=10000)] = 1000,
               cursor: Annotated[str | None, Query(min_length=1, description="The previous page's next_cursor "
                                                   "(an opaque token of this listing).")]
               = None) -> RepoList:
    """The repositories the caller may see, by name, paginated with ``limit`` and ``cursor``.

    ``cursor`` is a ``next_cursor`` this listing answered: any other string is a 422
    ``invalid_input`` (``details.field``: ``cursor``), a rule no pattern states (the token is
    opaque)."""
    return repo_ops.list_repositories(services, caller, limit=limit, cursor=cursor)


@router.get("/{repo}", response_model=Repo)
def get_repo(repo: RepoP, services: ServicesDep, caller: CallerDep) -> Repo:
    """One repository."""
    return repo_ops.get_repository(services, caller, repo)


@router.delete("/{repo}", status_code=204)
def delete_repo(repo: RepoP, services: ServicesDep, caller: CallerDep) -> Response:
    """Delete a repository with everything in it, and its search index."""
    run(services, caller, repo_ops.delete_repository, repo)
    return Response(status_code=204)


@router.post("/{repo}/workspaces", status_code=201, response_model=Workspace)
def create_workspace(repo: RepoP, body: WorkspaceCreate, services: ServicesDep, caller: CallerDep) -> Workspace:
    """Create a workspace, optionally with its embedding model and chunking settings."""
    return run(services, caller, repo_ops.create_workspace, repo, body.name, body.embedding)


@router.get("/{repo}/workspaces", response_model=WorkspaceList)
def list_workspaces(repo: RepoP, services: ServicesDep, caller: CallerDep) -> WorkspaceList:
    """The workspaces of a repository."""
    return repo_ops.list_workspaces(services, caller, repo)


@router.get("/{repo}/workspaces/{ws}", response_model=Workspace)
def get_workspace(repo: RepoP, ws: WorkspaceP, services: ServicesDep, caller: CallerDep) -> Workspace:
    """One workspace."""
    return repo_ops.get_workspace(services, caller, repo, ws)


@router.patch("/{repo}/workspaces/{ws}", response_model=EmbeddingChange)
def patch_workspace(repo: RepoP, ws: WorkspaceP, body: WorkspacePatch, services: ServicesDep,
                    caller: CallerDep) -> EmbeddingChange:
    """Change a workspace's embedding model or chunking.

    The workspace is locked to its model: a change is 409 ``model_locked`` (naming the locked
    model) unless ``reembed`` is true, which re-points every node version at its text under the
    new settings and queues the embedding (``GET .../index/status`` follows it).
    """
    return repo_ops.set_workspace_embedding(services, caller, repo, ws, body.embedding, reembed=body.reembed)
