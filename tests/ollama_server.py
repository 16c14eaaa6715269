"""A small Ollama-API-compatible HTTP server for tests (never shipped: it lives in ``tests/``).

No Ollama server can be installed where kg is tested, so the Ollama providers are tested
through the real ``ollama`` client against this one. It speaks the shapes of Ollama's API
docs (docs/api.md of ollama/ollama):

- ``POST /api/embed`` ``{"model", "input": str | [str], "truncate"?}`` ->
  ``{"model", "embeddings": [[...]], "total_duration", "load_duration", "prompt_eval_count"}``,
  with real vectors of kg's packaged :class:`~kg.providers.local.LocalEmbedder` for
  ``all-minilm`` and ``nomic-embed-text`` (and a :class:`~kg.providers.fake.FakeEmbedder`
  for ``fake-embed``); ``truncate: false`` and a text past the model's context -> 400.
- ``POST /api/embeddings`` (the older endpoint) ``{"model", "prompt"}`` -> ``{"embedding"}``.
- ``POST /api/chat`` ``{"model", "messages", "stream"?, "format"?, "options"?}`` ->
  ``{"model", "created_at", "message": {"role": "assistant", "content"}, "done_reason",
  "done": true, ...}`` (NDJSON chunks when ``stream`` is true or absent), the content taken
  from a script of replies.
- ``GET /api/version``, ``GET /api/tags``, ``POST /api/show``.
- An unknown model: 404 ``{"error": "model \\"x\\" not found, try pulling it first"}``.

Misbehaviour is switched on per request with :meth:`OllamaTestServer.fail_next`. The server
binds an ephemeral loopback port (so it never collides), serves from a daemon thread, and
:meth:`~OllamaTestServer.stop` (or leaving the ``with`` block) shuts it down, waking any
request that is sleeping in a ``slow`` fault.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from kg.providers.base import Embedder

__all__ = ["Fault", "FAULTS", "OllamaTestServer", "Recorded", "tool_call"]

#: The kinds of :class:`Fault`.
FAULTS = (
    # any endpoint
    "status",  # answer HTTP ``status`` with {"error": message}
    "slow",  # wait ``delay_s`` (or until the server stops), then answer normally
    "reset",  # close the connection without an answer (TCP RST)
    "not_json",  # a 200 whose body is not JSON
    "null_body",  # a 200 whose body is ``null``
    # /api/embed
    "empty_embeddings",  # {"embeddings": []}
    "null_embeddings",  # {"embeddings": null}
    "no_embeddings",  # the field is missing
    "drop_last",  # N-1 vectors for N inputs
    "extra",  # N+1 vectors for N inputs
    "short_vector",  # vector ``index`` one element short
    "empty_vector",  # vector ``index`` is []
    "nan",  # vector ``index`` holds a NaN literal
    "inf",  # vector ``index`` holds an Infinity literal
    "zero",  # vector ``index`` is all zeros
    "huge",  # vector ``index`` is finite but ~1e308 (overflows float32)
    # /api/chat
    "no_message",  # the response has no "message"
    "empty_content",  # message.content is ""
)

_DEFAULT_CHAT_MODELS = ("llama3.2:latest", "qwen3:4b")


@dataclass
class Fault:
    """One scripted misbehaviour, used for the next ``times`` matching requests."""

    kind: str
    path: str | None = "/api/embed"
    times: int = 1
    after: int = 0  # matching requests to let through first
    index: int = 0
    status: int = 500
    message: str = "llama runner process has terminated: exit status 2"
    delay_s: float = 5.0


@dataclass
class Recorded:
    """One request the server received."""

    method: str
    path: str
    body: Any


ChatReply = str | dict | Callable[[dict], "str | dict"]


def tool_call(name: str, arguments: Any = None, content: str = "") -> dict:
    """A scripted reply calling one tool: ``{"content", "tool_calls": [{"function": {...}}]}``."""
    return {"content": content,
            "tool_calls": [{"function": {"name": name, "arguments": {} if arguments is None else arguments}}]}


class OllamaTestServer:
    """An Ollama-compatible server on ``127.0.0.1:<free port>``.

    Parameters
    ----------
    embedders : dict of str -> Embedder or callable() -> Embedder, optional
        Embedding models by full Ollama name (``all-minilm:latest``); a callable is called
        on first use. Default: ``all-minilm:latest`` and ``nomic-embed-text:latest`` served
        by the packaged LocalEmbedder (384-d, 256 tokens), ``fake-embed:latest`` by a 16-d
        FakeEmbedder.
    chat_models : iterable of str
        Chat model names it knows (``llama3.2:latest``, ``qwen3:4b`` by default).

    Attributes
    ----------
    url : str
        ``http://127.0.0.1:<port>``, once started.
    requests : list of Recorded
        Every request, in arrival order.
    """

    def __init__(
        self,
        *,
        embedders: dict[str, Embedder | Callable[[], Embedder]] | None = None,
        chat_models: tuple[str, ...] | list[str] = _DEFAULT_CHAT_MODELS,
    ) -> None:
        self._embedders: dict[str, Embedder | Callable[[], Embedder]] = (
            dict(embedders) if embedders is not None else _default_embedders()
        )
        self.chat_models = {_full_name(name) for name in chat_models}
        self.requests: list[Recorded] = []
        self.default_chat_reply: ChatReply = _echo_reply
        self._faults: list[Fault] = []
        self._replies: deque[ChatReply] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.url = ""

    # --- life cycle ---------------------------------------------------------------------

    def start(self) -> OllamaTestServer:
        """Bind a free loopback port and serve from a daemon thread."""
        handler = type("_Handler", (_Handler,), {"owner": self})
        httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        httpd.daemon_threads = True
        self._httpd = httpd
        host, port = httpd.server_address[:2]
        self.url = f"http://{host}:{port}"
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
            name=f"ollama-test-server-{port}", daemon=True,
        )
        self._thread.start()
        self._wait_ready()
        return self

    def stop(self) -> None:
        """Stop serving, wake sleeping requests, close the socket."""
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = self._thread = None

    def __enter__(self) -> OllamaTestServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- scripting ----------------------------------------------------------------------

    def fail_next(self, kind: str, *, path: str | None = "/api/embed", times: int = 1,
                  **fields: Any) -> Fault:
        """Misbehave on the next ``times`` requests to ``path`` (None: any path)."""
        if kind not in FAULTS:
            raise ValueError(f"unknown fault {kind!r}; known: {', '.join(FAULTS)}")
        fault = Fault(kind=kind, path=path, times=times, **fields)
        with self._lock:
            self._faults.append(fault)
        return fault

    def clear_faults(self) -> None:
        """Forget every pending fault."""
        with self._lock:
            self._faults.clear()

    def script_chat(self, *replies: ChatReply) -> None:
        """Queue chat replies: a string, or a function of the request body returning one."""
        with self._lock:
            self._replies.extend(replies)

    def recorded(self, path: str) -> list[Recorded]:
        """The requests received on ``path``."""
        with self._lock:
            return [r for r in self.requests if r.path == path]

    # --- used by the handler --------------------------------------------------------------

    def _take_fault(self, path: str) -> Fault | None:
        """The first pending fault for ``path``, used once."""
        with self._lock:
            for fault in self._faults:
                if fault.path is None or fault.path == path:
                    if fault.after > 0:
                        fault.after -= 1
                        return None
                    fault.times -= 1
                    if fault.times <= 0:
                        self._faults.remove(fault)
                    return fault
        return None

    def _record(self, method: str, path: str, body: Any) -> None:
        with self._lock:
            self.requests.append(Recorded(method, path, body))

    def _embedder(self, model: str) -> Embedder | None:
        with self._lock:
            entry = self._embedders.get(model)
            if entry is not None and not hasattr(entry, "embed"):
                entry = entry()  # type: ignore[operator]
                self._embedders[model] = entry
            return entry  # type: ignore[return-value]

    def _next_reply(self, request: dict) -> str | dict:
        with self._lock:
            reply = self._replies.popleft() if self._replies else self.default_chat_reply
        return reply(request) if callable(reply) else reply

    def _wait_ready(self) -> None:
        """Connect once, so that the first test request never races the thread."""
        host, port = self.url.removeprefix("http://").split(":")
        deadline = time.monotonic() + 5
        while True:
            try:
                with socket.create_connection((host, int(port)), timeout=1):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.01)


class _Handler(BaseHTTPRequestHandler):
    """Routes one request of the Ollama API."""

    owner: OllamaTestServer
    server_version = "ollama-test"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        """Quiet: tests read ``requests`` instead."""

    # --- routing ------------------------------------------------------------------------

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self._dispatch("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._dispatch("POST")

    def do_HEAD(self) -> None:  # noqa: N802
        self._send_raw(200, b"", "text/plain")

    def _dispatch(self, method: str) -> None:
        path = self.path.split("?", 1)[0].rstrip("/") or "/"
        body: Any = None
        if method == "POST":
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else {}
            except ValueError:
                self.owner._record(method, path, raw)
                return self._send_json(400, {"error": "invalid character in request body"})
        self.owner._record(method, path, body)
        routes: dict[tuple[str, str], Callable[[Any, Fault | None], None]] = {
            ("GET", "/"): lambda b, f: self._send_raw(200, b"Ollama is running", "text/plain"),
            ("GET", "/api/version"): lambda b, f: self._send_json(200, {"version": "0.6.2"}),
            ("GET", "/api/tags"): lambda b, f: self._tags(),
            ("POST", "/api/show"): lambda b, f: self._show(b),
            ("POST", "/api/embed"): self._embed,
            ("POST", "/api/embeddings"): lambda b, f: self._embeddings(b),
            ("POST", "/api/chat"): self._chat,
        }
        route = routes.get((method, path))
        if route is None:
            if any(p == path for _, p in routes):
                return self._send_raw(405, b"405 method not allowed", "text/plain")
            return self._send_raw(404, b"404 page not found", "text/plain")
        if not isinstance(body, (dict, type(None))):
            return self._send_json(400, {"error": "json: cannot unmarshal into Go value"})
        fault = self.owner._take_fault(path)
        if fault is not None and self._generic_fault(fault):
            return
        route(body or {}, fault)

    def _generic_fault(self, fault: Fault) -> bool:
        """Apply a fault that does not depend on the endpoint; True when it answered."""
        if fault.kind == "status":
            self._send_json(fault.status, {"error": fault.message})
            return True
        if fault.kind == "reset":
            self._reset()
            return True
        if fault.kind == "not_json":
            self._send_raw(200, b"<html><body>502 Bad Gateway</body></html>", "text/html")
            return True
        if fault.kind == "null_body":
            self._send_raw(200, b"null", "application/json")
            return True
        if fault.kind == "slow":
            self.owner._stopping.wait(fault.delay_s)
        return False

    # --- endpoints ----------------------------------------------------------------------

    def _tags(self) -> None:
        models = sorted(set(self.owner._embedders) | self.owner.chat_models)
        self._send_json(200, {"models": [
            {"name": name, "model": name, "modified_at": _now(), "size": 1,
             "digest": "0" * 64,
             "details": {"format": "gguf", "family": "bert" if name in self.owner._embedders
                         else "llama", "parameter_size": "1B", "quantization_level": "Q8_0"}}
            for name in models
        ]})

    def _show(self, body: dict) -> None:
        name = _full_name(str(body.get("model") or body.get("name") or ""))
        embedder = self.owner._embedder(name)
        if embedder is None and name not in self.owner.chat_models:
            return self._not_found(name)
        info = ({"general.architecture": "bert", "bert.context_length": embedder.max_tokens,
                 "bert.embedding_length": embedder.dim} if embedder is not None
                else {"general.architecture": "llama", "llama.context_length": 8192})
        self._send_json(200, {"modelfile": "", "parameters": "", "template": "",
                              "details": {"format": "gguf", "family": info["general.architecture"]},
                              "model_info": info, "capabilities": ["embedding"] if embedder
                              else ["completion"]})

    def _embed(self, body: dict, fault: Fault | None) -> None:
        name = _full_name(str(body.get("model", "")))
        embedder = self.owner._embedder(name)
        if embedder is None:
            return self._not_found(name)
        texts = body.get("input", [])
        texts = [texts] if isinstance(texts, str) else texts
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            return self._send_json(400, {"error": "invalid input type"})
        if any(not t.strip() for t in texts):
            # kg's embedders refuse blank texts; so does this server.
            return self._send_json(400, {"error": "input is empty"})
        tokens = [embedder.count_tokens(t) for t in texts]
        if body.get("truncate") is False and any(n > embedder.max_tokens for n in tokens):
            return self._send_json(400, {"error": "the input length exceeds the context length"})
        started = time.perf_counter_ns()
        vectors: list[list[float]] = (
            [[float(x) for x in row] for row in embedder.embed(texts)] if texts else []
        )
        payload: dict[str, Any] = {
            "model": name, "embeddings": vectors,
            "total_duration": time.perf_counter_ns() - started, "load_duration": 1000,
            "prompt_eval_count": sum(min(n, embedder.max_tokens) for n in tokens),
        }
        if fault is not None:
            _corrupt(payload, fault)
        self._send_json(200, payload)

    def _chat(self, body: dict, fault: Fault | None) -> None:
        name = _full_name(str(body.get("model", "")))
        if name not in self.owner.chat_models:
            return self._not_found(name)
        messages = body.get("messages") or []
        reply: str | dict
        if not messages:  # Ollama loads the model and answers an empty message
            reply, reason = "", "load"
        else:
            reply, reason = self.owner._next_reply(body), "stop"
        message: dict[str, Any] = ({"role": "assistant", "content": reply} if isinstance(reply, str)
                                   else {"role": "assistant", "content": reply.get("content", ""),
                                         **({"tool_calls": reply["tool_calls"]} if "tool_calls" in reply else {})})
        if fault is not None and fault.kind == "empty_content":
            message["content"] = ""
        content = message["content"]
        final: dict[str, Any] = {
            "model": name, "created_at": _now(),
            "message": message,
            "done_reason": reason, "done": True, "total_duration": 5_191_566_416,
            "load_duration": 2_154_458, "prompt_eval_count": 26,
            "prompt_eval_duration": 383_809_000, "eval_count": 298,
            "eval_duration": 4_799_921_000,
        }
        if fault is not None and fault.kind == "no_message":
            del final["message"]
        if body.get("stream", True) is False:
            return self._send_json(200, final)
        # Streaming (Ollama's default): one chunk with the content, then the final object.
        chunk = {"model": name, "created_at": _now(),
                 "message": {"role": "assistant", "content": content}, "done": False}
        if "message" in final:
            final["message"]["content"] = ""
        lines = (json.dumps(chunk) + "\n" + json.dumps(final) + "\n").encode()
        self._send_raw(200, lines, "application/x-ndjson")

    def _embeddings(self, body: dict) -> None:
        name = _full_name(str(body.get("model", "")))
        embedder = self.owner._embedder(name)
        if embedder is None:
            return self._not_found(name)
        prompt = body.get("prompt") or ""
        if not str(prompt).strip():
            return self._send_json(200, {"embedding": []})
        vector = embedder.embed([str(prompt)])[0]
        self._send_json(200, {"embedding": [float(x) for x in vector]})

    # --- helpers ------------------------------------------------------------------------

    def _not_found(self, name: str) -> None:
        self._send_json(404, {"error": f'model "{name}" not found, try pulling it first'})

    def _send_json(self, status: int, payload: Any) -> None:
        # allow_nan: Python's json writes NaN / Infinity literals, as a broken server might.
        self._send_raw(status, json.dumps(payload, allow_nan=True).encode(), "application/json")

    def _send_raw(self, status: int, data: bytes, content_type: str) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a timeout test)

    def _reset(self) -> None:
        """Drop the connection with a TCP RST and no answer."""
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        self.close_connection = True
        self.connection.close()


def _corrupt(payload: dict[str, Any], fault: Fault) -> None:
    """Apply an /api/embed fault to a correct answer."""
    vectors = payload["embeddings"]
    index = min(fault.index, len(vectors) - 1) if vectors else 0
    if fault.kind == "empty_embeddings":
        payload["embeddings"] = []
    elif fault.kind == "null_embeddings":
        payload["embeddings"] = None
    elif fault.kind == "no_embeddings":
        del payload["embeddings"]
    elif fault.kind == "drop_last":
        vectors.pop()
    elif fault.kind == "extra":
        vectors.append(list(vectors[-1]))
    elif fault.kind == "short_vector":
        vectors[index] = vectors[index][:-1]
    elif fault.kind == "empty_vector":
        vectors[index] = []
    elif fault.kind == "nan":
        vectors[index][0] = float("nan")
    elif fault.kind == "inf":
        vectors[index][-1] = float("inf")
    elif fault.kind == "zero":
        vectors[index] = [0.0] * len(vectors[index])
    elif fault.kind == "huge":
        vectors[index] = [1e308 if x >= 0 else -1e308 for x in vectors[index]]


def _full_name(name: str) -> str:
    """``x`` -> ``x:latest``, as Ollama reads a name without a tag."""
    return name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def _echo_reply(request: dict) -> str:
    """The default chat reply: the last user message, echoed."""
    users = [m.get("content", "") for m in request.get("messages", []) if m.get("role") == "user"]
    return f"You said: {users[-1] if users else ''}"


def _default_embedders() -> dict[str, Embedder | Callable[[], Embedder]]:
    from kg.providers.fake import FakeEmbedder
    from kg.providers.registry import make_embedder

    def local() -> Embedder:
        return make_embedder("local:all-MiniLM-L6-v2")

    return {"all-minilm:latest": local, "nomic-embed-text:latest": local,
            "fake-embed:latest": lambda: FakeEmbedder(dim=16, name="fake-embed")}
