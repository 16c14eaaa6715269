"""The RAG node's relevance cut (``KG_RAG_MAX_DISTANCE``): off-topic questions get a null context,
on-topic ones are still answered.

Collections: two of the shared datasets, as the RAG node would hold them (each document one or a
few 200-word chunks, embedded by ``local:all-MiniLM-L6-v2``): ``hotpot`` (the 10 context
paragraphs of the first 100 HotpotQA-500 questions, Wikipedia) and ``scifact`` (the cited
abstracts of the first 60 SciFact queries plus the next abstracts of the corpus, 300 in all,
biomedical). On-topic questions: those 100 HotpotQA questions and 60 SciFact claims, each asked
of its own collection. Off-topic: the 30 questions of :data:`OFF_TOPIC`, written for this bench
(sailing, football, cooking, cars, household, software operations: none of them is answered by
either collection; the nearest chunk of each is printed for a check by eye), asked of both.

The node injects the chunks within the cut; its context is null when the nearest chunk is
farther. For a cut t: ``off_topic_null`` = share of off-topic (question, collection) pairs whose
nearest chunk is farther than t; ``on_topic_answered`` = share of on-topic questions whose
nearest chunk is within t. The cut is chosen on held data: the questions are split in two
halves (seeded); on each half the t maximising balanced accuracy (the mean of the two shares)
on a 0.01 grid is chosen and measured on the other half. The default is the mean of the two
choices, rounded to 0.05.

Embeddings are cached under ``--cache`` (shared with ``bench/extractive_ask.py``).

Run: ``python bench/rag_null_context.py DATASETS``.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy is imported

import argparse  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import CACHE, RESULTS, machine, write_results  # noqa: E402
from bench.extractive_ask import MODEL, CachedEmbedder  # noqa: E402
from bench.extractive_ask import load as load_hotpot  # noqa: E402
from kg.providers.registry import make_embedder  # noqa: E402

OFF_TOPIC = [
    "Who won the football world cup final?",
    "How often must standing rigging be replaced on a sailboat?",
    "How do I reef the mainsail when the wind rises?",
    "What is the offside rule in football?",
    "How long should I knead bread dough?",
    "What temperature do I roast a chicken at?",
    "How do I rotate an API key for the deployment pipeline?",
    "Why does my deploy fail with ERR_CONN_RESET during publish?",
    "How much notice must a tenant give before moving out?",
    "What is the torque setting for a bicycle stem bolt?",
    "How do I change the oil in a diesel car engine?",
    "Which tyre pressure should a family car use in winter?",
    "How do I unclog a kitchen sink drain?",
    "What paint finish is best for a bathroom ceiling?",
    "How many substitutes can a football team make in a match?",
    "How do I set up single sign-on for the admin console?",
    "What is the refund policy for cancelled orders?",
    "How do I make a sourdough starter?",
    "Which knot is used to tie a boat to a cleat?",
    "How should a goalkeeper position himself for a penalty kick?",
    "How do I configure pagination cursors in the REST API?",
    "What is the best way to store fresh basil?",
    "How do I replace the chain on a mountain bike?",
    "When should winter tyres be fitted?",
    "How do I bleed a radiator in a central heating system?",
    "What are the opening hours of the customer support desk?",
    "How long does it take to boil an egg soft?",
    "How do I back up my phone photos to a laptop?",
    "What is a good warm-up routine before a five-a-side football game?",
    "How do I reset the password of my router?",
]


def chunks(text: str, size: int = 200, overlap: int = 40) -> list[str]:
    """Word chunks as the RAG node makes them (``chunkSize`` words, ``chunkOverlap`` shared)."""
    words = text.split()
    if len(words) <= size:
        return [text]  # one chunk: the text as stored (so the embedding cache of the ask bench serves it)
    out, start = [], 0
    while True:
        out.append(" ".join(words[start:start + size]))
        if start + size >= len(words):
            return out
        start += size - overlap


def scifact(folder: Path, n_queries: int = 60, n_docs: int = 300) -> tuple[list[str], dict[str, str]]:
    """The first SciFact queries with judgements, and their cited abstracts plus the next ones."""
    qrels: dict[str, set[str]] = {}
    for line in (folder / "qrels.tsv").read_text().splitlines()[1:]:
        qid, did, score = line.split("\t")
        if int(score) > 0:
            qrels.setdefault(qid, set()).add(did)
    queries = []
    for line in (folder / "queries.jsonl").read_text().splitlines():
        q = json.loads(line)
        if str(q["_id"]) in qrels:
            queries.append((str(q["_id"]), q["text"]))
    queries = queries[:n_queries]
    wanted = {d for qid, _ in queries for d in qrels[qid]}
    corpus: dict[str, str] = {}
    for line in (folder / "corpus.jsonl").read_text().splitlines():
        doc = json.loads(line)
        if str(doc["_id"]) in wanted or len(corpus) < n_docs:
            corpus[str(doc["_id"])] = f"{doc.get('title') or ''}. {doc.get('text') or ''}"
        if len(corpus) >= n_docs and wanted <= set(corpus):
            break
    return [t for _, t in queries], corpus


def nearest(embedder, questions: list[str], texts: list[str]) -> tuple[np.ndarray, list[int]]:
    """Cosine distance of each question's nearest chunk, and that chunk's index."""
    c = embedder.embed(texts)
    q = embedder.embed(questions)
    sims = q @ c.T
    return 1.0 - sims.max(axis=1), [int(i) for i in sims.argmax(axis=1)]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("datasets", type=Path, help="folder with hotpotqa-500 and scifact")
    parser.add_argument("--cache", type=Path, default=Path(CACHE / "kg-extractive-ask"))
    parser.add_argument("--out", type=Path, default=RESULTS / "rag-null-context.json")
    args = parser.parse_args(argv)
    embedder = CachedEmbedder(make_embedder(MODEL), args.cache)
    hq, hcorpus = load_hotpot(args.datasets / "hotpotqa-500", 100)
    htexts = [c for doc in hcorpus.values() for c in chunks(doc["text"])]
    sq, scorpus = scifact(args.datasets / "scifact")
    stexts = [c for text in scorpus.values() for c in chunks(text)]
    on_h, _ = nearest(embedder, [q["text"] for q in hq], htexts)
    on_s, _ = nearest(embedder, sq, stexts)
    off_h, near_h = nearest(embedder, OFF_TOPIC, htexts)
    off_s, near_s = nearest(embedder, OFF_TOPIC, stexts)
    on = np.concatenate([on_h, on_s])
    off = np.concatenate([off_h, off_s])
    rng = random.Random(20261201)
    on_idx, off_idx = list(range(len(on))), list(range(len(OFF_TOPIC)))
    rng.shuffle(on_idx)
    rng.shuffle(off_idx)
    halves = [(on_idx[0::2], off_idx[0::2]), (on_idx[1::2], off_idx[1::2])]
    n_off = len(OFF_TOPIC)

    def pairs(idx: list[int]) -> np.ndarray:  # an off-topic question counts on both collections
        return np.concatenate([off[idx], off[[i + n_off for i in idx]]])

    def shares(t: float, on_i: list[int], off_i: list[int]) -> tuple[float, float]:
        return float(np.mean(pairs(off_i) > t)), float(np.mean(on[on_i] <= t))

    grid = np.round(np.arange(0.3, 1.2, 0.01), 2)
    folds = []
    for k, (train, held) in enumerate([(halves[0], halves[1]), (halves[1], halves[0])]):
        t = float(max(grid, key=lambda g: (sum(shares(g, *train)), -g)))
        null, answered = shares(t, *held)
        folds.append({"fold": k, "threshold": t, "held_off_topic_null": round(null, 4),
                      "held_on_topic_answered": round(answered, 4)})
    default = round(round(np.mean([f["threshold"] for f in folds]) / 0.05) * 0.05, 2)
    all_on, all_off = list(range(len(on))), list(range(n_off))
    null, answered = shares(default, all_on, all_off)
    before_null, before_answered = shares(2.0, all_on, all_off)
    results = {
        "machine": machine(), "model": MODEL,
        "collections": {"hotpot": {"documents": len(hcorpus), "chunks": len(htexts), "on_topic": len(hq)},
                        "scifact": {"documents": len(scorpus), "chunks": len(stexts), "on_topic": len(sq)}},
        "off_topic_questions": n_off, "folds": folds, "default_threshold": default,
        "at_default": {"off_topic_null": round(null, 4), "on_topic_answered": round(answered, 4),
                       "on_topic_answered_hotpot": round(float(np.mean(on_h <= default)), 4),
                       "on_topic_answered_scifact": round(float(np.mean(on_s <= default)), 4)},
        "without_cut": {"off_topic_null": round(before_null, 4), "on_topic_answered": round(before_answered, 4)},
        "distances": {"on_topic_median": round(float(np.median(on)), 4),
                      "off_topic_median": round(float(np.median(off)), 4)},
        "off_topic_nearest": [{"question": q, "hotpot": [round(float(off_h[i]), 3), htexts[near_h[i]][:80]],
                               "scifact": [round(float(off_s[i]), 3), stexts[near_s[i]][:80]]}
                              for i, q in enumerate(OFF_TOPIC)],
        "embedded_now": embedder.computed,
    }
    print(json.dumps({k: v for k, v in results.items() if k not in ("off_topic_nearest", "machine")}, indent=1))
    write_results(results, args.out)
    return results


if __name__ == "__main__":
    main()
