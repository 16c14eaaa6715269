"""The RAG node's collections belong to the caller's grants (issue 12, hardening): the node's
repository (``KG_RAG_REPO``, ``rag``) is reserved, a collection is the workspace of its class
name, and a key reaches only the collections its grant's workspace globs cover, on
``POST /api/rag`` and on the ordinary routes alike. On SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from tests.api import test_access
from tests.api.test_access import bearer, make_key
from tests.api.test_nodes import assert_error
from tests.api.test_rag_node import CONFIG, DOC_A, DOC_B, doc

# test_access's fixtures: auth on, the in-process client as ``api``, the bootstrap admin key
settings, auth_services, api, admin = test_access.settings, test_access.auth_services, test_access.api, \
    test_access.admin

SECRET = "The harbour master's gate code is 4471."


def rag(api, headers, text, **config):
    return api.post("/api/rag", json={"config": {**CONFIG, **config}, "input": text}, headers=headers)


def grant(workspaces, actions=("read", "write")):
    return [{"repo": "rag", "branches": ["main"], "workspaces": workspaces, "actions": list(actions)}]


@pytest.fixture
def keys(api, admin):
    """Key A owns the collections whose classes start with ``Teama``, key B ``Teamb``; A has
    written ``teama_docs`` (class ``Teamadocs``)."""
    a = bearer(make_key(api, admin, "team-a", grant(["Teama*"]))["key"])
    b = bearer(make_key(api, admin, "team-b", grant(["Teamb*"]))["key"])
    r = rag(api, a, doc("gate code", [("secret.txt", SECRET), ("rigging.txt", DOC_A)]), collectionName="teama_docs")
    assert r.status_code == 200, r.text
    assert sorted(r.json()["ingestion"]["inserted"]) == ["rigging.txt", "secret.txt"]
    return {"a": a, "b": b, "admin": admin}


def a_still_has_its_files(api, keys):
    r = rag(api, keys["a"], "harbour gate code rigging", collectionName="teama_docs", topK=10)
    assert r.status_code == 200, r.text
    assert {x["file"]: x["content"] for x in r.json()["results"] if x["file"] == "secret.txt"} == \
        {"secret.txt": SECRET}
    assert {x["file"] for x in r.json()["results"]} == {"secret.txt", "rigging.txt"}


def same_answer(first, second, first_name, second_name):
    """Two error answers that differ by nothing but the name asked for."""
    assert first.status_code == second.status_code
    assert first.text.replace(first_name, "X") == second.text.replace(second_name, "X")


def test_another_keys_collection_cannot_be_read_overwritten_or_squatted_through_the_rag_node(api, keys):
    b = keys["b"]
    # read: 404, the answer of a collection that does not exist
    foreign = rag(api, b, "gate code", collectionName="teama_docs")
    assert_error(foreign, 404, "not_found")
    assert SECRET not in foreign.text and "4471" not in foreign.text
    missing = rag(api, b, "gate code", collectionName="teama_nothing")
    assert_error(missing, 404, "not_found")
    same_answer(foreign, missing, "teama_docs", "teama_nothing")
    # overwrite or poison: the same 404, nothing written
    poison = rag(api, b, doc("q", [("secret.txt", "The gate code is 0000.")]), collectionName="teama_docs")
    same_answer(poison, rag(api, b, doc("q", [("secret.txt", "x")]), collectionName="teama_nothing"),
                "teama_docs", "teama_nothing")
    assert_error(poison, 404, "not_found")
    # a model change would re-embed (and so rewrite) the collection: the same 404
    assert_error(rag(api, b, "q", collectionName="teama_docs", embeddingModel="fake:hash-32"), 404, "not_found")
    # squat: a name whose class another collection holds is 404 like any name outside the grant,
    # never the 409 that told everyone the name was taken
    for name in ("teama-docs", "Teama_docs"):
        assert_error(rag(api, b, doc("q", [("a.txt", DOC_B)]), collectionName=name), 404, "not_found")
    a_still_has_its_files(api, keys)
    # B's own collections work as before
    mine = rag(api, b, doc("invoices", [("billing.md", DOC_B)]), collectionName="teamb_docs")
    assert mine.status_code == 200, mine.text
    assert {x["file"] for x in mine.json()["results"]} == {"billing.md"}
    assert_error(rag(api, keys["a"], "invoices", collectionName="teamb_docs"), 404, "not_found")


def test_a_collection_whose_class_differs_only_by_case_from_a_foreign_one_is_the_callers_own(api, keys):
    """B's grant covers ``TEAMA*`` (classes are compared by case-sensitive globs): A's
    ``teama_docs`` (``Teamadocs``) is outside it, so B's ``TEAMA_docs`` (``TEAMAdocs``) must not
    collide with it: a 409 would tell B that A's collection exists."""
    upper = bearer(make_key(api, keys["admin"], "team-upper", grant(["TEAMA*"]))["key"])
    r = rag(api, upper, doc("gate code", [("notes.txt", DOC_B)]), collectionName="TEAMA_docs")
    assert r.status_code == 200, r.text
    assert r.json()["collection"]["class"] == "TEAMAdocs"
    assert {x["file"] for x in r.json()["results"]} == {"notes.txt"}
    assert SECRET not in r.text
    a_still_has_its_files(api, keys)


def test_a_read_only_grant_reads_a_collection_and_cannot_write_it(api, keys):
    reader = bearer(make_key(api, keys["admin"], "team-a-reader", grant(["Teama*"], ("read",)))["key"])
    r = rag(api, reader, "gate code", collectionName="teama_docs")
    assert r.status_code == 200, r.text
    assert any(x["content"] == SECRET for x in r.json()["results"])
    assert_error(rag(api, reader, doc("q", [("secret.txt", "The gate code is 0000.")]), collectionName="teama_docs"),
                 403, "forbidden")
    assert_error(rag(api, reader, "q", collectionName="teama_docs", embeddingModel="fake:hash-32"), 403, "forbidden")
    assert_error(rag(api, reader, "q", collectionName="teama_docs", chunkSize=50), 403, "forbidden")
    a_still_has_its_files(api, keys)
    # once the owner has moved the collection to another model, the reader queries it there
    moved = rag(api, keys["a"], "gate code", collectionName="teama_docs", embeddingModel="fake:hash-32")
    assert moved.status_code == 200 and moved.json()["collection"]["model_changed"] is True, moved.text
    r = rag(api, reader, "gate code", collectionName="teama_docs", embeddingModel="fake:hash-32")
    assert r.status_code == 200, r.text
    assert any(x["content"] == SECRET for x in r.json()["results"])


def test_another_keys_collection_is_not_reachable_through_the_ordinary_routes(api, keys):
    b = keys["b"]
    assert rag(api, b, doc("invoices", [("billing.md", DOC_B)]), collectionName="teamb_docs").status_code == 200
    node = "/api/repos/rag/workspaces/Teamadocs/nodes/secret.txt"
    assert_error(api.get(node, headers=b), 404, "not_found")
    assert_error(api.get("/api/repos/rag/workspaces/Teamadocs", headers=b), 404, "not_found")
    assert_error(api.get("/api/repos/rag/workspaces/Teamadocs/nodes", params={"prefix": "/"}, headers=b),
                 404, "not_found")
    assert [w["name"] for w in api.get("/api/repos/rag/workspaces", headers=b).json()["workspaces"]] == ["Teambdocs"]
    # search, in every mode, reads B's collections only: A's chunks are never ranked
    for mode in ("vector", "fulltext", "hybrid"):
        r = api.post("/api/repos/rag/search", json={"query": "harbour gate code", "k": 10, "mode": mode}, headers=b)
        assert r.status_code == 200, r.text
        assert SECRET not in r.text and "Teamadocs" not in r.text
        assert {x["workspace"] for x in r.json()["results"]} <= {"Teambdocs"}
    assert_error(api.post("/api/repos/rag/search", json={"query": "gate code", "workspaces": ["Teamadocs"]},
                          headers=b), 404, "not_found")
    for function, payload in (("search-documents", {"query": "harbour gate code"}),
                              ("ask", {"question": "What is the harbour master's gate code?"})):
        r = api.post(f"/api/functions/rag/{function}/invoke", json={"input": payload}, headers=b)
        assert r.status_code == 200, r.text
        assert SECRET not in r.text and "4471" not in r.text
    # the log names none of A's files (its revisions are there, their changes are not)
    log = api.get("/api/repos/rag/log", headers=b)
    assert log.status_code == 200, log.text
    assert "secret.txt" not in log.text and "Teamadocs" not in log.text
    assert {c["workspace"] for r in log.json()["revisions"] for c in r["changes"]} == {"Teambdocs"}
    # overwrite, delete: 404 (not its workspace) or 403 (the repository), nothing changes
    assert_error(api.put(node, json={"node_type": "rag:File", "properties": {"content": "poison"}}, headers=b),
                 404, "not_found")
    assert_error(api.delete(node, headers=b), 404, "not_found")
    assert_error(api.post("/api/repos/rag/nodes:batch", json={"deletes": [
        {"workspace": "Teamadocs", "path": "/secret.txt"}]}, headers=b), 404, "not_found")
    assert_error(api.delete("/api/repos/rag", headers=b), 403, "forbidden")
    a_still_has_its_files(api, keys)


def test_a_grant_on_every_repository_does_not_reach_the_reserved_one(api, keys):
    star = bearer(make_key(api, keys["admin"], "star", [
        {"repo": "*", "actions": ["read", "write", "branch:create", "branch:delete", "merge"]}])["key"])
    assert "rag" not in [r["name"] for r in api.get("/api/repos", headers=star).json()["repos"]]
    hidden, missing = api.get("/api/repos/rag", headers=star), api.get("/api/repos/nope", headers=star)
    assert_error(hidden, 404, "not_found")
    same_answer(hidden, missing, "rag", "nope")
    for path in ("/api/repos/rag/workspaces", "/api/repos/rag/workspaces/Teamadocs/nodes/secret.txt",
                 "/api/repos/rag/branches", "/api/repos/rag/log"):
        assert_error(api.get(path, headers=star), 404, "not_found")
    assert_error(api.post("/api/repos/rag/search", json={"query": "gate code"}, headers=star), 404, "not_found")
    assert_error(api.post("/api/functions/rag/search-documents/invoke", json={"input": {"query": "gate code"}},
                          headers=star), 404, "not_found")
    assert_error(api.post("/api/repos/rag/branches", json={"name": "mine"}, headers=star), 404, "not_found")
    assert_error(api.delete("/api/repos/rag/workspaces/Teamadocs/nodes/secret.txt", headers=star),
                 404, "not_found")
    # and through the RAG node: every collection is out of its reach, existing or not
    foreign = rag(api, star, "gate code", collectionName="teama_docs")
    assert_error(foreign, 404, "not_found")
    same_answer(foreign, rag(api, star, "gate code", collectionName="teama_nothing"), "teama_docs", "teama_nothing")
    assert_error(rag(api, star, doc("q", [("a.txt", DOC_B)]), collectionName="star_docs"), 404, "not_found")
    # a grant naming the repository literally does reach it
    literal = bearer(make_key(api, keys["admin"], "literal", [{"repo": "rag", "actions": ["read"]}])["key"])
    assert api.get("/api/repos/rag", headers=literal).status_code == 200
    a_still_has_its_files(api, keys)


def test_creating_the_reserved_repository_through_the_api_is_refused(api, admin):
    before = api.post("/api/repos", json={"name": "rag"}, headers=admin)
    assert_error(before, 422, "invalid_input")
    assert "reserved" in before.json()["error"]["message"] and "KG_RAG_REPO" in before.json()["error"]["message"]
    assert_error(api.get("/api/repos/rag", headers=admin), 404, "not_found")
    # the node makes it; afterwards the answer is the same 422, not a 409
    a = bearer(make_key(api, admin, "team-a", grant(["Teama*"]))["key"])
    assert rag(api, a, doc("q", [("a.txt", DOC_A)]), collectionName="teama_docs").status_code == 200
    after = api.post("/api/repos", json={"name": "rag"}, headers=admin)
    assert_error(after, 422, "invalid_input")
    assert after.json() == before.json()
    manager = bearer(make_key(api, admin, "repo-admin", [{"repo": "*", "actions": ["admin", "read"]}])["key"])
    assert_error(api.post("/api/repos", json={"name": "rag"}, headers=manager), 422, "invalid_input")
    assert api.post("/api/repos", json={"name": "ragged"}, headers=admin).status_code == 201


def test_with_auth_off_the_reserved_name_is_refused_and_the_node_still_makes_it(client, services):
    services.settings.auth = False
    assert_error(client.post("/api/repos", json={"name": "rag"}), 422, "invalid_input")
    r = client.post("/api/rag", json={"config": CONFIG, "input": doc("rigging", [("a.txt", DOC_A)])})
    assert r.status_code == 200, r.text
    assert client.get("/api/repos/rag").status_code == 200
    assert_error(client.post("/api/repos", json={"name": "rag"}), 422, "invalid_input")


def test_no_workspace_is_made_in_the_reserved_repository_but_by_the_node(client, services):
    services.settings.auth = False
    made = client.post("/api/rag", json={"config": CONFIG, "input": doc("rigging", [("a.txt", DOC_A)])})
    assert made.status_code == 200, made.text
    r = client.post("/api/repos/rag/workspaces", json={"name": "notes"})
    assert_error(r, 422, "invalid_input")
    assert "reserved" in r.json()["error"]["message"] and r.json()["error"]["details"]["workspace"] == "notes"
    names = [w["name"] for w in client.get("/api/repos/rag/workspaces").json()["workspaces"]]
    assert "notes" not in names and len(names) == 1  # the node's collection alone
