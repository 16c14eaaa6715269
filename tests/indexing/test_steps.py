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
