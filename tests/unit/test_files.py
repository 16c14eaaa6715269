"""Files to nodes through the ingest formats: PEP headers, relations, stubs, plain documents."""

from __future__ import annotations

from pathlib import Path

import pytest

from kg.errors import InvalidInput
from kg.ops.files import iter_files, read_file_node
from kg.ops.formats import FORMATS, get_format
from kg.ops.formats.pep import PEP_FORMAT, parse_pep, pep_node
from kg.ops.formats.text import TEXT_FORMAT

PEPS = Path(__file__).resolve().parents[2] / "fixtures" / "peps" / "docs"

PEP = """PEP: 9999
Title: A Test PEP With a
       Continued Title
Author: Someone <a@b.c>
Status: Final
Type: Standards Track
Created: 01-Jan-2020
Requires: 440, 508
Replaces: 386
Superseded-By: 9998

Abstract
========

Body text.
"""


def test_parse_pep_header_and_body():
    headers, body = parse_pep(PEP)
    assert headers["title"] == "A Test PEP With a Continued Title"
    assert headers["requires"] == "440, 508"
    assert body.startswith("Abstract\n========")


def test_pep_node_properties_and_relations():
    node = pep_node(PEP, "pep-9999.rst")
    assert node.path == "/pep-9999" and node.node_type == "pep:PEP"
    assert node.properties["title"] == "A Test PEP With a Continued Title"
    assert node.properties["status"] == "Final" and node.properties["type"] == "Standards Track"
    assert node.properties["created"] == "01-Jan-2020"
    assert node.properties["body"].endswith("Body text.")
    assert node.relations == [("requires", "/pep-0440"), ("requires", "/pep-0508"),
                              ("replaces", "/pep-0386"), ("superseded_by", "/pep-9998")]


def test_not_a_pep_is_a_document(tmp_path):
    (tmp_path / "notes").mkdir()
    f = tmp_path / "notes" / "a b.md"
    f.write_text("# Heading\n\ntext", encoding="utf-8")
    for file_format in (TEXT_FORMAT, PEP_FORMAT):
        node = read_file_node(f, tmp_path, file_format)
        assert node.path == "/notes/a b" and node.node_type == "kg:Document"
        assert node.properties["title"] == "Heading" and node.properties["content"].endswith("text")
        assert len(node.properties["sha256"]) == 64


def test_real_pep_440():
    node = read_file_node(PEPS / "pep-0440.rst", PEPS, PEP_FORMAT)
    assert node.path == "/pep-0440"
    assert node.properties["title"] == "Version Identification and Dependency Specification"
    assert ("replaces", "/pep-0386") in node.relations


def test_the_fixture_corpus_has_150_peps_with_relations():
    files = list(iter_files(PEPS))
    assert len(files) == 150
    nodes = [read_file_node(f, PEPS, PEP_FORMAT) for f in files]
    assert all(n.node_type == "pep:PEP" for n in nodes)
    assert sum(len(n.relations) for n in nodes) >= 18


def test_errors(tmp_path):
    with pytest.raises(InvalidInput):
        list(iter_files(tmp_path / "missing"))
    with pytest.raises(InvalidInput):
        list(iter_files(tmp_path))
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(InvalidInput):
        read_file_node(bad, tmp_path, TEXT_FORMAT)


def test_the_text_format_makes_a_pep_a_plain_document():
    node = read_file_node(PEPS / "pep-0440.rst", PEPS, TEXT_FORMAT)
    assert node.path == "/pep-0440" and node.node_type == "kg:Document" and node.relations == []
    assert node.properties["content"].startswith("PEP: 440")


def test_pep_stub_nodes():
    stub = PEP_FORMAT.stub("/pep-0386")
    assert (stub.path, stub.node_type, stub.properties) == ("/pep-0386", "pep:External",
                                                            {"pep": 386, "in_corpus": False})
    assert TEXT_FORMAT.stub is None


def test_the_format_registry():
    assert sorted(FORMATS) == ["pep", "text"]
    assert get_format("pep") is PEP_FORMAT
    with pytest.raises(InvalidInput, match="unknown format 'rtf'"):
        get_format("rtf")


def test_a_pep_list_names_only_whole_numbers():
    """``Requires: not-a-number, 12x`` made a ``requires`` edge to PEP 12 and a stub for it
    (found by a new-user pass): a token is a PEP only if it is a whole number."""
    junk = PEP.replace("Requires: 440, 508", "Requires: not-a-number, 12x, PEP 484")
    node = pep_node(junk, "pep-9999.rst")
    assert node.relations == [("requires", "/pep-0484"), ("replaces", "/pep-0386"),
                              ("superseded_by", "/pep-9998")]


def test_the_fixture_corpus_relations_are_the_headers_numbers():
    """Every number of the corpus's Requires / Replaces / Superseded-By headers is one edge."""
    nodes = [read_file_node(f, PEPS, PEP_FORMAT) for f in iter_files(PEPS)]
    assert sum(len(n.relations) for n in nodes) == 22
