"""``kg mcp``: the MCP server over stdio, for desktop agents.

Two ways: :func:`serve_stdio` serves the local store (the machine's database and index) with
the operator as the caller, bound to one repository and branch; :func:`relay_stdio` relays
stdio to a kg server's streamable HTTP endpoint (``http://host:8765/mcp/{repo}/{branch}``)
with an API key, so the server's grants apply. Either way stdout carries nothing but MCP
messages.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import httpx2
from mcp.client.streamable_http import streamable_http_client
from mcp.server.stdio import stdio_server
from mcp.types import INTERNAL_ERROR

from kg.access import OPERATOR
from kg.context import Resources
from kg.errors import BackendUnavailable, InvalidInput
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
        ``connect_timeout_s``), checked before anything is relayed: the MCP transport would
        otherwise drop the failed request and leave the agent waiting for its answer.
    kg.errors.InvalidInput
        ``url`` is not an http(s) URL.
    """
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    timeout = httpx2.Timeout(connect_timeout_s, read=timeout_s)
    async with _GatewayClient(headers=headers, timeout=timeout) as http:
        await _reachable(http, url)
        await _relay(http, url)


class _GatewayClient(httpx2.AsyncClient):
    """An HTTP client that answers a POST the server cannot receive as a gateway would: 502,
    with the JSON-RPC error in the body.

    The MCP transport lets a failed POST's exception end its writer task, which left the
    request unanswered and the relay stuck (an agent waiting on a server that went away). A 502
    whose body is a JSON-RPC error the transport relays to the agent under the request's id;
    the relay goes on, and the next request may find the server back.
    """

    async def send(self, request: httpx2.Request, **kwargs: Any) -> httpx2.Response:
        try:
            return await super().send(request, **kwargs)
        except httpx2.TransportError as exc:
            if request.method != "POST":
                raise
            reason = f"the kg server at {request.url} cannot be reached: {exc or type(exc).__name__}"
            log.warning("kg mcp: %s", reason)
            return httpx2.Response(502, json={"jsonrpc": "2.0", "id": None,
                                              "error": {"code": INTERNAL_ERROR, "message": reason}},
                                   request=request)


async def _reachable(http: httpx2.AsyncClient, url: str) -> None:
    """Any HTTP answer (a 401 or a 405 included: the relay passes those on) shows the server is
    there; a transport failure is the one-line error the command exits with."""
    if not url.startswith(("http://", "https://")):
        raise InvalidInput(f"--url {url!r} is not an http:// or https:// URL of a kg server's /mcp endpoint")
    try:
        await http.head(url)
    except httpx2.TransportError as exc:
        raise BackendUnavailable(f"cannot reach the kg server at {url}: {exc or type(exc).__name__}") from exc


async def _relay(http: httpx2.AsyncClient, url: str) -> None:
    # The write ends are closed when the relay ends (the agent closed stdin): the stdio writer
    # and the transport's POST writer wait on them until then, and the process would not exit.
    async with streamable_http_client(url, http_client=http) as (remote_read, remote_write), \
            stdio_server() as (local_read, local_write), remote_write, local_write, \
            anyio.create_task_group() as group:

        async def pump(source: Any, sink: Any, *, stop: bool) -> None:
            async for message in source:
                if isinstance(message, Exception):
                    log.warning("kg mcp: dropped an unreadable message: %s", message)
                    continue
                await sink.send(message)
            if stop:  # the agent closed stdin: the relay ends
                group.cancel_scope.cancel()

        group.start_soon(lambda: pump(local_read, remote_write, stop=True))
        group.start_soon(lambda: pump(remote_read, local_write, stop=False))
