"""``kg mcp``: the MCP server over stdio, for desktop agents.

Two ways: :func:`serve_stdio` serves the local store (the machine's database and index) with
the operator as the caller, bound to one repository and branch; :func:`relay_stdio` relays
stdio to a kg server's streamable HTTP endpoint (``http://host:8765/mcp/{repo}/{branch}``)
with an API key, so the server's grants apply. Either way stdout carries nothing but MCP
messages.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from typing import Any, cast

import anyio
import anyio.from_thread
import anyio.lowlevel
import httpx2
from mcp.client.streamable_http import streamable_http_client
from mcp.server.stdio import stdio_server
from mcp.types import INTERNAL_ERROR, JSONRPCError, JSONRPCRequest, JSONRPCResponse
from mcp_types.version import LATEST_HANDSHAKE_VERSION

from kg.access import OPERATOR
from kg.context import Resources
from kg.errors import (
    BackendUnavailable,
    Forbidden,
    InvalidInput,
    KGError,
    Unauthenticated,
    UpstreamUnavailable,
)
from kg.mcp.server import build_server, fixed_binding

log = logging.getLogger("kg.mcp")


async def serve_stdio(services: Resources, repo: str, branch: str) -> None:
    """Serve kg's MCP server on stdin and stdout until stdin closes.

    Parameters
    ----------
    services : kg.context.Resources
        The local store's resources (its indexer should be running, so that writes get indexed).
    repo, branch : str
        What every request acts on (a tool's ``branch`` argument overrides the branch).
    """
    server = build_server(services, fixed_binding(repo, branch, OPERATOR),
                          read_only=services.settings.mcp_read_only)
    await server.run_stdio_async()


async def relay_stdio(url: str, key: str | None, *, timeout_s: float = 300.0,
                      connect_timeout_s: float = 10.0) -> None:
    """Relay MCP messages between stdin/stdout and a kg server's streamable HTTP endpoint.

    The server is asked first (an MCP ``initialize``; a session it opens for it is closed at once)
    whether it admits the relay: a key it refuses,
    a URL that is not its MCP endpoint or a server that cannot be reached ends the relay before
    anything is relayed, with the error below (``kg mcp`` prints its one line and exits 1). A key
    refused later (revoked during the session) ends it the same way, once the agent has had the
    refused request's error. When the agent closes stdin, the answers to the requests already
    relayed are delivered first (each within ``timeout_s``).

    Parameters
    ----------
    url : str
        ``http://host:port/mcp/{repo}/{branch}``.
    key : str or None
        The API key sent as ``Authorization: Bearer``; None sends none (a server with
        ``KG_AUTH`` off).
    timeout_s : float
        How long one HTTP exchange may take, in seconds.
    connect_timeout_s : float
        How long to wait for the server to accept a connection, in seconds.

    Raises
    ------
    kg.errors.BackendUnavailable
        The server cannot be reached (refused, unknown host, no answer within
        ``connect_timeout_s``): the MCP transport would otherwise drop the failed request and
        leave the agent waiting for its answer.
    kg.errors.Unauthenticated
        The server refused the key (wrong, revoked, expired) or wants one: its message says why.
    kg.errors.Forbidden
        The server refused the key this endpoint.
    kg.errors.InvalidInput
        ``url`` is not an http(s) URL, or the server refused the session otherwise (a URL that
        is not ``/mcp/{repo}/{branch}``: a 404, a redirect).
    kg.errors.UpstreamUnavailable
        The server answered the check with a 5xx.
    """
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    timeout = httpx2.Timeout(connect_timeout_s, read=timeout_s)
    await _admitted(url, headers, timeout)
    async with _GatewayClient(url, headers=headers, timeout=timeout) as http:
        await _relay(http, url, drain_s=timeout_s)
    if http.refused is not None:
        raise http.refused


def refusal(url: str, status: int, body: bytes, location: str | None = None) -> KGError:
    """The kg error of a kg server that answered the relay's POST with ``status``.

    Parameters
    ----------
    url : str
        The server's MCP endpoint.
    status : int
        A status other than 2xx.
    body : bytes
        Its answer: the server's message is read from the API's error shape when it is one.
    location : str, optional
        Where a redirect pointed.

    Returns
    -------
    kg.errors.KGError
        :class:`~kg.errors.Unauthenticated` (401), :class:`~kg.errors.Forbidden` (403),
        :class:`~kg.errors.UpstreamUnavailable` (5xx), else :class:`~kg.errors.InvalidInput`;
        the message names the server and what it said, on one line.
    """
    said = _kg_message(body)
    if status == 401:
        return Unauthenticated(f"the kg server at {url} refused the key: {said or 'HTTP 401'}")
    if status == 403:
        return Forbidden(f"the kg server at {url} refused the key: {said or 'HTTP 403'}")
    if status >= 500:
        return UpstreamUnavailable(f"the kg server at {url} failed: HTTP {status}{': ' + said if said else ''}")
    where = f" (redirected to {location}: an MCP URL is /mcp/REPO/BRANCH)" if location else ""
    return InvalidInput(f"the kg server at {url} refused the MCP session: HTTP {status}"
                        f"{': ' + said if said else ''}{where}")


def _kg_message(body: bytes) -> str:
    """The ``error.message`` of a body in the API's error shape, else ``""``."""
    try:
        error = json.loads(body)["error"]
        return " ".join(str(error["message"]).split()) if isinstance(error, dict) else ""
    except (ValueError, KeyError, TypeError):
        return ""


#: The relay's question to the server before it relays anything: an MCP ``initialize`` (a ``ping``
#: without a session is refused by a server with ``KG_MCP_SESSIONS``).
_HELLO = {"jsonrpc": "2.0", "id": "kg-mcp-relay", "method": "initialize",
          "params": {"protocolVersion": LATEST_HANDSHAKE_VERSION, "capabilities": {},
                     "clientInfo": {"name": "kg-mcp-relay", "version": "1"}}}
_ACCEPT = {"Accept": "application/json, text/event-stream"}


async def _admitted(url: str, headers: dict[str, str], timeout: httpx2.Timeout) -> None:
    """The server answers the relay's ``initialize`` with a 2xx; else the error it is refused with."""
    if not url.startswith(("http://", "https://")):
        raise InvalidInput(f"--url {url!r} is not an http:// or https:// URL of a kg server's /mcp endpoint")
    async with httpx2.AsyncClient(headers=headers, timeout=timeout) as http:
        try:
            response = await http.post(url, json=_HELLO, headers=_ACCEPT)
            session = response.headers.get("mcp-session-id")
            if session:  # a server with sessions opened one for the question: close it
                await http.delete(url, headers={"mcp-session-id": session})
        except httpx2.TransportError as exc:
            raise BackendUnavailable(f"cannot reach the kg server at {url}: {exc or type(exc).__name__}") from exc
    if not 200 <= response.status_code < 300:
        raise refusal(url, response.status_code, response.content, response.headers.get("location"))


class _GatewayClient(httpx2.AsyncClient):
    """An HTTP client that answers a POST the server cannot receive as a gateway would: 502,
    with the JSON-RPC error in the body; and notes a key refused during the session.

    The MCP transport lets a failed POST's exception end its writer task, which left the
    request unanswered and the relay stuck (an agent waiting on a server that went away). A 502
    whose body is a JSON-RPC error the transport relays to the agent under the request's id;
    the relay goes on, and the next request may find the server back. A 401 / 403 (the key was
    revoked or expired meanwhile) is kept in :attr:`refused`: the relay ends with it.
    """

    def __init__(self, url: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.url = url
        self.refused: KGError | None = None

    async def send(self, request: httpx2.Request, **kwargs: Any) -> httpx2.Response:
        try:
            response = await super().send(request, **kwargs)
        except httpx2.TransportError as exc:
            if request.method != "POST":
                raise
            reason = f"the kg server at {request.url} cannot be reached: {exc or type(exc).__name__}"
            log.warning("kg mcp: %s", reason)
            return httpx2.Response(502, json={"jsonrpc": "2.0", "id": None,
                                              "error": {"code": INTERNAL_ERROR, "message": reason}},
                                   request=request)
        if request.method == "POST" and response.status_code in (401, 403) and self.refused is None:
            self.refused = refusal(self.url, response.status_code, await response.aread())
        return response


class _StdinLines:
    """The lines of stdin, read by a daemon thread; :meth:`close` ends them at once.

    A blocking read cannot be interrupted: read in the event loop's worker threads, a relay
    refused mid-session waited for the agent's next line before it could exit (the process
    waits for those threads). A daemon thread is left behind instead.
    """

    def __init__(self) -> None:
        self._send, self._receive = anyio.create_memory_object_stream[bytes](1)
        self._reader: threading.Thread | None = None

    def close(self) -> None:
        """End the lines now (a line being read is dropped)."""
        self._send.close()

    def _read(self, token: Any) -> None:
        # os.read on the descriptor: a daemon thread blocked in a buffered reader would hold its
        # lock at interpreter shutdown, which aborts the process.
        rest = b""
        try:
            while chunk := os.read(sys.stdin.fileno(), 65536):
                *lines, rest = (rest + chunk).split(b"\n")
                for line in lines:
                    anyio.from_thread.run(self._send.send, line + b"\n", token=token)
            if rest:
                anyio.from_thread.run(self._send.send, rest, token=token)
            anyio.from_thread.run_sync(self._send.close, token=token)
        except Exception:  # noqa: BLE001 - the relay ended (the stream or the loop is closed)
            return

    def __aiter__(self) -> _StdinLines:
        return self

    async def __anext__(self) -> str:
        if self._reader is None:
            self._reader = threading.Thread(target=self._read, args=(anyio.lowlevel.current_token(),),
                                            name="kg-mcp-stdin", daemon=True)
            self._reader.start()
        try:
            line = await self._receive.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None
        return line.decode("utf-8", errors="replace")


async def _relay(http: _GatewayClient, url: str, *, drain_s: float) -> None:
    # The write ends are closed when the relay ends, and stdin's lines: the stdio reader and
    # writer and the transport's POST writer wait on them until then; the stdio writer first
    # writes out what it was given.
    pending: set[Any] = set()  # ids of the agent's requests not answered yet
    answered = anyio.Event()  # set once stdin is closed and nothing is pending
    stdin_closed = False
    stdin = _StdinLines()
    async with streamable_http_client(url, http_client=http) as (remote_read, remote_write), \
            stdio_server(stdin=cast("anyio.AsyncFile[str]", stdin)) as (local_read, local_write), \
            remote_write, local_write, anyio.create_task_group() as group:

        def end() -> None:
            stdin.close()
            group.cancel_scope.cancel()

        async def from_agent() -> None:
            nonlocal stdin_closed
            async for message in local_read:
                if isinstance(message, Exception):
                    log.warning("kg mcp: dropped an unreadable message: %s", message)
                    continue
                if isinstance(message.message, JSONRPCRequest):
                    pending.add(message.message.id)
                await remote_write.send(message)
            stdin_closed = True  # the agent is done: deliver what is in flight, then end
            if not pending:
                answered.set()
            with anyio.move_on_after(drain_s):
                await answered.wait()
            end()

        async def from_server() -> None:
            async for message in remote_read:
                if isinstance(message, Exception):
                    log.warning("kg mcp: dropped an unreadable message: %s", message)
                    continue
                await local_write.send(message)
                if isinstance(message.message, JSONRPCResponse | JSONRPCError):
                    pending.discard(message.message.id)
                if http.refused is not None:  # the agent has its error; the relay ends
                    end()
                if stdin_closed and not pending:
                    answered.set()

        group.start_soon(from_agent)
        group.start_soon(from_server)
