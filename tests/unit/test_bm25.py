"""BM25Index: hand-computed scores, statistics over the masked set, empty cases, CJK."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kg.index.bm25 import BM25Index, top_k_indices
from kg.index.tokenize import analyze

# Three documents of 3, 3 and 4 terms: N = 3, avgdl = 10/3.
CORPUS = ["cat sat mat", "cat cat dog", "dog barks loudly today"]


def build(texts):
    index = BM25Index()
    index.add_many(enumerate(texts))
    return index


def test_single_term_score_by_hand():
    # df(cat) = 2: idf = ln(1 + (3 - 2 + 0.5) / (2 + 0.5)) = ln 1.6.
    # doc 0: tf 1, |D| 3: k1 (1 - b + b |D|/avgdl) = 1.2 (0.25 + 0.75 * 0.9) = 1.11
    #        score = ln 1.6 * 1 * 2.2 / (1 + 1.11)             = 0.4900511774
    # doc 1: tf 2, |D| 3: score = ln 1.6 * 2 * 2.2 / (2 + 1.11) = 0.6649569031
    hits = build(CORPUS).search("cat", 10)
    assert [doc for doc, _ in hits] == [1, 0]
    assert hits[0][1] == pytest.approx(0.6649569031, abs=1e-6)
    assert hits[1][1] == pytest.approx(0.4900511774, abs=1e-6)
    assert hits[1][1] == pytest.approx(math.log(1.6) * 2.2 / 2.11, abs=1e-12)


def test_two_term_score_sums_the_terms():
    # doc 2: dog tf 1, |D| 4: 1.2 (0.25 + 0.75 * 1.2) = 1.38; ln 1.6 * 2.2 / 2.38 = 0.4344571363
    hits = build(CORPUS).search("Cat? DOG!", 10)
    assert [doc for doc, _ in hits] == [1, 0, 2]
    assert [score for _, score in hits] == pytest.approx(
        [0.6649569031 + 0.4900511774, 0.4900511774, 0.4344571363], abs=1e-6
    )


def test_repeated_query_terms_count_once():
    index = build(CORPUS)
    assert index.search("cat cat cat", 10) == index.search("cat", 10)


def test_statistics_are_those_of_the_masked_set():
    # Mask {0, 2}: N = 2, avgdl = 3.5, df(cat) = 1, so idf = ln(1 + 1.5 / 1.5) = ln 2 and
    # doc 0 scores ln 2 * 2.2 / (1 + 1.2 (0.25 + 0.75 * 3 / 3.5)) = 0.7361701090.
    index = build(CORPUS)
    masked = index.search("cat", 10, np.array([True, False, True]))
    assert masked == [(0, pytest.approx(0.7361701090, abs=1e-6))]
    unmasked = dict(index.search("cat", 10))
    assert unmasked[0] == pytest.approx(0.4900511774, abs=1e-6)
    # Exactly what an index of only those documents gives.
    assert masked == build([CORPUS[0], CORPUS[2]]).search("cat", 10)[:1]


def test_a_term_in_every_document_still_scores_above_zero():
    hits = build(["cat one", "cat two", "cat three"]).search("cat", 10)
    assert [doc for doc, _ in hits] == [0, 1, 2]
    assert all(score > 0 for _, score in hits)


def test_ties_break_by_doc_id():
    hits = build(["other", "same text", "x", "same text", "same text"]).search("same", 2)
    assert [doc for doc, _ in hits] == [1, 3]
    assert hits[0][1] == hits[1][1]


def test_k_limits_and_nonpositive_k_gives_nothing():
    index = build(CORPUS)
    assert [doc for doc, _ in index.search("cat dog", 1)] == [1]
    assert index.search("cat", 0) == []
    assert index.search("cat", -3) == []


@pytest.mark.parametrize("query", ["", "   ", "the of and ?!", "THE", "..."])
def test_a_query_without_terms_gives_nothing(query):
    assert build(CORPUS).search(query, 10) == []


def test_no_match_and_empty_mask_give_nothing():
    index = build(CORPUS)
    assert index.search("giraffe", 10) == []
    assert index.search("cat", 10, np.zeros(3, dtype=bool)) == []
    assert index.search("cat", 10, np.array([False, False, True])) == []


def test_an_empty_index_gives_nothing():
    assert BM25Index().search("cat", 10) == []
    assert BM25Index().search("cat", 10, np.zeros(0, dtype=bool)) == []


def test_a_short_mask_leaves_out_the_later_documents():
    index = build(CORPUS)
    assert [doc for doc, _ in index.search("cat dog", 10, np.array([True]))] == [0]


def test_a_mask_longer_than_the_index_is_refused():
    with pytest.raises(ValueError):
        build(CORPUS).search("cat", 10, np.ones(4, dtype=bool))


def test_cjk_query_finds_the_cjk_document():
    index = build(["人工智能技术发展迅速", "机器学习的方法", "the cat sat"])
    assert [doc for doc, _ in index.search("人工智能", 10)] == [0]
    assert [doc for doc, _ in index.search("学习", 10)] == [1]
    assert [doc for doc, _ in index.search("猫", 10)] == []


def test_empty_documents_never_match():
    index = build(["", "cat", "   "])
    assert index.n_docs == 3
    assert [doc for doc, _ in index.search("cat", 10)] == [1]


def test_doc_ids_must_be_dense_and_in_order():
    index = BM25Index()
    index.add(0, "cat")
    with pytest.raises(ValueError):
        index.add(2, "dog")
    with pytest.raises(ValueError):
        index.add_many([(1, "dog"), (3, "bird")])
    # A refused batch adds nothing.
    assert index.n_docs == 1
    assert index.search("dog", 10) == []


def test_adding_one_by_one_equals_adding_in_one_batch():
    texts = [f"term{i % 7} common word{i % 3} " * (1 + i % 4) for i in range(200)]
    one_by_one = BM25Index()
    for i, text in enumerate(texts):
        one_by_one.add(i, text)
    batch = build(texts)
    for query in ["term3", "common word1", "word2 term6"]:
        assert one_by_one.search(query, 50) == batch.search(query, 50)


def test_parameters_are_checked():
    with pytest.raises(ValueError):
        BM25Index(b=1.5)
    with pytest.raises(ValueError):
        BM25Index(k1=-1)


def reference_scores(texts, query, k1=1.2, b=0.75):
    """BM25 straight from the formula, in plain Python."""
    docs = [Counter(analyze(t)) for t in texts]
    lengths = [sum(d.values()) for d in docs]
    n = len(docs)
    avgdl = sum(lengths) / n
    scores = {}
    for term in set(analyze(query)):
        df = sum(1 for d in docs if term in d)
        if df == 0:
            continue
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        for i, d in enumerate(docs):
            tf = d.get(term, 0)
            if tf:
                norm = k1 * (1 - b + b * lengths[i] / avgdl)
                scores[i] = scores.get(i, 0.0) + idf * tf * (k1 + 1) / (tf + norm)
    return scores


words = st.sampled_from(["cat", "dog", "the", "bird", "fish", "人工", "智能", "x1", "of"])
texts = st.lists(st.lists(words, max_size=8).map(" ".join), min_size=1, max_size=12)


@settings(max_examples=150, deadline=None)
@given(texts=texts, query=st.lists(words, min_size=1, max_size=3).map(" ".join), data=st.data())
def test_masked_search_equals_the_formula_on_the_masked_subset(texts, query, data):
    mask = np.array(data.draw(st.lists(st.booleans(), min_size=len(texts), max_size=len(texts))))
    subset = [t for t, keep in zip(texts, mask, strict=True) if keep]
    got = build(texts).search(query, len(texts), mask)
    expected = reference_scores(subset, query) if subset else {}
    original_ids = np.flatnonzero(mask)
    assert {doc: score for doc, score in got} == pytest.approx(
        {int(original_ids[i]): s for i, s in expected.items()}, rel=1e-9
    )
    # Ordered by score descending, then doc id.
    assert got == sorted(got, key=lambda hit: (-hit[1], hit[0]))
    assert all(score > 0 for _, score in got)


@given(
    scores=st.lists(st.integers(0, 3), min_size=1, max_size=30),
    k=st.integers(1, 35),
    seed=st.integers(0, 2**16),
)
def test_top_k_indices_matches_a_full_sort(scores, k, seed):
    values = np.array(scores, dtype=np.float64)
    tiebreak = np.random.default_rng(seed).permutation(len(values))
    got = top_k_indices(values, k, tiebreak=tiebreak)
    expected = sorted(range(len(values)), key=lambda i: (-values[i], tiebreak[i]))[:k]
    assert got.tolist() == expected


@settings(max_examples=60, deadline=None)
@given(
    size=st.integers(1, 600),
    k=st.integers(1, 40),
    levels=st.integers(1, 5),
    seed=st.integers(0, 2**16),
    with_tiebreak=st.booleans(),
)
def test_top_k_indices_sorts_small_and_large_score_sets_alike(size, k, levels, seed, with_tiebreak):
    """Below and above the size where it sorts every score instead of partitioning first: best
    first, ties by the tiebreak (repeats of it by position), or by position without one."""
    rng = np.random.default_rng(seed)
    values = rng.integers(0, levels, size).astype(np.float64)  # few levels: many ties
    tiebreak = rng.integers(0, size // 2 + 1, size) if with_tiebreak else None
    got = top_k_indices(values, k, tiebreak=tiebreak)
    second = tiebreak if tiebreak is not None else np.arange(size)
    expected = sorted(range(size), key=lambda i: (-values[i], second[i], i))[:k]
    assert got.tolist() == expected
