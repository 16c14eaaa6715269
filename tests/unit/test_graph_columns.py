"""NEIGHBORS rows made when read (:class:`kg.graph.rows.NeighborRows`) and walks answered as
columns (:func:`kg.graph.traverse.reach`), against what they replace: a dict per edge, and the
walk as it was written before (copied below), on random graphs (hypothesis)."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from datetime import UTC, datetime, timedelta, timezone
from itertools import chain, islice

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kg.graph.neighbors import Edge
from kg.graph.rows import NeighborRows
from kg.graph.traverse import Visit, Walk, reach, traverse
from kg.graph.view import NodeAddress

T1 = datetime(2021, 1, 1, tzinfo=UTC)
T2 = datetime(2021, 1, 1, 1, tzinfo=timezone(timedelta(hours=1)))  # the same instant, another zone


def rows_before(edges, where, validity) -> list[dict]:
    """A dict per edge, as the use case made them before NeighborRows."""
    return [{"workspace": w.workspace, "path": w.path, "node_id": other, "relation_type": t, "weight": weight,
             "direction": d, "properties": props or {},
             "valid_from": v[0].isoformat() if v[0] else None, "valid_to": v[1].isoformat() if v[1] else None,
             "invalidated_by": v[2]}
            for (other, t, weight, d, props), w, v in zip(edges, where, validity or [(None,) * 3] * len(edges),
                                                        strict=True)]


edge_st = st.tuples(st.sampled_from(["n1", "n2", "n3"]), st.sampled_from(["a", "b"]),
                    st.sampled_from([None, 0.0, 1.5]), st.sampled_from(["IN", "OUT"]),
                    st.sampled_from([None, {}, {"k": [1, 2]}]))
validity_st = st.tuples(st.sampled_from([None, T1, T2]), st.sampled_from([None, T1, T2]),
                        st.sampled_from([None, "w:/x|a|w:/y"]))


@settings(max_examples=80, deadline=None)
@given(edges=st.lists(edge_st, max_size=30), data=st.data(), with_validity=st.booleans())
def test_rows_are_the_dicts_they_replace(edges, data, with_validity):
    where = [NodeAddress("w", f"/{other}", f"w:/{other}") for other, *_ in edges]
    validity = [data.draw(validity_st) for _ in edges] if with_validity else None
    rows = NeighborRows(edges, where, validity)
    want = rows_before(edges, where, validity)
    assert list(rows) == want and rows.tolist() == want and rows == want and want == rows
    assert [rows[i] for i in range(len(rows))] == want and [rows[i] for i in range(-len(rows), 0)] == want
    assert rows[1:4] == want[1:4] and rows[::-2] == want[::-2] and len(rows) == len(want)
    assert {"neighbors": rows, "truncated": False} == {"neighbors": want, "truncated": False}
    if want:
        assert rows != want[:-1] and rows != [*want[:-1], {**want[-1], "weight": -1}]


def test_rows_are_new_dicts_each_read_and_times_are_formatted_once_per_time_and_zone():
    props = {"k": 1}
    edges: list[Edge] = [("n1", "a", 1.0, "OUT", None), ("n2", "a", None, "IN", props), ("n3", "b", 0.5, "OUT", None)]
    where = [NodeAddress("w", f"/{i}", f"w:/{i}") for i in range(3)]
    rows = NeighborRows(edges, where, [(T1, None, None), (T1, T2, "x"), (T2, None, None)])
    first = rows[0]
    first["properties"]["changed"] = True
    first["weight"] = 9.0
    assert rows[0]["properties"] == {} and rows[0]["weight"] == 1.0
    assert rows[1]["properties"] is props  # the edge's own dict, as before (never mutated by the view)
    listed = list(rows)
    assert listed[0]["valid_from"] is listed[1]["valid_from"] == "2021-01-01T00:00:00+00:00"
    assert listed[1]["valid_to"] == listed[2]["valid_from"] == "2021-01-01T01:00:00+01:00"  # its own zone
    with pytest.raises(IndexError):
        rows[3]
    with pytest.raises(IndexError):
        rows[-4]
    with pytest.raises(ValueError):
        NeighborRows(edges, where[:2])
    with pytest.raises(ValueError):
        NeighborRows(edges, where, [(None, None, None)])
    assert NeighborRows([], []) == [] and not NeighborRows([], []) and rows != "abc" and rows != 3
    with pytest.raises(TypeError):
        hash(rows)
    assert "n2" in repr(rows)


# -- the walk as it was before it answered columns, verbatim --------------------------------


def traverse_before(seeds: Sequence[Hashable], neighbors: Callable[[Hashable], Iterable[Edge]], *, hops: int,
                    max_nodes: int, fan_out: int) -> Walk:
    visits: list[Visit] = []
    seen: set[Hashable] = set()
    truncated = False
    frontier: list[Hashable] = []
    for seed in seeds:
        if seed in seen:
            continue
        if len(visits) == max_nodes:
            truncated = True
            break
        seen.add(seed)
        visits.append(Visit(seed, 0, None, None, None))
        frontier.append(seed)
    cut: list[Iterator[Edge]] = []
    hop = 0
    while frontier and hop < hops and not truncated:
        reached: list[Hashable] = []
        for node in frontier:
            edges = iter(neighbors(node))
            for edge in islice(edges, fan_out):
                other = edge[0]
                if other in seen:
                    continue
                if len(visits) == max_nodes:
                    truncated = True
                    break
                seen.add(other)
                visits.append(Visit(other, hop + 1, edge[1], edge[2], node))
                reached.append(other)
            else:
                rest = next(edges, None)
                if rest is not None:
                    cut.append(chain((rest,), edges))
                continue
            break
        frontier = reached
        hop += 1
    if not truncated:
        truncated = any(edge[0] not in seen for rest in cut for edge in rest)
    return Walk(visits, truncated)


@settings(max_examples=300, deadline=None)
@given(edges=st.lists(st.tuples(st.integers(0, 11), st.integers(0, 11), st.sampled_from(["a", "b"]),
                                st.sampled_from([None, 1.0, 2.0])), max_size=60),
       seeds=st.lists(st.integers(0, 11), min_size=1, max_size=4), hops=st.integers(0, 4),
       max_nodes=st.integers(1, 14), fan_out=st.integers(1, 5))
def test_the_walk_as_columns_is_the_walk_before(edges, seeds, hops, max_nodes, fan_out):
    around: dict[int, list[Edge]] = {}
    for f, to, t, w in edges:
        around.setdefault(f, []).append((to, t, w, "OUT", None))
    for lst in around.values():
        lst.sort(key=lambda e: (e[2] is None, -(e[2] or 0.0), e[0], e[1]))

    def lookup(n):
        return iter(around.get(n, ()))

    want = traverse_before(seeds, lookup, hops=hops, max_nodes=max_nodes, fan_out=fan_out)
    assert traverse(seeds, lookup, hops=hops, max_nodes=max_nodes, fan_out=fan_out) == want
    got = reach(seeds, lookup, hops=hops, max_nodes=max_nodes, fan_out=fan_out)
    assert got.truncated is want.truncated
    assert [(n, h, v, w, got.node_ids[p] if p >= 0 else None) for n, h, v, w, p in zip(
        got.node_ids, got.hops, got.vias, got.weights, got.parents, strict=True)] == [tuple(v) for v in want.visits]
    assert got.hops == sorted(got.hops)  # level by level: the seeds first
    # a lookup answering lists (a view's own sorted lists) is read by slices: the same walk
    listed = reach(seeds, lambda n: around.get(n, []), hops=hops, max_nodes=max_nodes, fan_out=fan_out)
    assert listed == got
    mixed = reach(seeds, lambda n: around.get(n, []) if n % 2 else iter(around.get(n, ())), hops=hops,
                  max_nodes=max_nodes, fan_out=fan_out)
    assert mixed == got
