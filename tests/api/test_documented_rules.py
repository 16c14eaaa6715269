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
                                 json={**relation, "valid_to": "2024-01-01T00:00:00Z"}), 422, "invalid_input", "valid_to")
    assert error["details"]["valid_from"] == "2024-06-01T00:00:00+00:00"
