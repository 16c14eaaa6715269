"""Multi-hop retrieval on HotpotQA (distractor subset): Recall@k and both-supporting@k per mode.

Each HotpotQA question needs two passages from two different articles (the two hops). The whole
4,858-passage pool goes through kg's real write and indexing path (as ``bench/beir.py`` does:
``nodes:batch``, the ``index_jobs`` queue, ``search`` at node granularity); each passage is a node
``/doc/<_id>`` with ``title`` and ``text``. For every question and mode:

- Recall@k = supporting passages in the top k / 2, averaged (k = 2, 5, 10);
- both-supporting@k (AllSup@k) = share of questions with both supporting passages in the top k.

Modes: ``fulltext`` (BM25), ``vector`` (KNN), ``hybrid`` (RRF, k = 60), and with ``--graph``
``hybrid+graph``: the entities of every passage are extracted (the ``extract-entities`` function;
its deterministic extractor when no LLM is configured), and the ``graph-context`` of the question
(seeds: its hybrid top passages; walk: entity -> ``mentioned_in`` edges, 2 hops) adds passages
that share an entity with a seed. The final top 10 keeps hybrid's first ``--keep`` passages and
fills the rest with graph-reached and hybrid passages by fused rank (see :func:`graph_rerank`).

The database is kept in ``bench/results/hotpot-<dataset>/``: a second run embeds nothing.

Reference (the dataset's PROVENANCE.md, 350 dev questions, same pool): BM25 R@10 .903,
MiniLM-L6 int8 R@10 .870, RRF R@10 .919, AllSup@5 .549 / .634 / .669.

``--graph`` also runs ``hybrid+subjects``: the subject leg (``graph-context`` with ``follow:
"subjects"``, hybrid's top 5 as seeds, their subject passages first: the settings
``bench/cv_graph.py`` chose by cross-validation, docs/benchmarks/retrieval.md).

With ``--graph --resolve`` also ``hybrid+graph resolved`` and ``hybrid+subjects resolved``:
``resolve-entities`` runs on a fresh branch made from ``main`` (its defaults: names and mention
embeddings, the default threshold), its proposal branch (made from that branch) is merged back
into it (the review loop, with the merge a person would make; ``main`` itself stays
unresolved, so the kept database can be run again), and both graph legs are run on that branch.
The resolution's own figures (entities, merges, edges re-pointed, seconds) are reported beside
the modes.

Run: ``python bench/hotpot.py DATASETS/hotpotqa-500 [--questions N] [--graph [--resolve]]``.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy is imported

import argparse  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import RESULTS, load_average, machine, percentile, table, write_results  # noqa: E402
from bench.beir import REPO, ingest, load_dataset  # noqa: E402
from kg.rag.search import SearchRequest, search  # noqa: E402
from kg.services import Services  # noqa: E402
from kg.settings import Settings  # noqa: E402
from kg.store.repos import branch_view, get_repository  # noqa: E402

KS = (2, 5, 10)
MODES = ("fulltext", "vector", "hybrid")


def scores(ranked: list[str], supporting: set[str]) -> dict[str, float]:
    """Recall@k and both-supporting@k of one ranking."""
    out = {}
    for k in KS:
        found = len(set(ranked[:k]) & supporting)
        out[f"recall@{k}"] = found / len(supporting)
        out[f"allsup@{k}"] = 1.0 if found == len(supporting) else 0.0
    return out


def run_search(services: Services, workspace: str, query: str, mode: str, k: int,
               branch: str = "main") -> list[str]:
    """Passage ids, best first, of one search at node granularity on ``branch``."""
    with services.db.read() as session:
        view = branch_view(session, REPO, branch)
        rows, _ = search(session, services, view, SearchRequest(
            query=query, k=k, mode=mode, granularity="node", workspaces=[workspace]))
    return [r.path.rsplit("/", 1)[-1] for r in rows]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", type=Path, help="folder with corpus.jsonl, queries.jsonl, qrels.tsv")
    parser.add_argument("--questions", type=int, default=None, help="only the first N questions")
    parser.add_argument("--model", default="local:all-MiniLM-L6-v2")
    parser.add_argument("--graph", action="store_true", help="also run hybrid + graph-context")
    parser.add_argument("--resolve", action="store_true",
                        help="with --graph: resolve the entities, merge the proposal, run the graph leg again")
    parser.add_argument("--keep", type=int, default=5, help="hybrid passages kept before graph ones (--graph)")
    parser.add_argument("--fresh", action="store_true", help="delete the kept database and index first")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if not (args.dataset / "corpus.jsonl").is_file():
        parser.error(f"{args.dataset} has no corpus.jsonl")
    name = args.dataset.resolve().name
    workdir = RESULTS / f"hotpot-{name}"
    if args.fresh and workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    corpus, queries, qrels = load_dataset(args.dataset)
    if args.questions:
        queries = dict(list(queries.items())[:args.questions])
    settings = Settings(database_url=f"sqlite:///{workdir / 'kg.sqlite3'}", data_dir=workdir / "data",
                        embedding_model=args.model, index_inline=False)
    services = Services.from_settings(settings)
    results: dict = {"machine": machine(), "dataset": name, "passages": len(corpus),
                     "questions": len(queries), "model": args.model}
    if args.resolve and not args.graph:
        parser.error("--resolve needs --graph")
    modes = (list(MODES) + (["hybrid+graph", "hybrid+subjects"] if args.graph else [])
             + (["hybrid+graph resolved", "hybrid+subjects resolved"] if args.resolve else []))
    try:
        services.db.upgrade()
        print(f"ingesting {len(corpus)} passages ...", file=sys.stderr, flush=True)
        results["ingest"] = ingest(services, name, corpus)
        with services.db.read() as session:
            services.index.flush(get_repository(session, REPO).uid)
        if args.graph:
            from bench.hotpot_graph import extract_all, graph_ranking, subject_ranking

            results["extraction"] = extract_all(services, name, corpus)
        results["load_average_before_eval"] = load_average()
        print(f"evaluating {len(queries)} questions ...", file=sys.stderr, flush=True)
        per_mode: dict[str, dict] = {}
        per_question: dict[str, dict[str, float]] = {}
        resolved: str | None = None
        for mode in modes:
            branch = "main"
            if mode.endswith(" resolved"):
                if resolved is None:
                    from bench.hotpot_graph import resolve_onto_branch

                    resolved, results["resolution"] = resolve_onto_branch(services, name)
                    print(f"  resolution: {json.dumps(results['resolution'])}", file=sys.stderr, flush=True)
                branch = resolved
            totals: dict[str, float] = {}
            took = []
            per_question[mode] = {}
            for qid, text in queries.items():
                started = time.perf_counter()
                if mode.startswith("hybrid+subjects"):
                    ranked = subject_ranking(services, name, text, branch=branch)
                elif mode.startswith("hybrid+graph"):
                    ranked = graph_ranking(services, name, text, keep=args.keep, branch=branch)
                else:
                    ranked = run_search(services, name, text, mode, 10)
                took.append(time.perf_counter() - started)
                scored = scores(ranked, set(qrels[qid]))
                per_question[mode][qid] = scored["allsup@10"]
                for key, value in scored.items():
                    totals[key] = totals.get(key, 0.0) + value
            per_mode[mode] = {key: round(value / len(queries), 4) for key, value in totals.items()}
            per_mode[mode]["latency_p50_ms"] = round(percentile([t * 1000 for t in took], 50), 2)
            per_mode[mode]["latency_p95_ms"] = round(percentile([t * 1000 for t in took], 95), 2)
            print(f"  {mode}: {json.dumps(per_mode[mode])}", file=sys.stderr, flush=True)
        results["modes"] = per_mode
    finally:
        services.close()
    rows = [[mode] + [f"{per_mode[mode][f'{m}@{k}']:.3f}" for m in ("recall", "allsup") for k in KS]
            + [f"{per_mode[mode]['latency_p50_ms']:.1f}"] for mode in modes]
    print(table(rows, ["mode"] + [f"{m}@{k}" for m in ("R", "AllSup") for k in KS] + ["p50 ms"]))
    if args.graph:
        gain = per_mode["hybrid+graph"]["allsup@10"] - per_mode["hybrid"]["allsup@10"]
        results["graph_gain_allsup@10"] = round(gain, 4)
        print(f"graph leg: both-supporting@10 {per_mode['hybrid']['allsup@10']:.3f} -> "
              f"{per_mode['hybrid+graph']['allsup@10']:.3f} ({gain:+.3f})")
    if args.resolve:
        from bench.cv_fusion import kfold, mean_sd

        # the spread of the change over 5 disjoint folds of the questions (bench/cv_graph.py's split)
        folds = kfold(list(queries), 5, seed=15)
        results["resolution_gain_allsup@10"] = {}
        for leg in ("hybrid+graph", "hybrid+subjects"):
            before, after = per_mode[leg]["allsup@10"], per_mode[f"{leg} resolved"]["allsup@10"]
            gains = [statistics.fmean(per_question[f"{leg} resolved"][q] - per_question[leg][q] for q in fold)
                     for fold in folds]
            mean, sd = mean_sd(gains)
            changed = sum(per_question[f"{leg} resolved"][q] != per_question[leg][q] for q in queries)
            results["resolution_gain_allsup@10"][leg] = {"all": round(after - before, 4),
                                                         "folds": [round(g, 4) for g in gains],
                                                         "mean": round(mean, 4), "sd": round(sd, 4),
                                                         "questions_changed": changed}
            print(f"entity resolution, {leg}: both-supporting@10 {before:.3f} -> {after:.3f} ({after - before:+.3f}; "
                  f"over 5 folds {mean:+.4f} ± {sd:.4f}; {changed} question(s) changed)")
        print(f"  {results['resolution']['merges']} merge(s) of {results['resolution']['names_merged']} names "
              f"among {results['resolution']['entities']} entities")
    suffix = ("-graph" if args.graph else "") + ("-resolved" if args.resolve else "")
    write_results(results, args.out or RESULTS / f"hotpot-{name}{suffix}.json")
    return results


if __name__ == "__main__":
    main()
