"""The MCP server's streamable HTTP transport, mounted at ``/mcp/{repo}/{branch}``.

With ``KG_AUTH`` on, the SDK's own bearer middleware (:class:`kg.mcp.auth.KeyVerifier` as its
token verifier) refuses a request without a valid key with 401. With it off, a request without
a key is anonymous, and a key that is sent is still checked, as on ``/api`` (a wrong one is a
401; a valid one restricts the request to its grants): the same SDK middleware, without the
requirement.
"""

from __future__ import annotations

import json

from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser, BearerAuthBackend
from mcp.server.mcpserver import MCPServer
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from kg.mcp.auth import KeyVerifier
from kg.mcp.server import http_app, http_server
from kg.services import Services


def mcp_app(services: Services) -> tuple[MCPServer, ASGIApp]:
    """The MCP server of ``services`` and the ASGI app to mount at ``/mcp``.

    Parameters
    ----------
    services : kg.services.Services

    Returns
    -------
    (MCPServer, ASGI app)
        The mounting app must run ``server.session_manager.run()`` in its lifespan.
    """
    server = http_server(services)
    # With KG_AUTH off the request guard checks Host and Origin on every path, /mcp included.
    app: ASGIApp = http_app(server, services.settings.host, check_host=services.settings.auth)
    if not services.settings.auth:
        app = AuthenticationMiddleware(_RefuseInvalidKey(app),
                                       backend=BearerAuthBackend(KeyVerifier(services.db, services.settings,
                                                                                 services.key_cache)))
    return server, app


class _RefuseInvalidKey:
    """401 for a request whose ``Authorization`` header the bearer backend did not accept."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and any(k.lower() == b"authorization" for k, _ in scope.get("headers", [])) \
                and not isinstance(scope.get("user"), AuthenticatedUser):
            body = json.dumps({"error": "invalid_token", "error_description": "invalid API key"}).encode()
            await send({"type": "http.response.start", "status": 401,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(body)).encode()),
                                    (b"www-authenticate", b'Bearer error="invalid_token"')]})
            await send({"type": "http.response.body", "body": body})
            return
        await AuthContextMiddleware(self.app)(scope, receive, send)

