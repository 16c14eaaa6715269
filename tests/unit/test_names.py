"""Entity names: one rule for which spellings are one entity (extraction) and whether a text
still names it (lineage)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kg.rag.entities import collect, find_subject
from kg.text.names import entity_slug, mentions, name_key


@pytest.mark.parametrize(("a", "b"), [
    ("ECMA-262", "ECMA 262"), ("ECMA-262", "ecma_262"), ("ECMA\u2013262", "ECMA 262"),  # en dash
    ("Ada  Lovelace", "ada lovelace"), ("Node.js", "Node JS"), ("AC/DC", "AC DC"),
    ("Café", "cafe"), ("ＥＣＭＡ 262", "ECMA 262"),  # NFKC: full-width letters
])
def test_spellings_of_one_name_have_one_key(a, b):
    assert name_key(a) == name_key(b) != ""
    assert entity_slug(a) == entity_slug(b)


@pytest.mark.parametrize(("a", "b"), [
    ("C++", "C"), ("C#", "C"), ("C#", "C++"), ("F#", "F"), ("C\u266f", "C"), ("Notepad++", "Notepad"),
    ("U.S.", "US"), ("3.11", "311"), ("ECMA 262", "ECMA 2620"),
])
def test_names_that_differ_by_more_than_spacing_and_punctuation_stay_distinct(a, b):
    assert name_key(a) != name_key(b)
    assert entity_slug(a) != entity_slug(b)


def test_entity_slugs_of_names_without_kept_symbols_are_unchanged():
    assert [entity_slug(n) for n in ("Guido van Rossum", "ECMA 262", "AT&T", "", "..")] == [
        "guido-van-rossum", "ecma-262", "at-t", "", ""]
    assert [entity_slug(n) for n in ("C++", "C#", "C\u266f")] == ["c-plus-plus", "c-sharp", "c-sharp"]


@pytest.mark.parametrize(("text", "names", "expected"), [
    ("JavaScript is standardised as ECMA-262 by Ecma.", ["ECMA 262"], True),
    ("JavaScript is standardised as ECMA 262.", ["ECMA-262"], True),
    ("(ECMA-262)", ["ECMA 262"], True),
    ("ECMA-2620 is another standard.", ["ECMA 262"], False),
    ("Written in C++.", ["C"], False),
    ("Written in C#, not Java.", ["C"], False),
    ("Written in C, then C++.", ["C"], True),
    ("Written in C++.", ["C++"], True),
    ("Written in c ++.", ["C++"], False),
    ("Adalovelace", ["Ada Lovelace", "Ada"], False),
    ("Ada Lovelace's notes", ["Ada Lovelace"], True),
    ("anything", ["", "--"], False),
])
def test_a_text_names_an_entity_by_whole_tokens(text, names, expected):
    assert mentions(text, names) is expected


@given(st.text(max_size=30), st.text(max_size=30), st.text(max_size=30))
def test_a_name_is_found_in_any_text_that_holds_one_of_its_spellings(before, name, after):
    """Whatever surrounds it, a text holding a name (set apart by spaces) names it, written
    with any separator between its tokens."""
    if not name_key(name):
        return
    spelled = "-".join(name_key(name).split())
    assert mentions(f"{before} {spelled} {after}", [name])
    assert mentions(f"{before} {name} {after}", [spelled])


def test_extraction_merges_spellings_by_key_and_keeps_c_and_cpp_apart():
    entities, dropped = collect([("ECMA-262", "concept", []), ("ECMA 262", "concept", []),
                                 ("C", "product", []), ("C++", "product", [])])
    assert dropped == 0
    assert [(e.name, e.slug) for e in entities] == [("ECMA-262", "ecma-262"), ("C", "c"), ("C++", "c-plus-plus")]
    assert entities[0].aliases == ["ECMA 262"]
    subject, made = find_subject("ECMA 262", entities)
    assert subject is entities[0] and made is False
    subject, made = find_subject("C++", entities)
    assert subject is entities[2] and made is False
