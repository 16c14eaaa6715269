"""The graph leg on HotpotQA by cross-validation: does following entities add the second hop?

HotpotQA questions need two passages; the second often shares an entity with the first but
little vocabulary with the question. The graph leg (as ``bench/hotpot_graph.py``):

1. every passage's entities are extracted once with the ``extract-entities`` function (its
   deterministic extractor: no LLM), making ``/entities/<slug>`` nodes with ``mentioned_in``
   edges to the passages;
2. per question, kg's hybrid search (node granularity, top 100, the shipped fusion settings)
   ranks the passages, and ``graph-context`` walks 2 hops over ``mentioned_in`` from the
   hybrid top ``seeds`` (passage -> entity -> passage), scoring what it reaches by the seeds'
   relevance spread over the edges;
3. the final top 10 keeps hybrid's first ``keep`` passages, then fills the other places by a
   weighted reciprocal rank fusion of the hybrid ranking and the graph's.

``seeds``, ``keep`` and the graph leg's weight are chosen on four folds of the questions and
measured on the fifth (5 disjoint folds, as ``bench/cv_fusion.py``), so the figure is what the
choice does on questions it was not chosen on. Metric: AllSup@10 (both supporting passages in
the top 10).

The corpus is read from ``bench/cv_fusion.py``'s kept database of the dataset (``--source``,
default ``/work/cache/cv-<dataset>``), copied to ``--workdir`` so that the entity nodes never
enter the fusion benchmark's database. Run it after ``bench/cv_fusion.py`` has built that
database:

``python bench/cv_graph.py ../shared/datasets/hotpotqa-500 --embed-cache /work/cache/embed-minilm``.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy is imported

import argparse  # noqa: E402
import itertools  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import machine, percentile, table, write_results  # noqa: E402
from bench.cv_fusion import allsup_at, kfold, mean_sd, open_services  # noqa: E402

SEEDS = (2, 3, 5)
KEEPS = (0, 2, 4, 6)
GRAPH_WEIGHTS = (0.25, 0.5, 1.0, 2.0)
RRF_K = 60
K = 10


def legs(services: Any, workspace: str, question: str, seeds: int) -> tuple[list[str], list[str], float]:
    """The hybrid ranking (top 100 passage ids), the graph's (passages reached in 2 hops from
    the hybrid top ``seeds``, by graph-context's score) and the time taken (s)."""
    from bench.beir import REPO
    from kg.context import OPERATOR
    from kg.rag.functions import invoke
    from kg.rag.search import SearchRequest, search
    from kg.store.repos import branch_view

    started = time.perf_counter()
    with services.db.read() as session:
        view = branch_view(session, REPO, "main")
        rows, _ = search(session, services, view, SearchRequest(
            query=question, k=100, mode="hybrid", granularity="node", workspaces=[workspace],
            path_prefix="/doc"))
    ranked = [r.path.rsplit("/", 1)[-1] for r in rows]
    context = invoke(services, OPERATOR, REPO, "graph-context", {
        "seeds": [f"{workspace}:/doc/{did}" for did in ranked[:seeds]], "hops": 2, "types": ["mentioned_in"],
        "direction": "BOTH", "max_nodes": 200, "fan_out": 25})
    found = [n for n in context["nodes"] if n["hop"] == 2 and n["path"].startswith("/doc/")]
    found.sort(key=lambda n: -(n["score"] or 0.0))
    return ranked, [n["path"].rsplit("/", 1)[-1] for n in found], time.perf_counter() - started


def combined(ranked: list[str], reached: list[str], *, keep: int, weight: float) -> list[str]:
    """Hybrid's first ``keep``, then the rest by weighted RRF of hybrid (1) and graph (``weight``)."""
    score: dict[str, float] = {}
    for rank, did in enumerate(ranked, start=1):
        score[did] = score.get(did, 0.0) + 1 / (RRF_K + rank)
    for rank, did in enumerate(reached, start=1):
        score[did] = score.get(did, 0.0) + weight / (RRF_K + rank)
    head = ranked[:keep]
    rest = sorted((d for d in score if d not in head), key=lambda d: -score[d])
    return (head + rest)[:K]


def main(argv: list[str] | None = None) -> dict:
    from bench.beir import load_dataset
    from bench.hotpot_graph import extract_all

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", type=Path)
    parser.add_argument("--source", type=Path, default=None, help="bench/cv_fusion.py's kept database folder")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--model", default="local:all-MiniLM-L6-v2")
    parser.add_argument("--embed-cache", type=Path, nargs="*", default=())
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=15)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    name = args.dataset.resolve().name
    source = args.source or Path("/work/cache") / f"cv-{name}"
    workdir = args.workdir or Path("/work/cache") / f"cv-graph-{name}"
    if not workdir.exists():
        if not (source / "kg.sqlite3").is_file():
            parser.error(f"{source} holds no database: run bench/cv_fusion.py on {args.dataset} first")
        shutil.copytree(source, workdir)
    corpus, queries, qrels = load_dataset(args.dataset)
    services, workspace, _ = open_services(args.dataset, workdir, lexical=False, model=args.model,
                                           embed_cache=args.embed_cache)
    results: dict[str, Any] = {"machine": machine(), "dataset": name, "questions": len(queries),
                               "folds": args.folds, "seed": args.seed,
                               "fusion": {"rrf_k": services.settings.search_rrf_k,
                                          "title_weight": services.settings.search_title_weight,
                                          "fusion_type": services.settings.search_fusion_type}}
    try:
        print("extracting entities ...", file=sys.stderr, flush=True)
        results["extraction"] = extract_all(services, workspace, corpus)
        print(f"reading the legs of {len(queries)} questions ...", file=sys.stderr, flush=True)
        per_q: dict[str, dict[int, tuple[list[str], list[str]]]] = {}
        took: list[float] = []
        for n, (qid, text) in enumerate(queries.items(), start=1):
            per_q[qid] = {}
            for seeds in SEEDS:
                ranked, reached, seconds = legs(services, workspace, text, seeds)
                per_q[qid][seeds] = (ranked, reached)
                took.append(seconds * 1000)
            if n % 50 == 0:
                print(f"  {n}/{len(queries)}", file=sys.stderr, flush=True)
    finally:
        services.close()
    grid = list(itertools.product(SEEDS, KEEPS, GRAPH_WEIGHTS))

    def value(config: tuple[int, int, float], qids: list[str]) -> float:
        seeds, keep, weight = config
        return statistics.fmean(allsup_at(combined(*per_q[q][seeds], keep=keep, weight=weight), qrels[q], K)
                                for q in qids)

    folds = kfold(list(queries), args.folds, seed=args.seed)
    per_fold = []
    for i, test in enumerate(folds):
        train = [q for j, fold in enumerate(folds) if j != i for q in fold]
        best = max(grid, key=lambda c: (value(c, train), -grid.index(c)))
        hybrid = statistics.fmean(allsup_at(per_q[q][SEEDS[0]][0], qrels[q], K) for q in test)
        row = {"fold": i + 1, "questions": len(test), "hybrid": round(hybrid, 4),
               "hybrid+graph": round(value(best, test), 4),
               "chosen": {"seeds": best[0], "keep": best[1], "graph_weight": best[2]}}
        row["graph_over_hybrid"] = row["hybrid+graph"] > row["hybrid"]
        per_fold.append(row)
    summary = {c: dict(zip(("mean", "sd"), (round(x, 4) for x in mean_sd([r[c] for r in per_fold])), strict=True))
               for c in ("hybrid", "hybrid+graph")}
    chosen = Counter(tuple(r["chosen"].values()) for r in per_fold).most_common(1)[0]
    results.update(per_fold=per_fold, summary=summary, legs_p50_ms=round(percentile(took, 50), 2),
                   defaults={"seeds": chosen[0][0], "keep": chosen[0][1], "graph_weight": chosen[0][2],
                             "chosen_in_folds": chosen[1]})
    rows = [[f"fold {r['fold']} ({r['questions']} q)", f"{r['hybrid']:.4f}", f"{r['hybrid+graph']:.4f}",
             f"seeds {r['chosen']['seeds']}, keep {r['chosen']['keep']}, w_g {r['chosen']['graph_weight']}"]
            for r in per_fold]
    rows.append(["mean ± sd"] + [f"{summary[c]['mean']:.4f} ± {summary[c]['sd']:.4f}"
                                 for c in ("hybrid", "hybrid+graph")] + [""])
    print(f"{name}: AllSup@10, {args.folds} folds (seed {args.seed}); fusion {results['fusion']}")
    print(table(rows, ["split", "hybrid", "hybrid+graph", "chosen on the other folds"]))
    print("graph leg above hybrid on every fold:", all(r["graph_over_hybrid"] for r in per_fold))
    write_results(results, args.out or ROOT / "bench" / "results" / f"cv-graph-{name}.json")
    return results


if __name__ == "__main__":
    main()
