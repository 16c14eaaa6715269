"""A document's subject (the ``about`` edge extract-entities writes from its title) and the
graph leg that follows mentions to subjects: graph-context ``follow: "subjects"`` and ask's
graph leg, over SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from kg.access import Actor, Grant
from kg.errors import InvalidInput
from kg.providers.llm import ScriptedLLM
from kg.rag.functions import invoke as invoke_function
from tests.api.test_graph_functions import API, extract, get, invoke, neighbors
from tests.api.test_nodes import assert_error

NODES = f"{API}/workspaces/knowledge/nodes"


def doc(client, path, title, text, *, branch="main", workspace="knowledge"):
    r = client.put(f"{API}/workspaces/{workspace}/nodes{path}", params={"branch": branch},
                   json={"node_type": "kb:Doc", "properties": {"title": title, "text": text}})
    assert r.status_code in (200, 201), r.text


def about(client, address, branch="main"):
    return [n["path"] for n in neighbors(client, address, branch=branch, direction="OUT", type="about")]


FILMS = {
    "/film": ("Ed Wood (film)", "Ed Wood is a 1994 biopic directed by Tim Burton and starring Johnny Depp."),
    "/wood": ("Ed Wood", "Edward Davis Wood Jr. was a filmmaker of low-budget pictures."),
    "/burton": ("Tim Burton", "Timothy Walter Burton grew up in Burbank, California."),
    "/depp": ("Johnny Depp", "John Christopher Depp II is an actor and musician."),
    "/batman": ("Batman (1989 film)", "Batman is a superhero picture directed by Tim Burton."),
}


@pytest.fixture
def films(client, repo):
    for path, (title, text) in FILMS.items():
        doc(client, path, title, text)
        assert extract(client, path).status_code == 200
    return repo


# -- the about edge --------------------------------------------------------------------------


def test_the_title_names_the_subject_and_the_document_is_about_it(client, films):
    assert about(client, "knowledge:/film") == ["/entities/ed-wood"]      # "(film)" dropped
    assert about(client, "knowledge:/wood") == ["/entities/ed-wood"]
    assert about(client, "knowledge:/burton") == ["/entities/tim-burton"]
    # "Batman" is no name the rules extract from text (one word): the title makes the entity
    assert about(client, "knowledge:/batman") == ["/entities/batman"]
    batman = get(client, "/entities/batman").json()
    assert batman["node_type"] == "kg:Entity" and batman["properties"]["name"] == "Batman"
    # the subject is also mentioned, as every entity the extraction writes
    assert "/entities/batman" in [n["path"] for n in neighbors(client, "knowledge:/batman", type="mentioned_in")]
    subjects = neighbors(client, "knowledge:/entities/ed-wood", direction="IN", type="about")
    assert sorted(n["path"] for n in subjects) == ["/film", "/wood"]


def test_a_title_that_is_a_sentence_names_no_subject(client, repo):
    doc(client, "/howto", "How to replace standing rigging every ten years",
        "Dana Weber of Acme Marine explains it.")
    body = extract(client, "/howto").json()
    assert body["entities"] and about(client, "knowledge:/howto") == []
    record = get(client, f"/kg/extractions/{get(client, '/howto').json()['id']}").json()
    assert record["properties"]["subject"] is None


def test_a_title_equal_to_an_alias_is_about_that_entity(client, repo, services):
    doc(client, "/bdfl", "BDFL", "Guido van Rossum was Python's benevolent dictator.")
    services.llm = ScriptedLLM(['{"entities": [{"name": "Guido van Rossum", "type": "person", '
                                '"aliases": ["BDFL"]}]}'])
    body = extract(client, "/bdfl").json()
    assert [e["path"] for e in body["entities"]] == ["/entities/guido-van-rossum"]
    assert about(client, "knowledge:/bdfl") == ["/entities/guido-van-rossum"]


def test_an_unchanged_document_is_skipped_only_while_its_about_edge_holds(client, films):
    before = client.get(f"{API}/branches/main").json()["head_revision"]
    assert extract(client, "/burton").json()["skipped"] is True
    r = client.delete(f"{API}/relations", params={"from": "knowledge:/burton", "to": "knowledge:/entities/tim-burton",
                                                  "type": "about"})
    assert r.status_code == 200 and r.json()["revision"] == before + 1
    again = extract(client, "/burton").json()
    assert again["skipped"] is False and again["revision"] == before + 2
    assert about(client, "knowledge:/burton") == ["/entities/tim-burton"]


def test_a_changed_title_moves_the_about_edge(client, films):
    doc(client, "/burton", "Johnny Depp", FILMS["/burton"][1])
    body = extract(client, "/burton").json()
    assert body["skipped"] is False
    assert about(client, "knowledge:/burton") == ["/entities/johnny-depp"]
    assert get(client, "/entities/tim-burton").status_code == 200       # the entity itself stays
    assert "/burton" not in [n["path"] for n in neighbors(client, "knowledge:/entities/tim-burton",
                                                          direction="IN", type="about")]


def test_about_edges_written_on_a_branch_stay_on_it(client, repo):
    doc(client, "/burton", *FILMS["/burton"])
    assert client.post(f"{API}/branches", json={"name": "agent/x"}).status_code == 201
    assert extract(client, "/burton", branch="agent/x").json()["revision"]
    assert about(client, "knowledge:/burton", branch="agent/x") == ["/entities/tim-burton"]
    assert about(client, "knowledge:/burton") == []
    # a title changed on the branch moves the edge there only
    doc(client, "/burton", "Tim Burton (director)", FILMS["/burton"][1], branch="agent/x")
    assert extract(client, "/burton", branch="agent/x").json()["skipped"] is False
    assert about(client, "knowledge:/burton", branch="agent/x") == ["/entities/tim-burton"]


# -- graph-context, follow: subjects ---------------------------------------------------------


def _docs(body):
    return [n["path"] for n in body["nodes"] if n["hop"] == 2]


@pytest.mark.parametrize("view", [True, False], ids=["view", "sql"])
def test_follow_subjects_reaches_the_pages_of_the_entities_a_seed_mentions(client, films, services, view):
    if not view:
        services.graphs.max_edges = 0      # no view fits: every read is answered from SQL
    body = invoke(client, "graph-context", {"seeds": ["knowledge:/film"], "follow": "subjects"}).json()
    assert [(n["path"], n["hop"], n["via"], n["from"]) for n in body["nodes"]] == [
        ("/film", 0, None, None),
        ("/entities/ed-wood", 1, "mentioned_in", "knowledge:/film"),
        ("/wood", 2, "about", "knowledge:/entities/ed-wood"),
        ("/entities/johnny-depp", 1, "mentioned_in", "knowledge:/film"),
        ("/depp", 2, "about", "knowledge:/entities/johnny-depp"),
        ("/entities/tim-burton", 1, "mentioned_in", "knowledge:/film"),
        ("/burton", 2, "about", "knowledge:/entities/tim-burton"),
    ]
    assert body["truncated"] is False and all("seed" not in n for n in body["nodes"])
    # the walk over mentioned_in reaches Batman, which names Tim Burton and is not about him
    walk = invoke(client, "graph-context", {"seeds": ["knowledge:/film"], "types": ["mentioned_in"]}).json()
    assert "/batman" in _docs(walk) and "/batman" not in _docs(body)
    # seed by seed: Batman's subjects first, then the film's
    two = invoke(client, "graph-context", {"seeds": ["knowledge:/batman", "knowledge:/film"],
                                           "follow": "subjects"}).json()
    assert _docs(two) == ["/burton", "/wood", "/depp"]
    scores = {n["path"]: n["score"] for n in two["nodes"]}
    assert scores["/burton"] > scores["/wood"] == scores["/depp"]
    one_hop = invoke(client, "graph-context", {"seeds": ["knowledge:/film"], "follow": "subjects", "hops": 1}).json()
    assert {n["hop"] for n in one_hop["nodes"]} == {0, 1}
    small = invoke(client, "graph-context", {"seeds": ["knowledge:/film"], "follow": "subjects",
                                             "max_nodes": 3}).json()
    assert [n["path"] for n in small["nodes"]] == ["/film", "/entities/ed-wood", "/wood"] and small["truncated"]
    narrow = invoke(client, "graph-context", {"seeds": ["knowledge:/film"], "follow": "subjects",
                                              "fan_out": 2}).json()
    assert _docs(narrow) == ["/wood", "/depp"] and narrow["truncated"] is True   # 2 of the 3 entities


def test_follow_subjects_without_extractions_says_why_it_found_only_the_seeds(client, repo):
    """A new user's follow: "subjects" on a branch never extracted returned the seeds alone,
    as if the graph had nothing: the answer now says no seed mentions an entity, and why."""
    doc(client, "/film", *FILMS["/film"])
    body = invoke(client, "graph-context", {"seeds": ["knowledge:/film"], "follow": "subjects"}).json()
    assert [n["path"] for n in body["nodes"]] == ["/film"]
    (warning,) = body["warnings"]
    assert warning["code"] == "no_mentions" and "extract-entities" in warning["message"]
    assert extract(client, "/film").status_code == 200
    body = invoke(client, "graph-context", {"seeds": ["knowledge:/film"], "follow": "subjects"}).json()
    assert "warnings" not in body and len(body["nodes"]) > 1
    walk = invoke(client, "graph-context", {"seeds": ["knowledge:/film"], "hops": 0}).json()
    assert "warnings" not in walk  # the walk and a walk of no hop are asked for what they give
    cut = invoke(client, "graph-context", {"seeds": ["knowledge:/film"], "follow": "subjects", "max_nodes": 1}).json()
    assert cut["truncated"] is True and "warnings" not in cut  # the budget cut it: no claim about mentions


def test_follow_subjects_input_errors(client, films):
    seeds = ["knowledge:/film"]
    for bad in ({"follow": "sideways"}, {"follow": "subjects", "types": ["about"]},
                {"follow": "subjects", "direction": "IN"}, {"follow": "subjects", "hops": 3},
                {"follow": "subjects", "hops": True}, {"follow": None}):
        r = invoke(client, "graph-context", {"seeds": seeds, **bad})
        assert_error(r, 422)
    message = invoke(client, "graph-context", {"seeds": seeds, "follow": "subjects", "types": ["x"]}).json()
    assert "follow 'walk'" in message["error"]["message"]


@pytest.mark.parametrize("view", [True, False], ids=["view", "sql"])
def test_follow_subjects_never_reaches_what_the_caller_cannot_read(client, films, services, view):
    if not view:
        services.graphs.max_edges = 0
    assert client.post(f"{API}/workspaces", json={"name": "secret"}).status_code == 201
    doc(client, "/bio", "Tim Burton", "A private note on the director.", workspace="secret")
    r = client.put(f"{API}/workspaces/secret/nodes/entities/hidden", params={"parents": "true"},
                   json={"node_type": "kg:Entity", "properties": {"name": "Hidden"}})
    assert r.status_code == 201, r.text
    doc(client, "/hidden-page", "Hidden", "The page of the hidden entity.")
    for source, target, rel_type in (("secret:/bio", "knowledge:/entities/tim-burton", "about"),
                                     ("secret:/entities/hidden", "knowledge:/film", "mentioned_in"),
                                     ("knowledge:/hidden-page", "secret:/entities/hidden", "about")):
        r = client.post(f"{API}/relations", json={"from": source, "to": target, "type": rel_type})
        assert r.status_code == 201, r.text
    raw = {"seeds": ["knowledge:/film"], "follow": "subjects"}
    everyone = invoke_function(services, Actor("operator"), "acme", "graph-context", raw)
    assert {"/bio", "/entities/hidden", "/hidden-page"} <= {n.path for n in everyone.nodes}
    reader = Actor("key", name="reader", key_id="k-reader",
                   grants=(Grant(repo="acme", workspaces=("knowledge",)),))
    scoped = invoke_function(services, reader, "acme", "graph-context", raw).model_dump(mode="json")
    assert {n["workspace"] for n in scoped["nodes"]} == {"knowledge"}
    assert "/hidden-page" not in [n["path"] for n in scoped["nodes"]]      # nor what lies beyond
    assert _docs(scoped) == ["/wood", "/depp", "/burton"]
    with pytest.raises(InvalidInput):
        invoke_function(services, reader, "acme", "graph-context", {**raw, "hops": 4})


# -- ask's graph leg -------------------------------------------------------------------------


def test_ask_graph_leg_adds_the_subject_passage_hybrid_search_misses(client, films, services):
    question = "Which city raised the director of the 1994 biopic?"
    plain_llm = services.llm = ScriptedLLM(['{"sufficient": true}', "Ed Wood [1]."])
    plain = invoke(client, "ask", {"question": question}).json()
    assert "/burton" not in [c["path"] for c in plain["citations"]]
    assert "Burbank" not in plain_llm.calls[-1]["messages"][-1]["content"]
    llm = services.llm = ScriptedLLM(['{"sufficient": true}', "Tim Burton [1] grew up in Burbank [4]."])
    body = invoke(client, "ask", {"question": question, "use_graph": True}).json()
    prompt = llm.calls[-1]["messages"][-1]["content"]
    assert "Burbank" in prompt
    burton = [c for c in body["citations"] if c["path"] == "/burton"]
    assert burton and burton[0]["via"] == "graph"
    assert body["attempts"][-1]["leg"] == "graph" and body["attempts"][-1]["passages"] >= 1
