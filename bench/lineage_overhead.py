"""Issue 17's overhead of lineage on the write path: a PUT that replaces a node, with and
without records derived from it.

Library calls in this process (``kg.context.run`` of ``kg.ops.nodes.put_node``: no HTTP, so the
ratio is kg's own work), the deterministic offline ``fake:hash-384`` embedder, inline indexing
off (the embedding job is queued, not run: what is timed is the transaction). Figures, each the
median over ``--rounds`` of the p50 of ``--block`` PUTs, interleaved (one PUT of each figure per
step, rotating order), texts alternating between two versions so every PUT changes the text:

1. ``plain``: a node nothing was derived from (the one indexed lookup of derived edges).
2. ``plain_no_lineage``: the same with :func:`kg.ops.lineage.refresh_derived` replaced by a
   no-op, the write path before lineage (the lookup's own cost is ``plain`` minus this).
3. ``mentioned``: a node ``extract-entities`` derived ``--entities`` entities from; both
   texts name them all, so every PUT restamps each ``mentioned_in`` edge.
4. ``cited``: a node a stored answer cites; each PUT re-chunks it and compares the cited
   passage's hash (the answer is marked stale once, then left as it is).

Printed per figure: p50, the ratio to ``plain_no_lineage`` and to ``plain``, the SQL
statements of one PUT and how many of them lineage issued (inside ``refresh_derived``). JSON
in ``bench/results/lineage_overhead_<backend>.json``. SQLite in a temporary folder by default;
``--postgres URL`` uses a fresh schema of that server::

    .venv/bin/python bench/lineage_overhead.py [--rounds 10] [--block 20] [--entities 8] [--postgres URL]
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy is imported

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import TYPE_CHECKING, Any  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import RESULTS, isolated_database, machine, redact, table, write_results  # noqa: E402

if TYPE_CHECKING:
    from kg.context import Actor
    from kg.services import Services

MODEL = "fake:hash-384"
NAMES = [
    "Ada Lovelace",
    "Charles Babbage",
    "Mary Somerville",
    "Augustus De Morgan",
    "Michael Faraday",
    "John Herschel",
    "Luigi Menabrea",
    "Andrew Crosse",
    "Howard Aiken",
    "Alan Turing",
    "Grace Hopper",
    "Claude Shannon",
]


def _texts(entities: int) -> tuple[str, str]:
    names = NAMES[:entities]
    one = "Correspondence. " + " ".join(f"{n} wrote to the society in spring." for n in names)
    two = "Correspondence, revised. " + " ".join(f"{n} wrote to the society in autumn." for n in names)
    return one, two


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--block", type=int, default=20)
    parser.add_argument("--entities", type=int, default=8)
    parser.add_argument("--postgres", default=None)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    args.entities = max(1, min(args.entities, len(NAMES)))

    from sqlalchemy import event

    import kg.ops.texts as texts
    from kg.context import OPERATOR, run
    from kg.ops import nodes as node_ops
    from kg.ops import repos as repo_ops
    from kg.rag.entities import extract_entities
    from kg.services import Services
    from kg.settings import Settings

    with tempfile.TemporaryDirectory() as tmp, isolated_database(args.postgres, Path(tmp)) as (url, backend):
        settings = Settings(
            database_url=url,
            data_dir=Path(tmp) / "data",
            embedding_model=MODEL,
            allow_fake_embedder=True,
            index_inline=False,
            ask_min_similarity=0.0,
        )
        services = Services.from_settings(settings)
        services.db.upgrade()
        run(services, OPERATOR, repo_ops.create_repository, "bench")
        run(services, OPERATOR, repo_ops.create_workspace, "bench", "kb")
        one, two = _texts(args.entities)
        rigging = (
            "Standing rigging must be replaced every ten years in temperate waters.",
            "Standing rigging must be replaced every twelve years in temperate waters.",
        )

        def put(path: str, text: str) -> None:
            run(
                services,
                OPERATOR,
                node_ops.put_node,
                "bench",
                "main",
                "kb",
                path,
                node_type="kb:Doc",
                properties={"content": text},
            )

        for path in ("/plain", "/mentioned"):
            put(path, one)
        put("/cited", rigging[0])
        extracted = extract_entities(services, OPERATOR, "bench", "main", {"workspace": "kb", "path": "/mentioned"})

        figures: dict[str, dict[str, Any]] = {}
        statements: list[str] = []

        def counted(*a: Any) -> None:
            statements.append(a[2])

        original = texts.refresh_derived  # type: ignore[attr-defined]  # patched where the write path calls it

        inside: list[int] = []

        def watched(*a: Any, **k: Any) -> Any:
            before = len(statements)
            try:
                return original(*a, **k)
            finally:
                inside.append(len(statements) - before)

        def hooked(hook: bool) -> None:
            texts.refresh_derived = watched if hook else (lambda *a, **k: None)  # type: ignore[attr-defined,assignment]

        cited = ask_and_store(services, OPERATOR)
        plans = [
            ("plain_no_lineage", "/plain", (one, two), False),
            ("plain", "/plain", (one, two), True),
            ("mentioned", "/mentioned", (one, two), True),
            ("cited", "/cited", rigging, True),
        ]
        turn = {name: 0 for name, *_ in plans}
        samples: dict[str, list[list[float]]] = {name: [] for name, *_ in plans}
        try:
            for name, path, versions, hook in plans:  # warm-up, then one PUT counted
                hooked(hook)
                for _ in range(4):
                    turn[name] += 1
                    put(path, versions[turn[name] % 2])
                statements.clear()
                inside.clear()
                event.listen(services.db.engine, "before_cursor_execute", counted)
                turn[name] += 1
                put(path, versions[turn[name] % 2])
                event.remove(services.db.engine, "before_cursor_execute", counted)
                figures[name] = {"statements": len(statements), "lineage_statements": sum(inside)}
            # Interleaved: each step is one PUT of every figure, in a rotating order, so all see
            # the same machine load (this machine's cores are shared).
            for _ in range(args.rounds):
                block: dict[str, list[float]] = {name: [] for name, *_ in plans}
                for step in range(args.block):
                    for name, path, versions, hook in plans[step % 4 :] + plans[: step % 4]:
                        hooked(hook)
                        turn[name] += 1
                        start = time.perf_counter()
                        put(path, versions[turn[name] % 2])
                        block[name].append(time.perf_counter() - start)
                for name in block:
                    samples[name].append(block[name])
        finally:
            texts.refresh_derived = original  # type: ignore[attr-defined]
        for name in figures:
            rounds = [statistics.median(b) for b in samples[name]]
            figures[name]["p50_ms"] = round(statistics.median(rounds) * 1000, 3)
            figures[name]["round_p50s_ms"] = [round(r * 1000, 3) for r in rounds]
        services.close()

    base, plain = figures["plain_no_lineage"]["p50_ms"], figures["plain"]["p50_ms"]
    rows = [
        (
            name,
            f["p50_ms"],
            round(f["p50_ms"] / base, 3),
            round(f["p50_ms"] / plain, 3),
            f["statements"],
            f["lineage_statements"],
        )
        for name, f in figures.items()
    ]
    print(table(rows, ["figure", "p50 ms", "/ no lineage", "/ plain", "statements", "of which lineage"]))
    results = {
        "bench": "lineage_overhead",
        "backend": backend,
        "database": redact(url),
        "machine": machine(),
        "rounds": args.rounds,
        "block": args.block,
        "entities": len(extracted.entities),
        "answer_citations": cited,
        "figures": figures,
    }
    write_results(results, args.out or RESULTS / f"lineage_overhead_{backend}.json")


def ask_and_store(services: Services, caller: Actor) -> int:
    """Store an answer citing /cited (extractive, no model); the number of its citations."""
    from kg.rag.functions import ask

    services.indexer.drain()  # search needs the chunks embedded and indexed
    out = ask(
        services,
        caller,
        "bench",
        "main",
        {
            "question": "How often must standing rigging be replaced?",
            "store_answer": {"workspace": "kb", "path": "/answers/a"},
        },
    )
    return len(out.citations)


if __name__ == "__main__":
    main()
