"""A small thread-safe least-recently-used cache of immutable values built on demand."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

T = TypeVar("T")


class LRUCache(Generic[T]):
    """Keep the ``max_items`` most recently used values (and, with ``weigh``, at most
    ``max_weight`` of their weight).

    Keys must name immutable state (for example a branch and a revision), so entries never
    need invalidating; they only age out.

    Parameters
    ----------
    max_items : int
        Entries kept.
    max_weight : int or None
        The most the entries may weigh together (the most recent one is kept whatever it
        weighs); None: no bound but ``max_items``.
    weigh : callable or None
        ``weigh(value) -> int``, called once per value stored; required with ``max_weight``.

    Examples
    --------
    >>> cache = LRUCache(8, max_weight=5, weigh=len)
    >>> cache.get("a", lambda: "xxx"), cache.get("b", lambda: "yyy"), cache.peek("a")
    ('xxx', 'yyy', None)
    """

    def __init__(self, max_items: int = 64, *, max_weight: int | None = None,
                 weigh: Callable[[T], int] | None = None) -> None:
        if max_weight is not None and weigh is None:
            raise ValueError("max_weight needs weigh")
        self.max_items = max_items
        self.max_weight = max_weight
        self._weigh = weigh
        self._items: OrderedDict[Hashable, tuple[T, int]] = OrderedDict()
        self._weight = 0
        self._lock = threading.Lock()
        #: Lookups answered from the cache, and not (:meth:`get` and :meth:`peek`), since start.
        self.hits = 0
        self.misses = 0

    def get(self, key: Hashable, build: Callable[[], T]) -> T:
        """The value of ``key``, built with ``build()`` on a miss."""
        with self._lock:
            held = self._items.get(key)
            if held is not None:
                self.hits += 1
                self._items.move_to_end(key)
                return held[0]
            self.misses += 1
        value = build()
        self.put(key, value)
        return value

    def peek(self, key: Hashable) -> T | None:
        """The value of ``key`` if held (counts as a use), else None; builds nothing."""
        with self._lock:
            held = self._items.get(key)
            if held is None:
                self.misses += 1
                return None
            self.hits += 1
            self._items.move_to_end(key)
            return held[0]

    def put(self, key: Hashable, value: T) -> None:
        """Hold ``value`` under ``key`` (replacing what it held), dropping the least recently
        used entries past the bounds."""
        weight = self._weigh(value) if self._weigh is not None else 0
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._weight -= old[1]
            self._items[key] = (value, weight)
            self._weight += weight
            while len(self._items) > self.max_items or (
                    self.max_weight is not None and self._weight > self.max_weight and len(self._items) > 1):
                _, (_, dropped) = self._items.popitem(last=False)
                self._weight -= dropped

    def __len__(self) -> int:
        return len(self._items)

    @property
    def weight(self) -> int:
        """What the entries held weigh together (0 without ``weigh``)."""
        return self._weight

    def clear(self) -> None:
        """Forget everything."""
        with self._lock:
            self._items.clear()
            self._weight = 0
