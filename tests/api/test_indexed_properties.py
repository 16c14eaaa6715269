"""Indexed properties are a workspace setting; stored answers are found, marked, never evidence
(issue 15)."""

from __future__ import annotations

from tests.api.test_functions import docs, invoke  # noqa: F401  (fixture)
from tests.api.test_nodes import assert_error


def fulltext(client, query, **body):
    r = client.post("/api/repos/acme/search", json={"query": query, "mode": "fulltext", "k": 5, **body})
    assert r.status_code == 200, r.text
    return r.json()["results"]


def test_workspaces_index_the_guides_answer_properties_by_default(client, repo):
    ws = client.get("/api/repos/acme/workspaces/knowledge").json()
    assert ws["embedding"]["indexed_properties"] == {"short": ["title", "question"],
                                                     "body": ["content", "body", "text", "answer"]}
    # "Store the answer": a kb:Answer with question, answer, sources
    r = client.put("/api/repos/acme/workspaces/knowledge/nodes/answers/answer-12345?parents=true", json={
        "node_type": "kb:Answer", "properties": {
            "question": "How does the storage layer work?",
            "answer": "The storage layer uses RocksDB with 40+ column families.",
            "sources": ["/docs/architecture/overview/storage"]}})
    assert r.status_code == 201, r.text
    rows = fulltext(client, "RocksDB column families")
    assert [(row["path"], row["node_type"]) for row in rows] == [("/answers/answer-12345", "kb:Answer")]
    passages = invoke(client, "search-documents", {"query": "storage layer RocksDB"}).json()["passages"]
    assert passages and all(p["is_answer"] is True and p["node_type"] == "kb:Answer" for p in passages)


def test_indexed_properties_are_configurable_per_workspace(client, repo):
    r = client.post("/api/repos/acme/workspaces", json={
        "name": "notes", "embedding": {"indexed_properties": {"short": ["heading"], "body": ["summary"]}}})
    assert r.status_code == 201, r.text
    assert r.json()["embedding"]["indexed_properties"] == {"short": ["heading"], "body": ["summary"]}
    client.put("/api/repos/acme/workspaces/notes/nodes/n1", json={
        "node_type": "kb:Note", "properties": {"summary": "Quarterly gazebo inspection", "content": "zebra"}})
    assert [row["path"] for row in fulltext(client, "gazebo", workspaces=["notes"])] == ["/n1"]
    assert fulltext(client, "zebra", workspaces=["notes"]) == []
    for bad in ({"short": ["title"], "body": ["title"]}, {"short": [], "body": []}, {"short": [" x"]},
                {"short": ["title"], "extra": []}):
        assert_error(client.post("/api/repos/acme/workspaces", json={
            "name": "bad", "embedding": {"indexed_properties": bad}}), 422)


def test_changing_indexed_properties_reembeds_the_workspace(client, repo):
    client.put("/api/repos/acme/workspaces/knowledge/nodes/n1", json={
        "node_type": "kb:Note", "properties": {"summary": "Quarterly gazebo inspection"}})
    assert fulltext(client, "gazebo") == []
    wanted = {"short": ["title", "question"], "body": ["content", "body", "text", "answer", "summary"]}
    r = client.patch("/api/repos/acme/workspaces/knowledge", json={"embedding": {"indexed_properties": wanted}})
    assert_error(r, 409, "model_locked")
    r = client.patch("/api/repos/acme/workspaces/knowledge",
                     json={"embedding": {"indexed_properties": wanted}, "reembed": True})
    assert r.status_code == 200, r.text
    assert r.json()["reembedded"] is True, r.json()
    assert [row["path"] for row in fulltext(client, "gazebo")] == ["/n1"]
    assert client.get("/api/repos/acme/workspaces/knowledge").json()["embedding"]["indexed_properties"] == wanted


def test_a_stored_answer_is_found_next_time_but_never_grounds_a_new_answer(client, docs):  # noqa: F811
    question = "What dividend did the board approve?"
    first = invoke(client, "ask", {"question": question, "store_answer": {"workspace": "finance"}}).json()
    assert first["grounded"] is True
    stored = first["stored"]["path"]
    props = client.get(f"/api/repos/acme/workspaces/finance/nodes{stored}").json()["properties"]
    assert props["sources"] == ["/dividends"]
    passages = invoke(client, "search-documents", {"query": "quarterly dividend 40 cents per share"}).json()
    marked = {p["path"]: p["is_answer"] for p in passages["passages"]}
    assert marked[stored] is True and marked["/dividends"] is False
    again = invoke(client, "ask", {"question": question}).json()
    assert [c["path"] for c in again["citations"]] == ["/dividends"]
    # with the source gone, the stored answer alone does not ground an answer
    assert client.delete("/api/repos/acme/workspaces/finance/nodes/dividends").status_code == 200
    alone = invoke(client, "ask", {"question": question}).json()
    assert alone["grounded"] is False and alone["citations"] == []
