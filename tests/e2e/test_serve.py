"""End to end: a real ``kg serve`` process on a loopback port, with the real offline embedder."""

from __future__ import annotations

import os
import time

import httpx
import pytest

from tests.serve import start_server, stop_server


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data = tmp_path_factory.mktemp("serve")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KG_")}
    env.update({"KG_DATA_DIR": str(data), "OPENBLAS_NUM_THREADS": "1"})
    proc, base = start_server(env)
    yield httpx.Client(base_url=base, timeout=60)
    stop_server(proc)


DOCS = {
    "/rigging": "Standing rigging must be replaced every ten years in temperate waters.",
    "/billing": "Invoices are issued on the first day of every month and are payable by card.",
    "/keys": "To rotate an API key, open the settings page and create a new key, then revoke the old one.",
}


def test_real_server_real_embedder(server):
    assert server.post("/api/repos", json={"name": "e2e"}).status_code == 201
    assert server.post("/api/repos/e2e/workspaces", json={"name": "kb"}).status_code == 201
    for path, text in DOCS.items():
        r = server.put(f"/api/repos/e2e/workspaces/kb/nodes{path}", json={"node_type": "kb:Article",
                                                                          "properties": {"content": text}})
        assert r.status_code == 201, r.text
    # writes are answered once stored; the background indexer embeds them
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status = server.get("/api/repos/e2e/index/status").json()
        if status["pending"] == 0 and status["running"] == 0:
            break
        time.sleep(0.1)
    assert status["failed"] == 0
    # a paraphrase with no word in common with the answer: only the vector leg can find it
    r = server.post("/api/repos/e2e/search", json={"query": "how often should a sailboat's wires be changed",
                                                   "mode": "vector", "k": 3})
    assert r.status_code == 200, r.text
    rows = r.json()["results"]
    assert rows[0]["path"] == "/rigging"
    assert 0 <= rows[0]["vector_distance"] < rows[1]["vector_distance"]
    ws = server.get("/api/repos/e2e/workspaces/kb").json()
    assert ws["embedding"]["model"] == "local:all-MiniLM-L6-v2"
    # branch isolation through the real server, branch name with '/'
    assert server.post("/api/repos/e2e/branches", json={"name": "agent/demo"}).status_code == 201
    r = server.put("/api/repos/e2e/workspaces/kb/nodes/answer", params={"branch": "agent/demo"},
                   json={"node_type": "kb:Answer", "properties": {"content": "Every ten years."}})
    assert r.status_code == 201
    assert server.get("/api/repos/e2e/workspaces/kb/nodes/answer").status_code == 404
    assert server.get("/api/repos/e2e/workspaces/kb/nodes/answer", params={"branch": "agent/demo"}).status_code == 200
    assert server.get("/api/repos/e2e/branches/agent%2Fdemo").json()["name"] == "agent/demo"
