"""The real ``mcp`` client against a kg MCP endpoint, one short session per call (the transport is
stateless): helpers of the MCP tests."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import httpx2
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client


def mcp_session(target: Any, key: str | None, body: Callable[[Client], Awaitable[Any]]) -> Any:
    """Open a client session on ``target`` (a URL, with ``key`` as bearer; or a transport / server
    parameters), run ``body(client)``, close it."""

    async def main() -> Any:
        if not isinstance(target, str):
            async with Client(target) as client:
                return await body(client)
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=120.0)) as http:
            async with Client(streamable_http_client(target, http_client=http)) as client:
                return await body(client)

    return anyio.run(main)


def tool_names(target: Any, key: str | None = None) -> list[str]:
    async def names(client: Client) -> list[str]:
        return [t.name for t in (await client.list_tools()).tools]
    return mcp_session(target, key, names)


def call(target: Any, key: str | None, name: str, arguments: dict[str, Any], *, error: bool = False,
         raw: bool = False) -> Any:
    """Call tool ``name``: its structured content (``error``: it must be a tool error; ``raw``: its text)."""

    async def one(client: Client) -> Any:
        return await client.call_tool(name, arguments)

    result = mcp_session(target, key, one)
    assert result.is_error is error, result.content
    if raw:
        return result.content[0].text
    return result.structured_content


def read(target: Any, key: str | None, uri: str) -> str:
    async def one(client: Client) -> str:
        return (await client.read_resource(uri)).contents[0].text
    return mcp_session(target, key, one)


def mcp_error(exc: BaseException) -> MCPError:
    """The MCP error a failed session raised (the client raises it inside exception groups)."""
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    assert isinstance(exc, MCPError), repr(exc)
    return exc
