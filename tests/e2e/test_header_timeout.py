"""A request head must arrive within ``KG_HEADER_TIMEOUT_S`` (issue 12, hardening): a real
``kg serve``; a client that sends nothing, or its headers a byte at a time, is disconnected, while
other clients are served and a normal keep-alive connection keeps working."""

from __future__ import annotations

import os
import socket
import time

import httpx
import pytest

from tests.serve import start_server, stop_server

TIMEOUT_S = 1.0


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    env = {k: v for k, v in os.environ.items() if not k.startswith("KG_")}
    env.update({"KG_DATA_DIR": str(tmp_path_factory.mktemp("head")), "KG_HEADER_TIMEOUT_S": str(TIMEOUT_S),
                "KG_KEEPALIVE_TIMEOUT_S": "30", "KG_ALLOW_FAKE_EMBEDDER": "true",
                "KG_EMBEDDING_MODEL": "fake:hash-64"})
    proc, url = start_server(env)
    try:
        yield url
    finally:
        stop_server(proc)


def _connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    return sock


def _closed(sock: socket.socket) -> bool:
    """Whether the server closed ``sock`` (reads until EOF or the socket timeout)."""
    try:
        return sock.recv(65536) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_a_connection_that_sends_no_request_is_closed_after_the_deadline(base):
    sock = _connect(base)
    started = time.monotonic()
    assert _closed(sock)
    assert time.monotonic() - started >= TIMEOUT_S * 0.9  # closed by the deadline, not at once
    sock.close()


def test_headers_sent_a_byte_at_a_time_are_cut_off_and_others_are_served_meanwhile(base):
    sock = _connect(base)
    head = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 400
    sent, closed = 0, False
    deadline = time.monotonic() + 10 * TIMEOUT_S
    while sent < len(head) and time.monotonic() < deadline:
        try:
            sock.sendall(head[sent:sent + 1])
        except (BrokenPipeError, ConnectionResetError):
            closed = True
            break
        sent += 1
        if sent % 10 == 0:  # the server keeps serving others
            assert httpx.get(f"{base}/health", timeout=5).status_code == 200
        time.sleep(0.02)
    sock.settimeout(5 * TIMEOUT_S)
    closed = closed or _closed(sock)
    assert closed, "the slow client was never disconnected"
    assert sent < len(head)  # it was cut off before it finished its 400-byte header
    sock.close()


def test_a_keep_alive_connection_serves_requests_whose_heads_arrive_in_time(base):
    with httpx.Client(base_url=base, timeout=5) as client:
        for _ in range(3):
            assert client.get("/health").status_code == 200
            time.sleep(TIMEOUT_S * 0.5)  # idle between requests, within the deadline each time
        assert client.get("/health").status_code == 200
