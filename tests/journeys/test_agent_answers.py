"""Story: an agent stores answers (text, ``cites`` relations to documents) on its session branch;
a person reviews and merges them; a second session finds them on main by search."""

from __future__ import annotations

from tests.journeys.journey import Kg, Reviewer, address

DOCS = {
    "kb:/docs/rigging": {"title": "Rigging",
                         "content": "Standing rigging must be replaced every ten years in temperate waters."},
    "kb:/docs/billing": {"title": "Billing",
                         "content": "Invoices are issued on the first day of every month and are payable by card."},
    "kb:/docs/keys": {"title": "API keys", "content": "To rotate an API key, create a new key on the settings page, "
                                                      "then revoke the old one."},
}
SESSION = "agent/session-1"
RIGGING = "kb:/answers/rigging-interval"
KEYS = "kb:/answers/key-rotation-billing"
INVOICE = "kb:/answers/invoice-day"


def added(review) -> list[str]:
    return sorted(address(a["workspace"], a["path"]) for a in review.shown["applied"]["nodes"]["added"])


def test_an_agents_answers_reach_main_as_reviewed_and_a_second_session_finds_them(kg: Kg, reviewer: Reviewer):
    for addr, props in DOCS.items():
        kg.put("main", addr, "kb:Doc", props)
    kg.check_searchable("main")

    # The agent answers on its session branch, citing the documents it read.
    kg.branch(SESSION)
    kg.put(SESSION, RIGGING, "kb:Answer", {"question": "How often is standing rigging replaced?",
                                           "answer": "Every ten years in temperate waters [1]."})
    kg.relate(SESSION, RIGGING, "kb:/docs/rigging", "cites", properties={"markers": [1]})
    kg.put(SESSION, KEYS, "kb:Answer", {"question": "Does rotating an API key change billing?",
                                        "answer": "A key is rotated on the settings page [1]; invoices still "
                                                  "come on the first day of the month [2]."})
    kg.relate(SESSION, KEYS, "kb:/docs/keys", "cites", properties={"markers": [1]})
    kg.relate(SESSION, KEYS, "kb:/docs/billing", "cites", weight=0.5, properties={"markers": [2]})
    kg.check_acknowledged(SESSION)
    kg.check_searchable(SESSION)
    # main sees none of it before the merge
    assert kg.node("main", RIGGING) is None and kg.node("main", KEYS) is None
    assert kg.search("main", "How often is standing rigging replaced?", node_type="kb:Answer") == []

    # The person reviews; the agent writes once more before the merge: the merge of what was
    # reviewed is refused and writes nothing.
    first = reviewer.review(SESSION)
    assert first.status == 200 and added(first) == ["kb:/answers", KEYS, RIGGING]
    assert first.shown["applied"]["relations"] == {"upserted": 3, "removed": 0, "kept": 0}
    kg.put(SESSION, INVOICE, "kb:Answer", {"question": "On which day are invoices issued?",
                                           "answer": "On the first day of every month [1]."})
    kg.relate(SESSION, INVOICE, "kb:/docs/billing", "cites", properties={"markers": [1]})
    reviewer.merge_refused_as_stale(first)
    assert kg.node("main", INVOICE) is None

    # Reviewed again, the late answer shown, then merged: main is what the review showed.
    second = reviewer.review(SESSION)
    assert second.status == 200 and added(second) == ["kb:/answers", INVOICE, KEYS, RIGGING]
    result = reviewer.merge(second, message="answers of session 1")
    assert kg.log("main")[0]["message"] == "answers of session 1"
    assert result["derived"] == {"unlinked": 0, "restamped": 0, "orphaned": 0, "stale": 0, "queued": 0}
    kg.check_acknowledged(SESSION)
    kg.check_acknowledged("main")

    # A second session finds the answers on main by search, and follows their citations.
    kg.check_searchable("main")
    hits = kg.search("main", "Does rotating an API key change billing?", node_type="kb:Answer")
    assert hits[0]["path"] == "/answers/key-rotation-billing"
    assert set(kg.edges_from("main", KEYS, "cites")) == {(KEYS, "cites", "kb:/docs/keys"),
                                                         (KEYS, "cites", "kb:/docs/billing")}
    kg.branch("agent/session-2")
    assert kg.node("agent/session-2", INVOICE) == kg.node("main", INVOICE) is not None
