"""The change feed: each revision's writes and each branch event of a repository, in order, as
the caller may see them (:class:`kg.types.changes.ChangePage`).

Order and cursor
    Writers of a repository serialise on its row lock (:func:`kg.store.repos.begin_write`), so
    revisions commit in the order of their numbers; branch events (created, reset, deleted) are
    written under the same lock and carry the repository's head revision then. The feed is the
    merge of both, ordered by ``(revision, revision before branch events, event number)``, and
    its cursor is the pair ``<revision>.<event number>`` (the ``id`` of every event). A page
    reads the repository's head first and lists nothing past it, so an event committed while
    the page is read is never listed before an earlier one: no event is lost or repeated, and a
    cursor resumes exactly (``after``, or an SSE client's ``Last-Event-ID``). A plain
    ``<revision>`` is accepted as a cursor: every branch event of that revision or older counts
    as seen.

Visibility
    A revision is listed with the writes the caller may read (a key scoped to some workspaces
    sees only theirs, and relations between two nodes it reads), on branches it may read. A
    revision, or a branch event, the caller may see nothing of is skipped, but the cursor moves
    past it (``next_after``): a scoped reader learns nothing, not even that it happened, and
    does not read it again. A stream keeps its connection open with heartbeat comments instead.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from kg.access import authorize, can_see
from kg.context import Actor, Resources, permit, scoped_view
from kg.errors import Forbidden, InvalidInput, NotFound, RateLimited
from kg.store import history
from kg.store.models import Branch, BranchEvent, Revision
from kg.store.repos import BranchView, branch_view, get_repository
from kg.types.changes import ChangeEvent, ChangePage

#: Events a page lists by default, and at most.
DEFAULT_PAGE = 100
MAX_PAGE = 1000
_MAX_ID = 2_147_483_647
_CURSOR = re.compile(r"^(\d{1,12})(?:\.(\d{1,12}))?$")
_streams: dict[str, int] = {}
_streams_lock = threading.Lock()


def parse_cursor(text: str | None) -> tuple[int, int | None]:
    """``(revision, event)`` of a cursor ``<revision>[.<event>]`` (None: from the start; an event
    None: every branch event up to that revision counts as seen).

    >>> parse_cursor("42.7"), parse_cursor("42"), parse_cursor(None), parse_cursor("3000000000")
    ((42, 7), (42, None), (0, 0), (2147483647, None))

    Raises
    ------
    kg.errors.InvalidInput
        Not a cursor.
    """
    if text is None or text == "":
        return 0, 0
    match = _CURSOR.match(text.strip())
    if match is None:
        raise InvalidInput(f"after {text!r} is not a change feed cursor: <revision> or <revision>.<event>",
                           details={"after": text})
    # Revisions and event ids are 32-bit columns: a cursor past them is past everything there is.
    return min(int(match[1]), _MAX_ID), None if match[2] is None else min(int(match[2]), _MAX_ID)


def cursor(revision: int, event: int) -> str:
    """The cursor text of ``(revision, event)``."""
    return f"{revision}.{event}"


def record_branch_event(session: Session, repo_id: int, head: int, branch: str, kind: str,
                        actor: str | None, *, source: str | None = None, source_revision: int | None = None) -> None:
    """Record a branch ``created``, ``reset`` or ``deleted``, or a ``merge`` of ``source`` (at
    ``source_revision``) into ``branch`` (call in the write that does it, under the repository's
    lock; ``head`` the repository's head revision then, a merge's: the revision it writes)."""
    session.add(BranchEvent(repo_id=repo_id, branch=branch, kind=kind, revision=head, actor=actor,
                            source_branch=source, source_revision=source_revision))
    session.flush()


def changes(services: Resources, caller: Actor, repo: str, *, branch: str | None = None,
            after: str | None = None, limit: int = DEFAULT_PAGE,
            max_changes: int = history.DEFAULT_LOG_CHANGES) -> ChangePage:
    """The events of ``repo`` (of ``branch`` only, if named) after the cursor ``after``, oldest
    first, at most ``limit`` (1 to 1000), each revision with at most ``max_changes`` writes listed
    (:class:`kg.types.changes.ChangePage`).

    Raises
    ------
    kg.errors.InvalidInput
        A malformed cursor, ``limit`` or ``max_changes`` out of range.
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise InvalidInput(f"limit must be between 1 and {MAX_PAGE}", details={"limit": limit})
    if not 0 <= max_changes <= history.MAX_LOG_CHANGES:
        raise InvalidInput(f"changes must be between 0 and {history.MAX_LOG_CHANGES}",
                           details={"changes": max_changes})
    after_rev, after_event = parse_cursor(after)
    if branch is not None:
        permit(services, caller, "read", repo, branch)
    else:
        permit(services, caller, "read", repo)
    with services.db.read() as session:
        r = get_repository(session, repo)
        head = r.head_revision  # first: nothing committed after this read is listed past it
        if after_event is None:
            after_event = session.scalar(select(func.max(BranchEvent.id)).where(
                BranchEvent.repo_id == r.id, BranchEvent.revision <= after_rev)) or 0
        names = {b.id: b.name for b in session.scalars(select(Branch).where(Branch.repo_id == r.id))}
        rev_stmt = select(Revision).where(Revision.repo_id == r.id, Revision.number > after_rev,
                                          Revision.number <= head)
        ev_stmt = select(BranchEvent).where(BranchEvent.repo_id == r.id, BranchEvent.id > after_event,
                                            BranchEvent.revision <= head, BranchEvent.kind != "merge")
        if branch is not None:
            ids = [i for i, n in names.items() if n == branch]
            rev_stmt = rev_stmt.where(Revision.branch_id.in_(ids))
            ev_stmt = ev_stmt.where(BranchEvent.branch == branch)
        revisions = list(session.scalars(rev_stmt.order_by(Revision.number).limit(limit + 1)))
        events = list(session.scalars(ev_stmt.order_by(BranchEvent.id).limit(limit + 1)))
        merged: list[tuple[tuple[int, int, int], Revision | BranchEvent]] = sorted(
            [((rv.number, 0, 0), rv) for rv in revisions] + [((ev.revision, 1, ev.id), ev) for ev in events],
            key=lambda item: item[0])
        page, has_more = merged[:limit], len(merged) > limit
        views: dict[int, BranchView | None] = {}
        out: list[ChangeEvent] = []
        rev_at, ev_at = after_rev, after_event
        for _, item in page:
            if isinstance(item, Revision):
                rev_at = item.number
                entry = _revision_event(session, caller, repo, item, names, views, max_changes)
            else:
                rev_at, ev_at = max(rev_at, item.revision), item.id
                entry = _branch_event(caller, repo, item)
            if entry is not None:
                entry["id"] = cursor(rev_at, ev_at)
                out.append(ChangeEvent.model_validate(entry))
        if not has_more:
            rev_at = max(rev_at, head)  # everything up to the head was read
        return ChangePage(events=out, next_after=cursor(rev_at, ev_at), has_more=has_more)


def _revision_event(session: Session, caller: Actor, repo: str, rev: Revision, names: dict[int, str],
                    views: dict[int, BranchView | None], max_changes: int) -> dict[str, Any] | None:
    """A revision as ``caller`` sees it, None when it sees nothing of it."""
    if rev.branch_id not in views:
        name = names.get(rev.branch_id)
        try:
            if name is None:
                raise NotFound("branch gone")
            authorize(caller, "read", repo, name)
            views[rev.branch_id] = scoped_view(caller, branch_view(session, repo, name))
        except (NotFound, Forbidden):  # a branch the caller may not read: its revisions are skipped
            views[rev.branch_id] = None
    view = views[rev.branch_id]
    if view is None:
        return None
    entry = history.revision_entry(session, view, rev, names, max_changes)
    if view.readable is not None and entry["change_count"] == 0:
        return None
    merge = session.execute(select(BranchEvent.source_branch, BranchEvent.source_revision).where(
        BranchEvent.repo_id == rev.repo_id, BranchEvent.kind == "merge", BranchEvent.revision == rev.number)).first()
    event: dict[str, Any] = {"type": "merge" if merge is not None else "revision", **entry}
    event["branch"] = names.get(rev.branch_id)
    if merge is not None:
        source = merge[0]
        event["merge"] = {"branch": source if source is not None and can_see(caller, repo, source) else None,
                          "revision": merge[1]}
    return event


def _branch_event(caller: Actor, repo: str, event: BranchEvent) -> dict[str, Any] | None:
    """A branch event, None for a branch ``caller`` may not see."""
    if not can_see(caller, repo, event.branch):
        return None
    return {"type": f"branch.{event.kind}", "revision": event.revision, "branch": event.branch,
            "created_at": event.created_at.isoformat(), "actor": event.actor}


@contextmanager
def stream_slot(services: Resources, caller: Actor) -> Iterator[None]:
    """Hold one of the caller's ``KG_CHANGES_MAX_STREAMS`` slots while the block runs: an open
    change feed stream over HTTP, or an MCP subscription to a branch's changes.

    Parameters
    ----------
    services : kg.context.Resources
        Its settings' ``changes_max_streams``.
    caller : kg.access.Actor
        Who holds the slot (a key, or the anonymous caller: one count per process).

    Yields
    ------
    None
        While the slot is held.

    Raises
    ------
    kg.errors.RateLimited
        The caller already holds that many (429).
    """
    who = f"{caller.kind}:{caller.name}"
    cap = services.settings.changes_max_streams
    with _streams_lock:
        if _streams.get(who, 0) >= cap:
            raise RateLimited(f"{caller.name or caller.kind} already holds {cap} open change streams or "
                              "subscriptions (KG_CHANGES_MAX_STREAMS); close one first", retry_after_s=5.0,
                              details={"limit": cap})
        _streams[who] = _streams.get(who, 0) + 1
    try:
        yield
    finally:
        with _streams_lock:
            _streams[who] -= 1
            if not _streams[who]:
                del _streams[who]


def head_cursor(services: Resources, caller: Actor, repo: str, *, branch: str | None = None) -> str:
    """The cursor of the feed now: a page read after it lists only what is written from now on.

    Parameters
    ----------
    services : kg.context.Resources
        The store.
    caller : kg.access.Actor
        Who asks: it must be allowed to read ``repo`` (``branch``, if named).
    repo : str
        The repository.
    branch : str, optional
        The branch the caller will follow.

    Returns
    -------
    str
        ``<head revision>.<last branch event>``.

    Raises
    ------
    kg.errors.NotFound
        No such repository (or branch).
    kg.errors.Forbidden
        The caller may not read it.
    """
    if branch is not None:
        permit(services, caller, "read", repo, branch)
    else:
        permit(services, caller, "read", repo)
    with services.db.read() as session:
        r = get_repository(session, repo)
        head = r.head_revision
        event = session.scalar(select(func.max(BranchEvent.id)).where(
            BranchEvent.repo_id == r.id, BranchEvent.revision <= head)) or 0
        return cursor(head, event)


def latest_changes(services: Resources, caller: Actor, repo: str, *, branch: str | None = None,
                   limit: int = DEFAULT_PAGE, max_changes: int = history.DEFAULT_LOG_CHANGES) -> ChangePage:
    """The latest page of the feed: the events of the last ``limit`` revisions (of ``branch``, if
    named) and the branch events since, oldest first, as the caller may see them.

    Parameters
    ----------
    services : kg.context.Resources
        The store.
    caller : kg.access.Actor
        Who reads (:func:`changes` decides what it sees).
    repo : str
        The repository.
    branch : str, optional
        Only this branch.
    limit : int
        Events at most (1 to 1000).
    max_changes : int
        Writes listed per revision.

    Returns
    -------
    kg.types.changes.ChangePage
        As :func:`changes` answers it; ``next_after`` resumes after it.

    Raises
    ------
    kg.errors.InvalidInput
        ``limit`` or ``max_changes`` out of range.
    kg.errors.NotFound
        No such repository (or branch).
    kg.errors.Forbidden
        The caller may not read it.
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise InvalidInput(f"limit must be between 1 and {MAX_PAGE}", details={"limit": limit})
    if branch is not None:
        permit(services, caller, "read", repo, branch)
    else:
        permit(services, caller, "read", repo)
    with services.db.read() as session:
        r = get_repository(session, repo)
        stmt = select(Revision.number).where(Revision.repo_id == r.id, Revision.number <= r.head_revision)
        if branch is not None:
            stmt = stmt.join(Branch, Branch.id == Revision.branch_id).where(Branch.name == branch)
        numbers = list(session.scalars(stmt.order_by(Revision.number.desc()).limit(limit)))
    start = str(numbers[-1] - 1) if numbers else None
    return changes(services, caller, repo, branch=branch, after=start, limit=limit, max_changes=max_changes)
