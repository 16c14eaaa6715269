"""The LangChain tool set against a real ``kg serve`` (SQLite and PostgreSQL): each tool run
through ``tool.invoke`` (and ``ainvoke``), answering what the client's operation answers; kg's
refusals (forbidden, not found, invalid) and arguments the schema refuses come back as tool
errors in the API's error shape, and write nothing."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from langchain_core.messages import ToolMessage
from langchain_core.tools import StructuredTool

from kg.adapters.langchain import kg_tools
from kg.client import AsyncClient, Client
from kg.errors import NotFound
from tests.client.conftest import Server

pytestmark = pytest.mark.anyio


def tools(kg: Client | None = None, akg: AsyncClient | None = None, repo: str = "peps",
          **kwargs: Any) -> dict[str, StructuredTool]:
    return {tool.name: tool for tool in kg_tools(repo, client=kg, async_client=akg, **kwargs)}


def test_the_tool_set_mirrors_the_mcp_tools(server: Server) -> None:
    with Client(server.url, api_key=server.admin_key) as kg:
        found = tools(kg)
    assert list(found) == ["kg_search", "kg_ask", "kg_graph_context", "kg_create_branch", "kg_put_node"]
    schema = found["kg_search"].args
    assert schema["branch"]["default"] == "main" and "repo" not in schema
    assert set(found["kg_put_node"].args) >= {"workspace", "path", "properties", "node_type", "branch"}
    assert found["kg_create_branch"].args["from_branch"]["default"] == "main"


def test_kg_search_answers_the_search(server: Server) -> None:
    with Client(server.url, api_key=server.admin_key) as kg:
        answer = kg.search("peps", "What is a build backend?", k=4, where={"status": "Final"})
        out = tools(kg)["kg_search"].invoke({"query": "What is a build backend?", "k": 4,
                                              "where": {"status": "Final"}})
    assert [(r["path"], r["chunk_index"], r["score"], r["vector_rank"], r["fulltext_rank"]) for r in out["results"]] \
        == [(r.path, r.chunk_index, r.score, r.vector_rank, r.fulltext_rank) for r in answer.results]
    assert out["results"][0]["path"] == "/pep-0517"


def test_kg_ask_answers_from_the_documents(server: Server) -> None:
    with Client(server.url, api_key=server.admin_key) as kg:
        out = tools(kg)["kg_ask"].invoke({"question": "What is a build frontend?"})
    assert out["mode"] == "extractive" and out["grounded"] is True
    assert out["citations"] and {c["path"] for c in out["citations"]} >= {"/pep-0517"}


def test_kg_graph_context_walks_the_relations(server: Server) -> None:
    with Client(server.url, api_key=server.admin_key) as kg:
        out = tools(kg)["kg_graph_context"].invoke({"seeds": ["notes:/guide/upgrade"], "hops": 1})
        around = kg.neighbors("peps", "notes:/guide/upgrade", direction="BOTH")
    assert [s["path"] for s in out["seeds"]] == ["/guide/upgrade"]
    walked = {n["path"] for n in out["nodes"] if n["hop"] == 1}
    assert walked == {e.path for e in around.neighbors} == {"/guide/backup", "/guide/install"}


def test_kg_create_branch_and_kg_put_node_write_on_the_branch(server: Server) -> None:
    name = f"agent/{uuid.uuid4().hex[:8]}"
    with Client(server.url, api_key=server.admin_key) as kg:
        found = tools(kg)
        created = found["kg_create_branch"].invoke({"name": name})
        assert (created["name"], created["parent"]) == (name, "main")
        on_branch = tools(kg, branch=name)
        put = on_branch["kg_put_node"].invoke({"workspace": "notes", "path": "/agent/finding", "node_type": "kb:Note",
                                               "properties": {"title": "Finding", "content": "The zeppelin waits."},
                                               "parents": True})
        assert (put["path"], put["node_type"], put["properties"]["title"]) == ("/agent/finding", "kb:Note", "Finding")
        hits = on_branch["kg_search"].invoke({"query": "zeppelin", "mode": "fulltext"})["results"]
        assert [h["path"] for h in hits] == ["/agent/finding"]
        assert found["kg_search"].invoke({"query": "zeppelin", "mode": "fulltext"})["results"] == []
        with pytest.raises(NotFound):
            kg.get_node("peps", "notes", "/agent/finding")  # main is untouched


def reader(server: Server) -> str:
    with Client(server.url, api_key=server.admin_key) as kg:
        made = kg.create_key(f"reader-{uuid.uuid4().hex[:6]}", grants=[{"repo": "peps", "actions": ["read"]}])
    return made.key


def error_of(output: Any) -> dict[str, Any]:
    """The API's error shape a tool answered (its text)."""
    content = output.content if isinstance(output, ToolMessage) else output
    body = json.loads(content)
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "details"}
    return dict(body["error"])


def test_a_forbidden_write_is_a_tool_error_and_writes_nothing(server: Server) -> None:
    with Client(server.url, api_key=reader(server)) as kg:
        found = tools(kg)
        refused = found["kg_put_node"].invoke({"workspace": "notes", "path": "/denied", "properties": {"a": 1}})
        assert error_of(refused)["code"] == "forbidden"
        branch = found["kg_create_branch"].invoke({"name": f"denied-{uuid.uuid4().hex[:6]}"})
        assert error_of(branch)["code"] == "forbidden"
        # Reads are allowed to the reader.
        assert found["kg_search"].invoke({"query": "build backend", "k": 1})["results"]
    with Client(server.url, api_key=server.admin_key) as kg, pytest.raises(NotFound):
        kg.get_node("peps", "notes", "/denied")


def test_not_found_and_invalid_input_are_tool_errors(server: Server) -> None:
    with Client(server.url, api_key=server.admin_key) as kg:
        missing = tools(kg, repo="no-such-repo")["kg_search"].invoke({"query": "anything"})
        assert error_of(missing)["code"] == "not_found"
        found = tools(kg)
        no_branch = found["kg_search"].invoke({"query": "anything", "branch": "no-such-branch"})
        assert error_of(no_branch)["code"] == "not_found"
        invalid = found["kg_search"].invoke({"query": "anything", "k": 0})
        assert error_of(invalid)["code"] == "invalid_input"
        # A tool call (as an agent makes it): the error is the ToolMessage's content, status "error".
        message = found["kg_graph_context"].invoke({"type": "tool_call", "id": "call-1", "name": "kg_graph_context",
                                                    "args": {"seeds": ["peps:/no-such-pep"]}})
        assert isinstance(message, ToolMessage) and message.status == "error"
        assert error_of(message)["details"] == {"workspace": "peps", "path": "/no-such-pep"}
        assert error_of(message)["code"] == "not_found"


def test_arguments_the_schema_refuses_are_a_tool_error(server: Server) -> None:
    with Client(server.url, api_key=server.admin_key) as kg:
        out = tools(kg)["kg_search"].invoke({"query": "anything", "nope": 1})
    assert error_of(out)["code"] == "invalid_input" and "nope" in error_of(out)["message"]


async def test_the_tools_run_async(server: Server) -> None:
    async with AsyncClient(server.url, api_key=server.admin_key) as akg:
        found = tools(akg=akg)
        out = await found["kg_search"].ainvoke({"query": "What is a build backend?", "k": 3})
        asked = await found["kg_ask"].ainvoke({"question": "What is a build frontend?"})
        missing = await tools(akg=akg, repo="no-such-repo")["kg_search"].ainvoke({"query": "anything"})
    with Client(server.url, api_key=server.admin_key) as kg:
        answer = kg.search("peps", "What is a build backend?", k=3)
    assert [(r["path"], r["chunk_index"], r["score"]) for r in out["results"]] == [
        (r.path, r.chunk_index, r.score) for r in answer.results]
    assert asked["grounded"] is True
    assert error_of(missing)["code"] == "not_found"


def test_the_function_tools_take_their_input_models_fields() -> None:
    """kg_ask and kg_graph_context: the fields of the kg.types input model of InvokeAsk /
    InvokeGraphContext (names, types, constraints, defaults), then InvokeBody's branch, its
    default the tool set's; a value out of the model's bounds is refused before any request."""
    from kg.types.functions import InvokeAsk, InvokeGraphContext, invoke_input

    found = tools(Client("http://127.0.0.1:9"), branch="agent/x")
    for name, body in (("kg_ask", InvokeAsk), ("kg_graph_context", InvokeGraphContext)):
        schema = found[name].args_schema
        assert isinstance(schema, type)
        model = invoke_input(body)
        assert list(schema.model_fields) == [*model.model_fields, "branch"]
        for field, info in model.model_fields.items():
            got = schema.model_fields[field]
            assert (got.annotation, got.metadata, got.default) == (info.annotation, info.metadata, info.default)
        assert schema.model_fields["branch"].annotation is body.model_fields["branch"].annotation
        assert schema.model_fields["branch"].default == "agent/x"
    refused = json.loads(found["kg_graph_context"].invoke({"seeds": ["notes:/guide/upgrade"], "hops": 9}))
    assert refused["error"]["code"] == "invalid_input" and "hops" in refused["error"]["message"]
