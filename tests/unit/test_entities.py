"""The pure parts of extract-entities: slugs, names, relation types, the deterministic extractor
and reading model replies (CASES #18, #19)."""

from __future__ import annotations

import json

import pytest

from kg.errors import ProviderError
from kg.rag.entities import (
    EXTRACTION_SCHEMA,
    clean_name,
    collect,
    deterministic_entities,
    deterministic_extraction,
    document_text,
    entity_type,
    fingerprint,
    parse_extraction,
    relation_type,
    resolve_relations,
    slugify,
)
from kg.store.paths import validate_path


@pytest.mark.parametrize("name, slug", [
    ("Guido van Rossum", "guido-van-rossum"),
    ("guido  van rossum.", "guido-van-rossum"),
    ("GUIDO VAN ROSSUM", "guido-van-rossum"),
    ("Electrons", "electrons"), (" electrons ", "electrons"), ("ELECTRONS", "electrons"),
    ("AC/DC", "ac-dc"), ("a b", "a-b"), ("Éric Lévy", "eric-levy"), ("Straße", "strasse"),
    ("ＰＥＰ　８", "pep-8"), ("東京 タワー", "東京-タワー"),
    ("..", ""), ("", ""), ("   ", ""), ("/", ""), (None, ""), (42, ""),
])
def test_slugify_folds_case_spacing_accents_and_punctuation(name, slug):
    assert slugify(name) == slug


@pytest.mark.parametrize("name", ["AC/DC", "../etc/passwd", "a\x00b", "x" * 1000, "–—", "C++", "Q&A"])
def test_a_slug_is_one_safe_path_segment_or_empty(name):
    slug = slugify(name)
    assert "/" not in slug and "." not in slug and len(slug) <= 120
    if slug:
        assert validate_path(f"/entities/{slug}")


def test_clean_name():
    assert clean_name("  Guido   van Rossum  ") == "Guido van Rossum"
    assert clean_name("guido  van rossum.") == "guido van rossum"
    assert clean_name("U.S.") == "U.S."
    assert clean_name('"Acme Marine",') == "Acme Marine"
    assert clean_name("..") is None and clean_name("") is None and clean_name(3) is None


@pytest.mark.parametrize("raw, clean", [
    ("works_at", "works_at"), ("worksAt", "works_at"), ("Works At", "works_at"), ("works-at", "works_at"),
    ("  LOCATED in ", "located_in"), ("fondé par", "fonde_par"), ("part of/member", "part_of_member"),
    ("!!!", None), ("", None), ("123", None), ("42nd_of", None), (None, None), (["x"], None),
])
def test_relation_types_become_lower_snake_case_or_are_dropped(raw, clean):
    assert relation_type(raw) == clean


def test_entity_types_are_normalised():
    assert entity_type("Person") == "person"
    assert entity_type("company") == "organization" and entity_type("Organisation") == "organization"
    assert entity_type("city") == "place" and entity_type("software") == "product"
    assert entity_type("spaceship") == "concept" and entity_type(None) == "concept"


def test_deterministic_extractor_finds_names_acronyms_and_cross_references():
    text = ("The Python Software Foundation manages Python. Guido van Rossum created it at CWI. "
            "In PEP 8 the style is set; see also PEP-20 and RFC 2616. The University of Amsterdam "
            "and NASA and AC/DC. Guido van Rossum's language. I think OK.")
    entities, dropped = collect(deterministic_entities(text))
    assert dropped == 0
    assert [(e.name, e.type) for e in entities] == [
        ("Python Software Foundation", "organization"),
        ("Guido van Rossum", "person"),
        ("CWI", "organization"),
        ("PEP 8", "concept"),
        ("PEP 20", "concept"),
        ("RFC 2616", "concept"),
        ("University of Amsterdam", "organization"),
        ("NASA", "organization"),
        ("AC/DC", "organization"),
    ]


def test_deterministic_extractor_ignores_single_words_and_sentence_starts():
    assert deterministic_entities("Python is nice. It runs. Today We Go.") == []
    assert deterministic_entities("Yesterday Ada Lovelace wrote.") == [("Ada Lovelace", "person", [])]
    assert deterministic_entities("no capitals here at all") == []
    assert deterministic_entities("") == []


def test_collect_merges_by_slug_first_spelling_wins():
    entities, dropped = collect([("Electrons", "concept", None), ("electrons", "person", ["ELECTRONS", "e-"]),
                                 ("..", "concept", None), (None, None, None)])
    assert dropped == 2
    (one,) = entities
    assert (one.name, one.type, one.slug) == ("Electrons", "concept", "electrons")
    assert one.aliases == ["electrons", "ELECTRONS", "e-"]


def test_collect_caps_the_number_of_entities():
    entities, dropped = collect([(f"Name Number{i}", "concept", None) for i in range(150)])
    assert len(entities) == 100 and dropped == 50


def test_parse_extraction_reads_a_think_block_and_a_fenced_reply():
    reply = ("<think>let me list them</think>\n```json\n" + json.dumps({
        "entities": [{"name": "Dana Weber", "type": "person"}, {"name": "Acme Marine", "type": "Organisation"},
                     "Kiel", 7],
        "relations": [{"from": "Dana Weber", "type": "works at", "to": "ACME MARINE"},
                      {"source": "Acme Marine", "relation": "locatedIn", "target": "Kiel"},
                      {"from": "Dana Weber", "type": "knows", "to": "Nobody Listed"},
                      "garbage"]}) + "\n```")
    entities, raw, dropped = parse_extraction(reply)
    assert [(e.name, e.type) for e in entities] == [
        ("Dana Weber", "person"), ("Acme Marine", "organization"), ("Kiel", "concept")]
    assert dropped == 1
    relations, lost = resolve_relations(entities, raw)
    assert [(r.source, r.type, r.target) for r in relations] == [
        ("dana-weber", "works_at", "acme-marine"), ("acme-marine", "located_in", "kiel")]
    assert lost == 2                                  # a relation to an unlisted entity never dangles


def test_relations_may_name_an_entity_by_an_alias():
    entities, _ = collect([("Guido van Rossum", "person", ["Guido", "BDFL"]), ("Python", "product", None)])
    relations, lost = resolve_relations(entities, [("guido", "created", "Python"), ("Guido", "uses", "Perl")])
    assert [(r.source, r.type, r.target) for r in relations] == [("guido-van-rossum", "created", "python")]
    assert lost == 1


def test_resolve_relations_drops_self_loops_repeats_and_empty_types():
    entities, _ = collect([("A B", "concept", None), ("C D", "concept", None)])
    relations, lost = resolve_relations(entities, [("A B", "rel", "C D"), ("a  b", "Rel", "c d."),
                                                   ("A B", "rel", "A B"), ("A B", "???", "C D"),
                                                   (None, "rel", "C D")])
    assert [(r.source, r.type, r.target) for r in relations] == [("a-b", "rel", "c-d")]
    assert lost == 3


@pytest.mark.parametrize("reply, reason", [
    ("sorry, I cannot help with that", "no_json"),
    ("", "empty"),
    ("<think>only thinking</think>", "empty"),
    (json.dumps(EXTRACTION_SCHEMA), "echoed_schema"),
    ('{"entities": "Dana Weber"}', "schema_mismatch"),
    ('[{"name": "Dana"}]', "schema_mismatch"),
])
def test_unreadable_replies_are_provider_errors(reply, reason):
    with pytest.raises(ProviderError) as caught:
        parse_extraction(reply)
    assert caught.value.details["reason"] == reason


def test_fingerprint_depends_on_text_and_extractor():
    a = fingerprint("Guido van Rossum", "deterministic")
    assert a == fingerprint("Guido van Rossum", "deterministic") and len(a) == 64
    assert a != fingerprint("Guido van Rossum.", "deterministic")
    assert a != fingerprint("Guido van Rossum", "llm:ollama:qwen3:4b")


def test_document_text_reads_the_text_fields_capped():
    props = {"title": "Title", "content": "Body text", "author": "not read", "text": "  "}
    assert document_text(props, 100) == "Title\n\nBody text"
    assert document_text(props, 8) == "Title\n\nB"
    assert document_text({"content": 5}, 100) == ""


def test_deterministic_names_stay_on_one_line_and_skip_rfc_keywords():
    text = ("Status: Final\nType: Standards Track\nAuthor: Alyssa Coghlan\n\n"
            "Installers MUST NOT fail. Tools SHOULD follow PEP 440 as Donald Stufft wrote.")
    names = [name for name, _, _ in deterministic_entities(text)]
    assert "Alyssa Coghlan" in names and "Donald Stufft" in names and "PEP 440" in names
    assert not {"Final Type", "Standards Track Author", "MUST", "NOT", "SHOULD"} & set(names)


def test_deterministic_extractor_reads_rst_pep_roles():
    names = [name for name, _, _ in deterministic_entities(
        "See :pep:`484` and :pep:`the style guide <8>` and :rfc:`2119`, unlike PEP 440.")]
    assert names == ["PEP 484", "PEP 8", "RFC 2119", "PEP 440"]


def test_names_of_documents_indexes_and_companies_are_not_persons():
    """Regression: "Python Package Index", "Marine Handbook" and a company were
    typed as persons."""
    text = "Get it from the Python Package Index. It is in the Marine Handbook. Films by Starz Home Entertainment."
    assert deterministic_entities(text) == [("Python Package Index", "concept", []),
                                            ("Marine Handbook", "concept", []),
                                            ("Starz Home Entertainment", "organization", [])]
    # words the document writes in lower case make a phrase, not a person
    assert deterministic_entities("Package Installers are tools. Some installers fail.") == [
        ("Package Installers", "concept", [])]
    assert deterministic_entities("Yesterday Ada Lovelace wrote.") == [("Ada Lovelace", "person", [])]


def test_x_of_y_is_two_entities_and_a_relation():
    found = deterministic_extraction("Dana Weber of Acme Marine wrote it. The University of Amsterdam agreed.")
    assert found.candidates == [("Dana Weber", "person", []), ("Acme Marine", "organization", []),
                                ("University of Amsterdam", "organization", [])]
    assert found.relations == [("Dana Weber", "affiliated_with", "Acme Marine")]


def test_headings_and_fragments_are_dropped_with_a_reason():
    found = deterministic_extraction("Rejected Ideas\n==============\n\nThe I/O Library is slow.\n\n"
                                     "# Package Index\n\nText.")
    assert found.dropped == [{"name": "Rejected Ideas", "reason": "heading"},
                             {"name": "O Library", "reason": "fragment"}]
    assert ("Package Index", "concept", []) in found.candidates  # a heading naming a concept stays
    entities, dropped, why = collect([("..", "concept", None)], reasons=True)
    assert (entities, dropped, why) == ([], 1, [{"name": "..", "reason": "no_usable_name"}])


# -- the document's subject -------------------------------------------------------------------


@pytest.mark.parametrize("title, name", [
    ("Ed Wood (film)", "Ed Wood"),
    ("Doctor Strange (2016 film)", "Doctor Strange"),
    ("  Scott   Derrickson ", "Scott Derrickson"),
    ("(film)", "film"),                      # nothing but the qualifier: the qualifier is the name
    ("Ed Wood (film) Poster", "Ed Wood (film) Poster"),   # only a trailing qualifier is dropped
    ("", None),
    (None, None),
])
def test_subject_name_drops_a_trailing_qualifier(title, name):
    from kg.rag.entities import subject_name

    assert subject_name(title) == name


@pytest.mark.parametrize("title, expected", [
    ("Scott Derrickson", True), ("Kiss and Tell (1945 film)", True), ("AC/DC", True), ("Python", True),
    ("U.S.", True), ("The Sun Also Rises", True), ("Guido van Rossum", True), ("1994 FIFA World Cup", True),
    ("How to install packages", False), ("Guido created Python.", False), ("Is it fast?", False),
    ("Install it now!", False), ("of Mice", False), ("A B C D E F G H I", False), ("", False), (None, False),
])
def test_looks_like_name_tells_names_from_sentences(title, expected):
    from kg.rag.entities import looks_like_name

    assert looks_like_name(title) is expected


def test_find_subject_by_name_alias_slug_or_made_from_the_title():
    from kg.rag.entities import Entity, find_subject

    guido = Entity("Guido van Rossum", "person", "guido-van-rossum", aliases=["BDFL"])
    cwi = Entity("CWI", "organization", "cwi")
    assert find_subject("guido  VAN rossum", [cwi, guido]) == (guido, False)        # case, spacing
    assert find_subject("Guido van Rossum (programmer)", [guido]) == (guido, False)  # qualifier
    assert find_subject("BDFL", [cwi, guido]) == (guido, False)                      # an alias
    assert find_subject("Guido-van-Rossum", [guido]) == (guido, False)               # the slug
    made, new = find_subject("Batman (1989 film)", [cwi])
    assert new is True and (made.name, made.slug, made.type) == ("Batman", "batman", "concept")
    person, _ = find_subject("Scott Derrickson", [])
    assert person.type == "person"
    assert find_subject("How Guido created Python", [guido]) == (None, False)
    assert find_subject(None, [guido]) == (None, False)


def test_a_document_series_written_alone_is_no_organization():
    """A new user's PEP extraction typed "PEP" (of "this PEP proposes") as an organization.
    Alone, PEP and RFC are kinds of document and name nothing; numbered they are the
    cross-references; ISO alone is still the body."""
    text = ("This PEP proposes a new format. PEPs and RFCs differ; see PEP 8 and RFC 2616. "
            "ISO publishes ISO 9001.")
    assert deterministic_entities(text) == [("PEP 8", "concept", []), ("RFC 2616", "concept", []),
                                            ("ISO", "organization", []), ("ISO 9001", "concept", [])]
