"""graph-context, extract-entities, ask with use_graph and stored answers (issue 5; CASES #18,
#19), over SQLite and PostgreSQL."""

from __future__ import annotations

import json

import pytest

from kg.providers.llm import ScriptedLLM
from tests.api.test_nodes import assert_error

API = "/api/repos/acme"
NODES = f"{API}/workspaces/knowledge/nodes"


def put(client, path, text, *, branch="main", node_type="kb:Doc", **props):
    r = client.put(f"{NODES}{path}", params={"branch": branch},
                   json={"node_type": node_type, "properties": {"content": text, **props}})
    assert r.status_code in (200, 201), r.text
    return r.json()


def invoke(client, name, payload, **body):
    return client.post(f"/api/functions/acme/{name}/invoke", json={"input": payload, **body})


def extract(client, path, **more):
    branch = more.pop("branch", "main")
    return invoke(client, "extract-entities", {"path": path, "workspace": "knowledge", **more}, branch=branch)


def get(client, path, branch="main"):
    return client.get(f"{NODES}{path}", params={"branch": branch})


def head(client, branch="main"):
    return client.get(f"{API}/branches/{branch}").json()["head_revision"]


def neighbors(client, address, branch="main", **params):
    r = client.get(f"{API}/neighbors", params={"node": address, "branch": branch, **params})
    assert r.status_code == 200, r.text
    return r.json()["neighbors"]


def entities_reply(entities, relations=()):
    return json.dumps({"entities": entities, "relations": list(relations)})


# -- extract-entities ------------------------------------------------------------------------


def test_two_documents_naming_one_entity_converge_on_one_node(client, repo, services):
    services.settings.entity_ner = "off"  # the deterministic rules (the NER: tests/api/test_ner_extraction.py)
    put(client, "/bio", "Guido van Rossum created Python at CWI in Amsterdam.")
    put(client, "/news", "In 2018 Guido Van Rossum's retirement from the role was announced.")
    first = extract(client, "/bio")
    assert first.status_code == 200, first.text
    body = first.json()
    assert body["extractor"] == "deterministic" and body["skipped"] is False and body["revision"]
    found = [{k: e[k] for k in ("path", "name", "type")} for e in body["entities"]]
    assert {"path": "/entities/guido-van-rossum", "name": "Guido van Rossum", "type": "person"} in found
    assert {"path": "/entities/cwi", "name": "CWI", "type": "organization"} in found
    cwi = next(e for e in body["entities"] if e["name"] == "CWI")  # the rules' entities carry spans too
    assert cwi["spans"] == [{"field": "content", "start": 35, "end": 38, "quote": "CWI", "chunk": 0}]
    second = extract(client, "/news").json()
    assert "/entities/guido-van-rossum" in [e["path"] for e in second["entities"]]

    node = get(client, "/entities/guido-van-rossum").json()
    assert node["node_type"] == "kg:Entity"
    assert node["properties"]["name"] == "Guido van Rossum"          # the first spelling stays
    assert node["properties"]["entity_type"] == "person"
    assert node["properties"]["aliases"] == ["Guido Van Rossum"]
    mentions = neighbors(client, "knowledge:/entities/guido-van-rossum", direction="OUT", type="mentioned_in")
    assert sorted(n["path"] for n in mentions) == ["/bio", "/news"]


def test_llm_spellings_converge_and_names_become_safe_segments(client, repo, services):
    put(client, "/a", "Electrons and AC/DC.")
    put(client, "/b", "More about electrons.")
    services.llm = ScriptedLLM([
        entities_reply([{"name": "Electrons", "type": "concept"}, {"name": "AC/DC", "type": "organization"},
                        {"name": "a b", "type": "concept"}, {"name": "..", "type": "concept"},
                        {"name": "", "type": "concept"}, {"name": "Guido van Rossum", "type": "person"}]),
        entities_reply([{"name": " electrons ", "type": "concept"}, {"name": "ELECTRONS", "type": "concept"},
                        {"name": "guido  van rossum.", "type": "person"}]),
    ])
    a = extract(client, "/a").json()
    assert a["extractor"] == "llm:scripted:test"
    assert [e["path"] for e in a["entities"]] == [
        "/entities/electrons", "/entities/ac-dc", "/entities/a-b", "/entities/guido-van-rossum"]
    assert a["dropped"]["entities"] == 2                              # ".." and "" name nothing
    b = extract(client, "/b").json()
    assert [e["path"] for e in b["entities"]] == ["/entities/electrons", "/entities/guido-van-rossum"]
    electrons = get(client, "/entities/electrons").json()["properties"]
    assert electrons["name"] == "Electrons" and electrons["aliases"] == ["electrons", "ELECTRONS"]
    guido = get(client, "/entities/guido-van-rossum").json()["properties"]
    assert guido["aliases"] == ["guido van rossum"]
    assert get(client, "/entities/ac-dc").json()["properties"]["name"] == "AC/DC"
    mentions = neighbors(client, "knowledge:/entities/electrons", type="mentioned_in")
    assert sorted(n["path"] for n in mentions) == ["/a", "/b"]


def test_same_text_is_skipped_without_model_call_or_revision_and_force_redoes(client, repo, services):
    put(client, "/bio", "Guido van Rossum created Python.")
    reply = entities_reply([{"name": "Guido van Rossum", "type": "person"}, {"name": "Python", "type": "product"}],
                           [{"from": "Guido van Rossum", "type": "created", "to": "Python"}])
    llm = services.llm = ScriptedLLM([reply, reply])
    first = extract(client, "/bio").json()
    assert first["skipped"] is False and len(llm.calls) == 1
    before = head(client)
    again = extract(client, "/bio").json()
    assert again["skipped"] is True and again["revision"] is None
    assert len(llm.calls) == 1 and head(client) == before
    assert again["entities"] == first["entities"] and again["relations"] == first["relations"]
    forced = extract(client, "/bio", force=True).json()
    assert forced["skipped"] is False and len(llm.calls) == 2 and forced["revision"] == before + 1
    # the source node itself is never modified; the fingerprint lives in an extraction record
    source = get(client, "/bio").json()
    assert set(source["properties"]) == {"content"}
    record = get(client, f"/kg/extractions/{source['id']}").json()
    assert record["node_type"] == "kg:Extraction" and record["properties"]["fingerprint"] == first["fingerprint"]
    refs = client.get(f"{API}/references", params={"target": "knowledge:/bio"})
    assert refs.status_code == 200 and f"/kg/extractions/{source['id']}" in refs.text


def test_a_concurrent_run_on_the_same_text_writes_once(client, repo, services):
    from kg.context import OPERATOR
    from kg.rag.entities import extract_entities

    put(client, "/bio", "Guido van Rossum created Python.")
    before = head(client)
    nested: list = []

    def reply(messages, schema):
        if not nested:  # while this run waits for the model, another run completes
            nested.append(None)
            nested[0] = extract_entities(services, OPERATOR, "acme", "main", {"path": "/bio", "workspace": "knowledge"})
        return entities_reply([{"name": "Guido van Rossum", "type": "person"}])

    services.llm = ScriptedLLM(default=reply)
    outer = extract(client, "/bio").json()
    assert nested[0].skipped is False and nested[0].revision == before + 1
    assert outer["skipped"] is True and outer["revision"] is None and head(client) == before + 1
    assert outer["entities"] == nested[0].model_dump(mode="json", by_alias=True, exclude_unset=True)["entities"]


def test_changed_text_is_extracted_again_and_stale_mentions_go(client, repo, services):
    put(client, "/doc", "Guido van Rossum worked at CWI.")
    extract(client, "/doc")
    assert [n["path"] for n in neighbors(client, "knowledge:/doc", type="mentioned_in")] == [
        "/entities/cwi", "/entities/guido-van-rossum"]
    put(client, "/doc", "Guido van Rossum worked at Dropbox Incorporated.")
    body = extract(client, "/doc").json()
    assert body["skipped"] is False
    assert sorted(n["path"] for n in neighbors(client, "knowledge:/doc", type="mentioned_in")) == [
        "/entities/dropbox-incorporated", "/entities/guido-van-rossum"]
    assert get(client, "/entities/cwi").status_code == 200              # the entity itself stays


def test_relations_are_typed_sanitised_and_never_dangle(client, repo, services):
    put(client, "/acme", "Dana Weber works at Acme Marine in Kiel.")
    services.llm = ScriptedLLM(["<think>the user wants entities</think>\nHere you go:\n```json\n" + entities_reply(
        [{"name": "Dana Weber", "type": "Person"}, {"name": "Acme Marine", "type": "company"},
         {"name": "Kiel", "type": "city"}],
        [{"from": "Dana Weber", "type": "Works At", "to": "acme marine"},
         {"from": "Acme Marine", "type": "locatedIn", "to": "Kiel"},
         {"from": "Dana Weber", "type": "knows", "to": "Someone Unlisted"},
         {"from": "Dana Weber", "type": "!!!", "to": "Kiel"},
         {"from": "Kiel", "type": "is", "to": "Kiel"}]) + "\n```"])
    body = extract(client, "/acme").json()
    assert {(e["name"], e["type"]) for e in body["entities"]} == {
        ("Dana Weber", "person"), ("Acme Marine", "organization"), ("Kiel", "place")}
    assert body["relations"] == [
        {"from": "/entities/dana-weber", "type": "works_at", "to": "/entities/acme-marine"},
        {"from": "/entities/acme-marine", "type": "located_in", "to": "/entities/kiel"}]
    assert body["dropped"]["relations"] == 3
    out = neighbors(client, "knowledge:/entities/dana-weber", direction="OUT")
    assert {(n["path"], n["relation_type"]) for n in out} == {
        ("/entities/acme-marine", "works_at"), ("/acme", "mentioned_in")}
    assert get(client, "/entities/someone-unlisted").status_code == 404


@pytest.mark.parametrize("reply, reason", [
    ("I could not find anything useful, sorry!", "no_json"),
    (json.dumps({"type": "object", "properties": {"entities": {"type": "array"}}, "required": ["entities"]}),
     "echoed_schema"),
    ('{"people": ["Dana"]}', "schema_mismatch"),
])
def test_unreadable_reply_is_a_clear_failure_and_writes_nothing(client, repo, services, reply, reason):
    put(client, "/doc", "Dana Weber works at Acme Marine.")
    before = head(client)
    services.llm = ScriptedLLM([reply])
    r = extract(client, "/doc")
    assert_error(r, 502, "provider_error")
    error = r.json()["error"]
    assert "nothing was written" in error["message"] and error["details"]["reason"] == reason
    assert head(client) == before
    assert client.get(f"{NODES}/entities/dana-weber").status_code == 404
    assert [n["path"] for n in client.get(NODES, params={"prefix": "/"}).json()["nodes"]] == ["/doc"]
    # no record was written, so the next run calls the model again and succeeds
    services.llm = ScriptedLLM([entities_reply([{"name": "Dana Weber", "type": "person"}])])
    again = extract(client, "/doc").json()
    assert again["skipped"] is False and again["entities"][0]["path"] == "/entities/dana-weber"


def test_a_model_that_fails_writes_nothing(client, repo, services):
    from kg.errors import ProviderError

    put(client, "/doc", "Dana Weber works at Acme Marine.")
    services.llm = ScriptedLLM([ProviderError("timed out after 120 s")])
    assert_error(extract(client, "/doc"), 502)
    assert client.get(f"{NODES}/entities/dana-weber").status_code == 404


def test_entities_on_a_branch_are_invisible_on_main(client, repo):
    put(client, "/bio", "Guido van Rossum created Python.")
    assert client.post(f"{API}/branches", json={"name": "agent/extract"}).status_code == 201
    body = extract(client, "/bio", branch="agent/extract").json()
    assert body["revision"] and body["entities"]
    assert get(client, "/entities/guido-van-rossum", branch="agent/extract").status_code == 200
    assert get(client, "/entities/guido-van-rossum").status_code == 404
    assert neighbors(client, "knowledge:/bio") == []
    # main has no record either: extracting there is a fresh run, not a skip
    assert extract(client, "/bio").json()["skipped"] is False


def test_an_existing_node_of_another_type_is_linked_and_never_replaced(client, repo):
    """Regression: an entity node made by hand with another type was refused
    (``dropped: {"entities": 2}``, no reason); it is that entity: linked as it is."""
    r = client.put(f"{NODES}/entities/cwi", params={"parents": "true"},
                   json={"node_type": "kb:Org", "properties": {"content": "my notes on CWI"}})
    assert r.status_code == 201
    put(client, "/bio", "Guido van Rossum worked at CWI.")
    body = extract(client, "/bio").json()
    assert [(e["path"], e["type"]) for e in body["entities"]] == [
        ("/entities/guido-van-rossum", "person"), ("/entities/cwi", "kb:Org")]
    assert body["dropped"] == {"entities": 0, "relations": 0, "reasons": []}
    cwi = get(client, "/entities/cwi").json()
    assert cwi["node_type"] == "kb:Org" and cwi["properties"] == {"content": "my notes on CWI"}
    assert {n["path"] for n in neighbors(client, "knowledge:/bio")} == {"/entities/guido-van-rossum", "/entities/cwi"}


def test_deterministic_extraction_splits_x_of_y_and_says_why_it_drops(client, repo, services):
    """Regression: "Dana Weber of Acme Marine" was one entity; "Marine Handbook" and
    "Python Package Index" were persons; a dropped candidate gave no reason."""
    services.settings.entity_ner = "off"
    put(client, "/handbook", "Marine Handbook\n===============\n\nDana Weber of Acme Marine maintains it. "
                             "Packages come from the Python Package Index.\n\nRejected Ideas\n--------------\n\n"
                             "The I/O Library was considered.")
    body = extract(client, "/handbook").json()
    types = {e["name"]: e["type"] for e in body["entities"]}
    assert types == {"Marine Handbook": "concept", "Dana Weber": "person", "Acme Marine": "organization",
                     "Python Package Index": "concept", "I/O": "concept"}
    assert body["relations"] == [{"from": "/entities/dana-weber", "type": "affiliated_with",
                                  "to": "/entities/acme-marine"}]
    assert body["dropped"]["entities"] == 2
    assert body["dropped"]["reasons"] == [{"name": "Rejected Ideas", "reason": "heading"},
                                          {"name": "O Library", "reason": "fragment"}]


def test_extract_entities_input_errors(client, repo):
    put(client, "/doc", "Guido van Rossum")
    assert_error(invoke(client, "extract-entities", {"workspace": "knowledge"}), 422)
    assert_error(invoke(client, "extract-entities", {"path": "/doc"}), 422)
    assert_error(extract(client, "doc"), 422)
    assert_error(extract(client, "/doc", force="yes"), 422)
    assert_error(extract(client, "/doc", max_chars=0), 422)
    assert_error(extract(client, "/entities/x"), 422)
    assert_error(extract(client, "/missing"), 404)
    assert_error(invoke(client, "extract-entities", {"path": "/doc", "workspace": "nope"}), 404)
    assert_error(extract(client, "/doc", branch="nope"), 404)
    folder = client.put(f"{NODES}/empty", json={"node_type": "kb:Doc", "properties": {}})
    assert folder.status_code == 201
    empty = extract(client, "/empty").json()
    assert empty["entities"] == [] and empty["revision"] is None


def test_max_chars_caps_the_text_read(client, repo, services):
    put(client, "/long", "Dana Weber. " + "x " * 100 + "Acme Marine.")
    llm = services.llm = ScriptedLLM([entities_reply([])])
    body = extract(client, "/long", max_chars=20).json()
    assert body["entities"] == [] and body["revision"]
    prompt = llm.calls[0]["messages"][-1]["content"]
    assert "Dana Weber" in prompt and "Acme Marine" not in prompt


# -- graph-context ---------------------------------------------------------------------------


@pytest.fixture
def linked(client, repo):
    """Two documents joined only through the entity they both name."""
    put(client, "/creation", "Guido van Rossum created the Python language at CWI.")
    put(client, "/retirement", "In July 2018 Guido van Rossum stepped down as BDFL.")
    assert extract(client, "/creation").status_code == 200
    assert extract(client, "/retirement").status_code == 200
    return repo


def test_graph_context_reaches_a_node_two_hops_away_that_search_does_not_return(client, linked):
    query = "who created the Python language"
    seeds_only = invoke(client, "graph-context", {"query": query, "hops": 0}).json()
    assert [n["path"] for n in seeds_only["nodes"]] == ["/creation"]
    body = invoke(client, "graph-context", {"query": query}).json()
    assert [s["path"] for s in body["seeds"]] == ["/creation"] and body["seeds"][0]["source"] == "search"
    by_path = {n["path"]: n for n in body["nodes"]}
    assert by_path["/creation"]["hop"] == 0 and by_path["/creation"]["via"] is None
    guido = by_path["/entities/guido-van-rossum"]
    assert guido["hop"] == 1 and guido["via"] == "mentioned_in" and guido["from"] == "knowledge:/creation"
    assert guido["node_type"] == "kg:Entity" and guido["title"] == "Guido van Rossum"
    far = by_path["/retirement"]
    assert far["hop"] == 2 and far["via"] == "mentioned_in"
    assert far["from"] == "knowledge:/entities/guido-van-rossum"
    assert far["node_type"] == "kb:Doc" and body["truncated"] is False


def test_several_passages_of_one_node_are_one_seed(client, repo):
    long_text = "\n\n".join(["Rigging inspection matters. " + "word " * 300] * 4)
    put(client, "/handbook", long_text)
    put(client, "/other", "Rigging inspection checklist.")
    body = invoke(client, "graph-context", {"query": "rigging inspection", "k": 10}).json()
    paths = [s["path"] for s in body["seeds"]]
    assert sorted(paths) == ["/handbook", "/other"] and len(paths) == len(set(paths))


def test_graph_context_from_given_seeds_with_budgets_and_types(client, repo):
    for name in ("hub", "a", "b", "c", "d"):
        put(client, f"/{name}", f"node {name}")
    for leaf in "abcd":
        rel_type = "cites" if leaf in "ab" else "mentions"
        r = client.post(f"{API}/relations", json={"from": "knowledge:/hub", "to": f"knowledge:/{leaf}",
                                                  "type": rel_type})
        assert r.status_code == 201
    full = invoke(client, "graph-context", {"seeds": ["knowledge:/hub"], "hops": 1}).json()
    assert [n["path"] for n in full["nodes"]] == ["/hub", "/a", "/b", "/c", "/d"] and not full["truncated"]
    assert full["seeds"] == [{"workspace": "knowledge", "path": "/hub", "node_id": full["nodes"][0]["node_id"],
                              "score": None, "source": "seeds"}]
    cut = invoke(client, "graph-context", {"seeds": ["knowledge:/hub"], "hops": 1, "max_nodes": 3}).json()
    assert len(cut["nodes"]) == 3 and cut["truncated"] is True
    typed = invoke(client, "graph-context", {"seeds": ["knowledge:/hub"], "types": ["cites"]}).json()
    assert [n["path"] for n in typed["nodes"]] == ["/hub", "/a", "/b"]
    incoming = invoke(client, "graph-context", {"seeds": ["knowledge:/a"], "direction": "in"}).json()
    assert [n["path"] for n in incoming["nodes"]] == ["/a", "/hub"]


def test_graph_context_sees_exactly_its_branch(client, repo):
    put(client, "/x", "alpha")
    put(client, "/y", "beta")
    assert client.post(f"{API}/branches", json={"name": "agent/g"}).status_code == 201
    r = client.post(f"{API}/relations", params={"branch": "agent/g"},
                    json={"from": "knowledge:/x", "to": "knowledge:/y", "type": "next"})
    assert r.status_code == 201
    on_branch = invoke(client, "graph-context", {"seeds": ["knowledge:/x"]}, branch="agent/g").json()
    on_main = invoke(client, "graph-context", {"seeds": ["knowledge:/x"]}).json()
    assert [n["path"] for n in on_branch["nodes"]] == ["/x", "/y"]
    assert [n["path"] for n in on_main["nodes"]] == ["/x"]


def test_graph_context_with_nothing_relevant_is_empty(client, repo):
    put(client, "/x", "alpha beta")
    body = invoke(client, "graph-context", {"query": "zebra migration patterns"}).json()
    assert body == {"seeds": [], "nodes": [], "truncated": False}


def test_graph_context_input_errors(client, repo):
    put(client, "/x", "alpha")
    bad = [{}, {"query": ""}, {"query": 3}, {"seeds": "knowledge:/x"}, {"seeds": ["no-colon"]},
           {"seeds": [1]}, {"seeds": ["knowledge:/x"], "hops": 5}, {"seeds": ["knowledge:/x"], "hops": -1},
           {"seeds": ["knowledge:/x"], "max_nodes": 0}, {"seeds": ["knowledge:/x"], "max_nodes": 1001},
           {"seeds": ["knowledge:/x"], "fan_out": 0}, {"seeds": ["knowledge:/x"], "types": []},
           {"seeds": ["knowledge:/x"], "types": [{"a": 1}]}, {"seeds": ["knowledge:/x"], "direction": "up"},
           {"seeds": ["knowledge:/x"], "direction": 3}, {"query": "alpha", "k": 0},
           {"query": "alpha", "workspaces": "knowledge"}, {"seeds": ["knowledge:/x"], "hops": True}]
    for payload in bad:
        assert_error(invoke(client, "graph-context", payload), 422)
    assert_error(invoke(client, "graph-context", {"seeds": ["knowledge:/missing"]}), 404)
    assert_error(invoke(client, "graph-context", {"seeds": ["knowledge:/x"]}, branch="nope"), 404)


# -- ask: the graph leg and stored answers ---------------------------------------------------


@pytest.fixture
def rigging(client, repo):
    put(client, "/rigging", "Standing rigging must be replaced every ten years in temperate waters.")
    put(client, "/tropics", "Ultraviolet exposure near the equator shortens wire lifetimes to seven years.")
    r = client.post(f"{API}/relations", json={"from": "knowledge:/rigging", "to": "knowledge:/tropics",
                                              "type": "see_also"})
    assert r.status_code == 201
    return repo


def test_use_graph_adds_a_passage_from_a_neighbour(client, rigging, services):
    llm = services.llm = ScriptedLLM(['{"sufficient": true}', "Ten years [1], seven in the tropics [2]."])
    body = invoke(client, "ask", {"question": "How often must standing rigging be replaced?",
                                  "use_graph": True}).json()
    prompt = llm.calls[-1]["messages"][-1]["content"]
    assert "[2] Ultraviolet exposure near the equator" in prompt
    assert [c["path"] for c in body["citations"]] == ["/rigging", "/tropics"]
    assert "via" not in body["citations"][0] and body["citations"][1]["via"] == "graph"
    assert body["citations"][1]["chunk_index"] == 0 and body["citations"][1]["text_is_exact"] is True
    assert body["attempts"][-1] == {"query": "How often must standing rigging be replaced?", "leg": "graph",
                                    "passages": 1}
    without = ScriptedLLM(['{"sufficient": true}', "Ten years [1]."])
    services.llm = without
    plain = invoke(client, "ask", {"question": "How often must standing rigging be replaced?"}).json()
    assert "Ultraviolet" not in without.calls[-1]["messages"][-1]["content"]
    assert all("leg" not in a for a in plain["attempts"])


def test_use_graph_through_shared_entities_in_extractive_mode(client, linked):
    body = invoke(client, "ask", {"question": "Who created the Python language?", "use_graph": True}).json()
    assert body["mode"] == "extractive" and body["grounded"] is True
    assert body["attempts"][-1]["leg"] == "graph" and body["attempts"][-1]["passages"] == 1


def test_a_failing_graph_leg_never_fails_the_answer(client, rigging, monkeypatch):
    import kg.rag.functions as functions

    def broken(*args, **kwargs):
        raise RuntimeError("graph backend exploded")

    monkeypatch.setattr(functions, "traverse_from", broken)
    r = invoke(client, "ask", {"question": "How often must standing rigging be replaced?", "use_graph": True})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["grounded"] is True and body["citations"][0]["path"] == "/rigging"
    leg = body["attempts"][-1]
    assert leg["leg"] == "graph" and leg["passages"] == 0 and "exploded" in leg["error"]


def test_answer_stored_as_kb_answer_on_the_branch_only(client, rigging):
    assert client.post(f"{API}/branches", json={"name": "agent/rag-session-001"}).status_code == 201
    question = "How often must standing rigging be replaced?"
    r = invoke(client, "ask", {"question": question, "store_answer": {"workspace": "knowledge"}},
               branch="agent/rag-session-001")
    assert r.status_code == 200, r.text
    body = r.json()
    stored = body["stored"]
    assert stored["path"].startswith("/answers/how-often-must-standing-rigging-be-replaced-")
    assert stored["revision"] == head(client, "agent/rag-session-001")
    node = get(client, stored["path"], branch="agent/rag-session-001").json()
    assert node["node_type"] == "kb:Answer" and node["id"] == stored["node_id"]
    props = node["properties"]
    assert props["question"] == question and props["answer"] == body["answer"]
    assert props["grounded"] is True
    # Stored citations add their lineage: the cited node's revision and the passage's sha256.
    assert [{k: v for k, v in c.items() if k not in ("source_revision", "chunk_sha256")}
            for c in props["citations"]] == body["citations"]
    rigging = get(client, "/rigging").json()
    assert all(c["source_revision"] == rigging["revision"] and len(c["chunk_sha256"]) == 64
               for c in props["citations"])
    cites = neighbors(client, f"knowledge:{stored['path']}", branch="agent/rag-session-001", direction="OUT")
    assert [(n["path"], n["relation_type"]) for n in cites] == [("/rigging", "cites")]
    assert cites[0]["properties"] == {"markers": [1], "chunk_indexes": [0], "source_revision": rigging["revision"],
                                      "chunk_sha256": [props["citations"][0]["chunk_sha256"]]}
    assert get(client, stored["path"]).status_code == 404
    assert [n["relation_type"] for n in neighbors(client, "knowledge:/rigging")] == ["see_also"]


def test_store_answer_at_a_given_path_and_its_errors(client, rigging):
    question = "How often must standing rigging be replaced?"
    ok = invoke(client, "ask", {"question": question,
                                "store_answer": {"workspace": "knowledge", "path": "/answers/rigging"}})
    assert ok.status_code == 200 and ok.json()["stored"]["path"] == "/answers/rigging"
    before = head(client)
    assert_error(invoke(client, "ask", {"question": question,
                                        "store_answer": {"workspace": "knowledge", "path": "/rigging"}}), 409)
    assert head(client) == before and get(client, "/rigging").json()["node_type"] == "kb:Doc"
    for bad in ("knowledge", {"path": "/a"}, {"workspace": "knowledge", "path": "no-slash"},
                {"workspace": "knowledge", "extra": 1}, {"workspace": ""}):
        assert_error(invoke(client, "ask", {"question": question, "store_answer": bad}), 422)
    assert_error(invoke(client, "ask", {"question": question, "store_answer": {"workspace": "nope"}}), 404)
    assert_error(invoke(client, "ask", {"question": question, "use_graph": "yes"}), 422)


def test_an_ungrounded_answer_is_stored_without_citations(client, rigging, services):
    llm = services.llm = ScriptedLLM(["never used"])
    body = invoke(client, "ask", {"question": "Who won the football final?",
                                  "store_answer": {"workspace": "knowledge"}}).json()
    assert body["grounded"] is False and llm.calls == []
    node = get(client, body["stored"]["path"]).json()
    assert node["properties"]["grounded"] is False and node["properties"]["citations"] == []
    assert neighbors(client, f"knowledge:{body['stored']['path']}") == []


def test_graph_context_scores_a_rare_shared_entity_above_a_hub(client, repo):
    """Spread activation: the document that shares a rare entity with the seed outranks the
    ones reached through a hub entity that many documents mention."""
    put(client, "/a", "seed document")
    put(client, "/b", "shares the rare entity")
    for i in range(10):
        put(client, f"/c{i}", f"mentions the hub {i}")
    put(client, "/rare", "rare entity")
    put(client, "/hub", "hub entity")
    edges = [("/rare", "/a"), ("/rare", "/b"), ("/hub", "/a")] + [("/hub", f"/c{i}") for i in range(10)]
    for src, dst in edges:
        r = client.post(f"{API}/relations",
                        json={"from": f"knowledge:{src}", "to": f"knowledge:{dst}", "type": "mentioned_in"})
        assert r.status_code == 201, r.text
    out = invoke(client, "graph-context", {"seeds": ["knowledge:/a"], "hops": 2, "max_nodes": 100}).json()
    score = {n["path"]: n["score"] for n in out["nodes"]}
    # the one seed holds all the mass, and gets back what returns to it at step 2
    assert score["/a"] == pytest.approx(1 + 0.5 / 2 + 0.5 / 11, abs=1e-6)
    # step 1: /a splits its mass over its 2 entities; step 2: /rare over 2 docs, /hub over 11
    assert score["/rare"] == pytest.approx(0.5) and score["/hub"] == pytest.approx(0.5)
    assert score["/b"] == pytest.approx(0.25, abs=1e-6)
    assert score["/c0"] == pytest.approx(0.5 / 11, abs=1e-6)
    assert all(score["/b"] > score[f"/c{i}"] for i in range(10))


def test_an_llm_extraction_invalidates_what_the_document_says_no_longer_holds(client, repo, services):
    """The LLM's optional ``invalidates`` list closes the current relations it names (issue 17),
    in the extraction's revision, by the document; without an LLM nothing is ever invalidated."""
    people = [{"name": "Dana Weber", "type": "person"}, {"name": "Acme Marine", "type": "organization"},
              {"name": "Globex", "type": "organization"}]
    put(client, "/hired", "Dana Weber works at Acme Marine.")
    put(client, "/moved", "Dana Weber left Acme Marine and joined Globex.")
    services.llm = ScriptedLLM([
        entities_reply(people[:2], [{"from": "Dana Weber", "type": "works_at", "to": "Acme Marine"}]),
        json.dumps({"entities": people, "relations": [{"from": "Dana Weber", "type": "works_at", "to": "Globex"}],
                    "invalidates": [{"from": "Dana Weber", "type": "works_at", "to": "Acme Marine"},
                                    {"from": "Dana Weber", "type": "works_at", "to": "Nobody Inc"}]}),
    ])
    first = extract(client, "/hired").json()
    assert "invalidated" not in first
    second = extract(client, "/moved").json()
    assert second["invalidated"] == [{"from": "/entities/dana-weber", "type": "works_at",
                                      "to": "/entities/acme-marine"}]
    now = neighbors(client, "knowledge:/entities/dana-weber", direction="OUT", type="works_at")
    assert [n["path"] for n in now] == ["/entities/globex"]
    every = neighbors(client, "knowledge:/entities/dana-weber", direction="OUT", type="works_at",
                      include_invalid="true")
    assert [n["path"] for n in every] == ["/entities/acme-marine", "/entities/globex"]
    before = neighbors(client, "knowledge:/entities/dana-weber", direction="OUT", type="works_at",
                       at_revision=second["revision"] - 1)
    assert [n["path"] for n in before] == ["/entities/acme-marine"]


def test_an_llm_invalidation_of_a_fact_no_longer_current_is_not_reported(client, repo, services):
    """``invalidated`` lists what this extraction closed: a relation the model names that was
    closed already (here by a person, earlier) is neither closed again nor listed."""
    people = [{"name": "Dana Weber", "type": "person"}, {"name": "Acme Marine", "type": "organization"},
              {"name": "Initech", "type": "organization"}]
    put(client, "/hired", "Dana Weber works at Acme Marine and at Initech.")
    put(client, "/left", "Dana Weber left Acme Marine and Initech.")
    services.llm = ScriptedLLM([
        entities_reply(people, [{"from": "Dana Weber", "type": "works_at", "to": "Acme Marine"},
                                {"from": "Dana Weber", "type": "works_at", "to": "Initech"}]),
        json.dumps({"entities": people, "relations": [],
                    "invalidates": [{"from": "Dana Weber", "type": "works_at", "to": "Acme Marine"},
                                    {"from": "Dana Weber", "type": "works_at", "to": "Initech"}]}),
    ])
    extract(client, "/hired")
    closed = client.post(f"{API}/workspaces/knowledge/relations/invalidate", json={
        "from": "knowledge:/entities/dana-weber", "to": "knowledge:/entities/initech", "type": "works_at",
        "valid_to": "2024-01-01T00:00:00Z", "invalidated_by": "hr-record-9"})
    assert closed.status_code == 200, closed.text
    second = extract(client, "/left").json()
    assert second["invalidated"] == [{"from": "/entities/dana-weber", "type": "works_at",
                                      "to": "/entities/acme-marine"}]
    every = neighbors(client, "knowledge:/entities/dana-weber", direction="OUT", type="works_at",
                      include_invalid="true")
    assert {n["path"]: (n["valid_to"], n["invalidated_by"]) for n in every}["/entities/initech"] == (
        "2024-01-01T00:00:00+00:00", "hr-record-9")  # untouched by the extraction


def test_the_deterministic_extractor_never_invalidates(client, repo, services):
    services.settings.entity_ner = "off"
    put(client, "/a", "Guido van Rossum works at CWI in Amsterdam.")
    r = client.post(f"{API}/relations", json={"from": "knowledge:/a", "to": "knowledge:/a", "type": "self"})
    assert r.status_code == 201
    body = extract(client, "/a").json()
    assert body["extractor"] == "deterministic" and "invalidated" not in body
    assert [n["path"] for n in neighbors(client, "knowledge:/a", type="self", direction="OUT")] == ["/a"]
