"""Story: the demo's lifecycle. Documents are ingested (``kg.ops.ingest.ingest_path``, what
``kg ingest`` runs), a person edits one over HTTP, the unchanged files are ingested again, then
changed files.

An unchanged file leaves the person's edit as it is and writes no
revision; a changed file applies the file's changes where nobody edited the node, and keeps the
person's edit where both changed the same property. Asserted through what a user reads: the
nodes, and the revisions in main's log."""

from __future__ import annotations

from pathlib import Path

from kg.context import OPERATOR
from kg.ops.ingest import ingest_path
from tests.journeys.journey import Kg, address

GUIDE, BILLING, FAQ = "kb:/guide", "kb:/billing", "kb:/faq"
REVIEWED_TITLE = "API key rotation (reviewed)"


def ingest(services, folder: Path, repo: str = "acme") -> None:
    ingest_path(services, OPERATOR, folder, repo=repo, workspace="kb")


def write(folder: Path, files: dict[str, str]) -> None:
    folder.mkdir(exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")


def ingested_and_edited(kg: Kg, services, docs: Path):
    """Three files ingested, found by search, and the guide's title edited by a person over
    HTTP: main as the person left it."""
    write(docs, {"guide.md": "# Key rotation\n\nRotate every API key every ninety days.\n",
                 "billing.md": "# Billing\n\nInvoices are issued on the first day of every month.\n",
                 "faq.md": "# FAQ\n\nSupport answers within one working day.\n"})
    ingest(services, docs)
    ingested = kg.snapshot("main")
    assert set(ingested.nodes) == {GUIDE, BILLING, FAQ}
    assert ingested.nodes[GUIDE]["properties"]["title"] == "Key rotation"
    for addr, value in ingested.nodes.items():
        kg.acknowledge("main", addr, value)
    kg.check_searchable("main")
    kg.patch("main", GUIDE, {"title": REVIEWED_TITLE})
    kg.check_acknowledged("main")
    kg.check_searchable("main")
    return kg.snapshot("main")


def test_ingested_documents_are_found_and_edited(kg: Kg, services, tmp_path: Path):
    edited = ingested_and_edited(kg, services, tmp_path / "docs")
    assert edited.nodes[GUIDE]["properties"]["title"] == REVIEWED_TITLE
    assert kg.search("main", REVIEWED_TITLE)[0]["path"] == "/guide"


def test_a_persons_edit_survives_re_ingesting_its_file(kg: Kg, services, tmp_path: Path):
    docs = tmp_path / "docs"
    edited = ingested_and_edited(kg, services, docs)
    revisions = kg.revisions("main")

    # The same files again: nothing is written, the edit stays.
    ingest(services, docs)
    assert kg.snapshot("main") == edited
    assert kg.revisions("main") == revisions
    kg.check_acknowledged("main")

    # Changed files: the guide's heading and text (the person edited its title), the billing
    # text (nobody edited it); the FAQ unchanged.
    write(docs, {"guide.md": "# Key rotation policy\n\nRotate every API key every sixty days.\n",
                 "billing.md": "# Billing\n\nInvoices are issued on the second day of every month.\n"})
    ingest(services, docs)
    # The nodes the changed files make where nobody edited them: the same files ingested afresh.
    ingest(services, docs, repo="fresh")
    fresh = Kg(kg.client, "fresh")
    after = kg.snapshot("main")
    assert after.nodes[BILLING] == fresh.node("main", BILLING)
    file_guide = fresh.node("main", GUIDE)
    assert file_guide["properties"]["title"] == "Key rotation policy"
    assert after.nodes[GUIDE] == {**file_guide, "properties": {**file_guide["properties"], "title": REVIEWED_TITLE}}
    assert after.nodes[FAQ] == edited.nodes[FAQ]
    # Written as revisions of the two changed files only.
    new = kg.log("main", limit=kg.revisions("main") - revisions)
    assert new and {address(c["workspace"], c["path"]) for r in new for c in r["changes"]} == {GUIDE, BILLING}
    for addr in (GUIDE, BILLING):
        kg.acknowledge("main", addr, after.nodes[addr])
    kg.check_acknowledged("main")
    kg.check_searchable("main")
