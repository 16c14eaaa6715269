"""The approximate nearest-neighbour tier of the embedded index: one HNSW graph per model.

:class:`HnswGraph` wraps a faiss ``IndexHNSWSQ`` (an HNSW graph over 8-bit scalar-quantised
copies of the vectors, inner-product metric) whose ids are the model-local row numbers of the
embedded index, ``0 .. count - 1`` in the order rows were added. The graph only proposes
candidates: the embedded index reranks them with exact float32 dot products, so every returned
distance is the true cosine distance and the quantisation only affects which rows are proposed.

Branch visibility is applied inside the graph walk: a search passes a bitmap of the allowed rows
(:func:`allowed_bitmap`) as a faiss ``IDSelectorBitmap``, and faiss only collects allowed ids
(it still walks through the others, so the graph stays connected for any filter).

Threads: a search runs on one OpenMP thread; :meth:`HnswGraph.add` on as many as its caller asks
(the index's builder thread: the usable cores, ``KG_INDEX_ANN_BUILD_THREADS``), OpenMP's workers
waiting passively (see :func:`_faiss`).

Concurrency: faiss allows concurrent searches but not a search during an ``add``
(hnswlib and faiss both say so), so :class:`HnswGraph` holds a readers-writer lock: searches
share it, :meth:`HnswGraph.add` takes it alone, in slices of :data:`ADD_SLICE` rows so a large add
lets searches in between. The embedded index's published views read ``count`` as it was when
they were published and drop any id at or above it, so a search never sees a row twice.

faiss is imported lazily; :func:`available` says whether it is installed (without it the
embedded index stays exact).

References
----------
.. [1] Y. A. Malkov and D. A. Yashunin, "Efficient and robust approximate nearest neighbor
   search using Hierarchical Navigable Small World graphs", IEEE Transactions on Pattern
   Analysis and Machine Intelligence 42(4), 2018, pp. 824-836.
.. [2] M. Douze et al., "The Faiss library", arXiv:2401.08281, 2024.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

__all__ = ["ADD_SLICE", "HnswGraph", "allowed_bitmap", "available", "usable_cores"]

ADD_SLICE = 512
"""Rows added to a graph per thread per exclusive hold of its lock (about 0.2 s on a loaded core)."""


@functools.cache
def _faiss() -> Any:
    """The faiss module, imported once, on first use, with OpenMP's workers waiting passively.

    OpenMP's thread count is per calling thread (libgomp keeps it in the thread's own control
    variables), so each call here sets its own: a search one thread (one query: a second
    worker only adds a visited table to clear), an ``add`` the caller's ``threads``.
    ``OMP_WAIT_POLICY=PASSIVE`` (unless the environment says otherwise; read by the libgomp
    faiss ships when faiss is imported) makes idle workers sleep instead of spinning: with
    the default active wait, an ``add`` on two threads of a 2-core machine spent 56 % more CPU
    than on one for 12 % less wall time; waiting passively, 0.62 of one thread's wall time for
    the same CPU (``bench/ann_build.py``).
    """
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import faiss

    return faiss


def usable_cores() -> int:
    """The CPUs this process may run on (its affinity mask; ``os.cpu_count()`` where none)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def available() -> bool:
    """Whether faiss (``faiss-cpu``) can be imported."""
    try:
        _faiss()
    except ImportError:
        return False
    return True


def allowed_bitmap(mask: np.ndarray) -> np.ndarray:
    """Pack a boolean mask over graph ids into the bitmap faiss filters with.

    Parameters
    ----------
    mask : ndarray, shape (n,), bool
        ``mask[i]`` says whether id ``i`` may be returned.

    Returns
    -------
    ndarray, shape (ceil(n / 8),), uint8
        Bit ``i % 8`` of byte ``i // 8`` is ``mask[i]`` (little bit order, as
        ``faiss.IDSelectorBitmap`` reads it).
    """
    return np.packbits(mask, bitorder="little")


#: Per thread: faiss search parameters by candidate list size, made once (a SWIG object's
#: construction costs about 0.05 ms with the CPU's caches cold, a sixth of a search's own work).
_PER_THREAD = threading.local()


def _search_parameters(faiss: Any, ef: int) -> Any:
    """This thread's ``SearchParametersHNSW`` of ``efSearch`` ``ef`` (its selector is the
    caller's to set and clear)."""
    held: dict[int, Any] | None = getattr(_PER_THREAD, "hnsw", None)
    if held is None:
        held = _PER_THREAD.hnsw = {}
    params = held.get(ef)
    if params is None:
        if len(held) >= 16:  # a few sizes a thread (k and the allowed share set ef)
            held.clear()
        params = held[ef] = faiss.SearchParametersHNSW()
        params.efSearch = ef
    return params


class _ReadWriteLock:
    """Many readers or one writer; a waiting writer holds new readers back."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._readers = 0
        self._writing = False
        self._waiting = 0

    @contextmanager
    def reading(self) -> Iterator[None]:
        """Share the lock with other readers."""
        with self._cond:
            while self._writing or self._waiting:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if not self._readers:
                    self._cond.notify_all()

    @contextmanager
    def writing(self) -> Iterator[None]:
        """Hold the lock alone."""
        with self._cond:
            self._waiting += 1
            while self._writing or self._readers:
                self._cond.wait()
            self._waiting -= 1
            self._writing = True
        try:
            yield
        finally:
            with self._cond:
                self._writing = False
                self._cond.notify_all()


class HnswGraph:
    """An HNSW graph over one model's rows, ids ``0 .. count - 1`` in insertion order.

    Parameters
    ----------
    dim : int
        Vector dimension.
    m : int
        Neighbours per node and layer (``M``; layer 0 keeps ``2 * M``).
    ef_construction : int
        Candidate list size while inserting.

    Notes
    -----
    Memory: ``dim`` bytes of 8-bit codes plus about ``8 * M`` bytes of links per row (layer 0),
    and ``2 * 4 * dim`` bytes of quantiser ranges.
    """

    def __init__(self, dim: int, m: int, ef_construction: int, *, _index: Any = None) -> None:
        faiss = _faiss()
        if _index is None:
            _index = faiss.IndexHNSWSQ(dim, faiss.ScalarQuantizer.QT_8bit, m, faiss.METRIC_INNER_PRODUCT)
            _index.hnsw.efConstruction = ef_construction
        self.dim = dim
        self._index = _index
        self._lock = _ReadWriteLock()

    @property
    def count(self) -> int:
        """Rows in the graph."""
        return int(self._index.ntotal)

    @property
    def m(self) -> int:
        """Neighbours per node and layer."""
        return int(self._index.hnsw.nb_neighbors(1))

    def nbytes(self) -> int:
        """Approximate bytes held: codes plus links (``dim + 8 * M`` per row, a little more)."""
        return self.count * (self.dim + 10 * self.m) + 8 * self.dim

    def add(self, vectors: np.ndarray, *, threads: int = 1) -> None:
        """Append rows; their ids continue from :attr:`count`.

        Parameters
        ----------
        vectors : ndarray, shape (r, dim), float32, L2-normalised
            The first call trains the scalar quantiser (per-dimension ranges) on these rows.
        threads : int
            OpenMP threads inserting at once (faiss inserts a slice's rows in parallel, level by
            level, locking each node it links).

        Notes
        -----
        O(r * ef_construction * log(count) * dim) work, in slices of ``threads *``
        :data:`ADD_SLICE` rows, each under the graph's lock alone (searches wait for one slice
        at most, about as long on any thread count). On 2 cores, 100,000 384-d rows took 0.54
        of one thread's wall time on two (``bench/ann_tier.py --build-threads``).
        """
        faiss = _faiss()
        threads = max(1, threads)
        faiss.omp_set_num_threads(threads)
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if not self._index.is_trained:
            with self._lock.writing():
                self._index.train(vectors)
        step = ADD_SLICE * threads
        for start in range(0, len(vectors), step):
            with self._lock.writing():
                self._index.add(vectors[start : start + step])

    def search(self, query: np.ndarray, k: int, *, ef: int, bitmap: np.ndarray | None, limit: int) -> np.ndarray:
        """Ids of up to ``k`` allowed rows near ``query``, best first (by quantised similarity).

        Parameters
        ----------
        query : ndarray, shape (dim,), float32, L2-normalised
        k : int
            Candidates wanted (>= 1).
        ef : int
            Candidate list size of the walk (raised to ``k`` if smaller).
        bitmap : ndarray, shape (ceil(limit / 8),), uint8, or None
            Allowed ids (:func:`allowed_bitmap`); ``None`` allows every id.
        limit : int
            Ids at or above this are dropped (rows a reader's view does not hold yet).

        Returns
        -------
        ndarray, shape (<= k,), int64

        Notes
        -----
        O(ef * M * dim * log(count)) distance evaluations; more when the filter rejects most
        rows (the walk passes through rejected nodes).
        """
        faiss = _faiss()
        faiss.omp_set_num_threads(1)
        params = _search_parameters(faiss, max(ef, k))
        selector = None
        if bitmap is not None:
            selector = faiss.IDSelectorBitmap(len(bitmap) * 8, faiss.swig_ptr(bitmap))
        params.sel = selector  # every time: a kept object must not point at an earlier selector
        try:
            with self._lock.reading():
                _, ids = self._index.search(query.reshape(1, -1), k, params=params)
        finally:
            params.sel = None
        del selector  # kept alive until the search is done
        found = np.asarray(ids[0], dtype=np.int64)
        kept: np.ndarray = found[(found >= 0) & (found < limit)]
        return kept

    def serialized(self) -> tuple[np.ndarray, int]:
        """The graph serialised by faiss and the number of rows it holds, read together (a
        builder thread may be adding rows).

        Returns
        -------
        blob : ndarray, shape (b,), uint8
        rows : int
        """
        with self._lock.reading():
            blob: np.ndarray = np.asarray(_faiss().serialize_index(self._index), dtype=np.uint8)
            rows = int(self._index.ntotal)
        return blob, rows

    @classmethod
    def from_bytes(cls, blob: np.ndarray, *, dim: int) -> HnswGraph:
        """A graph read back from :meth:`serialized`'s bytes.

        Parameters
        ----------
        blob : ndarray, shape (b,), uint8
        dim : int
            The dimension it must have.

        Raises
        ------
        ValueError
            The blob is not a faiss HNSW index of that dimension.
        """
        faiss = _faiss()
        try:
            index = faiss.deserialize_index(np.ascontiguousarray(blob, dtype=np.uint8))
        except RuntimeError as exc:
            raise ValueError(f"not a faiss index: {exc}") from exc
        if not isinstance(index, faiss.IndexHNSW) or index.d != dim or index.metric_type != faiss.METRIC_INNER_PRODUCT:
            raise ValueError("not an inner-product HNSW index of the expected dimension")
        return cls(dim, 0, 0, _index=index)
