"""Benchmark of diff and merge: their cost must grow with the changes, not with the repository.

The issue: diff and merge of a branch with 100 changes on a 100,000-node repository cost under
twice the same on a 1,000-node repository; and creating a branch of a 100,000-node repository
costs under 1.5 times creating one of a 100-node repository.

1. Three repositories in one database: ``--tiny`` nodes (branch creation only), ``--small`` and
   ``--large`` nodes: ``/s{k}`` sections of ``--section-size`` nodes ``/s{k}/n{i}`` with small
   properties, and a ``links`` relation from every tenth leaf to the next. FOR SET-UP SPEED the
   node and relation versions are inserted in bulk (``insert(NodeVersion)`` with the columns
   ``kg.store.nodes.put_node`` writes, ``--batch`` rows per transaction, each transaction one
   revision opened with ``begin_write``); everything measured goes through kg's own functions.
   On PostgreSQL the tables are then ANALYZEd (what autovacuum does after a bulk load; skip it
   with ``--no-analyze``); SQLite gets no ANALYZE (kg never runs one).
2. Branch creation, as ``POST /branches`` does it (one write transaction, repository row lock,
   one row), alternating tiny / large after ``--warmup`` rounds: medians and the ratio.
3. Per repetition and repository (alternating which goes first): a fresh branch from ``main``,
   100 node changes written on it through the store API in four transactions (40 modify, 40
   add, 20 delete) plus 5 relation changes (3 added, 1 re-weighted, 1 removed); then timed:
   ``kg.store.history.diff_branches`` (in a read session, as the route), ``kg.ops.merge.
   preview_merge(...)`` and the real ``merge_branch`` into ``main``. The answers
   are checked (100 node and 5 relation changes reported and applied). Medians and p90 per
   repository and the ratio large / small of the medians.

Prints a table and writes JSON (default ``bench/results/diff_merge.json``, or
``diff_merge_<backend>[_no_analyze].json`` on another database; ``--out`` to choose). Run: ``python
bench/diff_merge.py [--large 100000] [--repeats 10] [--database-url
postgresql+psycopg://postgres@127.0.0.1:5432/test]``.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy is imported

import argparse  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import ParamSpec, TypeVar  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sqlalchemy import func, insert, select, text  # noqa: E402

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
from kg import context  # noqa: E402
from kg.index.embedded import EmbeddedVectorIndex  # noqa: E402
from kg.ops.merge import merge_branch, preview_merge  # noqa: E402
from kg.providers.registry import make_embedder  # noqa: E402
from kg.services import Services  # noqa: E402
from kg.settings import Settings  # noqa: E402
from kg.store import nodes as node_store  # noqa: E402
from kg.store import relations as relation_store  # noqa: E402
from kg.store.db import Database  # noqa: E402
from kg.store.history import diff_branches  # noqa: E402
from kg.store.models import NodeVersion, RelationVersion, utcnow  # noqa: E402
from kg.store.nodes import NodeWrite, node_uid  # noqa: E402
from kg.store.paths import name_of, parent_of  # noqa: E402
from kg.store.repos import begin_write, create_branch, create_repository, create_workspace, get_repository  # noqa: E402
from kg.types.branches import MergeResult  # noqa: E402

P = ParamSpec("P")
T = TypeVar("T")

WORKSPACE = "knowledge"
MODEL = "fake:hash-64"
STATUSES = ("draft", "review", "published", "archived")
OWNERS = ("ada", "grace", "linus", "barbara", "ken", "margaret")
N_MODIFY, N_ADD, N_DELETE = 40, 40, 20


@dataclass
class Repo:
    """A benchmark repository and what the change generator may still touch."""

    name: str
    nodes: int
    sections: int
    alive: list[str] = field(default_factory=list)              # leaf paths still on main
    links: list[tuple[str, str]] = field(default_factory=list)  # main's relations (from, to) paths
    cited: set[str] = field(default_factory=set)                # ends of the 'cites' edges written
    setup_s: float = 0.0


def properties(rng: random.Random, label: str) -> dict:
    """Small properties of the kind a real node carries."""
    return {"title": label, "status": rng.choice(STATUSES), "owner": rng.choice(OWNERS),
            "priority": rng.randint(1, 5), "score": round(rng.random(), 4)}


def make_services(url: str, data_dir: Path) -> Services:
    """Services on ``url`` with the fake embedder; no background indexer (nothing here has a
    content key, so nothing is queued)."""
    settings = Settings(database_url=url, data_dir=data_dir, embedding_model=MODEL)
    db = Database(settings.resolved_database_url())
    db.upgrade()
    return Services(settings=settings, db=db, index=EmbeddedVectorIndex(settings.data_dir),
                    embedder_factory=lambda name: make_embedder(name, allow_fake=True))


def _node_row(ctx, wid: int, path: str, node_type: str, props: dict, now) -> dict:
    """The columns ``kg.store.nodes.put_node`` writes for a new node."""
    return {"repo_id": ctx.repo.id, "branch_id": ctx.branch.id, "workspace_id": wid,
            "revision": ctx.revision, "node_id": node_uid(ctx.repo.uid, wid, path), "path": path,
            "parent_path": parent_of(path), "name": name_of(path), "node_type": node_type,
            "properties": props, "order": None, "deleted": False, "content_key": None,
            "created_at": now, "updated_at": now}


def bulk_repository(db: Database, name: str, n_nodes: int, *, section_size: int, batch: int,
                    rng: random.Random) -> Repo:
    """``n_nodes`` nodes (sections included) and a relation per ten leaves, in bulk (set-up only)."""
    started = time.perf_counter()
    with db.write() as session:
        repo = create_repository(session, name=name)
        wid = create_workspace(session, repo, name=WORKSPACE).id
    out = Repo(name=name, nodes=n_nodes, sections=0)
    pending_link: str | None = None
    i = 0
    while i < n_nodes:
        with db.write() as session:
            ctx = begin_write(session, name, message=f"bench bulk load {i}")
            now = utcnow()
            rows, rels, ids = [], [], {}
            start = i
            for i in range(start, min(n_nodes, start + batch)):
                section, offset = divmod(i, section_size)
                if offset == 0:
                    path = f"/s{section}"
                    rows.append(_node_row(ctx, wid, path, "Section", {"title": f"Section {section}"}, now))
                    out.sections += 1
                    continue
                path = f"/s{section}/n{i}"
                row = _node_row(ctx, wid, path, "Item", properties(rng, f"Item {i}"), now)
                rows.append(row)
                ids[path] = row["node_id"]
                out.alive.append(path)
                if pending_link is not None and pending_link in ids:
                    rels.append({"repo_id": ctx.repo.id, "branch_id": ctx.branch.id, "revision": ctx.revision,
                                 "from_node_id": ids[pending_link], "to_node_id": row["node_id"],
                                 "rel_type": "links", "weight": 1.0, "properties": {}, "deleted": False,
                                 "created_at": now, "from_address": f"{WORKSPACE}:{pending_link}",
                                 "to_address": f"{WORKSPACE}:{path}"})
                    out.links.append((pending_link, path))
                    pending_link = None
                if i % 10 == 1:
                    pending_link = path
            i += 1
            session.execute(insert(NodeVersion), rows)
            if rels:
                session.execute(insert(RelationVersion), rels)
        if n_nodes > batch:
            print(f"  {name}: {i}/{n_nodes} nodes, {time.perf_counter() - started:.1f} s",
                  file=sys.stderr, flush=True)
    out.setup_s = round(time.perf_counter() - started, 2)
    return out


def analyze(db: Database) -> None:
    """PostgreSQL: refresh planner statistics after the bulk load, as autovacuum would."""
    if db.dialect == "postgresql":
        with db.engine.connect() as conn:
            conn.execute(text("ANALYZE node_versions"))
            conn.execute(text("ANALYZE relation_versions"))
            conn.execute(text("ANALYZE revisions"))
            conn.commit()


def create_one(db: Database, repo: str, name: str) -> float:
    """Create branch ``name`` from ``main`` as the HTTP route does; seconds taken."""
    started = time.perf_counter()
    with db.write() as session:
        create_branch(session, get_repository(session, repo, lock=True), name=name)
    return time.perf_counter() - started


def make_changes(db: Database, repo: Repo, branch: str, rep: int, rng: random.Random) -> None:
    """100 node changes (40 modify, 40 add, 20 delete) and 5 relation changes on ``branch``."""
    # Deleted leaves carry no relation (a delete removes its node's edges, which would change
    # the 5 relation changes measured); the delete still looks for edges to remove.
    linked = {p for link in repo.links for p in link} | repo.cited
    delete = rng.sample([p for p in repo.alive if p not in linked], N_DELETE)
    gone = set(delete)
    modify = rng.sample([p for p in repo.alive if p not in gone], N_MODIFY)
    repo.alive = [p for p in repo.alive if p not in gone]
    adds = [f"/s{rng.randrange(repo.sections)}/r{rep}-a{j}" for j in range(N_ADD)]
    links = [link for link in repo.links if link[0] not in gone and link[1] not in gone]
    reweight, removed = rng.sample(links, 2)
    repo.links = [link for link in links if link != removed]
    ops = ([("put", p) for p in modify] + [("put", p) for p in adds] + [("delete", p) for p in delete])
    rng.shuffle(ops)
    for start in range(0, len(ops), 25):
        with db.write() as session:
            ctx = begin_write(session, repo.name, branch, message=f"agent writes {start}")
            for op, path in ops[start:start + 25]:
                if op == "put":
                    node_store.put_node(session, ctx, WORKSPACE, path,
                                        NodeWrite("Item", properties(rng, f"{branch} {path}"), None, None))
                else:
                    node_store.delete_node(session, ctx, WORKSPACE, path)
    with db.write() as session:
        ctx = begin_write(session, repo.name, branch, message="agent relations")
        for j in range(3):
            relation_store.relate(session, ctx, f"{WORKSPACE}:{modify[j]}", f"{WORKSPACE}:{adds[j]}", "cites")
            repo.cited |= {modify[j], adds[j]}
        relation_store.relate(session, ctx, f"{WORKSPACE}:{reweight[0]}", f"{WORKSPACE}:{reweight[1]}", "links",
                              weight=2.0 + rep)
        relation_store.unrelate(session, ctx, f"{WORKSPACE}:{removed[0]}", f"{WORKSPACE}:{removed[1]}", "links")


def timed(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> tuple[float, T]:
    """(seconds, answer) of one call."""
    started = time.perf_counter()
    answer = fn(*args, **kwargs)
    return time.perf_counter() - started, answer


def diff(db: Database, repo: str, branch: str) -> dict:
    """The diff as ``GET /branches/{branch}/diff`` makes it."""
    with db.read() as session:
        return diff_branches(session, get_repository(session, repo), branch)


def check(rep_label: str, d: dict, dry: MergeResult, merged: MergeResult) -> list[str]:
    """What differs from the 100 node and 5 relation changes that were written."""
    problems = []
    got = {k: len(v) for k, v in d["nodes"].items()}
    if got != {"added": N_ADD, "modified": N_MODIFY, "deleted": N_DELETE}:
        problems.append(f"{rep_label}: diff nodes {got}")
    rels = {k: len(v) for k, v in d["relations"].items()}
    if rels != {"added": 3, "removed": 1, "modified": 1}:
        problems.append(f"{rep_label}: diff relations {rels}")
    for label, answer in (("dry run", dry.applied), ("merge", merged.applied)):
        nodes = {k: len(v) for k, v in answer.nodes.as_json().items()}
        relations = answer.relations.as_json()
        if nodes != {"added": N_ADD, "modified": N_MODIFY, "deleted": N_DELETE, "kept": 0} or \
                relations != {"upserted": 4, "removed": 1, "kept": 0}:
            problems.append(f"{rep_label}: {label} applied {nodes} {relations}")
    if merged.revision is None:
        problems.append(f"{rep_label}: the merge made no revision")
    return problems


def count_rows(db: Database, repo: str) -> dict:
    """Node and relation version rows of one repository."""
    with db.read() as session:
        rid = get_repository(session, repo).id
        return {"node_versions": session.scalar(select(func.count()).select_from(NodeVersion)
                                                .where(NodeVersion.repo_id == rid)),
                "relation_versions": session.scalar(select(func.count()).select_from(RelationVersion)
                                                    .where(RelationVersion.repo_id == rid))}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=None,
                        help="SQLAlchemy URL (default: a SQLite file in a fresh temp dir); "
                             "PostgreSQL runs in a fresh schema dropped afterwards")
    parser.add_argument("--tiny", type=int, default=100, help="nodes of the branch-creation baseline")
    parser.add_argument("--small", type=int, default=1_000, help="nodes of the diff/merge baseline")
    parser.add_argument("--large", type=int, default=100_000, help="nodes of the large repository")
    parser.add_argument("--section-size", type=int, default=100, help="nodes per /s{k} (section included)")
    parser.add_argument("--batch", type=int, default=5_000, help="rows per bulk set-up transaction")
    parser.add_argument("--repeats", type=int, default=10, help="timed diff/merge rounds per repository")
    parser.add_argument("--warmup", type=int, default=2, help="untimed diff/merge rounds per repository")
    parser.add_argument("--create-repeats", type=int, default=50, help="timed branch creations per repository")
    parser.add_argument("--no-analyze", action="store_true",
                        help="PostgreSQL: skip the ANALYZE after set-up (a server with autovacuum off, "
                             "or before it has run): the planner then has no statistics")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--out", type=Path, default=None,
                        help="JSON file (default bench/results/diff_merge.json on SQLite, "
                             "diff_merge_<backend>.json on another database)")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)

    results: dict = {"machine": machine(), "setup_note": (
        "node and relation versions of main inserted in bulk for set-up speed (same columns as "
        "put_node, one revision per transaction); branch changes, diff and merge go through kg")}
    with tempfile.TemporaryDirectory(prefix="kg-bench-") as tmp, \
            isolated_database(args.database_url, Path(tmp)) as (url, backend):
        results["database"] = {"backend": backend, "url": redact(url)}
        services = make_services(url, Path(tmp) / "data")
        db = services.db
        try:
            repos: dict[str, Repo] = {}
            for label, n in (("tiny", args.tiny), ("small", args.small), ("large", args.large)):
                print(f"loading {n} nodes into bench-{label} (bulk) ...", file=sys.stderr, flush=True)
                repos[label] = bulk_repository(db, f"bench-{label}", n, section_size=args.section_size,
                                               batch=args.batch, rng=rng)
            if not args.no_analyze:
                analyze(db)
            results["analyzed"] = backend == "postgresql" and not args.no_analyze
            results["setup"] = {label: {"nodes": r.nodes, "sections": r.sections, "relations": len(r.links),
                                        "setup_s": r.setup_s, **count_rows(db, r.name)}
                                for label, r in repos.items()}
            results["load_average_before_timing"] = load_average()

            # branch creation: tiny vs large, interleaved
            creation: dict[str, list[float]] = {"tiny": [], "large": []}
            for r in range(5 + args.create_repeats):
                for label in (("tiny", "large") if r % 2 == 0 else ("large", "tiny")):
                    seconds = create_one(db, repos[label].name, f"create/{'warm' if r < 5 else 'run'}-{r:03d}")
                    if r >= 5:
                        creation[label].append(seconds)

            # diff, dry run, merge: small vs large, interleaved, a fresh branch each round
            timing: dict[str, dict[str, list[float]]] = {op: {"small": [], "large": []}
                                                         for op in ("diff", "merge_dry_run", "merge")}
            problems: list[str] = []
            for r in range(args.warmup + args.repeats):
                for label in (("small", "large") if r % 2 == 0 else ("large", "small")):
                    repo = repos[label]
                    branch = f"agent/rep-{r:03d}"
                    create_one(db, repo.name, branch)
                    make_changes(db, repo, branch, r, rng)
                    t_diff, d = timed(diff, db, repo.name, branch)
                    t_dry, dry = timed(preview_merge, services, context.OPERATOR, repo.name, branch, "main")
                    t_merge, merged = timed(context.run, services, context.OPERATOR, merge_branch, repo.name,
                                            branch, "main")
                    problems += check(f"{label} round {r}", d, dry, merged)
                    if r >= args.warmup:
                        timing["diff"][label].append(t_diff)
                        timing["merge_dry_run"][label].append(t_dry)
                        timing["merge"][label].append(t_merge)
                print(f"  round {r + 1}/{args.warmup + args.repeats}", file=sys.stderr, flush=True)
            results["load_average_after_timing"] = load_average()
            results["after"] = {label: count_rows(db, r.name) for label, r in repos.items()}
        finally:
            services.close()

    rows = []
    targets = {"diff": 2.0, "merge_dry_run": 2.0, "merge": 2.0}
    for op, by in timing.items():
        small, large = summary_ms(by["small"]), summary_ms(by["large"])
        ratio = round(large["median_ms"] / small["median_ms"], 3)
        results[op] = {"small": small, "large": large, "ratio_large_over_small_median": ratio,
                       "ratio_large_over_small_p90": round(large["p90_ms"] / small["p90_ms"], 3),
                       "target": targets[op]}
        rows.append([f"{op} (100 changes)", small["median_ms"], large["median_ms"], small["p90_ms"],
                     large["p90_ms"], ratio, targets[op], "yes" if ratio < targets[op] else "NO"])
    tiny, large = summary_ms(creation["tiny"]), summary_ms(creation["large"])
    ratio = round(large["median_ms"] / tiny["median_ms"], 3)
    results["branch_create"] = {"tiny": tiny, "large": large, "ratio_large_over_tiny_median": ratio,
                                "ratio_large_over_tiny_p90": round(large["p90_ms"] / tiny["p90_ms"], 3),
                                "target": 1.5}
    rows.append(["branch creation", tiny["median_ms"], large["median_ms"], tiny["p90_ms"], large["p90_ms"],
                 ratio, 1.5, "yes" if ratio < 1.5 else "NO"])
    results["problems"] = problems
    results["repeats"] = args.repeats
    results["warmup"] = args.warmup
    results["samples_ms"] = {
        **{op: {k: [round(s * 1000, 3) for s in v] for k, v in by.items()} for op, by in timing.items()},
        "branch_create": {k: [round(s * 1000, 3) for s in v] for k, v in creation.items()},
    }

    sizes = {label: results["setup"][label]["nodes"] for label in ("tiny", "small", "large")}
    print(f"diff / merge and branch creation on {backend} ({redact(url)}); repositories of "
          f"{sizes['small']} (small) and {sizes['large']} (large) nodes, {sizes['tiny']} (tiny) for creation; "
          f"{args.repeats} rounds after {args.warmup} warm-up ({args.create_repeats} creations); "
          f"load average {results['load_average_before_timing']} -> {results['load_average_after_timing']}"
          + ("; PostgreSQL ANALYZEd after set-up" if results["analyzed"] else
             "; no ANALYZE after set-up" if backend == "postgresql" else ""))
    print("set-up: main's versions inserted in bulk (not through put_node), one revision per "
          f"{args.batch} rows; " + ", ".join(f"{k} {v['setup_s']} s" for k, v in results["setup"].items()))
    print(table(rows, ["operation", "small/tiny median ms", "large median ms", "small/tiny p90 ms",
                       "large p90 ms", "ratio", "target", "met"]))
    print("checks: " + ("every diff, dry run and merge reported the 100 node and 5 relation changes"
                        if not problems else "; ".join(problems)))
    suffix = "" if backend == "sqlite" else f"_{backend}" + ("_no_analyze" if args.no_analyze else "")
    out = args.out or RESULTS / f"diff_merge{suffix}.json"
    write_results(results, out)
    return results


if __name__ == "__main__":
    main()
