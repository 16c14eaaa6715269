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

from kg.access import OPERATOR
from kg.context import Resources
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


async def relay_stdio(url: str, key: str | None, *, timeout_s: float = 300.0) -> None:
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
    """
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=timeout_s)) as http, \
            streamable_http_client(url, http_client=http) as (remote_read, remote_write), \
            stdio_server() as (local_read, local_write), anyio.create_task_group() as group:

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
