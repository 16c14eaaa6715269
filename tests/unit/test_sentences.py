"""Sentence splitting for extractive answers (kg.text.sentences)."""

from __future__ import annotations

from kg.text.sentences import is_whole, split_sentences


def test_a_parenthesis_is_never_cut():
    """Regression: an answer ended with a sentence cut mid-parenthesis."""
    text = ("A wheel is a ZIP-format archive (see the convention. It is e.g. name-1.0.whl) with a name. "
            "It holds one distribution.")
    assert split_sentences(text) == [
        "A wheel is a ZIP-format archive (see the convention. It is e.g. name-1.0.whl) with a name.",
        "It holds one distribution."]


def test_abbreviations_initials_and_decimals_do_not_end_a_sentence():
    text = "Dr. J. R. R. Tolkien wrote it in 1937. The U.S. edition cost 2.50 dollars, i.e. little. Then came more."
    assert split_sentences(text) == ["Dr. J. R. R. Tolkien wrote it in 1937.",
                                     "The U.S. edition cost 2.50 dollars, i.e. little.", "Then came more."]


def test_fragments_at_chunk_boundaries_and_headings_are_dropped():
    text = "ends a sentence cut by the chunker. Abstract\n========\n\nA whole sentence here. And a cut one"
    assert split_sentences(text) == ["A whole sentence here."]
    assert split_sentences("# Title\n\nThe body says so.") == ["The body says so."]
    assert split_sentences(text, whole_only=False)[0] == "ends a sentence cut by the chunker."


def test_is_whole():
    assert is_whole("Termination requires thirty days written notice.")
    assert not is_whole("requires thirty days written notice.")
    assert not is_whole("Termination requires thirty days")
    assert not is_whole("Yes.")
    assert not is_whole("It is (cut here.")
