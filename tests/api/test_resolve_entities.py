"""``resolve-entities`` (issue 17, part 3): duplicate entities proposed as merges on a new
branch ``proposals/entities-...``; the branch's diff is exactly the merges, main is untouched
until the merge, and merging it loses no edge. Both databases."""

from __future__ import annotations

import pytest

from kg.providers.llm import ScriptedLLM
from tests.api.test_history import BASE, NODES, put
from tests.api.test_merge_identity import merged, neighbors, relate
from tests.api.test_nodes import assert_error

INVOKE = "/api/functions/acme/resolve-entities/invoke"
EXTRACT = "/api/functions/acme/extract-entities/invoke"
WS = "knowledge"


def entity(client, slug, name, kind="person"):
    r = client.put(
        f"{NODES}/entities/{slug}",
        params={"parents": True},
        json={"node_type": "kg:Entity", "properties": {"name": name, "entity_type": kind}},
    )
    assert r.status_code in (200, 201), r.text


def head(client, branch="main"):
    return client.get(f"{BASE}/branches/{branch}").json()["head_revision"]


@pytest.fixture
def crew(client, repo):
    """Ahab (4 edges) and Captain Ahab (3, one to Ahab) duplicate each other; the Italian Opens
    and the Henrys differ by a number and must stay apart."""
    for doc in ("/d1", "/d2", "/d3"):
        put(client, doc, {"title": f"doc {doc}"})
    entity(client, "ahab", "Ahab")
    entity(client, "captain-ahab", "Captain Ahab")
    entity(client, "pequod", "Pequod", "ship")
    entity(client, "starbuck", "Starbuck")
    entity(client, "1972-italian-open", "1972 Italian Open", "event")
    entity(client, "1976-italian-open", "1976 Italian Open", "event")
    entity(client, "henry-vii", "Henry VII")
    entity(client, "henry-viii", "Henry VIII")
    relate(client, "/entities/ahab", "/d1", "mentioned_in", weight=1.0)
    relate(client, "/entities/ahab", "/d2", "mentioned_in")
    relate(client, "/entities/ahab", "/entities/pequod", "commands")
    relate(client, "/entities/starbuck", "/entities/ahab", "knows")
    relate(client, "/entities/captain-ahab", "/d1", "mentioned_in", weight=3.0)
    relate(client, "/entities/captain-ahab", "/d3", "mentioned_in")
    relate(client, "/entities/captain-ahab", "/entities/ahab", "same_as")
    r = client.post(
        f"{BASE}/relations",
        json={
            "from": f"{WS}:/entities/captain-ahab",
            "to": f"{WS}:/d2",
            "type": "mentioned_in",
            "properties": {"page": 7},
        },
    )
    assert r.status_code == 201, r.text
    return "acme"


def resolve(client, **payload):
    r = client.post(INVOKE, json={"input": {"workspace": WS, **payload}})
    assert r.status_code == 200, r.text
    return r.json()


EXPECTED = [
    {
        "kept": "/entities/ahab",
        "kept_name": "Ahab",
        "merged": ["/entities/captain-ahab"],
        "names": ["Captain Ahab"],
        "score": 1.0,
        "reasons": ["same_name"],
    }
]


def test_dry_run_lists_the_merges_and_writes_nothing(client, crew):
    before = head(client)
    out = resolve(client, dry_run=True)
    assert out["merges"] == EXPECTED
    assert out["branch"] is None and out["revision"] is None and out["entities"] == 8
    assert head(client) == before
    assert [b["name"] for b in client.get(f"{BASE}/branches").json()["branches"]] == ["main"]


def test_the_proposal_diff_is_the_merges_and_merging_it_loses_no_edge(client, crew):
    before = head(client)
    original = {p: neighbors(client, p) for p in ("/entities/ahab", "/entities/captain-ahab")}
    out = resolve(client)
    assert out["merges"] == EXPECTED
    branch = out["branch"]
    assert branch.startswith("proposals/entities-")
    assert out["edges"] == {"repointed": 3, "combined": 2, "dropped": 1}
    # main is untouched until the merge
    assert head(client) == before
    assert client.get(f"{NODES}/entities/captain-ahab").status_code == 200
    assert neighbors(client, "/entities/ahab") == original["/entities/ahab"]
    diff = client.get(f"{BASE}/branches/{branch}/diff", params={"against": "main"}).json()
    assert [n["path"] for n in diff["nodes"]["modified"]] == ["/entities/ahab"]
    assert [n["path"] for n in diff["nodes"]["deleted"]] == ["/entities/captain-ahab"]
    assert diff["nodes"]["added"] == []
    merged(client, branch)
    kept = client.get(f"{NODES}/entities/ahab").json()["properties"]
    assert kept["aliases"] == ["Captain Ahab"] and kept["merged_from"] == ["/entities/captain-ahab"]
    assert_error(client.get(f"{NODES}/entities/captain-ahab"), 404, "not_found")
    assert neighbors(client, "/entities/ahab") == {
        ("OUT", "/d1", "mentioned_in", 3.0),  # two edges became one: the larger weight
        ("OUT", "/d2", "mentioned_in", None),
        ("OUT", "/d3", "mentioned_in", None),
        ("OUT", "/entities/pequod", "commands", None),
        ("IN", "/entities/starbuck", "knows", None),
    }
    # every original relation's other end is still reached from the kept node
    reached = {path for _, path, _, _ in neighbors(client, "/entities/ahab")}
    for path, edges in original.items():
        others = {p for _, p, _, _ in edges} - set(original)
        assert others <= reached, path
    rels = client.get(
        f"{BASE}/neighbors", params={"node": f"{WS}:/entities/ahab", "direction": "OUT", "type": "mentioned_in"}
    ).json()["neighbors"]
    assert {n["path"]: n.get("properties") for n in rels}["/d2"] == {"page": 7}  # properties merged


def test_numbers_and_ordinals_never_merge(client, crew):
    out = resolve(client, dry_run=True, threshold=0.5)
    merged_paths = {p for m in out["merges"] for p in [m["kept"], *m["merged"]]}
    assert not merged_paths & {
        "/entities/1972-italian-open",
        "/entities/1976-italian-open",
        "/entities/henry-vii",
        "/entities/henry-viii",
    }


def test_re_extraction_links_the_kept_node_through_its_alias(client, crew):
    out = resolve(client)
    merged(client, out["branch"])
    put(client, "/d4", {"title": "d4", "content": "Captain Ahab sailed the Pequod from Nantucket in the winter."})
    r = client.post(EXTRACT, json={"input": {"workspace": WS, "path": "/d4"}})
    assert r.status_code == 200, r.text
    paths = [e["path"] for e in r.json()["entities"]]
    assert "/entities/captain-ahab" not in paths
    assert client.get(f"{NODES}/entities/captain-ahab").status_code == 404
    assert ("OUT", "/d4", "mentioned_in", None) in neighbors(client, "/entities/ahab")


def test_nothing_to_merge_makes_no_branch(client, repo):
    entity(client, "a", "Alpha")
    entity(client, "b", "Beta")
    out = resolve(client)
    assert out["merges"] == [] and out["branch"] is None


@pytest.mark.parametrize(
    "payload",
    [
        {"workspace": WS, "threshold": 2},
        {"workspace": WS, "threshold": "high"},
        {"workspace": WS, "dry_run": "yes"},
        {"workspace": ""},
        {},
        {"workspace": WS, "bogus": 1},
    ],
)
def test_bad_input_is_422_and_writes_nothing(client, crew, payload):
    before = head(client)
    assert_error(client.post(INVOKE, json={"input": payload}), 422, "invalid_input")
    assert head(client) == before


def test_unknown_workspace_is_404(client, crew):
    assert_error(client.post(INVOKE, json={"input": {"workspace": "nope"}}), 404, "not_found")


def test_with_an_llm_each_pair_is_confirmed_and_a_refused_pair_is_not_merged(client, crew, services):
    entity(client, "moby-dick", "Moby Dick", "work")
    entity(client, "moby-dick-novel", "Moby-Dick", "work")
    # blocked pairs scored >= 0.9, in order: (ahab, captain-ahab), (moby-dick, moby-dick-novel)
    services.llm = ScriptedLLM(['{"same": true}', '{"same": false}'])
    out = resolve(client, dry_run=True)
    assert out["merges"] == [{**EXPECTED[0], "reasons": ["llm_confirmed", "same_name"]}]
    assert len(services.llm.calls) == 2


def test_a_repointed_relation_keeps_its_validity(client, crew):
    """Re-pointing copies the whole relation row: a fact that stopped holding on the merged
    node stays invalid on the kept node (validity, issue 17 part 1), and as_of still reads it."""
    entity(client, "nantucket", "Nantucket", "place")
    r = client.post(
        f"{BASE}/relations",
        json={
            "from": f"{WS}:/entities/captain-ahab",
            "to": f"{WS}:/entities/nantucket",
            "type": "lives_in",
            "valid_from": "1830-01-01T00:00:00Z",
            "valid_to": "1851-01-01T00:00:00Z",
        },
    )
    assert r.status_code == 201, r.text
    branch = resolve(client)["branch"]

    def lives_in(**params):
        r = client.get(
            f"{BASE}/neighbors",
            params={"node": f"{WS}:/entities/ahab", "direction": "OUT", "type": "lives_in", "branch": branch, **params},
        )
        assert r.status_code == 200, r.text
        return [n["path"] for n in r.json()["neighbors"]]

    assert lives_in() == []
    assert lives_in(as_of="1840-06-01T00:00:00Z") == ["/entities/nantucket"]
    assert lives_in(include_invalid="true") == ["/entities/nantucket"]
    merged(client, branch)
    r = client.get(
        f"{BASE}/neighbors",
        params={"node": f"{WS}:/entities/ahab", "direction": "OUT", "type": "lives_in",
                "as_of": "1840-06-01T00:00:00Z"},
    )
    assert [n["path"] for n in r.json()["neighbors"]] == ["/entities/nantucket"]


def test_a_duplicate_with_children_is_the_one_kept(client, crew):
    """A node with children cannot be deleted without them, so of two duplicates the one with
    children is kept (even with fewer edges) and the other merged into it: no 409."""
    r = client.put(f"{NODES}/entities/captain-ahab/notes", json={"node_type": "kg:Note", "properties": {}})
    assert r.status_code == 201, r.text
    out = resolve(client)
    assert [(m["kept"], m["merged"]) for m in out["merges"]] == [("/entities/captain-ahab", ["/entities/ahab"])]
    assert "held_back" not in out["merges"][0]
    merged(client, out["branch"])
    assert client.get(f"{NODES}/entities/captain-ahab/notes").status_code == 200
    assert client.get(f"{NODES}/entities/captain-ahab").json()["properties"]["aliases"] == ["Ahab"]
    assert_error(client.get(f"{NODES}/entities/ahab"), 404, "not_found")


def test_duplicates_that_all_have_children_are_held_back_not_refused(client, crew):
    for parent in ("ahab", "captain-ahab"):
        r = client.put(f"{NODES}/entities/{parent}/notes", json={"node_type": "kg:Note", "properties": {}})
        assert r.status_code == 201, r.text
    entity(client, "capt-ahab", "Capt. Ahab")
    out = resolve(client)
    (merge,) = out["merges"]
    assert (merge["kept"], merge["merged"]) == ("/entities/ahab", ["/entities/capt-ahab"])
    assert merge["held_back"] == [{"path": "/entities/captain-ahab", "reason": "has_children"}]
    merged(client, out["branch"])
    assert client.get(f"{NODES}/entities/captain-ahab").status_code == 200  # left for a person
    assert_error(client.get(f"{NODES}/entities/capt-ahab"), 404, "not_found")
    # only the two with children: nothing can be merged, no branch is made
    again = resolve(client)
    assert again["merges"] == [] and again["branch"] is None
