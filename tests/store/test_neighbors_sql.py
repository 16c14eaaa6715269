"""Issue 16: NEIGHBORS in SQL (``kg.store.relations.list_neighbors``, read in index order and
cut at the limit in the database) answers exactly what the networkx view of the branch does,
on random small graphs with branches, re-weights, deletes and re-created nodes, for every
node, direction, type filter, limit and offset, and for a reader restricted to a workspace."""

from __future__ import annotations

import itertools
import uuid

import hypothesis.strategies as st
from hypothesis import HealthCheck, given, settings

from kg.context import OPERATOR, run
from kg.errors import NotFound
from kg.ops import branches as branch_ops
from kg.ops import nodes as node_ops
from kg.ops import relations as relation_ops
from kg.ops import repos as repo_ops
from kg.rag.graph import _build
from kg.store import relations as store
from kg.store.nodes import get_node
from kg.store.repos import branch_view

NODES = [("w1", "/a"), ("w1", "/b"), ("w1", "/c"), ("w2", "/a"), ("w2", "/d")]
TYPES = ["t1", "t2"]
WEIGHTS = [None, 0.5, 1.0, 1.0, 2.0, -1.0]  # repeated: ties, so the address and type orders matter

node_ix = st.integers(0, len(NODES) - 1)
op = st.one_of(
    st.tuples(st.just("relate"), node_ix, node_ix, st.sampled_from(TYPES), st.sampled_from(WEIGHTS)),
    st.tuples(st.just("unrelate"), node_ix, node_ix, st.sampled_from(TYPES)),
    st.tuples(st.just("delete"), node_ix),
    st.tuples(st.just("create"), node_ix),
)


def address(i: int) -> str:
    ws, path = NODES[i]
    return f"{ws}:{path}"


def apply(services, repo: str, branch: str, step) -> None:
    kind = step[0]
    try:
        if kind == "relate":
            run(services, OPERATOR, relation_ops.relate, repo, branch, address(step[1]), address(step[2]), step[3],
                weight=step[4])
        elif kind == "unrelate":
            run(services, OPERATOR, relation_ops.unrelate, repo, branch, address(step[1]), address(step[2]), step[3])
        elif kind == "delete":
            run(services, OPERATOR, node_ops.delete_node, repo, branch, *NODES[step[1]])
        else:
            run(services, OPERATOR, node_ops.put_node, repo, branch, *NODES[step[1]], node_type="kg:Node",
                properties={})
    except NotFound:
        pass  # an endpoint deleted by an earlier step: nothing written, as for any caller


def from_view(graph, node_id, direction, types, readable):
    found, _ = graph.neighbors(node_id, direction=direction, types=types, limit=10_000, workspaces=readable)
    # the view answers None for an edge without properties (kg.graph.neighbors.Neighbor), SQL {}
    return [(other, graph.address(other).workspace, graph.address(other).path, t, w, props or {}, d)
            for other, t, w, d, props in found]


def compare(services, repo: str, branch: str) -> int:
    checked = 0
    with services.db.read() as session:
        view = branch_view(session, repo, branch)
        graph = _build(session, view.scoped(None), 10**6)
        names = {name: wid for wid, name in view.workspaces.items()}
        for (ws, path), direction, types in itertools.product(
                NODES, ("OUT", "IN", "BOTH"), (None, frozenset({"t1"}), frozenset(TYPES))):
            node_id = graph.node_id(ws, path)
            if node_id is None:
                continue  # no live relations in the view: SQL has none either (checked below)
            for readable in (None, frozenset({"w1"})):
                scoped = view if readable is None else view.scoped(frozenset({names["w1"]}))
                want = from_view(graph, node_id, direction, types, readable)
                got = [(r.node_id, r.workspace, r.path, r.relation_type, r.weight, r.properties, r.direction)
                       for r in store.list_neighbors(session, scoped, node_id, direction=direction, types=types,
                                                     limit=10_000)]
                assert got == want, (branch, ws, path, direction, types, readable)
                for limit, offset in ((1, 0), (2, 1), (3, 2)):
                    page = store.list_neighbors(session, scoped, node_id, direction=direction, types=types,
                                                limit=limit, offset=offset)
                    assert [r.node_id for r in page] == [row[0] for row in want[offset:offset + limit]]
                checked += 1
        for ws, path in NODES:  # a node the view has no edges of has none in SQL either
            if graph.node_id(ws, path) is None:
                try:
                    node_id = get_node(session, view, ws, path).node_id
                except NotFound:
                    continue
                assert store.list_neighbors(session, view, node_id, limit=100) == []
    return checked


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(main_ops=st.lists(op, min_size=3, max_size=10), branch_steps=st.lists(op, max_size=8),
       later_ops=st.lists(op, max_size=4))
def test_neighbors_in_sql_equal_the_networkx_view(services, main_ops, branch_steps, later_ops):
    repo = f"r{uuid.uuid4().hex[:10]}"
    run(services, OPERATOR, repo_ops.create_repository, repo)
    for ws in ("w1", "w2"):
        run(services, OPERATOR, repo_ops.create_workspace, repo, ws, None)
    for i in range(len(NODES)):
        apply(services, repo, "main", ("create", i))
    for step in main_ops:
        apply(services, repo, "main", step)
    run(services, OPERATOR, branch_ops.create_branch, repo, name="b")
    for step in branch_steps:
        apply(services, repo, "b", step)
    for step in later_ops:  # after the fork: main moves on, the branch must not see it
        apply(services, repo, "main", step)
    compare(services, repo, "main")
    compare(services, repo, "b")
    run(services, OPERATOR, branch_ops.create_branch, repo, name="b/c", from_branch="b")
    for step in later_ops:  # a grandchild: a chain of three branches
        apply(services, repo, "b/c", step)
    compare(services, repo, "b/c")

