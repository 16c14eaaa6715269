"""Fusion of ranked legs (KNN, BM25, ...) into one ranking: weighted reciprocal rank fusion, and
relative score fusion (a convex combination of min-max normalised scores)."""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from typing import TypeVar

from kg.errors import InvalidInput

__all__ = ["reciprocal_rank_fusion", "relative_score_fusion"]

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

    Returns
    -------
    list of (item, score, ranks)
        Every item ranked by at least one weighted leg, by ``score`` descending, then by its
        best rank in a weighted leg, then by first appearance (legs in mapping order, each
        best first). ``ranks`` maps every leg name to the item's 1-based rank in it, or None
        when the leg did not rank it or is off.

    Raises
    ------
    kg.errors.InvalidInput
        A leg has no weight, a weight is negative or not finite, or ``k < 0``.

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
    _check_weights(legs, weights)
    scores: dict[Item, float] = {}
    best: dict[Item, int] = {}
    ranks: dict[Item, dict[str, int | None]] = {}
    for name, items in legs.items():
        weight = weights[name]
        if weight == 0:
            continue
        for rank, item in enumerate(items, start=1):
            item_ranks = ranks.get(item)
            if item_ranks is None:
                item_ranks = ranks[item] = dict.fromkeys(legs)
                scores[item] = 0.0
                best[item] = rank
            elif item_ranks[name] is not None:
                continue
            item_ranks[name] = rank
            scores[item] += weight / (k + rank)
            best[item] = min(best[item], rank)
    # sorted() is stable, so equal (score, best rank) keep their first-appearance order.
    order = sorted(scores, key=lambda item: (-scores[item], best[item]))
    return [(item, scores[item], ranks[item]) for item in order]


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
        further down score 0 from that leg). None: over everything listed. With a window, a
        deeper read of the legs (a larger k) does not change how the first items are scored.

    Returns
    -------
    list of (item, score, ranks)
        Every item of a weighted leg, by fused ``score`` (0..1) descending, then by its best
        rank in a weighted leg, then by first appearance. ``ranks`` as in
        :func:`reciprocal_rank_fusion`.

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
    if window is not None and window < 1:
        raise InvalidInput(f"the normalisation window must be >= 1, got {window}", details={"window": window})
    total = sum(weights[name] for name in legs)
    if legs and total <= 0:
        raise InvalidInput("at least one leg needs a weight > 0")
    scores: dict[Item, float] = {}
    best: dict[Item, int] = {}
    ranks: dict[Item, dict[str, int | None]] = {}
    for name, pairs in legs.items():
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
                best[item] = rank
            item_ranks[name] = rank
            scores[item] += weight * (max(0.0, (score - low) / span) if span > 0 else float(score >= low))
            best[item] = min(best[item], rank)
    order = sorted(scores, key=lambda item: (-scores[item], best[item]))
    return [(item, scores[item], ranks[item]) for item in order]
