"""Copy-on-write branches in the store, on both databases."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from kg.errors import Conflict, InvalidInput, NotFound
from kg.store import nodes, relations
from kg.store.models import Branch, NodeVersion, RelationVersion
from kg.store.nodes import NodeWrite
from kg.store.repos import (
    begin_write,
    branch_view,
    create_branch,
    create_repository,
    create_workspace,
    get_branch,
    get_repository,
)


@pytest.fixture
def db(services):
    with services.db.write() as s:
        repo = create_repository(s, name="r")
        create_workspace(s, repo, name="w")
    return services.db


def write(db, branch, path, title, **kw):
    with db.write() as s:
        ctx = begin_write(s, "r", branch)
        version, _ = nodes.put_node(s, ctx, "w", path, NodeWrite("t", {"title": title}, None, None), **kw)
        return ctx.revision


def read(db, branch, path, at=None):
    with db.read() as s:
        found = nodes.find_node(s, branch_view(s, "r", branch, at_revision=at), "w", path)
        return None if found is None else found.properties["title"]


def test_branch_creation_copies_nothing(db):
    for i in range(20):
        write(db, "main", f"/n{i}", str(i))
    with db.read() as s:
        before = s.scalar(select(func.count()).select_from(NodeVersion))
    with db.write() as s:
        create_branch(s, get_repository(s, "r", lock=True), name="agent/x")
    with db.read() as s:
        assert s.scalar(select(func.count()).select_from(NodeVersion)) == before
        assert s.scalar(select(func.count()).select_from(Branch)) == 2
    assert read(db, "agent/x", "/n7") == "7"


def test_revisions_increase_and_time_travel(db):
    r1 = write(db, "main", "/a", "one")
    r2 = write(db, "main", "/a", "two")
    assert r2 == r1 + 1
    assert read(db, "main", "/a", at=r1) == "one"
    assert read(db, "main", "/a") == "two"
    assert read(db, "main", "/a", at=0) is None


def test_tombstones_do_not_leak_to_parent_or_sibling(db):
    write(db, "main", "/a", "main")
    with db.write() as s:
        repo = get_repository(s, "r", lock=True)
        create_branch(s, repo, name="left")
        create_branch(s, repo, name="right")
    with db.write() as s:
        ctx = begin_write(s, "r", "left")
        nodes.delete_node(s, ctx, "w", "/a")
    assert read(db, "left", "/a") is None
    assert read(db, "main", "/a") == "main"
    assert read(db, "right", "/a") == "main"
    write(db, "left", "/a", "recreated")
    assert read(db, "left", "/a") == "recreated"
    assert read(db, "right", "/a") == "main"


def test_write_failure_leaves_nothing(db):
    with pytest.raises(NotFound):
        with db.write() as s:
            ctx = begin_write(s, "r", "main")
            nodes.put_node(s, ctx, "w", "/ok", NodeWrite("t", {}, None, None))
            nodes.put_node(s, ctx, "w", "/missing/child", NodeWrite("t", {}, None, None))
    assert read(db, "main", "/ok") is None
    with db.read() as s:
        assert get_repository(s, "r").head_revision == 0


def test_relations_hidden_with_deleted_endpoint_only_on_that_branch(db):
    write(db, "main", "/a", "a")
    write(db, "main", "/b", "b")
    with db.write() as s:
        ctx = begin_write(s, "r", "main")
        _, created = relations.relate(s, ctx, "w:/a", "w:/b", "links", weight=2.0)
        assert created
    with db.write() as s:
        create_branch(s, get_repository(s, "r", lock=True), name="br")
    with db.write() as s:
        nodes.delete_node(s, begin_write(s, "r", "br"), "w", "/b")
    with db.read() as s:
        assert len(relations.visible_relations(s, branch_view(s, "r", "main"))) == 1
        assert relations.visible_relations(s, branch_view(s, "r", "br")) == []
        # main's edge row is untouched; the delete on br wrote one tombstone of it, on br.
        rows = s.execute(select(RelationVersion.branch_id, RelationVersion.deleted)
                         .order_by(RelationVersion.id)).all()
        br = get_branch(s, get_repository(s, "r"), "br")
        assert [(b == br.id, d) for b, d in rows] == [(False, False), (True, True)]


def test_a_node_created_again_at_its_path_is_that_node_without_its_old_edges(db):
    """The id is the address's; the delete removed the edges, so re-creation starts clean."""
    write(db, "main", "/a", "a")
    write(db, "main", "/b", "b")
    with db.write() as s:
        relations.relate(s, begin_write(s, "r", "main"), "w:/a", "w:/b", "links")
    with db.read() as s:
        first = nodes.get_node(s, branch_view(s, "r", "main"), "w", "/b").node_id
    with db.write() as s:
        nodes.delete_node(s, begin_write(s, "r", "main"), "w", "/b")
    write(db, "main", "/b", "b again")
    with db.read() as s:
        view = branch_view(s, "r", "main")
        assert nodes.get_node(s, view, "w", "/b").node_id == first
        assert relations.visible_relations(s, view) == []


def test_invalid_names_and_revisions(db):
    with db.write() as s:
        repo = get_repository(s, "r", lock=True)
        with pytest.raises(InvalidInput):
            create_branch(s, repo, name="a//b")
        with pytest.raises(NotFound):  # a revision not written yet
            create_branch(s, repo, name="x", at_revision=5)
        with pytest.raises(InvalidInput):
            create_branch(s, repo, name="x", at_revision=-1)
        with pytest.raises(Conflict):
            create_branch(s, repo, name="main")


@pytest.mark.parametrize("prefix", [None, "/docs"])
def test_visible_node_heads_are_the_visible_nodes_columns(db, prefix):
    """Search reads the searchable nodes as seven columns (no ORM instance per node); they are
    exactly the visible versions' columns (the version's id too, by which search reads its hits'
    properties), on a branch that replaced, deleted and added nodes, at its head and as of its
    fork."""
    for path in ("/docs", "/docs/a", "/docs/b", "/docs/c", "/other"):
        write(db, "main", path, path)
    with db.write() as s:
        create_branch(s, get_repository(s, "r", lock=True), name="agent/x")
    write(db, "agent/x", "/docs/a", "changed")
    write(db, "agent/x", "/docs/d", "added")
    with db.write() as s:
        ctx = begin_write(s, "r", "agent/x")
        nodes.delete_node(s, ctx, "w", "/docs/b")
    write(db, "main", "/docs/e", "after the fork")
    with db.read() as s:
        for branch, at in (("agent/x", None), ("agent/x", 5), ("main", None)):
            view = branch_view(s, "r", branch, at_revision=at)
            full = nodes.visible_nodes(s, view, path_prefix=prefix)
            heads = nodes.visible_node_heads(s, view, path_prefix=prefix)
            expect = sorted((n.node_id, n.workspace_id, n.branch_id, n.path, n.node_type, n.content_key, n.id)
                            for n in full)
            assert sorted(tuple(h) for h in heads) == expect and expect
            assert {h.path for h in heads} >= {"/docs/a"}
    with db.read() as s:
        paths = {h.path for h in nodes.visible_node_heads(s, branch_view(s, "r", "agent/x"), path_prefix=prefix)}
    assert paths == {"/docs", "/docs/a", "/docs/c", "/docs/d"} | (set() if prefix else {"/other"})
