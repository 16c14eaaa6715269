"""Response models (:mod:`kg.types`): the OpenAPI document describes every 2xx body, and the
models leave the bodies as the routes built them (every API test also checks that, through
``bodies_are_as_the_routes_built_them`` in conftest.py); here, full bodies of the cases where a
model could most easily change one: keys some answers leave out, ints in number fields, the
202 of an asynchronous invocation."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import ValidationError

from api.app import create_app
from kg import types as schemas
from kg.settings import Settings

NODES = "/api/repos/acme/workspaces/knowledge/nodes"


def _doc() -> dict[str, Any]:
    services = SimpleNamespace(db=SimpleNamespace(upgrade=lambda: None), settings=Settings(), key_cache=None,
                               reranker=None)
    return create_app(services=services).openapi()


def _refs(schema: dict[str, Any]) -> list[str]:
    """The component names a response schema points at (itself, or the members of its anyOf)."""
    if "$ref" in schema:
        return [schema["$ref"].rsplit("/", 1)[1]]
    return [name for member in schema.get("anyOf", []) for name in _refs(member)]


def test_openapi_describes_every_2xx_body_with_a_model():
    doc = _doc()
    components = doc["components"]["schemas"]
    described = files = 0
    for path, operations in doc["paths"].items():
        for method, operation in operations.items():
            for status, response in operation["responses"].items():
                if not status.startswith("2"):
                    continue
                if status == "204":
                    assert "content" not in response, (method, path)
                    continue
                if "application/json" not in response["content"]:  # a file (an export): bytes of named types
                    assert response["content"] and all(
                        media != "application/json" and body["schema"] == {"type": "string", "format": "binary"}
                        for media, body in response["content"].items()), (method, path, response)
                    files += 1
                    continue
                schema = response["content"]["application/json"]["schema"]
                names = _refs(schema)
                assert names, f"{method} {path} {status}: no model ({schema})"
                while names:
                    name = names.pop()
                    if "anyOf" in components[name]:  # FunctionOutput: one of the functions' outputs
                        names += _refs(components[name])
                        continue
                    assert components[name]["type"] == "object" and components[name]["properties"], (path, name)
                described += 1
    assert described >= 35
    assert files == 1  # GET /api/repos/{repo}/export


def _response_components(doc: dict[str, Any]) -> set[str]:
    """Every component reachable from a 2xx response."""
    components = doc["components"]["schemas"]
    seen: set[str] = set()
    todo = [name for operations in doc["paths"].values() for operation in operations.values()
            for status, response in operation["responses"].items() if status.startswith("2")
            for name in _refs(response.get("content", {}).get("application/json", {}).get("schema", {}))]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        text = json.dumps(components[name])
        todo += [part.split('"')[0] for part in text.split('"#/components/schemas/')[1:]]
    return seen


def test_response_models_refuse_unknown_keys_except_what_an_index_reports():
    doc = _doc()
    components = doc["components"]["schemas"]
    names = _response_components(doc)
    assert {"Node", "SearchRow", "AskOutput", "Job", "IndexStats"} <= names
    for name in names - {"FunctionOutput"}:
        expected = name != "IndexStats"
        assert (components[name].get("additionalProperties") is False) is expected, name


def test_a_key_no_model_declares_is_refused_not_dropped():
    node = {"id": "n", "workspace": "w", "path": "/a", "name": "a", "parent_path": None, "node_type": "kg:Node",
            "properties": {}, "order": None, "revision": 1, "created_at": None, "updated_at": None}
    assert schemas.Node.model_validate(node).model_dump() == node
    with pytest.raises(ValidationError, match="extra_forbidden"):
        schemas.Node.model_validate({**node, "new_key": 1})
    with pytest.raises(ValidationError):
        schemas.Node.model_validate({**node, "revision": 1.0})  # strict: never coerced


def test_numbers_are_answered_as_written(client, repo):
    """An int ``order`` stays an int (a float field would answer ``1.0``), a float stays a float."""
    r = client.post("/api/repos/acme/nodes:batch", json={"upserts": [
        {"workspace": "knowledge", "path": "/a", "properties": {"n": 1, "x": 1.0}, "order": 1},
        {"workspace": "knowledge", "path": "/b", "order": 2.5}]})
    assert r.status_code == 200, r.text
    upserted = r.json()["upserted"]
    assert '"order":1,' in r.text and '"order":2.5,' in r.text and '"properties":{"n":1,"x":1.0}' in r.text
    assert [list(n) for n in upserted] == [list(schemas.Node.model_fields)] * 2


def test_keys_some_answers_leave_out_stay_left_out(client, repo):
    created = client.post("/api/repos/acme/branches", json={"name": "feature/x"})
    assert created.status_code == 201
    assert list(created.json()) == ["name", "parent", "base_revision", "head_revision", "created_at"]
    got = client.get("/api/repos/acme/branches/feature/x").json()
    assert got == {**created.json(), "ahead": 0, "behind": 0}
    client.put(f"{NODES}/docs", json={"properties": {"title": "Docs"}})
    children = client.get(NODES, params={"parent": "/"}).json()
    assert list(children) == ["nodes", "next_cursor"] and children["next_cursor"] is None
    page = client.get(NODES, params={"prefix": "/"}).json()
    assert list(page) == ["nodes", "next_cursor"] and page["next_cursor"] is None
    search = client.post("/api/repos/acme/search", json={"query": "docs", "mode": "fulltext"}).json()
    assert list(search) == ["results", "took_ms"]  # no fusion for one leg, no warnings
    hybrid = client.post("/api/repos/acme/search", json={"query": "docs"}).json()
    assert list(hybrid) == ["results", "took_ms", "fusion"]
    assert hybrid["fusion"] == {"engine": "kg", "method": "relative_score",
                                "weights": {"vector": 0.25, "fulltext": 1.0}}
    rrf = client.post("/api/repos/acme/search", json={"query": "docs", "fusion_type": "ranked"}).json()
    assert rrf["fusion"] == {"engine": "kg", "method": "rrf", "k": 60, "weights": {"vector": 0.25, "fulltext": 1.0}}


def test_workspace_body_with_an_overlap_object(client, repo):
    embedding = {"model": "fake:hash-64", "chunking": {"splitter": "recursive", "chunk_size": 200,
                                                       "overlap": {"type": "Percentage", "value": 0.25},
                                                       "unit": "tokens"}}
    r = client.post("/api/repos/acme/workspaces", json={"name": "pct", "embedding": embedding})
    assert r.status_code == 201, r.text
    body = r.json()
    assert list(body) == ["name", "created_at", "embedding", "reembedding"]
    default_indexed = {"short": ["title", "question"], "body": ["content", "body", "text", "answer"]}
    assert body["embedding"] == {**embedding, "indexed_properties": default_indexed}
    assert body["reembedding"] is None
    assert json.dumps(body["embedding"], separators=(",", ":")) in r.text  # key order as built
    assert client.get("/api/repos/acme/workspaces/pct").json() == body


def test_an_asynchronous_invocation_answers_202_with_the_job(client, repo):
    r = client.post("/api/functions/acme/search-documents/invoke",
                    json={"input": {"query": "x"}, "wait_for_completion": False})
    assert r.status_code == 202, r.text
    job_id, state = r.json()["job_id"], r.json()["state"]
    assert r.content == json.dumps({"job_id": job_id, "state": state}, separators=(",", ":")).encode()
    assert state in ("queued", "running", "succeeded")
    assert r.headers["location"] == f"/api/jobs/{job_id}"
    assert r.headers["content-type"] == "application/json"
    schemas.JobAccepted.model_validate(r.json())


def test_a_rag_file_name_is_answered_as_stored(client):
    """The embedded RAG node answers a chunk's ``file`` from its node's ``source_file``
    property, which any writer of the collection's workspace may have set to another JSON
    value: answered as stored, as before the response models, never a 500."""
    from tests.api.test_rag_node import CONFIG, doc

    assert client.post("/api/rag", json={"config": CONFIG, "input": doc("q", [("a.txt", "quokka facts")])}
                       ).status_code == 200
    workspace = client.get("/api/repos/rag/workspaces").json()["workspaces"][0]["name"]
    r = client.put(f"/api/repos/rag/workspaces/{workspace}/nodes/b.txt", json={
        "node_type": "rag:File", "properties": {"content": "quokka habits", "source_file": 5}})
    assert r.status_code == 201, r.text
    r = client.post("/api/rag", json={"config": {**CONFIG, "topK": 10}, "input": "quokka"})
    assert r.status_code == 200, r.text
    assert sorted(map(str, (x["file"] for x in r.json()["results"]))) == ["5", "a.txt"]
    assert 5 in [x["file"] for x in r.json()["results"]]
