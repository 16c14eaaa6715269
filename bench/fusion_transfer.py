"""One default for every corpus: fusion settings chosen on one dataset, measured on the other.

``bench/cv_fusion.py`` chooses fusion settings per dataset by cross-validation. kg ships one
default, which must hold on corpora nobody tuned it on. This reads the legs ``cv_fusion.py``
kept for two datasets (``<workdir>/legs.json``: each query's vector and BM25F node rankings with
their scores, read through kg's real search) and, for every fusion setting of the grid (RRF and
relative score fusion), measures:

- the leave-one-dataset-out figure: the setting chosen on dataset A (best mean over all its
  queries) measured on dataset B, and the other way round, against B's own legs;
- for the candidate defaults, the 5 folds of each dataset (the same folds as ``cv_fusion.py``):
  whether hybrid is above both its legs on every fold.

Run after ``bench/cv_fusion.py`` has kept both datasets' legs:
``python bench/fusion_transfer.py DATASETS/scifact DATASETS/hotpotqa-500``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import CACHE, machine, table, write_results  # noqa: E402
from bench.cv_fusion import METRICS, Config, configs, kfold, mean_sd, ranking_of  # noqa: E402

METRIC_OF = {"scifact": "ndcg@10", "hotpotqa-500": "allsup@10"}
K = 10


def load(dataset: Path, workdir: Path | None) -> tuple[str, dict[str, Any], dict[str, dict[str, int]], str]:
    """A dataset's name, kept legs, qrels and metric."""
    from bench.beir import load_dataset

    name = dataset.resolve().name
    folder = workdir or CACHE / f"cv-{name}"
    legs = json.loads((folder / "legs.json").read_text(encoding="utf-8"))
    _, _, qrels = load_dataset(dataset)
    return name, legs, qrels, METRIC_OF.get(name, "ndcg@10")


def mean_of(config: Config, qids: list[str], legs: dict[str, Any], qrels: dict[str, dict[str, int]],
            metric: str) -> float:
    """The hybrid figure of ``config`` over ``qids``."""
    measure = METRICS[metric]
    return statistics.fmean(measure(ranking_of(config, legs[q], False), qrels[q], K) for q in qids)


def leg_mean(leg: str, qids: list[str], legs: dict[str, Any], qrels: dict[str, dict[str, int]], metric: str) -> float:
    """One leg's figure over ``qids``."""
    measure = METRICS[metric]
    return statistics.fmean(measure(legs[q][leg], qrels[q], K) for q in qids)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("datasets", type=Path, nargs=2)
    parser.add_argument("--seed", type=int, default=15)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    data = [load(d, None) for d in args.datasets]
    grid = configs(False, ("rrf", "relative_score"))
    figures = {name: {c: mean_of(c, list(legs), legs, qrels, metric) for c in grid}
               for name, legs, qrels, metric in data}
    results: dict[str, Any] = {"machine": machine(), "datasets": [d[0] for d in data], "transfer": []}
    rows = []
    for method in ("rrf", "relative_score", None):
        for (a, *_), (b, legs_b, qrels_b, metric_b) in ((data[0], data[1]), (data[1], data[0])):
            candidates = [c for c in grid if method is None or c[0] == method]
            chosen = max(candidates, key=lambda c: (figures[a][c], -grid.index(c)))
            own = max(candidates, key=lambda c: (figures[b][c], -grid.index(c)))
            qids = list(legs_b)
            title = chosen[1]
            entry = {"method": method or "either", "chosen_on": a, "measured_on": b, "config": chosen,
                     "hybrid": round(figures[b][chosen], 4), "best_on_itself": round(figures[b][own], 4),
                     "fulltext": round(leg_mean(f"bm25f:{title}", qids, legs_b, qrels_b, metric_b), 4),
                     "vector": round(leg_mean("vector", qids, legs_b, qrels_b, metric_b), 4)}
            results["transfer"].append(entry)
            rows.append([entry["method"], a, b, f"{chosen[0]} title {chosen[1]} k {chosen[2]} w_v {chosen[3]}",
                         f"{entry['hybrid']:.4f}", f"{entry['best_on_itself']:.4f}", f"{entry['fulltext']:.4f}",
                         f"{entry['vector']:.4f}"])
    print(table(rows, ["method", "chosen on", "measured on", "setting", "hybrid", "best possible",
                       "fulltext", "vector"]))
    # the candidates: every setting chosen above, fold by fold on both datasets
    candidates = sorted({tuple(e["config"]) for e in results["transfer"]}, key=grid.index)
    folds_rows, per_candidate = [], {}
    for config in candidates:
        row: list[str] = [f"{config[0]} title {config[1]} k {config[2]} w_v {config[3]}"]
        entry: dict[str, Any] = {}
        for name, legs, qrels, metric in data:
            values, above = [], 0
            for fold in kfold(list(legs), args.folds, seed=args.seed):
                hybrid = mean_of(config, fold, legs, qrels, metric)
                best_leg = max(leg_mean(f"bm25f:{config[1]}", fold, legs, qrels, metric),
                               leg_mean("vector", fold, legs, qrels, metric))
                values.append(hybrid)
                above += hybrid > best_leg
            mean, sd = mean_sd(values)
            entry[name] = {"mean": round(mean, 4), "sd": round(sd, 4), "folds_above_both_legs": above}
            row += [f"{mean:.4f} ± {sd:.4f}", f"{above} of {args.folds}"]
        per_candidate[str(config)] = entry
        folds_rows.append(row)
    print(table(folds_rows, ["setting"] + [h for name, *_ in data for h in (name, "folds above both legs")]))
    results["candidates"] = per_candidate
    write_results(results, args.out or ROOT / "bench" / "results" / "fusion-transfer.json")
    return results


if __name__ == "__main__":
    main()
