"""Benchmark of indexing fairness with a large text: how long a small write in another
workspace takes to become searchable while a 1 MB document is being embedded.

Each round, in a fresh database (SQLite file, or a fresh PostgreSQL schema):

1. One repository with workspaces ``big`` and ``small``, on the deterministic ``fake:hash-64``
   embedder slowed by ``--chunk-ms`` per chunk embedded (a stand-in for the local model, whose
   pace on this machine made one 1 MB document hold the indexer for 6.5 minutes: the real model
   is too slow to run several rounds of this; the figures measure the indexer's scheduling, not
   a model).
2. The background indexer is started; a ``--megabytes`` MB document is written to ``big``
   (``kg.ops.nodes.put_node``); once its job is claimed and ``--lead-s`` seconds of its
   embedding have passed, one small node is written to ``small`` (timing starts when the write
   is acknowledged), and ``kg.rag.search.search`` is polled every ``--poll-ms`` until the small
   text is found: its time to searchable. Then the wait until the large document is searchable.

Two settings, in alternating rounds (``before, after, after, before, ...``):

- ``before``: ``index_step_chunks`` so large that every text is embedded whole in one pass, as
  kg did until this change (the indexer's code is otherwise the same);
- ``after``: the default ``KG_INDEX_STEP_CHUNKS`` (16): the large text is embedded in steps and
  other jobs are claimed and done in between.

Prints a table and writes JSON (default ``bench/results/large_text_fairness.json``). It never
asserts times. Run: ``python bench/large_text_fairness.py [--megabytes 1] [--chunk-ms 25]
[--rounds 2] [--database-url postgresql+psycopg://...]``.
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sqlalchemy import select  # noqa: E402

from bench._common import RESULTS, isolated_database, load_average, machine, redact, table, write_results  # noqa: E402
from kg import context  # noqa: E402
from kg.index.embedded import EmbeddedVectorIndex  # noqa: E402
from kg.indexing.index_jobs import index_status  # noqa: E402
from kg.ops.nodes import put_node  # noqa: E402
from kg.providers.fake import FakeEmbedder  # noqa: E402
from kg.rag.search import SearchRequest, search  # noqa: E402
from kg.services import Services  # noqa: E402
from kg.settings import Settings  # noqa: E402
from kg.store.db import Database  # noqa: E402
from kg.store.models import IndexJob  # noqa: E402
from kg.store.repos import branch_view, create_repository, create_workspace, get_repository  # noqa: E402

MODEL = "fake:hash-64"
SMALL_TEXT = "The narwhal census of the northern fjord counted forty-two animals."
WORDS = ("storage", "search", "graph", "branch", "merge", "index", "queue", "lease", "revision",
         "tombstone", "workspace", "relation", "chunk", "embedding", "hybrid", "fusion")
WHOLE = 10**9
"""``index_step_chunks`` of the baseline: every text is embedded whole in one pass."""


class SlowFakeEmbedder(FakeEmbedder):
    """The fake embedder, slowed by a fixed time per chunk (a stand-in for a real model)."""

    def __init__(self, chunk_ms: float) -> None:
        super().__init__(dim=64, name=MODEL)
        self.chunk_s = chunk_ms / 1000

    def embed(self, texts):
        time.sleep(self.chunk_s * len(texts))
        return super().embed(texts)


def real_embedder(args: argparse.Namespace):
    """The default local model (``KG_EMBEDDING_MODEL``), for ``--real-model``."""
    from kg.providers.registry import make_embedder

    return make_embedder(Settings().embedding_model)


def large_text(megabytes: float) -> str:
    """About ``megabytes`` MB of prose-like text with distinct sentences."""
    out, size, i = [], 0, 0
    while size < megabytes * 1_000_000:
        words = " ".join(WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(10))
        sentence = f"Section {i} of the handbook covers {words}. "
        out.append(sentence)
        size += len(sentence)
        i += 1
    return "".join(out)


def found(services: Services, workspace: str, query: str, path: str) -> bool:
    with services.db.read() as session:
        rows, _ = search(session, services, branch_view(session, "r", "main"),
                         SearchRequest(query=query, mode="fulltext", k=1, workspaces=[workspace]))
    return bool(rows) and rows[0].path == path


def running(services: Services) -> bool:
    with services.db.read() as session:
        return session.scalar(select(IndexJob.id).where(IndexJob.status == "running").limit(1)) is not None


def wait_for(check, timeout_s: float, poll_s: float, what: str) -> float:
    started = time.perf_counter()
    while not check():
        if time.perf_counter() - started > timeout_s:
            raise SystemExit(f"{what}: not after {timeout_s} s")
        time.sleep(poll_s)
    return time.perf_counter() - started


def one_round(setting: str, url: str, tmp: Path, text: str, args: argparse.Namespace) -> dict:
    step = WHOLE if setting == "before" else Settings().index_step_chunks
    model = Settings().embedding_model if args.real_model else MODEL
    settings = Settings(database_url=url, data_dir=tmp / "data", embedding_model=model, index_inline=False,
                        allow_fake_embedder=True, index_step_chunks=step)
    db = Database(url)
    db.upgrade()
    embedder = real_embedder(args) if args.real_model else SlowFakeEmbedder(args.chunk_ms)
    services = Services(settings=settings, db=db, index=EmbeddedVectorIndex(settings.data_dir),
                        embedder_factory=lambda name: embedder)
    poll = args.poll_ms / 1000
    try:
        with services.db.write() as session:
            repo = create_repository(session, name="r")
            for name in ("big", "small"):
                create_workspace(session, repo, name=name, config={"embedding": {"model": model}})
        services.indexer.start()
        written = time.perf_counter()
        context.run(services, context.OPERATOR, put_node, "r", "main", "big", "/handbook", node_type="kb:Document",
                    properties={"content": text})
        wait_for(lambda: running(services), args.timeout_s, poll, "the large text's job")
        time.sleep(args.lead_s)
        context.run(services, context.OPERATOR, put_node, "r", "main", "small", "/note", node_type="kb:Note",
                    properties={"content": SMALL_TEXT})
        small_s = wait_for(lambda: found(services, "small", "narwhal census", "/note"), args.timeout_s, poll,
                           "the small write")
        with services.db.read() as session:
            status = index_status(session, get_repository(session, "r"))
        progress = status["progress"][0] if status["progress"] else None
        large_s = None
        if not args.skip_large:
            wait_for(lambda: found(services, "big", "handbook section 7", "/handbook"), args.timeout_s, poll,
                     "the large text")
            large_s = time.perf_counter() - written
        services.indexer.stop()
        with services.db.read() as session:
            chunks = session.execute(select(IndexJob.id)).all()
        return {"setting": setting, "index_step_chunks": step if step != WHOLE else None,
                "small_to_searchable_s": round(small_s, 3),
                "large_to_searchable_s": None if large_s is None else round(large_s, 3),
                "progress_when_small_found": progress, "jobs_left": len(chunks)}
    finally:
        services.close()


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--megabytes", type=float, default=1.0)
    parser.add_argument("--chunk-ms", type=float, default=25.0, help="simulated model time per chunk, ms")
    parser.add_argument("--lead-s", type=float, default=0.5, help="embedding time before the small write, s")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--poll-ms", type=float, default=10.0)
    parser.add_argument("--timeout-s", type=float, default=900.0)
    parser.add_argument("--real-model", action="store_true",
                        help="the default local model instead of the slowed fake (minutes a round)")
    parser.add_argument("--skip-large", action="store_true",
                        help="stop once the small write is found (no large-text time)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    text = large_text(args.megabytes)
    model = Settings().embedding_model if args.real_model else f"{MODEL} + {args.chunk_ms} ms a chunk"
    results: dict = {"machine": machine(), "model": model,
                     "large_text_chars": len(text), "rounds": []}
    schedule = [("before", "after") if r % 2 == 0 else ("after", "before") for r in range(args.rounds)]
    backend = "sqlite"
    for r, pair in enumerate(schedule):
        for setting in pair:
            with tempfile.TemporaryDirectory(prefix="kg-bench-") as tmp_name, \
                    isolated_database(args.database_url, Path(tmp_name)) as (url, db_backend):
                backend = db_backend
                results["database"] = {"backend": backend, "url": redact(url)}
                row = one_round(setting, url, Path(tmp_name), text, args)
                row["round"] = r + 1
                results["rounds"].append(row)
                print(f"round {r + 1} {setting}: small {row['small_to_searchable_s']} s, "
                      f"large {row['large_to_searchable_s']} s", file=sys.stderr, flush=True)

    def median(setting: str, key: str) -> float | None:
        values = [row[key] for row in results["rounds"] if row["setting"] == setting and row[key] is not None]
        return round(statistics.median(values), 3) if values else None

    summary = {s: {"small_to_searchable_s_median": median(s, "small_to_searchable_s"),
                   "large_to_searchable_s_median": median(s, "large_to_searchable_s")} for s in ("before", "after")}
    summary["ratio_small_before_over_after"] = round(
        summary["before"]["small_to_searchable_s_median"] / summary["after"]["small_to_searchable_s_median"], 1)
    large_before, large_after = (summary[s]["large_to_searchable_s_median"] for s in ("before", "after"))
    summary["ratio_large_after_over_before"] = (round(large_after / large_before, 3)
                                                if large_before and large_after else None)
    chunks_total = next((row["progress_when_small_found"]["chunks_total"] for row in results["rounds"]
                         if row["progress_when_small_found"]), None)
    results["large_text_chunks"] = chunks_total
    results["summary"] = summary
    print(f"a small write beside a {len(text) / 1e6:.2f} MB text ({chunks_total} chunks) being embedded, on "
          f"{backend}, {results['model']}, {args.rounds} round(s) each, load {load_average()}")
    print(table([[s, summary[s]["small_to_searchable_s_median"], summary[s]["large_to_searchable_s_median"]]
                 for s in ("before", "after")],
                ["setting", "small write to searchable s", "large text to searchable s"]))
    large = summary["ratio_large_after_over_before"]
    print(f"small write: {summary['ratio_small_before_over_after']}x sooner"
          + (f"; large text: {large}x its time before" if large is not None else ""))
    out = args.out or RESULTS / ("large_text_fairness.json" if backend == "sqlite"
                                 else f"large_text_fairness_{backend}.json")
    write_results(results, out)
    return results


if __name__ == "__main__":
    main()
