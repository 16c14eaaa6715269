"""The pure graph code: bounded breadth-first traversal (CASES #20), the stable neighbor order,
and the networkx view brought forward incrementally (it must equal a view built afresh)."""

from __future__ import annotations

import random

import networkx as nx
import pytest

from kg.errors import InvalidInput
from kg.graph.neighbors import Neighbor, check_direction, check_limit, check_types, neighbors
from kg.graph.traverse import traverse
from kg.graph.view import EdgeRow, GraphView, NodeAddress, NodeRow


def graph_of(*edges: tuple) -> nx.MultiDiGraph:
    """Edges ``(from, to)`` or ``(from, to, weight)`` of type ``rel``; node names are paths."""
    g = nx.MultiDiGraph()
    for edge in edges:
        f, to, w = (*edge, None) if len(edge) == 2 else edge
        g.add_edge(f, to, key="rel", weight=w, properties=None)
    return g


def lookup(g: nx.MultiDiGraph, direction: str = "OUT", reads: list | None = None):
    """A neighbor lookup over a plain graph (address ``w:<name>``), counting edges read."""
    def run(node):
        found, _ = neighbors(g, node, address=lambda n: f"w:{n}", direction=direction)
        for edge in found:
            if reads is not None:
                reads.append(edge)
            yield edge
    return run


def star(leaves: int = 5) -> nx.MultiDiGraph:
    return graph_of(*[("c", f"l{i}") for i in range(leaves)])


# -- CASES #20 ------------------------------------------------------------------------------


def test_star_one_hop_budget_of_three_is_truncated():
    walk = traverse(["c"], lookup(star()), hops=1, max_nodes=3)
    assert [v.node_id for v in walk.visits] == ["c", "l0", "l1"]
    assert walk.truncated is True


def test_star_one_hop_budget_of_six_is_complete():
    walk = traverse(["c"], lookup(star()), hops=1, max_nodes=6)
    assert [v.node_id for v in walk.visits] == ["c", "l0", "l1", "l2", "l3", "l4"]
    assert walk.truncated is False
    assert traverse(["c"], lookup(star()), hops=1, max_nodes=7).truncated is False


def test_cycle_with_ten_hops_has_no_duplicates_and_is_not_truncated():
    g = graph_of(("A", "B"), ("B", "A"))
    for direction in ("OUT", "IN", "BOTH"):
        walk = traverse(["A"], lookup(g, direction), hops=10, max_nodes=200)
        assert [(v.node_id, v.hop) for v in walk.visits] == [("A", 0), ("B", 1)]
        assert walk.truncated is False


# -- semantics ------------------------------------------------------------------------------


def test_each_node_once_at_its_shortest_hop_with_via_weight_and_from():
    g = graph_of(("s", "a", 1.0), ("a", "b", 1.0), ("s", "b", 0.5), ("b", "c", None))
    walk = traverse(["s"], lookup(g), hops=3, max_nodes=100)
    assert [(v.node_id, v.hop, v.parent, v.weight) for v in walk.visits] == [
        ("s", 0, None, None), ("a", 1, "s", 1.0), ("b", 1, "s", 0.5), ("c", 2, "b", None)]
    assert walk.visits[1].via == "rel" and walk.visits[0].via is None


def test_frontier_order_is_weight_then_address():
    g = graph_of(("s", "z", 2.0), ("s", "b", None), ("s", "a", None), ("s", "y", 2.0), ("s", "m", 5.0))
    walk = traverse(["s"], lookup(g), hops=1, max_nodes=100)
    assert [v.node_id for v in walk.visits] == ["s", "m", "y", "z", "a", "b"]
    again = traverse(["s"], lookup(g), hops=1, max_nodes=100)
    assert again == walk


def test_several_seeds_each_hop_zero_repeats_ignored():
    g = graph_of(("a", "x"), ("b", "x"), ("x", "y"))
    walk = traverse(["b", "a", "b"], lookup(g), hops=2, max_nodes=100)
    assert [(v.node_id, v.hop, v.parent) for v in walk.visits] == [
        ("b", 0, None), ("a", 0, None), ("x", 1, "b"), ("y", 2, "x")]


def test_a_level_cut_half_way_counts_as_truncated():
    g = graph_of(("A", "B"), ("A", "C"), ("B", "D"), ("B", "E"), ("C", "F"))
    walk = traverse(["A"], lookup(g), hops=2, max_nodes=4)
    assert [v.node_id for v in walk.visits] == ["A", "B", "C", "D"]
    assert walk.truncated is True
    assert traverse(["A"], lookup(g), hops=2, max_nodes=6).truncated is False


def test_a_full_budget_with_nothing_left_is_not_truncated():
    g = graph_of(("A", "B"), ("B", "A"))
    walk = traverse(["A"], lookup(g, "BOTH"), hops=5, max_nodes=2)
    assert len(walk.visits) == 2 and walk.truncated is False


def test_hops_bound_is_scope_not_budget():
    g = graph_of(("A", "B"), ("B", "C"))
    walk = traverse(["A"], lookup(g), hops=1, max_nodes=100)
    assert [v.node_id for v in walk.visits] == ["A", "B"] and walk.truncated is False
    assert traverse(["A"], lookup(g), hops=0, max_nodes=100).visits == [walk.visits[0]]


def test_more_seeds_than_budget_is_truncated():
    walk = traverse(["a", "b", "c"], lambda n: [], hops=1, max_nodes=2)
    assert [v.node_id for v in walk.visits] == ["a", "b"] and walk.truncated is True


def test_fan_out_cuts_edges_per_node():
    walk = traverse(["c"], lookup(star()), hops=1, max_nodes=100, fan_out=2)
    assert [v.node_id for v in walk.visits] == ["c", "l0", "l1"]
    assert walk.truncated is True
    complete = traverse(["c"], lookup(star()), hops=1, max_nodes=100, fan_out=5)
    assert len(complete.visits) == 6 and complete.truncated is False


def test_fan_out_cut_is_not_truncation_when_the_cut_edges_lead_to_visited_nodes():
    # A's edges in order: B (3.0), then C (2.0); C is a seed, so cutting A after one edge
    # leaves nothing unvisited.
    g = graph_of(("A", "B", 3.0), ("A", "C", 2.0))
    walk = traverse(["A", "C"], lookup(g), hops=1, max_nodes=100, fan_out=1)
    assert [v.node_id for v in walk.visits] == ["A", "C", "B"]
    assert walk.truncated is False
    # ... but a cut edge to a node nobody reached is.
    g.add_edge("A", "D", key="rel", weight=1.0, properties=None)
    assert traverse(["A", "C"], lookup(g), hops=1, max_nodes=100, fan_out=1).truncated is True


def test_fan_out_reached_by_another_path_is_not_truncated():
    # A -> B (heavy) and A -> C (light); B -> C. fan_out 1 cuts A's edge to C, but B reaches C
    # at hop 2 within hops.
    g = graph_of(("A", "B", 2.0), ("A", "C", 1.0), ("B", "C", 1.0))
    walk = traverse(["A"], lookup(g), hops=2, max_nodes=100, fan_out=1)
    assert [(v.node_id, v.hop) for v in walk.visits] == [("A", 0), ("B", 1), ("C", 2)]
    assert walk.truncated is False


def test_walk_reads_a_bounded_number_of_edges_from_a_hub():
    g = star(10_000)
    reads: list = []
    walk = traverse(["c"], lookup(g, reads=reads), hops=2, max_nodes=10, fan_out=50)
    assert len(walk.visits) == 10 and walk.truncated is True
    assert len(reads) == 10  # stopped at the first edge it could not take


@pytest.mark.parametrize("bounds", [
    {"hops": -1}, {"hops": 11}, {"max_nodes": 0}, {"max_nodes": 10_001}, {"fan_out": 0},
    {"fan_out": 10_001}, {"hops": True}, {"max_nodes": 2.5},
])
def test_bounds_are_checked(bounds):
    with pytest.raises(InvalidInput):
        traverse(["a"], lambda n: [], **bounds)


def test_checks_of_direction_limit_and_types():
    assert check_direction("both") == "BOTH"
    with pytest.raises(InvalidInput):
        check_direction("UP")
    with pytest.raises(InvalidInput):
        check_limit(0)
    with pytest.raises(InvalidInput):
        check_limit(10_001)
    assert check_types(None) is None
    with pytest.raises(InvalidInput):
        check_types([])


def test_neighbor_order_weight_desc_null_last_then_address_type_direction():
    g = nx.MultiDiGraph()
    g.add_edge("n", "b", key="t2", weight=None, properties=None)
    g.add_edge("n", "b", key="t1", weight=None, properties=None)
    g.add_edge("b", "n", key="t1", weight=None, properties=None)
    g.add_edge("n", "a", key="t9", weight=0.5, properties={"k": 1})
    g.add_edge("n", "c", key="t0", weight=3.0, properties=None)
    found, truncated = neighbors(g, "n", address=lambda x: f"w:{x}")
    assert [(e.node_id, e.relation_type, e.direction) for e in found] == [
        ("c", "t0", "OUT"), ("a", "t9", "OUT"), ("b", "t1", "IN"), ("b", "t1", "OUT"), ("b", "t2", "OUT")]
    assert found[1].properties == {"k": 1} and truncated is False
    top, truncated = neighbors(g, "n", address=lambda x: f"w:{x}", limit=2)
    assert top == found[:2] and truncated is True


# -- the view: incremental == fresh ---------------------------------------------------------


class Truth:
    """A tiny model of a branch: nodes (alive or not) and relations (alive or not)."""

    def __init__(self) -> None:
        self.nodes: dict[str, tuple[str, str, bool]] = {}
        self.rels: dict[tuple[str, str, str], tuple[float | None, dict | None, bool]] = {}

    def resolve(self, ids):
        return {i: NodeAddress(ws, path, f"{ws}:{path}") for i in ids
                for ws, path, alive in [self.nodes.get(i, ("", "", False))] if alive}

    def fresh(self) -> GraphView:
        view = GraphView(0)
        view.load([EdgeRow(f, t, to, w, p) for (f, t, to), (w, p, alive) in self.rels.items() if alive],
                  self.resolve)
        return view


def snapshot(view: GraphView) -> dict:
    out = {}
    for node in sorted(view.graph.nodes):
        edges = list(view.iter_neighbors(node))  # (node id, type, weight, direction, properties)
        if edges:
            out[node] = edges
    return out


@pytest.mark.parametrize("seed", range(6))
def test_view_brought_forward_equals_view_built_afresh(seed):
    rng = random.Random(seed)
    truth = Truth()
    n_nodes = 120
    hub = "n0"
    for i in range(n_nodes):
        truth.nodes[f"n{i}"] = (rng.choice(["w", "x"]), f"/p{i:03d}", True)
    view = truth.fresh()
    for i in range(1, n_nodes):  # a hub above the sorted-list threshold
        truth.rels[(hub, "r", f"n{i}")] = (float(i % 4) if i % 3 else None, None, True)
    view.apply([], [EdgeRow(hub, "r", f"n{i}", *truth.rels[(hub, "r", f"n{i}")][:2]) for i in range(1, n_nodes)],
               truth.resolve, revision=1)
    assert view.graph.degree(hub) >= 64
    list(view.iter_neighbors(hub))  # the hub's sorted list is now kept
    for revision in range(2, 40):
        node_rows, edge_rows = [], []
        for _ in range(rng.randint(1, 12)):
            op = rng.random()
            if op < 0.15:
                node = f"n{rng.randrange(n_nodes)}"
                ws, path, alive = truth.nodes[node]
                truth.nodes[node] = (ws, path, not alive)  # delete, or revive (a merge can)
                node_rows.append(NodeRow(node, ws, path, deleted=alive))
            elif op < 0.25:
                node = f"m{revision}-{len(node_rows)}"
                truth.nodes[node] = ("w", f"/q{node}", True)
                node_rows.append(NodeRow(node, "w", f"/q{node}"))
            elif op < 0.8:
                f, to = rng.choice(list(truth.nodes)), rng.choice(list(truth.nodes))
                t = rng.choice(["r", "s"])
                w = rng.choice([None, 0.0, 1.0, 2.5])
                p = rng.choice([None, {"k": revision}])
                truth.rels[(f, t, to)] = (w, p, True)
                edge_rows.append(EdgeRow(f, t, to, w, p))
            elif truth.rels:
                key = rng.choice(sorted(truth.rels))
                w, p, _ = truth.rels[key]
                truth.rels[key] = (w, p, False)
                edge_rows.append(EdgeRow(*key, w, p, deleted=True))
        view.apply(node_rows, edge_rows, truth.resolve, revision=revision)
        fresh = truth.fresh()
        assert snapshot(view) == snapshot(fresh), f"revision {revision}"
        assert view.edge_count == fresh.edge_count
        for node in (hub, "n1", "n2"):
            for limit in (1, 5, 500):
                assert view.neighbors(node, limit=limit) == fresh.neighbors(node, limit=limit)
                assert (view.neighbors(node, direction="IN", types={"s"}, limit=limit)
                        == fresh.neighbors(node, direction="IN", types={"s"}, limit=limit))
    # and the order is the plain-networkx order of kg.graph.neighbors
    plain, _ = neighbors(view.graph, hub, address=lambda n: view.address(n).address)
    assert [(e.node_id, e.relation_type, e.direction) for e in plain] == \
        [(other, t, d) for other, t, _, d, _ in view.iter_neighbors(hub)]


def test_view_edge_attrs_without_properties_are_shared_and_never_mutated():
    truth = Truth()
    for i in range(4):
        truth.nodes[f"n{i}"] = ("w", f"/n{i}", True)
    for i in range(1, 4):
        truth.rels[("n0", "r", f"n{i}")] = (1.0, None, True)
    view = truth.fresh()
    a = view.graph.succ["n0"]["n1"]["r"]
    assert a is view.graph.succ["n0"]["n2"]["r"]
    view.apply([], [EdgeRow("n0", "r", "n1", 2.0, None)], truth.resolve, revision=1)
    assert view.graph.succ["n0"]["n2"]["r"]["weight"] == 1.0
    assert view.graph.succ["n0"]["n1"]["r"]["weight"] == 2.0


def test_neighbor_is_a_named_tuple():
    edge = Neighbor("a", "t", None, "OUT", {})
    other, rel_type, weight, direction, properties = edge
    assert (edge.node_id, edge.relation_type, edge.direction) == (other, rel_type, direction) == ("a", "t", "OUT")


def test_view_load_gives_up_past_the_edge_budget():
    truth = Truth()
    for i in range(5):
        truth.nodes[f"n{i}"] = ("w", f"/n{i}", True)
        truth.rels[("n0", "r", f"n{i}")] = (None, None, True)
    rows = [EdgeRow(f, t, to, w, p) for (f, t, to), (w, p, _) in truth.rels.items()]
    assert GraphView(0).load(rows, truth.resolve, max_edges=4) is False
    assert GraphView(0).load(rows, truth.resolve, max_edges=5) is True


def test_cache_evicts_least_recently_used_views_beyond_the_edge_budget():
    from kg.graph.cache import GraphCache

    def view_with(n_edges: int) -> GraphView:
        truth = Truth()
        for i in range(n_edges + 1):
            truth.nodes[f"n{i}"] = ("w", f"/n{i}", True)
        for i in range(1, n_edges + 1):
            truth.rels[("n0", "r", f"n{i}")] = (None, None, True)
        return truth.fresh()

    cache = GraphCache(max_edges=25)
    a, b, c = view_with(10), view_with(10), view_with(10)
    cache.put("a", a)
    cache.put("b", b)
    assert cache.get("a") is a  # now a is the most recently used
    cache.put("c", c)
    assert "b" not in cache and cache.get("a") is a and cache.get("c") is c
    assert cache.edges_held == 20
    cache.put("huge", view_with(30))  # alone over budget: not kept, remembered as too big
    assert "huge" not in cache and cache.too_big("huge")
    cache.discard("a")
    assert "a" not in cache and len(cache) <= 1


def test_two_thousand_tiny_repositories_keep_the_cache_within_its_bounds():
    # Issue 16: views without edges cost no edge budget, so nothing evicted them.
    from kg.graph.cache import GraphCache

    def tiny(i: int) -> GraphView:
        truth = Truth()
        truth.nodes[f"a{i}"] = ("w", "/a", True)
        truth.nodes[f"b{i}"] = ("w", "/b", True)
        if i % 2:
            truth.rels[(f"a{i}", "r", f"b{i}")] = (1.0, None, True)
        return truth.fresh()

    cache = GraphCache(max_edges=1_000_000, max_bytes=200_000, max_views=100)
    for i in range(2_000):
        cache.put(("repo", i), tiny(i))
        assert len(cache) <= 100 and cache.bytes_held <= 200_000
    assert ("repo", 1_999) in cache and ("repo", 0) not in cache
    assert 0 < cache.bytes_held <= 200_000

    by_bytes = GraphCache(max_bytes=10 * tiny(1).estimated_bytes, max_views=10_000)
    for i in range(2_000):
        by_bytes.put(("repo", i), tiny(1))
    assert len(by_bytes) == 10  # no edges or few: the memory estimate still bounds them


def test_a_view_without_edges_still_has_a_memory_estimate():
    from kg.graph.view import VIEW_BYTES

    empty = GraphView(0)
    assert empty.cost == 0 and empty.estimated_bytes == VIEW_BYTES


def test_the_build_locks_of_the_cache_are_bounded():
    from kg.graph.cache import GraphCache

    cache = GraphCache()
    locks = {id(cache.key_lock(("repo", i))) for i in range(5_000)}
    assert len(locks) <= 64
    assert cache.key_lock(("repo", 7)) is cache.key_lock(("repo", 7))
