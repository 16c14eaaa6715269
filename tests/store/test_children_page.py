"""Children pages sorted by ``order`` or ``name`` in SQL agree with the Python sort of every
child (:func:`kg.store.nodes.list_children`), page by page through the cursors, on both
databases: ties, valueless children, code-point name order, re-typed and deleted children,
a branch over its parent."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kg.store import nodes
from kg.store.nodes import NodeWrite, child_order, list_children, list_children_page
from kg.store.repos import begin_write, branch_view, create_branch, create_repository, create_workspace, get_repository

# names that differ by case, accents and code points beyond ASCII (a locale collation would
# order them otherwise than Python does)
NAMES = ["a", "B", "b", "Z", "_x", "\u00e9t\u00e9", "ete", "\u00c9t\u00e9", "z1", "z10", "z2", "\u4e2d", "a-b", "a b"]
_EXAMPLES = itertools.count()
CHILD = st.tuples(st.sampled_from(NAMES), st.one_of(st.none(), st.integers(-2, 2).map(float)),
                  st.sampled_from(["kb:Section", "kb:Note"]))


@pytest.fixture
def store(services):
    with services.db.write() as s:
        repo = create_repository(s, name="r")
        create_workspace(s, repo, name="w")
    return services.db


def _write(db, branch, children, *, deleted=(), parent="/p"):
    with db.write() as s:
        ctx = begin_write(s, "r", branch)
        if nodes.find_node(s, ctx.view, "w", parent) is None:
            nodes.put_node(s, ctx, "w", parent, NodeWrite("kb:Doc", {}, None, None))
        for name, order, node_type in children:
            nodes.put_node(s, ctx, "w", f"{parent}/{name}", NodeWrite(node_type, {"n": name}, order, None))
        for name in deleted:
            if nodes.find_node(s, ctx.view, "w", f"{parent}/{name}") is not None:
                nodes.delete_node(s, ctx, "w", f"{parent}/{name}")


def _pages(db, branch, spec, node_type, limit):
    how = child_order(spec)
    with db.read() as s:
        view = branch_view(s, "r", branch)
        expected = [v.path for v in list_children(s, view, "w", "/p", order=how, node_type=node_type)]
        got, cursor, seen = [], None, 0
        while True:
            rows, cursor = list_children_page(s, view, "w", "/p", limit=limit, cursor=cursor, order=how,
                                              node_type=node_type)
            got.extend(v.path for v in rows)
            seen += 1
            if cursor is None or seen > 50:
                break
    return expected, got


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(main=st.lists(CHILD, min_size=1, max_size=12), branch=st.lists(CHILD, max_size=6),
       deleted=st.lists(st.sampled_from(NAMES), max_size=3),
       spec=st.sampled_from(["order", "-order", "name", "-name"]),
       node_type=st.sampled_from([None, "kb:Section"]), limit=st.integers(1, 5))
def test_sql_pages_equal_the_python_sort(store, main, branch, deleted, spec, node_type, limit):
    with store.write() as s:
        repo = get_repository(s, "r", lock=True)
        # each example on fresh branches of its own (id() of a freed list is reused: a counter)
        base = f"m{next(_EXAMPLES)}"
        create_branch(s, repo, name=base)
    _write(store, base, main)
    with store.write() as s:
        create_branch(s, get_repository(s, "r", lock=True), name=f"{base}/b", from_branch=base)
    _write(store, f"{base}/b", branch, deleted=deleted)
    for name in (base, f"{base}/b"):
        expected, got = _pages(store, name, spec, node_type, limit)
        assert got == expected, (name, spec, node_type, limit)


def test_order_ties_break_by_name_and_valueless_children_come_last(store):
    _write(store, "main", [("c", 1.0, "t"), ("a", 1.0, "t"), ("b", None, "t"), ("d", 0.0, "t"), ("A", None, "t")])
    for spec, order in (("order", ["d", "a", "c", "A", "b"]), ("-order", ["a", "c", "d", "A", "b"]),
                        ("name", ["A", "a", "b", "c", "d"]), ("-name", ["d", "c", "b", "a", "A"])):
        expected, got = _pages(store, "main", spec, None, 2)
        assert got == expected == [f"/p/{n}" for n in order], spec
