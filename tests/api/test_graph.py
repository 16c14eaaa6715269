"""The graph over HTTP on both databases: NEIGHBORS with limit and stable order, traverse with
its budgets (CASES #20), the networkx view kept current on writes, and references.

Most tests run twice per database: through the networkx view (``path="view"``) and through SQL
(``path="sql"``: a cache budget of 0 edges, so no branch gets a view); the answers must agree.
"""

from __future__ import annotations

import random
import threading
import uuid
from contextlib import contextmanager

import pytest
from sqlalchemy import event, insert

from kg.graph.cache import GraphCache
from kg.rag.graph import neighbors_of, traverse_from
from kg.store import relations as relation_store
from kg.store.models import NodeVersion, RelationVersion, utcnow
from kg.store.nodes import NodeWrite, put_node
from kg.store.paths import name_of, parent_of
from kg.store.repos import begin_write, branch_view
from tests.api.test_nodes import assert_error

API = "/api/repos/acme"


@pytest.fixture(params=["view", "sql"])
def path(request, services):
    """Which path answers graph reads: the networkx view, or SQL only."""
    if request.param == "sql":
        services.graphs = GraphCache(max_edges=0)
    return request.param


@pytest.fixture
def lib(client, repo):
    """A second workspace ``lib`` in ``acme``."""
    assert client.post(f"{API}/workspaces", json={"name": "lib"}).status_code == 201
    return "lib"


def node(client, address, props=None, branch="main"):
    ws, p = address.split(":", 1)
    r = client.put(f"{API}/workspaces/{ws}/nodes{p}", params={"branch": branch, "parents": "true"},
                   json={"node_type": "kg:Node", "properties": props or {}})
    assert r.status_code in (200, 201), r.text
    return r.json()


def rel(client, f, to, type="rel", weight=None, props=None, branch="main"):
    r = client.post(f"{API}/relations", params={"branch": branch},
                    json={"from": f, "to": to, "type": type, "weight": weight, "properties": props or {}})
    assert r.status_code in (200, 201), r.text
    return r.json()


def nb(client, address, **params):
    r = client.get(f"{API}/neighbors", params={"node": address, **params})
    assert r.status_code == 200, r.text
    return r.json()


def walk(client, seeds, branch="main", at_revision=None, **body):
    params = {"branch": branch} | ({"at_revision": at_revision} if at_revision is not None else {})
    r = client.post(f"{API}/traverse", params=params, json={"seeds": seeds, **body})
    assert r.status_code == 200, r.text
    return r.json()


def paths(answer):
    return [f"{n['workspace']}:{n['path']}" for n in answer["nodes"]]


def k(p):
    return f"knowledge:{p}"


@contextmanager
def statements(services):
    """Every SQL statement the block runs, as text."""
    seen: list[str] = []

    def record(conn, cursor, statement, parameters, context, executemany):
        seen.append(statement)

    event.listen(services.db.engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(services.db.engine, "before_cursor_execute", record)


def star(client, leaves=5):
    node(client, k("/c"))
    for i in range(leaves):
        node(client, k(f"/l{i}"))
        rel(client, k("/c"), k(f"/l{i}"))


# -- CASES #20 ------------------------------------------------------------------------------


def test_star_budget_three_truncated_six_complete(client, repo, path):
    star(client)
    cut = walk(client, [k("/c")], hops=1, max_nodes=3)
    assert paths(cut) == [k("/c"), k("/l0"), k("/l1")] and cut["truncated"] is True
    full = walk(client, [k("/c")], hops=1, max_nodes=6)
    assert paths(full) == [k("/c")] + [k(f"/l{i}") for i in range(5)] and full["truncated"] is False
    assert full["nodes"][0] | {"node_id": None} == {"workspace": "knowledge", "path": "/c", "node_id": None,
                                                    "hop": 0, "via": None, "weight": None, "from": None}
    assert {n["from"] for n in full["nodes"][1:]} == {k("/c")}
    assert {(n["hop"], n["via"]) for n in full["nodes"][1:]} == {(1, "rel")}


def test_cycle_with_ten_hops_no_duplicates_not_truncated(client, repo, path):
    node(client, k("/A"))
    node(client, k("/B"))
    rel(client, k("/A"), k("/B"))
    rel(client, k("/B"), k("/A"))
    for direction in ("OUT", "IN", "BOTH"):
        answer = walk(client, [k("/A")], hops=10, direction=direction)
        assert [(n["path"], n["hop"]) for n in answer["nodes"]] == [("/A", 0), ("/B", 1)]
        assert answer["truncated"] is False


def bulk_hub(services, n_edges: int) -> None:
    """``knowledge:/hub`` with ``n_edges`` out-edges to ``/leaves/l*`` (bulk inserts: set-up only).

    Leaf i's edge weighs ``(i * 7919) % n_edges``, a permutation: the heaviest 100 are known.
    """
    with services.db.write() as session:
        ctx = begin_write(session, "acme", "main", message="bulk hub")
        wid = next(w for w, name in ctx.view.workspaces.items() if name == "knowledge")
        now = utcnow()

        def row(p):
            return {"repo_id": ctx.repo.id, "branch_id": ctx.branch.id, "workspace_id": wid,
                    "revision": ctx.revision, "node_id": str(uuid.uuid4()), "path": p,
                    "parent_path": parent_of(p), "name": name_of(p), "node_type": "kg:Node",
                    "properties": {}, "order": None, "deleted": False, "content_key": None,
                    "created_at": now, "updated_at": now}

        hub, folder = row("/hub"), row("/leaves")
        leaves = [row(f"/leaves/l{i:06d}") for i in range(n_edges)]
        session.execute(insert(NodeVersion), [hub, folder, *leaves])
        session.execute(insert(RelationVersion), [
            {"repo_id": ctx.repo.id, "branch_id": ctx.branch.id, "revision": ctx.revision,
             "from_node_id": hub["node_id"], "to_node_id": leaf["node_id"], "rel_type": "has",
             "weight": float((i * 7919) % n_edges), "properties": {}, "deleted": False, "created_at": now,
             "from_address": "knowledge:/hub", "to_address": f"knowledge:{leaf['path']}"}
            for i, leaf in enumerate(leaves)
        ])


def test_hub_with_100000_edges_neighbors_limit_100_stops_early(client, repo, services):
    n = 100_000
    bulk_hub(services, n)
    with statements(services) as sql:
        answer = nb(client, k("/hub"), limit=100)
    assert len(answer["neighbors"]) == 100 and answer["truncated"] is True
    assert [row["weight"] for row in answer["neighbors"]] == [float(n - 1 - i) for i in range(100)]
    assert {row["direction"] for row in answer["neighbors"]} == {"OUT"}
    # Early stop: no graph was materialised, and every statement that read relations was cut
    # by a LIMIT in the database (a full load, a view build or visible_relations has none).
    assert len(services.graphs) == 0 and services.graphs.edges_held == 0
    reads = [s for s in sql if "relation_versions" in s]
    assert reads and all("LIMIT" in s.upper() for s in reads), reads
    # With the hub's view built (a traverse builds it), NEIGHBORS reads no SQL about relations
    # at all, and answers the same.
    hop = walk(client, [k("/hub")], hops=1, max_nodes=200, fan_out=1000)
    assert len(hop["nodes"]) == 200 and hop["truncated"] is True
    services.graphs.join_builds()  # a branch this large is built in the background
    assert len(services.graphs) == 1 and services.graphs.edges_held == n
    with statements(services) as sql:
        warm = nb(client, k("/hub"), limit=100)
    assert warm == answer
    assert not [s for s in sql if "relation_versions" in s]
    assert nb(client, k("/hub"), limit=10_000)["neighbors"][-1]["weight"] == float(n - 10_000)


# -- NEIGHBORS ------------------------------------------------------------------------------


def test_neighbors_stable_order_properties_and_cross_workspace(client, repo, lib, path, services):
    for p in ("/n", "/a", "/b", "/c"):
        node(client, k(p))
    node(client, "lib:/a")
    rel(client, k("/n"), k("/b"), "t2")
    rel(client, k("/n"), k("/b"), "t1")
    rel(client, k("/b"), k("/n"), "t1")
    rel(client, k("/n"), k("/a"), "t9", weight=0.5, props={"since": 2020})
    rel(client, k("/n"), k("/c"), "t0", weight=3.0)
    rel(client, "lib:/a", k("/n"), "cites", weight=0.5)
    answer = nb(client, k("/n"))
    got = [(f"{r['workspace']}:{r['path']}", r["relation_type"], r["weight"], r["direction"])
           for r in answer["neighbors"]]
    assert got == [
        (k("/c"), "t0", 3.0, "OUT"),
        (k("/a"), "t9", 0.5, "OUT"),          # 'knowledge:/a' < 'lib:/a'
        ("lib:/a", "cites", 0.5, "IN"),
        (k("/b"), "t1", None, "IN"),
        (k("/b"), "t1", None, "OUT"),
        (k("/b"), "t2", None, "OUT"),
    ]
    assert answer["truncated"] is False
    assert answer["neighbors"][1]["properties"] == {"since": 2020}
    assert answer["neighbors"][0]["properties"] == {}
    first = nb(client, k("/n"), limit=2)
    assert first["neighbors"] == answer["neighbors"][:2] and first["truncated"] is True
    assert nb(client, k("/n"), limit=6)["truncated"] is False
    assert [r["path"] for r in nb(client, k("/n"), direction="IN")["neighbors"]] == ["/a", "/b"]
    assert [r["relation_type"] for r in nb(client, k("/n"), type="t1,t2")["neighbors"]] == ["t1", "t1", "t2"]
    back = nb(client, "lib:/a")["neighbors"]
    assert [(r["workspace"], r["path"], r["direction"]) for r in back] == [("knowledge", "/n", "OUT")]
    # traverse crosses workspaces too
    assert "lib:/a" in paths(walk(client, [k("/c")], hops=2))
    # the walk built the view (path "view"): NEIGHBORS now reads it, in and out merged with the
    # same ties (equal weights, then address, type, direction) and the same cuts as SQL
    assert len(services.graphs) == (1 if path == "view" else 0)
    assert nb(client, k("/n")) == answer and nb(client, k("/n"), limit=2) == first
    for limit in (1, 3, 4, 5):
        cut = nb(client, k("/n"), limit=limit)
        assert cut["neighbors"] == answer["neighbors"][:limit] and cut["truncated"] is (limit < 6)


def test_neighbors_validation(client, repo):
    node(client, k("/n"))
    for params in ({"limit": 0}, {"limit": 10_001}, {"direction": "UP"}, {"type": "bad type"}):
        assert_error(client.get(f"{API}/neighbors", params={"node": k("/n"), **params}), 422)
    assert_error(client.get(f"{API}/neighbors", params={"node": k("/nope")}), 404)
    assert_error(client.get(f"{API}/neighbors", params={"node": "nope:/n"}), 404)
    assert_error(client.get(f"{API}/neighbors", params={"node": "knowledge:n"}), 422)
    assert nb(client, k("/n")) == {"neighbors": [], "truncated": False}


# -- traverse -------------------------------------------------------------------------------


def test_traverse_fan_out_and_hop_via_weight_from(client, repo, path):
    star(client)
    node(client, k("/far"))
    rel(client, k("/l4"), k("/far"), "next", weight=2.0)
    cut = walk(client, [k("/c")], hops=2, fan_out=2)
    assert paths(cut) == [k("/c"), k("/l0"), k("/l1")] and cut["truncated"] is True
    full = walk(client, [k("/c")], hops=2, fan_out=5)
    assert full["truncated"] is False
    assert full["nodes"][-1] | {"node_id": None} == {"workspace": "knowledge", "path": "/far", "node_id": None,
                                                     "hop": 2, "via": "next", "weight": 2.0, "from": k("/l4")}
    assert walk(client, [k("/c")], hops=1, types=["next"])["nodes"] == full["nodes"][:1]
    inbound = walk(client, [k("/far")], hops=2, direction="IN")
    assert paths(inbound) == [k("/far"), k("/l4"), k("/c")]
    two_seeds = walk(client, [k("/far"), k("/c"), k("/far")], hops=1, direction="BOTH")
    assert [(n["path"], n["hop"]) for n in two_seeds["nodes"][:3]] == [("/far", 0), ("/c", 0), ("/l4", 1)]


def test_traverse_is_deterministic_and_the_view_and_sql_agree(client, repo, services):
    rng = random.Random(7)
    names = [f"/n{i:02d}" for i in range(30)]
    for p in names:
        node(client, k(p))
    for _ in range(90):
        f, to = rng.sample(names, 2)
        rel(client, k(f), k(to), rng.choice(["a", "b"]), weight=rng.choice([None, 1.0, 2.0]))
    asks = [dict(hops=h, max_nodes=m, fan_out=f, direction=d)
            for h in (1, 2, 3) for m in (5, 200) for f in (2, 50) for d in ("OUT", "BOTH")]
    by_view = [walk(client, [k("/n00"), k("/n07")], **a) for a in asks]
    assert len(services.graphs) == 1
    assert by_view == [walk(client, [k("/n00"), k("/n07")], **a) for a in asks]
    view_nb = [nb(client, k(p), limit=3) for p in names]
    services.graphs = GraphCache(max_edges=0)
    assert by_view == [walk(client, [k("/n00"), k("/n07")], **a) for a in asks]
    assert view_nb == [nb(client, k(p), limit=3) for p in names]
    assert len(services.graphs) == 0


def test_traverse_validation(client, repo):
    node(client, k("/a"))
    bad = [{"hops": 11}, {"hops": -1}, {"max_nodes": 0}, {"max_nodes": 10_001}, {"fan_out": 0},
           {"fan_out": 10_001}, {"direction": "UP"}, {"types": []}, {"types": ["bad type"]},
           {"seeds": []}, {"seeds": ["knowledge:a"]}, {"seeds": ["no-workspace"]}, {"extra": 1}]
    for body in bad:
        r = client.post(f"{API}/traverse", json={"seeds": [k("/a")], **body})
        assert_error(r, 422)
    assert_error(client.post(f"{API}/traverse", json={"seeds": [k("/a"), k("/nope")]}), 404)
    assert_error(client.post(f"{API}/traverse", json={"seeds": ["nope:/a"]}), 404)
    assert_error(client.post(f"{API}/traverse", params={"branch": "nope"}, json={"seeds": [k("/a")]}), 404)
    lonely = walk(client, [k("/a")], hops=3)
    assert paths(lonely) == [k("/a")] and lonely["truncated"] is False


# -- the view: kept current on writes, branches, time travel ------------------------------


def test_view_is_brought_forward_on_writes_not_rebuilt(client, repo, services):
    star(client, 3)
    assert paths(walk(client, [k("/c")], hops=1)) == [k("/c"), k("/l0"), k("/l1"), k("/l2")]
    (key,) = list(services.graphs._views)
    view = services.graphs.get(key)
    built_at = view.revision
    node(client, k("/new"))
    rel(client, k("/c"), k("/new"), weight=5.0)                       # a new node and edge
    client.delete(f"{API}/workspaces/knowledge/nodes/l1")           # a deleted node
    client.delete(f"{API}/relations", params={"from": k("/c"), "to": k("/l2"), "type": "rel"})
    rel(client, k("/c"), k("/l0"), weight=9.0)                        # a re-weighted edge
    with statements(services) as sql:
        answer = walk(client, [k("/c")], hops=1)
    assert paths(answer) == [k("/c"), k("/l0"), k("/new")]
    assert services.graphs.get(key) is view and view.revision > built_at
    # brought forward from the versions since its revision: no whole-branch read
    assert not [s for s in sql if "row_number" in s.lower() and "relation_versions" in s]
    node(client, k("/l1"))                                            # same path, new node: no old edge
    assert paths(walk(client, [k("/c")], hops=1)) == [k("/c"), k("/l0"), k("/new")]
    assert [r["path"] for r in nb(client, k("/c"))["neighbors"]] == ["/l0", "/new"]


def test_a_read_at_the_views_revision_is_one_hit_and_a_write_is_brought_forward(client, repo, services):
    star(client, 3)
    rel(client, k("/l1"), k("/c"), weight=2.0)
    walk(client, [k("/c")], hops=1)  # builds the view
    (key,) = list(services.graphs._views)
    view = services.graphs.get(key)
    hits, misses = services.graphs.hits, services.graphs.misses
    top = nb(client, k("/c"), limit=2)
    walked = walk(client, [k("/c")], hops=2, max_nodes=3)
    assert (services.graphs.hits, services.graphs.misses) == (hits + 2, misses)  # one lookup a read
    assert [r["path"] for r in top["neighbors"]] == ["/l1", "/l0"] and top["truncated"] is True
    assert paths(walked) == [k("/c"), k("/l1"), k("/l0")] and walked["truncated"] is True
    assert [n["from"] for n in walked["nodes"]] == [None, k("/c"), k("/c")]
    before = view.revision
    rel(client, k("/c"), k("/l2"), weight=7.0)  # the view is behind the next read: brought forward
    top = nb(client, k("/c"), limit=2)
    walked = walk(client, [k("/c")], hops=2, max_nodes=3)
    assert services.graphs.get(key) is view and view.revision > before
    assert [r["path"] for r in top["neighbors"]] == ["/l2", "/l1"]
    assert paths(walked) == [k("/c"), k("/l2"), k("/l1")]
    services.graphs = GraphCache(max_edges=0)  # SQL answers the same
    assert nb(client, k("/c"), limit=2) == top and walk(client, [k("/c")], hops=2, max_nodes=3) == walked


def test_traverse_and_neighbors_are_branch_isolated(client, repo, path):
    star(client, 2)
    walk(client, [k("/c")], hops=1)  # main's view exists before the branch writes
    assert client.post(f"{API}/branches", json={"name": "agent/x"}).status_code == 201
    node(client, k("/only-on-branch"), branch="agent/x")
    rel(client, k("/c"), k("/only-on-branch"), weight=1.0, branch="agent/x")
    client.delete(f"{API}/workspaces/knowledge/nodes/l0", params={"branch": "agent/x"})
    on_branch = walk(client, [k("/c")], branch="agent/x", hops=1)
    assert paths(on_branch) == [k("/c"), k("/only-on-branch"), k("/l1")]
    on_main = walk(client, [k("/c")], hops=1)
    assert paths(on_main) == [k("/c"), k("/l0"), k("/l1")]
    assert [r["path"] for r in nb(client, k("/c"), branch="agent/x")["neighbors"]] == ["/only-on-branch", "/l1"]
    assert [r["path"] for r in nb(client, k("/c"))["neighbors"]] == ["/l0", "/l1"]
    # main moves on after the fork: the branch does not see it
    node(client, k("/main-later"))
    rel(client, k("/c"), k("/main-later"))
    assert k("/main-later") not in paths(walk(client, [k("/c")], branch="agent/x", hops=1))
    assert k("/main-later") in paths(walk(client, [k("/c")], hops=1))
    # a reset re-forks the branch: its graph is main's head again
    assert client.post(f"{API}/branches/agent/x/reset").status_code == 200
    assert paths(walk(client, [k("/c")], branch="agent/x", hops=1)) == paths(walk(client, [k("/c")], hops=1))


def test_time_travel_behind_the_view_reads_sql(client, repo, services):
    star(client, 2)
    before = rel(client, k("/c"), k("/l1"), weight=1.0)["revision"]
    walk(client, [k("/c")], hops=1)
    client.delete(f"{API}/workspaces/knowledge/nodes/l1")
    now = walk(client, [k("/c")], hops=1)
    assert paths(now) == [k("/c"), k("/l0")]
    then = walk(client, [k("/c")], at_revision=before, hops=1)
    assert paths(then) == [k("/c"), k("/l1"), k("/l0")]
    old_nb = client.get(f"{API}/neighbors", params={"node": k("/c"), "at_revision": before}).json()
    assert [r["path"] for r in old_nb["neighbors"]] == ["/l1", "/l0"]
    assert walk(client, [k("/c")], hops=1) == now


def test_deleted_node_hides_its_edges_and_references(client, repo, path):
    node(client, k("/target"))
    node(client, k("/src"), {"about": {"kg:ref": "/target"}})
    node(client, k("/other"))
    rel(client, k("/src"), k("/target"))
    rel(client, k("/other"), k("/src"))
    assert len(client.get(f"{API}/references", params={"target": k("/target")}).json()["references"]) == 1
    walk(client, [k("/target")], hops=2)
    client.delete(f"{API}/workspaces/knowledge/nodes/src")
    assert nb(client, k("/target"))["neighbors"] == []
    assert paths(walk(client, [k("/other")], hops=3, direction="BOTH")) == [k("/other")]
    assert client.get(f"{API}/references", params={"target": k("/target")}).json() == {"references": [],
                                                                                  "truncated": False}


# -- references -----------------------------------------------------------------------------


def refs(client, target, **params):
    r = client.get(f"{API}/references", params={"target": target, **params})
    assert r.status_code == 200, r.text
    return r.json()


def test_references_top_level_and_in_lists(client, repo, lib):
    node(client, "lib:/people/dana")
    a = node(client, k("/a"), {"author": {"kg:ref": "/people/dana", "kg:workspace": "lib"},
                               "title": "A", "deep": {"x": {"kg:ref": "/people/dana", "kg:workspace": "lib"}}})
    node(client, k("/b"), {"sources": [{"kg:ref": "/people/dana", "kg:workspace": "lib", "note": "p. 4"},
                                       "plain", {"kg:ref": "/a"}]})
    node(client, "lib:/c", {"hero": {"kg:ref": "/people/dana"}})  # no workspace: the node's own
    answer = refs(client, "lib:/people/dana")
    assert [(r["workspace"], r["path"], r["property_key"]) for r in answer["references"]] == [
        ("knowledge", "/a", "author"), ("knowledge", "/b", "sources"), ("lib", "/c", "hero")]
    assert answer["truncated"] is False
    first = answer["references"][0]
    assert first["id"] == a["id"] and first["properties"]["title"] == "A" and first["node_type"] == "kg:Node"
    assert [r["path"] for r in refs(client, k("/a"))["references"]] == ["/b"]
    assert refs(client, "lib:/people/dana", limit=2)["truncated"] is True
    # a reference to a node that does not exist is still listed (references are by address)
    node(client, k("/d"), {"link": {"kg:ref": "/nowhere"}})
    assert [r["path"] for r in refs(client, k("/nowhere"))["references"]] == ["/d"]
    # replacing the properties drops the old reference; PATCH keeps the rest
    node(client, k("/a"), {"title": "A2"})
    assert [r["path"] for r in refs(client, "lib:/people/dana")["references"]] == ["/b", "/c"]
    r = client.patch(f"{API}/workspaces/knowledge/nodes/a",
                     json={"properties": {"editor": {"kg:ref": "/people/dana", "kg:workspace": "lib"}}})
    assert r.status_code == 200, r.text
    assert [(r["path"], r["property_key"])
            for r in refs(client, "lib:/people/dana")["references"]][0] == ("/a", "editor")


def test_malformed_reference_is_refused_and_writes_nothing(client, repo):
    for bad in ({"kg:ref": "no-slash"}, {"kg:ref": 5}, {"kg:ref": "/a", "kg:workspace": "bad name"},
                [{"kg:ref": "/a/../b"}]):
        r = client.put(f"{API}/workspaces/knowledge/nodes/x", json={"properties": {"p": bad}})
        assert_error(r, 422)
        assert client.get(f"{API}/workspaces/knowledge/nodes/x").status_code == 404


def test_references_validation(client, repo):
    assert_error(client.get(f"{API}/references", params={"target": "knowledge"}), 422)
    assert_error(client.get(f"{API}/references", params={"target": "nope:/a"}), 404)
    assert_error(client.get(f"{API}/references", params={"target": k("/a"), "limit": 0}), 422)
    assert_error(client.get(f"{API}/references", params={"target": k("/a"), "branch": "nope"}), 404)
    assert_error(client.get("/api/repos/nope/references", params={"target": k("/a")}), 404)


def test_references_are_branch_isolated_and_time_travel(client, repo):
    node(client, k("/t"))
    first = node(client, k("/main-src"), {"r": {"kg:ref": "/t"}})["revision"]
    assert client.post(f"{API}/branches", json={"name": "b"}).status_code == 201
    node(client, k("/branch-src"), {"r": {"kg:ref": "/t"}}, branch="b")
    node(client, k("/main-src"), {"r": "gone"}, branch="b")
    assert [r["path"] for r in refs(client, k("/t"))["references"]] == ["/main-src"]
    assert [r["path"] for r in refs(client, k("/t"), branch="b")["references"]] == ["/branch-src"]
    node(client, k("/main-src"), {"r": "gone on main too"})
    assert refs(client, k("/t"))["references"] == []
    assert [r["path"] for r in refs(client, k("/t"), at_revision=first)["references"]] == ["/main-src"]
    assert refs(client, k("/t"), at_revision=first - 1)["references"] == []


def test_references_survive_a_merge(client, repo):
    """apply_merge writes node versions itself: it must index their references too."""
    node(client, k("/t"))
    assert client.post(f"{API}/branches", json={"name": "b"}).status_code == 201
    node(client, k("/src"), {"r": {"kg:ref": "/t"}}, branch="b")
    assert client.post(f"{API}/branches/b/merge", json={"into": "main"}).status_code == 200
    assert [r["path"] for r in refs(client, k("/t"))["references"]] == ["/src"]


def test_view_under_concurrent_reads_and_writes_matches_sql(client, repo, services):
    """Readers in threads walk the view while a writer adds edges: no error, and afterwards the
    view answers exactly what SQL answers."""
    star(client, 4)
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader():
        try:
            while not stop.is_set():
                with services.db.read() as session:
                    view = branch_view(session, "acme")
                    answer = traverse_from(session, services, view, [k("/c")], hops=2)
                    assert answer["nodes"][0]["path"] == "/c"
                    neighbors_of(session, services, view, k("/c"), limit=3)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    readers = [threading.Thread(target=reader) for _ in range(3)]
    for t in readers:
        t.start()
    try:
        for i in range(12):
            with services.db.write() as session:
                ctx = begin_write(session, "acme", "main")
                put_node(session, ctx, "knowledge", f"/w{i}", NodeWrite("kg:Node", {}, None, None))
                relation_store.relate(session, ctx, k(f"/l{i % 4}"), k(f"/w{i}"), "grew", weight=float(i))
    finally:
        stop.set()
        for t in readers:
            t.join()
    assert not errors, errors
    by_view = walk(client, [k("/c")], hops=2, max_nodes=100)
    assert len(by_view["nodes"]) == 1 + 4 + 12
    services.graphs = GraphCache(max_edges=0)
    assert walk(client, [k("/c")], hops=2, max_nodes=100) == by_view
