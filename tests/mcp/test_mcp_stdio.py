"""``kg mcp`` over stdio through the real ``mcp`` client: on the local store as the operator, and
relayed to a real ``kg serve`` with an API key."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from kg.context import OPERATOR, run
from kg.mcp.server import READ_TOOLS
from kg.ops import nodes as node_ops
from kg.ops import repos as repo_ops
from kg.services import Services
from kg.settings import Settings
from tests.conftest import FAKE_MODEL
from tests.mcp.client import mcp_error, mcp_session, tool_names
from tests.mcp.test_mcp_http import ALL_TOOLS, seeded_server

ROOT = Path(__file__).resolve().parents[2]


def _env(db_url: str, data: Path) -> dict[str, str]:
    return {"KG_DATABASE_URL": db_url, "KG_DATA_DIR": str(data), "KG_EMBEDDING_MODEL": FAKE_MODEL,
            "KG_ALLOW_FAKE_EMBEDDER": "true", "KG_INDEX_INLINE": "true", "OPENBLAS_NUM_THREADS": "1"}


def _kg_mcp(*args: str, env: dict[str, str]) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=["-m", "kg.cli", "mcp", *args], env=env, cwd=str(ROOT))


@pytest.fixture
def local_store(tmp_path):
    """A SQLite store with ``acme``/``kb``: /docs and /docs/keys; its ``kg mcp`` environment."""
    db_url, data = f"sqlite:///{tmp_path / 'kg.sqlite3'}", tmp_path / "data"
    settings = Settings(database_url=db_url, data_dir=data, embedding_model=FAKE_MODEL, allow_fake_embedder=True,
                        index_inline=True)
    services = Services.from_settings(settings)
    try:
        services.db.upgrade()
        run(services, OPERATOR, repo_ops.create_repository, "acme")
        run(services, OPERATOR, repo_ops.create_workspace, "acme", "kb")
        for path, props in (("/docs", {"title": "Docs"}),
                            ("/docs/keys", {"content": "To rotate an API key, create a new key, then revoke it."})):
            run(services, OPERATOR, node_ops.put_node, "acme", "main", "kb", path, node_type="kb:Article",
                properties=props)
    finally:
        services.close()
    return _env(db_url, data)


def test_kg_mcp_on_the_local_store_as_the_operator(local_store):
    async def session(client: Client) -> dict:
        out: dict = {"tools": [t.name for t in (await client.list_tools()).tools]}
        found = await client.call_tool("search", {"query": "rotate an API key", "k": 1})
        out["search"] = found.structured_content
        created = await client.call_tool("branch_create", {"name": "agent/desk"})
        out["branch"] = created.structured_content
        put = await client.call_tool("put_node", {"workspace": "kb", "path": "/docs/note", "node_type": "kb:Note",
                                                  "properties": {"content": "from the desk"}, "branch": "agent/desk"})
        out["put"] = put.structured_content
        on_main = await client.call_tool("get_node", {"workspace": "kb", "path": "/docs/note"})
        out["on_main"] = (on_main.is_error, on_main.structured_content)
        out["diff"] = (await client.call_tool("diff", {"branch": "agent/desk"})).structured_content
        resource = await client.read_resource("kg://acme/kb/docs/note?branch=agent%2Fdesk")
        out["resource"] = json.loads(resource.contents[0].text)
        bad = await client.call_tool("traverse", {"seeds": ["no-colon-here"]})
        out["bad"] = (bad.is_error, bad.structured_content)
        return out

    out = mcp_session(_kg_mcp("--repo", "acme", "--branch", "main", env=local_store), None, session)
    assert [t for t in out["tools"] if t != "research_assistant"] == ALL_TOOLS  # the operator may do anything
    assert out["search"]["results"][0]["path"] == "/docs/keys" and out["search"]["branch"] == "main"
    assert out["branch"]["name"] == "agent/desk" and out["branch"]["parent"] == "main"
    assert out["put"]["branch"] == "agent/desk" and out["put"]["created"] is True
    assert out["on_main"] == (True, {"error": {"code": "not_found", "message": out["on_main"][1]["error"]["message"],
                                               "details": out["on_main"][1]["error"]["details"]}})
    assert [n["path"] for n in out["diff"]["nodes"]["added"]] == ["/docs/note"]
    assert out["resource"]["path"] == "/docs/note" and out["resource"]["branch"] == "agent/desk"
    assert out["bad"][0] is True and out["bad"][1]["error"]["code"] == "invalid_input"


def test_kg_mcp_without_a_repository_says_so(local_store):
    import subprocess

    done = subprocess.run([sys.executable, "-m", "kg.cli", "mcp"], env={**local_store, "PATH": "/usr/bin:/bin"},
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "--repo" in done.stderr


def test_kg_mcp_relays_to_a_server_with_a_key(tmp_path):
    with seeded_server(tmp_path) as (base, keys):
        url = f"{base}/mcp/acme/main"
        env = {"OPENBLAS_NUM_THREADS": "1", "KG_MCP_KEY": keys["reader"]}

        async def session(client: Client) -> tuple:
            names = [t.name for t in (await client.list_tools()).tools]
            found = await client.call_tool("search", {"query": "invoices"})
            refused = await client.call_tool("put_node", {"workspace": "kb", "path": "/x", "node_type": "kb:Note",
                                                          "properties": {}})
            return names, found.structured_content, refused.structured_content

        names, found, refused = mcp_session(_kg_mcp("--url", url, env=env), None, session)
        assert names == list(READ_TOOLS)  # the server's grants: a reader
        assert found["results"][0]["path"] == "/docs/billing"
        assert refused["error"]["code"] == "forbidden"
        with pytest.raises(Exception) as raised:
            tool_names(_kg_mcp("--url", url, "--key", "kg_0123456789abcdef_" + "z" * 43, env={}))
        assert mcp_error(raised.value).error.code == -32603  # the 401, relayed


def test_kg_mcp_relay_to_an_unreachable_server_fails_at_once(tmp_path):
    """``kg mcp --url`` to a port nobody listens on waited forever, silently (the transport
    dropped the failed POST of ``initialize``). Now: one line on stderr, exit 1."""
    import socket
    import subprocess

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    url = f"http://127.0.0.1:{port}/mcp/acme/main"
    done = subprocess.run([sys.executable, "-m", "kg.cli", "mcp", "--url", url], input="", cwd=ROOT,
                          env={"PATH": "/usr/bin:/bin", "OPENBLAS_NUM_THREADS": "1"}, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith(f"error: cannot reach the kg server at {url}: ") and done.stderr.count("\n") == 1
    bad = subprocess.run([sys.executable, "-m", "kg.cli", "mcp", "--url", "localhost:8765/mcp/acme/main"],
                         input="", cwd=ROOT, env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 1 and "is not an http:// or https:// URL" in bad.stderr


def test_kg_mcp_relay_answers_each_request_while_its_server_is_gone(tmp_path):
    """The server stops in the middle of a session: the next tool call gets an MCP error
    naming the unreachable server at once (it waited forever), and the relay stays up."""
    from tests.mcp.test_mcp_http import make_keys, seed, serve_env
    from tests.serve import start_server, stop_server

    db_url, data = f"sqlite:///{tmp_path / 'kg.sqlite3'}", tmp_path / "data"
    keys = make_keys(db_url, data)
    proc, base = start_server(serve_env(db_url, data))
    url = f"{base}/mcp/acme/main"
    try:
        seed(base, keys["admin"])

        async def session(client: Client) -> tuple:
            found = await client.call_tool("search", {"query": "invoices"})
            stop_server(proc)
            with pytest.raises(Exception) as gone:
                await client.call_tool("search", {"query": "invoices"})
            with pytest.raises(Exception) as still_gone:  # the relay answers again
                await client.list_tools()
            return found.structured_content, gone.value, still_gone.value

        found, gone, still_gone = mcp_session(
            _kg_mcp("--url", url, env={"OPENBLAS_NUM_THREADS": "1", "KG_MCP_KEY": keys["reader"]}), None, session)
    finally:
        stop_server(proc)
    assert found["results"][0]["path"] == "/docs/billing"
    for error in (gone, still_gone):
        assert mcp_error(error).error.code == -32603
        assert mcp_error(error).error.message.startswith(f"the kg server at {url} cannot be reached")


def test_kg_mcp_relay_ends_when_the_agent_closes_stdin(tmp_path):
    """The relay never exited once stdin closed (the stdio writer and the transport's POST
    writer waited on write ends nobody closed): it ends, 0, like the local ``kg mcp``."""
    import subprocess

    with seeded_server(tmp_path) as (base, keys):
        done = subprocess.run([sys.executable, "-m", "kg.cli", "mcp", "--url", f"{base}/mcp/acme/main",
                               "--key", keys["reader"]], stdin=subprocess.DEVNULL, cwd=ROOT, capture_output=True,
                              text=True, timeout=60, env={"PATH": "/usr/bin:/bin", "OPENBLAS_NUM_THREADS": "1"})
    assert done.returncode == 0 and done.stdout == "", done.stderr
