"""A worker's death is not a text's failure: an indexer process killed (SIGKILL) while embedding
a text, again and again, leaves the text to be embedded by the next one; a text whose embedding
always raises ends failed, and ``retry-failed`` (HTTP here, the CLI in tests/cli) embeds it once
the cause is gone; on both databases."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from fastapi.testclient import TestClient
from sqlalchemy import func, select

from api.app import create_app
from kg import context
from kg.errors import ProviderError
from kg.index.embedded import EmbeddedVectorIndex
from kg.indexing.index_jobs import MAX_ATTEMPTS
from kg.ops.nodes import put_node
from kg.ops.repos import retry_failed_index
from kg.providers.fake import FakeEmbedder
from kg.services import Services
from kg.settings import Settings
from kg.store.db import Database
from kg.store.models import Chunk, IndexJob
from tests.indexing.test_indexer import found, jobs, make_services

ROOT = Path(__file__).resolve().parents[2]

EMBED_AND_HANG = """
import sys, time
from kg.index.embedded import EmbeddedVectorIndex
from kg.providers.fake import FakeEmbedder
from kg.services import Services
from kg.settings import Settings
from kg.store.db import Database


class Hanging(FakeEmbedder):
    def embed(self, texts):
        print("embedding", flush=True)
        time.sleep(600)  # killed here, while embedding the text


url, data = sys.argv[1], sys.argv[2]
settings = Settings(database_url=url, data_dir=data, embedding_model="fake:hash-16", index_inline=False)
embedder = Hanging(dim=16, name="fake:hash-16")
services = Services(settings=settings, db=Database(url), index=EmbeddedVectorIndex(None),
                    embedder_factory=lambda name: embedder)
services.indexer.queue.retry_backoff_s = 0.05  # a short backoff between retries
while True:  # the background indexer's loop, without its thread
    services.indexer.run_pending()
    time.sleep(0.02)
"""


def job(services) -> IndexJob | None:
    with services.db.read() as s:
        return s.scalar(select(IndexJob))


def test_three_kills_while_embedding_a_text_do_not_fail_it(db_url, tmp_path):
    """Before: three kills -9 while the text was embedded failed it, "attempts exhausted", and
    nothing retried it. Now it is searchable once an indexer runs again."""
    services = make_services(db_url, tmp_path, inline=False)
    context.run(services, context.OPERATOR, put_node, "r", "main", "w", "/answer", node_type="t",
                properties={"content": "the capybara answer"})
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for kill in range(1, 4):
        proc = subprocess.Popen([sys.executable, "-c", EMBED_AND_HANG, db_url, str(tmp_path / f"data{kill}")],
                                stdout=subprocess.PIPE, env=env, cwd=ROOT, text=True)
        try:
            assert proc.stdout.readline().strip() == "embedding"
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        assert proc.returncode == -signal.SIGKILL
        row = job(services)
        assert (row.status, row.attempts) == ("running", kill)  # held by the killed process
    # The first kill is not counted (it may have held others), the two while it ran alone are.
    assert (row.failures, row.alone) == (1, True)
    services.close()
    restarted = make_services_on(db_url, tmp_path / "restarted")
    deadline = time.monotonic() + 60
    while job(restarted) is not None and time.monotonic() < deadline:
        restarted.indexer.run_pending()  # takes it back (2 counted of 3), then after its backoff embeds it
        time.sleep(0.02)
    assert job(restarted) is None
    assert found(restarted, "capybara") == ["/answer"]
    with restarted.db.read() as s:
        assert s.scalar(select(func.count()).select_from(Chunk)) == 1
    restarted.close()


def make_services_on(db_url, data) -> Services:
    """Services of a process that starts on the existing database, its retry backoff short."""
    settings = Settings(database_url=db_url, data_dir=data, embedding_model="fake:hash-16", index_inline=False)
    services = Services(settings=settings, db=Database(db_url), index=EmbeddedVectorIndex(None),
                        embedder_factory=lambda name: FakeEmbedder(dim=16, name=name))
    services.indexer.queue.retry_backoff_s = 0.05
    return services


class Poisoned(FakeEmbedder):
    """The fake embedder, failing every text with ``poison`` in it while ``broken``."""

    broken = True

    def embed(self, texts):
        if self.broken and any("poison" in t for t in texts):
            raise ProviderError("the model rejected the text")
        return super().embed(texts)


def test_a_poison_text_ends_failed_and_retry_failed_embeds_it_once_fixed(db_url, tmp_path):
    settings = Settings(database_url=db_url, data_dir=tmp_path / "data", embedding_model="fake:hash-16",
                        index_inline=False)
    db = Database(db_url)
    db.upgrade()
    embedder = Poisoned(dim=16, name="fake:hash-16")
    services = Services(settings=settings, db=db, index=EmbeddedVectorIndex(None),
                        embedder_factory=lambda name: embedder)
    client = TestClient(create_app(services=services))
    assert client.post("/api/repos", json={"name": "r"}).status_code == 201
    assert client.post("/api/repos/r/workspaces", json={"name": "w"}).status_code == 201
    for path, text in (("/poison", "a poison pill"), ("/fine", "a fine note")):
        assert client.put(f"/api/repos/r/workspaces/w/nodes{path}",
                          json={"properties": {"content": text}}).status_code == 201
    run = services.indexer.drain()
    assert (run.done, run.failed) == (1, 1)
    status = client.get("/api/repos/r/index/status").json()
    assert status["failed"] == 1 and status["failures"][0]["path"] == "/poison"
    assert status["failures"][0]["error"] == "the model rejected the text"
    # Retried while the cause is still there: it fails again, with its reason.
    assert client.post("/api/repos/r/index/retry-failed").json() == {"retried": 1}
    assert jobs(services, "pending") == 1
    assert services.indexer.drain().failed == 1 and jobs(services, "failed") == 1
    # The cause is gone: retried, it is embedded.
    embedder.broken = False
    assert client.post("/api/repos/r/index/retry-failed").json() == {"retried": 1}
    assert services.indexer.drain().done == 1
    assert found(services, "poison") == ["/poison"] and jobs(services) == 0
    assert client.post("/api/repos/r/index/retry-failed").json() == {"retried": 0}
    missing = client.post("/api/repos/nope/index/retry-failed")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    services.close()


def test_a_text_that_kills_its_indexer_every_time_still_ends_failed(db_url, tmp_path):
    """The poison pill guard holds: MAX_ATTEMPTS deaths while it ran alone (after the first,
    unattributed one) fail the text, with a reason naming the deaths; retry-failed re-queues it."""
    services = make_services(db_url, tmp_path, inline=False)
    context.run(services, context.OPERATOR, put_node, "r", "main", "w", "/oom", node_type="t",
                properties={"content": "an enormous table"})
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for kill in range(MAX_ATTEMPTS + 1):
        proc = subprocess.Popen([sys.executable, "-c", EMBED_AND_HANG, db_url, str(tmp_path / f"data{kill}")],
                                stdout=subprocess.PIPE, env=env, cwd=ROOT, text=True)
        try:
            assert proc.stdout.readline().strip() == "embedding"
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
    restarted = make_services_on(db_url, tmp_path / "restarted")
    assert restarted.indexer.run_pending().failed == 1
    row = job(restarted)
    assert (row.status, row.failures) == ("failed", MAX_ATTEMPTS)
    assert row.error.startswith(f"the indexer process died {MAX_ATTEMPTS} times")
    assert found(restarted, "enormous") == []
    assert context.run(restarted, context.OPERATOR, retry_failed_index, "r").retried == 1
    assert restarted.indexer.drain().done == 1 and found(restarted, "enormous") == ["/oom"]
    restarted.close()
    services.close()
