"""Repositories and workspaces: create, delete, list, read; a workspace's embedding settings
(:func:`set_workspace_embedding`); the repository's search index (settle, rebuild, retry).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from kg.access import (
    authorize_new_repository,
    authorize_new_workspace,
    authorize_whole_repository,
    can_see,
    refuse_reserved_workspace,
    reserved_repositories,
)
from kg.context import Actor, IndexRunCounts, Resources, UnitOfWork, admit, permit, throttle
from kg.errors import InvalidInput
from kg.graph.neighbors import MAX_LIMIT, check_limit
from kg.index.base import SearchIndex
from kg.indexing.chunks import sync_index
from kg.indexing.config import parse_embedding_config
from kg.indexing.index_jobs import retry_failed
from kg.indexing.reembed import reembed_status, reembed_workspace
from kg.store import repos as repo_store
from kg.store.models import Repository, Workspace
from kg.store.nodes import decode_cursor, encode_cursor
from kg.store.paths import validate_name
from kg.types.repos import EmbeddingChange, EmbeddingSettings, IndexRebuilt, Reembedding, Repo, RepoList, WorkspaceList
from kg.types.repos import Workspace as WorkspaceInfo
from kg.types.search import IndexRetried

__all__ = [
    "all_repositories", "create_repository", "create_workspace", "delete_repository", "get_repository",
    "get_workspace", "list_repositories", "list_workspaces", "rebuild_index", "repo_info",
    "retry_failed_index", "set_workspace_embedding", "settle_index", "workspace_info",
]


def repo_info(repo: Repository) -> Repo:
    """A repository as every surface answers it."""
    return Repo(name=repo.name, created_at=repo.created_at.isoformat(), head_revision=repo.head_revision)


def workspace_info(ws: Workspace, default_model: str) -> WorkspaceInfo:
    """A workspace as every surface answers it; ``default_model`` is the service's, for settings
    that name none.
    """
    config = parse_embedding_config((ws.config or {}).get("embedding"), default_model=default_model)
    status = reembed_status(ws.config)
    return WorkspaceInfo(name=ws.name, created_at=ws.created_at.isoformat(),
                         embedding=EmbeddingSettings.model_validate(config.model_dump()),
                         reembedding=None if status is None else Reembedding.model_validate(status))


def list_repositories(services: Resources, caller: Actor, *, limit: int = 1000,
                      cursor: str | None = None) -> RepoList:
    """A page of the repositories ``caller`` may see, by name: ``limit + 1`` rows at a time after
    the cursor, skipping the unseen, so O(limit) for a caller who sees them all.
    """
    admit(services, caller)
    check_limit(limit)
    after = _decode_repo_cursor(cursor) if cursor is not None else None
    page: list[Repo] = []
    more = False
    with services.db.read() as session:
        while True:
            rows = repo_store.list_repositories(session, after=after, limit=limit + 1)
            for repo in rows:
                if not can_see(caller, repo.name):
                    continue
                if len(page) == limit:
                    more = True
                    break
                page.append(repo_info(repo))
            if more or len(rows) <= limit:
                break
            after = rows[-1].name
    return RepoList(repos=page, next_cursor=encode_cursor(page[-1].name) if more else None)


def all_repositories(services: Resources, caller: Actor) -> RepoList:
    """Every repository ``caller`` may see: :func:`list_repositories` page after page (no
    ``next_cursor``)."""
    found = list_repositories(services, caller, limit=MAX_LIMIT)
    cursor = found.next_cursor
    while cursor is not None:
        page = list_repositories(services, caller, limit=MAX_LIMIT, cursor=cursor)
        found.repos.extend(page.repos)
        cursor = page.next_cursor
    return RepoList(repos=found.repos)


def _decode_repo_cursor(cursor: str) -> str:
    """The repository name a cursor points after (a malformed one is a 422)."""
    name = decode_cursor(cursor)
    try:
        return validate_name("repository", name)
    except InvalidInput as exc:
        raise InvalidInput("invalid cursor: not one of this listing's next_cursor values",
                           details={"field": "cursor", "cursor": cursor}) from exc


def get_repository(services: Resources, caller: Actor, name: str) -> Repo:
    """One repository."""
    permit(services, caller, "read", name)
    with services.db.read() as session:
        return repo_info(repo_store.get_repository(session, name))


def list_workspaces(services: Resources, caller: Actor, repo: str) -> WorkspaceList:
    """The workspaces of ``repo``, by name."""
    permit(services, caller, "read", repo)
    default = services.settings.embedding_model
    with services.db.read() as session:
        r = repo_store.get_repository(session, repo)
        return WorkspaceList(workspaces=[workspace_info(w, default) for w in repo_store.list_workspaces(session, r)
                                         if can_see(caller, repo, workspace=w.name)])


def get_workspace(services: Resources, caller: Actor, repo: str, name: str) -> WorkspaceInfo:
    """One workspace of ``repo``."""
    permit(services, caller, "read", repo, workspace=name)
    with services.db.read() as session:
        r = repo_store.get_repository(session, repo)
        return workspace_info(repo_store.get_workspace(session, r, name), services.settings.embedding_model)


def create_repository(uow: UnitOfWork, name: str) -> Repo:
    """Create a repository with its ``main`` branch; needs ``admin`` on a repository glob matching
    ``name``.

    Raises
    ------
    kg.errors.Conflict
        A repository of that name exists.
    kg.errors.InvalidInput
        The RAG node's ``KG_RAG_REPO``, refused to every caller (the RAG node makes it).
    """
    admit(uow.services, uow.actor)
    authorize_new_repository(uow.actor, name, reserved_repositories(uow.services.settings))
    return repo_info(repo_store.create_repository(uow.session, name=name))


def delete_repository(uow: UnitOfWork, name: str) -> None:
    """Delete a repository with everything in it, and once committed its search index; needs
    ``admin`` over every workspace and branch in it (:func:`kg.access.authorize_whole_repository`).
    """
    uow.authorize("admin", name)
    r = repo_store.get_repository(uow.session, name, lock=True)
    _authorize_whole(uow.session, uow.actor, r)
    uid = r.uid
    repo_store.delete_repository(uow.session, name)
    index = uow.services.index
    uow.after_commit(lambda: index.drop(uid))


def _authorize_whole(session: Session, actor: Actor, repo: Repository) -> None:
    """``admin`` on every workspace and branch of ``repo`` (:func:`kg.access.authorize_whole_repository`)."""
    if actor.unrestricted:
        return
    authorize_whole_repository(actor, "admin", repo.name, [w.name for w in repo_store.list_workspaces(session, repo)],
                               [b.name for b in repo_store.list_branches(session, repo)])


def create_workspace(uow: UnitOfWork, repo: str, name: str, embedding: Any = None) -> WorkspaceInfo:
    """Create a workspace with its ``embedding`` (``{"model", "chunking"}``; default the
    service's model), refusing an unknown model before anything is written. Needs ``admin`` with a
    workspace glob matching ``name``, decided before the name is looked up (a name taken by a
    workspace the key cannot see answers as free: :func:`kg.access.authorize_new_workspace`).

    Raises
    ------
    kg.errors.Conflict
        A workspace of that name exists.
    kg.errors.InvalidInput
        A bad embedding, or the RAG node's repository (its workspaces are its collections).
    kg.errors.ProviderError
        The model cannot be loaded.
    """
    uow.authorize("admin", repo)
    authorize_new_workspace(uow.actor, repo, name)
    refuse_reserved_workspace(repo, name, reserved_repositories(uow.services.settings))
    default = uow.services.settings.embedding_model
    config = parse_embedding_config(embedding, default_model=default)
    uow.services.embedder(config.model)  # an unknown model is refused before anything is written
    r = repo_store.get_repository(uow.session, repo, lock=True)
    ws = repo_store.create_workspace(uow.session, r, name=name, config={"embedding": config.model_dump()})
    return workspace_info(ws, default)


def set_workspace_embedding(services: Resources, caller: Actor, repo: str, workspace: str, raw: Any, *,
                            reembed: bool = False) -> EmbeddingChange:
    """Change a workspace's embedding model or chunking (``raw``: ``{"model"?, "chunking"?}``), with
    ``reembed`` rebuilding it blue/green; needs ``admin``. Not one unit of work: the new model is
    probed (a remote server may take seconds) with no lock held;
    :func:`kg.indexing.reembed.reembed_workspace` makes each write a unit of work.

    Raises
    ------
    kg.errors.ModelLocked
        The settings differ and ``reembed`` is false.
    kg.errors.InvalidInput, kg.errors.ProviderError, kg.errors.BackendUnavailable
        See :func:`kg.indexing.reembed.reembed_workspace`.
    kg.errors.RateLimited
        ``reembed`` beyond ``KG_RATE_EXPENSIVE_PER_MIN``: charged whether the settings differ or not.
    """
    permit(services, caller, "admin", repo, workspace=workspace)
    if reembed:
        throttle(services, caller, "re-embed")
    answer, _ = reembed_workspace(services, repo, workspace, raw, reembed=reembed, caller=caller)
    return EmbeddingChange.model_validate(answer)


def settle_index(services: Resources, caller: Actor, repo: str) -> IndexRunCounts:
    """Embed what ``repo`` has queued (not other repositories), bring the search index up to date
    and save it (a server started next finds it warm); the jobs done and failed. Needs ``admin``
    over every workspace and branch.
    """
    permit(services, caller, "admin", repo)
    run, _ = _drain_and_sync(services, caller, repo, services.index, rebuild=False)
    return run


def rebuild_index(services: Resources, caller: Actor, repo: str, target: SearchIndex | None = None) -> IndexRebuilt:
    """Rebuild a search index (``target``, default the service's) of ``repo`` from the chunks and
    vectors in SQL (no re-embedding) once its queue is done. Needs ``admin`` over every workspace
    and branch.

    Raises
    ------
    kg.errors.BackendUnavailable
        The index cannot be reached.
    """
    permit(services, caller, "admin", repo)
    run, added = _drain_and_sync(services, caller, repo, services.index if target is None else target, rebuild=True)
    return IndexRebuilt(chunks=added, jobs_done=run.done, jobs_failed=run.failed)


def retry_failed_index(uow: UnitOfWork, repo: str) -> IndexRetried:
    """Queue a repository's failed texts again, afresh (no attempt used), and wake the indexer
    (indexed before returning with ``KG_INDEX_INLINE``). Needs ``admin`` over every workspace and
    branch.
    """
    uow.authorize("admin", repo)
    r = repo_store.get_repository(uow.session, repo, lock=True)
    _authorize_whole(uow.session, uow.actor, r)  # the failed texts of every workspace and branch
    keys = retry_failed(uow.session, r)
    uow.index_after_commit(r.id, keys)
    return IndexRetried(retried=len(keys))


def _drain_and_sync(services: Resources, caller: Actor, repo: str, index: SearchIndex, *,
                    rebuild: bool) -> tuple[IndexRunCounts, int]:
    """Run ``repo``'s queue, then bring ``index`` up to date from SQL (emptied first when
    ``rebuild``) and save it: the jobs run and the chunks placed. ``caller`` needs ``admin`` over
    every workspace and branch.
    """
    with services.db.read() as session:
        r = repo_store.get_repository(session, repo)
        _authorize_whole(session, caller, r)
    run = services.indexer.drain(repo_id=r.id)
    if rebuild:
        index.drop(r.uid)
    with services.db.read() as session:
        added = sync_index(session, index, r.id, r.uid)
    index.flush(r.uid)
    return run, added
