"""Every HTTP request counted and timed by route template and status (:mod:`kg.metrics`) and
traced (a ``kg.http.request`` span, :mod:`kg.tracing`); ``/metrics``; the separate metrics
port (``KG_METRICS_PORT``).

:class:`RequestMetrics` is the outermost middleware, so it sees every answer, the request
guard's refusals (401, 413, 421...) included. The route label is the template of the route
that matched (``/api/repos/{repo}/search``), never the raw path; a path no route matches is
``<unmatched>``, so label values stay bounded.
"""

from __future__ import annotations

import re
import time
from typing import Any
from wsgiref.simple_server import WSGIServer

from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.routing import APIRoute
from prometheus_client import start_http_server
from starlette.routing import Mount, Route, compile_path
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.deps import CallerDep, ServicesDep
from api.guard import GuardedRoute
from kg import tracing
from kg.metrics import HTTP_DURATION, HTTP_REQUESTS
from kg.ops import observability
from kg.services import Services
from kg.tracing import annotate, span

UNMATCHED = "<unmatched>"

router = APIRouter(route_class=GuardedRoute, tags=["health"])


# Not in the OpenAPI document: it is for Prometheus, not an operation of the API (nor of kg.client).
@router.get("/metrics", response_class=Response, include_in_schema=False)
def metrics(request: Request, services: ServicesDep, caller: CallerDep) -> Response:
    """The process's metrics in Prometheus's text format (docs/guides/observability.md): for an
    admin key while ``KG_AUTH`` is on, for a loopback client while it is off; 404 with
    ``KG_METRICS=false`` or ``KG_METRICS_PORT`` set."""
    client = request.client.host if request.client is not None else None
    return Response(observability.scrape(services, caller, client), media_type=observability.CONTENT_TYPE)


def route_template(app: Any, scope: Scope) -> str:
    """The template of the route ``scope`` was (or would have been) routed to.

    The router leaves the matched route in ``scope["route"]``; a request refused before routing
    (by the guard), or routed to a mounted app (``/mcp``), is matched here against the app's
    route templates (:func:`_templates`), as the router would.
    """
    route = scope.get("route")
    if isinstance(route, APIRoute | Route) and not isinstance(route, Mount):
        return route.path
    path, method = scope.get("path", ""), scope.get("method", "GET")
    partial = None
    for template, regex, methods in _templates(app):
        if regex.match(path):
            if methods is None or method in methods:
                return template
            partial = partial or template
    return partial or UNMATCHED


def _templates(app: Any) -> list[tuple[str, re.Pattern[str], frozenset[str] | None]]:
    """Every route of ``app`` as ``(template, regex, methods)`` in routing order (a mount's
    template is its path and ``/*``), walking the included routers; made once per app."""
    cached = getattr(app.state, "route_templates", None)
    if cached is not None:
        return cached
    out: list[tuple[str, re.Pattern[str], frozenset[str] | None]] = []

    def walk(routes: Any, prefix: str) -> None:
        for route in routes:
            if isinstance(route, Mount):
                template = prefix + route.path + "/*"
                regex, _, _ = compile_path(prefix + route.path + "/{rest:path}")
                out.append((template, regex, None))
            elif isinstance(route, APIRoute | Route):
                regex, _, _ = compile_path(prefix + route.path)
                out.append((prefix + route.path, regex, frozenset(route.methods or ()) or None))
            elif hasattr(route, "original_router"):  # an included router (FastAPI >= 0.16x)
                walk(route.original_router.routes, prefix + (route.include_context.prefix or ""))

    walk(app.router.routes, "")
    app.state.route_templates = out
    return out


class RequestMetrics:
    """Count, time and trace each HTTP request (pure ASGI: streaming answers pass through)."""

    def __init__(self, app: ASGIApp, *, fastapi_app: FastAPI, count: bool) -> None:
        self.app = app
        self.fastapi_app = fastapi_app
        #: Whether requests are counted (``KG_METRICS``); a benchmark flips it at run time.
        self.count = count
        fastapi_app.state.request_metrics = self

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        method = scope.get("method", "GET")
        with span("kg.http.request", method=method):
            try:
                await self.app(scope, receive, send_status)
            finally:
                route = route_template(self.fastapi_app, scope)
                params = scope.get("path_params") or {}
                annotate(route=route, status=status, repo=_name(params.get("repo")),
                         branch=_name(params.get("branch")))
                if self.count:
                    labels = (method, route, str(status))
                    HTTP_REQUESTS.labels(*labels).inc()
                    HTTP_DURATION.labels(*labels).observe(time.perf_counter() - started)


def _name(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def install(app: FastAPI) -> None:
    """Add ``/metrics`` and the request middleware (last: the outermost) to ``app``; without
    metrics (``KG_METRICS=false``) nor tracing, no middleware."""
    services = app.state.services
    app.include_router(router)
    if services.settings.metrics or tracing.active():
        app.add_middleware(RequestMetrics, fastapi_app=app, count=services.settings.metrics)


def start_metrics_server(services: Services) -> WSGIServer | None:
    """Serve the metrics on ``KG_METRICS_HOST:KG_METRICS_PORT`` with prometheus-client's server
    (a daemon thread; no authentication: bind it where only the scraper reaches), or nothing
    when ``KG_METRICS_PORT`` is unset or metrics are off.

    Returns
    -------
    wsgiref.simple_server.WSGIServer or None
        The server, to ``shutdown()`` when the app stops.
    """
    settings = services.settings
    if not settings.metrics or settings.metrics_port is None:
        return None
    server, _ = start_http_server(settings.metrics_port, addr=settings.metrics_host,
                                  registry=observability.registry(services))
    return server
