"""The queue of texts to embed (``index_jobs``): its spec, the enqueue of a write, its status.

A write stores its node version and its job in one transaction (:func:`enqueue`); the
:class:`~kg.indexing.indexer.Indexer` drains the queue through :mod:`kg.indexing.queue`. This
module is below both the indexer and re-embed (:mod:`kg.indexing.reembed` queues a workspace's
texts here; the indexer completes a re-embed when its texts are embedded), so neither imports
the other in a cycle.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence, Set
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import bindparam, func, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from kg.indexing.chunks import existing_content_keys, has_chunks, text_fields
from kg.indexing.config import workspace_embedding
from kg.indexing.queue import QueueSpec
from kg.store.models import IndexJob, NodeVersion, Repository, Workspace, utcnow
from kg.store.rows import execute_rows

LEASE = timedelta(minutes=5)
"""How long a claim holds a job without renewal (renewed while its batch runs)."""

MAX_ATTEMPTS = 3
"""Deaths of the indexer process while it embedded a text alone before the text is failed (a
text that kills its process; other deaths only retry it: :mod:`kg.indexing.queue`)."""


def _exhausted(deaths: int, max_attempts: int, now: datetime) -> dict[str, Any]:
    """The failure of a text whose indexer died each time it embedded it alone."""
    return {"updated_at": now, "error": (
        f"the indexer process died {deaths} times (at most {max_attempts}) while embedding this text "
        "alone: the text likely kills it (out of memory, a crash in the model); fix the cause, then "
        "`kg reindex --retry-failed` (or POST .../index/retry-failed) embeds it again")}


_NO_PROGRESS: dict[str, Any] = {"chunks_done": None, "chunks_total": None, "started_at": None}
"""The progress columns of a job not being embedded in steps."""

INDEX_QUEUE = QueueSpec(
    name="index", model=IndexJob, state="status", queued="pending",
    group="repo_id", lane="workspace_id", order=("id",), priority="priority",
    # A claim starts the text from its first chunk: no progress of an earlier attempt is kept.
    claim_values=lambda now, lease: {"updated_at": now, **_NO_PROGRESS, "started_at": now},
    renew_values=lambda now, lease: {"updated_at": now},
    lease_expired=lambda now, lease: IndexJob.updated_at < now - lease,
    requeue_values=lambda now: {"updated_at": now, **_NO_PROGRESS},
    exhausted_values=_exhausted,
    retry_reason=lambda reason: {"error": reason},
)
"""``index_jobs`` as a durable queue: shared across repositories, then their workspaces; the
lease is ``updated_at`` plus :data:`LEASE`."""


_FRESH: dict[str, Any] = {"failures": 0, "alone": False, "not_before": None}
"""The retry columns of a job queued afresh (:mod:`kg.indexing.queue`)."""


@functools.lru_cache(maxsize=4)
def _enqueue_stmt(dialect: str) -> Any:
    """The queue insert for one dialect, built once (values are bound at execution)."""
    insert = pg_insert if dialect == "postgresql" else sqlite_insert
    stmt = insert(IndexJob).values(
        repo_id=bindparam("q_repo_id"), content_key=bindparam("q_key"), workspace_id=bindparam("q_wid"),
        node_version_id=bindparam("q_vid"), status="pending", attempts=0, priority=bindparam("q_priority"),
        created_at=bindparam("q_now", type_=IndexJob.created_at.type),
        updated_at=bindparam("q_now2", type_=IndexJob.updated_at.type),
        failures=0, alone=False,  # their defaults, named: every value is in the statement (execute_rows)
    )
    return stmt.on_conflict_do_update(
        index_elements=["repo_id", "content_key"],
        set_={"status": "pending", "error": None, "node_version_id": stmt.excluded.node_version_id,
              "updated_at": stmt.excluded.updated_at, "attempts": 0, "claimed_by": None, **_FRESH},
        where=IndexJob.status == "failed",
    )


WRITE_PRIORITY = 0
"""Claimed first: the text of a write (a user waits to find it)."""

REEMBED_PRIORITY = 1
"""Claimed after every write's text: a re-embed's backlog (the current model answers meanwhile)."""


def enqueue(session: Session, *, repo_id: int, workspace_id: int, content_key: str | None,
            node_version_id: int, priority: int = WRITE_PRIORITY) -> bool:
    """Queue the embedding of a content key (None: no text, nothing queued) unless its chunks
    exist, inside the write's transaction; whether a job is pending for the key after the call.

    ``node_version_id`` is a version holding the text (its properties are embedded);
    ``priority`` is :data:`WRITE_PRIORITY` or :data:`REEMBED_PRIORITY`. A job that failed before
    is set back to ``pending`` with no attempt used: the text was written again. Jobs are
    claimed by ``priority`` (lower first), shared across repositories and workspaces, then in
    order (:mod:`kg.indexing.queue`).
    """
    if content_key is None:
        return False
    if has_chunks(session, repo_id, content_key):
        return False
    now = utcnow()
    session.execute(_enqueue_stmt(session.get_bind().dialect.name), {
        "q_repo_id": repo_id, "q_key": content_key, "q_wid": workspace_id, "q_vid": node_version_id,
        "q_now": now, "q_now2": now, "q_priority": priority})
    return True


def enqueue_many(session: Session, *, repo_id: int, jobs: Sequence[tuple[int, str | None, int]],
                 priority: int = WRITE_PRIORITY, stored: Set[str] | None = None) -> list[str]:
    """:func:`enqueue` for many ``(workspace id, content key, node version id)`` at once, in write
    order: the same rows, one executemany; the content keys with a job pending after the
    call, in first-seen order.

    For each content key, the job names the first version of ``jobs`` that holds it (as
    :func:`enqueue` called once per version would). ``stored`` says which keys have their
    chunks stored when the caller knows it (a bulk import asks before it inserts its own
    chunks); None: one chunk lookup per 500 distinct keys here.
    """
    first: dict[str, tuple[int, int]] = {}
    for wid, key, vid in jobs:
        if key is not None and key not in first:
            first[key] = (wid, vid)
    if not first:
        return []
    if stored is None:
        stored = existing_content_keys(session, repo_id, first)
    now = utcnow()
    queued = [key for key in first if key not in stored]
    if queued:
        execute_rows(session, _enqueue_stmt(session.get_bind().dialect.name), [
            {"q_repo_id": repo_id, "q_key": key, "q_wid": first[key][0], "q_vid": first[key][1], "q_now": now,
             "q_now2": now, "q_priority": priority} for key in queued])
    return queued


def retry_failed(session: Session, repo: Repository) -> list[str]:
    """Queue a repository's failed texts again, afresh (``pending``, no attempt used, no reason),
    in a write transaction: their content keys.
    """
    failed = list(session.scalars(select(IndexJob.content_key).where(
        IndexJob.repo_id == repo.id, IndexJob.status == "failed").order_by(IndexJob.id)))
    if failed:
        session.execute(update(IndexJob).where(IndexJob.repo_id == repo.id, IndexJob.status == "failed").values(
            status="pending", attempts=0, error=None, claimed_by=None, updated_at=utcnow(), **_NO_PROGRESS,
            **_FRESH))
    return failed


def index_status(session: Session, repo: Repository, *, now: datetime | None = None) -> dict[str, Any]:
    """Pending, running and failed jobs of a repository (API: ``index/status``), estimated at
    ``now`` (default: now).

    ``{"pending", "running", "failed", "failures", "waiting", "progress", "next"}``:
    ``failures`` describes the failed jobs (at most 100), ``waiting`` the pending ones with
    a reason to wait (their model could not be reached at their last attempt, or their
    indexer stopped while embedding them: they are retried); ``progress`` the running jobs
    of large texts embedded in steps (at most 100), each ``{"content_key", "workspace",
    "path", "chunks_done", "chunks_total", "started_at", "elapsed_s", "eta_s"}``; ``eta_s``
    (seconds left) assumes the rate so far holds, None before the first chunk. ``next``
    is the oldest pending job and what it waits behind (:func:`next_pending`), None when
    nothing is pending.
    """
    counts = dict(session.execute(
        select(IndexJob.status, func.count()).where(IndexJob.repo_id == repo.id).group_by(IndexJob.status)
    ).all())
    def described(status: str) -> list[dict[str, Any]]:
        rows = session.execute(
            select(IndexJob.content_key, IndexJob.error, IndexJob.attempts, IndexJob.node_version_id,
                   IndexJob.updated_at)
            .where(IndexJob.repo_id == repo.id, IndexJob.status == status, IndexJob.error.is_not(None))
            .order_by(IndexJob.id).limit(100)
        ).all()
        out = []
        for key, error, attempts, version_id, updated in rows:
            version = session.get(NodeVersion, version_id)
            ws = session.get(Workspace, version.workspace_id) if version is not None else None
            out.append({"content_key": key, "error": error, "attempts": attempts,
                        "workspace": ws.name if ws else None, "path": version.path if version else None,
                        "updated_at": updated.isoformat()})
        return out

    return {"pending": counts.get("pending", 0), "running": counts.get("running", 0),
            "failed": counts.get("failed", 0), "failures": described("failed"),
            "waiting": described("pending"), "progress": _progress(session, repo, now or utcnow()),
            "next": next_pending(session, repo, now=now)}


def _text_chars(session: Session, version: NodeVersion | None) -> int | None:
    """Characters of a version's indexed text, under its workspace's settings."""
    if version is None:
        return None
    ws = session.get(Workspace, version.workspace_id)
    config = workspace_embedding(ws.config if ws is not None else None, default_model="")
    return sum(len(v) for v in text_fields(version.properties or {}, config.indexed_properties).values())


def next_pending(session: Session, repo: Repository, *, now: datetime | None = None) -> dict[str, Any] | None:
    """The oldest pending job of a repository (writes' texts first) and what it waits behind, at
    ``now`` (default: now); None when nothing is pending.

    ``{"content_key", "workspace", "path", "chars", "waiting_s", "retry_at", "alone", "reason",
    "behind"}``: ``chars`` is the size of its text, ``retry_at`` the end of its backoff (None:
    it may be claimed at once), ``alone`` whether it will be run by itself (its indexer stopped
    while embedding it), ``reason`` why it last went back to the queue. ``behind`` is the job
    being embedded that it waits for (one of the same workspace first, else of the repository;
    the largest, by chunks left), ``{"content_key", "workspace", "path", "chars",
    "chunks_done", "chunks_total", "elapsed_s"}``, or None when none of the repository's runs.
    Chunk counts are None before a large text's first step is recorded.
    """
    now = now or utcnow()
    job = session.scalar(select(IndexJob).where(IndexJob.repo_id == repo.id, IndexJob.status == "pending")
                         .order_by(IndexJob.priority, IndexJob.id).limit(1))
    if job is None:
        return None

    def place(version_id: int) -> tuple[NodeVersion | None, str | None]:
        version = session.get(NodeVersion, version_id)
        ws = session.get(Workspace, version.workspace_id) if version is not None else None
        return version, ws.name if ws is not None else None

    version, workspace = place(job.node_version_id)
    running = session.scalars(select(IndexJob).where(IndexJob.repo_id == repo.id, IndexJob.status == "running")
                              .order_by(IndexJob.id).limit(100)).all()
    ahead = sorted(running, key=lambda r: (r.workspace_id != job.workspace_id,
                                           -((r.chunks_total or 0) - (r.chunks_done or 0)), r.id))
    behind = None
    if ahead:
        first = ahead[0]
        other, other_ws = place(first.node_version_id)
        started = first.started_at
        behind = {"content_key": first.content_key, "workspace": other_ws,
                  "path": other.path if other is not None else None, "chars": _text_chars(session, other),
                  "chunks_done": first.chunks_done, "chunks_total": first.chunks_total,
                  "elapsed_s": round(max(0.0, (now - started).total_seconds()), 1) if started else None}
    retry_at = job.not_before if job.not_before is not None and job.not_before > now else None
    return {"content_key": job.content_key, "workspace": workspace,
            "path": version.path if version is not None else None, "chars": _text_chars(session, version),
            "waiting_s": round(max(0.0, (now - job.created_at).total_seconds()), 1),
            "retry_at": retry_at.isoformat() if retry_at is not None else None, "alone": bool(job.alone),
            "reason": job.error, "behind": behind}


def _progress(session: Session, repo: Repository, now: datetime) -> list[dict[str, Any]]:
    """The running jobs with recorded progress (texts embedded in steps), with an estimate."""
    rows = session.execute(
        select(IndexJob.content_key, IndexJob.node_version_id, IndexJob.chunks_done, IndexJob.chunks_total,
               IndexJob.started_at)
        .where(IndexJob.repo_id == repo.id, IndexJob.status == "running", IndexJob.chunks_total.is_not(None))
        .order_by(IndexJob.id).limit(100)
    ).all()
    out = []
    for key, version_id, done, total, started in rows:
        version = session.get(NodeVersion, version_id)
        ws = session.get(Workspace, version.workspace_id) if version is not None else None
        elapsed = max(0.0, (now - started).total_seconds()) if started is not None else None
        eta = round(elapsed * ((total or 0) - done) / done, 1) if done and elapsed is not None else None
        out.append({"content_key": key, "workspace": ws.name if ws else None,
                    "path": version.path if version else None, "chunks_done": done or 0, "chunks_total": total,
                    "started_at": started.isoformat() if started is not None else None,
                    "elapsed_s": round(elapsed, 1) if elapsed is not None else None, "eta_s": eta})
    return out
