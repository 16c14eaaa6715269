"""``kg import memory-jsonl``: the MCP memory server's JSONL graph into a branch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kg.cli import app
from kg.context import OPERATOR
from kg.ops import queries
from kg.rag.graph import neighbors
from kg.services import Services
from kg.settings import Settings
from kg.types import Revision

runner = CliRunner()

#: Lines as @modelcontextprotocol/server-memory's saveGraph writes them (entities first).
SAMPLE = [
    {"type": "entity", "name": "Dana Weber", "entityType": "person",
     "observations": ["Works as a rigger at Acme Marine", "Replaces standing rigging every ten years"]},
    {"type": "entity", "name": "Acme Marine", "entityType": "organization", "observations": ["A boatyard in Kiel"]},
    {"type": "entity", "name": "AC/DC", "entityType": "band", "observations": []},
    {"type": "entity", "name": "ac dc", "entityType": "band", "observations": ["Another name, the same slug"]},
    {"type": "relation", "from": "Dana Weber", "to": "Acme Marine", "relationType": "works_at"},
    {"type": "relation", "from": "Dana Weber", "to": "AC/DC", "relationType": "is a fan of"},
]


@pytest.fixture
def env(cli_env):
    return cli_env


def _write(folder: Path, records: list, name: str = "memory.jsonl") -> Path:
    path = folder / name
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n", encoding="utf-8")
    return path


def _import(path: Path, *extra: str):
    return runner.invoke(app, ["import", "memory-jsonl", str(path), "--repo", "mem", *extra])


def _services() -> Services:
    return Services.from_settings(Settings())


def _log(services: Services, branch: str = "main") -> list[Revision]:
    return queries.revision_log(services, OPERATOR, "mem", branch).revisions


def test_import_writes_entities_observations_and_relations_in_one_revision(env):
    result = _import(_write(env, SAMPLE))
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report == {"revision": 1, "entities": 4, "relations": 2, "nodes_written": 4, "relations_written": 2,
                      "unchanged": False, "index_failures": 0}
    services = _services()
    try:
        assert [r.revision for r in _log(services)] == [1]
        dana = queries.get_node(services, OPERATOR, "mem", "main", "memory", "/entities/dana-weber")
        assert dana.node_type == "kg:Entity"
        assert dana.properties["name"] == "Dana Weber"
        assert dana.properties["entity_type"] == "person"
        assert dana.properties["observations"] == SAMPLE[0]["observations"]
        # A '/' in a name is punctuation: one path segment, never a nested path.
        acdc = queries.get_node(services, OPERATOR, "mem", "main", "memory", "/entities/ac-dc")
        assert acdc.properties["name"] == "AC/DC" and "content" not in acdc.properties
        # "ac dc" has the same slug: it gets the slug plus its name's hash.
        other = queries.list_prefix(services, OPERATOR, "mem", "main", "memory", "/entities/ac-dc-", mode="raw")
        assert [n.properties["name"] for n in other.nodes] == ["ac dc"]
        out = neighbors(services, OPERATOR, "mem", "main", "memory:/entities/dana-weber", direction="OUT")
        edges = sorted((n["path"], n["relation_type"]) for n in out["neighbors"])
        assert edges == [("/entities/ac-dc", "is_a_fan_of"), ("/entities/acme-marine", "works_at")]
    finally:
        services.close()
    found = runner.invoke(app, ["search", "standing rigging", "--repo", "mem", "--json", "--mode", "fulltext"])
    assert found.exit_code == 0, found.output
    assert json.loads(found.stdout)["results"][0]["path"] == "/entities/dana-weber"


def test_a_second_import_writes_no_revision(env):
    path = _write(env, SAMPLE)
    assert _import(path).exit_code == 0
    again = _import(path)
    assert again.exit_code == 0, again.output
    report = json.loads(again.stdout.strip().splitlines()[-1])
    assert report["revision"] is None and report["unchanged"] is True
    assert report["nodes_written"] == report["relations_written"] == 0
    services = _services()
    try:
        assert [r.revision for r in _log(services)] == [1]
    finally:
        services.close()
    # A changed observation writes that node only, in a new revision.
    changed = [dict(SAMPLE[0], observations=["Retired"]), *SAMPLE[1:]]
    third = json.loads(_import(_write(env, changed)).stdout.strip().splitlines()[-1])
    assert (third["revision"], third["nodes_written"], third["relations_written"]) == (2, 1, 0)


@pytest.mark.parametrize(("line", "message"), [
    ('{"type": "entity", "name": "Broken"', "line 3: not JSON"),
    ('["type", "entity"]', "line 3: a record must be a JSON object"),
    ('{"type": "entity", "name": "X", "entityType": "t", "observations": "one"}',
     "line 3: entity field 'observations' must be a list of strings"),
    ('{"type": "entity", "name": 7, "entityType": "t", "observations": []}', "line 3: entity field 'name'"),
    ('{"type": "entity", "name": "Dana Weber", "entityType": "t", "observations": []}',
     "line 3: entity 'Dana Weber' is named twice (first on line 1)"),
    ('{"type": "observation", "entityName": "Dana Weber"}', "line 3: unknown record type 'observation'"),
    ('{"type": "relation", "from": "Dana Weber", "to": "Nobody", "relationType": "knows"}',
     "line 3: relation to 'Nobody' names no entity of the file"),
    ('{"type": "relation", "from": "Dana Weber", "to": "Acme Marine"}', "line 3: relation field 'relationType'"),
])
def test_a_malformed_line_is_refused_with_its_number_and_nothing_is_written(env, line, message):
    assert _import(_write(env, [SAMPLE[2]], "first.jsonl")).exit_code == 0
    records = [SAMPLE[0], SAMPLE[1], line, SAMPLE[4]]
    result = _import(_write(env, records))
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {message}"), result.output
    services = _services()
    try:
        assert [r.revision for r in _log(services)] == [1]
        nodes = queries.list_prefix(services, OPERATOR, "mem", "main", "memory", "/entities/").nodes
        assert [n.path for n in nodes] == ["/entities/ac-dc"]
    finally:
        services.close()


def test_blank_lines_are_skipped_and_line_numbers_count_them(env):
    path = env / "memory.jsonl"
    path.write_text(json.dumps(SAMPLE[0]) + "\n\n   \n{oops}\n", encoding="utf-8")
    result = _import(path)
    assert result.exit_code == 1 and result.output.startswith("error: line 4: not JSON")


def test_import_into_a_branch_leaves_main_unchanged(env):
    assert runner.invoke(app, ["import", "memory-jsonl", str(_write(env, SAMPLE[:1])), "--repo", "mem"]).exit_code == 0
    assert runner.invoke(app, ["branch", "create", "agent/memory", "--repo", "mem"]).exit_code == 0
    result = _import(_write(env, SAMPLE), "--branch", "agent/memory", "--workspace", "memory")
    assert result.exit_code == 0, result.output
    services = _services()
    try:
        main_nodes = queries.list_prefix(services, OPERATOR, "mem", "main", "memory", "/entities/").nodes
        branch_nodes = queries.list_prefix(services, OPERATOR, "mem", "agent/memory", "memory", "/entities/").nodes
        assert [n.path for n in main_nodes] == ["/entities/dana-weber"]
        assert len(branch_nodes) == 4
    finally:
        services.close()


def test_an_unknown_branch_or_unreadable_file_is_one_line(env):
    missing = _import(env / "nope.jsonl")
    assert missing.exit_code == 1 and missing.output.startswith("error: cannot read")
    unknown = _import(_write(env, SAMPLE), "--branch", "no-such-branch")
    assert unknown.exit_code == 1 and len(unknown.output.strip().splitlines()) == 1
    assert "no-such-branch" in unknown.output
