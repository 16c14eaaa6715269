"""Search with KG_INDEX=weaviate: the same API, Weaviate's own hybrid query echoed.

Runs through the real weaviate-client against the Weaviate-protocol test server (or the real
Weaviate of ``KG_TEST_WEAVIATE_URL``).
"""

from __future__ import annotations

import uuid

import pytest
from fastapi.testclient import TestClient

from kg.index.weaviate import WeaviateVectorIndex
from kg.providers.registry import make_embedder
from kg.services import Services
from kg.store.db import Database
from tests.api.test_nodes import assert_error

DOCS = {
    "/rotate": "To rotate an API key open settings and press rotate key. Old keys expire.",
    "/billing": "Invoices are sent monthly. Payment by card or bank transfer.",
    "/deploy": "A deploy fails when the build cache is stale. Clear the cache and retry.",
}


@pytest.fixture
def wclient(settings, weaviate_url):
    from api.app import create_app

    db = Database(settings.resolved_database_url())
    index = WeaviateVectorIndex(weaviate_url)
    services = Services(settings=settings, db=db, index=index, embedder_factory=lambda name: make_embedder(name))
    repo = f"w{uuid.uuid4().hex[:8]}"
    with TestClient(create_app(services=services)) as client:
        assert client.post("/api/repos", json={"name": repo}).status_code == 201
        assert client.post(f"/api/repos/{repo}/workspaces", json={"name": "knowledge"}).status_code == 201
        for path, text in DOCS.items():
            r = client.put(f"/api/repos/{repo}/workspaces/knowledge/nodes{path}", json={"properties": {"content": text}})
            assert r.status_code == 201, r.text
        yield client, repo
        client.delete(f"/api/repos/{repo}")


def test_hybrid_goes_through_weaviate_and_echoes_alpha(wclient):
    client, repo = wclient
    r = client.post(f"/api/repos/{repo}/search", json={"query": "rotate api key", "vector_weight": 3.0})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["fusion"] == {"engine": "weaviate", "alpha": 0.75, "fusion_type": "ranked"}
    top = body["results"][0]
    assert top["path"] == "/rotate" and top["vector_rank"] is None and top["fulltext_rank"] is None
    relative = client.post(f"/api/repos/{repo}/search", json={"query": "rotate api key",
                                                             "fusion_type": "relative_score"}).json()
    assert relative["fusion"]["fusion_type"] == "relative_score" and relative["results"][0]["path"] == "/rotate"
    # kg's own fusion on the same index: per-leg ranks
    kg = client.post(f"/api/repos/{repo}/search", json={"query": "rotate api key", "fusion": "kg"}).json()
    assert kg["fusion"]["engine"] == "kg"
    assert kg["results"][0]["path"] == "/rotate" and kg["results"][0]["fulltext_rank"] == 1
    # filters still apply before ranking (SQL decides the allowed content keys)
    only = client.post(f"/api/repos/{repo}/search", json={"query": "rotate api key", "path_prefix": "/billing"}).json()
    assert [row["path"] for row in only["results"]] == ["/billing"]
    assert_error(client.post(f"/api/repos/{repo}/search", json={"query": "x", "fusion": "kg", "fusion_type": "ranked"}), 422)


def test_a_branch_sees_its_own_text_through_weaviate(wclient):
    client, repo = wclient
    assert client.post(f"/api/repos/{repo}/branches", json={"name": "agent/w", "from": "main"}).status_code == 201
    r = client.put(f"/api/repos/{repo}/workspaces/knowledge/nodes/rotate?branch=agent/w",
                   json={"properties": {"content": "Keys are never rotated; they are revoked and reissued."}})
    assert r.status_code == 200, r.text
    on_branch = client.post(f"/api/repos/{repo}/search?branch=agent/w", json={"query": "revoked reissued", "k": 1}).json()
    assert on_branch["results"][0]["path"] == "/rotate" and "revoked" in on_branch["results"][0]["chunk_text"]
    on_main = client.post(f"/api/repos/{repo}/search", json={"query": "revoked reissued"}).json()
    assert all("revoked" not in row["chunk_text"] for row in on_main["results"])
