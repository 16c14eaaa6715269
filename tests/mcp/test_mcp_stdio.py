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
from tests.mcp.client import mcp_error, mcp_session
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


_INIT = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
         "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
_INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def _search(request_id: int) -> dict:
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
            "params": {"name": "search", "arguments": {"query": "invoices"}}}


def _lines(*messages: dict) -> str:
    return "".join(json.dumps(m) + "\n" for m in messages)


def _relay(url: str, *args: str, stdin: str):
    import subprocess

    return subprocess.run([sys.executable, "-m", "kg.cli", "mcp", "--url", url, *args], input=stdin, cwd=ROOT,
                          env={"PATH": "/usr/bin:/bin", "OPENBLAS_NUM_THREADS": "1"}, capture_output=True,
                          text=True, timeout=60)


def test_kg_mcp_relay_refused_by_its_server_says_why_and_exits_1(tmp_path):
    """A wrong, revoked or missing key, or a URL that is not an MCP endpoint: the relay printed
    nothing and exited 0 (the agent got a bare "Server returned an error response"). Now one
    line on stderr naming the server and what it said, exit 1, nothing on stdout."""
    import httpx

    with seeded_server(tmp_path) as (base, keys):
        admin = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {keys['admin']}"}, timeout=60)
        made = admin.post("/api/keys", json={"name": "gone", "grants": [{"repo": "acme", "actions": ["read"]}]})
        assert admin.delete(f"/api/keys/{made.json()['id']}").status_code == 200
        url = f"{base}/mcp/acme/main"
        cases = [
            (url, ["--key", "kg_0123456789abcdef_" + "z" * 43], f"the kg server at {url} refused the key: "
                                                                "invalid API key"),
            (url, ["--key", made.json()["key"]], f"the kg server at {url} refused the key: API key 'gone' is revoked"),
            (url, [], f"the kg server at {url} refused the key: an API key is required: "
                      "Authorization: Bearer kg_<id>_<secret>"),
            (f"{base}/mcp/acme", ["--key", keys["reader"]],
             f"the kg server at {base}/mcp/acme refused the MCP session: HTTP 307 (redirected to "
             f"{base}/mcp/acme/: an MCP URL is /mcp/REPO/BRANCH)"),
            (f"{base}/nowhere", ["--key", keys["reader"]],
             f"the kg server at {base}/nowhere refused the MCP session: HTTP 404: Not Found"),
        ]
        for target, args, said in cases:
            done = _relay(target, *args, stdin=_lines(_INIT, _INITIALIZED, _search(1)))
            assert (done.returncode, done.stdout, done.stderr) == (1, "", f"error: {said}\n")


def test_kg_mcp_relay_delivers_the_answers_in_flight_when_stdin_closes(tmp_path):
    """The agent sends its requests and closes stdin: the relay ended at once and dropped the
    answers still on their way. Now every request is answered, then it exits 0."""
    with seeded_server(tmp_path) as (base, keys):
        done = _relay(f"{base}/mcp/acme/main", "--key", keys["reader"],
                      stdin=_lines(_INIT, _INITIALIZED, _search(1), _search(2)))
    assert done.returncode == 0, done.stderr
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    assert sorted(a["id"] for a in answers) == [0, 1, 2]  # the two searches run concurrently
    assert [a["result"]["structuredContent"]["results"][0]["path"] for a in answers if a["id"]] == \
        ["/docs/billing"] * 2


def test_kg_mcp_relay_ends_with_exit_1_when_its_key_is_revoked_during_the_session(tmp_path):
    import subprocess

    import httpx

    with seeded_server(tmp_path) as (base, keys):
        admin = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {keys['admin']}"}, timeout=60)
        made = admin.post("/api/keys", json={"name": "brief", "grants": [{"repo": "acme", "actions": ["read"]}]})
        url = f"{base}/mcp/acme/main"
        relay = subprocess.Popen([sys.executable, "-m", "kg.cli", "mcp", "--url", url, "--key", made.json()["key"]],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
                                 env={"PATH": "/usr/bin:/bin", "OPENBLAS_NUM_THREADS": "1"}, text=True)
        try:
            relay.stdin.write(_lines(_INIT, _INITIALIZED, _search(1)))
            relay.stdin.flush()
            assert json.loads(relay.stdout.readline())["id"] == 0
            assert json.loads(relay.stdout.readline())["result"]["isError"] is False
            assert admin.delete(f"/api/keys/{made.json()['id']}").status_code == 200
            relay.stdin.write(_lines(_search(2)))
            relay.stdin.flush()
            refused = json.loads(relay.stdout.readline())
            assert refused["id"] == 2 and refused["error"]["code"] == -32603
            assert relay.wait(timeout=30) == 1
            assert relay.stderr.read() == f"error: the kg server at {url} refused the key: API key 'brief' is revoked\n"
        finally:
            if relay.poll() is None:
                relay.kill()
                relay.wait()


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
