"""The review loop from the command line: ``kg ask``, ``kg diff``, ``kg merge`` (dry run,
conflicts, resolutions from a file), ``kg branch delete | reset``; the same use cases as HTTP."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kg import context
from kg.ops.nodes import delete_node, patch_node, put_node
from kg.ops.relations import relate
from kg.services import Services
from kg.settings import Settings

runner = CliRunner()

TERMINATION = "Termination requires thirty days written notice. The fee is due monthly."


def _write(*steps):
    """Run write use cases on the CLI's store (the settings of ``cli_env``)."""
    services = Services.from_settings(Settings())
    try:
        services.db.upgrade()
        for use_case, args, kwargs in steps:
            context.run(services, context.OPERATOR, use_case, *args, **kwargs)
        services.indexer.drain()
    finally:
        services.close()


@pytest.fixture
def repo(cli_env):
    """Repository ``acme`` with workspace ``docs``: /contract, /policy on main; branch ``review``."""
    folder = cli_env / "docs"
    folder.mkdir()
    (folder / "contract.md").write_text(f"# Contract\n\n{TERMINATION}\n", encoding="utf-8")
    (folder / "policy.md").write_text("# Policy\n\nVisitors sign in at the front desk.\n", encoding="utf-8")
    made = runner.invoke(app_(), ["ingest", str(folder), "--repo", "acme", "--workspace", "docs"])
    assert made.exit_code == 0, made.output
    assert runner.invoke(app_(), ["branch", "create", "review", "--repo", "acme"]).exit_code == 0
    return "acme"


def app_():
    from kg.cli import app

    return app


def _changes_on_review():
    _write((put_node, ("acme", "review", "docs", "/notes"), {"node_type": "kb:Note",
                                                              "properties": {"title": "Notes"}}),
           (patch_node, ("acme", "review", "docs", "/contract"), {"properties": {"title": "Contract v2"}}),
           (delete_node, ("acme", "review", "docs", "/policy"), {}),
           (relate, ("acme", "review", "docs:/notes", "docs:/contract", "cites"), {"weight": 0.5}))


def test_ask_prints_the_answer_and_its_citations(repo):
    result = runner.invoke(app_(), ["ask", "termination written notice days", "--repo", "acme"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "Termination requires thirty days written notice." in lines[0]
    assert lines[1:3] == ["", "grounded: yes (extractive)"]
    assert lines[3:] == ["[1] docs:/contract chunk 1"]  # chunk 0 is the title
    as_json = runner.invoke(app_(), ["ask", "termination written notice days", "--repo", "acme", "--json"])
    body = json.loads(as_json.stdout)
    assert body["grounded"] is True and body["mode"] == "extractive"
    assert [(c["workspace"], c["path"]) for c in body["citations"]] == [("docs", "/contract")]


def test_diff_lists_added_modified_deleted_nodes_and_relations(repo):
    _changes_on_review()
    result = runner.invoke(app_(), ["diff", "--repo", "acme", "--branch", "review"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("diff review against main (base: main as of revision ")
    assert lines[1:] == [
        "nodes: 1 added, 1 modified, 1 deleted",
        "  + docs:/notes  kb:Note",
        "  ~ docs:/contract  kg:Document",
        '      title: "Contract" -> "Contract v2"',
        "  - docs:/policy  kg:Document",
        "relations: 1 added, 0 modified, 0 removed",
        "  + docs:/notes -[cites]-> docs:/contract  weight 0.5",
    ]
    as_json = json.loads(runner.invoke(app_(), ["diff", "--repo", "acme", "--branch", "review", "--json"]).stdout)
    assert [n["path"] for n in as_json["nodes"]["added"]] == ["/notes"]
    assert as_json["nodes"]["modified"][0]["changes"] == {"title": {"old": "Contract", "new": "Contract v2"}}


def test_merge_dry_run_writes_nothing_then_merge_applies(repo):
    _changes_on_review()
    dry = runner.invoke(app_(), ["merge", "--repo", "acme", "--branch", "review", "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert dry.stdout.splitlines() == [
        "dry run: merging review into main (fast-forward) would write nodes 1 added, 1 modified, 1 deleted; "
        "relations 1 upserted, 0 removed"]
    still = runner.invoke(app_(), ["diff", "--repo", "acme", "--branch", "review", "--json"])
    assert len(json.loads(still.stdout)["nodes"]["added"]) == 1
    done = runner.invoke(app_(), ["merge", "--repo", "acme", "--branch", "review", "--message", "reviewed"])
    assert done.exit_code == 0, done.output
    line = done.stdout.strip()
    assert line.startswith("merged review into main (fast-forward) as revision ")
    assert line.endswith(": nodes 1 added, 1 modified, 1 deleted; relations 1 upserted, 0 removed")
    again = runner.invoke(app_(), ["merge", "--repo", "acme", "--branch", "review"])
    assert again.stdout.strip() == "merged review into main: nothing to apply (up to date)"


def _conflicting(repo_name="acme"):
    _write((patch_node, ("acme", "review", "docs", "/contract"), {"properties": {"title": "Title on review"}}),
           (patch_node, ("acme", "main", "docs", "/contract"), {"properties": {"title": "Title on main"}}))


def test_merge_conflicts_are_listed_exit_1_and_nothing_is_written(repo):
    _conflicting()
    result = runner.invoke(app_(), ["merge", "--repo", "acme", "--branch", "review"])
    assert result.exit_code == 1
    assert result.stdout.splitlines() == [
        "conflict: node docs:/contract: the same properties changed differently on both sides",
        '    title: base "Contract", ours "Title on main", theirs "Title on review"',
    ]
    assert result.stderr.strip() == ("error: merging review into main has 1 conflict(s); resolve them with "
                                     "--resolutions; nothing was written")
    diff = json.loads(runner.invoke(app_(), ["diff", "--repo", "acme", "--branch", "review", "--json"]).stdout)
    assert diff["nodes"]["modified"][0]["changes"]["title"]["new"] == "Title on review"
    as_json = runner.invoke(app_(), ["merge", "--repo", "acme", "--branch", "review", "--json"])
    assert as_json.exit_code == 1
    assert json.loads(as_json.stdout)["error"]["details"]["conflicts"][0]["path"] == "/contract"


def test_merge_with_resolutions_from_a_file(repo, cli_env):
    _conflicting()
    file = cli_env / "resolutions.json"
    file.write_text(json.dumps([{"workspace": "docs", "path": "/contract", "take": "theirs"}]), encoding="utf-8")
    result = runner.invoke(app_(), ["merge", "--repo", "acme", "--branch", "review", "--resolutions", str(file)])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip().endswith(": nodes 0 added, 1 modified, 0 deleted; relations 0 upserted, 0 removed")
    services = Services.from_settings(Settings())
    try:
        from kg.ops.queries import get_node

        node = get_node(services, context.OPERATOR, "acme", "main", "docs", "/contract")
    finally:
        services.close()
    assert node["properties"]["title"] == "Title on review"


@pytest.mark.parametrize("content, expected", [
    ("{not json", "is not JSON: Expecting property name enclosed in double quotes at line 1"),
    ('{"take": "ours"}', "must hold a list of resolutions (objects)"),
    ('[{"workspace": "docs", "path": "/nowhere", "take": "ours"}]', "1 resolution(s) name no conflict of this merge"),
])
def test_bad_resolutions_are_one_line(repo, cli_env, content, expected):
    _conflicting()
    file = cli_env / "bad.json"
    file.write_text(content, encoding="utf-8")
    result = runner.invoke(app_(), ["merge", "--repo", "acme", "--branch", "review", "--resolutions", str(file)])
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0]


def test_branch_delete_and_reset(repo):
    _write((put_node, ("acme", "review", "docs", "/draft"), {"node_type": "kb:Note", "properties": {"title": "x"}}))
    reset = runner.invoke(app_(), ["branch", "reset", "review", "--repo", "acme"])
    assert reset.exit_code == 0, reset.output
    body = json.loads(reset.stdout)
    assert body["name"] == "review" and body["parent"] == "main"
    diff = json.loads(runner.invoke(app_(), ["diff", "--repo", "acme", "--branch", "review", "--json"]).stdout)
    assert diff["nodes"] == {"added": [], "modified": [], "deleted": []}
    deleted = runner.invoke(app_(), ["branch", "delete", "review", "--repo", "acme"])
    assert deleted.exit_code == 0, deleted.output
    assert json.loads(deleted.stdout) == {"deleted": "review"}
    listed = runner.invoke(app_(), ["branch", "list", "--repo", "acme"])
    assert [line.split("\t")[0] for line in listed.stdout.splitlines()] == ["main"]


@pytest.mark.parametrize("args", [
    ["ask", "  ", "--repo", "acme"],
    ["ask", "anything", "--repo", "missing"],
    ["diff", "--repo", "acme", "--branch", "nope"],
    ["diff", "--repo", "acme", "--branch", "main"],
    ["merge", "--repo", "acme", "--branch", "main"],
    ["merge", "--repo", "acme", "--branch", "review", "--resolutions", "/no/such/file.json"],
    ["branch", "delete", "main", "--repo", "acme"],
    ["branch", "delete", "nope", "--repo", "acme"],
    ["branch", "reset", "main", "--repo", "acme"],
])
def test_bad_input_is_one_line_and_exit_1(repo, args):
    result = runner.invoke(app_(), args)
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output


def test_merge_says_what_lineage_recomputed(repo, tmp_path):
    """Entities extracted on main after the fork; the branch's edit drops one of them from the
    text: the merge lists that mention as a lineage decision; dropped, the merge unlinks it and
    flags the entity, restamps the other, and the CLI says so (the dry run first)."""
    from kg.rag.functions import invoke

    _write((put_node, ("acme", "main", "docs", "/bio"),
            {"node_type": "kg:Document", "properties": {"text": "Ada Lovelace worked with Charles Babbage."}}))
    assert runner.invoke(app_(), ["branch", "create", "late", "--repo", "acme"]).exit_code == 0
    services = Services.from_settings(Settings())
    try:
        out = invoke(services, context.OPERATOR, "acme", "extract-entities", {"workspace": "docs", "path": "/bio"})
        assert sorted(e.name for e in out.entities) == ["Ada Lovelace", "Charles Babbage"]
    finally:
        services.close()
    _write((put_node, ("acme", "late", "docs", "/bio"),
            {"node_type": "kg:Document", "properties": {"text": "Ada Lovelace wrote the first program."}}))
    # main asserted the mention of Charles Babbage: the merge leaves it to the reviewer
    refused = runner.invoke(app_(), ["merge", "--repo", "acme", "--branch", "late", "--into", "main"])
    assert refused.exit_code == 1
    assert refused.stdout.strip().splitlines() == [
        "lineage: docs:/entities/charles-babbage -[mentioned_in]-> docs:/bio: the merged text of docs:/bio no "
        "longer names 'Charles Babbage': take 'keep' to keep this mention, 'drop' to remove it (and flag the "
        "entity orphan if it is left with no edge)"]
    picks = tmp_path / "picks.json"
    picks.write_text(json.dumps([{"from": "docs:/entities/charles-babbage", "to": "docs:/bio",
                                  "type": "mentioned_in", "take": "drop"}]))
    dry = runner.invoke(app_(), ["merge", "--repo", "acme", "--branch", "late", "--into", "main", "--dry-run",
                                 "--resolutions", str(picks)])
    assert dry.exit_code == 0, dry.output
    assert dry.stdout.strip().splitlines()[1:] == [
        "lineage: 1 mention(s) unlinked, 1 mention(s) restamped, 1 entity(ies) flagged orphan (would be)"]
    done = runner.invoke(app_(), ["merge", "--repo", "acme", "--branch", "late", "--into", "main",
                                  "--resolutions", str(picks)])
    assert done.exit_code == 0, done.output
    lines = done.stdout.strip().splitlines()
    assert lines[0].startswith("merged late into main (three-way) as revision ")
    assert lines[1:] == ["lineage: 1 mention(s) unlinked, 1 mention(s) restamped, 1 entity(ies) flagged orphan"]
    as_json = runner.invoke(app_(), ["merge", "--repo", "acme", "--branch", "late", "--into", "main", "--json"])
    assert json.loads(as_json.stdout)["up_to_date"] is True  # nothing left: no second refresh


def test_log_lists_revisions_newest_first_with_their_first_changes(repo):
    from kg.ops.nodes import batch

    _changes_on_review()
    _write((batch, ("acme", "review"), {"upserts": [
        {"workspace": "docs", "path": f"/extra-{i}", "node_type": "kb:Note", "properties": {}} for i in range(3)],
        "message": "three notes", "actor": "agent-7"}))
    result = runner.invoke(app_(), ["log", "--repo", "acme", "--branch", "review", "--changes", "1"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    heads = [line for line in lines if line.startswith("r")]
    assert [h.split()[0] for h in heads] == ["r7", "r6", "r5", "r4", "r3", "r2", "r1"]
    assert heads[0].endswith("review  agent-7  (3 changes)  three notes")
    assert lines[1:3] == ["    put    docs:/extra-0", "    ... and 2 more"]
    assert "    put    docs:/notes -cites-> docs:/contract" in lines
    assert heads[-1].endswith("main  -  (1 change)  ingest contract.md")
    as_json = json.loads(runner.invoke(app_(), ["log", "--repo", "acme", "--branch", "review", "--json",
                                                "--limit", "2", "--changes", "0"]).stdout)
    assert [(r["revision"], r["change_count"], r["changes"]) for r in as_json["revisions"]] == [(7, 3, []), (6, 1, [])]
    bad = runner.invoke(app_(), ["log", "--repo", "acme", "--changes", "-1"])
    assert bad.exit_code == 1 and bad.output.strip().count("\n") == 0 and "changes" in bad.output
    missing = runner.invoke(app_(), ["log", "--repo", "nope"])
    assert missing.exit_code == 1 and "nope" in missing.output
