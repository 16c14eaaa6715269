"""Benchmark of queue fairness: how long a small write in one repository takes to become
searchable while another repository has a 10,000-text backlog in the indexing queue.

Each round, in a fresh database (SQLite file, or a fresh PostgreSQL schema):

1. Two repositories, ``big`` and ``small``, one workspace each, on the deterministic
   ``fake:hash-64`` embedder (the figures measure the queue, not a model).
2. ``--backlog`` texts (default 10,000) written to ``big`` through ``kg.ops.nodes.batch``
   (``--batch`` nodes a revision) with the indexer stopped: 10,000 pending jobs.
3. The background indexer is started and does its first batches; once ``--lead`` texts of the
   backlog are indexed, one node is written to ``small`` (``kg.ops.nodes.put_node``; timing
   starts when the write is acknowledged), and ``kg.rag.search.search`` on ``small`` is polled
   every ``--poll-ms`` until the text is found: the time to searchable.
4. The indexer drains the rest of the backlog; the drain's throughput (texts a second over the
   whole backlog) shows what fairness costs the backlog.

Two claim orders, in alternating rounds (``before, after, after, before, ...``) so that drift in
the machine's load falls on both alike:

- ``before``: the claim order of kg until this change, reproduced here as the baseline: by
  priority, then id, across all repositories (``ORDER BY priority, id LIMIT n``, ``FOR UPDATE
  SKIP LOCKED`` on PostgreSQL), through the same queue and indexer otherwise;
- ``after``: :class:`kg.indexing.queue.DurableQueue`'s fair claim (round-robin across repositories and
  workspaces, least recently served first).

Reports the median time to searchable of each order and the ratio before / after, and the
backlog's drain throughput of each and the ratio after / before (near 1: fairness costs the
backlog nothing). It never asserts times.

Prints a table and writes JSON (default ``bench/results/queue_fairness.json``, or
``queue_fairness_postgresql.json`` on PostgreSQL). Run: ``python bench/queue_fairness.py
[--backlog 10000] [--rounds 2] [--database-url postgresql+psycopg://postgres@127.0.0.1:5432/test]``.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy is imported

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from datetime import datetime  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sqlalchemy import ColumnElement, func, select  # noqa: E402
from sqlalchemy.orm import Session  # noqa: E402

from bench._common import (  # noqa: E402
    RESULTS,
    isolated_database,
    load_average,
    machine,
    redact,
    table,
    write_results,
)
from kg import context  # noqa: E402
from kg.indexing.index_jobs import INDEX_QUEUE  # noqa: E402
from kg.indexing.queue import Claim, DurableQueue  # noqa: E402
from kg.ops.nodes import batch, put_node  # noqa: E402
from kg.rag.search import SearchRequest, search  # noqa: E402
from kg.services import Services  # noqa: E402
from kg.settings import Settings  # noqa: E402
from kg.store.models import IndexJob  # noqa: E402
from kg.store.repos import branch_view, create_repository, create_workspace, get_repository  # noqa: E402

MODEL = "fake:hash-64"
SMALL_TEXT = "The narwhal census of the northern fjord counted forty-two animals."
QUERY = "narwhal census"
WORDS = ("storage", "search", "graph", "branch", "merge", "index", "queue", "lease", "revision",
         "tombstone", "workspace", "relation", "chunk", "embedding", "hybrid", "fusion")


class OldOrderQueue(DurableQueue):
    """The baseline: the claim order before the fair queue (priority, then id, across all
    repositories); the rest of the queue (leases, fencing, reclaim) is the same."""

    def _claim_fairly(self, session: Session, limit: int, now: datetime,
                      extra: Sequence[ColumnElement[bool]] = ()) -> list[Claim]:
        return self._take(session, list(extra), limit, now, by_priority=True)


def backlog_text(i: int) -> str:
    """A short, distinct text of the backlog."""
    words = [WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(12)]
    return f"Backlog note {i}: " + " ".join(words) + "."


def pending(services: Services, repo: str) -> int:
    """Jobs of ``repo`` still queued or running."""
    with services.db.read() as session:
        repo_id = get_repository(session, repo).id
        return session.scalar(select(func.count()).select_from(IndexJob).where(
            IndexJob.repo_id == repo_id, IndexJob.status.in_(("pending", "running")))) or 0


def searchable(services: Services) -> bool:
    """Whether the small write is found by a search of ``small``."""
    with services.db.read() as session:
        rows, _ = search(session, services, branch_view(session, "small", "main"),
                         SearchRequest(query=QUERY, mode="fulltext", k=1))
    return bool(rows) and rows[0].path == "/note"


def one_round(order: str, url: str, tmp: Path, args: argparse.Namespace) -> dict:
    """One database, one claim order: the time to searchable and the backlog's drain."""
    settings = Settings(database_url=url, data_dir=tmp / "data", embedding_model=MODEL,
                        index_inline=False, allow_fake_embedder=True)
    services = Services.from_settings(settings)
    try:
        services.db.upgrade()
        if order == "before":
            services.indexer.queue = OldOrderQueue(services.db, INDEX_QUEUE)
        with services.db.write() as session:
            for name in ("big", "small"):
                create_workspace(session, create_repository(session, name=name), name="notes",
                                 config={"embedding": {"model": MODEL}})
        started = time.perf_counter()
        for offset in range(0, args.backlog, args.batch):
            context.run(services, context.OPERATOR, batch, "big", "main", upserts=[
                {"workspace": "notes", "path": f"/n{i}", "properties": {"content": backlog_text(i)}}
                for i in range(offset, min(offset + args.batch, args.backlog))])
        write_s = time.perf_counter() - started
        assert pending(services, "big") == args.backlog, "the backlog must be queued, not indexed"

        load_before = load_average()
        drain_started = time.perf_counter()
        services.indexer.start()
        while pending(services, "big") > args.backlog - args.lead:
            time.sleep(0.005)
        remaining = pending(services, "big")
        context.run(services, context.OPERATOR, put_node, "small", "main", "notes", "/note", node_type="kb:Note",
                 properties={"content": SMALL_TEXT})
        acknowledged = time.perf_counter()
        deadline = acknowledged + args.timeout_s
        polls = 0
        while not searchable(services):
            polls += 1
            if time.perf_counter() > deadline:
                raise SystemExit(f"{order}: the small write was not searchable after {args.timeout_s} s")
            time.sleep(args.poll_ms / 1000)
        to_searchable_s = time.perf_counter() - acknowledged
        remaining_when_found = pending(services, "big")
        while pending(services, "big"):
            time.sleep(0.02)
        drain_s = time.perf_counter() - drain_started
        services.indexer.stop()
        return {
            "order": order,
            "batch_jobs": services.indexer.batch_jobs,
            "backlog_write_s": round(write_s, 3),
            "backlog_left_at_write": remaining,
            "backlog_left_when_searchable": remaining_when_found,
            "time_to_searchable_s": round(to_searchable_s, 4),
            "polls": polls,
            "drain_s": round(drain_s, 3),
            "drain_texts_per_s": round(args.backlog / drain_s, 1),
            "load_average_before": load_before,
            "load_average_after": load_average(),
        }
    finally:
        services.close()


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=None,
                        help="SQLAlchemy URL (default: a SQLite file in a fresh temp dir); "
                             "PostgreSQL runs in a fresh schema dropped afterwards")
    parser.add_argument("--backlog", type=int, default=10_000, help="texts queued in repository big")
    parser.add_argument("--batch", type=int, default=1000, help="nodes per nodes:batch write")
    parser.add_argument("--lead", type=int, default=64,
                        help="backlog texts indexed before the small write (the indexer is busy)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of each claim order")
    parser.add_argument("--poll-ms", type=float, default=10.0, help="pause between searches, ms")
    parser.add_argument("--timeout-s", type=float, default=900.0)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.backlog <= args.lead:
        parser.error("--backlog must be larger than --lead")

    results: dict = {"machine": machine(), "model": MODEL, "backlog": args.backlog, "rounds": []}
    schedule = [("before", "after") if r % 2 == 0 else ("after", "before") for r in range(args.rounds)]
    backend = "sqlite"
    for r, pair in enumerate(schedule):
        for order in pair:
            with tempfile.TemporaryDirectory(prefix="kg-bench-") as tmp_name, \
                    isolated_database(args.database_url, Path(tmp_name)) as (url, db_backend):
                backend = db_backend
                print(f"round {r + 1}/{args.rounds}: {order} ...", file=sys.stderr, flush=True)
                results["database"] = {"backend": backend, "url": redact(url)}
                row = one_round(order, url, Path(tmp_name), args)
                row["round"] = r + 1
                results["rounds"].append(row)
                print(f"  time to searchable {row['time_to_searchable_s']} s, "
                      f"drain {row['drain_texts_per_s']} texts/s", file=sys.stderr, flush=True)

    def median(order: str, key: str) -> float:
        return statistics.median(row[key] for row in results["rounds"] if row["order"] == order)

    summary = {order: {"time_to_searchable_s_median": round(median(order, "time_to_searchable_s"), 4),
                       "backlog_left_when_searchable_median": median(order, "backlog_left_when_searchable"),
                       "drain_texts_per_s_median": round(median(order, "drain_texts_per_s"), 1)}
               for order in ("before", "after")}
    summary["ratio_time_to_searchable_before_over_after"] = round(
        summary["before"]["time_to_searchable_s_median"] / summary["after"]["time_to_searchable_s_median"], 1)
    summary["ratio_drain_throughput_after_over_before"] = round(
        summary["after"]["drain_texts_per_s_median"] / summary["before"]["drain_texts_per_s_median"], 3)
    results["summary"] = summary

    print(f"queue fairness on {backend}: a small write in one repository beside a "
          f"{args.backlog}-text backlog in another, {MODEL}, {args.rounds} round(s) of each order, "
          f"load average {results['machine']['load_average_at_start']} at start, {load_average()} at end")
    print(table([
        [order, summary[order]["time_to_searchable_s_median"],
         summary[order]["backlog_left_when_searchable_median"], summary[order]["drain_texts_per_s_median"]]
        for order in ("before", "after")
    ], ["claim order", "to searchable s (median)", "backlog left when found", "backlog texts/s"]))
    print(f"ratio time to searchable before/after: {summary['ratio_time_to_searchable_before_over_after']}x; "
          f"backlog throughput after/before: {summary['ratio_drain_throughput_after_over_before']}")
    out = args.out or RESULTS / ("queue_fairness.json" if backend == "sqlite" else f"queue_fairness_{backend}.json")
    write_results(results, out)
    return results


if __name__ == "__main__":
    main()
