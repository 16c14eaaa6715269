"""The graph leg on HotpotQA by cross-validation: does following entities add the second hop?

HotpotQA questions need two passages; the second often shares an entity with the first but
little vocabulary with the question. The graph leg (as ``bench/hotpot_graph.py``):

1. every passage's entities are extracted once with the ``extract-entities`` function (no LLM:
   the offline NER, or with ``--extractor rules`` the deterministic rules it replaced),
   making ``/entities/<slug>`` nodes with ``mentioned_in`` edges to the passages;
2. per question, kg's hybrid search (node granularity, top 100, the shipped fusion settings)
   ranks the passages, and ``graph-context`` walks 2 hops over ``mentioned_in`` from the
   hybrid top ``seeds`` (passage -> entity -> passage), scoring what it reaches by the seeds'
   relevance spread over the edges;
3. the final top 10 keeps hybrid's first ``keep`` passages, then fills the other places by a
   weighted reciprocal rank fusion of the hybrid ranking and the graph's.

A second graph leg follows mentions to subjects (``graph-context`` with ``follow:
"subjects"``): from hybrid's top ``seeds`` passages, the entities each mentions, then the
passages ``about`` those entities (the extractor links a passage to the entity its title names:
the page of a bridge entity, HotpotQA's second hop, Yang et al. 2018). Its top 10 keeps hybrid's
first ``keep``, then the subject passages (by their seed's rank, then their own hybrid rank),
then the rest of hybrid.

``seeds``, ``keep`` and the graph leg's weight are chosen on four folds of the questions and
measured on the fifth (5 disjoint folds, as ``bench/cv_fusion.py``), so the figure is what the
choice does on questions it was not chosen on. Metric: AllSup@10 (both supporting passages in
the top 10).

The corpus is read from ``bench/cv_fusion.py``'s kept database of the dataset (``--source``,
default ``$KG_BENCH_CACHE/cv-<dataset>``), copied to ``--workdir`` so that the entity nodes never
enter the fusion benchmark's database. Run it after ``bench/cv_fusion.py`` has built that
database:

``python bench/cv_graph.py DATASETS/hotpotqa-500 --embed-cache $KG_BENCH_CACHE/embed-minilm``.
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

from bench._common import CACHE, machine, percentile, table, write_results  # noqa: E402
from bench.cv_fusion import allsup_at, kfold, mean_sd, open_services  # noqa: E402

SEEDS = (2, 3, 5)
KEEPS = (0, 2, 4, 6)
GRAPH_WEIGHTS = (0.25, 0.5, 1.0, 2.0)
SUBJECT_SEEDS = (1, 2, 3, 5, 8)
SUBJECT_KEEPS = (0, 1, 2, 3, 4, 5, 6, 8)
RRF_K = 60
K = 10


def hybrid_ranking(services: Any, workspace: str, question: str) -> list[str]:
    """kg's hybrid search at the shipped defaults: the top 100 passage ids."""
    from bench.beir import REPO
    from kg.rag.search import SearchRequest, search
    from kg.store.repos import branch_view

    with services.db.read() as session:
        view = branch_view(session, REPO, "main")
        rows, _ = search(session, services, view, SearchRequest(
            query=question, k=100, mode="hybrid", granularity="node", workspaces=[workspace],
            path_prefix="/doc"))
    return [r.path.rsplit("/", 1)[-1] for r in rows]


def legs(services: Any, workspace: str, ranked: list[str], seeds: int) -> tuple[list[str], float]:
    """The spread-activation graph leg: passages reached in 2 hops over ``mentioned_in`` from
    the hybrid top ``seeds``, by graph-context's score, and the time taken (s)."""
    from bench.beir import REPO
    from kg.context import OPERATOR
    from kg.rag.functions import invoke
    from kg.types.functions import GraphContextOutput

    started = time.perf_counter()
    context = invoke(services, OPERATOR, REPO, "graph-context", {
        "seeds": [f"{workspace}:/doc/{did}" for did in ranked[:seeds]], "hops": 2, "types": ["mentioned_in"],
        "direction": "BOTH", "max_nodes": 200, "fan_out": 25})
    assert isinstance(context, GraphContextOutput)
    found = [n for n in context.nodes if n.hop == 2 and n.path.startswith("/doc/")]
    found.sort(key=lambda n: -(n.score or 0.0))
    return [n.path.rsplit("/", 1)[-1] for n in found], time.perf_counter() - started


def subject_leg(services: Any, workspace: str, ranked: list[str], seeds: int,
                branch: str = "main") -> tuple[list[tuple[int, str]], float]:
    """The subject leg: ``(seed rank, passage id)`` of the passages ``about`` an entity that one
    of hybrid's top ``seeds`` mentions (graph-context, ``follow: "subjects"``), in the order
    reached, and the time taken (s)."""
    from bench.beir import REPO
    from kg.context import OPERATOR
    from kg.rag.functions import invoke
    from kg.types.functions import GraphContextOutput

    started = time.perf_counter()
    addresses = [f"{workspace}:/doc/{did}" for did in ranked[:seeds]]
    if not addresses:
        return [], 0.0
    context = invoke(services, OPERATOR, REPO, "graph-context", {
        "seeds": addresses, "follow": "subjects", "hops": 2, "max_nodes": 1000, "fan_out": 100}, branch=branch)
    assert isinstance(context, GraphContextOutput)
    rank = {address: i for i, address in enumerate(addresses)}
    reached_from = {f"{n.workspace}:{n.path}": n.from_ or "" for n in context.nodes}
    # a passage's "from" is the entity it is about; the entity's "from" is the seed mentioning it
    found = [(rank[reached_from[n.from_]], n.path.rsplit("/", 1)[-1]) for n in context.nodes
             if n.hop == 2 and n.from_ is not None and n.path.startswith("/doc/")]
    return found, time.perf_counter() - started


def subject_combined(ranked: list[str], reached: list[tuple[int, str]], *, seeds: int, keep: int) -> list[str]:
    """Hybrid's first ``keep``, then the subject passages of the top ``seeds`` (by seed rank,
    then hybrid rank, then the order reached), then the rest of hybrid."""
    position = {did: i for i, did in enumerate(ranked)}
    head = ranked[:keep]
    order = {did: n for n, (_, did) in enumerate(reached)}
    linked = sorted({did for s, did in reached if s < seeds and did not in head},
                    key=lambda d: (min(s for s, x in reached if x == d), position.get(d, len(ranked)), order[d]))
    rest = [d for d in ranked if d not in head and d not in linked]
    return (head + linked + rest)[:K]


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
    parser.add_argument("--extractor", choices=("ner", "rules"), default="ner",
                        help="extract-entities with the offline NER (KG_ENTITY_NER=auto) or the deterministic "
                             "rules (KG_ENTITY_NER=off): the graph leg before and after the NER")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    name = args.dataset.resolve().name
    source = args.source or CACHE / f"cv-{name}"
    workdir = args.workdir or CACHE / f"cv-graph-{name}-{args.extractor}"
    if not workdir.exists():
        if not (source / "kg.sqlite3").is_file():
            parser.error(f"{source} holds no database: run bench/cv_fusion.py on {args.dataset} first")
        shutil.copytree(source, workdir)
    corpus, queries, qrels = load_dataset(args.dataset)
    services, workspace, _ = open_services(args.dataset, workdir, lexical=False, model=args.model,
                                           embed_cache=args.embed_cache)
    services.settings.entity_ner = "auto" if args.extractor == "ner" else "off"
    results: dict[str, Any] = {"machine": machine(), "dataset": name, "questions": len(queries),
                               "extractor_asked": args.extractor,
                               "folds": args.folds, "seed": args.seed,
                               "fusion": {"rrf_k": services.settings.search_rrf_k,
                                          "title_weight": services.settings.search_title_weight,
                                          "fusion_type": services.settings.search_fusion_type}}
    try:
        print("extracting entities ...", file=sys.stderr, flush=True)
        results["extraction"] = extract_all(services, workspace, corpus)
        if args.extractor == "ner" and not str(results["extraction"]["extractor"]).startswith("ner:"):
            raise SystemExit(f"the NER did not run (extractor {results['extraction']['extractor']!r}): "
                             "install the ner extra")
        print(f"reading the legs of {len(queries)} questions ...", file=sys.stderr, flush=True)
        per_q: dict[str, dict[int, tuple[list[str], list[str]]]] = {}
        subjects: dict[str, tuple[list[str], list[tuple[int, str]]]] = {}
        took: list[float] = []
        took_subjects: list[float] = []
        for n, (qid, text) in enumerate(queries.items(), start=1):
            per_q[qid] = {}
            ranked = hybrid_ranking(services, workspace, text)
            for seeds in SEEDS:
                reached, seconds = legs(services, workspace, ranked, seeds)
                per_q[qid][seeds] = (ranked, reached)
                took.append(seconds * 1000)
            found, seconds = subject_leg(services, workspace, ranked, max(SUBJECT_SEEDS))
            subjects[qid] = (ranked, found)
            took_subjects.append(seconds * 1000)
            if n % 50 == 0:
                print(f"  {n}/{len(queries)}", file=sys.stderr, flush=True)
    finally:
        services.close()
    grid = list(itertools.product(SEEDS, KEEPS, GRAPH_WEIGHTS))
    subject_grid = list(itertools.product(SUBJECT_SEEDS, SUBJECT_KEEPS))

    def subject_value(config: tuple[int, int], qids: list[str]) -> float:
        seeds, keep = config
        return statistics.fmean(allsup_at(subject_combined(*subjects[q], seeds=seeds, keep=keep), qrels[q], K)
                                for q in qids)

    def value(config: tuple[int, int, float], qids: list[str]) -> float:
        seeds, keep, weight = config
        return statistics.fmean(allsup_at(combined(*per_q[q][seeds], keep=keep, weight=weight), qrels[q], K)
                                for q in qids)

    folds = kfold(list(queries), args.folds, seed=args.seed)
    per_fold = []
    for i, test in enumerate(folds):
        train = [q for j, fold in enumerate(folds) if j != i for q in fold]
        best = max(grid, key=lambda c: (value(c, train), -grid.index(c)))
        best_subject = max(subject_grid, key=lambda c: (subject_value(c, train), -subject_grid.index(c)))
        hybrid = statistics.fmean(allsup_at(per_q[q][SEEDS[0]][0], qrels[q], K) for q in test)
        row = {"fold": i + 1, "questions": len(test), "hybrid": round(hybrid, 4),
               "hybrid+graph": round(value(best, test), 4),
               "hybrid+subjects": round(subject_value(best_subject, test), 4),
               "chosen": {"seeds": best[0], "keep": best[1], "graph_weight": best[2]},
               "chosen_subjects": {"seeds": best_subject[0], "keep": best_subject[1]}}
        row["graph_over_hybrid"] = row["hybrid+graph"] > row["hybrid"]
        row["subjects_over_hybrid"] = row["hybrid+subjects"] > row["hybrid"]
        per_fold.append(row)
    columns = ("hybrid", "hybrid+graph", "hybrid+subjects")
    summary = {c: dict(zip(("mean", "sd"), (round(x, 4) for x in mean_sd([r[c] for r in per_fold])), strict=True))
               for c in columns}
    chosen = Counter(tuple(r["chosen"].values()) for r in per_fold).most_common(1)[0]
    chosen_subjects = Counter(tuple(r["chosen_subjects"].values()) for r in per_fold).most_common(1)[0]
    reached = [len(found) for _, found in subjects.values()]
    results.update(per_fold=per_fold, summary=summary, legs_p50_ms=round(percentile(took, 50), 2),
                   subject_leg_p50_ms=round(percentile(took_subjects, 50), 2),
                   subject_passages_reached_p50=percentile([float(x) for x in reached], 50),
                   defaults={"seeds": chosen[0][0], "keep": chosen[0][1], "graph_weight": chosen[0][2],
                             "chosen_in_folds": chosen[1]},
                   subject_defaults={"seeds": chosen_subjects[0][0], "keep": chosen_subjects[0][1],
                                     "chosen_in_folds": chosen_subjects[1]})
    rows = [[f"fold {r['fold']} ({r['questions']} q)", f"{r['hybrid']:.4f}", f"{r['hybrid+graph']:.4f}",
             f"seeds {r['chosen']['seeds']}, keep {r['chosen']['keep']}, w_g {r['chosen']['graph_weight']}",
             f"{r['hybrid+subjects']:.4f}",
             f"seeds {r['chosen_subjects']['seeds']}, keep {r['chosen_subjects']['keep']}"]
            for r in per_fold]
    rows.append(["mean ± sd", f"{summary['hybrid']['mean']:.4f} ± {summary['hybrid']['sd']:.4f}",
                 f"{summary['hybrid+graph']['mean']:.4f} ± {summary['hybrid+graph']['sd']:.4f}", "",
                 f"{summary['hybrid+subjects']['mean']:.4f} ± {summary['hybrid+subjects']['sd']:.4f}", ""])
    print(f"{name}: AllSup@10, {args.folds} folds (seed {args.seed}); fusion {results['fusion']}")
    print(table(rows, ["split", "hybrid", "hybrid+graph", "chosen (graph)", "hybrid+subjects", "chosen (subjects)"]))
    print("graph leg above hybrid on every fold:", all(r["graph_over_hybrid"] for r in per_fold))
    print("subject leg above hybrid on every fold:", all(r["subjects_over_hybrid"] for r in per_fold))
    write_results(results, args.out or ROOT / "bench" / "results" / f"cv-graph-{name}-{args.extractor}.json")
    return results


if __name__ == "__main__":
    main()
