"""The MCP server's streamable HTTP transport, mounted at ``/mcp/{repo}/{branch}``.

With ``KG_AUTH`` on, the SDK's own bearer middleware (:class:`kg.mcp.auth.KeyVerifier` as its
token verifier) refuses a request without a valid key with 401, answered in the API's error
shape (``{"error": {"code": "unauthenticated", ...}}``) saying why. With it off, a request without
a key is anonymous, and a key that is sent is still checked, as on ``/api`` (a wrong one is a
401; a valid one restricts the request to its grants): the same SDK middleware, without the
requirement.
"""

from __future__ import annotations

import json
import re

from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser, BearerAuthBackend
from mcp.server.mcpserver import MCPServer
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import error_response
from kg.mcp.auth import KeyVerifier, forget_refusal, refusal_of_request
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
    app: ASGIApp = http_app(server, services.settings.host, check_host=services.settings.auth,
                           sessions=services.settings.mcp_sessions)
    if not services.settings.auth:
        app = AuthenticationMiddleware(_RefuseInvalidKey(app),
                                       backend=BearerAuthBackend(KeyVerifier(services.db, services.settings,
                                                                                 services.key_cache)))
    return server, _KgAuthErrors(app)


class _KgAuthErrors:
    """The SDK's 401 / 403 (an OAuth body, ``{"error": "invalid_token", ...}``) answered in the
    API's error shape instead, through the one error mapper (:func:`api.errors.error_response`),
    with the SDK's ``WWW-Authenticate`` kept; the message says why the key was refused."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        forget_refusal()
        replaced = False

        async def send_kg(message: Message) -> None:
            nonlocal replaced
            if message["type"] == "http.response.start" and message["status"] in (401, 403):
                replaced = True
                sdk_headers = dict(message.get("headers", []))
                has_key = any(k.lower() == b"authorization" for k, _ in scope.get("headers", []))
                response = error_response(refusal_of_request(message["status"], has_key,
                                                             _oauth_description(sdk_headers)))
                headers = [(k, v) for k, v in response.raw_headers if k.lower() != b"www-authenticate"]
                if b"www-authenticate" in sdk_headers:
                    headers.append((b"www-authenticate", sdk_headers[b"www-authenticate"]))
                await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
                await send({"type": "http.response.body", "body": bytes(response.body)})
                return
            if replaced:  # the SDK's body: already answered
                return
            await send(message)

        await self.app(scope, receive, send_kg)


def _oauth_description(headers: dict[bytes, bytes]) -> str:
    """The ``error_description`` of an RFC 6750 ``WWW-Authenticate`` header, or ``""``."""
    match = re.search(rb'error_description="([^"]*)"', headers.get(b"www-authenticate", b""))
    return match.group(1).decode("latin-1") if match else ""


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

