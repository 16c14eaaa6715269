"""Benchmark of the graph: NEIGHBORS and 2-hop traverse on a power-law graph, kg against plain
networkx on the same graph in the same run.

The issue: NEIGHBORS and 2-hop traverse (max_nodes 200) p50 / p95 on a generated graph of
1,000,000 edges with power-law degrees, within 3x of plain networkx calls in-process; HTTP
figures too; and what a million edges cost in the networkx view.

1. Generate ``--edges`` distinct relations over ``--nodes`` nodes (default edges / 10) with numpy:
   sources and targets drawn with probability proportional to rank^-``--alpha`` (Zipf) over two
   independent random orders of the nodes, four relation types, self-loops and repeated
   (from, type, to) redrawn; 30% of the edges have no weight, the rest a weight in 0.00..0.99
   (many ties, so the address order matters). Nodes alternate between two workspaces (so many
   edges cross workspaces) at ``/e/n<i>``.
2. Load them into kg FOR SET-UP SPEED with bulk inserts (``insert(NodeVersion)`` /
   ``insert(RelationVersion)`` with the columns the store writes, one revision per ``--batch``
   rows, opened with ``begin_write``). PostgreSQL is ANALYZEd afterwards.
3. Build the plain networkx ``MultiDiGraph`` of the same edges (time, memory), and kg's view of
   the branch through kg's own path (``warm_graph``: what the first traverse starts): time, memory.
4. Timed, on the same random sample of nodes with at least one edge (plus the 10 largest hubs
   reported apart):
   - plain networkx: NEIGHBORS = ``out_edges`` + ``in_edges`` with data, sorted in kg's stable
     order, first 100; traverse = breadth-first, both directions, 2 hops, max_nodes 200,
     fan_out 50, each node's edges sorted the same way;
   - kg library, op: ``kg.rag.graph.neighbors_of`` / ``traverse_from`` on a resolved branch view
     (what a request does after resolving its branch);
   - kg library, request: the same plus opening a read session and resolving the branch
     (``branch_view``: three small SQL statements);
   - kg SQL path (no view: cold NEIGHBORS, time travel): ``neighbors_of`` with a cache of budget 0;
   - HTTP in-process (``TestClient``) and, unless ``--no-uvicorn``, a real ``uvicorn`` process on
     a loopback port (which builds its own view on its first traverse: timed too).
5. Bringing the view forward: 100 relation writes and 10 node deletions through the store API
   in one transaction, then the next NEIGHBORS (which applies them) is timed.

Prints a table and writes JSON (``bench/results/graph.json``; ``graph_<backend>.json`` on another
database, ``graph_<edges>.json`` for a smaller run; ``--out`` to choose). Run: ``python
bench/graph.py [--edges 1000000] [--database-url postgresql+psycopg://postgres@127.0.0.1:5432/test]``.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy is imported

import argparse  # noqa: E402
import gc  # noqa: E402
import random  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from operator import itemgetter  # noqa: E402
from pathlib import Path  # noqa: E402
from types import SimpleNamespace  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import networkx as nx  # noqa: E402
import numpy as np  # noqa: E402
from sqlalchemy import insert, text  # noqa: E402

from bench._common import (  # noqa: E402
    RESULTS,
    isolated_database,
    load_average,
    machine,
    percentile,
    redact,
    table,
    write_results,
)
from kg.graph.cache import GraphCache  # noqa: E402
from kg.rag.graph import neighbors_of, traverse_from, view_key, warm_graph  # noqa: E402
from kg.services import Services  # noqa: E402
from kg.settings import Settings  # noqa: E402
from kg.store import nodes as node_store  # noqa: E402
from kg.store import relations as relation_store  # noqa: E402
from kg.store.models import NodeVersion, RelationVersion, utcnow  # noqa: E402
from kg.store.nodes import node_uid  # noqa: E402
from kg.store.repos import begin_write, branch_view, create_repository, create_workspace  # noqa: E402

REPO = "graph"
WORKSPACES = ("people", "docs")
TYPES = ("cites", "mentions", "works_at", "related_to")
MODEL = "fake:hash-64"


# -- the graph --------------------------------------------------------------------------------


def generate(n_edges: int, n_nodes: int, alpha: float, seed: int):
    """Distinct (src, type, dst) index triples with Zipf-distributed endpoints, and weights."""
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, n_nodes + 1) ** alpha
    p /= p.sum()
    out_order, in_order = rng.permutation(n_nodes), rng.permutation(n_nodes)
    codes = np.empty(0, dtype=np.int64)
    while codes.size < n_edges:
        want = int((n_edges - codes.size) * 1.3) + 1000
        src = out_order[rng.choice(n_nodes, size=want, p=p)]
        dst = in_order[rng.choice(n_nodes, size=want, p=p)]
        typ = rng.integers(0, len(TYPES), size=want)
        keep = src != dst
        new = (src[keep].astype(np.int64) * len(TYPES) + typ[keep]) * n_nodes + dst[keep]
        codes = np.unique(np.concatenate([codes, new]))
    codes = rng.permutation(codes)[:n_edges]
    dst = codes % n_nodes
    typ = (codes // n_nodes) % len(TYPES)
    src = codes // n_nodes // len(TYPES)
    weights = np.round(rng.random(n_edges), 2)
    weights[rng.random(n_edges) < 0.3] = np.nan
    return src, typ, dst, weights


def node_address(i: int) -> tuple[str, str]:
    return WORKSPACES[i % 2], f"/e/n{i:07d}"


def load_into_kg(services: Services, src, typ, dst, weights, n_nodes: int, batch: int) -> tuple[list[str], float]:
    """Bulk-insert the nodes and relations (set-up only); the node ids and seconds taken."""
    started = time.perf_counter()
    db = services.db
    with db.write() as session:
        repo = create_repository(session, name=REPO)
        wids = {name: create_workspace(session, repo, name=name).id for name in WORKSPACES}
        repo_uid = repo.uid
    ids = [node_uid(repo_uid, wids[ws], path) for ws, path in map(node_address, range(n_nodes))]

    def node_row(ctx, wid, path, node_id, now):
        parent, name = path.rsplit("/", 1)
        return {"repo_id": ctx.repo.id, "branch_id": ctx.branch.id, "workspace_id": wid,
                "revision": ctx.revision, "node_id": node_id, "path": path, "parent_path": parent or "/",
                "name": name, "node_type": "Entity", "properties": {}, "order": None, "deleted": False,
                "content_key": None, "created_at": now, "updated_at": now}

    with db.write() as session:
        ctx = begin_write(session, REPO, message="bench: folders")
        now = utcnow()
        session.execute(insert(NodeVersion), [node_row(ctx, wids[ws], "/e", node_uid(repo_uid, wids[ws], "/e"), now)
                                              for ws in WORKSPACES])
    for start in range(0, n_nodes, batch):
        with db.write() as session:
            ctx = begin_write(session, REPO, message=f"bench: nodes {start}")
            now = utcnow()
            rows = []
            for i in range(start, min(n_nodes, start + batch)):
                ws, path = node_address(i)
                rows.append(node_row(ctx, wids[ws], path, ids[i], now))
            session.execute(insert(NodeVersion), rows)
    n_edges = len(src)
    for start in range(0, n_edges, batch):
        with db.write() as session:
            ctx = begin_write(session, REPO, message=f"bench: relations {start}")
            now = utcnow()
            rows = [{"repo_id": ctx.repo.id, "branch_id": ctx.branch.id, "revision": ctx.revision,
                     "from_node_id": ids[s], "to_node_id": ids[d], "rel_type": TYPES[t],
                     "weight": None if np.isnan(w) else float(w), "properties": {}, "deleted": False,
                     "created_at": now, "from_address": "{}:{}".format(*node_address(s)),
                     "to_address": "{}:{}".format(*node_address(d))}
                    for s, t, d, w in zip(src[start:start + batch].tolist(), typ[start:start + batch].tolist(),
                                          dst[start:start + batch].tolist(), weights[start:start + batch].tolist(),
                                          strict=True)]
            session.execute(insert(RelationVersion), rows)
        print(f"  relations {min(n_edges, start + batch)}/{n_edges}, {time.perf_counter() - started:.0f} s",
              file=sys.stderr, flush=True)
    if db.dialect == "postgresql":
        with db.engine.connect() as conn:
            conn.execute(text("ANALYZE node_versions"))
            conn.execute(text("ANALYZE relation_versions"))
            conn.commit()
    return ids, time.perf_counter() - started


# -- plain networkx -------------------------------------------------------------------------


def plain_graph(ids, src, typ, dst, weights) -> nx.MultiDiGraph:
    g = nx.MultiDiGraph()
    g.add_edges_from((ids[s], ids[d], TYPES[t], {"weight": None if w != w else w, "properties": {}})
                     for s, t, d, w in zip(src.tolist(), typ.tolist(), dst.tolist(), weights.tolist(), strict=True))
    return g


def plain_sorted_edges(g: nx.MultiDiGraph, address: dict, node: str) -> list:
    """A node's edges in kg's stable order, with plain networkx calls."""
    found = [((w is None, -w if w is not None else 0.0, address[v], k, "OUT"), v, k, w)
             for _, v, k, w in g.out_edges(node, keys=True, data="weight")]
    found += [((w is None, -w if w is not None else 0.0, address[u], k, "IN"), u, k, w)
              for u, _, k, w in g.in_edges(node, keys=True, data="weight")]
    found.sort(key=itemgetter(0))
    return found


def plain_neighbors(g, address, node, limit=100):
    return plain_sorted_edges(g, address, node)[:limit]


def plain_traverse(g, address, seed, hops=2, max_nodes=200, fan_out=50):
    """Breadth-first, both directions, budgets as kg's (without kg's exact ``truncated``)."""
    seen = {seed: (0, None)}
    frontier = [seed]
    for hop in range(hops):
        nxt = []
        for u in frontier:
            for _, v, k, _w in plain_sorted_edges(g, address, u)[:fan_out]:
                if v in seen:
                    continue
                if len(seen) == max_nodes:
                    return seen
                seen[v] = (hop + 1, k)
                nxt.append(v)
        frontier = nxt
    return seen


# -- measurement helpers --------------------------------------------------------------------


def rss_mb() -> float:
    """Resident memory of this process after a full collection, MB (Linux; freed heap handed
    back to the system first with glibc's ``malloc_trim``, so that transient buffers of a build
    do not count as the structure's size)."""
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


def stats(samples_s: list[float]) -> dict:
    ms = [s * 1000 for s in samples_s]
    return {"n": len(ms), "p50_ms": round(percentile(ms, 50), 3), "p95_ms": round(percentile(ms, 95), 3),
            "max_ms": round(max(ms), 3)}


def timed_each(fn, items) -> list[float]:
    out = []
    for item in items:
        started = time.perf_counter()
        fn(item)
        out.append(time.perf_counter() - started)
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def uvicorn_figures(url: str, data_dir: Path, sample: list[str], seeds: list[str]) -> dict:
    """Start ``uvicorn api.main:app`` on a loopback port and time NEIGHBORS and traverse."""
    import httpx

    port = free_port()
    env = {**os.environ, "KG_DATABASE_URL": url, "KG_DATA_DIR": str(data_dir), "KG_EMBEDDING_MODEL": MODEL,
           "KG_ALLOW_FAKE_EMBEDDER": "true"}
    proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "api.main:app", "--host", "127.0.0.1",
                             "--port", str(port), "--log-level", "warning"], cwd=ROOT, env=env)
    try:
        base = f"http://127.0.0.1:{port}"
        with httpx.Client(base_url=base, timeout=600) as client:
            for _ in range(300):
                try:
                    if client.get("/health").status_code == 200:
                        break
                except httpx.TransportError:
                    time.sleep(0.2)
            started = time.perf_counter()
            client.post(f"/api/repos/{REPO}/traverse", json={"seeds": [seeds[0]], "hops": 1, "max_nodes": 1})
            build_s = time.perf_counter() - started
            nb = timed_each(lambda a: client.get(f"/api/repos/{REPO}/neighbors",
                                                 params={"node": a, "limit": 100}).raise_for_status(), sample)
            tr = timed_each(lambda a: client.post(f"/api/repos/{REPO}/traverse",
                                                  json={"seeds": [a], "hops": 2, "max_nodes": 200}).raise_for_status(),
                            seeds)
        return {"first_traverse_builds_view_s": round(build_s, 2), "neighbors": stats(nb), "traverse_2hop": stats(tr)}
    finally:
        proc.terminate()
        proc.wait(timeout=30)


# -- main -----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--edges", type=int, default=1_000_000)
    parser.add_argument("--nodes", type=int, default=None, help="default: edges / 10")
    parser.add_argument("--alpha", type=float, default=1.0, help="Zipf exponent of endpoint popularity")
    parser.add_argument("--samples", type=int, default=300, help="timed calls per operation")
    parser.add_argument("--sql-samples", type=int, default=30, help="timed calls of the SQL path")
    parser.add_argument("--batch", type=int, default=50_000, help="rows per bulk set-up transaction")
    parser.add_argument("--database-url", default=None,
                        help="SQLAlchemy URL (default: a SQLite file in a fresh temp dir); "
                             "PostgreSQL runs in a fresh schema dropped afterwards")
    parser.add_argument("--no-uvicorn", action="store_true", help="skip the real uvicorn figures")
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    n_nodes = args.nodes or max(10, args.edges // 10)
    rng = random.Random(args.seed)
    results: dict = {"machine": machine(), "setup_note": (
        "node and relation versions inserted in bulk for set-up speed (same columns as the store "
        "writes); everything timed goes through kg's own functions or plain networkx")}

    print(f"generating {args.edges} edges over {n_nodes} nodes ...", file=sys.stderr, flush=True)
    src, typ, dst, weights = generate(args.edges, n_nodes, args.alpha, args.seed)
    degree = np.bincount(src, minlength=n_nodes) + np.bincount(dst, minlength=n_nodes)
    results["graph"] = {"edges": int(len(src)), "nodes": n_nodes, "alpha": args.alpha,
                        "nodes_with_edges": int((degree > 0).sum()),
                        "degree": {"max": int(degree.max()), "p50": float(np.percentile(degree[degree > 0], 50)),
                                   "p99": float(np.percentile(degree[degree > 0], 99)),
                                   "top10": sorted(degree.tolist(), reverse=True)[:10]},
                        "unweighted_share": round(float(np.isnan(weights).mean()), 3)}

    with tempfile.TemporaryDirectory(prefix="kg-bench-") as tmp, \
            isolated_database(args.database_url, Path(tmp)) as (url, backend):
        results["database"] = {"backend": backend, "url": redact(url)}
        settings = Settings(database_url=url, data_dir=Path(tmp) / "data", embedding_model=MODEL,
                            allow_fake_embedder=True)
        services = Services.from_settings(settings)
        services.db.upgrade()
        try:
            print("loading into kg (bulk) ...", file=sys.stderr, flush=True)
            ids, setup_s = load_into_kg(services, src, typ, dst, weights, n_nodes, args.batch)
            results["setup_s"] = round(setup_s, 1)
            addresses = {ids[i]: "{}:{}".format(*node_address(i)) for i in range(n_nodes)}

            # plain networkx graph: time and memory
            gc.collect()
            before = rss_mb()
            started = time.perf_counter()
            plain = plain_graph(ids, src, typ, dst, weights)
            results["plain_networkx_build"] = {"s": round(time.perf_counter() - started, 2),
                                               "rss_mb": round(rss_mb() - before, 1)}
            print(f"plain networkx graph: {results['plain_networkx_build']}", file=sys.stderr, flush=True)

            with_edges = [i for i in range(n_nodes) if degree[i] > 0]
            sample_idx = [rng.choice(with_edges) for _ in range(args.samples)]
            hubs_idx = [int(i) for i in np.argsort(-degree)[:10]]
            sample = ["{}:{}".format(*node_address(i)) for i in sample_idx]
            hubs = ["{}:{}".format(*node_address(i)) for i in hubs_idx]

            # kg's view: the first traverse builds it
            with services.db.read() as session:
                view = branch_view(session, REPO)
                gc.collect()
                before = rss_mb()
                started = time.perf_counter()
                warm_graph(session, services, view)  # what the first traverse starts, in this call
                build_s = time.perf_counter() - started
                gc.collect()
                graph = services.graphs.get(view_key(view))
                results["kg_view_build"] = {
                    "s": round(build_s, 2), "rss_mb": round(rss_mb() - before, 1),
                    "edges_held": services.graphs.edges_held, "nodes": graph.node_count if graph else None}
            print(f"kg view: {results['kg_view_build']}", file=sys.stderr, flush=True)

            def plain_nb(a):
                return plain_neighbors(plain, addresses, ids[addr_index[a]])

            def plain_tr(a):
                return plain_traverse(plain, addresses, ids[addr_index[a]])

            addr_index = {"{}:{}".format(*node_address(i)): i for i in set(sample_idx) | set(hubs_idx)}
            timing: dict[str, dict[str, list[float]]] = {}
            with services.db.read() as session:
                view = branch_view(session, REPO)

                def kg_nb(a):
                    return neighbors_of(session, services, view, a, limit=100)

                def kg_tr(a):
                    return traverse_from(session, services, view, [a], hops=2, max_nodes=200)

                for a in sample[:20]:  # the answers agree with plain networkx
                    ours = [r["node_id"] for r in kg_nb(a)["neighbors"]]
                    assert ours == [v for _, v, _, _ in plain_nb(a)], a
                    assert len(kg_tr(a)["nodes"]) == len(plain_tr(a)), a
                for label, fn in (("plain_networkx", (plain_nb, plain_tr)), ("kg_library_op", (kg_nb, kg_tr))):
                    for op, f in zip(("neighbors", "traverse_2hop"), fn, strict=True):
                        timed_each(f, sample[:20])  # warm-up (hubs' sorted lists, caches)
                        timing.setdefault(label, {})[op] = timed_each(f, sample)
                        timing[label][op + "_hubs"] = timed_each(f, hubs)

            def request_nb(a):
                with services.db.read() as s:
                    return neighbors_of(s, services, branch_view(s, REPO), a, limit=100)

            def request_tr(a):
                with services.db.read() as s:
                    return traverse_from(s, services, branch_view(s, REPO), [a], hops=2, max_nodes=200)

            timing["kg_library_request"] = {"neighbors": timed_each(request_nb, sample),
                                            "traverse_2hop": timed_each(request_tr, sample)}

            # no view: the first read tries an inline build, gives up past 0 edges, and SQL answers
            cold = SimpleNamespace(graphs=GraphCache(max_edges=0, inline_build_max=10**12))
            with services.db.read() as session:
                view = branch_view(session, REPO)
                some = sample[:args.sql_samples]
                timing["kg_sql_path"] = {
                    "neighbors": timed_each(lambda a: neighbors_of(session, cold, view, a, limit=100), some),
                    "neighbors_hubs": timed_each(lambda a: neighbors_of(session, cold, view, a, limit=100), hubs[:3]),
                    "traverse_2hop": timed_each(lambda a: traverse_from(session, cold, view, [a], hops=2,
                                                                        max_nodes=200), some[:10]),
                }

            # HTTP in-process
            from fastapi.testclient import TestClient

            from api.app import create_app

            with TestClient(create_app(services=services), base_url="http://localhost") as client:
                timing["http_testclient"] = {
                    "neighbors": timed_each(lambda a: client.get(f"/api/repos/{REPO}/neighbors",
                                                                 params={"node": a, "limit": 100}).raise_for_status(),
                                            sample),
                    "traverse_2hop": timed_each(lambda a: client.post(f"/api/repos/{REPO}/traverse",
                                                                      json={"seeds": [a], "hops": 2, "max_nodes": 200})
                                                .raise_for_status(), sample),
                }

            # bringing the view forward: 100 relations and 10 node deletions in one revision
            in_use = set(sample_idx) | set(hubs_idx)
            picks = rng.sample([i for i in with_edges if i not in in_use], 220)
            with services.db.write() as session:
                ctx = begin_write(session, REPO, message="bench: incremental writes")
                for j in range(100):
                    a, b = picks[2 * j], picks[2 * j + 1]
                    relation_store.relate(session, ctx, "{}:{}".format(*node_address(a)),
                                          "{}:{}".format(*node_address(b)),
                                          "bench_added", weight=0.5)
                for i in picks[200:210]:
                    node_store.delete_node(session, ctx, *node_address(i))
            with services.db.read() as session:
                view = branch_view(session, REPO)
                started = time.perf_counter()
                neighbors_of(session, services, view, sample[0], limit=100)
                results["kg_view_catch_up"] = {"versions_applied": 110, "s": round(time.perf_counter() - started, 4),
                                               "same_view_object": services.graphs.get(view_key(view)) is graph}
            results["rss_mb_end_of_in_process_timing"] = round(rss_mb(), 1)

            if not args.no_uvicorn:
                print("uvicorn ...", file=sys.stderr, flush=True)
                results["http_uvicorn"] = uvicorn_figures(url, Path(tmp) / "data-uvicorn", sample[:100], sample[:100])
        finally:
            services.close()

    results["load_average_end"] = load_average()
    rows = []
    figures: dict = {}
    for label, ops in timing.items():
        figures[label] = {op: stats(s) for op, s in ops.items()}
    base = figures["plain_networkx"]
    for label in ("plain_networkx", "kg_library_op", "kg_library_request", "kg_sql_path", "http_testclient"):
        for op in ("neighbors", "traverse_2hop"):
            f = figures[label][op]
            ratio = round(f["p50_ms"] / base[op]["p50_ms"], 2)
            ratio95 = round(f["p95_ms"] / base[op]["p95_ms"], 2)
            figures[label][op]["ratio_p50_vs_plain"] = ratio
            figures[label][op]["ratio_p95_vs_plain"] = ratio95
            rows.append([f"{label} {op}", f["n"], f["p50_ms"], f["p95_ms"], ratio, ratio95])
    for label in ("plain_networkx", "kg_library_op"):
        for op in ("neighbors_hubs", "traverse_2hop_hubs"):
            f = figures[label][op]
            rows.append([f"{label} {op}", f["n"], f["p50_ms"], f["p95_ms"], "", ""])
    f = figures["kg_sql_path"]["neighbors_hubs"]
    rows.append(["kg_sql_path neighbors_hubs", f["n"], f["p50_ms"], f["p95_ms"], "", ""])
    if "http_uvicorn" in results:
        for op in ("neighbors", "traverse_2hop"):
            f = results["http_uvicorn"][op]
            rows.append([f"http_uvicorn {op}", f["n"], f["p50_ms"], f["p95_ms"],
                         round(f["p50_ms"] / base[op]["p50_ms"], 2), round(f["p95_ms"] / base[op]["p95_ms"], 2)])
    results["figures"] = figures
    results["target"] = "kg library within 3x of plain networkx (p50 and p95)"

    g = results["graph"]
    print(f"graph on {backend}: {g['edges']} edges, {g['nodes']} nodes, degree max {g['degree']['max']} "
          f"p50 {g['degree']['p50']} p99 {g['degree']['p99']}; set-up {results['setup_s']} s (bulk); "
          f"load average end {results['load_average_end']}")
    print(f"plain networkx graph: {results['plain_networkx_build']['s']} s, "
          f"+{results['plain_networkx_build']['rss_mb']} MB; "
          f"kg view (built by the first traverse, from SQL): {results['kg_view_build']['s']} s, "
          f"+{results['kg_view_build']['rss_mb']} MB; bringing it forward by 110 versions: "
          f"{results['kg_view_catch_up']['s'] * 1000:.1f} ms")
    if "http_uvicorn" in results:
        print("uvicorn: its first traverse built its own view in "
              f"{results['http_uvicorn']['first_traverse_builds_view_s']} s")
    print(table(rows, ["path / operation", "n", "p50 ms", "p95 ms", "p50 / plain", "p95 / plain"]))
    suffix = "" if backend == "sqlite" else f"_{backend}"
    if args.edges != 1_000_000:
        suffix += f"_{args.edges}"
    write_results(results, args.out or RESULTS / f"graph{suffix}.json")
    return results


if __name__ == "__main__":
    main()
