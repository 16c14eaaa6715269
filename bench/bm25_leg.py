"""Benchmark of the embedded index's BM25 legs against their previous implementation, in one run.

Corpus: ``--docs`` chunks of 100 pseudo-words drawn with Zipf frequencies (exponent 1.07 over a
50,000-word vocabulary, ``bench/scale.py``'s words), one chunk a content key, field ``text``;
queries of 4 terms mixing frequent and middling words (``bench/scale.py``'s ``query``). Each
query runs on two branch states: every content key visible, and a random 90 % of them (a branch
that deleted or overrode the rest), each one ``KeySet`` kept across queries as search keeps it.

Legs, as :mod:`kg.rag.search` calls them (depth 50 for k 10 at chunk granularity, 80 at node
granularity):

* ``chunks``: :meth:`EmbeddedVectorIndex.bm25` (BM25 over passages) against the previous leg:
  ``bench/_bm25_previous.py``'s ``search`` with the row mask gathered per query and a hit built
  per row, as ``kg/index/embedded.py`` did before.
* ``nodes``: :meth:`EmbeddedVectorIndex.bm25_documents` (BM25F over a node's passages, the
  title weighted 2) against the previous ``search_groups`` on the same memoised statistics.

Both implementations hold the same postings (the previous one loads the new one's arrays). The
calls alternate per query (new, previous, previous, new, ...), so drift of a shared machine hits
both alike; every answer is checked equal (documents, order and scores). Prints p50 / p95 per
leg and state and the ratio previous / new (> 1: the new one is faster), with the load average.

Run: ``python bench/bm25_leg.py [--docs 100000] [--queries 200]``; writes
``bench/results/bm25_leg.json``.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import _bm25_previous as previous  # noqa: E402
from bench._common import RESULTS, load_average, machine, percentile, table, write_results  # noqa: E402
from bench.scale import query as query_text  # noqa: E402
from bench.scale import vocabulary  # noqa: E402
from kg.index.base import IndexedChunk, IndexHit, KeySet, SearchScope  # noqa: E402
from kg.index.embedded import AnnConfig, EmbeddedVectorIndex  # noqa: E402

REPO, MODEL = "bench", "bench:constant"
TITLE_WEIGHT = 2.0


def corpus(n: int, seed: int) -> tuple[list[str], list[str]]:
    """``n`` texts of 100 Zipf-drawn words, and the vocabulary."""
    rng = np.random.default_rng(seed)
    words = vocabulary(50_000)
    zipf = 1.0 / np.arange(1, len(words) + 1) ** 1.07
    zipf /= zipf.sum()
    texts: list[str] = []
    for start in range(0, n, 10_000):
        drawn = rng.choice(len(words), size=(min(10_000, n - start), 100), p=zipf)
        texts.extend(" ".join(words[w] for w in row) for row in drawn)
    return texts, words


def build(texts: list[str]) -> EmbeddedVectorIndex:
    """The embedded index over ``texts`` (no HNSW graph: its builder would compete for the CPU)."""
    index = EmbeddedVectorIndex(ann=AnnConfig(min_rows=0))
    vector = np.full(4, 0.5, np.float32)
    for start in range(0, len(texts), 10_000):
        index.sync(REPO, [IndexedChunk(i + 1, f"k{i}", 0, texts[i], MODEL, vector, "text")
                          for i in range(start, min(len(texts), start + 10_000))])
    return index


def previous_legs(index: EmbeddedVectorIndex) -> tuple[Callable[..., list[IndexHit]], Callable[..., list[IndexHit]]]:
    """The previous chunk and node legs over the same postings."""
    view = index._view(REPO)
    old = previous.BM25Index.from_arrays(view.bm25.to_arrays())

    def chunks(query: str, k: int, scope: SearchScope) -> list[IndexHit]:
        allowed = view.allowed_keys(scope.content_keys)
        assert allowed is not None
        ranked = old.search(query, k, allowed[view.key_id])
        return [view.hit(row, rank, score, None) for rank, (row, score) in enumerate(ranked, start=1)]

    def nodes(query: str, k: int, scope: SearchScope) -> list[IndexHit]:
        allowed = view.allowed_keys(scope.content_keys)
        assert allowed is not None
        stats = view.group_stats(scope.content_keys, allowed)
        weights = [TITLE_WEIGHT if name == "title" else 1.0 for name in view.fields[: int(view.field_id.max()) + 1]]
        ranked = old.search_groups(query, k, field_weights=weights, stats=stats)
        return [view.hit(hit.best_doc, rank, hit.score, None) for rank, hit in enumerate(ranked, start=1)]

    return chunks, nodes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS / "bm25_leg.json")
    args = parser.parse_args()
    results: dict[str, Any] = {"machine": machine(), "docs": args.docs, "queries": args.queries}
    texts, words = corpus(args.docs, args.seed)
    started = time.perf_counter()
    index = build(texts)
    results["build_s"] = round(time.perf_counter() - started, 2)
    keys = [f"k{i}" for i in range(args.docs)]
    pyrng = random.Random(args.seed)
    queries = [query_text(words, pyrng) for _ in range(args.queries)]
    states = {"all keys": SearchScope(KeySet(keys)),
              "90% of keys": SearchScope(KeySet(pyrng.sample(keys, int(0.9 * len(keys)))))}
    old_chunks, old_nodes = previous_legs(index)
    legs: dict[str, tuple[Callable[..., list[IndexHit]], Callable[..., list[IndexHit]], int]] = {
        "chunks": (lambda q, k, scope: index.bm25(REPO, q, k, scope=scope), old_chunks, 50),
        "nodes": (lambda q, k, scope: index.bm25_documents(REPO, q, k, scope=scope,
                                                           field_weights={"title": TITLE_WEIGHT}), old_nodes, 80),
    }
    rows = []
    for leg, (new, old, depth) in legs.items():
        for state, scope in states.items():
            times: dict[str, list[float]] = {"new": [], "previous": []}
            for i, q in enumerate([queries[0], *queries]):  # the first call warms the memos
                pair = (("new", new), ("previous", old)) if i % 2 else (("previous", old), ("new", new))
                got = {}
                for name, fn in pair:
                    t = time.perf_counter()
                    got[name] = fn(q, depth, scope)
                    if i:
                        times[name].append(time.perf_counter() - t)
                if got["new"] != got["previous"]:
                    raise SystemExit(f"{leg} {state}: the answers differ for {q!r}")
            figures = {name: {"p50_ms": round(percentile(s, 50) * 1000, 3),
                              "p95_ms": round(percentile(s, 95) * 1000, 3)} for name, s in times.items()}
            ratio = round(figures["previous"]["p50_ms"] / figures["new"]["p50_ms"], 2)
            results[f"{leg} {state}"] = {**figures, "previous_over_new_p50": ratio}
            rows.append((f"{leg} ({state})", figures["new"]["p50_ms"], figures["new"]["p95_ms"],
                         figures["previous"]["p50_ms"], figures["previous"]["p95_ms"], ratio))
    results["load_average_at_end"] = load_average()
    print(f"BM25 legs, {args.docs:,} chunks, {args.queries} queries "
          f"(load {results['machine']['load_average_at_start']} -> {results['load_average_at_end']})")
    print(table(rows, ["leg (branch state)", "new p50 ms", "new p95 ms", "previous p50 ms", "previous p95 ms",
                       "previous / new"]))
    write_results(results, args.out)


if __name__ == "__main__":
    main()
