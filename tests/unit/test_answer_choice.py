"""The cross-validated choice of an answer-check setting (bench/answer_quality.py's ``choose``):
between values of equal recall the more precise one wins, also when the lower of the two corpora's
precisions is the other corpus's and does not move."""

from __future__ import annotations

from bench.answer_quality import choose


def _row(qid: str, corpus: str, answerable: bool, grounded: bool, exact: bool) -> dict:
    return {"id": qid, "corpus": corpus, "answerable": answerable, "grounded": grounded, "exact": exact}


def _rows(pep_wrong_grounded: bool) -> list[dict]:
    return [
        _row("p1", "peps", True, True, True), _row("p2", "peps", True, True, True),
        # an unanswerable PEP question answered (wrong) with the check off, declined with it on
        _row("p3", "peps", False, pep_wrong_grounded, False),
        _row("h1", "hotpotqa", True, True, True), _row("h2", "hotpotqa", True, True, False),  # 0.5, both values
    ]


def test_a_value_that_only_removes_wrong_answers_of_the_more_precise_corpus_is_chosen():
    by_value = {0.0: _rows(pep_wrong_grounded=True), 1.0: _rows(pep_wrong_grounded=False)}
    ids = {r["id"] for r in by_value[0.0]}
    assert choose(by_value, ids, target=0.95, ties="lenient") == 1.0
    assert choose(by_value, ids, target=0.95, ties="stricter") == 1.0


def test_equal_figures_go_to_the_tie_rule():
    by_value = {0.0: _rows(pep_wrong_grounded=False), 1.0: _rows(pep_wrong_grounded=False)}
    ids = {r["id"] for r in by_value[0.0]}
    assert choose(by_value, ids, target=0.95, ties="lenient") == 0.0
    assert choose(by_value, ids, target=0.95, ties="stricter") == 1.0
