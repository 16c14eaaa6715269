"""Benchmark of reads on a branch five levels deep against the same reads on ``main``.

A branch reads its own versions, then its parent's as of the fork, and so on up the chain
(copy-on-write by revision, docs/concepts/branches.md), so a deep branch resolves every read through more
candidate versions. The issue: a read on a branch five levels deep costs under 1.5 times the
same read on ``main`` (GET node, children, search).

1. A repository of ``--nodes`` nodes: ``/s{k}`` sections of ``--section-size`` nodes
   ``/s{k}/n{i}`` whose ``title`` is a few words from a small vocabulary (so search has
   passages to rank). Written through ``kg.ops.nodes.batch`` (``--batch`` upserts per
   transaction) with the deterministic fake embedder ``fake:hash-64``: chunks and vectors are
   real rows, as an ingest makes them (the index queue is drained after every batch).
2. The chain ``main -> b1 -> b2 -> b3 -> b4 -> b5``: each branch created from the previous one
   after that one's ``--branch-writes`` own writes (three quarters modify an existing node's
   title, the rest add nodes). On PostgreSQL the schema is then ANALYZEd (what autovacuum does
   after a load; skip it with ``--no-analyze`` to see reads planned without statistics).
3. Timed, as the HTTP routes do them (one read session, ``branch_view``, then the read):
   ``get_node`` of a node only ``main`` wrote (the deepest fallback), ``list_children`` of a
   section, and ``kg.rag.search.search`` in hybrid mode (k=10). Each repetition picks one node,
   section and query and runs it on both branches, alternating which goes first, after
   ``--warmup`` untimed rounds (search, which reads every visible node, only in the first
   ``--search-repeats`` rounds); medians and p90 per branch, and the ratio b5 / main of the
   medians. The answers on both branches are checked to agree (untouched nodes and sections).

Prints a table and writes JSON (default ``bench/results/branch_depth.json``, or
``branch_depth_<backend>[_no_analyze].json`` on another database). Run: ``python bench/branch_depth.py
[--nodes 10000] [--repeats 200] [--database-url postgresql+psycopg://postgres@127.0.0.1:5432/test]``.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy is imported

import argparse  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sqlalchemy import func, select, text  # noqa: E402

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
from kg.indexing.chunks import sync_index  # noqa: E402
from kg.indexing.index_jobs import index_status  # noqa: E402
from kg.ops.nodes import batch  # noqa: E402
from kg.providers.registry import make_embedder  # noqa: E402
from kg.rag.search import SearchRequest, search  # noqa: E402
from kg.services import Services  # noqa: E402
from kg.settings import Settings  # noqa: E402
from kg.store.db import Database  # noqa: E402
from kg.store.models import Chunk, NodeVersion  # noqa: E402
from kg.store.nodes import get_node, list_children  # noqa: E402
from kg.store.repos import branch_view, create_branch, create_repository, create_workspace, get_repository  # noqa: E402
from kg.store.visibility import visible_select  # noqa: E402

REPO = "bench-depth"
WORKSPACE = "knowledge"
MODEL = "fake:hash-64"
VOCABULARY = (
    "cache shard replica index vector graph branch merge commit revision tombstone chunk "
    "embedding query planner lock journal snapshot schema migration quota tenant billing "
    "invoice ledger audit token session cookie header proxy gateway router worker queue "
    "retry backoff timeout deadline budget latency throughput storage bucket object blob "
    "archive backup restore failover leader follower election consensus raft paxos clock "
    "drift skew partition rebalance compaction bloom filter cursor page offset"
).split()


def title(rng: random.Random, label: str) -> str:
    """A short title: a label and four words of the vocabulary."""
    return f"{label}: {' '.join(rng.sample(VOCABULARY, 4))}"


def make_services(url: str, data_dir: Path) -> Services:
    """Services on ``url`` with the fake embedder and an embedded index in ``data_dir``; no
    background indexer (the set-up drains the index queue itself)."""
    settings = Settings(database_url=url, data_dir=data_dir, embedding_model=MODEL)
    db = Database(settings.resolved_database_url())
    db.upgrade()
    return Services(settings=settings, db=db, index=EmbeddedVectorIndex(settings.data_dir),
                    embedder_factory=lambda name: make_embedder(name, allow_fake=True))


def build_repository(services: Services, n_nodes: int, *, section_size: int, batch_size: int,
                     rng: random.Random) -> dict:
    """``n_nodes`` nodes (sections included) on ``main``; returns counts and seconds."""
    started = time.perf_counter()
    with services.db.write() as session:
        repo = create_repository(session, name=REPO)
        create_workspace(session, repo, name=WORKSPACE)
    upserts = []
    sections = 0
    for i in range(n_nodes):
        section, offset = divmod(i, section_size)
        if offset == 0:
            upserts.append({"workspace": WORKSPACE, "path": f"/s{section}", "node_type": "Section",
                            "properties": {"title": title(rng, f"Section {section}")}})
            sections += 1
        else:
            upserts.append({"workspace": WORKSPACE, "path": f"/s{section}/n{i}", "node_type": "Item",
                            "properties": {"title": title(rng, f"Item {i}"), "rank": i}})
    for start in range(0, len(upserts), batch_size):
        context.run(services, context.OPERATOR, batch, REPO, "main", upserts=upserts[start:start + batch_size],
                    message="bench load")
        services.indexer.drain()
        print(f"  {min(start + batch_size, len(upserts))}/{len(upserts)} nodes, "
              f"{time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    leaves = [u["path"] for u in upserts if u["node_type"] == "Item"]
    return {"nodes": len(upserts), "sections": sections, "leaves": leaves,
            "setup_s": round(time.perf_counter() - started, 2)}


def build_chain(services: Services, depth: int, writes: int, leaves: list[str], sections: int,
                rng: random.Random) -> tuple[list[str], set[str]]:
    """Branches b1..b<depth>, each from the previous after ``writes`` writes of its own.

    Returns the branch names and the paths any branch wrote.
    """
    names = []
    touched: set[str] = set()
    parent = "main"
    for level in range(1, depth + 1):
        name = f"b{level}"
        with services.db.write() as session:
            create_branch(session, get_repository(session, REPO, lock=True), name=name, from_branch=parent)
        upserts = []
        n_modify = writes * 3 // 4
        for path in rng.sample(leaves, n_modify):
            upserts.append({"workspace": WORKSPACE, "path": path, "node_type": "Item",
                            "properties": {"title": title(rng, f"Changed on {name}")}})
            touched.add(path)
        for j in range(writes - n_modify):
            path = f"/s{rng.randrange(sections)}/{name}-added-{j}"
            upserts.append({"workspace": WORKSPACE, "path": path, "node_type": "Item",
                            "properties": {"title": title(rng, f"Added on {name}")}})
            touched.add(path)
        context.run(services, context.OPERATOR, batch, REPO, name, upserts=upserts, message=f"own writes of {name}")
        services.indexer.drain()
        names.append(name)
        parent = name
    return names, touched


def timed_get(services: Services, branch: str, path: str) -> tuple[float, object]:
    """GET node as the route does it; seconds and the node's (id, revision)."""
    started = time.perf_counter()
    with services.db.read() as session:
        view = branch_view(session, REPO, branch)
        node = get_node(session, view, WORKSPACE, path)
        answer = (node.node_id, node.revision, node.properties["title"])
    return time.perf_counter() - started, answer


def timed_children(services: Services, branch: str, parent: str) -> tuple[float, object]:
    """List children as the route does it; seconds and the children's paths."""
    started = time.perf_counter()
    with services.db.read() as session:
        view = branch_view(session, REPO, branch)
        rows = list_children(session, view, WORKSPACE, parent)
        answer = [(v.path, v.revision) for v in rows]
    return time.perf_counter() - started, answer


def timed_search(services: Services, branch: str, query: str) -> tuple[float, object]:
    """Hybrid search (k=10) as the route does it; seconds and the result paths."""
    request = SearchRequest(query=query, k=10, mode="hybrid")
    started = time.perf_counter()
    with services.db.read() as session:
        view = branch_view(session, REPO, branch)
        results, _ = search(session, services, view, request)
        answer = [r.path for r in results]
    return time.perf_counter() - started, answer


def count_visible(services: Services, branch: str) -> int:
    """Nodes that ``branch`` sees."""
    with services.db.read() as session:
        view = branch_view(session, REPO, branch)
        stmt, _ = visible_select(NodeVersion, view, (NodeVersion.workspace_id, NodeVersion.path))
        return session.scalar(select(func.count()).select_from(stmt.subquery())) or 0


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=None,
                        help="SQLAlchemy URL (default: a SQLite file in a fresh temp dir); "
                             "PostgreSQL runs in a fresh schema dropped afterwards")
    parser.add_argument("--nodes", type=int, default=10_000, help="nodes on main (sections included)")
    parser.add_argument("--section-size", type=int, default=100, help="nodes per /s{k} (section included)")
    parser.add_argument("--depth", type=int, default=5, help="branch levels below main")
    parser.add_argument("--branch-writes", type=int, default=20, help="own writes of each branch")
    parser.add_argument("--batch", type=int, default=1000, help="upserts per setup transaction")
    parser.add_argument("--repeats", type=int, default=200,
                        help="timed rounds of get_node and list_children per branch")
    parser.add_argument("--search-repeats", type=int, default=30,
                        help="timed rounds of search per branch (a search reads every visible node)")
    parser.add_argument("--warmup", type=int, default=10, help="untimed rounds")
    parser.add_argument("--no-analyze", action="store_true",
                        help="PostgreSQL: skip the ANALYZE after set-up (a server with autovacuum off, "
                             "or before it has run): the planner then has no statistics")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, default=None,
                        help="JSON file (default bench/results/branch_depth.json on SQLite, "
                             "branch_depth_<backend>.json on another database)")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)

    results: dict = {"machine": machine()}
    with tempfile.TemporaryDirectory(prefix="kg-bench-") as tmp, \
            isolated_database(args.database_url, Path(tmp)) as (url, backend):
        results["database"] = {"backend": backend, "url": redact(url)}
        services = make_services(url, Path(tmp) / "data")
        try:
            print(f"loading {args.nodes} nodes ...", file=sys.stderr, flush=True)
            setup = build_repository(services, args.nodes, section_size=args.section_size,
                                     batch_size=args.batch, rng=rng)
            leaves = setup.pop("leaves")
            chain_started = time.perf_counter()
            names, touched = build_chain(services, args.depth, args.branch_writes, leaves,
                                         setup["sections"], rng)
            setup["chain_s"] = round(time.perf_counter() - chain_started, 2)
            setup["branch_writes_each"] = args.branch_writes
            deep = names[-1]
            results["setup"] = setup
            results["analyzed"] = services.db.dialect == "postgresql" and not args.no_analyze
            if results["analyzed"]:
                with services.db.engine.connect() as conn:
                    conn.execute(text("ANALYZE"))
                    conn.commit()
            with services.db.read() as session:
                sync_index(session, services.index, get_repository(session, REPO).id,
                           get_repository(session, REPO).uid)
                view = branch_view(session, REPO, deep)
                results["chain"] = [list(link) for link in view.chain]
            results["visible"] = {"main": count_visible(services, "main"), deep: count_visible(services, deep)}
            with services.db.read() as session:
                results["chunks"] = session.scalar(select(func.count()).select_from(Chunk)) or 0
                results["index_status"] = index_status(session, get_repository(session, REPO))
            untouched = [p for p in leaves if p not in touched]
            touched_sections = {p.rsplit("/", 1)[0] for p in touched}
            quiet_sections = [f"/s{k}" for k in range(setup["sections"]) if f"/s{k}" not in touched_sections]

            ops = {"get_node": timed_get, "list_children": timed_children, "search_hybrid": timed_search}
            samples: dict[str, dict[str, list[float]]] = {op: {"main": [], deep: []} for op in ops}
            mismatches: dict[str, int] = {op: 0 for op in ops}
            empty_searches = 0
            results["load_average_before_timing"] = load_average()
            for r in range(args.warmup + args.repeats):
                arguments = {
                    "get_node": rng.choice(untouched),
                    "list_children": rng.choice(quiet_sections) if quiet_sections else "/s0",
                    "search_hybrid": " ".join(rng.sample(VOCABULARY, 2)),
                }
                order = ["main", deep] if r % 2 == 0 else [deep, "main"]
                for op, fn in ops.items():
                    if op == "search_hybrid" and r >= args.warmup + args.search_repeats:
                        continue
                    answers = {}
                    for branch in order:
                        seconds, answers[branch] = fn(services, branch, arguments[op])
                        if r >= args.warmup:
                            samples[op][branch].append(seconds)
                    if op == "search_hybrid":
                        empty_searches += sum(1 for a in answers.values() if not a)
                    # untouched nodes and sections read alike; search may differ (b1..b5 wrote titles)
                    if op != "search_hybrid" and quiet_sections and answers["main"] != answers[deep]:
                        mismatches[op] += 1
            results["load_average_after_timing"] = load_average()
        finally:
            services.close()

    rows = []
    for op in samples:
        on_main, on_deep = summary_ms(samples[op]["main"]), summary_ms(samples[op][deep])
        ratio = round(on_deep["median_ms"] / on_main["median_ms"], 3)
        results[op] = {"main": on_main, deep: on_deep, "ratio_deep_over_main_median": ratio,
                       "ratio_deep_over_main_p90": round(on_deep["p90_ms"] / on_main["p90_ms"], 3),
                       "answers_differing": mismatches[op]}
        rows.append([op, on_main["median_ms"], on_deep["median_ms"], on_main["p90_ms"], on_deep["p90_ms"],
                     ratio, "yes" if ratio < 1.5 else "NO"])
    results["empty_search_answers"] = empty_searches
    results["repeats"] = args.repeats
    results["search_repeats"] = args.search_repeats
    results["warmup"] = args.warmup
    results["target_ratio"] = 1.5
    results["samples_ms"] = {op: {b: [round(s * 1000, 3) for s in v] for b, v in by.items()}
                             for op, by in samples.items()}

    print(f"reads on main vs {deep} ({args.depth} levels deep) on {backend} ({redact(url)}); "
          f"{results['setup']['nodes']} nodes, {args.repeats} runs each ({args.search_repeats} for search) "
          f"after {args.warmup} warm-up; "
          + ("PostgreSQL ANALYZEd after set-up; " if results["analyzed"] else
             "no ANALYZE after set-up; " if backend == "postgresql" else "") +
          f"load average {results['load_average_before_timing']} -> {results['load_average_after_timing']}")
    print(table(rows, ["operation", "main median ms", f"{deep} median ms", "main p90 ms", f"{deep} p90 ms",
                       f"ratio {deep}/main", "< 1.5"]))
    print(f"visible nodes: {results['visible']}; differing answers (must be 0): "
          f"get {mismatches['get_node']}, children {mismatches['list_children']}; empty search answers "
          f"(must be 0) {empty_searches}; chunks {results['chunks']}; "
          f"setup {setup['setup_s']} s + chain {setup['chain_s']} s")
    suffix = "" if backend == "sqlite" else f"_{backend}" + ("_no_analyze" if args.no_analyze else "")
    out = args.out or RESULTS / f"branch_depth{suffix}.json"
    write_results(results, out)
    return results


if __name__ == "__main__":
    main()
