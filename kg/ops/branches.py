"""Branches: create (one row, nothing copied), delete, reset, list and read; deleting or
resetting drops the branch's search index state once committed.
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from kg.access import can_see, readable_workspaces
from kg.context import Actor, Resources, UnitOfWork, permit, reading
from kg.errors import Forbidden, NotFound
from kg.indexing.chunks import forget_branch
from kg.ops.changes import record_branch_event
from kg.store import history
from kg.store import nodes as node_store
from kg.store import repos as repo_store
from kg.store.history import ahead_behind
from kg.store.models import Branch, Repository, Workspace
from kg.types.branches import Branch as BranchInfo
from kg.types.branches import BranchList, BranchOverview, BranchReset, LastRevision

__all__ = [
    "branch_names", "branch_overview", "create_branch", "delete_branch", "get_branch", "home_branch",
    "is_protected", "list_branches", "reset_branch",
]


def _branch(session: Session, branch: Branch, repo: Repository | None = None,
            caller: Actor | None = None) -> dict[str, Any]:
    """A branch's fields (:class:`kg.types.branches.Branch`); with ``repo``, ``ahead`` and
    ``behind``. A ``caller`` who may not see the parent learns nothing of it: ``parent`` null,
    no counts (None: a caller who sees every branch).
    """
    parent = repo_store.parent_name(session, branch)
    hidden = (parent is not None and caller is not None and repo is not None
              and not can_see(caller, repo.name, parent))
    out = {
        "name": branch.name,
        "parent": None if hidden else parent,
        "base_revision": branch.base_revision,
        "head_revision": branch.head_revision,
        "created_at": branch.created_at.isoformat(),
    }
    if repo is not None and not hidden:
        out["ahead"], out["behind"] = ahead_behind(session, repo, branch,
                                                   readable=_readable_on_both(session, repo, branch, parent, caller))
    return out


def _readable_on_both(session: Session, repo: Repository, branch: Branch, parent: str | None,
                      caller: Actor | None) -> frozenset[int] | None:
    """The workspaces ``caller`` reads on the branch and its parent: what ``ahead``/``behind`` count."""
    if caller is None or caller.unrestricted or parent is None:
        return None
    workspaces = dict(session.execute(select(Workspace.id, Workspace.name).where(Workspace.repo_id == repo.id)).all())
    scopes = [readable_workspaces(caller, repo.name, name, workspaces.values()) for name in (branch.name, parent)]
    if scopes[0] is None and scopes[1] is None:
        return None
    names = set(workspaces.values())
    both = (scopes[0] if scopes[0] is not None else names) & (scopes[1] if scopes[1] is not None else names)
    return frozenset(wid for wid, name in workspaces.items() if name in both)


def list_branches(services: Resources, caller: Actor, repo: str) -> BranchList:
    """Every branch the caller sees, by name, with its counts ahead and behind."""
    return BranchList(branches=[BranchInfo.model_validate(b) for b in _branch_rows(services, caller, repo)])


def _branch_rows(services: Resources, caller: Actor, repo: str) -> list[dict[str, Any]]:
    """The fields of every branch the caller sees, by name (:func:`_branch`)."""
    permit(services, caller, "read", repo)
    with services.db.read() as session:
        r = repo_store.get_repository(session, repo)
        return [_branch(session, b, r, caller) for b in repo_store.list_branches(session, r)
                if can_see(caller, repo, b.name)]


def branch_names(services: Resources, caller: Actor, repo: str) -> list[str]:
    """The sorted names of the branches the caller may see: a picker's, without the counts (which,
    for a reader of some workspaces, walk every revision since the fork).
    """
    permit(services, caller, "read", repo)
    with services.db.read() as session:
        r = repo_store.get_repository(session, repo)
        return [b.name for b in repo_store.list_branches(session, r) if can_see(caller, repo, b.name)]


def home_branch(services: Resources, caller: Actor, repo: str) -> str:
    """The branch a page opens on: ``main`` if readable, else the first readable by name, else
    ``main`` (whose page says it is not there).
    """
    if can_see(caller, repo, "main"):
        return "main"
    with services.db.read() as session:
        try:
            r = repo_store.get_repository(session, repo)
        except NotFound:
            return "main"
        names = sorted(b.name for b in repo_store.list_branches(session, r))
    return next((name for name in names if can_see(caller, repo, name)), "main")


def branch_overview(services: Resources, caller: Actor, repo: str) -> list[BranchOverview]:
    """Every branch the caller sees, by name, with its newest revision that changed what it reads,
    whether it is protected, and its children.
    """
    branches = _branch_rows(services, caller, repo)
    out = []
    for b in branches:
        with reading(services, caller, repo, b["name"]) as (session, view):
            # The row alone: a branch whose last revision is a bulk import wrote millions of
            # versions, which this listing has no use for.
            last = next(iter(history.last_revisions(session, view, limit=1)), None)
            b["last_revision"] = (None if last is None else
                                  LastRevision(revision=last.number, created_at=last.created_at.isoformat(),
                                               message=last.message, actor=last.actor))
        b["protected"] = is_protected(services, b["name"])
        b["children"] = sorted(c["name"] for c in branches if c.get("parent") == b["name"])
        out.append(BranchOverview.model_validate(b))
    return out


def is_protected(services: Resources, branch: str) -> bool:
    """Whether ``branch`` matches ``KG_PROTECTED_BRANCHES`` (writes, merges and deletes on it need a
    grant naming it).

    >>> from types import SimpleNamespace
    >>> svc = SimpleNamespace(settings=SimpleNamespace(protected=lambda: ("main", "release/*")))
    >>> is_protected(svc, "release/1"), is_protected(svc, "agent/a")
    (True, False)
    """
    return any(fnmatchcase(branch, glob) for glob in services.settings.protected())


def get_branch(services: Resources, caller: Actor, repo: str, branch: str) -> BranchInfo:
    """One branch, with its counts ahead and behind."""
    permit(services, caller, "read", repo, branch)
    with services.db.read() as session:
        r = repo_store.get_repository(session, repo)
        return BranchInfo.model_validate(_branch(session, repo_store.get_branch(session, r, branch), r, caller))


def create_branch(uow: UnitOfWork, repo: str, *, name: str, from_branch: str = "main",
                  at_revision: int | None = None) -> BranchInfo:
    """Create the branch ``name`` from ``from_branch`` at ``at_revision`` (default: its head). Needs
    ``read`` on ``from_branch`` and ``branch:create`` with a glob matching ``name``.

    Raises
    ------
    kg.errors.NotFound
        No parent, or a revision not written yet.
    kg.errors.Conflict
        A branch of that name exists.
    kg.errors.InvalidInput
        A revision below 0.
    """
    uow.authorize("read", repo, from_branch)
    uow.authorize("branch:create", repo, name)
    r = repo_store.get_repository(uow.session, repo, lock=True)
    created = repo_store.create_branch(uow.session, r, name=name, from_branch=from_branch,
                                       at_revision=at_revision)
    record_branch_event(uow.session, r.id, r.head_revision, name, "created", uow.actor.name)
    return BranchInfo.model_validate(_branch(uow.session, created))


def delete_branch(uow: UnitOfWork, repo: str, branch: str) -> None:
    """Delete a branch and what was written on it; once committed, its search index state.

    Raises
    ------
    kg.errors.Conflict
        ``main``, or a branch with children.
    kg.errors.Forbidden
        No ``branch:delete`` on it, or in a workspace written on it (:func:`_authorize_discard`).
    """
    uow.authorize("branch:delete", repo, branch)
    r = repo_store.get_repository(uow.session, repo, lock=True)
    branch_id = _authorize_discard(uow, r, branch).id
    repo_store.delete_branch(uow.session, r, branch)
    record_branch_event(uow.session, r.id, r.head_revision, branch, "deleted", uow.actor.name)
    _forget_after_commit(uow, r.uid, branch_id)


def reset_branch(uow: UnitOfWork, repo: str, branch: str) -> BranchReset:
    """Drop what was written on the branch and fork it again from its parent's head; once committed,
    drop its search index state.

    Raises
    ------
    kg.errors.Conflict
        ``main`` (it has no parent).
    kg.errors.Forbidden
        As :func:`delete_branch`, or the parent is not readable (and not named).
    """
    uow.authorize("branch:delete", repo, branch)
    r = repo_store.get_repository(uow.session, repo, lock=True)
    parent = repo_store.parent_name(uow.session, _authorize_discard(uow, r, branch))
    if parent is not None:
        try:  # the branch is forked again from its parent's head: the caller reads the parent
            uow.authorize("read", repo, parent)
        except (NotFound, Forbidden):
            raise Forbidden(f"key {uow.actor.name!r} may not reset {branch!r}: a reset forks it again from "
                            "its parent, which the key may not read",
                            details={"action": "branch:delete", "repo": repo, "branch": branch}) from None
    b = history.reset_branch(uow.session, r, branch)
    record_branch_event(uow.session, r.id, r.head_revision, branch, "reset", uow.actor.name)
    _forget_after_commit(uow, r.uid, b.id)
    return BranchReset(name=b.name, parent=repo_store.parent_name(uow.session, b), base_revision=b.base_revision,
                       head_revision=b.head_revision)


def _authorize_discard(uow: UnitOfWork, repo: Repository, branch: str) -> Branch:
    """Deleting or resetting drops a branch's writes: ``branch:delete`` is needed in every workspace
    holding them (a key may not destroy what it cannot see: 404, as for any write there).
    """
    b = repo_store.get_branch(uow.session, repo, branch)
    if not uow.actor.unrestricted:
        names = {w.id: w.name for w in repo_store.list_workspaces(uow.session, repo)}
        uow.authorize_workspaces("branch:delete", repo.name, branch,
                                 sorted(names[w] for w in node_store.written_workspaces(uow.session, b)),
                                 unnamed=f"what was written on {branch}")
    return b


def _forget_after_commit(uow: UnitOfWork, repo_key: str, branch_id: int) -> None:
    index = uow.services.index
    uow.after_commit(lambda: forget_branch(index, repo_key, branch_id))
