"""Candidate scoring of ``resolve-entities`` (kg.rag.resolve): normalisation, the number guard,
blocking, union-find and the canonical node."""

from __future__ import annotations

import pytest

from kg.rag.resolve import (
    Candidate,
    candidate_pairs,
    canonical,
    cluster,
    name_tokens,
    normalised,
    numbers_of,
    score_pair,
)


def c(name, kind=None, edges=0, created="", path=None):
    return Candidate(
        node_id=name,
        path=path or f"/entities/{name.lower().replace(' ', '-')}",
        name=name,
        entity_type=kind,
        edges=edges,
        created=created,
    )


@pytest.mark.parametrize(
    "a, b",
    [
        ("1972 Italian Open", "1976 Italian Open"),
        ("Henry VIII", "Henry VII"),
        ("Super Bowl 50", "Super Bowl 51"),
        ("3rd Battalion", "4th Battalion"),
        ("First Crusade", "Second Crusade"),
        ("2008 Summer Olympics", "Summer Olympics"),
        # names that differ only by a number are different documents, versions, releases
        ("PEP 458", "PEP 480"),
        ("Python 2", "Python 3"),
        ("Fedora 38", "Fedora 39"),
        ("SHA2-256", "SHA3-256"),
        ("Python 3.12", "Python 3.13"),
    ],
)
def test_names_differing_in_a_number_never_merge(a, b):
    scored = score_pair(c(a), c(b), similarity=1.0)
    assert scored.score is None and scored.reasons == ["numbers_differ"]


def test_titles_and_honorifics_are_stripped():
    assert normalised("Captain Ahab") == "ahab"
    assert normalised("Dr. Jekyll") == "jekyll"
    assert normalised("The Beatles") == "beatles"
    assert normalised("The Queen") == "queen"  # nothing but titles: they stay
    assert score_pair(c("Ahab"), c("Captain Ahab")).score == 1.0
    assert score_pair(c("Ahab"), c("Captain Ahab")).reasons == ["same_name"]


def test_honorifics_of_two_genders_never_merge():
    """The new user's proposal merged "Mr. Olympia" and "Ms. Olympia" (both "olympia" once the
    title is stripped): leading honorifics of two genders block the pair; one titled name and
    one bare still merge, and honorifics of one gender, or titles of none, do not block."""
    for a, b in (("Mr. Olympia", "Ms. Olympia"), ("Lord Grantham", "Lady Grantham"),
                 ("King Charles", "Queen Charles"), ("Mr Smith", "Mrs. Smith")):
        scored = score_pair(c(a), c(b), similarity=1.0)
        assert scored.score is None and scored.reasons == ["titles_differ"], (a, b)
    assert score_pair(c("Mr. Olympia"), c("Olympia")).reasons == ["same_name"]
    assert score_pair(c("Ms. Smith"), c("Mrs. Smith")).reasons == ["same_name"]
    assert score_pair(c("Captain Ahab"), c("Dr. Ahab")).reasons == ["same_name"]


def test_html_character_references_are_the_characters_they_encode():
    """Names scraped from web pages came with "&amp;" (a token "amp" of their own)."""
    assert name_tokens("Tom &amp; Jerry") == name_tokens("Tom & Jerry") == ["tom", "jerry"]
    assert score_pair(c("AT&amp;T"), c("AT&T")).reasons == ["same_name"]
    assert name_tokens("Caf&eacute; M&#252;ller") == ["cafe", "muller"]
    from kg.rag.entities import clean_name
    assert clean_name("Tom &amp; Jerry") == "Tom & Jerry" and clean_name("&quot;Ahab&quot;") == "Ahab"


def test_accents_case_and_punctuation_fold():
    assert name_tokens("Café  Müller!") == ["cafe", "muller"]
    assert score_pair(c("Café Müller"), c("cafe muller")).score == 1.0


def test_numbers_are_digits_ordinals_and_roman_numerals_after_the_first_word():
    assert numbers_of("Henry VIII") == {8}
    assert numbers_of("1972 Italian Open") == {1972}
    assert numbers_of("3rd Battalion") == {3}
    assert numbers_of("Second Crusade") == {2}
    assert numbers_of("I Robot") == frozenset()  # a first-word "I" is a word
    assert numbers_of("Vivian Leigh") == frozenset()  # "vivian" is no numeral


def test_different_types_never_merge():
    assert score_pair(c("Paris", "place"), c("Paris", "person")).reasons == ["types_differ"]
    assert score_pair(c("Paris", "place"), c("Paris")).score == 1.0  # one untyped: no guard


def test_fuzzy_score_and_embedding_average():
    s = score_pair(c("Barack Obama"), c("Barak Obama"))
    assert s.score is not None and 0.9 < s.score < 1.0
    assert s.reasons[0].startswith("fuzzy:")
    with_emb = score_pair(c("Barack Obama"), c("Barak Obama"), similarity=0.5)
    assert with_emb.score == pytest.approx((s.score + 0.5) / 2, abs=1e-3)
    assert with_emb.reasons[1] == "embedding:0.500"
    assert score_pair(c("Barack Obama"), c("Michelle Obama")).score < 0.9


def test_blocking_pairs_only_names_sharing_a_token():
    es = [c("Ahab"), c("Captain Ahab"), c("Pequod"), c("Moby Dick"), c("Dick Whittington")]
    assert candidate_pairs(es) == [(0, 1), (3, 4)]


def test_a_chain_of_matches_is_never_one_merge():
    """Center clustering: "Academy Award" ~ "Academy Awards" ~ "Academy Awards for Best Actor"
    (the last matched only with the middle one) is one merge of the first two, not three."""
    es = [c("Academy Award", edges=9), c("Academy Awards", edges=2), c("Academy Awards for Best Actor"),
          c("Academy Award for Best Picture")]
    merges = cluster(es, [(0, 1, 0.95, ["fuzzy:0.950"]), (1, 2, 0.91, ["fuzzy:0.910"]), (2, 3, 0.92, ["x"])])
    assert [(m["kept"].name, [x.name for x in m["merged"]]) for m in merges] == [
        ("Academy Award", ["Academy Awards"]),
        ("Academy Awards for Best Actor", ["Academy Award for Best Picture"]),  # the next center: shorter path
    ]


def test_leading_titles_go_and_inner_ones_stay():
    assert normalised("Captain Ahab") == "ahab" and normalised("The Pequod") == "pequod"
    assert normalised("A Film Unfinished") == normalised("Film Unfinished") == "film unfinished"
    assert normalised("1991 Mr. Olympia") != normalised("1991 Ms. Olympia")
    assert normalised("The Queen") == "queen" and normalised("Doctor") == "doctor"


def test_a_longer_name_that_contains_a_shorter_one_scores_by_what_it_adds():
    short, long_ = c("Academy Award", kind="award"), c("Academy Award for Best Actor", kind="award")
    assert score_pair(short, long_).score < 0.9  # token_set_ratio alone says 1.0
    assert score_pair(c("Abraham Maslow"), c("Abraham Harold Maslow")).score == pytest.approx(0.9, abs=1e-4)


def test_canonical_is_most_edges_then_oldest_then_shortest_path():
    a, b = c("A", edges=3, created="2020", path="/entities/aaaa"), c("B", edges=5, created="2021")
    assert canonical([a, b]) is b
    a2 = c("A", edges=5, created="2020", path="/entities/aaaa")
    assert canonical([a2, b]) is a2
    short = c("A", edges=5, created="2020", path="/entities/a")
    assert canonical([a2, short]) is short


def test_cluster_groups_components_and_names_the_kept_node():
    es = [c("Ahab", edges=1), c("Captain Ahab", edges=2), c("Capt. Ahab"), c("Pequod")]
    merges = cluster(es, [(0, 1, 1.0, ["same_name"]), (1, 2, 0.95, ["fuzzy:0.950"])])
    assert len(merges) == 1
    [m] = merges
    assert m["kept"] is es[1]
    assert [x.name for x in m["merged"]] == ["Ahab", "Capt. Ahab"]
    assert m["score"] == 0.95 and m["reasons"] == ["fuzzy:0.950", "same_name"]


def test_a_number_written_inside_a_word_is_the_same_number():
    assert score_pair(c("Python3"), c("Python 3")).score is not None  # not blocked: one number
    assert numbers_of("SHA2-256") == frozenset({2, 256})


@pytest.mark.parametrize("a, b", [(("Georgia", "organization"), ("Georgia", "place")),
                                  (("Python", "product"), ("Python", "person")),
                                  (("Victoria", "person"), ("Victoria", "place")),
                                  (("PEP 386", "work"), ("PEP 386", "concept"))])
def test_names_the_ner_typed_differently_never_merge_even_when_equal(a, b):
    scored = score_pair(c(*a), c(*b), similarity=1.0)
    assert scored.score is None and scored.reasons == ["types_differ"]


def test_find_merges_proposes_none_of_the_blocked_pairs_and_keeps_the_true_one():
    from types import SimpleNamespace

    from kg.rag.resolve import find_merges

    entities = sorted([c("PEP 458", "work"), c("PEP 480", "work"), c("Fedora 38", "product"),
                       c("Fedora 39", "product"), c("Georgia", "organization", path="/entities/georgia-team"),
                       c("Georgia", "place"), c("Guido van Rossum", "person"), c("Guido Van Rossum", "person",
                                                                                path="/entities/guido-van-rossum-2")],
                      key=lambda e: e.path)
    merges = find_merges(SimpleNamespace(llm=SimpleNamespace(name="none")), entities, threshold=0.8, model=None)
    assert [(m["kept"].name, [x.name for x in m["merged"]]) for m in merges] == [
        ("Guido van Rossum", ["Guido Van Rossum"])]
