"""Entity typing of the deterministic extractor (no LLM) on 100 hand-checked entities.

``bench/data/entity_types.jsonl`` holds 100 entity names that the deterministic extractor (kg
before issue 15) found in the shared datasets, 50 in 40 PEPs (``python-peps/docs``, the body's
first 8,000 characters, PEP cross-references left out) and 50 in 200 HotpotQA-500 passages
(title and text), sampled with ``random.Random(15)``; each was labelled by hand with
its type among ``person, organization, place, product, concept, event`` (creative works are
products, awards and periods concepts), or ``none`` when it is no entity (a section heading, a
fragment such as "Python I" of "Python I/O", "Tools MUST").

For every labelled name the extractor is run on its source text and the candidate of the same
slug is looked up: its type, or ``dropped`` when it is no longer extracted. Figures:

- ``type_precision``: among the names still extracted, the share whose type is the label (a
  ``none`` extracted is wrong whatever its type);
- ``accuracy_all``: over all 100, the type is the label, or the name is dropped and labelled
  ``none``;
- ``none_dropped`` / ``entities_dropped``: labelled non-entities dropped, real entities lost.

Run: ``python bench/entity_types.py DATASETS [--label before|after]``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import RESULTS, write_results  # noqa: E402
from kg.ops.formats.pep import parse_pep  # noqa: E402
from kg.rag.entities import collect, deterministic_entities, slugify  # noqa: E402

DATA = ROOT / "bench" / "data" / "entity_types.jsonl"


def source_text(datasets: Path, source: str, passages: dict[str, dict]) -> str:
    """The text the label's name was found in."""
    if source.startswith("python-peps/"):
        parsed = parse_pep((datasets / source).read_text(encoding="utf-8"))
        assert parsed is not None
        return parsed[1][:8000]
    doc = passages[source.split("#", 1)[1]]
    return f"{doc['title']}\n\n{doc['text']}"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("datasets", type=Path)
    parser.add_argument("--label", default="after")
    args = parser.parse_args(argv)
    labels = [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines()]
    wanted = {r["source"].split("#", 1)[1] for r in labels if "#" in r["source"]}
    passages = {}
    for line in (args.datasets / "hotpotqa-500" / "corpus.jsonl").read_text(encoding="utf-8").splitlines():
        doc = json.loads(line)
        if doc["_id"] in wanted:
            passages[doc["_id"]] = doc
    rows = []
    for r in labels:
        entities, _ = collect(deterministic_entities(source_text(args.datasets, r["source"], passages)))
        by_slug = {e.slug: e.type for e in entities}
        rows.append({**r, "predicted": by_slug.get(slugify(r["name"]), "dropped")})
    extracted = [r for r in rows if r["predicted"] != "dropped"]
    results = {
        "label": args.label, "entities": len(rows),
        "type_precision": round(sum(r["predicted"] == r["gold"] for r in extracted) / max(1, len(extracted)), 4),
        "extracted": len(extracted),
        "accuracy_all": round(sum(r["predicted"] == r["gold"] or (r["predicted"] == "dropped" and r["gold"] == "none")
                                  for r in rows) / len(rows), 4),
        "none_labelled": sum(r["gold"] == "none" for r in rows),
        "none_dropped": sum(r["gold"] == "none" and r["predicted"] == "dropped" for r in rows),
        "entities_dropped": sum(r["gold"] != "none" and r["predicted"] == "dropped" for r in rows),
        "confusions": Counter(f"{r['gold']}->{r['predicted']}" for r in rows if r["gold"] != r["predicted"]),
        "rows": rows,
    }
    print(json.dumps({k: v for k, v in results.items() if k != "rows"}, indent=1))
    write_results(results, RESULTS / f"entity-types-{args.label}.json")
    return results


if __name__ == "__main__":
    main()
