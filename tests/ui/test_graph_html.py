"""The neighbourhood graph screen on SQLite and PostgreSQL (issue 14): the cytoscape elements of
a seeded graph at 1 and 2 hops, the per-node cap's truncated badge, what a branch wrote flagged
against its parent, a workspace-restricted key's graph, escaping and bad input."""

from __future__ import annotations

import json
import re

from api.ui.graph import edge_width, type_colour
from kg.rag.graph import neighborhood
from tests.ui.conftest import ConsoleClient, bearer, new_key


def _api(console: ConsoleClient) -> dict:
    return {"headers": bearer(console.admin)}


def _node(console: ConsoleClient, workspace: str, path: str, title: str, branch: str = "main") -> None:
    r = console.http.put(f"/api/repos/acme/workspaces/{workspace}/nodes{path}", params={"branch": branch},
                         json={"node_type": "kb:Doc", "properties": {"title": title, "content": f"{title} text"}},
                         **_api(console))
    assert r.status_code in (200, 201), r.text


def _relate(console: ConsoleClient, source: str, target: str, rel_type: str, weight: float | None = None,
            branch: str = "main") -> None:
    body = {"from": source, "to": target, "type": rel_type, **({"weight": weight} if weight is not None else {})}
    r = console.http.post("/api/repos/acme/relations", params={"branch": branch}, json=body, **_api(console))
    assert r.status_code in (200, 201), r.text


def seed_graph(console: ConsoleClient) -> None:
    """kb: a -cites(0.9)-> b, a -mentions(0.2)-> c, c -cites-> b, b -supports(0.5)-> d,
    d -cites-> e; a -cites(0.1)-> secret:/s. Branch agent/x adds f and a -cites-> f,
    re-weights a -mentions-> c and rewrites b."""
    api = _api(console)
    assert console.http.post("/api/repos", json={"name": "acme"}, **api).status_code == 201
    for ws in ("kb", "secret"):
        assert console.http.post("/api/repos/acme/workspaces", json={"name": ws}, **api).status_code == 201
    for name in "abcde":
        _node(console, "kb", f"/{name}", f"Doc {name.upper()}")
    _node(console, "secret", "/s", "Secret")
    _relate(console, "kb:/a", "kb:/b", "cites", 0.9)
    _relate(console, "kb:/a", "kb:/c", "mentions", 0.2)
    _relate(console, "kb:/c", "kb:/b", "cites")
    _relate(console, "kb:/b", "kb:/d", "supports", 0.5)
    _relate(console, "kb:/d", "kb:/e", "cites")
    _relate(console, "kb:/a", "secret:/s", "cites", 0.1)
    assert console.http.post("/api/repos/acme/branches", json={"name": "agent/x", "from": "main"},
                             **api).status_code == 201
    _node(console, "kb", "/f", "Doc F", branch="agent/x")
    _relate(console, "kb:/a", "kb:/f", "cites", 0.3, branch="agent/x")
    _relate(console, "kb:/a", "kb:/c", "mentions", 0.7, branch="agent/x")
    _node(console, "kb", "/b", "Doc B, rewritten", branch="agent/x")


def elements(console: ConsoleClient, **params) -> dict:
    r = console.get("/ui/r/acme/graph/elements", params={"workspace": "kb", "path": "/a", **params})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/json")
    return r.json()


def ids(answer: dict) -> tuple[set[str], set[tuple[str, str, str]]]:
    nodes = {n["data"]["id"] for n in answer["elements"]["nodes"]}
    edges = {(e["data"]["source"], e["data"]["type"], e["data"]["target"]) for e in answer["elements"]["edges"]}
    return nodes, edges


def test_one_hop_has_exactly_the_neighbours_and_the_edges_between_them(console):
    seed_graph(console)
    answer = elements(console, hops=1)
    nodes, edges = ids(answer)
    assert nodes == {"kb:/a", "kb:/b", "kb:/c", "secret:/s"}
    assert edges == {("kb:/a", "cites", "kb:/b"), ("kb:/a", "mentions", "kb:/c"), ("kb:/c", "cites", "kb:/b"),
                     ("kb:/a", "cites", "secret:/s")}
    assert answer["truncated"] is False
    assert answer["parent"] is None and answer["branch"] == "main"
    by_id = {n["data"]["id"]: n for n in answer["elements"]["nodes"]}
    assert by_id["kb:/a"]["data"]["seed"] is True and by_id["kb:/a"]["classes"] == "seed"
    assert by_id["kb:/b"]["data"]["label"] == "Doc B" and by_id["kb:/b"]["data"]["hop"] == 1
    assert by_id["kb:/b"]["data"]["href"] == "/ui/r/acme/node?branch=main&workspace=kb&path=%2Fb"
    assert all(n["data"]["change"] is None for n in answer["elements"]["nodes"])
    edge = next(e["data"] for e in answer["elements"]["edges"] if e["data"]["target"] == "kb:/b"
                and e["data"]["source"] == "kb:/a")
    assert edge["weight"] == 0.9 and edge["width"] == edge_width(0.9) == 6.4
    assert edge["colour"] == type_colour("cites")
    assert answer["legend"] == [{"type": t, "colour": type_colour(t)} for t in ("cites", "mentions")]


def test_two_hops_reach_the_second_ring(console):
    seed_graph(console)
    nodes, edges = ids(elements(console, hops=2))
    assert nodes == {"kb:/a", "kb:/b", "kb:/c", "kb:/d", "secret:/s"}
    assert edges == {("kb:/a", "cites", "kb:/b"), ("kb:/a", "mentions", "kb:/c"), ("kb:/c", "cites", "kb:/b"),
                     ("kb:/a", "cites", "secret:/s"), ("kb:/b", "supports", "kb:/d")}
    nodes, _ = ids(elements(console, hops=3))
    assert "kb:/e" in nodes


def test_the_per_node_cap_truncates_and_the_page_shows_the_badge(console):
    seed_graph(console)
    answer = elements(console, hops=1, cap=1)
    nodes, edges = ids(answer)
    assert answer["truncated"] is True
    assert nodes == {"kb:/a", "kb:/b"}  # the heaviest edge first
    assert edges == {("kb:/a", "cites", "kb:/b")}
    page = console.get("/ui/r/acme/graph", params={"workspace": "kb", "path": "/a", "hops": 1, "cap": 1})
    assert page.status_code == 200
    assert re.search(r'<span class="badge truncated"[^>]*>truncated</span>', page.text)
    assert '<div id="graph"' in page.text and "/ui/static/graph.js" in page.text
    assert "/ui/static/vendor/cytoscape.min.js" in page.text
    full = console.get("/ui/r/acme/graph", params={"workspace": "kb", "path": "/a", "hops": 1, "cap": 10})
    assert 'class="badge truncated"' not in full.text


def test_what_the_branch_wrote_is_flagged_against_its_parent(console):
    seed_graph(console)
    answer = elements(console, hops=1, branch="agent/x")
    assert answer["parent"] == "main" and answer["branch"] == "agent/x"
    change = {n["data"]["id"]: n["data"]["change"] for n in answer["elements"]["nodes"]}
    assert change == {"kb:/a": None, "kb:/b": "changed", "kb:/c": None, "kb:/f": "added", "secret:/s": None}
    edges = {(e["data"]["source"], e["data"]["type"], e["data"]["target"]): e for e in answer["elements"]["edges"]}
    assert {k: e["data"]["change"] for k, e in edges.items()} == {
        ("kb:/a", "cites", "kb:/b"): None, ("kb:/a", "mentions", "kb:/c"): "changed",
        ("kb:/c", "cites", "kb:/b"): None, ("kb:/a", "cites", "secret:/s"): None,
        ("kb:/a", "cites", "kb:/f"): "added"}
    assert edges[("kb:/a", "cites", "kb:/f")]["classes"] == "added"
    assert edges[("kb:/a", "mentions", "kb:/c")]["data"]["weight"] == 0.7
    f = next(n for n in answer["elements"]["nodes"] if n["data"]["id"] == "kb:/f")
    assert f["classes"] == "added"
    assert f["data"]["href"] == "/ui/r/acme/node?branch=agent%2Fx&workspace=kb&path=%2Ff"
    page = console.get("/ui/r/acme/graph", params={"workspace": "kb", "path": "/a", "branch": "agent/x"})
    assert page.status_code == 200
    assert "only on agent/x (added)" in page.text and "against its parent <strong>main</strong>" in page.text
    # main itself has no parent: nothing flagged, and f is not there
    nodes, _ = ids(elements(console, hops=1))
    assert "kb:/f" not in nodes


def test_the_library_function_flags_the_same_as_the_page(console):
    seed_graph(console)
    from kg.context import OPERATOR

    drawn = neighborhood(console.services, OPERATOR, "acme", "agent/x", ["kb:/a"], hops=1, fan_out=50)
    assert {(n["path"], n["change"]) for n in drawn["nodes"]} == {
        ("/a", None), ("/b", "changed"), ("/c", None), ("/f", "added"), ("/s", None)}
    assert [(e["from"], e["type"], e["to"]) for e in drawn["edges"]] == sorted(
        (e["from"], e["type"], e["to"]) for e in drawn["edges"])


def test_a_workspace_restricted_key_sees_only_what_it_may_read(console):
    seed_graph(console)
    reader = new_key(console.services, "kb-reader", {"repo": "acme", "workspaces": ["kb"], "actions": ["read"]})
    console.sign_in(reader)
    answer = elements(console, hops=2)
    nodes, edges = ids(answer)
    assert nodes == {"kb:/a", "kb:/b", "kb:/c", "kb:/d"}
    assert all("secret" not in s and "secret" not in t for s, _, t in edges)
    assert len(edges) == 4
    page = console.get("/ui/r/acme/graph", params={"workspace": "kb", "path": "/a", "hops": 2})
    assert page.status_code == 200 and "secret:/s" not in page.text and "Secret" not in page.text
    # starting inside the workspace it may not read is not found, as in the API
    r = console.get("/ui/r/acme/graph", params={"workspace": "secret", "path": "/s"})
    assert r.status_code == 404 and r.headers["content-type"].startswith("text/html")


def test_titles_are_escaped_in_the_page(console):
    seed_graph(console)
    _node(console, "kb", "/b", "<script>alert(1)</script>")
    page = console.get("/ui/r/acme/graph", params={"workspace": "kb", "path": "/a"})
    assert page.status_code == 200
    assert "<script>alert(1)</script>" not in page.text
    data = re.search(r'<script type="application/json" id="graph-data">(.*?)</script>', page.text, re.S)
    assert data is not None
    embedded = json.loads(data.group(1))
    assert any(n["data"]["label"] == "<script>alert(1)</script>" for n in embedded["elements"]["nodes"])


def test_without_a_path_the_page_offers_the_start_form(console):
    seed_graph(console)
    r = console.get("/ui/r/acme/graph")
    assert r.status_code == 200
    assert 'id="graph-form"' in r.text and '<option value="secret"' in r.text
    assert '<div id="graph"' not in r.text


def test_bad_parameters_are_422_html_and_unknown_nodes_404(console):
    seed_graph(console)
    for params, message in (({"hops": "4"}, "hops must be an integer between 1 and 3"),
                            ({"hops": "x"}, "hops must be an integer between 1 and 3"),
                            ({"cap": "0"}, "cap must be an integer between 1 and 200")):
        r = console.get("/ui/r/acme/graph", params={"workspace": "kb", "path": "/a", **params})
        assert r.status_code == 422, (params, r.text)
        assert r.headers["content-type"].startswith("text/html") and message in r.text
        r = console.get("/ui/r/acme/graph/elements", params={"workspace": "kb", "path": "/a", **params})
        assert r.status_code == 422
    r = console.get("/ui/r/acme/graph/elements", params={"workspace": "kb", "path": "/a\x00"})
    assert r.status_code == 422 and "NUL" in r.text
    r = console.get("/ui/r/acme/graph", params={"workspace": "kb", "path": "/nope"})
    assert r.status_code == 404 and "text/html" in r.headers["content-type"]
    r = console.get("/ui/r/acme/graph", params={"workspace": "kb", "path": "/a", "branch": "nope"})
    assert r.status_code == 404


def test_the_library_function_follows_and_returns_only_the_types_asked(console):
    seed_graph(console)
    from kg.context import OPERATOR

    drawn = neighborhood(console.services, OPERATOR, "acme", "main", ["kb:/a"], hops=2, types=["cites"])
    # c at hop 2 (c -cites-> b, followed backwards), not at hop 1 by "mentions"; d only by "supports"
    assert [(n["path"], n["hop"]) for n in drawn["nodes"]] == [("/a", 0), ("/b", 1), ("/s", 1), ("/c", 2)]
    assert [(e["from"], e["to"]) for e in drawn["edges"]] == [("kb:/a", "kb:/b"), ("kb:/a", "secret:/s"),
                                                             ("kb:/c", "kb:/b")]
    assert drawn["parent"] is None and drawn["truncated"] is False
    seed_only = neighborhood(console.services, OPERATOR, "acme", "main", ["kb:/a"], hops=0)
    assert [n["path"] for n in seed_only["nodes"]] == ["/a"] and seed_only["edges"] == []
    assert seed_only["nodes"][0]["title"] == "Doc A" and seed_only["nodes"][0]["node_type"] == "kb:Doc"


def test_the_graph_draws_current_relations_and_with_invalid_the_others_dotted(console):
    """A superseded relation is not walked nor drawn by default (issue 17: current facts);
    ``invalid=1`` draws it too, classed ``invalid`` with its validity, and counts it."""
    api = _api(console)
    assert console.http.post("/api/repos", json={"name": "acme"}, **api).status_code == 201
    assert console.http.post("/api/repos/acme/workspaces", json={"name": "kb"}, **api).status_code == 201
    for name in "abc":
        _node(console, "kb", f"/{name}", f"Doc {name.upper()}")
    _relate(console, "kb:/a", "kb:/b", "cites", 0.9)
    r = console.http.post("/api/repos/acme/relations", json={
        "from": "kb:/a", "to": "kb:/c", "type": "works_at", "valid_from": "2020-01-01T00:00:00Z",
        "valid_to": "2021-01-01T00:00:00Z"}, **api)
    assert r.status_code == 201, r.text
    now = elements(console)
    assert ids(now) == ({"kb:/a", "kb:/b"}, {("kb:/a", "cites", "kb:/b")})
    assert now["invalid"] == 0
    everything = elements(console, invalid="1")
    assert ids(everything)[1] == {("kb:/a", "cites", "kb:/b"), ("kb:/a", "works_at", "kb:/c")}
    edge = {e["data"]["type"]: e for e in everything["elements"]["edges"]}
    assert edge["works_at"]["classes"] == "invalid" and edge["cites"]["classes"] == ""
    assert (edge["works_at"]["data"]["valid_to"], edge["works_at"]["data"]["current"]) == (
        "2021-01-01T00:00:00+00:00", False)
    assert everything["invalid"] == 1
    page = console.get("/ui/r/acme/graph", params={"workspace": "kb", "path": "/a", "invalid": "1"})
    assert page.status_code == 200
    assert 'id="invalid" checked' in page.text and "not valid now (1)" in page.text
    assert "invalid=1" in re.search(r'data-elements-url="([^"]*)"', page.text).group(1)
    bad = console.get("/ui/r/acme/graph/elements", params={"workspace": "kb", "path": "/a", "invalid": "maybe"})
    assert bad.status_code == 422
