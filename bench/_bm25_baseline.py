"""The BM25 index as it was before the CSR segments (``kg/index/bm25.py`` at commit 0c27706,
copied verbatim below this paragraph), kept importable as the baseline of ``bench/bm25_scale.py``.
Not a benchmark itself (the leading underscore keeps it apart from the scripts).

An in-memory inverted index ranked by Okapi BM25, with statistics over a candidate subset.

Documents are dense row numbers ``0, 1, 2, ...`` added in order. Each term keeps its postings as
one ``int32`` array of shape ``(2, capacity)``: row 0 the ascending document ids, row 1 the term
frequencies; a batch of documents appends one chunk per term, and the array grows by doubling.

Searches may run while one writer adds documents (callers serialise writers). A writer only
writes past the published size of an array (or into a fresh, larger copy) and then publishes
the new ``(array, size)`` pair with one assignment, so a reader always sees a consistent prefix.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

import numpy as np

from kg.index.tokenize import analyze

__all__ = ["BM25Index", "GroupHit", "top_k_indices"]

_Postings = tuple[np.ndarray, int]


class GroupHit(NamedTuple):
    """One group (a node's text: all its passages) ranked by :meth:`BM25Index.search_groups`."""

    group: int
    """The group id."""
    score: float
    """The group's BM25F score (> 0)."""
    best_doc: int
    """The group's document (passage) with the highest passage-level BM25 score."""
"""``(array of shape (2, capacity) int32: doc ids then term freqs, size)``."""


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
    Memory: 8 bytes per posting (doc id and frequency, ``int32``) plus up to the same again in
    spare capacity, 4 bytes per document for its length, and one array per distinct term.

    References
    ----------
    .. [1] S. Robertson and H. Zaragoza, "The Probabilistic Relevance Framework: BM25 and
       Beyond", Foundations and Trends in Information Retrieval 3(4), 2009, pp. 333-389.
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
        self._postings: dict[str, _Postings] = {}
        # (document lengths in terms, int32 with spare capacity; number of documents; sum of
        # lengths), published together.
        self._docs: tuple[np.ndarray, int, int] = (np.zeros(0, np.int32), 0, 0)

    @property
    def n_docs(self) -> int:
        """Number of documents added."""
        return self._docs[1]

    @property
    def n_terms(self) -> int:
        """Number of distinct terms (vocabulary size)."""
        return len(self._postings)

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
        O(total text length + distinct terms of the batch), amortised: each term's array grows
        by doubling.
        """
        lengths_buf, n_docs, total = self._docs
        # One (term, doc, tf) triple per distinct term of each document, built at C speed.
        terms: list[str] = []
        doc_ids: list[int] = []
        tfs: list[int] = []
        lengths: list[int] = []
        for expected, (doc_id, text) in enumerate(docs, start=n_docs):
            if doc_id != expected:
                raise ValueError(f"doc_id {doc_id} out of order: expected {expected}")
            doc_terms = self._analyze(text)
            lengths.append(len(doc_terms))
            counts = Counter(doc_terms)
            terms.extend(counts)
            tfs.extend(counts.values())
            doc_ids.extend(itertools.repeat(doc_id, len(counts)))
        if not lengths:
            return
        # Group the triples by term (stable: doc ids stay ascending), one slice per term.
        vocabulary = list(dict.fromkeys(terms))
        term_number = {term: i for i, term in enumerate(vocabulary)}
        numbers = np.fromiter(map(term_number.__getitem__, terms), np.int64, count=len(terms))
        order = np.argsort(numbers, kind="stable")
        numbers = numbers[order]
        grouped_ids = np.asarray(doc_ids, dtype=np.int32)[order]
        grouped_tfs = np.asarray(tfs, dtype=np.int32)[order]
        starts = np.flatnonzero(np.diff(numbers, prepend=-1)).tolist()
        for start, end in zip(starts, [*starts[1:], len(numbers)], strict=False):  # no term: no slice
            term = vocabulary[numbers[start]]
            old = self._postings.get(term)
            buf, size = old if old is not None else (np.empty((2, 0), np.int32), 0)
            grown = size + end - start
            buf = _reserve(buf, grown)
            buf[0, size:grown] = grouped_ids[start:end]
            buf[1, size:grown] = grouped_tfs[start:end]
            self._postings[term] = (buf, grown)
        new_n = n_docs + len(lengths)
        lengths_buf = _reserve(lengths_buf, new_n)
        lengths_buf[n_docs:new_n] = lengths
        self._docs = (lengths_buf, new_n, total + sum(lengths))

    def search(
        self, query: str, k: int, mask: np.ndarray | None = None
    ) -> list[tuple[int, float]]:
        r"""Rank documents by BM25 for ``query`` among the documents ``mask`` selects.

        The collection statistics (number of documents N, document frequency df and average
        document length avgdl) are those of the selected documents, so a search restricted by
        ``mask`` scores exactly as an index holding only those documents would.

        Parameters
        ----------
        query : str
            Free text, analysed like the documents; repeated query terms count once.
        k : int
            Maximum number of results; ``k <= 0`` gives ``[]``.
        mask : ndarray, shape (n,), bool, optional
            Candidate documents: ``mask[d]`` selects document ``d``; ``n <= n_docs`` and the
            documents from ``n`` on are left out. ``None`` selects every document.

        Returns
        -------
        list of (int, float)
            ``(doc_id, score)`` by score descending, ties by ``doc_id`` ascending; only
            documents that contain at least one query term (score > 0). ``[]`` when the query
            has no terms (blank, punctuation, stop words) or nothing matches.

        Raises
        ------
        ValueError
            ``mask`` is longer than :attr:`n_docs` or not one-dimensional.

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

        Time O(n + sum of df over the query terms + r log r) for r matching documents; memory
        O(n) for the score accumulator.

        References
        ----------
        .. [1] S. Robertson and H. Zaragoza, "The Probabilistic Relevance Framework: BM25 and
           Beyond", Foundations and Trends in Information Retrieval 3(4), 2009, pp. 333-389.
        """
        if k <= 0:
            return []
        terms = list(dict.fromkeys(self._analyze(query)))
        if not terms:
            return []
        lengths_buf, n_docs, total = self._docs
        if mask is None:
            n, n_selected, avgdl = n_docs, n_docs, total / n_docs if n_docs else 0.0
        else:
            mask = np.asarray(mask, dtype=bool)
            if mask.ndim != 1 or len(mask) > n_docs:
                raise ValueError(f"mask must have shape (n,) with n <= {n_docs}: {mask.shape}")
            n = len(mask)
            n_selected = int(np.count_nonzero(mask))
            avgdl = float(lengths_buf[:n][mask].mean()) if n_selected else 0.0
        if n_selected == 0 or avgdl == 0.0:
            return []
        lengths = lengths_buf[:n]
        scores = np.zeros(n, dtype=np.float64)
        for term in terms:
            entry = self._postings.get(term)
            if entry is None:
                continue
            buf, size = entry
            ids, tfs = buf[0, :size], buf[1, :size]
            if size and ids[-1] >= n:  # documents past the mask (or added since it was made)
                cut = int(np.searchsorted(ids, n))
                ids, tfs = ids[:cut], tfs[:cut]
            if mask is not None:
                keep = mask[ids]
                ids, tfs = ids[keep], tfs[keep]
            df = len(ids)
            if df == 0:
                continue
            idf = np.log1p((n_selected - df + 0.5) / (df + 0.5))
            tf = tfs.astype(np.float64)
            norm = self.k1 * (1.0 - self.b + self.b * (lengths[ids] / avgdl))
            scores[ids] += idf * tf * (self.k1 + 1.0) / (tf + norm)
        hits = np.flatnonzero(scores > 0)
        best = hits[top_k_indices(scores[hits], k)] if hits.size else hits
        return [(int(d), float(scores[d])) for d in best]


    def search_groups(
        self,
        query: str,
        k: int,
        *,
        groups: np.ndarray,
        fields: np.ndarray | None = None,
        field_weights: Sequence[float] | None = None,
        mask: np.ndarray | None = None,
    ) -> list[GroupHit]:
        r"""Rank groups of documents (a node's passages) by BM25F over all their text.

        The documents of one group are one unit of retrieval: a term's frequency in a group is
        the sum of its frequencies in the group's documents, the group's length the sum of their
        lengths, both per field, and the fields are combined before the saturation (BM25F), so
        a group is scored over all its text, not by its best passage.

        Parameters
        ----------
        query : str
            Free text, analysed like the documents; repeated query terms count once.
        k : int
            Maximum number of groups; ``k <= 0`` gives ``[]``.
        groups : ndarray, shape (n,), int
            ``groups[d]`` is the group (>= 0) of document ``d``; ``n <= n_docs``, and the
            documents from ``n`` on are left out. A negative group leaves the document out.
        fields : ndarray, shape (n,), int, optional
            ``fields[d]`` is the field number (0..F-1) of document ``d``; default all 0.
        field_weights : sequence of float, optional
            ``w_f`` for each field number, finite and >= 0; default 1.0 each.
        mask : ndarray, shape (n,), bool, optional
            Candidate documents, as in :meth:`search`; the collection statistics (N, df and
            the average field lengths) are those of the groups with a selected document.

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
            ``n <= n_docs``, or a weight is negative or not finite.

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

        Time O(n + sum of df over the query terms + r log r) for r matching groups.

        References
        ----------
        .. [1] S. Robertson and H. Zaragoza, "The Probabilistic Relevance Framework: BM25 and
           Beyond", Foundations and Trends in Information Retrieval 3(4), 2009, pp. 333-389
           (BM25F: section 3.7).
        .. [2] S. Robertson, H. Zaragoza and M. Taylor, "Simple BM25 extension to multiple
           weighted fields", CIKM 2004, pp. 42-49.
        """
        groups = np.asarray(groups, dtype=np.int64)
        lengths_buf, n_docs, _ = self._docs
        if groups.ndim != 1 or len(groups) > n_docs:
            raise ValueError(f"groups must have shape (n,) with n <= {n_docs}: {groups.shape}")
        n = len(groups)
        fields = np.zeros(n, np.int64) if fields is None else np.asarray(fields, dtype=np.int64)
        if fields.shape != (n,):
            raise ValueError(f"fields must have the shape of groups {(n,)}: {fields.shape}")
        n_fields = int(fields.max()) + 1 if n else 1
        weights = np.ones(n_fields) if field_weights is None else np.asarray(field_weights, dtype=np.float64)
        if weights.ndim != 1 or not np.isfinite(weights).all() or (weights < 0).any():
            raise ValueError(f"field weights must be finite and >= 0: {field_weights!r}")
        if len(weights) < n_fields:
            raise ValueError(f"{n_fields} fields need as many weights, got {len(weights)}")
        selected = groups >= 0
        if mask is not None:
            mask = np.asarray(mask, dtype=bool)
            if mask.shape != (n,):
                raise ValueError(f"mask must have the shape of groups {(n,)}: {mask.shape}")
            selected &= mask
        if k <= 0:
            return []
        terms = list(dict.fromkeys(self._analyze(query)))
        if not terms or not selected.any():
            return []
        lengths = lengths_buf[:n].astype(np.float64)
        n_groups = int(groups.max()) + 1
        # Per (group, field) length, and each selected group's presence.
        cell = groups * n_fields + fields
        field_len = np.bincount(cell[selected], weights=lengths[selected],
                                minlength=n_groups * n_fields).reshape(n_groups, n_fields)
        present = np.bincount(groups[selected], minlength=n_groups) > 0
        n_selected = int(np.count_nonzero(present))
        avg_len = field_len[present].sum(axis=0) / n_selected
        # Field-length normalisation B_f(G) and the passage statistics for the best passage.
        with np.errstate(divide="ignore", invalid="ignore"):
            norm = 1.0 - self.b + self.b * np.where(avg_len > 0, field_len / avg_len, 0.0)
        doc_avgdl = float(lengths[selected].mean())
        n_docs_selected = int(np.count_nonzero(selected))
        scores = np.zeros(n_groups, dtype=np.float64)
        doc_scores = np.zeros(n, dtype=np.float64)
        for term in terms:
            entry = self._postings.get(term)
            if entry is None:
                continue
            buf, size = entry
            ids, tfs = buf[0, :size], buf[1, :size]
            if size and ids[-1] >= n:
                cut = int(np.searchsorted(ids, n))
                ids, tfs = ids[:cut], tfs[:cut]
            keep = selected[ids]
            ids, tfs = ids[keep], tfs[keep].astype(np.float64)
            if not len(ids):
                continue
            g, f = groups[ids], fields[ids]
            pseudo = np.bincount(g, weights=weights[f] * tfs / norm[g, f], minlength=n_groups)
            df = int(np.count_nonzero(np.bincount(g, minlength=n_groups)))
            idf = np.log1p((n_selected - df + 0.5) / (df + 0.5))
            scores += idf * pseudo * (self.k1 + 1.0) / (self.k1 + pseudo)
            doc_idf = np.log1p((n_docs_selected - len(ids) + 0.5) / (len(ids) + 0.5))
            doc_norm = self.k1 * (1.0 - self.b + self.b * lengths[ids] / doc_avgdl)
            doc_scores[ids] += doc_idf * tfs * (self.k1 + 1.0) / (tfs + doc_norm)
        hits = np.flatnonzero(scores > 0)
        if not hits.size:
            return []
        best = hits[top_k_indices(scores[hits], k)]
        # The best passage of each returned group: highest passage score, lowest id on a tie.
        wanted = np.zeros(n_groups, dtype=bool)
        wanted[best] = True
        rows = np.flatnonzero(wanted[np.where(selected, groups, 0)] & selected & (doc_scores > 0))
        order = np.lexsort((rows, -doc_scores[rows], groups[rows]))
        rows = rows[order]
        first = rows[np.flatnonzero(np.diff(groups[rows], prepend=-1))]
        best_doc = dict(zip(groups[first].tolist(), first.tolist(), strict=True))
        return [GroupHit(int(gid), float(scores[gid]), best_doc[int(gid)]) for gid in best]


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
    result does not depend on how the partition split a tie.
    """
    candidates = np.arange(len(scores))
    if len(scores) > k:
        kth = np.partition(scores, len(scores) - k)[len(scores) - k]
        candidates = np.flatnonzero(scores >= kth)
    secondary = candidates if tiebreak is None else tiebreak[candidates]
    order = np.lexsort((secondary, -scores[candidates]))[:k]
    return candidates[order]
