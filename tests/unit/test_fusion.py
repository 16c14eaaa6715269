"""Weighted reciprocal rank fusion: hand-computed scores, ties, zero weights, bad input."""

from __future__ import annotations

import pytest

from kg.errors import InvalidInput
from kg.rag.fusion import reciprocal_rank_fusion

BOTH = {"vector": 1.0, "fulltext": 1.0}


def test_scores_by_hand_with_k_60():
    fused = reciprocal_rank_fusion(
        {"vector": ["a", "b", "c"], "fulltext": ["b", "d"]}, weights=BOTH
    )
    assert [item for item, _, _ in fused] == ["b", "a", "d", "c"]
    scores = {item: score for item, score, _ in fused}
    assert scores["b"] == pytest.approx(1 / 62 + 1 / 61, abs=1e-15)  # 0.0325224749
    assert scores["b"] == pytest.approx(0.0325224749, abs=1e-9)
    assert scores["a"] == pytest.approx(1 / 61, abs=1e-15)
    assert scores["d"] == pytest.approx(1 / 62, abs=1e-15)
    assert scores["c"] == pytest.approx(1 / 63, abs=1e-15)
    ranks = {item: r for item, _, r in fused}
    assert ranks["b"] == {"vector": 2, "fulltext": 1}
    assert ranks["a"] == {"vector": 1, "fulltext": None}
    assert ranks["d"] == {"vector": None, "fulltext": 2}


def test_weights_scale_each_leg():
    fused = reciprocal_rank_fusion(
        {"vector": ["a", "b"], "fulltext": ["b", "a"]},
        weights={"vector": 2.0, "fulltext": 0.5},
        k=0,
    )
    # a: 2/1 + 0.5/2 = 2.25; b: 2/2 + 0.5/1 = 1.5
    assert [(item, score) for item, score, _ in fused] == [("a", 2.25), ("b", 1.5)]


def test_ties_go_to_the_best_single_rank_then_first_appearance():
    # k = 0: q = 1/1, x = 1/1, p = 1/2 + 1/2; all three score exactly 1.0.
    fused = reciprocal_rank_fusion(
        {"vector": ["q", "p"], "fulltext": ["x", "p"]}, weights=BOTH, k=0
    )
    assert [(item, score) for item, score, _ in fused] == [("q", 1.0), ("x", 1.0), ("p", 1.0)]


def test_equal_items_keep_their_first_appearance_order():
    fused = reciprocal_rank_fusion({"vector": ["a", "b"], "fulltext": ["b", "a"]}, weights=BOTH)
    assert [item for item, _, _ in fused] == ["a", "b"]
    assert fused[0][1] == fused[1][1]


def test_a_zero_weight_leg_is_off():
    fused = reciprocal_rank_fusion(
        {"vector": ["a", "b"], "fulltext": ["c", "a"]}, weights={"vector": 1.0, "fulltext": 0.0}
    )
    assert [item for item, _, _ in fused] == ["a", "b"]
    assert fused[0] == ("a", pytest.approx(1 / 61), {"vector": 1, "fulltext": None})
    assert fused[1] == ("b", pytest.approx(1 / 62), {"vector": 2, "fulltext": None})


def test_all_legs_off_or_empty_give_nothing():
    assert reciprocal_rank_fusion({"vector": ["a"]}, weights={"vector": 0.0}) == []
    assert reciprocal_rank_fusion({"vector": [], "fulltext": []}, weights=BOTH) == []
    assert reciprocal_rank_fusion({}, weights={}) == []


def test_a_single_leg_keeps_its_order():
    fused = reciprocal_rank_fusion({"fulltext": ["c", "a", "b"]}, weights={"fulltext": 1.0})
    assert [item for item, _, _ in fused] == ["c", "a", "b"]


def test_a_duplicate_in_one_leg_counts_at_its_best_rank():
    fused = reciprocal_rank_fusion({"vector": ["a", "b", "a"]}, weights={"vector": 1.0})
    assert fused == [
        ("a", pytest.approx(1 / 61), {"vector": 1}),
        ("b", pytest.approx(1 / 62), {"vector": 2}),
    ]


def test_items_may_be_any_hashable():
    fused = reciprocal_rank_fusion(
        {"vector": [("k1", 0), ("k1", 1)], "fulltext": [("k1", 1)]}, weights=BOTH
    )
    assert [item for item, _, _ in fused] == [("k1", 1), ("k1", 0)]


@pytest.mark.parametrize(
    ("weights", "k"),
    [
        ({"vector": 1.0}, 60),  # fulltext has no weight
        ({"vector": 1.0, "fulltext": -1.0}, 60),
        ({"vector": 1.0, "fulltext": float("nan")}, 60),
        ({"vector": 1.0, "fulltext": float("inf")}, 60),
        (BOTH, -1),
    ],
)
def test_bad_weights_or_k_are_refused(weights, k):
    with pytest.raises(InvalidInput):
        reciprocal_rank_fusion({"vector": ["a"], "fulltext": ["b"]}, weights=weights, k=k)


# -- relative score fusion ------------------------------------------------------------------------

from kg.rag.fusion import relative_score_fusion  # noqa: E402


def test_relative_scores_by_hand():
    """min-max per leg, then the weights divided by their sum (alpha = 1 / (1 + 3) = 0.25)."""
    fused = relative_score_fusion(
        {"vector": [("a", 0.9), ("b", 0.7), ("c", 0.5)], "fulltext": [("c", 30.0), ("d", 20.0), ("a", 10.0)]},
        weights={"vector": 1.0, "fulltext": 3.0})
    scores = {item: score for item, score, _ in fused}
    assert scores["a"] == pytest.approx(0.25 * 1.0 + 0.75 * 0.0)
    assert scores["b"] == pytest.approx(0.25 * 0.5)
    assert scores["c"] == pytest.approx(0.25 * 0.0 + 0.75 * 1.0)
    assert scores["d"] == pytest.approx(0.75 * 0.5)
    assert [item for item, _, _ in fused] == ["c", "d", "a", "b"]
    assert {item: r for item, _, r in fused}["d"] == {"vector": None, "fulltext": 2}


def test_relative_scores_keep_the_gaps_that_rrf_forgets():
    """Two legs that agree on the order but not on the margins: RRF ties a and b (each first
    in one leg); relative scores let the leg with the clear winner decide."""
    legs = {"vector": [("a", 0.80), ("b", 0.79), ("c", 0.10)], "fulltext": [("b", 10.0), ("a", 1.0), ("c", 0.9)]}
    rrf = reciprocal_rank_fusion({name: [i for i, _ in pairs] for name, pairs in legs.items()}, weights=BOTH)
    assert rrf[0][1] == pytest.approx(rrf[1][1])
    relative = relative_score_fusion(legs, weights=BOTH)
    assert [item for item, _, _ in relative] == ["b", "a", "c"]


def test_relative_scores_edge_cases():
    # one item per leg, or equal scores: each item of the leg gets 1
    fused = relative_score_fusion({"vector": [("a", 0.3)], "fulltext": [("b", 2.0), ("c", 2.0)]}, weights=BOTH)
    assert {item: score for item, score, _ in fused} == {"a": 0.5, "b": 0.5, "c": 0.5}
    # a weight of 0 turns its leg off; a repeated item counts at its first place
    fused = relative_score_fusion({"vector": [("a", 0.9)], "fulltext": [("b", 2.0), ("a", 1.0), ("b", 0.5)]},
                                  weights={"vector": 0.0, "fulltext": 1.0})
    assert [(item, score, ranks["vector"]) for item, score, ranks in fused] == [("b", 1.0, None), ("a", 0.0, None)]
    assert relative_score_fusion({}, weights={}) == []
    with pytest.raises(InvalidInput):
        relative_score_fusion({"vector": [("a", 1.0)]}, weights={"vector": 0.0})
    with pytest.raises(InvalidInput):
        relative_score_fusion({"vector": [("a", float("nan"))]}, weights={"vector": 1.0})
    with pytest.raises(InvalidInput):
        relative_score_fusion({"vector": [("a", 1.0)]}, weights={})


def test_unset_weights_come_from_the_settings():
    from kg.rag.search import SearchRequest, with_default_weights
    from kg.settings import Settings

    settings = Settings(search_vector_weight=0.25, search_fulltext_weight=1.0)
    resolved = with_default_weights(SearchRequest(query="q"), settings)
    assert (resolved.vector_weight, resolved.fulltext_weight) == (0.25, 1.0)
    named = SearchRequest(query="q", vector_weight=2.0)
    assert with_default_weights(named, settings).vector_weight == 2.0
    both = SearchRequest(query="q", vector_weight=2.0, fulltext_weight=0.5)
    assert with_default_weights(both, settings) is both
    off = Settings(search_vector_weight=0.0)
    with pytest.raises(InvalidInput):
        with_default_weights(SearchRequest(query="q", fulltext_weight=0.0), off)
    assert with_default_weights(SearchRequest(query="q", mode="fulltext", fulltext_weight=0.0), off).mode == "fulltext"


def test_a_window_makes_the_first_items_scores_independent_of_depth():
    """Normalised over the first ``window`` items, a leg read deeper scores its head the same:
    without the window the deeper minimum moves every normalised score."""
    head = [("a", 0.9), ("b", 0.6), ("c", 0.5)]
    deeper = head + [("d", 0.2), ("e", 0.1)]
    other = [("c", 8.0), ("a", 4.0), ("b", 2.0)]
    short = relative_score_fusion({"vector": head, "fulltext": other}, weights=BOTH, window=3)
    deep = relative_score_fusion({"vector": deeper, "fulltext": other}, weights=BOTH, window=3)
    assert {i: s for i, s, _ in short} == {i: s for i, s, _ in deep if i in "abc"}
    assert {i: s for i, s, _ in deep}["d"] == pytest.approx(0.0)  # below the window's minimum: 0
    unwindowed = relative_score_fusion({"vector": deeper, "fulltext": other}, weights=BOTH)
    assert {i: s for i, s, _ in unwindowed}["b"] != pytest.approx({i: s for i, s, _ in short}["b"])
    with pytest.raises(InvalidInput):
        relative_score_fusion({"vector": head}, weights={"vector": 1.0}, window=0)


def test_a_score_beyond_the_window_that_is_not_finite_is_refused():
    with pytest.raises(InvalidInput):
        relative_score_fusion({"vector": [("a", 1.0), ("b", float("nan"))]}, weights={"vector": 1.0}, window=1)
