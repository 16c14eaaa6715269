"""Change feed subscriptions through the real ``mcp`` client: ``resources/subscribe`` to a
branch's feed, ``notifications/resources/updated`` when a revision the subscriber may see lands
there; over streamable HTTP with ``KG_MCP_SESSIONS`` against a real ``kg serve`` (SQLite and
PostgreSQL), over stdio against ``kg mcp``, and refused by a stateless server."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
import httpx
import httpx2
import pytest
from mcp import Client, StdioServerParameters, types
from mcp.client.streamable_http import streamable_http_client

from kg.context import OPERATOR, run
from kg.mcp.changes import NO_SESSIONS, changes_uri
from kg.ops import nodes as node_ops
from kg.ops import repos as repo_ops
from kg.services import Services
from kg.settings import Settings
from tests.conftest import ADAPTER_BACKENDS, FAKE_MODEL
from tests.mcp.client import mcp_error
from tests.mcp.test_mcp_http import _database, make_keys, seed, seeded_server, serve_env
from tests.serve import start_server, stop_server

ROOT = Path(__file__).resolve().parents[2]
#: resources/subscribe is the handshake era's (2025-06-18); the SDK marks it deprecated for 2026-07-28.
pytestmark = pytest.mark.filterwarnings("ignore:resources/(un)?subscribe is removed")
POLL_S = "0.2"
#: How long a notification may take to come (many polls), and how long one that must not come is awaited.
ARRIVES_S, QUIET_S = 30.0, 2.0

MAIN, AGENT = changes_uri("acme", "main"), changes_uri("acme", "agent/x")


class Listener:
    """A client's ``notifications/resources/updated``, in order."""

    def __init__(self) -> None:
        self.uris: list[str] = []
        self.arrived = anyio.Event()

    async def __call__(self, message) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            self.uris.append(str(message.params.uri))
            self.arrived.set()

    async def next(self) -> str:
        """The next notification's uri (fails after ARRIVES_S)."""
        with anyio.fail_after(ARRIVES_S):
            await self.arrived.wait()
        self.arrived = anyio.Event()
        return self.uris.pop(0)

    async def none(self) -> None:
        """No notification comes within QUIET_S."""
        await anyio.sleep(QUIET_S)
        assert self.uris == []


def _client(url: str, key: str, listener: Listener, http: httpx2.AsyncClient) -> Client:
    return Client(streamable_http_client(url, http_client=http), mode="legacy", message_handler=listener)


@pytest.fixture(scope="module", params=ADAPTER_BACKENDS)
def session_server(request, tmp_path_factory):
    """A real ``kg serve`` with ``KG_MCP_SESSIONS`` on, ``acme`` seeded with a second workspace
    ``secret`` and a branch ``agent/x``; the admin's token and a key reading only ``kb``."""
    folder = tmp_path_factory.mktemp(f"mcp-notify-{request.param}")
    db_url, cleanup = _database(request.param, folder)
    try:
        keys = make_keys(db_url, folder / "data")
        proc, base = start_server(serve_env(db_url, folder / "data", KG_MCP_SESSIONS="true",
                                            KG_CHANGES_POLL_S=POLL_S))
        try:
            seed(base, keys["admin"])
            admin = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {keys['admin']}"}, timeout=60)
            assert admin.post("/api/repos/acme/workspaces", json={"name": "secret"}).status_code == 201
            assert admin.post("/api/repos/acme/branches", json={"name": "agent/x", "from": "main"}).status_code == 201
            r = admin.post("/api/keys", json={"name": "kb-reader", "grants": [
                {"repo": "acme", "branches": ["*"], "workspaces": ["kb"], "actions": ["read"]}]})
            assert r.status_code == 201, r.text
            yield base, admin, keys["admin"], r.json()["key"]
        finally:
            stop_server(proc)
    finally:
        cleanup()


def _put(admin: httpx.Client, branch: str, workspace: str, path: str, content: str) -> None:
    r = admin.put(f"/api/repos/acme/workspaces/{workspace}/nodes{path}", params={"branch": branch},
                  json={"node_type": "kb:Note", "properties": {"content": content}})
    assert r.status_code == 201, r.text


def test_subscribers_are_notified_of_what_they_may_see_on_their_branch(session_server):
    base, admin, admin_key, kb_key = session_server
    url = f"{base}/mcp/acme/main"
    out: dict = {}

    async def main() -> None:
        everyone, scoped = Listener(), Listener()
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {admin_key}"}, timeout=60) as h1, \
                httpx2.AsyncClient(headers={"Authorization": f"Bearer {kb_key}"}, timeout=60) as h2, \
                _client(url, admin_key, everyone, h1) as c1, _client(url, kb_key, scoped, h2) as c2:
            out["capability"] = c1.server_capabilities.resources.subscribe
            templates = (await c1.list_resource_templates()).resource_templates
            out["templates"] = [t.uri_template for t in templates]
            await c1.subscribe_resource(MAIN)
            await c1.subscribe_resource(AGENT)
            await c2.subscribe_resource(MAIN)

            # A write on agent/x: its subscriber is told, main's are not.
            await anyio.to_thread.run_sync(_put, admin, "agent/x", "kb", "/docs/agent-note", "on the branch")
            out["agent"] = await everyone.next()
            await everyone.none()
            await scoped.none()

            # A write on main the scoped key cannot see: only the admin hears of it.
            await anyio.to_thread.run_sync(_put, admin, "main", "secret", "/plan", "the secret plan")
            out["secret"] = await everyone.next()
            await scoped.none()

            # A write it sees: it is told, and reading the resource shows it (and not the other).
            await anyio.to_thread.run_sync(_put, admin, "main", "kb", "/docs/news", "news for readers")
            out["kb_admin"], out["kb_scoped"] = await everyone.next(), await scoped.next()
            read = await c2.read_resource(MAIN)
            out["scoped_page"] = json.loads(read.contents[0].text)
            out["admin_page"] = json.loads((await c1.read_resource(MAIN)).contents[0].text)

            # Unsubscribed, it hears no more.
            await c1.unsubscribe_resource(MAIN)
            await anyio.to_thread.run_sync(_put, admin, "main", "kb", "/docs/later", "later")
            out["after_scoped"] = await scoped.next()
            await everyone.none()

    anyio.run(main)
    assert out["capability"] is True
    assert out["templates"][0] == "kg://{repo}/changes{?branch,after}"
    assert out["agent"] == AGENT
    assert out["secret"] == MAIN
    assert out["kb_admin"] == MAIN and out["kb_scoped"] == MAIN and out["after_scoped"] == MAIN
    scoped_paths = [c.get("path") for e in out["scoped_page"]["events"] for c in e.get("changes", [])]
    assert out["scoped_page"]["branch"] == "main"
    assert "/docs/news" in scoped_paths and "/plan" not in scoped_paths
    admin_paths = [c.get("path") for e in out["admin_page"]["events"] for c in e.get("changes", [])]
    assert "/plan" in admin_paths and "/docs/news" in admin_paths
    assert "/docs/agent-note" not in admin_paths  # another branch's feed


def test_a_subscription_is_refused_what_the_key_may_not_read(session_server):
    base, _, _, kb_key = session_server

    async def main() -> BaseException:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {kb_key}"}, timeout=60) as http, \
                _client(f"{base}/mcp/acme/main", kb_key, Listener(), http) as client:
            with pytest.raises(Exception) as refused:
                await client.subscribe_resource(changes_uri("nope", "main"))
            with pytest.raises(Exception) as not_a_feed:
                await client.subscribe_resource("kg://acme/kb/docs/keys?branch=main")
            return refused.value, not_a_feed.value

    refused, not_a_feed = anyio.run(main)
    assert mcp_error(refused).error.message.startswith("not_found:")
    assert "only a branch's change feed" in mcp_error(not_a_feed).error.message


def test_kg_mcp_relays_subscriptions_and_notifications(session_server):
    base, admin, _, kb_key = session_server
    relay = StdioServerParameters(command=sys.executable,
                                  args=["-m", "kg.cli", "mcp", "--url", f"{base}/mcp/acme/main"],
                                  env={"OPENBLAS_NUM_THREADS": "1", "KG_MCP_KEY": kb_key}, cwd=str(ROOT))

    async def main() -> str:
        listener = Listener()
        async with Client(relay, mode="legacy", message_handler=listener) as client:
            await client.subscribe_resource(MAIN)
            await anyio.to_thread.run_sync(_put, admin, "main", "kb", "/docs/relayed", "through the relay")
            return await listener.next()

    assert anyio.run(main) == MAIN


def test_subscriptions_are_bounded_per_key_and_released(session_server):
    base, _, _, kb_key = session_server
    feeds = [f"{MAIN}&after={n}" for n in range(4)]  # four URIs, four subscriptions (KG_CHANGES_MAX_STREAMS)

    async def session(expect_refusal: bool) -> BaseException | None:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {kb_key}"}, timeout=60) as http, \
                _client(f"{base}/mcp/acme/main", kb_key, Listener(), http) as client:
            for uri in feeds:
                await client.subscribe_resource(uri)
            await client.subscribe_resource(feeds[0])  # again: nothing changes
            if not expect_refusal:
                return None
            with pytest.raises(Exception) as refused:
                await client.subscribe_resource(AGENT)
            await client.unsubscribe_resource(feeds[0])
            await client.subscribe_resource(AGENT)  # the slot it released
            return refused.value

    refused = anyio.run(session, True)
    assert mcp_error(refused).error.message.startswith("rate_limited:")
    # The session's end released its four slots: a new one holds four again.
    assert anyio.run(session, False) is None


def test_a_stateless_server_does_not_offer_subscriptions(tmp_path):
    with seeded_server(tmp_path) as (base, keys):
        async def main() -> tuple:
            async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {keys['admin']}"}, timeout=60) as http, \
                    _client(f"{base}/mcp/acme/main", keys["admin"], Listener(), http) as client:
                capability = client.server_capabilities.resources.subscribe
                with pytest.raises(Exception) as refused:
                    await client.subscribe_resource(MAIN)
                page = json.loads((await client.read_resource(MAIN)).contents[0].text)
                return capability, refused.value, page

        capability, refused, page = anyio.run(main)
        assert not capability
        assert mcp_error(refused).error.message == NO_SESSIONS
        # Reading the feed needs no session: the seed's four writes on main, newest last.
        assert page["branch"] == "main" and [e["type"] for e in page["events"]] == ["revision"] * 4


def test_kg_mcp_over_stdio_notifies_of_writes_on_the_branch(tmp_path):
    db_url, data = f"sqlite:///{tmp_path / 'kg.sqlite3'}", tmp_path / "data"
    settings = Settings(database_url=db_url, data_dir=data, embedding_model=FAKE_MODEL, allow_fake_embedder=True,
                        index_inline=True)
    services = Services.from_settings(settings)
    services.db.upgrade()
    run(services, OPERATOR, repo_ops.create_repository, "acme")
    run(services, OPERATOR, repo_ops.create_workspace, "acme", "kb")
    env = {"KG_DATABASE_URL": db_url, "KG_DATA_DIR": str(data), "KG_EMBEDDING_MODEL": FAKE_MODEL,
           "KG_ALLOW_FAKE_EMBEDDER": "true", "KG_INDEX_INLINE": "true", "OPENBLAS_NUM_THREADS": "1",
           "KG_CHANGES_POLL_S": POLL_S}
    params = StdioServerParameters(command=sys.executable, args=["-m", "kg.cli", "mcp", "--repo", "acme",
                                                                  "--branch", "main"], env=env, cwd=str(ROOT))

    def put(path: str) -> None:  # another process's write, as the HTTP API's would be
        run(services, OPERATOR, node_ops.put_node, "acme", "main", "kb", path, node_type="kb:Note",
            properties={"content": "written elsewhere"})

    out: dict = {}

    async def main() -> None:
        listener = Listener()
        async with Client(params, mode="legacy", message_handler=listener) as client:
            out["capability"] = client.server_capabilities.resources.subscribe
            await client.subscribe_resource("kg://acme/changes")  # the connection's branch
            await anyio.to_thread.run_sync(put, "/one")
            out["uri"] = await listener.next()
            out["page"] = json.loads((await client.read_resource("kg://acme/changes")).contents[0].text)
            await client.unsubscribe_resource("kg://acme/changes")
            await anyio.to_thread.run_sync(put, "/two")
            await listener.none()

    try:
        anyio.run(main)
    finally:
        services.close()
    assert out["capability"] is True
    assert out["uri"] == "kg://acme/changes"
    assert [c["path"] for e in out["page"]["events"] for c in e["changes"]] == ["/one"]
