"""NEIGHBORS over a networkx ``MultiDiGraph`` of one branch. Pure: no session, no I/O.

The graph has one node per node id and one edge per relation, keyed by relation type, with
``weight`` (float or None) and ``properties`` as edge attributes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Literal

import networkx as nx

from kg.errors import InvalidInput

Direction = Literal["OUT", "IN", "BOTH"]
DIRECTIONS: tuple[str, ...] = ("OUT", "IN", "BOTH")


@dataclass(frozen=True, slots=True)
class Neighbor:
    """One edge seen from a node: the node at the other end, the type, weight and direction."""

    node_id: str
    relation_type: str
    weight: float | None
    direction: Literal["OUT", "IN"]


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


def neighbors(
    graph: nx.MultiDiGraph,
    node_id: str,
    *,
    direction: Direction = "BOTH",
    types: Collection[str] | None = None,
) -> list[Neighbor]:
    """The edges around ``node_id``, heaviest first.

    Parameters
    ----------
    graph : networkx.MultiDiGraph
        Node ids as nodes; edges keyed by relation type with a ``weight`` attribute.
    node_id : str
    direction : {"OUT", "IN", "BOTH"}
    types : collection of str, optional
        Keep only these relation types.

    Returns
    -------
    list of Neighbor
        Ordered by weight descending (an edge without weight last), then relation type, then
        the other node's id, then direction: a stable order.

    Notes
    -----
    O(d log d) for a node of degree d.
    """
    if node_id not in graph:
        return []
    wanted = set(types) if types else None
    found: list[Neighbor] = []
    if direction in ("OUT", "BOTH"):
        for _, other, rel_type, data in graph.out_edges(node_id, keys=True, data=True):
            if wanted is None or rel_type in wanted:
                found.append(Neighbor(other, rel_type, data.get("weight"), "OUT"))
    if direction in ("IN", "BOTH"):
        for other, _, rel_type, data in graph.in_edges(node_id, keys=True, data=True):
            if wanted is None or rel_type in wanted:
                found.append(Neighbor(other, rel_type, data.get("weight"), "IN"))
    found.sort(key=lambda n: (n.weight is None, -(n.weight or 0.0), n.relation_type, n.node_id, n.direction))
    return found
