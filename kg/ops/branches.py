"""Branch writes: create (one row, nothing copied), delete and reset, each one transaction.

Deleting or resetting a branch drops what the search index holds for it after the commit.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from kg.indexing.chunks import forget_branch
from kg.store import history
from kg.store import repos as repo_store
from kg.store.history import ahead_behind
from kg.store.models import Branch, Repository


def branch_dict(session: Session, branch: Branch, repo: Repository | None = None) -> dict[str, Any]:
    """The API shape of a branch; with ``repo``, also how far it is ``ahead`` and ``behind``."""
    out = {
        "name": branch.name,
        "parent": repo_store.parent_name(session, branch),
        "base_revision": branch.base_revision,
        "head_revision": branch.head_revision,
        "created_at": branch.created_at.isoformat(),
    }
    if repo is not None:
        out["ahead"], out["behind"] = ahead_behind(session, repo, branch)
    return out


def create_branch(services: Any, repo: str, *, name: str, from_branch: str = "main",
                  at_revision: int | None = None) -> dict[str, Any]:
    """Create a branch from ``from_branch`` at ``at_revision`` (default: its head now).

    Parameters
    ----------
    services : kg.services.Services
    repo : str
    name : str
        The new branch's name (may contain ``/``).
    from_branch : str
        Its parent.
    at_revision : int or None
        The parent's revision it forks at.

    Returns
    -------
    dict
        The branch (:func:`branch_dict`).

    Raises
    ------
    kg.errors.NotFound
        The repository or the parent does not exist.
    kg.errors.Conflict
        A branch of that name exists.
    kg.errors.InvalidInput
    """
    with services.db.write() as session:
        r = repo_store.get_repository(session, repo, lock=True)
        branch = repo_store.create_branch(session, r, name=name, from_branch=from_branch,
                                          at_revision=at_revision)
        return branch_dict(session, branch)


def delete_branch(services: Any, repo: str, branch: str) -> None:
    """Delete a branch and what was written on it (not ``main``, not a branch with children),
    then drop its state in the search index.

    Raises
    ------
    kg.errors.NotFound
    kg.errors.Conflict
        ``main``, or a branch with children.
    """
    with services.db.write() as session:
        r = repo_store.get_repository(session, repo, lock=True)
        branch_id = repo_store.get_branch(session, r, branch).id
        repo_store.delete_branch(session, r, branch)
        repo_key = r.uid
    forget_branch(services.index, repo_key, branch_id)


def reset_branch(services: Any, repo: str, branch: str) -> dict[str, Any]:
    """Drop what was written on the branch and fork it again from its parent's head.

    Returns
    -------
    dict
        ``{"name", "parent", "base_revision", "head_revision"}`` after the reset.

    Raises
    ------
    kg.errors.NotFound
    kg.errors.InvalidInput
        ``main`` (it has no parent).
    """
    with services.db.write() as session:
        r = repo_store.get_repository(session, repo, lock=True)
        b = history.reset_branch(session, r, branch)
        out = {"name": b.name, "parent": repo_store.parent_name(session, b), "base_revision": b.base_revision,
               "head_revision": b.head_revision}
        repo_key, branch_id = r.uid, b.id
    forget_branch(services.index, repo_key, branch_id)
    return out
