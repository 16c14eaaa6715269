"""A real ``kg serve`` per database backend (auth on, the fake embedder, a scoped rate limit on
expensive calls) for the client's tests, with an administrator key made by ``kg keys create``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import BACKENDS, FAKE_MODEL, database_url
from tests.serve import ROOT, start_server, stop_server

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


def admin_key(env: dict[str, str]) -> str:
    """An administrator key, made as an operator makes one: ``kg keys create --admin``."""
    done = subprocess.run([sys.executable, "-m", "kg.cli", "keys", "create", "--name", "admin", "--admin"], env=env,
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=True)
    return str(json.loads(done.stdout)["key"])


@pytest.fixture(scope="module", params=BACKENDS)
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A real ``kg serve`` on a fresh SQLite file or PostgreSQL schema."""
    folder = tmp_path_factory.mktemp(f"client-{request.param}")
    with database_url(request.param, folder) as url:
        env = serve_env(url, folder / "data", **RATE)
        key = admin_key(env)
        proc, base = start_server(env)
        try:
            yield Server(base, key)
        finally:
            stop_server(proc)


@pytest.fixture
def anyio_backend() -> str:
    """The async tests run on asyncio (anyio's pytest plugin)."""
    return "asyncio"
