"""Benchmark of kg's graph use cases against SQLite and networkx on the peers' graph.

The graph of the peers bench (``bench/peers.py``, figure ``graph``): ``--nodes``
nodes (default 100,000) at ``kb:/s<i // 1000>/n<i>``, 10 edges per node, one hub with
``nodes / 2`` in-edges, the other edges from uniform sources to power-law targets (Zipf 0.7 over
a permutation of the nodes), no self-loop nor repeated (source, target), three relation types,
a weight of 6 decimals each (``graph_edges`` below is the peers bench's generator).

1. Load the edges into kg FOR SET-UP SPEED with bulk inserts (``insert(NodeVersion)`` /
   ``insert(RelationVersion)`` with the columns the store writes), then the branch's view: the
   first walk builds it in the background (collected and frozen), as in a server and in the
   peers bench. The same edges go into a plain ``sqlite3`` table ``edges(src, dst, t, w)`` with
   indexes on ``(src, w)`` and ``(dst, w)`` (as the peers bench does), and into a
   ``networkx.DiGraph``.
2. Timed, interleaved (each query runs every engine in turn, the order rotated per query):

   - NEIGHBORS of the hub, top 10 and 10,000 rows (kg's cap); NEIGHBORS of an ordinary node
     (5..40 edges), limit 100: kg's use case ``kg.rag.graph.neighbors`` (the weights of its rows
     read, as the peers bench does), the held view alone (``GraphView.neighbors``), SQLite
     (``ORDER BY w DESC LIMIT`` on each side, then merged), networkx (``heapq.nlargest`` over
     ``succ`` and ``pred``);
   - a 2-hop walk over out-edges from an ordinary node, every node reached (max_nodes and
     fan_out 10,000): kg's use case ``kg.rag.graph.walk`` (the reached nodes' paths read), the
     held view alone (``kg.graph.traverse.traverse`` over ``iter_neighbors``), SQLite's recursive
     CTE, networkx's breadth-first loop over ``succ``.

   Every answer is checked against networkx's (NEIGHBORS: the weights in order, or sorted for
   the ordinary node whose limit takes all its edges; the walk: the set of nodes reached).
3. ``--profile N``: cProfile of N calls of each kg use case, the top functions by own time.

``--clock cpu`` times each call by the calling thread's CPU time (every engine runs in this
thread, SQLite included): on a loaded machine elapsed times measure the scheduler too.

Prints a table (p50 / p95 ms, kg / SQLite and kg / networkx ratios of the p50) and writes JSON
(``bench/results/graph_peers.json``; ``graph_peers_<backend>.json`` on another database). The
kg store and the SQLite file are kept in ``bench/results/graph-peers-<nodes>/`` for the next run
(``--fresh`` rebuilds them; a PostgreSQL run loads a fresh schema each time).

Run: ``python bench/graph_peers.py [--nodes 100000] [--queries 200] [--profile 50] [--clock cpu]
[--database-url postgresql+psycopg://postgres@127.0.0.1:5432/test]``.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy is imported

import argparse  # noqa: E402
import cProfile  # noqa: E402
import heapq  # noqa: E402
import pstats  # noqa: E402
import shutil  # noqa: E402
import sqlite3  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from itertools import chain  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import networkx as nx  # noqa: E402
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
from bench.peers import graph_edges, leaf_index, leaf_path  # noqa: E402
from kg.context import OPERATOR  # noqa: E402
from kg.graph.traverse import traverse  # noqa: E402
from kg.graph.view import GraphView  # noqa: E402
from kg.rag import graph as graph_ops  # noqa: E402
from kg.rag.graph import view_key  # noqa: E402
from kg.services import Services  # noqa: E402
from kg.settings import Settings  # noqa: E402
from kg.store.models import NodeVersion, RelationVersion, utcnow  # noqa: E402
from kg.store.nodes import node_uid  # noqa: E402
from kg.store.repos import begin_write, branch_view, create_repository, create_workspace  # noqa: E402

REPO, WORKSPACE = "peers", "kb"
TYPES = ("related_to", "mentions", "cites")
MODEL = "fake:hash-64"
SECTION = 1_000


# -- the graph: the peers bench's generator and addresses (bench/peers.py), one copy ---------------


# -- loads -------------------------------------------------------------------------------------


def load_into_kg(services: Services, g: dict[str, Any], n: int, batch: int = 50_000) -> None:
    """Bulk-insert the nodes (with their section folders) and relations (set-up only)."""
    db = services.db
    with db.write() as session:
        repo = create_repository(session, name=REPO)
        wid = create_workspace(session, repo, name=WORKSPACE).id
        repo_uid = repo.uid
    ids = [node_uid(repo_uid, wid, leaf_path(i)) for i in range(n)]

    def node_row(ctx: Any, path: str, node_id: str, now: Any) -> dict[str, Any]:
        parent, name = path.rsplit("/", 1)
        return {"repo_id": ctx.repo.id, "branch_id": ctx.branch.id, "workspace_id": wid,
                "revision": ctx.revision, "node_id": node_id, "path": path, "parent_path": parent or "/",
                "name": name, "node_type": "kg:Node", "properties": {}, "order": None, "deleted": False,
                "content_key": None, "created_at": now, "updated_at": now}

    with db.write() as session:
        ctx = begin_write(session, REPO, message="bench: sections")
        now = utcnow()
        session.execute(insert(NodeVersion), [node_row(ctx, f"/s{s}", node_uid(repo_uid, wid, f"/s{s}"), now)
                                              for s in range((n + SECTION - 1) // SECTION)])
    for start in range(0, n, batch):
        with db.write() as session:
            ctx = begin_write(session, REPO, message=f"bench: nodes {start}")
            now = utcnow()
            session.execute(insert(NodeVersion), [node_row(ctx, leaf_path(i), ids[i], now)
                                                  for i in range(start, min(n, start + batch))])
    src, dst, types, weights = (g[k].tolist() for k in ("src", "dst", "types", "weights"))
    for start in range(0, len(src), batch):
        with db.write() as session:
            ctx = begin_write(session, REPO, message=f"bench: relations {start}")
            now = utcnow()
            session.execute(insert(RelationVersion), [
                {"repo_id": ctx.repo.id, "branch_id": ctx.branch.id, "revision": ctx.revision,
                 "from_node_id": ids[a], "to_node_id": ids[b], "rel_type": TYPES[t], "weight": w,
                 "properties": {}, "deleted": False, "created_at": now,
                 "from_address": f"{WORKSPACE}:{leaf_path(a)}", "to_address": f"{WORKSPACE}:{leaf_path(b)}"}
                for a, b, t, w in zip(src[start:start + batch], dst[start:start + batch],
                                      types[start:start + batch], weights[start:start + batch], strict=True)])
        print(f"  relations {min(len(src), start + batch):,}/{len(src):,}", file=sys.stderr, flush=True)
    if db.dialect == "postgresql":
        with db.engine.connect() as conn:
            conn.execute(text("ANALYZE node_versions"))
            conn.execute(text("ANALYZE relation_versions"))
            conn.commit()


def load_sqlite(path: Path, g: dict[str, Any]) -> sqlite3.Connection:
    """The edges in a plain SQLite table with the peers bench's indexes (kept in ``path``)."""
    fresh = not path.exists()
    sq = sqlite3.connect(str(path), check_same_thread=False)
    if fresh:
        sq.execute("CREATE TABLE edges(src INTEGER, dst INTEGER, t TEXT, w REAL)")
        sq.executemany("INSERT INTO edges VALUES (?, ?, ?, ?)", zip(
            g["src"].tolist(), g["dst"].tolist(), [TYPES[t] for t in g["types"].tolist()], g["weights"].tolist(),
            strict=True))
        sq.execute("CREATE INDEX e_src ON edges(src, w)")
        sq.execute("CREATE INDEX e_dst ON edges(dst, w)")
        sq.commit()
    return sq


def load_networkx(n: int, g: dict[str, Any]) -> nx.DiGraph:
    G = nx.DiGraph()
    G.add_nodes_from(range(n))
    G.add_edges_from((a, b, {"type": TYPES[t], "weight": w}) for a, b, t, w in zip(
        g["src"].tolist(), g["dst"].tolist(), g["types"].tolist(), g["weights"].tolist(), strict=True))
    return G


# -- measuring ---------------------------------------------------------------------------------


def interleaved(calls: dict[str, Callable[[int], Any]], n: int, warmup: int,
                check: Callable[[str, int, Any], None],
                clock: Callable[[], float] = time.perf_counter) -> dict[str, list[float]]:
    """Run ``calls[name](i)`` for i in 0..n-1, every engine once per i, the order rotated with i;
    each engine's seconds per call by ``clock``."""
    names = list(calls)
    for name in names:
        for i in range(min(warmup, n)):
            calls[name](i)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for i in range(n):
        shift = i % len(names)
        for name in names[shift:] + names[:shift]:
            started = clock()
            got = calls[name](i)
            samples[name].append(clock() - started)
            check(name, i, got)
    return samples


def stats(samples_s: list[float]) -> dict[str, float]:
    ms = [s * 1000 for s in samples_s]
    return {"n": len(ms), "p50_ms": round(percentile(ms, 50), 4), "p95_ms": round(percentile(ms, 95), 4)}


def profile(fn: Callable[[int], Any], n: int, top: int = 14) -> list[dict[str, Any]]:
    """cProfile of ``n`` calls of ``fn``: the ``top`` functions by own time."""
    prof = cProfile.Profile()
    prof.enable()
    for i in range(n):
        fn(i)
    prof.disable()
    st = pstats.Stats(prof)
    rows = []
    for (file, line, func), (_cc, calls, tt, ct, _callers) in st.stats.items():  # type: ignore[attr-defined]
        where = file.replace(str(ROOT) + "/", "") if file.startswith(str(ROOT)) else Path(file).name
        rows.append({"function": f"{where}:{line}({func})", "calls_per_call": round(calls / n, 1),
                     "own_ms_per_call": round(tt * 1000 / n, 4), "cumulative_ms_per_call": round(ct * 1000 / n, 4)})
    rows.sort(key=lambda r: -r["own_ms_per_call"])
    return rows[:top]


@contextmanager
def store(args: argparse.Namespace, folder: Path) -> Iterator[tuple[Services, str, str, bool]]:
    """kg's services on the kept SQLite store (or a fresh PostgreSQL schema); whether it must be loaded."""
    if args.database_url is None:
        fresh = not (folder / "kg.sqlite3").exists()
        settings = Settings(database_url=f"sqlite:///{folder / 'kg.sqlite3'}", data_dir=folder / "data",
                            embedding_model=MODEL, allow_fake_embedder=True)
        services = Services.from_settings(settings)
        try:
            yield services, str(settings.database_url), "sqlite", fresh
        finally:
            services.close()
        return
    with tempfile.TemporaryDirectory(prefix="kg-bench-") as tmp, \
            isolated_database(args.database_url, Path(tmp)) as (url, backend):
        settings = Settings(database_url=url, data_dir=Path(tmp) / "data", embedding_model=MODEL,
                            allow_fake_embedder=True)
        services = Services.from_settings(settings)
        try:
            yield services, url, backend, True
        finally:
            services.close()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200, help="interleaved queries per figure")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--profile", type=int, default=0, help="cProfile this many calls of each kg use case")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="cpu: the calling thread's CPU time (every engine runs in this thread), steadier "
                             "than elapsed time when other processes load the machine")
    parser.add_argument("--fresh", action="store_true", help="rebuild the kept stores")
    parser.add_argument("--database-url", default=None, help="PostgreSQL: a fresh schema, loaded each run")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    n = args.nodes
    folder = RESULTS / f"graph-peers-{n}"
    if args.fresh:
        shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True, exist_ok=True)
    g = graph_edges(n, args.seed)
    hub, ordinary = g["hub"], g["ordinary"]
    results: dict[str, Any] = {"machine": machine(), "nodes": n, "edges": len(g["src"]), "hub_degree": g["hub_degree"],
                               "next_largest_degree": g["max_other_degree"], "queries": args.queries,
                               "clock": args.clock,
                               "setup_note": "kg loaded with bulk inserts (the columns the store writes); "
                                             "everything timed goes through kg's own functions"}
    print(f"{len(g['src']):,} edges over {n:,} nodes, hub degree {g['hub_degree']:,} "
          f"(next {g['max_other_degree']:,})", file=sys.stderr, flush=True)
    with store(args, folder) as (services, url, backend, fresh):
        results["database"] = {"backend": backend, "url": redact(url)}
        services.db.upgrade()
        if fresh:
            started = time.perf_counter()
            load_into_kg(services, g, n)
            results["kg_load_s"] = round(time.perf_counter() - started, 1)
        # the view as a server builds it for a branch this large (and as the peers bench does): the
        # first walk starts a background build, which collects and freezes what it built
        started = time.perf_counter()
        services.graphs.clear()
        graph_ops.walk(services, OPERATOR, REPO, "main", [f"{WORKSPACE}:{leaf_path(ordinary[0])}"], hops=1,
                       max_nodes=10, fan_out=10)
        services.graphs.join_builds(timeout_s=3600)
        with services.db.read() as session:
            view = branch_view(session, REPO)
            graph = services.graphs.get(view_key(view))
        assert isinstance(graph, GraphView), "no view held (over the cache's budget?)"
        results["kg_view_build_s"] = round(time.perf_counter() - started, 1)
        with services.db.read() as session:
            repo_uid = branch_view(session, REPO).repo.uid
            wid = next(w for w, name in branch_view(session, REPO).workspaces.items() if name == WORKSPACE)
        uid = {i: node_uid(repo_uid, wid, leaf_path(i)) for i in [hub, *ordinary]}
        sq = load_sqlite(folder / "edges.sqlite3", g)
        G = load_networkx(n, g)
        print(f"loaded; view built in {results['kg_view_build_s']} s", file=sys.stderr, flush=True)

        def kg_top(i: int, limit: int) -> list[float | None]:
            got = graph_ops.neighbors(services, OPERATOR, REPO, "main", f"{WORKSPACE}:{leaf_path(i)}", limit=limit)
            return [r["weight"] for r in got["neighbors"]]

        def view_top(i: int, limit: int) -> list[float | None]:
            return [e.weight for e in graph.neighbors(uid[i], limit=limit)[0]]

        def nx_top(i: int, limit: int) -> list[float]:
            edges = chain((d["weight"] for d in G._succ[i].values()), (d["weight"] for d in G._pred[i].values()))
            return heapq.nlargest(limit, edges)

        def sq_top(i: int, limit: int) -> list[float]:
            return [w for _, w in sq.execute(
                "SELECT n, w FROM (SELECT * FROM (SELECT dst AS n, w FROM edges WHERE src = ?1 ORDER BY w "
                "DESC LIMIT ?2) UNION ALL SELECT * FROM (SELECT src AS n, w FROM edges WHERE dst = ?1 "
                "ORDER BY w DESC LIMIT ?2)) ORDER BY w DESC LIMIT ?2", (i, limit))]

        def kg_walk(i: int) -> set[int]:
            got = graph_ops.walk(services, OPERATOR, REPO, "main", [f"{WORKSPACE}:{leaf_path(i)}"], hops=2,
                                 direction="OUT", max_nodes=10_000, fan_out=10_000)
            return {leaf_index(r["path"]) for r in got["nodes"] if r["hop"] > 0}

        def view_walk(i: int) -> set[int]:
            walked = traverse([uid[i]], lambda x: graph.iter_neighbors(x, direction="OUT"), hops=2,
                              max_nodes=10_000, fan_out=10_000)
            return {leaf_index(graph.address(v.node_id).path) for v in walked.visits if v.hop > 0}

        def nx_walk(i: int) -> set[int]:
            seen, frontier = {i}, [i]
            for _ in range(2):
                nxt = []
                for u in frontier:
                    for v in G._succ[u]:
                        if v not in seen:
                            seen.add(v)
                            nxt.append(v)
                frontier = nxt
            return seen - {i}

        def sq_walk(i: int) -> set[int]:
            got = sq.execute("WITH RECURSIVE reach(n, d) AS (SELECT dst, 1 FROM edges WHERE src = ?1 UNION SELECT "
                             "e.dst, r.d + 1 FROM reach r JOIN edges e ON e.src = r.n WHERE r.d < 2) "
                             "SELECT DISTINCT n FROM reach", (i,)).fetchall()
            return {r[0] for r in got} - {i}

        def ordinary_node(i: int) -> int:
            return int(ordinary[i % len(ordinary)])

        same: Callable[[Any], Any] = lambda got: [round(w, 6) for w in got]  # noqa: E731
        figures: list[tuple[str, dict[str, Callable[[int], Any]], Callable[[Any], Any]]] = [
            ("NEIGHBORS hub, top 10", {"kg use case": lambda i: kg_top(hub, 10),
                                       "kg view held": lambda i: view_top(hub, 10),
                                       "sqlite": lambda i: sq_top(hub, 10),
                                       "networkx": lambda i: nx_top(hub, 10)}, same),
            ("NEIGHBORS hub, 10,000 rows", {"kg use case": lambda i: kg_top(hub, 10_000),
                                            "kg view held": lambda i: view_top(hub, 10_000),
                                            "sqlite": lambda i: sq_top(hub, 10_000),
                                            "networkx": lambda i: nx_top(hub, 10_000)}, same),
            ("NEIGHBORS ordinary node, limit 100", {
                "kg use case": lambda i: kg_top(ordinary_node(i), 100),
                "kg view held": lambda i: view_top(ordinary_node(i), 100),
                "sqlite": lambda i: sq_top(ordinary_node(i), 100),
                "networkx": lambda i: nx_top(ordinary_node(i), 100)}, lambda got: sorted(same(got))),
            ("2-hop traverse, out-edges, all reached", {
                "kg use case": lambda i: kg_walk(ordinary_node(i)),
                "kg view held": lambda i: view_walk(ordinary_node(i)),
                "sqlite": lambda i: sq_walk(ordinary_node(i)),
                "networkx": lambda i: nx_walk(ordinary_node(i))}, lambda got: got),
        ]
        rows, out, profiles = [], {}, {}
        results["load_average_before"] = load_average()
        for label, calls, norm in figures:
            reps = args.queries if "10,000" not in label else max(20, args.queries // 4)
            answers: dict[str, dict[int, Any]] = {name: {} for name in calls}
            print(f"{label}: {reps} x {len(calls)}, interleaved", file=sys.stderr, flush=True)

            def keep(name: str, i: int, got: Any, a: dict[str, dict[int, Any]] = answers,
                     f: Callable[[Any], Any] = norm) -> None:
                a[name][i] = f(got)

            samples = interleaved(calls, reps, args.warmup, keep,
                                  time.perf_counter if args.clock == "wall" else time.thread_time)
            for name in calls:
                wrong = [i for i in range(reps) if answers[name][i] != answers["networkx"][i]]
                assert not wrong, f"{label}: {name} answers differently from networkx at query {wrong[0]}"
            s = {name: stats(v) for name, v in samples.items()}
            kg = s["kg use case"]["p50_ms"]
            out[label] = {**s, "kg_over_sqlite_p50": round(kg / s["sqlite"]["p50_ms"], 2),
                          "kg_over_networkx_p50": round(kg / s["networkx"]["p50_ms"], 2)}
            rows.append([label, kg, s["kg use case"]["p95_ms"], s["kg view held"]["p50_ms"], s["sqlite"]["p50_ms"],
                         s["networkx"]["p50_ms"], out[label]["kg_over_sqlite_p50"],
                         out[label]["kg_over_networkx_p50"]])
            if args.profile:
                profiles[label] = profile(calls["kg use case"], args.profile)
        results["load_average_after"] = load_average()
        results["figures"] = out
        if profiles:
            results["profiles"] = profiles
        sq.close()
    print(table(rows, ["figure (p50 ms)", "kg use case", "kg p95", "kg view held", "sqlite", "networkx",
                       "kg / sqlite", "kg / networkx"]))
    print(f"{args.clock} clock; load average before {results['load_average_before']}, "
          f"after {results['load_average_after']}")
    for label, top in profiles.items():
        print(f"\nprofile, {label}, kg use case (ms per call):")
        print(table([[r["function"][-70:], r["calls_per_call"], r["own_ms_per_call"], r["cumulative_ms_per_call"]]
                     for r in top], ["function", "calls", "own", "cumulative"]))
    suffix = "" if results["database"]["backend"] == "sqlite" else f"_{results['database']['backend']}"
    write_results(results, args.out or RESULTS / f"graph_peers{suffix}.json")
    return results


if __name__ == "__main__":
    main()
