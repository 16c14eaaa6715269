"""JSON Schema's ``integer`` is any number with no fractional part: where a request asks for an
integer, ``2.0`` is the integer 2 (kg.store.numbers.Integer); ``2.5``, ``"2"`` and ``true`` are
refused with a 422 in the API's error shape."""

from __future__ import annotations

import pytest

from kg.store.numbers import integral
from tests.api.test_nodes import assert_error, put

NODES = "/api/repos/acme/workspaces/knowledge/nodes"


def test_integral_takes_a_float_with_no_fraction_as_its_int():
    assert integral(60.0) == 60 and type(integral(60.0)) is int
    assert integral(-0.0) == 0 and type(integral(-0.0)) is int
    assert integral(60.5) == 60.5 and integral("60") == "60" and integral(True) is True


def test_an_integer_written_as_a_float_is_that_integer(client, repo):
    put(client, "/docs", {"title": "v1"})
    put(client, "/docs", {"title": "v2"})
    branch = client.post("/api/repos/acme/branches", json={"name": "old", "at_revision": 1.0})
    assert branch.status_code == 201, branch.text
    assert branch.json()["base_revision"] == 1
    assert client.get(f"{NODES}/docs", params={"branch": "old"}).json()["properties"]["title"] == "v1"

    r = client.put(f"{NODES}/docs", json={"properties": {"title": "v3"}, "if_revision": 2.0})
    assert r.status_code == 200, r.text
    assert_error(client.put(f"{NODES}/docs", json={"properties": {"title": "v4"}, "if_revision": 2.0}), 409)

    client.post("/api/repos/acme/relations", json={"from": "knowledge:/docs", "to": "knowledge:/docs",
                                                   "type": "links"})
    walk = client.post("/api/repos/acme/traverse", json={"seeds": ["knowledge:/docs"], "hops": 1.0,
                                                          "max_nodes": 10.0, "fan_out": 5.0})
    assert walk.status_code == 200, walk.text
    assert walk.json()["nodes"][0]["path"] == "/docs"

    search = client.post("/api/repos/acme/search", json={"query": "v3", "k": 1.0, "mode": "fulltext",
                                                          "context": {"siblings": 0.0}})
    assert search.status_code == 200, search.text
    assert len(search.json()["results"]) == 1


@pytest.mark.parametrize("value", [1.5, "1", True])
def test_a_fraction_a_string_or_a_boolean_is_not_an_integer(client, repo, value):
    put(client, "/docs", {"title": "v1"})
    r = client.post("/api/repos/acme/branches", json={"name": "old", "at_revision": value})
    assert_error(r, 422)
    assert r.json()["error"]["code"] == "invalid_input"
    assert_error(client.post("/api/repos/acme/traverse", json={"seeds": ["knowledge:/docs"], "hops": value}), 422)
    assert_error(client.post("/api/repos/acme/search", json={"query": "v1", "k": value}), 422)
