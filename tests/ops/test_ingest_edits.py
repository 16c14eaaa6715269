"""The ingest lifecycle with people's edits: an unchanged file is skipped, a changed one is a
three-way merge with the edits (kept, listed, or proposed on a review branch), on both databases."""

from __future__ import annotations

import hashlib
import re
import shutil
from pathlib import Path

import pytest
from sqlalchemy import delete, func, select

from kg.context import OPERATOR, run
from kg.errors import Conflict, InvalidInput
from kg.ops import nodes as node_ops
from kg.ops import queries
from kg.ops.branches import create_branch
from kg.ops.ingest import ingest_path
from kg.ops.merge import merge_branch
from kg.ops.repos import create_repository, create_workspace
from kg.rag.search import SearchRequest, search
from kg.store.ingest_records import find_record
from kg.store.models import IngestRecord, Repository, Revision
from kg.store.nodes import find_node, visible_nodes
from kg.store.repos import branch_view

PEPS = Path(__file__).resolve().parents[2] / "fixtures" / "peps" / "docs"
SOME = ["pep-0440.rst", "pep-0508.rst", "pep-0517.rst"]


@pytest.fixture
def corpus(tmp_path) -> Path:
    folder = tmp_path / "peps"
    folder.mkdir()
    for name in SOME:
        shutil.copy(PEPS / name, folder / name)
    return folder


def kept(report):
    """The report's kept edits as JSON objects."""
    return [k.model_dump() for k in report.kept_edits]


def ingest(services, corpus, **kwargs):
    return ingest_path(services, OPERATOR, corpus, repo="peps", workspace="peps", format_name="pep", **kwargs)


def edit(services, path="/pep-0440", branch="main", **properties):
    run(services, OPERATOR, node_ops.patch_node, "peps", branch, "peps", path, properties=properties)


def node(services, path="/pep-0440", branch="main"):
    with services.db.read() as s:
        return find_node(s, branch_view(s, "peps", branch), "peps", path)


def head(services) -> int:
    with services.db.read() as s:
        return s.scalar(select(Repository.head_revision).where(Repository.name == "peps"))


def change_header(corpus, name, header, value, file="pep-0440.rst"):
    target = corpus / file
    text = target.read_text(encoding="utf-8")
    text, n = re.subn(rf"^{header}: .*$", f"{header}: {value}", text, count=1, flags=re.MULTILINE)
    assert n == 1
    target.write_text(text, encoding="utf-8")
    return hashlib.sha256(target.read_bytes()).hexdigest()


def test_an_unchanged_file_is_skipped_and_the_edit_kept_without_a_revision(services, corpus):
    """The reported bug: the second ingest answered ``replaced: 1`` and put the old status back."""
    ingest(services, corpus)
    edit(services, status="Withdrawn")
    before = head(services)
    again = ingest(services, corpus)
    assert (again.replaced, sorted(again.skipped)) == ([], ["/pep-0440", "/pep-0508", "/pep-0517"])
    assert again.summary().kept_edits == 0 and again.review_branch is None
    assert node(services).properties["status"] == "Withdrawn"
    assert head(services) == before


def test_a_file_change_elsewhere_is_applied_and_the_edit_kept(services, corpus):
    ingest(services, corpus)
    edit(services, status="Withdrawn")
    sha = change_header(corpus, "pep-0440", "Title", "Versions, identified")
    again = ingest(services, corpus)
    assert again.replaced == ["/pep-0440"] and again.kept_edits == []
    props = node(services).properties
    assert (props["title"], props["status"], props["sha256"]) == ("Versions, identified", "Withdrawn", sha)


def test_a_property_both_changed_keeps_the_persons_value_and_is_listed(services, corpus):
    ingest(services, corpus)
    edit(services, status="Withdrawn")
    change_header(corpus, "pep-0440", "Status", "Active")
    again = ingest(services, corpus)
    assert kept(again) == [{"path": "/pep-0440", "key": "status", "kept": "Withdrawn", "file": "Active"}]
    assert again.summary().kept_edits == 1
    assert node(services).properties["status"] == "Withdrawn"
    # listed once: the same file again is skipped, nothing written
    before = head(services)
    assert ingest(services, corpus).kept_edits == [] and head(services) == before
    # the next change merges against the file's last parse (status Active), not the node as
    # written: the file did not change the status again, so the person's value needs no listing
    change_header(corpus, "pep-0440", "Title", "Versions")
    third = ingest(services, corpus)
    assert third.replaced == ["/pep-0440"] and third.kept_edits == []
    props = node(services).properties
    assert (props["title"], props["status"]) == ("Versions", "Withdrawn")


def test_the_text_follows_the_same_rule(services, corpus):
    """A person's body stays searchable; the file's change of another property is applied."""
    ingest(services, corpus)
    edit(services, body="A quokka rewrote this specification.")
    change_header(corpus, "pep-0440", "Status", "Superseded")
    again = ingest(services, corpus)
    assert again.kept_edits == []
    props = node(services).properties
    assert (props["body"], props["status"]) == ("A quokka rewrote this specification.", "Superseded")
    with services.db.read() as s:
        rows, _ = search(s, services, branch_view(s, "peps", "main"), SearchRequest(query="quokka", mode="fulltext"))
    assert [r.path for r in rows] == ["/pep-0440"]
    # the file's new body clashes with the person's: the person's is kept and listed
    target = corpus / "pep-0440.rst"
    target.write_text(target.read_text(encoding="utf-8").replace("Abstract", "Summary", 1), encoding="utf-8")
    third = ingest(services, corpus)
    assert [(k.path, k.key, k.kept) for k in third.kept_edits] == [
        ("/pep-0440", "body", "A quokka rewrote this specification.")]
    assert "Summary" in third.kept_edits[0].file


def test_a_type_change_merges_like_a_property(services, corpus):
    ingest(services, corpus)
    run(services, OPERATOR, node_ops.patch_node, "peps", "main", "peps", "/pep-0508", properties={},
        node_type="pep:Spec")
    change_header(corpus, "pep-0508", "Status", "Active", file="pep-0508.rst")
    again = ingest(services, corpus)
    current = node(services, "/pep-0508")
    assert (current.node_type, current.properties["status"], again.kept_edits) == ("pep:Spec", "Active", [])
    # the file now stops being a PEP (a plain document): the type both changed is kept
    (corpus / "pep-0508.rst").write_text("# Dependency specification\n\nNo header any more.\n", encoding="utf-8")
    third = ingest(services, corpus)
    assert {"path": "/pep-0508", "key": "kg:node_type", "kept": "pep:Spec", "file": "kg:Document"} in kept(third)
    assert node(services, "/pep-0508").node_type == "pep:Spec"


def test_review_leaves_main_alone_and_puts_the_files_version_on_a_branch_to_merge(services, corpus):
    ingest(services, corpus)
    edit(services, status="Withdrawn")
    edited = node(services)
    change_header(corpus, "pep-0440", "Status", "Active")
    change_header(corpus, "pep-0508", "Title", "Dependency specification, revised", file="pep-0508.rst")
    report = ingest(services, corpus, conflicts="review")
    assert re.fullmatch(r"ingest/\d{8}-\d{6}", report.review_branch)
    assert report.summary().review_branch == report.review_branch
    assert kept(report) == [{"path": "/pep-0440", "key": "status", "kept": "Withdrawn", "file": "Active"}]
    assert report.replaced == ["/pep-0508"]  # a file without clashes is written on main as usual
    main = node(services)
    assert (main.revision, main.properties) == (edited.revision, edited.properties)
    proposed = node(services, branch=report.review_branch)
    assert proposed.properties["status"] == "Active"
    assert proposed.properties["sha256"] != edited.properties["sha256"]
    changes = queries.diff(services, OPERATOR, "peps", report.review_branch)
    (modified,) = changes.nodes.modified
    assert modified.path == "/pep-0440"
    assert modified.changes["status"].as_json() == {"old": "Withdrawn", "new": "Active"}
    merged = run(services, OPERATOR, merge_branch, "peps", report.review_branch, "main")
    assert merged.revision is not None
    assert node(services).properties == proposed.properties
    # main now holds the file's version: the next ingest keeps nothing and changes no value
    after = ingest(services, corpus)
    assert after.kept_edits == [] and after.replaced == [] and node(services).properties == proposed.properties


def test_review_names_the_branch_as_asked_and_refuses_a_taken_name_before_writing(services, corpus):
    ingest(services, corpus)
    edit(services, status="Withdrawn")
    change_header(corpus, "pep-0440", "Status", "Active")
    report = ingest(services, corpus, conflicts="review", review_branch="review/pep-440")
    assert report.review_branch == "review/pep-440"
    assert node(services, branch="review/pep-440").properties["status"] == "Active"
    change_header(corpus, "pep-0440", "Status", "Rejected")
    before = head(services)
    with pytest.raises(Conflict, match="exists already"):
        ingest(services, corpus, conflicts="review", review_branch="review/pep-440")
    with pytest.raises(InvalidInput, match="conflicts must be one of keep, review"):
        ingest(services, corpus, conflicts="theirs")
    assert head(services) == before


def test_a_deleted_node_stays_deleted(services, corpus):
    """Deleting is an edit: an unchanged file does not bring the node back, nor does a changed
    one (listed in ``kept_deleted``); review proposes the file's node on the review branch."""
    ingest(services, corpus)
    run(services, OPERATOR, node_ops.delete_node, "peps", "main", "peps", "/pep-0517")
    before = head(services)
    again = ingest(services, corpus)
    assert "/pep-0517" in again.skipped and node(services, "/pep-0517") is None and head(services) == before
    change_header(corpus, "pep-0517", "Status", "Active", file="pep-0517.rst")
    changed = ingest(services, corpus)
    assert changed.kept_deleted == ["/pep-0517"] and changed.summary().kept_deleted == 1
    assert node(services, "/pep-0517") is None
    assert ingest(services, corpus).kept_deleted == []  # recorded: listed once
    change_header(corpus, "pep-0517", "Status", "Final\nRequires: 518", file="pep-0517.rst")
    review = ingest(services, corpus, conflicts="review")
    assert review.kept_deleted == ["/pep-0517"] and node(services, "/pep-0517") is None
    assert node(services, "/pep-0517", branch=review.review_branch).properties["status"] == "Final"
    with services.db.read() as s:  # with the file's relation, to a stub of PEP 518
        from kg.store.relations import find_relation

        view = branch_view(s, "peps", review.review_branch)
        a, b = find_node(s, view, "peps", "/pep-0517"), find_node(s, view, "peps", "/pep-0518")
        assert b is not None and find_relation(s, view, a.node_id, b.node_id, "requires") is not None
    assert node(services, "/pep-0518") is None  # nothing of it on main


def test_records_are_per_branch(services, corpus):
    """A branch sees main's records up to its fork, and its own after."""
    ingest(services, corpus)
    run(services, OPERATOR, create_branch, "peps", name="feature")
    edit(services, branch="feature", status="Withdrawn")
    assert ingest(services, corpus, branch="feature").skipped == ["/pep-0440", "/pep-0508", "/pep-0517"]
    change_header(corpus, "pep-0440", "Status", "Active")
    on_feature = ingest(services, corpus, branch="feature")
    assert [k.key for k in on_feature.kept_edits] == ["status"]
    on_main = ingest(services, corpus)
    assert on_main.replaced == ["/pep-0440"] and node(services).properties["status"] == "Active"
    assert node(services, branch="feature").properties["status"] == "Withdrawn"


def forget_records(services):
    """The store as ingests before ingest records left it: the same nodes, no record."""
    with services.db.write() as s:
        s.execute(delete(IngestRecord))


def test_a_node_ingested_before_records_keeps_its_edits(services, corpus):
    ingest(services, corpus)
    forget_records(services)
    edit(services, status="Withdrawn")
    before = head(services)
    again = ingest(services, corpus)  # its sha256 property is the file's: unchanged
    assert again.replaced == [] and node(services).properties["status"] == "Withdrawn" and head(services) == before
    # a changed file: the base is the version the last ingest of the file wrote (its revision
    # is logged "ingest pep-0440.rst"), so the file's change applies and the edit stays
    change_header(corpus, "pep-0440", "Title", "Versions")
    changed = ingest(services, corpus)
    assert changed.replaced == ["/pep-0440"] and changed.kept_edits == []
    assert (node(services).properties["title"], node(services).properties["status"]) == ("Versions", "Withdrawn")


def test_a_node_no_ingest_wrote_keeps_every_value_that_differs(services, corpus):
    """No record and no ingest in its history: the base is unknown, nothing is overwritten."""
    ingest(services, corpus)
    forget_records(services)
    with services.db.write() as s:  # as if no ingest had ever been logged
        s.execute(Revision.__table__.update().values(message="written by hand"))
    edit(services, status="Withdrawn")
    change_header(corpus, "pep-0440", "Title", "Versions")
    changed = ingest(services, corpus)
    assert sorted(k.key for k in changed.kept_edits) == ["status", "title"]
    props = node(services).properties
    assert (props["status"], props["title"]) == ("Withdrawn", "Version Identification and Dependency Specification")
    with services.db.read() as s:
        assert s.scalar(select(func.count()).select_from(IngestRecord).where(IngestRecord.path == "/pep-0440")) == 1
    assert ingest(services, corpus).kept_edits == []  # recorded: the next run skips it


def test_an_unchanged_file_does_not_bring_back_a_relation_a_person_removed(services, corpus):
    from kg.ops.relations import unrelate
    from kg.store.relations import find_relation

    ingest(services, corpus)
    run(services, OPERATOR, unrelate, "peps", "main", "peps:/pep-0440", "peps:/pep-0386", "replaces")
    again = ingest(services, corpus)
    assert (again.relations_added, again.relations_unchanged) == (0, 0)
    with services.db.read() as s:
        view = branch_view(s, "peps", "main")
        a, b = find_node(s, view, "peps", "/pep-0440"), find_node(s, view, "peps", "/pep-0386")
        assert find_relation(s, view, a.node_id, b.node_id, "replaces") is None


PEP_386 = "PEP: 386\nTitle: Changing the version comparison module\nStatus: Superseded\n\nThe old scheme.\n"


@pytest.mark.parametrize("before_records", [False, True])
def test_a_stub_becomes_its_file_when_the_file_arrives(services, corpus, before_records):
    """The stub of a relation's target (PEP 440 replaces 386) is the base of 386's first
    ingest, recorded or (before records) found in the log: the file replaces it, nothing kept."""
    first = ingest(services, corpus)
    assert "/pep-0386" in first.stub_nodes
    if before_records:
        forget_records(services)
    (corpus / "pep-0386.rst").write_text(PEP_386, encoding="utf-8")
    again = ingest(services, corpus)
    assert again.replaced == ["/pep-0386"] and again.kept_edits == []
    stub = node(services, "/pep-0386")
    assert (stub.node_type, stub.properties["status"], "in_corpus" in stub.properties) == ("pep:PEP", "Superseded",
                                                                                           False)


def test_an_ingest_after_migration_0018_keeps_the_edits_made_before_it(settings, corpus):
    """A store written before ingest records (migration 0017), upgraded: the old ingest's node
    (its parse, the ``sha256`` property, logged ``ingest <file>``) and a person's edit of it.

    Today's code writes later tables (the change feed, the layout version), so the old store is
    written at head with no ingest record, then taken down to 0017 (dropping what 0018 and
    later added) and upgraded again, as a store of that age would be."""
    from kg.index.embedded import EmbeddedVectorIndex
    from kg.ops.files import read_file_node
    from kg.ops.formats.pep import PEP_FORMAT
    from kg.ops.ingest import ensure_repo_workspace
    from kg.ops.texts import write_node
    from kg.providers.registry import make_embedder
    from kg.services import Services
    from kg.store.db import Database

    url = settings.resolved_database_url()

    def start():
        return Services(settings=settings, db=Database(url), index=EmbeddedVectorIndex(settings.data_dir),
                        embedder_factory=lambda name: make_embedder(name, allow_fake=True))

    Database(url).upgrade()
    services = start()
    try:
        parse = read_file_node(corpus / "pep-0440.rst", corpus, PEP_FORMAT)

        def old_ingest(uow):
            ctx = uow.begin("peps", "main", message="ingest pep-0440.rst")
            write_node(uow, ctx, "peps", parse.path, node_type=parse.node_type, properties=parse.properties,
                       parents=True)

        run(services, OPERATOR, ensure_repo_workspace, "peps", "peps")
        run(services, OPERATOR, old_ingest)
        edit(services, status="Withdrawn")
        services.close()  # the server stops for the upgrade, and starts again after it
        db = Database(url)
        db.downgrade("0017")
        db.upgrade()
        db.dispose()
        services = start()
        first = ingest(services, corpus)
        assert "/pep-0440" in first.skipped and first.kept_edits == []
        assert node(services).properties["status"] == "Withdrawn"
        change_header(corpus, "pep-0440", "Title", "Versions")
        changed = ingest(services, corpus)
        assert changed.replaced == ["/pep-0440"] and changed.kept_edits == []
        props = node(services).properties
        assert (props["title"], props["status"]) == ("Versions", "Withdrawn")
    finally:
        services.close()


def test_deleting_or_resetting_a_branch_drops_its_records(services, corpus):
    from kg.ops.branches import delete_branch, reset_branch

    ingest(services, corpus)
    for name in ("a", "b"):
        run(services, OPERATOR, create_branch, "peps", name=name)
        change_header(corpus, "pep-0440", "Title", f"Versions {name}")
        assert ingest(services, corpus, branch=name).replaced == ["/pep-0440"]

    def records():
        with services.db.read() as s:
            return s.scalar(select(func.count()).select_from(IngestRecord))

    on_main = 3 + 1  # the three files and the stub of PEP 386
    assert records() == on_main + 2
    run(services, OPERATOR, delete_branch, "peps", "a")
    run(services, OPERATOR, reset_branch, "peps", "b")
    assert records() == on_main
    # b forked again from main: it sees main's record, so the file (changed) is merged anew
    assert ingest(services, corpus, branch="b").replaced == ["/pep-0440"]


def relations_of(services, path="/pep-0440", branch="main"):
    from kg.store.relations import visible_relations

    with services.db.read() as s:
        view = branch_view(s, "peps", branch)
        source = find_node(s, view, "peps", path)
        ids = {v.node_id: v.path for v in visible_nodes(s, view)}
        return sorted((e.rel_type, ids[e.to_node_id]) for e in visible_relations(s, view, node_ids=[source.node_id])
                      if e.from_node_id == source.node_id)


def test_relations_follow_the_same_rule(services, corpus):
    """A changed file adds the relations it added and removes those it dropped; one it still
    asserts but a person removed stays removed."""
    from kg.ops.relations import unrelate

    ingest(services, corpus)
    assert relations_of(services) == [("replaces", "/pep-0386")]
    run(services, OPERATOR, unrelate, "peps", "main", "peps:/pep-0440", "peps:/pep-0386", "replaces")
    change_header(corpus, "pep-0440", "Replaces", "386\nRequires: 508")
    added = ingest(services, corpus)
    assert (added.relations_added, added.relations_removed) == (1, 0)
    assert relations_of(services) == [("requires", "/pep-0508")]
    change_header(corpus, "pep-0440", "Requires", "517")
    moved = ingest(services, corpus)
    assert (moved.relations_added, moved.relations_removed) == (1, 1)
    assert moved.summary().relations_removed == 1
    assert relations_of(services) == [("requires", "/pep-0517")]


def test_after_merging_a_branch_that_ingested_a_change_main_keeps_what_the_merge_brought(services, corpus):
    ingest(services, corpus)
    run(services, OPERATOR, create_branch, "peps", name="feature")
    change_header(corpus, "pep-0440", "Title", "Versions")
    assert ingest(services, corpus, branch="feature").replaced == ["/pep-0440"]
    run(services, OPERATOR, merge_branch, "peps", "feature", "main")
    merged = node(services).properties
    again = ingest(services, corpus)  # main took the branch's record with its node: the file is unchanged
    assert (again.replaced, again.kept_edits) == ([], [])
    assert node(services).properties == merged and merged["title"] == "Versions"
    before = head(services)
    assert ingest(services, corpus).skipped == ["/pep-0440", "/pep-0508", "/pep-0517"] and head(services) == before


def test_a_relation_a_file_sent_for_review_dropped_is_gone_on_the_review_branch_and_after_its_merge(
        services, corpus):
    """The review branch holds the file's version of the node, its relations included: one the
    file no longer asserts is removed there, so merging the branch removes it on main too."""
    ingest(services, corpus)
    assert relations_of(services) == [("replaces", "/pep-0386")]
    edit(services, status="Withdrawn")
    target = corpus / "pep-0440.rst"
    target.write_text(target.read_text(encoding="utf-8").replace("Replaces: 386\n", ""), encoding="utf-8")
    change_header(corpus, "pep-0440", "Status", "Active")
    report = ingest(services, corpus, conflicts="review")
    assert relations_of(services) == [("replaces", "/pep-0386")]  # main is left alone
    assert relations_of(services, branch=report.review_branch) == []
    run(services, OPERATOR, merge_branch, "peps", report.review_branch, "main")
    assert relations_of(services) == []
    again = ingest(services, corpus)
    assert (again.replaced, relations_of(services)) == ([], [])


def record_of(services, path="/pep-0440", branch="main"):
    with services.db.read() as s:
        found = find_record(s, branch_view(s, "peps", branch), "peps", path)
        return None if found is None else found.sha256


def test_a_merge_carries_the_ingest_records_of_the_nodes_it_writes(services, corpus):
    """A file ingested on a branch only, merged into main, then changed: main merges the change
    against the parse the branch ingested, so it applies (no value is kept as an edit)."""
    run(services, OPERATOR, create_repository, "peps")
    run(services, OPERATOR, create_workspace, "peps", "peps")
    run(services, OPERATOR, create_branch, "peps", name="b1")
    ingest(services, corpus, branch="b1")
    run(services, OPERATOR, merge_branch, "peps", "b1", "main")
    before = head(services)
    assert ingest(services, corpus).skipped == ["/pep-0440", "/pep-0508", "/pep-0517"] and head(services) == before
    sha = change_header(corpus, "pep-0440", "Title", "Versions")
    changed = ingest(services, corpus)
    assert (changed.replaced, changed.kept_edits) == (["/pep-0440"], [])
    assert node(services).properties["title"] == "Versions" and record_of(services) == sha
    assert record_of(services, "/pep-0508") == record_of(services, "/pep-0508", branch="b1")
    assert ingest(services, corpus).skipped == ["/pep-0440", "/pep-0508", "/pep-0517"]


@pytest.mark.parametrize("take", ["theirs", "ours"])
def test_a_file_both_sides_ingested_differently_keeps_the_record_of_the_node_the_merge_takes(services, corpus, take):
    """Main and a branch ingested two versions of a file, the node conflicts: the record follows
    the resolution, so main's next ingest of its own folder merges against the right parse."""
    ingest(services, corpus)
    run(services, OPERATOR, create_branch, "peps", name="feature")
    on_feature = change_header(corpus, "pep-0440", "Title", "Versions")
    assert ingest(services, corpus, branch="feature").replaced == ["/pep-0440"]
    on_main = change_header(corpus, "pep-0440", "Title", "Versioning")
    assert ingest(services, corpus).replaced == ["/pep-0440"]
    run(services, OPERATOR, merge_branch, "peps", "feature", "main",
        resolutions=[{"workspace": "peps", "path": "/pep-0440", "take": take}])
    title = {"theirs": "Versions", "ours": "Versioning"}[take]
    assert node(services).properties["title"] == title
    assert record_of(services) == {"theirs": on_feature, "ours": on_main}[take]
    again = ingest(services, corpus)  # main's folder: title "Versioning"
    assert again.kept_edits == [] and node(services).properties["title"] == "Versioning"
    assert again.replaced == (["/pep-0440"] if take == "theirs" else [])


def test_a_node_merged_property_by_property_takes_the_sources_record(services, corpus):
    """A person edited the status on main, the branch ingested a title change: the node merges
    per property and main takes the branch's record; the person's status stays an edit."""
    ingest(services, corpus)
    run(services, OPERATOR, create_branch, "peps", name="feature")
    on_feature = change_header(corpus, "pep-0440", "Title", "Versions")
    ingest(services, corpus, branch="feature")
    edit(services, status="Withdrawn")
    run(services, OPERATOR, merge_branch, "peps", "feature", "main")
    props = node(services).properties
    assert (props["title"], props["status"], record_of(services)) == ("Versions", "Withdrawn", on_feature)
    before = head(services)
    assert ingest(services, corpus).skipped == ["/pep-0440", "/pep-0508", "/pep-0517"] and head(services) == before
    change_header(corpus, "pep-0440", "Title", "Versions 2")
    later = ingest(services, corpus)
    assert (later.replaced, later.kept_edits) == (["/pep-0440"], [])
    props = node(services).properties
    assert (props["title"], props["status"]) == ("Versions 2", "Withdrawn")
