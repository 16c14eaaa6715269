"""Revocation across processes (issue 12): two real ``kg serve`` processes on one PostgreSQL
database; a key revoked through one is refused by it on the next request, and by the other once
``KG_KEY_CACHE_S`` has passed.

The bound: a server trusts a key it authenticated for ``KG_KEY_CACHE_S`` seconds
(:class:`kg.access.KeyCache`), and the server that revokes a key forgets it at once. Skipped
without ``KG_TEST_POSTGRES_URL`` (SQLite is one machine's file; several servers share PostgreSQL).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import POSTGRES_URL
from tests.conftest import database_url as fresh_database
from tests.serve import start_server, stop_server

PEPPER = "a-pepper-shared-by-both-servers"
FAKE_MODEL = "fake:hash-64"
CACHE_S = 1.0  # KG_KEY_CACHE_S of both servers

pytestmark = pytest.mark.skipif(not POSTGRES_URL, reason="needs KG_TEST_POSTGRES_URL (two servers share PostgreSQL)")


@pytest.fixture(scope="module")
def database_url(tmp_path_factory) -> Iterator[str]:
    """A fresh PostgreSQL schema, dropped afterwards."""
    with fresh_database("postgresql", tmp_path_factory.mktemp("db")) as url:
        yield url


def _env(database_url: str, data: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KG_")}
    env.update({"KG_DATABASE_URL": database_url, "KG_DATA_DIR": str(data), "KG_AUTH": "true",
                "KG_KEY_PEPPER": PEPPER, "KG_ALLOW_FAKE_EMBEDDER": "true", "KG_EMBEDDING_MODEL": FAKE_MODEL,
                "OPENBLAS_NUM_THREADS": "1", "KG_KEY_CACHE_S": str(CACHE_S)})
    return env


@pytest.fixture(scope="module")
def servers(database_url, tmp_path_factory) -> Iterator[tuple[httpx.Client, httpx.Client, str]]:
    """Servers A and B on one database (A first: it applies the migrations), and an admin token
    made with the CLI (``kg keys create --admin``), as an operator bootstraps one."""
    data = tmp_path_factory.mktemp("revocation")
    started = []
    try:
        for name in ("a", "b"):
            started.append(start_server(_env(database_url, data / name)))
        made = subprocess.run([sys.executable, "-m", "kg.cli", "keys", "create", "--name", "admin", "--admin"],
                              env=_env(database_url, data / "cli"), capture_output=True, text=True, check=False)
        assert made.returncode == 0, made.stderr
        token = next(word.strip('",') for word in made.stdout.split() if word.strip('",').startswith("kg_"))
        (_, base_a), (_, base_b) = started
        with httpx.Client(base_url=base_a, timeout=30) as a, httpx.Client(base_url=base_b, timeout=30) as b:
            yield a, b, token
    finally:
        for proc, _ in started:
            stop_server(proc)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_a_key_revoked_through_one_server_is_refused_there_at_once_and_by_the_other_within_the_bound(servers):
    a, b, admin_token = servers
    admin = bearer(admin_token)
    assert a.post("/api/repos", json={"name": "acme"}, headers=admin).status_code == 201
    r = b.post("/api/keys", headers=admin, json={"name": "agent", "grants": [
        {"repo": "acme", "branches": ["*"], "actions": ["read"]}]})
    assert r.status_code == 201, r.text
    key_id, agent = r.json()["id"], bearer(r.json()["key"])
    # the key works on both servers (each has read it, and trusts it for CACHE_S)
    for server in (a, b, a, b):
        r = server.get("/api/repos/acme", headers=agent)
        assert r.status_code == 200, r.text
    assert a.delete(f"/api/keys/{key_id}", headers=admin).status_code == 200
    refused = a.get("/api/repos/acme", headers=agent)  # the revoking server: the next request
    assert refused.status_code == 401, refused.text
    assert refused.json()["error"]["details"] == {"state": "revoked"}
    time.sleep(CACHE_S)  # the bound for every other server
    refused = b.get("/api/repos/acme", headers=agent)
    assert refused.status_code == 401, refused.text
    assert refused.json()["error"]["code"] == "unauthenticated"
    assert refused.json()["error"]["details"] == {"state": "revoked"}
    # the admin key, untouched, still works on both
    assert b.get("/api/repos/acme", headers=admin).status_code == 200
    assert a.get("/api/repos/acme", headers=admin).status_code == 200
