"""Search's reranking stage (``rerank``): off without a reranker, on by default with one, the
fused candidates reordered by its scores, a failing reranker leaving the fused order with a
warning; with the fake reranker and with the Ollama reranker against the Ollama test server."""

from __future__ import annotations

import json

import pytest

from kg.providers.fake import FakeReranker
from kg.providers.rerank import OllamaReranker, make_reranker
from tests.api.test_nodes import put
from tests.ollama_server import OllamaTestServer

DOCS = {
    "/a": ("Alpha", "zebra zebra zebra zebra migration"),
    "/b": ("Beta", "zebra migration across the plains of the serengeti"),
    "/c": ("Gamma", "the serengeti plains in the dry season"),
}


def seed(client):
    for path, (title, body) in DOCS.items():
        assert put(client, path, {"title": title, "content": body}).status_code == 201


def search(client, **body):
    r = client.post("/api/repos/acme/search", json={"k": 3, "granularity": "node", **body})
    assert r.status_code == 200, r.text
    return r.json()


def test_without_a_reranker_search_is_not_reranked_and_rerank_true_is_refused(client, repo):
    seed(client)
    answer = search(client, query="zebra migration")
    assert "rerank" not in answer
    assert all("rerank_score" not in row for row in answer["results"])
    r = client.post("/api/repos/acme/search", json={"query": "zebra", "rerank": True})
    assert r.status_code == 422
    assert "reranker" in r.json()["error"]["message"]


def test_a_configured_reranker_reorders_by_default(client, repo, services):
    seed(client)
    services.reranker = FakeReranker()
    query = "serengeti plains dry season"
    plain = search(client, query=query, rerank=False)
    assert "rerank" not in plain
    reranked = search(client, query=query)
    assert reranked["rerank"]["model"] == "fake:overlap"
    assert reranked["rerank"]["depth"] == 3
    rows = reranked["results"]
    assert rows[0]["path"] == "/c"
    scores = [row["rerank_score"] for row in rows]
    assert scores == sorted(scores, reverse=True)
    # The fused rows keep their legs' ranks and score; only the order changed.
    assert {r["path"]: r["score"] for r in rows} == {r["path"]: r["score"] for r in plain["results"]}


def test_rerank_reads_deeper_than_k(client, repo, services):
    seed(client)
    services.reranker = FakeReranker()
    services.settings.rerank_depth = 3
    rows = search(client, query="serengeti plains dry season", k=1, mode="vector")["results"]
    assert [r["path"] for r in rows] == ["/c"]
    assert search(client, query="serengeti plains dry season", k=1)["rerank"]["depth"] == 3


def test_rerank_applies_at_chunk_granularity_and_in_every_mode(client, repo, services):
    seed(client)
    services.reranker = FakeReranker()
    for mode in ("vector", "fulltext", "hybrid"):
        answer = search(client, query="serengeti dry season", mode=mode, granularity="chunk")
        assert answer["rerank"]["model"] == "fake:overlap", mode
        assert answer["results"][0]["path"] == "/c", mode


@pytest.fixture
def ollama():
    with OllamaTestServer() as server:
        yield server


def test_the_ollama_reranker_orders_by_the_models_scores(client, repo, services, ollama):
    seed(client)
    services.reranker = OllamaReranker("qwen3:4b", host=ollama.url, retry_wait_s=0)

    def reply(body):
        listed = body["messages"][1]["content"]
        # One score per numbered passage: 9 for the passage about the dry season, else 1.
        passages = [p for p in listed.split("\n\n") if p.startswith("[")]
        return json.dumps({"scores": [9 if "dry season" in p else 1 for p in passages]})

    ollama.script_chat(reply)
    answer = search(client, query="when is the dry season")
    assert answer["rerank"]["model"] == "ollama:qwen3:4b"
    assert answer["results"][0]["path"] == "/c"
    assert answer["results"][0]["rerank_score"] == 9
    sent = ollama.recorded("/api/chat")[-1].body
    assert sent["format"]["properties"]["scores"]["minItems"] == len(answer["results"])
    assert "Query: when is the dry season" in sent["messages"][1]["content"]


def test_a_failing_reranker_keeps_the_fused_order_with_a_warning(client, repo, services, ollama):
    seed(client)
    services.reranker = OllamaReranker("qwen3:4b", host=ollama.url, retry_wait_s=0)
    plain = search(client, query="zebra migration", rerank=False)["results"]
    ollama.script_chat(json.dumps({"scores": [1]}))  # one score for three passages
    answer = search(client, query="zebra migration")
    assert "rerank" not in answer
    assert [r["path"] for r in answer["results"]] == [r["path"] for r in plain]
    (warning,) = answer["warnings"]
    assert warning["leg"] == "rerank" and warning["model"] == "ollama:qwen3:4b"
    ollama.fail_next("status", path="/api/chat", times=5)
    answer = search(client, query="zebra migration")
    assert answer["warnings"][0]["leg"] == "rerank"
    assert [r["path"] for r in answer["results"]] == [r["path"] for r in plain]


def test_make_reranker_names():
    assert make_reranker("none") is None
    assert make_reranker(None) is None
    assert make_reranker("ollama:qwen3:4b").name == "ollama:qwen3:4b"
    assert make_reranker("fake:overlap", allow_fake=True).name == "fake:overlap"
    from kg.errors import InvalidInput

    for bad in ("fake:overlap", "local:cross-encoder", "ollama:"):
        with pytest.raises(InvalidInput):
            make_reranker(bad)
