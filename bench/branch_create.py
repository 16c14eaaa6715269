"""Benchmark of branch creation: its cost must not depend on the size of the repository.

Two repositories in one database, one of ``--small`` nodes and one of ``--large`` nodes (a
small hierarchy: ``/section-k`` folders of ``--section-size`` nodes ``/section-k/node-i`` with
small realistic properties), written through the store API in transactions of ``--batch``
nodes. Branches are then created the way ``POST /api/repos/{repo}/branches`` does it: one
``db.write()`` transaction taking the repository's row lock and writing the branch row.

Creations alternate between the two repositories (small-large, then large-small, ...) after
``--warmup`` unmeasured rounds, so drift in the machine's load falls on both alike. Reports
median and p90 per repository and the ratio large / small of the medians (the issue: under
1.5). As a check that nothing was copied, it counts ``node_versions`` rows before and after,
and the nodes the last new branch of each repository sees.

Prints a table and writes JSON (default ``bench/results/branch_create.json``, or
``branch_create_postgresql.json`` on PostgreSQL).
Run: ``python bench/branch_create.py [--small 100] [--large 20000] [--repeats 50]
[--database-url postgresql+psycopg://postgres@127.0.0.1:5432/test]``.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sqlalchemy import func, select  # noqa: E402

from bench._common import (  # noqa: E402
    RESULTS,
    isolated_database,
    load_average,
    machine,
    redact,
    summary_ms,
    table,
    write_results,
)
from kg.store.db import Database  # noqa: E402
from kg.store.models import Branch, NodeVersion  # noqa: E402
from kg.store.nodes import NodeWrite, put_node  # noqa: E402
from kg.store.repos import (  # noqa: E402
    begin_write,
    branch_view,
    create_branch,
    create_repository,
    create_workspace,
    get_repository,
)
from kg.store.visibility import visible_select  # noqa: E402

WORKSPACE = "knowledge"
STATUSES = ("draft", "review", "published", "archived")
OWNERS = ("ada", "grace", "linus", "barbara", "ken", "margaret")
TAGS = ("api", "storage", "search", "graph", "ops", "security", "docs", "billing")


def node_properties(rng: random.Random, section: int, i: int) -> dict:
    """Small properties of the kind a real node carries (a few hundred bytes of JSON)."""
    return {
        "title": f"Item {i} of section {section}",
        "summary": f"Notes on {rng.choice(TAGS)} for team {rng.choice(OWNERS)}, "
                   f"revision {rng.randint(1, 9)}.",
        "status": rng.choice(STATUSES),
        "owner": rng.choice(OWNERS),
        "priority": rng.randint(1, 5),
        "score": round(rng.random(), 4),
        "tags": rng.sample(TAGS, k=rng.randint(1, 3)),
    }


def build_repository(db: Database, name: str, n_nodes: int, *, section_size: int,
                     batch: int, seed: int) -> dict:
    """Create ``name`` with ``n_nodes`` leaf nodes under ``/section-k`` folders.

    Returns the number of sections, node versions written and the seconds it took.
    """
    rng = random.Random(seed)
    started = time.perf_counter()
    with db.write() as session:
        repo = create_repository(session, name=name)
        create_workspace(session, repo, name=WORKSPACE)
    written = 0
    sections = 0
    i = 0
    while i < n_nodes:
        with db.write() as session:
            ctx = begin_write(session, name, message=f"bench load {i}")
            stop = min(n_nodes, i + batch)
            while i < stop:
                section, offset = divmod(i, section_size)
                if offset == 0:
                    section_props = {"title": f"Section {section}", "order_hint": section}
                    put_node(session, ctx, WORKSPACE, f"/section-{section}",
                             NodeWrite("Section", section_props, None, None))
                    sections += 1
                    written += 1
                put_node(session, ctx, WORKSPACE, f"/section-{section}/node-{i}",
                         NodeWrite("Item", node_properties(rng, section, i), None, None))
                written += 1
                i += 1
        if n_nodes > batch:
            print(f"  {name}: {i}/{n_nodes} nodes, {time.perf_counter() - started:.1f} s",
                  file=sys.stderr, flush=True)
    return {"nodes": n_nodes, "sections": sections, "node_versions_written": written,
            "setup_s": round(time.perf_counter() - started, 2)}


def count_node_versions(db: Database, repo: str | None = None) -> int:
    """Rows of ``node_versions`` (of one repository, or all)."""
    with db.read() as session:
        stmt = select(func.count()).select_from(NodeVersion)
        if repo is not None:
            stmt = stmt.where(NodeVersion.repo_id == get_repository(session, repo).id)
        return session.scalar(stmt) or 0


def count_visible(db: Database, repo: str, branch: str) -> int:
    """Nodes that ``branch`` of ``repo`` sees."""
    with db.read() as session:
        view = branch_view(session, repo, branch)
        stmt, _ = visible_select(NodeVersion, view, (NodeVersion.workspace_id, NodeVersion.path))
        return session.scalar(select(func.count()).select_from(stmt.subquery())) or 0


def create_one(db: Database, repo: str, name: str) -> float:
    """Create branch ``name`` from ``main`` as the HTTP route does; seconds taken."""
    started = time.perf_counter()
    with db.write() as session:
        r = get_repository(session, repo, lock=True)
        create_branch(session, r, name=name)
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=None,
                        help="SQLAlchemy URL (default: a SQLite file in a fresh temp dir); "
                             "PostgreSQL runs in a fresh schema dropped afterwards")
    parser.add_argument("--small", type=int, default=100, help="nodes in the small repository")
    parser.add_argument("--large", type=int, default=20_000, help="nodes in the large repository")
    parser.add_argument("--repeats", type=int, default=50, help="timed creations per repository")
    parser.add_argument("--warmup", type=int, default=5, help="untimed creations per repository")
    parser.add_argument("--section-size", type=int, default=100, help="nodes per /section-k")
    parser.add_argument("--batch", type=int, default=1000, help="nodes per setup transaction")
    parser.add_argument("--out", type=Path, default=None,
                        help="JSON file (default bench/results/branch_create.json on SQLite, "
                             "branch_create_<backend>.json on another database)")
    args = parser.parse_args(argv)

    results: dict = {"machine": machine()}
    with tempfile.TemporaryDirectory(prefix="kg-bench-") as tmp, \
            isolated_database(args.database_url, Path(tmp)) as (url, backend):
        results["database"] = {"backend": backend, "url": redact(url)}
        db = Database(url)
        try:
            db.upgrade()
            repos = {"small": ("bench-small", args.small), "large": ("bench-large", args.large)}
            setup = {}
            for label, (name, n) in repos.items():
                print(f"loading {n} nodes into {name} ...", file=sys.stderr, flush=True)
                setup[label] = build_repository(db, name, n, section_size=args.section_size,
                                                batch=args.batch, seed=len(label))
            results["setup"] = setup
            before = {label: count_node_versions(db, name) for label, (name, _) in repos.items()}
            total_before = count_node_versions(db)

            samples: dict[str, list[float]] = {"small": [], "large": []}
            order = ["small", "large"]
            results["load_average_before_timing"] = load_average()
            for r in range(args.warmup + args.repeats):
                for label in (order if r % 2 == 0 else order[::-1]):
                    name = repos[label][0]
                    timed = r >= args.warmup
                    seconds = create_one(db, name, f"bench/{'run' if timed else 'warmup'}-{r:04d}")
                    if timed:
                        samples[label].append(seconds)
            results["load_average_after_timing"] = load_average()

            after = {label: count_node_versions(db, name) for label, (name, _) in repos.items()}
            total_after = count_node_versions(db)
            last = f"bench/run-{args.warmup + args.repeats - 1:04d}"
            with db.read() as session:
                branches = session.scalar(select(func.count()).select_from(Branch)) or 0
            for label, (name, _) in repos.items():
                stats = summary_ms(samples[label])
                stats.update({
                    "nodes": repos[label][1],
                    "node_versions_before": before[label],
                    "node_versions_after": after[label],
                    "visible_on_main": count_visible(db, name, "main"),
                    "visible_on_last_new_branch": count_visible(db, name, last),
                })
                results[label] = stats
            results["node_versions_total_before"] = total_before
            results["node_versions_total_after"] = total_after
            results["branches_total"] = branches
            results["repeats"] = args.repeats
            results["warmup"] = args.warmup
            results["ratio_large_over_small_median"] = round(
                results["large"]["median_ms"] / results["small"]["median_ms"], 3)
            results["ratio_large_over_small_p90"] = round(
                results["large"]["p90_ms"] / results["small"]["p90_ms"], 3)
            results["samples_ms"] = {k: [round(s * 1000, 3) for s in v] for k, v in samples.items()}
        finally:
            db.dispose()

    print(f"branch creation on {backend} ({redact(url)}), {args.repeats} runs each after "
          f"{args.warmup} warm-up, load average {results['load_average_before_timing']} -> "
          f"{results['load_average_after_timing']}")
    rows = []
    for label in ("small", "large"):
        s = results[label]
        rows.append([f"{label} ({s['nodes']} nodes)", s["median_ms"], s["p90_ms"], s["min_ms"],
                     s["max_ms"], f"{s['node_versions_before']} -> {s['node_versions_after']}",
                     f"{s['visible_on_main']} / {s['visible_on_last_new_branch']}",
                     f"{setup[label]['setup_s']} s"])
    print(table(rows, ["repository", "median ms", "p90 ms", "min ms", "max ms",
                       "node_versions before -> after", "visible main / branch", "setup"]))
    print(f"ratio large/small: median {results['ratio_large_over_small_median']}, "
          f"p90 {results['ratio_large_over_small_p90']} (target: median under 1.5)")
    print(f"node_versions rows in the database: {total_before} before, {total_after} after "
          f"creating {2 * (args.warmup + args.repeats)} branches")
    out = args.out or RESULTS / (
        "branch_create.json" if backend == "sqlite" else f"branch_create_{backend}.json")
    write_results(results, out)
    return results


if __name__ == "__main__":
    main()
