"""The MCP tools over nodes, relations, branches and merge take their arguments from the kg.types
request models the HTTP routes take as bodies: the same names (but a relation's ``source`` and
``target``, and ``from_branch``), types and bounds, and an argument out of bounds is refused as
``invalid_input`` before any use case runs."""

from __future__ import annotations

from typing import Any

import pytest

from kg.context import OPERATOR, run
from kg.mcp.server import build_server, compact_schema, fixed_binding
from kg.ops import nodes as node_ops
from kg.ops import repos as repo_ops
from kg.types.branches import BranchCreate, MergeBody
from kg.types.nodes import NodePut
from kg.types.relations import RelationCreate, RelationInvalidate, TraverseBody
from tests.mcp.client import call, mcp_session

#: Tool -> its model and, per argument the model types, the model's field (by its JSON name).
DERIVED: dict[str, tuple[Any, dict[str, str]]] = {
    "put_node": (NodePut, {"node_type": "node_type", "properties": "properties", "order": "order",
                           "message": "message"}),
    "relate": (RelationCreate, {"source": "from", "target": "to", "type": "type", "weight": "weight",
                                "properties": "properties", "valid_from": "valid_from", "valid_to": "valid_to",
                                "message": "message"}),
    "invalidate_relation": (RelationInvalidate, {"source": "from", "target": "to", "type": "type",
                                                 "valid_to": "valid_to", "invalidated_by": "invalidated_by",
                                                 "message": "message"}),
    "branch_create": (BranchCreate, {"name": "name", "from_branch": "from"}),
    "merge": (MergeBody, {"into": "into", "dry_run": "dry_run", "if_plan": "if_plan", "resolutions": "resolutions"}),
    "traverse": (TraverseBody, {name: name for name in TraverseBody.model_fields}),
}
#: What each tool takes besides the model's fields (addressing over MCP), in order.
OWN = {"put_node": (["workspace", "path"], ["parents", "branch"]), "relate": ([], ["branch"]),
       "invalidate_relation": ([], ["branch"]), "branch_create": ([], []), "merge": ([], ["branch"]),
       "traverse": ([], ["branch"])}


def _constraints(schema: dict[str, Any]) -> dict[str, Any]:
    """A property's schema without what differs by design: its words and its default (a tool's
    optional argument defaults to null, left out; the use case's default applies)."""
    return {k: v for k, v in schema.items() if k not in ("description", "default")}


@pytest.fixture
def acme(services):
    run(services, OPERATOR, repo_ops.create_repository, "acme")
    run(services, OPERATOR, repo_ops.create_workspace, "acme", "kb")
    run(services, OPERATOR, node_ops.put_node, "acme", "main", "kb", "/keys", node_type="kb:Article",
        properties={"content": "To rotate an API key, create a new key, then revoke the old key."})
    return services


def _schemas(services) -> dict[str, dict[str, Any]]:
    async def listed(client):
        return {t.name: t.input_schema for t in (await client.list_tools()).tools}
    return mcp_session(build_server(services, fixed_binding("acme", "main")), None, listed)


def test_each_tool_takes_its_request_models_fields_with_their_types_and_bounds(acme):
    schemas = _schemas(acme)
    for tool, (model, fields) in DERIVED.items():
        schema = schemas[tool]
        expected = compact_schema(model.model_json_schema())
        before, after = OWN[tool]
        assert list(schema["properties"]) == [*before, *fields, *after], tool
        assert schema.get("additionalProperties") is False, tool
        for argument, field in fields.items():
            assert _constraints(schema["properties"][argument]) == _constraints(expected["properties"][field]), \
                (tool, argument)
        assert schema.get("$defs", {}) == expected.get("$defs", {}), tool
        required = [f for f in fields if fields[f] in expected.get("required", [])]
        assert schema.get("required", []) == [*before, *required], tool
    put = schemas["put_node"]["properties"]
    assert put["node_type"] == {"type": "string", "pattern": put["node_type"]["pattern"], "maxLength": 255,
                                "description": NodePut.model_fields["node_type"].description}
    assert put["message"]["maxLength"] == 10_000
    assert schemas["traverse"]["properties"]["hops"] == {"type": "integer", "minimum": 0, "maximum": 10,
                                                         "description": "Hops from the seeds at most. Default: 2."}
    assert schemas["traverse"]["properties"]["direction"]["enum"] == ["OUT", "IN", "BOTH"]
    assert schemas["merge"]["properties"]["if_plan"]["maxLength"] == 200
    assert schemas["relate"]["properties"]["source"]["description"] == "The source node's address 'workspace:/path'."
    assert schemas["branch_create"]["properties"]["from_branch"]["description"] == (
        "The parent; default: the connection's branch.")


def test_each_tool_still_answers_what_it_did(acme):
    server = build_server(acme, fixed_binding("acme", "main"))
    opened = call(server, None, "branch_create", {"name": "agent/s1"})
    assert (opened["name"], opened["parent"], opened["mcp_path"]) == ("agent/s1", "main", "/mcp/acme/agent/s1")
    on = {"branch": "agent/s1"}
    put = call(server, None, "put_node", {"workspace": "kb", "path": "/plain", **on})
    assert put["created"] is True and put["branch"] == "agent/s1"
    assert (put["node"]["node_type"], put["node"]["properties"]) == ("kg:Node", {})  # NodePut's defaults
    put = call(server, None, "put_node", {"workspace": "kb", "path": "/notes/a", "node_type": "kb:Note",
                                          "properties": {"content": "Rotate keys monthly."}, "order": 2,
                                          "parents": True, "message": "a note", **on})
    assert (put["node"]["path"], put["node"]["order"]) == ("/notes/a", 2)
    related = call(server, None, "relate", {"source": "kb:/notes/a", "target": "kb:/keys", "type": "cites",
                                            "weight": 0.5, "valid_from": "2024-01-01T00:00:00Z", **on})
    assert related["created"] is True
    assert (related["relation"]["from"], related["relation"]["to"], related["relation"]["weight"]) == (
        "kb:/notes/a", "kb:/keys", 0.5)
    assert related["relation"]["valid_from"].startswith("2024-01-01T00:00:00")
    walked = call(server, None, "traverse", {"seeds": ["kb:/notes/a"], "hops": 1, "direction": "OUT", **on})
    assert [(n["path"], n["hop"]) for n in walked["nodes"]] == [("/notes/a", 0), ("/keys", 1)]
    ended = call(server, None, "invalidate_relation", {"source": "kb:/notes/a", "target": "kb:/keys",
                                                       "type": "cites", "invalidated_by": "a newer note", **on})
    assert ended["relation"]["invalidated_by"] == "a newer note" and ended["relation"]["valid_to"] is not None
    walked = call(server, None, "traverse", {"seeds": ["kb:/notes/a"], "as_of": "2024-06-01T00:00:00Z", **on})
    assert [n["path"] for n in walked["nodes"]] == ["/notes/a", "/keys"]  # it held then
    seen = call(server, None, "merge", {"dry_run": True, **on})
    assert seen["branch"] == "agent/s1" and seen["plan"]
    merged = call(server, None, "merge", {"if_plan": seen["plan"], **on})
    assert merged["revision"] is not None
    assert call(server, None, "get_node", {"workspace": "kb", "path": "/notes/a"})["node"]["order"] == 2


@pytest.mark.parametrize(("tool", "arguments", "loc", "kind"), [
    ("traverse", {"seeds": ["kb:/keys"], "hops": 11}, "hops", "less_than_equal"),
    ("traverse", {"seeds": []}, "seeds", "too_short"),
    ("traverse", {"seeds": ["kb:/keys"], "direction": "UP"}, "direction", "literal_error"),
    ("traverse", {"seeds": ["kb:/keys"], "as_of": "2024-06-01T00:00:00"}, "as_of", "timezone_aware"),
    ("put_node", {"workspace": "kb", "path": "/x", "message": "m" * 10_001}, "message", "string_too_long"),
    ("relate", {"source": "kb:/keys", "target": "kb:/keys", "type": "cites", "valid_from": "2024-01-01"},
     "valid_from", "timezone_aware"),
    ("invalidate_relation", {"source": "kb:/keys", "target": "kb:/keys", "type": "cites",
                             "invalidated_by": "x" * 2001}, "invalidated_by", "string_too_long"),
    ("merge", {"if_plan": "p" * 201}, "if_plan", "string_too_long"),
    ("branch_create", {"from_branch": "main"}, "name", "missing"),
])
def test_an_argument_out_of_the_models_bounds_is_invalid_input(acme, tool, arguments, loc, kind):
    server = build_server(acme, fixed_binding("acme", "main"))
    refused = call(server, None, tool, arguments, error=True)
    assert refused["error"]["code"] == "invalid_input"
    assert refused["error"]["details"]["errors"][0]["loc"] == [loc]
    assert refused["error"]["details"]["errors"][0]["type"] == kind
    assert call(server, None, "get_node", {"workspace": "kb", "path": "/x"}, error=True)["error"]["code"] == "not_found"


def test_a_second_server_lists_the_same_tools_and_runs_its_own_services(acme, tmp_path, monkeypatch):
    """Tool definitions are made once per process (kg.mcp.server._TOOL_DEFINITIONS): a server
    built later lists exactly what a fresh build lists, and its tools run over its own services."""
    import kg.mcp.server as server_module
    from kg.index.embedded import EmbeddedVectorIndex
    from kg.services import Services
    from kg.store.db import Database
    from tests.conftest import database_url

    async def listed(client):
        return [(t.name, t.description, t.input_schema, t.annotations) for t in (await client.list_tools()).tools]

    for read_only in (False, True):
        monkeypatch.setattr(server_module, "_TOOL_DEFINITIONS", {})
        fresh = mcp_session(build_server(acme, fixed_binding("acme", "main"), read_only=read_only), None, listed)
        assert server_module._TOOL_DEFINITIONS  # filled by that build
        again = mcp_session(build_server(acme, fixed_binding("acme", "main"), read_only=read_only), None, listed)
        assert again == fresh and len(fresh) >= 9
    # both kinds of server from one process's definitions: each lists what a fresh build lists
    both = mcp_session(build_server(acme, fixed_binding("acme", "main")), None, listed)
    assert both == mcp_session(build_server(acme, fixed_binding("acme", "main")), None, listed)
    assert mcp_session(build_server(acme, fixed_binding("acme", "main"), read_only=True), None, listed) == fresh
    assert len(fresh) < len(both)

    (tmp_path / "other").mkdir()
    with database_url("sqlite", tmp_path / "other") as url:
        settings = acme.settings.model_copy(update={"database_url": url, "data_dir": tmp_path / "other" / "data"})
        other = Services(settings=settings, db=Database(url), index=EmbeddedVectorIndex(settings.data_dir),
                         embedder_factory=acme.embedder_factory)
        try:
            run(other, OPERATOR, repo_ops.create_repository, "acme")
            run(other, OPERATOR, repo_ops.create_workspace, "acme", "kb")
            run(other, OPERATOR, node_ops.put_node, "acme", "main", "kb", "/other", node_type="kb:Note",
                properties={"content": "another store"})
            mine = call(build_server(other, fixed_binding("acme", "main")), None, "get_node",
                        {"workspace": "kb", "path": "/other"})
            assert mine["node"]["properties"] == {"content": "another store"}, mine
            theirs = call(build_server(acme, fixed_binding("acme", "main")), None, "get_node",
                          {"workspace": "kb", "path": "/other"}, error=True)
            assert theirs["error"]["code"] == "not_found"
        finally:
            other.close()
