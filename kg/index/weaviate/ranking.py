"""Rows of Weaviate's answers, ranked and merged across queries and collections.

Pure: a query is a function ``run(filters, limit) -> rows``; these helpers deepen it until the
top ``k`` chunks are exact (ties at the cut all in), count a chunk shown by several nodes once,
and merge several collections' rows by score. See :mod:`kg.index.weaviate` ("Large allowed
sets") for the strategy the index builds on them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kg.index.base import IndexHit

MAX_QUERY_RESULTS = 10_000
"""Weaviate's default ``QUERY_MAXIMUM_RESULTS``: a query's ``limit + offset`` may not exceed it."""

_RETURNED = ["content", "contentKey", "chunkIndex", "seq", "versionKey"]
"""The properties a search returns."""


@dataclass(frozen=True, slots=True)
class _Row:
    """One ranked object of a query, before ranks are given; ``key`` is its ``versionKey``,
    the property the visibility filter tests."""

    seq: int
    content_key: str
    chunk_index: int
    text: str
    score: float
    distance: float | None
    key: str = ""


def _row(obj: Any, score: float, distance: float | None) -> _Row:
    """A query answer's object as a row."""
    p = obj.properties
    content_key = str(p["contentKey"])
    return _Row(int(p["seq"]), content_key, int(p["chunkIndex"]), str(p.get("content") or ""),
                score, distance, str(p.get("versionKey") or content_key))


def _merged(rows: list[_Row]) -> list[_Row]:
    """Rows of several queries by score descending (ties by seq), each chunk (seq) once at its
    best score: a chunk placed for several nodes or branches is one hit (the caller maps a
    chunk to every node that shows it)."""
    best: dict[int, _Row] = {}
    for row in rows:
        held = best.get(row.seq)
        if held is None or row.score > held.score:
            best[row.seq] = row
    return _sorted(list(best.values()))


def _sorted(rows: list[_Row]) -> list[_Row]:
    """Rows by score descending, ties by seq ascending."""
    return sorted(rows, key=lambda r: (-r.score, r.seq))


def _complete(run: Callable[[Any, int], list[_Row]], filters: Any, k: int) -> list[_Row]:
    """The top ``k`` chunks of one query, each once, deepened until ties at the cut are all in
    (ties by seq).

    A chunk shown by several nodes is one object per node in a (workspace, branch)
    collection: the cut counts distinct chunks, not objects.
    """
    limit = min(MAX_QUERY_RESULTS, k + max(k, 10))
    while True:
        rows = _sorted(run(filters, limit))
        chunks = _distinct(rows)
        if len(rows) < limit or limit >= MAX_QUERY_RESULTS or (
                len(chunks) >= k and chunks[k - 1].score > rows[-1].score):
            return chunks
        limit = min(MAX_QUERY_RESULTS, 2 * limit)


def _distinct(rows: list[_Row]) -> list[_Row]:
    """Sorted rows with each chunk (seq) once, at its first (best) place."""
    seen: set[int] = set()
    out = []
    for row in rows:
        if row.seq not in seen:
            seen.add(row.seq)
            out.append(row)
    return out


def _hits(rows: list[_Row]) -> list[IndexHit]:
    """Rows as hits ranked 1..n."""
    return [IndexHit(r.seq, r.content_key, r.chunk_index, r.text, r.score, rank, r.distance)
            for rank, r in enumerate(rows, start=1)]
