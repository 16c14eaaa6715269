"""What a read use case adds to its index or graph work: KNN, BM25 and NEIGHBORS, on main and on a branch.

A read use case is the engine's answer plus kg around it: the caller's access decision, the read
session, the branch view (repository, branch chain, workspaces), the searchable set of the branch
state, the index catch-up, and the hits' properties. This bench times, per query and interleaved
(each query runs every call in turn, so the machine's drift hits them alike):

- ``knn``: ``search_branch`` (vector, k 10, chunk granularity) against the embedded index's
  ``knn`` alone on the same content keys;
- ``bm25``: ``search_branch`` (fulltext, k 10, chunk granularity) against the index's ``bm25``;
- ``neighbors``: ``kg.rag.graph.neighbors`` of the hub (top 10 by weight) against the held graph
  view's ``neighbors``.

Each on ``main`` and on a branch of it with ``--branch-writes`` records written on the branch (an
override of an existing node and new ones). It prints p50 / p95 / max per call, the use case's
added milliseconds (use case - engine) and the ratio use case / engine, and writes
``bench/results/use_case_overhead.json``.

The corpus: ``--nodes`` nodes of one ~60-word passage each (one chunk per node) in one workspace,
the deterministic ``fake:hash-384`` embedder (a query's cost does not depend on what the vectors
mean), and ``--nodes // 2`` relations to a hub node plus as many between random nodes. The data
folder is ``bench/results/use-case-overhead-<nodes>/`` (``--fresh`` rebuilds it).

Run: ``python bench/use_case_overhead.py [--nodes 10000] [--queries 200] [--clock cpu] [--pollute-mb 64]``
(``cpu``: the calling thread's CPU time, steadier than elapsed time when other processes load the
machine; ``--pollute-mb``: that much memory written before each call, so each runs with the CPU's
caches cold, as in a process where other engines run between kg's calls: the peers bench).
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy is imported

import argparse  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from bench._common import RESULTS, load_average, machine, percentile, table, write_results  # noqa: E402
from kg import context  # noqa: E402
from kg.context import OPERATOR  # noqa: E402
from kg.index.base import KeySet, SearchScope  # noqa: E402
from kg.ops import bulk  # noqa: E402
from kg.ops.branches import create_branch  # noqa: E402
from kg.ops.nodes import batch  # noqa: E402
from kg.rag import graph as graph_ops  # noqa: E402
from kg.rag.search import SearchRequest, search_branch  # noqa: E402
from kg.services import Services  # noqa: E402
from kg.settings import Settings  # noqa: E402
from kg.store.models import Chunk, Repository  # noqa: E402
from kg.store.nodes import get_node  # noqa: E402
from kg.store.repos import branch_view  # noqa: E402

REPO = "overhead"
WORKSPACE = "docs"
MODEL = "fake:hash-384"
BRANCH = "review"
WORDS = [f"w{i}" for i in range(5000)]


def _text(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS[: 50 + rng.randrange(len(WORDS) - 50)]) for _ in range(60))


def build(services: Services, n: int, seed: int) -> dict[str, Any]:
    """Import the nodes and relations (kg's NDJSON import), embed the texts, create the branch."""
    rng = random.Random(seed)
    header = json.dumps({"record": "header", "format": "kg-ndjson", "version": 1, "repo": REPO, "branch": "main",
                         "revision": 0, "with_chunks": False,
                         "workspaces": [{"name": WORKSPACE, "embedding": {"model": MODEL}}]})
    lines = [header]
    lines += [json.dumps({"record": "node", "workspace": WORKSPACE, "path": f"/n{i}", "node_type": "bench:Doc",
                          "properties": {"content": _text(rng), "shard": i % 10}}) for i in range(n)]
    edges = {(i, 0) for i in range(1, n, 2)} | {(rng.randrange(1, n), rng.randrange(1, n)) for _ in range(n // 2)}
    lines += [json.dumps({"record": "relation", "from": f"{WORKSPACE}:/n{a}", "to": f"{WORKSPACE}:/n{b}",
                          "type": "cites", "weight": round(rng.random(), 4)}) for a, b in sorted(edges) if a != b]
    started = time.perf_counter()
    bulk.import_ndjson(services, OPERATOR, REPO, lines)
    while True:
        run = services.indexer.run_pending()
        if not run.done and not run.failed:
            break
    context.run(services, OPERATOR, create_branch, REPO, name=BRANCH)
    return {"nodes": n, "relations": len(lines) - n - 1, "build_s": round(time.perf_counter() - started, 1)}


def write_on_branch(services: Services, writes: int, seed: int) -> None:
    """``writes`` records on the branch: an override of /n1 and new nodes, embedded."""
    rng = random.Random(seed + 1)
    upserts = [{"workspace": WORKSPACE, "path": "/n1" if i == 0 else f"/branch/n{i}", "node_type": "bench:Doc",
                "properties": {"content": _text(rng), "shard": 99}} for i in range(writes)]
    context.run(services, OPERATOR, batch, REPO, BRANCH, upserts=upserts, parents=True)
    while True:
        run = services.indexer.run_pending()
        if not run.done and not run.failed:
            break


def interleaved(calls: dict[str, Callable[[int], Any]], queries: int, warmup: int,
                clock: Callable[[], float], pollute_mb: int = 0) -> dict[str, list[float]]:
    """Each query runs every call in turn, the order rotated per query; ms per call by ``clock``.
    With ``pollute_mb``, that many MB of memory are written before each call (not timed): what
    the other engines of a process do between two of kg's calls, evicting the CPU's caches."""
    names = list(calls)
    for i in range(warmup):
        for name in names:
            calls[name](i)
    dirt = np.zeros(pollute_mb * 2**20 // 8) if pollute_mb else None
    samples: dict[str, list[float]] = {name: [] for name in names}
    for i in range(queries):
        shift = i % len(names)
        for name in names[shift:] + names[:shift]:
            if dirt is not None:
                dirt += 1.0
            started = clock()
            calls[name](i)
            samples[name].append((clock() - started) * 1000)
    return samples


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--branch-writes", type=int, default=5)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="wall: elapsed time; cpu: this thread's CPU time (steadier on a loaded machine: "
                             "leaves out the time other processes held the cores)")
    parser.add_argument("--pollute-mb", type=int, default=0,
                        help="MB of memory written before each call (the CPU's caches cold, as between other "
                             "engines' calls in one process; default 0: warm)")
    parser.add_argument("--fresh", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS / "use_case_overhead.json")
    args = parser.parse_args(argv)
    workdir = RESULTS / f"use-case-overhead-{args.nodes}"
    if args.fresh and workdir.exists():
        shutil.rmtree(workdir)
    fresh = not workdir.exists()
    workdir.mkdir(parents=True, exist_ok=True)
    settings = Settings(database_url=f"sqlite:///{workdir / 'kg.sqlite3'}", data_dir=workdir / "data",
                        embedding_model=MODEL, index_inline=False, allow_fake_embedder=True)
    services = Services.from_settings(settings)
    results: dict[str, Any] = {"machine": machine(), "load_average_before": load_average(), "k": 10,
                               "clock": args.clock, "nodes": args.nodes, "pollute_mb": args.pollute_mb}
    rows = []
    try:
        services.db.upgrade()
        if fresh:
            print("building the corpus ...", file=sys.stderr, flush=True)
            results["build"] = build(services, args.nodes, args.seed)
        write_on_branch(services, args.branch_writes, args.seed)  # a new branch state each run
        with services.db.read() as session:
            repo_id, uid = session.query(Repository.id, Repository.uid).filter(Repository.name == REPO).one()
            keys = SearchScope(KeySet(session.scalars(Chunk.__table__.select().with_only_columns(Chunk.content_key)
                                             .where(Chunk.repo_id == repo_id))), ())
        services.index.flush(uid)
        embedder = services.embedder(MODEL)
        rng = random.Random(args.seed + 2)
        texts = [" ".join(rng.choice(WORDS[:500]) for _ in range(3)) for _ in range(args.queries + args.warmup)]
        vectors = [embedder.embed([t])[0] for t in texts]
        hub = f"{WORKSPACE}:/n0"
        for branch in ("main", BRANCH):
            with services.db.read() as session:
                view = branch_view(session, REPO, branch)
                graph_ops.warm_graph(session, services, view)
                hub_id = get_node(session, view, WORKSPACE, "/n0").node_id
            held = services.graphs.get(graph_ops.view_key(view))

            def knn_case(i: int, branch: str = branch) -> Any:
                return search_branch(services, OPERATOR, REPO, branch, SearchRequest(
                    query=texts[i], k=10, mode="vector", granularity="chunk")).results

            def bm25_case(i: int, branch: str = branch) -> Any:
                return search_branch(services, OPERATOR, REPO, branch, SearchRequest(
                    query=texts[i], k=10, mode="fulltext", granularity="chunk")).results

            def neighbors_case(i: int, branch: str = branch) -> Any:
                return graph_ops.neighbors(services, OPERATOR, REPO, branch, hub, limit=10)

            calls: dict[str, Callable[[int], Any]] = {
                "knn use case": knn_case,
                "knn index": lambda i: services.index.knn(uid, vectors[i], 10, model=MODEL, scope=keys),
                "bm25 use case": bm25_case,
                "bm25 index": lambda i: services.index.bm25(uid, texts[i], 10, scope=keys),
                "neighbors use case": neighbors_case,
            }
            if held is not None:
                calls["neighbors held view"] = lambda i, g=held, h=hub_id: g.neighbors(h, limit=10)
            clock = time.perf_counter if args.clock == "wall" else time.thread_time
            samples = interleaved(calls, args.queries, args.warmup, clock, args.pollute_mb)
            figures = {name: {"p50_ms": round(percentile(s, 50), 3), "p95_ms": round(percentile(s, 95), 3),
                              "max_ms": round(max(s), 3)} for name, s in samples.items()}
            results[branch] = figures
            for what, engine in (("knn", "knn index"), ("bm25", "bm25 index"), ("neighbors", "neighbors held view")):
                case, alone = figures[f"{what} use case"], figures.get(engine)
                if alone is None:
                    continue
                for stat in ("p50_ms", "p95_ms"):
                    rows.append([branch, what, stat[:3], case[stat], alone[stat], round(case[stat] - alone[stat], 3),
                                 round(case[stat] / alone[stat], 1)])
        results["load_average_after"] = load_average()
    finally:
        services.close()
    print(table(rows, ["branch", "figure", "stat", "use case ms", "engine ms", "added ms", "ratio"]))
    print(f"{args.nodes:,} nodes, {args.clock} clock, {args.pollute_mb} MB written before each call; "
          f"load average before {results['load_average_before']}, "
          f"after {results['load_average_after']}")
    write_results(results, args.out)
    return results


if __name__ == "__main__":
    main()
