"""Named-entity quality and speed of extract-entities with no LLM: the offline NER (kg.text.ner)
against the deterministic rules, on the hand-labelled gold set.

``bench/data/ner_gold.jsonl`` (308 sentences, 638 entities, labelled before the NER was built:
``bench/data/ner_gold.md``) is read; each extractor tags every sentence and its spans are
compared with the gold ones:

- ``exact``: a predicted span counts when a gold span has the same start, end and type;
- ``span``: the same start and end, whatever the type;

precision, recall and F1 overall, per gold source (PEPs, HotpotQA) and per type (precision over
the spans predicted with that type, recall over the gold spans of that type). kg's types map to
the gold ones: person PERSON, organization ORG, place PLACE, work WORK, product PRODUCT, date
DATE, event EVENT, group NORP; the rules' ``concept`` has no gold type (it can match a span
only). The rules find names, not offsets: their spans are the names' occurrences in the
sentence (:func:`kg.rag.entities.locate`, what extract-entities records).

Throughput: both extractors over the 150 PEPs of ``fixtures/peps/docs`` (the text
extract-entities reads: the body's first 8,000 characters), documents per minute on this
machine with the load average; the NER's model load is timed apart. The ratio NER / rules is
the comparable figure.

Run: ``python bench/ner_quality.py [--label first]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import RESULTS, load_average, machine, table, write_results  # noqa: E402
from kg.ops.formats.pep import parse_pep  # noqa: E402
from kg.rag.entities import DEFAULT_MAX_CHARS, collect, deterministic_extraction, locate  # noqa: E402
from kg.text import ner  # noqa: E402

GOLD = ROOT / "bench" / "data" / "ner_gold.jsonl"
PEPS = ROOT / "fixtures" / "peps" / "docs"
TYPES = {"person": "PERSON", "organization": "ORG", "place": "PLACE", "work": "WORK", "product": "PRODUCT",
         "date": "DATE", "event": "EVENT", "group": "NORP", "concept": "CONCEPT"}

Span = tuple[int, int, str]


def rules_spans(text: str) -> list[Span]:
    """The deterministic extractor's entities located in ``text``."""
    entities, _ = collect(deterministic_extraction(text).candidates)
    locate(text, entities)
    return sorted((a, b, TYPES[e.type]) for e in entities for a, b in e.spans)


def ner_spans(recognizer: ner.SpacyRecognizer, texts: list[str]) -> list[list[Span]]:
    return [[(m.start, m.end, TYPES[m.type]) for m in found] for found in recognizer.recognize(texts)]


def prf(tp: int, predicted: int, gold: int) -> dict[str, float]:
    p = tp / predicted if predicted else 0.0
    r = tp / gold if gold else 0.0
    return {"precision": round(p, 4), "recall": round(r, 4), "f1": round(2 * p * r / (p + r) if p + r else 0.0, 4),
            "tp": tp, "predicted": predicted, "gold": gold}


def score(rows: list[dict[str, Any]], predictions: list[list[Span]]) -> dict[str, Any]:
    """Exact (span + type) and span-only figures, overall, per source and per type."""
    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for row, predicted in zip(rows, predictions, strict=True):
        gold = {(e["start"], e["end"], e["type"]) for e in row["entities"]}
        gold_spans = {(a, b) for a, b, _ in gold}
        source = "peps" if row["id"].startswith("pep-") else "hotpotqa"
        pred = set(predicted)
        for scope in ("all", source):
            c = counts[scope]
            c["exact_tp"] += len(pred & gold)
            c["span_tp"] += len({(a, b) for a, b, _ in pred} & gold_spans)
            c["predicted"] += len(pred)
            c["predicted_spans"] += len({(a, b) for a, b, _ in pred})
            c["gold"] += len(gold)
        for kind in set(TYPES.values()) - {"CONCEPT"}:
            c = counts[f"type:{kind}"]
            c["exact_tp"] += len({s for s in pred & gold if s[2] == kind})
            c["predicted"] += len({s for s in pred if s[2] == kind})
            c["gold"] += len({s for s in gold if s[2] == kind})
    out: dict[str, Any] = {}
    for scope, c in counts.items():
        out[scope] = {"exact": prf(c["exact_tp"], c["predicted"], c["gold"])}
        if not scope.startswith("type:"):
            out[scope]["span"] = prf(c["span_tp"], c["predicted_spans"], c["gold"])
    return out


def pep_texts() -> list[str]:
    texts = []
    for path in sorted(PEPS.glob("pep-*.rst")):
        parsed = parse_pep(path.read_text(encoding="utf-8"))
        body = parsed[1] if parsed is not None else path.read_text(encoding="utf-8")
        texts.append(body.strip()[:DEFAULT_MAX_CHARS])
    return texts


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--label", default="after")
    args = parser.parse_args(argv)
    rows = [json.loads(line) for line in GOLD.read_text(encoding="utf-8").splitlines() if line.strip()]
    texts = [r["text"] for r in rows]
    recognizer = ner.recognizer()
    if recognizer is None:
        raise SystemExit("the ner extra is not installed (pip install '.[ner]')")
    results: dict[str, Any] = {"label": args.label, "machine": machine(), "sentences": len(rows),
                               "gold_entities": sum(len(r["entities"]) for r in rows), "extractor": recognizer.name}
    started = time.perf_counter()
    recognizer.recognize(["warm up"])
    results["ner_load_s"] = round(time.perf_counter() - started, 3)
    results["quality"] = {"rules": score(rows, [rules_spans(t) for t in texts]),
                          "ner": score(rows, ner_spans(recognizer, texts))}
    docs = pep_texts()
    speed: dict[str, Any] = {"documents": len(docs), "chars": sum(map(len, docs))}
    for name, run in (("rules", lambda: [rules_spans(t) for t in docs]),
                      ("ner", lambda: ner_spans(recognizer, docs))):
        started = time.perf_counter()
        run()
        seconds = time.perf_counter() - started
        speed[name] = {"seconds": round(seconds, 3), "docs_per_minute": round(len(docs) / seconds * 60, 1)}
    speed["ner_over_rules_time"] = round(speed["ner"]["seconds"] / speed["rules"]["seconds"], 2)
    speed["load_average_at_end"] = load_average()
    results["throughput"] = speed
    lines = []
    for extractor, scopes in results["quality"].items():
        for scope in ("all", "peps", "hotpotqa"):
            e, s = scopes[scope]["exact"], scopes[scope]["span"]
            lines.append([f"{extractor} {scope}", e["precision"], e["recall"], e["f1"], s["precision"], s["recall"],
                          s["f1"]])
    print(table(lines, ["extractor / source", "P exact", "R exact", "F1 exact", "P span", "R span", "F1 span"]))
    kinds = sorted(k for k in results["quality"]["ner"] if k.startswith("type:"))
    print(table([[k[5:], *(results["quality"][x][k]["exact"][m] for x in ("rules", "ner")
                            for m in ("precision", "recall", "f1")), results["quality"]["ner"][k]["exact"]["gold"]]
                 for k in kinds],
                ["type", "rules P", "rules R", "rules F1", "ner P", "ner R", "ner F1", "gold"]))
    print(json.dumps(speed, indent=1))
    write_results(results, RESULTS / f"ner-quality-{args.label}.json")
    return results


if __name__ == "__main__":
    main()
