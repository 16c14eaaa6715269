"""Check the hand-labelled gold sets in ``bench/data``: answers_gold.jsonl, answers_heldout.jsonl,
answers_heldout2.jsonl, answers_heldout3.jsonl, answers_heldout4.jsonl, answers_heldout5.jsonl and
ner_gold.jsonl.

Answers: every field is present and typed, ids are unique, an unanswerable question has no
answers and an answerable one has at least one answer and one evidence quote; every quote is
an exact substring of its source (a PEP under ``fixtures/peps/docs`` or, for HotpotQA, the
passage text stored with the quote). NER: each entity's ``text[start:end]`` equals its
``text``, its type is one of the eight labels, spans do not overlap; a PEP sentence occurs
verbatim in its PEP (line breaks read as spaces), a HotpotQA sentence in the passage stored in ``ner_passages.jsonl``.

Run from the repository root: ``python bench/data/check_gold.py``; exit 1 on any error.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

DATA = Path(__file__).resolve().parent
ROOT = DATA.parent.parent
PEPS = ROOT / "fixtures" / "peps" / "docs"
NER_TYPES = {"PERSON", "ORG", "PLACE", "WORK", "PRODUCT", "DATE", "EVENT", "NORP"}
ANSWER_TYPES = {"name", "date", "number", "definition", "yes_no", "other"}
KINDS = {"passage", "property", "relation"}


def _lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _squash(text: str) -> str:
    """``text`` with every run of whitespace as one space: a PEP sentence joins its wrapped lines."""
    return " ".join(text.split())


def check_answers(path: Path) -> list[str]:
    """Errors in the answers gold set (empty when it is sound)."""
    errors: list[str] = []
    rows = _lines(path)
    ids = Counter(str(row["id"]) for row in rows)
    errors += [f"answers: duplicate id {i}" for i, n in ids.items() if n > 1]
    for row in rows:
        rid = row["id"]
        if row["corpus"] not in ("peps", "hotpotqa"):
            errors.append(f"{rid}: corpus {row['corpus']!r}")
        if row["answer_type"] not in ANSWER_TYPES:
            errors.append(f"{rid}: answer_type {row['answer_type']!r}")
        if row["kind"] not in KINDS:
            errors.append(f"{rid}: kind {row['kind']!r}")
        answers = row["answers"]
        evidence = row["evidence"]
        assert isinstance(answers, list) and isinstance(evidence, list)
        if row["answerable"] is True and (not answers or not evidence):
            errors.append(f"{rid}: answerable without answers or evidence")
        if row["answerable"] is False and answers:
            errors.append(f"{rid}: unanswerable with answers")
        for ev in evidence:
            quote = ev["quote"]
            if "path" in ev:
                source = (ROOT / ev["path"]).read_text(encoding="utf-8")
            else:
                source = ev["text"]
            if quote not in source:
                errors.append(f"{rid}: quote not in source: {quote!r}")
    return errors


def check_ner(path: Path, passages_path: Path) -> list[str]:
    """Errors in the NER gold set (empty when it is sound)."""
    errors: list[str] = []
    passages = {str(p["_id"]): str(p["text"]) for p in _lines(passages_path)} if passages_path.exists() else {}
    rows = _lines(path)
    ids = Counter(str(row["id"]) for row in rows)
    errors += [f"ner: duplicate id {i}" for i, n in ids.items() if n > 1]
    for row in rows:
        rid, text, source = row["id"], str(row["text"]), str(row["source"])
        if source.startswith("hotpotqa:"):
            passage = passages.get(source.removeprefix("hotpotqa:"))
            if passage is None or text not in passage:
                errors.append(f"{rid}: sentence not in passage {source}")
        elif _squash(text) not in _squash((PEPS / source).read_text(encoding="utf-8")):
            errors.append(f"{rid}: sentence not in {source}")
        end_before = -1
        entities = row["entities"]
        assert isinstance(entities, list)
        for ent in sorted(entities, key=lambda e: (e["start"], e["end"])):
            start, end = ent["start"], ent["end"]
            if text[start:end] != ent["text"]:
                errors.append(f"{rid}: text[{start}:{end}]={text[start:end]!r} != {ent['text']!r}")
            if ent["type"] not in NER_TYPES:
                errors.append(f"{rid}: type {ent['type']!r}")
            if start < end_before:
                errors.append(f"{rid}: overlapping span {ent['text']!r}")
            end_before = end
    return errors


def main() -> int:
    errors = [e for name in ("answers_gold", "answers_heldout", "answers_heldout2", "answers_heldout3",
                             "answers_heldout4", "answers_heldout5")
              for e in check_answers(DATA / f"{name}.jsonl")]
    ner = DATA / "ner_gold.jsonl"
    if ner.exists():
        errors += check_ner(ner, DATA / "ner_passages.jsonl")
    for error in errors:
        print(error)
    print(f"{len(errors)} error(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
