"""A small thread-safe least-recently-used cache of immutable values built on demand."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

T = TypeVar("T")


class LRUCache(Generic[T]):
    """Keep the ``max_items`` most recently used values.

    Keys must name immutable state (for example a branch and a revision), so entries never
    need invalidating; they only age out.
    """

    def __init__(self, max_items: int = 64) -> None:
        self.max_items = max_items
        self._items: OrderedDict[Hashable, T] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable, build: Callable[[], T]) -> T:
        """The value of ``key``, built with ``build()`` on a miss."""
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        value = build()
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.max_items:
                self._items.popitem(last=False)
        return value

    def clear(self) -> None:
        """Forget everything."""
        with self._lock:
            self._items.clear()
