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
