"""Repository and workspace writes: create and delete, each one transaction."""

from __future__ import annotations

from typing import Any

from kg.indexing.config import parse_embedding_config
from kg.indexing.reembed import reembed_status
from kg.store import repos as repo_store
from kg.store.models import Repository, Workspace


def repo_dict(repo: Repository) -> dict[str, Any]:
    """The API shape of a repository."""
    return {"name": repo.name, "created_at": repo.created_at.isoformat(), "head_revision": repo.head_revision}


def workspace_dict(ws: Workspace, default_model: str) -> dict[str, Any]:
    """The API shape of a workspace: its embedding settings and any re-embed under way."""
    config = parse_embedding_config((ws.config or {}).get("embedding"), default_model=default_model)
    return {"name": ws.name, "created_at": ws.created_at.isoformat(), "embedding": config.model_dump(),
            "reembedding": reembed_status(ws.config)}


def create_repository(services: Any, name: str) -> dict[str, Any]:
    """Create a repository; it starts with the branch ``main``.

    Returns
    -------
    dict
        The repository (:func:`repo_dict`).

    Raises
    ------
    kg.errors.Conflict
        A repository of that name exists.
    kg.errors.InvalidInput
    """
    with services.db.write() as session:
        return repo_dict(repo_store.create_repository(session, name=name))


def delete_repository(services: Any, name: str) -> None:
    """Delete a repository with everything in it, then its search index.

    Raises
    ------
    kg.errors.NotFound
    """
    with services.db.write() as session:
        uid = repo_store.get_repository(session, name).uid
        repo_store.delete_repository(session, name)
    services.index.drop(uid)


def create_workspace(services: Any, repo: str, name: str, embedding: Any = None) -> dict[str, Any]:
    """Create a workspace, with its embedding model and chunking settings (default: the
    service's model). An unknown model is refused before anything is written.

    Parameters
    ----------
    services : kg.services.Services
    repo, name : str
    embedding : dict or None
        ``{"model", "chunking"}`` as API.md describes it.

    Returns
    -------
    dict
        The workspace (:func:`workspace_dict`).

    Raises
    ------
    kg.errors.NotFound
    kg.errors.Conflict
    kg.errors.InvalidInput
    kg.errors.ProviderError
    """
    default = services.settings.embedding_model
    config = parse_embedding_config(embedding, default_model=default)
    services.embedder(config.model)  # an unknown model is refused before anything is written
    with services.db.write() as session:
        r = repo_store.get_repository(session, repo, lock=True)
        ws = repo_store.create_workspace(session, r, name=name, config={"embedding": config.model_dump()})
        return workspace_dict(ws, default)
