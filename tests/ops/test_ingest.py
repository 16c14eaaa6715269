"""The ingestion lifecycle through ``kg ingest``'s library function, on both databases."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from sqlalchemy import func, select

from kg.context import OPERATOR
from kg.errors import InvalidInput
from kg.ops.ingest import ingest_path
from kg.rag.search import SearchRequest, search
from kg.store.models import Chunk, NodeVersion, Repository
from kg.store.repos import branch_view
from tests.conftest import FAKE_MODEL

PEPS = Path(__file__).resolve().parents[2] / "fixtures" / "peps" / "docs"
SOME = ["pep-0440.rst", "pep-0508.rst", "pep-0517.rst", "pep-0518.rst", "pep-0621.rst"]


@pytest.fixture
def corpus(tmp_path) -> Path:
    folder = tmp_path / "peps"
    folder.mkdir()
    for name in SOME:
        shutil.copy(PEPS / name, folder / name)
    return folder


def fake(services):
    return services.embedder(FAKE_MODEL)


def count(services, model) -> int:
    with services.db.read() as s:
        return s.scalar(select(func.count()).select_from(model))


def test_second_ingest_embeds_nothing_and_writes_nothing(services, corpus):
    first = ingest_path(services, OPERATOR, corpus, repo="peps", workspace="peps", format_name="pep")
    assert first.files == 5 and len(first.inserted) == 5 and first.passages_embedded > 5
    chunks, versions, calls = count(services, Chunk), count(services, NodeVersion), fake(services).calls
    second = ingest_path(services, OPERATOR, corpus, repo="peps", workspace="peps", format_name="pep")
    assert second.passages_embedded == 0 and len(second.skipped) == 5 and second.inserted == []
    assert fake(services).calls == calls
    assert count(services, Chunk) == chunks and count(services, NodeVersion) == versions


def test_touch_does_not_reembed_but_a_changed_byte_does(services, corpus):
    import os
    import time

    ingest_path(services, OPERATOR, corpus, repo="peps", workspace="peps", format_name="pep")
    target = corpus / "pep-0508.rst"
    os.utime(target, (time.time() + 100, time.time() + 100))
    again = ingest_path(services, OPERATOR, corpus, repo="peps", workspace="peps", format_name="pep")
    assert again.passages_embedded == 0
    data = bytearray(target.read_bytes())
    i = data.index(b"Abstract")
    data[i] = ord("a")  # same size, one byte changed
    target.write_bytes(bytes(data))
    again = ingest_path(services, OPERATOR, corpus, repo="peps", workspace="peps", format_name="pep")
    assert again.replaced == ["/pep-0508"] and again.passages_embedded > 0


def test_changed_text_replaces_old_chunks_in_search(services, corpus):
    ingest_path(services, OPERATOR, corpus, repo="peps", workspace="peps", format_name="pep")
    (corpus / "pep-0518.rst").write_text(
        "PEP: 518\nTitle: Build system requirements\nStatus: Final\nType: Standards Track\n"
        "Created: 10-May-2016\n\nOnly a quokka lives here now.\n", encoding="utf-8")
    ingest_path(services, OPERATOR, corpus, repo="peps", workspace="peps", format_name="pep")
    with services.db.read() as s:
        view = branch_view(s, "peps", "main")
        rows, _ = search(s, services, view, SearchRequest(query="quokka", mode="fulltext"))
        assert [r.path for r in rows] == ["/pep-0518"]
        old, _ = search(s, services, view, SearchRequest(query="pyproject toml",
                                                         mode="fulltext", granularity="node", k=10))
        assert "/pep-0518" not in [r.path for r in old]


def test_relations_and_stub_nodes(services, corpus):
    report = ingest_path(services, OPERATOR, corpus, repo="peps", workspace="peps", format_name="pep")
    assert report.relations_added >= 1
    again = ingest_path(services, OPERATOR, corpus, repo="peps", workspace="peps", format_name="pep")
    assert again.relations_added == 0 and again.relations_unchanged == 0  # unchanged files: skipped
    target = corpus / "pep-0440.rst"  # Replaces: 386
    target.write_text(target.read_text(encoding="utf-8") + "\nA changed line.\n", encoding="utf-8")
    changed = ingest_path(services, OPERATOR, corpus, repo="peps", workspace="peps", format_name="pep")
    assert changed.replaced == ["/pep-0440"]  # its relations are those of its last ingest: none asserted
    assert (changed.relations_added, changed.relations_unchanged, changed.relations_removed) == (0, 0, 0)


def test_file_removed_from_input_is_kept(services, corpus):
    ingest_path(services, OPERATOR, corpus, repo="peps", workspace="peps", format_name="pep")
    (corpus / "pep-0621.rst").unlink()
    ingest_path(services, OPERATOR, corpus, repo="peps", workspace="peps", format_name="pep")
    with services.db.read() as s:
        from kg.store.nodes import find_node

        assert find_node(s, branch_view(s, "peps", "main"), "peps", "/pep-0621") is not None


def test_ingest_on_a_branch_leaves_main_alone(services, corpus):
    ingest_path(services, OPERATOR, corpus, repo="peps", workspace="peps", format_name="pep")
    with services.db.write() as s:
        from kg.store.repos import create_branch, get_repository

        create_branch(s, get_repository(s, "peps", lock=True), name="agent/ingest")
    extra = corpus / "new.md"
    extra.write_text("# Walrus notes\n\nthe walrus operator explained", encoding="utf-8")
    ingest_path(services, OPERATOR, corpus, repo="peps", workspace="peps", format_name="pep", branch="agent/ingest")
    with services.db.read() as s:
        on_branch, _ = search(s, services, branch_view(s, "peps", "agent/ingest"),
                              SearchRequest(query="walrus", mode="fulltext"))
        on_main, _ = search(s, services, branch_view(s, "peps", "main"),
                            SearchRequest(query="walrus", mode="fulltext"))
    assert on_branch[0].path == "/new" and on_main == []


def test_non_utf8_file_writes_nothing(services, tmp_path):
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "a.txt").write_text("fine", encoding="utf-8")
    (folder / "b.txt").write_bytes(b"\xff\xfe bad")
    with pytest.raises(InvalidInput):
        ingest_path(services, OPERATOR, folder, repo="r", workspace="w")
    assert count(services, NodeVersion) == 0


def test_the_pep_format_writes_relations_and_external_stubs(services, corpus):
    report = ingest_path(services, OPERATOR, corpus, repo="peps", workspace="peps", format_name="pep")
    assert report.stub_nodes  # e.g. PEP 386, replaced by PEP 440, is not in the corpus
    with services.db.read() as s:
        from kg.store.nodes import find_node

        view = branch_view(s, "peps", "main")
        assert find_node(s, view, "peps", "/pep-0440").node_type == "pep:PEP"
        for path in report.stub_nodes:
            stub = find_node(s, view, "peps", path)
            assert stub.node_type == "pep:External" and stub.properties["in_corpus"] is False


def test_the_default_text_format_ingests_peps_as_documents(services, corpus):
    report = ingest_path(services, OPERATOR, corpus, repo="docs", workspace="docs")
    assert len(report.inserted) == 5 and report.relations_added == 0 and report.stub_nodes == []
    with services.db.read() as s:
        from kg.store.nodes import find_node

        node = find_node(s, branch_view(s, "docs", "main"), "docs", "/pep-0440")
        assert node.node_type == "kg:Document" and node.properties["content"].startswith("PEP: 440")


def test_an_unknown_format_writes_nothing(services, corpus):
    with pytest.raises(InvalidInput, match="unknown format"):
        ingest_path(services, OPERATOR, corpus, repo="peps", workspace="peps", format_name="rtf")
    assert count(services, NodeVersion) == 0
    with services.db.read() as s:
        from kg.store.models import Repository

        assert s.scalar(select(func.count()).select_from(Repository)) == 0


def test_two_files_that_would_be_one_node_are_refused_and_nothing_is_written(services, tmp_path):
    """``a.md`` and ``a.txt`` are both ``/a``: ingested, each replaced the other on every run
    (one file's text always lost, a revision per run); now the ingest says so and writes nothing."""
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "a.md").write_text("# A\n\nfrom markdown", encoding="utf-8")
    (folder / "a.txt").write_text("from plain text", encoding="utf-8")
    (folder / "b.md").write_text("# B\n\nunrelated", encoding="utf-8")
    with pytest.raises(InvalidInput) as raised:
        ingest_path(services, OPERATOR, folder, repo="notes", workspace="w")
    assert "a.md and a.txt would both be the node /a" in raised.value.message
    assert raised.value.details == {"clashes": [{"path": "/a", "files": ["a.md", "a.txt"]}]}
    assert count(services, NodeVersion) == 0
    with services.db.read() as s:
        assert s.scalar(select(func.count()).select_from(Repository)) == 0


def test_unreadable_files_are_skipped_with_their_reason_or_refuse_the_whole_ingest(services, tmp_path):
    folder = tmp_path / "mixed"
    folder.mkdir()
    (folder / "a.md").write_text("# A\n\nreadable otters\n", encoding="utf-8")
    (folder / "b.txt").write_bytes(b"caf\xe9")
    with pytest.raises(InvalidInput) as refused:
        ingest_path(services, OPERATOR, folder, repo="mixed", workspace="w")
    assert refused.value.message == f"{folder / 'b.txt'} is not UTF-8 text (byte 0xe9 at offset 3)"
    assert count(services, Repository) == 0  # refused before anything was written
    report = ingest_path(services, OPERATOR, folder, repo="mixed", workspace="w", skip_unreadable=True)
    assert (report.files, report.inserted, report.summary().unreadable) == (2, ["/a"], 1)
    assert [u.model_dump() for u in report.unreadable] == [{"file": str(folder / "b.txt"),
                                  "reason": "is not UTF-8 text (byte 0xe9 at offset 3)"}]
