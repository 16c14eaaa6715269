"""DNS rebinding (api/guard.py): with ``KG_AUTH`` off a real ``kg serve`` answers only requests
addressed to a loopback name (or one of ``KG_ALLOWED_HOSTS``), on every path family: a page whose
name was re-pointed at 127.0.0.1 gets 421 in the API's error shape, as does its ``/mcp`` call, and
a page of another site (``Origin``) gets 403. (On ``/ui`` the refusal is the console's error page,
with the same status and code, as every console error is.)"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import httpx
import pytest

from tests.serve import start_server, stop_server

FAKE_MODEL = "fake:hash-64"
ALLOWED = "kg.internal"
MCP_CALL = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}

#: One request per path family: (method, path, body).
FAMILIES = [
    ("GET", "/health", None),
    ("GET", "/api/health", None),
    ("GET", "/api/repos", None),
    ("POST", "/api/repos", {"name": "rebound"}),
    ("DELETE", "/api/repos/acme", None),
    ("GET", "/ui/login", None),
    ("GET", "/ui/repos", None),
    ("GET", "/docs", None),
    ("GET", "/openapi.json", None),
    ("POST", "/mcp/acme/main", MCP_CALL),
]


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Iterator[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KG_")}
    env.update({"KG_DATA_DIR": str(tmp_path_factory.mktemp("host")), "KG_ALLOW_FAKE_EMBEDDER": "true",
                "KG_EMBEDDING_MODEL": FAKE_MODEL, "OPENBLAS_NUM_THREADS": "1", "KG_ALLOWED_HOSTS": ALLOWED})
    proc, url = start_server(env)
    try:
        httpx.post(f"{url}/api/repos", json={"name": "acme"}).raise_for_status()
        yield url
    finally:
        stop_server(proc)


def send(base: str, method: str, path: str, body, **headers: str) -> httpx.Response:
    extra = MCP_HEADERS if path.startswith("/mcp") else {}
    return httpx.request(method, f"{base}{path}", json=body, headers={**extra, **headers}, timeout=30,
                         follow_redirects=False)


def error_code(r: httpx.Response) -> str:
    """The error's code: from the API's JSON shape, or on ``/ui`` from the console's error page
    (the same status, code and message, as every console error is answered)."""
    if r.url.path.startswith("/ui"):
        assert r.headers["content-type"].startswith("text/html")
        return "misdirected" if "misdirected" in r.text else r.text
    parsed = json.loads(r.content)
    assert set(parsed) == {"error"} and set(parsed["error"]) == {"code", "message", "details"}
    return str(parsed["error"]["code"])


@pytest.mark.parametrize("method,path,body", FAMILIES, ids=[f"{m} {p}" for m, p, _ in FAMILIES])
@pytest.mark.parametrize("host", ["evil.example", "evil.example:8765", "127.0.0.1.evil.example",
                                  "localhost.evil.example", "[::2]"])
def test_a_foreign_host_is_421_on_every_path(base, method, path, body, host):
    r = send(base, method, path, body, Host=host)
    assert r.status_code == 421, r.text
    assert error_code(r) == "misdirected"


@pytest.mark.parametrize("method,path,body", [f for f in FAMILIES if f[0] == "GET" or f[1].startswith("/mcp")],
                         ids=lambda v: v if isinstance(v, str) else "")
def test_loopback_names_and_allowed_ones_are_answered(base, method, path, body):
    port = base.rsplit(":", 1)[1]
    expected = send(base, method, path, body).status_code  # httpx's own Host: 127.0.0.1:<port>
    assert expected != 421
    for host in ("127.0.0.1", f"localhost:{port}", "localhost", f"[::1]:{port}", "127.0.0.2", ALLOWED,
                 f"{ALLOWED.upper()}:{port}"):
        assert send(base, method, path, body, Host=host).status_code == expected, host


def test_a_page_of_another_site_is_403_and_a_local_page_is_served(base):
    port = base.rsplit(":", 1)[1]
    r = send(base, "POST", "/api/repos", {"name": "from-a-page"}, Origin="http://evil.example")
    assert r.status_code == 403 and error_code(r) == "forbidden"
    r = send(base, "POST", "/mcp/acme/main", MCP_CALL, Origin="null")
    assert r.status_code == 403 and error_code(r) == "forbidden"
    assert send(base, "POST", "/api/repos", {"name": "from-the-console"},
                Origin=f"http://127.0.0.1:{port}").status_code == 201
    assert httpx.get(f"{base}/api/repos/from-a-page").status_code == 404  # nothing was written
