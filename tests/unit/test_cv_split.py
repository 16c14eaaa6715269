"""The query split of bench/cv_fusion.py: disjoint folds covering every query once, balanced,
deterministic, and the choice made on training folds only."""

from __future__ import annotations

import pytest

from bench.cv_fusion import allsup_at, fused, kfold


@pytest.mark.parametrize(("n", "folds"), [(210, 5), (350, 5), (7, 3), (2, 2)])
def test_folds_are_disjoint_cover_every_query_and_are_balanced(n, folds):
    ids = [f"q{i}" for i in range(n)]
    split = kfold(ids, folds)
    assert len(split) == folds
    seen = [q for fold in split for q in fold]
    assert sorted(seen) == sorted(ids) and len(seen) == len(set(seen))
    for i, a in enumerate(split):
        for b in split[i + 1:]:
            assert not set(a) & set(b)
    sizes = [len(f) for f in split]
    assert max(sizes) - min(sizes) <= 1


def test_the_split_depends_on_the_seed_and_the_ids_only():
    ids = [f"q{i}" for i in range(50)]
    assert kfold(ids, 5) == kfold(list(reversed(ids)), 5)
    assert kfold(ids, 5, seed=1) != kfold(ids, 5, seed=2)


@pytest.mark.parametrize(("ids", "folds"), [(["a", "a", "b"], 2), (["a", "b"], 3), (["a", "b"], 1)])
def test_bad_splits_are_refused(ids, folds):
    with pytest.raises(ValueError):
        kfold(ids, folds)


def test_fusion_and_allsup_of_the_harness():
    # k = 10, vector weight 0.5: "b" (fulltext 1, vector 2) beats "a" (vector 1 only).
    assert fused(["a", "b"], ["b", "c"], rrf_k=10, vector_weight=0.5) == ["b", "c", "a"]
    assert allsup_at(["x", "a", "b"], {"a": 1, "b": 1}, 3) == 1.0
    assert allsup_at(["x", "a", "b"], {"a": 1, "b": 1}, 2) == 0.0
