"""The only place that maps errors to HTTP statuses and the one JSON error shape.

``{"error": {"code": "...", "message": "...", "details": {...}}}``
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from kg import errors
from kg.types import ErrorBody

log = logging.getLogger("kg.api")


def refusal(description: str) -> dict[str, Any]:
    """A documented refusal of a route (its 422 or 409): :class:`ErrorBody`, described by the rule
    (across fields, or with the server's state) that the schema cannot state, with its error code
    and the field ``details.field`` names."""
    return {"model": ErrorBody, "description": description}


#: Status of every error class; the most specific class wins.
#: Documented on every route (api/app.py): errors answer :class:`ErrorBody`, not FastAPI's
#: ``HTTPValidationError``.
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    "4XX": {"model": ErrorBody, "description": "Refused: 400 malformed, 404 unknown repository / branch / "
                                              "workspace / node, 409 conflict, 422 valid JSON that breaks a rule; "
                                              "401 no valid API key, 403 outside the key's grants."},
    "5XX": {"model": ErrorBody, "description": "502 / 503: an upstream (embedding provider, Weaviate, "
                                              "database) is unreachable."},
}


STATUS: dict[type[errors.KGError], int] = {
    errors.KGError: 500,
    errors.NotFound: 404,
    errors.Unauthenticated: 401,
    errors.Forbidden: 403,
    errors.RateLimited: 429,
    errors.Overloaded: 503,
    errors.Misdirected: 421,
    errors.RequestTimeout: 408,
    errors.Conflict: 409,
    errors.MergeConflict: 409,
    errors.ModelLocked: 409,
    errors.InvalidInput: 422,
    errors.MalformedInput: 400,
    errors.TooLarge: 413,
    errors.BackendUnavailable: 503,
    errors.UpstreamUnavailable: 502,
    errors.ProviderError: 502,
}


def status_for(exc: errors.KGError) -> int:
    """The HTTP status of a kg error (nearest class in its MRO)."""
    for cls in type(exc).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return 500


def error_response(exc: errors.KGError) -> JSONResponse:
    """The answer to a kg error: its class's status and the API's error shape.

    Parameters
    ----------
    exc : kg.errors.KGError

    Returns
    -------
    JSONResponse
        ``{"error": {"code": exc.code, "message", "details"}}`` with :func:`status_for`'s
        status; details made safe to render. A 5xx is logged.

    Notes
    -----
    The exception handler answers with it, and so does the request guard (api/guard.py), which
    runs before the routes, outside the handlers' reach.
    """
    status = status_for(exc)
    if status >= 500:
        log.warning("%s: %s", type(exc).__name__, exc.message)
    # RFC 6750: a 401 says which scheme to authenticate with.
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    if isinstance(exc, (errors.RateLimited, errors.Overloaded)):
        headers = {"Retry-After": str(retry_after_header(exc.retry_after_s))}
    return JSONResponse(error_body(exc.code, _jsonable(exc.message), _jsonable(exc.details)), status_code=status,
                        headers=headers)


def retry_after_header(retry_after_s: float) -> int:
    """``Retry-After`` in whole seconds (RFC 9110 allows no fraction), rounded up so that a
    client waiting that long finds a token: at least 1.

    Parameters
    ----------
    retry_after_s : float
        Seconds until the call would be admitted.

    Returns
    -------
    int
    """
    # Rounded to the microsecond first: 13.000000000000002 s of float arithmetic is 13 s.
    return max(1, math.ceil(round(retry_after_s, 6)))


#: The API's error shape (:func:`kg.errors.error_body`).
error_body = errors.error_body


def _jsonable(value: Any) -> Any:
    """Details made safe to render: non-finite floats and unencodable strings become text."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, (int, float, bool)) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return str(value)


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def allowed_methods(request: Request) -> list[str]:
    """The methods of the resource at the request's path (RFC 9110: a 405 lists them in
    ``Allow``).

    Starlette's own 405 names only the methods of the first route whose path matched, and
    FastAPI makes one route per method. Where several route templates match one path, the
    resource is the most specific template's (the most literal characters):
    ``/branches/feature/x/merge`` is the merge of ``feature/x`` (POST), not a branch named
    ``feature/x/merge`` of ``/branches/{branch:path}`` (GET, DELETE; such a name is refused).
    """
    scope = {**request.scope, "path": request.scope.get("path", "")}
    serving: dict[str, int] = {}  # method -> the specificity of the most specific route serving it
    for route in _leaf_routes(request.app.router.routes):
        for method in _METHODS:
            if route.matches({**scope, "method": method})[0] == Match.FULL:
                serving[method] = max(serving.get(method, -1), _specificity(route))
    best = max(serving.values(), default=-1)
    return [method for method in _METHODS if serving.get(method) == best]


def _leaf_routes(routes: Any) -> Any:
    """Every route of ``routes``, an included router's own routes in its place."""
    for route in routes:
        included = getattr(route, "original_router", None)  # FastAPI's included router
        if included is not None:
            yield from _leaf_routes(included.routes)
        else:
            yield route


def _specificity(route: Any) -> int:
    """How many literal characters a route's path template holds (its ``{parameters}`` none)."""
    return len(re.sub(r"\{[^}]*\}", "", str(getattr(route, "path", ""))))


def answer(request: Request, response: JSONResponse) -> Response:
    """``response``, or the page the app's ``error_page`` hook makes of it (the console's HTML
    on ``/ui`` paths: same status, same code and message)."""
    hook: Callable[..., Response | None] | None = getattr(request.app.state, "error_page", None)
    if hook is None:
        return response
    error = json.loads(bytes(response.body))["error"]
    page = hook(request, response.status_code, error["code"], error["message"], error["details"])
    if page is None:
        return response
    for name in ("retry-after", "allow"):
        if name in response.headers:
            page.headers[name] = response.headers[name]
    return page


def install(app: FastAPI) -> None:
    """Register the handlers on ``app``."""

    @app.exception_handler(errors.KGError)
    async def _kg_error(request: Request, exc: errors.KGError) -> Response:
        return answer(request, error_response(exc))

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> Response:
        return answer(request, _validation_response(request, exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        return answer(request, _http_response(request, exc))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> Response:  # pragma: no cover
        log.exception("unexpected error")
        return answer(request, JSONResponse(error_body("internal", "internal error; see the server log"),
                                             status_code=500))


def _validation_response(request: Request, exc: RequestValidationError) -> JSONResponse:
    """The 400 / 422 of a request FastAPI could not validate."""
    problems = exc.errors()
    details = _jsonable({"errors": [{"loc": [str(x) for x in p.get("loc", ())], "msg": p.get("msg", ""),
                                     "type": p.get("type", "")} for p in problems]})
    if any(p.get("type") == "json_invalid" for p in problems):
        return JSONResponse(error_body("malformed", "the request body is not valid JSON", details),
                            status_code=400)
    whole_body = [p for p in problems if tuple(p.get("loc", ())) == ("body",)]
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if whole_body and content_type != "application/json" and not content_type.endswith("+json"):
        return JSONResponse(
            error_body("malformed", "the request body must be JSON sent with Content-Type: "
                       f"application/json (got {content_type or 'no Content-Type'})",
                       {**details, "content_type": content_type or None}),
            status_code=400,
        )
    if whole_body:
        return JSONResponse(
            error_body("malformed", f"the request body must be a JSON object: {whole_body[0]['msg']}", details),
            status_code=400,
        )
    first = problems[0] if problems else {"msg": "invalid request", "loc": ()}
    where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
    message = _jsonable(f"{where}: {first['msg']}" if where else first["msg"])
    return JSONResponse(error_body("invalid_input", message, details), status_code=422)


def _http_response(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    """Starlette's own errors (404 route, 405 method) in the API's error shape."""
    # FastAPI answers a body it cannot parse (not UTF-8, nested past the parser's depth) with
    # its own 400: that is a malformed request as well.
    code = {400: "malformed", 404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    headers = dict(getattr(exc, "headers", None) or {})
    if exc.status_code == 405:
        headers["Allow"] = ", ".join(allowed_methods(request))
    return JSONResponse(error_body(code, str(exc.detail)), status_code=exc.status_code,
                        headers=headers or None)
