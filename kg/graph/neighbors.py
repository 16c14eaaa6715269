"""NEIGHBORS: the edges around one node in a stable order. Pure: no session, no I/O.

The stable order of the edges seen from a node is, everywhere in kg (the networkx view, the SQL
path, traversal frontiers):

1. ``weight`` descending, an edge without weight last;
2. the other node's address ``workspace:path`` (code-point order, as SQL ``COLLATE "C"``);
3. the relation type;
4. the direction (``"IN"`` before ``"OUT"``).

(2, 3, 4) identify one edge seen from one node, so the order is total.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Collection, Hashable, Iterable
from typing import Any, Literal, NamedTuple

import networkx as nx

from kg.errors import InvalidInput

Direction = Literal["OUT", "IN", "BOTH"]
DIRECTIONS: tuple[str, ...] = ("OUT", "IN", "BOTH")
MAX_LIMIT = 10_000
DEFAULT_LIMIT = 100

#: A sort key of one edge seen from a node; see the module docstring.
SortKey = tuple[bool, float, str, str, str]


#: One edge seen from a node as a plain tuple, in :class:`Neighbor`'s field order (a Neighbor is
#: one): what the networkx view keeps and what walks read, by index or by unpacking.
Edge = tuple[Hashable, str, float | None, str, dict[str, Any] | None]


class Neighbor(NamedTuple):
    """One edge seen from a node: the node at the other end, type, weight, direction, properties.

    A named tuple, the cheapest object to make. ``properties`` is None for an edge without any
    in the networkx view's answers (:mod:`kg.graph.view`); read it as ``edge.properties or {}``.
    """

    node_id: Hashable
    relation_type: str
    weight: float | None
    direction: Literal["OUT", "IN"]
    properties: dict[str, Any] | None


def sort_key(weight: float | None, address: str, relation_type: str, direction: str) -> SortKey:
    """The stable-order key of an edge (weight desc with null last, address, type, direction)."""
    return (weight is None, -weight if weight is not None else 0.0, address, relation_type, direction)


def check_direction(direction: str) -> Direction:
    """Normalise a direction (case-insensitive).

    Raises
    ------
    kg.errors.InvalidInput
        Anything but OUT, IN or BOTH.
    """
    value = direction.upper() if isinstance(direction, str) else direction
    if value not in DIRECTIONS:
        raise InvalidInput(
            f"unknown direction {direction!r}: use OUT, IN or BOTH", details={"direction": direction}
        )
    return value  # type: ignore[return-value]


def check_limit(limit: Any, *, name: str = "limit", maximum: int = MAX_LIMIT) -> int:
    """Check a count bound: an int in ``1..maximum``.

    Raises
    ------
    kg.errors.InvalidInput
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= maximum:
        raise InvalidInput(f"{name} must be an integer between 1 and {maximum}", details={name: limit})
    return limit


def check_types(types: Iterable[str] | None) -> frozenset[str] | None:
    """Normalise a relation-type filter: None keeps every type; an empty list is refused.

    Raises
    ------
    kg.errors.InvalidInput
        An empty list (it would match nothing; pass null for every type).
    """
    if types is None:
        return None
    wanted = frozenset(types)
    if not wanted:
        raise InvalidInput("types must be null (every type) or a non-empty list", details={"types": []})
    return wanted


def neighbors(
    graph: nx.MultiDiGraph,
    node_id: Hashable,
    *,
    address: Callable[[Hashable], str],
    direction: Direction = "BOTH",
    types: Collection[str] | None = None,
    limit: int | None = None,
) -> tuple[list[Neighbor], bool]:
    """The edges around ``node_id`` in the stable order, at most ``limit`` of them.

    Parameters
    ----------
    graph : networkx.MultiDiGraph
        Nodes are node ids; one edge per relation, keyed by relation type, with ``weight``
        (float or None) and ``properties`` (dict or None) attributes.
    node_id : hashable
    address : callable(node id) -> str
        The ``workspace:path`` of a node, the second sort key.
    direction : {"OUT", "IN", "BOTH"}
    types : collection of str, optional
        Keep only these relation types.
    limit : int, optional
        At most this many edges (default: all).

    Returns
    -------
    (list of Neighbor, truncated)
        ``truncated`` is True when more edges matched than ``limit``.

    Notes
    -----
    O(d log k) time for a node of degree d and ``k = limit + 1`` (a bounded heap), O(k) memory.
    The networkx view (:mod:`kg.graph.view`) keeps hubs' edges sorted, which makes a read
    O(k) instead.
    """
    if node_id not in graph:
        return [], False
    wanted = set(types) if types else None
    candidates: list[tuple[SortKey, Hashable, Literal["OUT", "IN"], dict]] = []
    if direction in ("OUT", "BOTH"):
        for other, keyed in graph.succ[node_id].items():
            for rel_type, data in keyed.items():
                if wanted is None or rel_type in wanted:
                    candidates.append((sort_key(data.get("weight"), address(other), rel_type, "OUT"),
                                       other, "OUT", data))
    if direction in ("IN", "BOTH"):
        for other, keyed in graph.pred[node_id].items():
            for rel_type, data in keyed.items():
                if wanted is None or rel_type in wanted:
                    candidates.append((sort_key(data.get("weight"), address(other), rel_type, "IN"),
                                       other, "IN", data))
    first = lambda c: c[0]  # noqa: E731 - the sort key of a candidate
    if limit is None or limit >= len(candidates):
        chosen, truncated = sorted(candidates, key=first), False
    else:
        chosen, truncated = heapq.nsmallest(limit, candidates, key=first), True
    return [Neighbor(other, key[3], data.get("weight"), d, data.get("properties") or {})
            for key, other, d, data in chosen], truncated
