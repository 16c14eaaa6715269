"""Shared fixtures: a real database (SQLite file, and PostgreSQL when KG_TEST_POSTGRES_URL is
set), Services with the deterministic fake embedder, and an in-process API client."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from kg.index.embedded import EmbeddedVectorIndex
from kg.providers.base import Embedder
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
#: The databases of the adapters' own tests (the console, MCP, the framework adapters): SQLite
#: only. They reach the store through the use cases alone, which the store, API and client tests
#: run on both databases; what an adapter adds (pages, tools, retrievers) does not depend on one.
ADAPTER_BACKENDS = ["sqlite"]


def _pg_schema_url(schema: str) -> str:
    sep = "&" if "?" in POSTGRES_URL else "?"
    return f"{POSTGRES_URL}{sep}options=-csearch_path%3D{schema}"


@contextmanager
def empty_database_url(backend: str, folder: Path) -> Iterator[str]:
    """A fresh, empty database on ``backend`` (no table, not even Alembic's): a SQLite file in
    ``folder``, or a new PostgreSQL schema dropped afterwards."""
    if backend == "sqlite":
        yield f"sqlite:///{folder / 'kg.sqlite3'}"
        return
    schema = _create_schema()
    try:
        yield _pg_schema_url(schema)
    finally:
        _drop_schema(schema)


@contextmanager
def database_url(backend: str, folder: Path) -> Iterator[str]:
    """A fresh database on ``backend`` with kg's schema at the migration head and no row: what
    ``Database.upgrade`` makes of an empty one, without replaying every migration per test.

    SQLite: a copy of a file this process migrated once. PostgreSQL: a schema this process
    migrated, emptied after the test that had it (every table's rows deleted, children first,
    and the sequences restarted) and handed to the next test; a schema a test left anywhere but
    at the head, with other tables, or locked, is dropped instead. Migrating took 0.2 s (SQLite)
    and 0.42 s (PostgreSQL) per test; the copy and the emptying take 1 ms and 30 ms.
    """
    if backend == "sqlite":
        target = folder / "kg.sqlite3"
        shutil.copyfile(_sqlite_template(), target)
        yield f"sqlite:///{target}"
        return
    schema = _FREE_SCHEMAS.pop() if _FREE_SCHEMAS else _migrated_schema()
    try:
        yield _pg_schema_url(schema)
    finally:
        if _emptied(schema):
            _FREE_SCHEMAS.append(schema)
        else:
            _drop_schema(schema)


#: Schemas at the head with no row, this process's (PostgreSQL).
_FREE_SCHEMAS: list[str] = []
_CACHE: dict[str, Any] = {}


def _admin_engine() -> Any:
    if "engine" not in _CACHE:
        _CACHE["engine"] = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    return _CACHE["engine"]


def _create_schema() -> str:
    schema = f"kg_test_{uuid.uuid4().hex[:12]}"
    with _admin_engine().connect() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    return schema


def _drop_schema(schema: str) -> None:
    with _admin_engine().connect() as conn:
        conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))


def _migrated_schema() -> str:
    schema = _create_schema()
    db = Database(_pg_schema_url(schema))
    try:
        db.upgrade()
    finally:
        db.dispose()
    return schema


def _head() -> str:
    if "head" not in _CACHE:
        from alembic.script import ScriptDirectory

        from kg.store.db import alembic_config

        _CACHE["head"] = ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()
    return str(_CACHE["head"])


def _sqlite_template() -> Path:
    if "sqlite" not in _CACHE:
        import tempfile

        template = Path(tempfile.mkdtemp(prefix="kg-test-template-")) / "kg.sqlite3"
        db = Database(f"sqlite:///{template}")
        db.upgrade()
        db.checkpoint(wait_s=5)  # everything in the main file: the copy needs no -wal file
        db.dispose()
        _CACHE["sqlite"] = template
    return Path(_CACHE["sqlite"])


def _emptied(schema: str) -> bool:
    """Delete every row of ``schema``'s tables (children first) and restart its sequences; False,
    with nothing deleted, when the schema is not at the head with exactly kg's tables, or a lock
    is held (a connection a test left open)."""
    from kg.store.models import Base

    tables = [t.name for t in reversed(Base.metadata.sorted_tables)]
    q = f'"{schema}"'
    try:
        # a transaction (the admin engine autocommits each statement): all rows or none
        with _admin_engine().execution_options(isolation_level="READ COMMITTED").begin() as conn:
            conn.execute(text("SET LOCAL lock_timeout = '2s'"))
            found = set(conn.execute(text("SELECT tablename FROM pg_tables WHERE schemaname = :s"),
                                     {"s": schema}).scalars())
            if found != {*tables, "alembic_version"}:
                return False
            if conn.execute(text(f"SELECT version_num FROM {q}.alembic_version")).scalars().all() != [_head()]:
                return False
            for table in tables:
                conn.execute(text(f'DELETE FROM {q}."{table}"'))
            for seq in conn.execute(text("SELECT sequencename FROM pg_sequences WHERE schemaname = :s"),
                                    {"s": schema}).scalars().all():
                conn.execute(text(f'ALTER SEQUENCE {q}."{seq}" RESTART'))
    except Exception:  # a lock wait timed out, a table a test dropped: drop the schema instead
        return False
    return True


@pytest.fixture(scope="session", autouse=True)
def _drop_free_schemas() -> Iterator[None]:
    """Drop this process's pooled PostgreSQL schemas at the end of the session."""
    yield
    while _FREE_SCHEMAS:
        _drop_schema(_FREE_SCHEMAS.pop())
    engine = _CACHE.pop("engine", None)
    if engine is not None:
        engine.dispose()


def db_url_on(backends: list[str]) -> Any:
    """A ``db_url`` fixture over ``backends``: a folder's conftest narrows its tests' databases
    with ``db_url = db_url_on(ADAPTER_BACKENDS)``."""

    @pytest.fixture(params=backends)
    def db_url(request, tmp_path: Path) -> Iterator[str]:
        """A fresh database at the migration head, with no row: a SQLite file, or a PostgreSQL
        schema (:func:`database_url`)."""
        with database_url(request.param, tmp_path) as url:
            yield url

    return db_url


db_url = db_url_on(BACKENDS)


@pytest.fixture(params=BACKENDS)
def empty_db_url(request, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database (no table): for the tests of the migrations themselves."""
    with empty_database_url(request.param, tmp_path) as url:
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
def embedder_factory(settings: Settings) -> Callable[[str], Embedder]:
    """How ``services`` makes an embedder from a model name (a module may override it)."""
    return lambda name: make_embedder(name, allow_fake=settings.allow_fake_embedder)


@pytest.fixture
def services(settings: Settings, embedder_factory: Callable[[str], Embedder]) -> Iterator[Services]:
    """Services on the test database with the fake embedder and a temporary index folder."""
    db = Database(settings.resolved_database_url())
    db.upgrade()
    svc = Services(settings=settings, db=db, index=EmbeddedVectorIndex(settings.data_dir),
                   embedder_factory=embedder_factory)
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
