"""Issue 15: unknown query parameters on /api routes are a 422 naming the accepted ones, as
unknown body fields are; decided once for every route (api/guard.py ``GuardedRoute``)."""

from __future__ import annotations

import pytest
from fastapi.routing import APIRoute

from api.app import create_app
from api.guard import GuardedRoute


def assert_unknown(response, unknown, accepted_include):
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert set(error) == {"code", "message", "details"}
    assert error["details"]["unknown"] == unknown
    assert set(accepted_include) <= set(error["details"]["accepted"])
    for name in unknown:
        assert repr(name) in error["message"]


def test_an_unknown_query_parameter_is_422_naming_the_accepted_ones(client, repo):
    assert client.put("/api/repos/acme/workspaces/knowledge/nodes/docs",
                      json={"node_type": "kb:Article", "properties": {}}).status_code == 201
    # a misspelt parameter used to be ignored: the children came back in the default order
    r = client.get("/api/repos/acme/workspaces/knowledge/nodes", params={"parent": "/", "orderby": "name"})
    assert_unknown(r, ["orderby"], {"parent", "prefix", "order_by", "direction", "node_type", "limit", "cursor",
                                    "branch", "at_revision"})
    r = client.get("/api/repos/acme/workspaces/knowledge/nodes/docs", params={"brnach": "x", "zz": "1"})
    assert_unknown(r, ["brnach", "zz"], {"branch", "at_revision"})
    assert client.get("/api/repos/acme/workspaces/knowledge/nodes/docs").status_code == 200
    r = client.post("/api/repos", params={"branch": "main"}, json={"name": "other"})
    assert_unknown(r, ["branch"], set())
    assert client.get("/api/repos/other").status_code in (404, 405)  # nothing was created
    assert [x["name"] for x in client.get("/api/repos").json()["repos"]] == ["acme"]
    r = client.post("/api/repos/acme/search", params={"k": "3"}, json={"query": "docs"})
    assert_unknown(r, ["k"], {"branch"})
    r = client.get("/api/keys", params={"all": "1"})
    assert_unknown(r, ["all"], set())
    r = client.get("/api/health", params={"verbose": "1"})
    assert_unknown(r, ["verbose"], set())


def test_declared_parameters_still_work_and_blank_ones_are_values(client, repo):
    assert client.put("/api/repos/acme/workspaces/knowledge/nodes/docs", params={"branch": "main", "parents": "true"},
                      json={"node_type": "kb:Article", "properties": {}}).status_code == 201
    r = client.get("/api/repos/acme/workspaces/knowledge/nodes", params={"parent": "/", "branch": "main"})
    assert r.status_code == 200 and [n["path"] for n in r.json()["nodes"]] == ["/docs"]
    # /health outside /api is a liveness probe and is left alone
    assert client.get("/health", params={"probe": "lb"}).status_code == 200


def _routes(routes):
    """Every APIRoute, through included routers (FastAPI keeps them nested)."""
    for route in routes:
        if isinstance(route, APIRoute):
            yield route
        nested = getattr(route, "original_router", None)
        if nested is not None:
            yield from _routes(nested.routes)


def test_every_api_route_refuses_unknown_query_parameters(services):
    """No /api route is left out: each is a GuardedRoute that knows its accepted names."""
    app = create_app(services=services)
    routes = list(_routes(app.router.routes))
    api_routes = [r for r in routes if r.path.startswith("/api")]
    assert len(api_routes) > 30
    for route in api_routes:
        assert isinstance(route, GuardedRoute), route.path
        assert route.accepted_query is not None, route.path
    console = [r for r in routes if r.path.startswith("/ui")]
    assert console and all(getattr(r, "accepted_query", None) is None for r in console)


@pytest.mark.parametrize("path", ["/api/repos/acme/log", "/api/repos/acme/branches", "/api/repos/acme/neighbors"])
def test_unknown_parameters_on_reads_of_other_resources(client, repo, path):
    r = client.get(path, params={"bogus": "1"})
    assert_unknown(r, ["bogus"], set())
