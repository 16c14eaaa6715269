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

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from kg.errors import InvalidInput


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


@dataclass(frozen=True, slots=True)
class Placement:
    """One node version's chunks, to store in the collection of its (workspace, branch).

    Indexes that keep a collection per (workspace, branch) (``scoped = True``: the Weaviate
    index) store every chunk once per node version placed there; content-addressed indexes
    (the embedded one) take chunks by ``sync`` alone and have no ``place``.

    Attributes
    ----------
    workspace_id, branch_id : int
        Where the version lives (SQL ids; never reused for branches).
    node_id : str
    path : str
    node_type : str
    properties : dict
        The version's properties (scalars are stored for filtering).
    chunks : tuple of IndexedChunk
        The chunks of the version's content key, in chunk order, all of one model.
    """

    workspace_id: int
    branch_id: int
    node_id: str
    path: str
    node_type: str
    properties: dict
    chunks: tuple[IndexedChunk, ...]

    @property
    def version_key(self) -> str:
        """``"{node_id}:{content_key}"``: the key a search allows (see :class:`SearchScope`)."""
        return version_key(self.node_id, self.chunks[0].content_key) if self.chunks else ""


@dataclass(frozen=True, slots=True)
class SearchScope:
    """What a search may read in one (workspace, branch) collection of a scoped index.

    Attributes
    ----------
    model : str
        Embedding model of the collection.
    workspace_id, branch_id : int
    version_keys : frozenset of str
        ``"{node_id}:{content_key}"`` of the node versions the searched branch state sees there
        (after every filter, decided in SQL): the exact visibility filter.
    filters : dict or None
        ``{"path_prefix", "node_type", "where"}`` to send to the index as well, or None. Only
        safe where the collection's objects carry the searched versions' own path and
        properties (the searched branch at its head); they narrow, never widen, the keys.
    """

    model: str
    workspace_id: int
    branch_id: int
    version_keys: frozenset[str]
    filters: dict | None = None


def version_key(node_id: str, content_key: str) -> str:
    """The key of one node version's chunks in a scoped index: ``"{node_id}:{content_key}"``."""
    return f"{node_id}:{content_key}"


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


# -- checks shared by the index implementations ----------------------------------------------


def query_vector(vector: np.ndarray) -> np.ndarray:
    """A query embedding as a unit vector.

    Parameters
    ----------
    vector : ndarray, shape (dim,), float

    Returns
    -------
    ndarray, shape (dim,), float32, L2-normalised

    Raises
    ------
    kg.errors.InvalidInput
        Not 1-D, not finite, or all zeros.
    """
    query = np.asarray(vector, dtype=np.float64)
    norm = float(np.linalg.norm(query)) if query.ndim == 1 else 0.0
    if query.ndim != 1 or not np.isfinite(norm) or norm == 0.0:
        raise InvalidInput(
            "query vector must be 1-D, finite and non-zero", details={"shape": list(query.shape)}
        )
    return (query / norm).astype(np.float32)


# -- snapshots -------------------------------------------------------------------------------------


def fresh_chunks(
    chunks: Sequence[IndexedChunk], held: np.ndarray, watermark: int
) -> list[IndexedChunk]:
    """The chunks whose seq is not held yet, first occurrence of each, in seq order.

    Parameters
    ----------
    chunks : sequence of IndexedChunk
    held : ndarray, shape (n,), int64
        The seqs an index holds.
    watermark : int
        The highest of them (0 when empty).

    Returns
    -------
    list of IndexedChunk

    Raises
    ------
    kg.errors.InvalidInput
        A seq <= 0.
    """
    seqs = np.array([c.seq for c in chunks], dtype=np.int64)
    if (seqs <= 0).any():
        bad = int(seqs[seqs <= 0][0])
        raise InvalidInput(f"chunk seq must be positive, got {bad}", details={"seq": bad})
    unique, first = np.unique(seqs, return_index=True)
    if unique[0] <= watermark:
        first = first[~np.isin(unique, held)]
    return [chunks[i] for i in first]


def checked_vectors(
    chunks: list[IndexedChunk], dims: dict[str, int]
) -> dict[str, np.ndarray]:
    """Per model, the chunks' vectors (in chunk order) checked and L2-normalised.

    Parameters
    ----------
    chunks : list of IndexedChunk
    dims : dict of str to int
        The dimension an index already holds per model (a new model takes its first vector's).

    Returns
    -------
    dict of str to ndarray, shape (m, dim), float32

    Raises
    ------
    kg.errors.InvalidInput
        A vector of the wrong shape, non-finite or all zeros (naming the chunk's seq).
    """
    by_model: dict[str, list[int]] = {}
    for i, chunk in enumerate(chunks):
        by_model.setdefault(chunk.model, []).append(i)
    out: dict[str, np.ndarray] = {}
    for name, members in by_model.items():
        vectors = [np.asarray(chunks[i].vector) for i in members]
        dim = dims.get(name, vectors[0].shape[0] if vectors[0].ndim == 1 else 0)
        for i, v in zip(members, vectors, strict=True):
            if v.ndim != 1 or v.shape[0] != dim or dim == 0:
                raise InvalidInput(
                    f"chunk seq {chunks[i].seq}: vector of shape {v.shape} for model {name!r}"
                    f" of dimension {dim}",
                    details={"seq": chunks[i].seq, "model": name, "dim": dim},
                )
        matrix = np.stack(vectors).astype(np.float64)
        norms = np.linalg.norm(matrix, axis=1)
        bad = ~np.isfinite(norms) | (norms == 0)
        if bad.any():
            seq = chunks[members[int(np.argmax(bad))]].seq
            raise InvalidInput(
                f"chunk seq {seq}: vector is non-finite or all zeros", details={"seq": seq}
            )
        out[name] = (matrix / norms[:, None]).astype(np.float32)
    return out
