"""Is ``ask``'s answer an answer? Extractive ``ask`` (no LLM) against the hand-labelled gold set
``bench/data/answers_gold.jsonl`` (see ``answers_gold.md``), per corpus.

Corpora, each in a workspace of its own, embedded by the default offline model
(``local:all-MiniLM-L6-v2``) through kg's real write and indexing path:

- ``peps``: the PEPs of ``fixtures/peps/docs`` ingested with ``--format pep`` (header fields as
  properties, ``Replaces`` / ``Requires`` / ``Superseded-By`` as relations); ``--peps N`` keeps
  the PEPs the gold evidence names plus the first N others (distractors), default all;
- ``hotpotqa``: every HotpotQA evidence passage stored in the gold file (``title``, ``text``),
  so each question's passages sit among the other questions' passages (its distractors).

Every question is asked with ``workspaces: [its corpus]`` and no LLM. Figures per corpus:

- ``exact``: answerable questions whose answer contains an accepted answer string (case-,
  punctuation- and space-insensitive, on word boundaries) / answerable questions;
- ``grounded_precision``: grounded answers that contain an accepted answer / grounded answers
  (a grounded answer to an unanswerable question counts as wrong);
- ``declined``: unanswerable questions answered ``grounded: false`` / unanswerable questions;
- ``answered_recall``: answerable questions answered grounded with an accepted answer /
  answerable questions.

Embeddings are cached on disk (``--cache``, keyed by model and text SHA-256): a rerun embeds
nothing. Run: ``python bench/answer_quality.py [--peps N] [--label before|after]``.

Sets: ``--gold`` names the question files (default ``answers_gold.jsonl``; the held-out
``answers_heldout.jsonl`` and ``answers_heldout2.jsonl`` too, see their ``.md``); the corpus is
the same whichever is asked (the PEPs the gold evidence names plus the first ``--peps`` others,
which hold every held-out PEP from 20 on).

Choosing ``KG_ASK_ANSWER_COVERAGE`` (``--sweep 0,0.3,...``): the corpus is ingested once and
every question of the first gold file is asked under each value; then 5-fold cross-validation
(``--folds``, questions shuffled with a fixed seed): on each fold the value is chosen on the
other four (the highest ``answered_recall`` among the values whose grounded precision is at
least ``--target`` on both corpora, else the highest of the lower of the two precisions) and
measured on the fold itself. The figures of the held-out folds are reported per fold, their
mean and standard deviation, and pooled; the value to ship is the one most folds chose (ties:
the stricter). No other set is used to choose it, unless ``--choose-on N`` pools the first N
``--gold`` files (sets already measured and read, no longer unseen) for the choice.

``--sweep-setting ask_slot_similarity`` sweeps ``KG_ASK_SLOT_SIMILARITY`` the same way (the
coverage at its default), ties going to the lowest value (:data:`TIES`). ``--sweep-setting
ask_code_names --sweep 0,1`` (and ``ask_definition_article``, ``ask_named_mentions``,
``ask_reference_values``, ``ask_name_meanings``, ``ask_acronym_expansions``, ``ask_mixed_case_mentions``,
``ask_literal_roles``) sweep the answer-type checks of
:class:`kg.text.questions.TypeChecks` (off / on; the others at their defaults), ties going to off.

A tie is the same on the training folds: whether the target is met, then the answered recall,
then the lower of the two precisions, then the higher (between values of equal recall the more
precise is better: the target is a floor, not the aim); only then the tie rule.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy is imported

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import RESULTS, machine, table, write_results  # noqa: E402
from bench.extractive_ask import CachedEmbedder  # noqa: E402
from kg import context  # noqa: E402
from kg.ops.ingest import ingest_path  # noqa: E402
from kg.providers.registry import make_embedder  # noqa: E402
from kg.services import Services  # noqa: E402
from kg.settings import Settings  # noqa: E402
from kg.text.questions import TypeChecks  # noqa: E402

GOLD = ROOT / "bench" / "data" / "answers_gold.jsonl"
HELDOUT = ROOT / "bench" / "data" / "answers_heldout.jsonl"
#: The second held-out set (see its ``.md``): about the same corpus, its passages among the gold's.
HELDOUT2 = ROOT / "bench" / "data" / "answers_heldout2.jsonl"
HELDOUT3 = ROOT / "bench" / "data" / "answers_heldout3.jsonl"
HELDOUT4 = ROOT / "bench" / "data" / "answers_heldout4.jsonl"
HELDOUT5 = ROOT / "bench" / "data" / "answers_heldout5.jsonl"
PEPS = ROOT / "fixtures" / "peps" / "docs"
REPO = "answers"
MODEL = "local:all-MiniLM-L6-v2"


def _norm(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


def contains(answer: str, accepted: list[str]) -> bool:
    """Whether one accepted answer occurs in ``answer`` (normalised, on word boundaries); an
    accepted answer of symbols only (``~>``), which normalising would empty, literally."""
    haystack = f" {_norm(answer)} "
    return any(f" {_norm(a)} " in haystack if _norm(a) else bool(a.strip("` ")) and a.strip("` ") in answer
               for a in accepted)


def figures(rows: list[dict]) -> dict:
    answerable = [r for r in rows if r["answerable"]]
    unanswerable = [r for r in rows if not r["answerable"]]
    grounded = [r for r in rows if r["grounded"]]
    right = [r for r in grounded if r["answerable"] and r["exact"]]

    def share(a: int, b: int) -> float | None:
        return round(a / b, 4) if b else None

    return {"questions": len(rows), "answerable": len(answerable), "unanswerable": len(unanswerable),
            "exact": share(sum(r["exact"] for r in answerable), len(answerable)),
            "grounded": len(grounded),
            "grounded_precision": share(len(right), len(grounded)),
            "declined": share(sum(not r["grounded"] for r in unanswerable), len(unanswerable)),
            "answered_recall": share(len(right), len(answerable))}


def _load(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _ask_all(services, questions: list[dict]) -> list[dict]:
    from kg.rag.functions import ask

    rows = []
    for g in questions:
        body = ask(services, context.OPERATOR, REPO, "main", {"question": g["question"], "workspaces": [g["corpus"]]})
        rows.append({"id": g["id"], "corpus": g["corpus"], "kind": g["kind"], "answerable": g["answerable"],
                     "answer_type": g["answer_type"], "grounded": body.grounded,
                     "exact": contains(body.answer, g["answers"]), "answer": body.answer,
                     "citations": [c.kind or "passage" for c in body.citations]})
    return rows


def _precisions(rows: list[dict]) -> list[float]:
    """Grounded precision per corpus (1.0 for a corpus with nothing grounded)."""
    out = []
    for corpus in ("peps", "hotpotqa"):
        f = figures([r for r in rows if r["corpus"] == corpus])
        out.append(1.0 if f["grounded_precision"] is None else f["grounded_precision"])
    return out


#: How a tie between swept values is broken. The answer coverage: the stricter (a higher share
#: of the question's words). The slot word's similarity floor: the lowest, since values the gold
#: set cannot tell apart differ only on paraphrases it lacks ("replaced" said as "supersedes",
#: 0.45), which a lower floor keeps answering.
#: Settings swept as off (0) / on (1): the answer-type checks (kg.text.questions.TypeChecks).
BOOLEAN = frozenset(f"ask_{f.name}" for f in dataclasses.fields(TypeChecks))
TIES = {"ask_answer_coverage": "stricter", "ask_slot_similarity": "lenient", **dict.fromkeys(BOOLEAN, "lenient")}


def _typed(setting: str, value: float) -> float | bool:
    """A swept value as the setting takes it: off / on for :data:`BOOLEAN` settings."""
    return bool(value) if setting in BOOLEAN else value


def choose(by_value: dict[float, list[dict]], ids: set[str], target: float, ties: str = "stricter") -> float:
    """The value chosen on the questions ``ids``: the highest answered recall among the values
    whose grounded precision reaches ``target`` on both corpora, else the highest lower precision
    of the two; between equal recalls the higher lower precision, then the higher other one (a
    value that removes wrong answers from one corpus only is more precise, though the lower of
    the two is the other corpus's and stays); ties go to the stricter (highest) value, or with
    ``ties="lenient"`` the lowest."""
    def key(value: float) -> tuple:
        rows = [r for r in by_value[value] if r["id"] in ids]
        precisions = _precisions(rows)
        low, high = min(precisions), max(precisions)
        recall = figures(rows)["answered_recall"] or 0.0
        return (low >= target, recall if low >= target else low, low, high, value if ties == "stricter" else -value)
    return max(by_value, key=key)


def cross_validate(by_value: dict[float, list[dict]], folds: int, target: float, seed: int = 20261205, *,
                   ties: str = "stricter") -> dict:
    """k-fold cross-validation of the swept value (see the module docstring); the value to ship
    is the one most folds chose, a tie broken by ``ties``: ``"stricter"`` (the highest) or
    ``"lenient"`` (the lowest)."""
    ids = [r["id"] for r in next(iter(by_value.values()))]
    random.Random(seed).shuffle(ids)
    parts = [set(ids[i::folds]) for i in range(folds)]
    per_fold, pooled = [], []
    for i, test in enumerate(parts):
        train = set(ids) - test
        value = choose(by_value, train, target, ties)
        rows = [r for r in by_value[value] if r["id"] in test]
        pooled += rows
        f = figures(rows)
        per_fold.append({"fold": i, "chosen": value, "questions": len(rows), **{k: f[k] for k in (
            "grounded", "grounded_precision", "answered_recall", "declined", "exact")}})

    def spread(key: str) -> dict:
        values = [f[key] for f in per_fold if f[key] is not None]
        return {"mean": round(statistics.mean(values), 4), "sd": round(statistics.stdev(values), 4),
                "min": min(values), "max": max(values)}

    chosen = Counter(f["chosen"] for f in per_fold)
    top = max(chosen.values())
    tied = [v for v, n in chosen.items() if n == top]
    ship = max(tied) if ties == "stricter" else min(tied)
    return {"folds": per_fold, "precision": spread("grounded_precision"), "recall": spread("answered_recall"),
            "pooled": {c: figures([r for r in pooled if r["corpus"] == c]) for c in ("peps", "hotpotqa")},
            "chosen": dict(chosen), "ship": ship}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peps", type=int, default=None, help="distractor PEPs beside the evidence (default all)")
    parser.add_argument("--cache", type=Path, default=Path("bench/results/embedding-cache"))
    parser.add_argument("--label", default="after")
    parser.add_argument("--gold", type=Path, action="append", default=None,
                        help="a question file (repeatable; default bench/data/answers_gold.jsonl)")
    parser.add_argument("--sweep", default=None,
                        help="values of --sweep-setting to cross-validate, comma-separated")
    parser.add_argument("--sweep-setting", default="ask_answer_coverage",
                        choices=tuple(TIES),
                        help="the setting --sweep varies (the other keeps its default)")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--choose-on", type=int, default=1,
                        help="the sweep's value is cross-validated over the first N --gold files pooled (default 1)")
    parser.add_argument("--target", type=float, default=0.95)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    sets = {path.stem: _load(path) for path in (args.gold or [GOLD])}
    gold = _load(GOLD)
    everything = gold + [q for path in (HELDOUT, HELDOUT2, HELDOUT3, HELDOUT4, HELDOUT5)
                           if path.exists() for q in _load(path)]
    evidence_peps = sorted({Path(e["path"]).name for g in gold if g["corpus"] == "peps" for e in g["evidence"]})
    others = sorted(p.name for p in PEPS.glob("*.rst") if p.name not in evidence_peps)
    chosen = evidence_peps + (others if args.peps is None else others[:args.peps])
    # the held-out questions are about PEPs of this corpus (checked): one corpus for both sets
    missing = {Path(e["path"]).name for g in everything if g["corpus"] == "peps" for e in g["evidence"]} - set(chosen)
    if missing:
        raise SystemExit(f"the corpus lacks the evidence PEPs {sorted(missing)}: raise --peps")
    passages = {e["passage_id"]: {"title": e["title"], "text": e["text"]}
                for g in everything if g["corpus"] == "hotpotqa" for e in g["evidence"]}
    embedders: dict[str, CachedEmbedder] = {}

    def factory(name: str) -> CachedEmbedder:
        if name not in embedders:
            embedders[name] = CachedEmbedder(make_embedder(name), args.cache)
        return embedders[name]

    results: dict = {"machine": machine(), "model": MODEL, "peps": len(chosen), "hotpot_passages": len(passages)}
    sweep = [float(v) for v in args.sweep.split(",")] if args.sweep else []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        settings = Settings(database_url=f"sqlite:///{work / 'kg.sqlite3'}", data_dir=work / "data",
                            embedding_model=MODEL, index_inline=True)
        results["ask_answer_coverage"] = getattr(settings, "ask_answer_coverage", None)  # None: before it existed
        results["ask_slot_similarity"] = getattr(settings, "ask_slot_similarity", None)
        for name in sorted(BOOLEAN):
            results[name] = getattr(settings, name, None)
        results["sweep_setting"] = args.sweep_setting
        services = Services.from_settings(settings)
        services.embedder_factory = factory
        try:
            services.db.upgrade()
            folder = work / "peps"
            folder.mkdir()
            for name in chosen:
                shutil.copy(PEPS / name, folder / name)
            started = time.perf_counter()
            print(f"ingesting {len(chosen)} PEPs ...", file=sys.stderr, flush=True)
            ingest_path(services, context.OPERATOR, folder, repo=REPO, workspace="peps", format_name="pep")
            hp = work / "hotpot"
            hp.mkdir()
            for pid, doc in passages.items():
                (hp / f"{pid}.md").write_text(f"# {doc['title']}\n\n{doc['text']}\n")
            print(f"ingesting {len(passages)} HotpotQA passages ...", file=sys.stderr, flush=True)
            ingest_path(services, context.OPERATOR, hp, repo=REPO, workspace="hotpotqa")
            results["ingest_s"] = round(time.perf_counter() - started, 1)
            started = time.perf_counter()
            by_value: dict[float, list[dict]] = {}
            for value in sweep:
                print(f"asking under {args.sweep_setting} {value} ...", file=sys.stderr, flush=True)
                services.settings = settings.model_copy(update={args.sweep_setting: _typed(args.sweep_setting, value)})
                by_value[value] = _ask_all(services, [q for questions in list(sets.values())[:args.choose_on]
                                                      for q in questions])
            if by_value:  # every set is measured under the value the cross-validation ships
                ship = cross_validate(by_value, args.folds, args.target, ties=TIES[args.sweep_setting])["ship"]
                services.settings = settings.model_copy(update={args.sweep_setting: _typed(args.sweep_setting, ship)})
                results[args.sweep_setting] = ship
            by_set = {name: _ask_all(services, questions) for name, questions in sets.items()}
            results["ask_s"] = round(time.perf_counter() - started, 1)
        finally:
            services.close()
    results["embedded_now"] = sum(e.computed for e in embedders.values())
    keys = ("questions", "exact", "grounded", "grounded_precision", "declined", "answered_recall")
    print(f"label: {args.label}  (ask_answer_coverage {results['ask_answer_coverage']}, "
          f"ask_slot_similarity {results['ask_slot_similarity']}, "
          + ", ".join(f"{name} {results[name]}" for name in sorted(BOOLEAN)) + ")")
    results["sets"] = {}
    for name, rows in by_set.items():
        entry = {"by_corpus": {c: figures([r for r in rows if r["corpus"] == c]) for c in ("peps", "hotpotqa")},
                 "peps_by_kind": {k: figures([r for r in rows if r["corpus"] == "peps" and r["kind"] == k])
                                  for k in ("passage", "property", "relation")},
                 "rows": rows}
        entry["by_corpus"]["all"] = figures(rows)
        results["sets"][name] = entry
        print(f"\n{name}")
        print(table([[c, *(f[k] for k in keys)] for c, f in {**entry["by_corpus"],
                                                            **{f"peps/{k}": v for k, v in
                                                               entry["peps_by_kind"].items()}}.items()],
                    ["corpus", *keys]))
    if by_value:
        results["sweep"] = {str(v): {c: figures([r for r in rows if r["corpus"] == c]) for c in ("peps", "hotpotqa")}
                            for v, rows in by_value.items()}
        print("\nsweep (whole set, for reading only; the choice is cross-validated)")
        print(table([[v, c, *(f[k] for k in keys)] for v, per in results["sweep"].items() for c, f in per.items()],
                    [args.sweep_setting, "corpus", *keys]))
        cv = cross_validate(by_value, args.folds, args.target, ties=TIES[args.sweep_setting])
        results["cv"] = cv
        print(f"\n{args.folds}-fold cross-validation (held-out folds)")
        print(table([[f["fold"], f["chosen"], f["questions"], f["grounded"], f["grounded_precision"],
                      f["answered_recall"], f["declined"]] for f in cv["folds"]],
                    ["fold", "chosen", "questions", "grounded", "precision", "recall", "declined"]))
        print(f"precision mean {cv['precision']['mean']} sd {cv['precision']['sd']} "
              f"(min {cv['precision']['min']}, max {cv['precision']['max']}); "
              f"recall mean {cv['recall']['mean']} sd {cv['recall']['sd']}")
        print(table([[c, *(f[k] for k in keys)] for c, f in cv["pooled"].items()], ["pooled", *keys]))
        print(f"chosen per fold: {cv['chosen']}; ship {cv['ship']}")
    write_results(results, args.out or RESULTS / f"answer-quality-{args.label}.json")
    return results


if __name__ == "__main__":
    main()
