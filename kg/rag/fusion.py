"""Fusion of ranked legs (KNN, BM25, ...) into one ranking: weighted reciprocal rank fusion, and
relative score fusion (a convex combination of min-max normalised scores).

Both take a ``window``: only each leg's first ``window`` items score (Elasticsearch's
``rank_window_size``), so that a leg read deeper changes no score, and :func:`certain_prefix`
tells how many of the fused items are those a read of the whole legs would put first: the
k-prefix property of a search (the first n hits are the same for any k >= n) rests on both.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Hashable, Mapping, Sequence
from typing import TypeVar

from kg.errors import InvalidInput

__all__ = ["certain_prefix", "reciprocal_rank_fusion", "relative_score_fusion"]

#: An item of the legs: any hashable (a chunk key, a node id); the result holds the same items.
Item = TypeVar("Item", bound=Hashable)


def _check_weights(legs: Mapping[str, object], weights: Mapping[str, float]) -> None:
    """Raise :class:`kg.errors.InvalidInput` unless every leg has a finite weight >= 0."""
    for name in legs:
        weight = weights.get(name)
        if weight is None or not math.isfinite(weight) or weight < 0:
            raise InvalidInput(
                f"leg {name!r} needs a finite weight >= 0, got {weight!r}",
                details={"leg": name, "weight": weight},
            )


def reciprocal_rank_fusion(
    legs: Mapping[str, Sequence[Item]],
    *,
    weights: Mapping[str, float],
    k: int = 60,
    window: int | None = None,
) -> list[tuple[Item, float, dict[str, int | None]]]:
    r"""Fuse ranked lists by weighted reciprocal rank.

    Parameters
    ----------
    legs : mapping of str to sequence of hashable
        Each leg's items, best first (rank 1). An item listed twice in one leg counts at its
        first (best) rank.
    weights : mapping of str to float
        A finite weight >= 0 for every leg. A leg of weight 0 is off: it adds no score, its
        items enter the result only through other legs, and its ranks are reported as None.
    k : int, default 60
        Rank constant, >= 0; larger values flatten the difference between top ranks.
    window : int or None, optional
        Only a leg's first ``window`` items score; an item further down adds 0 from that leg
        (it is still listed, with its rank). None: every listed item scores.

    Returns
    -------
    list of (item, score, ranks)
        Every item ranked by at least one weighted leg, by ``score`` descending, then by its
        best rank in a weighted leg, then by the leg holding that rank (mapping order): a
        total order on the items' ranks, so reading the legs deeper never reorders two items
        whose ranks it does not change. ``ranks`` maps every leg name to the item's 1-based
        rank in it, or None when the leg did not rank it or is off.

    Raises
    ------
    kg.errors.InvalidInput
        A leg has no weight, a weight is negative or not finite, ``k < 0`` or ``window < 1``.

    Notes
    -----
    .. math:: \mathrm{score}(d) = \sum_{\ell:\, d \in \ell} \frac{w_\ell}{k + \mathrm{rank}_\ell(d)}

    Only ranks matter, so legs with incomparable scores (cosine similarity, BM25) fuse without
    normalisation. Time O(L + m log m) for L listed items in total and m distinct items.

    References
    ----------
    .. [1] G. V. Cormack, C. L. A. Clarke and S. Buettcher, "Reciprocal rank fusion outperforms
       Condorcet and individual rank learning methods", SIGIR 2009, pp. 758-759.

    Examples
    --------
    >>> fused = reciprocal_rank_fusion(
    ...     {"vector": ["a", "b"], "fulltext": ["b"]}, weights={"vector": 1.0, "fulltext": 1.0}
    ... )
    >>> [(item, round(score, 5), ranks) for item, score, ranks in fused]
    [('b', 0.03252, {'vector': 2, 'fulltext': 1}), ('a', 0.01639, {'vector': 1, 'fulltext': None})]
    >>> fused[0][1] == 1 / (60 + 2) + 1 / (60 + 1)
    True

    A leg of weight 0 adds nothing and reports no rank:

    >>> fused = reciprocal_rank_fusion({"vector": ["a"], "fulltext": ["b", "a"]},
    ...                                weights={"vector": 0.0, "fulltext": 2.0})
    >>> [(item, ranks) for item, _, ranks in fused]
    [('b', {'vector': None, 'fulltext': 1}), ('a', {'vector': None, 'fulltext': 2})]
    >>> fused[1][1] == 2.0 / (60 + 2)
    True
    """
    if k < 0:
        raise InvalidInput(f"the RRF constant k must be >= 0, got {k}", details={"k": k})
    _check_window(window)
    _check_weights(legs, weights)
    scores: dict[Item, float] = {}
    best: dict[Item, tuple[int, int]] = {}
    ranks: dict[Item, dict[str, int | None]] = {}
    for position, (name, items) in enumerate(legs.items()):
        weight = weights[name]
        if weight == 0:
            continue
        for rank, item in enumerate(items, start=1):
            item_ranks = ranks.get(item)
            if item_ranks is None:
                item_ranks = ranks[item] = dict.fromkeys(legs)
                scores[item] = 0.0
                best[item] = (rank, position)
            elif item_ranks[name] is not None:
                continue
            item_ranks[name] = rank
            if window is None or rank <= window:
                scores[item] += weight / (k + rank)
            best[item] = min(best[item], (rank, position))
    order = sorted(scores, key=lambda item: (-scores[item], best[item]))
    return [(item, scores[item], ranks[item]) for item in order]


def _check_window(window: int | None) -> None:
    if window is not None and window < 1:
        raise InvalidInput(f"the fusion window must be >= 1, got {window}", details={"window": window})


def relative_score_fusion(
    legs: Mapping[str, Sequence[tuple[Item, float]]],
    *,
    weights: Mapping[str, float],
    window: int | None = None,
) -> list[tuple[Item, float, dict[str, int | None]]]:
    r"""Fuse scored lists by a convex combination of their min-max normalised scores.

    Parameters
    ----------
    legs : mapping of str to sequence of (hashable, float)
        Each leg's ``(item, score)`` pairs, best first (higher scores better; the scales of
        two legs need not be comparable). An item listed twice in one leg counts once, at its
        first (best) place and score; its later scores are ignored, also for the leg's minimum.
    weights : mapping of str to float
        A finite weight >= 0 for every leg, not all 0; they are divided by their sum, so
        ``{"vector": 1, "fulltext": 3}`` is :math:`\alpha = 0.25` on the vector leg. A leg of
        weight 0 is off (no score, ranks None).
    window : int or None, optional
        Normalise over each leg's first ``window`` distinct items (their minimum is 0; items
        further down score 0 from that leg, ties with the minimum too). None: over everything
        listed. With a window, a deeper read of the legs (a larger k) does not change how the
        first items are scored.

    Returns
    -------
    list of (item, score, ranks)
        Every item of a weighted leg, by fused ``score`` (0..1) descending, then by its best
        rank in a weighted leg, then by the leg holding that rank (mapping order). ``ranks`` as
        in :func:`reciprocal_rank_fusion`.

    Raises
    ------
    kg.errors.InvalidInput
        A leg has no weight, a weight is negative or not finite, every weight is 0, or a
        score is not finite.

    Notes
    -----
    .. math:: \mathrm{score}(d) = \sum_\ell \frac{w_\ell}{\sum_m w_m}\,
              \frac{s_\ell(d) - \min_\ell}{\max_\ell - \min_\ell}

    with the minimum and maximum over the leg's listed items, and 0 for an item the leg did
    not list (it scores at the leg's minimum). A leg whose scores are all equal gives each of
    its items 1. Unlike RRF, the fused order keeps how far apart a leg's scores are, not only
    their order. Time O(L + m log m) for L listed items and m distinct items.

    References
    ----------
    .. [1] S. Bruch, S. Gai and A. Ingber, "An Analysis of Fusion Functions for Hybrid
       Retrieval", ACM Transactions on Information Systems 42(1), 2023 (the convex combination
       of normalised scores, and its comparison with RRF).
    .. [2] Weaviate, "Hybrid search: relativeScoreFusion" (the same normalisation).

    Examples
    --------
    >>> fused = relative_score_fusion(
    ...     {"vector": [("a", 0.9), ("b", 0.5)], "fulltext": [("b", 12.0), ("c", 4.0)]},
    ...     weights={"vector": 1.0, "fulltext": 3.0})
    >>> [(item, round(score, 3)) for item, score, _ in fused]
    [('b', 0.75), ('a', 0.25), ('c', 0.0)]
    >>> fused[0][2]
    {'vector': 2, 'fulltext': 1}
    """
    _check_weights(legs, weights)
    _check_window(window)
    total = sum(weights[name] for name in legs)
    if legs and total <= 0:
        raise InvalidInput("at least one leg needs a weight > 0")
    scores: dict[Item, float] = {}
    best: dict[Item, tuple[int, int]] = {}
    ranks: dict[Item, dict[str, int | None]] = {}
    for position, (name, pairs) in enumerate(legs.items()):
        weight = weights[name] / total if total else 0.0
        if weight == 0:
            continue
        firsts: dict[Item, float] = {}
        for item, score in pairs:
            firsts.setdefault(item, score)
        if not all(math.isfinite(v) for v in firsts.values()):
            raise InvalidInput(f"leg {name!r} has a score that is not finite", details={"leg": name})
        values = list(firsts.values())[:window]
        low, high = (min(values), max(values)) if values else (0.0, 0.0)
        span = high - low
        for rank, (item, score) in enumerate(firsts.items(), start=1):
            item_ranks = ranks.get(item)
            if item_ranks is None:
                item_ranks = ranks[item] = dict.fromkeys(legs)
                scores[item] = 0.0
                best[item] = (rank, position)
            item_ranks[name] = rank
            if window is None or rank <= window:
                scores[item] += weight * (max(0.0, (score - low) / span) if span > 0 else float(score >= low))
            best[item] = min(best[item], (rank, position))
    order = sorted(scores, key=lambda item: (-scores[item], best[item]))
    return [(item, scores[item], ranks[item]) for item in order]


def certain_prefix(
    fused: Sequence[tuple[Item, float, Mapping[str, int | None]]],
    seen: Mapping[str, int],
    cut: Collection[str],
    window: int,
) -> int:
    r"""How many of the first fused items a fusion of the whole legs would put first, in the
    same order and with the same scores, when each leg was read only to some depth.

    Parameters
    ----------
    fused : sequence of (item, score, ranks)
        The answer of :func:`reciprocal_rank_fusion` or :func:`relative_score_fusion` over the
        legs as read, with the same ``window``.
    seen : mapping of str to int
        Each weighted leg's distinct items as read.
    cut : collection of str
        The legs that hold more items than were read (the others were read whole).
    window : int
        The fusion's window.

    Returns
    -------
    int
        A length n such that ``fused[:n]`` is the first n items of the fusion of the whole
        legs; 0 when a cut leg was read to fewer than ``window`` items (its scores are not
        known yet).

    Notes
    -----
    With a window every score depends only on the legs' first ``window`` items, so once each
    cut leg was read that far, the items of positive score are all there with their final
    scores, ranks within the window and order. The rest score 0 and are ordered by their best
    rank (then leg): an item whose best rank is at most :math:`M`, the fewest items read of a
    cut leg, has that best rank for good (any rank it has in a cut leg where it was not read is
    above :math:`M`), and every item of a smaller best rank was read. So the prefix runs
    through the positive items and the zero items of best rank <= :math:`M`: the threshold
    argument of Fagin, Lotem and Naor (2003), "Optimal aggregation algorithms for middleware",
    JCSS 66(4), on ranks instead of grades. O(len(fused)).

    Examples
    --------
    >>> legs = {"vector": ["a", "b", "c"], "fulltext": ["c", "d", "e"]}
    >>> fused = reciprocal_rank_fusion(legs, weights={"vector": 1.0, "fulltext": 1.0}, window=2)
    >>> [item for item, _, _ in fused]
    ['a', 'c', 'b', 'd', 'e']
    >>> certain_prefix(fused, {"vector": 3, "fulltext": 3}, cut={"vector", "fulltext"}, window=2)
    5
    >>> certain_prefix(fused, {"vector": 3, "fulltext": 3}, cut={"vector"}, window=4)
    0
    """
    if any(seen.get(name, 0) < window for name in cut):
        return 0
    bound = min((seen.get(name, 0) for name in cut), default=None)
    count = 0
    for _, score, ranks in fused:
        if score <= 0 and bound is not None:
            best = min(r for r in ranks.values() if r is not None)
            if best > bound:
                break
        count += 1
    return count
