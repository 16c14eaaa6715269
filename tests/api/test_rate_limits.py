"""Per-key limits of expensive calls (issue 12): a token bucket per API key, decided in the use
cases, answered 429 with ``Retry-After`` and the API's error shape. On SQLite and PostgreSQL.

The app's rate limiter is replaced by one on a fake clock, so that every figure is exact."""

from __future__ import annotations

import pytest

from kg.context import OPERATOR, run
from kg.ops import keys as key_ops
from kg.ratelimit import RateLimiter
from kg.settings import Settings
from tests.api.test_nodes import assert_error
from tests.conftest import FAKE_ASK_MIN_SIMILARITY, FAKE_MODEL

PEPPER = "a-pepper-for-the-rate-limit-tests"
NODE = "/api/repos/acme/workspaces/knowledge/nodes"
QUESTION = {"question": "What dividend did the board approve?"}
RAG_CONFIG = {"embeddingModel": FAKE_MODEL, "collectionName": "rag_collection", "chunkSize": 50, "chunkOverlap": 5,
              "topK": 2, "weaviateUrl": "embedded", "weaviateApiKey": ""}


class FakeClock:
    """A monotonic clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def settings(db_url, tmp_path) -> Settings:
    """Auth on (the conftest's ``services`` and ``client`` use these settings)."""
    return Settings(database_url=db_url, data_dir=tmp_path / "data", embedding_model=FAKE_MODEL,
                    index_inline=True, allow_fake_embedder=True, auth=True, key_pepper=PEPPER,
                    rag_max_distance=2.0,  # the fake embedder: no relevance cut (tests/conftest.py)
                    ask_min_similarity=FAKE_ASK_MIN_SIMILARITY)


@pytest.fixture
def clock(services) -> FakeClock:
    """3 expensive calls at once per key, then one every 20 s, on a fake clock."""
    fake = FakeClock()
    services.rate_limiter = RateLimiter(per_min=3, burst=3, clock=fake)
    return fake


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def keys(client, services, clock) -> dict[str, dict[str, str]]:
    """acme with a document, and four keys: admin, two readers of acme, one of another repo."""
    admin = bearer(run(services, OPERATOR, key_ops.create_key, name="admin", grants=[], admin=True).key)
    assert client.post("/api/repos", json={"name": "acme"}, headers=admin).status_code == 201
    assert client.post("/api/repos/acme/workspaces", json={"name": "knowledge"}, headers=admin).status_code == 201
    r = client.put(f"{NODE}/dividends", headers=admin, json={"node_type": "kb:Doc", "properties": {
        "content": "The board approved a quarterly dividend of 40 cents per share payable in March."}})
    assert r.status_code == 201, r.text
    made = {"admin": admin}
    for name, repo in (("alice", "acme"), ("bob", "acme"), ("eve", "other")):
        r = client.post("/api/keys", headers=admin, json={"name": name, "grants": [
            {"repo": repo, "branches": ["*"], "actions": ["read", "write"]}]})
        assert r.status_code == 201, r.text
        made[name] = bearer(r.json()["key"])
    return made


def ask(client, headers, *, name="ask", payload=None, **body):
    return client.post(f"/api/functions/acme/{name}/invoke", headers=headers,
                       json={"input": QUESTION if payload is None else payload, **body})


def test_the_call_past_the_burst_is_429_with_retry_after_and_another_key_is_unaffected(client, keys, clock):
    for _ in range(3):
        r = ask(client, keys["alice"])
        assert r.status_code == 200, r.text
        assert r.json()["grounded"] is True
    refused = ask(client, keys["alice"])
    assert_error(refused, 429, "rate_limited")
    assert refused.headers["Retry-After"] == "20"  # one token, at 3 a minute
    details = refused.json()["error"]["details"]
    assert details == {"call": "ask", "retry_after_s": 20.0, "per_min": 3.0, "burst": 3}
    assert ask(client, keys["bob"]).status_code == 200
    clock.now += 7  # 0.35 token: 13 s to go, and a refused call is not charged
    again = ask(client, keys["alice"])
    assert again.status_code == 429 and again.headers["Retry-After"] == "13"
    assert again.json()["error"]["details"]["retry_after_s"] == 13.0
    clock.now += 13
    assert ask(client, keys["alice"]).status_code == 200
    assert ask(client, keys["alice"]).status_code == 429


def test_a_fractional_wait_is_rounded_up_to_whole_seconds(client, keys, clock):
    for _ in range(3):
        assert ask(client, keys["alice"]).status_code == 200
    clock.now += 0.5  # 19.5 s to go
    r = ask(client, keys["alice"])
    assert r.headers["Retry-After"] == "20" and r.json()["error"]["details"]["retry_after_s"] == 19.5


def test_a_queued_job_is_charged_once_when_submitted(client, keys, clock, services):
    queued = ask(client, keys["alice"], wait_for_completion=False)
    assert queued.status_code == 202, queued.text
    job = client.get(f"/api/jobs/{queued.json()['job_id']}", headers=keys["alice"]).json()
    assert job["state"] == "succeeded", job  # run inline, by the runner: not charged again
    assert services.rate_limiter.remaining("key:" + job_key_id(services, "alice")) == 2.0
    assert ask(client, keys["alice"]).status_code == 200
    assert ask(client, keys["alice"], wait_for_completion=False).status_code == 202
    refused = ask(client, keys["alice"], wait_for_completion=False)
    assert_error(refused, 429, "rate_limited")
    assert refused.headers["Retry-After"] == "20"


def job_key_id(services, name: str) -> str:
    (key,) = [k for k in key_ops.list_keys(services, OPERATOR).keys if k.name == name]
    return key.id


def test_cheap_functions_and_refused_calls_are_not_charged(client, keys, clock):
    for _ in range(5):
        r = ask(client, keys["alice"], name="search-documents", payload={"query": "dividend"})
        assert r.status_code == 200, r.text
    # a key that cannot see acme gets the 404 an unknown repository gets, and keeps its tokens
    for _ in range(5):
        assert_error(ask(client, keys["eve"]), 404, "not_found")
    assert_error(ask(client, keys["alice"], payload={"question": "x", "typo": 1}), 422)
    rag = {"config": {**RAG_CONFIG, "chunkSize": 1, "chunkOverlap": 0}, "input": "q\n\n### File name \"a.txt\"\n"
           + "word " * 30_000}
    assert_error(client.post("/api/rag", headers=keys["admin"], json=rag), 413)  # not charged either
    assert_error(client.post("/api/rag", headers=keys["admin"],
                             json={"config": {**RAG_CONFIG, "weaviateUrl": "http://10.0.0.1:8080"}, "input": "q"}), 422)
    for who in ("alice", "admin"):
        for _ in range(3):
            assert ask(client, keys[who]).status_code == 200
        assert ask(client, keys[who]).status_code == 429


def test_extract_entities_re_embed_and_the_rag_node_share_the_bucket(client, keys, clock):
    admin = keys["admin"]
    r = ask(client, admin, name="extract-entities", payload={"workspace": "knowledge", "path": "/dividends"})
    assert r.status_code == 200, r.text
    r = client.patch("/api/repos/acme/workspaces/knowledge", headers=admin,
                     json={"embedding": {"model": "fake:hash-32"}, "reembed": True})
    assert r.status_code == 200, r.text
    r = client.post("/api/rag", headers=admin, json={"config": RAG_CONFIG, "input": "what?"})
    assert r.status_code == 200, r.text
    for refused in (ask(client, admin),
                    client.patch("/api/repos/acme/workspaces/knowledge", headers=admin,
                                 json={"embedding": {"model": FAKE_MODEL}, "reembed": True})):
        assert_error(refused, 429, "rate_limited")
        assert refused.headers["Retry-After"] == "20"
    # a model check without reembed is no expensive call
    same = client.patch("/api/repos/acme/workspaces/knowledge", headers=admin,
                        json={"embedding": {"model": "fake:hash-32"}})
    assert same.status_code == 200 and same.json()["reembedded"] is False
