"""Benchmark of the HNSW graph's build on one thread against the builder's thread count.

Builds the embedded index's graph (:class:`kg.index.ann.HnswGraph`, M and ef_construction as
configured) of the same N vectors on one OpenMP thread and on ``--threads`` (default: the
usable cores, as the index's builder thread does), alternating, ``--repeats`` times each, through
the graph's own ``add`` (slices under its lock, as the builder adds them). The vectors are the
peers bench's (``bench/peers.py``): 1,024 Gaussian centroids, noise 0.6, L2-normalised, the
hardest of kg's synthetic sets for a graph.

Reported per thread count: wall and CPU seconds of the build (medians), the ratio of the
parallel build's wall time to the one-thread build's, and recall@10 of each graph (ef 128,
against an exact scan), so a faster build that loses recall shows.

Run: ``python bench/ann_build.py [--n 100000] [--threads 2] [--repeats 2]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import RESULTS, machine, table, write_results  # noqa: E402
from kg.index import ann  # noqa: E402
from kg.index.embedded import AnnConfig  # noqa: E402

DIM = 384
CENTROIDS = 1_024


def vectors(n: int, seed: int) -> np.ndarray:
    """The peers bench's vectors: Gaussian centroids plus noise 0.6, L2-normalised."""
    rng = np.random.default_rng(seed)
    centroids = rng.standard_normal((CENTROIDS, DIM)).astype(np.float32)
    out = centroids[rng.integers(CENTROIDS, size=n)] + 0.6 * rng.standard_normal((n, DIM)).astype(np.float32)
    out /= np.linalg.norm(out, axis=1, keepdims=True)
    return out


def build(data: np.ndarray, threads: int) -> tuple[ann.HnswGraph, float, float]:
    """A graph of ``data`` added on ``threads`` threads, its wall and CPU seconds."""
    config = AnnConfig()
    graph = ann.HnswGraph(DIM, config.m, config.ef_construction)
    wall, cpu = time.perf_counter(), time.process_time()
    graph.add(data, threads=threads)
    return graph, time.perf_counter() - wall, time.process_time() - cpu


def recall(graph: ann.HnswGraph, data: np.ndarray, queries: np.ndarray) -> float:
    """Mean recall@10 of the graph's candidates (ef 128) against an exact scan."""
    truth = np.argsort(-(queries @ data.T), axis=1)[:, :10]
    got = [graph.search(q, 10, ef=128, bitmap=None, limit=len(data)) for q in queries]
    return float(np.mean([len(set(g.tolist()) & set(t.tolist())) / 10 for g, t in zip(got, truth, strict=True)]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--threads", type=int, default=ann.usable_cores())
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--out", type=Path, default=RESULTS / "ann_build.json")
    args = parser.parse_args()
    data = vectors(args.n, seed=1)
    rng = np.random.default_rng(2)
    queries = data[rng.integers(args.n, size=args.queries)] + 0.2 * rng.standard_normal(
        (args.queries, DIM)).astype(np.float32) / np.sqrt(DIM)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    runs: dict[int, list[dict[str, float]]] = {1: [], args.threads: []}
    for r in range(args.repeats):
        for threads in ((1, args.threads) if r % 2 == 0 else (args.threads, 1)):
            graph, wall, cpu = build(data, threads)
            runs[threads].append({"wall_s": wall, "cpu_s": cpu, "recall_at_10": recall(graph, data, queries)})
            print(f"threads {threads}: wall {wall:.1f} s, CPU {cpu:.1f} s, recall@10 "
                  f"{runs[threads][-1]['recall_at_10']:.3f}", flush=True)
            del graph
    med: dict[int, dict[str, float]] = {
        t: {k: statistics.median(x[k] for x in got) for k in got[0]} for t, got in runs.items()}
    one = med[1]
    rows = [[t, f"{m['wall_s']:.1f}", f"{m['cpu_s']:.1f}", f"{m['wall_s'] / one['wall_s']:.2f}",
             f"{m['cpu_s'] / one['cpu_s']:.2f}", f"{m['recall_at_10']:.3f}"] for t, m in med.items()]
    print(table(rows, ["threads", "wall s", "CPU s", "wall / 1 thread", "CPU / 1 thread", "recall@10"]))
    results: dict[str, Any] = {"machine": machine(), "config": {**vars(args), "out": str(args.out)},
                               "runs": {str(t): got for t, got in runs.items()}}
    write_results(results, args.out)


if __name__ == "__main__":
    main()
