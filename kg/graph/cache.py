"""The process's networkx views of branches, least-recently-used, bounded by memory and count.

One :class:`kg.graph.view.GraphView` per branch state key ``(repo id, branch id, ancestors)``
(``ancestors`` is the rest of the branch's read chain, fixed from the fork on, so a reset that
re-forks a branch gets a new key). A view is brought forward in place to newer revisions of its
branch; the cache only decides which views stay in memory.

The bound is an estimate of the bytes the views hold (:attr:`GraphView.estimated_bytes`: a
fixed cost per view, plus per node and per edge), and a number of views. Counting edges alone
never evicted views without edges: 2,000 repositories of a few nodes each grew a process by
36 MB, and the per-key build locks grew with them; both are bounded here.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable

from kg.graph.view import GraphView

logger = logging.getLogger(__name__)

#: About 0.7 GB: a view holds a million plain edges (100,000 nodes) in about 360 MB
#: (``bench/graph.py``; plain networkx needs about 520 MB for the same graph).
DEFAULT_MAX_EDGES = 2_000_000
#: The estimated bytes every view held may take together (``KG_GRAPH_MAX_BYTES``).
DEFAULT_MAX_BYTES = 1_000_000_000
#: The most views held (``KG_GRAPH_MAX_VIEWS``).
DEFAULT_MAX_VIEWS = 512
#: Locks that serialise view builds, shared by keys (bounded, unlike one lock per key).
_LOCK_STRIPES = 64
#: A branch with at most this many relation versions gets its view built in the request that
#: asks (well under a second); a larger one is built by a background thread meanwhile.
DEFAULT_INLINE_BUILD_MAX = 50_000


class GraphCache:
    """Views of branches, evicted least-recently-used beyond a memory estimate or a count.

    Parameters
    ----------
    max_edges : int
        Budget of edges (live and dormant) across every view held. A branch larger than this
        never gets a view: its graph reads go to SQL.
    max_bytes : int, optional
        Budget of :attr:`GraphView.estimated_bytes` across every view held (default: 1 GB).
    max_views : int, optional
        The most views held (default 512).
    max_too_big : int
        How many keys of branches found too large to remember (they are not tried again).
    inline_build_max : int, optional
        Branches with at most this many relation versions get their view built by the request
        that asks for it; larger ones by a background thread (:meth:`start_build`), while
        requests are answered from SQL.

    Notes
    -----
    The most recently used view stays even when it alone is over ``max_bytes``, unless it is
    over ``max_edges`` (then it is remembered as too big). :meth:`put` and :meth:`shrink`
    are O(v) for v views held (at most ``max_views``), the others O(1).
    """

    def __init__(self, max_edges: int = DEFAULT_MAX_EDGES, *, max_bytes: int = DEFAULT_MAX_BYTES,
                 max_views: int = DEFAULT_MAX_VIEWS, max_too_big: int = 256,
                 inline_build_max: int = DEFAULT_INLINE_BUILD_MAX) -> None:
        self.max_edges = max_edges
        self.inline_build_max = inline_build_max
        self.max_bytes = max_bytes
        self.max_views = max_views
        self.max_too_big = max_too_big
        self._views: OrderedDict[Hashable, GraphView] = OrderedDict()
        self._too_big: OrderedDict[Hashable, None] = OrderedDict()
        self._stripes = tuple(threading.Lock() for _ in range(_LOCK_STRIPES))
        self._builds: dict[Hashable, threading.Thread] = {}
        self._lock = threading.Lock()
        #: :meth:`get` calls that found a view, and that did not, since start.
        self.hits = 0
        self.misses = 0

    def get(self, key: Hashable) -> GraphView | None:
        """The view held for ``key`` (now the most recently used), or None."""
        with self._lock:
            view = self._views.get(key)
            if view is not None:
                self.hits += 1
                self._views.move_to_end(key)
            else:
                self.misses += 1
            return view

    def current(self, key: Hashable, revision: int) -> GraphView | None:
        """The view held for ``key`` if it is at ``revision`` exactly (then the most recently
        used, and a hit), else None with nothing counted: the caller then takes the general path
        (:meth:`get`, a build or bringing the view forward). The view may move past
        ``revision`` before its lock is taken: read its revision again under the lock."""
        with self._lock:
            view = self._views.get(key)
            if view is None or view.revision != revision:
                return None
            self.hits += 1
            self._views.move_to_end(key)
            return view

    def put(self, key: Hashable, view: GraphView) -> None:
        """Hold ``view`` for ``key`` and evict others down to the budgets."""
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
        """Evict least-recently-used views until the views held fit every budget (the most
        recently used view stays unless it alone has more edges than ``max_edges``).

        O(v) for v views held: views grow in place, so their sizes are read afresh.
        """
        with self._lock:
            edges = sum(v.cost for v in self._views.values())
            size = sum(v.estimated_bytes for v in self._views.values())
            while self._views and (len(self._views) > self.max_views or size > self.max_bytes
                                   or edges > self.max_edges):
                key = next(iter(self._views))
                view = self._views[key]
                if len(self._views) == 1 and view.cost <= self.max_edges:
                    break  # the one view in use stays, however large its estimate
                del self._views[key]
                edges -= view.cost
                size -= view.estimated_bytes
                if view.cost > self.max_edges:
                    self._remember_too_big(key)

    def key_lock(self, key: Hashable) -> threading.Lock:
        """A lock that serialises building the view of ``key`` (shared with some other keys)."""
        return self._stripes[hash(key) % len(self._stripes)]

    def start_build(self, key: Hashable, build: Callable[[], None]) -> bool:
        """Run ``build`` (which builds the view of ``key`` and puts it here) in a background
        thread, unless one is already under way for ``key``.

        Parameters
        ----------
        key : hashable
        build : callable() -> None
            Builds the view; an exception it raises is logged and the view is not held.

        Returns
        -------
        bool
            True when this call started the thread.
        """
        with self._lock:
            if key in self._builds or len(self._builds) >= _LOCK_STRIPES:
                return False

            def run() -> None:
                try:
                    build()
                except Exception:  # a failed build only means: SQL answers, and the next traverse tries again
                    logger.exception("building the graph view of %r failed", key)
                finally:
                    with self._lock:
                        self._builds.pop(key, None)

            thread = threading.Thread(target=run, name=f"kg-graph-build-{key!r}", daemon=True)
            self._builds[key] = thread
        thread.start()
        return True

    def building(self, key: Hashable) -> bool:
        """Whether a background build of ``key``'s view is under way."""
        with self._lock:
            return key in self._builds

    def join_builds(self, timeout_s: float | None = None) -> None:
        """Wait for the background builds under way (tests, shutdown)."""
        with self._lock:
            threads = list(self._builds.values())
        for thread in threads:
            thread.join(timeout_s)

    def too_big(self, key: Hashable) -> bool:
        """Whether the branch of ``key`` was found larger than ``max_edges``."""
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

    @property
    def bytes_held(self) -> int:
        """The estimated bytes of every view held."""
        with self._lock:
            return sum(v.estimated_bytes for v in self._views.values())

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
