"""Reads of a branch's nodes and history: what the adapters answer GETs with.

Each takes the services and the caller, reads through :func:`kg.context.reading` and returns
the API shape; search and the graph walks are :mod:`kg.rag`'s.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from kg.access import can_see
from kg.context import Actor, Resources, permit, reading, scoped_view
from kg.errors import KGError, NotFound
from kg.indexing import index_jobs
from kg.ops import branches as branch_ops
from kg.store import history
from kg.store import nodes as node_store
from kg.store.models import Branch, Workspace, node_dict
from kg.store.paths import validate_path
from kg.store.references import list_references
from kg.store.repos import branch_view, get_repository, parent_name


def get_node(services: Resources, caller: Actor, repo: str, branch: str, workspace: str, path: str, *,
             at_revision: int | None = None) -> dict[str, Any]:
    """The node at ``path`` as the branch sees it.

    Parameters
    ----------
    services : kg.context.Resources
        The process's resources (store, index, embedders).
    caller : kg.context.Actor
        Who reads.
    repo, branch, workspace : str
        The repository. The branch. The workspace's name.
    path : str
        A validated path (``/a/b``).
    at_revision : int or None
        Read the branch as of this revision.

    Returns
    -------
    dict
        The node's API shape.

    Raises
    ------
    kg.errors.NotFound
        Unknown repository, branch, workspace or node.
    """
    permit(services, caller, "read", repo, branch, workspace)
    with reading(services, caller, repo, branch, at_revision) as (session, view):
        return node_dict(node_store.get_node(session, view, workspace, path), workspace)


def list_children(services: Resources, caller: Actor, repo: str, branch: str, workspace: str, parent: str, *,
                  at_revision: int | None = None) -> list[dict[str, Any]]:
    """The children of ``parent`` (``/`` for the top level) in their order.

    Parameters
    ----------
    services : kg.context.Resources
        The process's resources (store, index, embedders).
    caller : kg.context.Actor
        Who reads.
    repo, branch, workspace : str
        The repository. The branch. The workspace's name.
    parent : str
        ``/`` or a path.
    at_revision : int or None
        Read as of this revision; None: the head.

    Returns
    -------
    list of dict
        The nodes' API shapes.

    Raises
    ------
    kg.errors.NotFound
    kg.errors.InvalidInput
        A malformed ``parent``.
    """
    if parent != "/":
        validate_path(parent)
    permit(services, caller, "read", repo, branch, workspace)
    with reading(services, caller, repo, branch, at_revision) as (session, view):
        return [node_dict(v, workspace) for v in node_store.list_children(session, view, workspace, parent)]


def list_prefix(services: Resources, caller: Actor, repo: str, branch: str, workspace: str, prefix: str, *,
                limit: int = 1000, cursor: str | None = None,
                at_revision: int | None = None) -> tuple[list[dict[str, Any]], str | None]:
    """Every node under ``prefix``, by path, a page of at most ``limit``.

    Parameters
    ----------
    services : kg.context.Resources
        The process's resources (store, index, embedders).
    caller : kg.context.Actor
        Who reads.
    repo, branch, workspace : str
        Where to list.
    prefix : str
        List the nodes whose path starts with it.
    limit : int, 1..10,000
        Most rows returned.
    cursor : str or None
        Where the previous page ended.
    at_revision : int or None
        Read as of this revision; None: the head.

    Returns
    -------
    (list of dict, str or None)
        The page and the cursor of the next one (None: the last page).

    Raises
    ------
    kg.errors.NotFound
    kg.errors.InvalidInput
        A malformed cursor.
    """
    permit(services, caller, "read", repo, branch, workspace)
    with reading(services, caller, repo, branch, at_revision) as (session, view):
        rows, next_cursor = node_store.list_prefix(session, view, workspace, prefix, limit=limit, cursor=cursor)
        return [node_dict(v, workspace) for v in rows], next_cursor


def references(services: Resources, caller: Actor, repo: str, branch: str, target: str, *, limit: int = 1000,
               at_revision: int | None = None) -> tuple[list[dict[str, Any]], bool]:
    """The nodes whose properties refer to ``target`` (through the reference index).

    Parameters
    ----------
    services : kg.context.Resources
        The process's resources (store, index, embedders).
    caller : kg.context.Actor
        Who reads.
    repo, branch : str
        The repository. The branch.
    target : str
        A node address ``workspace:/path``.
    limit : int
        Most rows returned.
    at_revision : int or None
        Read as of this revision; None: the head.

    Returns
    -------
    (list of dict, bool)
        The referring nodes with the property key, and whether more exist.

    Raises
    ------
    kg.errors.NotFound
    kg.errors.InvalidInput
    """
    with reading(services, caller, repo, branch, at_revision) as (session, view):
        return list_references(session, view, target, limit=limit)


def revision_log(services: Resources, caller: Actor, repo: str, branch: str, *, limit: int = 100,
                 before: int | None = None, at_revision: int | None = None) -> list[dict[str, Any]]:
    """The revisions of the branch's history (its own, then its ancestors' up to the fork),
    newest first.

    Parameters
    ----------
    services : kg.context.Resources
        The process's resources (store, index, embedders).
    caller : kg.context.Actor
        Who reads.
    repo, branch : str
        The repository. The branch.
    limit : int
        Most rows returned.
    before : int or None
        Only revisions older than this.
    at_revision : int or None
        Read as of this revision; None: the head.

    Returns
    -------
    list of dict
        ``{"number", "branch", "message", "actor", "created_at", ...}`` per revision.

    Raises
    ------
    kg.errors.NotFound
    """
    with reading(services, caller, repo, branch, at_revision) as (session, view):
        return history.revision_log(session, view, limit=limit, before=before)


def diff(services: Resources, caller: Actor, repo: str, branch: str, against: str | None = None) -> dict[str, Any]:
    """What ``branch`` changed since its merge base with ``against`` (default: its parent).

    Parameters
    ----------
    services : kg.context.Resources
        The process's resources (store, index, embedders).
    caller : kg.context.Actor
        Who reads.
    repo, branch : str
        The repository. The branch.
    against : str or None
        The branch compared with; None: the branch's parent.

    Returns
    -------
    dict
        See :func:`kg.store.history.diff_branches`.

    Raises
    ------
    kg.errors.NotFound
    kg.errors.InvalidInput
    """
    with reading(services, caller, repo, branch) as (session, view):
        compared = against if against is not None else parent_name(session, view.branch)
        if against is None and compared is not None and not can_see(caller, repo, compared):
            # its parent is a branch the caller cannot see: not even its name is told
            raise NotFound(f"branch {branch!r} has no parent you can read; name a branch with 'against'",
                           details={"branch": branch})
        if compared is not None:
            permit(services, caller, "read", repo, compared)
            # Changes the caller may read on both sides: a workspace readable on the branch but
            # not on the one compared shows nothing of the other's state.
            other = scoped_view(caller, branch_view(session, repo, compared))
            readable = _both(view.readable, other.readable)
        else:
            readable = view.readable
        return history.diff_branches(session, view.repo, branch, against, readable=readable)


def _both(one: frozenset[int] | None, other: frozenset[int] | None) -> frozenset[int] | None:
    """The workspaces readable in two scopes (None: every workspace)."""
    if one is None or other is None:
        return other if one is None else one
    return one & other


def index_status(services: Resources, caller: Actor, repo: str) -> dict[str, Any]:
    """What the indexer has pending, running and failed for ``repo``, and what the search index
    holds (each collection named by its workspace and branch).

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
    dict
        :func:`kg.indexing.index_jobs.index_status` with ``"index"``: the index's statistics,
        or ``{"error": {"code", "message"}}`` when the index cannot answer (the queue is in SQL
        and still worth seeing).

    Raises
    ------
    kg.errors.NotFound
        Unknown repository.
    kg.errors.Forbidden
        A key without ``admin`` on ``repo`` (the status names every branch).
    """
    permit(services, caller, "admin", repo)
    with services.db.read() as session:
        r = get_repository(session, repo)
        out = index_jobs.index_status(session, r)
        names = {
            "workspace": dict(session.execute(
                select(Workspace.id, Workspace.name).where(Workspace.repo_id == r.id)).all()),
            "branch": dict(session.execute(select(Branch.id, Branch.name).where(Branch.repo_id == r.id)).all()),
        }
    try:
        stats = services.index.stats(r.uid)
    except KGError as exc:
        stats = {"error": {"code": exc.code, "message": exc.message}}
    for c in stats.get("collections") or []:
        if isinstance(c, dict):
            c["workspace"] = names["workspace"].get(c.get("workspace_id", -1))
            c["branch"] = names["branch"].get(c.get("branch_id", -1))
    out["index"] = stats
    return out


def branch_review(services: Resources, caller: Actor, repo: str, branch: str,
                  against: str | None = None) -> dict[str, Any]:
    """What a person reviews before merging ``branch``: the branch (parent, ahead / behind,
    protected), the branch it is compared with, and the diff with each property's old and new
    value.

    Parameters
    ----------
    services : kg.context.Resources
        The process's resources (store, index, embedders).
    caller : kg.context.Actor
        Who reads.
    repo, branch : str
        The repository. The branch reviewed.
    against : str or None
        The branch compared with (the merge target); None: the branch's parent.

    Returns
    -------
    dict
        ``{"branch": {...}, "into": {"name", "protected"} or None, "diff": {...} or None}``:
        ``branch`` is :func:`kg.ops.branches.get_branch` plus ``"protected"`` (bool, from
        ``KG_PROTECTED_BRANCHES``); ``diff`` is :func:`diff` (modified nodes carry per property
        ``{"old", "new"}``), None when there is nothing to compare with (``main`` and no
        ``against``).

    Raises
    ------
    kg.errors.NotFound
        Unknown repository or branch, or one the caller may not read.
    kg.errors.InvalidInput
        ``against`` is neither the branch's parent nor its child.
    """
    info = branch_ops.get_branch(services, caller, repo, branch)
    info["protected"] = branch_ops.is_protected(services, info["name"])
    compared = against if against is not None else info.get("parent")
    if compared is None:
        return {"branch": info, "into": None, "diff": None}
    changes = diff(services, caller, repo, branch, compared)
    into = {"name": changes["against"], "protected": branch_ops.is_protected(services, compared)}
    return {"branch": info, "into": into, "diff": changes}
