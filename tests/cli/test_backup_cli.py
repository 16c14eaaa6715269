"""``kg backup`` and ``kg restore`` through typer's runner, on a SQLite file with the fake embedder:
a restore into another data directory verifies, and each refusal is one line and exit code 1
with nothing written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kg.cli import app

PEPS = Path(__file__).resolve().parents[2] / "fixtures" / "peps" / "docs"
runner = CliRunner()


@pytest.fixture
def store(cli_env):
    folder = cli_env / "docs"
    folder.mkdir()
    for name in ("pep-0440.rst", "pep-0508.rst"):
        shutil.copy(PEPS / name, folder / name)
    ingest = runner.invoke(app, ["ingest", str(folder), "--repo", "peps", "--workspace", "peps"])
    assert ingest.exit_code == 0, ingest.output
    related = runner.invoke(app, ["relate", "--repo", "peps", "--from", "peps:/pep-0508", "--to", "peps:/pep-0440",
                                  "--type", "requires"])
    assert related.exit_code == 0, related.output
    return cli_env


def _error_line(result) -> str:
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_backup_then_restore_elsewhere_verifies(store, monkeypatch):
    made = runner.invoke(app, ["backup", str(store / "backup")])
    assert made.exit_code == 0, made.output
    report = json.loads(made.stdout)
    assert report["database"] == "sqlite" and report["repositories"] == 1 and report["probes"] >= 5
    monkeypatch.setenv("KG_DATA_DIR", str(store / "restored"))
    restored = runner.invoke(app, ["restore", str(store / "backup"), "--verify"])
    assert restored.exit_code == 0, restored.output
    answer = json.loads(restored.stdout)
    assert answer["verify"]["ok"] and answer["verify"]["matched"] == report["probes"]
    found = runner.invoke(app, ["search", "version specifiers", "--repo", "peps", "--json"])
    assert found.exit_code == 0 and json.loads(found.stdout)["results"][0]["path"] in ("/pep-0440", "/pep-0508")
    # a second restore into the now non-empty store is refused, then forced
    assert _error_line(runner.invoke(app, ["restore", str(store / "backup")])).startswith(
        "error: the target store is not empty")
    forced = runner.invoke(app, ["restore", str(store / "backup"), "--force", "--verify"])
    assert forced.exit_code == 0 and json.loads(forced.stdout)["verify"]["ok"]


def test_restore_refuses_a_corrupted_backup_in_one_line(store, monkeypatch):
    assert runner.invoke(app, ["backup", str(store / "backup")]).exit_code == 0
    database = store / "backup" / "kg.sqlite3"
    blob = bytearray(database.read_bytes())
    blob[100] ^= 0x01
    database.write_bytes(bytes(blob))
    monkeypatch.setenv("KG_DATA_DIR", str(store / "restored"))
    line = _error_line(runner.invoke(app, ["restore", str(store / "backup")]))
    assert line == "error: the backup is corrupted: kg.sqlite3 does not match its SHA-256"
    assert not (store / "restored").exists()


def test_backup_refuses_a_used_folder_and_restore_a_folder_that_is_no_backup(store):
    (store / "used").mkdir()
    (store / "used" / "x").write_text("x")
    assert "is not an empty folder" in _error_line(runner.invoke(app, ["backup", str(store / "used")]))
    line = _error_line(runner.invoke(app, ["restore", str(store / "used"), "--verify-only"]))
    assert line == f"error: {store / 'used'} is not a kg backup: no manifest.json"
