"""Story: two agents on two branches, touching the same nodes and their own, one property changed
differently by both; merged in turn. The second merge's conflict is shown, resolved by the
reviewer, and main ends as the reviewer saw it."""

from __future__ import annotations

from tests.journeys.journey import Kg, Reviewer

A = "agent/tidy"
B = "agent/triage"
RUNBOOK = "kb:/docs/runbook"
GLOSSARY = "kb:/docs/glossary"
OLD = "kb:/docs/old-runbook"


def test_two_agents_merged_in_turn_main_ends_as_the_reviewer_saw(kg: Kg, reviewer: Reviewer):
    kg.put("main", RUNBOOK, "kb:Doc", {"title": "Runbook", "status": "draft",
                                       "content": "Restart the ingest worker when its queue stalls for an hour."})
    kg.put("main", GLOSSARY, "kb:Doc", {"title": "Glossary", "content": "A shard is one slice of the vector index."})
    kg.put("main", OLD, "kb:Doc", {"title": "Old runbook", "content": "Reboot the whole cluster on any alert."})
    kg.relate("main", RUNBOOK, GLOSSARY, "see_also", weight=1.0)
    kg.relate("main", OLD, GLOSSARY, "see_also")
    kg.branch(A)
    kg.branch(B)

    # Agent A: the runbook's status (overlapping), a note of its own and its edge (disjoint).
    kg.patch(A, RUNBOOK, {"status": "reviewed"})
    kg.put(A, "kb:/notes/tidy/stall", "kb:Note", {"content": "Queue stalls follow a full disk on the worker host."})
    kg.relate(A, "kb:/notes/tidy/stall", RUNBOOK, "annotates")
    # Agent B: the runbook's title and status (status differently: the conflict), its own note,
    # the see_also edge re-weighted, the old runbook deleted.
    kg.patch(B, RUNBOOK, {"title": "Ingest worker runbook", "status": "needs-work"})
    kg.put(B, "kb:/notes/triage/alerts", "kb:Note",
           {"content": "Paging alerts for the ingest worker fire after fifteen minutes of stall."})
    kg.relate(B, RUNBOOK, GLOSSARY, "see_also", weight=0.25)
    kg.relate(B, "kb:/notes/triage/alerts", RUNBOOK, "annotates")
    kg.delete(B, OLD)
    for branch in (A, B):
        kg.check_acknowledged(branch)
        kg.check_searchable(branch)

    # A first: nothing on main moved since A forked.
    review_a = reviewer.review(A)
    assert review_a.status == 200 and review_a.shown["fast_forward"] is True
    reviewer.merge(review_a)
    assert kg.node("main", RUNBOOK)["properties"]["status"] == "reviewed"

    # Then B: the status conflict is shown with the three values; the title merges cleanly.
    review_b = reviewer.review(B)
    assert review_b.status == 409
    (conflict,) = review_b.conflicts
    assert (conflict["kind"], conflict["workspace"], conflict["path"], conflict["properties"]) == \
        ("node", "kb", "/docs/runbook", ["status"])
    assert [conflict[side]["properties"]["status"] for side in ("base", "ours", "theirs")] == \
        ["draft", "reviewed", "needs-work"]
    assert not kg.snapshot("main").nodes.keys() & {"kb:/notes/triage", "kb:/notes/triage/alerts"}
    # The reviewer writes the runbook as it should be: B's title, a status of their own.
    resolved = {**conflict["theirs"]["properties"], "status": "reviewed, alerts pending"}
    review_b = reviewer.review(B, resolutions=[{"workspace": "kb", "path": "/docs/runbook", "take": "value",
                                                "value": resolved}])
    assert review_b.status == 200 and review_b.shown["fast_forward"] is False
    assert review_b.shown["applied"]["nodes"]["deleted"] == [{"workspace": "kb", "path": "/docs/old-runbook"}]
    reviewer.merge(review_b)

    assert kg.node("main", RUNBOOK)["properties"] == {
        "title": "Ingest worker runbook", "status": "reviewed, alerts pending",
        "content": "Restart the ingest worker when its queue stalls for an hour."}
    assert kg.node("main", OLD) is None
    assert kg.edges_from("main", RUNBOOK, "see_also")[(RUNBOOK, "see_also", GLOSSARY)]["weight"] == 0.25
    assert {k[0] for k in kg.edges_from("main", "kb:/notes/tidy/stall")} | \
        {k[0] for k in kg.edges_from("main", "kb:/notes/triage/alerts")} == \
        {"kb:/notes/tidy/stall", "kb:/notes/triage/alerts"}
    kg.check_acknowledged("main")
    kg.check_acknowledged(A)
    kg.check_acknowledged(B)
    kg.check_searchable("main")
    hits = kg.search("main", "Reboot the whole cluster on any alert.")
    assert "/docs/old-runbook" not in {h["path"] for h in hits}
