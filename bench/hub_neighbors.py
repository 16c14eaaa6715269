"""Benchmark of NEIGHBORS on a hub, and of the graph cache with many tiny repositories (issue 16).

1. A repository with ``knowledge:/hub`` and ``--edges`` (default 100,000) outgoing edges to
   leaves (weights a permutation with ties: ``(i * 7919) % (edges // 4)``, a tenth without
   weight), plus noise: 20,000 edges between random leaves, and a branch ``agent`` that
   re-weights 200 of the hub's edges and deletes 100 (tombstones), so the SQL path resolves
   versions on a chain. Set up with bulk inserts (the columns the store writes).
2. NEIGHBORS of the hub, limit 10 and 100, ``--repeat`` calls each, p50 / p95:
   - cold, the SQL path (``kg.rag.graph.neighbors`` with no view held), on ``main`` and on
     ``agent``;
   - baseline, the SQL path before issue 16 (``baseline_list_neighbors`` below: the old
     ``kg.store.relations.list_neighbors`` copied verbatim, which ranks every version of the
     hub's edges in a window and sorts them all in the database), same arguments, same session;
   - warm, the networkx view (after one traverse built it).
   The answers of the three paths are checked equal.
3. The cache with 2,000 tiny repositories (``--tiny``), each two nodes and no edge, each
   traversed once (which builds and caches its view), in a child process per cache: the old
   behaviour (budget by edges only: ``max_bytes`` and ``max_views`` unbounded) and the new
   defaults. The hub's NEIGHBORS is called every 50 repositories (a hot branch stays in the
   cache). Reported: RSS growth over the loop, views held, and the warm NEIGHBORS (limit 100)
   p50 of the hub after the loop over before it, as a ratio.

Prints figures and writes JSON (``bench/results/hub_neighbors.json``; ``--out`` to choose). Run:
``python bench/hub_neighbors.py [--edges 100000] [--database-url postgresql+psycopg://...]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Select,
    and_,
    case,
    false,
    func,
    insert,
    literal_column,
    or_,
    select,
    text,
    union_all,
)
from sqlalchemy.orm import Session, aliased

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import RESULTS, isolated_database, machine, percentile, redact, write_results  # noqa: E402
from kg.context import OPERATOR, run  # noqa: E402
from kg.graph.cache import GraphCache  # noqa: E402
from kg.graph.validity import iso  # noqa: E402
from kg.ops import nodes as node_ops  # noqa: E402
from kg.ops import repos as repo_ops  # noqa: E402
from kg.rag.graph import neighbors, walk  # noqa: E402
from kg.services import Services  # noqa: E402
from kg.settings import Settings  # noqa: E402
from kg.store.models import NodeVersion, RelationVersion, Workspace, utcnow  # noqa: E402
from kg.store.nodes import get_node, node_uid  # noqa: E402
from kg.store.relations import NeighborRow  # noqa: E402
from kg.store.repos import BranchView, begin_write, branch_view, create_branch, get_repository  # noqa: E402

REPO, WS = "hub", "knowledge"


# -- the SQL path before issue 16, verbatim (the baseline) -------------------------------------

def _on_chain(model: Any, chain, *, revision_index: bool = True) -> ColumnElement[bool]:
    rev = model.revision if revision_index else model.revision + 0
    return or_(*(and_(model.branch_id == b, rev <= r) for b, r in chain)) if chain else false()


def _chain_priority(model: Any, chain) -> ColumnElement[Any]:
    return case({b: i for i, (b, _) in enumerate(chain)}, value=model.branch_id, else_=len(chain))


def _edge_winners(view: BranchView, mine: str, node_id: str, *where: Any) -> tuple[Select[Any], Any]:
    cand = (select(RelationVersion.id)
            .where(_on_chain(RelationVersion, view.chain, revision_index=False),
                   getattr(RelationVersion, mine) == node_id, *where)
            .subquery())
    rv = aliased(RelationVersion)
    other = rv.to_node_id if mine == "from_node_id" else rv.from_node_id
    rn = func.row_number().over(
        partition_by=[rv.rel_type, other],
        order_by=(_chain_priority(rv, view.chain), rv.revision.desc(), rv.id.desc()),
    ).label("rn")
    ranked = select(rv.id.label("vid"), rn).join(cand, rv.id == cand.c.id).subquery()
    edge = aliased(RelationVersion)
    return (select(edge).join(ranked, edge.id == ranked.c.vid)
            .where(ranked.c.rn == 1, edge.deleted == false())), edge


def baseline_list_neighbors(session: Session, view: BranchView, node_id: str, *, direction: str = "BOTH",
                            types: Collection[str] | None = None, limit: int, offset: int = 0) -> list[NeighborRow]:
    """``kg.store.relations.list_neighbors`` before issue 16 (every edge of the node ranked)."""
    where = [RelationVersion.rel_type.in_(sorted(types))] if types else []
    sides = []
    for side, mine in (("OUT", "from_node_id"), ("IN", "to_node_id")):
        if direction not in (side, "BOTH"):
            continue
        stmt, edge = _edge_winners(view, mine, node_id, *where)
        other = edge.to_node_id if side == "OUT" else edge.from_node_id
        sides.append(stmt.with_only_columns(
            other.label("other"), edge.rel_type.label("rel_type"), edge.weight.label("weight"),
            edge.properties.label("properties"), literal_column(f"'{side}'").label("direction"),
        ))
    edges = (union_all(*sides) if len(sides) > 1 else sides[0]).cte("edges")
    winner = (select(NodeVersion.id)
              .where(NodeVersion.node_id == edges.c.other, _on_chain(NodeVersion, view.chain))
              .order_by(_chain_priority(NodeVersion, view.chain), NodeVersion.revision.desc(),
                        NodeVersion.id.desc())
              .limit(1).correlate(edges).scalar_subquery())
    address: ColumnElement[str] = Workspace.name + ":" + NodeVersion.path
    rel_type: ColumnElement[str] = edges.c.rel_type
    if session.get_bind().dialect.name == "postgresql":
        address, rel_type = address.collate("C"), rel_type.collate("C")
    stmt = (select(edges.c.other, Workspace.name, NodeVersion.path, edges.c.rel_type, edges.c.weight,
                   edges.c.properties, edges.c.direction)
            .select_from(edges)
            .join(NodeVersion, NodeVersion.id == winner)
            .join(Workspace, Workspace.id == NodeVersion.workspace_id)
            .where(NodeVersion.deleted == false(),
                   *([NodeVersion.workspace_id.in_(sorted(view.readable))] if view.readable is not None else []))
            .order_by(edges.c.weight.is_(None), edges.c.weight.desc(), address, rel_type, edges.c.direction)
            .limit(limit).offset(offset))
    return [NeighborRow(other, ws, path, t, w, props or {}, d)
            for other, ws, path, t, w, props, d in session.execute(stmt)]


# -- set-up ----------------------------------------------------------------------------------

def services_for(url: str, data_dir: Path, **cache: int) -> Services:
    settings = Settings(database_url=url, data_dir=data_dir, embedding_model="fake:hash-64", index_inline=True,
                        allow_fake_embedder=True)
    services = Services.from_settings(settings)
    if cache:
        services.graphs = GraphCache(settings.graph_max_edges, **cache)
    return services


def load_hub(services: Services, n_edges: int, seed: int) -> None:
    """The hub repository (bulk inserts, set-up only)."""
    rng = random.Random(seed)
    run(services, OPERATOR, repo_ops.create_repository, REPO)
    run(services, OPERATOR, repo_ops.create_workspace, REPO, WS, None)
    with services.db.write() as session:
        ctx = begin_write(session, REPO, "main", message="bench: hub")
        repo_uid = ctx.repo.uid
        wid = next(w for w, name in ctx.view.workspaces.items() if name == WS)
        now = utcnow()

        def row(path: str) -> dict:
            parent, name = path.rsplit("/", 1)
            return {"repo_id": ctx.repo.id, "branch_id": ctx.branch.id, "workspace_id": wid,
                    "revision": ctx.revision, "node_id": node_uid(repo_uid, wid, path), "path": path,
                    "parent_path": parent or "/", "name": name, "node_type": "kg:Node", "properties": {},
                    "order": None, "deleted": False, "content_key": None, "created_at": now, "updated_at": now}

        hub, folder = row("/hub"), row("/leaves")
        leaves = [row(f"/leaves/l{i:06d}") for i in range(n_edges)]
        session.execute(insert(NodeVersion), [hub, folder, *leaves])

        def rel(f: dict, t: dict, weight: float | None) -> dict:
            return {"repo_id": ctx.repo.id, "branch_id": ctx.branch.id, "revision": ctx.revision,
                    "from_node_id": f["node_id"], "to_node_id": t["node_id"], "rel_type": "has", "weight": weight,
                    "properties": {}, "deleted": False, "created_at": now,
                    "from_address": f"{WS}:{f['path']}", "to_address": f"{WS}:{t['path']}"}

        ties = max(1, n_edges // 4)
        rows = [rel(hub, leaf, None if i % 10 == 9 else float((i * 7919) % ties)) for i, leaf in enumerate(leaves)]
        noise = set()
        while len(noise) < min(20_000, n_edges // 5):
            a, b = rng.randrange(n_edges), rng.randrange(n_edges)
            if a != b:
                noise.add((a, b))
        rows += [rel(leaves[a], leaves[b], rng.random()) for a, b in sorted(noise)]
        for start in range(0, len(rows), 20_000):
            session.execute(insert(RelationVersion), rows[start:start + 20_000])
    with services.db.write() as session:
        create_branch(session, get_repository(session, REPO, lock=True), name="agent")
    _branch_writes(services, rng.sample(range(n_edges), 300), n_edges)
    if services.db.dialect == "postgresql":
        with services.db.engine.connect() as conn:
            conn.execute(text("ANALYZE node_versions"))
            conn.execute(text("ANALYZE relation_versions"))


def _branch_writes(services: Services, picked: list[int], n_edges: int) -> None:
    """200 re-weights and 100 deletes of the hub's edges on ``agent``, in one write."""
    from kg.store.relations import relate, unrelate

    with services.db.write() as session:
        ctx = begin_write(session, REPO, "agent", message="bench: agent edits")
        for i in picked[:200]:
            relate(session, ctx, f"{WS}:/hub", f"{WS}:/leaves/l{i:06d}", "has", weight=float(n_edges + i))
        for i in picked[200:]:
            unrelate(session, ctx, f"{WS}:/hub", f"{WS}:/leaves/l{i:06d}", "has")


# -- timing ----------------------------------------------------------------------------------

def p(samples_s: list[float]) -> dict[str, float]:
    ms = [s * 1000 for s in samples_s]
    return {"n": len(ms), "p50_ms": round(percentile(ms, 50), 3), "p95_ms": round(percentile(ms, 95), 3)}


def timed(fn, repeat: int) -> tuple[list[float], Any]:
    out, samples = None, []
    for _ in range(repeat):
        started = time.perf_counter()
        out = fn()
        samples.append(time.perf_counter() - started)
    return samples, out


def baseline_call(services: Services, branch: str, limit: int) -> dict:
    with services.db.read() as session:
        view = branch_view(session, REPO, branch)
        node_id = get_node(session, view, WS, "/hub").node_id
        page = baseline_list_neighbors(session, view, node_id, limit=limit + 1)
    return {"neighbors": [{"workspace": r.workspace, "path": r.path, "node_id": r.node_id,
                           "relation_type": r.relation_type, "weight": r.weight, "direction": r.direction,
                           "properties": r.properties, "valid_from": iso(r.valid_from), "valid_to": iso(r.valid_to),
                           "invalidated_by": r.invalidated_by} for r in page[:limit]], "truncated": len(page) > limit}


def hub_figures(services: Services, repeat: int) -> dict:
    figures: dict[str, Any] = {}
    for branch in ("main", "agent"):
        for limit in (10, 100):
            services.graphs.clear()
            def call(branch: str = branch, limit: int = limit) -> dict:
                return neighbors(services, OPERATOR, REPO, branch, f"{WS}:/hub", limit=limit)

            def base_call(branch: str = branch, limit: int = limit) -> dict:
                return baseline_call(services, branch, limit)

            cold_s, cold = timed(call, repeat)
            assert len(services.graphs) == 0
            base_s, base = timed(base_call, max(3, repeat // 5))
            walk(services, OPERATOR, REPO, branch, [f"{WS}:/hub"], hops=1, max_nodes=10, fan_out=10)
            services.graphs.join_builds()  # a branch this large gets its view in the background
            warm_s, warm = timed(call, repeat)
            assert len(services.graphs) == 1, "the view was not built"
            assert cold == base == warm, f"the paths disagree on {branch}, limit {limit}"
            c, b, w = p(cold_s), p(base_s), p(warm_s)
            figures[f"{branch}_limit_{limit}"] = {
                "cold_sql": c, "baseline_sql": b, "warm_view": w,
                "baseline_over_cold_p50": round(b["p50_ms"] / c["p50_ms"], 1),
                "cold_over_warm_p50": round(c["p50_ms"] / w["p50_ms"], 1)}
            print(f"{branch:6} limit {limit:3}: cold SQL p50 {c['p50_ms']:8.2f} ms p95 {c['p95_ms']:8.2f} | "
                  f"baseline SQL p50 {b['p50_ms']:8.2f} ms p95 {b['p95_ms']:8.2f} | "
                  f"warm view p50 {w['p50_ms']:6.2f} ms p95 {w['p95_ms']:6.2f} | "
                  f"baseline / cold {b['p50_ms'] / c['p50_ms']:.0f}x", flush=True)
    return figures


def rss_mb() -> float:
    """Resident memory after a full collection and ``malloc_trim``, MB (Linux)."""
    gc.collect()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def tiny_child(url: str, data_dir: Path, n_tiny: int, mode: str, repeat: int) -> dict:
    """In a child process: traverse ``n_tiny`` tiny repositories under one cache, and measure."""
    cache = {"max_bytes": 10**15, "max_views": 10**9} if mode == "edges_only" else {}
    services = services_for(url, data_dir, **cache)
    hub_call = lambda: neighbors(services, OPERATOR, REPO, "main", f"{WS}:/hub", limit=100)  # noqa: E731
    walk(services, OPERATOR, REPO, "main", [f"{WS}:/hub"], hops=1, max_nodes=10, fan_out=10)
    services.graphs.join_builds()
    timed(hub_call, repeat)  # warm-up
    before_s, _ = timed(hub_call, repeat)
    rss_before = rss_mb()
    for i in range(n_tiny):  # one traverse per tiny repository (which builds its view once)
        walk(services, OPERATOR, f"tiny{i:05d}", "main", [f"{WS}:/a"], hops=1, max_nodes=10, fan_out=10)
        if i % 50 == 0:
            hub_call()  # the hub stays in use (and so in the cache), as a hot branch would
    rss_after = rss_mb()
    after_s, _ = timed(hub_call, repeat)
    return {"mode": mode, "views_held": len(services.graphs), "bytes_held": services.graphs.bytes_held,
            "rss_before_mb": round(rss_before, 1), "rss_after_mb": round(rss_after, 1),
            "rss_growth_mb": round(rss_after - rss_before, 1),
            "hub_neighbors_before": p(before_s), "hub_neighbors_after": p(after_s)}


def tiny_figures(url: str, data_dir: Path, services: Services, n_tiny: int, repeat: int) -> dict:
    for i in range(n_tiny):
        name = f"tiny{i:05d}"
        run(services, OPERATOR, repo_ops.create_repository, name)
        run(services, OPERATOR, repo_ops.create_workspace, name, WS, None)
        for path in ("/a", "/b"):
            run(services, OPERATOR, node_ops.put_node, name, "main", WS, path, node_type="kg:Node", properties={})
    out = {}
    for mode in ("edges_only", "bounded"):
        child = subprocess.run([sys.executable, __file__, "--child", mode, url, str(data_dir), str(n_tiny),
                                str(repeat)], capture_output=True, text=True, check=True)
        got = json.loads(child.stdout)
        got["hub_neighbors_after_over_before_p50"] = round(
            got["hub_neighbors_after"]["p50_ms"] / got["hub_neighbors_before"]["p50_ms"], 2)
        out[mode] = got
        print(f"{n_tiny} tiny repos, cache {mode:10}: views held {got['views_held']:5}, RSS +{got['rss_growth_mb']} MB "
              f"(the hub's view held throughout), hub NEIGHBORS (warm) p50 after / before "
              f"{got['hub_neighbors_after_over_before_p50']}", flush=True)
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--edges", type=int, default=100_000)
    parser.add_argument("--tiny", type=int, default=2_000)
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp, isolated_database(args.database_url, Path(tmp)) as (url, backend):
        data_dir = Path(tmp) / "data"
        services = services_for(url, data_dir)
        services.db.upgrade()
        started = time.perf_counter()
        load_hub(services, args.edges, args.seed)
        print(f"set-up: hub of {args.edges} edges in {time.perf_counter() - started:.0f} s ({backend})", flush=True)
        results: dict[str, Any] = {"machine": machine(), "database": redact(url), "backend": backend,
                                   "edges": args.edges, "repeat": args.repeat,
                                   "baseline": "the SQL path before issue 16, copied into this file "
                                               "(baseline_list_neighbors)",
                                   "hub": hub_figures(services, args.repeat)}
        if args.tiny:
            results["tiny_repositories"] = {"n": args.tiny,
                                            **tiny_figures(url, data_dir, services, args.tiny, args.repeat)}
        services.close()
    suffix = "" if backend == "sqlite" else f"_{backend}"
    write_results(results, args.out or RESULTS / f"hub_neighbors{suffix}.json")
    return results


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _, _, mode, url, data_dir, n_tiny, repeat = sys.argv
        print(json.dumps(tiny_child(url, Path(data_dir), int(n_tiny), mode, int(repeat))))
    else:
        main()
