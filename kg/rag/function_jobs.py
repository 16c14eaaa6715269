"""Asynchronous function invocation: the durable job queue ``function_jobs`` and its runner.

``POST /api/functions/{repo}/{name}/invoke`` with ``wait_for_completion: false`` stores a job
(:func:`submit`) and answers at once; a :class:`JobRunner` claims it, runs
:func:`kg.rag.functions.invoke` outside any transaction and stores the output or the error.

States::

    queued ──claim──> running ──> succeeded
      ^                  │  └───> failed      (the function raised; or attempts exhausted)
      └── lease expired ─┘

A job's state lives in SQL, so it survives a restart: the next process claims jobs still
``queued`` and takes back jobs left ``running`` by a process that stopped (at once when it can
tell that process is gone, else when the lease expires). Jobs go through the durable queue of
:mod:`kg.indexing.queue`: claimed fairly across repositories, in order of submission inside one. The
runner renews the lease of the job it runs, so a long function is not taken over by another
runner while its process lives. A runner's death is not the job's failure: a job whose claim is
lost is run again, by itself, and a job whose runner died :data:`MAX_ATTEMPTS` times while it ran
alone is failed with ``attempts_exhausted`` instead of being run again (a function that kills
its process would otherwise do so forever). Finishing a job is fenced by
its attempt number and runner: a runner that lost its lease cannot overwrite the result of the
attempt that took over.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import select
from sqlalchemy.orm import Session

from kg.access import key_actor
from kg.context import SYSTEM, Actor, Resources, UnitOfWork, admit, permit, run, throttle
from kg.errors import InvalidInput, KGError, NotFound
from kg.indexing.queue import HEARTBEAT_S, Claim, DurableQueue, QueueSpec
from kg.indexing.worker import PollingWorker
from kg.rag.functions import EXPENSIVE_FUNCTIONS, FUNCTIONS, invoke
from kg.settings import Settings
from kg.store.models import FunctionJob, Repository, utcnow
from kg.store.repos import get_branch, get_repository

log = logging.getLogger("kg.rag.function_jobs")

#: How many times a job is claimed before an expired lease fails it.
MAX_ATTEMPTS = 3
#: How long a claim holds a job without renewal, in seconds.
LEASE_S = 300.0


def _exhausted(deaths: int, max_attempts: int, now: datetime) -> dict[str, Any]:
    """The failure of a job whose runner died each time it ran it alone."""
    return {"finished_at": now, "lease_until": None, "error": {
        "code": "attempts_exhausted",
        "message": (f"the job's runner process died {deaths} times while running it alone, before storing "
                    "a result: the job likely kills it (out of memory, a crash)"),
        "details": {"deaths": deaths, "max_attempts": max_attempts},
    }}


FUNCTION_QUEUE = QueueSpec(
    name="function", model=FunctionJob, state="state", queued="queued",
    group="repo_id", lane="repo_id", order=("created_at", "id"), priority=None,
    claim_values=lambda now, lease: {"started_at": now, "lease_until": now + lease},
    renew_values=lambda now, lease: {"lease_until": now + lease},
    lease_expired=lambda now, lease: FunctionJob.lease_until < now,
    requeue_values=lambda now: {"lease_until": None},
    exhausted_values=_exhausted,
)
"""``function_jobs`` as a durable queue: shared across repositories, in order of submission."""


def submit(uow: UnitOfWork, repo: str, name: str, raw: Any, branch: str = "main", *, charge: bool = True) -> str:
    """Queue the invocation of function ``name`` on a branch; answer its job id.

    The function, the repository and the branch are checked before the job is stored; the
    input is checked by the function when the job runs (a bad input gives a ``failed`` job).
    With ``settings.index_inline`` the job is stored already claimed and run before returning
    (tests, scripts); it is still a job, read with :func:`get`.

    Parameters
    ----------
    uow : kg.context.UnitOfWork
        The write transaction (the job row) and its caller; once it has committed the runner
        is woken, or with inline indexing runs the job.
    repo : str
        Repository name.
    name : str
        Function name (``search-documents``, ``ask``, ...).
    raw : dict
        The function's input, stored as JSON.
    branch : str
        The branch the function reads (and writes, for functions that write).
    charge : bool
        Charge an expensive function to the caller's rate limit (False: a job kg queues on its
        own account, as lineage's re-extraction of a changed document, kg.ops.lineage).

    Returns
    -------
    str
        The job id, 32 hexadecimal digits (uuid4).

    Raises
    ------
    kg.errors.NotFound
        Unknown function, repository or branch.
    kg.errors.RateLimited
        An expensive function (``ask``, ``extract-entities``) beyond the caller's rate limit:
        refused before the job is stored.
    """
    if name not in FUNCTIONS:
        raise NotFound(f"function {name!r} not found; available: {', '.join(sorted(FUNCTIONS))}",
                       details={"function": name})
    uow.authorize("read", repo, branch)
    if charge and name in EXPENSIVE_FUNCTIONS:
        throttle(uow.services, uow.actor, name)  # charged now: the runner does not charge again
    inline = bool(uow.services.settings.index_inline)
    runner = cast(JobRunner, uow.services.jobs)
    if inline:
        runner.queue.register()  # the job is stored claimed by this runner
    now = utcnow()
    job_id = uuid.uuid4().hex
    session = uow.session
    repository = get_repository(session, repo)
    get_branch(session, repository, branch)
    session.add(FunctionJob(
        id=job_id, repo_id=repository.id, function=name, branch=branch, input=raw,
        state="running" if inline else "queued", attempts=1 if inline else 0, created_at=now,
        started_at=now if inline else None, lease_until=now + runner.lease if inline else None,
        claimed_by=runner.queue.worker_id if inline else None,
        actor={"kind": uow.actor.kind, "name": uow.actor.name,
               **({"key_id": uow.actor.key_id} if uow.actor.key_id is not None else {})},
    ))
    if inline:
        claim = _Claim(job_id, repo, name, branch, raw, 1, uow.actor)
        uow.after_commit(lambda: runner.execute(claim))
    else:
        uow.after_commit(runner.wake)
    return job_id


def get(services: Resources, caller: Actor, job_id: str) -> dict[str, Any]:
    """A job's state, and its output or error once it has finished.

    Parameters
    ----------
    services : kg.context.Resources
    caller : kg.context.Actor
        Who reads.
    job_id : str

    Returns
    -------
    dict
        ``job_id``, ``repo``, ``function``, ``branch``, ``state`` (``queued``, ``running``,
        ``succeeded`` or ``failed``), ``output`` (the function's output, or ``None``),
        ``error`` (``{"code", "message", "details"}``, or ``None``), ``created_at``,
        ``started_at``, ``finished_at`` (ISO 8601 or ``None``) and ``attempts``.

    Raises
    ------
    kg.errors.NotFound
        No job has this id (or its repository was deleted), or ``caller`` is a key that
        neither submitted it nor is an admin.
    """
    with services.db.read() as session:
        row = session.execute(
            select(FunctionJob, Repository.name).join(Repository, Repository.id == FunctionJob.repo_id)
            .where(FunctionJob.id == job_id)
        ).first()
    admit(services, caller)
    # A key sees the jobs it submitted (admins see every job); any other is not there for it.
    if row is None or (not caller.is_admin and (row[0].actor or {}).get("key_id") != caller.key_id):
        raise NotFound(f"job {job_id!r} not found", details={"job_id": job_id})
    job, repo_name = row
    return {"job_id": job.id, "repo": repo_name, "function": job.function, "branch": job.branch,
            "state": job.state, "output": job.output, "error": job.error,
            "created_at": _iso(job.created_at), "started_at": _iso(job.started_at),
            "finished_at": _iso(job.finished_at), "attempts": job.attempts}


def list_jobs(services: Resources, caller: Actor, repo: str, *, limit: int = 50) -> list[dict[str, Any]]:
    """The newest function jobs of ``repo`` that ``caller`` may see, newest first.

    Parameters
    ----------
    services : kg.context.Resources
    caller : kg.context.Actor
        Who reads: a key sees the jobs it submitted, an admin (and any caller that is not a
        key) every job, as :func:`get`.
    repo : str
        The repository.
    limit : int
        Most jobs answered (1..1000).

    Returns
    -------
    list of dict
        :func:`get`'s shape without ``output`` (``has_output`` instead: outputs can be large).

    Raises
    ------
    kg.errors.NotFound
        Unknown repository (or one the caller may not read).
    kg.errors.InvalidInput
        ``limit`` outside 1..1000.
    """
    if not 1 <= limit <= 1000:
        raise InvalidInput("limit must be between 1 and 1000", details={"limit": limit})
    permit(services, caller, "read", repo)
    with services.db.read() as session:
        repo_row = get_repository(session, repo)
        query = select(FunctionJob).where(FunctionJob.repo_id == repo_row.id)
        if not caller.is_admin:
            # Filtered in the query: the page holds `limit` of the caller's own jobs.
            query = query.where(FunctionJob.actor["key_id"].as_string() == (caller.key_id or ""))
        jobs = session.execute(query.order_by(FunctionJob.created_at.desc(), FunctionJob.id.desc())
                               .limit(limit)).scalars().all()
    return [{"job_id": job.id, "repo": repo, "function": job.function, "branch": job.branch, "state": job.state,
             "has_output": job.output is not None, "error": job.error, "created_at": _iso(job.created_at),
             "started_at": _iso(job.started_at), "finished_at": _iso(job.finished_at), "attempts": job.attempts}
            for job in jobs]


def _iso(value: datetime | None) -> str | None:
    """ISO 8601, or None."""
    return value.isoformat() if value is not None else None


@dataclass(frozen=True)
class _Claim:
    """A claimed job: what the runner needs to run it, and the attempt that fences its result."""

    job_id: str
    repo: str
    function: str
    branch: str
    input: Any
    attempt: int
    actor: Actor = SYSTEM


def _actor(session: Session, settings: Settings, stored: dict[str, Any] | None) -> Actor:
    """The caller a job was submitted by (kg's own work for a job stored before 0010); a key
    as it is now, so a job of a key revoked meanwhile can read nothing."""
    if stored and stored.get("kind") == "key":
        return key_actor(session, settings, str(stored.get("key_id")))
    if not stored or stored.get("kind") not in ("anonymous", "operator", "system"):
        return SYSTEM
    return Actor(stored["kind"], stored.get("name"))


def error_shape(exc: BaseException) -> dict[str, Any]:
    """The API error shape of an exception a job raised.

    Parameters
    ----------
    exc : BaseException

    Returns
    -------
    dict
        ``{"code", "message", "details"}``: a :class:`~kg.errors.KGError`'s own code, message
        and details; ``internal_error`` with the exception's class for anything else.
    """
    if isinstance(exc, KGError):
        return {"code": exc.code, "message": exc.message, "details": _json_safe(exc.details)}
    return {"code": "internal_error",
            "message": f"the function failed with an unexpected {type(exc).__name__}; see the server log",
            "details": {"exception": type(exc).__name__}}


def _json_safe(value: Any) -> Any:
    """``value`` as plain JSON (non-JSON leaves become their text; NaN raises ValueError)."""
    return json.loads(json.dumps(value, default=str, allow_nan=False))


class JobRunner(PollingWorker):
    """Runs function jobs: inline (:meth:`run_pending`) or in a background thread.

    Parameters
    ----------
    services : kg.services.Services
    poll_s : float
        How long the background thread sleeps when no job is claimable, in seconds (a submit
        wakes it at once).
    lease_s : float
        How long a claim holds a job without renewal, in seconds; renewed every
        ``heartbeat_s`` (at most a third of it) while the job runs.
    max_attempts : int
        Claims of one job before a lost claim (expired lease, runner gone) fails it.
    heartbeat_s : float
        How often a running job renews its lease, in seconds.
    """

    def __init__(self, services: Resources, *, poll_s: float = 1.0, lease_s: float = LEASE_S,
                 max_attempts: int = MAX_ATTEMPTS, heartbeat_s: float = HEARTBEAT_S) -> None:
        super().__init__(poll_s=poll_s, thread_name="kg-jobs")
        self.services = services
        self.lease = timedelta(seconds=lease_s)
        self.max_attempts = max_attempts
        self.queue = DurableQueue(services.db, FUNCTION_QUEUE, lease_s=lease_s, max_attempts=max_attempts,
                                  heartbeat_s=heartbeat_s)

    def pass_once(self) -> int:
        """One background pass: run claimable jobs until none is left (or stop)."""
        return self.run_pending(stop=self._stop)

    def close(self) -> None:
        """Stop the background thread and unregister from the queue (a held job goes back)."""
        self.stop()
        self.queue.close()

    def queue_own(self, uow: UnitOfWork, repo: str, name: str, raw: dict[str, Any], branch: str) -> None:
        """Queue function ``name`` from inside ``uow`` on kg's own account (not charged to the
        caller's rate limit): lineage's re-extraction of a changed document (kg.ops.lineage).

        The job row is written in ``uow``'s transaction and the runner woken once it commits.
        With inline jobs (tests, scripts) the job is stored and run once ``uow`` has committed:
        an inline job claims it in a session of its own, which cannot open while ``uow`` writes.

        Parameters
        ----------
        uow : kg.context.UnitOfWork
            The write transaction the job belongs to.
        repo : str
            Repository name.
        name : str
            Function name (one of :data:`kg.rag.functions.FUNCTIONS`).
        raw : dict
            The function's input, stored as JSON.
        branch : str
            The branch the function reads and writes.

        Raises
        ------
        kg.errors.NotFound
            Unknown function, repository or branch (inline: raised once ``uow`` has committed).
        """
        if self.services.settings.index_inline:
            services, actor = uow.services, uow.actor

            def queue_now() -> None:
                run(services, actor, submit, repo, name, raw, branch, charge=False)

            uow.after_commit(queue_now)
            return
        submit(uow, repo, name, raw, branch, charge=False)

    # -- running ------------------------------------------------------------------------

    def run_pending(self, *, stop: threading.Event | None = None) -> int:
        """Run claimable jobs (queued, or taken back from a lost claim) until none is left.

        Parameters
        ----------
        stop : threading.Event, optional
            Checked between jobs: once set, no further job is claimed.

        Returns
        -------
        int
            Jobs that reached ``succeeded`` or ``failed`` in this call (attempts exhausted
            included).
        """
        finished = 0
        while stop is None or not stop.is_set():
            claim, abandoned = self._claim()
            finished += abandoned
            if claim is None:
                return finished
            self.execute(claim)
            finished += 1
        return finished

    def _claim(self) -> tuple[_Claim | None, int]:
        """Claim the next job (fairly across repositories); count jobs failed for used-up attempts."""
        with self.services.db.write() as session:
            claimed = self.queue.claim(session, 1)
            if not claimed.claims:
                return None, len(claimed.exhausted)
            (claim,) = claimed.claims
            job = session.get_one(FunctionJob, claim.id)  # claimed just now, in this transaction
            repo_name = session.execute(select(Repository.name).where(Repository.id == job.repo_id)).scalar_one()
            return (_Claim(job.id, repo_name, job.function, job.branch, job.input, claim.attempt,
                           _actor(session, self.services.settings, job.actor)), len(claimed.exhausted))

    def execute(self, claim: _Claim) -> None:
        """Run one claimed job and store its output or error (a lost lease stores nothing).

        Parameters
        ----------
        claim : _Claim
            A job claimed by this runner (:meth:`run_pending`, or stored claimed by
            :func:`submit`).
        """
        held = Claim(claim.job_id, claim.attempt)
        with self.queue.renewing([held]):
            try:
                answer = invoke(self.services, claim.actor, claim.repo, claim.function, claim.input,
                                branch=claim.branch, charged=True)
                output = _json_safe(answer.model_dump(mode="json", by_alias=True, exclude_unset=True))
                state, error = "succeeded", None
            except KGError as exc:
                output, state, error = None, "failed", error_shape(exc)
            except Exception as exc:
                log.exception("job %s: %s failed unexpectedly", claim.job_id, claim.function)
                output, state, error = None, "failed", error_shape(exc)
            with self.services.db.write() as session:
                stored = self.queue.finish(session, [held], {
                    "state": state, "output": output, "error": error, "finished_at": utcnow(),
                    "lease_until": None})
        if not stored:
            log.warning("job %s: attempt %d lost its lease; its result was not stored",
                        claim.job_id, claim.attempt)
