"""search-documents and ask (CASES #24), with the extractive mode and a scripted LLM."""

from __future__ import annotations

import pytest

from kg.providers.llm import ScriptedLLM
from tests.api.test_nodes import assert_error

FINANCE = {
    "/q3-report": "Revenue grew 12 percent in the third quarter. Operating margin reached 18 percent.",
    "/dividends": "The board approved a quarterly dividend of 40 cents per share payable in March.",
    "/notice": "Termination requires thirty days written notice to the landlord.",
}


@pytest.fixture
def docs(client, repo):
    for path, text in FINANCE.items():
        r = client.put(f"/api/repos/acme/workspaces/knowledge/nodes{path}",
                       json={"node_type": "kb:Doc", "properties": {"content": text}})
        assert r.status_code == 201
    return repo


def invoke(client, name, payload, **body):
    return client.post(f"/api/functions/acme/{name}/invoke", json={"input": payload, **body})


def test_search_documents_returns_citation_handles(client, docs):
    r = invoke(client, "search-documents", {"query": "quarterly dividend", "k": 2})
    assert r.status_code == 200, r.text
    (first, *_) = r.json()["passages"]
    assert first["path"] == "/dividends" and first["chunk_index"] == 0 and first["node_id"]
    assert first["text_is_exact"] is True and "dividend" in first["text"]


def test_ask_extractive_answers_with_citations(client, docs):
    r = invoke(client, "ask", {"question": "What dividend did the board approve?"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["mode"] == "extractive" and body["grounded"] is True
    assert "40 cents" in body["answer"] and "[" in body["answer"]
    assert body["citations"][0]["path"] == "/dividends"
    assert body["attempts"][0]["query"] == "What dividend did the board approve?"


def test_ask_about_something_not_covered_is_not_grounded_and_calls_no_model(client, docs, services):
    llm = ScriptedLLM(["should never be used"])
    services.llm = llm
    body = invoke(client, "ask", {"question": "Who won the football final?"}).json()
    assert body["grounded"] is False and body["citations"] == []
    assert llm.calls == []


def test_extractive_ask_on_nonsense_or_uncovered_terms_is_not_grounded(client, docs):
    """Regression: passages retrieved for a nonsense question (vector hits within the distance
    cut, or the rewrite's) were quoted as a grounded answer. Without a model, passages that
    share too few of the question's terms give the not-covered answer."""
    for question in ("zzqx qqqz", "What is the airspeed velocity of an unladen swallow?",
                     "What was the quarterly rainfall in Paris during the football season?"):
        body = invoke(client, "ask", {"question": question}).json()
        assert body["mode"] == "extractive"
        assert body["grounded"] is False and body["citations"] == [], (question, body)
        assert body["answer"] == "The documents do not cover this."


def test_llm_answer_drops_invented_markers(client, docs, services):
    services.llm = ScriptedLLM(['{"sufficient": true}', "Forty cents per share [1], as in [99]."])
    body = invoke(client, "ask", {"question": "What dividend did the board approve?"}).json()
    assert body["mode"] == "llm"
    assert [c["marker"] for c in body["citations"]] == [1]
    assert "[99]" not in body["answer"] and body["grounded"] is True
    services.llm = ScriptedLLM(['{"sufficient": true}', "It was forty cents [99]."])
    body = invoke(client, "ask", {"question": "What dividend did the board approve?"}).json()
    assert body["citations"] == [] and body["grounded"] is False


def test_grader_garbage_counts_as_sufficient_and_rewrite_is_bounded(client, docs, services):
    services.llm = ScriptedLLM(["garbage, not json", "Forty cents [1]."])
    body = invoke(client, "ask", {"question": "What dividend did the board approve?"}).json()
    assert len(body["attempts"]) == 1 and body["grounded"] is True
    services.llm = ScriptedLLM(['{"sufficient": false}', '{"query": "termination written notice"}', "Thirty days [1]."])
    body = invoke(client, "ask", {"question": "how much notice before we get kicked out?"}).json()
    assert [a["query"] for a in body["attempts"]][-1] == "termination written notice"
    assert len(body["attempts"]) <= 2


def test_function_errors(client, docs):
    assert_error(invoke(client, "nope", {"query": "x"}), 404)
    assert_error(invoke(client, "ask", {}), 422)
    assert_error(invoke(client, "search-documents", {"query": "x", "k": 0}), 422)
    assert_error(invoke(client, "ask", {"question": "x"}, branch="nope"), 404)
    # tests/api/test_jobs.py
    assert invoke(client, "ask", {"question": "x"}, wait_for_completion=False).status_code == 202


def test_unknown_input_keys_are_refused_before_any_work(client, docs):
    """A typo (`querry`, `top_k`) must not be silently ignored."""
    r = invoke(client, "search-documents", {"query": "dividend", "top_k": 3})
    assert_error(r, 422, "invalid_input")
    assert r.json()["error"]["details"]["unknown"] == ["top_k"]
    assert_error(invoke(client, "ask", {"question": "What dividend?", "use_graphs": True}), 422)
    assert_error(invoke(client, "graph-context", {"querry": "dividend"}), 422)
    assert_error(invoke(client, "extract-entities",
                        {"path": "/dividends", "workspace": "knowledge", "forse": True}), 422)
