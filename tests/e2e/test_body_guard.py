"""Who may make a real ``kg serve`` hold a request body, and for how long (api/guard.py), over raw
sockets: with ``KG_AUTH`` on, a request without a valid key is answered 401 from its head (the
body it declares is never read); a body slower than ``KG_BODY_MIN_BYTES_PER_S`` past
``KG_BODY_TIMEOUT_S``, or pausing longer than that, is cut with 408 and the connection closed;
the bytes all bodies hold are bounded by ``KG_MAX_BUFFERED_BODY_BYTES`` (503 with
``Retry-After`` past it, served again once they are released). Small settings keep it quick;
time bounds only guard against hangs."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from kg.context import OPERATOR, run
from kg.ops import keys as key_ops
from kg.services import Services
from kg.settings import Settings
from tests.serve import start_server, stop_server

PEPPER = "a-pepper-for-the-body-guard-tests"
FAKE_MODEL = "fake:hash-64"
TIMEOUT_S = 1.0            # KG_BODY_TIMEOUT_S
MIN_RATE = 1000            # KG_BODY_MIN_BYTES_PER_S
BUDGET = 200_000           # KG_MAX_BUFFERED_BODY_BYTES
TEN_MB = 10 * 1024 * 1024  # the default KG_MAX_BODY_BYTES


def _admin_token(data: Path) -> str:
    settings = Settings(data_dir=data, embedding_model=FAKE_MODEL, allow_fake_embedder=True, key_pepper=PEPPER)
    services = Services.from_settings(settings)
    try:
        services.db.upgrade()
        return str(run(services, OPERATOR, key_ops.create_key, name="admin", grants=[], admin=True).key)
    finally:
        services.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[tuple[str, str]]:
    """A ``kg serve`` with auth on and small body bounds: (its base URL, an admin token)."""
    data = tmp_path_factory.mktemp("body-guard")
    token = _admin_token(data)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KG_")}
    env.update({"KG_DATA_DIR": str(data), "KG_AUTH": "true", "KG_KEY_PEPPER": PEPPER,
                "KG_ALLOW_FAKE_EMBEDDER": "true", "KG_EMBEDDING_MODEL": FAKE_MODEL, "OPENBLAS_NUM_THREADS": "1",
                "KG_BODY_TIMEOUT_S": str(TIMEOUT_S), "KG_BODY_MIN_BYTES_PER_S": str(MIN_RATE),
                "KG_MAX_BUFFERED_BODY_BYTES": str(BUDGET), "KG_KEEPALIVE_TIMEOUT_S": "30"})
    proc, base = start_server(env)
    try:
        yield base, token
    finally:
        stop_server(proc)


def connect(base: str) -> socket.socket:
    host, port = base.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=10)


def head(path: str, length: int, token: str | None = None, host: str = "127.0.0.1") -> bytes:
    lines = [f"POST {path} HTTP/1.1", f"Host: {host}", "Content-Type: application/json",
             f"Content-Length: {length}"]
    if token:
        lines.append(f"Authorization: Bearer {token}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One HTTP response: (status, headers in lower case, body); the socket's timeout bounds it."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"the connection closed before a response: {data!r}"
        data += chunk
    raw_head, _, body = data.partition(b"\r\n\r\n")
    status_line, *header_lines = raw_head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in header_lines)}
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, "the connection closed inside a response"
        body += chunk
    return int(status_line.split()[1]), headers, body[:length]


def closed(sock: socket.socket) -> bool:
    """Whether the server closed ``sock`` (reads until EOF; the socket's timeout bounds it)."""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def error_code(body: bytes) -> str:
    parsed = json.loads(body)
    assert set(parsed) == {"error"} and set(parsed["error"]) == {"code", "message", "details"}
    return str(parsed["error"]["code"])


@pytest.mark.parametrize("path", ["/api/repos", "/api/repos/acme/workspaces/kb/nodes/a", "/mcp/acme/main"])
@pytest.mark.parametrize("key", [None, "kg_0123456789abcdef_" + "x" * 43], ids=["no-key", "wrong-key"])
def test_a_post_without_a_valid_key_is_401_before_its_body_is_sent(server, path, key):
    base, _ = server
    with connect(base) as sock:
        sock.sendall(head(path, TEN_MB, key))  # the head only: not one byte of the 10 MB
        status, headers, body = read_response(sock)
        assert status == 401
        assert error_code(body) == "unauthenticated"
        assert headers["www-authenticate"] == "Bearer"
        assert headers["connection"] == "close"
        assert closed(sock)  # and the body is never read: the server hangs up


def test_the_console_sign_in_takes_a_small_body_only_without_a_session(server):
    base, _ = server
    with connect(base) as sock:
        sock.sendall(head("/ui/login", TEN_MB))
        status, headers, _ = read_response(sock)
        assert status == 413
        assert closed(sock)


def test_a_valid_key_is_checked_once_and_its_body_is_read(server):
    base, token = server
    r = httpx.post(f"{base}/api/repos", json={"name": "served"}, headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 201, r.text


def test_a_body_slower_than_the_minimum_rate_is_cut_with_408_and_the_connection_closed(server):
    base, token = server
    with connect(base) as sock:
        sock.sendall(head("/api/repos", 100, token) + b'{"name": ')
        sock.settimeout(0.2)
        answered = b""
        deadline = time.monotonic() + 30  # a guard against a hang only
        while time.monotonic() < deadline:
            try:
                sock.sendall(b" ")  # a byte every 0.2 s: 5 bytes/s, far below 1000
            except (BrokenPipeError, ConnectionResetError):
                break
            try:
                answered += sock.recv(65536)
                if b"\r\n\r\n" in answered:
                    break
            except TimeoutError:
                continue
            # other clients are served meanwhile
            assert httpx.get(f"{base}/health", timeout=5).status_code == 200
        sock.settimeout(10)
        raw_head, _, rest = answered.partition(b"\r\n\r\n")
        length = next(int(line.split(b":")[1]) for line in raw_head.lower().split(b"\r\n")
                      if line.startswith(b"content-length:"))
        while len(rest) < length:  # the head and the body may come in two reads
            chunk = sock.recv(65536)
            assert chunk, "the connection closed inside the response"
            rest += chunk
        assert raw_head.split(b" ")[1] == b"408", answered
        assert b"connection: close" in raw_head.lower()
        assert error_code(rest) == "request_timeout"
        assert closed(sock)
    assert httpx.get(f"{base}/health", timeout=5).status_code == 200


def test_a_body_sent_fast_then_paused_is_cut_with_408(server):
    """The minimum rate would allow 50 s for 50,000 bytes; a pause longer than the timeout
    between two parts of the body is cut all the same (sent fast, then held open)."""
    base, token = server
    with connect(base) as sock:
        sock.sendall(head("/api/repos", 100_000, token) + b"[" + b" " * 49_999)
        sock.settimeout(30)  # a guard against a hang only
        status, headers, body = read_response(sock)
        assert status == 408
        assert error_code(body) == "request_timeout"
        assert headers["connection"] == "close"
        assert closed(sock)


def test_the_bytes_all_bodies_hold_are_bounded_503_past_it_and_served_again_once_released(server):
    base, token = server
    holder = connect(base)
    stop = threading.Event()

    def trickle() -> None:  # a byte every 0.3 s: no pause as long as the timeout
        while not stop.wait(0.3):
            try:
                holder.sendall(b" ")
            except OSError:
                return

    keeper = threading.Thread(target=trickle, daemon=True)
    try:
        # One body holds 120,000 of the 200,000 bytes, then trickles (its deadline, 1 s plus 1 s
        # per 1,000 bytes, is two minutes away).
        holder.sendall(head("/api/repos", 150_000, token) + b"[" + b" " * 119_999)
        keeper.start()
        time.sleep(0.5)  # let the server read them (no assertion on it: the loop below retries)
        refused = None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with connect(base) as sock:
                sock.sendall(head("/api/repos", 100_000, token))
                status, headers, body = read_response(sock)
                if status == 503:
                    refused = (headers, body)
                    assert closed(sock)
                    break
            time.sleep(0.2)
        assert refused is not None, "the bound was never reached"
        headers, body = refused
        assert error_code(body) == "overloaded"
        assert headers["retry-after"] == "1"
    finally:
        stop.set()
        keeper.join(timeout=5)
        holder.close()  # the server releases what the body held
    served = None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        payload = b'{"name": "after-the-bound"}' + b" " * 99_973
        r = httpx.post(f"{base}/api/repos", content=payload, timeout=10,
                       headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
        if r.status_code != 503:
            served = r
            break
        time.sleep(0.2)
    assert served is not None and served.status_code == 201, served.text if served else "still 503"
