"""Benchmark of the embedded index's HNSW tier against its exact scan: where they cross, and ef.

For each size N (``--sizes``) the same clustered 384-d vectors (``bench/ann_libraries.py``'s
:func:`clustered`) are synced into two :class:`~kg.index.embedded.EmbeddedVectorIndex`: one
exact (tier off), one with the tier (its graph built by the syncs, 5,000 chunks a call as
``sync_index`` sends them). Reported: sync rate of each, ``knn`` p50/p95 at k=10 with every row
allowed and with a random 50 % / 10 % of the content keys allowed (a branch), recall@10 of the tier
against the exact index for each ef in ``--ef``, and the estimated memory of each.

The threshold ``KG_INDEX_ANN_MIN_ROWS`` is set where the tier's p50 at the default ef falls
clearly below the exact p50 (docs/concepts/ann.md).

Prints a table and writes JSON (default ``bench/results/ann_tier.json``).
Run: ``python bench/ann_tier.py [--sizes 5000,10000,20000,50000] [--ef 32,64,96,128]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import RESULTS, machine, percentile, table, write_results  # noqa: E402
from bench.ann_libraries import clustered  # noqa: E402
from kg.index.base import IndexedChunk, SearchScope  # noqa: E402
from kg.index.embedded import AnnConfig, EmbeddedVectorIndex  # noqa: E402

DIM = 384
MODEL = "bench:clustered"


def chunks(vectors: np.ndarray) -> list[IndexedChunk]:
    """One chunk per vector, one content key each."""
    return [IndexedChunk(seq=i + 1, content_key=f"k{i}", chunk_index=0, text="", model=MODEL, vector=v)
            for i, v in enumerate(vectors)]


def timed(
    index: EmbeddedVectorIndex, queries: np.ndarray, keys: frozenset[str]
) -> tuple[dict[str, float], list[set[int]]]:
    """p50/p95 of knn at k=10 (ms) and the seqs found per query."""
    index.knn("r", queries[0], 10, model=MODEL, scope=SearchScope(keys))  # warm the memoised masks
    samples, found = [], []
    for q in queries:
        t = time.perf_counter()
        hits = index.knn("r", q, 10, model=MODEL, scope=SearchScope(keys))
        samples.append((time.perf_counter() - t) * 1000)
        found.append({h.seq for h in hits})
    return {"p50_ms": round(percentile(samples, 50), 3), "p95_ms": round(percentile(samples, 95), 3)}, found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="5000,10000,20000,50000")
    parser.add_argument("--ef", default="32,64,96,128")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--m", type=int, default=AnnConfig.m, help="HNSW neighbours per node (M)")
    parser.add_argument("--clusters", type=int, default=1000)
    parser.add_argument("--spread", type=float, default=1.3)
    parser.add_argument("--out", type=Path, default=RESULTS / "ann_tier.json")
    args = parser.parse_args()
    efs = [int(x) for x in args.ef.split(",")]
    config = AnnConfig(min_rows=1, m=args.m)
    results: dict[str, Any] = {"machine": machine(), "config": {**vars(args), "out": str(args.out)},
                               "ann": dataclasses.asdict(config), "sizes": {}}
    queries = clustered(args.queries, DIM, args.clusters, args.spread, seed=10**6 + 1)
    rng = np.random.default_rng(3)
    rows = []
    for n in [int(x) for x in args.sizes.split(",")]:
        vectors = clustered(n, DIM, args.clusters, args.spread, seed=1)
        batch = chunks(vectors)
        entry: dict[str, Any] = {}
        indexes = {"exact": EmbeddedVectorIndex(None, ann=AnnConfig(min_rows=0)),
                   "hnsw": EmbeddedVectorIndex(None, ann=config)}
        for name, index in indexes.items():
            t = time.perf_counter()
            for start in range(0, n, 5000):
                index.sync("r", batch[start : start + 5000])
            index.wait_for_background("r")  # a large build runs in the builder thread: timed to its end
            entry[f"{name}_sync_per_s"] = round(n / (time.perf_counter() - t))
            entry[f"{name}_bytes"] = index.memory_bytes()
        filters = {"all": frozenset(f"k{i}" for i in range(n))}
        for share in (0.5, 0.1):
            filters[str(share)] = frozenset(f"k{i}" for i in np.flatnonzero(rng.random(n) < share))
        for label, keys in filters.items():
            exact_latency, truth = timed(indexes["exact"], queries, keys)
            entry[label] = {"exact": exact_latency}
            for ef in efs:
                indexes["hnsw"]._ann = dataclasses.replace(config, ef_search=ef)
                latency, found = timed(indexes["hnsw"], queries, keys)
                rec = float(np.mean([len(f & t) / max(1, len(t)) for f, t in zip(found, truth, strict=True)]))
                entry[label][f"hnsw_ef{ef}"] = {**latency, "recall_at_10": round(rec, 4),
                                                "p50_vs_exact": round(latency["p50_ms"] / exact_latency["p50_ms"], 3)}
        results["sizes"][n] = entry
        print(n, entry)
        for label in filters:
            for ef in efs:
                e = entry[label][f"hnsw_ef{ef}"]
                rows.append([n, label, ef, entry[label]["exact"]["p50_ms"], e["p50_ms"], e["p95_ms"],
                             e["recall_at_10"], e["p50_vs_exact"]])
        rows.append([n, "sync/s", "", entry["exact_sync_per_s"], entry["hnsw_sync_per_s"], "", "",
                     f"MiB {entry['exact_bytes'] / 2**20:.0f} -> {entry['hnsw_bytes'] / 2**20:.0f}"])
    print(table(rows, ["N", "allowed", "ef", "exact p50", "hnsw p50", "hnsw p95", "recall@10", "ratio"]))
    write_results(results, args.out)


if __name__ == "__main__":
    main()
