"""Retrieval quality on a BEIR-layout dataset: nDCG@10 and Recall@100 for fulltext, vector, hybrid.

The corpus goes through kg's real write path: ``nodes:batch`` writes (``kg.ops.nodes.batch``),
the durable ``index_jobs`` queue drained by the indexer (chunking, embedding, chunk rows), then
``search`` at node granularity on ``main``, exactly as ``POST /api/repos/{repo}/search`` runs it.
Each document is a node ``/doc/<_id>`` with properties ``title`` and ``text``.

The database and index live in ``bench/results/beir-<dataset>/`` and are kept: a second run finds
every document unchanged, writes and embeds nothing (the ingestion lifecycle), and only evaluates.
``--fresh`` starts over.

Metrics (binary relevance from ``qrels.tsv``), as BEIR computes them with pytrec_eval:

- nDCG@10 = DCG@10 / IDCG@10 with DCG = sum over ranks i of rel_i / log2(i + 1)
  (Jarvelin and Kekalainen 2002, "Cumulated gain-based evaluation of IR techniques");
- Recall@100 = relevant documents in the top 100 / relevant documents.

Published reference points (printed beside the figures): BM25 0.665 nDCG@10 on SciFact (Thakur
et al. 2021, BEIR, Table 2), all-MiniLM-L6-v2 0.645 (MTEB). Both are on the full 300-query
test set; ``shared/datasets/scifact`` holds 210 of those queries (see its PROVENANCE.md).

Run: ``python bench/beir.py DATASETS/scifact [--queries N] [--fresh]``.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy is imported

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections import defaultdict  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import RESULTS, load_average, machine, percentile, table, write_results  # noqa: E402
from kg import context  # noqa: E402
from kg.errors import NotFound  # noqa: E402
from kg.indexing.index_jobs import index_status  # noqa: E402
from kg.ops.nodes import batch  # noqa: E402
from kg.rag.search import SearchRequest, search  # noqa: E402
from kg.services import Services  # noqa: E402
from kg.settings import Settings  # noqa: E402
from kg.store import nodes as node_store  # noqa: E402
from kg.store.repos import (  # noqa: E402
    branch_view,
    create_repository,
    create_workspace,
    get_repository,
    list_workspaces,
)

REPO = "beir"
MODES = ("fulltext", "vector", "hybrid")
PUBLISHED = {"scifact": {"fulltext": ("BM25, BEIR paper", 0.665),
                         "vector": ("all-MiniLM-L6-v2, MTEB", 0.645)}}
WRITE_BATCH = 500


def load_dataset(folder: Path) -> tuple[dict[str, dict], dict[str, str], dict[str, dict[str, int]]]:
    """Corpus ``{id: {"title", "text"}}``, queries ``{id: text}`` and qrels ``{qid: {docid: rel}}``."""
    corpus = {}
    with open(folder / "corpus.jsonl", encoding="utf-8") as fh:
        for line in fh:
            doc = json.loads(line)
            corpus[str(doc["_id"])] = {"title": doc.get("title") or "", "text": doc.get("text") or ""}
    queries = {}
    with open(folder / "queries.jsonl", encoding="utf-8") as fh:
        for line in fh:
            q = json.loads(line)
            queries[str(q["_id"])] = q["text"]
    qrels: dict[str, dict[str, int]] = defaultdict(dict)
    with open(folder / "qrels.tsv", encoding="utf-8") as fh:
        next(fh)  # header
        for line in fh:
            qid, did, score = line.rstrip("\n").split("\t")
            if int(score) > 0:
                qrels[qid][did] = int(score)
    return corpus, {q: t for q, t in queries.items() if q in qrels}, dict(qrels)


def ndcg_at(ranked: list[str], relevant: dict[str, int], k: int) -> float:
    """nDCG@k with graded gains ``rel`` and a log2(rank + 1) discount (BEIR / pytrec_eval)."""
    dcg = sum(relevant.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranked[:k]))
    ideal = sorted(relevant.values(), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


def recall_at(ranked: list[str], relevant: dict[str, int], k: int) -> float:
    """Share of the relevant documents found in the top ``k``."""
    return len(set(ranked[:k]) & set(relevant)) / len(relevant) if relevant else 0.0


def ingest(services: Services, workspace: str, corpus: dict[str, dict]) -> dict:
    """Write the documents not yet stored, then drain the index queue. Returns figures."""
    with services.db.write() as session:
        try:
            repo = get_repository(session, REPO, lock=True)
        except NotFound:
            repo = create_repository(session, name=REPO)
        if workspace not in {w.name for w in list_workspaces(session, repo)}:
            create_workspace(session, repo, name=workspace, config=None)
    with services.db.read() as session:
        view = branch_view(session, REPO, "main")
        stored = {n.path for n in node_store.visible_nodes(session, view, with_properties=False)}
    todo = [(did, doc) for did, doc in corpus.items() if f"/doc/{did}" not in stored]
    started = time.perf_counter()
    for start in range(0, len(todo), WRITE_BATCH):
        part = todo[start:start + WRITE_BATCH]
        context.run(services, context.OPERATOR, batch, REPO, "main", parents=True, message=f"beir {start}", upserts=[
            {"workspace": workspace, "path": f"/doc/{did}", "node_type": "beir:Doc",
             "properties": {"title": doc["title"], "text": doc["text"]}} for did, doc in part])
    written_s = time.perf_counter() - started
    embedded = 0
    done = 0
    while True:
        run = services.indexer.run_pending()
        if run.done == 0 and run.failed == 0:
            break
        done += run.done
        embedded += run.passages
        if done and done % 320 < 32:
            rate = embedded / max(1e-9, time.perf_counter() - started - written_s)
            print(f"  indexed {done}/{len(todo)} nodes, {embedded} passages ({rate:.1f}/s)",
                  file=sys.stderr, flush=True)
    total_s = time.perf_counter() - started
    with services.db.read() as session:
        status = index_status(session, get_repository(session, REPO))
    return {"documents_written": len(todo), "write_s": round(written_s, 2),
            "passages_embedded": embedded, "ingest_s": round(total_s, 2), "index_status": status}


def evaluate(services: Services, workspace: str, queries: dict[str, str],
             qrels: dict[str, dict[str, int]]) -> dict:
    """nDCG@10, Recall@100 and latency per mode, at node granularity."""
    out = {}
    for mode in MODES:
        ndcg, recall, took = [], [], []
        for qid, text in queries.items():
            started = time.perf_counter()
            with services.db.read() as session:
                view = branch_view(session, REPO, "main")
                rows, _ = search(session, services, view, SearchRequest(
                    query=text, k=100, mode=mode, granularity="node", workspaces=[workspace]))
            took.append(time.perf_counter() - started)
            ranked = [r.path.rsplit("/", 1)[-1] for r in rows]
            ndcg.append(ndcg_at(ranked, qrels[qid], 10))
            recall.append(recall_at(ranked, qrels[qid], 100))
        out[mode] = {"ndcg@10": round(sum(ndcg) / len(ndcg), 4),
                     "recall@100": round(sum(recall) / len(recall), 4),
                     "latency_p50_ms": round(percentile([t * 1000 for t in took], 50), 2),
                     "latency_p95_ms": round(percentile([t * 1000 for t in took], 95), 2)}
        print(f"  {mode}: nDCG@10 {out[mode]['ndcg@10']:.4f}  Recall@100 {out[mode]['recall@100']:.4f}",
              file=sys.stderr, flush=True)
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", type=Path, help="a BEIR-layout folder (corpus.jsonl, queries.jsonl, qrels.tsv)")
    parser.add_argument("--queries", type=int, default=None, help="evaluate only the first N queries")
    parser.add_argument("--model", default="local:all-MiniLM-L6-v2", help="embedding model")
    parser.add_argument("--fresh", action="store_true", help="delete the kept database and index first")
    parser.add_argument("--out", type=Path, default=None, help="JSON file (default bench/results/beir-<name>.json)")
    args = parser.parse_args(argv)
    if not (args.dataset / "corpus.jsonl").is_file():
        parser.error(f"{args.dataset} has no corpus.jsonl")
    name = args.dataset.resolve().name
    workdir = RESULTS / f"beir-{name}"
    if args.fresh and workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True, exist_ok=True)

    corpus, queries, qrels = load_dataset(args.dataset)
    if args.queries:
        queries = dict(list(queries.items())[:args.queries])
    settings = Settings(database_url=f"sqlite:///{workdir / 'kg.sqlite3'}", data_dir=workdir / "data",
                        embedding_model=args.model, index_inline=False)
    services = Services.from_settings(settings)
    results: dict = {"machine": machine(), "dataset": name, "documents": len(corpus),
                     "queries": len(queries), "model": args.model}
    try:
        services.db.upgrade()
        print(f"ingesting {len(corpus)} documents ...", file=sys.stderr, flush=True)
        results["ingest"] = ingest(services, name, corpus)
        with services.db.read() as session:
            services.index.flush(get_repository(session, REPO).uid)
        print(f"evaluating {len(queries)} queries ...", file=sys.stderr, flush=True)
        results["load_average_before_eval"] = load_average()
        results["modes"] = evaluate(services, name, queries, qrels)
    finally:
        services.close()
    modes = results["modes"]
    best_leg = max(modes["fulltext"]["ndcg@10"], modes["vector"]["ndcg@10"])
    results["hybrid_over_best_leg"] = round(modes["hybrid"]["ndcg@10"] / best_leg, 4) if best_leg else None
    published = PUBLISHED.get(name, {})
    rows = []
    for mode in MODES:
        ref = published.get(mode)
        rows.append([mode, f"{modes[mode]['ndcg@10']:.4f}", f"{modes[mode]['recall@100']:.4f}",
                     f"{modes[mode]['latency_p50_ms']:.1f}", f"{modes[mode]['latency_p95_ms']:.1f}",
                     f"{ref[1]:.3f} ({ref[0]})" if ref else "-"])
    print(table(rows, ["mode", "nDCG@10", "Recall@100", "p50 ms", "p95 ms", "published nDCG@10"]))
    print(f"hybrid / best single leg (nDCG@10): {results['hybrid_over_best_leg']}")
    print(f"ingest: {results['ingest']['documents_written']} documents written, "
          f"{results['ingest']['passages_embedded']} passages embedded in {results['ingest']['ingest_s']} s")
    write_results(results, args.out or RESULTS / f"beir-{name}.json")
    return results


if __name__ == "__main__":
    main()
