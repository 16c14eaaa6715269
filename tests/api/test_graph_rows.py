"""NEIGHBORS rows made when read (:class:`kg.graph.rows.NeighborRows`) and walks answered from
columns (:func:`kg.graph.traverse.reach`), on both databases: each answer is, row for row, the
one the previous construction made (copied below as it was: a dict per edge built from the
view's edges, or from SQL's rows; the walk's ``Visit`` objects, then a pass for the addresses,
then the rows), on a 10,000-row hub answer with ties, null weights, properties, validity and
in-edges, on ``main`` and on a branch that overrides, deletes and adds relations and deletes a
node; through the view and through SQL, in the use case, over HTTP, MCP's tool and SQL's
NEIGHBORS.
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Hashable, Sequence
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import insert

from kg.context import OPERATOR
from kg.graph.cache import GraphCache
from kg.graph.neighbors import Edge
from kg.graph.rows import NeighborRows
from kg.graph.traverse import traverse
from kg.graph.validity import iso
from kg.graph.view import GraphView
from kg.rag.graph import neighbors, readable_names, view_key, walk
from kg.store import relations as relation_store
from kg.store.models import NodeVersion, RelationVersion, utcnow
from kg.store.nodes import get_node
from kg.store.paths import name_of, parent_of
from kg.store.repos import begin_write, branch_view

API = "/api/repos/acme"
N = 10_700  # more than 10,000 edges valid now (a 17th closed in 2023)
PAST, MID = datetime(2020, 1, 1, tzinfo=UTC), datetime(2023, 6, 1, tzinfo=UTC)
TIMES: list[tuple[datetime | None, bool]] = [(None, False), (datetime(2021, 1, 1, tzinfo=UTC), False),
                                             (None, True)]  # now, a past time, include_invalid


# -- the previous constructions, verbatim -----------------------------------------------------


def view_rows_before(graph: GraphView, node_id: str, found: Sequence[Edge]) -> list[dict[str, Any]]:
    """``kg.rag.graph._view_rows`` before NeighborRows."""
    address = graph.address
    if not graph.holds_validity:
        return [{"workspace": (where := address(other)).workspace, "path": where.path, "node_id": other,
                 "relation_type": rel_type, "weight": weight, "direction": d, "properties": properties or {},
                 "valid_from": None, "valid_to": None, "invalidated_by": None}
                for other, rel_type, weight, d, properties in found]
    times: dict[tuple[datetime, Any], str] = {}

    def text(value):
        if value is None:
            return None
        key = (value, value.tzinfo)
        found_text = times.get(key)
        if found_text is None:
            found_text = times[key] = value.isoformat()
        return found_text

    rows = []
    validity = graph.validity
    for other, rel_type, weight, d, properties in found:
        where = address(other)
        valid_from, valid_to, invalidated_by = (validity(node_id, rel_type, other) if d == "OUT"
                                                else validity(other, rel_type, node_id))
        rows.append({"workspace": where.workspace, "path": where.path, "node_id": other,
                     "relation_type": rel_type, "weight": weight, "direction": d, "properties": properties or {},
                     "valid_from": text(valid_from), "valid_to": text(valid_to), "invalidated_by": invalidated_by})
    return rows


def sql_rows_before(page) -> list[dict[str, Any]]:
    """The SQL path's rows before NeighborRows."""
    return [{"workspace": r.workspace, "path": r.path, "node_id": r.node_id, "relation_type": r.relation_type,
             "weight": r.weight, "direction": r.direction, "properties": r.properties,
             "valid_from": iso(r.valid_from), "valid_to": iso(r.valid_to), "invalidated_by": r.invalidated_by}
            for r in page]


def walk_answer_before(visits, truncated: bool, addresses: dict[Hashable, tuple[str, str]]) -> dict[str, Any]:
    """``traverse_from``'s answer before the walk answered columns: from ``Visit`` objects."""
    nodes = []
    for visit in visits:
        workspace, path = addresses[visit.node_id]
        parent = addresses[visit.parent] if visit.parent is not None else None
        nodes.append({"workspace": workspace, "path": path, "node_id": visit.node_id, "hop": visit.hop,
                      "via": visit.via, "weight": visit.weight,
                      "from": f"{parent[0]}:{parent[1]}" if parent is not None else None})
    return {"nodes": nodes, "truncated": truncated}


# -- the data -----------------------------------------------------------------------------------


def bulk_hub(services) -> None:
    """``knowledge:/hub``: N out-edges to ``/leaves/l*`` (weights with ties and nulls, some with
    properties, some with a validity) and an in-edge from every 50th leaf (bulk inserts, set-up only)."""
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

        def edge(f, to, rel_type, weight, i):
            return {"repo_id": ctx.repo.id, "branch_id": ctx.branch.id, "revision": ctx.revision,
                    "from_node_id": f["node_id"], "to_node_id": to["node_id"], "rel_type": rel_type,
                    "weight": weight, "properties": {"i": i} if i % 11 == 0 else {}, "deleted": False,
                    "created_at": now, "from_address": f"knowledge:{f['path']}",
                    "to_address": f"knowledge:{to['path']}",
                    "valid_from": PAST if i % 13 == 0 else None, "valid_to": MID if i % 17 == 0 else None,
                    "invalidated_by": "knowledge:/x|replaces|knowledge:/y" if i % 34 == 0 else None}

        hub, folder = row("/hub"), row("/leaves")
        leaves = [row(f"/leaves/l{i:06d}") for i in range(N)]
        session.execute(insert(NodeVersion), [hub, folder, *leaves])
        edges = [edge(hub, leaf, "has", None if i % 7 == 0 else float((i * 7919) % 1000), i)
                 for i, leaf in enumerate(leaves)]
        edges += [edge(leaf, hub, "cites", float(i % 5), i) for i, leaf in enumerate(leaves) if i % 50 == 0]
        session.execute(insert(RelationVersion), edges)


def branch_writes(client) -> None:
    """On ``agent``: re-weights, deletions, a deleted leaf, new edges with and without validity."""
    assert client.post(f"{API}/branches", json={"name": "agent"}).status_code == 201
    params = {"branch": "agent"}
    for i in (1, 2, 3, 14, 26):
        r = client.post(f"{API}/relations", params=params, json={
            "from": "knowledge:/hub", "to": f"knowledge:/leaves/l{i:06d}", "type": "has", "weight": 2000.0 + i})
        assert r.status_code == 200, r.text
    for i in (4, 5, 6):
        r = client.delete(f"{API}/relations", params={**params, "from": "knowledge:/hub",
                                                      "to": f"knowledge:/leaves/l{i:06d}", "type": "has"})
        assert r.status_code == 200 and r.json()["deleted"] == 1, r.text
    assert client.delete(f"{API}/workspaces/knowledge/nodes/leaves/l000008", params=params).status_code == 200
    for j, window in enumerate(({}, {"valid_from": "2019-03-01T10:00:00+00:00"},
                                {"valid_from": "2019-03-01T10:00:00+00:00", "valid_to": "2022-01-01T00:00:00+00:00"})):
        r = client.put(f"{API}/workspaces/knowledge/nodes/new{j}", params=params,
                       json={"node_type": "kg:Node", "properties": {}})
        assert r.status_code == 201, r.text
        r = client.post(f"{API}/relations", params=params, json={
            "from": "knowledge:/hub", "to": f"knowledge:/new{j}", "type": "has", "weight": 500.0,
            "properties": {"j": j}, **window})
        assert r.status_code == 201, r.text


def hold_view(services, client, branch: str) -> GraphView:
    """The branch's view, built by a walk (in the background for a branch this large)."""
    r = client.post(f"{API}/traverse", params={"branch": branch},
                    json={"seeds": ["knowledge:/hub"], "hops": 1, "max_nodes": 5, "fan_out": 5})
    assert r.status_code == 200, r.text
    services.graphs.join_builds()
    with services.db.read() as session:
        graph = services.graphs.get(view_key(branch_view(session, "acme", branch)))
    assert graph is not None
    return graph


def _sql_checked(services, as_of, include_invalid, direction, limit) -> bool:
    """Whether this case's answer is also read from SQL: every case on SQLite; on PostgreSQL, where a
    10,000-row NEIGHBORS from SQL takes seconds per call (its winners' probes), the short pages and
    one 10,000-row case (OUT, at a past time: validity filtered inside the SQL): the same SQL, fewer
    of its slowest calls."""
    return services.db.dialect == "sqlite" or limit != 10_000 or (direction == "OUT" and as_of is not None)


# -- the tests ----------------------------------------------------------------------------------


def test_a_10000_row_answer_is_the_previous_construction_row_for_row(client, repo, services):
    bulk_hub(services)
    branch_writes(client)
    for branch in ("main", "agent"):
        graph = hold_view(services, client, branch)
        by_view = {}
        for as_of, include_invalid in TIMES:
            for direction, limit in (("BOTH", 10_000), ("OUT", 10_000), ("IN", 10_000), ("BOTH", 7)):
                answer = neighbors(services, OPERATOR, "acme", branch, "knowledge:/hub", direction=direction,
                                   limit=limit, as_of=as_of, include_invalid=include_invalid)
                by_view[(as_of, include_invalid, direction, limit)] = answer
                rows = answer["neighbors"]
                assert isinstance(rows, NeighborRows)
                at = None if include_invalid else (as_of or datetime.now(UTC))
                with services.db.read() as session:
                    view = branch_view(session, "acme", branch)
                    hub = get_node(session, view, "knowledge", "/hub").node_id
                    with graph.lock:
                        found, more = graph.edges(hub, direction=direction, limit=limit,
                                                  workspaces=readable_names(view), at=at)
                        before = view_rows_before(graph, hub, found)
                    sql = _sql_checked(services, as_of, include_invalid, direction, limit)
                    page = relation_store.list_neighbors(session, view, hub, direction=direction, limit=limit + 1,
                                                         at=at) if sql else None
                assert answer["truncated"] is more
                assert len(rows) == len(before) and list(rows) == before and rows == before and before == rows
                if page is not None:
                    assert sql_rows_before(page[:limit]) == before and (len(page) > limit) is more
                if direction != "BOTH" or limit != 10_000:
                    continue
                assert len(rows) == 10_000 and more
                valid = [r for r in rows if r["valid_from"] is not None or r["valid_to"] is not None]
                assert valid and all(isinstance(r[k], str) for r in valid for k in ("valid_from", "valid_to")
                                     if r[k] is not None)
                assert {r["valid_from"] for r in valid} <= {None, PAST.isoformat(), "2019-03-01T10:00:00+00:00"}
                assert any(r["invalidated_by"] for r in rows) is (include_invalid or as_of is not None)
                assert any(r["properties"] for r in rows) and all(isinstance(r["properties"], dict) for r in rows)
                params: dict[str, Any] = {"node": "knowledge:/hub", "branch": branch, "limit": limit}
                params |= {"as_of": as_of.isoformat()} if as_of else {}
                params |= {"include_invalid": "true"} if include_invalid else {}
                r = client.get(f"{API}/neighbors", params=params)
                assert r.status_code == 200 and r.json() == {"neighbors": before, "truncated": more}
        held, services.graphs = services.graphs, GraphCache(max_edges=0)  # no view: SQL answers
        for (as_of, include_invalid, direction, limit), answer in by_view.items():
            if as_of is None and not include_invalid:
                continue  # now moved on since: a relation valid then may have closed
            if not _sql_checked(services, as_of, include_invalid, direction, limit):
                continue
            from_sql = neighbors(services, OPERATOR, "acme", branch, "knowledge:/hub", direction=direction,
                                 limit=limit, as_of=as_of, include_invalid=include_invalid)
            assert isinstance(from_sql["neighbors"], NeighborRows)
            assert from_sql == answer and answer == from_sql
        assert len(services.graphs) == 0
        services.graphs = held
    # the branch's overrides: re-weighted on top, deleted edges and the deleted leaf gone
    top = neighbors(services, OPERATOR, "acme", "agent", "knowledge:/hub", direction="OUT", limit=8,
                    include_invalid=True)["neighbors"]
    assert [(r["path"], r["weight"]) for r in top[:5]] == [(f"/leaves/l{i:06d}", 2000.0 + i) for i in (26, 14, 3, 2, 1)]
    every = neighbors(services, OPERATOR, "acme", "agent", "knowledge:/hub", limit=10_000,
                      include_invalid=True)["neighbors"]
    assert not {f"/leaves/l{i:06d}" for i in (4, 5, 6, 8)} & {r["path"] for r in every}
    assert [(r["path"], r["valid_from"], r["properties"]) for r in every if r["path"].startswith("/new")] == [
        ("/new0", None, {"j": 0}), ("/new1", "2019-03-01T10:00:00+00:00", {"j": 1}),
        ("/new2", "2019-03-01T10:00:00+00:00", {"j": 2})]


def test_rows_made_when_read_are_each_a_new_dict(client, repo, services):
    bulk_hub(services)
    hold_view(services, client, "main")
    rows = neighbors(services, OPERATOR, "acme", "main", "knowledge:/hub", limit=10_000,
                     include_invalid=True)["neighbors"]
    first = rows[0]
    first["weight"] = -1.0
    first["properties"]["changed"] = True  # an edge without properties: the row's own empty dict
    assert rows[0]["weight"] != -1.0 and rows[0]["properties"] == {}
    assert rows[-1] == rows[len(rows) - 1] and rows[2:5] == list(rows)[2:5]
    with pytest.raises(IndexError):
        rows[len(rows)]
    # serialisers read the same rows: JSON of the list, SQL's NEIGHBORS
    assert json.loads(json.dumps(list(rows))) == list(rows)
    r = client.post("/api/sql/acme/main", json={"sql": "SELECT path, weight FROM NEIGHBORS('knowledge:/hub') LIMIT 3"})
    assert r.status_code == 200, r.text
    assert r.json()["results"][0]["rows"] == [[x["path"], x["weight"]] for x in list(rows)[:3]]


@pytest.mark.parametrize("seed", [1, 2])
def test_walks_answer_as_the_previous_construction(client, repo, services, seed):
    """Random graphs with ties and self-loops on a branch with overrides and a deleted node:
    every walk (directions, budgets, validity) equals the previous construction over the
    same lookup, through the view and through SQL."""
    rng = random.Random(seed)
    names = [f"knowledge:/n{i:02d}" for i in range(25)]
    for name in names:
        r = client.put(f"{API}/workspaces/knowledge/nodes{name.split(':', 1)[1]}",
                       json={"node_type": "kg:Node", "properties": {}})
        assert r.status_code == 201, r.text
    for _ in range(70):
        f, to = rng.choice(names), rng.choice(names)
        window = rng.choice([{}, {"valid_to": MID.isoformat()}, {"valid_from": PAST.isoformat()}])
        r = client.post(f"{API}/relations", json={"from": f, "to": to, "type": rng.choice(["a", "b"]),
                                                  "weight": rng.choice([None, 1.0, 2.0]), **window})
        assert r.status_code in (200, 201), r.text
    assert client.post(f"{API}/branches", json={"name": "agent"}).status_code == 201
    for _ in range(6):
        f, to = rng.choice(names), rng.choice(names)
        r = client.post(f"{API}/relations", params={"branch": "agent"},
                        json={"from": f, "to": to, "type": "a", "weight": 3.0})
        assert r.status_code in (200, 201), r.text
    assert client.delete(f"{API}/workspaces/knowledge/nodes/n03", params={"branch": "agent"}).status_code == 200
    asks = [dict(hops=h, max_nodes=m, fan_out=f, direction=d, types=t)
            for h in (1, 2, 3) for m in (4, 200) for f in (2, 50) for d in ("OUT", "IN", "BOTH")
            for t in (None, ["a"])]
    seeds = [names[0], names[7], names[0]]
    for branch in ("main", "agent"):
        answers = {}
        for path in ("view", "sql"):
            if path == "sql":
                services.graphs = GraphCache(max_edges=0)
            answers[path] = [walk(services, OPERATOR, "acme", branch, seeds, as_of=MID, **a) for a in asks]
        assert answers["view"] == answers["sql"]
        with services.db.read() as session:
            view = branch_view(session, "acme", branch)
            ids = [get_node(session, view, "knowledge", s.split(":", 1)[1]).node_id for s in seeds]
            addresses: dict[Hashable, tuple[str, str]] = {}

            for a, got in zip(asks, answers["sql"], strict=True):
                def lookup(n, a=a, view=view, addresses=addresses):
                    rows = relation_store.list_neighbors(session, view, n, direction=a["direction"],
                                                         types=frozenset(a["types"]) if a["types"] else None,
                                                         limit=10_001, at=MID)
                    for r in rows:
                        addresses[r.node_id] = (r.workspace, r.path)
                    return [(r.node_id, r.relation_type, r.weight, r.direction, r.properties) for r in rows]

                for s, node_id in zip(seeds, ids, strict=True):
                    addresses[node_id] = tuple(s.split(":", 1))  # type: ignore[assignment]
                before = traverse(ids, lookup, hops=a["hops"], max_nodes=a["max_nodes"], fan_out=a["fan_out"])
                assert got == walk_answer_before(before.visits, before.truncated, addresses), (branch, a)
        services.graphs = GraphCache()
