"""The durable index queue: background indexing, crash recovery, embedder failures (CASES #15,
#16, #17), on both databases."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest
from sqlalchemy import func, select, update

from kg import context
from kg.index.embedded import EmbeddedVectorIndex
from kg.ops.nodes import put_node
from kg.providers.fake import FakeEmbedder
from kg.rag.search import SearchRequest, search
from kg.services import Services
from kg.settings import Settings
from kg.store.db import Database
from kg.store.models import Chunk, IndexJob, utcnow
from kg.store.repos import branch_view, create_repository, create_workspace


class MisbehavingEmbedder(FakeEmbedder):
    """A fake that answers badly for texts containing a trigger word."""

    def __init__(self, mode: str):
        super().__init__(dim=16, name="bad:" + mode)
        self.mode = mode

    def embed(self, texts):
        good = super().embed(texts)
        if not any("TRIGGER" in t for t in texts):
            return good
        if self.mode == "empty":
            return np.zeros((0, self.dim), dtype=np.float32)
        if self.mode == "none":
            return None
        if self.mode == "short":
            return good[:-1] if len(good) > 1 else np.zeros((0, self.dim), dtype=np.float32)
        if self.mode == "wrongdim":
            return np.ones((len(texts), self.dim + 1), dtype=np.float32)
        if self.mode == "nan":
            good = good.copy()
            good[0, 0] = np.nan
            return good
        if self.mode == "inf":
            good = good.copy()
            good[0, 0] = np.inf
            return good
        if self.mode == "zero":
            return np.zeros_like(good)
        if self.mode == "raise":
            from kg.errors import ProviderError

            raise ProviderError("the model server is down")
        if self.mode == "unreachable":
            from kg.errors import BackendUnavailable

            raise BackendUnavailable("cannot reach the Ollama server at http://127.0.0.1:9")
        raise AssertionError(self.mode)


def make_services(db_url, tmp_path, *, inline: bool, model: str = "fake:hash-16") -> Services:
    settings = Settings(database_url=db_url, data_dir=tmp_path / "data", embedding_model=model,
                        index_inline=inline)
    db = Database(db_url)
    db.upgrade()
    embedders = {}

    def factory(name):
        if name.startswith("bad:"):
            return embedders.setdefault(name, MisbehavingEmbedder(name.split(":", 1)[1]))
        return embedders.setdefault(name, FakeEmbedder(dim=16, name=name))

    services = Services(settings=settings, db=db, index=EmbeddedVectorIndex(None), embedder_factory=factory)
    with db.write() as s:
        repo = create_repository(s, name="r")
        create_workspace(s, repo, name="w", config={"embedding": {"model": model}})
    return services


def found(services, query, mode="fulltext"):
    with services.db.read() as s:
        rows, _ = search(s, services, branch_view(s, "r", "main"), SearchRequest(query=query, mode=mode))
    return [r.path for r in rows]


def jobs(services, status=None):
    with services.db.read() as s:
        stmt = select(func.count()).select_from(IndexJob)
        if status:
            stmt = stmt.where(IndexJob.status == status)
        return s.scalar(stmt)


def test_write_is_acknowledged_then_indexed_in_the_background(db_url, tmp_path):
    services = make_services(db_url, tmp_path, inline=False)
    for i in range(5):
        context.run(services, context.OPERATOR, put_node, "r", "main", "w", f"/n{i}", node_type="t",
                    properties={"content": f"walrus number {i}"})
    assert jobs(services, "pending") == 5
    assert found(services, "walrus") == []
    services.indexer.start()
    try:
        services.indexer.wake()
        import time

        deadline = time.monotonic() + 30
        while jobs(services) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        services.indexer.stop()
    assert jobs(services) == 0
    assert sorted(found(services, "walrus")) == [f"/n{i}" for i in range(5)]
    services.close()


def test_a_crash_loses_nothing(db_url, tmp_path):
    services = make_services(db_url, tmp_path, inline=False)
    context.run(services, context.OPERATOR, put_node, "r", "main", "w", "/a", node_type="t",
                properties={"content": "quokka facts"})
    claimed = services.indexer._claim(None, None)  # an indexer claims the job, then dies
    assert len(claimed) == 1 and jobs(services, "running") == 1
    assert services.indexer.run_pending().done == 0  # its lease has not expired yet
    with services.db.write() as s:
        s.execute(update(IndexJob).values(updated_at=utcnow() - timedelta(minutes=10)))
    assert services.indexer.drain().done == 1
    assert found(services, "quokka") == ["/a"]
    with services.db.read() as s:
        assert s.scalar(select(func.count()).select_from(Chunk)) == 1
    services.close()


@pytest.mark.parametrize("mode", ["empty", "none", "short", "wrongdim", "nan", "inf", "zero", "raise"])
def test_embedder_failures_fail_only_that_node(db_url, tmp_path, mode):
    services = make_services(db_url, tmp_path, inline=True, model=f"bad:{mode}")
    context.run(services, context.OPERATOR, put_node, "r", "main", "w", "/good", node_type="t",
                properties={"content": "plain words here"})
    context.run(services, context.OPERATOR, put_node, "r", "main", "w", "/bad", node_type="t",
             properties={"content": "TRIGGER first sentence. " * 3, "title": "also plain"})
    context.run(services, context.OPERATOR, put_node, "r", "main", "w", "/good2", node_type="t",
                properties={"content": "more plain words"})
    assert jobs(services, "failed") == 1
    from kg.indexing.index_jobs import index_status
    from kg.store.repos import get_repository

    with services.db.read() as s:
        status = index_status(s, get_repository(s, "r"))
        chunk_keys = set(s.scalars(select(Chunk.content_key)))
    (failure,) = status["failures"]
    assert failure["path"] == "/bad" and failure["error"]
    assert failure["content_key"] not in chunk_keys  # no partial chunks
    assert sorted(found(services, "plain")) == ["/good", "/good2"]
    # fixing the text indexes it; the failed job of the old text stays for the record
    context.run(services, context.OPERATOR, put_node, "r", "main", "w", "/bad", node_type="t",
                properties={"content": "fixed plain"})
    assert "/bad" in found(services, "fixed")
    services.close()


def test_whitespace_only_text_makes_no_job_and_no_call(db_url, tmp_path):
    services = make_services(db_url, tmp_path, inline=True)
    context.run(services, context.OPERATOR, put_node, "r", "main", "w", "/blank", node_type="t",
                properties={"content": "  \n\t "})
    assert jobs(services) == 0
    assert services.embedder("fake:hash-16").calls == 0
    services.close()


def test_same_text_twice_is_one_job_and_one_embedding(db_url, tmp_path):
    services = make_services(db_url, tmp_path, inline=False)
    context.run(services, context.OPERATOR, put_node, "r", "main", "w", "/a", node_type="t",
                properties={"content": "same text"})
    context.run(services, context.OPERATOR, put_node, "r", "main", "w", "/b", node_type="t",
                properties={"content": "same text"})
    assert jobs(services) == 1
    services.indexer.drain()
    assert sorted(found(services, "same")) == ["/a", "/b"]
    with services.db.read() as s:
        assert s.scalar(select(func.count()).select_from(Chunk)) == 1
    services.close()


def test_ingest_goes_on_when_one_file_fails_to_embed(db_url, tmp_path):
    from kg.ops.ingest import ingest_path

    services = make_services(db_url, tmp_path, inline=True, model="bad:raise")
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.md").write_text("# A\n\nalpha words", encoding="utf-8")
    (folder / "b.md").write_text("# B\n\nTRIGGER words", encoding="utf-8")
    (folder / "c.md").write_text("# C\n\ngamma words", encoding="utf-8")
    report = ingest_path(services, context.OPERATOR, folder, repo="r", workspace="w")
    assert len(report.inserted) == 3
    # Each file's text was indexed once its write committed (KG_INDEX_INLINE, as for every
    # write): the failing one is recorded, with nothing left to drain.
    assert services.indexer.drain().failed == 0
    with services.db.read() as s:
        assert s.scalar(select(func.count()).select_from(IndexJob).where(IndexJob.status == "failed")) == 1
    assert sorted(found(services, "words")) == ["/a", "/c"]
    services.close()


def test_percentage_overlap_over_the_model_context_is_capped_not_a_crash():
    from kg.indexing.chunks import effective_chunking
    from kg.indexing.config import parse_embedding_config
    from kg.providers.fake import FakeEmbedder

    config = parse_embedding_config({"chunking": {"chunk_size": 100000,
                                                  "overlap": {"type": "Percentage", "value": 0.25}}},
                                    default_model="fake:hash-16")
    small = FakeEmbedder(dim=8)
    small.max_tokens = 102
    capped = effective_chunking(config.chunking, small)
    assert capped.chunk_size == 100 and capped.overlap_units == 25


def test_inline_indexing_finishes_a_batch_larger_than_one_pass(db_url, tmp_path):
    from kg.ops.nodes import batch

    services = make_services(db_url, tmp_path, inline=True)
    upserts = [{"workspace": "w", "path": f"/n{i}", "properties": {"content": f"text number {i} zebra"}}
               for i in range(services.indexer.batch_jobs * 2 + 5)]
    context.run(services, context.OPERATOR, batch, "r", "main", upserts=upserts)
    assert jobs(services) == 0
    assert len(found(services, "zebra", mode="fulltext")) == 10  # k = 10 by default
    with services.db.read() as s:
        assert s.scalar(select(func.count()).select_from(Chunk)) == len(upserts)
    services.close()


def test_a_text_the_new_model_cannot_embed_does_not_hold_a_reembed_back(db_url, tmp_path):
    """Re-embedding switches once no job of the workspace is pending or running: a text whose
    job failed under the new model is then unsearchable (index/status lists it), the rest moves."""
    from kg.indexing.reembed import reembed_workspace
    from kg.store.models import Workspace

    services = make_services(db_url, tmp_path, inline=True)
    context.run(services, context.OPERATOR, put_node, "r", "main", "w", "/good", node_type="t",
                properties={"content": "plain words here"})
    context.run(services, context.OPERATOR, put_node, "r", "main", "w", "/bad", node_type="t",
                properties={"content": "TRIGGER plain words"})
    answer, queued = reembed_workspace(services, "r", "w", {"model": "bad:raise"}, reembed=True)
    assert answer["switched"] is True and len(queued) == 2
    assert jobs(services, "failed") == 1 and jobs(services, "pending") == 0
    with services.db.read() as s:
        ws = s.scalar(select(Workspace).where(Workspace.name == "w"))
        assert ws.config["embedding"]["model"] == "bad:raise" and "embedding_next" not in ws.config
        models = set(s.scalars(select(Chunk.model)))
    assert models == {"fake:hash-16", "bad:raise"}
    assert found(services, "plain") == ["/good"]
    services.close()


def test_many_texts_failing_under_the_new_model_hold_the_switch_back(db_url, tmp_path):
    """Found by a breaker pass: an outage of the new model (HTTP errors) failed most jobs and the
    switch went ahead, leaving most of the workspace unsearchable. Beyond a few failures (5, or
    1 %) the current model keeps answering; the same request again retries."""
    from kg.indexing.reembed import reembed_status, reembed_workspace
    from kg.store.models import Workspace

    services = make_services(db_url, tmp_path, inline=True)
    for i in range(7):
        context.run(services, context.OPERATOR, put_node, "r", "main", "w", f"/n{i}", node_type="t",
                    properties={"content": f"TRIGGER plain words {i}"})
    answer, _ = reembed_workspace(services, "r", "w", {"model": "bad:raise"}, reembed=True)
    assert answer["switched"] is False and jobs(services, "failed") == 7
    with services.db.read() as s:
        config = s.scalar(select(Workspace.config).where(Workspace.name == "w"))
    assert config["embedding"]["model"] == "fake:hash-16"
    assert reembed_status(config) == {"embedding": config["embedding_next"], "failed_texts": 7}
    assert sorted(found(services, "plain")) == [f"/n{i}" for i in range(7)]  # still the old model's
    services.close()


def test_refreshing_statistics_on_a_busy_sqlite_database_is_not_an_error(tmp_path):
    """Found by a breaker pass: nodes:batch answered 500 after its data was committed, when
    PRAGMA optimize met the indexer's lock."""
    import sqlite3

    from kg.store.db import Database

    db = Database(f"sqlite:///{tmp_path / 'busy.db'}", busy_timeout_s=0.2)
    db.upgrade()
    with db.engine.begin() as conn:  # a table the planner would like statistics of
        conn.exec_driver_sql("CREATE TABLE t (a INTEGER, b TEXT)")
        conn.exec_driver_sql("CREATE INDEX ix_t ON t (a)")
        conn.exec_driver_sql("INSERT INTO t WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 "
                             "FROM n WHERE i < 5000) SELECT i, i FROM n")
    holder = sqlite3.connect(tmp_path / "busy.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # the indexer storing chunks, say
    holder.execute("INSERT INTO t VALUES (0, 'x')")
    try:
        with db.engine.connect() as conn:  # queries that make PRAGMA optimize want to ANALYZE
            for i in range(50):
                conn.exec_driver_sql("SELECT * FROM t WHERE a = ?", (i,)).fetchall()
        db.analyze()  # logs, does not raise
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        db.dispose()


def test_while_the_model_server_is_down_the_indexer_backs_off_and_says_so_once_a_try(db_url, tmp_path, caplog):
    """Regression: a workspace whose model server could not be reached logged a warning per job
    about twice a second in every process, for as long as it was down (1,393 in 12 minutes)."""
    import logging

    services = make_services(db_url, tmp_path, inline=False)
    with services.db.write() as s:
        from kg.store.repos import get_repository

        create_workspace(s, get_repository(s, "r"), name="down", config={"embedding": {"model": "bad:unreachable"}})
    for i in range(3):
        context.run(services, context.OPERATOR, put_node, "r", "main", "down", f"/n{i}", node_type="t",
                    properties={"content": f"TRIGGER text {i}"})
    indexer = services.indexer
    assert indexer.idle_wait_s() == indexer.poll_s
    waits = []
    with caplog.at_level(logging.WARNING, logger="kg.indexer"):
        for _ in range(8):
            assert indexer.pass_once() == 0  # nothing embedded, nothing failed
            waits.append(indexer.idle_wait_s())
    assert waits == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0]
    said = [r.getMessage() for r in caplog.records if r.name == "kg.indexer"]
    assert len(said) == 8  # one line a try, not one a job
    assert said[0] == ("indexer: cannot reach the Ollama server at http://127.0.0.1:9; 3 job(s) stay queued, "
                       "next try in 1 s")
    assert jobs(services, "pending") == 3  # waiting, not failed
    # a pass that embeds something (another workspace's text) ends the backoff
    context.run(services, context.OPERATOR, put_node, "r", "main", "w", "/ok", node_type="t",
                properties={"content": "walrus"})
    assert indexer.pass_once() == 1 and indexer.idle_wait_s() == indexer.poll_s
    assert found(services, "walrus") == ["/ok"] and jobs(services, "pending") == 3
    services.close()
