"""Benchmark of NEIGHBORS with validity filtering (issue 17), on SQLite and PostgreSQL.

Two repositories of the same shape, ``--relations`` relations in all (default 20,000): a hub
``knowledge:/hub`` with ``--hub`` (default 2,000) outgoing edges to leaves, and noise edges
between random leaves.

- ``plain``: no relation carries a validity: the baseline, what the code did before issue 17
  (the view's NEIGHBORS is a slice of the hub's sorted edges; the SQL winners' statement has
  no temporal predicate).
- ``timed``: of the hub's edges, one in four ended in the past (``valid_to`` 2020), one in
  eight starts in the future (``valid_from`` 2999), one in eight holds over a closed
  interval around now; the rest carry none.

NEIGHBORS of the hub (limit 100), ``--repeat`` calls each, p50 / p95, through SQL (no view
held) and through the networkx view (after a traverse built it):

- ``current``: the default, relations valid now (the filter inside retrieval, before the cut);
- ``include_invalid``: every relation (no temporal predicate: the same statement as before);
- ``baseline``: the ``plain`` repository read with the default (nothing to filter).

Prints the ratios ``current / baseline`` and ``current / include_invalid`` and writes JSON
(``bench/results/validity_neighbors.json``; ``--out``). Run:
``python bench/validity_neighbors.py [--database-url postgresql+psycopg://...]``.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import insert, text

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import RESULTS, isolated_database, machine, percentile, redact, write_results  # noqa: E402
from kg.context import OPERATOR, run  # noqa: E402
from kg.graph.cache import GraphCache  # noqa: E402
from kg.ops import repos as repo_ops  # noqa: E402
from kg.rag.graph import neighbors, walk  # noqa: E402
from kg.services import Services  # noqa: E402
from kg.settings import Settings  # noqa: E402
from kg.store.models import NodeVersion, RelationVersion, utcnow  # noqa: E402
from kg.store.nodes import node_uid  # noqa: E402
from kg.store.repos import begin_write  # noqa: E402

WS = "knowledge"
PAST, FUTURE = datetime(2020, 1, 1, tzinfo=UTC), datetime(2999, 1, 1, tzinfo=UTC)


def load(services: Services, repo: str, n_relations: int, n_hub: int, *, timed: bool, seed: int) -> None:
    """One repository of the benchmark's shape, by bulk inserts of the columns the store writes."""
    rng = random.Random(seed)
    run(services, OPERATOR, repo_ops.create_repository, repo)
    run(services, OPERATOR, repo_ops.create_workspace, repo, WS, None)
    n_leaves = max(n_hub, 5_000)
    with services.db.write() as session:
        ctx = begin_write(session, repo, "main", message="bench: validity")
        wid = next(w for w, name in ctx.view.workspaces.items() if name == WS)
        now = utcnow()

        def node(path: str) -> dict:
            parent, name = path.rsplit("/", 1)
            return {
                "repo_id": ctx.repo.id,
                "branch_id": ctx.branch.id,
                "workspace_id": wid,
                "revision": ctx.revision,
                "node_id": node_uid(ctx.repo.uid, wid, path),
                "path": path,
                "parent_path": parent or "/",
                "name": name,
                "node_type": "kg:Node",
                "properties": {},
                "order": None,
                "deleted": False,
                "content_key": None,
                "created_at": now,
                "updated_at": now,
            }

        hub, folder = node("/hub"), node("/leaves")
        leaves = [node(f"/leaves/l{i:06d}") for i in range(n_leaves)]
        session.execute(insert(NodeVersion), [hub, folder, *leaves])

        def rel(f: dict, t: dict, weight: float, vf: datetime | None = None, vt: datetime | None = None) -> dict:
            return {
                "repo_id": ctx.repo.id,
                "branch_id": ctx.branch.id,
                "revision": ctx.revision,
                "from_node_id": f["node_id"],
                "to_node_id": t["node_id"],
                "rel_type": "has",
                "weight": weight,
                "properties": {},
                "deleted": False,
                "created_at": now,
                "from_address": f"{WS}:{f['path']}",
                "to_address": f"{WS}:{t['path']}",
                "valid_from": vf,
                "valid_to": vt,
                "invalidated_by": None,
            }

        rows = []
        for i in range(n_hub):
            weight = float(rng.random())
            if not timed or i % 8 >= 4:
                rows.append(rel(hub, leaves[i], weight))
            elif i % 8 < 2:
                rows.append(rel(hub, leaves[i], weight, vt=PAST))  # over
            elif i % 8 == 2:
                rows.append(rel(hub, leaves[i], weight, vf=FUTURE))  # not yet
            else:
                rows.append(rel(hub, leaves[i], weight, vf=PAST, vt=FUTURE))  # holds now
        pairs: set[tuple[int, int]] = set()
        while len(pairs) < n_relations - n_hub:
            a, b = rng.randrange(n_leaves), rng.randrange(n_leaves)
            if a != b:
                pairs.add((a, b))
        rows += [rel(leaves[a], leaves[b], rng.random()) for a, b in sorted(pairs)]
        for start in range(0, len(rows), 10_000):
            session.execute(insert(RelationVersion), rows[start : start + 10_000])
    if services.db.dialect == "postgresql":
        with services.db.engine.connect() as conn:
            conn.execute(text("ANALYZE node_versions"))
            conn.execute(text("ANALYZE relation_versions"))


def p(samples_s: list[float]) -> dict[str, float]:
    ms = [s * 1000 for s in samples_s]
    return {"n": len(ms), "p50_ms": round(percentile(ms, 50), 3), "p95_ms": round(percentile(ms, 95), 3)}


def timed_calls(fn, repeat: int) -> tuple[list[float], Any]:
    out, samples = fn(), []  # one warm-up call
    for _ in range(repeat):
        started = time.perf_counter()
        out = fn()
        samples.append(time.perf_counter() - started)
    return samples, out


def figures(services: Services, repeat: int, limit: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path in ("sql", "view"):
        services.graphs.clear()
        if path == "view":
            for repo in ("plain", "timed"):
                walk(services, OPERATOR, repo, "main", [f"{WS}:/hub"], hops=1, max_nodes=10, fan_out=10)
            services.graphs.join_builds()
            assert len(services.graphs) == 2, "the views were not built"
        cases = {"current": ("timed", False), "include_invalid": ("timed", True), "baseline": ("plain", False)}
        row: dict[str, Any] = {}
        answers: dict[str, Any] = {}
        for name, (repo, include_invalid) in cases.items():
            samples, answers[name] = timed_calls(
                lambda repo=repo, inc=include_invalid: neighbors(
                    services, OPERATOR, repo, "main", f"{WS}:/hub", direction="OUT", limit=limit, include_invalid=inc
                ),
                repeat,
            )
            row[name] = p(samples)
        if path == "sql":
            assert len(services.graphs) == 0
        assert len(answers["current"]["neighbors"]) == limit and answers["current"]["truncated"]
        row["current_over_baseline_p50"] = round(row["current"]["p50_ms"] / row["baseline"]["p50_ms"], 2)
        row["current_over_include_invalid_p50"] = round(row["current"]["p50_ms"] / row["include_invalid"]["p50_ms"], 2)
        out[path] = row
        print(
            f"{path:4}: current p50 {row['current']['p50_ms']:7.2f} ms p95 {row['current']['p95_ms']:7.2f} | "
            f"include_invalid p50 {row['include_invalid']['p50_ms']:7.2f} ms | "
            f"baseline p50 {row['baseline']['p50_ms']:7.2f} ms | current/baseline "
            f"{row['current_over_baseline_p50']:.2f}x, current/include_invalid "
            f"{row['current_over_include_invalid_p50']:.2f}x",
            flush=True,
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--relations", type=int, default=20_000)
    parser.add_argument("--hub", type=int, default=2_000)
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--limit", type=int, default=100)
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--database-url", default=None, help="default: a SQLite file in a temporary folder")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, isolated_database(args.database_url, Path(tmp)) as (url, backend):
        settings = Settings(
            database_url=url,
            data_dir=Path(tmp) / "data",
            embedding_model="fake:hash-64",
            index_inline=True,
            allow_fake_embedder=True,
        )
        services = Services.from_settings(settings)
        services.graphs = GraphCache(settings.graph_max_edges)
        services.db.upgrade()
        try:
            print(f"{backend}: {args.relations} relations per repository, hub of {args.hub} edges", flush=True)
            load(services, "plain", args.relations, args.hub, timed=False, seed=args.seed)
            load(services, "timed", args.relations, args.hub, timed=True, seed=args.seed)
            results = {
                "benchmark": "validity_neighbors",
                "backend": backend,
                "database": redact(args.database_url) if args.database_url else "sqlite (temporary)",
                "relations": args.relations,
                "hub_edges": args.hub,
                "limit": args.limit,
                "repeat": args.repeat,
                "machine": machine(),
                "figures": figures(services, args.repeat, args.limit),
            }
        finally:
            services.close()
    write_results(results, args.out or RESULTS / f"validity_neighbors_{backend}.json")


if __name__ == "__main__":
    main()
