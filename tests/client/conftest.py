"""A real ``kg serve`` per database backend (auth on, the fake embedder, a scoped rate limit on
expensive calls) for the client's tests, with an administrator key made through the library."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from kg.context import OPERATOR, run
from kg.ops import keys as key_ops
from kg.services import Services
from kg.settings import Settings
from tests.conftest import BACKENDS, FAKE_MODEL, database_url
from tests.serve import start_server, stop_server

PEPPER = "a-pepper-for-the-client-tests-only"
#: One expensive call a second, a burst of one: the second ``ask`` in a row is a 429 with
#: ``Retry-After: 1``; the tours make no expensive call.
RATE = {"KG_RATE_EXPENSIVE_PER_MIN": "60", "KG_RATE_EXPENSIVE_BURST": "1"}


@dataclass(frozen=True)
class Server:
    """A running ``kg serve``: its base URL and an administrator's token."""

    url: str
    admin_key: str


def serve_env(db_url: str, data: Path, **extra: str) -> dict[str, str]:
    """The environment of a test ``kg serve``: auth on, the fake embedder, inline indexing."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KG_")}
    env.update({"KG_DATABASE_URL": db_url, "KG_DATA_DIR": str(data), "KG_EMBEDDING_MODEL": FAKE_MODEL,
                "KG_ALLOW_FAKE_EMBEDDER": "true", "KG_INDEX_INLINE": "true", "KG_AUTH": "true",
                "KG_KEY_PEPPER": PEPPER, "OPENBLAS_NUM_THREADS": "1", "KG_ASK_MIN_SIMILARITY": "0.15", **extra})
    return env


def admin_key(db_url: str, data: Path) -> str:
    """An administrator key, made through the library before the server starts."""
    settings = Settings(database_url=db_url, data_dir=data, embedding_model=FAKE_MODEL, allow_fake_embedder=True,
                        key_pepper=PEPPER)
    services = Services.from_settings(settings)
    try:
        services.db.upgrade()
        return str(run(services, OPERATOR, key_ops.create_key, name="admin", grants=[], admin=True)["key"])
    finally:
        services.close()


@pytest.fixture(scope="module", params=BACKENDS)
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A real ``kg serve`` on a fresh SQLite file or PostgreSQL schema."""
    folder = tmp_path_factory.mktemp(f"client-{request.param}")
    with database_url(request.param, folder) as url:
        key = admin_key(url, folder / "data")
        proc, base = start_server(serve_env(url, folder / "data", **RATE))
        try:
            yield Server(base, key)
        finally:
            stop_server(proc)


@pytest.fixture
def anyio_backend() -> str:
    """The async tests run on asyncio (anyio's pytest plugin)."""
    return "asyncio"
