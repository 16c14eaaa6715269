"""Requests that are not valid HTTP/1.1, sent with raw sockets to a real ``kg serve``: uvicorn
answered them itself in ``text/plain`` ("Invalid HTTP request received."); ``kg serve``'s
protocol (kg/serve_protocol.py) answers them in the API's error shape, with h11's reason and
status, and closes the connection."""

from __future__ import annotations

import json
import os
import socket

import pytest

from tests.serve import start_server, stop_server


@pytest.fixture(scope="module")
def port(tmp_path_factory):
    env = {k: v for k, v in os.environ.items() if not k.startswith("KG_")}
    env.update({"KG_DATA_DIR": str(tmp_path_factory.mktemp("framing")), "KG_ALLOW_FAKE_EMBEDDER": "true",
                "KG_EMBEDDING_MODEL": "fake:hash-64"})
    proc, url = start_server(env)
    try:
        yield int(url.rsplit(":", 1)[1])
    finally:
        stop_server(proc)


def _exchange(port: int, raw: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send ``raw``, read until the server closes: (status, headers, body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(raw)
        data = b""
        while chunk := sock.recv(65536):  # the server closes the connection after its answer
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}
    return int(status_line.split()[1]), headers, body


POST = b"POST /api/repos HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"


@pytest.mark.parametrize(("raw", "status", "reason"), [
    (b"GARBAGE\r\n\r\n", 400, "illegal request line: 'GARBAGE'"),
    (b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-No-Colon\r\n\r\n", 400, "illegal header line: 'X-No-Colon'"),
    (b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nBad Name: 1\r\n\r\n", 400, "illegal header line: 'Bad Name: 1'"),
    (b"GET /health HTTP/1.1\r\n\r\n", 400, "Missing mandatory Host: header"),
    (POST + b"Content-Length: abc\r\n\r\n", 400, "bad Content-Length"),
    (POST + b"Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}", 400, "conflicting Content-Length headers"),
    (POST + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n", 400, "illegal chunk header: 'zz\\r\\n'"),
    (POST + b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\nqq\r\n", 400, "illegal chunk header: 'qq\\r\\n'"),
    (POST + b"Transfer-Encoding: gzip\r\n\r\n", 501, "Only Transfer-Encoding: chunked is supported"),
], ids=["request line", "header without colon", "header name with space", "no Host", "Content-Length not a "
        "number", "two Content-Lengths", "chunk size not hex", "bad chunk after data", "unknown transfer coding"])
def test_a_request_that_is_not_http_is_answered_in_the_api_error_shape(port, raw, status, reason):
    got, headers, body = _exchange(port, raw)
    assert got == status
    assert headers["content-type"] == "application/json" and headers["connection"] == "close"
    assert int(headers["content-length"]) == len(body)
    message = f"the request is not valid HTTP/1.1: {reason}"
    assert json.loads(body) == {"error": {"code": "malformed", "message": message, "details": {"reason": reason}}}


def test_a_head_over_the_limit_is_answered_431_in_the_api_error_shape(port):
    """A head past 64 KiB (h11's limit) is refused once the buffer passes it, while the client
    is still sending: the answer still reaches it (the server drains before it closes; closed
    at once, the reset of the unread bytes destroyed the answer)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: " + b"a" * (1024 * 1024))
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 431 ")
    assert json.loads(body)["error"]["code"] == "too_large"


def test_a_well_formed_request_is_still_served(port):
    status, headers, body = _exchange(port, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    assert status == 200 and json.loads(body)["status"] == "ok"
