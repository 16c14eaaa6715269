"""Search with KG_INDEX=weaviate: the same API, Weaviate's own hybrid query echoed.

Runs through the real weaviate-client against the Weaviate-protocol test server (or the real
Weaviate of ``KG_TEST_WEAVIATE_URL``).
"""

from __future__ import annotations

import uuid
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

from kg.index.weaviate import WeaviateVectorIndex
from kg.providers.registry import make_embedder
from kg.services import Services
from kg.store.db import Database

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
    services = Services(settings=settings, db=db, index=index,
                     embedder_factory=lambda name: make_embedder(name, allow_fake=True))
    repo = f"w{uuid.uuid4().hex[:8]}"
    with TestClient(create_app(services=services)) as client:
        assert client.post("/api/repos", json={"name": repo}).status_code == 201
        assert client.post(f"/api/repos/{repo}/workspaces", json={"name": "knowledge"}).status_code == 201
        for path, text in DOCS.items():
            r = client.put(f"/api/repos/{repo}/workspaces/knowledge/nodes{path}",
                           json={"properties": {"content": text}})
            assert r.status_code == 201, r.text
        yield client, repo
        client.delete(f"/api/repos/{repo}")


def test_hybrid_goes_through_weaviate_and_echoes_alpha(wclient):
    client, repo = wclient
    r = client.post(f"/api/repos/{repo}/search", json={"query": "rotate api key", "vector_weight": 3.0})
    assert r.status_code == 200, r.text
    body = r.json()
    # the shipped default fusion function (KG_SEARCH_FUSION_TYPE) goes to the index too
    assert body["fusion"] == {"engine": "weaviate", "alpha": 0.75, "fusion_type": "relative_score"}
    top = body["results"][0]
    assert top["path"] == "/rotate" and top["vector_rank"] is None and top["fulltext_rank"] is None
    ranked = client.post(f"/api/repos/{repo}/search", json={"query": "rotate api key",
                                                           "fusion_type": "ranked"}).json()
    # alpha from the default weights: vector 0.25, fulltext 1
    assert ranked["fusion"] == {"engine": "weaviate", "alpha": 0.2, "fusion_type": "ranked"}
    assert ranked["results"][0]["path"] == "/rotate"
    # kg's own fusion on the same index: per-leg ranks
    kg = client.post(f"/api/repos/{repo}/search", json={"query": "rotate api key", "fusion": "kg"}).json()
    assert kg["fusion"]["engine"] == "kg"
    assert kg["results"][0]["path"] == "/rotate" and kg["results"][0]["fulltext_rank"] == 1
    # filters still apply before ranking (SQL decides the allowed content keys)
    only = client.post(f"/api/repos/{repo}/search", json={"query": "rotate api key", "path_prefix": "/billing"}).json()
    assert [row["path"] for row in only["results"]] == ["/billing"]
    relative = client.post(f"/api/repos/{repo}/search",
                           json={"query": "rotate api key", "fusion": "kg", "fusion_type": "relative_score"}).json()
    assert relative["fusion"]["engine"] == "kg" and relative["fusion"]["method"] == "relative_score"
    assert relative["results"][0]["path"] == "/rotate"


def test_a_branch_sees_its_own_text_through_weaviate(wclient):
    client, repo = wclient
    assert client.post(f"/api/repos/{repo}/branches", json={"name": "agent/w", "from": "main"}).status_code == 201
    r = client.put(f"/api/repos/{repo}/workspaces/knowledge/nodes/rotate?branch=agent/w",
                   json={"properties": {"content": "Keys are never rotated; they are revoked and reissued."}})
    assert r.status_code == 200, r.text
    on_branch = client.post(f"/api/repos/{repo}/search?branch=agent/w",
                            json={"query": "revoked reissued", "k": 1}).json()
    assert on_branch["results"][0]["path"] == "/rotate" and "revoked" in on_branch["results"][0]["chunk_text"]
    on_main = client.post(f"/api/repos/{repo}/search", json={"query": "revoked reissued"}).json()
    assert all("revoked" not in row["chunk_text"] for row in on_main["results"])


# -- one collection per (workspace, branch) -------------------------------------------------------


def _names(client, repo):
    body = client.get(f"/api/repos/{repo}/index/status").json()["index"]
    return sorted(c["name"] for c in body["collections"])


def test_a_new_branch_has_no_collection_until_it_writes_and_reads_mains(wclient):
    client, repo = wclient
    client.post(f"/api/repos/{repo}/search", json={"query": "anything"})  # a search brings the index up to date
    main_id = client.get(f"/api/repos/{repo}/index/status").json()["index"]["collections"][0]["branch_id"]
    before = _names(client, repo)
    assert len(before) == 1 and before[0].endswith(f"_b{main_id}")
    assert client.post(f"/api/repos/{repo}/branches", json={"name": "agent/r", "from": "main"}).status_code == 201
    # Searchable at once, through main's collection: nothing was copied, nothing created.
    found = client.post(f"/api/repos/{repo}/search?branch=agent/r", json={"query": "invoices payment", "k": 1}).json()
    assert found["results"][0]["path"] == "/billing"
    assert _names(client, repo) == before
    r = client.put(f"/api/repos/{repo}/workspaces/knowledge/nodes/notes?branch=agent/r",
                   json={"properties": {"content": "Agents keep scratch notes about invoices here."}})
    assert r.status_code == 201, r.text
    client.post(f"/api/repos/{repo}/search?branch=agent/r", json={"query": "scratch notes"})
    after = _names(client, repo)
    assert len(after) == 2 and before[0] in after
    collections = client.get(f"/api/repos/{repo}/index/status").json()["index"]["collections"]
    objects = {c["name"]: c["objects"] for c in collections}
    own = next(n for n in after if n not in before)
    # The branch's collection holds its one node; main's is untouched.
    assert objects[own] == 1 and objects[before[0]] == len(DOCS)
    # Deleting the branch deletes its collection.
    assert client.delete(f"/api/repos/{repo}/branches/agent/r").status_code == 204
    assert _names(client, repo) == before


def test_overrides_and_deletes_on_a_branch_hide_mains_objects(wclient):
    client, repo = wclient
    assert client.post(f"/api/repos/{repo}/branches", json={"name": "agent/h", "from": "main"}).status_code == 201
    assert client.put(f"/api/repos/{repo}/workspaces/knowledge/nodes/deploy?branch=agent/h",
                      json={"properties": {"content": "Deploys are frozen on Fridays."}}).status_code == 200
    assert client.delete(f"/api/repos/{repo}/workspaces/knowledge/nodes/billing?branch=agent/h").status_code == 200
    for mode in ("vector", "fulltext", "hybrid"):
        rows = client.post(f"/api/repos/{repo}/search?branch=agent/h",
                           json={"query": "build cache stale invoices payment deploy", "mode": mode,
                                 "k": 10}).json()["results"]
        texts = {row["path"]: row["chunk_text"] for row in rows}
        assert "/billing" not in texts, mode
        assert texts.get("/deploy", "Deploys are frozen on Fridays.") == "Deploys are frozen on Fridays.", mode
        assert all("build cache" not in t for t in texts.values()), mode
    # main still sees its own text
    rows = client.post(f"/api/repos/{repo}/search", json={"query": "build cache stale", "k": 1}).json()["results"]
    assert rows[0]["path"] == "/deploy" and "build cache" in rows[0]["chunk_text"]


def test_merge_places_the_branch_text_in_mains_collection_and_history_stays_searchable(wclient):
    client, repo = wclient
    head = client.get(f"/api/repos/{repo}/branches/main").json()["head_revision"]
    assert client.post(f"/api/repos/{repo}/branches", json={"name": "agent/m", "from": "main"}).status_code == 201
    assert client.put(f"/api/repos/{repo}/workspaces/knowledge/nodes/rotate?branch=agent/m",
                      json={"properties": {"content": "Keys are revoked and reissued, never rotated."}}
                      ).status_code == 200
    merged = client.post(f"/api/repos/{repo}/branches/agent/m/merge", json={"into": "main"})
    assert merged.status_code == 200, merged.text
    rows = client.post(f"/api/repos/{repo}/search", json={"query": "revoked reissued", "k": 1}).json()["results"]
    assert rows[0]["path"] == "/rotate" and "revoked" in rows[0]["chunk_text"]
    # Deleting the merged branch leaves main's copy in main's collection.
    assert client.delete(f"/api/repos/{repo}/branches/agent/m").status_code == 204
    rows = client.post(f"/api/repos/{repo}/search", json={"query": "revoked reissued", "k": 1}).json()["results"]
    assert rows[0]["path"] == "/rotate" and "revoked" in rows[0]["chunk_text"]
    # main as of before the merge still finds the old text (its objects are kept).
    old = client.post(f"/api/repos/{repo}/search?at_revision={head}",
                      json={"query": "rotate api key settings", "k": 1}).json()["results"]
    assert old[0]["path"] == "/rotate" and "press rotate key" in old[0]["chunk_text"]


def test_filters_on_a_branch_head_and_on_an_ancestor(wclient):
    client, repo = wclient
    assert client.post(f"/api/repos/{repo}/branches", json={"name": "agent/f", "from": "main"}).status_code == 201
    assert client.put(f"/api/repos/{repo}/workspaces/knowledge/nodes/runbook?branch=agent/f",
                      json={"node_type": "Runbook",
                            "properties": {"content": "Clear the build cache and retry the deploy.",
                                                                   "team": "ops", "level": 2}}).status_code == 201
    q = {"query": "clear build cache retry deploy", "k": 10}
    rows = client.post(f"/api/repos/{repo}/search?branch=agent/f",
                       json={**q, "path_prefix": "/runbook"}).json()["results"]
    assert [r["path"] for r in rows] == ["/runbook"]
    rows = client.post(f"/api/repos/{repo}/search?branch=agent/f", json={**q, "node_type": "Runbook"}).json()["results"]
    assert [r["path"] for r in rows] == ["/runbook"]
    rows = client.post(f"/api/repos/{repo}/search?branch=agent/f",
                       json={**q, "where": {"level": 2.0}}).json()["results"]
    assert [r["path"] for r in rows] == ["/runbook"]
    rows = client.post(f"/api/repos/{repo}/search?branch=agent/f",
                       json={**q, "where": {"team": "dev"}}).json()["results"]
    assert rows == []
    # An ancestor's node found through a filter on the branch (main's collection, no filter sent there).
    rows = client.post(f"/api/repos/{repo}/search?branch=agent/f",
                       json={**q, "path_prefix": "/deploy"}).json()["results"]
    assert [r["path"] for r in rows] == ["/deploy"]


def test_the_indexer_places_embedded_text_before_any_search(wclient):
    client, repo = wclient
    services = client.app.state.services
    assert client.post(f"/api/repos/{repo}/branches", json={"name": "agent/i", "from": "main"}).status_code == 201
    assert client.put(f"/api/repos/{repo}/workspaces/knowledge/nodes/faq?branch=agent/i",
                      json={"properties": {"content": "Frequently asked: where do invoices go?"}}).status_code == 201
    services.indexer.drain()
    status = client.get(f"/api/repos/{repo}/index/status").json()
    branch_ids = {c["branch_id"] for c in status["index"]["collections"]}
    assert len(branch_ids) == 2  # main's (its three nodes) and agent/i's (its one), no search ran
    assert sorted(c["objects"] for c in status["index"]["collections"]) == [1, len(DOCS)]


def test_resetting_a_branch_drops_its_collection_and_it_reads_main_again(wclient):
    client, repo = wclient
    assert client.post(f"/api/repos/{repo}/branches", json={"name": "agent/z", "from": "main"}).status_code == 201
    assert client.put(f"/api/repos/{repo}/workspaces/knowledge/nodes/billing?branch=agent/z",
                      json={"properties": {"content": "Billing moved to the finance portal."}}).status_code == 200
    rows = client.post(f"/api/repos/{repo}/search?branch=agent/z",
                       json={"query": "finance portal", "k": 1}).json()["results"]
    assert "finance portal" in rows[0]["chunk_text"]
    assert len(_names(client, repo)) == 2
    assert client.post(f"/api/repos/{repo}/branches/agent/z/reset").status_code == 200
    assert len(_names(client, repo)) == 1
    rows = client.post(f"/api/repos/{repo}/search?branch=agent/z",
                       json={"query": "invoices payment finance portal", "k": 3}).json()["results"]
    assert rows[0]["path"] == "/billing" and "Invoices are sent monthly" in rows[0]["chunk_text"]
    assert all("finance portal" not in r["chunk_text"] for r in rows)


def test_text_embedded_after_its_version_was_fed_is_placed_by_the_chunk_feed(settings, weaviate_url):
    """A write is fed to the index before its text is embedded (the queue is slow): the version
    feed skips it, and once the chunks exist the chunk feed places it."""
    from api.app import create_app

    slow = settings.model_copy(update={"index_inline": False, "index_poll_s": 3600.0})
    db = Database(slow.resolved_database_url())
    index = WeaviateVectorIndex(weaviate_url)
    services = Services(settings=slow, db=db, index=index,
                     embedder_factory=lambda name: make_embedder(name, allow_fake=True))
    services.indexer.wake = lambda: None  # type: ignore[method-assign]  # nothing embeds until drain() below
    repo = f"w{uuid.uuid4().hex[:8]}"
    with TestClient(create_app(services=services)) as client:
        try:
            assert client.post("/api/repos", json={"name": repo}).status_code == 201
            assert client.post(f"/api/repos/{repo}/workspaces", json={"name": "knowledge"}).status_code == 201
            assert client.put(f"/api/repos/{repo}/workspaces/knowledge/nodes/late",
                              json={"properties": {"content": "Late text about glaciers."}}).status_code == 201
            q = {"query": "glaciers", "mode": "fulltext"}
            assert client.post(f"/api/repos/{repo}/search", json=q).json()["results"] == []
            placed = client.get(f"/api/repos/{repo}/index/status").json()["index"]["placed"]
            head = client.get(f"/api/repos/{repo}/branches/main").json()["head_revision"]
            assert placed["version"] == head  # the version was fed, with nothing to place yet
            services.indexer.drain()
            rows = client.post(f"/api/repos/{repo}/search", json=q).json()["results"]
            assert [r["path"] for r in rows] == ["/late"]
        finally:
            client.delete(f"/api/repos/{repo}")


def test_filters_follow_the_version_a_branch_sees_not_the_newest_object(wclient):
    """An object holds the newest path and properties of its node on its branch; a branch
    forked before a property change, or a search at an older revision, sees the older version:
    the property filter must be decided by that version (so it is not sent to Weaviate there)."""
    client, repo = wclient
    url = f"/api/repos/{repo}/workspaces/knowledge/nodes/billing"
    text = DOCS["/billing"]
    assert client.put(url, json={"properties": {"content": text, "team": "finance"}}).status_code == 200
    old = client.get(f"/api/repos/{repo}/branches/main").json()["head_revision"]
    q = {"query": "invoices payment", "k": 3, "where": {"team": "finance"}}
    # Searched at its head first: what is cached for this state must not carry the head's
    # filters into a later search of the same revision once it is no longer the head.
    assert [r["path"] for r in client.post(f"/api/repos/{repo}/search", json=q).json()["results"]] == ["/billing"]
    assert client.post(f"/api/repos/{repo}/branches", json={"name": "agent/old", "from": "main"}).status_code == 201
    # Same text (same content key, same object), new property on main.
    assert client.put(url, json={"properties": {"content": text, "team": "ops"}}).status_code == 200
    on_main = client.post(f"/api/repos/{repo}/search", json=q).json()["results"]
    assert on_main == []
    on_branch = client.post(f"/api/repos/{repo}/search?branch=agent/old", json=q).json()["results"]
    assert [r["path"] for r in on_branch] == ["/billing"]
    at_old = client.post(f"/api/repos/{repo}/search?at_revision={old}", json=q).json()["results"]
    assert [r["path"] for r in at_old] == ["/billing"]
    now = client.post(f"/api/repos/{repo}/search", json={**q, "where": {"team": "ops"}}).json()["results"]
    assert [r["path"] for r in now] == ["/billing"]


def test_a_path_prefix_with_like_wildcards_is_filtered_in_sql(wclient):
    """``*`` and ``?`` are path characters to kg but wildcards to Weaviate's Like (which cannot
    escape them): such a prefix is left to SQL, and the search answers as the embedded index."""
    client, repo = wclient
    for path, text in (("/what?", "A question mark page about invoices."), ("/star*", "A star page about invoices.")):
        assert client.put(f"/api/repos/{repo}/workspaces/knowledge/nodes{quote(path)}",
                          json={"properties": {"content": text}}).status_code == 201, path
    for prefix, expected in (("/what?", ["/what?"]), ("/star*", ["/star*"]), ("/wh", ["/what?"])):
        r = client.post(f"/api/repos/{repo}/search", json={"query": "page invoices", "path_prefix": prefix,
                                                           "path_prefix_mode": "raw"})
        assert r.status_code == 200, r.text
        assert [row["path"] for row in r.json()["results"]] == expected


def test_ask_and_graph_context_find_their_passages_on_weaviate(wclient):
    """Found by a new-user pass: the functions keep passages with evidence of their own (a BM25
    match or a close vector), which needs per-leg ranks; Weaviate's own hybrid has none, so every
    passage was dropped ("The documents do not cover this.")."""
    client, repo = wclient
    r = client.post(f"/api/functions/{repo}/ask/invoke", json={"input": {"question": "How do I rotate an API key?"}})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["citations"] and out["citations"][0]["path"] == "/rotate", out
    r = client.post(f"/api/functions/{repo}/graph-context/invoke", json={"input": {"query": "rotate api key"}})
    assert r.status_code == 200, r.text
    assert "/rotate" in [s["path"] for s in r.json()["seeds"]], r.json()


def test_weaviate_hybrid_keeps_max_distance(wclient):
    """Found by a new-user pass: max_distance was not sent to Weaviate's hybrid query. With
    Weaviate's fusion it bounds every result (Weaviate's max_vector_distance drops a farther
    object from both legs); with kg's fusion it bounds the vector leg only."""
    client, repo = wclient
    q = {"query": "rotate api key", "k": 10}
    distances = {r["path"]: r["vector_distance"] for r in
                 client.post(f"/api/repos/{repo}/search", json={**q, "mode": "vector"}).json()["results"]}
    assert len(distances) == 3
    bound = distances["/rotate"] + 1e-6
    close = {p for p, d in distances.items() if d <= bound}
    assert "/rotate" in close and len(close) < 3
    native = client.post(f"/api/repos/{repo}/search", json={**q, "max_distance": bound}).json()
    assert native["fusion"]["engine"] == "weaviate"
    assert {r["path"] for r in native["results"]} == close
    everything = client.post(f"/api/repos/{repo}/search", json=q).json()["results"]
    assert {r["path"] for r in everything} == set(distances)
    kg = client.post(f"/api/repos/{repo}/search", json={**q, "max_distance": bound, "fusion": "kg"}).json()["results"]
    assert all(r["fulltext_rank"] is not None or r["vector_distance"] <= bound for r in kg)


def test_a_branch_deleted_while_its_text_is_placed_leaves_no_collection(wclient, monkeypatch):
    """Found by a new-user pass: deleting a branch right after a write left its collection in
    Weaviate (the indexer created it after the delete's drop had run). The placing pass now
    checks, after placing, that its branches still exist, and drops what it created for one
    that is gone."""
    from kg.store import repos as store

    client, repo = wclient
    services = client.app.state.services
    client.post(f"/api/repos/{repo}/search", json={"query": "anything"})
    before = _names(client, repo)
    assert client.post(f"/api/repos/{repo}/branches", json={"name": "agent/gone", "from": "main"}).status_code == 201
    real_place = services.index.place

    def place_after_the_delete(repo_key, placements):
        with services.db.write() as session:  # the delete commits while this pass is placing
            r = store.get_repository(session, repo, lock=True)
            store.delete_branch(session, r, "agent/gone")
        return real_place(repo_key, placements)

    monkeypatch.setattr(services.index, "place", place_after_the_delete)
    r = client.put(f"/api/repos/{repo}/workspaces/knowledge/nodes/secret?branch=agent/gone",
                   json={"properties": {"content": "A confidential draft."}})
    assert r.status_code == 201, r.text
    monkeypatch.setattr(services.index, "place", real_place)
    assert client.get(f"/api/repos/{repo}/branches/agent/gone").status_code == 404
    assert _names(client, repo) == before


def test_a_repository_deleted_while_its_text_is_placed_leaves_no_collection(wclient, monkeypatch):
    from kg.store import repos as store

    client, repo = wclient
    services = client.app.state.services
    with services.db.read() as session:
        repo_key = store.get_repository(session, repo).uid
    real_place = services.index.place

    def place_after_the_delete(key, placements):
        with services.db.write() as session:
            store.delete_repository(session, repo)
        services.index.drop(key)  # what the route does after its commit
        return real_place(key, placements)

    monkeypatch.setattr(services.index, "place", place_after_the_delete)
    services.index.drop(repo_key)  # so the next sync places everything again
    client.post(f"/api/repos/{repo}/search", json={"query": "anything"})
    monkeypatch.setattr(services.index, "place", real_place)
    assert client.get(f"/api/repos/{repo}").status_code == 404
    assert services.index.stats(repo_key)["collections"] == []


def test_index_status_names_collections_and_survives_weaviate_down(wclient):
    client, repo = wclient
    client.post(f"/api/repos/{repo}/search", json={"query": "anything"})
    (collection,) = client.get(f"/api/repos/{repo}/index/status").json()["index"]["collections"]
    assert collection["workspace"] == "knowledge" and collection["branch"] == "main"
    services = client.app.state.services
    real = services.index
    services.index = WeaviateVectorIndex("http://127.0.0.1:9?grpc_port=7", init_timeout_s=1.0)  # nothing listens
    try:
        r = client.get(f"/api/repos/{repo}/index/status")
    finally:
        services.index.close()
        services.index = real
    assert r.status_code == 200  # the queue (in SQL) is still shown
    body = r.json()
    assert body["pending"] == 0 and body["index"]["error"]["code"] == "backend_unavailable"


def test_reembedding_drops_the_old_models_collections(wclient):
    client, repo = wclient
    assert client.post(f"/api/repos/{repo}/branches", json={"name": "agent/r", "from": "main"}).status_code == 201
    assert client.put(f"/api/repos/{repo}/workspaces/knowledge/nodes/notes?branch=agent/r",
                      json={"properties": {"content": "Branch notes about invoices."}}).status_code == 201
    client.post(f"/api/repos/{repo}/search", json={"query": "anything"})
    before = client.get(f"/api/repos/{repo}/index/status").json()["index"]["collections"]
    assert len(before) == 2
    r = client.patch(f"/api/repos/{repo}/workspaces/knowledge",
                     json={"embedding": {"model": "fake:other-64"}, "reembed": True})
    assert r.status_code == 200 and r.json()["switched"] is True, r.text
    rows = client.post(f"/api/repos/{repo}/search?branch=agent/r",
                       json={"query": "invoices", "mode": "vector", "k": 3}).json()
    assert rows["results"]
    after = client.get(f"/api/repos/{repo}/index/status").json()["index"]["collections"]
    assert {c["model"] for c in after} == {"fake:other-64"}
    assert {(c["workspace"], c["branch"]) for c in after} == {("knowledge", "main"), ("knowledge", "agent/r")}


def test_a_cached_head_state_does_not_send_its_filters_once_it_is_history(wclient):
    """The searchable set of a branch state is cached; a state searched at its head sends the
    type filter to Weaviate, the same revision searched later (no longer the head, its object
    now holding the newer type) must not."""
    client, repo = wclient
    url = f"/api/repos/{repo}/workspaces/knowledge/nodes/billing"
    text = DOCS["/billing"]
    assert client.put(url, json={"node_type": "Doc", "properties": {"content": text}}).status_code == 200
    old = client.get(f"/api/repos/{repo}/branches/main").json()["head_revision"]
    q = {"query": "invoices payment", "k": 3, "node_type": "Doc"}
    assert [r["path"] for r in client.post(f"/api/repos/{repo}/search", json=q).json()["results"]] == ["/billing"]
    assert client.put(url, json={"node_type": "Invoice", "properties": {"content": text}}).status_code == 200
    assert client.post(f"/api/repos/{repo}/search", json=q).json()["results"] == []
    rows = client.post(f"/api/repos/{repo}/search?at_revision={old}", json=q).json()["results"]
    assert [r["path"] for r in rows] == ["/billing"]


def test_a_path_prefix_matches_whole_segments_in_weaviate(wclient):
    """Issue 15: on Weaviate too, ``/billing`` is ``/billing`` and ``/billing/...``, never
    ``/billing-old``; ``path_prefix_mode: raw`` is the string prefix."""
    client, repo = wclient
    for path in ("/billing/cards", "/billing-old"):
        assert client.put(f"/api/repos/{repo}/workspaces/knowledge/nodes{path}",
                          json={"properties": {"content": "Invoices and cards, the old way."}}).status_code == 201
    for extra in ({}, {"fusion": "kg"}, {"mode": "fulltext"}, {"mode": "vector"}):
        q = {"query": "invoices cards", "k": 10, "path_prefix": "/billing", **extra}
        r = client.post(f"/api/repos/{repo}/search", json=q)
        assert r.status_code == 200, r.text
        assert {row["path"] for row in r.json()["results"]} == {"/billing", "/billing/cards"}, extra
        r = client.post(f"/api/repos/{repo}/search", json={**q, "path_prefix_mode": "raw"})
        assert {row["path"] for row in r.json()["results"]} == {"/billing", "/billing/cards", "/billing-old"}, extra


def test_where_booleans_never_equal_numbers_on_weaviate(wclient):
    """Issue 15: Weaviate's property pairs give ``True`` and ``1`` one pair; kg's comparison
    decides the version keys, so ``{"x": true}`` still never finds ``1`` there."""
    client, repo = wclient
    for path, value in (("/one", 1), ("/true", True)):
        r = client.put(f"/api/repos/{repo}/workspaces/knowledge/nodes{path}",
                       json={"properties": {"content": "flag passage about invoices", "x": value}})
        assert r.status_code == 201, r.text
    for extra in ({}, {"fusion": "kg"}, {"mode": "fulltext"}, {"mode": "vector"}):
        for value, expected in ((True, {"/true"}), (1, {"/one"})):
            r = client.post(f"/api/repos/{repo}/search",
                            json={"query": "flag passage invoices", "k": 10, "where": {"x": value}, **extra})
            assert r.status_code == 200, r.text
            assert {row["path"] for row in r.json()["results"]} == expected, (extra, value)
