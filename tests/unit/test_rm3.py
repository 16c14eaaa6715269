"""RM3 expansion (kg.index.feedback.rm3): weights by hand, the filters, the edge cases."""

from __future__ import annotations

import numpy as np
import pytest

from kg.index.bm25 import BM25Index
from kg.index.feedback import rm3

FILLER = [f"filler{i} words{i}" for i in range(24)]


def build(texts):
    index = BM25Index()
    index.add_many(enumerate(texts))
    return index


def test_weights_by_hand_score_weighted_and_interpolated():
    index = build(["alpha beta beta gamma", "alpha delta", *FILLER])  # alpha in 2 of 26
    # doc A (score 3): beta 2, alpha 1, gamma 1 -> 1/2, 1/4, 1/4 times 3 = 1.5, 0.75, 0.75
    # doc B (score 1): alpha 1, delta 1 -> 1/2, 1/2 = 0.5, 0.5
    # P(w|R) over the top 3 (beta 1.5, alpha 1.25, gamma 0.75; delta 0.5 cut) / 3.5
    expanded = rm3(index, "alpha", [("alpha beta beta gamma", 3.0), ("alpha delta", 1.0)], terms=3,
                   original_weight=0.6)
    assert expanded == pytest.approx({"alpha": 0.6 + 0.4 * 1.25 / 3.5, "beta": 0.4 * 1.5 / 3.5,
                                      "gamma": 0.4 * 0.75 / 3.5})
    assert sum(expanded.values()) == pytest.approx(1.0)


def test_a_term_in_too_many_documents_is_never_added():
    index = build(["common rare", *[f"common x{i}" for i in range(9)]])  # common: 10 of 10
    expanded = rm3(index, "rare", [("common rare", 1.0)], max_df_share=0.5)
    assert expanded == {"rare": 1.0}


def test_the_df_share_is_that_of_the_selected_documents():
    index = build(["zeta eta", "eta one", "eta two", *FILLER])
    everything = rm3(index, "zeta", [("zeta eta", 1.0)], max_df_share=0.2)
    assert "eta" in everything  # 3 of 27
    few = index.selection(np.array([True, True, True] + [False] * len(FILLER)))
    assert rm3(index, "zeta", [("zeta eta", 1.0)], max_df_share=0.2, selection=few) == {"zeta": 1.0}  # 3 of 3


def test_no_feedback_or_full_original_weight_keeps_the_query():
    index = build(["one two", "three four", *FILLER])
    assert rm3(index, "one three", []) == {"one": 0.5, "three": 0.5}
    assert rm3(index, "one", [("one two", 2.0)], original_weight=1.0) == {"one": 1.0}
    assert rm3(index, "the of", [("one two", 1.0)]) == {}  # stop words only: no query


@pytest.mark.parametrize("kwargs", [{"original_weight": 1.5}, {"original_weight": -0.1}, {"terms": 0},
                                    {"max_df_share": 0.0}, {"max_df_share": 1.1}])
def test_bad_settings_are_refused(kwargs):
    with pytest.raises(ValueError):
        rm3(build(["one"]), "one", [], **kwargs)


def test_the_expansion_searches_as_a_weighted_query():
    index = build(["solar panel", "photovoltaic panel efficiency", "wind turbine", *FILLER])
    first = index.search("solar", 10)
    assert [doc for doc, _ in first] == [0]
    expanded = rm3(index, "solar", [("solar panel", first[0][1])], max_df_share=0.2)
    assert [doc for doc, _ in index.search(expanded, 10)] == [0, 1]  # found through "panel"
