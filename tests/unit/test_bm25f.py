"""BM25F over groups of passages (kg.index.bm25.BM25Index.search_groups), against hand-computed
values (Robertson and Zaragoza 2009, section 3.7)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kg.index.bm25 import BM25Index

K1, B = 1.2, 0.75


def _index(texts: list[str]) -> BM25Index:
    index = BM25Index(k1=K1, b=B)
    index.add_many(enumerate(texts))
    return index


def _saturate(tf: float) -> float:
    return tf * (K1 + 1) / (K1 + tf)


def test_bm25f_weights_fields_and_sums_a_group_before_saturation():
    # Node 0: title "alpha", body "beta gamma"; node 1: body "alpha alpha beta delta".
    index = _index(["alpha", "beta gamma", "alpha alpha beta delta"])
    groups, fields = np.array([0, 0, 1]), np.array([0, 1, 1])
    hits = index.search_groups("alpha", 10, groups=groups, fields=fields, field_weights=[2.0, 1.0])
    idf = math.log(1 + (2 - 2 + 0.5) / (2 + 0.5))
    # Mean title length (1 + 0) / 2, mean body length (2 + 4) / 2.
    tf0 = 2.0 * 1 / (1 - B + B * 1 / 0.5)
    tf1 = 1.0 * 2 / (1 - B + B * 4 / 3)
    assert [h.group for h in hits] == [1, 0]
    assert hits[0].score == pytest.approx(idf * _saturate(tf1))
    assert hits[1].score == pytest.approx(idf * _saturate(tf0))
    assert [h.best_doc for h in hits] == [2, 0]


def test_a_term_in_two_passages_of_a_group_counts_once_in_df_and_twice_in_tf():
    index = _index(["alpha beta", "alpha gamma", "delta epsilon"])
    hits = index.search_groups("alpha", 10, groups=np.array([0, 0, 1]))
    idf = math.log(1 + (2 - 1 + 0.5) / (1 + 0.5))  # N = 2 groups, df = 1
    tf = 2 / (1 - B + B * 4 / 3)  # group length 4, mean (4 + 2) / 2
    assert len(hits) == 1
    assert hits[0].score == pytest.approx(idf * _saturate(tf))
    assert hits[0].best_doc == 0  # a tie between the passages goes to the lowest id


def test_a_title_weight_can_lift_a_title_match_above_a_body_match():
    index = _index(["heart disease", "a study of outcomes", "outcomes",
                    "heart rate and heart disease and outcomes of disease in a long body text"])
    groups, fields = np.array([0, 0, 1, 1]), np.array([0, 1, 0, 1])
    plain = index.search_groups("heart", 10, groups=groups, fields=fields, field_weights=[1.0, 1.0])
    titled = index.search_groups("heart", 10, groups=groups, fields=fields, field_weights=[5.0, 1.0])
    assert plain[0].group == 1
    assert titled[0].group == 0


def test_one_passage_per_group_and_one_field_is_plain_bm25():
    rng = random.Random(7)
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta"]
    texts = [" ".join(rng.choices(words, k=rng.randint(1, 12))) for _ in range(40)]
    index = _index(texts)
    mask = np.array([rng.random() < 0.7 for _ in texts])
    for query in ("alpha", "beta gamma", "eta zeta alpha"):
        plain = index.search(query, 50, mask)
        grouped = index.search_groups(query, 50, groups=np.arange(len(texts)), mask=mask)
        assert [(h.group, pytest.approx(h.score)) for h in grouped] == [(d, pytest.approx(s)) for d, s in plain]
        assert all(h.best_doc == h.group for h in grouped)


def test_statistics_are_those_of_the_selected_groups():
    index = _index(["alpha", "alpha beta", "gamma"])
    groups = np.array([0, 1, 2])
    only = index.search_groups("alpha", 10, groups=groups, mask=np.array([True, False, True]))
    alone = _index(["alpha", "gamma"]).search_groups("alpha", 10, groups=np.array([0, 1]))
    assert [(h.group, h.score) for h in only] == [(0, pytest.approx(alone[0].score))]
    # A negative group leaves a passage out, as the mask does.
    negative = index.search_groups("alpha", 10, groups=np.array([0, -1, 2]))
    assert [(h.group, pytest.approx(h.score)) for h in negative] == [(0, pytest.approx(alone[0].score))]


def test_nothing_matches_gives_nothing():
    index = _index(["alpha", "beta"])
    assert index.search_groups("gamma", 10, groups=np.array([0, 1])) == []
    assert index.search_groups("the", 10, groups=np.array([0, 1])) == []
    assert index.search_groups("alpha", 0, groups=np.array([0, 1])) == []
    assert index.search_groups("alpha", 10, groups=np.array([-1, -1])) == []


@pytest.mark.parametrize("kwargs", [
    {"groups": np.zeros(3, int)},
    {"groups": np.zeros(2, int), "fields": np.zeros(1, int)},
    {"groups": np.zeros(2, int), "mask": np.ones(1, bool)},
    {"groups": np.zeros(2, int), "fields": np.array([0, 1]), "field_weights": [1.0]},
    {"groups": np.zeros(2, int), "field_weights": [-1.0]},
    {"groups": np.zeros(2, int), "field_weights": [float("nan")]},
])
def test_inconsistent_arguments_are_refused(kwargs):
    with pytest.raises(ValueError):
        _index(["alpha", "beta"]).search_groups("alpha", 10, **kwargs)


def test_stats_and_groups_together_or_neither_are_refused():
    index = _index(["alpha", "beta"])
    stats = index.group_stats(np.array([0, 1]))
    with pytest.raises(ValueError, match="not both"):
        index.search_groups("alpha", 10, groups=np.array([0, 1]), stats=stats)
    with pytest.raises(ValueError, match="needs groups or stats"):
        index.search_groups("alpha", 10)


_WORDS = ["alpha", "beta", "gamma", "delta", "omega", "kappa"]


@given(
    texts=st.lists(st.lists(st.sampled_from(_WORDS), min_size=1, max_size=8), min_size=1, max_size=30),
    data=st.data(),
)
@settings(max_examples=150, deadline=None)
def test_memoised_stats_rank_exactly_as_a_fresh_computation(texts, data):
    """The run-length sum of a term's groups (groups in document order, as the embedded index
    assigns them) and the bincount sum (any grouping) agree with each other and with the
    statistics computed inside the call: same groups, order, best passages and scores."""
    index = _index([" ".join(t) for t in texts])
    n = len(texts)
    # groups in document order (sorted) and shuffled ones: both paths of search_groups
    sorted_groups = np.cumsum(data.draw(st.lists(st.booleans(), min_size=n, max_size=n))).astype(np.int64)
    shuffled = np.array(data.draw(st.permutations(sorted_groups.tolist())), dtype=np.int64)
    fields = np.array(data.draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)), dtype=np.int64)
    mask = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    query = " ".join(data.draw(st.lists(st.sampled_from(_WORDS), min_size=1, max_size=4)))
    weights = [2.0, 1.0, 0.5]
    for groups in (sorted_groups, shuffled):
        fresh = index.search_groups(query, 5, groups=groups, fields=fields, field_weights=weights, mask=mask)
        stats = index.group_stats(groups, fields, mask)
        memo = index.search_groups(query, 5, field_weights=weights, stats=stats)
        assert [(h.group, h.best_doc) for h in memo] == [(h.group, h.best_doc) for h in fresh]
        assert [h.score for h in memo] == pytest.approx([h.score for h in fresh], rel=1e-12)
    # on one grouping, the run-length path and the bincount path give the same ranking
    stats = index.group_stats(sorted_groups, fields, mask)
    assert stats.sorted_groups is True
    runs = index.search_groups(query, n, field_weights=weights, stats=stats)
    counted = index.search_groups(query, n, field_weights=weights, stats=stats._replace(sorted_groups=False))
    assert [(h.group, h.best_doc) for h in runs] == [(h.group, h.best_doc) for h in counted]
    assert [h.score for h in runs] == pytest.approx([h.score for h in counted], rel=1e-12)
