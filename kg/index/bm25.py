"""An in-memory inverted index ranked by Okapi BM25, with statistics over a candidate subset.

Documents are dense row numbers ``0, 1, 2, ...`` added in order. The postings live in two
segments:

* a **frozen** segment in compressed sparse row (CSR) form: a vocabulary ``term -> term id``,
  ``indptr`` (int64, shape ``(n_terms + 1,)``) and, for term ``t``, the slice
  ``indptr[t]:indptr[t + 1]`` of ``doc_ids`` (int32, ascending) and ``tfs`` (the term
  frequencies, uint16, or int32 when one exceeds 65,535). Six bytes a posting, one Python
  object per term (its vocabulary entry), no spare capacity.
* a small **tail** segment for the documents added since the last freeze: per term one
  ``int32`` array of shape ``(2, capacity)`` (doc ids, then frequencies) that grows by doubling.

When the tail holds half as many postings as the frozen segment (and at least
:data:`_MIN_TAIL_POSTINGS`), the writer merges it into a new frozen segment (one
:func:`numpy.insert` per array, O(postings)) and starts an empty tail, so a run of appends costs
amortised O(1) copies per posting. The frozen segment is what a snapshot stores
(:meth:`BM25Index.to_arrays`, :meth:`BM25Index.from_arrays`), so loading one does not re-analyse
the texts.

Searches may run while one writer adds documents (callers serialise writers). The state a
search reads (frozen segment, tail, document lengths and counts) is one immutable tuple,
published with one assignment; a writer only writes past the published size of a tail array or
of the lengths (or into a fresh, larger copy), and a freeze builds new arrays, so a reader always
sees a consistent prefix.

Ranking is exact. :meth:`BM25Index.search` skips most of the work for the frequent terms of a
query with the MaxScore idea of Turtle and Flood (1995): the k-th best full score among the
rarest terms' documents is a floor for the k-th of the answer, and a term's contribution has a
bound, so a document holding only terms whose bounds together stay below the floor cannot enter
the top k; the frequent terms are looked up (binary search) for the other documents only. Every
score is computed with the same floating-point operations, in the query's term order, as a full
evaluation.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import NamedTuple

import numpy as np

from kg.index.tokenize import TermNumbering, analyze, analyze_numbered

__all__ = ["BM25Index", "GroupHit", "GroupStats", "Selection", "top_k_indices"]

_MIN_TAIL_POSTINGS = 1 << 20
"""The tail is merged into the frozen segment once it holds this many postings (about 10,000
chunks of 150 words) and half as many as the frozen segment."""

_CANDIDATE_SHARE = 1 / 8
"""MaxScore gives up once the candidates exceed this share of the documents (a dense pass is
then as cheap)."""

_PRUNE_GAIN = 4
"""MaxScore prunes only when the remaining terms hold this many times more postings than there
are candidates (below that, scoring them in full costs no more than looking them up)."""

_PRUNE_MIN_POSTINGS = 2048
"""MaxScore is tried only when the query's terms hold this many selected postings (a small branch
of a large repository scores its few postings faster in full: 0.14 ms against 0.17)."""

_SPARSE_SHARE = 8
"""A search scoring every posting of its terms reads its hits among the documents scored (a
union of the postings) while they are fewer than this share of the documents, else among all."""

_SORT_WHOLE = 256
"""Up to this many scores, :func:`top_k_indices` sorts them all (a KNN leg's reranked candidates)."""

_MARGIN = 1e-9
"""MaxScore's floor is the k-th best score less this share of it: a margin for the rounding of
float sums (a bound and a score add their terms in different orders)."""

_ARRAYS_FORMAT = 1
"""Version of the layout of :meth:`BM25Index.to_arrays`."""


class GroupHit(NamedTuple):
    """One group (a node's text: all its passages) ranked by :meth:`BM25Index.search_groups`."""

    group: int
    """The group id."""
    score: float
    """The group's BM25F score (> 0)."""
    best_doc: int
    """The group's document (passage) with the highest passage-level BM25 score."""


class GroupStats(NamedTuple):
    """The collection statistics of one grouping of the documents (:meth:`BM25Index.group_stats`).

    They depend on the grouping, the fields and the candidate mask only, not on the query, so a
    caller that searches one grouping many times (a branch state's node texts) computes them once.
    Immutable; valid for the index that computed them (documents are only appended, so later
    additions do not change the first ``n``).
    """

    n: int
    """Documents ``0..n-1`` are grouped; the rest are left out."""
    groups: np.ndarray
    """(n,) int32 or int64 (as given): each document's group, -1 left out."""
    fields: np.ndarray
    """(n,) int32 or int64 (as given, not copied): each document's field number."""
    selected: np.ndarray
    """(n,) bool: the documents searched (a group >= 0 and in the mask)."""
    n_groups: int
    """One more than the largest group id."""
    n_fields: int
    """One more than the largest field number (1 for no document)."""
    n_selected: int
    """Groups with a selected document: BM25F's N."""
    norm: np.ndarray
    """(n_groups, n_fields) float64: the length normalisation ``1 - b + b l_f(G) / avg l_f``."""
    doc_avgdl: float
    """Mean length of the selected documents (the passage-level score of ``best_doc``)."""
    n_docs_selected: int
    """Selected documents: the passage-level N."""
    sorted_groups: bool
    """Whether ``groups`` never decreases along the selected documents (sync order), so a
    term's groups can be summed by runs instead of over every group."""
    doc_norm: np.ndarray
    """(n,) float64: ``norm[groups[d], fields[d]]`` of each selected document ``d`` (inf for
    one left out), so a term's postings read their normalisation with one gather."""


class Selection(NamedTuple):
    """The documents one search ranks, with their collection statistics (:meth:`BM25Index.selection`).

    They depend on the mask only, not on the query, so a caller that searches one set of
    documents many times (a branch state's chunks) computes them once. Immutable; valid for the
    index that computed them (documents are only appended, so later additions do not change the
    first ``n``).
    """

    n: int
    """Documents ``0..n-1`` may be selected; the rest are left out."""
    mask: np.ndarray | None
    """(n,) bool: the documents selected; None when every one of the ``n`` is."""
    n_selected: int
    """BM25's N."""
    avgdl: float
    """Mean length of the selected documents (0.0 for none)."""
    doc_norm: np.ndarray
    """(n,) float64: ``k1 (1 - b + b |D| / avgdl)`` of each document, infinite for one left
    out; empty when nothing is selected or every selected document is empty."""
    min_norm: float
    """The smallest of ``doc_norm`` (MaxScore's term bounds); inf when it is empty."""


class _Frozen(NamedTuple):
    """The CSR segment: immutable once published."""

    vocabulary: dict[str, int]  # term -> term id, insert-only while frozen: never mutated
    indptr: np.ndarray  # (n_terms + 1,) int64
    doc_ids: np.ndarray  # (n_postings,) int32, ascending within a term
    tfs: np.ndarray  # (n_postings,) uint16 or int32
    n_docs: int  # the segment holds documents 0..n_docs-1
    max_tfs: np.ndarray  # (n_terms,) int64, each term's highest frequency (MaxScore's bounds)


class _State(NamedTuple):
    """What a search reads, published with one assignment."""

    frozen: _Frozen
    tail: dict[str, tuple[np.ndarray, int, int]]  # term -> ((2, capacity) int32, size, max tf); ids >= frozen.n_docs
    tail_postings: int
    lengths: np.ndarray  # (capacity,) int32, document lengths in terms; the first n_docs are set
    n_docs: int
    total: int  # sum of the first n_docs lengths


class _Term(NamedTuple):
    """A query term's postings among the candidates of one search."""

    ids: np.ndarray  # (m,) int32 ascending doc ids < n (selected or not)
    tfs: np.ndarray  # (m,) int, term frequencies
    keep: np.ndarray | None  # (m,) bool, selected postings; None: all
    df: int
    idf: float
    max_tf: int  # >= every frequency in tfs


class _GroupTerm(NamedTuple):
    """A query term's selected postings in :meth:`BM25Index.search_groups`."""

    ids: np.ndarray  # (m,) ascending passage ids
    tfs: np.ndarray  # (m,) their frequencies
    groups: np.ndarray  # (m,) each passage's group
    holding: np.ndarray | None  # the groups holding the term, ascending; None for sorted groups (runs)
    df: int  # groups holding the term
    idf: float  # over groups


def _empty_frozen() -> _Frozen:
    return _Frozen({}, np.zeros(1, np.int64), np.zeros(0, np.int32), np.zeros(0, np.uint16), 0, np.zeros(0, np.int64))


def _max_tfs(indptr: np.ndarray, tfs: np.ndarray) -> np.ndarray:
    """Each term's highest frequency in CSR postings (0 for a term without any); O(postings)."""
    counts = np.diff(indptr)
    out = np.zeros(len(counts), np.int64)
    held = counts > 0
    if held.any():
        out[held] = np.maximum.reduceat(tfs, indptr[:-1][held])
    return out


class BM25Index:
    """Okapi BM25 over documents numbered ``0..n_docs-1``.

    Parameters
    ----------
    k1 : float, default 1.2
        Term-frequency saturation.
    b : float, default 0.75
        Document-length normalisation, from 0 (none) to 1 (full).
    analyzer : callable, default :func:`kg.index.tokenize.analyze`
        Text to terms, applied to documents and queries alike.

    Notes
    -----
    Memory: 6 bytes per frozen posting (int32 doc id, uint16 frequency), 8 per tail posting plus
    up to the same again in spare capacity, 4 bytes per document for its length, and one
    vocabulary entry (the term string and a dict slot, about 100 bytes) per distinct term.
    Measured by ``bench/bm25_scale.py``.

    References
    ----------
    .. [1] S. Robertson and H. Zaragoza, "The Probabilistic Relevance Framework: BM25 and
       Beyond", Foundations and Trends in Information Retrieval 3(4), 2009, pp. 333-389.
    .. [2] H. Turtle and J. Flood, "Query evaluation: strategies and optimizations",
       Information Processing & Management 31(6), 1995, pp. 831-850 (MaxScore).
    """

    def __init__(
        self,
        *,
        k1: float = 1.2,
        b: float = 0.75,
        analyzer: Callable[[str], list[str]] = analyze,
    ) -> None:
        if k1 < 0 or not 0 <= b <= 1:
            raise ValueError(f"BM25 needs k1 >= 0 and 0 <= b <= 1, got k1={k1}, b={b}")
        self.k1 = k1
        self.b = b
        self._analyze = analyzer
        self._state = _State(_empty_frozen(), {}, 0, np.zeros(0, np.int32), 0, 0)

    @property
    def n_docs(self) -> int:
        """Number of documents added."""
        return self._state.n_docs

    @property
    def n_terms(self) -> int:
        """Number of distinct terms (vocabulary size)."""
        state = self._state
        vocabulary = state.frozen.vocabulary
        return len(vocabulary) + sum(1 for term in list(state.tail) if term not in vocabulary)

    @property
    def nbytes(self) -> int:
        """Bytes held by the postings and length arrays (capacity included; not the vocabulary)."""
        state = self._state
        frozen = state.frozen
        arrays = frozen.indptr.nbytes + frozen.doc_ids.nbytes + frozen.tfs.nbytes
        return arrays + state.lengths.nbytes + sum(entry[0].nbytes for entry in list(state.tail.values()))

    def add(self, doc_id: int, text: str) -> None:
        """Add one document.

        Parameters
        ----------
        doc_id : int
            Must equal :attr:`n_docs` (documents are dense row numbers, added in order).
        text : str
            The document text; empty text makes a document of length 0 that matches nothing.

        Raises
        ------
        ValueError
            ``doc_id`` is not the next row number.
        """
        self.add_many([(doc_id, text)])

    def add_many(self, docs: Iterable[tuple[int, str]]) -> None:
        """Add documents in one batch (one postings append per term for the whole batch).

        Parameters
        ----------
        docs : iterable of (int, str)
            ``(doc_id, text)`` pairs; the ids must continue :attr:`n_docs` consecutively.

        Raises
        ------
        ValueError
            An id breaks the sequence; nothing is added then.

        Notes
        -----
        O(total text length + p log p + distinct terms of the batch) for its p postings,
        amortised: the batch's postings are counted and grouped by one sort of (term, document)
        keys (:func:`_batch_postings`); each tail array grows by doubling, and the tail is
        merged into the frozen segment (O(all postings)) only when it holds half as many
        postings as the frozen segment: about 3 copies of each posting in all over a run of
        appends. A batch that reaches that size itself goes into the new frozen segment with
        the tail, without tail arrays (an import's pages: ``bench/bm25_scale.py``).
        """
        state = self._state
        n_docs = state.n_docs
        texts: list[str] = []
        for expected, (doc_id, text) in enumerate(docs, start=n_docs):
            if doc_id != expected:
                raise ValueError(f"doc_id {doc_id} out of order: expected {expected}")
            texts.append(text)
        if not texts:
            return
        if self._analyze is analyze:  # the batch analysed at once (the same terms)
            batch = _grouped_postings(*analyze_numbered(texts), n_docs)
        else:
            batch = _batch_postings([self._analyze(text) for text in texts], n_docs)
        new_n = n_docs + len(texts)
        lengths_buf = _reserve(state.lengths, new_n)
        lengths_buf[n_docs:new_n] = batch.lengths
        total = state.total + int(batch.lengths.sum())
        tail_postings = state.tail_postings + len(batch.doc_ids)
        if tail_postings >= max(_MIN_TAIL_POSTINGS, len(state.frozen.doc_ids) // 2):
            # The tail would be merged right after: the batch goes into the new frozen segment
            # with it, without a tail array per term first.
            merged = _merged(state._replace(n_docs=new_n), batch)
            self._state = _State(merged, {}, 0, lengths_buf, new_n, total)
            return
        tail = state.tail
        block = np.stack((batch.doc_ids, batch.tfs))  # (2, m) int32
        starts = np.flatnonzero(np.diff(batch.term_ids, prepend=-1))
        ends = [*starts[1:].tolist(), len(batch.term_ids)] if len(starts) else []
        terms = map(batch.vocabulary.__getitem__, batch.term_ids[starts].tolist())
        highest = np.maximum.reduceat(batch.tfs, starts).tolist() if len(starts) else []
        for term, start, end, max_tf in zip(terms, starts.tolist(), ends, highest, strict=True):
            old = tail.get(term)
            if old is None:  # a view of the batch, full: it is copied when it grows
                tail[term] = (block[:, start:end], end - start, max_tf)
                continue
            buf, size, old_max = old
            grown = size + end - start
            buf = _reserve(buf, grown)
            buf[:, size:grown] = block[:, start:end]
            tail[term] = (buf, grown, max(old_max, max_tf))
        self._state = _State(state.frozen, tail, tail_postings, lengths_buf, new_n, total)

    def freeze(self) -> None:
        """Merge the tail segment into the frozen one now (a writer operation).

        Notes
        -----
        O(postings). Searches give the same results before and after; they go on meanwhile.
        """
        state = self._state
        if state.tail:
            self._state = state._replace(frozen=_merged(state), tail={}, tail_postings=0)

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The index as plain arrays, for a snapshot (:func:`numpy.savez`); see :meth:`from_arrays`.

        Returns
        -------
        dict of str to ndarray
            ``format`` (shape (1,), int64), ``lengths`` (shape (n_docs,), int32), ``indptr``
            (shape (n_terms + 1,), int64), ``doc_ids`` (shape (n_postings,), int32),
            ``tfs`` (shape (n_postings,), uint16 or int32), ``term_offsets`` (shape
            (n_terms + 1,), int64: character offsets into the joined terms) and ``term_utf8``
            (uint8: the terms joined, UTF-8). Term ``t`` is the string between its offsets;
            its postings are ``doc_ids[indptr[t]:indptr[t + 1]]`` and the same slice of ``tfs``.

        Notes
        -----
        O(postings); the index itself is left as it is (the tail is merged into a copy), so
        this may run while searches do, but not while a writer adds.
        """
        state = self._state
        frozen = _merged(state) if state.tail else state.frozen
        terms = list(frozen.vocabulary)
        offsets = np.concatenate(([0], np.cumsum([len(t) for t in terms], dtype=np.int64)))
        return {
            "format": np.array([_ARRAYS_FORMAT], np.int64),
            "lengths": state.lengths[: state.n_docs].copy(),
            "indptr": frozen.indptr,
            "doc_ids": frozen.doc_ids,
            "tfs": frozen.tfs,
            "term_offsets": offsets,
            "term_utf8": np.frombuffer("".join(terms).encode("utf-8", "surrogatepass"), np.uint8),
        }

    @classmethod
    def from_arrays(
        cls,
        arrays: Mapping[str, np.ndarray],
        *,
        k1: float = 1.2,
        b: float = 0.75,
        analyzer: Callable[[str], list[str]] = analyze,
    ) -> BM25Index:
        """An index from the arrays of :meth:`to_arrays` (e.g. an ``NpzFile``), without analysing
        any text; ``analyzer`` must be the one the arrays were built with. It scores exactly as
        the index the arrays came from. ``ValueError`` for arrays of another format or that do
        not fit together (a damaged snapshot), ``KeyError`` for a missing one.

        Notes
        -----
        O(postings) for the checks and O(n_terms) to rebuild the vocabulary.
        """
        if np.asarray(arrays["format"]).tolist() != [_ARRAYS_FORMAT]:
            raise ValueError(f"BM25 arrays are not of format {_ARRAYS_FORMAT}")
        lengths = np.asarray(arrays["lengths"])
        indptr = np.asarray(arrays["indptr"])
        doc_ids = np.asarray(arrays["doc_ids"])
        tfs = np.asarray(arrays["tfs"])
        offsets = np.asarray(arrays["term_offsets"])
        blob = np.asarray(arrays["term_utf8"])
        if (lengths.dtype != np.int32 or indptr.dtype != np.int64 or doc_ids.dtype != np.int32
                or tfs.dtype not in (np.uint16, np.int32) or offsets.dtype != np.int64
                or blob.dtype != np.uint8):
            raise ValueError("BM25 arrays have the wrong dtypes")
        n_docs, n_terms = len(lengths), len(indptr) - 1
        if (lengths.ndim != 1 or indptr.ndim != 1 or n_terms < 0 or doc_ids.shape != tfs.shape
                or doc_ids.ndim != 1 or indptr[0] != 0 or indptr[-1] != len(doc_ids)
                or (np.diff(indptr) < 0).any() or offsets.shape != (n_terms + 1,)):
            raise ValueError("BM25 arrays do not fit together")
        if len(doc_ids) and (doc_ids.min() < 0 or doc_ids.max() >= n_docs or tfs.min() <= 0):
            raise ValueError("BM25 postings are out of range")
        if (lengths < 0).any():
            raise ValueError("BM25 document lengths are negative")
        # Ascending within each term: a step down is allowed only where a term starts.
        steps = np.flatnonzero(np.diff(doc_ids) <= 0) + 1
        if not np.isin(steps, indptr).all():
            raise ValueError("BM25 postings are not ascending")
        joined = blob.tobytes().decode("utf-8", "surrogatepass")
        bounds = offsets.tolist()
        if bounds[0] != 0 or bounds[-1] != len(joined) or any(x > y for x, y in itertools.pairwise(bounds)):
            raise ValueError("BM25 term offsets do not match their blob")
        vocabulary = {joined[x:y]: i for i, (x, y) in enumerate(itertools.pairwise(bounds))}
        if len(vocabulary) != n_terms:
            raise ValueError("BM25 terms are not distinct")
        index = cls(k1=k1, b=b, analyzer=analyzer)
        frozen = _Frozen(vocabulary, indptr, doc_ids, tfs, n_docs, _max_tfs(indptr, tfs))
        index._state = _State(frozen, {}, 0, lengths, n_docs, int(lengths.sum(dtype=np.int64)))
        return index

    def _postings(self, state: _State, term: str, n: int) -> tuple[np.ndarray, np.ndarray, int] | None:
        """``(doc ids, tfs, max tf)`` of ``term`` among documents ``0..n-1``, ascending; None if
        none. The max tf is at least every frequency returned (it may count documents past n)."""
        frozen = state.frozen
        tid = frozen.vocabulary.get(term)
        entry = state.tail.get(term) if n > frozen.n_docs else None
        if tid is not None:
            start, end = int(frozen.indptr[tid]), int(frozen.indptr[tid + 1])
            ids, tfs = frozen.doc_ids[start:end], frozen.tfs[start:end]
            max_tf = int(frozen.max_tfs[tid])
            if entry is not None:
                buf, size, tail_max = entry
                ids = np.concatenate((ids, buf[0, :size]))
                tfs = np.concatenate((tfs, buf[1, :size]))
                max_tf = max(max_tf, tail_max)
        elif entry is not None:
            buf, size, max_tf = entry
            ids, tfs = buf[0, :size], buf[1, :size]
        else:
            return None
        if len(ids) and ids[-1] >= n:  # documents past the mask (or added since it was made)
            cut = int(np.searchsorted(ids, n))
            ids, tfs = ids[:cut], tfs[:cut]
        return (ids, tfs, max_tf) if len(ids) else None

    def terms(self, text: str) -> list[str]:
        """The index terms of ``text``, in order, repeats kept: what :meth:`add` counts."""
        return self._analyze(text)

    def query_weights(self, query: str | Mapping[str, float]) -> dict[str, float]:
        """A query's distinct terms and their weights, in query order.

        Free text is analysed like the documents, each distinct term weighing 1.0. A mapping is
        a weighted query of analysed terms: a term of weight 0 is dropped, and its terms are not
        analysed again (an expansion term is already an index term).

        Raises
        ------
        ValueError
            A weight is not a finite number >= 0.

        Examples
        --------
        >>> BM25Index().query_weights("Running the runners' runs")
        {'run': 1.0, 'runner': 1.0}
        >>> BM25Index().query_weights({"run": 0.75, "stride": 0.25, "walk": 0})
        {'run': 0.75, 'stride': 0.25}
        """
        if isinstance(query, str):
            return dict.fromkeys(self._analyze(query), 1.0)
        out: dict[str, float] = {}
        for term, weight in query.items():
            value = float(weight)
            if not np.isfinite(value) or value < 0:
                raise ValueError(f"the weight of query term {term!r} must be a finite number >= 0, got {weight!r}")
            if value > 0:
                out[term] = value
        return out

    def document_frequency(self, term: str, selection: Selection | None = None) -> int:
        """How many documents hold the analysed ``term``: all of them, or those ``selection``
        selects; O(df) (O(1) for every document)."""
        state = self._state
        n = state.n_docs if selection is None else selection.n
        postings = self._postings(state, term, n)
        if postings is None:
            return 0
        ids = postings[0]
        if selection is None or selection.mask is None:
            return len(ids)
        return int(np.count_nonzero(selection.mask[ids]))

    def selection(self, mask: np.ndarray | None = None) -> Selection:
        """The query-independent part of :meth:`search` for one set of documents.

        Parameters
        ----------
        mask : ndarray, shape (n,), bool, optional
            As in :meth:`search`; not copied (the caller does not change it afterwards).

        Returns
        -------
        Selection
            To pass to :meth:`search` or :meth:`rank` as ``selection``, for as long as this
            index lives.

        Raises
        ------
        ValueError
            ``mask`` is longer than :attr:`n_docs` or not one-dimensional.

        Notes
        -----
        O(n): the selected documents' count and total length, and each document's length
        normalisation ``k1 (1 - b + b |D| / avgdl)`` (infinite for one left out, so its
        contributions are exactly 0). A mask selecting every document is kept as None: the
        same statistics (the same integer total), and no per-posting mask lookups.
        """
        state = self._state
        lengths_buf, n_docs = state.lengths, state.n_docs
        if mask is None:
            n, n_selected, total = n_docs, n_docs, state.total
        else:
            mask = np.asarray(mask, dtype=bool)
            if mask.ndim != 1 or len(mask) > n_docs:
                raise ValueError(f"mask must have shape (n,) with n <= {n_docs}: {mask.shape}")
            n = len(mask)
            n_selected = int(np.count_nonzero(mask))
            # The exact integer sum, as the float64 mean of the selected lengths has it.
            total = int(np.add.reduce(lengths_buf[:n], where=mask, dtype=np.int64))
            if n_selected == n:
                mask = None
        avgdl = total / n_selected if n_selected else 0.0
        if not n_selected or avgdl == 0.0:
            return Selection(n, mask, n_selected, avgdl, np.zeros(0), np.inf)
        doc_norm = self.k1 * (1.0 - self.b + self.b * (lengths_buf[:n] / avgdl))
        if mask is not None:
            doc_norm[~mask] = np.inf
        return Selection(n, mask, n_selected, avgdl, doc_norm, float(doc_norm.min()))

    def search(
        self, query: str | Mapping[str, float], k: int, mask: np.ndarray | None = None, *,
        selection: Selection | None = None,
    ) -> list[tuple[int, float]]:
        r"""Rank documents by BM25 for ``query`` among the documents ``mask`` selects.

        The collection statistics (number of documents N, document frequency df and average
        document length avgdl) are those of the selected documents, so a search restricted by
        ``mask`` scores exactly as an index holding only those documents would.

        Parameters
        ----------
        query : str or mapping of str to float
            Free text, analysed like the documents; repeated query terms count once. Or a
            weighted query (:meth:`query_weights`): analysed terms and their weights, each
            term's contribution multiplied by its weight (Lucene's boost; what a query expanded
            by relevance feedback is).
        k : int
            Maximum number of results; ``k <= 0`` gives ``[]``.
        mask : ndarray, shape (n,), bool, optional
            Candidate documents: ``mask[d]`` selects document ``d``; ``n <= n_docs`` and the
            documents from ``n`` on are left out. ``None`` selects every document.
        selection : Selection, optional
            :meth:`selection` of ``mask`` computed earlier by this index (then ``mask`` is not
            given): the O(n) part of a search, done once for documents searched many times.

        Returns
        -------
        list of (int, float)
            ``(doc_id, score)`` by score descending, ties by ``doc_id`` ascending; only
            documents that contain at least one query term (score > 0). ``[]`` when the query
            has no terms (blank, punctuation, stop words) or nothing matches.

        Raises
        ------
        ValueError
            ``mask`` is longer than :attr:`n_docs` or not one-dimensional, both ``mask``
            and ``selection`` are given, or a query weight is not finite or < 0.

        Notes
        -----
        For a document D of |D| terms and the distinct query terms q_i (the BM25 of Robertson
        and Zaragoza 2009 without the query-frequency factor, i.e. k3 = 0), f the term
        frequency:

        .. math::

            \mathrm{score}(D) = \sum_i \mathrm{idf}(q_i)
                \frac{f(q_i, D)\,(k_1 + 1)}{f(q_i, D) + k_1 (1 - b + b\,|D| / \mathrm{avgdl})}

            \mathrm{idf}(q) = \ln\bigl(1 + (N - \mathrm{df}(q) + 0.5) / (\mathrm{df}(q) + 0.5)\bigr)

        The idf is Lucene's, always > 0, so every document holding a query term scores > 0.
        Lucene (since 8.0) drops the constant factor ``k1 + 1``, so its scores are these divided
        by ``k1 + 1`` (same ranking); it also stores lengths lossily, which shifts its scores a
        little.

        Evaluation (MaxScore, Turtle and Flood 1995): the documents of the rarest terms, at
        least k of them, are scored in full (every term looked up by binary search); their k-th
        best score is a floor under the answer's k-th. A term whose bound (its contribution at
        its highest frequency in the shortest document) reaches the floor makes each of its
        documents a candidate; of the weaker terms, only documents holding two of them or more
        are (one weak term alone scores below the floor). The candidates are scored in full and
        nothing else is read. When they are too many, every posting is scored into a dense
        accumulator and the top k are selected among the documents at or above the floor; so
        are they when the terms hold fewer than :data:`_PRUNE_MIN_POSTINGS` selected postings.
        Either way a document's score is the same float sum, in query-term order.

        Time O(n + sum of df over the query terms + r log r) for r matching documents in the
        worst case, or O(sum of df + r log r) with ``selection`` (the O(n) part done); with
        pruning the frequent terms cost O(df) (one boolean gather, for their df among the
        selected documents; none when every document is selected) plus O(c log df) for c
        candidates. Memory O(n) for the dense accumulator only.

        References
        ----------
        .. [1] S. Robertson and H. Zaragoza, "The Probabilistic Relevance Framework: BM25 and
           Beyond", Foundations and Trends in Information Retrieval 3(4), 2009, pp. 333-389.
        .. [2] H. Turtle and J. Flood, "Query evaluation: strategies and optimizations",
           Information Processing & Management 31(6), 1995, pp. 831-850.
        """
        if selection is not None and mask is not None:
            raise ValueError("search takes mask or selection, not both")
        docs, scores = self.rank(query, k, mask, selection=selection)
        return list(zip(docs.tolist(), scores.tolist(), strict=True))

    def rank(
        self, query: str | Mapping[str, float], k: int, mask: np.ndarray | None = None, *,
        selection: Selection | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`search`'s answer as two arrays: document ids (int64) and their scores (float64).

        Raises
        ------
        ValueError
            As :meth:`search`.
        """
        none = (np.zeros(0, np.int64), np.zeros(0))
        if k <= 0:
            return none
        query_terms = self.query_weights(query)
        if not query_terms:
            return none
        if selection is None:
            selection = self.selection(mask)
        elif mask is not None:
            raise ValueError("rank takes mask or selection, not both")
        n, chosen, n_selected, doc_norm = selection.n, selection.mask, selection.n_selected, selection.doc_norm
        if not len(doc_norm):  # nothing selected, or only empty documents
            return none
        state = self._state
        terms: list[_Term] = []
        for term, weight in query_terms.items():
            postings = self._postings(state, term, n)
            if postings is None:
                continue
            ids, tfs, max_tf = postings
            keep = None if chosen is None else chosen[ids]
            df = len(ids) if keep is None else int(np.count_nonzero(keep))
            if df == 0:
                continue
            idf = np.log1p((n_selected - df + 0.5) / (df + 0.5))
            terms.append(_Term(ids, tfs, keep, df, idf * weight, max_tf))
        if not terms:
            return none
        norm_of = doc_norm.__getitem__
        # few postings: scoring them all costs less than the lookups that would skip some
        seeded = self._seed(terms, k, norm_of, n) if sum(t.df for t in terms) >= _PRUNE_MIN_POSTINGS else None
        floor = None
        if seeded is not None:
            seed, seed_scores = seeded
            if len(seed) < k:  # every document holding a term: the whole answer
                return self._best(seed, seed_scores, k)
            # the k-th best score of real documents: the k-th of the answer is at least this
            floor = float(np.partition(seed_scores, len(seed) - k)[len(seed) - k]) * (1.0 - _MARGIN)
            pruned = self._candidates(terms, k, norm_of, selection.min_norm, n, floor)
            if pruned is not None:
                return self._best(*pruned, k)
        scores = np.zeros(n, dtype=np.float64)  # calloc: the pages never written are not touched
        scored: list[np.ndarray] = []
        for t in terms:
            ids, tfs = t.ids, t.tfs
            if t.keep is not None and 2 * t.df < len(ids):  # mostly left out: score the selected only
                ids, tfs = ids[t.keep], tfs[t.keep]
            # a document left out has an infinite norm: its contribution is exactly 0
            tf = tfs.astype(np.float64)
            scores[ids] += t.idf * tf * (self.k1 + 1.0) / (tf + doc_norm[ids])
            scored.append(ids)
        if floor is not None:  # every document of the top k (and its ties) scores at least the floor
            hits = np.flatnonzero(scores >= floor)
        elif sum(map(len, scored)) * _SPARSE_SHARE < n:  # the documents scored, not all n
            touched = functools.reduce(_sorted_union, scored)
            hits = touched[scores[touched] > 0]
        else:
            hits = np.flatnonzero(scores > 0)
        best = hits[top_k_indices(scores[hits], k)] if hits.size else hits
        return best.astype(np.int64), scores[best]

    @staticmethod
    def _best(docs: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The top ``k`` of ascending ``docs`` with their full ``scores`` (a zero score left out)."""
        hit = scores > 0
        docs, scores = docs[hit], scores[hit]
        best = top_k_indices(scores, k, tiebreak=docs)
        return docs[best].astype(np.int64), scores[best]

    def _seed(
        self, terms: list[_Term], k: int, norm_of: Callable[[np.ndarray], np.ndarray], n: int
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """The documents of the rarest terms, at least ``k`` when the terms hold that many
        (fewer: every document holding a term), ascending, with their full scores; None when
        they pass :data:`_CANDIDATE_SHARE` of the documents. The k-th best of those scores is a
        floor for the k-th of the answer (:meth:`_candidates`, and the dense pass's selection)."""
        order = sorted(range(len(terms)), key=lambda i: (terms[i].df, i))  # rarest first
        seed = _selected(terms[order[0]])
        for i in order[1:]:
            if len(seed) >= k:
                break
            seed = _sorted_union(seed, _selected(terms[i]))
        if len(seed) > n * _CANDIDATE_SHARE:
            return None
        return seed, self._full_scores(terms, seed, norm_of)

    def _full_scores(self, terms: list[_Term], docs: np.ndarray,
                     norm_of: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        """The BM25 scores of the selected, ascending ``docs``: each term's contribution added in
        query-term order, the same float sum as the dense pass's."""
        scores = np.zeros(len(docs))
        for t in terms:
            scores += self._contributions(t, docs, norm_of)
        return scores

    def _candidates(
        self, terms: list[_Term], k: int, norm_of: Callable[[np.ndarray], np.ndarray], min_norm: float, n: int,
        floor: float,
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """MaxScore: ascending doc ids outside which no document reaches the top ``k``, with
        their full scores; or None (score every posting).

        ``floor`` is at most the k-th best score (:meth:`_seed`'s, less a margin for the
        rounding of float sums). A term's bound is its contribution at its highest frequency in
        the shortest selected document, ``idf max_tf (k1 + 1) / (max_tf + min_norm)``: no
        document's is higher, as ``tf / (tf + norm)`` grows with tf and falls with the norm. A
        term whose bound reaches the floor is *strong*: each of its documents is a candidate.
        A weaker term's documents are candidates only when they hold another weak term too (and
        the weak terms' bounds together reach the floor): a document holding one weak term and
        no strong one scores below the floor. Every other posting is looked up (binary search)
        for the candidates only.
        """
        bounds = [float(t.idf) * t.max_tf * (self.k1 + 1.0) / (t.max_tf + min_norm) for t in terms]
        weak = sorted((i for i in range(len(terms)) if bounds[i] < floor), key=lambda i: (terms[i].df, i))
        if not weak:
            return None
        parts = [_selected(t) for i, t in enumerate(terms) if bounds[i] >= floor]
        if len(weak) > 1 and sum(bounds[i] for i in weak) >= floor:
            # documents of two weak terms or more, found from the rarer one's side
            if sum(terms[i].df for i in weak[:-1]) + sum(map(len, parts)) > n * _CANDIDATE_SHARE:
                return None
            for a, i in enumerate(weak[:-1]):
                ids = _selected(terms[i])
                paired = np.zeros(len(ids), dtype=bool)
                for j in weak[a + 1:]:
                    paired |= _holds(_selected(terms[j]), ids)
                parts.append(ids[paired])
        if not parts:
            return None
        union = functools.reduce(_sorted_union, parts)
        # pruning pays when the postings not scored in full outnumber the candidates
        if (len(union) > n * _CANDIDATE_SHARE
                or sum(terms[i].df for i in weak) < _PRUNE_GAIN * len(union)):
            return None
        return union, self._full_scores(terms, union, norm_of)

    def _contributions(self, t: _Term, docs: np.ndarray, norm_of: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        """Term ``t``'s BM25 contribution to each of the selected, ascending ``docs`` (0 where
        absent): float64, shape (len(docs),)."""
        pos = np.searchsorted(t.ids, docs)
        found = pos < len(t.ids)
        found[found] = t.ids[pos[found]] == docs[found]
        tf = t.tfs[pos[found]].astype(np.float64)
        out = np.zeros(len(docs))
        out[found] = t.idf * tf * (self.k1 + 1.0) / (tf + norm_of(docs[found]))
        return out

    def _score_docs(
        self, terms: list[_Term], docs: np.ndarray, lengths: np.ndarray, avgdl: float,
    ) -> np.ndarray:
        """BM25 scores of the selected, ascending ``docs`` (:meth:`search_groups`'s passages):
        float64, shape (len(docs),)."""

        def norm_of(ids: np.ndarray) -> np.ndarray:
            norm: np.ndarray = self.k1 * (1.0 - self.b + self.b * lengths[ids].astype(np.float64) / avgdl)
            return norm

        scores = np.zeros(len(docs), dtype=np.float64)
        for t in terms:
            scores += self._contributions(t, docs, norm_of)
        return scores

    def group_stats(self, groups: np.ndarray, fields: np.ndarray | None = None,
                    mask: np.ndarray | None = None) -> GroupStats:
        """The query-independent statistics of :meth:`search_groups` for one grouping.

        Parameters
        ----------
        groups, fields, mask : ndarray, shape (n,)
            As in :meth:`search_groups`.

        Returns
        -------
        GroupStats
            To pass to :meth:`search_groups` as ``stats``, for as long as this index lives.

        Raises
        ------
        ValueError
            The arrays do not have the same shape (n,) with ``n <= n_docs``.

        Notes
        -----
        O(n): two :func:`numpy.bincount` over the documents and the normalisation of
        Robertson and Zaragoza (2009, eq. 3.19) per group and field.
        """
        groups = _ids(groups)
        state = self._state
        if groups.ndim != 1 or len(groups) > state.n_docs:
            raise ValueError(f"groups must have shape (n,) with n <= {state.n_docs}: {groups.shape}")
        n = len(groups)
        fields = np.zeros(n, np.int32) if fields is None else _ids(fields)
        if fields.shape != (n,):
            raise ValueError(f"fields must have the shape of groups {(n,)}: {fields.shape}")
        n_fields = int(fields.max()) + 1 if n else 1
        selected = groups >= 0
        if mask is not None:
            mask = np.asarray(mask, dtype=bool)
            if mask.shape != (n,):
                raise ValueError(f"mask must have the shape of groups {(n,)}: {mask.shape}")
            selected &= mask
        n_groups = int(groups.max()) + 1 if n else 0
        if not selected.any():
            return GroupStats(n, groups, fields, selected, n_groups, n_fields, 0,
                              np.ones((n_groups, n_fields)), 0.0, 0, True, np.full(n, np.inf))
        flengths = state.lengths[:n].astype(np.float64)
        # Per (group, field) length, and each selected group's presence.
        cell = groups.astype(np.int64) * n_fields + fields
        field_len = np.bincount(cell[selected], weights=flengths[selected],
                                minlength=n_groups * n_fields).reshape(n_groups, n_fields)
        present = np.bincount(groups[selected], minlength=n_groups) > 0
        n_selected = int(np.count_nonzero(present))
        avg_len = field_len[present].sum(axis=0) / n_selected
        with np.errstate(divide="ignore", invalid="ignore"):
            norm = 1.0 - self.b + self.b * np.where(avg_len > 0, field_len / avg_len, 0.0)
        chosen = groups[selected]
        doc_norm = np.full(n, np.inf)
        doc_norm[selected] = norm[chosen, fields[selected]]
        return GroupStats(n, groups, fields, selected, n_groups, n_fields, n_selected, norm,
                          float(flengths[selected].mean()), int(np.count_nonzero(selected)),
                          bool(np.all(chosen[1:] >= chosen[:-1])), doc_norm)

    def search_groups(
        self,
        query: str | Mapping[str, float],
        k: int,
        *,
        groups: np.ndarray | None = None,
        fields: np.ndarray | None = None,
        field_weights: Sequence[float] | None = None,
        mask: np.ndarray | None = None,
        stats: GroupStats | None = None,
    ) -> list[GroupHit]:
        r"""Rank groups of documents (a node's passages) by BM25F over all their text.

        The documents of one group are one unit of retrieval: a term's frequency in a group is
        the sum of its frequencies in the group's documents, the group's length the sum of their
        lengths, both per field, and the fields are combined before the saturation (BM25F), so
        a group is scored over all its text, not by its best passage.

        Parameters
        ----------
        query : str or mapping of str to float
            Free text, analysed like the documents; repeated query terms count once. Or a
            weighted query, as in :meth:`search`.
        k : int
            Maximum number of groups; ``k <= 0`` gives ``[]``.
        groups : ndarray, shape (n,), int, optional
            ``groups[d]`` is the group (>= 0) of document ``d``; ``n <= n_docs``, and the
            documents from ``n`` on are left out. A negative group leaves the document out.
            Required unless ``stats`` is given.
        fields : ndarray, shape (n,), int, optional
            ``fields[d]`` is the field number (0..F-1) of document ``d``; default all 0.
        field_weights : sequence of float, optional
            ``w_f`` for each field number, finite and >= 0; default 1.0 each.
        mask : ndarray, shape (n,), bool, optional
            Candidate documents, as in :meth:`search`; the collection statistics (N, df and
            the average field lengths) are those of the groups with a selected document.
        stats : GroupStats, optional
            :meth:`group_stats` of ``groups``, ``fields`` and ``mask`` computed earlier by this
            index (then those three are not given): the O(n) part of a search, done once for
            a grouping that is searched many times.

        Returns
        -------
        list of GroupHit
            ``(group, score, best_doc)`` by score descending, ties by group ascending; only
            groups holding a query term. ``best_doc`` is the group's passage with the highest
            passage-level BM25 (:meth:`search`'s score, collection statistics over the
            selected passages), the lowest id on a tie.

        Raises
        ------
        ValueError
            ``groups``, ``fields`` or ``mask`` do not have the same shape (n,) with
            ``n <= n_docs``, neither ``groups`` nor ``stats`` is given (or both are), or a
            weight is negative or not finite.

        Notes
        -----
        The simple BM25F of Robertson and Zaragoza (2009, section 3.7 and eq. 3.19), with one
        ``b`` for every field: for a group G with field lengths :math:`l_f(G)`, the distinct
        query terms :math:`q_i` and :math:`\mathrm{tf}_f(q, G)` the frequency of q in field f,

        .. math::

            \tilde{\mathrm{tf}}(q, G) = \sum_f w_f
                \frac{\mathrm{tf}_f(q, G)}{1 - b + b\, l_f(G) / \overline{l_f}}

            \mathrm{score}(G) = \sum_i \mathrm{idf}(q_i)
                \frac{\tilde{\mathrm{tf}}(q_i, G)\,(k_1 + 1)}{k_1 + \tilde{\mathrm{tf}}(q_i, G)}

        with :math:`\overline{l_f}` the mean of :math:`l_f` over the N selected groups (a group
        without field f counts 0) and the idf of :meth:`search` with df(q) the number of
        selected groups holding q in any field. With one field and one document per group this
        is exactly :meth:`search`'s BM25. Overlapping passages (a body chunked with overlap)
        count their shared words twice.

        Time O(n + sum of df over the query terms + r log r) for r matching groups, or
        O(n_groups + sum of df + r log r) with ``stats`` (the per-document statistics are
        then computed already; a term's postings are summed by runs of one group when the
        groups follow the document order); the passage-level scores for ``best_doc`` are
        computed for the passages of the returned groups only (binary search in each term's
        postings).

        References
        ----------
        .. [1] S. Robertson and H. Zaragoza, "The Probabilistic Relevance Framework: BM25 and
           Beyond", Foundations and Trends in Information Retrieval 3(4), 2009, pp. 333-389
           (BM25F: section 3.7).
        .. [2] S. Robertson, H. Zaragoza and M. Taylor, "Simple BM25 extension to multiple
           weighted fields", CIKM 2004, pp. 42-49.
        """
        if stats is None:
            if groups is None:
                raise ValueError("search_groups needs groups or stats")
            stats = self.group_stats(groups, fields, mask)
        elif groups is not None or fields is not None or mask is not None:
            raise ValueError("search_groups takes stats or groups, fields and mask, not both")
        n_fields = stats.n_fields
        weights = np.ones(n_fields) if field_weights is None else np.asarray(field_weights, dtype=np.float64)
        if weights.ndim != 1 or not np.isfinite(weights).all() or (weights < 0).any():
            raise ValueError(f"field weights must be finite and >= 0: {field_weights!r}")
        if len(weights) < n_fields:
            raise ValueError(f"{n_fields} fields need as many weights, got {len(weights)}")
        if k <= 0:
            return []
        query_terms = self.query_weights(query)
        if not query_terms or not stats.n_docs_selected:
            return []
        state = self._state
        n, groups, fields, selected = stats.n, stats.groups, stats.fields, stats.selected
        n_groups, n_selected, doc_norm = stats.n_groups, stats.n_selected, stats.doc_norm
        every = stats.n_docs_selected == n  # no posting to leave out
        # One weight for every field: a scalar times each frequency, the same floats as gathered.
        uniform = weights[0] if n_fields == 1 or (weights[:n_fields] == weights[0]).all() else None
        lengths = state.lengths[:n]
        terms: list[_Term] = []
        term_groups: list[np.ndarray] = []
        parts: list[_GroupTerm] = []
        for term, weight in query_terms.items():
            postings = self._postings(state, term, n)
            if postings is None:
                continue
            ids, tfs, max_tf = postings
            if not every:
                keep = selected[ids]
                ids, tfs = ids[keep], tfs[keep]
                if not len(ids):
                    continue
            passage_idf = np.log1p((stats.n_docs_selected - len(ids) + 0.5) / (len(ids) + 0.5))
            terms.append(_Term(ids, tfs, None, len(ids), passage_idf * weight,
                               max_tf))
            g = groups[ids]
            term_groups.append(g)
            if stats.sorted_groups:
                # ids ascend and so do their groups: one run per group holding the term
                holding: np.ndarray | None = None
                df = 1 + int(np.count_nonzero(g[1:] != g[:-1]))
            else:
                holding = np.flatnonzero(np.bincount(g, minlength=n_groups))
                df = len(holding)
            group_idf = np.log1p((n_selected - df + 0.5) / (df + 0.5))
            parts.append(_GroupTerm(ids, tfs, g, holding, df, group_idf * weight))

        def saturated(part: _GroupTerm, chosen: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
            """The groups holding a term (those ``chosen`` selects only) and its contribution to
            each one's score."""
            ids, tfs, g, holding = part.ids, part.tfs, part.groups, part.holding
            if chosen is not None:  # sorted groups: a chosen group's postings are one run, kept whole
                inside = chosen[g]
                ids, tfs, g = ids[inside], tfs[inside], g[inside]
            ftfs = tfs.astype(np.float64)
            contribution = (uniform if uniform is not None else weights[fields[ids]]) * ftfs / doc_norm[ids]
            if holding is None or chosen is not None:
                starts = np.flatnonzero(np.diff(g, prepend=-1))
                holding = g[starts]
                pseudo = np.add.reduceat(contribution, starts) if len(starts) else contribution[:0]
            else:
                pseudo = np.bincount(g, weights=contribution, minlength=n_groups)[holding]  # others add 0
            return holding, part.idf * pseudo * (self.k1 + 1.0) / (self.k1 + pseudo)

        done, candidates = (self._group_candidates(parts, k, n_groups, saturated) if stats.sorted_groups
                            else ({}, None))
        scores = np.zeros(n_groups, dtype=np.float64)
        for i, part in enumerate(parts):  # query-term order: the same float sum as a full evaluation
            holding, term_scores = done[i] if i in done else saturated(part)
            scores[holding] += term_scores
        if candidates is not None:
            hits = candidates[scores[candidates] > 0]
            if not hits.size:
                return []
            best = hits[top_k_indices(scores[hits], k)]
        else:
            hits = np.flatnonzero(scores > 0)
            if not hits.size:
                return []
            best = hits[top_k_indices(scores[hits], k)]
        # The best passage of each returned group: highest passage score, lowest id on a tie,
        # scored for the passages of those groups only.
        if stats.sorted_groups:  # each term's postings of a returned group: one run, found by bisection
            ordered = np.sort(best)
            rows = np.concatenate([t.ids[_runs(g, ordered)] for t, g in zip(terms, term_groups, strict=True)])
        else:
            wanted = np.zeros(n_groups, dtype=bool)
            wanted[best] = True
            rows = np.concatenate([t.ids[wanted[g]] for t, g in zip(terms, term_groups, strict=True)])
        rows.sort()
        rows = rows[np.flatnonzero(np.diff(rows, prepend=-1))]
        doc_scores = self._score_docs(terms, rows, lengths, stats.doc_avgdl)
        order = np.lexsort((rows, -doc_scores, groups[rows]))
        rows = rows[order]
        first = rows[np.flatnonzero(np.diff(groups[rows], prepend=-1))]
        best_doc = dict(zip(groups[first].tolist(), first.tolist(), strict=True))
        return [GroupHit(int(gid), float(scores[gid]), best_doc[int(gid)]) for gid in best]


    def _group_candidates(
        self, parts: list[_GroupTerm], k: int, n_groups: int,
        saturated: Callable[[_GroupTerm, np.ndarray | None], tuple[np.ndarray, np.ndarray]],
    ) -> tuple[dict[int, tuple[np.ndarray, np.ndarray]], np.ndarray | None]:
        """MaxScore over groups (sorted groups only): the terms' contributions computed so far
        (by term index), and the ascending groups outside which none reaches the top ``k`` (the
        other terms' contributions computed for those groups only), or None (every group).

        A term adds less than ``idf (k1 + 1)`` to any group (the saturation); the rarest
        terms' groups are the candidates once k of them score above the other terms' bounds.
        """
        done: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        if len(parts) < 2:
            return done, None
        order = sorted(range(len(parts)), key=lambda i: (parts[i].df, i))  # rarest first
        bounds = [float(parts[i].idf) * (self.k1 + 1.0) for i in order]
        union = parts[order[0]].groups[:0]
        for p in range(1, len(parts)):
            i = order[p - 1]
            done[i] = saturated(parts[i], None)
            union = _sorted_union(union, done[i][0])
            if len(union) > n_groups * _CANDIDATE_SHARE:
                break
            rest = sum(bounds[p:])
            if (len(union) < k or rest >= sum(bounds[:p])
                    or sum(len(parts[j].ids) for j in order[p:]) < _PRUNE_GAIN * len(union)):
                continue
            partial = np.zeros(n_groups)
            for holding, term_scores in done.values():
                partial[holding] += term_scores
            at = partial[union]
            kth = float(np.partition(at, len(at) - k)[len(at) - k])
            if rest < kth * (1.0 - 1e-9):  # a margin for the rounding of float sums
                chosen = np.zeros(n_groups, dtype=bool)
                chosen[union] = True
                for j in order[p:]:
                    done[j] = saturated(parts[j], chosen)
                return done, union
        return done, None

def _ids(values: np.ndarray) -> np.ndarray:
    """``values`` as an array of integers: int32 and int64 ones as they are (no copy), others
    as int64."""
    array = np.asarray(values)
    return array if array.dtype in (np.int32, np.int64) else array.astype(np.int64)


class _Batch(NamedTuple):
    """The postings of a batch of documents, grouped by term (:func:`_batch_postings`)."""
    vocabulary: list[str]  # the batch's terms, by batch term id
    term_ids: np.ndarray  # (m,) int64 batch term ids, ascending
    doc_ids: np.ndarray  # (m,) int32, ascending within a term
    tfs: np.ndarray  # (m,) int32 term frequencies
    lengths: np.ndarray  # (docs,) int32 document lengths in terms


def _batch_postings(analysed: list[list[str]], first_doc: int) -> _Batch:
    """The (term, document, frequency) postings of documents ``first_doc, first_doc + 1, ...``
    whose terms are ``analysed``: one pass over the terms to number them, then :func:`_grouped_postings`."""
    numbering = TermNumbering()
    lengths = np.fromiter(map(len, analysed), np.int32, count=len(analysed))
    terms = np.fromiter(map(numbering.__getitem__, itertools.chain.from_iterable(analysed)), np.int64,
                        count=int(lengths.sum()))
    documents = np.repeat(np.arange(len(analysed), dtype=np.int64), lengths)
    return _grouped_postings(list(numbering), terms, documents, lengths, first_doc)


def _grouped_postings(vocabulary: list[str], terms: np.ndarray, documents: np.ndarray, lengths: np.ndarray,
                      first_doc: int) -> _Batch:
    """The postings of a batch's term occurrences (``terms`` numbers into ``vocabulary``, in
    ``documents`` counted from 0), by one sort.

    Each (term number, document) pair is one int64 key ``term * docs + document``; the distinct
    keys, with their counts, are the postings in term order and, within a term, document order.
    """
    span = max(len(lengths), 1)
    unique, counts = np.unique(terms * span + documents, return_counts=True)
    term_ids = unique // span
    return _Batch(vocabulary, term_ids, (unique - term_ids * span + first_doc).astype(np.int32),
                  counts.astype(np.int32), lengths.astype(np.int32, copy=False))


def _merged(state: _State, batch: _Batch | None = None) -> _Frozen:
    """A frozen segment holding ``state``'s frozen and tail postings, and ``batch``'s after
    them (its documents follow the tail's); O(postings)."""
    frozen, tail = state.frozen, state.tail
    vocabulary = dict(frozen.vocabulary)
    for term in tail:
        vocabulary.setdefault(term, len(vocabulary))
    entries = sorted((vocabulary[term], buf, size) for term, (buf, size, _) in tail.items())
    sizes = np.array([e[2] for e in entries], np.int64)
    new_terms = [np.repeat(np.array([e[0] for e in entries], np.int64), sizes)]
    new_ids = [buf[0, :size] for _, buf, size in entries]
    new_tfs = [buf[1, :size] for _, buf, size in entries]
    if batch is not None:
        for term in batch.vocabulary:
            vocabulary.setdefault(term, len(vocabulary))
        numbers = np.fromiter(map(vocabulary.__getitem__, batch.vocabulary), np.int64, count=len(batch.vocabulary))
        new_terms.append(numbers[batch.term_ids])
        new_ids.append(batch.doc_ids)
        new_tfs.append(batch.tfs)
    term_of = np.concatenate(new_terms)
    # By term, stably: a term's tail postings, then its batch postings (later documents). The
    # batch's own order is by its first sight of a term, not by the merged term ids: postings
    # inserted at one position (the last old term's end is where the new terms go) must be.
    order = np.argsort(term_of, kind="stable") if batch is not None else None
    tail_ids = np.concatenate(new_ids)
    tail_tfs = np.concatenate(new_tfs)
    if order is not None:
        term_of, tail_ids, tail_tfs = term_of[order], tail_ids[order], tail_tfs[order]
    n_old, n_terms = len(frozen.indptr) - 1, len(vocabulary)
    # Each new posting goes after its term's frozen postings (np.insert keeps the order of
    # values inserted at one position), a new term's after every frozen posting.
    ends = np.concatenate((frozen.indptr[1:], np.full(n_terms - n_old, len(frozen.doc_ids), np.int64)))
    positions = ends[term_of]
    wide = frozen.tfs.dtype == np.int32 or (len(tail_tfs) and int(tail_tfs.max()) > np.iinfo(np.uint16).max)
    dtype = np.int32 if wide else np.uint16
    counts = np.zeros(n_terms, np.int64)
    counts[:n_old] = np.diff(frozen.indptr)
    counts += np.bincount(term_of, minlength=n_terms)
    # Each term's highest frequency: the frozen one's, raised by its new postings'.
    max_tfs = np.zeros(n_terms, np.int64)
    max_tfs[:n_old] = frozen.max_tfs
    np.maximum.at(max_tfs, term_of, tail_tfs.astype(np.int64))
    return _Frozen(
        vocabulary,
        np.concatenate(([0], np.cumsum(counts))).astype(np.int64),
        np.insert(frozen.doc_ids, positions, tail_ids.astype(np.int32, copy=False)),
        np.insert(frozen.tfs.astype(dtype, copy=False), positions, tail_tfs.astype(dtype)),
        state.n_docs,
        max_tfs,
    )


def _runs(values: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """The positions in ascending ``values`` holding one of the ascending ``wanted``: O(w log m)."""
    lo = np.searchsorted(values, wanted, side="left")
    hi = np.searchsorted(values, wanted, side="right")
    sizes = hi - lo
    total = int(sizes.sum())
    if not total:
        return np.zeros(0, np.int64)
    # lo[j], lo[j] + 1, ..., hi[j] - 1 for each j, concatenated
    positions: np.ndarray = np.arange(total) + np.repeat(lo - (np.cumsum(sizes) - sizes), sizes)
    return positions


def _selected(t: _Term) -> np.ndarray:
    """A term's postings among the selected documents: its doc ids, ascending."""
    return t.ids if t.keep is None else t.ids[t.keep]


def _holds(values: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Whether each of ``wanted`` is in the ascending ``values``: O(len(wanted) log len(values))."""
    pos = np.searchsorted(values, wanted)
    inside = pos < len(values)
    inside[inside] = values[pos[inside]] == wanted[inside]
    return inside


def _sorted_union(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The distinct values of two ascending arrays, ascending (a sort: NumPy's ``union1d``
    hashes, several times slower on these int32 ids)."""
    union = np.concatenate((a, b))
    union.sort()
    if len(union) < 2:
        return union
    distinct = np.empty(len(union), dtype=bool)
    distinct[0] = True
    np.not_equal(union[1:], union[:-1], out=distinct[1:])
    return union[distinct]


def _reserve(buf: np.ndarray, size: int) -> np.ndarray:
    """``buf`` if its last axis holds ``size`` items, else a copy with doubled capacity."""
    capacity = buf.shape[-1]
    if size <= capacity:
        return buf
    grown = np.empty((*buf.shape[:-1], max(size, 2 * capacity)), dtype=buf.dtype)
    grown[..., :capacity] = buf
    return grown


def top_k_indices(scores: np.ndarray, k: int, *, tiebreak: np.ndarray | None = None) -> np.ndarray:
    """Positions of the ``k`` highest scores, best first, ties by ``tiebreak`` ascending.

    Parameters
    ----------
    scores : ndarray, shape (n,), float
        Any real scores (no NaN).
    k : int
        How many to return, ``k >= 1``; fewer when ``n < k``.
    tiebreak : ndarray, shape (n,), int, optional
        Secondary key for equal scores (a row's ``seq``); default the position itself.

    Returns
    -------
    ndarray, shape (min(k, n),), int64
        Positions into ``scores``.

    Notes
    -----
    O(n + t log t) with :func:`numpy.partition`, where t >= k counts the scores at least as
    high as the k-th best: every score tied with the k-th is kept until the exact sort, so the
    result does not depend on how the partition split a tie. Up to :data:`_SORT_WHOLE` scores,
    one stable sort of them all (the same order).
    """
    if len(scores) <= _SORT_WHOLE:  # one sort: fewer calls than a partition first
        return np.lexsort((np.arange(len(scores)) if tiebreak is None else tiebreak, -scores))[:k]
    candidates = np.arange(len(scores))
    if len(scores) > k:
        kth = np.partition(scores, len(scores) - k)[len(scores) - k]
        candidates = np.flatnonzero(scores >= kth)
    secondary = candidates if tiebreak is None else tiebreak[candidates]
    order = np.lexsort((secondary, -scores[candidates]))[:k]
    return candidates[order]
