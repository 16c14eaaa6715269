"""Python's cyclic garbage collector held around work that builds many long-lived objects."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def held() -> Iterator[None]:
    """Hold the cyclic garbage collector for the block, then give it back as it was.

    Yields
    ------
    None

    Notes
    -----
    For work that makes hundreds of thousands of objects and keeps them (an import's records,
    a graph view, search's rows of visible nodes): each pass of the collector over the oldest
    generation walks all of them, so its passes grow with the work (at 500,000 relations an
    import's loop spent 36 us a relation against 10 at 50,000). Reference counting still frees
    what is dropped; cycles wait for the collector's next pass. Process-wide, as the collector
    is: other threads' cyclic garbage also waits until the block ends.

    Examples
    --------
    >>> import gc
    >>> with held():
    ...     gc.isenabled()
    False
    >>> gc.isenabled()
    True
    """
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()
