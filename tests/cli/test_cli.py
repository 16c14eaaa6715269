"""The ``kg`` command line through typer's runner, on a SQLite file with the fake embedder."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kg.cli import app

PEPS = Path(__file__).resolve().parents[2] / "fixtures" / "peps" / "docs"


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("KG_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("KG_EMBEDDING_MODEL", "fake:hash-64")
    monkeypatch.delenv("KG_DATABASE_URL", raising=False)
    folder = tmp_path / "docs"
    folder.mkdir()
    for name in ("pep-0440.rst", "pep-0508.rst", "pep-0386.rst") if (PEPS / "pep-0386.rst").exists() else ("pep-0440.rst", "pep-0508.rst"):
        shutil.copy(PEPS / name, folder / name)
    return folder


runner = CliRunner()


def test_db_upgrade(env):
    result = runner.invoke(app, ["db", "upgrade"])
    assert result.exit_code == 0 and "up to date" in result.output


def test_ingest_then_search(env):
    result = runner.invoke(app, ["ingest", str(env), "--repo", "peps", "--workspace", "peps"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["inserted"] == 2
    again = runner.invoke(app, ["ingest", str(env), "--repo", "peps", "--workspace", "peps"])
    assert json.loads(again.stdout.strip().splitlines()[-1])["passages_embedded"] == 0
    found = runner.invoke(app, ["search", "version specifiers", "--repo", "peps", "--json"])
    assert found.exit_code == 0, found.output
    rows = json.loads(found.stdout)["results"]
    assert rows and rows[0]["path"] in ("/pep-0440", "/pep-0508")


def test_branch_commands(env):
    runner.invoke(app, ["ingest", str(env), "--repo", "peps", "--workspace", "peps"])
    made = runner.invoke(app, ["branch", "create", "agent/demo", "--repo", "peps"])
    assert made.exit_code == 0, made.output
    listed = runner.invoke(app, ["branch", "list", "--repo", "peps"])
    assert "agent/demo" in listed.output and "main" in listed.output


@pytest.mark.parametrize("args", [
    ["ingest", "/no/such/path", "--repo", "r", "--workspace", "w"],
    ["search", "x", "--repo", "missing"],
    ["search", "   ", "--repo", "missing"],
    ["branch", "create", "a//b", "--repo", "missing"],
])
def test_errors_are_one_line_and_exit_1(env, args):
    result = runner.invoke(app, args)
    assert result.exit_code == 1
    assert result.output.strip().startswith("error: ")
    assert len(result.output.strip().splitlines()) == 1


def test_reindex_rebuilds_from_sql_without_embedding(env):
    runner.invoke(app, ["ingest", str(env), "--repo", "peps", "--workspace", "peps"])
    result = runner.invoke(app, ["reindex", "--repo", "peps"])
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout.strip().splitlines()[-1])
    assert body["chunks"] > 0 and body["jobs_failed"] == 0
    found = runner.invoke(app, ["search", "version", "--repo", "peps", "--json", "--mode", "fulltext"])
    assert json.loads(found.stdout)["results"]


def test_reindex_fills_weaviate_from_sql_without_embedding(env, monkeypatch):
    from kg.index.weaviate import WeaviateVectorIndex
    from tests.index.fake_weaviate import FakeWeaviate

    runner.invoke(app, ["ingest", str(env), "--repo", "peps", "--workspace", "peps"])
    from kg import services as services_module

    fake = FakeWeaviate()
    built = []
    real_build_index = services_module.build_index

    def build_index(settings, kind=None):
        if kind != "weaviate":
            return real_build_index(settings, kind)
        built.append(WeaviateVectorIndex(client=fake))
        return built[-1]

    monkeypatch.setattr("kg.services.build_index", build_index)
    monkeypatch.setattr("kg.providers.registry.make_embedder", _no_embedding)
    result = runner.invoke(app, ["reindex", "--repo", "peps", "--index", "weaviate"])
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout.strip().splitlines()[-1])
    assert body["index"] == "weaviate" and body["chunks"] > 0
    stored = sum(len(c.objects) for name, c in fake.classes.items() if name.startswith("kgchunks_"))
    assert stored == body["chunks"]
    assert built[0].watermark(next(iter(_repo_keys(fake)))) > 0


def test_reindex_into_weaviate_needs_a_url(env):
    runner.invoke(app, ["ingest", str(env), "--repo", "peps", "--workspace", "peps"])
    result = runner.invoke(app, ["reindex", "--repo", "peps", "--index", "weaviate"])
    assert result.exit_code == 1
    assert "KG_WEAVIATE_URL" in result.output


def _no_embedding(name, **kwargs):
    raise AssertionError("reindex must not embed")


def _repo_keys(fake):
    return {obj[0]["repoKey"] for obj in fake.classes["kgindexstate"].objects.values()}
