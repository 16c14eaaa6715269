"""BM25Index with a weighted query (a query expanded by relevance feedback): each term's
contribution times its weight, the same ranking through the pruned and the dense evaluations."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kg.index.bm25 import BM25Index

CORPUS = ["cat sat mat", "cat cat dog", "dog barks loudly today"]


def build(texts):
    index = BM25Index()
    index.add_many(enumerate(texts))
    return index


def test_a_weight_multiplies_the_terms_contribution():
    index = build(CORPUS)
    cat = dict(index.search("cat", 10))
    dog = dict(index.search("dog", 10))
    hits = dict(index.search({"cat": 0.25, "dog": 2.0}, 10))
    assert hits.keys() == {0, 1, 2}
    for doc, score in hits.items():
        assert score == pytest.approx(0.25 * cat.get(doc, 0.0) + 2.0 * dog.get(doc, 0.0), rel=1e-12)
    # doc 1 by hand: 0.25 * 0.6649569031 + 2 * ln 1.6 * 2.2 / (1 + 1.11)
    assert hits[1] == pytest.approx(0.25 * 0.6649569031 + 2 * math.log(1.6) * 2.2 / 2.11, abs=1e-6)


def test_a_weight_multiplies_a_terms_bm25f_contribution_to_a_group():
    index = build(CORPUS + ["cat nap", "dog days"])
    stats = index.group_stats(np.array([0, 0, 1, 2, 1]), np.array([1, 0, 0, 1, 0]))
    weights = [1.0, 3.0]
    cat = {h.group: h.score for h in index.search_groups("cat", 10, field_weights=weights, stats=stats)}
    dog = {h.group: h.score for h in index.search_groups("dog", 10, field_weights=weights, stats=stats)}
    hits = {h.group: h.score for h in index.search_groups({"cat": 0.5, "dog": 1.5}, 10, field_weights=weights,
                                                          stats=stats)}
    assert hits.keys() == {0, 1, 2}
    for group, score in hits.items():
        assert score == pytest.approx(0.5 * cat.get(group, 0.0) + 1.5 * dog.get(group, 0.0), rel=1e-12)


def test_unit_weights_rank_exactly_as_the_text():
    index = build(CORPUS)
    assert index.search({"cat": 1.0, "dog": 1.0}, 10) == index.search("cat dog", 10)
    stats = index.group_stats(np.array([0, 0, 1]))
    assert index.search_groups({"cat": 1, "dog": 1}, 10, stats=stats) == index.search_groups("cat dog", 10,
                                                                                              stats=stats)


def test_zero_weights_are_dropped_and_bad_weights_refused():
    index = build(CORPUS)
    assert index.query_weights({"cat": 0.0, "dog": 0.5}) == {"dog": 0.5}
    assert index.search({"cat": 0.0}, 10) == []
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="weight of query term 'cat'"):
            index.search({"cat": bad}, 10)
        with pytest.raises(ValueError, match="weight of query term 'cat'"):
            index.search_groups({"cat": bad}, 10, groups=np.array([0, 1, 2]))


def test_a_weighted_term_is_not_analysed_again():
    index = build(["running fast", "the runner"])
    assert index.query_weights("running") == {"run": 1.0}
    assert index.search({"running": 1.0}, 10) == []  # not an index term: the stem is
    assert [doc for doc, _ in index.search({"run": 1.0}, 10)] == [0]


def test_document_frequency_counts_all_or_the_selected_documents():
    index = build(CORPUS)
    assert index.document_frequency("cat") == 2
    assert index.document_frequency("absent") == 0
    assert index.document_frequency("cat", index.selection(np.array([True, False, True]))) == 1
    assert index.document_frequency("dog", index.selection()) == 2


VOCABULARY = [f"w{i}" for i in range(12)]


def _brute(texts, weights, mask):
    """BM25 with weighted terms over the selected documents, straight from the formula."""
    docs = [t.split() for t in texts]
    chosen = [i for i in range(len(docs)) if mask[i]]
    n = len(chosen)
    avgdl = sum(len(docs[i]) for i in chosen) / n
    out = {}
    for i in chosen:
        score = 0.0
        for term, w in weights.items():
            df = sum(1 for j in chosen if term in docs[j])
            tf = docs[i].count(term)
            if df and tf:
                idf = math.log1p((n - df + 0.5) / (df + 0.5))
                score += w * idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * len(docs[i]) / avgdl))
        if score > 0:
            out[i] = score
    return out


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.data())
def test_weighted_search_matches_the_formula_at_every_k(data):
    rng = random.Random(data.draw(st.integers(0, 10**6)))
    # Frequent and rare words, so MaxScore's pruning is taken for some queries.
    texts = [" ".join(rng.choices(VOCABULARY, weights=[30, 20, 10, 5, 3, 2, 1, 1, 1, 1, 1, 1],
                                  k=rng.randint(1, 9))) for _ in range(data.draw(st.integers(3, 60)))]
    weights = {t: data.draw(st.sampled_from([0.05, 0.3, 1.0, 2.5])) for t in rng.sample(VOCABULARY, 4)}
    mask = np.array([rng.random() < 0.8 for _ in texts])
    mask[0] = True
    index = build(texts)
    expected = _brute(texts, weights, mask)
    order = sorted(expected, key=lambda d: (-expected[d], d))
    for k in (1, 3, len(texts)):
        hits = index.search(weights, k, mask)
        assert len(hits) == min(k, len(order))
        for (doc, score), want in zip(hits, order, strict=False):
            assert score == pytest.approx(expected[want], rel=1e-9)
            assert score == pytest.approx(expected[doc], rel=1e-9)
