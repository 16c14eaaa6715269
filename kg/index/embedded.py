"""The embedded search index: vectors and BM25 postings in process memory, snapshots on disk.

Per repository the index holds its chunks as rows in insertion order (columns ``seq``,
content key id, ``chunk_index``, model id, text), one ``float32`` vector matrix per embedding
model (models may differ in dimension) and a :class:`~kg.index.bm25.BM25Index` over the texts.

A model with at least :attr:`AnnConfig.min_rows` rows also gets an HNSW graph over its rows
(:mod:`kg.index.ann`, faiss), one per repository and model: rows are content-addressed and shared
by every branch, so a branch is searchable the moment it exists and creating one builds nothing.
``knn`` walks the graph with the branch's allowed rows as a filter inside the search, adds the
rows synced since the graph was last extended (the tail, at most about a thousand, scanned
exactly) and reranks every candidate with exact dot products; a filter that allows few rows is
scanned exactly instead. Syncs extend the graph; ``drop`` forgets it.

Concurrency: each repository has a lock that serialises writers (``sync``, ``flush``, loading,
``drop``, eviction). Searches take no repository lock: every write appends past the filled part
of its arrays (or into fresh, larger copies) and then publishes an immutable :class:`_View` with
one attribute assignment, so a search reads a consistent snapshot while a sync runs. The one
shared mutable part is a model's graph: faiss does not allow a search during an insertion, so
the graph has its own readers-writer lock (searches share it; a sync holds it alone for one
slice of 512 rows at a time), and a view reads only the graph ids it was published with.

Memory: with a budget (``memory_budget_bytes``) the least recently used repositories are
unloaded when the estimate passes it, after writing their snapshot if ``data_dir`` is set; the
next use loads it again. Without ``data_dir`` an unloaded repository comes back empty with
watermark 0, and the caller re-syncs it from SQL (search does, through :meth:`EmbeddedVectorIndex.catch_up`).

Persistence (when ``data_dir`` is given): :meth:`EmbeddedVectorIndex.flush` writes a snapshot
to ``data_dir/index/<repo_key>/``::

    meta.json             {"format": 1, "watermark", "rows", "keys", "rows_file",
                           "models": [{"name", "dim", "rows", "file",
                                       "hnsw": {"file", "rows"} (optional)}],
                           "fields": [names]}
    rows-<token>.npz      seq int64, key_id int32, chunk_index int32, model_id int32,
                          field_id int32 (n,); texts and content keys as UTF-8 blobs with
                          character offsets (a snapshot without field ids, written before
                          they existed, loads with every field unknown); the BM25 postings
                          as ``bm25_<name>`` (:meth:`BM25Index.to_arrays`; a snapshot
                          without them rebuilds them from the texts)
    vectors-<token>-<m>.npy
                          float32 (rows of model m, dim), in row order
    hnsw-<token>-<m>.faiss
                          model m's HNSW graph over its first ``hnsw.rows`` rows, serialised
                          by faiss (only for a model with a graph)

Every file goes through a temporary file and :func:`os.replace`; ``meta.json`` is replaced last
and is the commit point, then the previous snapshot's files are removed. A snapshot is loaded on
first access to the repository; a missing, unreadable or inconsistent one is ignored (the index
starts empty, its watermark is 0, and the caller re-syncs from SQL). The BM25 postings are
loaded as stored, not rebuilt from the texts (``bench/bm25_scale.py``; a snapshot written before
they were stored rebuilds them once). The graphs are an optional extension of format 1: a
snapshot without them (written before the tier, or with it off) loads, and the graph of a model
with enough rows is rebuilt at load and written with the next flush; a missing or damaged graph
file is likewise rebuilt, never a reason to ignore the snapshot. One process owns a
``data_dir``.
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import os
import re
import shutil
import tempfile
import threading
import time
import uuid
import zipfile
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np

from kg.errors import BackendUnavailable, InvalidInput
from kg.index import ann
from kg.index.base import (
    ChunkFeed,
    HybridResult,
    IndexedChunk,
    IndexHit,
    KeySet,
    SearchScope,
    checked_vectors,
    fresh_chunks,
    query_vector,
)
from kg.index.bm25 import BM25Index, GroupStats, Selection, top_k_indices

__all__ = ["AnnConfig", "EmbeddedVectorIndex"]

log = logging.getLogger(__name__)

SNAPSHOT_FORMAT = 1
"""Version of the on-disk snapshot layout; a snapshot of another version is ignored."""

_REPO_KEY = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}")
# Below this share of a model's rows, knn gathers the candidate vectors before the dot product;
# above it, one product over the whole matrix and then the selection is faster (measured with
# 20,000 x 384 float32 rows: the two cross near 20 %).
_GATHER_SHARE = 0.2
_NO_ROWS = np.zeros(0, np.int64)
# Key masks memoised per index snapshot (search passes one KeySet per branch state).
_MASK_MEMO = 16
# The immutable sets of content keys whose masks and statistics are memoised by identity.
_Memoisable = (frozenset, KeySet)


def _lookup(content_keys: Collection[str]) -> Collection[str]:
    """What to look keys up in at C speed: a :class:`~kg.index.base.KeySet`'s members, else
    the collection itself."""
    return content_keys.members if isinstance(content_keys, KeySet) else content_keys
_GROUP_MEMO = 4
"""BM25F statistics, and BM25 selections, memoised per snapshot (each up to this many): about 48
bytes a row and group each for BM25F (the groups, the selection, the (groups, fields)
normalisation and each row's), 9 bytes a row for BM25 (the mask and each row's normalisation)."""
# Rows of a model past its HNSW graph that knn scans exactly before a sync adds them to the graph.
_ANN_TAIL_ROWS = 1024
# Below this share of a model's rows allowed, knn scans the allowed rows exactly: a filtered
# HNSW walk must widen its candidate list by 1 / share**2 to keep its recall (bench/ann_tier.py).
_ANN_MIN_SHARE = 0.1
# The widest candidate list a filtered walk uses (ef / share, capped).
_ANN_MAX_EF = 1024
#: Rows up to which the configured ef_search keeps recall@10 >= 0.98 (M 32; docs/concepts/ann.md).
_ANN_EF_ROWS = 1_000_000


@dataclass(frozen=True, slots=True)
class AnnConfig:
    """When and how the embedded index searches a model's rows through an HNSW graph.

    Attributes
    ----------
    min_rows : int
        A model with at least this many rows gets a graph, and a search with at least this many
        allowed rows uses it; below it the exact scan is faster (docs/concepts/ann.md). 0 turns the tier
        off.
    m : int
        HNSW neighbours per node and layer.
    ef_construction : int
        Candidate list size while inserting.
    ef_search : int
        Candidate list size of a search (raised to k; divided by the square of the allowed
        share under a branch filter, at most 1,024). Every candidate is reranked exactly.
    background_rows : int
        A sync or a snapshot load that leaves more rows than this to add to a model's graph
        hands the work to the index's builder thread and returns (the rows not in the graph
        yet are searched exactly meanwhile); up to this many are added inline. 0: always in
        the background.
    build_threads : int
        Threads the builder thread adds rows to a graph on (0: the usable cores,
        :func:`kg.index.ann.usable_cores`). Rows added inline, by a request, use one.
    """

    min_rows: int = 20_000
    m: int = 32
    ef_construction: int = 128
    ef_search: int = 128
    background_rows: int = 4096
    build_threads: int = 0

    def threads(self) -> int:
        """The builder's thread count: :attr:`build_threads`, or the usable cores if 0."""
        return self.build_threads or ann.usable_cores()


class _Growable:
    """An append-only array along axis 0 with spare capacity (grows by doubling)."""

    __slots__ = ("buf", "size")

    def __init__(self, dtype: type | np.dtype, tail: tuple[int, ...] = ()) -> None:
        self.buf = np.empty((0, *tail), dtype=dtype)
        self.size = 0

    @classmethod
    def of(cls, array: np.ndarray) -> _Growable:
        """Wrap a filled array (no spare capacity)."""
        grown = cls(array.dtype, array.shape[1:])
        grown.buf, grown.size = array, len(array)
        return grown

    def extend(self, values: np.ndarray) -> None:
        """Append rows; writes only past :attr:`size` or into a new buffer."""
        need = self.size + len(values)
        if need > len(self.buf):
            buf = np.empty((max(need, 2 * len(self.buf)), *self.buf.shape[1:]), self.buf.dtype)
            buf[: self.size] = self.buf[: self.size]
            self.buf = buf
        self.buf[self.size : need] = values
        self.size = need

    def view(self) -> np.ndarray:
        """The filled rows (a view, never written again)."""
        return self.buf[: self.size]


@dataclass(frozen=True, slots=True)
class _ModelView:
    """One model's vectors as published: matrix rows and the repository row of each."""

    dim: int
    vectors: np.ndarray  # (m, dim) float32, L2-normalised
    rows: np.ndarray  # (m,) int64, ascending
    graph: ann.HnswGraph | None = None  # shared, append-only: read ids < graph_rows only
    graph_rows: int = 0  # the first graph_rows model rows are in the graph


class _ModelMask:
    """Which rows of one model a search may return, with what the HNSW tier derives from it."""

    __slots__ = ("_bitmaps", "count", "mask")

    def __init__(self, mask: np.ndarray) -> None:
        self.mask = mask  # (m,) bool over the model's rows
        self.count = int(np.count_nonzero(mask))
        self._bitmaps: dict[int, tuple[np.ndarray | None, int]] = {}

    def bitmap(self, graph_rows: int) -> tuple[np.ndarray | None, int]:
        """The packed bitmap of the first ``graph_rows`` rows (None: all allowed) and how many
        of them are allowed."""
        held = self._bitmaps.get(graph_rows)
        if held is None:
            head = self.mask[:graph_rows]
            allowed = int(np.count_nonzero(head))
            held = (None if allowed == graph_rows else ann.allowed_bitmap(head), allowed)
            self._bitmaps = {graph_rows: held}  # one graph size at a time
        return held


@dataclass(frozen=True, slots=True)
class _View:
    """An immutable snapshot of one repository that searches read without a lock."""

    n: int
    watermark: int
    seq: np.ndarray  # (n,) int64
    key_id: np.ndarray  # (n,) int32
    chunk_index: np.ndarray  # (n,) int32
    model_id: np.ndarray  # (n,) int32
    field_id: np.ndarray  # (n,) int32, into fields
    fields: list[str]  # shared, append-only: field names ("" unknown)
    texts: list[str]  # shared, append-only: read the first n only
    keys: list[str]  # shared, append-only: read the first n_keys only
    key_ids: dict[str, int]  # shared, insert-only: ids >= n_keys are not visible yet
    n_keys: int
    models: dict[str, _ModelView]
    bm25: BM25Index  # shared: may hold documents past n, which the mask leaves out
    masks: dict[int, tuple[frozenset[str] | KeySet, np.ndarray, bool]] = field(default_factory=dict)
    # id(set) -> (the set, its mask over the first n_keys key ids or fewer: one
    # carried from an earlier snapshot is extended when used, whether it allows any key)
    model_masks: dict[tuple[int, str], tuple[frozenset[str] | KeySet, _ModelMask]] = field(default_factory=dict)
    # (id(set), model) -> (the set, its rows of that model)
    group_memo: dict[int, tuple[frozenset[str] | KeySet, GroupStats]] = field(default_factory=dict)
    # id(set) -> (the set, BM25F's statistics over its node texts)
    selection_memo: dict[int, tuple[frozenset[str] | KeySet, Selection]] = field(default_factory=dict)
    # id(set) -> (the set, BM25's selection of its chunks)

    def allowed_keys(self, content_keys: Collection[str]) -> np.ndarray | None:
        """Boolean mask over key ids for ``content_keys``; None when none of them is held.

        The mask of a ``frozenset`` or a :class:`~kg.index.base.KeySet` is memoised on this
        snapshot (a few, by identity): a caller that keeps its set of a branch state (search
        does) pays the O(len) lookup once, not per query. The memo goes along to the next
        snapshot, where a mask made before keys were added is extended by the new keys only;
        and the mask of a :class:`~kg.index.base.KeySet` derived from a memoised set is that
        set's mask with the changes applied. A write then a search costs O(changes + keys / 8), not O(keys).
        """
        if isinstance(content_keys, str):
            raise TypeError("content_keys must be a collection of keys, not one str")
        if not content_keys or not self.n:
            return None
        if not isinstance(content_keys, _Memoisable):
            mask = self._mask(content_keys)
            return mask if mask.any() else None
        held = self.masks.get(id(content_keys))
        if held is not None and held[0] is content_keys and len(held[1]) == self.n_keys:
            return held[1] if held[2] else None  # whether it allows a key, kept: not a pass over it
        if held is not None and held[0] is content_keys:
            mask = self._extended(content_keys, held[1])
        else:
            mask = self._derived(content_keys)
        if len(self.masks) >= _MASK_MEMO:
            self.masks.pop(next(iter(self.masks)), None)
        allows = bool(mask.any())
        self.masks[id(content_keys)] = (content_keys, mask, allows)
        return mask if allows else None

    def model_mask(self, content_keys: Collection[str], model: str, allowed: np.ndarray) -> _ModelMask:
        """The rows of ``model`` whose content key ``allowed`` holds (memoised like
        :meth:`allowed_keys` for an immutable set)."""
        if not isinstance(content_keys, _Memoisable):
            return _ModelMask(allowed[self.key_id[self.models[model].rows]])
        memo_key = (id(content_keys), model)
        held = self.model_masks.get(memo_key)
        if held is not None and held[0] is content_keys:
            return held[1]
        mask = _ModelMask(allowed[self.key_id[self.models[model].rows]])
        if len(self.model_masks) >= _MASK_MEMO:
            self.model_masks.pop(next(iter(self.model_masks)), None)
        self.model_masks[memo_key] = (content_keys, mask)
        return mask

    def group_stats(self, content_keys: Collection[str], allowed: np.ndarray) -> GroupStats:
        """BM25F's collection statistics over the node texts ``allowed`` holds (a group per
        content key, the chunk's field), memoised like :meth:`allowed_keys` for an immutable set:
        the O(rows) part of :meth:`EmbeddedVectorIndex.bm25_documents`, once per branch state
        and snapshot instead of once per query."""
        if isinstance(content_keys, _Memoisable):
            held = self.group_memo.get(id(content_keys))
            if held is not None and held[0] is content_keys:
                return held[1]
        key_id = self.key_id
        stats = self.bm25.group_stats(np.where(allowed[key_id], key_id, -1), self.field_id)
        if isinstance(content_keys, _Memoisable):
            if len(self.group_memo) >= _GROUP_MEMO:
                self.group_memo.pop(next(iter(self.group_memo)), None)
            self.group_memo[id(content_keys)] = (content_keys, stats)
        return stats

    def selection(self, content_keys: Collection[str], allowed: np.ndarray) -> Selection:
        """BM25's selection of the chunks whose content key ``allowed`` holds, with its collection
        statistics, memoised like :meth:`group_stats`: the O(rows) part of
        :meth:`EmbeddedVectorIndex.bm25`, once per branch state and snapshot instead of once per
        query."""
        if isinstance(content_keys, _Memoisable):
            held = self.selection_memo.get(id(content_keys))
            if held is not None and held[0] is content_keys:
                return held[1]
        selection = self.bm25.selection(allowed[self.key_id])
        if isinstance(content_keys, _Memoisable):
            if len(self.selection_memo) >= _GROUP_MEMO:
                self.selection_memo.pop(next(iter(self.selection_memo)), None)
            self.selection_memo[id(content_keys)] = (content_keys, selection)
        return selection

    def hits(self, rows: np.ndarray, scores: Sequence[float],
             distances: Sequence[float] | None = None) -> list[IndexHit]:
        """The hits for repository rows ``rows`` with their ``scores`` (and cosine ``distances``),
        ranked in that order: each column read for all rows at once, not an element at a time."""
        rows = np.asarray(rows, dtype=np.int64)
        keys, texts = self.keys, self.texts
        return [IndexHit(seq, keys[key], chunk, texts[row], score, rank, distance)  # positional: 30 % faster
                for rank, (row, seq, key, chunk, score, distance) in enumerate(zip(
                    rows.tolist(), self.seq[rows].tolist(), self.key_id[rows].tolist(),
                    self.chunk_index[rows].tolist(), scores,
                    [None] * len(rows) if distances is None else distances, strict=True), start=1)]

    def _mask(self, content_keys: Collection[str]) -> np.ndarray:
        """(n_keys,) bool: the key ids of ``content_keys``, each looked up."""
        get = self.key_ids.get
        ids = np.fromiter(
            map(get, _lookup(content_keys), itertools.repeat(-1)), dtype=np.int64, count=len(content_keys)
        )
        allowed = np.zeros(self.n_keys, dtype=bool)
        allowed[ids[(ids >= 0) & (ids < self.n_keys)]] = True
        return allowed

    def _extended(self, content_keys: frozenset[str] | KeySet, mask: np.ndarray) -> np.ndarray:
        """A mask made on an earlier snapshot (fewer keys), extended to this one's keys."""
        if len(mask) >= self.n_keys:
            return mask
        count = self.n_keys - len(mask)
        tail = np.fromiter(map(_lookup(content_keys).__contains__, self.keys[len(mask):self.n_keys]), dtype=bool,
                           count=count)
        return np.concatenate((mask, tail))

    def _derived(self, content_keys: frozenset[str] | KeySet) -> np.ndarray:
        """The mask of a set not memoised: from its base's memoised mask and its changes when
        it is a derived :class:`~kg.index.base.KeySet`, else looked up whole."""
        base = content_keys.base if isinstance(content_keys, KeySet) else None
        held = self.masks.get(id(base)) if base is not None else None
        if base is None or held is None or held[0] is not base:
            return self._mask(content_keys)
        assert isinstance(content_keys, KeySet)
        mask = self._extended(base, held[1]).copy()
        get = self.key_ids.get
        for keys, value in ((content_keys.removed, False), (content_keys.added, True)):
            ids = np.fromiter(map(get, keys, itertools.repeat(-1)), dtype=np.int64, count=len(keys))
            mask[ids[(ids >= 0) & (ids < self.n_keys)]] = value
        return mask

    def hit(self, row: int, rank: int, score: float, distance: float | None) -> IndexHit:
        """The hit for repository row ``row``."""
        return IndexHit(
            seq=int(self.seq[row]),
            content_key=self.keys[self.key_id[row]],
            chunk_index=int(self.chunk_index[row]),
            text=self.texts[row],
            score=score,
            rank=rank,
            distance=distance,
        )


class _Repo:
    """The mutable state of one repository; written only under :attr:`lock`."""

    def __init__(self, config: AnnConfig | None = None) -> None:
        self.lock = threading.Lock()
        self.loaded = False
        self.dropped = False
        self.config = config or AnnConfig()
        self.last_used = 0  # the index's clock at the last access (for eviction)
        self.flushed_at = time.monotonic()  # when its snapshot was last written (or loaded)
        self.reset()

    def reset(self) -> None:
        """Forget every chunk."""
        self.persisted_rows = -1  # rows of the snapshot on disk if it matches memory, else -1
        self.seq = _Growable(np.int64)
        self.key_id = _Growable(np.int32)
        self.chunk_index = _Growable(np.int32)
        self.model_id = _Growable(np.int32)
        self.field_id = _Growable(np.int32)
        self.fields: list[str] = [""]
        self.texts: list[str] = []
        self.keys: list[str] = []
        self.key_ids: dict[str, int] = {}
        self.models: dict[str, tuple[_Growable, _Growable]] = {}  # name -> (vectors, rows)
        self.graphs: dict[str, ann.HnswGraph] = {}  # name -> HNSW graph over its first rows
        self.text_chars = 0
        self.bm25 = BM25Index()
        self.watermark = 0
        self.publish()

    def nbytes(self) -> int:
        """Approximate bytes held: arrays (with spare capacity), texts, postings, graphs."""
        arrays = sum(g.buf.nbytes for g in (self.seq, self.key_id, self.chunk_index, self.model_id, self.field_id))
        arrays += sum(v.buf.nbytes + r.buf.nbytes for v, r in self.models.values())
        # a str costs its characters plus ~50 bytes; BM25 postings about twice the text again
        texts = 3 * self.text_chars + 50 * (len(self.texts) + len(self.keys))
        return arrays + texts + sum(g.nbytes() for g in self.graphs.values())

    def graph_work(self) -> tuple[str, int] | None:
        """The model whose graph most needs rows, and how many it lacks; None if none does."""
        config = self.config
        if config.min_rows <= 0 or not ann.available():
            return None
        best: tuple[str, int] | None = None
        for name, (vectors, _) in self.models.items():
            graph = self.graphs.get(name)
            if graph is None and vectors.size < config.min_rows:
                continue
            missing = vectors.size - (graph.count if graph is not None else 0)
            if graph is not None and missing <= _ANN_TAIL_ROWS:
                continue
            if best is None or missing > best[1]:
                best = (name, missing)
        return best

    def grow_graphs(self) -> bool:
        """Build or extend the HNSW graph of every model with enough rows; True if one changed.

        A model's rows past its graph stay searchable meanwhile (exactly, as the tail); a graph
        that fails to build is forgotten, and its model searched exactly.
        """
        config = self.config
        if config.min_rows <= 0 or not ann.available():
            return False
        changed = False
        for name, (vectors, _) in self.models.items():
            graph = self.graphs.get(name)
            if graph is None and vectors.size < config.min_rows:
                continue
            if graph is not None and vectors.size - graph.count <= _ANN_TAIL_ROWS:
                continue
            try:
                if graph is None:
                    graph = ann.HnswGraph(vectors.buf.shape[1], config.m, config.ef_construction)
                    self.graphs[name] = graph
                # publish between slices: the rows added so far are searched through the graph
                for start in range(graph.count, vectors.size, 8 * ann.ADD_SLICE):
                    graph.add(vectors.buf[start : min(vectors.size, start + 8 * ann.ADD_SLICE)])
                    self.publish()
            except (RuntimeError, MemoryError) as exc:
                log.warning("cannot build the HNSW graph of model %r, searching it exactly: %s", name, exc)
                self.graphs.pop(name, None)
                self.publish()
            changed = True
        return changed

    def intern(self, key: str) -> int:
        """The id of content key ``key``, new if needed."""
        key_id = self.key_ids.get(key)
        if key_id is None:
            key_id = len(self.keys)
            self.keys.append(key)
            self.key_ids[key] = key_id
        return key_id

    def field_number(self, name: str) -> int:
        """The number of field ``name``, new if needed."""
        try:
            return self.fields.index(name)
        except ValueError:
            self.fields.append(name)
            return len(self.fields) - 1

    def append(self, chunks: list[IndexedChunk], matrices: dict[str, np.ndarray]) -> None:
        """Append new, checked chunks (their vectors by model in ``matrices``) and publish."""
        model_ids = {name: i for i, name in enumerate(dict.fromkeys([*self.models, *matrices]))}
        seqs = np.array([c.seq for c in chunks], dtype=np.int64)
        chunk_index = np.array([c.chunk_index for c in chunks], dtype=np.int32)
        model_id = np.array([model_ids[c.model] for c in chunks], dtype=np.int32)
        rows = np.arange(self.seq.size, self.seq.size + len(chunks), dtype=np.int64)
        self.bm25.add_many(zip(rows.tolist(), (c.text for c in chunks), strict=True))  # all or nothing
        try:
            for name, matrix in matrices.items():
                if name not in self.models:
                    self.models[name] = (
                        _Growable(np.float32, (matrix.shape[1],)),
                        _Growable(np.int64),
                    )
                vectors, model_rows = self.models[name]
                vectors.extend(matrix)
                model_rows.extend(rows[model_id == model_ids[name]])
            self.seq.extend(seqs)
            self.key_id.extend(np.array([self.intern(c.content_key) for c in chunks], np.int32))
            self.chunk_index.extend(chunk_index)
            self.model_id.extend(model_id)
            self.field_id.extend(np.array([self.field_number(c.field) for c in chunks], np.int32))
            self.texts.extend(c.text for c in chunks)
            self.text_chars += sum(len(c.text) for c in chunks)
        except BaseException:
            # Half-appended state cannot be trusted: start over empty (watermark 0), so the
            # caller re-syncs from SQL.
            self.reset()
            raise
        self.watermark = max(self.watermark, int(seqs.max()))
        self.publish()

    def publish(self) -> None:
        """Make the current state visible to searches (the key masks memoised on the last
        snapshot go along while its key ids stand)."""
        previous: _View | None = getattr(self, "view", None)
        masks = dict(previous.masks) if previous is not None and previous.keys is self.keys else {}
        models = {}
        for name, (vectors, rows) in self.models.items():
            graph = self.graphs.get(name)
            models[name] = _ModelView(dim=vectors.buf.shape[1], vectors=vectors.view(), rows=rows.view(),
                                      graph=graph, graph_rows=graph.count if graph is not None else 0)
        self.view = _View(
            n=self.seq.size,
            watermark=self.watermark,
            seq=self.seq.view(),
            key_id=self.key_id.view(),
            chunk_index=self.chunk_index.view(),
            model_id=self.model_id.view(),
            field_id=self.field_id.view(),
            fields=self.fields,
            texts=self.texts,
            keys=self.keys,
            key_ids=self.key_ids,
            n_keys=len(self.keys),
            models=models,
            bm25=self.bm25,
            masks=masks,
        )


class EmbeddedVectorIndex:
    """The default :class:`~kg.index.base.SearchIndex`: in process memory, optional snapshots.

    Chunks are keyed by content and shared by every branch: a search reads its scope's
    :attr:`~kg.index.base.SearchScope.content_keys`; nothing is held per branch or model, so
    branch and model drops are no-ops, and :meth:`catch_up` adds the chunks above the watermark.

    Parameters
    ----------
    data_dir : Path or None
        Folder for snapshots (``data_dir/index/<repo_key>/``); ``None`` keeps everything in
        memory only. Nothing is read or written until a repository is first used.
    ann : AnnConfig, optional
        The HNSW tier (:mod:`kg.index.ann`): when a model's rows are searched through a graph.
    memory_budget_bytes : int or None
        Bytes the repositories held in memory may take together (estimated by
        :meth:`memory_bytes`); past it the least recently used ones are unloaded (written to
        their snapshot first when ``data_dir`` is set, and loaded from it on their next use;
        without ``data_dir`` an unloaded repository is empty again, watermark 0, and its caller
        re-syncs it from SQL). The repository in use is never unloaded. ``None``: no bound.
    flush_interval_s : float or None
        With ``data_dir``: a sync writes the repository's snapshot in the background thread
        when the last one is at least this old (seconds; 0 after every sync), so a restart
        loads recent rows instead of re-syncing them from SQL. ``None``: only :meth:`flush`,
        eviction and :meth:`close` write snapshots.

    Notes
    -----
    Memory per chunk: ``4 * dim`` bytes of vector (up to twice that while a matrix has spare
    capacity), the text, about 20 bytes of row columns and the BM25 postings of its terms; a
    model's HNSW graph adds about ``dim + 160`` bytes per row.

    Repository keys must match ``[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}`` (they name a folder).
    """

    engine = "embedded"
    native_hybrid = False  # kg fuses the legs (kg.rag.fusion)
    eager_catch_up = False  # a search's catch-up reads the chunks above the watermark: cheap

    def __init__(self, data_dir: Path | None = None, *, ann: AnnConfig | None = None,
                 memory_budget_bytes: int | None = None, flush_interval_s: float | None = None) -> None:
        self._root = Path(data_dir) / "index" if data_dir is not None else None
        self._repos: dict[str, _Repo] = {}
        self._registry_lock = threading.Lock()
        self._ann = ann or AnnConfig()
        self._budget = memory_budget_bytes
        self._clock = itertools.count(1)
        # The HNSW builder (:meth:`_grow`): repositories whose graphs lag, served in order.
        self._builder_cond = threading.Condition(threading.Lock())
        self._builder_queue: dict[str, None] = {}
        self._building: str | None = None
        self._builder: threading.Thread | None = None
        self._closed = False
        # Snapshots written by the same thread, at most once per interval a repository.
        self._flush_interval = flush_interval_s if data_dir is not None else None
        self._flush_queue: dict[str, None] = {}
        # Catch-ups handed to the same thread (catch_up_later), each with the feed opener it runs.
        self._catch_up_queue: dict[str, Callable[[], AbstractContextManager[ChunkFeed]]] = {}
        self._catching: dict[str, threading.Lock] = {}  # one catch-up at a time a repository

    # -- catch-up -----------------------------------------------------------------------------------

    def catch_up(self, repo_key: str, feed: ChunkFeed) -> int:
        """Add the chunks above the watermark, a page at a time: the chunks added. One catch-up
        of a repository at a time: a search arriving during a background one (:meth:`catch_up_later`)
        waits for it, then reads only what is still above the watermark."""
        with self._registry_lock:
            lock = self._catching.setdefault(repo_key, threading.Lock())
        with lock:
            added = 0
            for page in feed.chunk_pages(self.watermark(repo_key)):
                self.sync(repo_key, page)
                added += len(page)
            return added

    def catch_up_later(self, repo_key: str, open_feed: Callable[[], AbstractContextManager[ChunkFeed]]) -> None:
        """:meth:`catch_up` in the background thread (before any graph it then extends);
        :meth:`wait_for_background` waits for it too."""
        with self._builder_cond:
            if self._closed:
                return
            self._catch_up_queue[repo_key] = open_feed
        self._background(self._catch_up_queue, repo_key)

    def rewind(self, repo_key: str, seq: int) -> bool:
        """Nothing to redo: a re-pointed version's new chunks arrive by the watermark like any
        others, and a search's content keys pick them."""
        return False

    def drop_branch(self, repo_key: str, branch_id: int) -> list[str]:
        """Nothing is held per branch."""
        return []

    def drop_workspace_model(self, repo_key: str, workspace_id: int, model: str) -> list[str]:
        """Nothing is held per workspace: an unused model's chunks are never in a search's keys."""
        return []

    def sync(self, repo_key: str, chunks: Sequence[IndexedChunk]) -> None:
        """Add chunks in any order; a ``seq`` already held is skipped (idempotent), one below the
        watermark not held yet is added (a transaction that committed late). Vectors are stored
        L2-normalised as ``float32``.

        Raises ``InvalidInput`` for the whole call, nothing added: a ``seq`` <= 0, or a vector that
        is not 1-D, has a dimension other than its model's, or is non-finite or all zeros.

        Notes
        -----
        O(m log m + m * dim + text length) for m chunks, plus O(n) when some seq is not above
        the watermark (membership test against the n held rows).
        """
        if not chunks:
            return
        with self._writing(repo_key) as repo:
            fresh = fresh_chunks(chunks, repo.seq.view(), repo.watermark)
            if not fresh:
                return
            dims = {name: vectors.buf.shape[1] for name, (vectors, _) in repo.models.items()}
            repo.append(fresh, checked_vectors(fresh, dims))
            self._grow(repo_key, repo)
            if self._flush_interval is not None and time.monotonic() - repo.flushed_at >= self._flush_interval:
                self._background(self._flush_queue, repo_key)
        self._evict(keep=repo_key)

    def watermark(self, repo_key: str) -> int:
        """Highest ``seq`` held for the repository, 0 when it holds nothing."""
        return self._view(repo_key).watermark

    def knn(
        self,
        repo_key: str,
        vector: np.ndarray,
        k: int,
        *,
        model: str,
        scope: SearchScope,
        max_distance: float | None = None,
    ) -> list[IndexHit]:
        """Top ``k`` chunks of ``model`` by cosine similarity among the scope's content keys
        (the contract of :meth:`kg.index.base.SearchIndex.knn`).

        Notes
        -----
        Exact: O(len(content_keys) + m + c * dim + c log k) for m rows of ``model`` and c
        candidate rows: the candidates' vectors are gathered when they are a small share of the
        model's rows, else one matrix-vector product covers all m rows;
        :func:`numpy.argpartition` selects the top k.

        Approximate, when the model has an HNSW graph [1]_ and at least
        :attr:`AnnConfig.min_rows` rows (and a tenth of the model's rows) are allowed: the
        graph's walk, filtered by the allowed rows inside the search, proposes ``max(k, ef)``
        candidates (``ef`` = :attr:`AnnConfig.ef_search` over the allowed share squared, times
        the square of the graph's rows over a million past a million, at most 1,024), the
        rows added since the graph was last extended (at most about a thousand) are added to
        them, and all are reranked with exact dot products, so every distance returned is exact
        and only recall is approximate (>= 0.98 of exact at 10, docs/concepts/ann.md).
        O(ef * M * dim * log m) for the walk. The memoised masks make the O(m) row mask a
        once-per-branch-state cost for an immutable set (a ``frozenset`` or a ``KeySet``).

        References
        ----------
        .. [1] Y. A. Malkov and D. A. Yashunin, "Efficient and robust approximate nearest
           neighbor search using Hierarchical Navigable Small World graphs", IEEE TPAMI 42(4),
           2018, pp. 824-836.
        """
        content_keys = scope.content_keys
        query = query_vector(vector)
        if max_distance is not None and np.isnan(max_distance):
            raise InvalidInput("max_distance must be a number", details={"max_distance": None})
        view = self._view(repo_key)
        store = view.models.get(model)
        if store is None:
            return []
        if len(query) != store.dim:
            raise InvalidInput(
                f"query vector has dimension {len(query)}, model {model!r} has {store.dim}",
                details={"model": model, "dim": store.dim, "got": len(query)},
            )
        allowed = view.allowed_keys(content_keys)
        if k <= 0 or allowed is None:
            return []
        rows_of = view.model_mask(content_keys, model, allowed)
        m = len(store.rows)
        if (store.graph is not None and rows_of.count >= self._ann.min_rows
                and rows_of.count >= _ANN_MIN_SHARE * m):
            local = self._ann_candidates(store, rows_of, query, k)
            sims = store.vectors[local] @ query
        else:
            local = np.flatnonzero(rows_of.mask)
            if len(local) < _GATHER_SHARE * m:
                sims = store.vectors[local] @ query
            else:
                sims = (store.vectors @ query)[local]
        distances = np.maximum(0.0, 1.0 - sims.astype(np.float64))
        if max_distance is not None:
            within = distances <= max_distance
            local, sims, distances = local[within], sims[within], distances[within]
        if not len(local):
            return []
        rows = store.rows[local]
        best = top_k_indices(sims, k, tiebreak=view.seq[rows])
        return view.hits(rows[best], sims[best].astype(np.float64).tolist(), distances[best].tolist())

    def _ann_candidates(self, store: _ModelView, rows_of: _ModelMask, query: np.ndarray, k: int) -> np.ndarray:
        """Model rows to rerank exactly: the graph's allowed candidates plus every allowed row
        past the graph."""
        assert store.graph is not None
        covered = store.graph_rows
        bitmap, allowed_in_graph = rows_of.bitmap(covered)
        mask = rows_of.mask
        tail = np.flatnonzero(mask[covered:]) + covered if covered < len(mask) else _NO_ROWS
        if not allowed_in_graph:
            return tail
        share = allowed_in_graph / covered
        # A filter thins the allowed rows near the query and pushes its true neighbours out to
        # where the walk's list is sparser: widen the list by 1 / share**2 (at 50 %, ef x 4).
        # Past _ANN_EF_ROWS rows the same ef reaches less of the graph: widen by the square of
        # the size over it (M 32, bench/ann_tier.py: recall@10 at ef 128 was 0.989 at 1M rows
        # and 0.885 at 2M, where ef 384 gave 0.985; 2M rows get 512).
        size = max(1.0, covered / _ANN_EF_ROWS) ** 2
        ef = min(_ANN_MAX_EF, max(int(self._ann.ef_search * size / share**2), k))
        found = store.graph.search(query, max(k, ef), ef=ef, bitmap=bitmap, limit=covered)
        return np.concatenate((np.sort(found), tail)) if len(tail) else np.sort(found)

    def bm25(self, repo_key: str, query: str | Mapping[str, float], k: int, *, scope: SearchScope) -> list[IndexHit]:
        """Top ``k`` chunks by BM25 among the scope's content keys (any model); never a zero
        score. BM25's N, df and avgdl are computed over those keys; ties by row (sync order).
        ``query`` may also be a weighted query of index terms
        (:meth:`kg.index.bm25.BM25Index.query_weights`: a query expanded by relevance feedback).

        Notes
        -----
        O(n + len(content_keys) + postings of the query terms), n the repository's rows; see
        :meth:`kg.index.bm25.BM25Index.search`.

        References
        ----------
        .. [1] S. Robertson and H. Zaragoza, "The Probabilistic Relevance Framework: BM25 and
           Beyond", Foundations and Trends in Information Retrieval 3(4), 2009, pp. 333-389.
        """
        if k <= 0 or not _has_terms(query):
            return []
        view = self._view(repo_key)
        allowed = view.allowed_keys(scope.content_keys)
        if allowed is None:
            return []
        rows, scores = view.bm25.rank(query, k, selection=view.selection(scope.content_keys, allowed))
        return view.hits(rows, scores.tolist())

    def bm25_documents(
        self,
        repo_key: str,
        query: str | Mapping[str, float],
        k: int,
        *,
        scope: SearchScope,
        field_weights: Mapping[str, float] | None = None,
    ) -> list[IndexHit]:
        """Top ``k`` of the scope's content keys (node texts) by BM25F over all their chunks
        (the contract of :meth:`kg.index.base.SearchIndex.bm25_documents`): N, df and the
        average field lengths are computed over those keys, a chunk of unknown field weighs
        1.0, ties by key id (sync order). ``query`` may also be a weighted query, as in
        :meth:`bm25`.

        Notes
        -----
        O(n + postings of the query terms), n the repository's rows, for the first query of a
        branch state (a ``KeySet`` or ``frozenset`` of content keys) on a snapshot; then O(node texts +
        postings): the collection statistics are memoised on the snapshot
        (:meth:`kg.index.bm25.BM25Index.group_stats`); see
        :meth:`kg.index.bm25.BM25Index.search_groups`.

        References
        ----------
        .. [1] S. Robertson and H. Zaragoza, "The Probabilistic Relevance Framework: BM25 and
           Beyond", Foundations and Trends in Information Retrieval 3(4), 2009, section 3.7.
        """
        weights_by_name = dict(field_weights or {})
        for name, weight in weights_by_name.items():
            if not isinstance(weight, int | float) or not np.isfinite(weight) or weight < 0:
                raise InvalidInput(f"field weight of {name!r} must be a finite number >= 0",
                                   details={"field": name, "weight": weight})
        if k <= 0 or not _has_terms(query):
            return []
        content_keys = scope.content_keys
        view = self._view(repo_key)
        allowed = view.allowed_keys(content_keys)
        if allowed is None:
            return []
        weights = [float(weights_by_name.get(name, 1.0)) for name in view.fields[: int(view.field_id.max()) + 1]]
        ranked = view.bm25.search_groups(query, k, field_weights=weights,
                                         stats=view.group_stats(content_keys, allowed))
        return view.hits(np.array([hit.best_doc for hit in ranked], np.int64), [hit.score for hit in ranked])

    def hybrid(self, repo_key: str, query: str, vector: np.ndarray, k: int, *, model: str, scope: SearchScope,
               alpha: float = 0.5, fusion_type: str = "ranked",
               max_vector_distance: float | None = None) -> HybridResult:
        """No hybrid query of its own (:attr:`native_hybrid` is False): always ``InvalidInput``."""
        raise InvalidInput("this index has no hybrid query of its own: use fusion 'kg' (the default)")

    def drop(self, repo_key: str) -> None:
        """Forget every chunk of the repository, in memory and its snapshot folder (an unknown one
        is a no-op); ``BackendUnavailable`` when the folder could not be removed.
        """
        _check_repo_key(repo_key)
        # Under the registry lock, so the repository cannot be re-created (and its old snapshot
        # loaded) before the folder is gone.
        with self._registry_lock:
            repo = self._repos.pop(repo_key, None)
            if repo is not None:
                with repo.lock:
                    repo.dropped = True
                    repo.loaded = True
                    repo.reset()
            if self._root is not None:
                try:
                    shutil.rmtree(self._root / repo_key)
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    raise BackendUnavailable(
                        f"cannot remove the index folder of {repo_key!r}: {exc}"
                    ) from exc

    # -- persistence and status ----------------------------------------------------------------

    def flush(self, repo_key: str) -> None:
        """Write the repository's snapshot to ``data_dir`` (no-op without it, or when nothing was
        added since the last flush or load): O(n * dim + text length) bytes; searches go on
        meanwhile, syncs wait. ``BackendUnavailable`` when it could not be written (the previous
        snapshot stays valid).
        """
        if self._root is None:
            return
        with self._writing(repo_key) as repo:
            if repo.persisted_rows == repo.seq.size:
                return
            try:
                _write_snapshot(self._root / repo_key, repo.view, repo.graphs)
            except OSError as exc:
                raise BackendUnavailable(
                    f"cannot write the index snapshot of {repo_key!r}: {exc}"
                ) from exc
            repo.persisted_rows = repo.seq.size
            repo.flushed_at = time.monotonic()

    def memory_bytes(self) -> int:
        """Estimated bytes the loaded repositories take (arrays, texts, postings, graphs)."""
        return sum(repo.nbytes() for repo in list(self._repos.values()))

    def loaded_repositories(self) -> list[str]:
        """Keys of the repositories held in memory, least recently used first."""
        return [key for key, _ in sorted(list(self._repos.items()), key=lambda item: item[1].last_used)]

    def held_in_memory(self) -> tuple[int, int] | None:
        return self.memory_bytes(), len(self._repos)

    def stats(self, repo_key: str) -> dict[str, Any]:
        """``{"chunks", "models": {model: chunks}, "dims": {model: dim}, "watermark"}``."""
        view = self._view(repo_key)
        return {
            "chunks": view.n,
            "models": {name: len(store.rows) for name, store in view.models.items()},
            "dims": {name: store.dim for name, store in view.models.items()},
            "watermark": view.watermark,
        }

    def close(self) -> None:
        """Stop the background thread (a graph it was extending keeps the rows it has), then,
        with ``data_dir``, write the snapshot of every loaded repository that changed since
        its last one (one that cannot be written is logged: the rows are in SQL).
        """
        with self._builder_cond:
            self._closed = True
            self._builder_queue.clear()
            self._flush_queue.clear()
            self._catch_up_queue.clear()
            self._builder_cond.notify_all()
            builder = self._builder
        if builder is not None and builder is not threading.current_thread():
            builder.join(timeout=60)
        if self._root is None:
            return
        for key in list(self._repos):
            repo = self._repos.get(key)
            if repo is None or not repo.loaded or repo.dropped or repo.persisted_rows == repo.seq.size:
                continue
            try:
                self.flush(key)
            except BackendUnavailable as exc:
                log.warning("closing without the index snapshot of %r: %s", key, exc)

    def wait_for_background(self, repo_key: str, timeout: float | None = None) -> bool:
        """Wait (``timeout`` seconds, None: as long as it takes) until the background thread has
        nothing left to do for ``repo_key`` (graph building, a snapshot flush); False on timeout.
        Searches may still scan up to ``_ANN_TAIL_ROWS`` recent rows of a model exactly.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._builder_cond:
            while (repo_key in self._catch_up_queue or repo_key in self._builder_queue
                   or repo_key in self._flush_queue or self._building == repo_key):
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._builder_cond.wait(left)
        return True

    def _grow(self, repo_key: str, repo: _Repo) -> None:
        """Bring the repository's graphs up to its rows: inline when little is missing
        (:attr:`AnnConfig.background_rows`), else by the builder thread. Called holding
        ``repo.lock``."""
        work = repo.graph_work()
        if work is None:
            return
        if work[1] <= repo.config.background_rows:
            if repo.grow_graphs():
                repo.persisted_rows = -1  # the next flush writes the graph built or extended
            return
        self._background(self._builder_queue, repo_key)

    def _background(self, queue: dict[str, Any], repo_key: str) -> None:
        """Queue ``repo_key`` for the background thread (started on first use)."""
        with self._builder_cond:
            if self._closed:
                return
            if queue is not self._catch_up_queue:
                queue[repo_key] = None
            if self._builder is None or not self._builder.is_alive():
                self._builder = threading.Thread(target=self._build_graphs, name="kg-index-background",
                                                 daemon=True)
                self._builder.start()
            self._builder_cond.notify_all()

    def _build_graphs(self) -> None:
        """The background thread: extends the queued repositories' graphs, one slice at a
        time, then writes the snapshots queued by :attr:`_flush_queue` (graphs first: a
        snapshot written after them holds them).

        Each slice is added holding only the graph's own lock (searches wait for one slice of
        :data:`kg.index.ann.ADD_SLICE` rows at most); the repository's lock is held only to
        pick the work and to publish it, so syncs, flushes and eviction go on meanwhile. The
        rows a slice reads are below the model's published size, which appends never rewrite.
        """
        while True:
            with self._builder_cond:
                while (not self._catch_up_queue and not self._builder_queue and not self._flush_queue
                       and not self._closed):
                    self._builder_cond.wait()
                if self._closed:
                    self._building = None
                    self._builder_cond.notify_all()
                    return
                opener = None
                if self._catch_up_queue:  # rows first: the graphs and snapshots then hold them
                    repo_key = next(iter(self._catch_up_queue))
                    opener = self._catch_up_queue.pop(repo_key)
                    graphs = False
                else:
                    graphs = bool(self._builder_queue)
                    queue = self._builder_queue if graphs else self._flush_queue
                    repo_key = next(iter(queue))
                    del queue[repo_key]
                self._building = repo_key
            try:
                if opener is not None:
                    with opener() as feed:
                        self.catch_up(repo_key, feed)
                elif graphs:
                    self._grow_in_background(repo_key)
                elif repo_key in self._repos:
                    self.flush(repo_key)
            except Exception:  # the thread must survive: the model is searched exactly meanwhile
                log.exception("the index's background work failed on repository %r", repo_key)
            finally:
                with self._builder_cond:
                    self._building = None
                    self._builder_cond.notify_all()

    def _grow_in_background(self, repo_key: str) -> None:
        repo = self._repos.get(repo_key)
        while repo is not None and not self._closed:
            with repo.lock:
                if repo.dropped:
                    return
                work = repo.graph_work()
                if work is None:
                    return
                name = work[0]
                vectors = repo.models[name][0].view()  # rows below this size are never rewritten
                graph = repo.graphs.get(name)
                if graph is None:
                    graph = ann.HnswGraph(vectors.shape[1], repo.config.m, repo.config.ef_construction)
                    repo.graphs[name] = graph
                start = graph.count
            threads = repo.config.threads()
            stop = min(len(vectors), start + 8 * ann.ADD_SLICE * threads)
            failed: BaseException | None = None
            try:
                graph.add(vectors[start:stop], threads=threads)
            except (RuntimeError, MemoryError) as exc:
                failed = exc
            with repo.lock:
                if repo.dropped or repo.graphs.get(name) is not graph:
                    return  # dropped, unloaded or reset meanwhile: this graph is no one's
                if failed is not None:
                    log.warning("cannot build the HNSW graph of model %r, searching it exactly: %s", name, failed)
                    repo.graphs.pop(name, None)
                repo.persisted_rows = -1
                repo.publish()
            if failed is not None:
                return

    # -- internals -----------------------------------------------------------------------------

    def _repo(self, repo_key: str) -> _Repo:
        """The repository's state, created and loaded from its snapshot on first use."""
        repo = self._repos.get(repo_key)
        if repo is None:
            _check_repo_key(repo_key)
            with self._registry_lock:
                repo = self._repos.setdefault(repo_key, _Repo(self._ann))
        repo.last_used = next(self._clock)
        if not repo.loaded:
            loaded = False
            with repo.lock:
                if not repo.loaded:
                    if self._root is not None:
                        _load_snapshot(self._root / repo_key, repo)
                        loaded = True
                        self._grow(repo_key, repo)
                    repo.loaded = True
            if loaded:
                self._evict(keep=repo_key)
        return repo

    def _evict(self, keep: str) -> None:
        """Unload least recently used repositories (not ``keep``) while over the budget.

        Called holding no repository lock; a repository whose lock is busy is passed over (it is
        in use), so eviction never waits on a writer and cannot deadlock with one.
        """
        if self._budget is None:
            return
        with self._registry_lock:
            sizes = {key: repo.nbytes() for key, repo in self._repos.items()}
            total = sum(sizes.values())
            if total <= self._budget:
                return
            for key, repo in sorted(self._repos.items(), key=lambda item: item[1].last_used):
                if total <= self._budget:
                    break
                if key == keep or not repo.lock.acquire(blocking=False):
                    continue
                try:
                    if self._root is not None and repo.loaded and repo.persisted_rows != repo.seq.size:
                        try:
                            _write_snapshot(self._root / key, repo.view, repo.graphs)
                        except OSError as exc:
                            log.warning("keeping index repository %r in memory: cannot flush it: %s", key, exc)
                            continue
                    # Retire the state object (a writer that holds it retries with a fresh one;
                    # a search that holds its view finishes on it).
                    repo.dropped = True
                    del self._repos[key]
                    total -= sizes[key]
                    log.info("unloaded index repository %r (%d bytes) to stay within the memory budget",
                             key, sizes[key])
                finally:
                    repo.lock.release()

    def _view(self, repo_key: str) -> _View:
        """The repository's published snapshot."""
        return self._repo(repo_key).view

    @contextmanager
    def _writing(self, repo_key: str) -> Iterator[_Repo]:
        """Hold the repository's lock; retries if ``drop`` retired the state object meanwhile."""
        while True:
            repo = self._repo(repo_key)
            with repo.lock:
                if repo.dropped:
                    continue
                yield repo
                return


def _check_repo_key(repo_key: str) -> None:
    """Refuse a repository key that is not a plain folder name."""
    if not isinstance(repo_key, str) or not _REPO_KEY.fullmatch(repo_key):
        raise InvalidInput(
            f"invalid index repository key {repo_key!r}", details={"repo_key": repo_key}
        )


def _write_snapshot(folder: Path, view: _View, graphs: Mapping[str, ann.HnswGraph]) -> None:
    """Write ``view`` (and its models' HNSW graphs) as the folder's snapshot: data files, then
    meta.json, then clean up. Called holding the repository's lock (no row is added meanwhile;
    the builder thread may extend a graph, whose rows and bytes are read together)."""
    folder.mkdir(parents=True, exist_ok=True)
    token = uuid.uuid4().hex[:12]
    texts = view.texts[: view.n]
    keys = view.keys[: view.n_keys]
    rows_file = f"rows-{token}.npz"
    bm25: dict[str, Any] = {f"bm25_{name}": array for name, array in view.bm25.to_arrays().items()}
    _replace_atomically(
        folder / rows_file,
        lambda f: np.savez(
            f,
            seq=view.seq,
            key_id=view.key_id,
            chunk_index=view.chunk_index,
            model_id=view.model_id,
            field_id=view.field_id,
            text_offsets=_offsets(texts),
            text_utf8=_utf8(texts),
            key_offsets=_offsets(keys),
            key_utf8=_utf8(keys),
            **bm25,
        ),
    )
    models = []
    for i, (name, store) in enumerate(view.models.items()):
        file = f"vectors-{token}-{i}.npy"
        _replace_atomically(folder / file, functools.partial(_save_array, array=store.vectors))
        entry: dict[str, Any] = {"name": name, "dim": store.dim, "rows": len(store.rows), "file": file}
        graph = graphs.get(name)
        if graph is not None and graph.count:
            graph_file = f"hnsw-{token}-{i}.faiss"
            blob, graph_rows = graph.serialized()
            _replace_atomically(folder / graph_file, functools.partial(_save_bytes, blob=blob.tobytes()))
            entry["hnsw"] = {"file": graph_file, "rows": graph_rows}
        models.append(entry)
    meta = {
        "format": SNAPSHOT_FORMAT,
        "watermark": view.watermark,
        "rows": view.n,
        "keys": view.n_keys,
        "rows_file": rows_file,
        "models": models,
        "fields": view.fields[: int(view.field_id.max()) + 1 if view.n else 1],
    }
    _replace_atomically(folder / "meta.json", lambda f: f.write(json.dumps(meta).encode()))
    keep = {"meta.json", rows_file, *(m["file"] for m in models), *(m["hnsw"]["file"] for m in models if "hnsw" in m)}
    for path in folder.iterdir():
        if path.name not in keep:
            path.unlink(missing_ok=True)


def _save_bytes(file: IO[bytes], *, blob: bytes) -> None:
    """Write raw bytes."""
    file.write(blob)


def _save_array(file: IO[bytes], *, array: np.ndarray) -> None:
    """Write one array in ``.npy`` format."""
    np.save(file, array)


def _replace_atomically(path: Path, write: Callable[[IO[bytes]], object]) -> None:
    """Write a file through a temporary sibling, fsync it, and rename it over ``path``."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _offsets(strings: list[str]) -> np.ndarray:
    """Character offsets of ``strings`` joined: shape (len + 1,), int64."""
    return np.concatenate(([0], np.cumsum([len(s) for s in strings], dtype=np.int64)))


def _utf8(strings: list[str]) -> np.ndarray:
    """``strings`` joined and UTF-8 encoded, as uint8 (lone surrogates kept)."""
    return np.frombuffer("".join(strings).encode("utf-8", "surrogatepass"), dtype=np.uint8)


def _split(blob: np.ndarray, offsets: np.ndarray, count: int) -> list[str]:
    """The inverse of :func:`_utf8` and :func:`_offsets`."""
    joined = blob.tobytes().decode("utf-8", "surrogatepass")
    bounds = offsets.tolist()
    if len(bounds) != count + 1 or bounds[0] != 0 or bounds[-1] != len(joined):
        raise ValueError("string offsets do not match their blob")
    if any(a > b for a, b in itertools.pairwise(bounds)):
        raise ValueError("string offsets are not ascending")
    return [joined[a:b] for a, b in itertools.pairwise(bounds)]


_SNAPSHOT_ERRORS = (
    OSError,
    ValueError,
    KeyError,
    TypeError,
    IndexError,
    AttributeError,
    EOFError,
    zipfile.BadZipFile,
)
"""What reading a damaged or foreign snapshot can raise."""


def _load_snapshot(folder: Path, repo: _Repo) -> None:
    """Fill ``repo`` from the folder's snapshot; leave it empty if there is none or it is bad."""
    meta_path = folder / "meta.json"
    if not meta_path.exists():
        return
    try:
        meta = json.loads(meta_path.read_bytes())
        _restore(folder, meta, repo)
    except _SNAPSHOT_ERRORS as exc:
        log.warning("ignoring the index snapshot in %s: %s", folder, exc)
        repo.reset()
        return
    repo.persisted_rows = repo.seq.size
    _restore_graphs(folder, meta, repo)


def _restore_graphs(folder: Path, meta: dict[str, Any], repo: _Repo) -> None:
    """Install the snapshot's HNSW graphs; one that is missing or bad is left out (and rebuilt)."""
    if repo.config.min_rows <= 0 or not ann.available():
        return
    for entry in meta["models"]:
        saved = entry.get("hnsw")
        if not saved or entry["name"] not in repo.models:
            continue
        try:
            blob = np.fromfile(folder / _plain_name(saved["file"]), dtype=np.uint8)
            graph = ann.HnswGraph.from_bytes(blob, dim=int(entry["dim"]))
            if graph.count != int(saved["rows"]) or graph.count > repo.models[entry["name"]][0].size:
                raise ValueError("the graph does not match the model's rows")
        except _SNAPSHOT_ERRORS as exc:
            log.warning("rebuilding the HNSW graph of model %r in %s: %s", entry["name"], folder, exc)
            continue
        repo.graphs[entry["name"]] = graph
    repo.publish()


def _restore(folder: Path, meta: dict[str, Any], repo: _Repo) -> None:
    """Check a snapshot's files against each other and install them in ``repo``."""
    if not isinstance(meta, dict) or meta.get("format") != SNAPSHOT_FORMAT:
        raise ValueError(f"not a snapshot of format {SNAPSHOT_FORMAT}")
    n, n_keys = int(meta["rows"]), int(meta["keys"])
    with np.load(folder / _plain_name(meta["rows_file"]), allow_pickle=False) as rows:
        columns = {
            name: np.asarray(rows[name], dtype=dtype)
            for name, dtype in (
                ("seq", np.int64),
                ("key_id", np.int32),
                ("chunk_index", np.int32),
                ("model_id", np.int32),
            )
        }
        field_id = (np.asarray(rows["field_id"], dtype=np.int32) if "field_id" in rows.files
                    else np.zeros(n, np.int32))
        texts = _split(rows["text_utf8"], rows["text_offsets"], n)
        keys = _split(rows["key_utf8"], rows["key_offsets"], n_keys)
        bm25 = (BM25Index.from_arrays({name[5:]: rows[name] for name in rows.files if name.startswith("bm25_")})
                if "bm25_format" in rows.files else None)
    seq, key_id, model_id = columns["seq"], columns["key_id"], columns["model_id"]
    fields = [str(f) for f in meta.get("fields", [""])]
    if any(column.shape != (n,) for column in [*columns.values(), field_id]):
        raise ValueError("row columns differ in length")
    if n and (field_id.min() < 0 or field_id.max() >= len(fields)):
        raise ValueError("field ids are out of range")
    if n and (seq.min() <= 0 or len(np.unique(seq)) != n or int(seq.max()) != meta["watermark"]):
        raise ValueError("seq column is not positive and unique up to the watermark")
    if n and (key_id.min() < 0 or key_id.max() >= n_keys or len(set(keys)) != n_keys):
        raise ValueError("content key ids are out of range")
    if n and (model_id.min() < 0 or model_id.max() >= len(meta["models"])):
        raise ValueError("model ids are out of range")
    models: dict[str, tuple[_Growable, _Growable]] = {}
    for i, entry in enumerate(meta["models"]):
        vectors = np.load(folder / _plain_name(entry["file"]), allow_pickle=False)
        model_rows = np.flatnonzero(model_id == i).astype(np.int64)
        if (
            vectors.dtype != np.float32
            or vectors.shape != (len(model_rows), int(entry["dim"]))
            or not np.isfinite(vectors).all()
            or entry["name"] in models
        ):
            raise ValueError(f"vectors of model {entry['name']!r} do not match the rows")
        models[entry["name"]] = (_Growable.of(vectors), _Growable.of(model_rows))
    repo.seq = _Growable.of(seq)
    repo.key_id = _Growable.of(key_id)
    repo.chunk_index = _Growable.of(columns["chunk_index"])
    repo.model_id = _Growable.of(model_id)
    repo.field_id = _Growable.of(field_id)
    repo.fields = fields if fields and fields[0] == "" else ["", *fields]
    if repo.fields is not fields:
        repo.field_id = _Growable.of(field_id + 1)
    repo.texts = texts
    repo.keys = keys
    repo.key_ids = {key: i for i, key in enumerate(keys)}
    repo.models = models
    repo.watermark = int(meta["watermark"]) if n else 0
    if bm25 is None:  # a snapshot written before the postings were stored in it
        bm25 = BM25Index()
        bm25.add_many(enumerate(texts))
    elif bm25.n_docs != n:
        raise ValueError("BM25 postings do not match the rows")
    repo.bm25 = bm25
    repo.publish()


def _plain_name(name: object) -> str:
    """A file name from meta.json that stays inside the snapshot folder."""
    if not isinstance(name, str) or Path(name).name != name or name.startswith("."):
        raise ValueError(f"bad file name in meta.json: {name!r}")
    return name


def _has_terms(query: str | Mapping[str, float]) -> bool:
    """Whether a query can match anything: text that is not blank, or a weighted query with a term."""
    return bool(query.strip()) if isinstance(query, str) else bool(query)
