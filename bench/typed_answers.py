"""What answering the typed contract costs the reads: a use case's model against the dicts of the
same rows.

The use cases of ``kg.ops.queries`` answer :mod:`kg.types` models, validated as they are built
(strict, unknown keys refused). On a SQLite (or ``--database-url``) repository of ``--nodes``
nodes with a few properties each, written by one ``kg.ops.nodes.batch``, each read is timed
``--rounds`` times, in turn with its peer (each goes first half the time):

- ``list_prefix``: ``kg.ops.queries.list_prefix`` of ``--limit`` nodes (a ``NodeList``), against
  the same store read mapped to dicts (``kg.store.nodes.list_prefix`` + ``node_dict``, what the
  use case answered before);
- ``get_node``: one node (a ``Node``) against the same read as a dict.

The ratio model / dict of the medians is the contract's cost per read. The HTTP route validated
the dicts into the same model before serialising them, so over HTTP the model is built once
either way (FastAPI dumps a returned model and validates it again: a second pass).

Run: ``python bench/typed_answers.py [--nodes 2000] [--limit 1000] [--rounds 30]``; JSON in
``bench/results/typed_answers.json``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import _common as common  # noqa: E402
from kg.context import OPERATOR, reading, run  # noqa: E402
from kg.index.embedded import EmbeddedVectorIndex  # noqa: E402
from kg.ops import nodes as node_ops  # noqa: E402
from kg.ops import queries  # noqa: E402
from kg.ops import repos as repo_ops  # noqa: E402
from kg.providers.registry import make_embedder  # noqa: E402
from kg.services import Services  # noqa: E402
from kg.settings import Settings  # noqa: E402
from kg.store import nodes as node_store  # noqa: E402
from kg.store.db import Database  # noqa: E402
from kg.store.models import node_dict  # noqa: E402


def _pair(model: Callable[[], Any], plain: Callable[[], Any], rounds: int) -> tuple[list[float], list[float]]:
    """Each call timed ``rounds`` times, alternating which goes first."""
    a: list[float] = []
    b: list[float] = []
    for i in range(rounds):
        order = ((model, a), (plain, b)) if i % 2 == 0 else ((plain, b), (model, a))
        for fn, out in order:
            start = time.perf_counter()
            fn()
            out.append(time.perf_counter() - start)
    return a, b


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--limit", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, common.isolated_database(args.database_url, Path(tmp)) as (url, backend):
        settings = Settings(database_url=url, data_dir=Path(tmp) / "data", embedding_model="fake:hash-384",
                            allow_fake_embedder=True, index_inline=False)
        db = Database(settings.resolved_database_url())
        db.upgrade()
        services = Services(settings=settings, db=db, index=EmbeddedVectorIndex(settings.data_dir),
                            embedder_factory=lambda name: make_embedder(name, allow_fake=True))
        try:
            run(services, OPERATOR, repo_ops.create_repository, "bench")
            run(services, OPERATOR, repo_ops.create_workspace, "bench", "w")
            run(services, OPERATOR, node_ops.batch, "bench", "main", upserts=[
                {"workspace": "w", "path": f"/n{i:05d}", "node_type": "kb:Item",
                 "properties": {"rank": i, "score": i / 7, "tags": ["a", "b"], "status": "open"}}
                for i in range(args.nodes)])

            def plain_prefix() -> list[dict[str, Any]]:
                with reading(services, OPERATOR, "bench", "main", None) as (session, view):
                    rows, _ = node_store.list_prefix(session, view, "w", "/", limit=args.limit, cursor=None,
                                                     mode="segments")
                    return [node_dict(v, "w") for v in rows]

            def plain_node() -> dict[str, Any]:
                with reading(services, OPERATOR, "bench", "main", None) as (session, view):
                    return node_dict(node_store.get_node(session, view, "w", "/n00042"), "w")

            figures: dict[str, Any] = {}
            for name, model, plain in (
                    ("list_prefix", lambda: queries.list_prefix(services, OPERATOR, "bench", "main", "w", "/",
                                                                limit=args.limit), plain_prefix),
                    ("get_node", lambda: queries.get_node(services, OPERATOR, "bench", "main", "w", "/n00042"),
                     plain_node)):
                model(), plain()  # warm up
                a, b = _pair(model, plain, args.rounds)
                figures[name] = {"model": common.summary_ms(a), "dict": common.summary_ms(b),
                                 "ratio_median": statistics.median(a) / statistics.median(b)}
        finally:
            services.close()
    rows = [(name, f"{f['model']['median_ms']:.2f}", f"{f['dict']['median_ms']:.2f}", f"{f['ratio_median']:.3f}")
            for name, f in figures.items()]
    print(common.table(rows, ["read", "model median ms", "dict median ms", "model / dict"]))
    load = common.load_average()
    print(f"backend {backend}, {args.nodes} nodes, limit {args.limit}, {args.rounds} rounds, load average {load}")
    common.write_results({"bench": "typed_answers", "backend": backend, "nodes": args.nodes, "limit": args.limit,
                          "rounds": args.rounds, "load_average": load, "machine": common.machine(),
                          "figures": figures}, common.RESULTS / "typed_answers.json")


if __name__ == "__main__":
    main()
