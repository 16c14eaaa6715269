"""Relations over time (issue 17) over HTTP on both databases, through the networkx view and
through SQL: valid_from / valid_to on RELATE, INVALIDATE, single-valued relation types, and
NEIGHBORS / traverse / graph-context reading current facts by default, ``as_of`` and
``include_invalid``, with ``at_revision`` (bi-temporal), diff and merge."""

from __future__ import annotations

import pytest

from kg.graph.cache import GraphCache
from tests.api.test_nodes import assert_error

API = "/api/repos/acme"
WS = f"{API}/workspaces/knowledge"
PAST, MID, FUTURE = "2020-01-01T00:00:00+00:00", "2022-06-01T00:00:00+00:00", "2999-01-01T00:00:00+00:00"


@pytest.fixture(params=["view", "sql"])
def path(request, services):
    """Which path answers graph reads: the networkx view, or SQL only."""
    if request.param == "sql":
        services.graphs = GraphCache(max_edges=0)
    return request.param


def k(p):
    return f"knowledge:{p}"


def node(client, p, branch="main"):
    r = client.put(f"{WS}/nodes{p}", params={"branch": branch}, json={"node_type": "kg:Node", "properties": {}})
    assert r.status_code in (200, 201), r.text


def rel(client, f, to, type="works_at", branch="main", **extra):
    r = client.post(
        f"{API}/relations", params={"branch": branch}, json={"from": k(f), "to": k(to), "type": type, **extra}
    )
    assert r.status_code in (200, 201), r.text
    return r.json()


def nb(client, p, **params):
    r = client.get(f"{API}/neighbors", params={"node": k(p), "direction": "OUT", **params})
    assert r.status_code == 200, r.text
    return [n["path"] for n in r.json()["neighbors"]]


@pytest.fixture
def people(client, repo):
    for p in ("/dana", "/acme", "/globex", "/initech"):
        node(client, p)
    return client


def test_relate_answers_the_interval_in_utc(people, path):
    body = rel(people, "/dana", "/acme", valid_from="2020-01-01T02:00:00+02:00", valid_to=FUTURE)
    assert body["valid_from"] == PAST and body["valid_to"] == FUTURE and body["invalidated_by"] is None


def test_naive_time_is_422_and_writes_nothing(people, path):
    r = people.post(
        f"{API}/relations",
        json={"from": k("/dana"), "to": k("/acme"), "type": "works_at", "valid_from": "2020-01-01T00:00:00"},
    )
    assert_error(r, 422)
    assert nb(people, "/dana", include_invalid="true") == []
    assert_error(people.get(f"{API}/neighbors", params={"node": k("/dana"), "as_of": "2020-01-01T00:00:00"}), 422)


EDGE_TIMES = ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"]  # outside the years 1..9999 in UTC


@pytest.mark.parametrize("when", EDGE_TIMES)
def test_a_time_out_of_range_in_utc_is_422_everywhere_and_writes_nothing(people, when):
    """Found by a new user: each of these was a 500 (OverflowError converting to UTC)."""
    rel(people, "/dana", "/acme")
    before = people.get(f"{API}/log").json()["revisions"][0]["revision"]
    base = {"from": k("/dana"), "to": k("/globex"), "type": "works_at"}
    for response in (
        people.get(f"{API}/neighbors", params={"node": k("/dana"), "as_of": when}),
        people.post(f"{API}/relations", json={**base, "valid_from": when}),
        people.post(f"{API}/relations", json={**base, "valid_to": when}),
        people.post(f"{WS}/relations/invalidate", json={**base, "to": k("/acme"), "valid_to": when}),
        people.post(f"{API}/traverse", json={"seeds": [k("/dana")], "as_of": when}),
        people.post("/api/functions/acme/graph-context/invoke", json={"input": {"query": "dana", "as_of": when}}),
        people.post("/api/functions/acme/ask/invoke", json={"input": {"question": "who?", "as_of": when}}),
    ):
        body = assert_error(response, 422)
        assert "out of range" in response.json()["error"]["message"], body
    assert people.get(f"{API}/log").json()["revisions"][0]["revision"] == before


def test_valid_to_before_valid_from_is_422(people, path):
    r = people.post(
        f"{API}/relations",
        json={"from": k("/dana"), "to": k("/acme"), "type": "works_at", "valid_from": MID, "valid_to": PAST},
    )
    assert_error(r, 422)


def test_neighbors_answer_current_facts_as_of_and_all(people, path):
    rel(people, "/dana", "/acme", valid_from=PAST, valid_to=MID)  # over
    rel(people, "/dana", "/globex", valid_from=MID)  # current
    rel(people, "/dana", "/initech", valid_from=FUTURE)  # not yet
    assert nb(people, "/dana") == ["/globex"]
    assert nb(people, "/dana", as_of="2021-01-01T00:00:00Z") == ["/acme"]
    assert nb(people, "/dana", as_of=MID) == ["/globex"]  # half-open: valid_to excluded, valid_from included
    assert nb(people, "/dana", include_invalid="true") == ["/acme", "/globex", "/initech"]


def test_traverse_follows_current_relations(people, path):
    rel(people, "/dana", "/acme", valid_to=PAST)
    rel(people, "/dana", "/globex")
    walk = people.post(f"{API}/traverse", json={"seeds": [k("/dana")], "hops": 1, "direction": "OUT"})
    assert [n["path"] for n in walk.json()["nodes"]] == ["/dana", "/globex"]
    walk = people.post(
        f"{API}/traverse", json={"seeds": [k("/dana")], "hops": 1, "direction": "OUT", "as_of": "2019-01-01T00:00:00Z"}
    )
    assert [n["path"] for n in walk.json()["nodes"]] == ["/dana", "/acme", "/globex"]
    walk = people.post(f"{API}/traverse", json={"seeds": [k("/dana")], "hops": 1, "include_invalid": True})
    assert [n["path"] for n in walk.json()["nodes"]] == ["/dana", "/acme", "/globex"]
    assert_error(people.post(f"{API}/traverse", json={"seeds": [k("/dana")], "as_of": "2019-01-01T00:00:00"}), 422)


def test_graph_context_reads_current_relations(people, path):
    rel(people, "/dana", "/acme", valid_to=PAST)
    rel(people, "/dana", "/globex")

    def ctx(**extra):
        r = people.post(
            "/api/functions/acme/graph-context/invoke",
            json={"input": {"seeds": [k("/dana")], "hops": 1, "direction": "OUT", **extra}},
        )
        assert r.status_code == 200, r.text
        return [n["path"] for n in r.json()["nodes"]]

    assert ctx() == ["/dana", "/globex"]
    assert ctx(as_of="2019-01-01T00:00:00Z") == ["/dana", "/acme", "/globex"]
    assert ctx(include_invalid=True) == ["/dana", "/acme", "/globex"]
    r = people.post(
        "/api/functions/acme/graph-context/invoke", json={"input": {"seeds": [k("/dana")], "as_of": "2019-01-01"}}
    )
    assert_error(r, 422)


def test_invalidate_closes_the_interval_and_keeps_history(people, path):
    first = rel(people, "/dana", "/acme", valid_from=PAST)
    r = people.post(
        f"{WS}/relations/invalidate",
        json={
            "from": k("/dana"),
            "to": k("/acme"),
            "type": "works_at",
            "valid_to": MID,
            "invalidated_by": "hr-record-17",
        },
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["valid_from"] == PAST and body["valid_to"] == MID and body["invalidated_by"] == "hr-record-17"
    assert body["revision"] == first["revision"] + 1
    assert nb(people, "/dana") == []
    assert nb(people, "/dana", as_of="2021-01-01T00:00:00Z") == ["/acme"]
    assert nb(people, "/dana", at_revision=first["revision"]) == ["/acme"]  # transaction time: before it
    assert nb(people, "/dana", include_invalid="true") == ["/acme"]


def test_neighbors_rows_say_each_relations_validity(people, path):
    """With ``include_invalid`` a reader must tell the superseded fact from the current one:
    every row carries valid_from, valid_to and invalidated_by (null when unset), the same
    through the view and through SQL."""
    people.put(f"{WS}/relation-types", json={"single_valued": ["works_at"]})
    rel(people, "/dana", "/acme", valid_from="2020-01-01T02:00:00+02:00")
    rel(people, "/dana", "/globex", valid_from=MID)
    rel(people, "/dana", "/initech", type="knows")
    r = people.get(f"{API}/neighbors", params={"node": k("/dana"), "direction": "OUT", "include_invalid": "true"})
    assert r.status_code == 200, r.text
    rows = {n["path"]: (n["valid_from"], n["valid_to"], n["invalidated_by"]) for n in r.json()["neighbors"]}
    assert rows == {
        "/acme": (PAST, MID, "knowledge:/dana|works_at|knowledge:/globex"),
        "/globex": (MID, None, None),
        "/initech": (None, None, None),
    }
    current = people.get(f"{API}/neighbors", params={"node": k("/dana"), "direction": "OUT"}).json()["neighbors"]
    assert {n["path"]: n["valid_to"] for n in current} == {"/globex": None, "/initech": None}
    # seen from the other end (IN) the row is the same edge, with the same validity
    into = people.get(f"{API}/neighbors", params={"node": k("/acme"), "direction": "IN", "include_invalid": "true"})
    assert [(n["path"], n["valid_to"], n["invalidated_by"]) for n in into.json()["neighbors"]] == [
        ("/dana", MID, "knowledge:/dana|works_at|knowledge:/globex")]


def test_invalidate_refuses_bad_input(people, path):
    rel(people, "/dana", "/acme", valid_from=MID)
    base = {"from": k("/dana"), "to": k("/acme"), "type": "works_at"}
    assert_error(people.post(f"{WS}/relations/invalidate", json={**base, "valid_to": PAST}), 422)
    assert_error(people.post(f"{WS}/relations/invalidate", json={**base, "valid_to": "2021-01-01T00:00:00"}), 422)
    assert_error(people.post(f"{WS}/relations/invalidate", json={**base, "type": "owns"}), 404)
    assert_error(people.post(f"{WS}/relations/invalidate", json={**base, "from": k("/nobody")}), 404)
    assert_error(people.post(f"{API}/workspaces/other/relations/invalidate", json=base), 422)
    assert nb(people, "/dana", as_of=FUTURE) == ["/acme"]


def test_invalidate_now_when_valid_from_is_future_is_422(people, path):
    rel(people, "/dana", "/acme", valid_from=FUTURE)
    r = people.post(f"{WS}/relations/invalidate", json={"from": k("/dana"), "to": k("/acme"), "type": "works_at"})
    assert_error(r, 422)


def test_relation_types_get_put(people):
    assert people.get(f"{WS}/relation-types").json() == {"workspace": "knowledge", "single_valued": []}
    r = people.put(f"{WS}/relation-types", json={"single_valued": ["works_at", "lives_in", "works_at"]})
    assert r.status_code == 200, r.text
    assert r.json() == {"workspace": "knowledge", "single_valued": ["lives_in", "works_at"]}
    assert people.get(f"{WS}/relation-types").json()["single_valued"] == ["lives_in", "works_at"]
    assert_error(people.put(f"{WS}/relation-types", json={"single_valued": ["bad type"]}), 422)
    assert_error(people.put(f"{API}/workspaces/nope/relation-types", json={"single_valued": []}), 404)
    assert_error(people.get(f"{API}/workspaces/nope/relation-types"), 404)


def test_single_valued_type_invalidates_the_old_target_in_the_same_revision(people, path):
    people.put(f"{WS}/relation-types", json={"single_valued": ["works_at"]})
    first = rel(people, "/dana", "/acme", valid_from=PAST)
    rel(people, "/dana", "/initech", type="knows")  # another type: untouched
    second = rel(people, "/dana", "/globex", valid_from=MID)
    assert nb(people, "/dana", type="works_at") == ["/globex"]
    assert nb(people, "/dana", type="works_at", as_of="2021-01-01T00:00:00Z") == ["/acme"]
    assert nb(people, "/dana", type="works_at", include_invalid="true") == ["/acme", "/globex"]
    assert nb(people, "/dana", type="knows") == ["/initech"]
    log = people.get(f"{API}/log").json()["revisions"]
    assert log[0]["revision"] == second["revision"]
    # the old fact's new version is in the same revision as the new one
    r = people.get(
        f"{API}/neighbors",
        params={"node": k("/dana"), "at_revision": second["revision"] - 1, "type": "works_at", "direction": "OUT"},
    )
    assert [n["path"] for n in r.json()["neighbors"]] == ["/acme"]
    assert first["revision"] < second["revision"]
    # re-asserting the same target is not a second fact and invalidates nothing
    rel(people, "/dana", "/globex", valid_from=MID)
    assert nb(people, "/dana", type="works_at", include_invalid="true") == ["/acme", "/globex"]
    assert nb(people, "/dana", type="works_at") == ["/globex"]


def test_declaring_a_type_single_valued_keeps_stored_facts_until_the_next_assertion(people, path):
    rel(people, "/dana", "/acme", valid_from=PAST)
    rel(people, "/dana", "/initech", valid_from=PAST)
    people.put(f"{WS}/relation-types", json={"single_valued": ["works_at"]})
    assert nb(people, "/dana", type="works_at") == ["/acme", "/initech"]  # not rewritten
    third = rel(people, "/dana", "/globex", valid_from=MID)
    assert nb(people, "/dana", type="works_at") == ["/globex"]
    r = people.get(f"{API}/neighbors", params={"node": k("/dana"), "direction": "OUT", "type": "works_at",
                                               "include_invalid": "true"})
    closed = {n["path"]: (n["valid_to"], n["invalidated_by"]) for n in r.json()["neighbors"] if n["valid_to"]}
    ref = "knowledge:/dana|works_at|knowledge:/globex"
    assert closed == {"/acme": (MID, ref), "/initech": (MID, ref)}
    assert people.get(f"{API}/log").json()["revisions"][0]["revision"] == third["revision"]


def test_invalidation_on_a_branch_shows_in_diff_and_survives_merge(people, path):
    rel(people, "/dana", "/acme")
    assert people.post(f"{API}/branches", json={"name": "agent/x", "from": "main"}).status_code == 201
    r = people.post(
        f"{WS}/relations/invalidate",
        params={"branch": "agent/x"},
        json={"from": k("/dana"), "to": k("/acme"), "type": "works_at", "valid_to": MID, "invalidated_by": "news"},
    )
    assert r.status_code == 200, r.text
    assert nb(people, "/dana") == ["/acme"]  # main untouched
    assert nb(people, "/dana", branch="agent/x") == []
    diff = people.get(f"{API}/branches/agent/x/diff", params={"against": "main"}).json()
    assert len(diff["relations"]["modified"]) == 1, diff
    merged = people.post(f"{API}/branches/agent/x/merge", json={"into": "main"})
    assert merged.status_code == 200, merged.text
    assert nb(people, "/dana") == []
    assert nb(people, "/dana", as_of="2021-01-01T00:00:00Z") == ["/acme"]


def test_ask_takes_as_of_and_include_invalid(people):
    ask = "/api/functions/acme/ask/invoke"
    good = people.post(
        ask,
        json={
            "input": {
                "question": "where does dana work",
                "use_graph": True,
                "as_of": "2021-01-01T00:00:00Z",
                "include_invalid": False,
            }
        },
    )
    assert good.status_code == 200, good.text
    assert_error(people.post(ask, json={"input": {"question": "where", "as_of": "2021-01-01T00:00:00"}}), 422)
    assert_error(people.post(ask, json={"input": {"question": "where", "include_invalid": "yes"}}), 422)
