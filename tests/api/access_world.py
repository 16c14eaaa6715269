"""A module-scoped app with auth on, for the access proofs (test_leak_matrix, test_leak_property):
one database per backend and per module, built once, so that a world of repositories and keys
is made once and read by many tests. On SQLite and PostgreSQL (``KG_TEST_POSTGRES_URL``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from api.app import create_app
from kg.context import OPERATOR, run
from kg.index.embedded import EmbeddedVectorIndex
from kg.ops import keys as key_ops
from kg.providers.registry import make_embedder
from kg.services import Services
from kg.settings import Settings
from kg.store.db import Database
from tests.api.test_access import PEPPER, bearer
from tests.conftest import FAKE_ASK_MIN_SIMILARITY, FAKE_MODEL, database_url


@dataclass
class App:
    """An in-process client of an app with auth on, its services and the bootstrap admin key."""

    client: TestClient
    services: Services
    admin: dict[str, str]


@contextmanager
def auth_app(backend: str, folder: Path) -> Iterator[App]:
    """An app on a fresh ``backend`` database under ``folder``: auth on, the tests' pepper, the
    fake embedder, inline indexing; with an admin key made as ``kg keys create --admin`` does."""
    with database_url(backend, folder) as url:
        settings = Settings(database_url=url, data_dir=folder / "data", embedding_model=FAKE_MODEL,
                            index_inline=True, allow_fake_embedder=True, auth=True, key_pepper=PEPPER,
                            rag_max_distance=2.0,  # the fake embedder: no relevance cut (tests/conftest.py)
                            ask_min_similarity=FAKE_ASK_MIN_SIMILARITY)
        services = Services(settings=settings, db=_upgraded(settings), index=EmbeddedVectorIndex(settings.data_dir),
                            embedder_factory=lambda name: make_embedder(name, allow_fake=True))
        try:
            with TestClient(create_app(services=services), raise_server_exceptions=False) as client:
                admin = run(services, OPERATOR, key_ops.create_key, name="admin", grants=[], admin=True)
                yield App(client, services, bearer(admin.key))
        finally:
            services.close()


def _upgraded(settings: Settings) -> Database:
    db = Database(settings.resolved_database_url())
    db.upgrade()
    return db


def api_routes(app) -> set[tuple[str, str]]:
    """Every ``(method, path)`` the app serves under ``/api``, from ``app.routes`` (walking the
    included routers, which FastAPI keeps apart from the app's own list)."""

    def walk(routes, prefix: str) -> Iterator[tuple[str, APIRoute]]:
        for route in routes:
            if isinstance(route, APIRoute):
                yield prefix + route.path, route
            elif hasattr(route, "original_router"):  # an included router (FastAPI >= 0.16x)
                yield from walk(route.original_router.routes, prefix + (route.include_context.prefix or ""))

    return {(method, path) for path, route in walk(app.routes, "") if path.startswith("/api")
            for method in route.methods}
