"""``kg export`` and ``kg import ndjson``: a branch to NDJSON and back, errors as one line and exit 1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kg.cli import app
from kg.context import OPERATOR
from kg.ops import repos as repo_ops
from kg.services import Services
from kg.settings import Settings

runner = CliRunner()


@pytest.fixture
def env(cli_env):
    return cli_env


def _services() -> Services:
    return Services.from_settings(Settings())


def _ingest(env: Path) -> None:
    docs = env / "docs"
    (docs / "guides").mkdir(parents=True)
    (docs / "guides" / "keys.md").write_text("# Rotating keys\n\nRotate your API keys every ninety days.\n")
    (docs / "intro.md").write_text("# Introduction\n\nkg is a knowledge graph with branches.\n")
    result = runner.invoke(app, ["ingest", str(docs), "--repo", "acme", "--workspace", "knowledge"])
    assert result.exit_code == 0, result.output


def test_export_then_import_round_trips(env):
    _ingest(env)
    out = env / "acme.ndjson"
    exported = runner.invoke(app, ["export", "--repo", "acme", "--out", str(out), "--with-chunks"])
    assert exported.exit_code == 0, exported.output
    summary = json.loads(exported.stdout.strip().splitlines()[-1])
    assert summary["repo"] == "acme" and summary["nodes"] >= 2 and summary["chunks"] >= 2
    assert not out.with_name(out.name + ".partial").exists()
    imported = runner.invoke(app, ["import", "ndjson", str(out), "--repo", "copy"])
    assert imported.exit_code == 0, imported.output
    report = json.loads(imported.stdout.strip().splitlines()[-1])
    assert report["revision"] == 1 and report["queued"] == 0 and report["index_failures"] == 0
    again = runner.invoke(app, ["export", "--repo", "copy", "--with-chunks"])  # to standard output
    assert again.exit_code == 0, again.output
    first, second = out.read_text().splitlines(), again.stdout.splitlines()
    assert first[1:] == second[1:]
    found = runner.invoke(app, ["search", "rotate keys", "--repo", "copy", "--json"])
    assert found.exit_code == 0, found.output
    assert json.loads(found.stdout)["results"][0]["path"] == "/guides/keys"


def test_batches_on_the_command_line(env):
    _ingest(env)
    out = env / "acme.ndjson"
    assert runner.invoke(app, ["export", "--repo", "acme", "--out", str(out)]).exit_code == 0
    imported = runner.invoke(app, ["import", "ndjson", str(out), "--repo", "copy", "--batch-size", "1"])
    assert imported.exit_code == 0, imported.output
    report = json.loads(imported.stdout.strip().splitlines()[-1])
    assert len(report["revisions"]) == report["nodes"] + report["relations"]


def test_a_bad_line_is_one_error_naming_it_and_nothing_is_written(env):
    _ingest(env)
    out = env / "acme.ndjson"
    assert runner.invoke(app, ["export", "--repo", "acme", "--out", str(out)]).exit_code == 0
    lines = out.read_text().splitlines()
    lines.insert(2, '{"record": "node", "workspace": "knowledge", "path": "/x", "colour": "red"}')
    bad = env / "bad.ndjson"
    bad.write_text("\n".join(lines) + "\n")
    result = runner.invoke(app, ["import", "ndjson", str(bad), "--repo", "copy"])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == ["error: line 3: node record has an unknown field 'colour'"]
    services = _services()
    try:
        assert [r.name for r in repo_ops.all_repositories(services, OPERATOR).repos] == ["acme"]
    finally:
        services.close()


def test_a_missing_file_is_one_error(env):
    result = runner.invoke(app, ["import", "ndjson", str(env / "nowhere.ndjson"), "--repo", "copy"])
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cannot read ") and "No such file" in lines[0]


def test_export_of_an_unknown_repository_is_one_error_and_leaves_no_file(env):
    out = env / "none.ndjson"
    result = runner.invoke(app, ["export", "--repo", "nope", "--out", str(out)])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == ["error: repository 'nope' not found"]
    assert not out.exists() and not out.with_name(out.name + ".partial").exists()


def test_export_into_a_pipe_its_reader_closes_ends_quietly(env):
    """``kg export | head -1`` printed "error: cannot write None: Broken pipe" and exited 1.
    A real pipe whose reader leaves after one line: nothing on stderr, and click's status for
    it, 1."""
    import os
    import subprocess
    import sys

    docs = env / "docs"
    docs.mkdir()
    for i in range(300):
        (docs / f"n{i}.md").write_text(f"# Note {i}\n\n" + "words of a long note. " * 100)
    ingested = runner.invoke(app, ["ingest", str(docs), "--repo", "big", "--workspace", "w"])
    assert ingested.exit_code == 0, ingested.output
    kg = [sys.executable, "-c", "from kg.cli import main; main()"]
    with subprocess.Popen([*kg, "export", "--repo", "big"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          env=os.environ.copy()) as proc:
        first = proc.stdout.readline()
        proc.stdout.close()  # the reader leaves with ~600 KB still to come: more than a pipe holds
        err = proc.stderr.read()
        status = proc.wait(timeout=120)
    assert json.loads(first)["record"] == "header"
    assert err == b"" and status == 1


def test_export_to_a_full_disk_names_standard_output(env):
    """``kg export > /dev/full`` said "cannot write None": standard output has no file name."""
    import os
    import subprocess
    import sys

    _ingest(env)
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-c", "from kg.cli import main; main()", "export", "--repo", "acme"],
                              stdout=full, stderr=subprocess.PIPE, text=True, env=os.environ.copy(), timeout=120)
    assert done.returncode == 1
    assert done.stderr == "error: cannot write to standard output: No space left on device\n"


def test_a_parquet_export_imports_to_what_the_ndjson_export_holds(env):
    _ingest(env)
    columns, lines = env / "acme.parquet", env / "acme.ndjson"
    exported = runner.invoke(app, ["export", "--repo", "acme", "--format", "parquet", "--out", str(columns),
                                   "--with-chunks"])
    assert exported.exit_code == 0, exported.output
    summary = json.loads(exported.stdout.strip().splitlines()[-1])
    assert summary["out"] == str(columns) and summary["nodes"] >= 2 and summary["chunks"] >= 2
    assert not columns.with_name(columns.name + ".partial").exists()
    assert runner.invoke(app, ["export", "--repo", "acme", "--out", str(lines), "--with-chunks"]).exit_code == 0
    imported = runner.invoke(app, ["import", "parquet", str(columns), "--repo", "copy"])
    assert imported.exit_code == 0, imported.output
    report = json.loads(imported.stdout.strip().splitlines()[-1])
    assert report["revision"] == 1 and report["queued"] == 0 and report["chunks"] == summary["chunks"]
    again = runner.invoke(app, ["export", "--repo", "copy", "--with-chunks"])
    assert again.exit_code == 0, again.output
    assert lines.read_text().splitlines()[1:] == again.stdout.splitlines()[1:]


@pytest.mark.parametrize(("args", "message"), [
    (["export", "--repo", "acme", "--format", "parquet"], "error: --format parquet writes a file: give --out"),
    (["export", "--repo", "acme", "--format", "csv", "--out", "x"], "error: --format must be ndjson or parquet, "
                                                                    "not 'csv'"),
])
def test_export_format_mistakes_are_one_error(env, args, message):
    result = runner.invoke(app, args)
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [message]


def test_a_bad_parquet_row_is_one_error_naming_it_and_nothing_is_written(env):
    import pyarrow as pa
    import pyarrow.parquet as pq

    _ingest(env)
    columns = env / "acme.parquet"
    assert runner.invoke(app, ["export", "--repo", "acme", "--format", "parquet", "--out", str(columns)]).exit_code == 0
    table = pq.read_table(columns)
    paths = table.column("path").to_pylist()
    paths[1] = "/a//b"
    table = table.set_column(table.schema.get_field_index("path"), "path", pa.array(paths))
    bad = env / "bad.parquet"
    pq.write_table(table, bad)
    result = runner.invoke(app, ["import", "parquet", str(bad), "--repo", "copy"])
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: row 2: ") and "empty segment" in lines[0], lines
    not_parquet = env / "notes.parquet"
    not_parquet.write_text("not a parquet file\n")
    result = runner.invoke(app, ["import", "parquet", str(not_parquet), "--repo", "copy"])
    assert result.exit_code == 1 and result.output.startswith("error: not a Parquet file")
    assert len(result.output.strip().splitlines()) == 1
    missing = runner.invoke(app, ["import", "parquet", str(env / "nowhere.parquet"), "--repo", "copy"])
    assert missing.exit_code == 1
    assert missing.output.strip().splitlines() == [f"error: cannot read {env / 'nowhere.parquet'}: "
                                                   "No such file or directory"]
    services = _services()
    try:
        assert [r.name for r in repo_ops.all_repositories(services, OPERATOR).repos] == ["acme"]
    finally:
        services.close()


def test_a_parquet_file_given_to_import_ndjson_is_named_as_one(env):
    """``kg import ndjson`` goes through the same use case as the import route: a Parquet file is
    said to be one (it said "line 1: not JSON"), in one line, and nothing is written."""
    _ingest(env)
    columns = env / "acme.parquet"
    assert runner.invoke(app, ["export", "--repo", "acme", "--format", "parquet", "--out", str(columns)]).exit_code == 0
    result = runner.invoke(app, ["import", "ndjson", str(columns), "--repo", "copy"])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == ["error: the file is a Parquet file: import it with format parquet"]
