"""Asynchronous function invocation: the durable job queue ``function_jobs`` and its runner.

``POST /api/functions/{repo}/{name}/invoke`` with ``wait_for_completion: false`` stores a job
(:func:`submit`) and answers at once; a :class:`JobRunner` claims it, runs
:func:`kg.rag.functions.invoke` outside any transaction and stores the output or the error.

States::

    queued ──claim──> running ──> succeeded
      ^                  │  └───> failed      (the function raised; or attempts exhausted)
      └── lease expired ─┘

A job's state lives in SQL, so it survives a restart: the next process claims jobs still
``queued`` and jobs left ``running`` whose lease expired (their process stopped). The runner
renews the lease of the job it runs, so a long function is not taken over by another runner
while its process lives. A job is claimed at most :data:`MAX_ATTEMPTS` times; a job whose lease
expires after that is failed with ``attempts_exhausted`` instead of being run again (a function
that kills its process would otherwise do so forever). Finishing a job is fenced by its attempt
number: a runner that lost its lease cannot overwrite the result of the attempt that took over.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, or_, select, update

from kg.errors import KGError, NotFound
from kg.rag.functions import FUNCTIONS, invoke
from kg.store.models import FunctionJob, Repository, utcnow
from kg.store.repos import get_branch, get_repository
from kg.worker import PollingWorker

log = logging.getLogger("kg.jobs")

#: How many times a job is claimed before an expired lease fails it.
MAX_ATTEMPTS = 3
#: How long a claim holds a job without renewal, in seconds.
LEASE_S = 300.0


def submit(services: Any, repo: str, name: str, raw: Any, branch: str = "main") -> str:
    """Queue the invocation of function ``name`` on a branch; answer its job id.

    The function, the repository and the branch are checked before the job is stored; the
    input is checked by the function when the job runs (a bad input gives a ``failed`` job).
    With ``settings.index_inline`` the job is stored already claimed and run before returning
    (tests, scripts); it is still a job, read with :func:`get`.

    Parameters
    ----------
    services : kg.services.Services
    repo : str
        Repository name.
    name : str
        Function name (``search-documents``, ``ask``, ...).
    raw : dict
        The function's input, stored as JSON.
    branch : str
        The branch the function reads (and writes, for functions that write).

    Returns
    -------
    str
        The job id, 32 hexadecimal digits (uuid4).

    Raises
    ------
    kg.errors.NotFound
        Unknown function, repository or branch.
    """
    if name not in FUNCTIONS:
        raise NotFound(f"function {name!r} not found; available: {', '.join(sorted(FUNCTIONS))}",
                       details={"function": name})
    inline = bool(services.settings.index_inline)
    runner: JobRunner = services.jobs
    now = utcnow()
    job_id = uuid.uuid4().hex
    with services.db.write() as session:
        repository = get_repository(session, repo)
        get_branch(session, repository, branch)
        session.add(FunctionJob(
            id=job_id, repo_id=repository.id, function=name, branch=branch, input=raw,
            state="running" if inline else "queued", attempts=1 if inline else 0, created_at=now,
            started_at=now if inline else None, lease_until=now + runner.lease if inline else None,
        ))
    if inline:
        runner.execute(_Claim(job_id, repo, name, branch, raw, 1))
    else:
        runner.wake()
    return job_id


def get(services: Any, job_id: str) -> dict[str, Any]:
    """A job's state, and its output or error once it has finished.

    Parameters
    ----------
    services : kg.services.Services
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
        No job has this id (or its repository was deleted).
    """
    with services.db.read() as session:
        row = session.execute(
            select(FunctionJob, Repository.name).join(Repository, Repository.id == FunctionJob.repo_id)
            .where(FunctionJob.id == job_id)
        ).first()
    if row is None:
        raise NotFound(f"job {job_id!r} not found", details={"job_id": job_id})
    job, repo_name = row
    return {"job_id": job.id, "repo": repo_name, "function": job.function, "branch": job.branch,
            "state": job.state, "output": job.output, "error": job.error,
            "created_at": _iso(job.created_at), "started_at": _iso(job.started_at),
            "finished_at": _iso(job.finished_at), "attempts": job.attempts}


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
        How long a claim holds a job without renewal, in seconds; renewed every third of it
        while the job runs.
    max_attempts : int
        Claims of one job before an expired lease fails it.
    """

    def __init__(self, services: Any, *, poll_s: float = 1.0, lease_s: float = LEASE_S,
                 max_attempts: int = MAX_ATTEMPTS) -> None:
        super().__init__(poll_s=poll_s, thread_name="kg-jobs")
        self.services = services
        self.lease = timedelta(seconds=lease_s)
        self.max_attempts = max_attempts

    def pass_once(self) -> int:
        """One background pass: run claimable jobs until none is left (or stop)."""
        return self.run_pending(stop=self._stop)

    # -- running ------------------------------------------------------------------------

    def run_pending(self, *, stop: threading.Event | None = None) -> int:
        """Run claimable jobs (queued, or running with an expired lease) until none is left.

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
        """Claim the oldest claimable job; fail expired jobs that used up their attempts."""
        now = utcnow()
        abandoned = 0
        with self.services.db.write() as session:
            while True:
                stmt = (
                    select(FunctionJob)
                    .where(or_(FunctionJob.state == "queued",
                               and_(FunctionJob.state == "running", FunctionJob.lease_until < now)))
                    .order_by(FunctionJob.created_at, FunctionJob.id).limit(1)
                )
                if session.get_bind().dialect.name == "postgresql":
                    stmt = stmt.with_for_update(skip_locked=True)
                job = session.scalars(stmt).first()
                if job is None:
                    return None, abandoned
                if job.state == "running" and job.attempts >= self.max_attempts:
                    log.warning("job %s: lease expired after %d attempts; failed", job.id, job.attempts)
                    job.state, job.finished_at, job.lease_until = "failed", now, None
                    job.error = {
                        "code": "attempts_exhausted",
                        "message": (f"the job was started {job.attempts} times and never finished: "
                                    "its process stopped each time before storing a result"),
                        "details": {"attempts": job.attempts, "max_attempts": self.max_attempts},
                    }
                    session.flush()
                    abandoned += 1
                    continue
                repo_name = session.scalar(select(Repository.name).where(Repository.id == job.repo_id))
                job.state, job.attempts = "running", job.attempts + 1
                job.started_at, job.lease_until = now, now + self.lease
                return _Claim(job.id, repo_name, job.function, job.branch, job.input, job.attempts), abandoned

    def execute(self, claim: _Claim) -> None:
        """Run one claimed job and store its output or error (a lost lease stores nothing)."""
        done = threading.Event()
        heartbeat = threading.Thread(target=self._renew, args=(claim, done), name="kg-jobs-lease", daemon=True)
        heartbeat.start()
        try:
            output = _json_safe(invoke(self.services, claim.repo, claim.function, claim.input,
                                       branch=claim.branch))
            state, error = "succeeded", None
        except KGError as exc:
            output, state, error = None, "failed", error_shape(exc)
        except Exception as exc:
            log.exception("job %s: %s failed unexpectedly", claim.job_id, claim.function)
            output, state, error = None, "failed", error_shape(exc)
        finally:
            done.set()
            heartbeat.join()
        with self.services.db.write() as session:
            stored = session.execute(
                update(FunctionJob)
                .where(FunctionJob.id == claim.job_id, FunctionJob.state == "running",
                       FunctionJob.attempts == claim.attempt)
                .values(state=state, output=output, error=error, finished_at=utcnow(), lease_until=None)
            ).rowcount
        if not stored:
            log.warning("job %s: attempt %d lost its lease; its result was not stored",
                        claim.job_id, claim.attempt)

    def _renew(self, claim: _Claim, done: threading.Event) -> None:
        """Extend the lease of a running job every third of the lease until ``done``."""
        interval_s = self.lease.total_seconds() / 3
        while not done.wait(interval_s):
            try:
                with self.services.db.write() as session:
                    session.execute(
                        update(FunctionJob)
                        .where(FunctionJob.id == claim.job_id, FunctionJob.state == "running",
                               FunctionJob.attempts == claim.attempt)
                        .values(lease_until=utcnow() + self.lease)
                    )
            except Exception:  # the next renewal may succeed; the lease is long
                log.exception("job %s: renewing the lease failed", claim.job_id)
