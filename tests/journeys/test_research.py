"""Story: the research assistant (``research-assistant``) answers a question on a session branch
of its own; a person reviews that branch and merges it.

Without an LLM configured it runs its fixed plan: ``search-documents``, ``graph-context``, then
an extractive ``ask``; the answer is the documents' own sentence with its citation, stored on
``research/<12 hex digits>`` as a ``kb:Answer`` node with a ``cites`` edge to each cited
document. main sees nothing of it until the merge."""

from __future__ import annotations

import re

from tests.journeys.journey import Kg, Reviewer, address

DOCS = {
    "kb:/docs/rigging": {"title": "Rigging",
                         "content": "Standing rigging must be replaced every ten years in temperate waters. "
                                    "Running rigging is inspected every season."},
    "kb:/docs/billing": {"title": "Billing",
                         "content": "Invoices are issued on the first day of every month and are payable by card."},
}
QUESTION = "How often must standing rigging be replaced?"


def test_the_research_assistants_branch_merged_as_reviewed(kg: Kg, reviewer: Reviewer):
    for addr, props in DOCS.items():
        kg.put("main", addr, "kb:Doc", props)
    kg.settle()  # the assistant searches what the index holds

    out = kg.invoke("research-assistant", {"question": QUESTION})
    # The offline path: the fixed plan, an extractive answer citing the rigging document.
    assert (out["mode"], out["stopped"], out["from"]) == ("fixed-plan", "plan", "main")
    assert [step["tool"] for step in out["trace"]] == ["search-documents", "graph-context", "ask"]
    assert out["grounded"] is True
    assert out["answer"] == "Standing rigging must be replaced every ten years in temperate waters. [1]"
    assert [(c["marker"], c["workspace"], c["path"]) for c in out["citations"]] == [(1, "kb", "/docs/rigging")]
    branch = out["branch"]
    assert re.fullmatch(r"research/[0-9a-f]{12}", branch)
    stored = address(out["stored"]["workspace"], out["stored"]["path"])
    assert stored == f"kb:/answers/how-often-must-standing-rigging-be-replaced-{branch.rsplit('/', 1)[1]}"

    # The answer is on the session branch only, with its citation's lineage.
    answer = kg.node(branch, stored)
    assert answer is not None and answer["node_type"] == "kb:Answer"
    assert answer["properties"]["answer"] == out["answer"] and answer["properties"]["sources"] == ["/docs/rigging"]
    assert kg.node("main", stored) is None
    ((key, edge),) = kg.edges_from(branch, stored).items()
    assert key == (stored, "cites", "kb:/docs/rigging")
    assert edge["properties"]["markers"] == [1] and edge["properties"]["source_revision"] == 1
    assert len(edge["properties"]["chunk_sha256"]) == 1
    kg.acknowledge(branch, stored, answer)
    kg.check_searchable(branch)

    # The person reviews the session branch and merges it.
    review = reviewer.review(branch)
    assert review.status == 200
    assert sorted(a["path"] for a in review.shown["applied"]["nodes"]["added"]) == ["/answers", stored[3:]]
    assert review.shown["applied"]["relations"] == {"upserted": 1, "removed": 0, "kept": 0}
    reviewer.merge(review)

    # A later session finds the answer on main, marked as an answer, and its citation.
    assert kg.node("main", stored) == answer
    kg.check_searchable("main")
    hits = kg.search("main", QUESTION, node_type="kb:Answer")
    assert [h["path"] for h in hits][:1] == [stored[3:]]
    assert list(kg.edges_from("main", stored)) == [key]
    # Asked again on main, the assistant finds the documents, not its own stored answer, as evidence.
    again = kg.invoke("research-assistant", {"question": QUESTION})
    assert [c["path"] for c in again["citations"]] == ["/docs/rigging"]
