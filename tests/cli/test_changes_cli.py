"""``kg changes`` (one JSON line per event) and ``kg webhooks add/list/remove`` on a SQLite file;
bad input is one line and exit 1."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from kg.cli import app
from kg.context import OPERATOR, run
from kg.ops import nodes as node_ops
from kg.ops import repos as repo_ops
from kg.services import Services
from kg.settings import Settings

runner = CliRunner()


def _world() -> None:
    services = Services.from_settings(Settings())
    try:
        services.db.upgrade()
        run(services, OPERATOR, repo_ops.create_repository, "acme")
        run(services, OPERATOR, repo_ops.create_workspace, "acme", "kb")
        for path in ("/a", "/b"):
            run(services, OPERATOR, node_ops.put_node, "acme", "main", "kb", path, node_type="Note", properties={})
    finally:
        services.close()


def test_changes_prints_one_json_line_per_event_and_resumes(cli_env):
    _world()
    assert runner.invoke(app, ["branch", "create", "f", "--repo", "acme"]).exit_code == 0
    result = runner.invoke(app, ["changes", "--repo", "acme"])
    assert result.exit_code == 0, result.output
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(e["id"], e["type"], e["branch"]) for e in events] == [
        ("1.0", "revision", "main"), ("2.0", "revision", "main"), ("2.1", "branch.created", "f")]
    assert events[0]["changes"] == [{"kind": "node", "op": "put", "workspace": "kb", "path": "/a"}]
    after = runner.invoke(app, ["changes", "--repo", "acme", "--after", "2.0", "--limit", "1"])
    assert [json.loads(line)["id"] for line in after.stdout.splitlines()] == ["2.1"]
    bad = runner.invoke(app, ["changes", "--repo", "acme", "--after", "nope"])
    assert bad.exit_code == 1 and bad.output.strip().startswith("error: after 'nope' is not a change feed cursor")


def test_webhooks_add_list_remove(cli_env, monkeypatch):
    _world()
    refused = runner.invoke(app, ["webhooks", "add", "--repo", "acme", "--url", "http://127.0.0.1:9/kg"])
    assert refused.exit_code == 1 and "KG_WEBHOOK_ALLOWED_URLS" in refused.output
    assert len(refused.output.strip().splitlines()) == 1
    monkeypatch.setenv("KG_WEBHOOK_ALLOWED_URLS", "http://127.0.0.1:9/")
    added = runner.invoke(app, ["webhooks", "add", "--repo", "acme", "--url", "http://127.0.0.1:9/kg",
                                "--branch", "release/*", "--event", "merge"])
    assert added.exit_code == 0, added.output
    hook = json.loads(added.stdout.splitlines()[0])
    assert hook["secret"].startswith("whsec_") and hook["branches"] == ["release/*"] and hook["events"] == ["merge"]
    listed = runner.invoke(app, ["webhooks", "list", "--repo", "acme"])
    assert [json.loads(line)["id"] for line in listed.stdout.splitlines()] == [hook["id"]]
    assert "secret" not in listed.stdout
    assert runner.invoke(app, ["webhooks", "remove", "--repo", "acme", hook["id"]]).exit_code == 0
    assert runner.invoke(app, ["webhooks", "list", "--repo", "acme"]).stdout == ""
    gone = runner.invoke(app, ["webhooks", "remove", "--repo", "acme", hook["id"]])
    assert gone.exit_code == 1 and "no webhook" in gone.output
    unknown = runner.invoke(app, ["webhooks", "add", "--repo", "acme", "--url", "http://127.0.0.1:9/kg",
                                  "--event", "nope"])
    assert unknown.exit_code == 1 and "unknown event kinds: nope" in unknown.output
