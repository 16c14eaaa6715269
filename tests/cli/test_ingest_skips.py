"""``kg ingest`` away from a terminal: line progress on stderr; unreadable files skipped and
reported (``--strict``: refused before anything is written)."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from kg.cli import app

runner = CliRunner()


@pytest.fixture
def folder(cli_env):
    docs = cli_env / "docs"
    docs.mkdir()
    (docs / "good.md").write_text("# Good\n\nA readable document about sailing.\n", encoding="utf-8")
    (docs / "latin1.txt").write_bytes("Caf\xe9 au lait".encode("latin-1"))
    (docs / "other.md").write_text("# Other\n\nAnother readable document.\n", encoding="utf-8")
    return docs


def test_a_non_utf8_file_is_skipped_and_reported_and_the_rest_ingested(folder):
    result = runner.invoke(app, ["ingest", str(folder), "--repo", "r", "--workspace", "w"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert (report["files"], report["inserted"], report["unreadable"]) == (3, 2, 1)
    tail = result.stderr.strip().splitlines()[-2:]
    assert tail == ["skipped 1 unreadable file(s):",
                    f"  {folder / 'latin1.txt'}: is not UTF-8 text (byte 0xe9 at offset 3)"]
    found = runner.invoke(app, ["search", "readable document", "--repo", "r", "--json", "--k", "5"])
    assert sorted(r["path"] for r in json.loads(found.stdout)["results"]) == ["/good", "/other"]


def test_strict_refuses_at_the_first_unreadable_file_and_writes_nothing(folder):
    result = runner.invoke(app, ["ingest", str(folder), "--repo", "r", "--workspace", "w", "--strict"])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        f"error: {folder / 'latin1.txt'} is not UTF-8 text (byte 0xe9 at offset 3)"]
    listed = runner.invoke(app, ["branch", "list", "--repo", "r"])
    assert listed.exit_code == 1 and "r" in listed.output  # the repository was never created


def test_a_file_that_cannot_be_read_is_skipped(folder, monkeypatch):
    """A permission error (simulated: the tests may run as root, who reads any file)."""
    from pathlib import Path

    (folder / "latin1.txt").unlink()
    secret = folder / "secret.md"
    secret.write_text("# Secret\n", encoding="utf-8")
    real = Path.read_bytes

    def read_bytes(self):
        if self == secret:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    result = runner.invoke(app, ["ingest", str(folder), "--repo", "r", "--workspace", "w"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout.strip().splitlines()[-1])["inserted"] == 2
    assert f"  {secret}: cannot be read: Permission denied" in result.stderr.splitlines()


def test_progress_is_one_line_per_group_of_files_when_not_on_a_terminal(cli_env):
    docs = cli_env / "many"
    docs.mkdir()
    for i in range(20):
        (docs / f"doc-{i:02}.md").write_text(f"# Doc {i}\n\nText number {i}.\n", encoding="utf-8")
    result = runner.invoke(app, ["ingest", str(docs), "--repo", "r", "--workspace", "w"])
    assert result.exit_code == 0, result.output
    lines = result.stderr.strip().splitlines()
    assert lines[0] == "ingest: 20 file(s) to read"
    assert [re.sub(r"\(\d+\.\d s\)", "(T)", line) for line in lines[1:]] == [
        "ingest: 16/20 files (T)", "ingest: 20/20 files (T)"]
    assert json.loads(result.stdout.strip().splitlines()[-1])["inserted"] == 20


def test_an_ingest_refused_before_it_writes_prints_its_error_alone(folder):
    result = runner.invoke(app, ["ingest", str(folder), "--repo", "r", "--workspace", "w", "--branch", "nope"])
    assert result.exit_code == 1
    assert len(result.stderr.strip().splitlines()) == 1 and "nope" in result.stderr


def test_ingest_makes_no_workspace_in_the_rag_nodes_repository(folder):
    from sqlalchemy import text

    from kg.settings import Settings
    from kg.store.db import Database
    from kg.store.repos import create_repository

    db = Database(Settings().resolved_database_url())
    db.upgrade()
    with db.write() as session:  # as the RAG node's first call leaves it
        create_repository(session, name="rag")
    result = runner.invoke(app, ["ingest", str(folder), "--repo", "rag", "--workspace", "notes"])
    assert result.exit_code == 1
    (line,) = result.stderr.strip().splitlines()
    assert "reserved for the RAG node" in line and "'notes'" in line
    with db.read() as session:  # nothing written: no workspace, no revision
        repo = session.execute(text("SELECT id FROM repositories WHERE name = 'rag'")).scalar_one()
        assert session.execute(text(f"SELECT count(*) FROM workspaces WHERE repo_id = {repo}")).scalar_one() == 0
        assert session.execute(text(f"SELECT count(*) FROM revisions WHERE repo_id = {repo}")).scalar_one() == 0
