"""``/docs`` (Swagger UI) and ``/redoc`` (ReDoc) from assets shipped with kg (``api/static/docs``):
FastAPI's defaults load their scripts from a CDN, so the pages were blank with no network."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

from kg.services import Services

ASSETS = Path(__file__).parent / "static" / "docs"
"""The vendored Swagger UI and ReDoc files, with their licences (see the README there)."""

ASSETS_URL = "/static/docs"
"""Where the assets are served."""


def install(app: FastAPI) -> None:
    """Serve ``/docs``, ``/docs/oauth2-redirect`` and ``/redoc`` with local assets only.

    Parameters
    ----------
    app : FastAPI
        Built with ``docs_url=None, redoc_url=None`` (FastAPI's own pages use a CDN).
    """
    app.mount(ASSETS_URL, StaticFiles(directory=ASSETS), name="docs-static")
    title = app.title
    openapi_url = app.openapi_url or "/openapi.json"

    @app.get("/docs", include_in_schema=False)
    def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url=openapi_url, title=f"{title} - Swagger UI",
                                   oauth2_redirect_url="/docs/oauth2-redirect",
                                   swagger_js_url=f"{ASSETS_URL}/swagger-ui-bundle.js",
                                   swagger_css_url=f"{ASSETS_URL}/swagger-ui.css",
                                   swagger_favicon_url=f"{ASSETS_URL}/favicon.png")

    @app.get("/docs/oauth2-redirect", include_in_schema=False)
    def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get("/redoc", include_in_schema=False)
    def redoc() -> HTMLResponse:
        return get_redoc_html(openapi_url=openapi_url, title=f"{title} - ReDoc",
                              redoc_js_url=f"{ASSETS_URL}/redoc.standalone.js",
                              redoc_favicon_url=f"{ASSETS_URL}/favicon.png", with_google_fonts=False)


#: The ``fake:`` embedding models a server that allows them (``KG_ALLOW_FAKE_EMBEDDER``, tests
#: only) documents: the dimension is the name's numeric suffix (:func:`kg.providers.registry.make_embedder`).
FAKE_MODELS = ("fake:hash-32", "fake:hash-64", "fake:hash-384")


def describe_server(document: dict[str, Any], services: Services) -> dict[str, Any]:
    """Say in the OpenAPI document what this server's settings allow, where a request's validity
    depends on them: the ``fake:`` embedding models only where ``KG_ALLOW_FAKE_EMBEDDER`` is on;
    a search's ``rerank: true`` only where a reranker is configured (``KG_RERANK_MODEL``); the RAG
    node's Weaviate URLs, ``embedded`` and those of ``KG_RAG_WEAVIATE_URLS``; the research
    assistant's most steps (``KG_RESEARCH_MAX_STEPS``).

    Parameters
    ----------
    document : dict
        The document FastAPI built from the routes (changed in place).
    services : kg.services.Services
        The server's settings and reranker.

    Returns
    -------
    dict
        ``document``.
    """
    schemas = document.get("components", {}).get("schemas", {})
    for model in (schemas.get("EmbeddingRequest", {}).get("properties", {}).get("model"),
                  schemas.get("RagConfigRequest", {}).get("properties", {}).get("embeddingModel")):
        if model is not None and services.settings.allow_fake_embedder:
            model["anyOf"] = [*model["anyOf"], {"title": "fake", "type": "string", "enum": list(FAKE_MODELS)}]
    steps = schemas.get("ResearchAssistantInput", {}).get("properties", {}).get("max_steps")
    if steps is not None:
        steps["maximum"] = services.settings.research_max_steps
    url = schemas.get("RagConfigRequest", {}).get("properties", {}).get("weaviateUrl")
    if url is not None:
        url["enum"] = ["embedded", *services.settings.rag_weaviate_urls]
    rerank = schemas.get("SearchRequest", {}).get("properties", {}).get("rerank")
    if rerank is not None and services.reranker is None:
        rerank["anyOf"] = [{"type": "boolean", "const": False}, {"type": "null"}]
        rerank["description"] = ("Rerank the top candidates: this server has no reranker (KG_RERANK_MODEL), so "
                                 "only false (or null, the default: no reranking).")
    return document


def install_document(app: FastAPI, services: Services) -> None:
    """Serve ``/openapi.json`` built for this server (:func:`describe_server`), once."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = describe_server(build(), services)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
