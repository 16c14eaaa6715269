"""Benchmark of the BM25 postings at scale: build, memory, query latency, snapshot load.

Corpus: synthetic, deterministic (``--seed``): a vocabulary of ``--vocab`` pronounceable word
types (``bako``, ``tuvime``, ...) drawn with Zipf-Mandelbrot frequencies (rank r has weight
``1 / (r + 2.7)``, exponent 1, as in English text), chunks of 100 to 200 tokens (150 on
average). Texts are generated batch by batch from the seed, so both implementations index
exactly the same chunks and the texts are never all held at once.

Queries of 2, 4 and 8 terms; each term is drawn half of the time by corpus frequency (mostly
frequent words) and half of the time uniformly from the ranks 100 and above (rare words).
Each query runs with a mask selecting 90 % of the chunks at random (a branch that does not
see every chunk), k 50 (the depth hybrid search reads). Chunk-level :meth:`search` and the
node-level :meth:`search_groups` (BM25F; 5 chunks a node, the first one field 0, the others
field 1, weights 2 and 1) are both timed. Each query runs ``--repeat`` times and counts its
fastest run (the machine is shared: the fastest run is the least disturbed); p50 and p95 are
over the queries.

The two implementations run in the same invocation, each in its own subprocess (so their
resident memory is measured apart):

* ``old``: ``bench/_bm25_baseline.py``, ``kg/index/bm25.py`` at commit 0c27706 copied verbatim
  (per-term growable arrays; a snapshot load re-analyses every text, so its load time is its
  build time).
* ``new``: ``kg/index/bm25.py`` (frozen CSR segment plus a tail; a snapshot load is
  :meth:`BM25Index.from_arrays` over the arrays :meth:`BM25Index.to_arrays` wrote with
  :func:`numpy.savez`).

Memory: ``nbytes`` sums the NumPy arrays (capacity included); ``rss_delta`` is the growth of the
process's resident set while building (the vocabulary dict and Python objects included).
The results of every query are compared between the two (same documents, scores within
1e-9 relative).

Prints the figures and writes them as JSON (default ``bench/results/bm25_scale.json``).
Run: ``python bench/bm25_scale.py [--docs 100000] [--vocab 200000] [--analyzer kg|split]``
(``split`` skips kg's analyzer, to time the postings alone; the words are already terms).
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import RESULTS, machine, percentile, table, write_results  # noqa: E402

CONSONANTS, VOWELS = "bdfgklmnprstvz", "aeiou"
BATCH = 10_000  # chunks per add_many, as a large sync would add them
GROUP = 5  # chunks per node for search_groups
K = 50


def vocabulary(size: int) -> list[str]:
    """``size`` distinct words of two or more consonant-vowel syllables, by frequency rank."""
    syllables = [c + v for c in CONSONANTS for v in VOWELS]
    words = []
    for rank in range(size):
        x, word = rank + len(syllables), ""
        while x:
            x, d = divmod(x, len(syllables))
            word = syllables[d] + word
        words.append(word)
    return words


def zipf_cdf(size: int) -> np.ndarray:
    """Cumulative Zipf-Mandelbrot probabilities of ranks 0..size-1."""
    weights = 1.0 / (np.arange(size) + 2.7)
    return np.cumsum(weights / weights.sum())


def batches(n_docs: int, words: list[str], seed: int) -> Iterator[list[str]]:
    """The corpus, ``BATCH`` texts at a time, each batch from its own seeded generator."""
    cdf = zipf_cdf(len(words))
    for start in range(0, n_docs, BATCH):
        rng = np.random.default_rng([seed, start])
        count = min(BATCH, n_docs - start)
        ranks = np.searchsorted(cdf, rng.random((count, 200))).clip(0, len(words) - 1)
        lengths = rng.integers(100, 201, count)
        yield [" ".join([words[r] for r in row[:length]]) for row, length in zip(ranks.tolist(), lengths, strict=True)]


def queries(words: list[str], seed: int, n_terms: int, count: int) -> list[str]:
    """``count`` queries of ``n_terms`` words mixing frequent and rare ones."""
    rng = np.random.default_rng([seed, 1_000_000 + n_terms])
    cdf = zipf_cdf(len(words))
    out = []
    for _ in range(count):
        by_frequency = np.searchsorted(cdf, rng.random(n_terms)).clip(0, len(words) - 1)
        rare = rng.integers(min(100, len(words) - 1), len(words), n_terms)
        ranks = np.where(rng.random(n_terms) < 0.5, by_frequency, rare)
        out.append(" ".join(words[r] for r in ranks))
    return out


def rss_bytes() -> int:
    """The resident set size of this process now, after returning freed heap to the system."""
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def old_nbytes(index: Any) -> int:
    """Array bytes of the baseline index (postings with capacity, lengths)."""
    return sum(buf.nbytes for buf, _ in index._postings.values()) + index._docs[0].nbytes


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """``(seconds, fn())``."""
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def worker(impl: str, args: argparse.Namespace) -> dict[str, Any]:
    """Build, measure and query one implementation; the figures and every query's hits."""
    if impl == "old":
        from bench._bm25_baseline import BM25Index
    else:
        from kg.index.bm25 import BM25Index
    analyzer: Callable[[str], list[str]]
    if args.analyzer == "split":
        analyzer = str.split
    else:
        from kg.index.tokenize import analyze as analyzer
    words = vocabulary(args.vocab)
    query_sets = {n: queries(words, args.seed, n, args.queries) for n in (2, 4, 8)}
    rss_before = rss_bytes()
    index = BM25Index(analyzer=analyzer)
    build_s = 0.0
    for start, texts in zip(range(0, args.docs, BATCH), batches(args.docs, words, args.seed), strict=True):
        seconds, _ = timed(lambda texts=texts, start=start: index.add_many(enumerate(texts, start=start)))
        build_s += seconds
    del texts
    rss_after = rss_bytes()
    out: dict[str, Any] = {
        "impl": impl,
        "build_s": round(build_s, 2),
        "build_chunks_per_s": round(args.docs / build_s),
        "n_terms": index.n_terms,
        "nbytes": old_nbytes(index) if impl == "old" else index.nbytes,
        "rss_delta_bytes": rss_after - rss_before,
    }
    if impl == "new":
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "bm25.npz"
            save_s, _ = timed(lambda: np.savez(path, **index.to_arrays()))

            def load() -> Any:
                with np.load(path, allow_pickle=False) as arrays:
                    return BM25Index.from_arrays(arrays, analyzer=analyzer)

            load_s, loaded = timed(load)
            out |= {"save_s": round(save_s, 2), "load_s": round(load_s, 2),
                    "snapshot_bytes": path.stat().st_size}
            del loaded
    else:
        out["load_s"] = out["build_s"]  # a load re-analyses and re-indexes every text
    rng = np.random.default_rng([args.seed, 7])
    mask = rng.random(args.docs) < 0.9
    groups = np.arange(args.docs) // GROUP
    fields = np.where(np.arange(args.docs) % GROUP == 0, 0, 1)
    latency: dict[str, dict[str, float]] = {}
    hits: dict[str, list[Any]] = {}
    kinds = ("search", "groups") if impl == "old" else ("search", "groups", "groups_memo")
    stats = index.group_stats(np.where(mask, groups, -1), fields) if impl == "new" else None
    for n_terms, qs in query_sets.items():
        for kind in kinds:
            samples, got = [], []
            for q in qs:
                runs = []
                for _ in range(args.repeat):
                    if kind == "search":
                        seconds, result = timed(lambda q=q: index.search(q, K, mask))
                    elif kind == "groups":
                        seconds, result = timed(lambda q=q: index.search_groups(
                            q, K, groups=np.where(mask, groups, -1), fields=fields, field_weights=[2.0, 1.0]))
                    else:  # the statistics computed once per branch state, as the embedded index does
                        seconds, result = timed(lambda q=q: index.search_groups(
                            q, K, field_weights=[2.0, 1.0], stats=stats))
                    runs.append(seconds)
                if kind == "search":
                    got.append([[d, s] for d, s in result])
                else:
                    got.append([[h.group, h.score, h.best_doc] for h in result])
                samples.append(min(runs) * 1000)
            latency[f"{kind}_{n_terms}"] = {"p50_ms": round(percentile(samples, 50), 2),
                                            "p95_ms": round(percentile(samples, 95), 2)}
            hits[f"{kind}_{n_terms}"] = got
    out["latency"] = latency
    out["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"figures": out, "hits": hits}


def same_hits(a: list[Any], b: list[Any]) -> bool:
    """Both lists rank the same items (and best passages) with scores within 1e-9 relative."""
    return len(a) == len(b) and all(
        x[0] == y[0] and abs(x[1] - y[1]) <= 1e-9 * abs(y[1]) and x[2:] == y[2:]
        for x, y in zip(a, b, strict=True)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=100_000)
    parser.add_argument("--vocab", type=int, default=200_000)
    parser.add_argument("--queries", type=int, default=100, help="queries per length")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each query; its time is the fastest")
    parser.add_argument("--analyzer", choices=["kg", "split"], default="kg")
    parser.add_argument("--impls", default="old,new", help="comma-separated: old, new")
    parser.add_argument("--worker", choices=["old", "new"], help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args)))
        return
    runs: dict[str, dict[str, Any]] = {}
    for impl in args.impls.split(","):
        cmd = [sys.executable, __file__, "--worker", impl, "--docs", str(args.docs), "--vocab", str(args.vocab),
               "--queries", str(args.queries), "--seed", str(args.seed), "--repeat", str(args.repeat),
               "--analyzer", args.analyzer]
        print(f"running {impl} ...", flush=True)
        done = subprocess.run(cmd, check=True, capture_output=True, text=True)
        runs[impl] = json.loads(done.stdout.splitlines()[-1])
    results: dict[str, Any] = {
        "benchmark": "bm25_scale",
        "machine": machine(),
        "params": {"docs": args.docs, "vocab": args.vocab, "queries_per_length": args.queries,
                   "seed": args.seed, "analyzer": args.analyzer, "k": K, "repeat": args.repeat, "mask_fraction": 0.9,
                   "chunks_per_group": GROUP},
        **{impl: run["figures"] for impl, run in runs.items()},
    }
    rows = []
    figures = {impl: run["figures"] for impl, run in runs.items()}
    for name in ("build_chunks_per_s", "nbytes", "rss_delta_bytes", "peak_rss_bytes", "load_s"):
        rows.append([name, *(figures[i][name] for i in figures)])
    names = list(dict.fromkeys(name for f in figures.values() for name in f["latency"]))
    for name in names:
        for stat in ("p50_ms", "p95_ms"):
            rows.append([f"{name} {stat}", *(figures[i]["latency"].get(name, {}).get(stat, "") for i in figures)])
    if {"old", "new"} <= figures.keys():
        for row in rows:
            row.append(round(row[1] / row[2], 2) if row[1] != "" and row[2] else "")
        old_hits, new_hits = runs["old"]["hits"], runs["new"]["hits"]
        agree = {name: sum(same_hits(a, b) for a, b in zip(old_hits[name], new_hits[name], strict=True))
                 for name in old_hits}
        results["identical_results"] = {name: f"{count}/{len(old_hits[name])}" for name, count in agree.items()}
        results["ratio_old_over_new"] = {row[0]: row[-1] for row in rows}
    if "new" in runs and "groups_memo_2" in runs["new"]["hits"]:
        new_hits = runs["new"]["hits"]
        agree_memo = {name: sum(same_hits(a, b) for a, b in zip(
            new_hits[name], new_hits[name.replace("groups_", "groups_memo_")], strict=True))
            for name in new_hits if name.startswith("groups_") and "memo" not in name}
        results["memo_identical_to_groups"] = {name: f"{count}/{len(new_hits[name])}"
                                               for name, count in agree_memo.items()}
        print("memoised statistics, identical results:", results["memo_identical_to_groups"])
    print(table(rows, ["figure", *figures, *(["old / new"] if len(figures) == 2 else [])]))
    if "identical_results" in results:
        print("identical results:", results["identical_results"])
    write_results(results, args.out or RESULTS / f"bm25_scale_{args.docs}.json")


if __name__ == "__main__":
    main()
