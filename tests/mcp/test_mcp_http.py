"""The MCP server through the real ``mcp`` client: streamable HTTP against a real ``kg serve``
process (on SQLite and on PostgreSQL), API keys with different grants, every tool called."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from sqlalchemy import create_engine, text

from kg.access import parse_grant
from kg.context import OPERATOR, run
from kg.mcp.server import READ_TOOLS, WRITE_TOOLS
from kg.ops import keys as key_ops
from kg.services import Services
from kg.settings import Settings
from tests.conftest import ADAPTER_BACKENDS, FAKE_MODEL, POSTGRES_URL, _pg_schema_url
from tests.mcp.client import call, mcp_error, mcp_session, read, tool_names
from tests.serve import start_server, stop_server

PEPPER = "a-pepper-for-the-mcp-tests-only"
ROOT = Path(__file__).resolve().parents[2]


def _database(backend: str, folder: Path):
    """(url, cleanup) of a fresh database."""
    if backend == "sqlite":
        return f"sqlite:///{folder / 'kg.sqlite3'}", lambda: None
    schema = f"kg_mcp_{uuid.uuid4().hex[:12]}"
    admin = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))

    def drop() -> None:
        with admin.connect() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()
    return _pg_schema_url(schema), drop


def serve_env(db_url: str, data: Path, **extra: str) -> dict[str, str]:
    """The environment of a test ``kg serve``: auth on, the fake embedder, inline indexing."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KG_")}
    env.update({"KG_DATABASE_URL": db_url, "KG_DATA_DIR": str(data), "KG_EMBEDDING_MODEL": FAKE_MODEL,
                "KG_ALLOW_FAKE_EMBEDDER": "true", "KG_INDEX_INLINE": "true", "KG_AUTH": "true",
                "KG_KEY_PEPPER": PEPPER, "OPENBLAS_NUM_THREADS": "1",
                "KG_ASK_MIN_SIMILARITY": "0.15", "KG_RAG_MAX_DISTANCE": "2", **extra})  # the fake embedder
    return env


def make_keys(db_url: str, data: Path) -> dict[str, str]:
    """The tokens of four keys: an admin, a typical agent, a reader, a merger."""
    settings = Settings(database_url=db_url, data_dir=data, embedding_model=FAKE_MODEL, allow_fake_embedder=True,
                        key_pepper=PEPPER)
    services = Services.from_settings(settings)
    try:
        services.db.upgrade()
        grants = {
            "admin": [],
            "agent": ["repo=acme,branches=main,actions=read",
                      "repo=acme,branches=agent/*,actions=read+write+branch:create"],
            "reader": ["repo=acme,actions=read"],
            "merger": ["repo=acme,branches=main+agent/*,actions=read+write+branch:create+merge"],
        }
        return {name: run(services, OPERATOR, key_ops.create_key, name=name,
                          grants=[parse_grant(g) for g in wanted], admin=name == "admin").key
                for name, wanted in grants.items()}
    finally:
        services.close()


def seed(base: str, admin: str) -> None:
    """Repository ``acme``: workspace ``kb`` with /docs (billing, keys in that order) and a relation."""
    http = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {admin}"}, timeout=60)
    assert http.post("/api/repos", json={"name": "acme"}).status_code == 201
    assert http.post("/api/repos/acme/workspaces", json={"name": "kb"}).status_code == 201
    nodes = {
        "/docs": ("kg:Folder", {"title": "Docs"}, None),
        "/docs/keys": ("kb:Article", {"title": "Keys", "content": "To rotate an API key, create a new key in "
                                                                 "the settings page, then revoke the old key."}, 2.0),
        "/docs/billing": ("kb:Article", {"title": "Billing", "content": "Invoices are issued on the first day "
                                                                        "of every month."}, 1.0),
    }
    for path, (node_type, properties, order) in nodes.items():
        r = http.put(f"/api/repos/acme/workspaces/kb/nodes{path}",
                     json={"node_type": node_type, "properties": properties, "order": order})
        assert r.status_code == 201, r.text
    r = http.post("/api/repos/acme/relations", json={"from": "kb:/docs/billing", "to": "kb:/docs/keys",
                                                     "type": "mentions"})
    assert r.status_code == 201, r.text


@pytest.fixture(scope="module", params=ADAPTER_BACKENDS)
def server(request, tmp_path_factory):
    """A real ``kg serve`` (auth on) with ``acme`` seeded: (base URL, tokens by key name, backend)."""
    folder = tmp_path_factory.mktemp(f"mcp-{request.param}")
    db_url, cleanup = _database(request.param, folder)
    try:
        keys = make_keys(db_url, folder / "data")
        proc, base = start_server(serve_env(db_url, folder / "data"))
        try:
            seed(base, keys["admin"])
            yield base, keys, request.param
        finally:
            stop_server(proc)
    finally:
        cleanup()


ALL_TOOLS = [*READ_TOOLS, *[t for t in WRITE_TOOLS if t != "research_assistant"]]


def test_the_tool_list_follows_the_key(server):
    base, keys, _ = server
    url = f"{base}/mcp/acme/main"
    admin = tool_names(url, keys["admin"])
    assert [t for t in admin if t != "research_assistant"] == ALL_TOOLS
    assert tool_names(url, keys["reader"]) == list(READ_TOOLS)
    agent = tool_names(url, keys["agent"])
    assert "merge" not in agent and "put_node" in agent and "branch_create" in agent
    assert "merge" in tool_names(url, keys["merger"])


def test_tools_carry_json_schemas_and_annotations(server):
    base, keys, _ = server

    async def tools(session):
        return {t.name: t for t in (await session.list_tools()).tools}

    listed = mcp_session(f"{base}/mcp/acme/main", keys["admin"], tools)
    search = listed["search"]
    assert search.input_schema["type"] == "object" and search.input_schema["required"] == ["query"]
    assert search.annotations.read_only_hint is True and search.annotations.idempotent_hint is True
    put = listed["put_node"]
    assert put.input_schema["required"] == ["workspace", "path"]  # NodePut's type and properties have defaults
    assert put.annotations.read_only_hint is False and put.annotations.destructive_hint is True
    assert listed["branch_create"].annotations.destructive_hint is False
    assert all(t.description for t in listed.values())


def test_a_wrong_or_missing_key_is_refused(server):
    base, _, _ = server
    url = f"{base}/mcp/acme/main"
    ask = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    accept = {"Accept": "application/json, text/event-stream"}
    for headers in ({}, {"Authorization": "Bearer kg_0123456789abcdef_" + "x" * 43}, {"Authorization": "Bearer no"}):
        r = httpx.post(url, json=ask, headers={**accept, **headers})
        assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")
        assert r.headers["content-type"] == "application/json"
        message = "an API key is required: Authorization: Bearer kg_<id>_<secret>" if not headers \
            else "invalid API key"
        assert r.json() == {"error": {"code": "unauthenticated", "message": message, "details": {}}}
    with pytest.raises(Exception) as raised:
        tool_names(url, "kg_0123456789abcdef_" + "y" * 43)
    assert mcp_error(raised.value).error.code == -32603  # the client's: "Server returned an error response"


def test_a_revoked_key_is_refused_in_the_api_error_shape(server):
    """The SDK answered a refused key with its OAuth body (``{"error": "invalid_token"}``): now
    the API's error shape, saying why, as ``/api`` does."""
    base, keys, _ = server
    admin = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {keys['admin']}"}, timeout=60)
    made = admin.post("/api/keys", json={"name": "short-lived", "grants": [{"repo": "acme", "actions": ["read"]}]})
    assert made.status_code == 201, made.text
    assert admin.delete(f"/api/keys/{made.json()['id']}").status_code == 200
    r = httpx.post(f"{base}/mcp/acme/main", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                   headers={"Accept": "application/json, text/event-stream",
                            "Authorization": f"Bearer {made.json()['key']}"})
    on_api = httpx.get(f"{base}/api/repos", headers={"Authorization": f"Bearer {made.json()['key']}"})
    assert r.status_code == on_api.status_code == 401
    assert r.json() == on_api.json() == {"error": {"code": "unauthenticated",
                                                   "message": "API key 'short-lived' is revoked",
                                                   "details": {"state": "revoked"}}}


def test_every_tool_through_an_agent_session_branch(server):
    base, keys, backend = server
    agent, session_branch = keys["agent"], f"agent/every-tool-{backend}"
    main = f"{base}/mcp/acme/main"

    created = call(main, agent, "branch_create", {"name": session_branch})
    assert created["name"] == session_branch and created["parent"] == "main"
    assert created["mcp_path"] == f"/mcp/acme/{session_branch}"
    url = base + created["mcp_path"]

    found = call(url, agent, "search", {"query": "how do I rotate an API key", "k": 2})
    assert found["branch"] == session_branch
    assert found["results"][0]["path"] == "/docs/keys"
    assert found["results"][0]["uri"] == f"kg://acme/kb/docs/keys?branch={session_branch.replace('/', '%2F')}"

    answer = call(url, agent, "ask", {"question": "How do I rotate an API key?"})
    assert answer["grounded"] is True and answer["citations"][0]["path"] == "/docs/keys"

    folder = call(url, agent, "get_node", {"workspace": "kb", "path": "/docs"})
    assert folder["node"]["path"] == "/docs" and folder["parent"] is None
    assert [c["path"] for c in folder["children"]] == ["/docs/billing", "/docs/keys"]  # by order
    leaf = call(url, agent, "get_node", {"workspace": "kb", "path": "/docs/keys"})
    assert leaf["parent"]["path"] == "/docs" and leaf["children"] == []

    put = call(url, agent, "put_node", {"workspace": "kb", "path": "/docs/answer", "node_type": "kb:Answer",
                                        "properties": {"content": "Create a new key, then revoke the old one."}})
    assert put["created"] is True and put["branch"] == session_branch and put["node"]["revision"] > 0
    related = call(url, agent, "relate", {"source": "kb:/docs/answer", "target": "kb:/docs/keys", "type": "cites"})
    assert related["created"] is True and related["relation"]["type"] == "cites"

    around = call(url, agent, "neighbors", {"node": "kb:/docs/keys", "direction": "IN"})
    assert sorted((n["path"], n["relation_type"]) for n in around["neighbors"]) == [
        ("/docs/answer", "cites"), ("/docs/billing", "mentions")]
    walked = call(url, agent, "traverse", {"seeds": ["kb:/docs/answer"], "hops": 2, "direction": "BOTH"})
    assert {(n["path"], n["hop"]) for n in walked["nodes"]} == {
        ("/docs/answer", 0), ("/docs/keys", 1), ("/docs/billing", 2)}
    assert walked["truncated"] is False
    context = call(url, agent, "graph_context", {"seeds": ["kb:/docs/answer"], "hops": 1})
    assert {n["path"] for n in context["nodes"]} == {"/docs/answer", "/docs/keys"}

    extracted = call(url, agent, "extract_entities", {"workspace": "kb", "path": "/docs/keys"})
    assert extracted["branch"] == session_branch and extracted["skipped"] is False
    assert isinstance(extracted["entities"], list)

    changed = call(url, agent, "diff", {})
    assert "/docs/answer" in [n["path"] for n in changed["nodes"]["added"]]
    encoded = call(f"{base}/mcp/acme/{quote(session_branch, safe='')}", agent, "diff", {})  # agent%2F...
    assert encoded["branch"] == session_branch and encoded["nodes"] == changed["nodes"]
    assert any(r["type"] == "cites" for r in changed["relations"]["added"])

    removed = call(url, agent, "unrelate", {"source": "kb:/docs/answer", "target": "kb:/docs/keys"})
    assert removed["deleted"] == 1

    # main is untouched until a person merges
    missing = call(main, agent, "get_node", {"workspace": "kb", "path": "/docs/answer"}, error=True)
    assert missing["error"]["code"] == "not_found"
    refused = call(url, agent, "merge", {}, error=True)  # not listed to the agent, and refused if called
    assert refused["error"]["code"] == "forbidden"
    preview = call(url, keys["merger"], "merge", {"dry_run": True})
    assert preview["dry_run"] is True
    merged = call(url, keys["merger"], "merge", {})
    assert merged["revision"] is not None and merged["branch"] == session_branch
    assert call(main, agent, "get_node", {"workspace": "kb", "path": "/docs/answer"})["node"]["node_type"] == \
        "kb:Answer"


def test_a_node_resource_by_repository_workspace_path_and_branch(server):
    base, keys, _ = server
    url = f"{base}/mcp/acme/main"
    node = json.loads(read(url, keys["reader"], "kg://acme/kb/docs/keys?branch=main"))
    assert node["path"] == "/docs/keys" and node["branch"] == "main" and node["properties"]["title"] == "Keys"
    assert json.loads(read(url, keys["reader"], "kg://acme/kb/docs/keys"))["branch"] == "main"  # the URL's

    async def templates(session):
        return [t.uri_template for t in (await session.list_resource_templates()).resource_templates]

    assert mcp_session(url, keys["reader"], templates) == ["kg://{repo}/changes{?branch,after}",
                                                            "kg://{repo}/{workspace}/{+path}{?branch}"]
    with pytest.raises(Exception) as raised:
        read(url, keys["reader"], "kg://acme/kb/docs/nothing-here?branch=main")
    error = mcp_error(raised.value)
    assert error.error.code == -32602 and error.error.data["error"]["code"] == "not_found"


def test_bad_arguments_and_refusals_are_tool_errors_with_kgs_code(server):
    base, keys, _ = server
    url = f"{base}/mcp/acme/main"
    reader = keys["reader"]
    bad_path = call(url, reader, "get_node", {"workspace": "kb", "path": "/docs//keys"}, error=True)
    assert bad_path["error"]["code"] == "invalid_input" and "empty segment" in bad_path["error"]["message"]
    bad_direction = call(url, reader, "neighbors", {"node": "kb:/docs/keys", "direction": "SIDEWAYS"}, error=True)
    assert bad_direction["error"]["code"] == "invalid_input"
    bad_mode = call(url, reader, "search", {"query": "x", "mode": "telepathy"}, error=True)
    assert bad_mode["error"]["code"] == "invalid_input"
    no_repo = call(f"{base}/mcp/nowhere/main", reader, "search", {"query": "x"}, error=True)
    assert no_repo["error"]["code"] == "not_found"
    forbidden = call(url, reader, "put_node", {"workspace": "kb", "path": "/x", "node_type": "kb:Note",
                                               "properties": {}}, error=True)
    assert forbidden["error"]["code"] == "forbidden"
    for arguments, loc in (({"query": "x", "k": "many"}, "k"), ({"query": "x", "wehre": 1}, "wehre"),
                           ({"k": 1}, "query")):
        refused = call(url, reader, "search", arguments, error=True)
        assert refused["error"]["code"] == "invalid_input" and refused["error"]["message"].startswith(f"{loc}: ")
        assert refused["error"]["details"]["errors"][0]["loc"] == [loc]
    # the session goes on after each error
    assert call(url, reader, "search", {"query": "invoices"})["results"][0]["path"] == "/docs/billing"


@contextmanager
def seeded_server(folder: Path, **extra: str) -> Iterator[tuple[str, dict[str, str]]]:
    """A one-off ``kg serve`` on SQLite in ``folder`` with ``extra`` settings, ``acme`` seeded:
    (base URL, tokens by key name)."""
    db_url, data = f"sqlite:///{folder / 'kg.sqlite3'}", folder / "data"
    keys = make_keys(db_url, data)
    proc, base = start_server(serve_env(db_url, data, **extra))
    try:
        seed(base, keys["admin"])
        yield base, keys
    finally:
        stop_server(proc)


def test_a_read_only_server_registers_no_write_tool(tmp_path):
    with seeded_server(tmp_path, KG_MCP_READ_ONLY="true") as (base, keys):
        url = f"{base}/mcp/acme/main"
        assert tool_names(url, keys["admin"]) == list(READ_TOOLS)
        gone = call(url, keys["admin"], "put_node", {"workspace": "kb", "path": "/x", "node_type": "kb:Note",
                                                     "properties": {}}, error=True, raw=True)
        assert "Unknown tool" in gone


def test_with_auth_off_a_key_that_is_sent_is_still_checked(tmp_path):
    with seeded_server(tmp_path, KG_AUTH="false") as (base, keys):
        url = f"{base}/mcp/acme/main"
        assert [t for t in tool_names(url) if t != "research_assistant"] == ALL_TOOLS  # anonymous
        assert tool_names(url, keys["reader"]) == list(READ_TOOLS)  # the key's grants
        r = httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                       headers={"Accept": "application/json, text/event-stream",
                                "Authorization": "Bearer kg_0123456789abcdef_" + "x" * 43})
        assert r.status_code == 401
        assert r.json() == {"error": {"code": "unauthenticated", "message": "invalid API key", "details": {}}}
