"""``kg sql``: a statement, ``--file`` or the interactive prompt, tables drawn by rich; bad SQL
is one line on stderr and exit code 1, nothing written."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from kg.cli import app

runner = CliRunner()

SETUP = ("INSERT INTO 'knowledge' (path, name, node_type, properties) VALUES "
         "('/docs/a', 'a', 'kb:Article', '{\"title\": \"Alpha\", \"content\": \"Rotate an API key.\"}'::jsonb)")


def _repo() -> None:
    """acme with the workspace knowledge, made through the library as the operator."""
    from kg.context import OPERATOR, run
    from kg.ops import repos as repo_ops
    from kg.services import Services
    from kg.settings import Settings

    services = Services.from_settings(Settings())
    try:
        services.db.upgrade()
        run(services, OPERATOR, repo_ops.create_repository, "acme")
        run(services, OPERATOR, repo_ops.create_workspace, "acme", "knowledge")
    finally:
        services.close()


def test_a_statement_then_a_table(cli_env, monkeypatch):
    monkeypatch.setenv("KG_INDEX_INLINE", "true")  # embedded as written: the KNN finds it
    _repo()
    out = runner.invoke(app, ["sql", SETUP, "--repo", "acme"])
    assert out.exit_code == 0, out.output
    out = runner.invoke(app, ["sql", "SELECT path, properties->>'title' AS title FROM 'knowledge' "
                                     "WHERE path = $1", "--repo", "acme", "--param", "/docs/a"])
    assert out.exit_code == 0, out.output
    assert "path" in out.stdout and "title" in out.stdout and "/docs/a" in out.stdout and "Alpha" in out.stdout
    assert "(1 row," in out.stdout
    out = runner.invoke(app, ["sql", "SELECT path FROM KNN('rotate a key', 3, workspaces => 'knowledge')",
                              "--repo", "acme", "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["results"][0]["rows"] == [["/docs/a"]]


def test_file_and_prompt(cli_env):
    _repo()
    script = cli_env / "q.sql"
    script.write_text(SETUP + ";\nSELECT COUNT(*) AS n FROM 'knowledge';\n", encoding="utf-8")
    out = runner.invoke(app, ["sql", "--file", str(script), "--repo", "acme", "--json"])
    assert out.exit_code == 0, out.output
    results = json.loads(out.stdout)["results"]
    assert results[1]["rows"] == [[2]]  # /docs (a folder made for it) and /docs/a
    out = runner.invoke(app, ["sql", "--repo", "acme"], input="SELECT name\nFROM 'knowledge'\nORDER BY name;\n"
                                                              "SELECT nope(;\n")
    assert out.exit_code == 0, out.output
    assert "docs" in out.stdout and "a" in out.stdout
    assert "error: cannot parse statement 1" in out.stderr


def test_bad_sql_is_one_line_and_exit_1_nothing_written(cli_env):
    _repo()
    out = runner.invoke(app, ["sql", SETUP + "; SELECT path FROM 'knowledge' JOIN x ON 1 = 1", "--repo", "acme"])
    assert out.exit_code == 1
    assert out.stderr.startswith("error: JOINS is not supported here (line 1, column ")
    assert len(out.stderr.strip().splitlines()) == 1
    out = runner.invoke(app, ["sql", "SELECT COUNT(*) FROM 'knowledge'", "--repo", "acme", "--json"])
    assert json.loads(out.stdout)["results"][0]["rows"] == [[0]]
