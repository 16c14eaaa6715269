"""Story: entities extracted (``extract-entities``, its offline path: no LLM configured) on one
agent's branch and merged; then, on another agent's branch that forked before that merge, the
document edited and its entities extracted again, and that branch merged.

The second merge is where lineage writes on main: main's mention of a name the edited text no
longer has is unlinked and its entity flagged orphan (``docs/concepts/lineage.md``). The intended
behaviour: every such write is in the dry run the reviewer saw, and no edge either side
asserted is removed without the reviewer being shown it."""

from __future__ import annotations

from tests.journeys.journey import Kg, Reviewer, named

BIO = "kb:/bio"
TEXT = "Ada Lovelace worked with Charles Babbage in London on the Analytical Engine."
EDITED = "Ada Lovelace wrote the first published program for the Analytical Engine."
ADA, BABBAGE, ENGINE = "kb:/entities/ada-lovelace", "kb:/entities/charles-babbage", "kb:/entities/analytical-engine"
EXTRACT, EDIT = "agent/extract", "agent/edit"


def extract(kg: Kg, branch: str) -> set[str]:
    out = kg.invoke("extract-entities", {"path": "/bio", "workspace": "kb"}, branch)
    assert out["extractor"] == "deterministic" and out["skipped"] is False, out
    return {f"kb:{e['path']}" for e in out["entities"]}


def mentions(kg: Kg, branch: str) -> dict:
    """The ``mentioned_in`` edges into the document on the branch."""
    entities = [a for a in kg.snapshot(branch).nodes if a.startswith("kb:/entities/")]
    return {k: v for e in entities for k, v in kg.edges_from(branch, e, "mentioned_in").items() if k[2] == BIO}


def extracted_and_merged(kg: Kg, reviewer: Reviewer) -> dict:
    """main holds the document; two agents fork; the first extracts its entities and the
    reviewer merges them. Returns the document as written."""
    bio = kg.put("main", BIO, "kb:Doc", {"title": "Ada Lovelace", "content": TEXT})
    kg.branch(EXTRACT)
    kg.branch(EDIT)
    assert extract(kg, EXTRACT) == {ADA, BABBAGE, ENGINE}
    review = reviewer.review(EXTRACT)
    assert review.status == 200 and review.shown["applied"]["relations"] == {"upserted": 4, "removed": 0, "kept": 0}
    assert sorted(r["type"] for r in review.diff["relations"]["added"]) == ["about"] + ["mentioned_in"] * 3
    result = reviewer.merge(review)
    assert result["derived"] == {"unlinked": 0, "restamped": 0, "orphaned": 0, "stale": 0, "queued": 0}
    assert set(mentions(kg, "main")) == {(e, "mentioned_in", BIO) for e in (ADA, BABBAGE, ENGINE)}
    lineage = kg.ok(kg.client.get(f"{kg.api}/workspaces/kb/lineage/bio"), 200)
    assert sorted(r["path"] for r in lineage["derived"] if r["kind"] == "mention" and r["current"]) == \
        ["/entities/ada-lovelace", "/entities/analytical-engine", "/entities/charles-babbage"]
    return bio


def test_extracted_entities_reach_main_as_reviewed(kg: Kg, reviewer: Reviewer):
    extracted_and_merged(kg, reviewer)
    kg.check_acknowledged("main")
    kg.check_searchable("main")


def test_a_re_extraction_after_an_edit_merges_as_reviewed(kg: Kg, reviewer: Reviewer):
    bio = extracted_and_merged(kg, reviewer)
    # The other agent, on a branch that forked before the merge, edits the document and
    # extracts its entities again: Charles Babbage is no longer named.
    kg.put(EDIT, BIO, "kb:Doc", {"title": "Ada Lovelace", "content": EDITED})
    assert extract(kg, EDIT) == {ADA, ENGINE}
    kg.check_acknowledged(EDIT)
    kg.check_searchable(EDIT)

    # Both sides extracted the document: its extraction record and the mentions both stamped
    # differ, and the reviewer is shown them.
    review = reviewer.review(EDIT)
    assert review.status == 409
    shown = {(c["workspace"], c["path"]) if c["kind"] == "node" else (c["from"], c["type"], c["to"])
             for c in review.conflicts}
    assert shown >= {("kb", f"/kg/extractions/{bio['id']}"), (ADA, "mentioned_in", BIO),
                     (ENGINE, "mentioned_in", BIO)}, shown
    # The reviewer takes the edited branch's side of each.
    resolutions = [
        {"workspace": c["workspace"], "path": c["path"], "take": "theirs"} if "path" in c and "from" not in c
        else {"from": c["from"], "to": c["to"], "type": c["type"], "take": "theirs"} for c in review.conflicts]
    review = reviewer.review(EDIT, resolutions=resolutions)
    # Then lineage asks about the one mention main holds that the merged text no longer names:
    # it is never unlinked without the reviewer's word. The reviewer drops it.
    assert review.status == 409
    assert [(c["kind"], c["from"], c["type"], c["to"]) for c in review.conflicts] == \
        [("lineage", BABBAGE, "mentioned_in", BIO)]
    review = reviewer.review(EDIT, resolutions=resolutions + [
        {"from": BABBAGE, "to": BIO, "type": "mentioned_in", "take": "drop"}])
    assert review.status == 200
    asserted = set(mentions(kg, "main")) | set(mentions(kg, EDIT))
    reviewer.merge(review)

    # No edge either side held before the merge is gone from main unless the dry run named it;
    # the one dropped is gone.
    gone = asserted - set(mentions(kg, "main"))
    assert gone <= named(review.shown), f"removed without being shown: {sorted(gone - named(review.shown))}"
    assert (BABBAGE, "mentioned_in", BIO) in gone
    kg.check_acknowledged("main")
    kg.check_searchable("main")
