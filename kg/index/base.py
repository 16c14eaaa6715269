"""The contracts of the search indexes, and the values they exchange.

An index holds *chunks*: passages of node text with their vectors. Chunks are keyed by a
``content_key`` (sha256 of a node's text fields, the chunking settings and the embedding model)
and their ``chunk_index`` within it; a node version points at one content key. The SQL store
is the source of truth; an index is derived state rebuilt from SQL and brought up to date by
the chunk sequence number ``seq`` (chunks are append-only in SQL).

Which chunks a search may return is decided by the caller (the branch's visible node versions
after filters), so a filter never truncates a top-k after the fact. How it says so depends on
the index's layout, one of two protocols:

- :class:`ContentAddressedIndex` (the embedded index): one chunk store per repository, filled by
  ``sync`` from SQL's chunk sequence; a search passes the allowed content keys.
- :class:`ScopedIndex` (the Weaviate index): a collection per (workspace, branch) and model,
  filled by ``place`` with node versions; a search passes one :class:`SearchScope` per
  collection (its version keys), and the index has a hybrid query of its own.

Both share :class:`SearchIndex`. :data:`VectorIndex` is either; its ``layout`` attribute
(``"content-addressed"`` or ``"scoped"``) is fixed by the class, so callers dispatch on it
once per call and a type checker narrows the union.
"""

from __future__ import annotations

import weakref
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal, Protocol, runtime_checkable

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
    field : str
        The node property the passage comes from (``title``, ``text``, ...); ``""`` unknown
        (a field-weighted BM25 then counts it as body text).
    """

    seq: int
    content_key: str
    chunk_index: int
    text: str
    model: str
    vector: np.ndarray
    field: str = ""


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

    A :class:`ScopedIndex` (a collection per (workspace, branch): the Weaviate index) stores
    every chunk once per node version placed there; a :class:`ContentAddressedIndex` (the
    embedded one) takes chunks by ``sync`` alone and has no ``place``.

    Attributes
    ----------
    workspace_id, branch_id : int
        Where the version lives (SQL ids; never reused for branches).
    node_id : str
    path : str
    node_type : str
    properties : dict of str to value
        The version's properties (scalars are stored for filtering).
    chunks : tuple of IndexedChunk
        The chunks of the version's content key, in chunk order, all of one model.
    """

    workspace_id: int
    branch_id: int
    node_id: str
    path: str
    node_type: str
    properties: dict[str, Any]
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
        ``{"path_prefix", "path_prefix_mode"?, "node_type", "where"}`` (the arguments of
        :func:`kg.index.weaviate.translate_filters`) to send to the index as well, or None. Only
        safe where the collection's objects carry the searched versions' own path and
        properties (the searched branch at its head); they narrow, never widen, the keys.
    """

    model: str
    workspace_id: int
    branch_id: int
    version_keys: frozenset[str]
    filters: dict[str, Any] | None = None


class KeySet(AbstractSet[str]):
    """An immutable set of content keys that may name the set it was made from.

    Search keeps one set of allowed content keys per branch state and, after a write, makes the
    next state's set from the last one by a few removals and additions (:mod:`kg.rag.search`).
    An index that memoised the mask of :attr:`base` derives this set's mask from it in
    O(changes) instead of looking every key up again; any other consumer sees a read-only set
    (:class:`collections.abc.Set`: membership, iteration, length, comparisons and operators).
    The base is held weakly, so a chain of states does not keep every older set alive.

    The members are the keys of a plain ``dict`` (values None), not a ``frozenset``: a dict
    of strings is one the cyclic garbage collector does not track, where a set is walked, key
    by key, by every collection while it is young. A search state of 1,000,000 keys made per
    write cost 52 ms in each young collection as a frozenset, and nothing as a dict.

    Parameters
    ----------
    keys : iterable of str
        The members.

    Attributes
    ----------
    removed, added : frozenset of str
        What :meth:`derive` left out of and put into :attr:`base` (empty for a set made whole).

    Examples
    --------
    >>> first = KeySet(["a", "b"])
    >>> second = first.derive(removed={"a"}, added={"c"})
    >>> sorted(second), second.base is first, sorted(second.added), first.base
    (['b', 'c'], True, ['c'], None)
    >>> "b" in second, len(second), second == {"b", "c"}
    (True, 2, True)
    """

    __slots__ = ("_base", "_members", "added", "removed", "__weakref__")

    removed: frozenset[str]
    added: frozenset[str]
    _base: weakref.ref[KeySet] | None
    _members: dict[str, None]

    def __init__(self, keys: Iterable[str] = ()) -> None:
        self._members = dict.fromkeys(keys)
        self._base, self.removed, self.added = None, frozenset(), frozenset()

    @property
    def members(self) -> Mapping[str, None]:
        """The keys as a mapping (to None), for C-speed lookups (``members.get``,
        ``members.__contains__``); read-only."""
        return MappingProxyType(self._members)

    def __contains__(self, key: object) -> bool:
        return key in self._members

    def __iter__(self) -> Iterator[str]:
        return iter(self._members)

    def __len__(self) -> int:
        return len(self._members)

    def __repr__(self) -> str:
        return f"KeySet({len(self._members)} keys)"

    @property
    def base(self) -> KeySet | None:
        """The set this one was derived from, while it is alive; None for a set made whole."""
        return self._base() if self._base is not None else None

    def derive(self, *, removed: Iterable[str] = (), added: Iterable[str] = ()) -> KeySet:
        """This set without ``removed`` and with ``added``, remembering it as its base.

        Parameters
        ----------
        removed, added : iterable of str
            Keys to leave out and keys to put in; a key in both ends up in.

        Returns
        -------
        KeySet
            A new set: O(len(self)) to copy the members (at C speed), O(changes) for the rest.
        """
        put = frozenset(added)
        members = self._members
        gone = frozenset(k for k in removed if k in members and k not in put)
        new = frozenset(k for k in put if k not in members)
        made = KeySet.__new__(KeySet)
        made._members = copied = members.copy()
        for key in gone:
            del copied[key]
        copied.update(dict.fromkeys(new))
        made._base, made.removed, made.added = weakref.ref(self), gone, new
        return made


def version_key(node_id: str, content_key: str) -> str:
    """The key of one node version's chunks in a scoped index: ``"{node_id}:{content_key}"``."""
    return f"{node_id}:{content_key}"


@dataclass(frozen=True, slots=True)
class HybridResult:
    """What :meth:`ScopedIndex.hybrid` answers: the hits and the fusion that ranked them.

    Attributes
    ----------
    hits : list of IndexHit
        Best first; ``score`` is the index's fused score, ``distance`` None.
    alpha : float
        Weight of the vector leg, 0 (BM25 only) to 1 (vector only), as sent to the index.
    fusion_type : str
        ``"ranked"`` or ``"relative_score"``, as sent to the index.
    """

    hits: list[IndexHit]
    alpha: float
    fusion_type: str


# -- the protocols -----------------------------------------------------------------------------
#
# Two layouts, chosen once when the index is built (kg.services.build_index): callers dispatch
# on ``index.layout`` (a Literal, so a type checker narrows the union), never by probing for
# methods.


class SearchIndex(Protocol):
    """What every search index has, whatever its layout.

    Attributes
    ----------
    engine : str
        The index's name in a search answer's ``fusion`` (``"embedded"``, ``"weaviate"``).
    """

    @property
    def engine(self) -> str:
        """The index's name (``"embedded"``, ``"weaviate"``)."""
        ...

    def flush(self, repo_key: str) -> None:
        """Persist what the index holds for the repository (a no-op for remote indexes)."""
        ...

    def drop(self, repo_key: str) -> None:
        """Forget everything the index holds for the repository (memory and disk)."""
        ...

    def stats(self, repo_key: str) -> dict[str, Any]:
        """What the index holds for the repository, for a status route."""
        ...

    def close(self) -> None:
        """Release the index's connections (a no-op for an in-process index)."""
        ...


@runtime_checkable
class ContentAddressedIndex(SearchIndex, Protocol):
    """A vector + BM25 index over the chunks of each repository, keyed by content key.

    Every branch shares a chunk: a search passes the content keys its branch state sees, and
    the index ranks only those. Filled by :meth:`sync` from SQL's chunk sequence (the embedded
    index).
    """

    @property
    def layout(self) -> Literal["content-addressed"]:
        """``"content-addressed"``: the tag callers dispatch on."""
        ...

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

    def bm25_documents(
        self,
        repo_key: str,
        query: str,
        k: int,
        *,
        content_keys: Collection[str],
        field_weights: Mapping[str, float] | None = None,
    ) -> list[IndexHit]:
        """Top ``k`` content keys by BM25F over all their chunks (one hit per key, carrying
        its best passage); never a zero score."""
        ...


@runtime_checkable
class ScopedIndex(SearchIndex, Protocol):
    """An index with a collection per (workspace, branch) and model (the Weaviate index).

    Filled by :meth:`place` with node versions' chunks (``kg.indexing.chunks.sync_placements``,
    which keeps its progress in the placement marks) and searched through
    :class:`SearchScope` objects: per (workspace, branch) the version keys the searched branch state
    sees there. It also fuses BM25 and vectors itself (:meth:`hybrid`).
    """

    @property
    def layout(self) -> Literal["scoped"]:
        """``"scoped"``: the tag callers dispatch on."""
        ...

    def place(self, repo_key: str, placements: Sequence[Placement]) -> int:
        """Store node versions' chunks in the collections of their (workspace, branch)."""
        ...

    def placement_marks(self, repo_key: str) -> tuple[int, int]:
        """How far :meth:`place` has been fed from SQL: (chunk seq, revision)."""
        ...

    def advance_placement_marks(self, repo_key: str, seq: int, version: int) -> None:
        """Store the placement marks, once every placement up to them succeeded."""
        ...

    def rewind_placement(self, repo_key: str, seq: int) -> None:
        """Lower the placed-seq mark to ``seq`` so the next pass places again above it."""
        ...

    def knn(
        self,
        repo_key: str,
        vector: np.ndarray,
        k: int,
        *,
        model: str,
        scopes: Sequence[SearchScope],
        max_distance: float | None = None,
    ) -> list[IndexHit]:
        """Top ``k`` chunks by cosine similarity among the versions ``scopes`` allow."""
        ...

    def bm25(
        self, repo_key: str, query: str, k: int, *, scopes: Sequence[SearchScope]
    ) -> list[IndexHit]:
        """Top ``k`` chunks by BM25 among the versions ``scopes`` allow; never a zero score."""
        ...

    def bm25_documents(
        self,
        repo_key: str,
        query: str,
        k: int,
        *,
        scopes: Sequence[SearchScope],
        field_weights: Mapping[str, float] | None = None,
    ) -> list[IndexHit]:
        """Top ``k`` node texts (content keys) by BM25F over their fields among the versions
        ``scopes`` allow, one hit each carrying its best passage."""
        ...

    def hybrid(
        self,
        repo_key: str,
        query: str,
        vector: np.ndarray,
        k: int,
        *,
        model: str,
        scopes: Sequence[SearchScope],
        alpha: float = 0.5,
        fusion_type: str = "ranked",
        max_vector_distance: float | None = None,
    ) -> HybridResult:
        """Top ``k`` chunks by the index's own fusion of BM25 and vector search."""
        ...

    def drop_branch(self, repo_key: str, branch_id: int) -> list[str]:
        """Delete the collections of one branch (after SQL deleted or reset it)."""
        ...

    def drop_workspace_model(self, repo_key: str, workspace_id: int, model: str) -> list[str]:
        """Delete a workspace's collections of a model no version uses any more."""
        ...


VectorIndex = ContentAddressedIndex | ScopedIndex
"""A search index of either layout; ``index.layout`` tells which."""


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
