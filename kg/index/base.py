"""The contract every search index fulfils.

An index holds *chunks*: passages of node text with their vectors. Chunks are keyed by a
``content_key`` (sha256 of a node's text fields, the chunking settings and the embedding model)
and their ``chunk_index`` within it; a node version points at one content key. The SQL store
is the source of truth; an index is derived state rebuilt from SQL and brought up to date by
the chunk sequence number ``seq`` (chunks are append-only in SQL).

Which chunks a search may return is decided by the caller (the branch's visible node versions
after filters): it passes the allowed content keys, and the index ranks only those, so a
filter never truncates a top-k after the fact.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Protocol, Sequence

import numpy as np


@dataclass(frozen=True, slots=True)
class IndexedChunk:
    """One chunk as the index stores it.

    Attributes
    ----------
    seq : int
        The chunk's row id in SQL; increases in commit order within a repository.
    content_key : str
        sha256 hex of the node text + chunking settings + model that produced the chunk.
    chunk_index : int
        Position of the chunk within its content key, from 0.
    text : str
        The passage.
    model : str
        Embedding model name of ``vector``.
    vector : ndarray, shape (dim,), float32, L2-normalised
    """

    seq: int
    content_key: str
    chunk_index: int
    text: str
    model: str
    vector: np.ndarray


@dataclass(frozen=True, slots=True)
class IndexHit:
    """One ranked chunk from one leg of a search.

    Attributes
    ----------
    seq : int
        Chunk row id.
    content_key : str
    chunk_index : int
    text : str
    score : float
        Leg score: cosine similarity for KNN, BM25 score for full text. Higher is better.
    rank : int
        1-based rank within the leg.
    distance : float or None
        Cosine distance ``1 - similarity`` for the vector leg, else ``None``.
    """

    seq: int
    content_key: str
    chunk_index: int
    text: str
    score: float
    rank: int
    distance: float | None = None


class VectorIndex(Protocol):
    """A vector + BM25 index over the chunks of each repository (keyed by repo id)."""

    def sync(self, repo_key: str, chunks: Sequence[IndexedChunk]) -> None:
        """Add chunks (idempotent by ``seq``)."""
        ...

    def watermark(self, repo_key: str) -> int:
        """Highest ``seq`` the index holds for the repository (0 when empty)."""
        ...

    def knn(
        self,
        repo_key: str,
        vector: np.ndarray,
        k: int,
        *,
        model: str,
        content_keys: Collection[str],
        max_distance: float | None = None,
    ) -> list[IndexHit]:
        """Top ``k`` chunks by cosine similarity among ``content_keys`` embedded by ``model``."""
        ...

    def bm25(
        self, repo_key: str, query: str, k: int, *, content_keys: Collection[str]
    ) -> list[IndexHit]:
        """Top ``k`` chunks by BM25 among ``content_keys``; never a zero-score row."""
        ...

    def flush(self, repo_key: str) -> None:
        """Persist what the index holds for the repository (a no-op for remote indexes)."""
        ...

    def drop(self, repo_key: str) -> None:
        """Forget every chunk of the repository (memory and disk)."""
        ...
