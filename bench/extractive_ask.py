"""Extractive ``ask`` (no LLM) on HotpotQA-500: is the answer in the answer, and is it grounded?

A subset of the shared HotpotQA-500 questions (default: the first 100 of ``questions.jsonl``)
and their candidate passages (each question's 10 context paragraphs, de-duplicated) go through
kg's real write and indexing path into a repository of their own (``/doc/<_id>`` nodes with
``title`` and ``text``, as ``bench/hotpot.py`` writes them), embedded by the real local model
(``local:all-MiniLM-L6-v2``). Then each question is asked through ``kg.rag.functions.ask`` with
no LLM configured. Figures:

- ``answer_in_answer``: share of questions whose answer string (any of ``answers``, case- and
  space-insensitive) appears in the extractive answer; also over the non-yes/no questions only
  (an extractive answer quotes the documents, it never says "yes");
- ``ungrounded_with_support``: share answered ``grounded: false`` although one of the question's
  two supporting passages was among the passages retrieved by one of its attempts;
- ``grounded``: share answered ``grounded: true``; ``mean_sentences``: sentences per answer.

``--calibrate`` instead chooses the semantic grade's threshold (``KG_ASK_MIN_SIMILARITY``) by
5-fold cross-validation over the questions (:func:`calibrate`), never on all at once;
``--margins 0.12,0.2,0.3,1.0`` chooses ask's sentence margin by 2-fold cross-validation
(:func:`choose_margin`) before the figures are measured.

The real embedder is slow on a shared machine (about 10 passages/s), so every embedding is cached
on disk under ``--cache`` (default ``/work/cache/kg-extractive-ask``), keyed by the model and the
SHA-256 of the text: a second run embeds nothing new. The database is kept in
``bench/results/extractive-ask/``.

Run: ``python bench/extractive_ask.py /work/shared/datasets/hotpotqa-500 [--questions 100]
[--calibrate] [--label before|after]``.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy is imported

import argparse  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import RESULTS, machine, write_results  # noqa: E402
from bench.beir import REPO, ingest  # noqa: E402
from kg import context  # noqa: E402
from kg.providers.registry import make_embedder  # noqa: E402
from kg.services import Services  # noqa: E402
from kg.settings import Settings  # noqa: E402
from kg.store.repos import get_repository  # noqa: E402

WORKSPACE = "hotpot"
MODEL = "local:all-MiniLM-L6-v2"


class CachedEmbedder:
    """An embedder whose vectors are kept on disk, one ``.npy`` file per (model, text)."""

    def __init__(self, inner, folder: Path) -> None:
        self.inner = inner
        self.name = inner.name
        self.dim = inner.dim
        self.max_tokens = inner.max_tokens
        self.folder = folder / re.sub(r"[^A-Za-z0-9_.-]", "_", inner.name)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.computed = 0

    def _file(self, text: str) -> Path:
        return self.folder / f"{hashlib.sha256(text.encode('utf-8', 'surrogatepass')).hexdigest()}.npy"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out: list[np.ndarray | None] = []
        todo = []
        for i, text in enumerate(texts):
            file = self._file(text)
            if file.exists():
                out.append(np.load(file))
            else:
                out.append(None)
                todo.append(i)
        if todo:
            vectors = self.inner.embed([texts[i] for i in todo])
            self.computed += len(todo)
            for i, vector in zip(todo, vectors, strict=True):
                np.save(self._file(texts[i]), vector.astype(np.float32))
                out[i] = vector.astype(np.float32)
        if not out:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([v for v in out if v is not None])

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)

    def token_counter(self):
        return self.inner.token_counter()


def load(folder: Path, n: int) -> tuple[list[dict], dict[str, dict]]:
    """The first ``n`` questions and the union of their context passages."""
    questions = [json.loads(line) for line in (folder / "questions.jsonl").read_text().splitlines()][:n]
    wanted = {pid for q in questions for pid in q["context_ids"]}
    corpus = {}
    for line in (folder / "corpus.jsonl").read_text().splitlines():
        doc = json.loads(line)
        if doc["_id"] in wanted:
            corpus[doc["_id"]] = {"title": doc["title"], "text": doc["text"]}
    return questions, corpus


def _norm(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


def contains_answer(answer: str, answers: list[str]) -> bool:
    """Whether one of the gold ``answers`` occurs in ``answer`` (case, punctuation and space
    insensitive, on word boundaries)."""
    haystack = f" {_norm(answer)} "
    return any(_norm(a) and f" {_norm(a)} " in haystack for a in answers)


def retrieved_ids(services: Services, queries: list[str]) -> set[str]:
    """Passage ids that ask's retrieval returns for any of ``queries``."""
    from kg.rag import functions

    found: set[str] = set()
    for query in queries:
        passages = functions._passages(services, context.OPERATOR, REPO, "main", query, functions.MAX_PASSAGES,
                                       [WORKSPACE], relevant_only=True)
        found.update(p["path"].rsplit("/", 1)[-1] for p in passages)
    return found


def evaluate(services: Services, questions: list[dict]) -> dict:
    """Ask every question; the figures of the module docstring."""
    from kg.rag.functions import ask

    rows = []
    started = time.perf_counter()
    for q in questions:
        body = ask(services, context.OPERATOR, REPO, "main", {"question": q["text"], "workspaces": [WORKSPACE]})
        got = retrieved_ids(services, [a["query"] for a in body["attempts"] if "leg" not in a])
        rows.append({"id": q["_id"], "question": q["text"], "answers": q["answers"], "answer": body["answer"],
                     "grounded": body["grounded"], "hit": contains_answer(body["answer"], q["answers"]),
                     "support_retrieved": bool(got & set(q["supporting_ids"])),
                     "yes_no": q["answer"].lower() in ("yes", "no"),
                     "sentences": len(re.findall(r"\[\d+\]", body["answer"])),
                     "attempts": [a["query"] for a in body["attempts"]]})
    n = len(rows)
    open_rows = [r for r in rows if not r["yes_no"]]
    return {
        "questions": n,
        "answer_in_answer": round(sum(r["hit"] for r in rows) / n, 4),
        "answer_in_answer_non_yes_no": round(sum(r["hit"] for r in open_rows) / max(1, len(open_rows)), 4),
        "non_yes_no_questions": len(open_rows),
        "grounded": round(sum(r["grounded"] for r in rows) / n, 4),
        "ungrounded_with_support": round(sum((not r["grounded"]) and r["support_retrieved"] for r in rows) / n, 4),
        "support_retrieved": round(sum(r["support_retrieved"] for r in rows) / n, 4),
        "mean_sentences": round(sum(r["sentences"] for r in rows) / n, 3),
        "took_s": round(time.perf_counter() - started, 1),
        "rows": rows,
    }


def calibrate(embedder, questions: list[dict], corpus: dict[str, dict], *, folds: int = 5, seed: int = 20261201
              ) -> dict:
    """The grade's threshold by ``folds``-fold cross-validation over the questions.

    For every question, the *on-topic* score is the best cosine similarity between the question
    and a sentence of its two supporting passages that holds the answer string (the sentence the
    extractive answer must quote; questions whose answer no whole sentence holds are left out);
    the *off-topic* score is the best similarity between the question and any sentence of the
    10 context passages of another question (a random derangement). The
    grade should pass the first and refuse the second: on each fold's training questions the
    threshold maximising balanced accuracy (mean of the two pass/refuse rates) is chosen on a
    0.01 grid, then measured on the held-out fold. Reported: each fold's threshold and held-out
    accuracy, their spread, and the median threshold as the proposed default.
    """
    from kg.text.sentences import split_sentences

    def best(question: str, pids: list[str], answers: list[str] | None = None) -> float | None:
        sentences = [s for pid in pids for s in split_sentences(corpus[pid]["text"])]
        if answers is not None:
            sentences = [s for s in sentences if contains_answer(s, answers)]
        if not sentences:
            return None
        vectors = embedder.embed([question] + sentences)
        return float(np.max(vectors[1:] @ vectors[0]))

    answerable = [q for q in questions if best(q["text"], q["supporting_ids"], q["answers"]) is not None]
    left_out = len(questions) - len(answerable)
    questions = answerable
    rng = random.Random(seed)
    order = list(range(len(questions)))
    others = order[:]
    while any(i == j for i, j in zip(order, others, strict=True)):
        rng.shuffle(others)
    on = np.array([best(q["text"], q["supporting_ids"], q["answers"]) for q in questions])
    off = np.array([best(q["text"], questions[j]["context_ids"]) or -1.0
                    for q, j in zip(questions, others, strict=True)])
    ids = order[:]
    rng.shuffle(ids)
    grid = np.round(np.arange(0.0, 0.9, 0.01), 2)

    def accuracy(t: float, idx: list[int]) -> float:
        return float((np.mean(on[idx] >= t) + np.mean(off[idx] < t)) / 2)

    results = []
    for f in range(folds):
        held = ids[f::folds]
        train = [i for i in ids if i not in set(held)]
        t = float(max(grid, key=lambda g: (accuracy(g, train), -abs(g - 0.3))))
        results.append({"fold": f, "threshold": t, "train_accuracy": round(accuracy(t, train), 4),
                        "held_accuracy": round(accuracy(t, held), 4),
                        "held_on_topic_pass": round(float(np.mean(on[held] >= t)), 4),
                        "held_off_topic_refused": round(float(np.mean(off[held] < t)), 4)})
    thresholds = [r["threshold"] for r in results]
    held_acc = [r["held_accuracy"] for r in results]
    return {"questions": len(questions), "left_out_no_answer_sentence": left_out,
            "folds": results, "threshold_median": float(np.median(thresholds)),
            "threshold_range": [min(thresholds), max(thresholds)],
            "held_accuracy_mean": round(float(np.mean(held_acc)), 4),
            "held_accuracy_range": [min(held_acc), max(held_acc)],
            "on_topic_similarity_mean": round(float(on.mean()), 4),
            "off_topic_similarity_mean": round(float(off.mean()), 4)}


def off_topic(services: Services) -> dict:
    """The 30 off-topic questions of ``bench/rag_null_context.py`` asked of the same collection:
    the share answered "The documents do not cover this." (``grounded: false``)."""
    from bench.rag_null_context import OFF_TOPIC
    from kg.rag.functions import ask

    answers = [ask(services, context.OPERATOR, REPO, "main", {"question": q, "workspaces": [WORKSPACE]})
               for q in OFF_TOPIC]
    return {"questions": len(OFF_TOPIC),
            "not_covered": round(sum(not a["grounded"] for a in answers) / len(OFF_TOPIC), 4),
            "answers": [{"question": q, "answer": a["answer"]} for q, a in zip(OFF_TOPIC, answers, strict=True)]}


def choose_margin(services: Services, questions: list[dict], margins: list[float]) -> dict:
    """ask's ``SENTENCE_MARGIN`` by 2-fold cross-validation: every margin is run on all the
    questions; on each half the margin with the most answers holding the answer string (ties:
    the smaller, stricter margin) is chosen and its share on the other half reported."""
    from kg.rag import functions

    hits: dict[float, list[bool]] = {}
    kept = functions.select_sentences.__kwdefaults__
    try:
        for margin in margins:
            functions.select_sentences.__kwdefaults__ = {**kept, "margin": margin}
            rows = evaluate(services, questions)["rows"]
            hits[margin] = [r["hit"] for r in rows]
    finally:
        functions.select_sentences.__kwdefaults__ = kept
    halves = [list(range(0, len(questions), 2)), list(range(1, len(questions), 2))]
    folds = []
    for train, held in ((halves[0], halves[1]), (halves[1], halves[0])):
        best = max(margins, key=lambda m: (sum(hits[m][i] for i in train), -m))
        folds.append({"margin": best, "held_answer_in_answer": round(sum(hits[best][i] for i in held) / len(held), 4)})
    return {"margins": {str(m): round(sum(h) / len(h), 4) for m, h in hits.items()}, "folds": folds}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", type=Path, help="the hotpotqa-500 folder")
    parser.add_argument("--questions", type=int, default=100)
    parser.add_argument("--cache", type=Path, default=Path("/work/cache/kg-extractive-ask"))
    parser.add_argument("--calibrate", action="store_true", help="choose the grade threshold by cross-validation")
    parser.add_argument("--label", default="after", help="names the result file (before / after)")
    parser.add_argument("--margins", default=None, help="comma-separated sentence margins to cross-validate")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    questions, corpus = load(args.dataset, args.questions)
    embedders: dict[str, CachedEmbedder] = {}

    def factory(name: str) -> CachedEmbedder:
        if name not in embedders:
            embedders[name] = CachedEmbedder(make_embedder(name), args.cache)
        return embedders[name]

    results: dict = {"machine": machine(), "dataset": "hotpotqa-500", "questions": len(questions),
                     "passages": len(corpus), "model": MODEL, "embedding_cache": str(args.cache)}
    if args.calibrate:
        results["calibration"] = calibrate(factory(MODEL), questions, corpus)
        print(json.dumps(results["calibration"], indent=1))
        write_results(results, args.out or RESULTS / "extractive-ask-calibration.json")
        return results
    workdir = RESULTS / "extractive-ask"
    workdir.mkdir(parents=True, exist_ok=True)
    settings = Settings(database_url=f"sqlite:///{workdir / 'kg.sqlite3'}", data_dir=workdir / "data",
                        embedding_model=MODEL, index_inline=False)
    services = Services.from_settings(settings)
    services.embedder_factory = factory
    try:
        services.db.upgrade()
        print(f"ingesting {len(corpus)} passages ...", file=sys.stderr, flush=True)
        results["ingest"] = ingest(services, WORKSPACE, corpus)
        with services.db.read() as session:
            services.index.flush(get_repository(session, REPO).uid)
        if args.margins:
            results["margin_cv"] = choose_margin(services, questions, [float(m) for m in args.margins.split(",")])
            print(json.dumps(results["margin_cv"], indent=1))
        print(f"asking {len(questions)} questions ...", file=sys.stderr, flush=True)
        results["ask"] = evaluate(services, questions)
        results["off_topic"] = off_topic(services)
    finally:
        services.close()
    results["embedded_now"] = sum(e.computed for e in embedders.values())
    figures = {k: v for k, v in results["ask"].items() if k != "rows"}
    figures["off_topic_not_covered"] = results["off_topic"]["not_covered"]
    print(json.dumps(figures, indent=1))
    write_results(results, args.out or RESULTS / f"extractive-ask-{args.label}.json")
    return results


if __name__ == "__main__":
    main()
