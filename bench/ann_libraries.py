"""Benchmark of three HNSW libraries against exact NumPy search: usearch, faiss-cpu, hnswlib.

Data: N synthetic 384-d float32 L2-normalised vectors around ``--clusters`` random centres, each
point its centre plus noise in a 48-dimensional subspace of its cluster plus isotropic noise of
norm ``--spread`` (see :func:`clustered`): the nearest neighbours are a structured set with a low
intrinsic dimension, as text embeddings have, so recall is meaningful (uniform noise in 384
dimensions has no near neighbours). Queries are fresh points drawn the same way.

Every library builds an HNSW graph (Malkov and Yashunin 2018) with the same M and
ef_construction, inner-product metric, on ``--threads`` build threads. Reported per library:
build rate (vectors/s), single-query p50/p95 at k=10 for a few ef values, recall@10 against
exact NumPy, the index's bytes, filtered search over a random 50 % and 5 % subset of ids (and how
it is done: inside the graph walk, or by over-fetching and dropping), incremental add rate,
delete support, save/load time, licence. ``faiss-sq8`` is what kg runs (kg/index/ann.py): faiss
over 8-bit codes, the ef candidates reranked exactly, the candidate list widened by 1 / share**2
under a filter. Exact NumPy runs in the same process on the same data and every query latency is
also given as a ratio to it.

faiss-cpu is a dependency of kg; the other two are installed only to measure them:
``pip install 'usearch==2.26.6' 'hnswlib==0.8.0'``.

Prints a table and writes JSON (default ``bench/results/ann_libraries.json``).
Run: ``python bench/ann_libraries.py [--n 100000] [--libraries usearch,faiss,faiss-sq8,hnswlib]``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import RESULTS, machine, percentile, table, write_results  # noqa: E402

DIM = 384
K = 10
LICENCES = {"usearch": "Apache-2.0", "faiss": "MIT", "faiss-sq8": "MIT", "hnswlib": "Apache-2.0",
            "numpy": "BSD-3-Clause"}


def clustered(n: int, dim: int, clusters: int, spread: float, seed: int, rank: int = 48) -> np.ndarray:
    """``n`` unit vectors around ``clusters`` random centres: shape (n, dim), float32.

    A point is its centre plus noise in a ``rank``-dimensional subspace of its cluster (norm
    about 1) plus isotropic noise of norm about ``spread``, then normalised: clusters with a
    low intrinsic dimension, as text embeddings have. The centres and subspaces depend on
    ``clusters`` only, so data and queries drawn with different seeds share them.
    """
    shared = np.random.default_rng(12345)
    centres = shared.standard_normal((clusters, dim), dtype=np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    basis = shared.standard_normal((clusters, rank, dim), dtype=np.float32) / np.float32(np.sqrt(dim))
    rng = np.random.default_rng(seed)
    out = np.empty((n, dim), np.float32)
    for start in range(0, n, 16384):
        stop = min(n, start + 16384)
        which = rng.integers(0, clusters, stop - start)
        z = rng.standard_normal((stop - start, rank), dtype=np.float32) / np.float32(np.sqrt(rank))
        block = centres[which] + np.einsum("nr,nrd->nd", z, basis[which])
        block += rng.standard_normal((stop - start, dim), dtype=np.float32) * np.float32(spread / np.sqrt(dim))
        out[start:stop] = block / np.linalg.norm(block, axis=1, keepdims=True)
    return out


def exact_top(vectors: np.ndarray, query: np.ndarray, k: int, rows: np.ndarray | None = None) -> np.ndarray:
    """The ids of the exact top ``k`` by inner product (among ``rows`` if given, gathered)."""
    if rows is None:
        sims = vectors @ query
        top = np.argpartition(-sims, k)[:k]
        return top[np.argsort(-sims[top])]
    sims = vectors[rows] @ query
    top = np.argpartition(-sims, k)[:k]
    return rows[top[np.argsort(-sims[top])]]


def recall(found: list[np.ndarray], truth: list[np.ndarray]) -> float:
    """Mean share of the true top k that was found."""
    return float(np.mean([len(np.intersect1d(f, t)) / len(t) for f, t in zip(found, truth, strict=True)]))


def timed_queries(
    search: Callable[[np.ndarray], np.ndarray], queries: np.ndarray
) -> tuple[dict[str, float], list[np.ndarray]]:
    """p50/p95 latency (ms) of one query at a time, and the ids each returned."""
    search(queries[0])
    samples, found = [], []
    for q in queries:
        t = time.perf_counter()
        ids = search(q)
        samples.append((time.perf_counter() - t) * 1000)
        found.append(np.asarray(ids, dtype=np.int64))
    return {"p50_ms": round(percentile(samples, 50), 3), "p95_ms": round(percentile(samples, 95), 3)}, found


class Library:
    """One library behind a common face."""

    name = ""
    filter_kind = ""
    deletes = ""

    def build(self, vectors: np.ndarray, m: int, ef_construction: int, threads: int) -> None:
        raise NotImplementedError

    def add(self, vectors: np.ndarray, start_id: int) -> None:
        raise NotImplementedError

    def search(self, query: np.ndarray, k: int, ef: int) -> np.ndarray:
        raise NotImplementedError

    def filtered(self, query: np.ndarray, k: int, ef: int, mask: np.ndarray, prepared: Any) -> np.ndarray:
        raise NotImplementedError

    def prepare(self, mask: np.ndarray) -> Any:
        """Per-filter state built once per branch state (not per query)."""
        return mask

    def nbytes(self, folder: Path) -> int:
        raise NotImplementedError

    def save_load(self, folder: Path) -> tuple[float, float]:
        raise NotImplementedError

    def delete(self, ids: np.ndarray) -> bool:
        raise NotImplementedError


class Hnswlib(Library):
    name = "hnswlib"
    filter_kind = "inside the walk: a Python callable per visited id (holds the GIL)"

    def build(self, vectors, m, ef_construction, threads):
        import hnswlib

        self.threads = threads
        self.index = hnswlib.Index(space="ip", dim=vectors.shape[1])
        self.index.init_index(max_elements=len(vectors) + 10_000, M=m, ef_construction=ef_construction)
        self.index.add_items(vectors, np.arange(len(vectors)), num_threads=threads)
        self.ef = -1

    def add(self, vectors, start_id):
        self.index.add_items(vectors, np.arange(start_id, start_id + len(vectors)), num_threads=self.threads)

    def _ef(self, ef):
        if ef != self.ef:
            self.index.set_ef(ef)
            self.ef = ef

    def search(self, query, k, ef):
        self._ef(ef)
        return self.index.knn_query(query, k=k, num_threads=1)[0][0]

    def filtered(self, query, k, ef, mask, prepared):
        self._ef(ef)
        return self.index.knn_query(query, k=k, num_threads=1, filter=prepared)[0][0]

    def prepare(self, mask):
        return mask.__getitem__

    def nbytes(self, folder):
        path = folder / "hnswlib.bin"
        self.index.save_index(str(path))
        return path.stat().st_size

    def save_load(self, folder):
        import hnswlib

        path = folder / "hnswlib.bin"
        t = time.perf_counter()
        self.index.save_index(str(path))
        saved = time.perf_counter() - t
        t = time.perf_counter()
        again = hnswlib.Index(space="ip", dim=self.index.dim)
        again.load_index(str(path), max_elements=self.index.get_max_elements())
        return saved, time.perf_counter() - t

    def delete(self, ids):
        for i in ids.tolist():
            self.index.mark_deleted(i)
        self.deletes = "yes: mark_deleted (tombstone; replace_deleted reuses slots)"
        return True


class Faiss(Library):
    name = "faiss"
    filter_kind = "inside the walk: IDSelectorBitmap in C++ (SearchParametersHNSW)"

    def build(self, vectors, m, ef_construction, threads):
        import faiss

        faiss.omp_set_num_threads(threads)
        self.faiss = faiss
        self.index = faiss.IndexHNSWFlat(vectors.shape[1], m, faiss.METRIC_INNER_PRODUCT)
        self.index.hnsw.efConstruction = ef_construction
        self.index.add(vectors)

    def add(self, vectors, start_id):
        self.index.add(vectors)

    def search(self, query, k, ef):
        params = self.faiss.SearchParametersHNSW(efSearch=ef)
        self.faiss.omp_set_num_threads(1)
        return self.index.search(query[None, :], k, params=params)[1][0]

    def prepare(self, mask):
        bits = np.packbits(mask, bitorder="little")
        return bits, self.faiss.IDSelectorBitmap(len(mask), self.faiss.swig_ptr(bits))

    def filtered(self, query, k, ef, mask, prepared):
        params = self.faiss.SearchParametersHNSW(efSearch=ef, sel=prepared[1])
        return self.index.search(query[None, :], k, params=params)[1][0]

    def nbytes(self, folder):
        return int(self.faiss.serialize_index(self.index).nbytes)

    def save_load(self, folder):
        path = str(folder / "faiss.bin")
        t = time.perf_counter()
        self.faiss.write_index(self.index, path)
        saved = time.perf_counter() - t
        t = time.perf_counter()
        self.faiss.read_index(path)
        return saved, time.perf_counter() - t

    def delete(self, ids):
        try:
            self.index.remove_ids(self.faiss.IDSelectorBatch(len(ids), self.faiss.swig_ptr(ids.astype(np.int64))))
        except RuntimeError as exc:
            self.deletes = f"no: {str(exc).splitlines()[-1][:80]}"
            return False
        self.deletes = "yes"
        return True


class FaissSq8Rerank(Faiss):
    """What kg uses: faiss HNSW over 8-bit codes, ef candidates reranked with exact float32
    products; under a filter the candidate list is widened by 1 / share**2 (capped at 1024)."""

    name = "faiss-sq8"
    filter_kind = "inside the walk (IDSelectorBitmap), ef / share**2 candidates, exact rerank"

    def build(self, vectors, m, ef_construction, threads):
        import faiss

        faiss.omp_set_num_threads(threads)
        self.faiss = faiss
        self.vectors = vectors
        self.index = faiss.IndexHNSWSQ(vectors.shape[1], faiss.ScalarQuantizer.QT_8bit, m, faiss.METRIC_INNER_PRODUCT)
        self.index.hnsw.efConstruction = ef_construction
        self.index.train(vectors)
        self.index.add(vectors)

    def _rerank(self, query, ids, k):
        ids = ids[ids >= 0]
        ids = ids[ids < len(self.vectors)]
        sims = self.vectors[ids] @ query
        return ids[np.argsort(-sims)[:k]]

    def search(self, query, k, ef):
        params = self.faiss.SearchParametersHNSW(efSearch=ef)
        return self._rerank(query, self.index.search(query[None, :], max(k, ef), params=params)[1][0], k)

    def filtered(self, query, k, ef, mask, prepared):
        ef = min(1024, int(ef / prepared[2] ** 2))
        params = self.faiss.SearchParametersHNSW(efSearch=ef, sel=prepared[1])
        return self._rerank(query, self.index.search(query[None, :], ef, params=params)[1][0], k)

    def prepare(self, mask):
        bits = np.packbits(mask, bitorder="little")
        return bits, self.faiss.IDSelectorBitmap(len(mask), self.faiss.swig_ptr(bits)), float(mask.mean())


class Usearch(Library):
    name = "usearch"
    filter_kind = "none in Python: over-fetch k / share * 2 and drop the ids outside the subset"

    def build(self, vectors, m, ef_construction, threads):
        from usearch.index import Index

        self.threads = threads
        self.index = Index(ndim=vectors.shape[1], metric="ip", dtype="f32", connectivity=m,
                           expansion_add=ef_construction)
        self.index.add(np.arange(len(vectors)), vectors, threads=threads)

    def add(self, vectors, start_id):
        self.index.add(np.arange(start_id, start_id + len(vectors)), vectors, threads=self.threads)

    def search(self, query, k, ef):
        self.index.expansion_search = ef
        return self.index.search(query, k, threads=1).keys

    def filtered(self, query, k, ef, mask, prepared):
        share = prepared
        self.index.expansion_search = max(ef, int(k / share * 2))
        keys = self.index.search(query, int(k / share * 2), threads=1).keys
        keys = keys[mask[keys]]
        return keys[:k]

    def prepare(self, mask):
        return float(mask.mean())

    def nbytes(self, folder):
        return int(self.index.memory_usage)

    def save_load(self, folder):
        from usearch.index import Index

        path = str(folder / "usearch.bin")
        t = time.perf_counter()
        self.index.save(path)
        saved = time.perf_counter() - t
        t = time.perf_counter()
        Index.restore(path)
        return saved, time.perf_counter() - t

    def delete(self, ids):
        self.index.remove(ids)
        self.deletes = "yes: remove (marks; compaction optional)"
        return True


LIBRARIES: dict[str, type[Library]] = {"usearch": Usearch, "faiss": Faiss, "faiss-sq8": FaissSq8Rerank,
                                       "hnswlib": Hnswlib}


def version(name: str) -> str:
    """The installed version of library ``name``."""
    from importlib.metadata import version as v

    return v({"faiss": "faiss-cpu", "faiss-sq8": "faiss-cpu"}.get(name, name))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=100_000, help="vectors (default 100,000)")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--clusters", type=int, default=1000)
    parser.add_argument("--spread", type=float, default=1.3, help="isotropic noise norm relative to the centre")
    parser.add_argument("--m", type=int, default=16)
    parser.add_argument("--ef-construction", type=int, default=128)
    parser.add_argument("--ef", default="32,64,128,256", help="ef values of the search sweep")
    parser.add_argument("--threads", type=int, default=1,
                        help="build threads (default 1: OpenMP workers spin on a shared machine)")
    parser.add_argument("--libraries", default="usearch,faiss,faiss-sq8,hnswlib")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    efs = [int(x) for x in args.ef.split(",")]
    out = args.out or RESULTS / ("ann_libraries.json" if args.n == 100_000 else f"ann_libraries-{args.n}.json")

    t = time.perf_counter()
    vectors = clustered(args.n, DIM, args.clusters, args.spread, seed=1)
    queries = clustered(args.queries, DIM, args.clusters, args.spread, seed=1 + 10**6)
    extra = clustered(2000, DIM, args.clusters, args.spread, seed=7)
    print(f"data: {args.n} x {DIM} in {time.perf_counter() - t:.1f}s")
    rng = np.random.default_rng(3)
    masks = {share: rng.random(args.n) < share for share in (0.5, 0.05)}

    exact_latency, truth = timed_queries(lambda q: exact_top(vectors, q, K), queries)
    filtered_truth, exact_filtered = {}, {}
    for share, mask in masks.items():
        rows = np.flatnonzero(mask)
        exact_filtered[share], filtered_truth[share] = timed_queries(
            lambda q, rows=rows: exact_top(vectors, q, K, rows), queries)
    results: dict[str, Any] = {
        "machine": machine(),
        "config": {k: v for k, v in vars(args).items() if k != "out"},
        "exact": {"query": exact_latency, "filtered": {str(s): v for s, v in exact_filtered.items()},
                  "bytes": int(vectors.nbytes), "licence": LICENCES["numpy"]},
        "libraries": {},
    }
    print(f"exact numpy: {exact_latency}")
    rows_out = []
    for name in args.libraries.split(","):
        lib = LIBRARIES[name]()
        entry: dict[str, Any] = {"version": version(name), "licence": LICENCES[name]}
        t = time.perf_counter()
        lib.build(vectors, args.m, args.ef_construction, args.threads)
        build_s = time.perf_counter() - t
        entry["build_s"] = round(build_s, 2)
        entry["build_rate_per_s"] = round(args.n / build_s)
        entry["search"] = {}
        for ef in efs:
            latency, found = timed_queries(lambda q, ef=ef, lib=lib: lib.search(q, K, ef), queries)
            entry["search"][ef] = {**latency, "recall_at_10": round(recall(found, truth), 4),
                                   "p50_vs_exact": round(latency["p50_ms"] / exact_latency["p50_ms"], 3)}
        entry["filtered"] = {"how": lib.filter_kind}
        ef_f = 128 if 128 in efs else efs[-1]
        for share, mask in masks.items():
            prepared = lib.prepare(mask)
            latency, found = timed_queries(
                lambda q, m=mask, p=prepared, lib=lib, ef_f=ef_f: lib.filtered(q, K, ef_f, m, p), queries)
            leaked = int(sum((~mask[f[f >= 0]]).sum() for f in found))
            entry["filtered"][str(share)] = {
                **latency, "ef": ef_f, "recall_at_10": round(recall(found, filtered_truth[share]), 4),
                "disallowed_returned": leaked,
                "p50_vs_exact_filtered": round(latency["p50_ms"] / exact_filtered[share]["p50_ms"], 3)}
        with tempfile.TemporaryDirectory() as tmp:
            entry["bytes"] = lib.nbytes(Path(tmp))
            saved, loaded = lib.save_load(Path(tmp))
        entry["save_s"], entry["load_s"] = round(saved, 3), round(loaded, 3)
        t = time.perf_counter()
        lib.add(extra, args.n)
        entry["incremental_add_per_s"] = round(len(extra) / (time.perf_counter() - t))
        entry["deletes"] = lib.delete(np.arange(10, dtype=np.int64)) and lib.deletes or lib.deletes
        results["libraries"][name] = entry
        best = entry["search"][ef_f]
        rows_out.append([name, entry["version"], entry["build_rate_per_s"], best["p50_ms"], best["p95_ms"],
                         best["recall_at_10"], best["p50_vs_exact"], round(entry["bytes"] / 2**20, 1),
                         entry["filtered"]["0.5"]["p50_ms"], entry["filtered"]["0.5"]["recall_at_10"],
                         entry["filtered"]["0.05"]["p50_ms"], entry["filtered"]["0.05"]["recall_at_10"],
                         entry["incremental_add_per_s"], entry["licence"]])
        print(name, entry)
        del lib
    print()
    print(table(rows_out, ["library", "version", "build/s", f"p50 ms ef{ef_f}", "p95 ms", "recall@10",
                           "p50/exact", "MiB", "50% p50", "50% rec", "5% p50", "5% rec", "add/s", "licence"]))
    print(f"exact numpy: p50 {exact_latency['p50_ms']} ms, p95 {exact_latency['p95_ms']} ms, "
          f"{vectors.nbytes / 2**20:.1f} MiB; filtered 50% {exact_filtered[0.5]}, 5% {exact_filtered[0.05]}")
    write_results(results, out)


if __name__ == "__main__":
    main()
