"""The ``kg`` command line through typer's runner, on a SQLite file with the fake embedder."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kg import context
from kg.cli import app

PEPS = Path(__file__).resolve().parents[2] / "fixtures" / "peps" / "docs"


@pytest.fixture
def env(cli_env):
    folder = cli_env / "docs"
    folder.mkdir()
    names = (("pep-0440.rst", "pep-0508.rst", "pep-0386.rst") if (PEPS / "pep-0386.rst").exists()
             else ("pep-0440.rst", "pep-0508.rst"))
    for name in names:
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


def test_ingest_format_pep_writes_the_relations_and_text_does_not(env):
    pep = runner.invoke(app, ["ingest", str(env), "--repo", "peps", "--workspace", "peps", "--format", "pep"])
    assert pep.exit_code == 0, pep.output
    report = json.loads(pep.stdout.strip().splitlines()[-1])
    assert report["relations_added"] >= 1
    text = runner.invoke(app, ["ingest", str(env), "--repo", "docs", "--workspace", "docs"])
    assert text.exit_code == 0, text.output
    report = json.loads(text.stdout.strip().splitlines()[-1])
    assert report["inserted"] == len(list(env.iterdir())) and report["relations_added"] == 0


def test_an_unknown_format_is_one_line(env):
    result = runner.invoke(app, ["ingest", str(env), "--repo", "r", "--workspace", "w", "--format", "rtf"])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == ["error: unknown format 'rtf' (known: pep, text)"]


def test_branch_commands(env):
    runner.invoke(app, ["ingest", str(env), "--repo", "peps", "--workspace", "peps"])
    made = runner.invoke(app, ["branch", "create", "agent/demo", "--repo", "peps"])
    assert made.exit_code == 0, made.output
    listed = runner.invoke(app, ["branch", "list", "--repo", "peps"])
    assert "agent/demo" in listed.output and "main" in listed.output


@pytest.mark.parametrize("args", [
    ["ingest", "/no/such/path", "--repo", "r", "--workspace", "w"],
    ["ingest", ".", "--repo", "r", "--workspace", "w", "--format", "rtf"],
    ["search", "x", "--repo", "missing"],
    ["search", "   ", "--repo", "missing"],
    ["branch", "create", "a//b", "--repo", "missing"],
    ["resolve-entities", "w", "--repo", "missing"],
    ["resolve-entities", "w", "--repo", "missing", "--threshold", "3"],
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


def test_reindex_fills_weaviate_from_sql_without_embedding(env, monkeypatch, weaviate_url):
    """``reindex --index weaviate`` through KG_WEAVIATE_URL and the real client (test server, or
    KG_TEST_WEAVIATE_URL's Weaviate)."""
    from kg.cli import _services
    from kg.index.weaviate import WeaviateVectorIndex
    from kg.store.repos import get_repository

    runner.invoke(app, ["ingest", str(env), "--repo", "peps", "--workspace", "peps"])
    monkeypatch.setenv("KG_WEAVIATE_URL", weaviate_url)
    monkeypatch.setattr("kg.providers.registry.make_embedder", _no_embedding)
    result = runner.invoke(app, ["reindex", "--repo", "peps", "--index", "weaviate"])
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout.strip().splitlines()[-1])
    assert body["index"] == "weaviate" and body["chunks"] > 0
    services = _services()
    try:
        with services.db.read() as session:
            repo_key = get_repository(session, "peps").uid
    finally:
        services.close()
    index = WeaviateVectorIndex(weaviate_url)
    try:
        stats = index.stats(repo_key)
        assert stats["chunks"] == body["chunks"]
        # Every node version's chunks went to the collection of its (workspace, branch): main.
        with services.db.read() as session:
            repo = get_repository(session, "peps")
            from sqlalchemy import func, select

            from kg.store.models import Branch, Chunk, Workspace

            main_id = session.scalar(select(Branch.id).where(Branch.repo_id == repo.id, Branch.name == "main"))
            ws_id = session.scalar(select(Workspace.id).where(Workspace.repo_id == repo.id, Workspace.name == "peps"))
            top_seq = session.scalar(select(func.max(Chunk.seq)).where(Chunk.repo_id == repo.id))
            head = repo.head_revision
        assert [(c["workspace_id"], c["branch_id"]) for c in stats["collections"]] == [(ws_id, main_id)]
        assert stats["placed"] == {"seq": top_seq, "version": head}
        # Run again: the collection is dropped and refilled, never doubled.
        again = runner.invoke(app, ["reindex", "--repo", "peps", "--index", "weaviate"])
        assert again.exit_code == 0, again.output
        assert index.stats(repo_key)["chunks"] == body["chunks"]
    finally:
        index.drop(repo_key)
        index.close()


def test_reindex_into_weaviate_needs_a_url(env):
    runner.invoke(app, ["ingest", str(env), "--repo", "peps", "--workspace", "peps"])
    result = runner.invoke(app, ["reindex", "--repo", "peps", "--index", "weaviate"])
    assert result.exit_code == 1
    assert "KG_WEAVIATE_URL" in result.output


def _no_embedding(name, **kwargs):
    raise AssertionError("reindex must not embed")


def test_ingest_drains_only_its_own_repository(env, tmp_path):
    """Regression: `kg ingest` waited for every repository's indexing backlog."""
    from kg.ops.nodes import put_node
    from kg.services import Services
    from kg.settings import Settings
    from kg.store.models import IndexJob
    from kg.store.repos import create_repository, create_workspace

    services = Services.from_settings(Settings())
    try:
        services.db.upgrade()
        with services.db.write() as session:
            other = create_repository(session, name="other")
            create_workspace(session, other, name="w")
        context.run(services, context.OPERATOR, put_node, "other", "main", "w", "/queued", node_type="kb:Doc",
                 properties={"content": "waits for the server's indexer"})
    finally:
        services.close()
    result = runner.invoke(app, ["ingest", str(env), "--repo", "peps", "--workspace", "peps"])
    assert result.exit_code == 0, result.output
    services = Services.from_settings(Settings())
    try:
        with services.db.read() as session:
            pending = session.query(IndexJob).filter(IndexJob.status == "pending").all()
            assert len(pending) == 1 and pending[0].repo_id == other.id
    finally:
        services.close()


@pytest.mark.parametrize("argv", [["kg"], ["kg", "branch"], ["kg", "db"]])
def test_a_missing_command_says_so_in_one_line(env, argv, monkeypatch, capsys):
    """Regression: `kg` / `kg branch` printed the usage, then an empty "error: "."""
    from kg.cli import main

    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as stopped:
        main()
    assert stopped.value.code == 1
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert errors == ["error: missing command (see the usage above)"]


def test_serve_on_a_busy_port_is_one_line_and_exit_1(env, monkeypatch):
    import socket

    started = []
    monkeypatch.setattr("uvicorn.run", lambda *a, **k: started.append(a))
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = runner.invoke(app, ["serve", "--host", "127.0.0.1", "--port", str(port)])
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: cannot listen on 127.0.0.1:{port}: ")
    assert started == []
    # A free port goes on to uvicorn.
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    assert runner.invoke(app, ["serve", "--host", "127.0.0.1", "--port", str(port)]).exit_code == 0
    assert started == [("api.main:app",)]


@pytest.mark.parametrize("env_vars, expected", [
    ({"KG_INDEX": "weaviate"},
     "error: invalid settings: KG_INDEX=weaviate needs KG_WEAVIATE_URL (e.g. http://localhost:8080)"),
    ({"KG_INDEX": "bogus"}, "error: invalid setting KG_INDEX: Input should be 'embedded' or 'weaviate'"),
])
def test_a_bad_setting_is_one_named_line(env, monkeypatch, capsys, env_vars, expected):
    """Regression: a check across settings printed "invalid setting : Value error, ..."."""
    from kg.cli import main

    for name, value in env_vars.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(sys, "argv", ["kg", "search", "x", "--repo", "r"])
    with pytest.raises(SystemExit) as stopped:
        main()
    assert stopped.value.code == 1
    assert capsys.readouterr().err.strip().splitlines() == [expected]


def test_commands_close_their_services(env, monkeypatch):
    """Regression: `kg search` / `kg reindex` in Weaviate mode warned at exit (an unclosed client)."""
    from kg.cli import main
    from kg.services import Services

    closed = []
    real = Services.close
    monkeypatch.setattr(Services, "close", lambda self: (closed.append(self), real(self)))
    for argv in (["kg", "ingest", str(env), "--repo", "peps", "--workspace", "peps"],
                 ["kg", "search", "version", "--repo", "peps", "--json"]):
        monkeypatch.setattr(sys, "argv", argv)
        with pytest.raises(SystemExit) as stopped:
            main()
        assert stopped.value.code == 0
    assert len(closed) == 2


def test_serve_sets_the_keep_alive_timeout(env, monkeypatch):
    import socket

    calls = []
    monkeypatch.setattr("uvicorn.run", lambda *a, **k: calls.append(k))
    monkeypatch.setenv("KG_KEEPALIVE_TIMEOUT_S", "3")
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    assert runner.invoke(app, ["serve", "--host", "127.0.0.1", "--port", str(port)]).exit_code == 0
    assert calls[0]["timeout_keep_alive"] == 3
    from kg.serve_protocol import HeadDeadlineH11Protocol

    # h11, with the request-head deadline (tests/e2e/test_header_timeout.py runs it for real)
    assert calls[0]["http"] is HeadDeadlineH11Protocol and calls[0]["h11_max_incomplete_event_size"] == 64 * 1024


def test_serve_refuses_a_non_loopback_host_without_auth(env, monkeypatch):
    started = []
    monkeypatch.setattr("uvicorn.run", lambda *a, **k: started.append(a))
    monkeypatch.delenv("KG_AUTH", raising=False)
    result = runner.invoke(app, ["serve", "--host", "0.0.0.0", "--port", "0"])
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: refusing to listen on 0.0.0.0 without authentication")
    assert started == []
    # With auth on (and a pepper) it goes on to uvicorn; without a pepper auth cannot be on.
    monkeypatch.setenv("KG_AUTH", "true")
    assert runner.invoke(app, ["serve", "--host", "0.0.0.0", "--port", "0"]).exit_code != 0
    monkeypatch.setenv("KG_KEY_PEPPER", "a-pepper")
    import socket

    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    assert runner.invoke(app, ["serve", "--host", "0.0.0.0", "--port", str(port)]).exit_code == 0
    assert started == [("api.main:app",)]


def test_keys_create_list_revoke(env, monkeypatch):
    monkeypatch.setenv("KG_KEY_PEPPER", "a-pepper")
    admin = runner.invoke(app, ["keys", "create", "--name", "admin", "--admin"])
    assert admin.exit_code == 0, admin.output
    made = json.loads([line for line in admin.stdout.splitlines() if line.startswith("{")][0])
    assert made["key"].startswith(f"kg_{made['id']}_") and made["grants"][0]["actions"][-1] == "admin"
    agent = runner.invoke(app, ["keys", "create", "--name", "agent-1",
                                "--grant", "repo=acme,branches=main,actions=read",
                                "--grant", "repo=*,actions=read"])
    assert agent.exit_code == 0, agent.output
    assert "warning: key 'agent-1': a grant on repo=*" in agent.output
    agent_key = json.loads([line for line in agent.stdout.splitlines() if line.startswith("{")][0])
    listed = runner.invoke(app, ["keys", "list"])
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert [r["name"] for r in rows] == ["admin", "agent-1"] and all("key" not in r for r in rows)
    assert made["key"].split("_", 2)[2] not in listed.stdout
    revoked = runner.invoke(app, ["keys", "revoke", agent_key["id"]])
    assert revoked.exit_code == 0 and json.loads(revoked.stdout)["state"] == "revoked"
    missing = runner.invoke(app, ["keys", "revoke", "0123456789abcdef"])
    assert missing.exit_code == 1
    bad = runner.invoke(app, ["keys", "create", "--name", "x", "--grant", "repo=a,actions=fly"])
    assert bad.exit_code == 1 and "fly" in bad.output


def test_keys_create_needs_a_pepper(env, monkeypatch):
    monkeypatch.delenv("KG_KEY_PEPPER", raising=False)
    result = runner.invoke(app, ["keys", "create", "--name", "admin", "--admin"])
    assert result.exit_code == 1 and "KG_KEY_PEPPER" in result.output


def test_ingest_cannot_create_the_rag_nodes_reserved_repository(env):
    """The RAG node's repository (KG_RAG_REPO) is made by the node only: an ingest that would
    create it, as the operator too, is refused and writes nothing."""
    result = runner.invoke(app, ["ingest", str(env), "--repo", "rag", "--workspace", "docs"])
    assert result.exit_code == 1
    assert "reserved" in result.output and "KG_RAG_REPO" in result.output
    listed = runner.invoke(app, ["ingest", str(env), "--repo", "ragged", "--workspace", "docs"])
    assert listed.exit_code == 0, listed.output


def test_search_with_context_prints_the_parent_and_neighbouring_sections(cli_env):
    """``kg search --context 1``: each hit with its folder and the files beside it, in order."""
    folder = cli_env / "handbook" / "rigging"
    folder.mkdir(parents=True)
    for name, text in (("a-intro.txt", "Check the shrouds before sailing."),
                       ("b-knots.txt", "The bowline makes a fixed loop that does not slip."),
                       ("c-anchor.txt", "Let out five times the depth in chain.")):
        (folder / name).write_text(text, encoding="utf-8")
    result = runner.invoke(app, ["ingest", str(cli_env / "handbook"), "--repo", "sea", "--workspace", "docs"])
    assert result.exit_code == 0, result.output
    found = runner.invoke(app, ["search", "bowline fixed loop", "--repo", "sea", "--mode", "fulltext", "--k", "1",
                                "--context", "1", "--json"])
    assert found.exit_code == 0, found.output
    row = json.loads(found.stdout)["results"][0]
    assert row["path"] == "/rigging/b-knots"
    assert row["context"]["parent"]["path"] == "/rigging"
    assert [n["path"] for n in row["context"]["before"]] == ["/rigging/a-intro"]
    assert [n["path"] for n in row["context"]["after"]] == ["/rigging/c-anchor"]
    text = runner.invoke(app, ["search", "bowline fixed loop", "--repo", "sea", "--mode", "fulltext", "--k", "1",
                               "--context", "1"])
    assert text.exit_code == 0, text.output
    assert "   in /rigging" in text.stdout
    assert "   before: /rigging/a-intro" in text.stdout and "   after: /rigging/c-anchor" in text.stdout
    bad = runner.invoke(app, ["search", "bowline", "--repo", "sea", "--context", "11"])
    assert bad.exit_code == 1
    assert bad.output.strip().splitlines() == ["error: context.siblings must be between 0 and 10"]


def test_search_where_takes_json_conditions_and_refuses_bad_ones_in_one_line(cli_env, monkeypatch):
    """``kg search --where``: the HTTP and MCP search's property conditions on the command line
    (a new user found none)."""
    from kg.context import OPERATOR, run
    from kg.ops import nodes as node_ops
    from kg.ops import repos as repo_ops
    from kg.services import Services
    from kg.settings import Settings

    monkeypatch.setenv("KG_INDEX_INLINE", "true")  # the texts embedded as they are written
    services = Services.from_settings(Settings())
    services.db.upgrade()
    try:
        run(services, OPERATOR, repo_ops.create_repository, "acme")
        run(services, OPERATOR, repo_ops.create_workspace, "acme", "kb")
        for path, status in (("/draft", "draft"), ("/published", "published")):
            run(services, OPERATOR, node_ops.put_node, "acme", "main", "kb", path, node_type="kb:Note",
                properties={"content": "Rotate the signing key every month.", "status": status})
    finally:
        services.close()
    found = runner.invoke(app, ["search", "signing key", "--repo", "acme", "--mode", "fulltext", "--json",
                                "--where", '{"status": {"$in": ["draft"]}}'])
    assert found.exit_code == 0, found.output
    assert [r["path"] for r in json.loads(found.stdout)["results"]] == ["/draft"]
    # nothing matching: said on stderr (it printed nothing at all), still exit 0
    none = runner.invoke(app, ["search", "signing key", "--repo", "acme", "--where", '{"status": "Superseded"}'])
    assert none.exit_code == 0 and none.stdout == "" and none.stderr.strip() == "no results"
    for where, line in (("{status: draft}", "error: --where is not JSON: "),
                        ('["draft"]', "error: --where must be a JSON object"),
                        ('{"status": {"$regex": "d"}}', "error: where.status: unknown operator '$regex'")):
        bad = runner.invoke(app, ["search", "signing key", "--repo", "acme", "--where", where])
        assert bad.exit_code == 1
        (only,) = bad.output.strip().splitlines()
        assert only.startswith(line), only


def test_relate_invalidate_relation_types_and_neighbors_over_time(cli_env):
    """``kg relate --valid-from/--valid-to``, ``kg invalidate``, ``kg relation-types`` and
    ``kg neighbors --as-of/--include-invalid`` (issue 17); a naive time is one line, exit 1."""
    from kg.context import OPERATOR, run
    from kg.ops import nodes as node_ops
    from kg.ops import repos as repo_ops
    from kg.services import Services
    from kg.settings import Settings

    services = Services.from_settings(Settings())
    services.db.upgrade()
    run(services, OPERATOR, repo_ops.create_repository, "hr")
    run(services, OPERATOR, repo_ops.create_workspace, "hr", "people")
    for path in ("/dana", "/acme", "/globex"):
        run(services, OPERATOR, node_ops.put_node, "hr", "main", "people", path, node_type="kg:Entity", properties={})
    services.close()
    declared = runner.invoke(app, ["relation-types", "--repo", "hr", "--workspace", "people",
                                   "--single-valued", "works_at"])
    assert declared.exit_code == 0, declared.output
    assert json.loads(declared.stdout) == {"workspace": "people", "single_valued": ["works_at"]}
    shown = runner.invoke(app, ["relation-types", "--repo", "hr", "--workspace", "people"])
    assert json.loads(shown.stdout)["single_valued"] == ["works_at"]
    first = runner.invoke(app, ["relate", "--repo", "hr", "--from", "people:/dana", "--to", "people:/acme",
                                "--type", "works_at", "--valid-from", "2020-01-01T00:00:00Z"])
    assert first.exit_code == 0, first.output
    assert json.loads(first.stdout)["valid_from"] == "2020-01-01T00:00:00+00:00"
    second = runner.invoke(app, ["relate", "--repo", "hr", "--from", "people:/dana", "--to", "people:/globex",
                                 "--type", "works_at", "--valid-from", "2023-01-01T00:00:00Z"])
    assert second.exit_code == 0, second.output

    def around(*extra):
        result = runner.invoke(app, ["neighbors", "--repo", "hr", "--node", "people:/dana", "--direction", "OUT",
                                     *extra])
        assert result.exit_code == 0, result.output
        return [n["path"] for n in json.loads(result.stdout)["neighbors"]]

    assert around() == ["/globex"]
    assert around("--as-of", "2021-01-01T00:00:00Z") == ["/acme"]
    assert around("--include-invalid") == ["/acme", "/globex"]
    gone = runner.invoke(app, ["invalidate", "--repo", "hr", "--from", "people:/dana", "--to", "people:/globex",
                               "--type", "works_at", "--valid-to", "2024-01-01T00:00:00Z", "--invalidated-by", "news"])
    assert gone.exit_code == 0, gone.output
    assert json.loads(gone.stdout)["invalidated_by"] == "news"
    assert around() == []
    naive = runner.invoke(app, ["relate", "--repo", "hr", "--from", "people:/dana", "--to", "people:/acme",
                                "--type", "knows", "--valid-from", "2020-01-01T00:00:00"])
    assert naive.exit_code == 1 and naive.output.startswith("error: ") and "zone" in naive.output
    bad = runner.invoke(app, ["neighbors", "--repo", "hr", "--node", "people:/dana", "--as-of", "yesterday"])
    assert bad.exit_code == 1 and bad.output.count("\n") == 1
    # out of range once in UTC: was a traceback (OverflowError)
    for args in (["neighbors", "--repo", "hr", "--node", "people:/dana", "--as-of", "0001-01-01T00:00:00+01:00"],
                 ["relate", "--repo", "hr", "--from", "people:/dana", "--to", "people:/acme", "--type", "knows",
                  "--valid-from", "0001-01-01T00:00:00+01:00"],
                 ["invalidate", "--repo", "hr", "--from", "people:/dana", "--to", "people:/acme", "--type",
                  "works_at", "--valid-to", "9999-12-31T23:59:59-01:00"]):
        edge = runner.invoke(app, args)
        assert edge.exit_code == 1 and edge.output.count("\n") == 1, edge.output
        assert edge.output.startswith("error: ") and "out of range" in edge.output


def test_lineage_lists_a_nodes_chunks_and_refuses_an_unknown_node(env):
    assert runner.invoke(app, ["ingest", str(env), "--repo", "peps", "--workspace", "peps"]).exit_code == 0
    out = runner.invoke(app, ["lineage", "peps:/pep-0440", "--repo", "peps", "--json"])
    assert out.exit_code == 0, out.output
    report = json.loads(out.stdout)
    assert report["path"] == "/pep-0440" and [r["kind"] for r in report["derived"]] == ["chunks"]
    assert report["derived"][0]["count"] > 0 and report["derived_from"] == []
    text = runner.invoke(app, ["lineage", "/pep-0440", "--repo", "peps", "--workspace", "peps"])
    assert text.exit_code == 0 and text.stdout.splitlines()[0].startswith("peps:/pep-0440 (revision ")
    assert "derived  chunks" in text.stdout
    missing = runner.invoke(app, ["lineage", "peps:/nope", "--repo", "peps"])
    assert missing.exit_code == 1 and len(missing.output.strip().splitlines()) == 1
    no_ws = runner.invoke(app, ["lineage", "/pep-0440", "--repo", "peps"])
    assert no_ws.exit_code == 1 and "workspace" in no_ws.output


def test_resolve_entities_proposal_only_lists_and_writes_nothing(env):
    runner.invoke(app, ["ingest", str(env), "--repo", "peps", "--workspace", "peps"])
    result = runner.invoke(app, ["resolve-entities", "peps", "--repo", "peps", "--proposal-only"])
    assert result.exit_code == 0, result.output
    assert result.output.strip().splitlines()[-1] == "0 merge(s) among 0 entities; nothing written"
    as_json = runner.invoke(app, ["resolve-entities", "peps", "--repo", "peps", "--proposal-only", "--json"])
    body = json.loads(as_json.stdout)
    assert body["merges"] == [] and body["branch"] is None and body["dry_run"] is True


@pytest.mark.parametrize("port", ["99999", "65536", "-1"])
def test_serve_refuses_a_port_past_65535_in_one_line(env, monkeypatch, port):
    """Regression: --port 99999 was taken modulo 65536 by the socket layer (it listened on 34463)."""
    started = []
    monkeypatch.setattr("uvicorn.run", lambda *a, **k: started.append(a))
    result = runner.invoke(app, ["serve", "--host", "127.0.0.1", "--port", port])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [f"error: port {port} is not a TCP port (1 to 65535)"]
    assert started == []


def test_mcp_over_stdio_on_a_repository_or_branch_that_does_not_exist_exits_1(env, monkeypatch):
    served = []
    monkeypatch.setattr("kg.mcp.stdio.serve_stdio", lambda *a: served.append(a))
    result = runner.invoke(app, ["mcp", "--repo", "nope"])
    assert result.exit_code == 1
    (line,) = result.output.strip().splitlines()
    assert line.startswith("error: ") and "'nope'" in line
    assert runner.invoke(app, ["ingest", str(env), "--repo", "peps", "--workspace", "peps"]).exit_code == 0
    result = runner.invoke(app, ["mcp", "--repo", "peps", "--branch", "nobranch"])
    assert result.exit_code == 1 and "nobranch" in result.output
    assert served == []


def test_help_lists_each_command_as_flowing_sentences():
    """The command list of ``kg --help`` wraps a docstring as prose: a docstring's own line ends
    (hard-wrapped at 100 columns in the source) are not line ends of the help (typer's "rich"
    markup mode kept them, breaking sentences mid-line in the list)."""
    result = CliRunner().invoke(app, ["--help"], terminal_width=200, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    line = next(row for row in result.output.splitlines() if "│ ingest " in row)
    assert "is skipped, whatever happened to its node since; a changed one is merged" in line
    sub = CliRunner().invoke(app, ["import", "ndjson", "--help"], terminal_width=200, env={"COLUMNS": "200"})
    assert sub.exit_code == 0 and "as one revision (or one per --batch-size records)" in " ".join(sub.output.split())



@pytest.mark.parametrize(("command", "shown"), [
    (["import", "--help"], "nodes at /entities/<slug> with"),
    (["import", "memory-jsonl", "--help"], "nodes at /entities/<slug> with"),
    (["search", "--help"], "name or properties.<key>."),
    (["keys", "revoke", "--help"], "(kg_<id>_...)"),
])
def test_help_keeps_angle_bracket_placeholders(command, shown):
    """Markdown help reads ``<slug>`` as inline HTML and drops it unless it is code: the
    placeholders are in backticks (a review found three dropped)."""
    result = CliRunner().invoke(app, command, terminal_width=200, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert shown in " ".join(result.output.replace("│", " ").split())


def test_reindex_retry_failed_embeds_failed_texts_again(cli_env):
    """A text whose embedding raised ends failed; once the cause is gone, ``kg reindex
    --retry-failed`` queues it again, embeds it and says how many it retried."""
    from kg.errors import ProviderError
    from kg.index.embedded import EmbeddedVectorIndex
    from kg.ops.nodes import put_node
    from kg.ops.repos import create_repository, create_workspace
    from kg.providers.fake import FakeEmbedder
    from kg.services import Services
    from kg.settings import Settings
    from kg.store.db import Database

    class Poisoned(FakeEmbedder):
        def embed(self, texts):
            if any("poison" in t for t in texts):
                raise ProviderError("the model rejected the text")
            return super().embed(texts)

    settings = Settings(index_inline=False)
    db = Database(settings.resolved_database_url())
    db.upgrade()
    poisoned = Poisoned(dim=64, name="fake:hash-64")
    services = Services(settings=settings, db=db, index=EmbeddedVectorIndex(settings.data_dir),
                        embedder_factory=lambda name: poisoned)
    context.run(services, context.OPERATOR, create_repository, "r")
    context.run(services, context.OPERATOR, create_workspace, "r", "w")
    context.run(services, context.OPERATOR, put_node, "r", "main", "w", "/poison", node_type="t",
                properties={"content": "a poison pill"})
    assert services.indexer.drain().failed == 1
    services.close()
    # The command's own embedder is the plain fake one: the cause is gone.
    result = runner.invoke(app, ["reindex", "--repo", "r", "--retry-failed"])
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout.strip().splitlines()[-1])
    assert (body["retried"], body["jobs_done"], body["jobs_failed"]) == (1, 1, 0)
    found = runner.invoke(app, ["search", "poison", "--repo", "r", "--json", "--mode", "fulltext"])
    assert [row["path"] for row in json.loads(found.stdout)["results"]] == ["/poison"]
    again = runner.invoke(app, ["reindex", "--repo", "r", "--retry-failed"])
    assert json.loads(again.stdout.strip().splitlines()[-1])["retried"] == 0
    missing = runner.invoke(app, ["reindex", "--repo", "nope", "--retry-failed"])
    assert missing.exit_code == 1 and missing.output.strip().startswith("error: ")
