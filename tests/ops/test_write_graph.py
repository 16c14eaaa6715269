"""``kg.ops.nodes.write_graph`` (the write path of memory import, extraction and stored answers):
parents are written before their children whatever order the plan lists them in; on both
databases."""

from __future__ import annotations

from kg.context import OPERATOR, run
from kg.ops import queries
from kg.ops import repos as repo_ops
from kg.ops.nodes import GraphWrite, write_graph


def test_a_parent_listed_after_its_child_is_written_as_given_in_one_version(services):
    """A child listed before its parent made the parent a kg:Folder (``parents``), then the
    parent's own upsert a second version at the same revision."""
    run(services, OPERATOR, repo_ops.create_repository, "acme")
    run(services, OPERATOR, repo_ops.create_workspace, "acme", "w")
    upserts = [
        {"workspace": "w", "path": "/p/c/leaf", "node_type": "kb:Doc", "properties": {"content": "leaf"}},
        {"workspace": "w", "path": "/p/c", "node_type": "kb:Chapter", "properties": {"title": "chapter"}},
        {"workspace": "w", "path": "/p", "node_type": "kb:Book", "properties": {"title": "book"}},
    ]
    relations = [{"from": "w:/p/c/leaf", "to": "w:/p", "type": "part_of"}]
    out = run(services, OPERATOR, write_graph, "acme", "main",
              lambda session, view: GraphWrite(upserts=upserts, relations=relations))
    assert [n.path for n in out.upserted] == ["/p/c/leaf", "/p/c", "/p"]  # answered in the order given
    assert out.related == 1
    for item in upserts:
        node = queries.get_node(services, OPERATOR, "acme", "main", "w", item["path"])
        assert (node.node_type, node.properties) == (item["node_type"], item["properties"])
        versions = queries.node_history(services, OPERATOR, "acme", "main", "w", item["path"])
        assert [v.revision for v in versions] == [out.revision], (item["path"], versions)


def test_a_plan_that_names_one_path_twice_is_refused_and_writes_nothing(services):
    """A plan naming one path twice (here in NFC and NFD spellings) wrote two versions of one
    node at one revision; it is an InvalidInput naming both items, and nothing is written."""
    import unicodedata

    import pytest

    from kg.errors import InvalidInput, NotFound

    run(services, OPERATOR, repo_ops.create_repository, "acme")
    run(services, OPERATOR, repo_ops.create_workspace, "acme", "w")
    upserts = [
        {"workspace": "w", "path": "/caf\u00e9", "properties": {"v": 1}},
        {"workspace": "w", "path": "/other", "properties": {"v": 2}},
        {"workspace": "w", "path": unicodedata.normalize("NFD", "/caf\u00e9"), "properties": {"v": 3}},
    ]
    with pytest.raises(InvalidInput) as caught:
        run(services, OPERATOR, write_graph, "acme", "main", lambda session, view: GraphWrite(upserts=upserts))
    assert caught.value.details == {"field": "upserts", "workspace": "w", "path": "/caf\u00e9",
                                    "items": ["upserts[0]", "upserts[2]"]}
    for path in ("/caf\u00e9", "/other"):
        with pytest.raises(NotFound):
            queries.get_node(services, OPERATOR, "acme", "main", "w", path)
