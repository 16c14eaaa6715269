"""A live server in a thread (uvicorn over the test's own services) and a Server-Sent Events
reader, for the change feed's streaming tests, and a webhook receiver (a real HTTP server)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import uvicorn

from tests.serve import free_port


@contextmanager
def live_server(app: Any) -> Iterator[str]:
    """``app`` served by uvicorn on a free loopback port, in a thread; its base URL."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           timeout_graceful_shutdown=2))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=20)


def read_events(url: str, count: int, *, headers: dict[str, str] | None = None,
                params: dict[str, str] | None = None, timeout_s: float = 60) -> list[dict[str, Any]]:
    """The first ``count`` events of the SSE stream at ``url`` (``{"id", "event", "data"}``, data
    parsed), then the connection closed."""
    events: list[dict[str, Any]] = []
    current: dict[str, Any] = {}
    with httpx.stream("GET", url, params=params, timeout=timeout_s,
                      headers={"Accept": "text/event-stream", **(headers or {})}) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith(":"):
                continue
            if not line:
                if "data" in current:
                    events.append(current)
                    if len(events) == count:
                        return events
                current = {}
                continue
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            current[field] = json.loads(value) if field == "data" else value
    return events


class Receiver:
    """A webhook receiver: a real HTTP server in a thread that records each request and answers
    the next status of ``statuses`` (the last one repeated); ``hang`` makes it wait (until the
    test ends) before answering."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.statuses = [200]
        self.hang = False
        self.release = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server hook's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
                if receiver.hang:
                    receiver.release.wait(30)
                status = receiver.statuses.pop(0) if len(receiver.statuses) > 1 else receiver.statuses[0]
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/kg"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
