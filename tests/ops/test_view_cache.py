"""The branch view cache (kg.store.repos.ViewCache) and search's hit properties.

Every read goes through the cache (kg.context.reading); a write that changes what a view holds
(a revision, a branch created, deleted or reset, a workspace created, a merge) must be seen by
the next read, in the same process and in another one: two Services objects on one database
stand for two servers. The hits' properties, read by version id, must be what the view's
window query (nodes_by_id) gives, on a branch with overrides and tombstones. Both databases.
"""

from __future__ import annotations

import pytest

from kg.context import OPERATOR, reading, run
from kg.errors import NotFound
from kg.index.embedded import EmbeddedVectorIndex
from kg.ops.branches import create_branch, delete_branch, reset_branch
from kg.ops.merge import merge_branch
from kg.ops.nodes import delete_node, put_node
from kg.ops.queries import get_node
from kg.ops.repos import create_repository, create_workspace
from kg.providers.registry import make_embedder
from kg.rag.search import SearchRequest, search_branch
from kg.services import Services
from kg.store.db import Database
from kg.store.nodes import node_properties_by_id, nodes_by_id


@pytest.fixture
def pair(services):
    """The test's services and a second Services object on the same database (another server)."""
    settings = services.settings
    other = Services(settings=settings, db=Database(settings.resolved_database_url()),
                     index=EmbeddedVectorIndex(settings.data_dir.parent / "other-index"),
                     embedder_factory=lambda name: make_embedder(name, allow_fake=True))
    run(services, OPERATOR, create_repository, "r")
    run(services, OPERATOR, create_workspace, "r", "kb")
    run(services, OPERATOR, put_node, "r", "main", "kb", "/a", node_type="t", properties={"v": 1})
    yield services, other
    other.close()


def _view(services, branch="main"):
    with reading(services, OPERATOR, "r", branch) as (_, view):
        return view


def _warm(*all_services, branch="main"):
    for services in all_services:
        _view(services, branch)


def test_a_read_is_answered_from_the_cache_until_a_write(pair):
    one, _ = pair
    first = _view(one)
    hits = one.views.hits
    again = _view(one)
    assert again is first and one.views.hits == hits + 1
    run(one, OPERATOR, put_node, "r", "main", "kb", "/b", node_type="t", properties={})
    after = _view(one)
    assert after is not first and after.revision == first.revision + 1


def test_a_write_on_a_branch_is_seen_by_the_next_read_of_either_server(pair):
    one, other = pair
    run(one, OPERATOR, create_branch, "r", name="b")
    _warm(one, other, branch="b")
    before = _view(other, "b").revision
    run(one, OPERATOR, put_node, "r", "b", "kb", "/a", node_type="t", properties={"v": 2})
    for services in (one, other):
        assert _view(services, "b").revision == before + 1
        assert get_node(services, OPERATOR, "r", "b", "kb", "/a").properties == {"v": 2}
    assert get_node(other, OPERATOR, "r", "main", "kb", "/a").properties == {"v": 1}


def test_a_branch_created_or_deleted_by_one_server_is_seen_by_the_other(pair):
    one, other = pair
    _warm(one, other)
    run(other, OPERATOR, create_branch, "r", name="b")
    assert _view(one, "b").branch.name == "b"  # no revision was written: the layout counter says it
    _warm(one, other, branch="b")
    run(one, OPERATOR, delete_branch, "r", "b")
    for services in (one, other):
        with pytest.raises(NotFound):
            _view(services, "b")
    run(other, OPERATOR, create_branch, "r", name="b")  # created again: a new branch id
    assert _view(one, "b").branch.id != _view(one).branch.id


def test_a_workspace_created_by_one_server_is_seen_by_the_other(pair):
    one, other = pair
    _warm(one, other)
    run(one, OPERATOR, create_workspace, "r", "notes")
    assert sorted(_view(other).workspaces.values()) == ["kb", "notes"]
    run(other, OPERATOR, put_node, "r", "main", "notes", "/n", node_type="t", properties={"x": 1})
    assert get_node(one, OPERATOR, "r", "main", "notes", "/n").properties == {"x": 1}


def test_a_merge_and_a_reset_are_seen_by_the_other_server(pair):
    one, other = pair
    run(one, OPERATOR, create_branch, "r", name="b")
    run(one, OPERATOR, put_node, "r", "b", "kb", "/c", node_type="t", properties={"on": "b"})
    _warm(one, other)
    _warm(one, other, branch="b")
    run(other, OPERATOR, merge_branch, "r", "b", "main")
    assert get_node(one, OPERATOR, "r", "main", "kb", "/c").properties == {"on": "b"}
    run(one, OPERATOR, put_node, "r", "main", "kb", "/d", node_type="t", properties={})
    run(one, OPERATOR, put_node, "r", "b", "kb", "/e", node_type="t", properties={})
    _warm(one, other, branch="b")
    before = _view(other, "b")
    run(one, OPERATOR, reset_branch, "r", "b")  # forked again at the repository's head: no revision
    view = _view(other, "b")
    assert view.repo.head_revision == before.repo.head_revision
    assert view.branch.base_revision == view.repo.head_revision != before.branch.base_revision
    with pytest.raises(NotFound):
        get_node(other, OPERATOR, "r", "b", "kb", "/e")
    assert get_node(other, OPERATOR, "r", "b", "kb", "/d").path == "/d"


def test_a_view_is_scoped_per_caller_though_shared(pair):
    from kg.access import Actor, Grant

    one, _ = pair
    run(one, OPERATOR, create_workspace, "r", "notes")
    whole = _view(one)
    reader = Actor(kind="key", name="reader", key_id="1", grants=(Grant(repo="r", workspaces=("notes",)),))
    with reading(one, reader, "r") as (_, scoped):
        assert scoped.readable == frozenset(w for w, n in whole.workspaces.items() if n == "notes")
    assert _view(one).readable is None  # the cached view is not the reader's


def test_at_revision_reads_are_checked_against_the_cached_head(pair):
    one, _ = pair
    head = _view(one).revision
    with reading(one, OPERATOR, "r", "main", at_revision=head) as (_, view):
        assert view.revision == head
    with pytest.raises(NotFound):
        with reading(one, OPERATOR, "r", "main", at_revision=head + 1):
            pass


def test_hit_properties_are_what_the_window_query_gives_on_a_branch(pair):
    one, _ = pair
    for i in range(6):
        run(one, OPERATOR, put_node, "r", "main", "kb", f"/p{i}", node_type="t",
            properties={"content": f"whale sea number {i}", "i": i})
    run(one, OPERATOR, create_branch, "r", name="b")
    run(one, OPERATOR, put_node, "r", "b", "kb", "/p1", node_type="t",   # an override on the branch
        properties={"content": "whale sea number 1 again", "i": 10})
    run(one, OPERATOR, delete_node, "r", "b", "kb", "/p2")                # a tombstone
    run(one, OPERATOR, put_node, "r", "main", "kb", "/p3", node_type="t",  # after the fork: not on b
        properties={"content": "whale sea number 3 later", "i": 30})
    for branch, mode in (("b", "vector"), ("b", "fulltext"), ("b", "hybrid"), ("main", "vector")):
        answer = search_branch(one, OPERATOR, "r", branch, SearchRequest(query="whale sea", k=10, mode=mode))
        with reading(one, OPERATOR, "r", branch) as (session, view):
            ids = [r.node_id for r in answer.results]
            expected = {nid: v.properties for nid, v in nodes_by_id(session, view, ids).items()}
            assert node_properties_by_id(session, view, ids) == expected
        assert {r.node_id: r.properties for r in answer.results} == expected
        got = {r.path: r.properties["i"] for r in answer.results}
        if branch == "b":
            assert got["/p1"] == 10 and got["/p3"] == 3 and "/p2" not in got
        else:
            assert got["/p1"] == 1 and got["/p3"] == 30 and "/p2" in got


def test_a_workspace_config_set_by_one_server_is_seen_by_the_other(pair):
    """A config is set without a revision (relation types here, a re-embed's model there): the
    views carry the configs, so the layout counter must move."""
    from kg.ops.relations import set_relation_types
    from kg.store.relations import SINGLE_VALUED_KEY

    one, other = pair
    _warm(one, other)
    before = _view(other)
    wid = next(w for w, name in before.workspaces.items() if name == "kb")
    assert SINGLE_VALUED_KEY not in before.workspace_configs[wid]
    run(one, OPERATOR, set_relation_types, "r", "kb", ["owned_by"])
    for services in (one, other):
        after = _view(services)
        assert after.repo.head_revision == before.repo.head_revision  # no revision written
        assert after.repo.layout_version > before.repo.layout_version
        assert after.workspace_configs[wid][SINGLE_VALUED_KEY] == ["owned_by"]


def test_a_search_catches_up_with_chunks_another_server_wrote_and_reads_none_when_there_are_none(pair):
    """The view's check reads the repository's highest chunk seq: a search whose index holds it
    reads no chunk page; one whose index lags reads the new chunks and finds the node."""
    from sqlalchemy import event

    one, other = pair
    request = SearchRequest(query="narwhal tusk", k=5, mode="fulltext")
    assert search_branch(other, OPERATOR, "r", "main", request).results == []
    statements: list[str] = []
    event.listen(other.db.engine, "before_cursor_execute",
                 lambda conn, cursor, statement, *rest: statements.append(statement))
    search_branch(other, OPERATOR, "r", "main", request)
    assert not [s for s in statements if "FROM chunks" in s]  # the index holds every chunk
    run(one, OPERATOR, put_node, "r", "main", "kb", "/narwhal", node_type="t",
        properties={"content": "the narwhal has a long tusk"})
    statements.clear()
    answer = search_branch(other, OPERATOR, "r", "main", request)
    assert [r.path for r in answer.results] == ["/narwhal"]
    assert [s for s in statements if "FROM chunks" in s]  # the new chunk was read


def test_hit_properties_read_on_the_driver_keep_every_json_value(pair):
    """Hit properties are decoded from the driver's value: integers past 64 bits, floats, nesting
    and unicode come back as the node was written."""
    one, _ = pair
    properties = {"content": "walrus ivory", "big": 2**70, "negative": -(2**65) + 3, "edge": 2**63,
                  "float": 1.5, "whole_float": 2.0**64, "nested": {"list": [1, 2**80, "é", None, True]}}
    run(one, OPERATOR, put_node, "r", "main", "kb", "/walrus", node_type="t", properties=properties)
    for mode in ("fulltext", "vector"):
        answer = search_branch(one, OPERATOR, "r", "main", SearchRequest(query="walrus ivory", k=3, mode=mode))
        got = next(r.properties for r in answer.results if r.path == "/walrus")
        assert got == properties
        assert type(got["big"]) is int and type(got["whole_float"]) is float


def test_the_change_counter_moves_with_every_commit_of_any_connection(pair):
    """SQLite's data_version read by the sentinel moves with a commit of this server, of another
    one, and of a plain connection; PostgreSQL has none (reads check the database)."""
    one, other = pair
    first = one.db.data_version()
    if one.db.dialect != "sqlite":
        assert first is None
        return
    assert isinstance(first, int) and one.db.data_version() == first  # nothing committed
    run(one, OPERATOR, put_node, "r", "main", "kb", "/c1", node_type="t", properties={})
    second = one.db.data_version()
    assert second != first
    run(other, OPERATOR, put_node, "r", "main", "kb", "/c2", node_type="t", properties={})
    third = one.db.data_version()
    assert third != second
    _view(one)  # a read commits nothing
    assert one.db.data_version() == third


def test_a_read_of_an_unchanged_store_opens_no_connection_on_sqlite(pair):
    """With the counter unmoved, the view is answered from the cache before the session needs a
    connection; a write (by either server) makes the next read check the database again."""
    from sqlalchemy import event

    one, other = pair
    checkouts: list[int] = []
    event.listen(one.db.engine, "checkout", lambda *args: checkouts.append(1))
    _warm(one)
    _warm(one)  # the first read after a change checks; from here the counter is unmoved
    checkouts.clear()
    view = _view(one)
    assert checkouts == ([] if one.db.dialect == "sqlite" else [1])
    run(other, OPERATOR, put_node, "r", "main", "kb", "/seen", node_type="t", properties={"by": "other"})
    checkouts.clear()
    after = _view(one)
    assert checkouts == [1] and after.revision == view.revision + 1
    assert get_node(one, OPERATOR, "r", "main", "kb", "/seen").properties == {"by": "other"}


def test_neighbors_from_a_held_view_of_an_unchanged_store_makes_no_session_on_sqlite(pair):
    """A read answered from what the process holds (the cached view under an unmoved change
    counter, a held graph view) never makes a session (kg.store.db.Database.read_lazily); the
    answer is the one read from SQL. A search's hit properties are read on SQLite on a pooled
    connection without a session, and are what a session reads."""
    from kg.ops.relations import relate
    from kg.rag import graph as graph_ops

    one, _ = pair
    run(one, OPERATOR, put_node, "r", "main", "kb", "/b", node_type="t", properties={"v": 2})
    run(one, OPERATOR, relate, "r", "main", "kb:/a", "kb:/b", "cites", weight=0.5)
    from_sql = graph_ops.neighbors(one, OPERATOR, "r", "main", "kb:/a").copy()
    with one.db.read() as session:
        assert graph_ops.warm_graph(session, one, _view(one))
    made: list[int] = []
    reader = one.db._reader

    def counted():
        made.append(1)
        return reader()

    one.db._reader = counted
    try:
        _warm(one)
        made.clear()
        answer = graph_ops.neighbors(one, OPERATOR, "r", "main", "kb:/a")
        assert answer["neighbors"] == from_sql["neighbors"] and [r["path"] for r in answer["neighbors"]] == ["/b"]
        assert made == ([] if one.db.dialect == "sqlite" else [1])
        # a search reads its hits' properties: on SQLite on a pooled connection of the read's
        # own (no session, back in the pool after), on PostgreSQL in a session
        run(one, OPERATOR, put_node, "r", "main", "kb", "/text", node_type="t",
            properties={"title": "Alpha", "content": "alpha beta gamma", "n": 2**70})
        search_branch(one, OPERATOR, "r", "main", SearchRequest(query="alpha", k=5))  # the index catches up
        _warm(one)
        made.clear()
        answer = search_branch(one, OPERATOR, "r", "main",
                               SearchRequest(query="alpha", k=5, mode="fulltext", granularity="node"))
        assert [(r.path, r.properties, r.title) for r in answer.results] == [
            ("/text", {"title": "Alpha", "content": "alpha beta gamma", "n": 2**70}, "Alpha")]
        assert made == ([] if one.db.dialect == "sqlite" else [1])
        assert one.db.engine.pool.checkedout() == 0
        if one.db.dialect == "sqlite":  # the read's connection is idle again, with no transaction open
            drivers = one.db._drivers
            assert len(drivers) == 1 and not drivers._idle[0].in_transaction
            held = drivers._idle[0]
            search_branch(one, OPERATOR, "r", "main", SearchRequest(query="alpha", k=5, mode="fulltext"))
            assert drivers._idle == [held]  # taken and given back: one connection serves the reads
    finally:
        one.db._reader = reader


def test_a_read_on_an_idle_driver_connection_sees_the_latest_commit(pair):
    """The driver statements of a lazy read run in autocommit on a connection kept idle between
    reads: a node rewritten by either server since is read as it is now, never as an idle
    connection's old snapshot."""
    one, other = pair
    request = SearchRequest(query="walrus", k=3, mode="fulltext")
    run(one, OPERATOR, put_node, "r", "main", "kb", "/w", node_type="t", properties={"content": "walrus", "v": 1})
    assert [r.properties["v"] for r in search_branch(one, OPERATOR, "r", "main", request).results] == [1]
    for writer, value in ((other, 2), (one, 3), (other, 4)):
        run(writer, OPERATOR, put_node, "r", "main", "kb", "/w", node_type="t",
            properties={"content": "walrus", "v": value})
        for reader in (one, other):
            assert [r.properties["v"] for r in search_branch(reader, OPERATOR, "r", "main", request).results] == [value]


def test_a_lazy_read_session_carries_what_was_noted_before_it_was_made(services):
    with services.db.read_lazily() as session:
        session.info["noted"] = 1
        assert session.info == {"noted": 1}
        assert session.connection() is not None  # made here
        assert session.info["noted"] == 1
        session.info["after"] = 2
        assert session.info == {"noted": 1, "after": 2}
    with services.db.read_lazily() as session:  # never used: closed without being made
        session.info["only"] = True


def test_a_write_by_another_process_is_seen_by_the_next_read(services, tmp_path):
    """A real second process writes the SQLite file: the counter moves, the cached view does not
    answer the next read."""
    import subprocess
    import sys
    import textwrap

    if services.db.dialect != "sqlite":
        pytest.skip("the change counter is SQLite's")
    run(services, OPERATOR, create_repository, "r")
    run(services, OPERATOR, create_workspace, "r", "kb")
    run(services, OPERATOR, put_node, "r", "main", "kb", "/a", node_type="t", properties={"v": 1})
    _warm(services)
    _warm(services)
    before = _view(services).revision
    script = textwrap.dedent(f"""
        from kg.context import OPERATOR, run
        from kg.ops.nodes import put_node
        from kg.services import Services
        from kg.settings import Settings
        settings = Settings(database_url={services.settings.database_url!r}, data_dir={str(tmp_path / "p2")!r},
                            embedding_model="fake:hash-384", allow_fake_embedder=True, index_inline=False)
        services = Services.from_settings(settings)
        run(services, OPERATOR, put_node, "r", "main", "kb", "/a", node_type="t", properties={{"v": 2}})
        services.close()
    """)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    assert _view(services).revision == before + 1
    assert get_node(services, OPERATOR, "r", "main", "kb", "/a").properties == {"v": 2}
