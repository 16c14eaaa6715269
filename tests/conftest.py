"""Shared fixtures: a real database (SQLite file, and PostgreSQL when KG_TEST_POSTGRES_URL is
set), Services with the deterministic fake embedder, and an in-process API client."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from kg.index.embedded import EmbeddedVectorIndex
from kg.providers.registry import make_embedder
from kg.services import Services
from kg.settings import Settings
from kg.store.db import Database

#: The in-process client (fastapi.testclient.TestClient) addresses the app as http://testserver:
#: a name the request guard refuses while KG_AUTH is off unless the operator allows it. Tests
#: that start a real ``kg serve`` drop every KG_ variable from its environment.
os.environ.setdefault("KG_ALLOWED_HOSTS", "testserver")

FAKE_MODEL = "fake:hash-64"
#: ask's semantic grade for the fake embedder (hashed bag-of-words cosines, no model's scale):
#: KG_ASK_MIN_SIMILARITY's default is calibrated for the local model (bench/extractive_ask.py).
FAKE_ASK_MIN_SIMILARITY = 0.15
POSTGRES_URL = os.environ.get("KG_TEST_POSTGRES_URL")

BACKENDS = ["sqlite"] + (["postgresql"] if POSTGRES_URL else [])


def _pg_schema_url(schema: str) -> str:
    sep = "&" if "?" in POSTGRES_URL else "?"
    return f"{POSTGRES_URL}{sep}options=-csearch_path%3D{schema}"


@contextmanager
def database_url(backend: str, folder: Path) -> Iterator[str]:
    """A fresh, empty database on ``backend``: a SQLite file in ``folder``, or a new PostgreSQL
    schema dropped afterwards."""
    if backend == "sqlite":
        yield f"sqlite:///{folder / 'kg.sqlite3'}"
        return
    schema = f"kg_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    try:
        yield _pg_schema_url(schema)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


@pytest.fixture(params=BACKENDS)
def db_url(request, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database: a SQLite file, or a new PostgreSQL schema dropped afterwards."""
    with database_url(request.param, tmp_path) as url:
        yield url


@pytest.fixture
def settings(db_url: str, tmp_path: Path) -> Settings:
    # The RAG node's relevance cut (KG_RAG_MAX_DISTANCE) is measured for a real model; the fake
    # embedder's hashed bag-of-words distances are no model's, so it is off here (the test of
    # the cut, tests/api/test_rag_node.py, uses the local model and the default). Extraction runs
    # the deterministic rules the tests' texts were written for; the NER's own tests turn it on
    # (tests/api/test_ner_extraction.py).
    return Settings(database_url=db_url, data_dir=tmp_path / "data", embedding_model=FAKE_MODEL,
                    index_inline=True, allow_fake_embedder=True, rag_max_distance=2.0,
                    ask_min_similarity=FAKE_ASK_MIN_SIMILARITY, entity_ner="off")


@pytest.fixture
def services(settings: Settings) -> Iterator[Services]:
    """Services on the test database with the fake embedder and a temporary index folder."""
    db = Database(settings.resolved_database_url())
    db.upgrade()
    svc = Services(settings=settings, db=db, index=EmbeddedVectorIndex(settings.data_dir),
                   embedder_factory=lambda name: make_embedder(name, allow_fake=settings.allow_fake_embedder))
    yield svc
    svc.close()


@pytest.fixture
def client(services: Services):
    """An in-process HTTP client of the app."""
    from fastapi.testclient import TestClient

    from api.app import create_app

    with TestClient(create_app(services=services), raise_server_exceptions=False) as c:
        yield c


@pytest.fixture
def repo(client) -> str:
    """A repository ``acme`` with a workspace ``knowledge``."""
    assert client.post("/api/repos", json={"name": "acme"}).status_code == 201
    assert client.post("/api/repos/acme/workspaces", json={"name": "knowledge"}).status_code == 201
    return "acme"
