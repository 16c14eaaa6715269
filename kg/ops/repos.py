"""Repositories and workspaces: create, delete, list and read; a workspace's embedding
settings change through :func:`set_workspace_embedding`."""

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
from kg.index.base import VectorIndex
from kg.indexing.chunks import sync_index
from kg.indexing.config import parse_embedding_config
from kg.indexing.index_jobs import retry_failed
from kg.indexing.reembed import reembed_status, reembed_workspace
from kg.store import repos as repo_store
from kg.store.models import Repository, Workspace
from kg.store.nodes import decode_cursor, encode_cursor
from kg.store.paths import validate_name


def repo_dict(repo: Repository) -> dict[str, Any]:
    """The API shape of a repository.

    Parameters
    ----------
    repo : Repository
        The repository.

    Returns
    -------
    dict
        ``{"name", "created_at", "head_revision"}``.
    """
    return {"name": repo.name, "created_at": repo.created_at.isoformat(), "head_revision": repo.head_revision}


def workspace_dict(ws: Workspace, default_model: str) -> dict[str, Any]:
    """The API shape of a workspace: its embedding settings and any re-embed under way.

    Parameters
    ----------
    ws : Workspace
        The workspace row.
    default_model : str
        The service's model, for a workspace whose settings name none.

    Returns
    -------
    dict
        ``{"name", "created_at", "embedding", "reembedding"}``.
    """
    config = parse_embedding_config((ws.config or {}).get("embedding"), default_model=default_model)
    return {"name": ws.name, "created_at": ws.created_at.isoformat(), "embedding": config.model_dump(),
            "reembedding": reembed_status(ws.config)}


def list_repositories(services: Resources, caller: Actor, *, limit: int = 1000,
                      cursor: str | None = None) -> tuple[list[dict[str, Any]], str | None]:
    """A page of the repositories ``caller`` may see, by name.

    Parameters
    ----------
    services : kg.context.Resources
        The process's resources (store, index, embedders).
    caller : kg.context.Actor
        Who reads.
    limit : int, default 1000
        At most this many repositories, 1..10,000.
    cursor : str or None, optional
        The previous page's ``next_cursor``; None for the first page.

    Returns
    -------
    (list of dict, str or None)
        :func:`repo_dict` of each, by name, and the cursor of the next page (None: the last).

    Raises
    ------
    kg.errors.InvalidInput
        A limit out of range, or a cursor that is not one of this listing's.
    kg.errors.Unauthenticated
        No caller while keys are required.

    Notes
    -----
    Reads ``limit + 1`` rows at a time after the cursor, skipping repositories the caller may
    not see, until the page is full: O(limit) for a caller who sees them all.
    """
    admit(services, caller)
    check_limit(limit)
    after = _decode_repo_cursor(cursor) if cursor is not None else None
    page: list[dict[str, Any]] = []
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
                page.append(repo_dict(repo))
            if more or len(rows) <= limit:
                break
            after = rows[-1].name
    return page, (encode_cursor(page[-1]["name"]) if more else None)


def all_repositories(services: Resources, caller: Actor) -> list[dict[str, Any]]:
    """Every repository ``caller`` may see, by name: :func:`list_repositories` page after page.

    Parameters
    ----------
    services : kg.context.Resources
        The process's resources.
    caller : kg.context.Actor
        Who reads.

    Returns
    -------
    list of dict
        :func:`repo_dict` of each.

    Raises
    ------
    kg.errors.Unauthenticated
        No caller while keys are required.
    """
    found, cursor = list_repositories(services, caller, limit=MAX_LIMIT)
    while cursor is not None:
        page, cursor = list_repositories(services, caller, limit=MAX_LIMIT, cursor=cursor)
        found.extend(page)
    return found


def _decode_repo_cursor(cursor: str) -> str:
    """The repository name a cursor points after (a malformed one is a 422)."""
    name = decode_cursor(cursor)
    try:
        return validate_name("repository", name)
    except InvalidInput as exc:
        raise InvalidInput("invalid cursor: not one of this listing's next_cursor values",
                           details={"field": "cursor", "cursor": cursor}) from exc


def get_repository(services: Resources, caller: Actor, name: str) -> dict[str, Any]:
    """One repository.

    Parameters
    ----------
    services : kg.context.Resources
        The process's resources (store, index, embedders).
    caller : kg.context.Actor
        Who reads.
    name : str
        The name.

    Returns
    -------
    dict
        :func:`repo_dict`.

    Raises
    ------
    kg.errors.NotFound
    """
    permit(services, caller, "read", name)
    with services.db.read() as session:
        return repo_dict(repo_store.get_repository(session, name))


def list_workspaces(services: Resources, caller: Actor, repo: str) -> list[dict[str, Any]]:
    """The workspaces of ``repo``, by name.

    Parameters
    ----------
    services : kg.context.Resources
        The process's resources (store, index, embedders).
    caller : kg.context.Actor
        Who reads.
    repo : str
        The repository.

    Returns
    -------
    list of dict
        :func:`workspace_dict` of each.

    Raises
    ------
    kg.errors.NotFound
        Unknown repository.
    """
    permit(services, caller, "read", repo)
    default = services.settings.embedding_model
    with services.db.read() as session:
        r = repo_store.get_repository(session, repo)
        return [workspace_dict(w, default) for w in repo_store.list_workspaces(session, r)
                if can_see(caller, repo, workspace=w.name)]


def get_workspace(services: Resources, caller: Actor, repo: str, name: str) -> dict[str, Any]:
    """One workspace of ``repo``.

    Parameters
    ----------
    services : kg.context.Resources
        The process's resources (store, index, embedders).
    caller : kg.context.Actor
        Who reads.
    repo, name : str
        The repository. The name.

    Returns
    -------
    dict
        :func:`workspace_dict`.

    Raises
    ------
    kg.errors.NotFound
        Unknown repository or workspace.
    """
    permit(services, caller, "read", repo, workspace=name)
    with services.db.read() as session:
        r = repo_store.get_repository(session, repo)
        return workspace_dict(repo_store.get_workspace(session, r, name), services.settings.embedding_model)


def create_repository(uow: UnitOfWork, name: str) -> dict[str, Any]:
    """Create a repository; it starts with the branch ``main``.

    Parameters
    ----------
    uow : kg.context.UnitOfWork
        The write transaction and its caller.
    name : str
        Letters, digits, ``-``, ``_`` and ``.``.

    Returns
    -------
    dict
        The repository (:func:`repo_dict`).

    Raises
    ------
    kg.errors.Conflict
        A repository of that name exists.
    kg.errors.Forbidden
        A key without ``admin`` on a repository glob matching ``name``.
    kg.errors.InvalidInput
        A bad name, or a reserved one (the RAG node's ``KG_RAG_REPO``, refused to every
        caller: the RAG node makes it on its first call).
    """
    admit(uow.services, uow.actor)
    authorize_new_repository(uow.actor, name, reserved_repositories(uow.services.settings))
    return repo_dict(repo_store.create_repository(uow.session, name=name))


def delete_repository(uow: UnitOfWork, name: str) -> None:
    """Delete a repository with everything in it; once committed, its search index.

    Parameters
    ----------
    uow : kg.context.UnitOfWork
        The write transaction and its caller.
    name : str
        The name.

    Raises
    ------
    kg.errors.NotFound
    kg.errors.Forbidden
        A key without ``admin`` on the repository, or whose ``admin`` grants do not cover every
        workspace and branch in it (:func:`kg.access.authorize_whole_repository`).
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


def create_workspace(uow: UnitOfWork, repo: str, name: str, embedding: Any = None) -> dict[str, Any]:
    """Create a workspace, with its embedding model and chunking settings (default: the
    service's model). An unknown model is refused before anything is written.

    Parameters
    ----------
    uow : kg.context.UnitOfWork
        The write transaction and its caller.
    repo, name : str
        The repository, and the new workspace's name.
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
        A bad name or embedding, or the RAG node's repository (its workspaces are its
        collections: :func:`kg.access.refuse_reserved_workspace`).
    kg.errors.ProviderError
    kg.errors.Forbidden
        A key without ``admin`` on the repository, or whose ``admin`` grants' workspace globs do
        not match ``name`` (decided before the name is looked up: a name taken by a workspace
        the key cannot see answers as a free one, :func:`kg.access.authorize_new_workspace`).
    """
    uow.authorize("admin", repo)
    authorize_new_workspace(uow.actor, repo, name)
    refuse_reserved_workspace(repo, name, reserved_repositories(uow.services.settings))
    default = uow.services.settings.embedding_model
    config = parse_embedding_config(embedding, default_model=default)
    uow.services.embedder(config.model)  # an unknown model is refused before anything is written
    r = repo_store.get_repository(uow.session, repo, lock=True)
    ws = repo_store.create_workspace(uow.session, r, name=name, config={"embedding": config.model_dump()})
    return workspace_dict(ws, default)


def set_workspace_embedding(services: Resources, caller: Actor, repo: str, workspace: str, raw: Any, *,
                            reembed: bool = False) -> dict[str, Any]:
    """Change a workspace's embedding model or chunking; with ``reembed``, rebuild it blue/green.

    Not one unit of work: the new model is probed (a remote server may take seconds) between
    reading the current settings and writing the new ones, and no write lock is held meanwhile;
    :func:`kg.indexing.reembed.reembed_workspace` runs each of its writes as a unit of work.

    Parameters
    ----------
    services : kg.context.Resources
        The process's resources (store, index, embedders).
    caller : kg.context.Actor
        Who asks.
    repo, workspace : str
        The repository. The workspace's name.
    raw : dict
        The new ``embedding`` object (``{"model"?, "chunking"?}``).
    reembed : bool
        Rebuild the workspace under the new settings; without it any change is refused.

    Returns
    -------
    dict
        ``{"workspace", "embedding", "reembedded", "node_versions", "queued", "switched"}``.

    Raises
    ------
    kg.errors.ModelLocked
        The settings differ and ``reembed`` is false.
    kg.errors.InvalidInput, kg.errors.NotFound, kg.errors.ProviderError, kg.errors.BackendUnavailable
        See :func:`kg.indexing.reembed.reembed_workspace`.
    kg.errors.Forbidden
        A key without ``admin`` on the repository.
    kg.errors.RateLimited
        ``reembed`` beyond the caller's rate limit (``KG_RATE_EXPENSIVE_PER_MIN``): a re-embed
        is charged as one expensive call, whether or not the settings differ.
    """
    permit(services, caller, "admin", repo, workspace=workspace)
    if reembed:
        throttle(services, caller, "re-embed")
    answer, _ = reembed_workspace(services, repo, workspace, raw, reembed=reembed, caller=caller)
    return answer


def settle_index(services: Resources, caller: Actor, repo: str) -> IndexRunCounts:
    """Embed what ``repo`` has queued, bring the search index up to date and save it (so a
    server started next finds it warm). Other repositories' queues are not touched.

    Parameters
    ----------
    services : kg.context.Resources
        The process's resources (store, index, embedders).
    caller : kg.context.Actor
        Who asks.
    repo : str
        The repository.

    Returns
    -------
    kg.context.IndexRunCounts
        The jobs done and failed.

    Raises
    ------
    kg.errors.NotFound
        Unknown repository.
    kg.errors.Forbidden
        A key without ``admin`` on every workspace and branch of the repository.
    """
    permit(services, caller, "admin", repo)
    run, _ = _drain_and_sync(services, caller, repo, services.index, rebuild=False)
    return run


def rebuild_index(services: Resources, caller: Actor, repo: str, target: VectorIndex | None = None) -> dict[str, Any]:
    """Rebuild a search index of ``repo`` from the chunks and vectors stored in SQL (no
    re-embedding), after finishing the repository's queued indexing.

    Parameters
    ----------
    services : kg.context.Resources
        The process's resources (store, index, embedders).
    caller : kg.context.Actor
        Who asks.
    repo : str
        The repository.
    target : VectorIndex, optional
        The index to fill (default: the service's own).

    Returns
    -------
    dict
        ``{"chunks", "jobs_done", "jobs_failed"}``: the chunks placed and the queued jobs run.

    Raises
    ------
    kg.errors.NotFound
        Unknown repository.
    kg.errors.Forbidden
        A key without ``admin`` on every workspace and branch of the repository.
    kg.errors.BackendUnavailable
        The index cannot be reached.
    """
    permit(services, caller, "admin", repo)
    run, added = _drain_and_sync(services, caller, repo, services.index if target is None else target, rebuild=True)
    return {"chunks": added, "jobs_done": run.done, "jobs_failed": run.failed}


def retry_failed_index(uow: UnitOfWork, repo: str) -> dict[str, int]:
    """Embed a repository's failed texts again: their jobs are set back to ``pending``, afresh
    (no attempt used), and the indexer is woken (with ``KG_INDEX_INLINE``, they are indexed
    before this returns).

    Parameters
    ----------
    uow : kg.context.UnitOfWork
        The write transaction and its caller.
    repo : str
        The repository.

    Returns
    -------
    dict
        ``{"retried"}``: the jobs queued again (0 when none had failed).

    Raises
    ------
    kg.errors.NotFound
        Unknown repository.
    kg.errors.Forbidden
        A key without ``admin`` over every workspace and branch of the repository.
    """
    uow.authorize("admin", repo)
    r = repo_store.get_repository(uow.session, repo, lock=True)
    _authorize_whole(uow.session, uow.actor, r)  # the failed texts of every workspace and branch
    keys = retry_failed(uow.session, r)
    uow.index_after_commit(r.id, keys)
    return {"retried": len(keys)}


def _drain_and_sync(services: Resources, caller: Actor, repo: str, index: VectorIndex, *,
                    rebuild: bool) -> tuple[IndexRunCounts, int]:
    """Run ``repo``'s queued indexing, then bring ``index`` up to date from SQL (emptied first
    when ``rebuild``) and save it: the jobs run and the chunks placed. It works on every
    workspace and branch: ``caller`` needs ``admin`` over all of them."""
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
