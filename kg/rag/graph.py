"""Graph queries on a branch: the networkx view of its relations, NEIGHBORS."""

from __future__ import annotations

from typing import Any, Sequence

import networkx as nx
from sqlalchemy.orm import Session

from kg.graph.neighbors import Direction, neighbors
from kg.store.nodes import get_node, nodes_by_id
from kg.store.paths import parse_address
from kg.store.relations import visible_relations
from kg.store.repos import BranchView


def branch_graph(session: Session, services: Any, view: BranchView) -> nx.MultiDiGraph:
    """The relation graph the branch sees (cached per branch and revision).

    Returns
    -------
    networkx.MultiDiGraph
        Nodes are node ids; one edge per relation, keyed by type, with ``weight`` and
        ``properties``.
    """
    def build() -> nx.MultiDiGraph:
        graph = nx.MultiDiGraph()
        for edge in visible_relations(session, view):
            graph.add_edge(edge.from_node_id, edge.to_node_id, key=edge.rel_type,
                           weight=edge.weight, properties=edge.properties)
        return graph

    return services.graphs.get((view.repo.id, *view.cache_key), build)


def neighbors_of(session: Session, services: Any, view: BranchView, address: str, *,
                 direction: Direction = "BOTH", types: Sequence[str] | None = None) -> list[dict]:
    """NEIGHBORS of the node at ``address`` (``workspace:/path``) in the API shape.

    Raises
    ------
    kg.errors.InvalidInput
        A bad address.
    kg.errors.NotFound
        No such node on the branch.
    """
    node = get_node(session, view, *parse_address(address))
    found = neighbors(branch_graph(session, services, view), node.node_id, direction=direction, types=types)
    others = nodes_by_id(session, view, {n.node_id for n in found})
    names = view.workspaces
    return [
        {"workspace": names[others[n.node_id].workspace_id], "path": others[n.node_id].path,
         "node_id": n.node_id, "relation_type": n.relation_type, "weight": n.weight,
         "direction": n.direction}
        for n in found if n.node_id in others
    ]
