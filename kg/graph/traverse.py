"""Bounded breadth-first traversal over any neighbor lookup. Pure: no session, no I/O.

The walk knows nodes only as hashable ids and asks a callable for the edges around a node, in
the stable order of :mod:`kg.graph.neighbors`. The same walk therefore runs over the networkx
view of a branch (:class:`kg.graph.view.GraphView`) and over SQL lookups (time travel, or a
branch too large for the view's memory budget).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain, islice, repeat
from operator import itemgetter
from typing import NamedTuple

from kg.errors import InvalidInput
from kg.graph.neighbors import Edge

MAX_HOPS = 10
MAX_NODES = 10_000
MAX_FAN_OUT = 10_000


class Visit(NamedTuple):
    """A node the walk reached: at ``hop`` from the nearest seed, through the edge that first
    reached it (``via`` its type, ``weight``, ``parent`` the node it came from; all None for a
    seed). A named tuple: a walk makes one per node reached, and it is the cheapest to make."""

    node_id: Hashable
    hop: int
    via: str | None
    weight: float | None
    parent: Hashable | None


@dataclass(frozen=True, slots=True)
class Walk:
    """The nodes a walk reached, in visiting order, and whether a budget cut it short."""

    visits: list[Visit]
    truncated: bool


@dataclass(frozen=True, slots=True)
class Reached:
    """A walk's nodes as columns (:func:`reach`), in visiting order: node ``i`` is
    ``node_ids[i]``, at ``hops[i]``, reached over an edge of type ``vias[i]`` and weight
    ``weights[i]`` from node ``parents[i]`` (an index into the columns; -1, and None for the
    edge, for a seed); ``truncated`` as :attr:`Walk.truncated`."""

    node_ids: list[Hashable]
    hops: list[int]
    vias: list[str | None]
    weights: list[float | None]
    parents: list[int]
    truncated: bool


def check_walk_bounds(hops: int, max_nodes: int, fan_out: int) -> None:
    """Check ``hops`` in 0..10, ``max_nodes`` and ``fan_out`` in 1..10,000.

    Raises
    ------
    kg.errors.InvalidInput
    """
    for name, value, low, high in (("hops", hops, 0, MAX_HOPS), ("max_nodes", max_nodes, 1, MAX_NODES),
                                   ("fan_out", fan_out, 1, MAX_FAN_OUT)):
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise InvalidInput(f"{name} must be an integer between {low} and {high}",
                               details={name: value})


def traverse(
    seeds: Sequence[Hashable],
    neighbors: Callable[[Hashable], Iterable[Edge]],
    *,
    hops: int = 2,
    max_nodes: int = 200,
    fan_out: int = 50,
) -> Walk:
    """Walk breadth-first from ``seeds``, bounded by hops, a node budget and a per-node fan-out.

    Parameters
    ----------
    seeds : sequence of hashable
        Start nodes, hop 0, in the order given (repeats are ignored). They count towards
        ``max_nodes``.
    neighbors : callable(node) -> iterable of Edge
        The edges around a node in the stable order (weight desc with null last, address, type,
        direction), already filtered by direction and relation type. Consumed lazily: the walk
        reads at most ``fan_out`` edges of a node, plus, only to decide ``truncated``, as many
        more as it takes to find one leading to a node it did not visit. A ``list`` answered
        (a view's own sorted list: :meth:`kg.graph.view.GraphView.lookup`) is read by slices,
        with no Python step per edge beyond the test of its node; it must not change while the
        walk runs.
    hops : int, 0..10
        Nodes at distance ``hops`` are reached but not expanded.
    max_nodes : int, 1..10,000
        Most nodes in the answer, seeds included.
    fan_out : int, 1..10,000
        Most edges followed from one node, in the stable order (edges to nodes already reached
        count too: the bound is on work per node).

    Returns
    -------
    Walk
        ``visits``: every node once, at its shortest hop, in visiting order (level by level;
        within a level, by the order of the nodes that reached them, then the stable edge order).
        ``truncated``: True exactly when ``max_nodes`` or ``fan_out`` left unvisited some node
        that the walk would otherwise have reached within ``hops``; a cut in the middle of a
        level counts, a cycle does not.

    Raises
    ------
    kg.errors.InvalidInput
        A bound out of range.

    Notes
    -----
    Time O(n * f) edge reads and O(n) memory for n = ``max_nodes`` and f = ``fan_out``,
    whatever the size of the graph: hop levels after the budget is spent are read only until
    the first node that would have been added. Deciding ``truncated`` after a fan-out cut can
    read further edges of the cut nodes; it stops at the first that leads somewhere new.

    References
    ----------
    .. [1] E. F. Moore, "The shortest path through a maze", Proc. Int. Symp. on the Theory of
       Switching, 1959 (breadth-first search).
    .. [2] T. H. Cormen, C. E. Leiserson, R. L. Rivest and C. Stein, "Introduction to
       Algorithms", 3rd ed., section 22.2, "Breadth-first search", MIT Press, 2009.
    """
    walked = reach(seeds, neighbors, hops=hops, max_nodes=max_nodes, fan_out=fan_out)
    ids = walked.node_ids
    visits = [Visit(node_id, hop, via, weight, ids[parent] if parent >= 0 else None)
              for node_id, hop, via, weight, parent in zip(ids, walked.hops, walked.vias, walked.weights,
                                                            walked.parents, strict=True)]
    return Walk(visits, walked.truncated)


def reach(
    seeds: Sequence[Hashable],
    neighbors: Callable[[Hashable], Iterable[Edge]],
    *,
    hops: int = 2,
    max_nodes: int = 200,
    fan_out: int = 50,
) -> Reached:
    """:func:`traverse`, answered as columns: no object per node reached.

    Parameters
    ----------
    seeds, neighbors, hops, max_nodes, fan_out
        As :func:`traverse`.

    Returns
    -------
    Reached
        The nodes of :func:`traverse`'s ``visits``, in the same order, one entry per node in
        each column; a node's ``parents`` entry is the index of the node that reached it (-1
        for a seed).

    Raises
    ------
    kg.errors.InvalidInput
        A bound out of range.
    """
    check_walk_bounds(hops, max_nodes, fan_out)
    ids: list[Hashable] = []
    levels: list[int] = []
    vias: list[str | None] = []
    weights: list[float | None] = []
    parents: list[int] = []
    seen: set[Hashable] = set()
    truncated = False
    for seed in seeds:
        if seed in seen:
            continue
        if len(ids) == max_nodes:
            truncated = True
            break
        seen.add(seed)
        ids.append(seed)
    count = len(ids)
    levels += [0] * count
    vias += [None] * count
    weights += [None] * count
    parents += [-1] * count
    frontier = range(count)
    cut: list[Iterator[Edge]] = []  # edges past a node's fan-out, not yet read
    hop = 0
    add = seen.add
    while frontier and hop < hops and not truncated:
        first = len(ids)
        for parent in frontier:
            found = neighbors(ids[parent])
            if type(found) is list:  # a node's edges as a list: a slice at a time, no Python step per column
                head = found[:fan_out] if len(found) > fan_out else found
                # each new node once, at its first edge, in order (``add`` answers None)
                fresh = [edge for edge in head if edge[0] not in seen and not add(edge[0])]
                if len(fresh) > max_nodes - len(ids):
                    del fresh[max_nodes - len(ids):]
                    truncated = True
                if fresh:
                    ids += map(itemgetter(0), fresh)
                    vias += map(itemgetter(1), fresh)
                    weights += map(itemgetter(2), fresh)
                    parents += repeat(parent, len(fresh))
                if truncated:
                    break
                if len(found) > fan_out:
                    cut.append(islice(found, fan_out, None))
                continue
            edges = iter(found)
            for edge in islice(edges, fan_out):
                other = edge[0]
                if other in seen:
                    continue
                if len(ids) == max_nodes:
                    truncated = True
                    break
                seen.add(other)
                ids.append(other)
                vias.append(edge[1])
                weights.append(edge[2])
                parents.append(parent)
            else:
                rest = next(edges, None)  # past the fan-out: kept to decide ``truncated``
                if rest is not None:
                    cut.append(chain((rest,), edges))
                continue
            break
        hop += 1
        levels += [hop] * (len(ids) - first)
        frontier = range(first, len(ids))  # the nodes reached at this level, in order
    if not truncated:
        truncated = any(edge[0] not in seen for rest in cut for edge in rest)
    return Reached(ids, levels, vias, weights, parents, truncated)
