"""``ask`` is grounded only when its answer answers; relation and property questions are answered
from the graph (the user report: "What replaced PEP 386?", "What does `~=` mean?", "When was PEP
440 created?" on the PEP demo with no LLM). Over HTTP, auth on, the PEP format ingest of PEPs 440
and 405 embedded by the real local model; on SQLite and PostgreSQL."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kg.context import OPERATOR
from kg.ops.ingest import ingest_path
from kg.settings import Settings
from tests.api import test_access
from tests.api.test_access import bearer, make_key
from tests.conftest import FAKE_MODEL
from tests.memo_embedder import memo_embedder_factory

PEPS = Path(__file__).resolve().parents[2] / "fixtures" / "peps" / "docs"
LOCAL_MODEL = "local:all-MiniLM-L6-v2"
PEPPER = test_access.PEPPER
auth_services, api, admin = test_access.auth_services, test_access.api, test_access.admin


@pytest.fixture
def settings(db_url, tmp_path) -> Settings:
    """Auth on; the extractive ask's default semantic grade (calibrated for the local model)."""
    return Settings(database_url=db_url, data_dir=tmp_path / "data", embedding_model=FAKE_MODEL,
                    index_inline=True, allow_fake_embedder=True, auth=True, key_pepper=PEPPER, key_cache_s=60,
                    rag_max_distance=2.0)


@pytest.fixture
def embedder_factory():
    """The local model's vectors remembered across the module's tests (each ingests the same
    two PEPs: tests/memo_embedder.py)."""
    return memo_embedder_factory()


@pytest.fixture
def demo(api, admin, services, tmp_path):
    """acme/peps holds PEP 440 and PEP 405 (pep format: properties, ``replaces`` to a stub
    ``/pep-0386``); acme/other holds a note. Returns the headers of the admin."""
    assert api.post("/api/repos", json={"name": "acme"}, headers=admin).status_code == 201
    for ws in ("peps", "other"):
        r = api.post("/api/repos/acme/workspaces", json={"name": ws, "embedding": {"model": LOCAL_MODEL}},
                     headers=admin)
        assert r.status_code == 201, r.text
    folder = tmp_path / "peps"
    folder.mkdir()
    for name in ("pep-0440.rst", "pep-0405.rst"):
        shutil.copy(PEPS / name, folder / name)
    ingest_path(services, OPERATOR, folder, repo="acme", workspace="peps", format_name="pep", create=False)
    r = api.put("/api/repos/acme/workspaces/other/nodes/note", headers=admin,
                json={"node_type": "kb:Doc", "properties": {"content": "The harbour opens at dawn."}})
    assert r.status_code == 201, r.text
    return admin


def ask(api, headers, question, *, branch="main", **extra):
    r = api.post("/api/functions/acme/ask/invoke", headers=headers,
                 json={"input": {"question": question, **extra}, "branch": branch})
    assert r.status_code == 200, r.text
    return r.json()


def test_what_replaced_is_answered_from_the_relation(api, demo):
    for graph in (False, True):
        body = ask(api, demo, "What replaced PEP 386?", use_graph=graph)
        assert body["grounded"] is True and body["mode"] == "extractive"
        assert "PEP 440" in body["answer"] and "replaces" in body["answer"]
        assert body["citations"] == [{
            "kind": "relation", "marker": 1, "workspace": "peps", "path": "/pep-0440",
            "node_id": body["citations"][0]["node_id"], "chunk_index": None, "text_is_exact": True,
            "from": "/pep-0440", "to": "/pep-0386", "type": "replaces"}]
    # the other direction: what PEP 440 replaces
    body = ask(api, demo, "What does PEP 440 replace?")
    assert body["grounded"] is True and "PEP 386" in body["answer"]
    assert [(c["from"], c["to"]) for c in body["citations"]] == [("/pep-0440", "/pep-0386")]


def test_when_was_created_is_answered_from_the_property(api, demo):
    body = ask(api, demo, "When was PEP 440 created?")
    assert body["grounded"] is True and "18-Mar-2013" in body["answer"]
    (cite,) = body["citations"]
    assert {k: cite[k] for k in ("kind", "workspace", "path", "property", "value")} == {
        "kind": "property", "workspace": "peps", "path": "/pep-0440", "property": "created",
        "value": "18-Mar-2013"}
    body = ask(api, demo, "Who is the author of PEP 405?")
    assert body["grounded"] is True and "Carl Meyer" in body["answer"]
    assert body["citations"][0]["property"] == "author"


def test_what_does_compatible_release_mean_quotes_the_tilde_equal_not_another_operator(api, demo):
    body = ask(api, demo, "What does `~=` mean?")
    assert body["grounded"] is True, body
    assert "~=" in body["answer"] and "ompatible release" in body["answer"]
    assert "!=" not in body["answer"]
    assert {c["path"] for c in body["citations"]} == {"/pep-0440"}
    assert all("kind" not in c for c in body["citations"])  # passage citations keep their shape


def test_a_question_the_passages_do_not_answer_is_not_grounded_and_gives_leads(api, demo):
    """Passages about version specifiers pass the semantic grade but none holds a date."""
    body = ask(api, demo, "When was the compatible release operator first proposed?")
    assert body["grounded"] is False and body["citations"] == []
    assert body["answer"].startswith("The documents do not say")
    assert body["leads"] and {lead["path"] for lead in body["leads"]} <= {"/pep-0440", "/pep-0405"}
    assert [lead["marker"] for lead in body["leads"]] == list(range(1, len(body["leads"]) + 1))


def test_graph_answers_follow_the_branch_and_the_revision(api, demo):
    r = api.post("/api/repos/acme/branches", json={"name": "draft"}, headers=demo)
    assert r.status_code == 201, r.text
    r = api.put("/api/repos/acme/workspaces/peps/nodes/pep-9999?branch=draft", headers=demo,
                json={"node_type": "pep:PEP", "properties": {"pep": 9999, "title": "Version Identification 2"}})
    assert r.status_code == 201, r.text
    before = r.json()["revision"]
    r = api.post("/api/repos/acme/relations?branch=draft", headers=demo,
                 json={"from": "peps:/pep-9999", "to": "peps:/pep-0440", "type": "replaces"})
    assert r.status_code == 201, r.text
    on_draft = ask(api, demo, "What replaced PEP 440?", branch="draft")
    assert on_draft["grounded"] is True and "PEP 9999" in on_draft["answer"]
    assert [(c["from"], c["to"]) for c in on_draft["citations"]] == [("/pep-9999", "/pep-0440")]
    on_main = ask(api, demo, "What replaced PEP 440?")
    assert not any(c.get("kind") == "relation" for c in on_main["citations"])
    assert "9999" not in on_main["answer"]
    at_revision = ask(api, demo, "What replaced PEP 440?", branch="draft", revision=before)
    assert not any(c.get("kind") == "relation" for c in at_revision["citations"])
    assert "9999" not in at_revision["answer"]
    # the property as it was: a change on the branch is read there, not on main
    r = api.patch("/api/repos/acme/workspaces/peps/nodes/pep-0440?branch=draft", headers=demo,
                  json={"properties": {"created": "19-Mar-2013"}})
    assert r.status_code == 200, r.text
    assert "19-Mar-2013" in ask(api, demo, "When was PEP 440 created?", branch="draft")["answer"]
    assert "18-Mar-2013" in ask(api, demo, "When was PEP 440 created?")["answer"]
    assert "18-Mar-2013" in ask(api, demo, "When was PEP 440 created?", branch="draft", revision=before)["answer"]


def test_a_scoped_key_gets_no_graph_or_property_answer_from_a_node_it_cannot_see(api, demo):
    key = bearer(make_key(api, demo, "other-only", [
        {"repo": "acme", "branches": ["main"], "workspaces": ["other"], "actions": ["read"]}])["key"])
    for question in ("When was PEP 440 created?", "What replaced PEP 386?", "Who is the author of PEP 405?"):
        body = ask(api, key, question)
        assert body["grounded"] is False, (question, body)
        assert body["citations"] == [] and not any(a.get("leg") == "facts" for a in body["attempts"])
        for word in ("18-Mar-2013", "PEP 440", "Carl Meyer", "pep-0440"):
            assert word not in body["answer"]
        assert all(lead["workspace"] == "other" for lead in body.get("leads", []))


def test_a_bad_revision_is_a_422(api, demo):
    r = api.post("/api/functions/acme/ask/invoke", headers=demo,
                 json={"input": {"question": "When was PEP 440 created?", "revision": "x"}})
    assert r.status_code == 422 and r.json()["error"]["code"]


def test_a_graph_answer_is_stored_with_its_edge_and_property_citations(api, demo):
    for question in ("When was PEP 440 created?", "What replaced PEP 386?"):
        body = ask(api, demo, question, store_answer={"workspace": "other", "path": f"/answers/{len(question)}"})
        assert body["grounded"] is True and body["stored"]["workspace"] == "other"
        r = api.get(f"/api/repos/acme/workspaces/other/nodes/answers/{len(question)}", headers=demo)
        assert r.status_code == 200, r.text
        props = r.json()["properties"]
        assert props["grounded"] is True and props["sources"] == ["/pep-0440"]
        (cite,) = props["citations"]
        assert cite["kind"] == body["citations"][0]["kind"] and cite["path"] == "/pep-0440"
        assert cite["chunk_sha256"] is None and isinstance(cite["source_revision"], int)
        r = api.get("/api/repos/acme/neighbors", headers=demo,
                    params={"node": f"other:/answers/{len(question)}", "direction": "OUT"})
        assert r.status_code == 200, r.text
        assert [(n["path"], n["relation_type"]) for n in r.json()["neighbors"]] == [("/pep-0440", "cites")]


def test_a_property_of_the_related_node_is_answered_through_the_relation(api, demo):
    """"Who wrote the PEP that replaced PEP 386?" asks PEP 440's author: the answer cites the edge
    and the property; the edge alone ("PEP 440 replaces PEP 386") does not answer a question
    asking a person or a date, and no property of PEP 386 answers instead."""
    body = ask(api, demo, "Who wrote the PEP that replaced PEP 386?")
    assert body["grounded"] is True and "Alyssa Coghlan" in body["answer"]
    assert [(c["marker"], c["kind"]) for c in body["citations"]] == [(1, "relation"), (2, "property")]
    assert (body["citations"][0]["from"], body["citations"][0]["to"]) == ("/pep-0440", "/pep-0386")
    assert (body["citations"][1]["path"], body["citations"][1]["property"]) == ("/pep-0440", "author")
    body = ask(api, demo, "When was the PEP that replaced PEP 386 created?")
    assert body["grounded"] is True and "18-Mar-2013" in body["answer"]
    assert body["citations"][1]["property"] == "created"
    # a date the related node does not hold: no answer from the edge
    body = ask(api, demo, "When was the PEP that replaced PEP 386 withdrawn?")
    assert not any(c.get("kind") == "relation" for c in body["citations"])
    assert "replaces" not in body["answer"] or body["grounded"] is False


def test_a_property_holding_the_question_own_name_does_not_answer_it(api, demo):
    """"What was the EFL Cup historically called?" was answered "EFL Cup: title EFL Cup": the
    ``title`` that resolved the mention matched "called". The value the question itself holds is
    not an answer; another property of the node still answers."""
    r = api.put("/api/repos/acme/workspaces/other/nodes/harbour-light", headers=demo,
                json={"node_type": "kb:Doc", "properties": {"title": "Harbour Light", "name": "Old Pier Lamp",
                                                            "content": "A lamp stands at the end of the pier."}})
    assert r.status_code == 201, r.text
    body = ask(api, demo, "What was the Harbour Light historically called?", workspaces=["other"])
    assert "title Harbour Light" not in body["answer"]
    assert body["grounded"] is True and "Old Pier Lamp" in body["answer"], body
    assert [(c["kind"], c["property"], c["value"]) for c in body["citations"]] == [
        ("property", "name", "Old Pier Lamp")]
