"""Fusion choices by cross-validation over disjoint query splits: figures per fold, mean ± sd.

The queries of a dataset are split into ``--folds`` disjoint folds (:func:`kfold`). For each
fold, the fusion choices (RRF constant k, vector-leg weight, BM25F title weight) are chosen on
the *other* folds only (the best mean of the metric over a small grid), then the held-out fold
is measured with kg's real search (``kg.rag.search.search``, node granularity, as ``POST
/api/repos/{repo}/search`` runs it) with those choices. Nothing is ever tuned on all queries at
once; the defaults printed at the end are the choice made most often across the folds.

Rows per fold: ``fulltext-passage`` (the lexical leg before issue 15: nodes ranked by their best
passage), ``fulltext`` (BM25F over the node's fields), ``vector``, ``hybrid`` at the defaults
before (k = 60, weights 1, passage BM25) and ``hybrid`` with the fold's choice.

Metric: ``ndcg@10`` (BEIR datasets, as ``bench/beir.py``) or ``allsup@10`` (HotpotQA: both
supporting passages in the top 10, as ``bench/hotpot.py``).

The legs of each query are read once through kg's search at the depth its hybrid search uses
(``max(8 k, 50)`` chunks per leg for k = 10), and the grid is fused with kg's own
:func:`kg.rag.fusion.reciprocal_rank_fusion`, so the selection sees exactly what kg's hybrid
search would return; the held-out figure is then measured with the real hybrid search.

The corpus is written through kg's real path once and kept in ``--workdir`` (default
``$KG_BENCH_CACHE/cv-<dataset>``, outside git), so later runs embed nothing. ``--lexical`` writes it
with a hashing embedder that chunks exactly as the real model does (its tokenizer, 256
tokens): the BM25 legs are then exact and cheap, the vector leg and hybrid are not measured.

Run: ``python bench/cv_fusion.py DATASETS/hotpotqa-500 --metric allsup@10``.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy is imported

import argparse  # noqa: E402
import itertools  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from collections.abc import Hashable, Sequence  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, TypeVar  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import CACHE, machine, percentile, table, write_results  # noqa: E402

T = TypeVar("T", bound=Hashable)

TITLE_WEIGHTS = (1.0, 2.0, 3.0, 4.0, 6.0)
RRF_KS = (10, 20, 40, 60, 100)
VECTOR_WEIGHTS = (0.5, 0.75, 1.0, 1.5, 2.0)  # the fulltext leg weighs 1
#: Vector weights of relative score fusion (fulltext 1): alpha = w / (1 + w) from 0.1 to 0.7.
RELATIVE_WEIGHTS = (0.111, 0.25, 0.429, 0.667, 1.0, 1.5, 2.333)
K = 10
DEPTH = max(K * 8, 50)  # what kg's node-granularity hybrid reads per leg for k = 10


def kfold(ids: Sequence[T], n_folds: int, *, seed: int = 15) -> list[list[T]]:
    """Split ``ids`` into ``n_folds`` disjoint folds of near-equal size, by a seeded shuffle.

    Parameters
    ----------
    ids : sequence of hashable
        Distinct query ids.
    n_folds : int
        2 <= n_folds <= len(ids).
    seed : int
        Seed of :class:`random.Random`; the split depends only on it and on the set of ids.

    Returns
    -------
    list of list
        ``n_folds`` folds, each sorted; together they hold every id exactly once, and their
        sizes differ by at most one.

    Raises
    ------
    ValueError
        Duplicate ids, or a number of folds out of range.

    Notes
    -----
    The ids are sorted before the shuffle, so the input order does not matter. Fold ``i``
    takes the shuffled positions ``i, i + n_folds, ...`` (Kohavi 1995, "A study of
    cross-validation and bootstrap for accuracy estimation and model selection", IJCAI).
    """
    if len(set(ids)) != len(ids):
        raise ValueError("query ids must be distinct")
    if not 2 <= n_folds <= len(ids):
        raise ValueError(f"need 2 <= n_folds <= {len(ids)}, got {n_folds}")
    order = sorted(ids, key=str)
    random.Random(seed).shuffle(order)
    return [sorted(order[i::n_folds], key=str) for i in range(n_folds)]


def ndcg_at(ranked: list[str], relevant: dict[str, int], k: int) -> float:
    """nDCG@k (BEIR / pytrec_eval, Jarvelin and Kekalainen 2002)."""
    from bench.beir import ndcg_at as beir_ndcg

    return beir_ndcg(ranked, relevant, k)


def allsup_at(ranked: list[str], relevant: dict[str, int], k: int) -> float:
    """1.0 when every relevant passage is in the top ``k``, else 0.0 (HotpotQA AllSup@k)."""
    return 1.0 if set(relevant) <= set(ranked[:k]) else 0.0


METRICS = {"ndcg@10": ndcg_at, "allsup@10": allsup_at}


def fused(vector: list[str], fulltext: list[str], *, rrf_k: int, vector_weight: float) -> list[str]:
    """The node ranking kg's hybrid search makes of two node legs (fulltext weight 1)."""
    from kg.rag.fusion import reciprocal_rank_fusion

    legs = {"vector": vector, "fulltext": fulltext}
    return [item for item, _, _ in reciprocal_rank_fusion(
        legs, weights={"vector": vector_weight, "fulltext": 1.0}, k=rrf_k)]


def mean_sd(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for one value)."""
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


class LexicalEmbedder:
    """Hashing vectors with the real model's chunking: its tokenizer and 256-token context.

    Only for ``--lexical``: the chunks (and so the BM25 legs) are exactly those of
    ``local:all-MiniLM-L6-v2``, at no embedding cost; the vectors mean nothing.
    """

    name = "fake:lexical-minilm-chunks-8"
    dim = 8
    max_tokens = 256

    def __init__(self) -> None:
        from kg.providers.fake import FakeEmbedder
        from kg.providers.local import LocalEmbedder

        self._fake = FakeEmbedder(8, name=self.name)
        self._local = LocalEmbedder()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Hash vectors."""
        return self._fake.embed(texts)

    def count_tokens(self, text: str) -> int:
        """WordPiece tokens, as the real model counts them."""
        return self._local.count_tokens(text)


class CachedEmbedder:
    """An embedder whose vectors are kept on disk, one ``<sha256 of the text>.npy`` per text.

    The first folder is read and written, the others only read (another run's cache of the same
    model). int8 ONNX quantises activations per batch, so a vector embedded in another batch
    may differ from a fresh one in its last digits; rankings are unaffected in practice.
    """

    def __init__(self, inner: Any, folders: Sequence[Path]) -> None:
        self._inner = inner
        self._folders = [Path(f) for f in folders]
        self._folders[0].mkdir(parents=True, exist_ok=True)
        self.name, self.dim, self.max_tokens = inner.name, inner.dim, inner.max_tokens
        self.hits = self.misses = 0

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Cached vectors, the missing ones embedded (in one call) and stored."""
        import hashlib

        out: list[np.ndarray | None] = []
        todo: list[int] = []
        for i, text in enumerate(texts):
            key = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
            found = next((f / f"{key}.npy" for f in self._folders if (f / f"{key}.npy").is_file()), None)
            vector = None
            if found is not None:
                try:
                    vector = np.load(found)
                except (OSError, ValueError):
                    vector = None
            if vector is None or vector.shape != (self.dim,):
                todo.append(i)
                out.append(None)
            else:
                out.append(vector.astype(np.float32))
        self.hits += len(texts) - len(todo)
        self.misses += len(todo)
        if todo:
            fresh = self._inner.embed([texts[i] for i in todo])
            for i, vector in zip(todo, fresh, strict=True):
                out[i] = vector
                key = hashlib.sha256(texts[i].encode("utf-8", "surrogatepass")).hexdigest()
                tmp = self._folders[0] / f".{key}.tmp.npy"
                np.save(tmp, np.asarray(vector, dtype=np.float32))
                os.replace(tmp, self._folders[0] / f"{key}.npy")
        return np.stack([v for v in out if v is not None]).astype(np.float32)

    def count_tokens(self, text: str) -> int:
        """The inner model's count."""
        return self._inner.count_tokens(text)


def open_services(dataset: Path, workdir: Path, *, lexical: bool, model: str,
                  embed_cache: Sequence[Path] = ()) -> tuple[Any, str, dict]:
    """Services over the kept database (written and indexed on first use), its workspace and
    the ingest figures."""
    from bench.beir import REPO, ingest, load_dataset
    from kg.services import Services
    from kg.settings import Settings
    from kg.store.repos import get_repository

    workdir.mkdir(parents=True, exist_ok=True)
    name = dataset.resolve().name
    corpus, _, _ = load_dataset(dataset)
    settings = Settings(database_url=f"sqlite:///{workdir / 'kg.sqlite3'}", data_dir=workdir / "data",
                        embedding_model=LexicalEmbedder.name if lexical else model, index_inline=False,
                        allow_fake_embedder=lexical)
    services = Services.from_settings(settings)
    if lexical:
        embedder: Any = LexicalEmbedder()
        services.embedder_factory = lambda _name: embedder
    elif embed_cache:
        from kg.providers.registry import make_embedder

        cached = CachedEmbedder(make_embedder(model, batch_size=settings.embed_batch_size), embed_cache)
        services.embedder_factory = lambda name: cached if name == model else make_embedder(name)
    services.db.upgrade()
    figures = ingest(services, name, corpus)
    with services.db.read() as session:
        services.index.flush(get_repository(session, REPO).uid)
    return services, name, figures


def run(services: Any, workspace: str, query: str, **fields: Any) -> tuple[list[str], float]:
    """Node ids (the ``/doc/<id>`` tail), best first, of one kg search on ``main``, and its
    time in seconds."""
    ranked, took = run_scored(services, workspace, query, **fields)
    return [did for did, _ in ranked], took


def run_scored(services: Any, workspace: str, query: str, **fields: Any) -> tuple[list[tuple[str, float]], float]:
    """``(node id, score)`` pairs, best first (each node at its first row), of one kg search on
    ``main``, and its time in seconds."""
    from bench.beir import REPO
    from kg.rag.search import SearchRequest, search
    from kg.store.repos import branch_view

    started = time.perf_counter()
    with services.db.read() as session:
        view = branch_view(session, REPO, "main")
        rows, _ = search(session, services, view, SearchRequest(
            query=query, workspaces=[workspace], **fields))
    took = time.perf_counter() - started
    first: dict[str, float] = {}
    for r in rows:
        first.setdefault(r.path.rsplit("/", 1)[-1], r.score)
    return list(first.items()), took


def legs_of(services: Any, workspace: str, queries: dict[str, str], *, lexical: bool) -> dict[str, dict]:
    """Each query's node legs at kg's hybrid depth: vector, passage BM25 and BM25F per title
    weight."""
    settings = services.settings
    out: dict[str, dict] = {}
    for n, (qid, text) in enumerate(queries.items(), start=1):
        legs: dict[str, Any] = {}
        if not lexical:
            scored = run_scored(services, workspace, text, k=DEPTH, mode="vector", granularity="chunk")[0]
            legs["vector"], legs["vector:scores"] = [d for d, _ in scored], [x for _, x in scored]
        legs["passage"] = run(services, workspace, text, k=DEPTH, mode="fulltext", granularity="chunk")[0]
        for weight in TITLE_WEIGHTS:
            settings.search_title_weight = weight
            scored = run_scored(services, workspace, text, k=DEPTH, mode="fulltext", granularity="node")[0]
            legs[f"bm25f:{weight}"] = [d for d, _ in scored]
            legs[f"bm25f:{weight}:scores"] = [x for _, x in scored]
        out[qid] = legs
        if n % 50 == 0:
            print(f"  legs of {n}/{len(queries)} queries", file=sys.stderr, flush=True)
    return out


def fused_relative(legs: dict[str, Any], title_weight: float, vector_weight: float) -> list[str]:
    """The node ranking of kg's relative score fusion (fulltext weight 1) of one query's legs."""
    from kg.rag.fusion import relative_score_fusion
    from kg.rag.search import FUSION_WINDOW

    fulltext = f"bm25f:{title_weight}"
    pairs = {"vector": list(zip(legs["vector"], legs["vector:scores"], strict=True)),
             "fulltext": list(zip(legs[fulltext], legs[f"{fulltext}:scores"], strict=True))}
    return [item for item, _, _ in relative_score_fusion(pairs, weights={"vector": vector_weight, "fulltext": 1.0},
                                                         window=FUSION_WINDOW)]


#: A fusion choice: (method, BM25F title weight, RRF k (0 for relative score), vector weight).
Config = tuple[str, float, int, float]


def configs(lexical: bool, methods: Sequence[str] = ("rrf",)) -> list[Config]:
    """The grid: (method, title weight, RRF k, vector weight); one setting without a vector leg."""
    if lexical:
        return [("rrf", w, 60, 1.0) for w in TITLE_WEIGHTS]
    grid: list[Config] = []
    if "rrf" in methods:
        grid += [("rrf", w, k, v) for w, k, v in itertools.product(TITLE_WEIGHTS, RRF_KS, VECTOR_WEIGHTS)]
    if "relative_score" in methods:
        grid += [("relative_score", w, 0, v) for w, v in itertools.product(TITLE_WEIGHTS, RELATIVE_WEIGHTS)]
    return grid


def ranking_of(config: Config, legs: dict[str, Any], lexical: bool) -> list[str]:
    """One query's hybrid node ranking under ``config`` (its BM25F leg alone with ``lexical``)."""
    method, title_weight, rrf_k, vector_weight = config
    leg = legs[f"bm25f:{title_weight}"]
    if lexical:
        return list(leg)
    if method == "relative_score":
        return fused_relative(legs, title_weight, vector_weight)
    return fused(legs["vector"], leg, rrf_k=rrf_k, vector_weight=vector_weight)


def score_config(config: Config, qids: Sequence[str], legs: dict[str, dict],
                 qrels: dict[str, dict[str, int]], metric: str, lexical: bool) -> float:
    """The mean metric of hybrid (fulltext alone with ``lexical``) over ``qids``."""
    measure = METRICS[metric]
    return statistics.fmean(measure(ranking_of(config, legs[qid], lexical), qrels[qid], K) for qid in qids)


def choose(train: Sequence[str], legs: dict[str, dict], qrels: dict[str, dict[str, int]], metric: str,
           lexical: bool, methods: Sequence[str] = ("rrf",)) -> Config:
    """The grid's best config on ``train`` (ties: the earliest in grid order)."""
    best, best_score = None, -1.0
    for config in configs(lexical, methods):
        value = score_config(config, train, legs, qrels, metric, lexical)
        if value > best_score + 1e-12:
            best, best_score = config, value
    assert best is not None
    return best


def cv_parser(description: str) -> argparse.ArgumentParser:
    """The arguments every cross-validation bench takes: the dataset, metric, folds, seed, model
    and embedding cache."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("dataset", type=Path, help="a BEIR-layout folder")
    parser.add_argument("--metric", choices=sorted(METRICS), default="ndcg@10")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=15)
    parser.add_argument("--model", default="local:all-MiniLM-L6-v2")
    parser.add_argument("--embed-cache", type=Path, nargs="*", default=(),
                        help="folders of cached vectors (<sha256>.npy); the first is also written")
    return parser


def main(argv: list[str] | None = None) -> dict:
    from bench.beir import load_dataset

    parser = cv_parser(__doc__.splitlines()[0])
    parser.add_argument("--lexical", action="store_true",
                        help="hashing vectors with the real chunking: BM25 legs only (no embedding cost)")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="kept database and index (default $KG_BENCH_CACHE/cv-<dataset>[-lexical])")
    parser.add_argument("--methods", nargs="+", choices=("rrf", "relative_score"), default=("rrf", "relative_score"),
                        help="the fusion functions in the grid (each also chosen on its own, offline)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    name = args.dataset.resolve().name
    workdir = args.workdir or CACHE / f"cv-{name}{'-lexical' if args.lexical else ''}"
    _, queries, qrels = load_dataset(args.dataset)
    services, workspace, ingest_figures = open_services(args.dataset, workdir, lexical=args.lexical,
                                                        model=args.model, embed_cache=args.embed_cache)
    results: dict[str, Any] = {"machine": machine(), "dataset": name, "queries": len(queries),
                               "metric": args.metric, "folds": args.folds, "seed": args.seed,
                               "lexical_only": args.lexical, "ingest": ingest_figures}
    try:
        print(f"reading the legs of {len(queries)} queries ...", file=sys.stderr, flush=True)
        legs = legs_of(services, workspace, queries, lexical=args.lexical)
        (workdir / "legs.json").write_text(json.dumps(legs), encoding="utf-8")  # for offline analyses
        folds = kfold(list(queries), args.folds, seed=args.seed)
        measure = METRICS[args.metric]
        per_fold: list[dict[str, Any]] = []
        for i, test in enumerate(folds):
            train = [q for j, fold in enumerate(folds) if j != i for q in fold]
            method, title_weight, rrf_k, vector_weight = choose(train, legs, qrels, args.metric, args.lexical,
                                                                args.methods)
            row: dict[str, Any] = {"fold": i + 1, "queries": len(test),
                                   "chosen": {"method": method, "title_weight": title_weight, "rrf_k": rrf_k,
                                              "vector_weight": vector_weight}}

            def figure(rankings: dict[str, list[str]], test: list[str] = test) -> float:
                return round(statistics.fmean(measure(rankings[q], qrels[q], K) for q in test), 4)

            row["fulltext-passage"] = figure({q: legs[q]["passage"] for q in test})
            row["fulltext"] = figure({q: legs[q][f"bm25f:{title_weight}"] for q in test})
            row["fulltext_by_title_weight"] = {
                w: figure({q: legs[q][f"bm25f:{w}"] for q in test}) for w in TITLE_WEIGHTS}
            if not args.lexical:
                row["vector"] = figure({q: legs[q]["vector"] for q in test})
                row["hybrid-before"] = figure({q: fused(legs[q]["vector"], legs[q]["passage"], rrf_k=60,
                                                        vector_weight=1.0) for q in test})
                # Each fusion method's own choice on the other folds, measured offline.
                for each in args.methods:
                    own = choose(train, legs, qrels, args.metric, False, (each,))
                    row[f"chosen_{each}"] = dict(zip(("method", "title_weight", "rrf_k", "vector_weight"), own,
                                                     strict=True))
                    row[f"hybrid-{each}"] = figure({q: ranking_of(own, legs[q], False) for q in test})
                # The held-out fold through kg's real hybrid search with the fold's choice.
                services.settings.search_title_weight = title_weight
                services.settings.search_rrf_k = rrf_k if rrf_k else 60
                fusion = {"fusion": "kg", "fusion_type": "relative_score"} if method == "relative_score" else {}
                real, took = {}, []
                for q in test:
                    real[q], seconds = run(services, workspace, queries[q], k=K, mode="hybrid",
                                           granularity="node", vector_weight=vector_weight, fulltext_weight=1.0,
                                           **fusion)
                    took.append(seconds * 1000)
                row["hybrid"] = figure(real)
                row["hybrid-k60"] = figure({q: fused(legs[q]["vector"], legs[q][f"bm25f:{title_weight}"],
                                                     rrf_k=60, vector_weight=1.0) for q in test})
                row["hybrid-offline"] = figure({q: ranking_of((method, title_weight, rrf_k, vector_weight),
                                                              legs[q], False) for q in test})
                row["hybrid_p50_ms"] = round(percentile(took, 50), 2)
                row["hybrid_over_both_legs"] = row["hybrid"] > max(row["fulltext"], row["vector"])
            per_fold.append(row)
            print(f"  fold {i + 1}: {row}", file=sys.stderr, flush=True)
        columns = ["fulltext-passage", "fulltext"] + ([] if args.lexical else
                                                     ["vector", "hybrid-before", "hybrid-k60"]
                                                     + [f"hybrid-{m}" for m in args.methods] + ["hybrid"])
        summary = {c: dict(zip(("mean", "sd"), (round(x, 4) for x in mean_sd([r[c] for r in per_fold])),
                               strict=True)) for c in columns}
        chosen = Counter(tuple(r["chosen"].values()) for r in per_fold)
        (method, title_weight, rrf_k, vector_weight), times = chosen.most_common(1)[0]
        results.update(per_fold=per_fold, summary=summary,
                       defaults={"method": method, "title_weight": title_weight, "rrf_k": rrf_k,
                                 "vector_weight": vector_weight, "chosen_in_folds": times})
    finally:
        services.close()
    rows = [[f"fold {r['fold']} ({r['queries']} q)"] + [f"{r[c]:.4f}" for c in columns]
            + [f"{r['chosen']['method']}, title {r['chosen']['title_weight']}, k {r['chosen']['rrf_k']}, "
               f"w_v {r['chosen']['vector_weight']}"]
            for r in per_fold]
    rows.append(["mean ± sd"] + [f"{summary[c]['mean']:.4f} ± {summary[c]['sd']:.4f}" for c in columns] + [""])
    print(f"{name}: {args.metric}, {args.folds} folds (seed {args.seed})")
    print(table(rows, ["split"] + columns + ["chosen on the other folds"]))
    print(f"defaults (chosen in {results['defaults']['chosen_in_folds']} of {args.folds} folds): "
          f"{method}, title weight {title_weight}, RRF k {rrf_k}, vector weight {vector_weight}")
    if not args.lexical:
        print("hybrid above both legs on every fold:", all(r["hybrid_over_both_legs"] for r in per_fold))
    suffix = "-lexical" if args.lexical else ""
    write_results(results, args.out or ROOT / "bench" / "results" / f"cv-{name}{suffix}.json")
    return results


if __name__ == "__main__":
    main()
