"""Refuse request text the store cannot hold, before any route runs: lone UTF-16 surrogates
(not encodable as UTF-8), NUL characters (PostgreSQL text cannot hold them), and the JSON
constants NaN / Infinity (not JSON). Each is a kg error (:class:`kg.errors.InvalidInput`, 422,
or :class:`kg.errors.MalformedInput`, 400) answered by the one error mapper
(:func:`api.errors.error_response`) with the API.md error shape, never a 500 or a stored value
that later breaks every read."""

from __future__ import annotations

import json
import re
from collections.abc import MutableMapping
from typing import Any
from urllib.parse import parse_qsl, unquote, unquote_to_bytes

from starlette.types import ASGIApp, Receive, Scope, Send

from api.errors import error_response
from kg.errors import InvalidInput, KGError, MalformedInput

_BAD_CHARS = re.compile("[\x00\ud800-\udfff]")
MAX_DEPTH = 64


def _constant(name: str) -> Any:
    raise MalformedInput(f"{name} is not valid JSON")


def check_text(value: str, where: str) -> None:
    """Refuse a string with a NUL or a lone surrogate.

    Parameters
    ----------
    value : str
    where : str
        What the string is, for the message (``"the path"``).

    Raises
    ------
    kg.errors.InvalidInput
        The string holds a NUL character or an unpaired UTF-16 surrogate.
    """
    match = _BAD_CHARS.search(value)
    if match:
        what = "a NUL character" if match.group() == "\x00" else "an unpaired UTF-16 surrogate"
        raise InvalidInput(f"{where} contains {what}, which cannot be stored")


def _walk(value: Any, depth: int = 0) -> None:
    if depth > MAX_DEPTH:
        raise MalformedInput(f"JSON nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, str):
        check_text(value, "a string of the request body")
    elif isinstance(value, dict):
        for key, item in value.items():
            check_text(key, "a key of the request body")
            _walk(item, depth + 1)
    elif isinstance(value, list):
        for item in value:
            _walk(item, depth + 1)


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


class RequestGuard:
    """ASGI middleware: checks the path, the query string and JSON bodies."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            _check_target(scope)
        except KGError as exc:
            await error_response(exc)(scope, receive, send)
            return
        if scope.get("method") not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        chunks = []
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        if body.strip():
            try:
                try:
                    parsed = json.loads(body, parse_constant=_constant)
                except (ValueError, RecursionError):
                    parsed = None  # not JSON: the route answers 400 with its own message
                if parsed is not None:
                    _walk(parsed)
            except KGError as exc:
                await error_response(exc)(scope, receive, send)
                return
        sent = False

        async def replay() -> MutableMapping[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)
