"""Asynchronous function invocation: ``wait_for_completion: false`` gives a job whose state is
in SQL (it survives a restart), read at ``GET /api/jobs/{job_id}``."""

from __future__ import annotations

import re
import threading
from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from pydantic import BaseModel, ConfigDict
from sqlalchemy import func, select, update

from api.app import create_app
from kg.errors import InvalidInput
from kg.index.embedded import EmbeddedVectorIndex
from kg.providers.registry import make_embedder
from kg.rag import function_jobs, functions
from kg.services import Services
from kg.store.db import Database
from kg.store.models import FunctionJob, utcnow
from tests.api.test_nodes import assert_error


class Output(BaseModel):
    """A stand-in function's output: a model, as every function answers (its keys as given)."""

    model_config = ConfigDict(extra="allow")

QUERY = {"query": "quarterly dividend", "k": 2}


@pytest.fixture
def docs(client, repo):
    for path, text in {"/dividends": "The board approved a quarterly dividend of 40 cents per share.",
                       "/notice": "Termination requires thirty days written notice to the landlord."}.items():
        r = client.put(f"/api/repos/acme/workspaces/knowledge/nodes{path}",
                       json={"node_type": "kb:Doc", "properties": {"content": text}})
        assert r.status_code == 201, r.text
    return repo


@pytest.fixture
def queued(services, docs, monkeypatch):
    """Jobs stay queued until a test runs them: no background runner, no inline run."""
    services.jobs.stop()
    monkeypatch.setattr(services.settings, "index_inline", False)
    return services


def submit(client, name="search-documents", payload=QUERY, repo="acme", **body):
    return client.post(f"/api/functions/{repo}/{name}/invoke",
                       json={"input": payload, "wait_for_completion": False, **body})


def job_count(services) -> int:
    with services.db.read() as s:
        return s.scalar(select(func.count()).select_from(FunctionJob))


def set_job(services, job_id, **values) -> None:
    with services.db.write() as s:
        s.execute(update(FunctionJob).where(FunctionJob.id == job_id).values(**values))


def test_async_invoke_answers_202_with_a_job_id_and_location(client, docs):
    r = submit(client)
    assert r.status_code == 202, r.text
    body = r.json()
    assert set(body) == {"job_id", "state"}
    assert re.fullmatch(r"[0-9a-f]{32}", body["job_id"])
    assert r.headers["location"] == f"/api/jobs/{body['job_id']}"
    # index_inline (the test settings) runs the job before answering.
    assert body["state"] == "succeeded"


def test_job_output_is_the_sync_output(client, docs):
    sync = client.post("/api/functions/acme/search-documents/invoke", json={"input": QUERY}).json()
    job_id = submit(client).json()["job_id"]
    r = client.get(f"/api/jobs/{job_id}")
    assert r.status_code == 200, r.text
    job = r.json()
    assert set(job) == {"job_id", "repo", "function", "branch", "state", "output", "error",
                        "created_at", "started_at", "finished_at", "attempts"}
    assert (job["job_id"], job["repo"], job["function"], job["branch"]) == (job_id, "acme", "search-documents", "main")
    assert job["state"] == "succeeded" and job["error"] is None and job["attempts"] == 1
    assert job["output"] == sync and job["output"]["passages"][0]["path"] == "/dividends"
    assert job["created_at"] <= job["started_at"] <= job["finished_at"]


def test_queued_job_is_run_by_the_runner(client, queued):
    r = submit(client)
    assert r.status_code == 202 and r.json()["state"] == "queued"
    job_id = r.json()["job_id"]
    job = client.get(f"/api/jobs/{job_id}").json()
    assert (job["state"], job["output"], job["started_at"], job["attempts"]) == ("queued", None, None, 0)
    assert queued.jobs.run_pending() == 1
    job = client.get(f"/api/jobs/{job_id}").json()
    assert job["state"] == "succeeded" and job["output"]["passages"][0]["path"] == "/dividends"
    assert queued.jobs.run_pending() == 0


def test_job_reads_its_branch(client, queued):
    assert client.post("/api/repos/acme/branches", json={"name": "agent/s1"}).status_code == 201
    job_id = submit(client, branch="agent/s1").json()["job_id"]
    queued.jobs.run_pending()
    job = client.get(f"/api/jobs/{job_id}").json()
    assert job["branch"] == "agent/s1" and job["state"] == "succeeded"


def test_background_runner_is_woken_by_submit(client, docs, services, monkeypatch):
    ran = threading.Event()
    monkeypatch.setitem(functions.FUNCTIONS, "signal", lambda *args: ran.set() or Output(ok=True))
    monkeypatch.setattr(services.settings, "index_inline", False)
    services.jobs.stop()
    services.jobs.poll_s = 600.0  # only a wake-up can make it run within the wait below
    services.jobs.start()
    job_id = submit(client, name="signal").json()["job_id"]
    assert ran.wait(30)
    services.jobs.stop()  # the runner finishes the job in flight before it stops
    job = client.get(f"/api/jobs/{job_id}").json()
    assert job["state"] == "succeeded" and job["output"] == {"ok": True}


def test_unknown_function_is_404_at_submit_and_queues_nothing(client, docs, services):
    assert_error(submit(client, name="no-such-function"), 404, "not_found")
    assert job_count(services) == 0


def test_unknown_repo_or_branch_is_404_at_submit(client, docs, services):
    assert_error(submit(client, repo="nope"), 404, "not_found")
    assert_error(submit(client, branch="no/such/branch"), 404, "not_found")
    assert job_count(services) == 0


def test_unknown_job_is_404(client, docs):
    assert_error(client.get("/api/jobs/0123456789abcdef0123456789abcdef"), 404, "not_found")
    assert_error(client.get("/api/jobs/not-a-job-id"), 404, "not_found")


def test_bad_input_fails_the_job_with_its_error(client, docs):
    r = submit(client, payload={"k": 2})
    assert r.status_code == 202
    job = client.get(f"/api/jobs/{r.json()['job_id']}").json()
    assert job["state"] == "failed" and job["output"] is None and job["finished_at"]
    assert job["error"]["code"] == "invalid_input"
    assert "query" in job["error"]["message"] and job["error"]["details"] == {"field": "query"}


def test_unexpected_exception_fails_the_job_as_internal_error(client, docs, monkeypatch):
    def boom(services, caller, repo, branch, raw):
        raise RuntimeError("disk on fire")

    monkeypatch.setitem(functions.FUNCTIONS, "boom", boom)
    job = client.get(f"/api/jobs/{submit(client, name='boom').json()['job_id']}").json()
    assert job["state"] == "failed"
    assert job["error"]["code"] == "internal_error" and "RuntimeError" in job["error"]["message"]


def test_job_survives_a_restart(client, queued, settings):
    job_id = submit(client).json()["job_id"]
    # The process stops here; a new one (new Services, new app) on the same database runs it.
    db = Database(settings.resolved_database_url())
    fresh = Services(settings=settings.model_copy(update={"index_inline": False}), db=db,
                     index=EmbeddedVectorIndex(settings.data_dir),
                     embedder_factory=lambda name: make_embedder(name, allow_fake=True))
    try:
        other = TestClient(create_app(services=fresh), raise_server_exceptions=False)
        assert other.get(f"/api/jobs/{job_id}").json()["state"] == "queued"
        assert fresh.jobs.run_pending() == 1
        job = other.get(f"/api/jobs/{job_id}").json()
        assert job["state"] == "succeeded" and job["output"]["passages"][0]["path"] == "/dividends"
    finally:
        fresh.close()


def test_running_job_with_expired_lease_is_run_again(client, queued):
    job_id = submit(client).json()["job_id"]
    set_job(queued, job_id, state="running", attempts=1, started_at=utcnow(),
            lease_until=utcnow() - timedelta(seconds=1))
    assert queued.jobs.run_pending() == 1
    job = client.get(f"/api/jobs/{job_id}").json()
    assert job["state"] == "succeeded" and job["attempts"] == 2


def test_running_job_with_live_lease_is_left_alone(client, queued):
    job_id = submit(client).json()["job_id"]
    set_job(queued, job_id, state="running", attempts=1, started_at=utcnow(),
            lease_until=utcnow() + timedelta(minutes=5))
    assert queued.jobs.run_pending() == 0
    assert client.get(f"/api/jobs/{job_id}").json()["state"] == "running"


def test_job_whose_attempts_are_exhausted_fails_without_running(client, queued, monkeypatch):
    calls = []
    monkeypatch.setitem(functions.FUNCTIONS, "count", lambda *args: calls.append(args) or Output())
    job_id = submit(client, name="count").json()["job_id"]
    # Its runner died while it ran alone, the last time its cap allows.
    set_job(queued, job_id, state="running", attempts=function_jobs.MAX_ATTEMPTS + 1, started_at=utcnow(),
            lease_until=utcnow() - timedelta(seconds=1), alone=True, failures=function_jobs.MAX_ATTEMPTS - 1)
    assert queued.jobs.run_pending() == 1
    job = client.get(f"/api/jobs/{job_id}").json()
    assert job["state"] == "failed" and calls == [] and job["finished_at"]
    assert job["error"]["code"] == "attempts_exhausted"
    assert f"died {function_jobs.MAX_ATTEMPTS} times while running it alone" in job["error"]["message"]
    assert job["error"]["details"] == {"deaths": function_jobs.MAX_ATTEMPTS,
                                       "max_attempts": function_jobs.MAX_ATTEMPTS}


def test_a_job_whose_runner_died_beside_nothing_counted_runs_again(client, queued, monkeypatch):
    """A runner's first death is not the job's failure, whatever its attempts: it runs again."""
    calls = []
    monkeypatch.setitem(functions.FUNCTIONS, "count", lambda *args: calls.append(args) or Output())
    job_id = submit(client, name="count").json()["job_id"]
    set_job(queued, job_id, state="running", attempts=function_jobs.MAX_ATTEMPTS, started_at=utcnow(),
            lease_until=utcnow() - timedelta(seconds=1))
    assert queued.jobs.run_pending() == 1
    job = client.get(f"/api/jobs/{job_id}").json()
    assert job["state"] == "succeeded" and len(calls) == 1


def test_attempt_that_lost_its_lease_does_not_store_its_result(client, queued, monkeypatch):
    def slow_then_overtaken(services, caller, repo, branch, raw):
        # Another runner takes the job over while this attempt still runs.
        set_job(services, job_id, attempts=FunctionJob.attempts + 1)
        raise InvalidInput("stale attempt")

    monkeypatch.setitem(functions.FUNCTIONS, "overtaken", slow_then_overtaken)
    job_id = submit(client, name="overtaken").json()["job_id"]
    assert queued.jobs.run_pending() == 1
    job = client.get(f"/api/jobs/{job_id}").json()
    assert job["state"] == "running" and job["error"] is None and job["attempts"] == 2


def test_deleting_the_repository_deletes_its_jobs(client, docs):
    job_id = submit(client).json()["job_id"]
    assert client.delete("/api/repos/acme").status_code == 204
    assert_error(client.get(f"/api/jobs/{job_id}"), 404, "not_found")


@pytest.mark.parametrize("inline", [True, False], ids=["inline", "queued"])
def test_a_job_runs_as_the_caller_that_submitted_it(services, docs, monkeypatch, inline):
    """The job is stored with its submitter and the runner invokes the function as them."""
    from kg.context import Actor, run

    def whoami(services, caller, repo, branch, raw):
        return Output(kind=caller.kind, name=caller.name)

    monkeypatch.setitem(functions.FUNCTIONS, "whoami", whoami)
    if not inline:
        services.jobs.stop()
        monkeypatch.setattr(services.settings, "index_inline", False)
    alice = Actor("operator", "alice")
    job_id = run(services, alice, function_jobs.submit, "acme", "whoami", {})
    if not inline:
        assert function_jobs.get(services, alice, job_id)["state"] == "queued"
        assert services.jobs.run_pending() == 1
    job = function_jobs.get(services, alice, job_id)
    assert job["state"] == "succeeded" and job["output"] == {"kind": "operator", "name": "alice"}
    with services.db.read() as s:
        assert s.get(FunctionJob, job_id).actor == {"kind": "operator", "name": "alice"}


def test_a_job_stored_without_its_submitter_runs_as_kg(services, queued, monkeypatch):
    """Jobs queued before migration 0010 have no actor: they run as kg's own work."""
    from kg.context import OPERATOR, run

    monkeypatch.setitem(functions.FUNCTIONS, "whoami",
                        lambda services, caller, repo, branch, raw: Output(kind=caller.kind, name=caller.name))
    job_id = run(services, OPERATOR, function_jobs.submit, "acme", "whoami", {})
    set_job(services, job_id, actor=None)
    assert queued.jobs.run_pending() == 1
    assert function_jobs.get(services, OPERATOR, job_id)["output"] == {"kind": "system", "name": None}
