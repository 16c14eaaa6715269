"""One durable queue over an SQL table: fair claiming by priority, leases renewed while a batch
runs, an attempt cap, fenced completion, and taking back the claims of workers that are gone.

Index jobs (:mod:`kg.indexing.index_jobs`, table ``index_jobs``) and function jobs (:mod:`kg.rag.function_jobs`,
table ``function_jobs``) are both drained through a :class:`DurableQueue`; a :class:`QueueSpec`
says which columns of the table play which part. The queue lives in SQL, so a stopped or
crashed process loses nothing.

States::

    queued ──claim──> running ──finish──> (the caller's end state, or deleted)
      ^                  │ │ │
      │                  │ │ └──release──> queued        (not started: the attempt is given back)
      │                  │ └──close──> queued            (a clean stop: nothing counted)
      └── lease expired, ┘
          or worker gone   ──(deaths alone used up)──> failed (the spec's "exhausted" reason)

Claiming
    A claim takes the queued jobs of the best (lowest) priority present, shared round-robin
    across *groups* (repositories) and, inside a group, across *lanes* (its workspaces; for
    function jobs the lane is the repository), least recently served first: a repository's
    10,000-text backlog takes one share of a batch, and a small write in another repository is
    in the next batch. Inside a lane, jobs go in the spec's order (id, or creation time). Lanes
    with queued jobs are found by a loose index scan (a recursive CTE stepping through the lane
    column of the ``(state, lane, priority, order)`` index), so the cost of a claim grows with
    the number of busy lanes, not with the backlog.

    On PostgreSQL each lane's share is taken with ``SELECT ... ORDER BY ... LIMIT n FOR UPDATE
    SKIP LOCKED`` and marked ``running`` in the same transaction, so concurrent claimers take
    disjoint jobs without waiting for each other. On SQLite the claim runs in a write
    transaction (``BEGIN IMMEDIATE``, :mod:`kg.store.db`), which serialises claimers.

Leases
    A claim holds a job under a lease (the spec says where it is stored: ``updated_at`` plus the
    lease for index jobs, ``lease_until`` for function jobs). :meth:`DurableQueue.renewing`
    renews the leases of a batch from a heartbeat thread while it runs, so a long batch is not
    taken over; a job whose lease expired is taken back by the next claim of any worker.

Workers
    Each :class:`DurableQueue` is a worker with an id, registered in ``queue_workers`` (machine,
    pid, process start) in the transaction of its first claim; every claim names its worker
    (``claimed_by``). A
    worker on the same machine is known gone at once when its process no longer runs (the pid
    is gone, a zombie, or reused by a later process), a worker elsewhere when its heartbeat is
    older than ``stale_s``. Gone workers' rows are deleted, and jobs claimed by a worker without
    a row are taken back at once: a process that starts after a ``kill -9`` of the previous one
    takes its claims back on its first claim instead of waiting for the lease.

Retries
    A worker's death is not its jobs' failure: a kill, an out-of-memory kill or a deploy stops
    whatever the worker held. A job taken back from a gone worker or an expired lease goes back
    to ``queued``, marked ``alone``: it is claimed by itself, by a worker that holds nothing.
    Only a death while such a job was the one job its worker held counts (``failures``): then
    nothing else ran in that worker (the worker may claim other jobs beside it meanwhile, such
    as short texts between a large one's steps; a death while it holds them is not counted). The
    first death, unattributed (the job may have been one of many), is never counted and is
    retried at once; each counted one
    adds a backoff (``not_before``: ``retry_backoff_s`` times 1, 3, 7, ..., at most
    ``max_backoff_s``). After ``max_attempts`` counted deaths the job is failed with the spec's
    reason instead of being run again (a job that kills its process would otherwise do so
    forever). A clean stop (:meth:`close`) counts nothing. ``attempts`` counts claims (it
    fences results); a job whose own processing raises is failed by the caller.

Fencing
    Finishing, releasing and renewing act only on jobs still ``running`` under the same worker
    and attempt (:meth:`DurableQueue.held`): a worker that lost a claim cannot overwrite the
    work of the attempt that took over.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple

from sqlalchemy import CursorResult, Table, and_, delete, false, func, literal, or_, select, true, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from kg.store.db import Database
from kg.store.models import QueueWorker, utcnow

log = logging.getLogger("kg.indexing.queue")

#: Claims of one job before a lost claim fails it.
MAX_ATTEMPTS = 3
#: How long a claim holds a job without renewal, in seconds.
LEASE_S = 300.0
#: How often a running batch renews its leases and its worker's heartbeat, in seconds.
HEARTBEAT_S = 10.0
#: Wait before a job taken back from a lost claim after one counted death is claimed again, in
#: seconds (none after the first, unattributed, death; doubling after each counted one).
RETRY_BACKOFF_S = 2.0
#: Longest wait before a job taken back from a lost claim is claimed again, in seconds.
MAX_RETRY_BACKOFF_S = 300.0


@dataclass(frozen=True)
class QueueSpec:
    """Which columns of a job table play which part in the queue.

    Parameters
    ----------
    name : str
        The queue's name (``index``, ``function``), stored with its workers.
    model : type
        The ORM model of the job table; it has columns ``id``, ``attempts``, ``claimed_by``,
        ``failures``, ``alone`` and ``not_before``.
    state : str
        The state column.
    queued : str
        The state of a job waiting to be claimed (``pending``, ``queued``).
    group : str
        The column claims are shared across first (the repository).
    lane : str
        The column claims are shared across inside a group (the workspace; may equal
        ``group``). A lane belongs to one group.
    order : tuple of str
        Claim order inside a lane and priority (``("id",)``, ``("created_at", "id")``).
    priority : str or None
        The priority column (lower is claimed first, across all lanes); ``None``: one level.
    claim_values : callable(now, lease) -> dict
        Column values set when a job is claimed (its lease, a start time).
    renew_values : callable(now, lease) -> dict
        Column values that renew a claim's lease.
    lease_expired : callable(now, lease) -> ColumnElement
        True for a running job whose lease expired.
    requeue_values : callable(now) -> dict
        Column values set when a lost claim goes back to ``queued``.
    exhausted_values : callable(deaths, max_attempts, now) -> dict
        Column values (the reason) set when a job's worker died while it ran alone for the
        ``max_attempts``-th time; the queue sets the state to ``failed``.
    running : str
        The state of a claimed job.
    failed : str
        The state of a job whose attempts are used up.
    retry_reason : callable(reason) -> dict, optional
        Column values that say why a job taken back waits (``index/status`` shows them).
    """

    name: str
    model: type
    state: str
    queued: str
    group: str
    lane: str
    order: tuple[str, ...]
    priority: str | None
    claim_values: Callable[[datetime, timedelta], dict[str, Any]]
    renew_values: Callable[[datetime, timedelta], dict[str, Any]]
    lease_expired: Callable[[datetime, timedelta], ColumnElement[bool]]
    requeue_values: Callable[[datetime], dict[str, Any]]
    exhausted_values: Callable[[int, int, datetime], dict[str, Any]]
    running: str = "running"
    failed: str = "failed"
    retry_reason: Callable[[str], dict[str, Any]] | None = None


@dataclass(frozen=True)
class Claim:
    """A claimed job: its id, and the attempt that fences what is done with it.

    Parameters
    ----------
    id : int or str
        The job's primary key.
    attempt : int
        The job's ``attempts`` once claimed (1 for a first claim).
    """

    id: Any
    attempt: int


class Claimed(NamedTuple):
    """What one :meth:`DurableQueue.claim` did.

    Attributes
    ----------
    claims : list of Claim
        The jobs claimed, in claim order.
    exhausted : list
        Ids of the jobs it failed because their attempts were used up.
    """

    claims: list[Claim]
    exhausted: list[Any]


@dataclass
class _Head:
    """A lane with queued jobs: its group and the best priority among them."""

    lane: Any
    group: Any
    priority: int


class DurableQueue:
    """A worker of one durable queue: claims jobs fairly, keeps their leases, finishes them.

    Parameters
    ----------
    db : kg.store.db.Database
    spec : QueueSpec
    lease_s : float
        How long a claim holds a job without renewal, in seconds.
    max_attempts : int
        Deaths of a job's worker while it ran alone (lost claims: expired lease, worker gone)
        before the job is failed.
    heartbeat_s : float
        How often a running batch renews its leases and the worker's heartbeat, in seconds
        (capped at a third of the lease).
    stale_s : float, optional
        A worker on another machine whose heartbeat is older than this, in seconds, is gone
        (default three heartbeats).
    retry_backoff_s, max_backoff_s : float
        The wait before a job taken back from a lost claim is claimed again, in seconds:
        ``retry_backoff_s`` times (2 ** its counted deaths - 1), at most ``max_backoff_s``.

    Notes
    -----
    Not thread-safe for concurrent claims from one instance; the workers that use it claim
    from one thread at a time. Renewal runs on its own thread and its own transactions.
    """

    def __init__(self, db: Database, spec: QueueSpec, *, lease_s: float = LEASE_S,
                 max_attempts: int = MAX_ATTEMPTS, heartbeat_s: float = HEARTBEAT_S,
                 stale_s: float | None = None, retry_backoff_s: float = RETRY_BACKOFF_S,
                 max_backoff_s: float = MAX_RETRY_BACKOFF_S) -> None:
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        self.db = db
        self.spec = spec
        self.lease = timedelta(seconds=lease_s)
        self.max_attempts = max_attempts
        self.heartbeat = timedelta(seconds=min(heartbeat_s, lease_s / 3))
        self.stale = timedelta(seconds=stale_s if stale_s is not None else 3 * heartbeat_s)
        self.retry_backoff_s = retry_backoff_s
        self.max_backoff_s = max_backoff_s
        self.worker_id = uuid.uuid4().hex
        self._table: Table = spec.model.__table__  # type: ignore[attr-defined]  # a declarative model
        self._registered_at: datetime | None = None
        self._touched_at: datetime | None = None
        self._served: dict[tuple[str, Any], int] = {}
        self._tick = 0
        self._heads_stmt: Any = None

    # -- columns ----------------------------------------------------------------------------

    def _c(self, name: str) -> Any:
        """The table column ``name``."""
        return self._table.c[name]

    @property
    def _postgres(self) -> bool:
        return self.db.dialect == "postgresql"

    # -- workers ----------------------------------------------------------------------------

    def register(self) -> None:
        """Register this worker now, in its own write transaction.

        :meth:`claim` registers the worker in the claim's own transaction; call this before
        storing a job already claimed by this worker (an inline run).

        Raises
        ------
        sqlalchemy.exc.SQLAlchemyError
            The database refused the write.
        """
        with self.db.write() as session:
            self._enrol(session, utcnow(), registered=False)

    def close(self) -> None:
        """Unregister this worker and put back the jobs it still holds (a clean stop).

        A job still held (a batch that did not finish in time) goes back to the queue as a lost
        claim would; the attempt that still runs is fenced. Errors are logged, not raised: the
        claims are then taken back as those of a gone worker.
        """
        if self._registered_at is None:
            return
        try:
            with self.db.write() as session:
                session.execute(delete(QueueWorker).where(QueueWorker.id == self.worker_id))
                self._take_back(session, utcnow(), self._c("claimed_by") == self.worker_id, lost=False)
        except SQLAlchemyError as exc:
            log.warning("queue %s: unregistering worker %s failed: %s", self.spec.name, self.worker_id, exc)
        self._registered_at = self._touched_at = None

    def _enrol(self, session: Session, now: datetime, *, registered: bool) -> None:
        """Insert this worker's row if it is missing, else refresh its heartbeat when due."""
        if not registered:
            host, pid, start = _process_identity()
            insert_ = pg_insert if self._postgres else sqlite_insert
            session.execute(insert_(QueueWorker).values(
                id=self.worker_id, queue=self.spec.name, host=host, pid=pid, process_start=start,
                started_at=now, heartbeat_at=now).on_conflict_do_nothing(index_elements=["id"]))
            if self._registered_at is None:
                self._registered_at = now
        elif self._touched_at is not None and now - self._touched_at < self.heartbeat:
            return
        session.execute(update(QueueWorker).where(QueueWorker.id == self.worker_id).values(heartbeat_at=now))
        self._touched_at = now

    def _bury_gone_workers(self, session: Session, now: datetime) -> int:
        """Register or heartbeat this worker; delete the rows of workers that are gone (their
        claims become orphans, taken back)."""
        host, _, start = _process_identity()
        workers = session.execute(select(QueueWorker.id, QueueWorker.host, QueueWorker.pid,
                                         QueueWorker.process_start, QueueWorker.heartbeat_at)).all()
        self._enrol(session, now, registered=any(w.id == self.worker_id for w in workers))
        gone = [w.id for w in workers if w.id != self.worker_id and _worker_gone(w, host, start, now, self.stale)]
        if not gone:
            return 0
        stmt = select(QueueWorker.id).where(QueueWorker.id.in_(gone))
        if self._postgres:
            stmt = stmt.with_for_update(skip_locked=True)  # another process is burying them
        gone = list(session.scalars(stmt))
        if gone:
            session.execute(delete(QueueWorker).where(QueueWorker.id.in_(gone)))
            log.warning("queue %s: worker(s) %s are gone; their claims are taken back",
                        self.spec.name, ", ".join(sorted(gone)))
        return len(gone)

    # -- claiming ---------------------------------------------------------------------------

    def claim(self, session: Session, limit: int, *,
              where: Sequence[ColumnElement[bool]] = ()) -> Claimed:
        """Take back lost claims, then claim up to ``limit`` queued jobs, in the write transaction
        ``session`` (committed with it); ``where`` restricts the jobs (a repository, some keys) and
        takes them in priority, then spec order, without sharing across lanes.

        Returns the claims (``running`` under this worker, ``attempts`` + 1, a fresh lease) and the
        ids of jobs failed because their attempts were used up. A job marked ``alone`` is claimed by
        itself, and only by a worker that holds nothing. Jobs whose backoff (``not_before``) has not
        passed wait.

        Notes
        -----
        Unfiltered, the claim costs one loose index scan over the busy lanes per round, then
        one index range scan per lane served; a round ends when every lane served filled its
        share, and a claim takes at most as many rounds as there are busy lanes (usually one or
        two).
        """
        now = utcnow()
        exhausted = self.sweep(session, now)
        if limit <= 0:
            return Claimed([], exhausted)
        t = self._table
        held = session.scalar(select(t.c.id).where(
            t.c[self.spec.state] == self.spec.running, t.c.claimed_by == self.worker_id).limit(1))
        due = or_(t.c.not_before.is_(None), t.c.not_before <= now)
        if held is None:
            alone = self._take(session, [*where, t.c.alone == true(), due], 1, now, by_priority=True)
            if alone:
                return Claimed(alone, exhausted)
        together = [t.c.alone == false(), due]
        if where:
            claims = self._take(session, [*where, *together], limit, now, by_priority=True)
        else:
            claims = self._claim_fairly(session, limit, now, together)
        return Claimed(claims, exhausted)

    def sweep(self, session: Session, now: datetime | None = None) -> list[Any]:
        """Take back the jobs of expired leases and of gone workers, and register this worker (or
        refresh its heartbeat), in the write transaction ``session``. Returns the ids of the jobs
        failed because their worker died while they ran alone for the ``max_attempts``-th time (the
        others went back to ``queued``, with a backoff).
        """
        now = now or utcnow()
        self._bury_gone_workers(session, now)
        owner = self._c("claimed_by")
        lost = or_(self.spec.lease_expired(now, self.lease),
                   and_(owner.is_not(None), owner.not_in(select(QueueWorker.id))))
        return self._take_back(session, now, lost)

    def backoff(self, deaths: int) -> timedelta:
        """The wait before a job taken back from a lost claim is claimed again, after
        ``deaths`` counted deaths: none after the first, unattributed, death (the next process
        takes it back at once), then ``retry_backoff_s`` times 1, 3, 7, ... up to
        ``max_backoff_s``."""
        return timedelta(seconds=min(self.retry_backoff_s * (2 ** min(deaths, 32) - 1), self.max_backoff_s))

    def _take_back(self, session: Session, now: datetime, condition: ColumnElement[bool], *,
                   lost: bool = True) -> list[Any]:
        """Requeue the running jobs matching ``condition`` (a lost claim: alone, with a
        backoff), or fail those whose worker died while they ran alone ``max_attempts`` times;
        not ``lost`` (a clean stop): requeue them as they were."""
        spec, t = self.spec, self._table
        stmt = select(t.c.id, t.c.failures, t.c.alone, t.c.claimed_by).where(
            self._c(spec.state) == spec.running, condition)
        if self._postgres:
            stmt = stmt.with_for_update(skip_locked=True, of=t)
        rows = session.execute(stmt).all()
        if not rows:
            return []
        if not lost:
            session.execute(update(t).where(t.c.id.in_([r[0] for r in rows])).values(
                {spec.state: spec.queued, "claimed_by": None, **spec.requeue_values(now)}))
            return []
        # What each lost worker held: the rows taken back, and its other running jobs (a lease
        # that has not expired yet, a row another sweeper has locked).
        held = Counter(row.claimed_by for row in rows)
        owners = [owner for owner in held if owner is not None]
        for owner, count in session.execute(
                select(t.c.claimed_by, func.count()).where(self._c(spec.state) == spec.running,
                                                           t.c.claimed_by.in_(owners))
                .group_by(t.c.claimed_by)).all():
            held[owner] = max(held[owner], count)
        exhausted = []
        for job_id, failures, alone, owner in rows:
            # Only a death while it ran alone counts: claimed by itself, the one job its worker held.
            deaths = failures + 1 if alone and held[owner] == 1 else failures
            if deaths >= self.max_attempts:
                session.execute(update(t).where(t.c.id == job_id).values(
                    {spec.state: spec.failed, "claimed_by": None, "failures": deaths, "not_before": None,
                     **spec.exhausted_values(deaths, self.max_attempts, now)}))
                log.warning("queue %s: job %s: its worker died %d times while it ran alone; failed",
                            spec.name, job_id, deaths)
                exhausted.append(job_id)
                continue
            wait = self.backoff(deaths)
            reason = (f"its worker stopped while running it ({deaths} of {self.max_attempts} such stops "
                      f"counted while it ran alone); retried alone after {wait.total_seconds():g} s")
            session.execute(update(t).where(t.c.id == job_id).values(
                {spec.state: spec.queued, "claimed_by": None, "failures": deaths, "alone": True,
                 "not_before": now + wait, **spec.requeue_values(now),
                 **(spec.retry_reason(reason) if spec.retry_reason else {})}))
        if len(exhausted) < len(rows):
            log.warning("queue %s: %d job(s) taken back from lost claims; retried alone", spec.name,
                        len(rows) - len(exhausted))
        return exhausted

    def _claim_fairly(self, session: Session, limit: int, now: datetime,
                      extra: Sequence[ColumnElement[bool]] = ()) -> list[Claim]:
        """Claim up to ``limit`` jobs of the best priority matching ``extra``, round-robin over
        groups and lanes."""
        claims: list[Claim] = []
        dry: set[tuple[Any, int]] = set()  # (lane, priority) that gave less than its share
        while len(claims) < limit:
            heads = [h for h in self._heads(session)
                     if (h.lane, h.priority) not in dry]
            if not heads:
                break
            best = min(h.priority for h in heads)
            level = [h for h in heads if h.priority == best]
            shares = self._share(level, limit - len(claims))
            served = []
            for head, share in shares:
                conditions = [self._c(self.spec.lane) == head.lane, *extra]
                if self.spec.priority is not None:
                    conditions.append(self._c(self.spec.priority) == best)
                got = self._take(session, conditions, share, now, by_priority=False)
                claims.extend(got)
                if got:
                    served.append(head)
                if len(got) < share:
                    dry.add((head.lane, head.priority))
            self._mark_served(served)
        return claims

    def _heads(self, session: Session) -> list[_Head]:
        """The lanes with queued jobs, each with its group and best priority."""
        if self._heads_stmt is None:
            self._heads_stmt = self._heads_select()
        rows = session.execute(self._heads_stmt).all()
        # A lane emptied between the steps (PostgreSQL, another claimer) has no group or priority.
        return [_Head(lane, grp, int(prio)) for lane, grp, prio in rows if grp is not None and prio is not None]

    def _heads_select(self) -> Any:
        """The statement of :meth:`_heads`, built once: a loose index scan over the lane column
        (a recursive CTE stepping from one lane to the next in the index)."""
        spec, t = self.spec, self._table

        def first(column: str, alias: str, where: Callable[[Any], tuple[Any, ...]] = lambda tab: (),
                  ordered: bool = True) -> Any:
            # ORDER BY ... LIMIT 1 rather than MIN(): both databases then stop at the first
            # index entry (SQLite's MIN() would read every entry of the queued state).
            tab = t.alias(alias)
            stmt = select(tab.c[column]).where(tab.c[spec.state] == spec.queued, *where(tab))
            return (stmt.order_by(tab.c[column]) if ordered else stmt).limit(1).scalar_subquery()

        lanes = select(first(spec.lane, "queue_seed").label("lane")).cte(
            "queue_lanes", recursive=True)
        lanes = lanes.union_all(
            select(first(spec.lane, "queue_step", lambda tab: (tab.c[spec.lane] > lanes.c.lane,)))
            .where(lanes.c.lane.is_not(None)))
        in_lane = lambda tab: (tab.c[spec.lane] == lanes.c.lane,)  # noqa: E731
        group = first(spec.group, "queue_group", in_lane, ordered=False)  # one group per lane
        priority: Any = literal(0) if spec.priority is None else first(spec.priority, "queue_priority", in_lane)
        return select(lanes.c.lane, group, priority).where(lanes.c.lane.is_not(None))

    def _share(self, level: list[_Head], slots: int) -> list[tuple[_Head, int]]:
        """Split ``slots`` round-robin over the groups, then each group's lanes, least recently
        served first; lanes in the order they are first served."""
        lanes_of: dict[Any, list[_Head]] = defaultdict(list)
        for head in level:
            lanes_of[head.group].append(head)
        groups = sorted(lanes_of, key=lambda g: (self._served.get(("group", g), 0), g))
        for g in groups:
            lanes_of[g].sort(key=lambda h: (self._served.get(("lane", h.lane), 0), h.lane))
        shares: dict[Any, list[Any]] = {}
        turns = dict.fromkeys(groups, 0)
        for slot in range(slots):
            g = groups[slot % len(groups)]
            head = lanes_of[g][turns[g] % len(lanes_of[g])]
            turns[g] += 1
            shares.setdefault(head.lane, [head, 0])[1] += 1
        return [(head, share) for head, share in shares.values()]

    def _mark_served(self, served: list[_Head]) -> None:
        """Remember when each group and lane was last served (the next claim serves the others
        first)."""
        for head in served:
            self._tick += 1
            self._served[("group", head.group)] = self._tick
            self._served[("lane", head.lane)] = self._tick
        if len(self._served) > 8192:  # forget the lanes served longest ago
            keep = sorted(list(self._served.items()), key=lambda kv: kv[1])[-4096:]
            self._served = dict(keep)

    def _take(self, session: Session, conditions: list[ColumnElement[bool]], limit: int, now: datetime,
              *, by_priority: bool) -> list[Claim]:
        """Claim up to ``limit`` queued jobs matching ``conditions``, in order (SKIP LOCKED on
        PostgreSQL)."""
        spec, t = self.spec, self._table
        order = [t.c[name] for name in spec.order]
        if by_priority and spec.priority is not None:
            order.insert(0, t.c[spec.priority])
        stmt = (select(t.c.id, t.c.attempts).where(t.c[spec.state] == spec.queued, *conditions)
                .order_by(*order).limit(limit))
        if self._postgres:
            stmt = stmt.with_for_update(skip_locked=True)
        rows = session.execute(stmt).all()
        if not rows:
            return []
        session.execute(update(t).where(t.c.id.in_([r[0] for r in rows])).values(
            {spec.state: spec.running, "attempts": t.c.attempts + 1, "claimed_by": self.worker_id,
             **spec.claim_values(now, self.lease)}))
        return [Claim(job_id, attempts + 1) for job_id, attempts in rows]

    # -- holding, finishing -----------------------------------------------------------------

    def fence(self, claims: Iterable[Claim]) -> ColumnElement[bool]:
        """The condition that selects these jobs while this worker still holds them.

        Returns
        -------
        ColumnElement
            True for a job still ``running`` under this worker with the claim's attempt.
        """
        by_attempt: dict[int, list[Any]] = defaultdict(list)
        for claim in claims:
            by_attempt[claim.attempt].append(claim.id)
        t = self._table
        if not by_attempt:
            return literal(False)
        return and_(t.c[self.spec.state] == self.spec.running, t.c.claimed_by == self.worker_id,
                    or_(*(and_(t.c.attempts == attempt, t.c.id.in_(ids)) for attempt, ids in by_attempt.items())))

    def held(self, session: Session, claims: Iterable[Claim]) -> list[Claim]:
        """The claims this worker still holds (its job ``running`` under this worker and attempt; a
        claim another worker took over is left out), locked until the write transaction ends:
        finish them in it.
        """
        claims = list(claims)
        if not claims:
            return []
        stmt = select(self._table.c.id, self._table.c.attempts).where(self.fence(claims))
        if self._postgres:
            stmt = stmt.with_for_update(of=self._table)
        return [Claim(job_id, attempt) for job_id, attempt in session.execute(stmt)]

    def finish(self, session: Session, claims: Iterable[Claim],
               values: Mapping[str, Any] | None = None) -> list[Claim]:
        """Finish held jobs, in a write transaction: delete them, or store ``values`` (column values,
        the end state included: ``{"state": "succeeded", ...}``). Returns the claims finished; a
        lost claim finishes nothing.
        """
        held = self.held(session, claims)
        if held:
            ids = self._table.c.id.in_([c.id for c in held])
            if values is None:
                session.execute(delete(self._table).where(ids))
            else:
                session.execute(update(self._table).where(ids).values(dict(values)))
        return held

    def release(self, session: Session, claims: Iterable[Claim],
                values: Mapping[str, Any] | None = None, *, count_attempt: bool = False) -> list[Claim]:
        """Put held jobs back in the queue (their work could not start: a backend is down), in a
        write transaction, with more column ``values`` (why the job waits). The attempt is given
        back unless ``count_attempt`` (a job that waits for its backend is not failed by the attempt
        cap). Returns the claims released; a lost claim releases nothing.
        """
        held = self.held(session, claims)
        if held:
            t = self._table
            update_values: dict[str, Any] = {self.spec.state: self.spec.queued, "claimed_by": None,
                                             **(values or {})}
            if not count_attempt:
                update_values["attempts"] = t.c.attempts - 1
            session.execute(update(t).where(t.c.id.in_([c.id for c in held])).values(update_values))
        return held

    @contextmanager
    def renewing(self, claims: Sequence[Claim]) -> Iterator[None]:
        """Renew the leases of ``claims`` (and this worker's heartbeat) while the block runs.

        Notes
        -----
        A daemon thread renews every ``heartbeat_s`` (at most a third of the lease), each time
        in its own short write transaction; a renewal that fails is logged and retried at the
        next beat. Leave the block only after the transactions that finish the jobs have
        committed (a renewal may wait for their row locks).
        """
        claims = list(claims)
        if not claims:
            yield
            return
        done = threading.Event()
        beat = threading.Thread(target=self._renew, args=(claims, done), name=f"kg-queue-{self.spec.name}-lease",
                                daemon=True)
        beat.start()
        try:
            yield
        finally:
            done.set()
            beat.join()

    def _renew(self, claims: list[Claim], done: threading.Event) -> None:
        """Renew the leases of ``claims`` every heartbeat until ``done``."""
        while not done.wait(self.heartbeat.total_seconds()):
            try:
                now = utcnow()
                with self.db.write() as session:
                    result: CursorResult[Any] = session.execute(  # type: ignore[assignment]  # an UPDATE's result
                        update(self._table).where(self.fence(claims)).values(self.spec.renew_values(now, self.lease)))
                    renewed = result.rowcount
                    session.execute(update(QueueWorker).where(QueueWorker.id == self.worker_id)
                                    .values(heartbeat_at=now))
                self._touched_at = now
                if renewed < len(claims):
                    log.warning("queue %s: %d of %d claim(s) were lost; their results will not be stored",
                                self.spec.name, len(claims) - renewed, len(claims))
            except Exception:  # the next renewal may succeed; the lease is longer than a beat
                log.exception("queue %s: renewing leases failed", self.spec.name)


# -- processes ------------------------------------------------------------------------------

_PROC = Path("/proc")


def _boot_id() -> str:
    """This machine's boot id (Linux), or ``""``."""
    try:
        return (_PROC / "sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _proc_stat(pid: int) -> tuple[str, str] | None:
    """``(state, start time in clock ticks since boot)`` of a process, or None if it does not
    run; raises OSError when the machine has no /proc."""
    try:
        text = (_PROC / str(pid) / "stat").read_text()
    except FileNotFoundError:
        if not (_PROC / "self" / "stat").exists():
            raise
        return None
    fields = text.rsplit(")", 1)[1].split()  # the name, in parentheses, may hold spaces
    return fields[0], fields[19]


def _process_identity() -> tuple[str, int, str]:
    """This process: machine name, pid, and ``boot id/start ticks`` (which tell a reused pid
    and a rebooted machine apart)."""
    pid = os.getpid()
    try:
        stat = _proc_stat(pid)
        ticks = stat[1] if stat else ""
    except OSError:
        ticks = ""
    return socket.gethostname()[:255], pid, f"{_boot_id()}/{ticks}"


def _worker_gone(worker: Any, host: str, process_start: str, now: datetime, stale: timedelta) -> bool:
    """Whether a registered worker is gone: its process no longer runs (same machine), or its
    heartbeat is stale (another machine, or no way to tell)."""
    if worker.host == host:
        boot, _, ticks = (worker.process_start or "").partition("/")
        my_boot = process_start.partition("/")[0]
        if boot and my_boot and boot != my_boot:
            return True  # the machine rebooted since: every process of that boot is gone
        if boot == my_boot:
            gone = _process_gone(worker.pid, ticks)
            if gone is not None:
                return gone
    return bool(worker.heartbeat_at < now - stale)


def _process_gone(pid: int, ticks: str) -> bool | None:
    """Whether process ``pid`` (started at ``ticks``) no longer runs; None if unknown."""
    try:
        stat = _proc_stat(pid)
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except OSError:  # PermissionError: it runs, as another user
            return False
        return False
    if stat is None:
        return True
    state, started = stat
    return state in ("Z", "X") or bool(ticks and started != ticks)


def release_claims(session: Session, specs: Sequence[QueueSpec], now: datetime | None = None) -> int:
    """Requeue every ``running`` job of the queues ``specs`` as it was (no death counted, no
    backoff) and forget every registered worker, in the write transaction ``session``: the
    number of jobs requeued.

    For a store whose claims belong to no worker of its own: a restored copy of another store
    (:func:`kg.backup.restore_store`) holds the claims and the worker rows of the processes that
    served the original when it was copied. Those may still run (a backup of a live store), so
    neither a pid check nor a lease would free the claims before the lease expires: the restored
    store's first worker would wait that long for texts that were being embedded at the cut.
    """
    now = now or utcnow()
    released = 0
    for spec in specs:
        table: Table = spec.model.__table__  # type: ignore[attr-defined]  # a declarative model
        result = session.execute(update(table).where(table.c[spec.state] == spec.running).values(
            {spec.state: spec.queued, "claimed_by": None, **spec.requeue_values(now)}))
        released += int(getattr(result, "rowcount", 0) or 0)
    session.execute(delete(QueueWorker))
    return released


__all__ = ["Claim", "Claimed", "DurableQueue", "HEARTBEAT_S", "LEASE_S", "MAX_ATTEMPTS", "MAX_RETRY_BACKOFF_S",
           "QueueSpec", "RETRY_BACKOFF_S", "release_claims"]
