"""End-to-end search latency over 100,000 chunks: vector and hybrid, k = 10, embedded index.

The corpus: 100,000 passages of the PEP fixture (150-word windows, cycled with shifted offsets,
as ``bench/index_embedded.py`` builds them), ``--per-node`` passages per node in ``content``
(the ``words`` splitter at 150 words, so that each window is one chunk), written through
``kg.ops.nodes.batch`` and indexed
by the durable queue. The vectors come from the deterministic ``fake:hash-384`` embedder: a
search's cost does not depend on what the vectors mean, and embedding 100,000 passages with the
offline model would take hours on 2 cores. The query is embedded by the same fake embedder, so
the figures leave out the model's own time per query (about 5-30 ms for MiniLM, reported apart
with ``--model-query``).

For each mode, ``kg.rag.search.search`` on ``main`` (SQL visibility, filters, both legs, fusion,
properties of the returned rows) is timed over ``--queries`` queries (PEP titles), p50 / p95.
Baseline in the same run: the bare legs on the same data, without kg around them: one NumPy
product over the full 100,000 x 384 float32 matrix + ``argpartition`` (vector), and the same
BM25 postings searched directly (hybrid adds both). The ratio kg / baseline is what kg's
branch visibility, filtering and fusion cost.

Run: ``python bench/search_latency.py [--chunks 100000] [--queries 200]``; JSON in
``bench/results/search_latency.json``. The database is kept in ``bench/results/search-latency/``
(``--fresh`` rebuilds it).
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy is imported

import argparse  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import RESULTS, load_average, machine, percentile, table, write_results  # noqa: E402
from bench.index_embedded import pep_chunks  # noqa: E402
from kg import context  # noqa: E402
from kg.errors import NotFound  # noqa: E402
from kg.index.bm25 import BM25Index  # noqa: E402
from kg.ops.nodes import batch  # noqa: E402
from kg.rag.search import SearchRequest, search  # noqa: E402
from kg.services import Services  # noqa: E402
from kg.settings import Settings  # noqa: E402
from kg.store import nodes as node_store  # noqa: E402
from kg.store.repos import branch_view, create_repository, create_workspace, get_repository  # noqa: E402

REPO = "latency"
WORKSPACE = "peps"
MODEL = "fake:hash-384"
WRITE_BATCH = 500


def build(services: Services, n_chunks: int, per_node: int) -> dict:
    """Write the corpus (unless kept from a previous run) and drain the index queue."""
    with services.db.write() as session:
        try:
            get_repository(session, REPO)
            exists = True
        except NotFound:
            repo = create_repository(session, name=REPO)
            create_workspace(session, repo, name=WORKSPACE, config={"embedding": {
                "model": MODEL, "chunking": {"splitter": "words", "unit": "words", "chunk_size": 150,
                                             "overlap": 0}}})
            exists = False
    if exists:
        with services.db.read() as session:
            view = branch_view(session, REPO, "main")
            nodes = len(node_store.visible_nodes(session, view, with_properties=False))
        return {"kept": True, "nodes": nodes}
    chunks = pep_chunks(n_chunks)
    started = time.perf_counter()
    items = []
    for start in range(0, len(chunks), per_node):
        group = chunks[start:start + per_node]
        items.append({"workspace": WORKSPACE, "path": f"/n/{start // per_node:06d}", "node_type": "bench:Doc",
                      "properties": {"content": "\n\n".join(text for _, _, text in group),
                                     "shard": (start // per_node) % 10}})
    for start in range(0, len(items), WRITE_BATCH):
        context.run(services, context.OPERATOR, batch, REPO, "main", upserts=items[start:start + WRITE_BATCH],
                    parents=True)
    write_s = time.perf_counter() - started
    while True:
        run = services.indexer.run_pending()
        if not run.done and not run.failed:
            break
    return {"kept": False, "nodes": len(items), "write_s": round(write_s, 1),
            "index_s": round(time.perf_counter() - started - write_s, 1)}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--per-node", type=int, default=4, help="passages per node")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--model-query", action="store_true",
                        help="also time embedding one query with local:all-MiniLM-L6-v2")
    parser.add_argument("--fresh", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS / "search_latency.json")
    args = parser.parse_args(argv)
    workdir = RESULTS / "search-latency"
    if args.fresh and workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    settings = Settings(database_url=f"sqlite:///{workdir / 'kg.sqlite3'}", data_dir=workdir / "data",
                        embedding_model=MODEL, index_inline=False, allow_fake_embedder=True)
    services = Services.from_settings(settings)
    results: dict = {"machine": machine(), "k": args.k, "model": MODEL}
    try:
        services.db.upgrade()
        print("building the corpus ...", file=sys.stderr, flush=True)
        results["build"] = build(services, args.chunks, args.per_node)
        with services.db.read() as session:
            repo = get_repository(session, REPO)
            uid = repo.uid
        services.index.flush(uid)
        titles = [p.read_text(encoding="utf-8").split("\n", 3)[1].partition(":")[2].strip() or p.stem
                  for p in sorted((ROOT / "fixtures" / "peps" / "docs").glob("*.rst"))]
        queries = [titles[i % len(titles)] for i in range(args.queries)]
        embedder = services.embedder(MODEL)

        def kg_search(mode: str, query: str) -> int:
            with services.db.read() as session:
                view = branch_view(session, REPO, "main")
                rows, _ = search(session, services, view, SearchRequest(query=query, k=args.k, mode=mode))
            return len(rows)

        # The baseline: the bare legs on the same chunks (from the index's own arrays).
        from sqlalchemy import select

        from kg.store.models import Chunk

        with services.db.read() as session:
            rows = session.execute(select(Chunk.text, Chunk.embedding).where(Chunk.repo_id == repo.id)
                                   .order_by(Chunk.seq)).all()
        matrix = np.stack([np.frombuffer(e, dtype=np.float32) for _, e in rows])
        bm25 = BM25Index()
        bm25.add_many((i, text) for i, (text, _) in enumerate(rows))
        results["chunks"] = len(rows)
        del rows

        def bare_vector(query: str) -> int:
            q = embedder.embed([query])[0]
            sims = matrix @ q
            top = np.argpartition(-sims, args.k)[:args.k]
            return len(top[np.argsort(-sims[top])])

        def bare_hybrid(query: str) -> int:
            return bare_vector(query) + len(bm25.search(query, args.k))

        timings: dict[str, dict] = {}
        for name, fn in (("kg vector", lambda q: kg_search("vector", q)),
                         ("kg hybrid", lambda q: kg_search("hybrid", q)),
                         ("bare vector", bare_vector), ("bare hybrid", bare_hybrid)):
            fn(queries[0])  # warm: the first search loads the snapshot and fills the caches
            samples = []
            for query in queries:
                started = time.perf_counter()
                fn(query)
                samples.append((time.perf_counter() - started) * 1000)
            timings[name] = {"p50_ms": round(percentile(samples, 50), 2),
                             "p95_ms": round(percentile(samples, 95), 2)}
        if args.model_query:
            local = services.embedder("local:all-MiniLM-L6-v2")
            local.embed(["warm"])
            samples = []
            for query in queries[:50]:
                started = time.perf_counter()
                local.embed([query])
                samples.append((time.perf_counter() - started) * 1000)
            timings["MiniLM query embedding"] = {"p50_ms": round(percentile(samples, 50), 2),
                                                 "p95_ms": round(percentile(samples, 95), 2)}
        results["timings"] = timings
        results["index"] = services.index.stats(uid) if hasattr(services.index, "stats") else {}
        results["ratio_p50"] = {mode: round(timings[f"kg {mode}"]["p50_ms"] / timings[f"bare {mode}"]["p50_ms"], 2)
                                for mode in ("vector", "hybrid")}
        results["load_average_after"] = load_average()
    finally:
        services.close()
    print(table([[name, t["p50_ms"], t["p95_ms"]] for name, t in timings.items()], ["search", "p50 ms", "p95 ms"]))
    print(f"chunks: {results['chunks']}; kg / bare legs at p50: {results['ratio_p50']}")
    write_results(results, args.out)
    return results


if __name__ == "__main__":
    main()
