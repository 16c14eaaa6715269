"""The MCP server through the SDK's in-memory client (no transport): the tool list per caller,
the read-only switch, and the research assistant once kg.rag has it."""

from __future__ import annotations

import pytest

from kg.access import Actor, make_grant
from kg.context import OPERATOR, run
from kg.mcp.server import (
    READ_TOOLS,
    RESEARCH_ASSISTANT,
    WRITE_TOOLS,
    Binding,
    build_server,
    fixed_binding,
    offered_tools,
)
from kg.ops import nodes as node_ops
from kg.ops import repos as repo_ops
from kg.rag.functions import FUNCTIONS
from tests.mcp.client import call, tool_names

AGENT = Actor("key", "agent", "0" * 16, (make_grant("acme", ["main"], ["*"], ["read"]),
                                         make_grant("acme", ["agent/*"], ["*"], ["read", "write", "branch:create"])))
READER = Actor("key", "reader", "1" * 16, (make_grant("acme", ["*"], ["*"], ["read"]),))


@pytest.fixture
def acme(services):
    run(services, OPERATOR, repo_ops.create_repository, "acme")
    run(services, OPERATOR, repo_ops.create_workspace, "acme", "kb")
    run(services, OPERATOR, node_ops.put_node, "acme", "main", "kb", "/keys", node_type="kb:Article",
        properties={"content": "To rotate an API key, create a new key, then revoke the old key."})
    return services


def test_offered_tools_follow_the_grants_in_the_repository():
    every = [*READ_TOOLS, *WRITE_TOOLS]
    assert offered_tools(Binding("acme", "main", OPERATOR), every) == every
    assert offered_tools(Binding("acme", "main", READER), every) == list(READ_TOOLS)
    assert "merge" not in offered_tools(Binding("acme", "main", AGENT), every)
    assert offered_tools(Binding("other", "main", AGENT), every) == list(READ_TOOLS)  # no grant there


def test_read_only_registers_only_the_read_tools(acme):
    server = build_server(acme, fixed_binding("acme", "main"), read_only=True)
    assert tool_names(server) == list(READ_TOOLS)
    assert "Unknown tool" in call(server, None, "put_node", {"workspace": "kb", "path": "/x", "node_type": "kb:Note",
                                                             "properties": {}}, error=True, raw=True)
    assert call(server, None, "search", {"query": "rotate"})["results"][0]["path"] == "/keys"


def test_a_key_is_listed_its_tools_in_memory_too(acme):
    assert tool_names(build_server(acme, fixed_binding("acme", "main", READER))) == list(READ_TOOLS)
    put = call(build_server(acme, fixed_binding("acme", "main", READER)), None, "put_node",
               {"workspace": "kb", "path": "/x", "node_type": "kb:Note", "properties": {}}, error=True)
    assert put["error"]["code"] == "forbidden"


@pytest.mark.skipif(RESEARCH_ASSISTANT not in FUNCTIONS, reason="the research assistant has not landed in kg.rag")
def test_the_research_assistant_answers_on_its_own_session_branch(acme):
    server = build_server(acme, fixed_binding("acme", "main"))
    assert "research_assistant" in tool_names(server)
    out = call(server, None, "research_assistant", {"question": "How do I rotate an API key?"})
    assert out["grounded"] is True and out["branch"].startswith("research/") and out["from"] == "main"
    added = call(server, None, "diff", {"branch": out["branch"]})["nodes"]["added"]
    assert any(n["path"].startswith("/answers/") for n in added)
    missing = call(server, None, "get_node", {"workspace": "kb", "path": out["stored"]["path"]}, error=True)
    assert missing["error"]["code"] == "not_found"  # main is unchanged until a merge
