"""The FastAPI application factory."""

from __future__ import annotations

from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI

import kg
from api import docs, errors, observability, ui
from api.deps import get_caller
from api.errors import ERROR_RESPONSES
from api.guard import RequestGuard
from api.mcp import mcp_app
from api.routes import (
    branches,
    bulk,
    changes,
    functions,
    health,
    history,
    jobs,
    keys,
    lineage,
    nodes,
    rag,
    references,
    relations,
    repos,
    search,
    sql,
)
from kg.services import Services
from kg.settings import Settings
from kg.tracing import configure as configure_tracing


def create_app(settings: Settings | None = None, *, services: Services | None = None) -> FastAPI:
    """Build the app; pending migrations are applied at start.

    Parameters
    ----------
    settings : Settings, optional
        Read from the environment (``KG_*``) when omitted.
    services : Services, optional
        Tests hand their own (fake embedder, temporary folders).
    """
    if services is None:
        services = Services.from_settings(settings or Settings())

    mcp_server, mcp_asgi = mcp_app(services)
    configure_tracing()  # from the OTEL_* variables, once per process; nothing when unset

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        services.indexer.start()
        services.jobs.start()
        services.webhooks.start()
        metrics_server = observability.start_metrics_server(services)
        try:
            # A mounted app's lifespan never runs: the MCP session manager is run here.
            async with mcp_server.session_manager.run():
                yield
        finally:
            if metrics_server is not None:
                metrics_server.shutdown()
                metrics_server.server_close()
            services.close()

    services.db.upgrade()
    app = FastAPI(title="kg", version=kg.__version__, lifespan=lifespan, docs_url=None, redoc_url=None,
                  description="A knowledge-graph service with branching storage for AI agents.")
    app.state.services = services
    errors.install(app)
    app.add_middleware(RequestGuard, services=services)
    app.include_router(health.router, responses=ERROR_RESPONSES)
    # Every other route needs the caller (a 401 with KG_AUTH on and no valid key), even one
    # that does not use it; FastAPI resolves get_caller once per request.
    for module in (repos, history, changes, branches, nodes, search, relations, references, rag, functions, jobs,
                   keys, lineage, sql, bulk):
        app.include_router(module.router, responses=ERROR_RESPONSES, dependencies=[Depends(get_caller)])
    # MCP over streamable HTTP: /mcp/{repo}/{branch} (the branch may hold '/'), the same keys.
    app.mount("/mcp", mcp_asgi)
    # The review console: HTML under /ui, over the same kg functions.
    ui.install(app)
    # /docs and /redoc from the assets shipped with kg: no CDN, they work offline.
    docs.install(app)
    # Outermost: counts and traces every answer, the guard's refusals too.
    observability.install(app)
    # The document says what this server's settings allow (fake embedders, reranking).
    docs.install_document(app, services)
    return app
