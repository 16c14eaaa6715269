"""Story: an agent's answers over a real ``kg serve`` process that is restarted (stopped with
SIGTERM, as a deploy does) right after the agent's last write. The new process reads every
write the old one acknowledged, its background indexer catches up on what was queued, and the
person reviews and merges the session branch on it: main ends as the reviewer was shown."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import FAKE_ASK_MIN_SIMILARITY, FAKE_MODEL
from tests.journeys.journey import Kg, Reviewer
from tests.serve import start_server, stop_server

SESSION = "agent/session-1"
ANSWER = "kb:/answers/rigging-interval"


class Server:
    """``kg serve`` on the test database, restartable."""

    def __init__(self, db_url: str, data_dir: Path) -> None:
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("KG_")}
        self.env.update({"KG_DATABASE_URL": db_url, "KG_DATA_DIR": str(data_dir), "KG_EMBEDDING_MODEL": FAKE_MODEL,
                         "KG_ALLOW_FAKE_EMBEDDER": "true", "KG_RAG_MAX_DISTANCE": "2.0",
                         "KG_ASK_MIN_SIMILARITY": str(FAKE_ASK_MIN_SIMILARITY), "OPENBLAS_NUM_THREADS": "1"})
        self.proc = None
        self.client: httpx.Client | None = None

    def start(self) -> httpx.Client:
        self.proc, base = start_server(self.env)
        self.client = httpx.Client(base_url=base, timeout=60)
        return self.client

    def stop(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None
        if self.proc is not None:
            stop_server(self.proc)
            self.proc = None


@pytest.fixture
def server(db_url: str, tmp_path: Path) -> Iterator[Server]:
    s = Server(db_url, tmp_path / "data")
    try:
        yield s
    finally:
        s.stop()


def test_acknowledged_writes_survive_a_restart_and_merge_as_reviewed(server: Server):
    kg = Kg(server.start(), "acme")
    kg.create("kb")
    kg.put("main", "kb:/docs/rigging", "kb:Doc",
           {"title": "Rigging", "content": "Standing rigging must be replaced every ten years in temperate waters."})
    kg.put("main", "kb:/docs/billing", "kb:Doc",
           {"title": "Billing", "content": "Invoices are issued on the first day of every month."})
    kg.branch(SESSION)
    kg.put(SESSION, ANSWER, "kb:Answer", {"question": "How often is standing rigging replaced?",
                                          "answer": "Every ten years in temperate waters [1]."})
    kg.relate(SESSION, ANSWER, "kb:/docs/rigging", "cites", properties={"markers": [1]})
    for n in range(5):
        kg.put(SESSION, f"kb:/answers/note-{n}", "kb:Answer",
               {"question": f"Note {n} of the session?", "answer": f"Session note number {n} about rigging."})
    server.stop()  # whatever the indexer had not embedded yet stays queued

    kg.client = server.start()
    for branch in ("main", SESSION):
        kg.check_acknowledged(branch)
        kg.check_searchable(branch)
    reviewer = Reviewer(kg)
    review = reviewer.review(SESSION)
    assert review.status == 200 and len(review.shown["applied"]["nodes"]["added"]) == 7  # /answers and 6 answers
    reviewer.merge(review)
    kg.check_acknowledged("main")
    kg.check_searchable("main")
    assert kg.search("main", "How often is standing rigging replaced?", node_type="kb:Answer")[0]["path"] == \
        "/answers/rigging-interval"
