"""``kg ingest`` over people's edits: the printed report (counts on stdout, the kept edits and the
review branch on stderr), as ``make run`` runs it twice over the PEPs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kg import context
from kg.cli import app
from kg.ops.nodes import patch_node
from kg.services import Services
from kg.settings import Settings
from kg.store.nodes import find_node
from kg.store.repos import branch_view

runner = CliRunner()
PEPS = Path(__file__).resolve().parents[2] / "fixtures" / "peps" / "docs"


@pytest.fixture
def peps(cli_env) -> Path:
    folder = cli_env / "peps"
    folder.mkdir()
    for name in ("pep-0440.rst", "pep-0508.rst"):
        shutil.copy(PEPS / name, folder / name)
    return folder


def _ingest(folder, *extra):
    result = runner.invoke(app, ["ingest", str(folder), "--repo", "peps", "--workspace", "peps", "--format", "pep",
                                 *extra])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout.strip().splitlines()[-1]), result.stderr.strip().splitlines()


def _services():
    services = Services.from_settings(Settings())
    services.db.upgrade()
    return services


def _edit_status(value):
    services = _services()
    try:
        context.run(services, context.OPERATOR, patch_node, "peps", "main", "peps", "/pep-0440",
                    properties={"status": value})
    finally:
        services.close()


def _state(branch="main"):
    services = _services()
    try:
        with services.db.read() as s:
            view = branch_view(s, "peps", branch)
            return find_node(s, view, "peps", "/pep-0440").properties["status"], view.repo.head_revision
    finally:
        services.close()


def test_a_second_ingest_keeps_the_edit_and_prints_skipped(peps):
    first, _ = _ingest(peps)
    assert (first["inserted"], first["kept_edits"], first["review_branch"]) == (2, 0, None)
    _edit_status("Withdrawn")
    _, revisions = _state()
    second, stderr = _ingest(peps)
    assert (second["replaced"], second["skipped"], second["kept_edits"], second["kept_deleted"]) == (0, 2, 0, 0)
    assert not any(line.startswith("kept") for line in stderr)
    assert _state() == ("Withdrawn", revisions)


def test_a_clash_is_printed_and_review_names_its_branch(peps):
    _ingest(peps)
    _edit_status("Withdrawn")
    target = peps / "pep-0440.rst"
    target.write_text(target.read_text(encoding="utf-8").replace("Status: Final", "Status: Active"), encoding="utf-8")
    report, stderr = _ingest(peps, "--conflicts", "review", "--review-branch", "review/peps")
    assert (report["kept_edits"], report["replaced"], report["review_branch"]) == (1, 0, "review/peps")
    assert stderr[-3:] == [
        "kept 1 edited propert(ies) the files also changed:",
        '  /pep-0440 status: kept "Withdrawn", file "Active"',
        "the files' versions are on branch review/peps: review them with "
        "kg diff --repo peps --branch review/peps, then kg merge",
    ]
    assert _state()[0] == "Withdrawn" and _state("review/peps")[0] == "Active"
    merged = runner.invoke(app, ["merge", "--repo", "peps", "--branch", "review/peps", "--into", "main"])
    assert merged.exit_code == 0, merged.output
    assert _state()[0] == "Active"


def test_keep_prints_the_clash_and_a_bad_mode_is_one_line(peps):
    _ingest(peps)
    _edit_status("Withdrawn")
    target = peps / "pep-0440.rst"
    target.write_text(target.read_text(encoding="utf-8").replace("Status: Final", "Status: Active"), encoding="utf-8")
    bad = runner.invoke(app, ["ingest", str(peps), "--repo", "peps", "--workspace", "peps", "--format", "pep",
                              "--conflicts", "theirs"])
    assert bad.exit_code == 1
    assert bad.stderr.strip().splitlines() == ["error: conflicts must be one of keep, review, not 'theirs'"]
    report, stderr = _ingest(peps)
    assert (report["kept_edits"], report["replaced"], report["review_branch"]) == (1, 1, None)
    assert stderr[-2:] == ["kept 1 edited propert(ies) the files also changed:",
                           '  /pep-0440 status: kept "Withdrawn", file "Active"']
    assert _state()[0] == "Withdrawn"
