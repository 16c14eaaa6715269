"""The process's networkx views of branches, least-recently-used, bounded by edges held.

One :class:`kg.graph.view.GraphView` per branch state key ``(repo id, branch id, ancestors)``
(``ancestors`` is the rest of the branch's read chain, fixed from the fork on, so a reset that
re-forks a branch gets a new key). A view is brought forward in place to newer revisions of its
branch; the cache only decides which views stay in memory.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable

from kg.graph.view import GraphView

#: About 0.7 GB: a view holds a million plain edges (100,000 nodes) in about 360 MB
#: (``bench/graph.py``; plain networkx needs about 520 MB for the same graph).
DEFAULT_MAX_EDGES = 2_000_000


class GraphCache:
    """Views of branches, evicted least-recently-used when the edges they hold exceed a budget.

    Parameters
    ----------
    max_edges : int
        Budget of edges (live and dormant) across every view held. A branch larger than this
        never gets a view: its graph reads go to SQL.
    max_too_big : int
        How many keys of branches found too large to remember (they are not tried again).
    """

    def __init__(self, max_edges: int = DEFAULT_MAX_EDGES, *, max_too_big: int = 256) -> None:
        self.max_edges = max_edges
        self.max_too_big = max_too_big
        self._views: OrderedDict[Hashable, GraphView] = OrderedDict()
        self._too_big: OrderedDict[Hashable, None] = OrderedDict()
        self._key_locks: dict[Hashable, threading.Lock] = {}
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> GraphView | None:
        """The view held for ``key`` (now the most recently used), or None."""
        with self._lock:
            view = self._views.get(key)
            if view is not None:
                self._views.move_to_end(key)
            return view

    def put(self, key: Hashable, view: GraphView) -> None:
        """Hold ``view`` for ``key`` and evict others down to the budget."""
        with self._lock:
            self._views[key] = view
            self._views.move_to_end(key)
            self._too_big.pop(key, None)
        self.shrink()

    def discard(self, key: Hashable) -> None:
        """Forget the view of ``key`` (if held)."""
        with self._lock:
            self._views.pop(key, None)

    def shrink(self) -> None:
        """Evict least-recently-used views until the edges held fit the budget (the most
        recently used view stays unless it alone is over budget)."""
        with self._lock:
            total = sum(v.cost for v in self._views.values())
            while self._views and total > self.max_edges:
                key, view = self._views.popitem(last=False)
                total -= view.cost
                if view.cost > self.max_edges:
                    self._remember_too_big(key)

    def key_lock(self, key: Hashable) -> threading.Lock:
        """A lock that serialises building the view of ``key``."""
        with self._lock:
            return self._key_locks.setdefault(key, threading.Lock())

    def too_big(self, key: Hashable) -> bool:
        """Whether the branch of ``key`` was found larger than the budget."""
        with self._lock:
            return key in self._too_big

    def mark_too_big(self, key: Hashable) -> None:
        """Remember that the branch of ``key`` does not fit."""
        with self._lock:
            self._remember_too_big(key)

    def _remember_too_big(self, key: Hashable) -> None:
        self._too_big[key] = None
        while len(self._too_big) > self.max_too_big:
            self._too_big.popitem(last=False)

    @property
    def edges_held(self) -> int:
        """Edges held by every view."""
        with self._lock:
            return sum(v.cost for v in self._views.values())

    def __len__(self) -> int:
        with self._lock:
            return len(self._views)

    def __contains__(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._views

    def clear(self) -> None:
        """Forget every view."""
        with self._lock:
            self._views.clear()
            self._too_big.clear()
            self._key_locks.clear()
