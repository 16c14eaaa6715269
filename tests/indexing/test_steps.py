"""A large text is embedded in bounded steps across indexer passes: small jobs are done in
between, nothing of it is searchable (or stored) until all its chunks are, a crash or a lost
claim loses nothing and stores nothing twice, and ``index/status`` shows its progress with an
estimate; on both databases."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import func, select, update

from kg import context
from kg.index.embedded import EmbeddedVectorIndex
from kg.indexing.index_jobs import index_status
from kg.indexing.indexer import Indexer
from kg.ops.nodes import put_node
from kg.providers.fake import FakeEmbedder
from kg.rag.search import SearchRequest, search
from kg.services import Services
from kg.settings import Settings
from kg.store.db import Database
from kg.store.models import Chunk, IndexJob, NodeVersion, utcnow
from kg.store.repos import branch_view, create_repository, create_workspace, get_repository

STEP = 4
BIG = " ".join(f"zebra{i} stripes." for i in range(4000))  # 18 chunks of the default 512 tokens
TOTAL = 18


def make_services(db_url, tmp_path) -> Services:
    settings = Settings(database_url=db_url, data_dir=tmp_path / "data", embedding_model="fake:hash-16",
                        index_step_chunks=STEP)
    db = Database(db_url)
    db.upgrade()
    embedder = FakeEmbedder(dim=16, name="fake:hash-16")
    services = Services(settings=settings, db=db, index=EmbeddedVectorIndex(None),
                        embedder_factory=lambda name: embedder)
    with db.write() as s:
        repo = create_repository(s, name="r")
        for ws in ("big", "small"):
            create_workspace(s, repo, name=ws, config={"embedding": {"model": "fake:hash-16"}})
    return services


def write(services, workspace, path, text):
    context.run(services, context.OPERATOR, put_node, "r", "main", workspace, path, node_type="t",
                properties={"content": text})


def found(services, query):
    with services.db.read() as s:
        rows, _ = search(s, services, branch_view(s, "r", "main"), SearchRequest(query=query, mode="fulltext"))
    return sorted(r.path for r in rows)


def chunks(services):
    with services.db.read() as s:
        return s.scalar(select(func.count()).select_from(Chunk))


def status(services, now=None):
    with services.db.read() as s:
        return index_status(s, get_repository(s, "r"), now=now)


def test_a_large_text_is_embedded_in_steps_while_small_writes_are_done(db_url, tmp_path):
    services = make_services(db_url, tmp_path)
    write(services, "big", "/big", BIG)
    write(services, "small", "/first", "a small note about otters")
    first = services.indexer.run_pending()
    # The small text is done in the first pass; of the large one, one step of chunks.
    assert (first.done, first.stepped) == (1, STEP)
    assert found(services, "otters") == ["/first"] and found(services, "zebra7") == []
    assert chunks(services) == 1  # nothing of the large text is stored before all of it is embedded
    progress = status(services)
    assert (progress["running"], progress["pending"]) == (1, 0)
    [job] = progress["progress"]
    assert (job["workspace"], job["path"], job["chunks_done"]) == ("big", "/big", STEP)
    total = job["chunks_total"]
    assert total == TOTAL
    # A small write made meanwhile is done in the next pass, the large text one step further.
    write(services, "small", "/second", "a small note about beavers")
    second = services.indexer.run_pending()
    assert (second.done, second.stepped) == (1, STEP)
    assert found(services, "beavers") == ["/second"]
    assert status(services)["progress"][0]["chunks_done"] == 2 * STEP
    passes = 2
    while True:
        run = services.indexer.run_pending()
        passes += 1
        if run.done:
            break
        assert run.stepped == STEP
    assert passes == -(-TOTAL // STEP)  # 5 passes: 4 chunks each, the last 2
    assert found(services, "zebra7") == ["/big"]
    assert chunks(services) == 2 + total
    assert status(services)["progress"] == [] and status(services)["running"] == 0
    services.close()


def test_drain_embeds_a_large_text_whole(db_url, tmp_path):
    """A filtered pass (a repository's drain, as ``kg ingest`` settles its index) is not stepped."""
    services = make_services(db_url, tmp_path)
    write(services, "big", "/big", BIG)
    with services.db.read() as s:
        repo_id = get_repository(s, "r").id
    run = services.indexer.drain(repo_id=repo_id)
    assert (run.done, run.stepped) == (1, 0) and chunks(services) == TOTAL
    services.close()


def test_a_crash_in_flight_loses_nothing_and_stores_nothing_twice(db_url, tmp_path):
    services = make_services(db_url, tmp_path)
    write(services, "big", "/big", BIG)
    assert services.indexer.run_pending().stepped == STEP  # in flight, then its indexer dies
    with services.db.write() as s:  # its lease expires
        s.execute(update(IndexJob).values(updated_at=utcnow() - timedelta(minutes=10)))
    other = Indexer(services, step_chunks=STEP)
    try:
        while not other.run_pending().done:
            pass
        assert chunks(services) == TOTAL and found(services, "zebra7") == ["/big"]
        # The first indexer comes back: its claim was lost, so it stores nothing and drops the text.
        late = services.indexer.run_pending()
        assert late.done == 0 and services.indexer.in_flight() == []
        assert chunks(services) == TOTAL
        with services.db.read() as s:
            assert s.scalar(select(func.count()).select_from(IndexJob)) == 0
    finally:
        other.close()
        services.close()


def test_a_new_claim_starts_the_progress_again(db_url, tmp_path):
    services = make_services(db_url, tmp_path)
    write(services, "big", "/big", BIG)
    services.indexer.run_pending()
    with services.db.write() as s:
        s.execute(update(IndexJob).values(updated_at=utcnow() - timedelta(minutes=10)))
    other = Indexer(services, step_chunks=STEP)
    try:
        other.run_pending()  # takes it back and starts from its first chunk
        [job] = status(services)["progress"]
        assert job["chunks_done"] == STEP
        with services.db.read() as s:
            assert s.scalar(select(IndexJob.attempts)) == 2
    finally:
        other.close()
        services.close()


def test_status_estimates_the_time_left_from_the_rate_so_far(db_url, tmp_path):
    services = make_services(db_url, tmp_path)
    write(services, "big", "/big", BIG)
    services.indexer.run_pending()
    now = utcnow()
    with services.db.write() as s:
        s.execute(update(IndexJob).values(started_at=now - timedelta(seconds=10)))
    [job] = status(services, now=now)["progress"]
    # 4 chunks in 10 s: the 14 left take 35 s.
    assert (job["chunks_done"], job["chunks_total"], job["elapsed_s"], job["eta_s"]) == (4, TOTAL, 10.0, 35.0)
    services.close()


def test_index_status_route_answers_the_progress(services):
    from fastapi.testclient import TestClient

    from api.app import create_app

    with services.db.write() as s:
        repo = create_repository(s, name="r")
        create_workspace(s, repo, name="big")
    write(services, "big", "/big", BIG)
    now = utcnow()
    with services.db.write() as s:  # a job in flight (no lifespan here: no indexer thread runs)
        version = s.scalar(select(NodeVersion).where(NodeVersion.path == "/big"))
        s.add(IndexJob(repo_id=version.repo_id, content_key="k" * 64, workspace_id=version.workspace_id,
                       node_version_id=version.id, status="running", attempts=1, chunks_done=5, chunks_total=20,
                       started_at=now - timedelta(seconds=5), created_at=now, updated_at=now))
    client = TestClient(create_app(services=services))
    body = client.get("/api/repos/r/index/status").json()
    [job] = body["progress"]
    assert (body["running"], job["path"], job["chunks_done"], job["chunks_total"]) == (1, "/big", 5, 20)
    assert job["eta_s"] is not None and job["eta_s"] >= 15.0


def test_whole_texts_are_stored_before_the_large_ones_step_is_embedded(db_url, tmp_path):
    """A small write claimed in a pass is searchable before that pass embeds its step of a large
    text (else it would wait for up to two steps)."""
    services = make_services(db_url, tmp_path)
    seen: list[int] = []
    embedder = services.embedder("fake:hash-16")
    real = embedder.embed

    def embed(texts):
        if any("zebra" in t for t in texts):
            seen.append(chunks(services))
        return real(texts)

    embedder.embed = embed
    write(services, "big", "/big", BIG)
    write(services, "small", "/first", "a small note about otters")
    assert services.indexer.run_pending().done == 1
    assert seen and seen[0] == 1  # the small text's chunk was stored when the step began
    services.close()


def test_a_short_text_written_after_a_long_one_in_the_same_workspace_is_searchable_first(db_url, tmp_path):
    """Before: a workspace's jobs went in order, so a note written beside a large document
    waited for all of it (minutes with the local model)."""
    services = make_services(db_url, tmp_path)
    write(services, "big", "/big", BIG)
    assert services.indexer.run_pending().stepped == STEP  # in flight
    write(services, "big", "/note", "a small note about otters")
    run = services.indexer.run_pending()
    assert (run.done, run.stepped) == (1, STEP)
    assert found(services, "otters") == ["/note"] and found(services, "zebra7") == []
    assert status(services)["progress"][0]["chunks_done"] == 2 * STEP  # the large text goes on
    assert services.indexer.drain().done == 1 and found(services, "zebra7") == ["/big"]
    services.close()


def test_a_later_short_write_of_a_node_is_not_overtaken_by_its_earlier_long_text(db_url, tmp_path):
    """Texts are keyed by content: the node's earlier, long text finishing later never shows in
    place of its later, short one."""
    services = make_services(db_url, tmp_path)
    write(services, "big", "/doc", BIG)
    services.indexer.run_pending()  # the long text in flight
    write(services, "big", "/doc", "rewritten as a short note about otters")
    assert services.indexer.run_pending().done == 1
    assert found(services, "otters") == ["/doc"]
    services.indexer.drain()  # the long text finishes after the short one
    assert found(services, "otters") == ["/doc"] and found(services, "zebra7") == []
    with services.db.read() as s:
        assert s.scalar(select(func.count()).select_from(IndexJob)) == 0
    services.close()


def test_a_write_cuts_a_step_short(db_url, tmp_path):
    """A write during a step ends it after the chunks under way (a quarter of a step), so the
    next pass claims the write without waiting for the rest of the step."""
    services = make_services(db_url, tmp_path)
    embedder = services.embedder("fake:hash-16")
    real = embedder.embed
    calls: list[int] = []

    def embed(texts):
        if any("zebra" in t for t in texts):
            calls.append(len(texts))
            if len(calls) == 1:  # a write arrives while the step's first chunks are embedded
                write(services, "big", "/note", "a small note about otters")
        return real(texts)

    embedder.embed = embed
    write(services, "big", "/big", BIG)
    first = services.indexer.run_pending()
    assert first.stepped == STEP // 4 and calls == [STEP // 4]  # cut after the chunk under way
    second = services.indexer.run_pending()
    assert second.done == 1 and found(services, "otters") == ["/note"]
    assert second.stepped == STEP  # no write meanwhile: a whole step
    services.close()


def test_status_says_what_the_oldest_pending_job_waits_behind(db_url, tmp_path):
    services = make_services(db_url, tmp_path)
    assert status(services)["next"] is None
    write(services, "big", "/big", BIG)
    services.indexer.run_pending()
    write(services, "big", "/note", "a small note about otters")
    nxt = status(services)["next"]
    assert (nxt["workspace"], nxt["path"], nxt["chars"], nxt["alone"], nxt["retry_at"]) == (
        "big", "/note", len("a small note about otters"), False, None)
    behind = nxt["behind"]
    assert (behind["workspace"], behind["path"], behind["chars"], behind["chunks_done"], behind["chunks_total"]) == (
        "big", "/big", len(BIG), STEP, TOTAL)
    assert behind["elapsed_s"] >= 0
    services.indexer.run_pending()
    assert status(services)["next"] is None
    services.close()


def test_index_status_route_answers_what_the_next_job_waits_behind(services):
    from fastapi.testclient import TestClient

    from api.app import create_app

    with services.db.write() as s:
        repo = create_repository(s, name="r")
        create_workspace(s, repo, name="w")
    write(services, "w", "/big", BIG)
    now = utcnow()
    with services.db.write() as s:  # one text being embedded, one waiting (no indexer thread runs here)
        big = s.scalar(select(NodeVersion).where(NodeVersion.path == "/big"))
        s.add(IndexJob(repo_id=big.repo_id, content_key="b" * 64, workspace_id=big.workspace_id,
                       node_version_id=big.id, status="running", attempts=1, chunks_done=5, chunks_total=20,
                       started_at=now, created_at=now, updated_at=now))
        s.add(IndexJob(repo_id=big.repo_id, content_key="n" * 64, workspace_id=big.workspace_id,
                       node_version_id=big.id, status="pending", attempts=0, created_at=now, updated_at=now))
    client = TestClient(create_app(services=services))
    body = client.get("/api/repos/r/index/status").json()
    assert body["next"]["content_key"] == "n" * 64 and body["next"]["path"] == "/big"
    behind = body["next"]["behind"]
    assert (behind["content_key"], behind["chunks_done"], behind["chunks_total"], behind["chars"]) == (
        "b" * 64, 5, 20, len(BIG))


def test_a_large_text_retried_alone_after_a_crash_still_lets_short_texts_through(db_url, tmp_path):
    """After its indexer died, the large text is claimed by itself; short texts of its workspace
    written meanwhile are still done between its steps."""
    services = make_services(db_url, tmp_path)
    write(services, "big", "/big", BIG)
    with services.db.write() as s:  # its first indexer died while embedding it
        s.execute(update(IndexJob).values(status="running", claimed_by="0" * 32, attempts=1))
    first = services.indexer.run_pending()
    assert first.stepped == STEP
    with services.db.read() as s:
        assert (s.scalar(select(IndexJob.alone)), s.scalar(select(IndexJob.attempts))) == (True, 2)
    write(services, "big", "/note", "a small note about otters")
    second = services.indexer.run_pending()
    assert (second.done, second.stepped) == (1, STEP) and found(services, "otters") == ["/note"]
    assert services.indexer.drain().done == 1 and found(services, "zebra7") == ["/big"]
    services.close()
