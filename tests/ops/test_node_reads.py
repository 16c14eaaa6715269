"""``kg.ops.queries``' reads of one node for the console: its history (the revisions that wrote
it in a branch's history), its chunks, and a page of children with whether each has children;
on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from kg.access import Actor, make_grant
from kg.context import OPERATOR, run
from kg.errors import InvalidInput, NotFound
from kg.ops import queries, repos
from kg.ops.branches import create_branch
from kg.ops.nodes import delete_node, patch_node, put_node

KB_READER = Actor("key", "kb-reader", "0123456789abcdef", (make_grant("acme", ("*",), ("kb",), ("read",)),))


def _repo(services) -> None:
    run(services, OPERATOR, repos.create_repository, "acme")
    run(services, OPERATOR, repos.create_workspace, "acme", "kb")
    run(services, OPERATOR, repos.create_workspace, "acme", "other")


def test_node_history_lists_the_revisions_that_wrote_the_node_newest_first(services):
    _repo(services)
    r1 = run(services, OPERATOR, put_node, "acme", "main", "kb", "/a", node_type="kb:Doc",
             properties={"title": "one"}, message="create a", actor="alice")[0].revision
    run(services, OPERATOR, put_node, "acme", "main", "kb", "/b", node_type="kb:Doc", properties={})
    r3 = run(services, OPERATOR, patch_node, "acme", "main", "kb", "/a", properties={"title": "two"},
             message="retitle", actor="bob").revision
    history = queries.node_history(services, OPERATOR, "acme", "main", "kb", "/a")
    assert [(h.revision, h.actor, h.message, h.op, h.branch) for h in history] == [
        (r3, "bob", "retitle", "put", "main"), (r1, "alice", "create a", "put", "main")]
    # as of an older revision: only what was written by then
    assert [h.revision for h in queries.node_history(services, OPERATOR, "acme", "main", "kb", "/a",
                                                         at_revision=r1)] == [r1]
    assert [h.revision for h in queries.node_history(services, OPERATOR, "acme", "main", "kb", "/a",
                                                         limit=1)] == [r3]
    # a deleted node keeps its history, its tombstone first
    r4 = run(services, OPERATOR, delete_node, "acme", "main", "kb", "/a").revision
    assert [(h.revision, h.op) for h in queries.node_history(services, OPERATOR, "acme", "main", "kb", "/a")] \
        == [(r4, "delete"), (r3, "put"), (r1, "put")]
    assert queries.node_history(services, OPERATOR, "acme", "main", "kb", "/never") == []


def test_node_history_on_a_branch_is_its_own_then_its_parents_up_to_the_fork(services):
    _repo(services)
    r1 = run(services, OPERATOR, put_node, "acme", "main", "kb", "/a", node_type="kb:Doc",
             properties={"title": "one"})[0].revision
    run(services, OPERATOR, create_branch, "acme", name="agent/s1", from_branch="main")
    r2 = run(services, OPERATOR, patch_node, "acme", "agent/s1", "kb", "/a", properties={"title": "two"},
             message="on the branch").revision
    r3 = run(services, OPERATOR, patch_node, "acme", "main", "kb", "/a",
             properties={"other": 1}).revision  # on main after the fork: not in the branch's history
    on_branch = queries.node_history(services, OPERATOR, "acme", "agent/s1", "kb", "/a")
    assert [(h.revision, h.branch) for h in on_branch] == [(r2, "agent/s1"), (r1, "main")]
    assert [h.revision for h in queries.node_history(services, OPERATOR, "acme", "main", "kb", "/a")] == [r3, r1]


def test_node_history_refuses_a_workspace_the_caller_cannot_read_and_bad_input(services):
    _repo(services)
    run(services, OPERATOR, put_node, "acme", "main", "other", "/s", node_type="kb:Doc", properties={})
    with pytest.raises(NotFound):
        queries.node_history(services, KB_READER, "acme", "main", "other", "/s")
    assert queries.node_history(services, KB_READER, "acme", "main", "kb", "/s") == []
    with pytest.raises(NotFound):
        queries.node_history(services, OPERATOR, "acme", "main", "nope", "/s")
    with pytest.raises(InvalidInput):
        queries.node_history(services, OPERATOR, "acme", "main", "kb", "no-slash")
    with pytest.raises(InvalidInput):
        queries.node_history(services, OPERATOR, "acme", "main", "kb", "/s", limit=0)


def test_node_chunks_are_the_passages_of_the_node_by_index_with_their_model(services):
    _repo(services)
    body = "Keys rotate in three steps. " * 60
    run(services, OPERATOR, put_node, "acme", "main", "kb", "/a", node_type="kb:Doc",
        properties={"title": "Rotation", "body": body})
    out = queries.node_chunks(services, OPERATOR, "acme", "main", "kb", "/a")
    assert out.pending is False and out.content_key
    chunks = out.chunks
    assert [c.chunk_index for c in chunks] == list(range(len(chunks))) and len(chunks) >= 2
    assert {c.model for c in chunks} == {services.settings.embedding_model}
    assert {c.field for c in chunks} == {"title", "body"}
    assert any(c.text == "Rotation" for c in chunks)
    run(services, OPERATOR, put_node, "acme", "main", "kb", "/empty", node_type="kb:Doc", properties={"n": 1})
    assert queries.node_chunks(services, OPERATOR, "acme", "main", "kb", "/empty").as_json() == {
        "content_key": None, "pending": False, "chunks": []}
    with pytest.raises(NotFound):
        queries.node_chunks(services, OPERATOR, "acme", "main", "kb", "/nope")


def test_tree_page_keeps_the_order_pages_by_cursor_and_says_who_has_children(services):
    _repo(services)
    for name, order in (("c", 2.0), ("a", 1.0), ("b", None), ("d", None)):
        run(services, OPERATOR, put_node, "acme", "main", "kb", f"/{name}", node_type="kb:Doc", properties={},
            order=order)
    run(services, OPERATOR, put_node, "acme", "main", "kb", "/b/x", node_type="kb:Doc", properties={})
    first = queries.tree_page(services, OPERATOR, "acme", "main", "kb", "/", limit=2)
    assert [(n.name, n.has_children) for n in first.nodes] == [("a", False), ("c", False)]
    assert first.next_cursor is not None
    # the listing's page: the same children, without has_children (its HTTP shape)
    plain = queries.children_page(services, OPERATOR, "acme", "main", "kb", "/", limit=2)
    assert [n.name for n in plain.nodes] == ["a", "c"] and "has_children" not in plain.as_json()["nodes"][0]
    # a child written before the cursor's place between two pages does not shift the next one
    run(services, OPERATOR, put_node, "acme", "main", "kb", "/0", node_type="kb:Doc", properties={}, order=0.5)
    second = queries.tree_page(services, OPERATOR, "acme", "main", "kb", "/", limit=2, cursor=first.next_cursor)
    assert [(n.name, n.has_children) for n in second.nodes] == [("b", True), ("d", False)]
    assert second.next_cursor is None
    with pytest.raises(InvalidInput):
        queries.tree_page(services, OPERATOR, "acme", "main", "kb", "/", cursor="not-a-cursor")
    with pytest.raises(InvalidInput):
        queries.tree_page(services, OPERATOR, "acme", "main", "kb", "/", limit=0)
    with pytest.raises(NotFound):
        queries.tree_page(services, KB_READER, "acme", "main", "other", "/")
