"""Refuse request text the store cannot hold, before any route runs: lone UTF-16 surrogates
(not encodable as UTF-8), NUL characters (PostgreSQL text cannot hold them), and the JSON
constants NaN / Infinity (not JSON). Each is a kg error (:class:`kg.errors.InvalidInput`, 422,
or :class:`kg.errors.MalformedInput`, 400) answered by the one error mapper
(:func:`api.errors.error_response`) with the API.md error shape, never a 500 or a stored value
that later breaks every read.

It also bounds the work one request can cause before any route runs: a body larger than
``Settings.max_body_bytes`` (``KG_MAX_BODY_BYTES``) is refused with 413
(:class:`kg.errors.TooLarge`) from its ``Content-Length`` before a byte of it is read, or, sent
without one (chunked), as soon as the bytes received pass the limit; and the JSON is parsed
and checked in a worker thread, so a large body never holds the event loop (``/health`` and
every other request are served meanwhile)."""

from __future__ import annotations

import json
from collections.abc import MutableMapping
from typing import Any
from urllib.parse import parse_qsl, unquote, unquote_to_bytes

import anyio.to_thread
from fastapi import Depends, Request, Response
from fastapi.dependencies.models import Dependant
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from api.errors import answer, error_response
from kg.errors import InvalidInput, KGError, MalformedInput, TooLarge
from kg.text.storable import check_json, check_text


def _constant(name: str) -> Any:
    raise MalformedInput(f"{name} is not valid JSON")


def _check_target(scope: Scope) -> None:
    """Refuse a path or query string that holds text the store cannot hold."""
    check_text(scope.get("path", ""), "the path")
    raw_qs = scope.get("query_string", b"").decode("latin-1")
    for key, value in parse_qsl(raw_qs, keep_blank_values=True, errors="surrogateescape"):
        check_text(key, "a query parameter")
        check_text(value, f"query parameter {key!r}")
    check_text(unquote(scope.get("path", ""), errors="surrogateescape"), "the path")
    raw_path = scope.get("raw_path")
    if raw_path:
        # The server decodes the path with replacement characters: %ff%fe would land on
        # a node named "\ufffd\ufffd", as would any other invalid byte sequence.
        try:
            unquote_to_bytes(raw_path).decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidInput("the path is not valid UTF-8 once percent-decoded") from None


def _too_large(limit: int, length: int | None = None) -> TooLarge:
    """The 413 of a body over ``limit`` bytes."""
    size = f"of {length} bytes " if length is not None else ""
    return TooLarge(f"the request body {size}is larger than the {limit} bytes this server accepts "
                    "(KG_MAX_BODY_BYTES)", details={"max_body_bytes": limit})


def _declared_length(scope: Scope) -> int | None:
    """The request's Content-Length, None when absent or not a number."""
    for name, value in scope.get("headers", ()):
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


#: Where the guard leaves a body's parsed JSON in the ASGI scope, for :class:`GuardedRoute`.
PARSED_JSON = "kg.parsed_json"


def _parse_body(body: bytes, scope: Scope) -> None:
    """Parse and check a JSON body (run in a worker thread) and leave it in the scope; a body
    that is not JSON passes, for the route to answer 400 with its own message."""
    try:
        parsed = json.loads(body, parse_constant=_constant)
    except (ValueError, RecursionError):
        return
    check_json(parsed)
    scope[PARSED_JSON] = parsed


def _query_names(dependant: Dependant) -> set[str]:
    """The query parameter names a route declares, in itself and in its dependencies."""
    names: set[str] = set()
    stack, seen = [dependant], set()
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        for field in current.query_params:
            names.add(field.alias)
            choices = getattr(field.field_info.validation_alias, "choices", None)
            names.update(c for c in choices or () if isinstance(c, str))
        stack.extend(current.dependencies)
    return names


def refuse_unknown_query(request: Request) -> None:
    """Refuse a query parameter the matched route does not declare (a dependency of every
    :class:`GuardedRoute` under ``/api``), as bodies refuse unknown fields.

    Parameters
    ----------
    request : fastapi.Request
        The request; its matched route (``scope["route"]``) says which names it accepts.

    Raises
    ------
    kg.errors.InvalidInput
        422 naming the unknown parameters and the accepted ones (``details={"unknown": [...],
        "accepted": [...]}``).
    """
    route = request.scope.get("route")
    accepted = route.accepted_query if isinstance(route, GuardedRoute) else None
    if accepted is None:
        return
    unknown = sorted({key for key in request.query_params.keys() if key not in accepted})
    if unknown:
        names = ", ".join(sorted(accepted)) or "none"
        raise InvalidInput(f"unknown query parameter{'s' if len(unknown) > 1 else ''} "
                           f"{', '.join(repr(u) for u in unknown)}; this route accepts: {names}",
                           details={"unknown": unknown, "accepted": sorted(accepted)})


class GuardedRoute(APIRoute):
    """A route that takes the body's JSON as the guard parsed it (off the event loop), so
    FastAPI does not parse it a second time on the loop (``Request.json`` caches ``_json``).

    Under ``/api`` it also refuses query parameters it does not declare
    (:func:`refuse_unknown_query`, run after the router's own dependencies, so a missing key
    is still a 401 first)."""

    def __init__(self, path: str, endpoint: Any, **kwargs: Any) -> None:
        if path.startswith("/api/") or path == "/api":
            dependencies = list(kwargs.get("dependencies") or [])
            if not any(getattr(d, "dependency", None) is refuse_unknown_query for d in dependencies):
                dependencies.append(Depends(refuse_unknown_query))
            kwargs["dependencies"] = dependencies
        super().__init__(path, endpoint, **kwargs)
        self.accepted_query: frozenset[str] | None = (
            frozenset(_query_names(self.dependant)) if path.startswith("/api/") or path == "/api" else None)

    def get_route_handler(self) -> Any:
        """The route's handler, given the guard's parsed body first."""
        handler = super().get_route_handler()

        async def handle(request: Request) -> Response:
            if PARSED_JSON in request.scope:
                request._json = request.scope[PARSED_JSON]
            return await handler(request)

        return handle


class RequestGuard:
    """ASGI middleware: checks the path, the query string and JSON bodies, and bounds the
    body's size.

    Parameters
    ----------
    app : ASGI application
    max_body_bytes : int
        Largest body accepted, in bytes (``Settings.max_body_bytes``); larger is 413.
    """

    def __init__(self, app: ASGIApp, max_body_bytes: int = 10 * 1024 * 1024) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    @staticmethod
    async def _refuse(exc: KGError, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer ``exc`` as the error handlers do (the API's JSON, the console's HTML page)."""
        response: JSONResponse | Response = error_response(exc)
        if "app" in scope:  # set by the application before its middleware runs
            response = answer(Request(scope), error_response(exc))
        await response(scope, receive, send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            _check_target(scope)
        except KGError as exc:
            await self._refuse(exc, scope, receive, send)
            return
        limit = self.max_body_bytes
        declared = _declared_length(scope)
        if declared is not None and declared > limit:
            await self._refuse(_too_large(limit, declared), scope, receive, send)
            return
        if scope.get("method") not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        chunks = []
        received = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            received += len(chunk)
            if received > limit:  # a streamed body (no Content-Length, or a false one)
                await self._refuse(_too_large(limit), scope, receive, send)
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        if body.strip():
            try:
                await anyio.to_thread.run_sync(_parse_body, body, scope)
            except KGError as exc:
                await self._refuse(exc, scope, receive, send)
                return
        sent = False

        async def replay() -> MutableMapping[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)
