"""The rules the OpenAPI document states in words (an operation's description and its documented
422 / 409) because JSON Schema cannot: a rule across two fields, across the path and the body,
or with the server's state. The fuzz test (test_schemathesis.py) generates requests that obey
them; here each is broken once, and the refusal is the documented one: its status, its error
code and the field ``details.field`` names."""

from __future__ import annotations

from typing import Any

NODES = "/api/repos/acme/workspaces/knowledge/nodes"


def _refused(response, status: int, code: str, field: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code, error
    assert error["details"]["field"] == field, error
    return error


def _documented(client, method: str, path: str, status: int, *words: str) -> None:
    """The operation documents the refusal (``ErrorBody``) and names the rule."""
    operation = client.app.openapi()["paths"][path][method]
    response = operation["responses"][str(status)]
    assert response["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/ErrorBody"}
    for word in words:
        assert word in response["description"], (word, response["description"])


def _nodes(client, *paths: str) -> None:
    for path in paths:
        assert client.put(f"{NODES}{path}", json={"properties": {"title": path}}).status_code == 201


def test_a_relation_valid_to_earlier_than_its_valid_from_is_refused(client, repo):
    _nodes(client, "/a", "/b")
    body = {"from": "knowledge:/a", "to": "knowledge:/b", "type": "links",
            "valid_from": "2024-06-01T00:00:00Z", "valid_to": "2024-05-31T23:59:59Z"}
    error = _refused(client.post("/api/repos/acme/relations", json=body), 422, "invalid_input", "valid_to")
    assert error["details"]["valid_from"] == "2024-06-01T00:00:00+00:00"
    assert client.get("/api/repos/acme/neighbors", params={"node": "knowledge:/a"}).json()["neighbors"] == []
    _documented(client, "post", "/api/repos/{repo}/relations", 422, "valid_to", "valid_from", "invalid_input")
    # The same instant is a valid (empty) interval.
    body["valid_to"] = body["valid_from"]
    assert client.post("/api/repos/acme/relations", json=body).status_code == 201


def test_invalidating_a_relation_from_another_workspace_is_refused(client, repo):
    _nodes(client, "/a", "/b")
    assert client.post("/api/repos/acme/workspaces", json={"name": "other"}).status_code == 201
    relation = {"from": "knowledge:/a", "to": "knowledge:/b", "type": "links"}
    assert client.post("/api/repos/acme/relations", json=relation).status_code == 201
    error = _refused(client.post("/api/repos/acme/workspaces/other/relations/invalidate", json=relation),
                     422, "invalid_input", "from")
    assert error["details"]["workspace"] == "other"
    _documented(client, "post", "/api/repos/{repo}/workspaces/{ws}/relations/invalidate", 422, "`from`",
                "invalid_input")
    assert client.post("/api/repos/acme/workspaces/knowledge/relations/invalidate", json=relation).status_code == 200


def test_invalidating_a_relation_before_its_valid_from_is_refused(client, repo):
    _nodes(client, "/a", "/b")
    relation = {"from": "knowledge:/a", "to": "knowledge:/b", "type": "links"}
    assert client.post("/api/repos/acme/relations",
                       json={**relation, "valid_from": "2024-06-01T00:00:00Z"}).status_code == 201
    error = _refused(client.post("/api/repos/acme/workspaces/knowledge/relations/invalidate",
                                 json={**relation, "valid_to": "2024-01-01T00:00:00Z"}),
                     422, "invalid_input", "valid_to")
    assert error["details"]["valid_from"] == "2024-06-01T00:00:00+00:00"


def test_a_diff_of_a_branch_against_itself_is_empty(client, repo):
    """Not a refusal (it was a 422 'not parent and child'): nothing changed since its own head."""
    _nodes(client, "/a")
    assert client.post("/api/repos/acme/branches", json={"name": "feature/x"}).status_code == 201
    assert client.put(f"{NODES}/b", params={"branch": "feature/x"}, json={}).status_code == 201
    for branch in ("main", "feature/x"):
        head = client.get(f"/api/repos/acme/branches/{branch}").json()["head_revision"]
        diff = client.get(f"/api/repos/acme/branches/{branch}/diff", params={"against": branch})
        assert diff.status_code == 200, diff.text
        assert diff.json() == {"branch": branch, "against": branch,
                               "base": {"kind": "head", "branch": branch, "revision": head},
                               "nodes": {"added": [], "modified": [], "deleted": []},
                               "relations": {"added": [], "removed": [], "modified": []}}
    # A branch that is neither parent nor child nor itself stays refused.
    assert client.post("/api/repos/acme/branches", json={"name": "feature/y"}).status_code == 201
    _refused(client.get("/api/repos/acme/branches/feature/x/diff", params={"against": "feature/y"}),
             422, "invalid_input", "against")
    _documented(client, "get", "/api/repos/{repo}/branches/{branch}/diff", 422, "`against`", "itself")


def _conflicting_branch(client) -> None:
    _nodes(client, "/a")
    assert client.post("/api/repos/acme/branches", json={"name": "feature/x"}).status_code == 201
    assert client.patch(f"{NODES}/a", params={"branch": "feature/x"},
                        json={"properties": {"title": "x"}}).status_code == 200
    assert client.patch(f"{NODES}/a", json={"properties": {"title": "main"}}).status_code == 200


def test_merging_a_branch_into_itself_is_refused(client, repo):
    _conflicting_branch(client)
    head = client.get("/api/repos/acme/branches/feature/x").json()["head_revision"]
    for dry_run in (True, False):
        _refused(client.post("/api/repos/acme/branches/feature/x/merge",
                             json={"into": "feature/x", "dry_run": dry_run}), 422, "invalid_input", "into")
    assert client.get("/api/repos/acme/branches/feature/x").json()["head_revision"] == head
    _documented(client, "post", "/api/repos/{repo}/branches/{branch}/merge", 422, "`into`", "itself",
                "`resolutions`", "`if_plan`")


def test_a_resolution_naming_no_conflict_of_the_merge_is_refused(client, repo):
    _conflicting_branch(client)
    _nodes(client, "/b")
    merge = "/api/repos/acme/branches/feature/x/merge"
    resolutions = [{"workspace": "knowledge", "path": "/a", "take": "theirs"},
                   {"workspace": "knowledge", "path": "/b", "take": "ours"}]
    error = _refused(client.post(merge, json={"into": "main", "resolutions": resolutions}), 422, "invalid_input",
                     "resolutions")
    assert error["details"]["unused"] == [{"workspace": "knowledge", "path": "/b"}]
    _refused(client.post(merge, json={"into": "main", "resolutions": [{**resolutions[0], "workspace": "nope"}]}),
             422, "invalid_input", "resolutions")
    assert client.get(f"{NODES}/a").json()["properties"]["title"] == "main"  # nothing merged
    assert client.post(merge, json={"into": "main", "resolutions": resolutions[:1]}).status_code == 200
    assert client.get(f"{NODES}/a").json()["properties"]["title"] == "x"


def test_an_if_plan_of_other_branches_is_refused(client, repo):
    _conflicting_branch(client)
    assert client.post("/api/repos/acme/branches", json={"name": "feature/y"}).status_code == 201
    plan = client.post("/api/repos/acme/branches/feature/y/merge", json={"dry_run": True}).json()["plan"]
    _refused(client.post("/api/repos/acme/branches/feature/x/merge",
                         json={"into": "main", "if_plan": plan, "resolutions": [
                             {"workspace": "knowledge", "path": "/a", "take": "ours"}]}),
             422, "invalid_input", "if_plan")


def test_a_node_listing_takes_exactly_one_of_parent_and_prefix(client, repo):
    _nodes(client, "/a")
    for params in ({}, {"parent": "/", "prefix": "/"}):
        _refused(client.get(NODES, params=params), 422, "invalid_input", "parent")
    for name, value in (("order_by", "name"), ("direction", "desc"), ("node_type", "kg:Node")):
        _refused(client.get(NODES, params={"prefix": "/", name: value}), 422, "invalid_input", name)
    _refused(client.get(NODES, params={"parent": "/", "prefix_mode": "raw"}), 422, "invalid_input", "prefix_mode")
    _refused(client.get(NODES, params={"parent": "/", "order_by": "-name", "direction": "asc"}),
             422, "invalid_input", "direction")
    _documented(client, "get", "/api/repos/{repo}/workspaces/{ws}/nodes", 422, "`parent`", "`prefix`", "`cursor`")
    assert [n["path"] for n in client.get(NODES, params={"parent": "/"}).json()["nodes"]] == ["/a"]
    assert [n["path"] for n in client.get(NODES, params={"prefix": "/"}).json()["nodes"]] == ["/a"]


def test_a_cursor_that_is_no_next_cursor_of_the_listing_is_refused(client, repo):
    _nodes(client, "/a", "/b")
    _refused(client.get(NODES, params={"prefix": "/", "cursor": "0"}), 422, "invalid_input", "cursor")
    _refused(client.get(NODES, params={"parent": "/", "cursor": "0"}), 422, "invalid_input", "cursor")
    _refused(client.get("/api/repos", params={"cursor": "0"}), 422, "invalid_input", "cursor")
    _documented(client, "get", "/api/repos", 422, "`cursor`")
    page = client.get(NODES, params={"prefix": "/", "limit": 1}).json()
    rest = client.get(NODES, params={"prefix": "/", "cursor": page["next_cursor"]}).json()
    assert [n["path"] for n in page["nodes"] + rest["nodes"]] == ["/a", "/b"]


def test_the_embedding_configuration_rules_across_fields(client, repo):
    """The overlap (a count) below the chunk size; a property indexed once, in one list."""
    workspaces = "/api/repos/acme/workspaces"
    for chunking in ({"chunk_size": 100, "overlap": 100},
                     {"chunk_size": 100, "overlap": {"type": "Tokens", "value": 150}}):
        _refused(client.post(workspaces, json={"name": "w", "embedding": {"chunking": chunking}}),
                 422, "invalid_input", "embedding.chunking")
    _refused(client.post(workspaces, json={"name": "w", "embedding": {
        "indexed_properties": {"short": ["title"], "body": ["title", "content"]}}}),
        422, "invalid_input", "embedding.indexed_properties")
    _refused(client.patch(f"{workspaces}/knowledge", json={"embedding": {"chunking": {"chunk_size": 8, "overlap": 9}},
                                                            "reembed": True}),
             422, "invalid_input", "embedding.chunking")
    assert client.get(f"{workspaces}/w").status_code == 404  # nothing written
    document = client.app.openapi()["components"]["schemas"]
    assert "overlap" in document["ChunkingRequest"]["description"]
    assert "one list only" in document["IndexedPropertiesRequest"]["description"]
    # The documented models are accepted: the local one, an Ollama one (not contacted to create).
    for name, model in (("local", "local:all-MiniLM-L6-v2"), ("ollama", "ollama:nomic-embed-text"),
                        ("fake", "fake:hash-32")):
        created = client.post(workspaces, json={"name": name, "embedding": {
            "model": model, "chunking": {"chunk_size": 100, "overlap": 99, "splitter": "words"}}})
        assert created.status_code == 201, created.text
        assert created.json()["embedding"]["chunking"]["unit"] == "words"


def test_the_document_says_what_this_server_allows(services, client, repo):
    """Built per server: ``rerank`` only false without a reranker (true is refused there); the
    ``fake:`` embedders only where they are allowed."""
    from fastapi.testclient import TestClient

    from api.app import create_app
    from kg.providers.fake import FakeReranker

    schemas = client.app.openapi()["components"]["schemas"]
    assert schemas["SearchRequest"]["properties"]["rerank"]["anyOf"] == [{"type": "boolean", "const": False},
                                                                       {"type": "null"}]
    error = client.post("/api/repos/acme/search", json={"query": "x", "rerank": True}).json()["error"]
    assert (error["code"], error["details"]) == ("invalid_input", {"rerank": True})
    models = schemas["EmbeddingRequest"]["properties"]["model"]["anyOf"]
    assert [m["title"] for m in models] == ["local", "ollama", "fake"]

    services.reranker = FakeReranker()
    services.settings = services.settings.model_copy(update={"allow_fake_embedder": False})
    with TestClient(create_app(services=services), raise_server_exceptions=False) as other:
        schemas = other.app.openapi()["components"]["schemas"]
        assert {"type": "boolean"} in schemas["SearchRequest"]["properties"]["rerank"]["anyOf"]
        models = schemas["EmbeddingRequest"]["properties"]["model"]["anyOf"]
        assert [m["title"] for m in models] == ["local", "ollama"]


def test_a_batch_names_each_node_once_and_writes_nothing_below_its_deletes(client, repo):
    _nodes(client, "/a")
    batch = "/api/repos/acme/nodes:batch"
    head = client.get("/api/repos/acme/branches/main").json()["head_revision"]
    twice = [{"workspace": "knowledge", "path": "/b"}, {"workspace": "knowledge", "path": "/b"}]
    error = _refused(client.post(batch, json={"upserts": twice}), 422, "invalid_input", "upserts")
    assert error["details"]["items"] == ["upserts[0]", "upserts[1]"]
    error = _refused(client.post(batch, json={"deletes": [{"workspace": "knowledge", "path": "/a"}],
                                              "upserts": [{"workspace": "knowledge", "path": "/a/b"}]}),
                     422, "invalid_input", "upserts")
    assert error["details"]["deleted"] == "/a"
    _refused(client.post(batch, json={}), 422, "invalid_input", "upserts")
    assert client.get("/api/repos/acme/branches/main").json()["head_revision"] == head
    _documented(client, "post", "/api/repos/{repo}/nodes:batch", 422, "twice", "deletes")
    schema = client.app.openapi()["components"]["schemas"]["BatchBody"]
    assert {"required": ["upserts"], "properties": {"upserts": {"minItems": 1}}} in schema["anyOf"]


RAG_CONFIG = {"embeddingModel": "fake:hash-64", "collectionName": "docs", "chunkSize": 50, "chunkOverlap": 5,
              "topK": 3, "weaviateUrl": "embedded"}


def test_the_rag_node_rules_across_fields_and_in_its_input(client):
    _refused(client.post("/api/rag", json={"config": {**RAG_CONFIG, "chunkOverlap": 50}, "input": "q"}),
             422, "invalid_input", "config.chunkOverlap")
    twice = 'q\n### File name "a.md"\none\n### File name "a.md"\ntwo\n'
    error = _refused(client.post("/api/rag", json={"config": RAG_CONFIG, "input": twice}), 422, "invalid_input",
                     "input")
    assert error["details"]["blocks"] == [1, 2]
    _refused(client.post("/api/rag", json={"config": RAG_CONFIG, "input": 'q\n### File name " "\none\n'}),
             422, "invalid_input", "input")
    _refused(client.post("/api/rag", json={"config": RAG_CONFIG, "input": 'q\n### File name ".."\none\n'}),
             422, "invalid_input", "input")
    schemas = client.app.openapi()["components"]["schemas"]
    assert "below chunkSize" in schemas["RagConfigRequest"]["properties"]["chunkOverlap"]["description"]
    assert schemas["RagConfigRequest"]["properties"]["weaviateUrl"]["enum"] == ["embedded"]
    answer = client.post("/api/rag", json={"config": RAG_CONFIG, "input": 'q\n### File name "a.md"\none\n'})
    assert answer.status_code == 200, answer.text
    assert answer.json()["ingestion"]["inserted"] == ["a.md"]


def test_each_function_is_an_operation_with_its_own_input(client, repo):
    _nodes(client, "/a")
    paths = client.app.openapi()["paths"]
    body = paths["/api/functions/{repo}/ask/invoke"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    schemas = client.app.openapi()["components"]["schemas"]
    invoke_ask = schemas[body["$ref"].rsplit("/", 1)[1]]
    assert invoke_ask["properties"]["input"]["$ref"].endswith("/AskInput")
    assert schemas["AskInput"]["required"] == ["question"]
    assert schemas["ResearchAssistantInput"]["properties"]["max_steps"]["maximum"] == \
        client.app.state.services.settings.research_max_steps
    unknown = client.post("/api/functions/acme/nope/invoke", json={"input": {}})
    assert (unknown.status_code, unknown.json()["error"]["code"]) == (404, "not_found")
    # An integral number is an integer (as in JSON Schema); a null direction is the default.
    found = client.post("/api/functions/acme/search-documents/invoke", json={"input": {"query": "a", "k": 2.0}})
    assert found.status_code == 200, found.text
    walked = client.post("/api/functions/acme/graph-context/invoke",
                         json={"input": {"seeds": ["knowledge:/a"], "direction": None, "hops": 1.0}})
    assert walked.status_code == 200, walked.text


def test_extracting_entities_of_an_entity_is_refused(client, repo):
    _nodes(client, "/a")
    assert client.put(f"{NODES}/entities", json={}).status_code == 201
    assert client.put(f"{NODES}/entities/acme", json={"properties": {"name": "acme"}}).status_code == 201
    error = client.post("/api/functions/acme/extract-entities/invoke",
                        json={"input": {"workspace": "knowledge", "path": "/entities/acme"}})
    assert (error.status_code, error.json()["error"]["code"]) == (422, "invalid_input"), error.text
    assert error.json()["error"]["details"] == {"field": "path", "path": "/entities/acme"}
    schema = client.app.openapi()["components"]["schemas"]["ExtractEntitiesInput"]
    assert "/entities" in schema["description"] and "422" in schema["description"]
