"""Weighted reciprocal rank fusion: one ranking from several ranked legs (KNN, BM25, ...)."""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from typing import TypeVar

from kg.errors import InvalidInput

__all__ = ["reciprocal_rank_fusion"]

#: An item of the legs: any hashable (a chunk key, a node id); the result holds the same items.
Item = TypeVar("Item", bound=Hashable)


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
    for name in legs:
        weight = weights.get(name)
        if weight is None or not math.isfinite(weight) or weight < 0:
            raise InvalidInput(
                f"leg {name!r} needs a finite weight >= 0, got {weight!r}",
                details={"leg": name, "weight": weight},
            )
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
