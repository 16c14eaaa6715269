"""The RAG node endpoint: the lifecycle table row by row, validation, naming, output."""

from __future__ import annotations

from kg.settings import Settings
from tests.api.test_nodes import assert_error

CONFIG = {"embeddingModel": "fake:hash-64", "collectionName": "rag_collection", "chunkSize": 8,
          "chunkOverlap": 2, "topK": 3, "weaviateUrl": "embedded", "weaviateApiKey": ""}

DOC_A = "Standing rigging must be replaced every ten years in temperate waters and seven in the tropics."
DOC_B = "Invoices are issued monthly and paid by card. Late invoices incur a fee of two percent."


def rag(client, text, **config):
    return client.post("/api/rag", json={"config": {**CONFIG, **config}, "input": text})


def doc(query, files):
    blocks = "".join(f'\n\n### File name "{name}"\n{content}' for name, content in files)
    return f"Using the attached document, answer:\n\n{query}{blocks}"


def test_lifecycle_table_row_by_row(client, services):
    embedder = services.embedder("fake:hash-64")
    # new: inserted
    r = rag(client, doc("How often is rigging replaced?", [("rigging.txt", DOC_A), ("billing.md", DOC_B)]))
    assert r.status_code == 200, r.text
    body = r.json()
    assert sorted(body["ingestion"]["inserted"]) == ["billing.md", "rigging.txt"]
    assert body["context"].startswith("[1] (rigging.txt)\n")
    assert all(block.startswith(f"[{i}] (") for i, block in enumerate(body["context"].split("\n\n"), start=1))
    calls = embedder.calls
    # unchanged: skipped, no embedding call for the files (one for the query)
    r = rag(client, doc("rigging", [("rigging.txt", DOC_A)]))
    assert r.json()["ingestion"] == {"inserted": [], "skipped": ["rigging.txt"], "replaced": []}
    assert embedder.calls == calls + 1
    # changed: replaced, the old text is gone from retrieval
    r = rag(client, doc("quokka", [("rigging.txt", "Only quokka facts live here now, nothing else at all.")]))
    assert r.json()["ingestion"]["replaced"] == ["rigging.txt"]
    texts = [x["content"] for x in rag(client, "temperate tropics rigging", topK=10).json()["results"]]
    assert not any("temperate" in t for t in texts)
    # removed from input: kept
    kept = rag(client, "invoices monthly card fee").json()
    assert any(x["file"] == "billing.md" for x in kept["results"])
    # query only: retrieval over what is stored, nothing ingested
    assert kept["ingestion"] == {"inserted": [], "skipped": [], "replaced": []}


def test_model_change_reembeds_the_collection(client):
    """The issue's row "model changed: collection re-embedded": every file the collection
    holds is re-embedded from SQL (b.txt, absent from this input, is kept: "removed from input:
    kept"), then the input's files are ingested as usual."""
    rag(client, doc("q", [("a.txt", DOC_A), ("b.txt", DOC_B)]))
    r = rag(client, doc("rigging", [("a.txt", DOC_A)]), embeddingModel="fake:hash-32")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["collection"]["model_changed"] is True
    assert body["ingestion"]["reembedded"] == ["a.txt", "b.txt"]
    assert body["ingestion"]["skipped"] == ["a.txt"] and body["ingestion"]["inserted"] == []
    found = rag(client, "invoices rigging", embeddingModel="fake:hash-32", topK=10).json()
    assert {x["file"] for x in found["results"]} == {"a.txt", "b.txt"}
    assert found["collection"]["model_changed"] is False


def test_a_model_change_to_a_model_that_cannot_embed_changes_nothing(client):
    """A query-only call naming an unreachable model must not empty the collection."""
    rag(client, doc("q", [("a.txt", DOC_A), ("b.txt", DOC_B)]))
    r = rag(client, "invoices", embeddingModel="nomic-embed-text")  # no Ollama server here
    assert r.status_code in (502, 503), r.text
    assert r.json()["error"]["code"] in ("backend_unavailable", "upstream_unavailable", "provider_error")
    after = rag(client, "invoices rigging", topK=10).json()
    assert after["collection"]["model_changed"] is False
    assert {x["file"] for x in after["results"]} == {"a.txt", "b.txt"}


def test_no_relevant_chunks_gives_null_context(client):
    r = rag(client, "anything at all")
    assert r.status_code == 200 and r.json()["context"] is None and r.json()["results"] == []


def test_config_is_validated_exactly(client):
    for bad in [{"chunkSize": 0}, {"chunkOverlap": -1}, {"topK": 0}, {"chunkSize": 5, "chunkOverlap": 5},
                {"chunkSize": 5, "chunkOverlap": 6}, {"chunkSize": "5"}, {"chunkSize": True}, {"extra": 1}]:
        assert_error(rag(client, "q", **bad), 422)
    missing = dict(CONFIG)
    del missing["weaviateUrl"]
    assert_error(client.post("/api/rag", json={"config": missing, "input": "q"}), 422)
    assert_error(rag(client, "q", chunkSize=5, chunkOverlap=5), 422)
    assert "chunkOverlap" in rag(client, "q", chunkSize=5, chunkOverlap=5).json()["error"]["message"]


def test_collection_names_that_collide_or_are_invalid_are_refused(client):
    assert rag(client, doc("q", [("a.txt", DOC_A)])).status_code == 200
    assert_error(rag(client, "q", collectionName="rag-collection"), 409)
    assert_error(rag(client, "q", collectionName="RAG_collection"), 409)
    for bad in ["", "123abc", "collé", "___"]:
        assert_error(rag(client, "q", collectionName=bad), 422)


def test_other_weaviate_url_is_502_never_a_fallback(client, services, monkeypatch):
    r = rag(client, doc("q", [("a.txt", DOC_A)]), weaviateUrl="http://127.0.0.1:9")
    assert_error(r, 422, "invalid_input")  # not listed in KG_RAG_WEAVIATE_URLS
    monkeypatch.setattr(services.settings, "rag_weaviate_urls", ["http://127.0.0.1:9"])
    r = rag(client, doc("q", [("a.txt", DOC_A)]), weaviateUrl="http://127.0.0.1:9")
    assert_error(r, 502, "upstream_unavailable")
    assert rag(client, "rigging").json()["results"] == []


def test_failing_model_writes_nothing(client):
    r = rag(client, doc("q", [("a.txt", DOC_A)]), embeddingModel="ollama:nomic-embed-text:latest")
    assert r.status_code in (502, 503)
    assert rag(client, "rigging").json()["results"] == []


def test_a_branch_before_the_nodes_repository_exists_says_how_it_comes_to_be(client):
    """Found by a new-user pass: the answer was "repository 'rag' not found", naming nothing the
    caller had asked for."""
    body = {"config": CONFIG, "input": doc("q", [("a.txt", "words")])}
    r = client.post("/api/rag?branch=agent/x", json=body)
    assert_error(r, 404, "not_found")
    error = r.json()["error"]
    assert "'agent/x'" in error["message"] and "first call on main" in error["message"]
    assert error["details"] == {"branch": "agent/x", "repository": "rag"}
    assert rag(client, doc("q", [("a.txt", "words")])).status_code == 200  # main creates it
    r = client.post("/api/rag?branch=agent/x", json=body)
    assert_error(r, 404, "not_found")
    assert r.json()["error"]["details"] == {"branch": "agent/x"}  # now only the branch is missing


def test_a_client_cannot_pick_a_huge_embedding_dimension(client):
    from kg.providers.base import MAX_EMBEDDING_DIM

    client.post("/api/repos", json={"name": "big"})
    r = client.post("/api/repos/big/workspaces", json={"name": "w", "embedding": {"model": "fake:hash-10000000"}})
    assert_error(r, 422, "invalid_input")
    assert str(MAX_EMBEDDING_DIM) in r.json()["error"]["message"]
    assert client.get("/api/repos/big/workspaces").json()["workspaces"] == []
    r = rag(client, doc("q", [("a.txt", DOC_A)]), embeddingModel="fake:hash-10000000")
    assert_error(r, 422, "invalid_input")
    assert str(MAX_EMBEDDING_DIM) in r.json()["error"]["message"]


def test_the_fake_embedder_is_refused_unless_the_test_setting_enables_it(tmp_path):
    from fastapi.testclient import TestClient

    from api.app import create_app
    from kg.services import Services
    from kg.settings import Settings

    settings = Settings(data_dir=tmp_path / "prod", index_inline=True)
    assert settings.allow_fake_embedder is False
    with TestClient(create_app(services=Services.from_settings(settings))) as prod:
        prod.post("/api/repos", json={"name": "acme"})
        r = prod.post("/api/repos/acme/workspaces", json={"name": "w", "embedding": {"model": "fake:hash-64"}})
        assert_error(r, 422, "invalid_input")
        assert "KG_ALLOW_FAKE_EMBEDDER" in r.json()["error"]["message"]
        assert_error(rag(prod, doc("q", [("a.txt", DOC_A)])), 422, "invalid_input")


def test_chunks_per_request_are_bounded_and_nothing_is_written(client, services, monkeypatch):
    monkeypatch.setattr(services.settings, "max_chunks_per_request", 50)
    words = " ".join(f"w{i}" for i in range(100))  # chunkSize 1: 100 chunks
    r = rag(client, doc("q", [("a.txt", words)]), chunkSize=1, chunkOverlap=0)
    assert_error(r, 413, "too_large")
    body = r.json()["error"]
    assert "KG_MAX_CHUNKS_PER_REQUEST" in body["message"]
    assert body["details"] == {"chunks": 100, "max_chunks_per_request": 50}
    assert client.get("/api/repos/rag/log").status_code in (404, 200)
    if client.get("/api/repos/rag/log").status_code == 200:
        assert client.get("/api/repos/rag/log").json()["revisions"] == []
    # at the bound: served
    r = rag(client, doc("q", [("a.txt", " ".join(words.split()[:50]))]), chunkSize=1, chunkOverlap=0)
    assert r.status_code == 200, r.text


SAILING = [("rigging.txt", "Standing rigging must be replaced every ten years in temperate waters and every seven "
                           "years in the tropics. Inspect the swage fittings and the chainplates for cracks and "
                           "rust every season."),
           ("sails.txt", "Reef the mainsail early when the wind rises above twenty knots. A furling genoa should "
                         "be rolled away before the sheets chafe on the shrouds.")]


def test_an_off_topic_question_gets_a_null_context_not_the_nearest_chunks(client, services):
    """Regression: a football question on a sailing collection returned four rigging
    chunks at distances 0.84 to 0.95; the contract says null when nothing relevant is found."""
    services.settings = services.settings.model_copy(
        update={"rag_max_distance": Settings.model_fields["rag_max_distance"].default})
    config = {"embeddingModel": "local:all-MiniLM-L6-v2", "chunkSize": 200, "chunkOverlap": 20, "topK": 4}
    r = rag(client, doc("How often must standing rigging be replaced?", SAILING), **config)
    assert r.status_code == 200, r.text
    on = r.json()
    assert on["context"].startswith("[1] (rigging.txt)\n")
    assert all(x["distance"] <= 0.6 for x in on["results"])
    off = rag(client, "Who won the football world cup final?", **config).json()
    assert off["context"] is None and off["results"] == []


def test_a_persons_edit_of_a_file_node_survives_the_files_next_ingests(client, services):
    """The RAG node ingests as ``kg ingest`` does: an unchanged file is skipped even though its
    node was edited; a changed file is merged, the property both changed keeping the edit."""
    from kg.context import OPERATOR, run
    from kg.ops.nodes import patch_node
    from kg.store.nodes import find_node
    from kg.store.repos import branch_view

    first = rag(client, doc("rigging", [("rigging.txt", DOC_A)])).json()
    path = first["results"][0]["path"]
    with services.db.read() as s:
        (workspace,) = branch_view(s, "rag", "main").workspaces.values()
    run(services, OPERATOR, patch_node, "rag", "main", workspace, path,
        properties={"content": "Rigging: see the surveyor's report.", "reviewed": True})

    def stored():
        with services.db.read() as s:
            return find_node(s, branch_view(s, "rag", "main"), workspace, path).properties

    again = rag(client, doc("rigging", [("rigging.txt", DOC_A)])).json()
    assert again["ingestion"] == {"inserted": [], "skipped": ["rigging.txt"], "replaced": []}
    assert stored()["content"] == "Rigging: see the surveyor's report."
    changed = rag(client, doc("rigging", [("rigging.txt", DOC_A + " Check it yearly.")])).json()
    assert changed["ingestion"]["replaced"] == ["rigging.txt"]
    assert changed["ingestion"]["kept_edits"] == [{"file": "rigging.txt", "key": "content",
                                                   "kept": "Rigging: see the surveyor's report.",
                                                   "file_value": DOC_A + " Check it yearly."}]
    props = stored()
    assert (props["content"], props["reviewed"]) == ("Rigging: see the surveyor's report.", True)
