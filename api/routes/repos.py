"""Repositories and workspaces."""

from __future__ import annotations

from fastapi import APIRouter, Response

from api.deps import ServicesDep
from api.models import RepoCreate, WorkspaceCreate, WorkspacePatch
from api.schemas import EmbeddingChange, Repo, RepoList, Workspace, WorkspaceList
from kg.indexing.config import parse_embedding_config
from kg.indexing.reembed import reembed_status, set_workspace_embedding
from kg.store import repos as store

router = APIRouter(prefix="/api/repos", tags=["repositories"])


def _repo(repo) -> dict:
    return {"name": repo.name, "created_at": repo.created_at.isoformat(), "head_revision": repo.head_revision}


@router.post("", status_code=201, response_model=Repo)
def create_repo(body: RepoCreate, services: ServicesDep) -> dict:
    """Create a repository; it starts with the branch ``main``."""
    with services.db.write() as session:
        return _repo(store.create_repository(session, name=body.name))


@router.get("", response_model=RepoList)
def list_repos(services: ServicesDep) -> dict:
    """Every repository."""
    with services.db.read() as session:
        return {"repos": [_repo(r) for r in store.list_repositories(session)]}


@router.get("/{repo}", response_model=Repo)
def get_repo(repo: str, services: ServicesDep) -> dict:
    """One repository."""
    with services.db.read() as session:
        return _repo(store.get_repository(session, repo))


@router.delete("/{repo}", status_code=204)
def delete_repo(repo: str, services: ServicesDep) -> Response:
    """Delete a repository with everything in it, and its search index."""
    with services.db.write() as session:
        uid = store.get_repository(session, repo).uid
        store.delete_repository(session, repo)
    services.index.drop(uid)
    return Response(status_code=204)


def _workspace(ws, default_model: str) -> dict:
    config = parse_embedding_config((ws.config or {}).get("embedding"), default_model=default_model)
    return {"name": ws.name, "created_at": ws.created_at.isoformat(), "embedding": config.model_dump(),
            "reembedding": reembed_status(ws.config)}


@router.post("/{repo}/workspaces", status_code=201, response_model=Workspace)
def create_workspace(repo: str, body: WorkspaceCreate, services: ServicesDep) -> dict:
    """Create a workspace, optionally with its embedding model and chunking settings."""
    default = services.settings.embedding_model
    config = parse_embedding_config(body.embedding, default_model=default)
    services.embedder(config.model)  # an unknown model is refused before anything is written
    with services.db.write() as session:
        r = store.get_repository(session, repo, lock=True)
        ws = store.create_workspace(session, r, name=body.name, config={"embedding": config.model_dump()})
        return _workspace(ws, default)


@router.get("/{repo}/workspaces", response_model=WorkspaceList)
def list_workspaces(repo: str, services: ServicesDep) -> dict:
    """The workspaces of a repository."""
    default = services.settings.embedding_model
    with services.db.read() as session:
        r = store.get_repository(session, repo)
        return {"workspaces": [_workspace(w, default) for w in store.list_workspaces(session, r)]}


@router.get("/{repo}/workspaces/{ws}", response_model=Workspace)
def get_workspace(repo: str, ws: str, services: ServicesDep) -> dict:
    """One workspace."""
    with services.db.read() as session:
        r = store.get_repository(session, repo)
        return _workspace(store.get_workspace(session, r, ws), services.settings.embedding_model)


@router.patch("/{repo}/workspaces/{ws}", response_model=EmbeddingChange)
def patch_workspace(repo: str, ws: str, body: WorkspacePatch, services: ServicesDep) -> dict:
    """Change a workspace's embedding model or chunking.

    The workspace is locked to its model: a change is 409 ``model_locked`` (naming the locked
    model) unless ``reembed`` is true, which re-points every node version at its text under the
    new settings and queues the embedding (``GET .../index/status`` follows it).
    """
    return set_workspace_embedding(services, repo, ws, body.embedding, reembed=body.reembed)
