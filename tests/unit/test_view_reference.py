"""The graph view against a plain networkx reference on random graphs (hypothesis).

The view keeps each node's out- and in-edges apart, sorted per direction and kept across reads
(updated in place when versions are applied, evicted within a budget). Whatever it holds, its
answers must be those of the plain definition: every live edge of a ``MultiDiGraph`` around the
node, filtered by direction, relation type, workspace and validity at a time, sorted in the
stable order (weight desc with null last, the other node's address, type, ``IN`` before
``OUT``), cut at ``limit``; and a walk over it reaches each node at its networkx shortest
distance when no budget cuts it.
"""

from __future__ import annotations

from datetime import UTC, datetime

import networkx as nx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kg.graph.neighbors import Neighbor
from kg.graph.traverse import traverse
from kg.graph.validity import valid_at
from kg.graph.view import EdgeRow, GraphView, NodeAddress, NodeRow

T = [datetime(2020 + i, 1, 1, tzinfo=UTC) for i in range(4)]
WINDOWS = [(None, None), (T[1], None), (None, T[2]), (T[1], T[2])]
TYPES = ["a", "b", "c"]
WEIGHTS = [None, 0.0, 0.5, 1.0, 1.0, 2.0]  # ties on purpose: the address decides
AT = [None, T[1], T[3]]


class Model:
    """What a branch holds: nodes (workspace, path, alive) and relations by (from, type, to)."""

    def __init__(self, n: int) -> None:
        self.nodes = {f"n{i}": ("w" if i % 3 else "x", f"/p{(i * 7) % n:02d}", True) for i in range(n)}
        self.rels: dict[tuple[str, str, str], tuple[float | None, dict | None, tuple]] = {}

    def resolve(self, ids):
        return {i: NodeAddress(ws, p, f"{ws}:{p}") for i in ids
                for ws, p, alive in [self.nodes.get(i, ("", "", False))] if alive}

    def row(self, key, deleted=False) -> EdgeRow:
        w, props, (vf, vt) = self.rels[key]
        return EdgeRow(*key, w, props, deleted, vf, vt, "later" if vt is not None else None)

    def reference(self) -> nx.MultiDiGraph:
        g = nx.MultiDiGraph()
        for node, (_, _, alive) in self.nodes.items():
            if alive:
                g.add_node(node)
        for (f, t, to), (w, props, window) in self.rels.items():
            if f in g and to in g:
                g.add_edge(f, to, key=t, weight=w, properties=props or None, window=window)
        return g

    def address(self, node: str) -> str:
        ws, p, _ = self.nodes[node]
        return f"{ws}:{p}"


def expected(model: Model, g: nx.MultiDiGraph, node, direction, types, workspaces, at):
    """The plain definition: every matching edge, sorted in the stable order."""
    found = []
    sides = [("OUT", g.out_edges), ("IN", g.in_edges)]
    for d, edges in sides:
        if direction not in (d, "BOTH"):
            continue
        for f, to, t, data in edges(node, keys=True, data=True):
            other = to if d == "OUT" else f
            if types is not None and t not in types:
                continue
            if workspaces is not None and model.nodes[other][0] not in workspaces:
                continue
            if not valid_at(*data["window"], at):
                continue
            w = data["weight"]
            found.append(((w is None, -w if w is not None else 0.0, model.address(other), t, d),
                          (other, t, w, d, data["properties"])))
    return [edge for _, edge in sorted(found)]


def check(view: GraphView, model: Model) -> None:
    g = model.reference()
    for node in list(g.nodes):
        for direction in ("OUT", "IN", "BOTH"):
            for types in (None, {"b", "c"}):
                for workspaces in (None, {"w"}):
                    for at in AT:
                        want = expected(model, g, node, direction, types, workspaces, at)
                        got = list(view.iter_neighbors(node, direction=direction, types=types,
                                                       workspaces=workspaces, at=at))
                        assert [tuple(e) for e in got] == want, (node, direction, types, workspaces, at)
                        for limit in (1, 3, 100):
                            top, more = view.neighbors(node, direction=direction, types=types, limit=limit,
                                                       workspaces=workspaces, at=at)
                            assert [tuple(e) for e in top] == want[:limit]
                            assert more is (len(want) > limit)
                            # with the other nodes' addresses (kept with the sorted lists as read)
                            found, where, more = view.edges_located(node, direction=direction, types=types,
                                                                    limit=limit, workspaces=workspaces, at=at)
                            assert [tuple(e) for e in found] == want[:limit] and more is (len(want) > limit)
                            assert [w.address for w in where] == [model.address(e[0]) for e in want[:limit]]
    # walks: level by level in the stable order; without budgets, networkx's distances
    for direction in ("OUT", "IN", "BOTH"):
        for types in (None, {"a", "b"}):
            def lookup(n, d=direction, ts=types):
                return view.iter_neighbors(n, direction=d, types=ts)

            def reference_lookup(n, d=direction, ts=types):
                return [Neighbor(*e) for e in expected(model, g, n, d, ts, None, None)]

            plain = nx.DiGraph()
            plain.add_nodes_from(g.nodes)
            plain.add_edges_from((f, to) for f, to, t in g.edges(keys=True) if types is None or t in types)
            if direction == "IN":
                plain = plain.reverse()
            elif direction == "BOTH":
                plain = plain.to_undirected()
            for seed in list(g.nodes)[:3]:
                for hops, max_nodes, fan_out in ((3, 10_000, 10_000), (3, 4, 2), (4, 10_000, 1)):
                    ours = traverse([seed], lookup, hops=hops, max_nodes=max_nodes, fan_out=fan_out)
                    theirs = traverse([seed], reference_lookup, hops=hops, max_nodes=max_nodes, fan_out=fan_out)
                    assert ours == theirs
                    # the walk's lookup (a node's sorted list itself where no filter applies)
                    assert traverse([seed], view.lookup(direction=direction, types=types), hops=hops,
                                    max_nodes=max_nodes, fan_out=fan_out) == theirs
                    if max_nodes == fan_out == 10_000:
                        distance = nx.single_source_shortest_path_length(plain, seed, cutoff=hops)
                        assert {v.node_id: v.hop for v in ours.visits} == distance
                        assert ours.truncated is False


edge_st = st.tuples(st.integers(0, 9), st.sampled_from(TYPES), st.integers(0, 9), st.sampled_from(WEIGHTS),
                    st.sampled_from([None, {"k": 1}]), st.sampled_from(WINDOWS))
change_st = st.one_of(
    st.tuples(st.just("relate"), edge_st),
    st.tuples(st.just("unrelate"), st.integers(0, 10_000)),
    st.tuples(st.just("toggle_node"), st.integers(0, 9)),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edges=st.lists(edge_st, max_size=40), changes=st.lists(st.lists(change_st, max_size=6), max_size=4),
       budget=st.sampled_from([0, 4, 1_000_000]), dead=st.sets(st.integers(0, 9), max_size=2))
def test_view_answers_as_the_networkx_reference(edges, changes, budget, dead):
    """Random graphs (ties, self-loops, validity windows, dormant edges), read before and after
    versions are applied, with a sorted-list budget that keeps nothing, a few lists, or all."""
    model = Model(10)
    for f, t, to, w, props, window in edges:
        model.rels[(f"n{f}", t, f"n{to}")] = (w, props, window)
    for i in dead:
        ws, p, _ = model.nodes[f"n{i}"]
        model.nodes[f"n{i}"] = (ws, p, False)
    view = GraphView(0, max_sorted_entries=budget)
    assert view.load([model.row(key) for key in model.rels], model.resolve)
    check(view, model)
    for revision, batch in enumerate(changes, start=1):
        node_rows, edge_rows = [], []
        for kind, arg in batch:
            if kind == "relate":
                f, t, to, w, props, window = arg
                key = (f"n{f}", t, f"n{to}")
                model.rels[key] = (w, props, window)
                edge_rows.append(model.row(key))
            elif kind == "unrelate" and model.rels:
                key = sorted(model.rels)[arg % len(model.rels)]
                edge_rows.append(model.row(key, deleted=True))
                del model.rels[key]
            elif kind == "toggle_node":
                node = f"n{arg}"
                ws, p, alive = model.nodes[node]
                model.nodes[node] = (ws, p, not alive)  # deleted, or revived (a merge can)
                node_rows.append(NodeRow(node, ws, p, deleted=alive))
        view.apply(node_rows, edge_rows, model.resolve, revision=revision)
        check(view, model)


@settings(max_examples=60, deadline=None)
@given(weights=st.lists(st.one_of(st.none(), st.integers(-3, 3), st.sampled_from([-0.0, 0.0, 0.25, -2.5, 1e300])),
                        min_size=1, max_size=30),
       budget=st.sampled_from([0, 1_000_000]), first=st.integers(1, 5))
def test_a_sorted_list_by_weight_alone_or_by_the_whole_key_is_the_stable_order(weights, budget, first):
    """A node's list is sorted by weight alone when its weights are distinct and not null, by the
    whole key otherwise (ties, 0.0 and -0.0, 1 and 1.0, nulls): the stable order either way, kept
    or not (a budget of 0 keeps nothing and cuts the first edges with a heap)."""
    model = Model(31)
    for i, w in enumerate(weights, start=1):
        model.rels[("n0", TYPES[i % 3], f"n{i}")] = (float(w) if i % 2 and w is not None else w, None, (None, None))
    view = GraphView(0, max_sorted_entries=budget)
    assert view.load([model.row(key) for key in model.rels], model.resolve)
    want = expected(model, model.reference(), "n0", "OUT", None, None, None)
    assert [tuple(e) for e in view.iter_neighbors("n0", direction="OUT")] == want
    assert [tuple(e) for e in view.neighbors("n0", direction="OUT", limit=first)[0]] == want[:first]
    assert [tuple(e) for e in view.neighbors("n0", direction="BOTH", limit=first)[0]] == want[:first]
