"""A bounded cache of per-branch relation graphs, keyed by (branch id, revision)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable, Hashable

import networkx as nx


class GraphCache:
    """Least-recently-used graphs; a key names one immutable state of a branch.

    Parameters
    ----------
    max_graphs : int
        How many graphs to keep in memory.
    """

    def __init__(self, max_graphs: int = 16) -> None:
        self.max_graphs = max_graphs
        self._graphs: OrderedDict[Hashable, nx.MultiDiGraph] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable, build: Callable[[], nx.MultiDiGraph]) -> nx.MultiDiGraph:
        """The graph for ``key``, built with ``build()`` on a miss."""
        with self._lock:
            graph = self._graphs.get(key)
            if graph is not None:
                self._graphs.move_to_end(key)
                return graph
        graph = build()
        with self._lock:
            self._graphs[key] = graph
            self._graphs.move_to_end(key)
            while len(self._graphs) > self.max_graphs:
                self._graphs.popitem(last=False)
        return graph

    def clear(self) -> None:
        """Forget every graph."""
        with self._lock:
            self._graphs.clear()
