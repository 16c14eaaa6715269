"""The contract of the search indexes, and the values they exchange.

An index holds *chunks*: passages of node text with their vectors. Chunks are keyed by a
``content_key`` (sha256 of a node's text fields, the chunking settings and the embedding model)
and their ``chunk_index`` within it; a node version points at one content key. The SQL store
is the source of truth; an index is derived state rebuilt from SQL and brought up to date by
:meth:`SearchIndex.catch_up` from a :class:`ChunkFeed` (chunks are append-only in SQL, their
sequence number ``seq`` grows in commit order).

Which chunks a search may return is decided by the caller (the branch's visible node versions
after filters), so a filter never truncates a top-k after the fact. It says so with one
:class:`SearchScope`, which carries what either engine needs: the visible content keys (the
embedded index: one chunk store per repository, shared by every branch) and, per (workspace,
branch) collection, the visible version keys (Weaviate: a collection per workspace, branch and
model). Every engine implements :class:`SearchIndex`; callers never ask which one they hold.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from contextlib import AbstractContextManager
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable

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

    What a :class:`ChunkFeed` hands an engine that stores chunks per node version (Weaviate);
    an engine keyed by content (the embedded one) reads :meth:`ChunkFeed.chunk_pages` instead.

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
        """``"{node_id}:{content_key}"``: the key a search allows (see :class:`CollectionScope`)."""
        return version_key(self.node_id, self.chunks[0].content_key) if self.chunks else ""


@dataclass(frozen=True, slots=True)
class CollectionScope:
    """What a search may read in one (workspace, branch) collection (a part of a :class:`SearchScope`).

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


class SearchScope:
    """What one search may read, in the terms of every engine.

    Built once per search (:mod:`kg.rag.search`) from the branch state's visible node versions
    after filters; each engine reads the part its storage needs. Both parts name the same node
    versions.

    Parameters
    ----------
    content_keys : collection of str
        The visible content keys. An engine keyed by content ranks only chunks of these; pass
        the same object (a :class:`KeySet`) for the same branch state, so an engine may memoise
        its mask of it.
    collections : iterable of CollectionScope, or a callable returning one
        Per (model, workspace, branch) collection providing visible versions, their version
        keys. A callable is called on the first read of :attr:`collections` and its answer
        kept: an engine that never reads them never pays for the version keys (one string per
        visible node).

    Examples
    --------
    >>> scope = SearchScope({"k1"}, lambda: [CollectionScope("m", 1, 2, frozenset({"n1:k1"}))])
    >>> sorted(scope.content_keys), [c.branch_id for c in scope.collections]
    (['k1'], [2])
    >>> [c.workspace_id for c in scope.of_model("m", {"k1"}).collections], scope.of_model("x", ()).collections
    ([1], ())
    """

    __slots__ = ("content_keys", "_collections", "_make")

    content_keys: Collection[str]
    _collections: tuple[CollectionScope, ...] | None
    _make: Callable[[], Iterable[CollectionScope]] | None

    def __init__(self, content_keys: Collection[str] = (),
                 collections: Iterable[CollectionScope] | Callable[[], Iterable[CollectionScope]] = ()) -> None:
        self.content_keys = content_keys
        if callable(collections):
            self._collections, self._make = None, collections
        else:
            self._collections, self._make = tuple(collections), None

    @property
    def collections(self) -> tuple[CollectionScope, ...]:
        """The collection scopes (made on first read when given as a callable)."""
        made = self._collections
        if made is None:
            assert self._make is not None
            made = self._collections = tuple(self._make())
        return made

    def of_model(self, model: str, content_keys: Collection[str]) -> SearchScope:
        """This scope narrowed to one embedding model, whose visible content keys the caller
        knows; its collections are made lazily as well."""
        return SearchScope(content_keys, lambda: [c for c in self.collections if c.model == model])

    def __repr__(self) -> str:
        made = "lazy" if self._collections is None else len(self._collections)
        return f"SearchScope({len(self.content_keys)} content keys, collections: {made})"


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
    """The key of one node version's chunks in a collection: ``"{node_id}:{content_key}"``."""
    return f"{node_id}:{content_key}"


@dataclass(frozen=True, slots=True)
class HybridResult:
    """What :meth:`SearchIndex.hybrid` answers: the hits and the fusion that ranked them.

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


# -- the feed and the protocol -----------------------------------------------------------------


class ChunkFeed(Protocol):
    """What SQL holds for one repository, as an engine's :meth:`SearchIndex.catch_up` reads it.

    Implemented over a session by :class:`kg.indexing.chunks.SqlChunkFeed`. Complete because a
    repository's revisions and chunks are written under its revision lock: revision numbers
    and chunk ``seq`` grow in commit order, so "above a mark" never misses a row.
    """

    def heads(self) -> tuple[int, int]:
        """``(highest chunk seq, head revision)`` of the repository (0 when none)."""
        ...

    def chunk_pages(self, after_seq: int) -> Iterator[list[IndexedChunk]]:
        """The chunks with ``seq > after_seq``, in seq order, a page at a time."""
        ...

    def versions(self, after_revision: int, upto_revision: int) -> Iterator[list[Placement]]:
        """The live node versions with text of revisions in ``(after_revision, upto_revision]``
        whose chunks exist, as placements in version order, a batch at a time."""
        ...

    def versions_of_chunks(self, after_seq: int, upto_seq: int, upto_revision: int) -> Iterator[list[Placement]]:
        """The live node versions of revisions ``<= upto_revision`` that point at the content
        keys of chunks with seq in ``(after_seq, upto_seq]``, as placements, a batch at a time."""
        ...

    def deleted_branches(self, branch_ids: set[int]) -> set[int] | None:
        """Which of these branches SQL no longer has, read afresh; None when the repository
        itself is gone."""
        ...


@runtime_checkable
class SearchIndex(Protocol):
    """A search index over the chunks of each repository: the one contract of every engine.

    Implemented by :class:`kg.index.embedded.EmbeddedVectorIndex` (in process; chunks keyed by
    content, shared by every branch) and :class:`kg.index.weaviate.WeaviateVectorIndex` (a
    collection per workspace, branch and model). Chosen once by ``kg.services.build_index``;
    every caller uses this interface alone.

    Searches. Every query takes the repository key and one :class:`SearchScope`, and returns
    only chunks of the node versions it allows (the embedded index reads
    :attr:`SearchScope.content_keys`, Weaviate :attr:`SearchScope.collections`), best first,
    ties by ``seq``, ranks 1..len, never more than ``k`` (``k <= 0`` gives ``[]``).

    Catch-up. SQL is the truth; an engine is brought up to date by :meth:`catch_up` from a
    :class:`ChunkFeed`, in whatever way its storage needs (the embedded index reads the chunks
    above its watermark; Weaviate places the node versions written or re-pointed since its
    placement marks, and drops the collections of branches deleted meanwhile). A catch-up is
    idempotent and resumable: a failed one leaves its marks where they were, the next redoes
    the work. Branch deletion (:meth:`drop_branch`), a re-embed's switch (:meth:`rewind`,
    :meth:`drop_workspace_model`) are told to every engine; one that keeps nothing per branch
    or model does nothing.

    Attributes
    ----------
    engine : str
        The index's name in a search answer's ``fusion`` (``"embedded"``, ``"weaviate"``).
    native_hybrid : bool
        Whether :meth:`hybrid` fuses BM25 and vectors in the engine itself (Weaviate); without
        it kg fuses the legs (:mod:`kg.rag.fusion`) and :meth:`hybrid` raises ``InvalidInput``.
    eager_catch_up : bool
        Whether the indexer should catch the engine up right after storing chunks (a remote
        engine, whose catch-up costs round trips a search should not pay); False where a
        search's own catch-up is cheap (in process).
    """

    @property
    def engine(self) -> str: ...

    @property
    def native_hybrid(self) -> bool: ...

    @property
    def eager_catch_up(self) -> bool: ...

    # -- searches

    def knn(self, repo_key: str, vector: np.ndarray, k: int, *, model: str, scope: SearchScope,
            max_distance: float | None = None) -> list[IndexHit]:
        """Top ``k`` chunks embedded by ``model`` by cosine similarity to ``vector`` (any
        non-zero length; normalised by the engine).

        ``score`` is the similarity, ``distance`` ``max(0, 1 - score)``; chunks farther than
        ``max_distance`` are left out. Raises ``InvalidInput`` for a vector that is not 1-D,
        finite and non-zero or whose dimension is not the model's, and a NaN ``max_distance``.
        """
        ...

    def bm25(self, repo_key: str, query: str, k: int, *, scope: SearchScope) -> list[IndexHit]:
        """Top ``k`` chunks (any model) by BM25 of ``query`` (analysed by
        :func:`kg.index.tokenize.analyze`); never a zero score, ``distance`` None."""
        ...

    def bm25_documents(self, repo_key: str, query: str, k: int, *, scope: SearchScope,
                       field_weights: Mapping[str, float] | None = None) -> list[IndexHit]:
        """Top ``k`` node texts (content keys) by BM25F over their fields, one hit per key
        carrying its best passage (``seq``, ``chunk_index``, ``text``) and the key's score.

        A field not in ``field_weights`` weighs 1.0; a negative or non-finite weight raises
        ``InvalidInput``.
        """
        ...

    def hybrid(self, repo_key: str, query: str, vector: np.ndarray, k: int, *, model: str, scope: SearchScope,
               alpha: float = 0.5, fusion_type: str = "ranked",
               max_vector_distance: float | None = None) -> HybridResult:
        """Top ``k`` chunks by the engine's own fusion of BM25 and vector search (``alpha``:
        weight of the vector leg, 0 to 1; ``fusion_type`` ``"ranked"`` or
        ``"relative_score"``). Only where :attr:`native_hybrid`; else ``InvalidInput``."""
        ...

    # -- catch-up and lifecycle

    def catch_up(self, repo_key: str, feed: ChunkFeed) -> int:
        """Bring the repository up to date with SQL; returns what was written (chunks added,
        objects placed). Idempotent; a failure raises and the next call redoes the work."""
        ...

    def catch_up_later(self, repo_key: str, open_feed: Callable[[], AbstractContextManager[ChunkFeed]]) -> None:
        """:meth:`catch_up` off the caller's thread where the engine has one (a write that stored
        many chunks answers once they are durable, not once they are placed): ``open_feed``
        opens a feed there (its own session). A search's :meth:`catch_up` meanwhile waits for
        it, then finds nothing left to add; a failure only logs (the next catch-up redoes it).
        An engine without a thread of its own catches up before returning."""
        ...

    def rewind(self, repo_key: str, seq: int) -> bool:
        """Node versions were re-pointed in place at chunks with seq above ``seq`` (a
        re-embed's switch, no new revision): make the next :meth:`catch_up` take them again.
        True when that catch-up is needed for searches to see them (False: nothing to redo)."""
        ...

    def drop_branch(self, repo_key: str, branch_id: int) -> list[str]:
        """Forget what is held for one branch, after SQL deleted or reset it; the names of what
        was deleted (``[]`` for an engine that holds nothing per branch)."""
        ...

    def drop_workspace_model(self, repo_key: str, workspace_id: int, model: str) -> list[str]:
        """Forget what a workspace holds of a model no version of it uses any more (after a
        re-embed); the names of what was deleted, ``[]`` when nothing is held apart."""
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

    def held_in_memory(self) -> tuple[int, int] | None:
        """What this process holds in memory for the index: (estimated bytes, repositories
        loaded), or None for an index whose data lives in another service."""
        ...

    def close(self) -> None:
        """Release the index's connections and threads."""
        ...


# -- checks shared by the index implementations ----------------------------------------------


def query_vector(vector: np.ndarray) -> np.ndarray:
    """A query embedding as a float32 unit vector; ``InvalidInput`` when not 1-D, not finite, or all zeros."""
    query = np.asarray(vector, dtype=np.float64)
    # numpy.linalg.norm's own sum for a vector (sqrt of the dot product), without its dispatch
    norm = math.sqrt(float(query.dot(query))) if query.ndim == 1 else 0.0
    if query.ndim != 1 or not math.isfinite(norm) or norm == 0.0:
        raise InvalidInput(
            "query vector must be 1-D, finite and non-zero", details={"shape": list(query.shape)}
        )
    return (query / norm).astype(np.float32)


# -- snapshots -------------------------------------------------------------------------------------


def fresh_chunks(
    chunks: Sequence[IndexedChunk], held: np.ndarray, watermark: int
) -> list[IndexedChunk]:
    """The chunks whose seq is not in ``held`` (the seqs an index holds, ``watermark`` the highest),
    first occurrence of each, in seq order; ``InvalidInput`` for a seq <= 0.
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
    """Per model, the chunks' vectors (in chunk order) checked and L2-normalised as float32
    ``(m, dim)`` matrices. ``dims`` is the dimension an index already holds per model (a new
    model takes its first vector's); ``InvalidInput`` names the seq of a vector of the wrong
    shape, non-finite or all zeros.
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
