"""Repositories and workspaces."""

from __future__ import annotations

from fastapi import APIRouter, Response

from api.deps import ServicesDep
from api.models import RepoCreate, WorkspaceCreate, WorkspacePatch
from api.schemas import EmbeddingChange, Repo, RepoList, Workspace, WorkspaceList
from kg.indexing.reembed import set_workspace_embedding
from kg.ops import repos as repo_ops
from kg.ops.repos import repo_dict, workspace_dict
from kg.store import repos as store

router = APIRouter(prefix="/api/repos", tags=["repositories"])


@router.post("", status_code=201, response_model=Repo)
def create_repo(body: RepoCreate, services: ServicesDep) -> dict:
    """Create a repository; it starts with the branch ``main``."""
    return repo_ops.create_repository(services, body.name)


@router.get("", response_model=RepoList)
def list_repos(services: ServicesDep) -> dict:
    """Every repository."""
    with services.db.read() as session:
        return {"repos": [repo_dict(r) for r in store.list_repositories(session)]}


@router.get("/{repo}", response_model=Repo)
def get_repo(repo: str, services: ServicesDep) -> dict:
    """One repository."""
    with services.db.read() as session:
        return repo_dict(store.get_repository(session, repo))


@router.delete("/{repo}", status_code=204)
def delete_repo(repo: str, services: ServicesDep) -> Response:
    """Delete a repository with everything in it, and its search index."""
    repo_ops.delete_repository(services, repo)
    return Response(status_code=204)


@router.post("/{repo}/workspaces", status_code=201, response_model=Workspace)
def create_workspace(repo: str, body: WorkspaceCreate, services: ServicesDep) -> dict:
    """Create a workspace, optionally with its embedding model and chunking settings."""
    return repo_ops.create_workspace(services, repo, body.name, body.embedding)


@router.get("/{repo}/workspaces", response_model=WorkspaceList)
def list_workspaces(repo: str, services: ServicesDep) -> dict:
    """The workspaces of a repository."""
    default = services.settings.embedding_model
    with services.db.read() as session:
        r = store.get_repository(session, repo)
        return {"workspaces": [workspace_dict(w, default) for w in store.list_workspaces(session, r)]}


@router.get("/{repo}/workspaces/{ws}", response_model=Workspace)
def get_workspace(repo: str, ws: str, services: ServicesDep) -> dict:
    """One workspace."""
    with services.db.read() as session:
        r = store.get_repository(session, repo)
        return workspace_dict(store.get_workspace(session, r, ws), services.settings.embedding_model)


@router.patch("/{repo}/workspaces/{ws}", response_model=EmbeddingChange)
def patch_workspace(repo: str, ws: str, body: WorkspacePatch, services: ServicesDep) -> dict:
    """Change a workspace's embedding model or chunking.

    The workspace is locked to its model: a change is 409 ``model_locked`` (naming the locked
    model) unless ``reembed`` is true, which re-points every node version at its text under the
    new settings and queues the embedding (``GET .../index/status`` follows it).
    """
    return set_workspace_embedding(services, repo, ws, body.embedding, reembed=body.reembed)
