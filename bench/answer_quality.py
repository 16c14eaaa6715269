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
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy is imported

import argparse  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
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

GOLD = ROOT / "bench" / "data" / "answers_gold.jsonl"
PEPS = ROOT / "fixtures" / "peps" / "docs"
REPO = "answers"
MODEL = "local:all-MiniLM-L6-v2"


def _norm(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


def contains(answer: str, accepted: list[str]) -> bool:
    """Whether one accepted answer occurs in ``answer`` (normalised, on word boundaries)."""
    haystack = f" {_norm(answer)} "
    return any(_norm(a) and f" {_norm(a)} " in haystack for a in accepted)


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


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peps", type=int, default=None, help="distractor PEPs beside the evidence (default all)")
    parser.add_argument("--cache", type=Path, default=Path("bench/results/embedding-cache"))
    parser.add_argument("--label", default="after")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    gold = [json.loads(line) for line in GOLD.read_text().splitlines() if line.strip()]
    evidence_peps = sorted({Path(e["path"]).name for g in gold if g["corpus"] == "peps" for e in g["evidence"]})
    others = sorted(p.name for p in PEPS.glob("*.rst") if p.name not in evidence_peps)
    chosen = evidence_peps + (others if args.peps is None else others[:args.peps])
    passages = {e["passage_id"]: {"title": e["title"], "text": e["text"]}
                for g in gold if g["corpus"] == "hotpotqa" for e in g["evidence"]}
    embedders: dict[str, CachedEmbedder] = {}

    def factory(name: str) -> CachedEmbedder:
        if name not in embedders:
            embedders[name] = CachedEmbedder(make_embedder(name), args.cache)
        return embedders[name]

    results: dict = {"machine": machine(), "model": MODEL, "peps": len(chosen), "hotpot_passages": len(passages)}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        settings = Settings(database_url=f"sqlite:///{work / 'kg.sqlite3'}", data_dir=work / "data",
                            embedding_model=MODEL, index_inline=True)
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
            from kg.rag.functions import ask

            rows = []
            for g in gold:
                body = ask(services, context.OPERATOR, REPO, "main",
                           {"question": g["question"], "workspaces": [g["corpus"]]})
                rows.append({"id": g["id"], "corpus": g["corpus"], "kind": g["kind"], "answerable": g["answerable"],
                             "answer_type": g["answer_type"], "grounded": body["grounded"],
                             "exact": contains(body["answer"], g["answers"]), "answer": body["answer"],
                             "citations": [c.get("kind", "passage") for c in body["citations"]]})
        finally:
            services.close()
    results["embedded_now"] = sum(e.computed for e in embedders.values())
    results["by_corpus"] = {c: figures([r for r in rows if r["corpus"] == c]) for c in ("peps", "hotpotqa")}
    results["by_corpus"]["all"] = figures(rows)
    results["peps_by_kind"] = {k: figures([r for r in rows if r["corpus"] == "peps" and r["kind"] == k])
                               for k in ("passage", "property", "relation")}
    results["rows"] = rows
    keys = ("questions", "exact", "grounded", "grounded_precision", "declined", "answered_recall")
    print(f"label: {args.label}")
    print(table([[name, *(f[k] for k in keys)] for name, f in {**results["by_corpus"],
                                                               **{f"peps/{k}": v for k, v in
                                                                  results["peps_by_kind"].items()}}.items()],
                ["corpus", *keys]))
    write_results(results, args.out or RESULTS / f"answer-quality-{args.label}.json")
    return results


if __name__ == "__main__":
    main()
