"""The model lock of a workspace (409 model_locked) and re-embedding it from SQL (CASES #9)."""

from __future__ import annotations

from sqlalchemy import select

from kg.store.models import Chunk, NodeVersion, Workspace
from tests.api.test_nodes import assert_error, put
from tests.conftest import FAKE_MODEL

OTHER = "fake:other-64"  # same dimension as FAKE_MODEL: the lock is by name, not by dimension


def patch_ws(client, body):
    return client.patch("/api/repos/acme/workspaces/knowledge", json=body)


def vector_search(client, query, **params):
    r = client.post("/api/repos/acme/search", params=params,
                    json={"query": query, "mode": "vector", "granularity": "node", "k": 5})
    assert r.status_code == 200, r.text
    return r.json()["results"]


def chunk_models(services) -> set[str]:
    """Models of the chunks the workspace's current node versions point at."""
    with services.db.read() as session:
        keys = set(session.scalars(select(NodeVersion.content_key)
                                   .join(Workspace, Workspace.id == NodeVersion.workspace_id)
                                   .where(Workspace.name == "knowledge", NodeVersion.content_key.is_not(None))))
        return set(session.scalars(select(Chunk.model).where(Chunk.content_key.in_(keys))))


def test_another_model_is_409_naming_the_locked_one(client, repo, services):
    assert put(client, "/a", {"content": "Rotate the API key every ninety days."}).status_code == 201
    r = patch_ws(client, {"embedding": {"model": OTHER}})
    assert_error(r, 409, "model_locked")
    err = r.json()["error"]
    assert err["details"]["locked_model"] == FAKE_MODEL and FAKE_MODEL in err["message"]
    assert client.get("/api/repos/acme/workspaces/knowledge").json()["embedding"]["model"] == FAKE_MODEL
    assert chunk_models(services) == {FAKE_MODEL}
    # a chunking change rebuilds every chunk too: also refused without reembed
    assert_error(patch_ws(client, {"embedding": {"chunking": {"chunk_size": 100, "overlap": 10}}}), 409, "model_locked")
    # a model of another dimension: refused the same way (CASES #9: by name, not by dimension)
    assert_error(patch_ws(client, {"embedding": {"model": "fake:hash-32"}}), 409, "model_locked")
    same = patch_ws(client, {"embedding": {"model": FAKE_MODEL}})
    assert same.status_code == 200 and same.json()["reembedded"] is False


def test_reembed_rebuilds_the_workspace_without_mixing_vectors(client, repo, services):
    assert put(client, "/a", {"content": "Rotate the API key every ninety days."}).status_code == 201
    assert put(client, "/b", {"content": "Invoices are sent monthly."}).status_code == 201
    assert put(client, "/a", {"content": "Rotate the API key every thirty days."}).status_code == 200
    assert client.post("/api/repos/acme/branches", json={"name": "agent/x", "from": "main"}).status_code == 201
    old_revision = client.get("/api/repos/acme/log").json()["revisions"][0]["revision"]
    before = vector_search(client, "rotate key")
    assert before and before[0]["path"] == "/a"

    r = patch_ws(client, {"embedding": {"model": OTHER}, "reembed": True})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["reembedded"] is True and out["embedding"]["model"] == OTHER
    assert out["node_versions"] == 3 and out["queued"] == 3  # every version, history included
    assert client.get("/api/repos/acme/index/status").json()["pending"] == 0
    assert chunk_models(services) == {OTHER}
    assert client.get("/api/repos/acme/workspaces/knowledge").json()["embedding"]["model"] == OTHER
    for params in ({}, {"branch": "agent/x"}, {"at_revision": old_revision}):
        rows = vector_search(client, "rotate key", **params)
        assert rows and rows[0]["path"] == "/a", params
    # new writes use the new model
    assert put(client, "/c", {"content": "Deploys fail on a stale cache."}).status_code == 201
    assert chunk_models(services) == {OTHER}


def test_reembed_refuses_an_unknown_model_and_changes_nothing(client, repo, services):
    assert put(client, "/a", {"content": "Rotate the API key."}).status_code == 201
    assert_error(patch_ws(client, {"embedding": {"model": "fake:hash-0"}, "reembed": True}), 422)
    assert_error(patch_ws(client, {"embedding": {"model": OTHER}, "reembed": "yes"}), 422)
    assert_error(patch_ws(client, {"embedding": {"bogus": 1}, "reembed": True}), 422)
    assert_error(client.patch("/api/repos/acme/workspaces/nope", json={"embedding": {"model": OTHER}}), 404)
    assert chunk_models(services) == {FAKE_MODEL}


def test_a_model_name_longer_than_the_store_keeps_is_422(client, repo, services):
    # Was accepted (201 / 200), then on PostgreSQL every text of the workspace failed to index
    # (chunks.model is VARCHAR(255)): search found nothing, index/status listed failures.
    long_fake, long_ollama = "fake:" + "h" * 251, "m" * 250  # 256 and (ollama: + :latest) 264
    for model in (long_fake, long_ollama):
        r = client.post("/api/repos/acme/workspaces", json={"name": "w2", "embedding": {"model": model}})
        assert_error(r, 422)
        assert "255" in r.json()["error"]["message"]
        assert_error(patch_ws(client, {"embedding": {"model": model}, "reembed": True}), 422)
    assert [w["name"] for w in client.get("/api/repos/acme/workspaces").json()["workspaces"]] == ["knowledge"]
    config = {"embeddingModel": long_fake, "collectionName": "kcol", "chunkSize": 8, "chunkOverlap": 2,
              "topK": 3, "weaviateUrl": "embedded"}
    assert_error(client.post("/api/rag", json={"config": config, "input": 'q\n\n### File name "k.txt"\nwords'}), 422)
    ok = "fake:" + "h" * 250  # 255 characters: kept, and indexed
    assert client.post("/api/repos/acme/workspaces", json={"name": "w3", "embedding": {"model": ok}}).status_code == 201
    r = client.put("/api/repos/acme/workspaces/w3/nodes/a", json={"properties": {"content": "Rotate the API key."}})
    assert r.status_code == 201
    assert client.get("/api/repos/acme/index/status").json()["failed"] == 0
    hits = client.post("/api/repos/acme/search", json={"query": "rotate", "workspaces": ["w3"], "mode": "vector"})
    assert [h["path"] for h in hits.json()["results"]][:1] == ["/a"]


def test_reembed_to_a_model_that_cannot_embed_changes_nothing(client, repo, services):
    """The new model must answer before anything changes (an Ollama name resolves without
    contacting the server; none runs here)."""
    assert put(client, "/a", {"content": "Rotate the API key."}).status_code == 201
    r = patch_ws(client, {"embedding": {"model": "ollama:nomic-embed-text"}, "reembed": True})
    assert r.status_code == 503, r.text
    assert client.get("/api/repos/acme/workspaces/knowledge").json()["embedding"]["model"] == FAKE_MODEL
    assert chunk_models(services) == {FAKE_MODEL}
    assert client.get("/api/repos/acme/index/status").json()["pending"] == 0
    assert vector_search(client, "rotate key")[0]["path"] == "/a"


def test_reembedding_is_blue_green_nothing_becomes_unsearchable(client, repo, services, monkeypatch):
    """The new model's vectors are built beside the old ones; searches and writes go on with the
    old model until every text is embedded, then one transaction switches (the gap of the first
    design: text unsearchable until re-embedded)."""
    services.indexer.stop()  # nothing is embedded until drain() below
    monkeypatch.setattr(services, "settings", services.settings.model_copy(update={"index_inline": False}))
    assert put(client, "/a", {"content": "Rotate the API key every ninety days."}).status_code == 201
    assert put(client, "/b", {"content": "Invoices are sent monthly."}).status_code == 201
    services.indexer.drain()

    r = patch_ws(client, {"embedding": {"model": OTHER}, "reembed": True})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["reembedded"] is True and out["switched"] is False and out["queued"] == 2
    ws = client.get("/api/repos/acme/workspaces/knowledge").json()
    assert ws["embedding"]["model"] == FAKE_MODEL and ws["reembedding"]["embedding"]["model"] == OTHER
    # Still searchable with the current model while the new vectors are built.
    assert vector_search(client, "rotate key")[0]["path"] == "/a"
    assert chunk_models(services) == {FAKE_MODEL}
    # A write during the re-embed: embedded now under the current model, later under the new one.
    assert put(client, "/c", {"content": "Deploys fail on a stale cache."}).status_code == 201
    services.indexer.drain()
    assert vector_search(client, "stale cache deploys")[0]["path"] == "/c"

    ws = client.get("/api/repos/acme/workspaces/knowledge").json()
    assert ws["embedding"]["model"] == OTHER and ws["reembedding"] is None
    assert chunk_models(services) == {OTHER}
    for query, path in (("rotate key", "/a"), ("invoices monthly", "/b"), ("stale cache deploys", "/c")):
        assert vector_search(client, query)[0]["path"] == path
    status = client.get("/api/repos/acme/index/status").json()
    assert status["pending"] == 0 and status["failed"] == 0


def test_asking_for_the_current_settings_cancels_a_reembed_under_way(client, repo, services, monkeypatch):
    services.indexer.stop()
    monkeypatch.setattr(services, "settings", services.settings.model_copy(update={"index_inline": False}))
    assert put(client, "/a", {"content": "Rotate the API key every ninety days."}).status_code == 201
    services.indexer.drain()
    assert patch_ws(client, {"embedding": {"model": OTHER}, "reembed": True}).json()["switched"] is False
    cancel = patch_ws(client, {"embedding": {"model": FAKE_MODEL}})
    assert cancel.status_code == 200 and cancel.json()["reembedded"] is False
    services.indexer.drain()  # the queued job is obsolete: dropped, not failed
    ws = client.get("/api/repos/acme/workspaces/knowledge").json()
    assert ws["embedding"]["model"] == FAKE_MODEL and ws["reembedding"] is None
    status = client.get("/api/repos/acme/index/status").json()
    assert status["pending"] == 0 and status["failed"] == 0
    assert chunk_models(services) == {FAKE_MODEL}
    assert vector_search(client, "rotate key")[0]["path"] == "/a"


def _queue_only(services, monkeypatch):
    """Nothing is embedded until the test drains the queue."""
    services.indexer.stop()
    monkeypatch.setattr(services, "settings", services.settings.model_copy(update={"index_inline": False}))


def test_a_branch_deleted_during_a_reembed_leaves_mains_text_searchable(client, repo, services, monkeypatch):
    """Found by a breaker pass: the text's one job was tied to the branch's version; deleting the
    branch failed the job and the switch left main's node without chunks."""
    _queue_only(services, monkeypatch)
    text = {"content": "Zebra crossings share this text."}
    assert client.post("/api/repos/acme/branches", json={"name": "x", "from": "main"}).status_code == 201
    assert put(client, "/b", text, branch="x").status_code == 201
    services.indexer.drain()
    assert put(client, "/m", text).status_code == 201
    assert patch_ws(client, {"embedding": {"model": OTHER}, "reembed": True}).json()["switched"] is False
    assert client.delete("/api/repos/acme/branches/x").status_code == 204
    services.indexer.drain()
    assert client.get("/api/repos/acme/workspaces/knowledge").json()["reembedding"] is None
    assert vector_search(client, "zebra crossings")[0]["path"] == "/m"
    status = client.get("/api/repos/acme/index/status").json()
    assert status["failed"] == 0 and status["pending"] == 0


def test_two_workspaces_sharing_a_text_both_switch(client, repo, services, monkeypatch):
    """Found by a breaker pass: one job per text carries one workspace; the other workspace was
    never checked again and kept `reembedding` forever."""
    _queue_only(services, monkeypatch)
    assert client.post("/api/repos/acme/workspaces", json={"name": "other"}).status_code == 201
    text = {"properties": {"content": "Identical text in two workspaces."}}
    for ws in ("knowledge", "other"):
        assert client.put(f"/api/repos/acme/workspaces/{ws}/nodes/d", json=text).status_code == 201
    services.indexer.drain()
    for ws in ("knowledge", "other"):
        r = client.patch(f"/api/repos/acme/workspaces/{ws}", json={"embedding": {"model": OTHER}, "reembed": True})
        assert r.status_code == 200 and r.json()["switched"] is False
    services.indexer.drain()
    for ws in ("knowledge", "other"):
        body = client.get(f"/api/repos/acme/workspaces/{ws}").json()
        assert body["embedding"]["model"] == OTHER and body["reembedding"] is None, ws


def test_an_idle_indexer_completes_a_reembed_whose_last_pass_was_cut_short(client, repo, services, monkeypatch):
    """Found by a breaker pass: killed after the last job and before the switch, a re-embed
    stayed under way forever (nothing ran the check again)."""
    _queue_only(services, monkeypatch)
    assert put(client, "/a", {"content": "Rotate the API key every ninety days."}).status_code == 201
    services.indexer.drain()
    assert patch_ws(client, {"embedding": {"model": OTHER}, "reembed": True}).json()["switched"] is False
    with monkeypatch.context() as crash:
        crash.setattr(services.indexer, "_complete_reembeds", lambda repo_ids: None)
        services.indexer.drain()  # the jobs are done; the switch never ran
    assert client.get("/api/repos/acme/workspaces/knowledge").json()["reembedding"] is not None
    assert services.indexer.pass_once() == 0  # an idle pass (after a restart, say) completes it
    assert client.get("/api/repos/acme/workspaces/knowledge").json()["embedding"]["model"] == OTHER


def test_dropped_obsolete_jobs_count_as_progress(client, repo, services, monkeypatch):
    """Found by a breaker pass: after a cancel the obsolete jobs were dropped 32 per poll
    interval, the worker sleeping between batches as if idle, stalling every repository."""
    _queue_only(services, monkeypatch)
    assert put(client, "/a", {"content": "Rotate the API key every ninety days."}).status_code == 201
    services.indexer.drain()
    assert patch_ws(client, {"embedding": {"model": OTHER}, "reembed": True}).json()["queued"] == 1
    assert patch_ws(client, {"embedding": {"model": FAKE_MODEL}}).json()["reembedded"] is False
    assert services.indexer.pass_once() == 1  # dropped, and counted: the worker goes on at once
    assert client.get("/api/repos/acme/index/status").json()["pending"] == 0


def test_a_write_during_a_reembed_is_embedded_before_its_backlog(client, repo, services, monkeypatch):
    """Found by a breaker pass: one FIFO queue made a text written during a large re-embed wait
    for the whole backlog (in every repository). Writes' texts are claimed first."""
    _queue_only(services, monkeypatch)
    for i in range(3):
        assert put(client, f"/n{i}", {"content": f"Backlog text number {i}."}).status_code == 201
    services.indexer.drain()
    assert patch_ws(client, {"embedding": {"model": OTHER}, "reembed": True}).json()["queued"] == 3
    assert put(client, "/new", {"content": "Fresh xylophone notes."}).status_code == 201
    monkeypatch.setattr(services.indexer, "batch_jobs", 1)
    assert services.indexer.run_pending().done == 1
    rows = client.post("/api/repos/acme/search", json={"query": "xylophone", "mode": "fulltext"}).json()["results"]
    assert [r["path"] for r in rows] == ["/new"]
    assert client.get("/api/repos/acme/index/status").json()["pending"] == 3  # the backlog waits
    services.indexer.drain()
    assert client.get("/api/repos/acme/workspaces/knowledge").json()["embedding"]["model"] == OTHER
    assert vector_search(client, "xylophone notes")[0]["path"] == "/new"
