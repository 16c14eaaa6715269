"""``kg.ops.memory``: the MCP memory server's JSONL graph as a use case, on both databases."""

from __future__ import annotations

import json

import pytest

from kg.context import OPERATOR, run
from kg.errors import Conflict, InvalidInput
from kg.ops import queries
from kg.ops.memory import import_memory_jsonl, parse_memory_jsonl, relation_type
from kg.ops.nodes import put_node
from kg.rag.graph import neighbors

LINES = "\n".join(json.dumps(r) for r in [
    {"type": "entity", "name": "Dana Weber", "entityType": "person", "observations": ["Rigger at Acme"]},
    {"type": "entity", "name": "Acme Marine", "entityType": "organization", "observations": []},
    {"type": "relation", "from": "Dana Weber", "to": "Acme Marine", "relationType": "works at"},
    {"type": "relation", "from": "Dana Weber", "to": "Acme Marine", "relationType": "works at"},
]) + "\n"


def test_one_revision_then_none_and_the_relation_type_is_made_a_kg_type(services):
    first = run(services, OPERATOR, import_memory_jsonl, "mem", "main", LINES)
    assert (first.revision, first.nodes_written, first.relations_written) == (1, 2, 1)
    assert first.relations == 1  # the duplicate record is one relation
    again = run(services, OPERATOR, import_memory_jsonl, "mem", "main", LINES)
    assert again.revision is None and again.unchanged is True
    assert [r.revision for r in queries.revision_log(services, OPERATOR, "mem", "main").revisions] == [1]
    out = neighbors(services, OPERATOR, "mem", "main", "memory:/entities/dana-weber", direction="OUT")
    (edge,) = out["neighbors"]
    assert (edge["path"], edge["relation_type"]) == ("/entities/acme-marine", "works_at")
    assert edge["properties"] == {"memory_relation_type": "works at"}


def test_a_node_of_another_type_at_an_entity_path_is_a_conflict_and_nothing_is_written(services):
    run(services, OPERATOR, import_memory_jsonl, "mem", "main", LINES.splitlines()[1] + "\n")
    run(services, OPERATOR, put_node, "mem", "main", "memory", "/entities/dana-weber", node_type="kb:Doc",
        properties={"content": "not an entity"})
    with pytest.raises(Conflict, match="line 1: memory:/entities/dana-weber is a kb:Doc"):
        run(services, OPERATOR, import_memory_jsonl, "mem", "main", LINES)
    assert len(queries.revision_log(services, OPERATOR, "mem", "main").revisions) == 2


def test_an_extracted_entity_keeps_its_aliases(services):
    run(services, OPERATOR, import_memory_jsonl, "mem", "main", LINES)
    run(services, OPERATOR, put_node, "mem", "main", "memory", "/entities/acme-marine", node_type="kg:Entity",
        properties={"name": "Acme Marine", "entity_type": "organization", "aliases": ["Acme"]})
    run(services, OPERATOR, import_memory_jsonl, "mem", "main", LINES)
    node = queries.get_node(services, OPERATOR, "mem", "main", "memory", "/entities/acme-marine")
    assert node.properties["aliases"] == ["Acme"] and node.properties["observations"] == []


def test_c_and_cpp_are_two_entities_at_the_paths_extraction_gives_them(services):
    """Entity paths follow ``extract-entities``' rule: "C" and "C++" were one path before."""
    lines = "\n".join(json.dumps({"type": "entity", "name": n, "entityType": "product", "observations": []})
                      for n in ("C", "C++")) + "\n"
    out = run(services, OPERATOR, import_memory_jsonl, "mem", "main", lines)
    assert out.nodes_written == 2
    for path, name in (("/entities/c", "C"), ("/entities/c-plus-plus", "C++")):
        node = queries.get_node(services, OPERATOR, "mem", "main", "memory", path)
        assert node.properties["name"] == name


@pytest.mark.parametrize(("given", "expected"), [
    ("works_at", "works_at"), ("works at", "works_at"), ("is a fan of!", "is_a_fan_of_"), ("2nd", "_2nd"),
    ("schema:knows", "schema:knows"), ("über", "_ber"),
])
def test_relation_types(given, expected):
    assert relation_type(given) == expected


def test_parse_refuses_with_the_line_and_skips_blank_lines():
    assert parse_memory_jsonl("\n\n").entities == []
    with pytest.raises(InvalidInput, match=r"^line 2: entity name '\.\.' has no letter or digit"):
        parse_memory_jsonl('\n{"type": "entity", "name": "..", "entityType": "x", "observations": []}\n')
    with pytest.raises(InvalidInput) as raised:
        parse_memory_jsonl('{"type": "entity"}')
    assert raised.value.details == {"line": 1}
