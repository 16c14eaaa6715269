"""A large graph view built in the background is frozen out of the cyclic garbage collector
(kg.rag.graph.load_view), and a view holds no reference cycle, so a view dropped from the
cache is freed by reference counting even though it was frozen."""

from __future__ import annotations

import gc
import weakref
from datetime import UTC, datetime

import pytest

from kg.graph.view import EdgeRow, GraphView, NodeAddress, NodeRow
from kg.rag.graph import load_view


def _edges(n: int) -> list[EdgeRow]:
    rows = [EdgeRow(f"n{i % 50}", "cites", f"n{(i * 7) % 200 + 50}", float(i % 5), None) for i in range(n)]
    rows.append(EdgeRow("n0", "works_at", "n1", 1.0, {"since": 2020},
                        valid_from=datetime(2020, 1, 1, tzinfo=UTC)))
    rows.append(EdgeRow("n0", "cites", "gone", None, None))  # an endpoint that is not live: dormant
    return rows


def _resolve(ids: set[str]) -> dict[str, NodeAddress]:
    return {i: NodeAddress("w", f"/{i}", f"w:/{i}") for i in ids if i != "gone"}


def _live(obj: object) -> bool:
    return any(o is obj for o in gc.get_objects())


def test_a_view_loaded_with_freezing_is_left_out_of_every_collection_and_the_collector_is_given_back():
    view = GraphView(1)
    assert load_view(view, _edges(1_000), _resolve, freeze_every=300)
    assert gc.isenabled()
    plain = GraphView(1)
    assert load_view(plain, _edges(1_000), _resolve)
    for node in ("n0", "n57", "n1"):
        assert view.neighbors(node, limit=10) == plain.neighbors(node, limit=10)
        assert view.neighbors(node, limit=10)[0]
    # The adjacency dicts are in the permanent generation: gc.get_objects() lists generations 0-2.
    assert not _live(view.graph._succ) and not _live(view.graph._succ["n0"])
    assert gc.get_freeze_count() > 0


def test_a_view_loaded_without_freezing_stays_collectable():
    view = GraphView(1)
    assert load_view(view, _edges(100), _resolve)
    assert gc.isenabled() and _live(view.graph._succ)


def test_a_load_over_budget_gives_the_collector_back():
    view = GraphView(1)
    assert not load_view(view, _edges(100), _resolve, max_edges=10, freeze_every=5)
    assert gc.isenabled()


@pytest.mark.parametrize("freeze_every", [None, 7])
def test_a_dropped_view_is_freed_by_reference_counting(freeze_every):
    """A frozen object in a reference cycle would never be freed: the view must hold none,
    whatever it went through (dormant edges, validity, sorted hub lists, later changes)."""
    view = GraphView(1, max_sorted_entries=10_000)
    assert load_view(view, _edges(200), _resolve, freeze_every=freeze_every)
    assert view.neighbors("n0", limit=5)[0]  # builds the hub's sorted list
    view.apply([NodeRow("n3", "w", "/n3", True), NodeRow("gone", "w", "/gone", False)],
               [EdgeRow("n1", "cites", "n2", 3.0, {"a": [1]}), EdgeRow("n4", "cites", "n60", None, None, True)],
               _resolve, revision=2)
    ref = weakref.ref(view)
    collecting = gc.isenabled()
    gc.disable()
    try:
        del view
        assert ref() is None
    finally:
        if collecting:
            gc.enable()


def _empty(view: GraphView) -> bool:
    return (view.graph.number_of_nodes() == 0 and view.graph.number_of_edges() == 0 and view.cost == 0
            and view.node_count == 0 and not view._sorted and not view._validity and not view._ids)


def test_release_empties_a_view_a_slice_at_a_time(monkeypatch):
    import kg.graph.view as view_module

    view = GraphView(1)
    assert load_view(view, _edges(5_000), _resolve)
    assert view.neighbors("n0", limit=1)[0]
    handed: list[float] = []
    monkeypatch.setattr(view_module.time, "sleep", handed.append)
    view.release(slice_size=20)
    assert _empty(view)
    # 250 nodes in each of the adjacency tables, 20 at a time: the lock handed over each time
    assert len(handed) >= 3 * (250 // 20) and set(handed) == {0}


@pytest.mark.parametrize("freeze_every", [None, 300])
def test_a_load_given_up_past_the_budget_is_released_not_dropped_whole(monkeypatch, freeze_every):
    released: list[GraphView] = []
    whole = GraphView.release
    monkeypatch.setattr(GraphView, "release", lambda self, **kw: released.append(self) or whole(self, **kw))
    view = GraphView(1)
    assert not load_view(view, _edges(2_000), _resolve, max_edges=1_000, freeze_every=freeze_every)
    assert released == [view] and _empty(view)
    kept = GraphView(1)
    assert not load_view(kept, _edges(2_000), _resolve, max_edges=1_000, release=False)
    assert released == [view]  # release=False: left to the caller (dropped whole)
    assert gc.isenabled()


def test_the_sorted_lists_of_plain_edges_are_not_tracked_by_the_collector():
    """A node's sorted list holds a plain tuple per edge: without properties it holds None, so
    the collector untracks the tuple at its first pass and full passes do not walk the lists."""
    view = GraphView(1)
    rows = [EdgeRow("n0", "cites", f"n{i}", float(i % 3), {"k": i} if i == 7 else None) for i in range(1, 50)]
    assert load_view(view, rows, _resolve)
    edges = list(view.iter_neighbors("n0", direction="OUT"))
    gc.collect()
    plain = [e for e in edges if e[4] is None]
    assert len(plain) == 48 and not any(gc.is_tracked(e) for e in plain)
    assert [e[4] for e in edges if e[4] is not None] == [{"k": 7}]
    assert view.neighbors("n0", direction="OUT", limit=1)[0][0].properties is None  # a Neighbor, made per call
