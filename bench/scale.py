"""Cost at scale: kg at 10k, 100k and 1M nodes on one machine, and the targets of issue 16.

For each size N (``--sizes``) in a fresh database and data directory:

1. **Data**, generated once into kg-ndjson files (``--workdir``): N leaf nodes ``/s<k>/n<i>`` in
   sections of 1,000 under one workspace, each with a title and a ~150-word ``content`` drawn
   from a Zipfian vocabulary of 50,000 pseudo-words (so BM25 has frequent and rare terms); each
   text's chunks as kg plans them (``kg.indexing.chunks.plan_pieces``) with synthetic 384-d
   vectors (clustered: 1,024 centroids plus noise, normalised, so nearest neighbours are
   meaningful); ``--edges-per-node`` x N relations whose targets follow a power law (a few hubs
   hold many edges, as entity graphs do), three types, random weights.
2. **Import**: the nodes-and-chunks file, then the relations file, through ``kg import ndjson``'s
   use case (:func:`kg.ops.bulk.import_ndjson`): nodes/s and relations/s. Nothing is embedded
   (chunks carry their vectors; the model is ``fake:hash-384``, which only embeds the queries).
3. **Index load**: the embedded index synced from SQL (vectors, BM25 postings, and the HNSW graph
   once a model has ``KG_INDEX_ANN_MIN_ROWS`` rows), timed; the importing process's RSS; then the
   snapshot flushed and a fresh process that serves it: its **RSS** after its first search
   (which loads the snapshot) and that search's time.
4. **Latency**, p50 / p95 over ``--repeats`` calls each, through the use cases the HTTP routes
   call: GET node, children (a page of 100), hybrid search (k 10), vector search (k 10); the
   index's KNN **recall@10 against exact** (a numpy scan of every vector) for stored vectors plus
   noise; NEIGHBORS (limit 10, on hubs and on ordinary nodes, view warm), a 2-hop traverse (max
   200 nodes, fan-out 20); a PUT followed by a hybrid search (the first search of each new
   branch state reads its searchable nodes anew); a page of the revision log (20 revisions, the import's among them)
   and the branch listing (each branch's last revision).
5. **Branches**: branch create at N against the same on a 100-node repository (ratio); a read on a
   branch five deep against ``main`` (ratio); hybrid search on a branch with 1,000 changed texts
   against ``main`` (ratio); diff and merge of a branch of 100 changes.

Prints a table per size and a growth table, writes JSON (default ``bench/results/scale.json``,
``scale_<backend>.json`` on another database). Run: ``python bench/scale.py [--sizes 10000
100000 1000000] [--database-url postgresql+psycopg://postgres@127.0.0.1:5432/test]``. At 1M the
files take about 3 GB of ``--workdir`` and the run hours on 2 cores (the HNSW build dominates).
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy is imported

import argparse  # noqa: E402
import base64  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import (  # noqa: E402
    CACHE,
    RESULTS,
    isolated_database,
    load_average,
    machine,
    percentile,
    redact,
    table,
    write_results,
)
from kg.context import OPERATOR, run  # noqa: E402
from kg.index.base import SearchScope  # noqa: E402
from kg.indexing.chunks import plan_pieces, plan_text, sync_index  # noqa: E402
from kg.indexing.config import workspace_embedding  # noqa: E402
from kg.ops import branches as branch_ops  # noqa: E402
from kg.ops import bulk, queries  # noqa: E402
from kg.ops import merge as merge_ops  # noqa: E402
from kg.ops import nodes as node_ops  # noqa: E402
from kg.ops import repos as repo_ops  # noqa: E402
from kg.providers.registry import make_embedder  # noqa: E402
from kg.rag import graph as graph_ops  # noqa: E402
from kg.rag.search import SearchRequest, search_branch  # noqa: E402
from kg.services import Services  # noqa: E402
from kg.settings import Settings  # noqa: E402

MODEL = "fake:hash-384"
DIM = 384
WORKSPACE = "kb"
SECTION = 1_000
VOCABULARY = 50_000
WORDS_PER_TEXT = 150
CENTROIDS = 1_024
TYPES = ("related_to", "mentions", "cites")
SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "pa", "do", "gu", "be", "fi", "ho", "ja")


def vocabulary(n: int) -> list[str]:
    """``n`` distinct pseudo-words of 2 to 4 syllables (deterministic)."""
    words: list[str] = []
    for i in range(n):
        digits, x = [], i
        while True:
            digits.append(SYLLABLES[x % len(SYLLABLES)])
            x //= len(SYLLABLES)
            if x == 0:
                break
        words.append("".join(digits) + ("n" if len(digits) < 2 else ""))
    return words


def leaf_path(i: int) -> str:
    return f"/s{i // SECTION}/n{i}"


def generate(workdir: Path, n: int, edges_per_node: int, seed: int) -> dict[str, Any]:
    """Write ``nodes-<n>.ndjson`` (nodes and chunks), ``relations-<n>.ndjson`` and the vectors
    (``vectors-<n>.npy``, float32 (chunks, 384), with ``keys-<n>.json``: each row's (content
    key, chunk index)), unless they exist; the queries' words. Returns the file paths and counts."""
    nodes_file, relations_file = workdir / f"nodes-{n}.ndjson", workdir / f"relations-{n}.ndjson"
    vectors_file, keys_file = workdir / f"vectors-{n}.npy", workdir / f"keys-{n}.json"
    words = vocabulary(VOCABULARY)
    out = {"nodes_file": nodes_file, "relations_file": relations_file, "vectors_file": vectors_file,
           "keys_file": keys_file, "words": words}
    if all(p.exists() for p in (nodes_file, relations_file, vectors_file, keys_file)):
        meta = json.loads((workdir / f"meta-{n}.json").read_text())
        return {**out, **meta}
    rng = np.random.default_rng(seed)
    zipf = 1.0 / np.arange(1, VOCABULARY + 1) ** 1.07
    zipf /= zipf.sum()
    centroids = rng.standard_normal((CENTROIDS, DIM)).astype(np.float32)
    embedder = make_embedder(MODEL, allow_fake=True)
    config = workspace_embedding({"embedding": {"model": MODEL}}, default_model=MODEL)
    sections = (n + SECTION - 1) // SECTION
    header = {"record": "header", "format": "kg-ndjson", "version": 1, "repo": "scale", "branch": "main",
              "revision": 0, "workspaces": [{"name": WORKSPACE, "embedding": {"model": MODEL}}]}
    vectors: list[np.ndarray] = []
    keys: list[tuple[str, int]] = []
    chunks = 0
    with nodes_file.open("w", encoding="utf-8") as fh:
        fh.write(json.dumps({**header, "with_chunks": True}) + "\n")
        for k in range(sections):
            # no text: every chunk of the index is a leaf's, with a vector of the file (recall's exact scan)
            fh.write(json.dumps({"record": "node", "workspace": WORKSPACE, "path": f"/s{k}", "node_type": "kg:Folder",
                                 "properties": {"section": k}}) + "\n")
        for start in range(0, n, 10_000):
            count = min(10_000, n - start)
            drawn = rng.choice(VOCABULARY, size=(count, WORDS_PER_TEXT), p=zipf)
            for j in range(count):
                i = start + j
                text = " ".join(words[w] for w in drawn[j])
                props = {"title": f"{words[drawn[j][0]]} {words[drawn[j][1]]} {i}", "content": text, "n": i}
                fh.write(json.dumps({"record": "node", "workspace": WORKSPACE, "path": leaf_path(i),
                                     "node_type": "kb:Note", "properties": props, "order": float(i % SECTION)},
                                    separators=(",", ":")) + "\n")
                pieces = plan_pieces(plan_text(props, config, embedder), embedder)
                centre = centroids[rng.integers(CENTROIDS)]
                block = centre + 0.6 * rng.standard_normal((len(pieces), DIM)).astype(np.float32)
                block /= np.linalg.norm(block, axis=1, keepdims=True)
                for piece, vector in zip(pieces, block, strict=True):
                    fh.write(json.dumps({"record": "chunk", "content_key": piece.content_key,
                                         "chunk_index": piece.chunk_index, "field": piece.field, "text": piece.text,
                                         "char_start": piece.start, "char_end": piece.end, "model": MODEL,
                                         "dim": DIM, "vector": base64.b64encode(
                                             vector.astype("<f4").tobytes()).decode("ascii")},
                                        separators=(",", ":")) + "\n")
                    keys.append((piece.content_key, piece.chunk_index))
                vectors.append(block)
                chunks += len(pieces)
            print(f"  generated {start + count:,}/{n:,} nodes", file=sys.stderr, flush=True)
    np.save(vectors_file, np.concatenate(vectors).astype(np.float32))
    keys_file.write_text(json.dumps(keys))
    del vectors, keys
    edges = edges_per_node * n
    # targets by a power law (Zipf over a random permutation of the leaves): hubs
    order = rng.permutation(n)
    weights = 1.0 / np.arange(1, n + 1) ** 0.9
    weights /= weights.sum()
    seen: set[tuple[int, int, int]] = set()
    written = 0
    with relations_file.open("w", encoding="utf-8") as fh:
        fh.write(json.dumps({**header, "with_chunks": False}) + "\n")
        while written < edges:
            batch = min(200_000, edges - written)
            sources = rng.integers(n, size=batch)
            targets = order[rng.choice(n, size=batch, p=weights)]
            types = rng.integers(len(TYPES), size=batch)
            ws = rng.random(batch)
            for a, b, t, w in zip(sources.tolist(), targets.tolist(), types.tolist(), ws.tolist(), strict=True):
                if a == b or (a, b, t) in seen or written >= edges:
                    continue
                seen.add((a, b, t))
                fh.write(json.dumps({"record": "relation", "from": f"{WORKSPACE}:{leaf_path(a)}",
                                     "to": f"{WORKSPACE}:{leaf_path(b)}", "type": TYPES[t],
                                     "weight": round(w, 3)}, separators=(",", ":")) + "\n")
                written += 1
    hubs = [leaf_path(int(order[i])) for i in range(5)]
    meta = {"nodes": n, "sections": sections, "chunks": chunks, "relations": written, "hubs": hubs}
    (workdir / f"meta-{n}.json").write_text(json.dumps(meta))
    return {**out, **meta}


def rss_mb() -> float:
    """Resident set size of this process now, in MiB (Linux /proc)."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * resource.getpagesize() / 2**20


def timed(fn: Callable[[], Any], repeats: int, warmup: int = 3) -> dict[str, float]:
    """p50 / p95 / mean of ``fn``'s wall time in ms over ``repeats`` calls after ``warmup``."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return {"p50_ms": round(percentile(samples, 50), 3), "p95_ms": round(percentile(samples, 95), 3),
            "mean_ms": round(statistics.fmean(samples), 3)}


#: The graph views' budget (``KG_GRAPH_MAX_EDGES``, ``KG_GRAPH_MAX_BYTES``); empty: kg's defaults
#: (2M edges, 1 GB), under which a 5M-edge branch is answered from SQL. ``--graph-max-edges``.
GRAPH_BUDGET: dict[str, int] = {}


def make_services(url: str, data_dir: Path) -> Services:
    """The services as ``kg serve`` builds them (``Services.from_settings``), on the fake model."""
    settings = Settings(database_url=url, data_dir=data_dir, embedding_model=MODEL, allow_fake_embedder=True,
                        index_inline=False, **GRAPH_BUDGET)
    services = Services.from_settings(settings)
    services.db.upgrade()
    return services


def import_file(services: Services, repo: str, path: Path, branch: str = "main",
                part: int | None = None) -> tuple[float, int, int]:
    """Import ``path`` through :func:`kg.ops.bulk.import_ndjson`; seconds, the texts queued for
    embedding and the parts imported.

    ``part``: import it as consecutive files of at most ``part`` node or relation records each
    (a node's chunk records stay with it), one revision each, so the importing process holds one
    part's parsed records at a time (the use case validates a whole file before writing it)."""
    start = time.perf_counter()
    with path.open("rb") as fh:
        if part is None:
            report = bulk.import_ndjson(services, OPERATOR, repo, fh, branch=branch)
            return time.perf_counter() - start, report.queued, 1
        header = fh.readline()
        lines, records, queued, parts = [header], 0, 0, 0
        for line in fh:
            if records >= part and b'"record":"chunk"' not in line[:24]:
                report = bulk.import_ndjson(services, OPERATOR, repo, lines, branch=branch)
                queued, parts = queued + report.queued, parts + 1
                lines, records = [header], 0
                print(f"    part {parts} imported ({time.perf_counter() - start:.0f} s)", file=sys.stderr, flush=True)
            lines.append(line)
            if b'"record":"chunk"' not in line[:24]:
                records += 1
        report = bulk.import_ndjson(services, OPERATOR, repo, lines, branch=branch)
    return time.perf_counter() - start, queued + report.queued, parts + 1


def sync(services: Services, repo: str) -> tuple[float, float]:
    """Bring the embedded index up to SQL for ``repo``, then wait for its HNSW builder thread
    (the import's syncs hand large graph builds to it); the seconds of each."""
    from kg.store.repos import get_repository

    start = time.perf_counter()
    with services.db.read() as session:
        repository = get_repository(session, repo)
        sync_index(session, services.index, repository.id, repository.uid)  # the key search uses (kg.rag.search)
    synced = time.perf_counter()
    wait = getattr(services.index, "wait_for_background", None)
    if wait is not None:
        wait(repository.uid)
    return synced - start, time.perf_counter() - synced


def measure(n: int, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    data = generate(workdir, n, args.edges_per_node, args.seed)
    rng = random.Random(args.seed)
    words = data["words"]
    out: dict[str, Any] = {"nodes": n, "chunks": data["chunks"], "relations": data["relations"]}
    with tempfile.TemporaryDirectory(dir=workdir) as tmp_name, \
            isolated_database(args.database_url, Path(tmp_name)) as (url, backend):
        tmp = Path(tmp_name)
        out["database"], out["url"] = backend, redact(url)
        gc.collect()
        rss_start = rss_mb()
        services = make_services(url, tmp / "data")
        try:
            seconds, queued, parts = import_file(services, "scale", data["nodes_file"], part=args.part_nodes)
            out["import_nodes"] = {"s": round(seconds, 1), "nodes_per_s": round((n + data["sections"]) / seconds),
                                   "chunks_per_s": round(data["chunks"] / seconds), "queued": queued,
                                   "parts": parts}
            seconds, _, parts = import_file(services, "scale", data["relations_file"], part=args.part_relations)
            out["import_relations"] = {"s": round(seconds, 1), "relations_per_s": round(data["relations"] / seconds),
                                       "parts": parts}
            print(f"  [{n:,}] imported", file=sys.stderr, flush=True)
            sync_s, graph_wait_s = sync(services, "scale")
            out["index_sync_s"], out["graph_wait_s"] = round(sync_s, 1), round(graph_wait_s, 1)
            gc.collect()
            out["rss_mb"] = round(rss_mb(), 1)
            out["rss_growth_mb"] = round(rss_mb() - rss_start, 1)
            out["serving"] = serving_memory(services, url, tmp / "data", words, rng)
            print(f"  [{n:,}] index synced, RSS {out['rss_mb']:,} MiB", file=sys.stderr, flush=True)
            out.update(latencies(services, n, data, words, rng, args.repeats))
            out.update(branches(services, url, tmp, n, data, words, rng, args.repeats))
        finally:
            services.close()
    return out


SERVE = """
import json, sys, time
sys.path.insert(0, {root!r})
from bench.scale import make_services, rss_mb
from kg.context import OPERATOR
from kg.rag.search import SearchRequest, search_branch
before = rss_mb()
services = make_services({url!r}, __import__("pathlib").Path({data!r}))
start = time.perf_counter()
search_branch(services, OPERATOR, "scale", "main", SearchRequest(query={query!r}, k=10, mode="hybrid"))
first = time.perf_counter() - start
print(json.dumps({{"rss_mb": round(rss_mb(), 1), "rss_before_mb": round(before, 1),
                   "first_search_s": round(first, 2)}}))
services.close()
"""


def serving_memory(services: Services, url: str, data_dir: Path, words: list[str], rng: random.Random) -> dict:
    """A fresh process that serves the repository: it loads the index snapshot (written here
    first) on its first search; its RSS then, and how long that first search took."""
    import subprocess

    from kg.store.repos import get_repository

    with services.db.read() as session:
        services.index.flush(get_repository(session, "scale").uid)
    code = SERVE.format(root=str(ROOT), url=url, data=str(data_dir), query=query(words, rng))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def query(words: list[str], rng: random.Random, terms: int = 4) -> str:
    """Terms mixing frequent (rank < 500) and middling (500 - 20,000) words."""
    return " ".join(words[rng.randrange(500)] if i % 2 else words[rng.randrange(500, 20_000)] for i in range(terms))


def latencies(services: Services, n: int, data: dict[str, Any], words: list[str], rng: random.Random,
              repeats: int) -> dict[str, Any]:
    def leaf() -> str:
        return leaf_path(rng.randrange(n))

    got: dict[str, Any] = {}
    got["get_node"] = timed(lambda: queries.get_node(services, OPERATOR, "scale", "main", WORKSPACE, leaf()), repeats)
    got["children"] = timed(lambda: queries.children_page(services, OPERATOR, "scale", "main", WORKSPACE,
                                                          f"/s{rng.randrange(data['sections'])}", limit=100), repeats)
    got["hybrid_search"] = timed(lambda: search_branch(services, OPERATOR, "scale", "main", SearchRequest(
        query=query(words, rng), k=10, mode="hybrid")), repeats)
    got["vector_search"] = timed(lambda: search_branch(services, OPERATOR, "scale", "main", SearchRequest(
        query=query(words, rng), k=10, mode="vector", granularity="chunk")), repeats)
    got["vector_recall_at_10"] = recall(services, data, rng, min(repeats, 100))
    hubs = data["hubs"]
    got["cold_graph"] = cold_graph(services, n, hubs, rng)
    got["neighbors_hub"] = timed(lambda: graph_ops.neighbors(
        services, OPERATOR, "scale", "main", f"{WORKSPACE}:{rng.choice(hubs)}", limit=10), repeats)
    got["neighbors"] = timed(lambda: graph_ops.neighbors(
        services, OPERATOR, "scale", "main", f"{WORKSPACE}:{leaf()}", limit=10), repeats)
    got["traverse_2_hops"] = timed(lambda: graph_ops.walk(
        services, OPERATOR, "scale", "main", [f"{WORKSPACE}:{leaf()}"], hops=2, max_nodes=200, fan_out=20),
        max(10, repeats // 4))
    # An agent's loop: write a node, then search; each write makes a new branch state, whose
    # searchable nodes the first search reads anew (O(nodes)).
    counter = iter(range(10**6))

    def write_then_search() -> None:
        run(services, OPERATOR, node_ops.put_node, "scale", "main", WORKSPACE, f"/notes/n{next(counter)}",
            node_type="kb:Note", properties={"title": "note", "content": query(words, rng, terms=20)}, parents=True)
        search_branch(services, OPERATOR, "scale", "main", SearchRequest(query=query(words, rng), k=10, mode="hybrid"))

    got["write_then_search"] = timed(write_then_search, max(5, repeats // 10), warmup=1)
    # The history: the import's revisions hold every node and relation written.
    got["log_page"] = timed(lambda: queries.revision_log(services, OPERATOR, "scale", "main", limit=20),
                            max(5, repeats // 10), warmup=1)
    got["branch_listing"] = timed(lambda: branch_ops.branch_overview(services, OPERATOR, "scale"),
                                  max(5, repeats // 10), warmup=1)
    got.update(neighbors_parts(services, hubs, rng, repeats))  # last: it checkpoints SQLite
    return got


def neighbors_parts(services: Services, hubs: list[str], rng: random.Random, repeats: int) -> dict[str, Any]:
    """NEIGHBORS on a hub taken apart: the library's call on the held view
    (:meth:`kg.graph.view.GraphView.neighbors`, limit 10) and the read transaction every use
    case opens (:func:`kg.context.reading`: the repository, the branch chain, the workspaces),
    each timed alone."""
    from kg.context import reading
    from kg.rag.graph import view_key
    from kg.store.nodes import node_uid
    from kg.store.repos import workspace_id

    def read() -> None:
        with reading(services, OPERATOR, "scale", "main"):
            pass

    with reading(services, OPERATOR, "scale", "main") as (_, view):
        graph = services.graphs.get(view_key(view))
        ids = [node_uid(view.repo.uid, workspace_id(view, WORKSPACE), path) for path in hubs]
    out: dict[str, Any] = {"read_transaction": timed(read, repeats)}
    if graph is not None:
        out["neighbors_hub_in_library"] = timed(lambda: graph.neighbors(rng.choice(ids), limit=10), repeats)
    wal = Path(services.db.engine.url.database or "") if services.db.engine.url.get_backend_name() == "sqlite" else None
    if wal is not None:
        # A SQLite reader looks each page up in the write-ahead log's index first, whose size
        # is the frames written since the log was last reset: the read costs again after a
        # full checkpoint, which resets it
        wal = wal.with_name(wal.name + "-wal")
        out["wal_mb"] = round(wal.stat().st_size / 2**20, 1) if wal.exists() else 0.0
        with services.db.engine.connect() as conn:
            out["wal_checkpoint"] = list(conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)").one())
        out["read_transaction_after_checkpoint"] = timed(read, repeats)
        out["neighbors_hub_after_checkpoint"] = timed(lambda: graph_ops.neighbors(
            services, OPERATOR, "scale", "main", f"{WORKSPACE}:{rng.choice(hubs)}", limit=10), repeats)
    return out


def cold_graph(services: Services, n: int, hubs: list[str], rng: random.Random) -> dict[str, Any]:
    """The first traverse of a cold branch (graph cache emptied), and what other requests cost
    while the branch's view is built: GET node and NEIGHBORS on a hub, called back to back
    from another thread until the build is done (the process serves both, as a server does)."""
    import threading

    services.graphs.clear()
    start = time.perf_counter()
    graph_ops.walk(services, OPERATOR, "scale", "main", [f"{WORKSPACE}:{leaf_path(rng.randrange(n))}"],
                   hops=2, max_nodes=200, fan_out=20)
    first_ms = (time.perf_counter() - start) * 1000
    done = threading.Event()
    samples: dict[str, list[float]] = {"get_node": [], "neighbors_hub": []}

    def others() -> None:
        while not done.is_set():
            for name, call in (
                ("get_node", lambda: queries.get_node(services, OPERATOR, "scale", "main", WORKSPACE,
                                                      leaf_path(rng.randrange(n)))),
                ("neighbors_hub", lambda: graph_ops.neighbors(services, OPERATOR, "scale", "main",
                                                              f"{WORKSPACE}:{rng.choice(hubs)}", limit=10)),
            ):
                t = time.perf_counter()
                call()
                samples[name].append((time.perf_counter() - t) * 1000)

    worker = threading.Thread(target=others)
    worker.start()
    built = time.perf_counter()
    services.graphs.join_builds(timeout_s=1800)
    build_s = time.perf_counter() - built
    done.set()
    worker.join()
    out: dict[str, Any] = {"first_traverse_ms": round(first_ms, 1), "view_build_s": round(build_s, 1)}
    for name, values in samples.items():
        if values:
            out[f"{name}_during_build"] = {"calls": len(values), "p50_ms": round(percentile(values, 50), 2),
                                           "p95_ms": round(percentile(values, 95), 2),
                                           "max_ms": round(max(values), 1)}
    return out


def recall(services: Services, data: dict[str, Any], rng: random.Random, queries_n: int) -> float:
    """Mean recall@10 of the embedded index's KNN (the HNSW tier once it applies) against an
    exact scan of every vector, for in-distribution queries: a stored vector plus noise (a
    query of the fake model is a random direction, equally far from everything, which says
    nothing about an index of real embeddings)."""
    from kg.store.repos import get_repository

    matrix = np.load(data["vectors_file"], mmap_mode="r")
    keys = [tuple(k) for k in json.loads(data["keys_file"].read_text())]
    allowed = {k for k, _ in keys}
    with services.db.read() as session:
        repo_key = get_repository(session, "scale").uid
    noise = np.random.default_rng(rng.randrange(2**32))
    found = []
    for _ in range(queries_n):
        vector = np.asarray(matrix[rng.randrange(len(keys))], dtype=np.float32)
        vector = vector + 0.5 * noise.standard_normal(DIM).astype(np.float32) / np.sqrt(DIM)
        vector /= np.linalg.norm(vector)
        scores = np.asarray(matrix @ vector)
        exact = {keys[i] for i in np.argpartition(-scores, 10)[:10]}
        hits = services.index.knn(repo_key, vector, 10, model=MODEL, scope=SearchScope(allowed))
        found.append(len({(h.content_key, h.chunk_index) for h in hits} & exact) / 10)
    return round(statistics.fmean(found), 4)


def branches(services: Services, url: str, tmp: Path, n: int, data: dict[str, Any], words: list[str],
             rng: random.Random, repeats: int) -> dict[str, Any]:
    got: dict[str, Any] = {}
    # branch create at N, against a 100-node repository in the same database
    run(services, OPERATOR, repo_ops.create_repository, "small")
    run(services, OPERATOR, repo_ops.create_workspace, "small", WORKSPACE, {"model": MODEL})
    run(services, OPERATOR, node_ops.batch, "small", "main", parents=True, upserts=[
        {"workspace": WORKSPACE, "path": leaf_path(i), "properties": {"title": f"n{i}"}} for i in range(100)])
    counter = iter(range(10**9))

    def create(repo: str) -> None:
        run(services, OPERATOR, branch_ops.create_branch, repo, name=f"c/{next(counter)}", from_branch="main")

    big, small = timed(lambda: create("scale"), repeats // 2 or 1), timed(lambda: create("small"), repeats // 2 or 1)
    got["branch_create"] = {"at_n": big, "at_100": small, "ratio": round(big["p50_ms"] / small["p50_ms"], 3)}
    # a read on a branch five deep
    parent = "main"
    for depth in range(1, 6):
        name = f"deep/{depth}"
        run(services, OPERATOR, branch_ops.create_branch, "scale", name=name, from_branch=parent)
        run(services, OPERATOR, node_ops.batch, "scale", name, upserts=[
            {"workspace": WORKSPACE, "path": leaf_path(i), "node_type": "kb:Note",
             "properties": {"title": f"changed on {name} {i}"}} for i in rng.sample(range(n), 20)])
        parent = name
    picks = [leaf_path(rng.randrange(n)) for _ in range(repeats)]
    main_t = timed(lambda: queries.get_node(services, OPERATOR, "scale", "main", WORKSPACE, rng.choice(picks)), repeats)
    deep_t = timed(lambda: queries.get_node(services, OPERATOR, "scale", "deep/5", WORKSPACE, rng.choice(picks)),
                   repeats)
    got["read_5_deep"] = {"main": main_t, "deep": deep_t, "ratio": round(deep_t["p50_ms"] / main_t["p50_ms"], 3)}
    # a branch with 1,000 changed texts (each one chunk or two, embedded by the fake model)
    run(services, OPERATOR, branch_ops.create_branch, "scale", name="agent/changed", from_branch="main")
    changed = rng.sample(range(n), 1000)
    for start in range(0, 1000, 250):
        run(services, OPERATOR, node_ops.batch, "scale", "agent/changed", upserts=[
            {"workspace": WORKSPACE, "path": leaf_path(i), "node_type": "kb:Note",
             "properties": {"title": f"rewritten {i}", "content": query(words, rng, 40)}}
            for i in changed[start:start + 250]])
    repo_ops.settle_index(services, OPERATOR, "scale")  # the changed texts embedded and indexed
    sync(services, "scale")
    texts = [query(words, rng) for _ in range(repeats)]
    main_s = timed(lambda: search_branch(services, OPERATOR, "scale", "main", SearchRequest(
        query=rng.choice(texts), k=10, mode="hybrid")), repeats)
    branch_s = timed(lambda: search_branch(services, OPERATOR, "scale", "agent/changed", SearchRequest(
        query=rng.choice(texts), k=10, mode="hybrid")), repeats)
    got["search_changed_branch"] = {"main": main_s, "branch": branch_s,
                                    "ratio": round(branch_s["p50_ms"] / main_s["p50_ms"], 3)}
    # diff and merge of 100 changes
    run(services, OPERATOR, branch_ops.create_branch, "scale", name="agent/hundred", from_branch="main")
    run(services, OPERATOR, node_ops.batch, "scale", "agent/hundred", upserts=[
        {"workspace": WORKSPACE, "path": leaf_path(i), "node_type": "kb:Note", "properties": {"title": f"h {i}"}}
        for i in rng.sample(range(n), 100)])
    start = time.perf_counter()
    report = queries.diff(services, OPERATOR, "scale", "agent/hundred")
    diff_ms = (time.perf_counter() - start) * 1000
    start = time.perf_counter()
    run(services, OPERATOR, merge_ops.merge_branch, "scale", "agent/hundred", "main")
    merge_ms = (time.perf_counter() - start) * 1000
    got["diff_100_ms"], got["merge_100_ms"] = round(diff_ms, 1), round(merge_ms, 1)
    got["diff_changes"] = len(report.nodes.added) + len(report.nodes.modified) + len(report.nodes.deleted)
    return got


def _during(r: dict[str, Any], name: str) -> str:
    got = r["cold_graph"].get(f"{name}_during_build")
    return f"{got['p50_ms']} / {got['max_ms']}" if got else "no build"


ROWS = (("import nodes/s", lambda r: r["import_nodes"]["nodes_per_s"]),
        ("import relations/s", lambda r: r["import_relations"]["relations_per_s"]),
        ("index sync s", lambda r: r["index_sync_s"]),
        ("HNSW builder finishing after the import s", lambda r: r.get("graph_wait_s", "")),
        ("RSS MiB (importing process)", lambda r: r["rss_mb"]),
        ("RSS MiB (a fresh serving process)", lambda r: r["serving"]["rss_mb"]),
        ("first search, snapshot load s", lambda r: r["serving"]["first_search_s"]),
        ("GET node p50 / p95 ms", lambda r: f"{r['get_node']['p50_ms']} / {r['get_node']['p95_ms']}"),
        ("children p50 / p95 ms", lambda r: f"{r['children']['p50_ms']} / {r['children']['p95_ms']}"),
        ("hybrid search p50 / p95 ms", lambda r: f"{r['hybrid_search']['p50_ms']} / {r['hybrid_search']['p95_ms']}"),
        ("vector search p50 / p95 ms", lambda r: f"{r['vector_search']['p50_ms']} / {r['vector_search']['p95_ms']}"),
        ("vector recall@10 vs exact", lambda r: r["vector_recall_at_10"]),
        ("cold branch: first 2-hop traverse ms", lambda r: r["cold_graph"]["first_traverse_ms"]),
        ("cold branch: view build s", lambda r: r["cold_graph"]["view_build_s"]),
        ("GET node during the build p50 / max ms", lambda r: _during(r, "get_node")),
        ("NEIGHBORS hub during the build p50 / max ms", lambda r: _during(r, "neighbors_hub")),
        ("NEIGHBORS hub p50 ms", lambda r: r["neighbors_hub"]["p50_ms"]),
        ("NEIGHBORS p50 ms", lambda r: r["neighbors"]["p50_ms"]),
        ("NEIGHBORS hub in the library (the held view) p50 ms",
         lambda r: r["neighbors_hub_in_library"]["p50_ms"] if "neighbors_hub_in_library" in r else "no view"),
        ("a use case's read transaction alone p50 ms",
         lambda r: r["read_transaction"]["p50_ms"] if "read_transaction" in r else ""),
        ("SQLite: WAL MiB; read transaction / NEIGHBORS hub p50 ms after a full checkpoint",
         lambda r: f"{r['wal_mb']}; {r['read_transaction_after_checkpoint']['p50_ms']} / "
                   f"{r['neighbors_hub_after_checkpoint']['p50_ms']}" if "wal_mb" in r else ""),
        ("2-hop traverse p50 ms", lambda r: r["traverse_2_hops"]["p50_ms"]),
        ("PUT a node then hybrid search p50 ms",
         lambda r: r["write_then_search"]["p50_ms"] if "write_then_search" in r else ""),
        ("log, a page of 20 revisions / branch listing p50 ms",
         lambda r: f"{r['log_page']['p50_ms']} / {r['branch_listing']['p50_ms']}" if "log_page" in r else ""),
        ("branch create ratio N / 100", lambda r: r["branch_create"]["ratio"]),
        ("read 5 deep / main", lambda r: r["read_5_deep"]["ratio"]),
        ("search, 1,000 changed / main", lambda r: r["search_changed_branch"]["ratio"]),
        ("diff / merge of 100 changes ms", lambda r: f"{r['diff_100_ms']} / {r['merge_100_ms']}"))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--edges-per-node", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=100)
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument("--graph-max-edges", type=int, default=None,
                        help="KG_GRAPH_MAX_EDGES of the measured process (and a byte budget of 600 per edge): "
                             "kg's default, 2M, answers a 5M-edge branch from SQL")
    parser.add_argument("--workdir", type=Path, default=Path(CACHE / "scale"))
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--part-nodes", type=int, default=None,
                        help="import the nodes file in parts of this many nodes (one revision each)")
    parser.add_argument("--part-relations", type=int, default=None,
                        help="import the relations file in parts of this many relations")
    args = parser.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    if args.graph_max_edges:
        GRAPH_BUDGET.update(graph_max_edges=args.graph_max_edges, graph_max_bytes=600 * args.graph_max_edges)
    results: dict[str, Any] = {"benchmark": "scale", "machine": machine(), "sizes": {},
                               "graph_budget": dict(GRAPH_BUDGET) or "kg's defaults"}
    for n in args.sizes:
        print(f"size {n:,} ...", file=sys.stderr, flush=True)
        results["sizes"][str(n)] = measure(n, args, args.workdir)
        results["load_average_at_end"] = load_average()
        print(table([[name, fn(results["sizes"][str(n)])] for name, fn in ROWS], ["", f"{n:,} nodes"]))
    sizes = list(results["sizes"].values())
    print(table([[name, *(fn(r) for r in sizes)] for name, fn in ROWS],
                ["growth", *(f"{r['nodes']:,}" for r in sizes)]))
    backend = sizes[0]["database"] if sizes else "sqlite"
    write_results(results, args.out or RESULTS / ("scale.json" if backend == "sqlite" else f"scale_{backend}.json"))
    return results


if __name__ == "__main__":
    main()
