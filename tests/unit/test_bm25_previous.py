"""BM25Index against its previous implementation (``bench/_bm25_previous.py``, the index before the
memoised selections and the pruned BM25F): the same documents with bit-for-bit the same scores, for
any mask, k and batching, pruned or not; and the first n results are the same for any k >= n."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench import _bm25_previous as previous_module
from kg.index import bm25 as bm25_module
from kg.index.bm25 import BM25Index

# Zipf-like: the first words are frequent, the last ones rare, so MaxScore has work to skip.
WORDS = ["w0"] * 30 + ["w1"] * 10 + ["w2"] * 4 + ["w3", "w4", "w5", "w6", "w7", "w8", "w9"]

docs_st = st.lists(st.lists(st.sampled_from(WORDS), max_size=12).map(" ".join), min_size=1, max_size=60)
query_st = st.lists(st.sampled_from(sorted(set(WORDS))), min_size=1, max_size=5).map(" ".join)


def build(cls, texts: list[str], cuts: list[int]):
    """An index of class ``cls`` over ``texts`` added in batches split at ``cuts``."""
    index = cls(analyzer=str.split)
    bounds = sorted({0, len(texts), *(c % (len(texts) + 1) for c in cuts)})
    for start, end in zip(bounds, bounds[1:], strict=False):
        index.add_many((d, texts[d]) for d in range(start, end))
    return index


@pytest.fixture(params=["pruning", "default"])
def thresholds(request, monkeypatch):
    """Both implementations freeze after every batch; with "pruning" MaxScore prunes whenever
    its bound allows (the default thresholds rarely let it on small corpora)."""
    for module in (bm25_module, previous_module):
        monkeypatch.setattr(module, "_MIN_TAIL_POSTINGS", 1)
        if request.param == "pruning":
            monkeypatch.setattr(module, "_CANDIDATE_SHARE", 1.0)
            monkeypatch.setattr(module, "_PRUNE_GAIN", 0)
    if request.param == "pruning":
        monkeypatch.setattr(bm25_module, "_PRUNE_MIN_POSTINGS", 0)


def draw_mask(data, n_docs: int) -> np.ndarray | None:
    """None, or a mask over the first n documents (every one of them selected, or some)."""
    shape = data.draw(st.sampled_from(["none", "all", "some"]))
    if shape == "none":
        return None
    n = data.draw(st.integers(0, n_docs))
    if shape == "all":
        return np.ones(n, bool)
    return np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=docs_st, query=query_st, k=st.integers(1, 8), cuts=st.lists(st.integers(0, 60), max_size=3),
       data=st.data())
def test_search_scores_equal_the_previous_implementation(thresholds, texts, query, k, cuts, data):
    mask = draw_mask(data, len(texts))
    new, old = build(BM25Index, texts, cuts), build(previous_module.BM25Index, texts, cuts)
    expected = old.search(query, k, mask)
    assert new.search(query, k, mask) == expected  # ids, order and float scores exactly
    assert new.search(query, k, selection=new.selection(mask)) == expected


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=docs_st, query=query_st, k=st.integers(1, 8), cuts=st.lists(st.integers(0, 60), max_size=3),
       data=st.data())
def test_the_first_results_are_the_same_for_any_larger_k(thresholds, texts, query, k, cuts, data):
    mask = draw_mask(data, len(texts))
    index = build(BM25Index, texts, cuts)
    selection = index.selection(mask)
    longest = index.search(query, len(texts) + 1, selection=selection)
    for smaller in range(1, k + 1):
        assert index.search(query, smaller, selection=selection) == longest[:smaller]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=docs_st, query=query_st, k=st.integers(1, 8), cuts=st.lists(st.integers(0, 60), max_size=3),
       data=st.data())
def test_search_groups_equals_the_previous_implementation(thresholds, texts, query, k, cuts, data):
    n = data.draw(st.integers(0, len(texts)))
    n_groups = data.draw(st.integers(1, 30))
    groups = np.array(data.draw(st.lists(st.integers(-1, n_groups - 1), min_size=n, max_size=n)), np.int64)
    if data.draw(st.booleans()):
        groups = np.sort(groups)  # sync order: a group's passages together
    fields = np.array(data.draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)), np.int32)
    mask = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
    weights = data.draw(st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.0]), min_size=3, max_size=3))
    new, old = build(BM25Index, texts, cuts), build(previous_module.BM25Index, texts, cuts)
    expected = old.search_groups(query, k, groups=groups, fields=fields, field_weights=weights, mask=mask)
    got = new.search_groups(query, k, field_weights=weights, stats=new.group_stats(groups, fields, mask))
    assert got == expected
    longest = new.search_groups(query, n_groups, field_weights=weights, stats=new.group_stats(groups, fields, mask))
    assert got == longest[:k]


def test_a_mask_selecting_everything_is_no_mask():
    index = BM25Index(analyzer=str.split)
    index.add_many(enumerate(["a b", "b c c", "c"]))
    everything = index.selection(np.ones(3, bool))
    assert everything.mask is None and everything.n_selected == 3
    assert index.search("c", 5, selection=everything) == index.search("c", 5)
    assert index.selection(np.ones(2, bool)).n == 2  # the third document left out still
    assert [d for d, _ in index.search("c", 5, np.ones(2, bool))] == [1]


def test_a_selection_and_a_mask_together_are_refused():
    index = BM25Index(analyzer=str.split)
    index.add_many(enumerate(["a", "b"]))
    with pytest.raises(ValueError, match="not both"):
        index.search("a", 1, np.ones(2, bool), selection=index.selection())


def test_a_selection_of_only_empty_documents_finds_nothing():
    index = BM25Index(analyzer=str.split)
    index.add_many(enumerate(["", "a"]))
    assert index.search("a", 3, selection=index.selection(np.array([True, False]))) == []
    assert index.search("a", 3, selection=index.selection(np.zeros(2, bool))) == []


@pytest.fixture
def pruned(monkeypatch):
    """Records whether each search's MaxScore pruned (chunk and group level)."""
    seen: list[tuple[str, bool]] = []
    chunks, groups = BM25Index._candidates, BM25Index._group_candidates

    def spy_chunks(self, *args, **kwargs):
        out = chunks(self, *args, **kwargs)
        seen.append(("chunks", out is not None))
        return out

    def spy_groups(self, *args, **kwargs):
        out = groups(self, *args, **kwargs)
        seen.append(("groups", out[1] is not None))
        return out

    monkeypatch.setattr(BM25Index, "_candidates", spy_chunks)
    monkeypatch.setattr(BM25Index, "_group_candidates", spy_groups)
    return seen


def test_pruned_searches_equal_the_previous_implementation(pruned, monkeypatch):
    """A rare term in a few passages and a term in every one: both levels prune the frequent
    term to the rare term's candidates, and score exactly as before."""
    monkeypatch.setattr(bm25_module, "_PRUNE_MIN_POSTINGS", 0)  # a small corpus
    rng = np.random.default_rng(3)
    texts = [" ".join(["common"] * int(rng.integers(1, 4)) + ["rare"] * int(i % 37 == 0)
                      + ["filler"] * int(rng.integers(0, 5))) for i in range(400)]
    groups = np.repeat(np.arange(200), 2)  # two passages a group, in order
    fields = np.tile([0, 1], 200)
    new, old = build(BM25Index, texts, [150]), build(previous_module.BM25Index, texts, [150])
    for mask in (None, rng.random(400) < 0.8):
        for k in (1, 3, 10):
            assert new.search("rare common", k, mask) == old.search("rare common", k, mask)
            chosen = np.ones(400, bool) if mask is None else mask
            assert new.search_groups("rare common", k, groups=groups, fields=fields, field_weights=[2.0, 1.0],
                                     mask=chosen) == \
                old.search_groups("rare common", k, groups=groups, fields=fields, field_weights=[2.0, 1.0], mask=chosen)
    assert ("chunks", True) in pruned and ("groups", True) in pruned


def test_documents_of_two_frequent_terms_are_candidates_beside_the_rare_terms(pruned, monkeypatch):
    """MaxScore's floor is the k-th best full score among the rare term's documents; each
    frequent term alone stays below it, but a document holding both may not: those documents
    (no rare term in them) are found by looking one term's documents up in the other's
    postings, and rank exactly as a full evaluation ranks them."""
    monkeypatch.setattr(bm25_module, "_CANDIDATE_SHARE", 1.0)
    monkeypatch.setattr(bm25_module, "_PRUNE_GAIN", 0)
    monkeypatch.setattr(bm25_module, "_PRUNE_MIN_POSTINGS", 0)
    rng = np.random.default_rng(5)
    texts = []
    for i in range(600):
        words = ["filler"] * int(rng.integers(2, 6)) + ["rare"] * int(i % 50 == 0)
        for term in ("alpha", "beta"):
            if rng.random() < 0.12:
                words += [term] * int(rng.integers(1, 4))
        texts.append(" ".join(words))
    new, old = build(BM25Index, texts, [250]), build(previous_module.BM25Index, texts, [250])
    looked_up: list[int] = []
    holds = bm25_module._holds
    monkeypatch.setattr(bm25_module, "_holds", lambda values, wanted: looked_up.append(len(wanted)) or holds(values,
                                                                                                              wanted))
    for mask in (None, rng.random(600) < 0.9):
        for k in (3, 5, 10):
            got = new.search("rare alpha beta", k, mask)
            assert got == old.search("rare alpha beta", k, mask)
        assert any("rare" not in texts[doc].split() for doc, _ in got)  # a pair's document ranks
    assert looked_up and all(found for _, found in pruned)


def test_the_dense_pass_keeps_every_tie_of_the_kth_score(monkeypatch):
    """Unpruned, the dense pass selects its top k among the documents scoring at least the
    rare term's k-th (less a margin): documents tied with the k-th score across that floor keep
    their order by id, as a full sort orders them."""
    monkeypatch.setattr(bm25_module, "_PRUNE_GAIN", 10**9)  # never prune: the dense pass with its floor
    monkeypatch.setattr(bm25_module, "_PRUNE_MIN_POSTINGS", 0)
    texts = ["rare common"] * 6 + ["common filler"] * 50 + ["rare common"] * 6 + ["filler"] * 40
    new, old = build(BM25Index, texts, [30]), build(previous_module.BM25Index, texts, [30])
    for mask in (None, np.arange(len(texts)) % 3 != 0):
        for k in (1, 4, 6, 7, 12, 13, 40):
            assert new.search("rare common", k, mask) == old.search("rare common", k, mask)
