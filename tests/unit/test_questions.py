"""Question analysis and the answer-type check of ``ask``'s extractive answer
(:mod:`kg.text.questions`), and the predicate lexicon of its graph answers
(:func:`kg.rag.graph_answer.match_predicate`)."""

from __future__ import annotations

import pytest

from kg.rag.graph_answer import match_predicate, mention_key
from kg.text.questions import analyze_question, answers_type


@pytest.mark.parametrize(("question", "kind"), [
    ("Who is the author of PEP 405?", "person"),
    ("When was PEP 440 created?", "date"),
    ("In which year was the magazine founded?", "date"),
    ("How many operators does PEP 440 define?", "number"),
    ("What does `~=` mean?", "definition"),
    ("What is a wheel?", "definition"),
    ("What replaced PEP 386?", "name"),
    ("What is the status of PEP 572?", "name"),
    ("Is PEP 440 final?", "yes_no"),
])
def test_answer_types(question, kind):
    assert analyze_question(question).answer_type == kind


def test_focus_mentions_and_predicate():
    q = analyze_question("What does `~=` mean?")
    assert (q.focus, q.quoted, q.mentions) == (("~=",), True, ())
    q = analyze_question("What replaced PEP 386?")
    assert (q.mentions, q.predicate) == (("PEP 386",), ("replaced",))
    assert analyze_question("Who maintains pep-0008?").mentions == ("pep-0008",)


@pytest.mark.parametrize(("question", "sentence", "answers"), [
    # the user report: `~=` is not `!=`
    ("What does `~=` mean?", "``!=``: Version exclusion clause, the opposite of the ``==`` clause.", False),
    ("What does `~=` mean?", "A compatible release clause consists of the compatible release operator ``~=`` "
                             "and a version identifier.", True),
    ("What does `~=` mean?", "This operator MUST NOT be used with a single segment version such as ``~=1``.", False),
    # when: a date the question does not hold
    ("When was PEP 440 created?", "PEP 440 describes a scheme for identifying versions.", False),
    ("When was PEP 440 created?", "PEP 440 was created on 18 March 2013.", True),
    ("When was it accepted?", "It was accepted in 2014.", True),
    # how many: a number the question does not hold
    ("How many members does the council have?", "The council has five members.", True),
    ("How many members does the council have?", "The council decides on typing.", False),
    ("How many PEPs cite PEP 440?", "PEP 440 is cited widely.", False),
    # who: a person's name
    ("Who wrote the wheel format?", "Daniel Holth wrote the wheel format.", True),
    ("Who wrote the wheel format?", "The wheel format was written long ago.", False),
    # a named mention must be named by the answer
    ("Which PEP superseded PEP 241?", "PEP 749 supplements rather than supersedes PEP 649.", False),
    ("Which PEP superseded PEP 241?", "PEP 314 supersedes :pep:`241`.", True),
    # definitions: the term with a definitional pattern
    ("What is a wheel?", "A wheel is a ZIP-format archive with a specially formatted file name.", True),
    ("What is a wheel?", "Installers unpack the archive into site-packages.", False),
])
def test_answers_type(question, sentence, answers):
    assert answers_type(analyze_question(question), sentence) is answers


@pytest.mark.parametrize(("words", "name", "matched"), [
    (("replaced",), "replaces", "replaced"),
    (("superseded",), "replaces", "superseded"),
    (("replaced",), "superseded_by", "replaced"),
    (("requires",), "requires", "requires"),
    (("maintains",), "author", "maintains"),
    (("created",), "created", "created"),
    (("created",), "status", None),
    (("replaced",), "requires", None),
])
def test_predicate_lexicon(words, name, matched):
    assert match_predicate(words, name) == matched


def test_mention_keys_compare_numbers_by_value():
    assert mention_key("PEP 386") == mention_key("pep-0386") == mention_key("PEP-386") == ("pep", "386")
    assert mention_key("PEP 386") != mention_key("PEP 38")


def test_a_what_noun_question_is_answered_by_a_value():
    """Regression: "What dividend did the board approve in March?" declined its answer, "a
    quarterly dividend of 40 cents" (no capitalised word but the question's own "March")."""
    q = analyze_question("What dividend did the board approve in March?")
    assert answers_type(q, "The board approved a quarterly dividend of 40 cents per share payable in March.")
    assert not answers_type(q, "The board met in March.")
