"""The durable queue of index jobs and function jobs (kg.indexing.queue), on both databases: fair claiming
across repositories and workspaces, priority, the attempt cap, lease renewal, fenced completion,
taking back the claims of workers that are gone, and concurrent claimers (SKIP LOCKED)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, insert, select, text, update

from kg import context
from kg.index.embedded import EmbeddedVectorIndex
from kg.indexing.index_jobs import INDEX_QUEUE, REEMBED_PRIORITY, WRITE_PRIORITY
from kg.indexing.queue import DurableQueue
from kg.providers.fake import FakeEmbedder
from kg.rag.function_jobs import FUNCTION_QUEUE
from kg.services import Services
from kg.settings import Settings
from kg.store.db import Database
from kg.store.models import FunctionJob, IndexJob, QueueWorker, utcnow
from kg.store.repos import create_repository, create_workspace
from tests.indexing.test_indexer import found, jobs, make_services

ROOT = Path(__file__).resolve().parents[2]
BACKLOG = 10_000


@pytest.fixture
def db(db_url):
    database = Database(db_url)
    database.upgrade()
    yield database
    database.dispose()


def open_services(db_url, tmp_path) -> Services:
    """Services of a process that starts on an existing database (as make_services, no repository)."""
    settings = Settings(database_url=db_url, data_dir=tmp_path / "data", embedding_model="fake:hash-16",
                        index_inline=False)
    return Services(settings=settings, db=Database(db_url), index=EmbeddedVectorIndex(None),
                    embedder_factory=lambda name: FakeEmbedder(dim=16, name=name))


def make_lanes(db, layout: dict[str, list[str]]) -> dict[tuple[str, str], tuple[int, int]]:
    """Repositories and their workspaces; ``{(repo, workspace): (repo_id, workspace_id)}``."""
    ids = {}
    with db.write() as s:
        for repo_name, workspaces in layout.items():
            repo = create_repository(s, name=repo_name)
            for ws_name in workspaces:
                ws = create_workspace(s, repo, name=ws_name)
                ids[(repo_name, ws_name)] = (repo.id, ws.id)
    return ids


def enqueue(db, lane: tuple[int, int], n: int, *, priority: int = WRITE_PRIORITY, prefix: str = "k") -> list[int]:
    """``n`` pending index jobs in one lane (one bulk insert); their ids in order."""
    repo_id, workspace_id = lane
    now = utcnow()
    with db.write() as s:
        s.execute(insert(IndexJob), [
            {"repo_id": repo_id, "workspace_id": workspace_id, "content_key": f"{prefix}{workspace_id}-{i}",
             "node_version_id": i, "status": "pending", "attempts": 0, "priority": priority,
             "created_at": now, "updated_at": now} for i in range(n)])
        return list(s.scalars(select(IndexJob.id).where(
            IndexJob.workspace_id == workspace_id, IndexJob.content_key.like(f"{prefix}{workspace_id}-%"))
            .order_by(IndexJob.id)))


def claim(queue, n, **kw):
    with queue.db.write() as s:
        return queue.claim(s, n, **kw)


def lane_of(db, job_ids) -> list[int]:
    with db.read() as s:
        by_id = dict(s.execute(select(IndexJob.id, IndexJob.workspace_id).where(IndexJob.id.in_(list(job_ids)))).all())
    return [by_id[i] for i in job_ids]


def job_row(db, job_id, model=IndexJob):
    with db.read() as s:
        return s.get(model, job_id)


def exited_pid() -> int:
    """The pid of a process that ran and is gone (reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def bury(db, queue, **values) -> None:
    """Make ``queue``'s worker look like a process that is gone (by default: its pid exited)."""
    with db.write() as s:
        s.execute(update(QueueWorker).where(QueueWorker.id == queue.worker_id)
                  .values(**(values or {"pid": exited_pid()})))


# -- fairness -------------------------------------------------------------------------------


def test_small_write_in_another_repository_is_claimed_before_a_10000_text_backlog(db):
    lanes = make_lanes(db, {"a": ["w"], "b": ["w"]})
    backlog = enqueue(db, lanes[("a", "w")], BACKLOG)
    (small,) = enqueue(db, lanes[("b", "w")], 1)  # written after the whole backlog
    queue = DurableQueue(db, INDEX_QUEUE)
    first = claim(queue, 32).claims
    ids = [c.id for c in first]
    assert small in ids  # old order (priority, id): claimed after all 10,000
    # The rest of the batch is the backlog's oldest, in order: fairness costs no throughput.
    assert [i for i in ids if i != small] == backlog[:31]
    assert all(c.attempt == 1 for c in first)
    second = [c.id for c in claim(queue, 32).claims]
    assert second == backlog[31:63]


def test_a_batch_is_shared_round_robin_across_repositories_then_their_workspaces(db):
    lanes = make_lanes(db, {"a": ["one", "two"], "b": ["only"]})
    one = enqueue(db, lanes[("a", "one")], 50)
    two = enqueue(db, lanes[("a", "two")], 50)
    only = enqueue(db, lanes[("b", "only")], 50)
    queue = DurableQueue(db, INDEX_QUEUE)
    ids = [c.id for c in claim(queue, 8).claims]
    # Repository b gets half of the batch; repository a's half is split over its workspaces.
    assert sorted(ids) == sorted(only[:4] + one[:2] + two[:2])
    # The next batches go on where each lane stopped (least recently served first).
    ids = [c.id for c in claim(queue, 8).claims]
    assert sorted(ids) == sorted(only[4:8] + one[2:4] + two[2:4])


def test_a_lane_with_fewer_jobs_than_its_share_leaves_the_rest_to_the_others(db):
    lanes = make_lanes(db, {"a": ["w"], "b": ["w"], "c": ["w"]})
    a = enqueue(db, lanes[("a", "w")], 100)
    b = enqueue(db, lanes[("b", "w")], 2)
    c = enqueue(db, lanes[("c", "w")], 100)
    ids = [c_.id for c_ in claim(DurableQueue(db, INDEX_QUEUE), 30).claims]
    assert len(ids) == 30 and set(b) <= set(ids)
    assert sorted(lane_of(db, ids)).count(lanes[("a", "w")][1]) == 14
    assert sorted(lane_of(db, ids)).count(lanes[("c", "w")][1]) == 14
    assert [i for i in ids if i in set(a)] == a[:14] and [i for i in ids if i in set(c)] == c[:14]


def test_priority_comes_before_fairness_across_repositories(db):
    """A write's text (priority 0) in any repository is claimed before every re-embed backlog
    (priority 1), as before; fairness shares the jobs of one priority."""
    lanes = make_lanes(db, {"a": ["w"], "b": ["w"]})
    reembed = enqueue(db, lanes[("a", "w")], 40, priority=REEMBED_PRIORITY)
    writes = enqueue(db, lanes[("b", "w")], 10, priority=WRITE_PRIORITY, prefix="write")
    ids = [c.id for c in claim(DurableQueue(db, INDEX_QUEUE), 32).claims]
    assert ids[:10] == writes and ids[10:] == reembed[:22]


def test_a_filtered_claim_takes_only_its_jobs_in_priority_order(db):
    lanes = make_lanes(db, {"a": ["w"], "b": ["w"]})
    enqueue(db, lanes[("a", "w")], 20)
    b = enqueue(db, lanes[("b", "w")], 5, priority=REEMBED_PRIORITY) + enqueue(db, lanes[("b", "w")], 5, prefix="w")
    got = claim(DurableQueue(db, INDEX_QUEUE), 32, where=[IndexJob.repo_id == lanes[("b", "w")][0]]).claims
    assert [c.id for c in got] == b[5:] + b[:5]


def test_a_small_write_is_searchable_after_one_pass_beside_another_repositorys_backlog(db_url, tmp_path):
    from kg.ops.nodes import batch, put_node

    services = make_services(db_url, tmp_path, inline=False)
    with services.db.write() as s:
        other = create_repository(s, name="other")
        create_workspace(s, other, name="w", config={"embedding": {"model": "fake:hash-16"}})
    backlog = services.indexer.batch_jobs * 4
    context.run(services, context.OPERATOR, batch, "r", "main", upserts=[
        {"workspace": "w", "path": f"/n{i}", "properties": {"content": f"backlog text {i}"}} for i in range(backlog)])
    context.run(services, context.OPERATOR, put_node, "other", "main", "w", "/small", node_type="t",
                properties={"content": "narwhal sighting"})
    run = services.indexer.run_pending()
    assert run.done == services.indexer.batch_jobs
    with services.db.read() as s:
        from kg.rag.search import SearchRequest, search
        from kg.store.repos import branch_view

        rows, _ = search(s, services, branch_view(s, "other", "main"), SearchRequest(query="narwhal", mode="fulltext"))
    assert [r.path for r in rows] == ["/small"]
    assert jobs(services) == backlog + 1 - services.indexer.batch_jobs
    services.close()


def test_function_jobs_are_claimed_fairly_across_repositories(db):
    lanes = make_lanes(db, {"a": ["w"], "b": ["w"]})
    now = utcnow()
    with db.write() as s:
        for i in range(20):
            s.add(FunctionJob(id=f"a{i:031d}", repo_id=lanes[("a", "w")][0], function="ask", branch="main",
                              input={}, state="queued", attempts=0, created_at=now + timedelta(milliseconds=i)))
        s.add(FunctionJob(id=f"b{0:031d}", repo_id=lanes[("b", "w")][0], function="ask", branch="main",
                          input={}, state="queued", attempts=0, created_at=now + timedelta(seconds=1)))
    queue = DurableQueue(db, FUNCTION_QUEUE)
    order = [claim(queue, 1).claims[0].id for _ in range(4)]
    # One job at a time, alternating: b's only job is second, not 21st; a's go in submission order.
    assert order == [f"a{0:031d}", f"b{0:031d}", f"a{1:031d}", f"a{2:031d}"]
    job = job_row(db, order[0], FunctionJob)
    assert (job.state, job.attempts, job.claimed_by) == ("running", 1, queue.worker_id)
    assert job.lease_until > utcnow() + timedelta(minutes=4)


# -- attempts -------------------------------------------------------------------------------


def due(db, model=IndexJob) -> None:
    """End every job's retry backoff (as if its wait had passed)."""
    with db.write() as s:
        s.execute(update(model).values(not_before=None))


def test_a_text_whose_indexer_dies_each_time_it_runs_alone_is_failed_after_the_attempt_cap(db_url, tmp_path):
    """The first death is unattributed (the job is retried alone, at once); each later death
    while it runs alone counts, and the MAX_ATTEMPTS-th fails it with a reason that says so."""
    from kg.indexing.index_jobs import MAX_ATTEMPTS, index_status
    from kg.ops.nodes import put_node
    from kg.store.repos import get_repository

    services = make_services(db_url, tmp_path, inline=False)
    context.run(services, context.OPERATOR, put_node, "r", "main", "w", "/poison", node_type="t",
                properties={"content": "poison pill text"})
    for death in range(MAX_ATTEMPTS + 1):
        doomed = DurableQueue(services.db, INDEX_QUEUE)  # an indexer that claims it, then is killed
        got = claim(doomed, 32)
        assert got.exhausted == [] and [c.attempt for c in got.claims] == [death + 1]
        bury(services.db, doomed)
        if death == MAX_ATTEMPTS:
            break
        with services.db.write() as s:
            assert DurableQueue(services.db, INDEX_QUEUE).sweep(s) == []
            row = s.scalar(select(IndexJob))
        assert (row.status, row.failures, row.alone, row.claimed_by) == ("pending", death, True, None)
        assert "retried alone" in row.error
        if death == 0:  # unattributed: taken back at once
            assert row.not_before <= utcnow()
        else:  # it ran alone: counted, and retried after a growing backoff (2 s, 6 s, ...)
            assert row.not_before > utcnow() + timedelta(seconds=2 * (2 ** death - 1) - 1)
        due(services.db)
    # The next claim fails it with its reason.
    run = services.indexer.run_pending()
    assert (run.done, run.failed) == (0, 1)
    assert jobs(services, "failed") == 1 and jobs(services, "running") == 0
    with services.db.read() as s:
        (failure,) = index_status(s, get_repository(s, "r"))["failures"]
    assert failure["path"] == "/poison" and failure["attempts"] == MAX_ATTEMPTS + 1
    assert failure["error"].startswith(f"the indexer process died {MAX_ATTEMPTS} times")
    assert "--retry-failed" in failure["error"]
    assert services.indexer.run_pending().done == 0  # not claimed again
    # Writing the text again queues it afresh, with all its attempts.
    context.run(services, context.OPERATOR, put_node, "r", "main", "w", "/poison", node_type="t",
                properties={"content": "poison pill text"})
    with services.db.read() as s:
        row = s.scalar(select(IndexJob))
        assert (row.status, row.attempts, row.failures, row.alone, row.not_before) == ("pending", 0, 0, False, None)
    assert services.indexer.drain().done == 1 and found(services, "poison") == ["/poison"]
    services.close()


def test_deaths_beside_other_jobs_never_count_and_each_job_is_then_run_alone(db):
    """A worker killed while it held four jobs: none of them is to blame yet. Each is retried
    at once, by itself; a worker holding such a job claims nothing beside it."""
    lanes = make_lanes(db, {"a": ["w"]})
    ids = enqueue(db, lanes[("a", "w")], 4)
    for _ in range(5):  # five deaths, each with the whole batch: no failure counted
        with db.write() as s:
            s.execute(update(IndexJob).values(alone=False))  # claimed together again
        dead = DurableQueue(db, INDEX_QUEUE)
        assert len(claim(dead, 4).claims) == 4
        bury(db, dead)
        with db.write() as s:
            assert DurableQueue(db, INDEX_QUEUE).sweep(s) == []
    with db.read() as s:
        rows = s.scalars(select(IndexJob).order_by(IndexJob.id)).all()
    assert {(r.status, r.failures, r.alone) for r in rows} == {("pending", 0, True)}
    assert all(r.not_before <= utcnow() for r in rows)
    worker = DurableQueue(db, INDEX_QUEUE)
    for job_id in ids:
        (one,) = claim(worker, 4).claims  # by itself
        assert one.id == job_id
        assert claim(worker, 4).claims == []  # another lone job waits for an idle worker
        with db.write() as s:
            assert worker.finish(s, [one]) == [one]
    assert claim(worker, 4).claims == []


def test_a_worker_holding_jobs_does_not_take_a_job_that_must_run_alone(db):
    lanes = make_lanes(db, {"a": ["w"]})
    first, second = enqueue(db, lanes[("a", "w")], 2)
    with db.write() as s:
        s.execute(update(IndexJob).where(IndexJob.id == second).values(alone=True))
    busy = DurableQueue(db, INDEX_QUEUE)
    idle = DurableQueue(db, INDEX_QUEUE)
    # An idle worker takes the job that must run alone first, and only it.
    assert [c.id for c in claim(idle, 5).claims] == [second]
    assert [c.id for c in claim(busy, 5).claims] == [first]
    with db.write() as s:  # it goes back to the queue
        s.execute(update(IndexJob).where(IndexJob.id == second).values(status="pending", claimed_by=None))
    assert claim(busy, 5).claims == []  # it holds a job: the lone one waits for an idle worker
    assert [c.id for c in claim(DurableQueue(db, INDEX_QUEUE), 5).claims] == [second]


def test_a_death_counts_against_a_lone_job_only_when_it_was_all_its_worker_held(db):
    lanes = make_lanes(db, {"a": ["w"]})
    suspect, short = enqueue(db, lanes[("a", "w")], 2)
    with db.write() as s:
        s.execute(update(IndexJob).where(IndexJob.id == suspect).values(alone=True))
    # Killed while it held the lone job and a short one claimed beside it: not counted.
    worker = DurableQueue(db, INDEX_QUEUE)
    assert [c.id for c in claim(worker, 5).claims] == [suspect]
    assert [c.id for c in claim(worker, 5).claims] == [short]  # beside it: a normal job
    bury(db, worker)
    with db.write() as s:
        assert DurableQueue(db, INDEX_QUEUE).sweep(s) == []
    assert (job_row(db, suspect).failures, job_row(db, short).failures) == (0, 0)
    assert job_row(db, short).alone  # the short one is now a suspect too
    # Killed while the lone job was all it held: counted, with a backoff.
    with db.write() as s:
        s.execute(update(IndexJob).where(IndexJob.id == short).values(status="done"))
    worker = DurableQueue(db, INDEX_QUEUE)
    assert [c.id for c in claim(worker, 5).claims] == [suspect]
    bury(db, worker)
    with db.write() as s:
        assert DurableQueue(db, INDEX_QUEUE).sweep(s) == []
    row = job_row(db, suspect)
    assert (row.status, row.failures, row.alone) == ("pending", 1, True) and row.not_before > utcnow()


def test_a_retry_waits_for_its_backoff(db):
    lanes = make_lanes(db, {"a": ["w"]})
    (job_id,) = enqueue(db, lanes[("a", "w")], 1)
    with db.write() as s:
        s.execute(update(IndexJob).values(alone=True, not_before=utcnow() + timedelta(minutes=1)))
    worker = DurableQueue(db, INDEX_QUEUE)
    assert claim(worker, 5).claims == []
    due(db)
    assert [c.id for c in claim(worker, 5).claims] == [job_id]


def test_a_clean_stop_counts_nothing(db):
    """Deploys stop the worker cleanly: more of them than the attempt cap fail nothing."""
    lanes = make_lanes(db, {"a": ["w"]})
    (job_id,) = enqueue(db, lanes[("a", "w")], 1)
    for _ in range(6):
        queue = DurableQueue(db, INDEX_QUEUE, max_attempts=3)
        assert len(claim(queue, 1).claims) == 1
        queue.close()
    row = job_row(db, job_id)
    assert (row.status, row.failures, row.alone, row.not_before) == ("pending", 0, False, None)


def test_an_expired_lease_is_a_death_and_only_those_while_alone_fail_the_job(db):
    lanes = make_lanes(db, {"a": ["w"]})
    (job_id,) = enqueue(db, lanes[("a", "w")], 1)
    queue = DurableQueue(db, INDEX_QUEUE, max_attempts=2)
    for attempt in (1, 2, 3):  # the first expiry is not counted; the two while alone are
        assert [c.attempt for c in claim(queue, 5).claims] == [attempt]
        with db.write() as s:  # the batch hung past its lease without renewing it
            s.execute(update(IndexJob).values(updated_at=utcnow() - timedelta(minutes=10)))
        if attempt < 3:
            with db.write() as s:
                assert queue.sweep(s) == []
            due(db)
    got = claim(queue, 5)
    assert got.claims == [] and got.exhausted == [job_id]
    row = job_row(db, job_id)
    assert (row.status, row.attempts, row.failures, row.claimed_by) == ("failed", 3, 2, None)


def test_a_postponed_job_gives_its_attempt_back(db):
    """A job released because its model server is down is not failed by the attempt cap."""
    lanes = make_lanes(db, {"a": ["w"]})
    (job_id,) = enqueue(db, lanes[("a", "w")], 1)
    queue = DurableQueue(db, INDEX_QUEUE, max_attempts=2)
    for _ in range(5):
        (taken,) = claim(queue, 1).claims
        with db.write() as s:
            assert queue.release(s, [taken], {"error": "the model server is down"}) == [taken]
    row = job_row(db, job_id)
    assert (row.status, row.attempts, row.error, row.claimed_by) == ("pending", 0, "the model server is down", None)


# -- leases ---------------------------------------------------------------------------------


class SlowEmbedder:
    """Wraps an embedder: every call takes ``delay_s`` seconds."""

    def __init__(self, inner, delay_s):
        self.inner, self.delay_s, self.calls = inner, delay_s, 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def embed(self, texts):
        self.calls += 1
        time.sleep(self.delay_s)
        return self.inner.embed(texts)


def test_a_batch_longer_than_its_lease_is_not_taken_over(db_url, tmp_path):
    from kg.indexing.indexer import Indexer
    from kg.ops.nodes import put_node

    services = make_services(db_url, tmp_path, inline=False)
    slow = SlowEmbedder(services.embedder("fake:hash-16"), delay_s=4.0)
    services._embedders["fake:hash-16"] = slow
    services.indexer = Indexer(services, lease_s=1.5, heartbeat_s=0.2)
    other = Indexer(services, lease_s=1.5, heartbeat_s=0.2)  # a second worker polling the queue
    context.run(services, context.OPERATOR, put_node, "r", "main", "w", "/long", node_type="t",
                properties={"content": "glacier survey"})
    runs = []
    worker = threading.Thread(target=lambda: runs.append(services.indexer.run_pending()))
    worker.start()
    deadline = time.monotonic() + 30
    while not slow.calls and time.monotonic() < deadline:
        time.sleep(0.01)
    stolen = 0
    while worker.is_alive():  # more than two leases long
        stolen += other.run_pending().done
        time.sleep(0.05)
    worker.join()
    assert stolen == 0 and slow.calls == 1
    assert runs[0].done == 1 and jobs(services) == 0 and found(services, "glacier") == ["/long"]
    other.close()
    services.close()


def test_leases_are_renewed_while_the_block_runs_and_expire_after(db):
    lanes = make_lanes(db, {"a": ["w"]})
    (job_id,) = enqueue(db, lanes[("a", "w")], 1)
    holder = DurableQueue(db, INDEX_QUEUE, lease_s=1.0, heartbeat_s=0.1)
    other = DurableQueue(db, INDEX_QUEUE, lease_s=1.0)
    taken = claim(holder, 1).claims
    with holder.renewing(taken):
        end = time.monotonic() + 2.5
        while time.monotonic() < end:
            assert claim(other, 1).claims == []
            time.sleep(0.1)
    time.sleep(1.5)  # no renewal now: the lease expires
    (again,) = claim(other, 1).claims
    assert (again.id, again.attempt) == (job_id, 2)
    # The first holder lost it: finishing is fenced, the job stays the new holder's.
    with db.write() as s:
        assert holder.finish(s, taken) == []
    row = job_row(db, job_id)
    assert (row.status, row.claimed_by, row.attempts) == ("running", other.worker_id, 2)
    with db.write() as s:
        assert other.finish(s, [again]) == [again]
    assert job_row(db, job_id) is None


# -- workers that are gone ------------------------------------------------------------------


def test_claims_of_a_gone_worker_are_taken_back_at_once(db):
    lanes = make_lanes(db, {"a": ["w"]})
    ids = enqueue(db, lanes[("a", "w")], 5)
    dead = DurableQueue(db, INDEX_QUEUE)
    assert len(claim(dead, 5).claims) == 5
    fresh = DurableQueue(db, INDEX_QUEUE)
    assert claim(fresh, 5).claims == []  # its worker lives (this process): the claims stand
    bury(db, dead)
    got = []
    for _ in ids:  # no wait for the 5-minute lease; each is run alone (its worker died beside others)
        (one,) = claim(fresh, 5).claims
        got.append(one)
        with db.write() as s:  # the dead worker's results, were it to finish, are fenced off
            assert dead.finish(s, [one.__class__(one.id, 1)]) == []
            assert fresh.finish(s, [one], {"status": "done"}) == [one]
    assert sorted(c.id for c in got) == ids and {c.attempt for c in got} == {2}
    with db.read() as s:
        assert s.scalar(select(func.count()).select_from(QueueWorker).where(QueueWorker.id == dead.worker_id)) == 0


@pytest.mark.parametrize("how", ["pid reused", "machine rebooted", "stale elsewhere", "unregistered"])
def test_how_a_worker_is_known_to_be_gone(db, how):
    lanes = make_lanes(db, {"a": ["w"]})
    enqueue(db, lanes[("a", "w")], 3)
    dead = DurableQueue(db, INDEX_QUEUE)
    claim(dead, 3)
    with db.read() as s:
        row = s.get(QueueWorker, dead.worker_id)
    boot, _, ticks = row.process_start.partition("/")
    if how == "pid reused":  # this process's pid, started at another time
        bury(db, dead, process_start=f"{boot}/{int(ticks or 0) + 1}")
    elif how == "machine rebooted":
        bury(db, dead, process_start=f"another-boot/{ticks}")
    elif how == "stale elsewhere":
        bury(db, dead, host="elsewhere", heartbeat_at=utcnow() - timedelta(minutes=1))
    else:
        with db.write() as s:
            s.execute(QueueWorker.__table__.delete().where(QueueWorker.id == dead.worker_id))
    assert len(claim(DurableQueue(db, INDEX_QUEUE), 3).claims) == 1  # taken back; each run alone
    with db.read() as s:
        assert sorted(s.scalars(select(IndexJob.status))) == ["pending", "pending", "running"]
        assert dead.worker_id not in set(s.scalars(select(IndexJob.claimed_by)))


def test_a_live_worker_elsewhere_keeps_its_claims(db):
    lanes = make_lanes(db, {"a": ["w"]})
    enqueue(db, lanes[("a", "w")], 3)
    elsewhere = DurableQueue(db, INDEX_QUEUE)
    claim(elsewhere, 3)
    bury(elsewhere.db, elsewhere, host="elsewhere", pid=1, heartbeat_at=utcnow())
    assert claim(DurableQueue(db, INDEX_QUEUE), 3).claims == []


def test_a_clean_close_puts_held_jobs_back_and_unregisters(db):
    lanes = make_lanes(db, {"a": ["w"]})
    ids = enqueue(db, lanes[("a", "w")], 4)
    queue = DurableQueue(db, INDEX_QUEUE)
    claim(queue, 4)
    queue.close()
    with db.read() as s:
        assert s.scalar(select(func.count()).select_from(QueueWorker)) == 0
        assert set(s.scalars(select(IndexJob.status))) == {"pending"}
    assert sorted(c.id for c in claim(DurableQueue(db, INDEX_QUEUE), 4).claims) == ids


CLAIM_AND_HANG = """
import sys, time
from kg.indexing.queue import DurableQueue
from kg.indexing.index_jobs import INDEX_QUEUE
from kg.store.db import Database

db = Database(sys.argv[1])
queue = DurableQueue(db, INDEX_QUEUE)
with db.write() as session:
    claimed = len(queue.claim(session, 100).claims)
print(claimed, flush=True)  # committed
time.sleep(600)  # embedding, say, when the process is killed
"""


def test_texts_claimed_by_a_killed_indexer_are_searchable_without_waiting_for_the_lease(db_url, tmp_path):
    """The issue: after a kill -9 the claimed index jobs stayed ``running`` for the whole
    5-minute lease, and the acknowledged texts were unsearchable meanwhile."""
    from kg.ops.nodes import put_node

    services = make_services(db_url, tmp_path, inline=False)
    for i in range(5):
        context.run(services, context.OPERATOR, put_node, "r", "main", "w", f"/t{i}", node_type="t",
                    properties={"content": f"okapi note {i}"})
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", CLAIM_AND_HANG, db_url], stdout=subprocess.PIPE, env=env,
                            cwd=ROOT, text=True)
    try:
        assert proc.stdout.readline().strip() == "5"
        assert jobs(services, "running") == 5
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    # The next process (here: new services on the same database) takes them back at once.
    services.close()
    restarted = open_services(db_url, tmp_path / "restarted")
    started = time.monotonic()
    assert restarted.indexer.drain().done == 5  # each alone: any of them may have killed it
    assert time.monotonic() - started < 60
    assert sorted(found(restarted, "okapi")) == [f"/t{i}" for i in range(5)]
    with restarted.db.read() as s:
        assert s.scalar(select(func.count()).select_from(IndexJob)) == 0
    restarted.close()


def test_a_function_job_of_a_gone_runner_runs_again_at_once(db_url, tmp_path):
    from kg.rag.function_jobs import get

    services = make_services(db_url, tmp_path, inline=False)
    with services.db.read() as s:
        repo_id = s.scalar(text("SELECT id FROM repositories WHERE name = 'r'"))
    dead = DurableQueue(services.db, FUNCTION_QUEUE)
    with services.db.write() as s:
        s.add(FunctionJob(id="f" * 32, repo_id=repo_id, function="search-documents", branch="main",
                          input={"query": "anything"}, state="queued", attempts=0, created_at=utcnow()))
    assert [c.id for c in claim(dead, 1).claims] == ["f" * 32]
    assert services.jobs.run_pending() == 0  # its runner lives: the claim stands
    bury(services.db, dead)
    assert services.jobs.run_pending() == 1
    job = get(services, context.OPERATOR, "f" * 32)
    assert job["state"] == "succeeded" and job["attempts"] == 2
    services.close()


# -- concurrent claimers --------------------------------------------------------------------


def test_concurrent_claimers_never_take_the_same_job(db):
    lanes = make_lanes(db, {"a": ["one", "two"], "b": ["w"]})
    ids = (enqueue(db, lanes[("a", "one")], 150) + enqueue(db, lanes[("a", "two")], 100)
           + enqueue(db, lanes[("b", "w")], 50))
    taken: dict[int, list[int]] = {}
    errors = []
    barrier = threading.Barrier(4)

    def claimer(n):
        queue = DurableQueue(db, INDEX_QUEUE)
        mine = taken.setdefault(n, [])
        barrier.wait()
        try:
            while True:
                got = claim(queue, 7).claims
                if not got:
                    return
                mine.extend(c.id for c in got)
        except Exception as exc:  # pragma: no cover - the failure message
            errors.append(exc)

    threads = [threading.Thread(target=claimer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    every = [i for mine in taken.values() for i in mine]
    assert sorted(every) == sorted(ids)  # each job claimed once, none left
    with db.read() as s:
        assert set(s.scalars(select(IndexJob.attempts))) == {1}


def test_postgresql_claimers_skip_locked_jobs_instead_of_waiting(db):
    if db.dialect != "postgresql":
        pytest.skip("SKIP LOCKED is PostgreSQL's; SQLite serialises claims with BEGIN IMMEDIATE")
    lanes = make_lanes(db, {"a": ["w"]})
    ids = enqueue(db, lanes[("a", "w")], 10)
    first, second = DurableQueue(db, INDEX_QUEUE), DurableQueue(db, INDEX_QUEUE)
    first.register()
    second.register()
    with db.write() as open_claim:  # the first claimer's transaction has not committed yet
        held = [c.id for c in first.claim(open_claim, 5).claims]
        got: list = []

        def other():
            with db.write() as s:
                s.execute(text("SET LOCAL lock_timeout = '5s'"))  # waiting would fail, not hang
                got.extend(c.id for c in second.claim(s, 10).claims)

        t = threading.Thread(target=other)
        started = time.monotonic()
        t.start()
        t.join(30)
        waited = time.monotonic() - started
    assert held == ids[:5] and got == ids[5:]  # disjoint, and the second did not wait
    assert waited < 5


def test_a_lone_jobs_expired_lease_is_not_its_death_while_its_worker_held_another_job(db):
    """The lone job's lease expired first (it was claimed first), while the worker also held a
    short job claimed beside it, whose lease runs on: the worker did not hold the lone job
    alone, so the death is not counted against it."""
    lanes = make_lanes(db, {"a": ["w"]})
    suspect, short = enqueue(db, lanes[("a", "w")], 2)
    with db.write() as s:
        s.execute(update(IndexJob).where(IndexJob.id == suspect).values(alone=True))
    worker = DurableQueue(db, INDEX_QUEUE)
    assert [c.id for c in claim(worker, 5).claims] == [suspect]
    assert [c.id for c in claim(worker, 5).claims] == [short]
    with db.write() as s:  # only the lone job's lease has expired
        s.execute(update(IndexJob).where(IndexJob.id == suspect).values(updated_at=utcnow() - timedelta(minutes=10)))
    with db.write() as s:
        assert DurableQueue(db, INDEX_QUEUE).sweep(s) == []
    row = job_row(db, suspect)
    assert (row.status, row.failures, row.alone) == ("pending", 0, True)
