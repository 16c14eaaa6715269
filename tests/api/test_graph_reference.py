"""NEIGHBORS and traverse over HTTP on both databases against a plain networkx reference.

A random graph over two workspaces (weight ties, self-loops, relation types, validity windows)
is written on ``main``; a branch then re-weights, removes and adds relations and deletes a
node. Each branch's answers, through the networkx view (brought forward after the first read)
and through SQL, must be those computed in the test from what was written: every edge around a
node filtered by direction, type and validity at a time, in the stable order (weight desc with
null last, the other node's address, type, ``IN`` before ``OUT``), cut at ``limit`` with
``truncated``; and walks as the breadth-first walk over that order, with their budgets.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime

import networkx as nx
import pytest

from kg.graph.cache import GraphCache
from kg.graph.neighbors import Neighbor
from kg.graph.traverse import traverse
from kg.graph.validity import valid_at

API = "/api/repos/acme"
PAST, MID, FUTURE = (datetime(2020, 1, 1, tzinfo=UTC), datetime(2022, 6, 1, tzinfo=UTC),
                     datetime(2999, 1, 1, tzinfo=UTC))
WINDOWS = [(None, None), (None, None), (PAST, None), (None, MID), (MID, FUTURE), (MID, None)]
TIMES = [PAST, datetime(2023, 1, 1, tzinfo=UTC), None]  # None: include_invalid


@pytest.fixture(params=["view", "sql"])
def path(request, services):
    """Which path answers graph reads: the networkx view, or SQL only."""
    if request.param == "sql":
        services.graphs = GraphCache(max_edges=0)
    return request.param


class Written:
    """What the test wrote on one branch: live node addresses and relations by (from, type, to)."""

    def __init__(self) -> None:
        self.nodes: set[str] = set()
        self.rels: dict[tuple[str, str, str], tuple[float | None, tuple]] = {}

    def copy(self) -> Written:
        other = Written()
        other.nodes, other.rels = set(self.nodes), dict(self.rels)
        return other

    def graph(self) -> nx.MultiDiGraph:
        g = nx.MultiDiGraph()
        g.add_nodes_from(self.nodes)
        for (f, t, to), (w, window) in self.rels.items():
            if f in self.nodes and to in self.nodes:
                g.add_edge(f, to, key=t, weight=w, window=window)
        return g


def reference(g: nx.MultiDiGraph, node: str, direction: str, types, at) -> list[tuple]:
    found = []
    for d, edges in (("OUT", g.out_edges), ("IN", g.in_edges)):
        if direction in (d, "BOTH"):
            for f, to, t, data in edges(node, keys=True, data=True):
                other = to if d == "OUT" else f
                if (types is None or t in types) and valid_at(*data["window"], at):
                    w = data["weight"]
                    found.append(((w is None, -w if w is not None else 0.0, other, t, d),
                                  (other, t, w, d, data["window"])))
    return [edge for _, edge in sorted(found)]


def iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def write_node(client, address: str, branch: str) -> None:
    ws, p = address.split(":", 1)
    r = client.put(f"{API}/workspaces/{ws}/nodes{p}", params={"branch": branch},
                   json={"node_type": "kg:Node", "properties": {}})
    assert r.status_code in (200, 201), r.text


def relate(client, written: Written, f: str, t: str, to: str, w, window, branch: str) -> None:
    body = {"from": f, "to": to, "type": t, "weight": w,
            **{k: iso(v) for k, v in zip(("valid_from", "valid_to"), window, strict=True) if v is not None}}
    r = client.post(f"{API}/relations", params={"branch": branch}, json=body)
    assert r.status_code in (200, 201), r.text
    written.rels[(f, t, to)] = (w, window)


def check(client, written: Written, branch: str, rng: random.Random) -> None:
    g = written.graph()
    for node in sorted(written.nodes):
        for direction in ("OUT", "IN", "BOTH"):
            for types in ([None, ["a"]] if node == min(written.nodes) else [rng.choice([None, ["a"]])]):
                at = rng.choice(TIMES)
                params = {"node": node, "branch": branch, "direction": direction, "limit": 3}
                params |= {"type": ",".join(types)} if types else {}
                params |= {"as_of": at.isoformat()} if at is not None else {"include_invalid": "true"}
                r = client.get(f"{API}/neighbors", params=params)
                assert r.status_code == 200, r.text
                want = reference(g, node, direction, types, at)
                got = r.json()
                assert [(f"{row['workspace']}:{row['path']}", row["relation_type"], row["weight"],
                         row["direction"], (row["valid_from"], row["valid_to"])) for row in got["neighbors"]] == \
                    [(o, t, w, d, (iso(vf), iso(vt))) for o, t, w, d, (vf, vt) in want[:3]], (node, params)
                assert got["truncated"] is (len(want) > 3)
                assert all(row["properties"] == {} for row in got["neighbors"])
    seeds = sorted(written.nodes)[:2]
    for direction in ("OUT", "BOTH"):
        for hops, max_nodes, fan_out in ((2, 200, 50), (3, 5, 2), (2, 200, 1)):
            at = datetime(2023, 1, 1, tzinfo=UTC)

            def lookup(n, d=direction, when=at):
                return [Neighbor(o, t, w, dd, {}) for o, t, w, dd, _ in reference(g, n, d, None, when)]

            want = traverse(seeds, lookup, hops=hops, max_nodes=max_nodes, fan_out=fan_out)
            r = client.post(f"{API}/traverse", params={"branch": branch},
                            json={"seeds": seeds, "hops": hops, "direction": direction, "max_nodes": max_nodes,
                                  "fan_out": fan_out, "as_of": at.isoformat()})
            assert r.status_code == 200, r.text
            got = r.json()
            assert [(f"{n['workspace']}:{n['path']}", n["hop"], n["via"], n["weight"], n["from"])
                    for n in got["nodes"]] == [(v.node_id, v.hop, v.via, v.weight, v.parent) for v in want.visits]
            assert got["truncated"] is want.truncated


@pytest.mark.parametrize("seed", [3, 11])
def test_neighbors_and_walks_match_the_networkx_reference_on_branches(client, repo, path, seed):
    rng = random.Random(seed)
    assert client.post(f"{API}/workspaces", json={"name": "lib"}).status_code == 201
    main = Written()
    for i in range(12):
        address = f"{rng.choice(['knowledge', 'lib'])}:/p{i:02d}"
        write_node(client, address, "main")
        main.nodes.add(address)
    nodes = sorted(main.nodes)
    for _ in range(40):
        f, to = rng.choice(nodes), rng.choice(nodes)  # self-loops too
        relate(client, main, f, rng.choice(["a", "b"]), to, rng.choice([None, 0.5, 1.0, 1.0, 2.0]),
               rng.choice(WINDOWS), "main")
    check(client, main, "main", rng)  # the view (path "view") is built here
    assert client.post(f"{API}/branches", json={"name": "agent/x"}).status_code == 201
    branch = main.copy()
    for key in rng.sample(sorted(branch.rels), 6):  # re-weighted on the branch
        relate(client, branch, key[0], key[1], key[2], rng.choice([None, 0.25, 3.0]), branch.rels[key][1],
               "agent/x")
    for f, t, to in rng.sample(sorted(branch.rels), 5):  # removed on the branch
        r = client.delete(f"{API}/relations", params={"from": f, "to": to, "type": t, "branch": "agent/x"})
        assert r.status_code == 200 and r.json()["deleted"] == 1, r.text
        del branch.rels[(f, t, to)]
    gone = nodes[5]
    ws, p = gone.split(":", 1)
    assert client.delete(f"{API}/workspaces/{ws}/nodes{p}", params={"branch": "agent/x"}).status_code == 200
    branch.nodes.discard(gone)
    write_node(client, "knowledge:/new", "agent/x")
    branch.nodes.add("knowledge:/new")
    for other in rng.sample(sorted(branch.nodes), 4):
        relate(client, branch, "knowledge:/new", "a", other, 1.0, (None, None), "agent/x")
    check(client, branch, "agent/x", rng)
    check(client, main, "main", rng)  # main is untouched by the branch
    relate(client, main, nodes[0], "b", nodes[1], 5.0, (None, None), "main")  # main's view brought forward
    check(client, main, "main", rng)
