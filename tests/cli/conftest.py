"""Fixtures of this folder: the settings of a CLI run (a SQLite file, the fake embedder), and the
Weaviate test server and URL (tests/weaviate_fixtures.py)."""

import pytest

from tests.weaviate_fixtures import weaviate_server, weaviate_test_server, weaviate_url  # noqa: F401


@pytest.fixture
def cli_env(tmp_path, monkeypatch):
    """KG_* for a command: its data in ``tmp_path/data`` (SQLite), the fake embedder."""
    monkeypatch.setenv("KG_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("KG_EMBEDDING_MODEL", "fake:hash-64")
    monkeypatch.setenv("KG_ALLOW_FAKE_EMBEDDER", "true")
    monkeypatch.delenv("KG_DATABASE_URL", raising=False)
    return tmp_path
