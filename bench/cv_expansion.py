"""Relevance feedback (RM3) on the lexical leg and the fusion depth, chosen by cross-validation.

Two candidates the shipped search does not use, measured on questions they were not chosen on:

* **pseudo-relevance feedback** on the BM25F leg: the first pass's best ``fb_docs`` node texts
  (each one's best passage, as the leg returns it) expand the query by RM3
  (:func:`kg.index.feedback.rm3`, Lavrenko and Croft 2001; Anserini's settings as one grid
  point), and the weighted query is searched again through the embedded index's real
  ``bm25_documents``;
* **the fusion depth**: how many of each leg's first items the fusion scores (kg's
  ``FUSION_WINDOW``, 80), from 20 to 160.

The queries are split into 5 disjoint folds (``bench/cv_fusion.py``'s :func:`kfold`). On each
fold the whole grid (no feedback or one of the RM3 settings, a depth, and the fusion: relative
score with a vector weight, or RRF with k and a weight) is scored on the other four folds, the
best is chosen and measured on the held-out fold, next to the shipped search (relative score,
vector weight 0.25, depth 80, no feedback) and to the lexical leg alone with and without the
fold's feedback choice. Figures: per fold, then mean and sample standard deviation.

The legs are read once per query at depth 160 with kg's search (node granularity, the shipped
title weight) and fused offline with kg's own fusion functions, so the selection sees what
kg's hybrid search would return with those settings.

Run after ``bench/cv_fusion.py`` has built the dataset's kept database (or let it build one):
``python bench/cv_expansion.py DATASETS/scifact --embed-cache $KG_BENCH_CACHE/embed-minilm``
and ``python bench/cv_expansion.py DATASETS/hotpotqa-500 --metric allsup@10``.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy is imported

import itertools  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import CACHE, machine, table, write_results  # noqa: E402
from bench.cv_fusion import METRICS, K, cv_parser, kfold, mean_sd, open_services  # noqa: E402

#: Leg depth read per query: the deepest fusion depth in the grid.
LEG_DEPTH = 160
DEPTHS = (20, 40, 80, 160)
#: RM3 settings: (feedback documents, expansion terms, original query weight); Anserini's
#: defaults are (10, 10, 0.5).
PRF = tuple(itertools.product((5, 10), (10, 20), (0.5, 0.7)))
RELATIVE_WEIGHTS = (0.111, 0.25, 0.429, 0.667, 1.0, 1.5)  # vector weight, fulltext 1
RRF = tuple(itertools.product((20, 60), (0.5, 1.0, 1.5)))  # (k, vector weight)
SHIPPED = ("none", 80, "relative_score", 0.25, 0)

#: One choice: (feedback key, depth, method, vector weight, RRF k (0 for relative score)).
Choice = tuple[str, int, str, float, int]


def prf_key(setting: tuple[int, int, float]) -> str:
    """The name of one RM3 setting's leg."""
    docs, terms, weight = setting
    return f"rm3:{docs}:{terms}:{weight}"


def read_legs(services: Any, workspace: str, queries: dict[str, str]) -> dict[str, dict[str, list]]:
    """Each query's legs, best first, as ``[(node id, score), ...]``: ``vector``, ``bm25f`` and
    one ``rm3:...`` per feedback setting."""
    from bench.beir import REPO
    from kg.index.feedback import rm3
    from kg.rag.search import SearchRequest, _searchable, search
    from kg.store.repos import branch_view, workspace_id

    settings = services.settings
    title = {"title": settings.search_title_weight}
    out: dict[str, dict[str, list]] = {}
    started = time.perf_counter()
    for n, (qid, text) in enumerate(queries.items(), start=1):
        legs: dict[str, list] = {}
        with services.db.read() as session:
            view = branch_view(session, REPO, "main")
            vector, _ = search(session, services, view, SearchRequest(
                query=text, workspaces=[workspace], k=LEG_DEPTH, mode="vector", granularity="chunk"))
            first: dict[str, float] = {}
            for row in vector:
                first.setdefault(row.path.rsplit("/", 1)[-1], row.score)
            legs["vector"] = list(first.items())
            request = SearchRequest(query=text, workspaces=[workspace], k=LEG_DEPTH, mode="fulltext",
                                    granularity="node")
            searchable = _searchable(session, services, view, [workspace_id(view, workspace)], request)
            index = services.index
            repo_key = view.repo.uid

            def nodes(hits: list[Any], searchable: Any = searchable) -> list[tuple[str, float]]:
                ranked: dict[str, float] = {}
                for hit in hits:
                    for node in searchable.by_key.get(hit.content_key, ()):
                        ranked.setdefault(node.path.rsplit("/", 1)[-1], hit.score)
                return list(ranked.items())

            lexical = index.bm25_documents(repo_key, text, LEG_DEPTH, scope=searchable.scope, field_weights=title)
            legs["bm25f"] = nodes(lexical)
            bm25 = index._view(repo_key).bm25  # the same index the leg searched: its analyzer and df
            for setting in PRF:
                fb_docs, terms, weight = setting
                expanded = rm3(bm25, text, [(hit.text, hit.score) for hit in lexical[:fb_docs]], terms=terms,
                               original_weight=weight)
                hits = (index.bm25_documents(repo_key, expanded, LEG_DEPTH, scope=searchable.scope,
                                             field_weights=title) if expanded else [])
                legs[prf_key(setting)] = nodes(hits)
        out[qid] = legs
        if n % 50 == 0:
            print(f"  legs of {n}/{len(queries)} queries ({time.perf_counter() - started:.0f} s)",
                  file=sys.stderr, flush=True)
    return out


def grid() -> list[Choice]:
    """Every choice the folds select from, the shipped one first."""
    feedback = ["none", *(prf_key(s) for s in PRF)]
    fusions = [("relative_score", w, 0) for w in RELATIVE_WEIGHTS] + [("rrf", w, k) for k, w in RRF]
    rest = [(fb, depth, method, weight, k) for fb, depth, (method, weight, k)
            in itertools.product(feedback, DEPTHS, fusions)]
    return [SHIPPED, *(c for c in rest if c != SHIPPED)]  # the shipped search wins a tie


def ranking(choice: Choice, legs: dict[str, list]) -> list[str]:
    """One query's hybrid node ranking under ``choice``, fused by kg's own functions."""
    from kg.rag.fusion import reciprocal_rank_fusion, relative_score_fusion

    feedback, depth, method, weight, rrf_k = choice
    lexical = legs["bm25f" if feedback == "none" else feedback][:depth]
    vector = legs["vector"][:depth]
    weights = {"vector": weight, "fulltext": 1.0}
    if method == "relative_score":
        fused = relative_score_fusion({"vector": vector, "fulltext": lexical}, weights=weights, window=depth)
    else:
        fused = reciprocal_rank_fusion({"vector": [d for d, _ in vector], "fulltext": [d for d, _ in lexical]},
                                       weights=weights, k=rrf_k, window=depth)
    return [item for item, _, _ in fused]


def mean_metric(rankings: dict[str, list[str]], qids: Sequence[str], qrels: dict, metric: str) -> float:
    """The metric's mean over ``qids``."""
    measure = METRICS[metric]
    return statistics.fmean(measure(rankings[q], qrels[q], K) for q in qids)


def main(argv: list[str] | None = None) -> dict:
    from bench.beir import load_dataset

    parser = cv_parser(__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=None,
                        help="kept database and index (default $KG_BENCH_CACHE/cv-<dataset>, shared with "
                             "bench/cv_fusion.py)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    name = args.dataset.resolve().name
    workdir = args.workdir or CACHE / f"cv-{name}"
    _, queries, qrels = load_dataset(args.dataset)
    queries = {q: t for q, t in queries.items() if q in qrels}
    services, workspace, ingest_figures = open_services(args.dataset, workdir, lexical=False, model=args.model,
                                                        embed_cache=args.embed_cache)
    results: dict[str, Any] = {"machine": machine(), "dataset": name, "queries": len(queries),
                               "metric": args.metric, "folds": args.folds, "seed": args.seed,
                               "leg_depth": LEG_DEPTH, "ingest": ingest_figures}
    try:
        print(f"reading the legs of {len(queries)} queries ...", file=sys.stderr, flush=True)
        started = time.perf_counter()
        legs = read_legs(services, workspace, queries)
        results["legs_seconds"] = round(time.perf_counter() - started, 1)
        (workdir / "expansion-legs.json").write_text(json.dumps(legs), encoding="utf-8")
        choices = grid()
        folds = kfold(list(queries), args.folds, seed=args.seed)
        # every choice's ranking of every query, computed once
        print(f"fusing {len(choices)} choices x {len(queries)} queries ...", file=sys.stderr, flush=True)
        per_query = {c: {q: METRICS[args.metric](ranking(c, legs[q]), qrels[q], K) for q in queries}
                     for c in choices}
        per_fold: list[dict[str, Any]] = []
        for i, test in enumerate(folds):
            train = [q for j, fold in enumerate(folds) if j != i for q in fold]
            chosen = max(choices, key=lambda c: (round(statistics.fmean(per_query[c][q] for q in train), 12),
                                                 -choices.index(c)))
            lexical_choice = max(["none", *(prf_key(s) for s in PRF)], key=lambda fb: (round(statistics.fmean(
                METRICS[args.metric]([d for d, _ in legs[q]["bm25f" if fb == "none" else fb]], qrels[q], K)
                for q in train), 12), fb == "none"))

            def lexical(fb: str, test: list[str] = test) -> float:
                leg = "bm25f" if fb == "none" else fb
                return round(mean_metric({q: [d for d, _ in legs[q][leg]] for q in test}, test, qrels,
                                         args.metric), 4)

            per_fold.append({
                "fold": i + 1, "queries": len(test),
                "chosen": dict(zip(("feedback", "depth", "method", "vector_weight", "rrf_k"), chosen, strict=True)),
                "fulltext": lexical("none"),
                "fulltext_rm3_chosen": lexical_choice,
                "fulltext_rm3": lexical(lexical_choice),
                "fulltext_rm3_anserini": lexical(prf_key((10, 10, 0.5))),
                "vector": round(mean_metric({q: [d for d, _ in legs[q]["vector"]] for q in test}, test, qrels,
                                            args.metric), 4),
                "hybrid_shipped": round(statistics.fmean(per_query[SHIPPED][q] for q in test), 4),
                "hybrid_chosen": round(statistics.fmean(per_query[chosen][q] for q in test), 4),
            })
        results["folds_detail"] = per_fold
        summary = {}
        for key in ("fulltext", "fulltext_rm3", "fulltext_rm3_anserini", "vector", "hybrid_shipped",
                    "hybrid_chosen"):
            mean, sd = mean_sd([row[key] for row in per_fold])
            summary[key] = {"mean": round(mean, 4), "sd": round(sd, 4)}
        results["summary"] = summary
        results["chosen_most"] = Counter(tuple(r["chosen"].values()) for r in per_fold).most_common(1)[0][0]
        results["all_queries"] = {  # not a held-out figure: how each candidate does on every query
            "shipped": round(statistics.fmean(per_query[SHIPPED].values()), 4),
            "best_depth_shipped_fusion": {d: round(statistics.fmean(per_query[("none", d, "relative_score", 0.25,
                                                                              0)].values()), 4) for d in DEPTHS},
            "rm3_shipped_fusion": {prf_key(s): round(statistics.fmean(
                per_query[(prf_key(s), 80, "relative_score", 0.25, 0)].values()), 4) for s in PRF},
        }
    finally:
        services.close()
    print(table([[r["fold"], r["queries"], "/".join(str(v) for v in r["chosen"].values()), r["fulltext"],
                  f"{r['fulltext_rm3']} ({r['fulltext_rm3_chosen']})", r["vector"], r["hybrid_shipped"],
                  r["hybrid_chosen"]] for r in per_fold],
                ["fold", "queries", "chosen (feedback/depth/fusion/w/k)", "fulltext", "fulltext+RM3 (chosen)",
                 "vector", "hybrid shipped", "hybrid chosen"]))
    print(table([[key, f"{v['mean']:.4f} ± {v['sd']:.4f}"] for key, v in summary.items()],
                [f"{args.metric} ({name}, {args.folds}-fold held-out)", "mean ± sd"]))
    print("every query, shipped fusion, by depth:", results["all_queries"]["best_depth_shipped_fusion"])
    print("every query, shipped fusion, by RM3 setting:", results["all_queries"]["rm3_shipped_fusion"])
    write_results(results, args.out or ROOT / "bench" / "results" / f"cv_expansion-{name}.json")
    return results


if __name__ == "__main__":
    main()
