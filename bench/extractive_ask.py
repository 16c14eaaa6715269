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

``--absent-cv`` also asks ``--held-out`` questions whose passages are not in the collection
(the next questions of the file, their supporting passages absent): the share of them answered
``grounded: false`` is how often ask declines a question its documents cannot answer. Both sets
are asked with the coverage check reporting only (``KG_ASK_MAX_ABSENT_SHARE=1``), each
question's absent content words and their nearest quoted words are recorded
(:func:`kg.rag.functions.absent_terms`, :func:`kg.rag.functions.nearest_words`), and
``KG_ASK_MAX_ABSENT_SHARE`` and ``KG_ASK_WORD_SIMILARITY`` are chosen together by 5-fold
cross-validation over the questions of both sets (:func:`choose_absent_share`: balanced
accuracy of keeping the answerable questions' answers and declining the others; the least strict
pair within one standard error of the best); then both sets are asked again with that pair.
``--joint-cv A.json B.json`` chooses over the rows of several such runs (HotpotQA and SciFact:
``load_scifact`` asks claims, answered when an evidence abstract is cited).

``--calibrate`` instead chooses the semantic grade's threshold (``KG_ASK_MIN_SIMILARITY``) by
5-fold cross-validation over the questions (:func:`calibrate`), never on all at once;
``--margins 0.12,0.2,0.3,1.0`` chooses ask's sentence margin by 2-fold cross-validation
(:func:`choose_margin`) before the figures are measured.

The real embedder is slow on a shared machine (about 10 passages/s), so every embedding is cached
on disk under ``--cache`` (default ``$KG_BENCH_CACHE/kg-extractive-ask``), keyed by the model and the
SHA-256 of the text: a second run embeds nothing new. The database is kept in
``bench/results/extractive-ask/``.

Run: ``python bench/extractive_ask.py DATASETS/hotpotqa-500 [--questions 100]
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

from bench._common import CACHE, RESULTS, machine, write_results  # noqa: E402
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


def load_scifact(folder: Path, n: int, distractors: int, seed: int = 20261204
                 ) -> tuple[list[dict], dict[str, dict], list[dict]]:
    """SciFact's claims as questions: ``n`` claims whose evidence abstracts are in the collection
    (with ``distractors`` other abstracts) and ``n`` others whose evidence is not (asked as the
    unanswerable set). A claim has no answer string: it counts as answered when ask cites one
    of its evidence abstracts."""
    evidence: dict[str, list[str]] = {}
    for line in (folder / "qrels.tsv").read_text().splitlines()[1:]:
        qid, did, _ = line.split("\t")
        evidence.setdefault(qid, []).append(did)
    claims = [json.loads(line) for line in (folder / "queries.jsonl").read_text().splitlines()]
    claims = [c for c in claims if c["_id"] in evidence]
    random.Random(seed).shuffle(claims)
    inside, outside = claims[:n], claims[n:2 * n]

    def question(c: dict) -> dict:
        return {"_id": c["_id"], "text": c["text"], "answer": "", "answers": [],
                "supporting_ids": evidence[c["_id"]], "context_ids": evidence[c["_id"]]}

    docs = {d["_id"]: d for d in map(json.loads, (folder / "corpus.jsonl").read_text().splitlines())}
    wanted = {did for c in inside for did in evidence[c["_id"]]}
    barred = {did for c in outside for did in evidence[c["_id"]]} - wanted
    others = sorted(set(docs) - wanted - barred)
    wanted |= set(random.Random(seed + 1).sample(others, distractors))
    corpus = {did: {"title": docs[did]["title"], "text": docs[did]["text"]} for did in sorted(wanted)}
    outside = [c for c in outside if not set(evidence[c["_id"]]) & wanted]
    return [question(c) for c in inside], corpus, [question(c) for c in outside]


def held_out(folder: Path, first: int, n: int, corpus: dict[str, dict]) -> list[dict]:
    """Up to ``n`` questions after the first ``first`` whose supporting passages are not in
    ``corpus``: questions the collection cannot answer."""
    questions = [json.loads(line) for line in (folder / "questions.jsonl").read_text().splitlines()][first:]
    return [q for q in questions if not set(q["supporting_ids"]) & set(corpus)][:n]


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
        got = retrieved_ids(services, [a.query for a in body.attempts if a.leg is None])
        check = next((a.as_json() for a in body.attempts if a.leg == "coverage"), None)
        cited = {c.path.rsplit("/", 1)[-1] for c in body.citations}
        hit = contains_answer(body.answer, q["answers"]) if q["answers"] else \
            body.grounded and bool(cited & set(q["supporting_ids"]))  # a claim: its evidence cited
        rows.append({"id": q["_id"], "question": q["text"], "answers": q["answers"], "answer": body.answer,
                     "grounded": body.grounded, "hit": hit,
                     "support_retrieved": bool(got & set(q["supporting_ids"])),
                     "yes_no": q["answer"].lower() in ("yes", "no"),
                     "sentences": len(re.findall(r"\[\d+\]", body.answer)),
                     "coverage": check,
                     "attempts": [a.query for a in body.attempts]})
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
            "not_covered": round(sum(not a.grounded for a in answers) / len(OFF_TOPIC), 4),
            "answers": [{"question": q, "answer": a.answer} for q, a in zip(OFF_TOPIC, answers, strict=True)]}


def salience(model: str = MODEL):
    """``salient(word, question)``: :func:`kg.rag.functions.salient_words` for one word, with the
    tokenizer of ``model`` (what ask uses with ``KG_EMBEDDING_MODEL`` set to it)."""
    from kg.rag.functions import SALIENT_PIECES

    embedder = make_embedder(model)
    pieces: dict[str, int] = {}

    def salient(word: str, question: str) -> bool:
        if any(c.isdigit() for c in word):
            return True
        if any(m.start() > 0 and m.group(0)[:1].isupper() and m.group(0).lower() == word
               for m in re.finditer(r"\w+", question)):
            return True
        if word not in pieces:
            pieces[word] = embedder.count_tokens(word)
        return pieces[word] >= SALIENT_PIECES

    return salient


def uncovered_share(row: dict, word_similarity: float, salient=None) -> float:
    """A row's share of the question's content words that no passage holds, no quoted word is
    near (at least ``word_similarity``) and no quoted word is spelt like (and, with
    ``salient``, that name the subject): what ask compares with ``KG_ASK_MAX_ABSENT_SHARE`` (0
    when no sentence passed the grade: the check did not run)."""
    check = row["coverage"]
    if not check or not check["terms"]:
        return 0.0
    near, misspelt = check["nearest"], check.get("misspelt", {})
    uncovered = [w for w in check["absent_terms"]
                 if w not in misspelt and (w not in near or near[w]["similarity"] < word_similarity)]
    if salient is not None:
        uncovered = [w for w in uncovered if salient(w, row["question"])]
    return len(uncovered) / check["terms"]


def choose_absent_share(answerable: list[dict], unanswerable: list[dict], *, folds: int = 5,
                        seed: int = 20261204) -> dict:
    """``KG_ASK_MAX_ABSENT_SHARE`` and ``KG_ASK_WORD_SIMILARITY`` by ``folds``-fold
    cross-validation over the rows of both sets (asked with the check reporting only). With a
    pair (t, w), a question whose uncovered share (:func:`uncovered_share` at w) exceeds t is
    declined: an answerable one loses its answer, an unanswerable one is declined (as it is
    when it was ungrounded already). On each fold's training rows the pair of the grid
    maximising the mean of the two rates (answers kept holding the answer string, unanswerable
    declined) is chosen (ties: the larger t, then the lower w: the less strict) and measured on
    the held-out rows: the spread of the choice. The setting proposed (``one_se``) is the least
    strict pair within one standard error of the best mean held-out score."""
    rows = [(r, True) for r in answerable] + [(r, False) for r in unanswerable]
    rng = random.Random(seed)
    order = list(range(len(rows)))
    rng.shuffle(order)
    shares = [round(x, 2) for x in np.arange(0.0, 1.01, 0.05)]
    sims = [round(x, 2) for x in np.arange(0.3, 0.71, 0.05)] + [1.01]
    kinds = ("salient", "all")  # least strict first
    salient = salience()
    share_of = {(kind, w): [uncovered_share(r, w, salient if kind == "salient" else None) for r, _ in rows]
                for kind in kinds for w in sims}
    pairs = [(kind, t, w) for kind in kinds for t in shares for w in sims]

    def laxity(p: tuple[str, float, float]) -> tuple[bool, float, float]:
        return p[0] == "salient", p[1], -p[2]

    def rates(p: tuple[str, float, float], idx: list[int]) -> tuple[float, float]:
        kind, t, w = p
        kept = [rows[i][0]["hit"] and share_of[(kind, w)][i] <= t for i in idx if rows[i][1]]
        declined = [(not rows[i][0]["grounded"]) or share_of[(kind, w)][i] > t for i in idx if not rows[i][1]]
        return float(np.mean(kept)) if kept else 0.0, float(np.mean(declined)) if declined else 0.0

    results = []
    for f in range(folds):
        held = order[f::folds]
        train = [i for i in order if i not in set(held)]
        choice = max(pairs, key=lambda p: (sum(rates(p, train)) / 2, laxity(p)))
        kept, declined = rates(choice, held)
        results.append({"fold": f, "words": choice[0], "max_absent_share": choice[1], "word_similarity": choice[2],
                        "held_answer_in_answer": round(kept, 4), "held_unanswerable_declined": round(declined, 4)})
    off = rates(("all", 1.0, 1.01), order)
    # The default: every pair's balanced accuracy on each held-out fold; the least strict pair
    # (largest t, then lowest w) within one standard error of the best mean (the one-standard-
    # error rule, Hastie, Tibshirani and Friedman, "The Elements of Statistical Learning", 2nd
    # ed., 2009, section 7.10): pairs that near the best are not told apart by these questions.
    held_scores = {p: [sum(rates(p, order[f::folds])) / 2 for f in range(folds)] for p in pairs}
    means = {p: float(np.mean(v)) for p, v in held_scores.items()}
    best = max(pairs, key=lambda p: (means[p], laxity(p)))
    se = float(np.std(held_scores[best], ddof=1) / np.sqrt(folds))
    one_se = max((p for p in pairs if means[p] >= means[best] - se), key=laxity)

    def described(p: tuple[str, float, float]) -> dict:
        kept, declined = rates(p, order)
        return {"words": p[0], "max_absent_share": p[1], "word_similarity": p[2], "mean": round(means[p], 4),
                "folds": [round(x, 4) for x in held_scores[p]], "answer_in_answer": round(kept, 4),
                "unanswerable_declined": round(declined, 4)}

    return {"answerable": len(answerable), "unanswerable": len(unanswerable), "folds": results,
            "best": {**described(best), "se": round(se, 4)}, "one_se": described(one_se),
            "max_absent_share_median": float(np.median([r["max_absent_share"] for r in results])),
            "word_similarity_median": float(np.median([r["word_similarity"] for r in results])),
            "held_answer_in_answer_range": [min(r["held_answer_in_answer"] for r in results),
                                            max(r["held_answer_in_answer"] for r in results)],
            "held_unanswerable_declined_range": [min(r["held_unanswerable_declined"] for r in results),
                                                 max(r["held_unanswerable_declined"] for r in results)],
            "check_off": {"answer_in_answer": round(off[0], 4), "unanswerable_declined": round(off[1], 4)}}


def joint_cv(paths: list[Path]) -> dict:
    """:func:`choose_absent_share` over the rows of several runs (each a ``--absent-cv`` result:
    its answerable and held-out rows asked with the check reporting only), then each run's
    rates at the medians of the folds' choices."""
    runs = {path.stem: json.loads(path.read_text())["check_off"] for path in paths}
    answerable = [r for run in runs.values() for r in run["ask"]["rows"]]
    unanswerable = [r for run in runs.values() for r in run["held_out"]["rows"]]
    chosen = choose_absent_share(answerable, unanswerable)
    t, w = chosen["one_se"]["max_absent_share"], chosen["one_se"]["word_similarity"]
    salient = salience() if chosen["one_se"]["words"] == "salient" else None
    per_run = {}
    for name, run in runs.items():
        a, u = run["ask"]["rows"], run["held_out"]["rows"]
        per_run[name] = {
            "answerable": len(a), "unanswerable": len(u),
            "answered_check_off": round(sum(r["hit"] for r in a) / len(a), 4),
            "declined_check_off": round(sum(not r["grounded"] for r in u) / len(u), 4),
            "answered": round(sum(r["hit"] and uncovered_share(r, w, salient) <= t for r in a) / len(a), 4),
            "declined": round(sum((not r["grounded"]) or uncovered_share(r, w, salient) > t for r in u) / len(u), 4)}
    return {"cv": chosen, "per_run": per_run}


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
    parser.add_argument("--cache", type=Path, default=Path(CACHE / "kg-extractive-ask"))
    parser.add_argument("--calibrate", action="store_true", help="choose the grade threshold by cross-validation")
    parser.add_argument("--label", default="after", help="names the result file (before / after)")
    parser.add_argument("--margins", default=None, help="comma-separated sentence margins to cross-validate")
    parser.add_argument("--absent-cv", action="store_true",
                        help="choose KG_ASK_MAX_ABSENT_SHARE by cross-validation with held-out questions")
    parser.add_argument("--held-out", type=int, default=100, help="unanswerable questions asked (--absent-cv)")
    parser.add_argument("--distractors", type=int, default=400, help="SciFact: abstracts of no asked claim")
    parser.add_argument("--joint-cv", type=Path, nargs="+", default=None,
                        help="choose the coverage settings over the rows of these --absent-cv results")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.joint_cv:
        joint = joint_cv(args.joint_cv)
        print(json.dumps(joint, indent=1))
        write_results({"machine": machine(), "runs": [str(p) for p in args.joint_cv], **joint},
                      args.out or RESULTS / "extractive-ask-joint-cv.json")
        return joint
    scifact = "scifact" in args.dataset.name
    outside: list[dict] = []
    if scifact:
        questions, corpus, outside = load_scifact(args.dataset, args.questions, args.distractors)
    else:
        questions, corpus = load(args.dataset, args.questions)
    embedders: dict[str, CachedEmbedder] = {}

    def factory(name: str) -> CachedEmbedder:
        if name not in embedders:
            embedders[name] = CachedEmbedder(make_embedder(name), args.cache)
        return embedders[name]

    results: dict = {"machine": machine(), "dataset": args.dataset.name, "questions": len(questions),
                     "passages": len(corpus), "model": MODEL, "embedding_cache": str(args.cache)}
    if args.calibrate:
        results["calibration"] = calibrate(factory(MODEL), questions, corpus)
        print(json.dumps(results["calibration"], indent=1))
        write_results(results, args.out or RESULTS / "extractive-ask-calibration.json")
        return results
    workdir = RESULTS / ("extractive-ask-scifact" if scifact else "extractive-ask")
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
        if args.absent_cv:
            outside = outside[:args.held_out] if scifact else held_out(args.dataset, args.questions, args.held_out,
                                                                          corpus)
            chosen = (services.settings.ask_max_absent_share, services.settings.ask_word_similarity,
                      services.settings.ask_absent_words)
            services.settings.ask_max_absent_share = 1.0  # the check reports only: every question's words recorded
            services.settings.ask_absent_words = "all"
            print(f"asking {len(questions)} + {len(outside)} held-out questions, check off ...", file=sys.stderr,
                  flush=True)
            before = {"ask": evaluate(services, questions), "held_out": evaluate(services, outside)}
            results["absent_cv"] = choose_absent_share(before["ask"]["rows"], before["held_out"]["rows"])
            results["check_off"] = before
            print(json.dumps(results["absent_cv"], indent=1))
            services.settings.ask_max_absent_share = results["absent_cv"]["one_se"]["max_absent_share"]
            services.settings.ask_word_similarity = results["absent_cv"]["one_se"]["word_similarity"]
            services.settings.ask_absent_words = results["absent_cv"]["one_se"]["words"]
            results["held_out_check_on"] = evaluate(services, outside)
            results["defaults_before"] = chosen
        print(f"asking {len(questions)} questions ...", file=sys.stderr, flush=True)
        results["ask"] = evaluate(services, questions)
        results["off_topic"] = off_topic(services)
    finally:
        services.close()
    results["embedded_now"] = sum(e.computed for e in embedders.values())
    figures = {k: v for k, v in results["ask"].items() if k != "rows"}
    figures["off_topic_not_covered"] = results["off_topic"]["not_covered"]
    if "held_out_check_on" in results:
        held = results["held_out_check_on"]
        figures["held_out_declined"] = round(1 - held["grounded"], 4)
        figures["held_out_declined_check_off"] = round(1 - results["check_off"]["held_out"]["grounded"], 4)
        figures["answer_in_answer_check_off"] = results["check_off"]["ask"]["answer_in_answer"]
    print(json.dumps(figures, indent=1))
    write_results(results, args.out or RESULTS / f"extractive-ask-{args.label}.json")
    return results


if __name__ == "__main__":
    main()
