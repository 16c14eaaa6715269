"""The embedded index's background catch-up (:meth:`EmbeddedVectorIndex.catch_up_later`): the
caller returns at once, the chunks are placed by the index's thread from a feed it opens there,
:meth:`wait_for_background` waits for it, and a search's catch-up meanwhile waits instead of
placing the same chunks twice."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

from kg.index.base import IndexedChunk, SearchScope
from kg.index.embedded import EmbeddedVectorIndex


class _Feed:
    """The chunks of a list above a watermark, one page; ``gate`` holds the first page back."""

    def __init__(self, chunks: list[IndexedChunk], gate: threading.Event | None = None) -> None:
        self.chunks, self.gate, self.pages, self.entered = chunks, gate, 0, threading.Event()

    def chunk_pages(self, after_seq: int) -> Iterator[list[IndexedChunk]]:
        self.entered.set()
        if self.gate is not None:
            assert self.gate.wait(30)
        page = [c for c in self.chunks if c.seq > after_seq]
        if page:
            self.pages += 1
            yield page


def _chunks(n: int) -> list[IndexedChunk]:
    rng = np.random.default_rng(3)
    return [IndexedChunk(seq=i + 1, content_key=f"{i:064x}", chunk_index=0, text=f"word{i} common",
                         model="m", vector=rng.standard_normal(8).astype(np.float32)) for i in range(n)]


def test_a_background_catch_up_places_the_chunks_and_a_search_waits_for_it():
    index = EmbeddedVectorIndex(None)
    chunks = _chunks(50)
    gate = threading.Event()
    background = _Feed(chunks, gate)
    opened: list[str] = []

    @contextmanager
    def open_feed() -> Iterator[_Feed]:
        opened.append(threading.current_thread().name)
        yield background

    index.catch_up_later("r", open_feed)  # returns before anything is placed
    assert index.watermark("r") == 0
    assert background.entered.wait(30)  # the background catch-up is reading its feed
    searched: list[int] = []
    search = threading.Thread(target=lambda: searched.append(index.catch_up("r", _Feed(chunks))))
    search.start()
    search.join(0.3)
    assert search.is_alive()  # the search's catch-up waits for the background one
    gate.set()
    assert index.wait_for_background("r", timeout=30)
    search.join(30)
    assert opened == ["kg-index-background"] and background.pages == 1
    assert index.watermark("r") == 50 and searched == [0]  # placed once, by the background
    hits = index.bm25("r", "word7", 5, scope=SearchScope(content_keys=frozenset(c.content_key for c in chunks)))
    assert [h.seq for h in hits] == [8]
    index.close()


def test_a_closed_index_takes_no_background_catch_up():
    index = EmbeddedVectorIndex(None)
    index.close()

    @contextmanager
    def open_feed() -> Iterator[_Feed]:
        raise AssertionError("not opened")
        yield _Feed([])

    index.catch_up_later("r", open_feed)
    assert index.wait_for_background("r", timeout=5)
    assert index.watermark("r") == 0
