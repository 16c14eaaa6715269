"""The indexer: drains the durable queue of content keys to embed (``index_jobs``).

A write is acknowledged once its node version and its job are stored (one transaction). The
indexer claims jobs, chunks and embeds their text outside any transaction, then stores the
chunks and deletes the jobs in one transaction; an embedder failure marks only the failing
job ``failed`` with its reason and stores none of its chunks. Jobs go through the durable
queue of :mod:`kg.indexing.queue`: claimed fairly across repositories and workspaces (a small write is
not stuck behind another repository's backlog), by priority (writes' texts before a re-embed's),
under a lease renewed while the batch runs. A crash leaves jobs ``running``; the next indexer
takes them again (at once when it can tell their process is gone, else when their lease
expires), so nothing is lost, and chunk ids are deterministic (content key, index), so nothing
is duplicated. A death is not the text's failure: a text taken back is retried by itself, and
only deaths while it ran alone count; after :data:`~kg.indexing.index_jobs.MAX_ATTEMPTS` of them
it is failed (a text that kills its process). Large texts are embedded in steps, with other
texts, of their workspace too, claimed and done between the steps (:class:`Indexer`).

The queue itself (its spec, :func:`~kg.indexing.index_jobs.enqueue`, its status) is
:mod:`kg.indexing.index_jobs`; this module runs it and completes re-embeds
(:mod:`kg.indexing.reembed`), which only enqueue: the arrows point indexer -> reembed ->
index_jobs.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from kg.context import Resources
from kg.errors import BackendUnavailable, KGError, ProviderError
from kg.indexing.chunks import ChunkRow, Piece, TextPlan, embed_pieces, plan_pieces, plan_text, store_chunks, sync_index
from kg.indexing.config import NEXT, parse_embedding_config, workspace_embedding
from kg.indexing.index_jobs import INDEX_QUEUE, LEASE, MAX_ATTEMPTS
from kg.indexing.queue import HEARTBEAT_S, RETRY_BACKOFF_S, Claim, DurableQueue
from kg.indexing.reembed import complete_reembed
from kg.indexing.worker import PollingWorker
from kg.providers.base import Embedder
from kg.store.models import IndexJob, NodeVersion, Repository, Workspace, utcnow

log = logging.getLogger("kg.indexer")
MAX_BACKOFF_S = 60.0
"""Longest wait of the background indexer between tries while a model server is down, in
seconds (the wait doubles from ``poll_s`` after each pass that could embed nothing)."""


@dataclass
class IndexRun:
    """What one pass of the indexer did."""

    done: int = 0
    failed: int = 0
    passages: int = 0
    dropped: int = 0
    stepped: int = 0
    """Chunks embedded of large texts still in flight (their jobs are not done yet)."""
    postponed: int = 0
    """Jobs put back in the queue because their model server cannot be reached."""
    waiting_for: str | None = None
    """Why they were (the first unreachable server's message)."""


class _Job(NamedTuple):
    """A claimed index job: what to embed, and the attempt that fences its result."""

    id: int
    repo_id: int
    content_key: str
    workspace_id: int
    node_version_id: int
    attempt: int

    @property
    def claim(self) -> Claim:
        return Claim(self.id, self.attempt)


@dataclass
class _InFlight:
    """A large text embedded in steps across passes: its claim, its chunks, those embedded so
    far (kept in memory: nothing is stored until every chunk is embedded)."""

    job: _Job
    embedder: Embedder
    pieces: list[Piece]
    started_at: datetime
    rows: list[ChunkRow] = field(default_factory=list)


class Indexer(PollingWorker):
    """Drains ``index_jobs``: inline (``run_pending``) or in a background thread.

    Parameters
    ----------
    services : kg.services.Services
    batch_jobs : int
        Jobs claimed per pass.
    poll_s : float
        How long the background thread sleeps when the queue is empty, in seconds (a write
        wakes it at once).
    lease_s : float
        How long a claim holds a job without renewal, in seconds; renewed every
        ``heartbeat_s`` while its batch runs.
    max_attempts : int
        Claims of one job before a lost claim fails it.
    heartbeat_s : float
        How often a running batch renews its leases, in seconds.
    step_chunks : int
        Chunks embedded of large texts per unfiltered pass. A claimed text with more chunks
        is embedded in steps over the following passes, which claim and finish other jobs in
        between, of its own workspace too; its chunks are stored, and its job finished, only
        once all are embedded, so a search never sees half a text. A write (:meth:`wake`) cuts
        the step short after the chunks under way (a quarter of a step at most), so the next
        pass claims it. Filtered passes (:meth:`drain` of a repository, a write indexing its
        own text) embed whole texts.
    retry_backoff_s : float
        The wait before a text taken back from a dead indexer is claimed again, in seconds, after
        its first counted death (none after the first, unattributed one; then doubling:
        :class:`~kg.indexing.queue.DurableQueue`).

    Notes
    -----
    Texts are keyed by content, not by node: a node's versions point at the content keys of
    their texts, and a search reads the chunks of the versions the branch sees. So a text
    embedded out of order never shows in place of a later one: when a short later write of a
    node is stored before the node's earlier, longer text finishes, that text's chunks serve
    only the versions that hold it.
    """

    def __init__(self, services: Resources, *, batch_jobs: int = 32, poll_s: float = 1.0,
                 lease_s: float = LEASE.total_seconds(), max_attempts: int = MAX_ATTEMPTS,
                 heartbeat_s: float = HEARTBEAT_S, step_chunks: int = 16,
                 retry_backoff_s: float = RETRY_BACKOFF_S) -> None:
        super().__init__(poll_s=poll_s, thread_name="kg-indexer")
        self.backoff_s = 0.0  # the idle wait while a model server is down (pass_once)
        self.services = services
        self.batch_jobs = batch_jobs
        self.step_chunks = step_chunks
        self._in_flight: dict[int, _InFlight] = {}
        self.queue = DurableQueue(services.db, INDEX_QUEUE, lease_s=lease_s, max_attempts=max_attempts,
                                  heartbeat_s=heartbeat_s, retry_backoff_s=retry_backoff_s)
        self._lock = threading.Lock()

    def pass_once(self) -> int:
        """One background pass: the jobs done, failed or dropped (a busy queue is drained
        without pauses); with nothing to do, complete any re-embed whose jobs are all done (one
        whose last pass was cut short by a crash or an error)."""
        run = self.run_pending()
        handled = run.done + run.failed + run.dropped + run.stepped
        if run.postponed and not handled:
            # Nothing moves while the model server is down: wait twice as long as last time
            # (up to MAX_BACKOFF_S) before the next try, and say so once per try.
            self.backoff_s = min(max(2 * self.backoff_s, self.poll_s), MAX_BACKOFF_S)
            log.warning("indexer: %s; %d job(s) stay queued, next try in %.0f s", run.waiting_for,
                        run.postponed, self.backoff_s)
        elif handled:
            self.backoff_s = 0.0
        if not handled:
            self._complete_reembeds(None)
        return handled

    def idle_wait_s(self) -> float:
        """How long the thread waits after a pass that did nothing: ``poll_s``, or the backoff
        while the model server of the queued jobs cannot be reached (a write still wakes it)."""
        return max(self.poll_s, self.backoff_s)

    def close(self) -> None:
        """Stop the background thread and unregister from the queue (held jobs go back)."""
        self.stop()
        self._in_flight.clear()  # their claims go back with the others'
        self.queue.close()

    # -- one pass ---------------------------------------------------------------------------

    def run_pending(self, *, repo_id: int | None = None, content_keys: Iterable[str] | None = None) -> IndexRun:
        """Claim up to ``batch_jobs`` jobs (of ``repo_id``, of ``content_keys``: a write indexing its
        own text inline), embed them, store their chunks; ``failed`` includes the jobs failed
        because their attempts were used up.

        Without filters, jobs are shared across repositories and workspaces (:mod:`kg.indexing.queue`);
        their leases are renewed while the batch is embedded and stored.
        """
        with self._lock:
            exhausted: list[int] = []
            keys = None if content_keys is None else list(content_keys)
            stepped = repo_id is None and keys is None
            if stepped:
                self._wake.clear()  # this claim sees what was written so far; a later write cuts the step
            claimed = self._claim(repo_id, keys, exhausted)
            # In flight: large texts of earlier passes (those this pass's filter names).
            going = [f for f in self._in_flight.values()
                     if (repo_id is None or f.job.repo_id == repo_id)
                     and (keys is None or f.job.content_key in keys)]
            if not claimed and not going:
                return IndexRun(failed=len(exhausted))
            held = [job.claim for job in claimed] + [f.job.claim for f in self._in_flight.values()]
            with self.queue.renewing(held):
                run = self._process(claimed, going, self.step_chunks if stepped else None)
            run.failed += len(exhausted)
            return run

    def drain(self, *, repo_id: int | None = None) -> IndexRun:
        """Run passes until no job is pending (failed jobs stay failed)."""
        total = IndexRun()
        while True:
            run = self.run_pending(repo_id=repo_id)
            if run.done == 0 and run.failed == 0 and run.dropped == 0 and run.stepped == 0:
                return total
            total.done += run.done
            total.failed += run.failed
            total.passages += run.passages
            total.dropped += run.dropped
            total.stepped += run.stepped

    def in_flight(self) -> list[dict[str, Any]]:
        """The large texts this indexer is embedding in steps.

        Returns
        -------
        list of dict
            ``{"job_id", "content_key", "chunks_done", "chunks_total"}``, oldest first.
        """
        return [{"job_id": f.job.id, "content_key": f.job.content_key, "chunks_done": len(f.rows),
                 "chunks_total": len(f.pieces)} for f in list(self._in_flight.values())]

    def _claim(self, repo_id: int | None, keys: list[str] | None,
               exhausted: list[int] | None = None) -> list[_Job]:
        """Claim a batch through the queue; the ids failed for used-up attempts go to ``exhausted``."""
        if keys is not None and not keys:
            return []
        where = []
        if repo_id is not None:
            where.append(IndexJob.repo_id == repo_id)
        if keys is not None:
            where.append(IndexJob.content_key.in_(keys))
        with self.services.db.write() as session:
            claimed = self.queue.claim(session, self.batch_jobs, where=where)
            if exhausted is not None:
                exhausted.extend(claimed.exhausted)
            if not claimed.claims:
                return []
            attempt = {c.id: c.attempt for c in claimed.claims}
            rows = session.execute(select(IndexJob.id, IndexJob.repo_id, IndexJob.content_key,
                                          IndexJob.workspace_id, IndexJob.node_version_id)
                                   .where(IndexJob.id.in_(list(attempt))).order_by(IndexJob.id)).all()
            return [_Job(jid, repo_id, key, wid, vid, attempt=attempt[jid]) for jid, repo_id, key, wid, vid in rows]

    def _process(self, claimed: list[_Job], going: list[_InFlight], budget: int | None) -> IndexRun:
        run = IndexRun()
        settings = self.services.settings
        work: list[tuple[_Job, TextPlan, Any]] = []
        failures: dict[int, str] = {}
        obsolete: list[int] = []
        with self.services.db.read() as session:
            for job in claimed:
                job_id, repo_id, key, workspace_id, version_id, _ = job
                version = session.get(NodeVersion, version_id)
                if version is None:
                    # Its branch was deleted or reset: any other version with the text will do.
                    version = session.scalar(select(NodeVersion).where(
                        NodeVersion.repo_id == repo_id, NodeVersion.content_key == key).limit(1))
                    if version is None:
                        obsolete.append(job_id)  # no version needs this text any more
                        continue
                    workspace_id = version.workspace_id
                workspace = session.get(Workspace, workspace_id)
                if workspace is None:
                    obsolete.append(job_id)
                    continue
                try:
                    plan, embedder = _plan_for_job(self.services, workspace.config, version.properties, key)
                except KGError as exc:
                    failures[job_id] = exc.message
                    continue
                if plan is None:
                    # Neither the current settings nor a re-embed's make this key any more (the
                    # settings changed since): nothing to embed.
                    obsolete.append(job_id)
                    continue
                work.append((job, plan, embedder))
        rows_by_job: dict[int, list[ChunkRow]] = {}
        postponed: list[tuple[int, str]] = []
        complete: list[_Job] = []
        started: list[_InFlight] = []

        def embed(job: _Job, pieces: list[Piece], embedder: Embedder) -> list[ChunkRow] | None:
            try:
                return embed_pieces(pieces, embedder, batch_size=settings.embed_batch_size)
            except BackendUnavailable as exc:
                # The model server is down: the job waits for it, it has not failed (said once
                # a pass, below; the background thread backs off: pass_once).
                postponed.append((job.id, exc.message))
            except (ProviderError, KGError) as exc:
                failures[job.id] = exc.message
            return None

        for job, plan, embedder in work:
            try:
                pieces = plan_pieces(plan, embedder)
            except KGError as exc:
                failures[job.id] = exc.message
                continue
            if budget is not None and len(pieces) > budget:
                # A large text: embedded in steps, this pass and the next ones.
                flight = _InFlight(job, embedder, pieces, utcnow())
                self._in_flight[job.id] = flight
                started.append(flight)
                continue
            rows = embed(job, pieces, embedder)
            if rows is not None:
                rows_by_job[job.id] = rows
                complete.append(job)
        # The whole texts first: stored (searchable) before the large ones' steps are embedded.
        stored_repos = self._store(complete, rows_by_job, run, failures)
        if stored_repos and self.services.index.eager_catch_up and (going or started):
            self._push(stored_repos)
            stored_repos = set()
        finished: list[_Job] = []
        left = budget
        cut = max(1, (budget or 0) // 4)  # a write waits for at most this many chunks
        for flight in going + started:
            if left is not None and (left <= 0 or (self._wake.is_set() and left < (budget or 0))):
                break  # a step's budget is spent, or a write waits (after some progress: no starving)
            done = len(flight.rows)
            n = len(flight.pieces) - done if left is None else min(left, len(flight.pieces) - done)
            # Stepped: a quarter of a step at a time, until a write wakes the indexer.
            rows = embed(flight.job, flight.pieces[done:done + n], flight.embedder) if left is None else \
                self._embed_until_woken(flight, n, cut, embed)
            if rows is None:  # failed or postponed: it starts again from its first chunk
                self._in_flight.pop(flight.job.id, None)
                continue
            n = len(rows)
            flight.rows += rows
            if left is not None:
                left -= n
            if len(flight.rows) == len(flight.pieces):
                self._in_flight.pop(flight.job.id, None)
                rows_by_job[flight.job.id] = flight.rows
                finished.append(flight.job)
            else:
                run.stepped += n
        stored_repos |= self._store(finished, rows_by_job, run, failures)
        complete += finished
        if stored_repos and self.services.index.eager_catch_up:
            self._push(stored_repos)
        claim_of = {job.id: job.claim for job in claimed}
        claim_of.update((f.job.id, f.job.claim) for f in going)
        with self.services.db.write() as session:
            if self._in_flight:
                self._record_progress(session)
            if obsolete:
                run.dropped += len(self.queue.finish(session, [claim_of[j] for j in obsolete]))
            for job_id, reason in postponed:  # still pending; index/status says why it waits
                self.queue.release(session, [claim_of[job_id]],
                                   {"error": reason[:2000], "updated_at": utcnow()})
            for job_id, reason in failures.items():
                run.failed += len(self.queue.finish(session, [claim_of[job_id]], {
                    "status": "failed", "error": reason[:2000], "updated_at": utcnow()}))
        if postponed:
            run.postponed, run.waiting_for = len(postponed), postponed[0][1]
        if run.failed:
            log.warning("indexer: %d job(s) failed", run.failed)
        self._complete_reembeds({job.repo_id for job in claimed} | {job.repo_id for job in complete})
        return run

    def _embed_until_woken(self, flight: _InFlight, n: int, cut: int,
                           embed: Any) -> list[ChunkRow] | None:
        """Embed up to ``n`` more chunks of a text in flight, ``cut`` at a time, stopping early
        once a write wakes the indexer (at least one group is embedded); None if it failed."""
        done = len(flight.rows)
        rows: list[ChunkRow] = []
        while len(rows) < n:
            size = min(cut, n - len(rows))
            got = embed(flight.job, flight.pieces[done + len(rows):done + len(rows) + size], flight.embedder)
            if got is None:
                return None
            rows += got
            if self._wake.is_set():
                break
        return rows

    def _store(self, jobs: list[_Job], rows_by_job: dict[int, list[ChunkRow]], run: IndexRun,
               failures: dict[int, str]) -> set[int]:
        """Store the chunks of embedded jobs and finish them, one transaction a repository,
        fenced (a lost claim stores nothing); the repositories stored in. A job the database
        refuses goes to ``failures``."""
        by_repo: dict[int, list[_Job]] = {}
        for job in jobs:
            by_repo.setdefault(job.repo_id, []).append(job)
        stored_repos: set[int] = set()
        for repo_id, repo_jobs in by_repo.items():
            try:
                with self.services.db.write() as session:
                    # The repository row lock orders chunk ids with the writers' (kg.indexing.chunks).
                    session.scalar(select(Repository.id).where(Repository.id == repo_id).with_for_update())
                    # Fenced: only the jobs this indexer still holds (a lost claim stores nothing).
                    held = {c.id for c in self.queue.held(session, [j.claim for j in repo_jobs])}
                    for job in repo_jobs:
                        if job.id in held:
                            store_chunks(session, repo_id, rows_by_job[job.id])
                    self.queue.finish(session, [j.claim for j in repo_jobs if j.id in held])
                if len(held) < len(repo_jobs):
                    log.warning("indexer: %d job(s) lost their claim; another indexer embeds them",
                                len(repo_jobs) - len(held))
                if held:
                    stored_repos.add(repo_id)
                run.done += len(held)
                run.passages += sum(len(rows_by_job[j.id]) for j in repo_jobs if j.id in held)
            except Exception as exc:  # the database refused the chunks: fail the jobs, never spin
                log.exception("indexer: storing chunks failed")
                for job in repo_jobs:
                    failures[job.id] = f"storing the chunks failed: {type(exc).__name__}: {exc}"[:500]
        return stored_repos

    def _record_progress(self, session: Session) -> None:
        """Store the progress of the texts in flight (``index/status`` shows it); a text whose
        claim this indexer lost is dropped (the attempt that took it over embeds it)."""
        flights = list(self._in_flight.values())
        held = {c.id for c in self.queue.held(session, [f.job.claim for f in flights])}
        for flight in flights:
            if flight.job.id not in held:
                log.warning("indexer: job %s lost its claim while in flight; another indexer embeds it",
                            flight.job.id)
                self._in_flight.pop(flight.job.id, None)
                continue
            session.execute(update(IndexJob).where(IndexJob.id == flight.job.id).values(
                chunks_done=len(flight.rows), chunks_total=len(flight.pieces), started_at=flight.started_at))

    def _complete_reembeds(self, repo_ids: set[int] | None) -> None:
        """Switch the workspaces (of these repositories, or all) whose re-embed has all its
        texts embedded. Every workspace under way is checked, not only those of the jobs just
        run: a job is one per text, and a text shared by two workspaces carries one of them."""
        with self.services.db.read() as session:
            stmt = select(Workspace.repo_id, Workspace.id, Workspace.config)
            if repo_ids is not None:
                stmt = stmt.where(Workspace.repo_id.in_(sorted(repo_ids)))
            under_way = [(repo_id, wid) for repo_id, wid, config in session.execute(stmt.order_by(Workspace.id))
                         if NEXT in (config or {})]
        for repo_id, wid in under_way:
            try:
                complete_reembed(self.services, repo_id, wid)
            except KGError as exc:  # the new model went away: the next pass tries again
                log.warning("indexer: re-embed of workspace %s not completed: %s", wid, exc.message)


    def _push(self, repo_ids: Iterable[int]) -> None:
        """Catch an index with ``eager_catch_up`` (a remote one) up on what was just embedded,
        so the next search does not pay for it; a failure only logs (a search catches up
        before it reads)."""
        for repo_id in repo_ids:
            try:
                with self.services.db.read() as session:
                    repo = session.get(Repository, repo_id)
                    if repo is not None:
                        sync_index(session, self.services.index, repo.id, repo.uid)
            except KGError as exc:
                log.warning("indexer: placing repository %s in the index failed: %s", repo_id, exc.message)


def _plan_for_job(services: Resources, config: dict[str, Any] | None, properties: dict[str, Any],
                  key: str) -> tuple[TextPlan, Embedder] | tuple[None, None]:
    """The plan and embedder that make ``key`` from a version's text: under the workspace's
    current settings, or its re-embed's (``embedding_next``); ``(None, None)`` when neither."""
    default = services.settings.embedding_model
    candidates = [workspace_embedding(config, default_model=default)]
    if config is not None and config.get(NEXT) is not None:
        candidates.append(parse_embedding_config(config[NEXT], default_model=default))
    for settings in candidates:
        embedder = services.embedder(settings.model)
        plan = plan_text(properties, settings, embedder)
        if plan.content_key == key:
            return plan, embedder
    return None, None
