"""Benchmark of the embedded index: sync, KNN and BM25 latency, snapshot flush and load.

Corpus: 20,000 chunks of the PEP fixture (150-word windows, the corpus cycled with shifted
window offsets until there are enough), one content key per (pass, document), random unit
vectors of 384 dimensions (the timing does not depend on what the vectors mean). Searches are
restricted to a random half of the content keys, as a branch or filter would restrict them.

KNN is compared with a plain NumPy baseline on the same data in the same run: one product over
the full matrix, a precomputed boolean row mask, ``argpartition`` and a sort of the top k.

With ``--scifact DIR`` (BEIR layout: corpus.jsonl, queries.jsonl, qrels.tsv) it also reports the
BM25 leg's nDCG@10 on that collection, to check the ranking as well as the speed.

Prints the figures and writes them as JSON (default ``bench/results/index_embedded.json``).
Run: ``python bench/index_embedded.py [--chunks 20000] [--dim 384]``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kg.index.base import IndexedChunk, SearchScope  # noqa: E402
from kg.index.bm25 import BM25Index  # noqa: E402
from kg.index.embedded import EmbeddedVectorIndex  # noqa: E402

REPO = "bench"
MODEL = "bench:random"


def pep_chunks(n: int, window: int = 150) -> list[tuple[str, int, str]]:
    """``(content_key, chunk_index, text)`` for n chunks of the PEP fixture."""
    docs = [
        p.read_text(encoding="utf-8").split()
        for p in sorted((ROOT / "fixtures" / "peps" / "docs").glob("*.rst"))
    ]
    out: list[tuple[str, int, str]] = []
    for turn in range(n):  # bounded: every pass adds chunks
        offset = (turn * 37) % window
        for d, words in enumerate(docs):
            starts = range(0, max(1, len(words) - offset), window)
            for i, start in enumerate(starts):
                text = " ".join(words[offset + start : offset + start + window])
                out.append((f"p{turn}-d{d}", i, text))
                if len(out) == n:
                    return out
    return out


def timed(fn: Callable[[], object], repeat: int = 1) -> tuple[float, object]:
    """Best-of-``repeat`` wall time in seconds, and the last result."""
    best, result = math.inf, None
    for _ in range(repeat):
        t = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t)
    return best, result


def latencies_ms(fn: Callable[[int], object], count: int) -> dict[str, float]:
    """Median and 95th percentile of ``fn(i)`` for i in range(count), after a warm-up call."""
    fn(0)
    samples = []
    for i in range(count):
        t = time.perf_counter()
        fn(i)
        samples.append((time.perf_counter() - t) * 1000)
    samples.sort()
    return {
        "median_ms": round(statistics.median(samples), 3),
        "p95_ms": round(samples[min(len(samples) - 1, int(0.95 * len(samples)))], 3),
    }


def ndcg_at_10(ranked: list[str], relevant: set[str]) -> float:
    """Binary-relevance nDCG@10."""
    dcg = sum(1 / math.log2(i + 2) for i, doc in enumerate(ranked[:10]) if doc in relevant)
    ideal = sum(1 / math.log2(i + 2) for i in range(min(10, len(relevant))))
    return dcg / ideal if ideal else 0.0


def scifact_ndcg(folder: Path) -> dict[str, float]:
    """BM25 (this index's analyzer, k1 1.2, b 0.75) nDCG@10 on a BEIR-layout collection."""
    docs = [json.loads(line) for line in (folder / "corpus.jsonl").open(encoding="utf-8")]
    queries = [json.loads(line) for line in (folder / "queries.jsonl").open(encoding="utf-8")]
    qrels: dict[str, set[str]] = {}
    for line in (folder / "qrels.tsv").read_text().splitlines()[1:]:
        qid, did, score = line.split("\t")
        if int(score) > 0:
            qrels.setdefault(qid, set()).add(did)
    index = BM25Index()
    index.add_many((i, f"{d['title']} {d['text']}") for i, d in enumerate(docs))
    scores = [
        ndcg_at_10([docs[i]["_id"] for i, _ in index.search(q["text"], 10)], qrels[q["_id"]])
        for q in queries
        if q["_id"] in qrels
    ]
    return {"queries": len(scores), "bm25_ndcg_at_10": round(statistics.fmean(scores), 4)}


def main(argv: list[str] | None = None) -> dict[str, object]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=20_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--mask", type=float, default=0.5, help="share of content keys searched")
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--batch", type=int, default=5000, help="chunks per sync call")
    parser.add_argument("--scifact", type=Path, default=None)
    parser.add_argument(
        "--out", type=Path, default=ROOT / "bench" / "results" / "index_embedded.json"
    )
    args = parser.parse_args(argv)

    rng = np.random.default_rng(0)
    rows = pep_chunks(args.chunks)
    vectors = rng.normal(size=(len(rows), args.dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    chunks = [
        IndexedChunk(seq=i + 1, content_key=key, chunk_index=ci, text=text, model=MODEL, vector=v)
        for i, ((key, ci, text), v) in enumerate(zip(rows, vectors, strict=True))
    ]
    keys = sorted({c.content_key for c in chunks})
    searched = set(rng.choice(keys, size=int(len(keys) * args.mask), replace=False).tolist())
    few = set(sorted(searched)[: max(1, len(keys) // 20)])
    row_mask = np.array([c.content_key in searched for c in chunks])
    queries = rng.normal(size=(args.queries, args.dim)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    titles = [
        json.loads(line)["title"]
        for line in (ROOT / "fixtures" / "peps" / "index.jsonl").open(encoding="utf-8")
    ][: args.queries]
    titles = (titles * (args.queries // max(1, len(titles)) + 1))[: args.queries]

    results: dict[str, object] = {
        "machine": {
            "python": platform.python_version(),
            "numpy": np.__version__,
            "cpus": os.cpu_count(),
            "load_average": [round(x, 2) for x in os.getloadavg()],
            "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS"),
        },
        "chunks": len(chunks),
        "dim": args.dim,
        "content_keys": len(keys),
        "searched_keys": len(searched),
        "searched_rows": int(row_mask.sum()),
        "avg_words_per_chunk": round(statistics.fmean(len(t.split()) for _, _, t in rows), 1),
        "k": args.k,
    }

    with tempfile.TemporaryDirectory() as tmp:
        index = EmbeddedVectorIndex(Path(tmp))

        def sync_all() -> None:
            for start in range(0, len(chunks), args.batch):
                index.sync(REPO, chunks[start : start + args.batch])

        sync_s, _ = timed(sync_all)
        resync_s, _ = timed(sync_all)
        results["sync_s"] = round(sync_s, 3)
        results["sync_again_noop_s"] = round(resync_s, 3)

        def knn(i: int, content_keys: set[str] = searched) -> list:
            return index.knn(REPO, queries[i], args.k, model=MODEL, scope=SearchScope(content_keys))

        matrix = np.ascontiguousarray(vectors)

        def baseline(i: int) -> np.ndarray:
            scores = matrix @ queries[i]
            scores[~row_mask] = -np.inf
            top = np.argpartition(-scores, args.k)[: args.k]
            return top[np.argsort(-scores[top], kind="stable")]

        agree = all(
            [h.seq - 1 for h in knn(i)] == baseline(i).tolist() for i in range(args.queries)
        )
        results["knn_masked"] = latencies_ms(knn, args.queries)
        results["knn_all_keys"] = latencies_ms(lambda i: knn(i, set(keys)), args.queries)
        results["knn_5pct_keys"] = latencies_ms(lambda i: knn(i, few), args.queries)
        results["knn_numpy_baseline"] = latencies_ms(baseline, args.queries)
        results["knn_over_baseline"] = round(
            results["knn_masked"]["median_ms"] / results["knn_numpy_baseline"]["median_ms"], 2
        )
        results["knn_agrees_with_baseline"] = agree

        def bm25(i: int, content_keys: set[str] = searched) -> list:
            return index.bm25(REPO, titles[i], args.k, scope=SearchScope(content_keys))

        results["bm25_masked"] = latencies_ms(bm25, args.queries)
        results["bm25_all_keys"] = latencies_ms(lambda i: bm25(i, set(keys)), args.queries)

        flush_s, _ = timed(lambda: index.flush(REPO))
        folder = Path(tmp) / "index" / REPO
        results["flush_s"] = round(flush_s, 3)
        results["snapshot_mb"] = round(
            sum(p.stat().st_size for p in folder.iterdir()) / 2**20, 1
        )
        load_s, reopened = timed(lambda: EmbeddedVectorIndex(Path(tmp)))
        load_s, _ = timed(lambda: reopened.watermark(REPO))
        results["load_s"] = round(load_s, 3)
        rebuilt = BM25Index()
        rebuild_s, _ = timed(lambda: rebuilt.add_many(enumerate(c.text for c in chunks)))
        results["bm25_rebuild_s"] = round(rebuild_s, 3)
        results["bm25_vocabulary"] = rebuilt.n_terms
        results["reloaded_results_equal"] = all(
            [h.seq for h in reopened.knn(REPO, queries[i], args.k, model=MODEL,
                                         scope=SearchScope(searched))] == [h.seq for h in knn(i)]
            and reopened.bm25(REPO, titles[i], args.k, scope=SearchScope(searched)) == bm25(i)
            for i in range(args.queries)
        )

    if args.scifact is not None:
        results["scifact"] = scifact_ndcg(args.scifact)

    for name, value in results.items():
        print(f"{name:28} {value}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}")
    return results


if __name__ == "__main__":
    main()
