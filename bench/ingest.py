"""Benchmark of ``kg ingest`` on the PEPs against the embedder alone on the same passages.

One run, one database:

1. Services from ``Settings`` (the real default embedder ``local:all-MiniLM-L6-v2``), the
   model warmed with one small call before anything is timed.
2. The pipeline: ``ingest_path`` over ``fixtures/peps/docs`` (or its first ``--limit`` files,
   copied to a temporary folder), then ``sync_index``, timed end to end. Its passages are the
   rows of the ``chunks`` table. While it runs, the embedder's ``embed`` and ``count_tokens``
   are wrapped to add up the time spent in them (the breakdown; the wrappers cost well
   under a microsecond a call).
3. The baseline: exactly the stored chunk texts, in ``seq`` order, through ``embedder.embed``
   in batches of ``settings.embed_batch_size``, as the pipeline batches them.
4. Passages per second for both and the ratio pipeline / embedder (the issue: at least 0.85).
5. The ingest again: it must embed nothing; its time and its speed-up over the first are
   reported (the issue: at least 50x).

The snapshot flush the CLI does after an ingest is timed apart and not counted.

Prints a table and writes JSON (default ``bench/results/ingest.json``, or
``ingest_limit<N>.json`` with ``--limit``). Run: ``python bench/ingest.py [--limit 20]
[--database-url postgresql+psycopg://postgres@127.0.0.1:5432/test]``.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy is imported

import argparse  # noqa: E402
import functools  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sqlalchemy import func, select  # noqa: E402

from bench._common import (  # noqa: E402
    RESULTS,
    isolated_database,
    load_average,
    machine,
    redact,
    table,
    write_results,
)
from kg.context import OPERATOR  # noqa: E402
from kg.indexing.chunks import sync_index  # noqa: E402
from kg.ops.ingest import ingest_path  # noqa: E402
from kg.providers.local import MODEL_NAME  # noqa: E402
from kg.services import Services  # noqa: E402
from kg.settings import Settings  # noqa: E402
from kg.store.models import Chunk  # noqa: E402
from kg.store.repos import get_repository  # noqa: E402
from kg.types.bulk import IngestReport  # noqa: E402

DOCS = ROOT / "fixtures" / "peps" / "docs"
REPO = "peps"
WORKSPACE = "peps"


class Meter:
    """Wraps an embedder's ``embed`` and ``count_tokens`` on the instance, adding up calls,
    items and seconds; :meth:`detach` restores the class methods."""

    def __init__(self, embedder) -> None:
        self.embedder = embedder
        self.reset()
        embedder.embed = self._wrap(embedder.embed, "embed")
        embedder.count_tokens = self._wrap(embedder.count_tokens, "count_tokens")

    def reset(self) -> None:
        self.calls = {"embed": 0, "count_tokens": 0}
        self.seconds = {"embed": 0.0, "count_tokens": 0.0}
        self.passages = 0
        self.embed_call_s: list[float] = []

    def _wrap(self, fn, name: str):
        @functools.wraps(fn)
        def wrapper(arg):
            started = time.perf_counter()
            try:
                return fn(arg)
            finally:
                self.seconds[name] += time.perf_counter() - started
                self.calls[name] += 1
                if name == "embed":
                    self.passages += len(arg)
                    self.embed_call_s.append(round(time.perf_counter() - started, 3))
        return wrapper

    def detach(self) -> None:
        del self.embedder.embed
        del self.embedder.count_tokens


def corpus(limit: int | None, tmp: Path) -> tuple[Path, int]:
    """The folder to ingest and its number of files (the first ``limit`` PEPs, copied)."""
    files = sorted(DOCS.glob("*.rst"))
    if limit is None or limit >= len(files):
        return DOCS, len(files)
    folder = tmp / "docs"
    folder.mkdir()
    for path in files[:limit]:
        shutil.copy2(path, folder / path.name)
    return folder, limit


def timed_ingest(services: Services, folder: Path) -> tuple[IngestReport, float, float, int, str]:
    """``ingest_path`` then ``sync_index``: (report, ingest seconds, total seconds, synced)."""
    started = time.perf_counter()
    report = ingest_path(services, OPERATOR, folder, repo=REPO, workspace=WORKSPACE, format_name="pep")
    ingested = time.perf_counter()
    with services.db.read() as session:
        repo = get_repository(session, REPO)
        synced = sync_index(session, services.index, repo.id, repo.uid)
    return report, ingested - started, time.perf_counter() - started, synced, repo.uid


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=None,
                        help="SQLAlchemy URL (default: a SQLite file in a fresh temp dir); "
                             "PostgreSQL runs in a fresh schema dropped afterwards")
    parser.add_argument("--limit", type=int, default=None,
                        help="ingest only the first N PEP files (default: all)")
    parser.add_argument("--out", type=Path, default=None,
                        help="JSON file (default bench/results/ingest.json, "
                             "ingest_limit<N>.json with --limit)")
    args = parser.parse_args(argv)
    if args.limit is not None and args.limit < 1:
        parser.error("--limit must be at least 1")
    out = args.out or RESULTS / (
        "ingest.json" if args.limit is None else f"ingest_limit{args.limit}.json")

    results: dict = {"machine": machine()}
    with tempfile.TemporaryDirectory(prefix="kg-bench-") as tmp_name, \
            isolated_database(args.database_url, Path(tmp_name)) as (url, backend):
        tmp = Path(tmp_name)
        folder, n_files = corpus(args.limit, tmp)
        settings = Settings(database_url=url, data_dir=tmp / "data", embedding_model=MODEL_NAME)
        services = Services.from_settings(settings)
        try:
            services.db.upgrade()
            embedder = services.embedder(settings.embedding_model)
            batch_size = settings.embed_batch_size
            results["database"] = {"backend": backend, "url": redact(url)}
            results["files"] = n_files
            results["model"] = embedder.name
            results["embed_batch_size"] = batch_size

            started = time.perf_counter()
            embedder.embed(["Warm the model up before anything is timed."])
            embedder.count_tokens("warm")
            results["warmup_s"] = round(time.perf_counter() - started, 3)

            # -- the pipeline ---------------------------------------------------------------
            print(f"ingesting {n_files} files ...", file=sys.stderr, flush=True)
            meter = Meter(embedder)
            load_before = load_average()
            report, ingest_s, pipeline_s, synced, repo_uid = timed_ingest(services, folder)
            first_meter = {"calls": dict(meter.calls), "seconds": dict(meter.seconds),
                           "passages": meter.passages, "embed_call_s": list(meter.embed_call_s)}
            meter.reset()
            started = time.perf_counter()
            services.index.flush(repo_uid)
            flush_s = time.perf_counter() - started

            with services.db.read() as session:
                repo_id = get_repository(session, REPO).id
                passages = session.scalar(
                    select(func.count()).select_from(Chunk).where(Chunk.repo_id == repo_id)) or 0
                texts = list(session.scalars(
                    select(Chunk.text).where(Chunk.repo_id == repo_id).order_by(Chunk.seq)))
            pipeline = {
                "report": report.model_dump(mode="json"),
                "passages": passages,
                "passages_embedded_reported": report.passages_embedded,
                "passages_embedded_counted": first_meter["passages"],
                "indexed_by_sync": synced,
                "ingest_s": round(ingest_s, 3),
                "sync_index_s": round(pipeline_s - ingest_s, 3),
                "seconds": round(pipeline_s, 3),
                "passages_per_s": round(passages / pipeline_s, 2),
                "in_embed_s": round(first_meter["seconds"]["embed"], 3),
                "embed_calls": first_meter["calls"]["embed"],
                "in_count_tokens_s": round(first_meter["seconds"]["count_tokens"], 3),
                "count_tokens_calls": first_meter["calls"]["count_tokens"],
                "other_s": round(pipeline_s - first_meter["seconds"]["embed"]
                                 - first_meter["seconds"]["count_tokens"], 3),
                "flush_s_not_counted": round(flush_s, 3),
                "load_average_before": load_before,
                "load_average_after": load_average(),
                "embed_call_s": first_meter["embed_call_s"],
            }
            results["pipeline"] = pipeline

            # -- the embedder alone on the same passages -----------------------------------
            print(f"embedding the {len(texts)} stored passages alone ...", file=sys.stderr,
                  flush=True)
            meter.detach()
            load_before = load_average()
            call_s = []
            started = time.perf_counter()
            for offset in range(0, len(texts), batch_size):
                call_started = time.perf_counter()
                embedder.embed(texts[offset:offset + batch_size])
                call_s.append(round(time.perf_counter() - call_started, 3))
            baseline_s = time.perf_counter() - started
            results["embedder"] = {
                "passages": len(texts),
                "embed_calls": -(-len(texts) // batch_size),
                "seconds": round(baseline_s, 3),
                "passages_per_s": round(len(texts) / baseline_s, 2),
                "load_average_before": load_before,
                "load_average_after": load_average(),
                "embed_call_s": call_s,
            }
            results["ratio_pipeline_over_embedder"] = round(
                pipeline["passages_per_s"] / results["embedder"]["passages_per_s"], 3)
            results["share_of_pipeline_in_embed"] = round(pipeline["in_embed_s"] / pipeline_s, 3)

            # -- the same ingest again: nothing to embed ------------------------------------
            print("ingesting again ...", file=sys.stderr, flush=True)
            meter = Meter(embedder)
            report2, ingest2_s, total2_s, synced2, _ = timed_ingest(services, folder)
            meter.detach()
            results["second_run"] = {
                "report": report2.model_dump(mode="json"),
                "passages_embedded_reported": report2.passages_embedded,
                "passages_embedded_counted": meter.passages,
                "embed_calls": meter.calls["embed"],
                "count_tokens_calls": meter.calls["count_tokens"],
                "indexed_by_sync": synced2,
                "seconds": round(total2_s, 3),
                "speedup_over_first": round(pipeline_s / total2_s, 1),
                "load_average_after": load_average(),
            }
        finally:
            services.close()

    p, e, s = results["pipeline"], results["embedder"], results["second_run"]
    print(f"ingest of {n_files} PEP files on {backend}, {MODEL_NAME}, batch {batch_size}, "
          f"load average {results['machine']['load_average_at_start']} at start, "
          f"{s['load_average_after']} at end")
    print(table([
        ["pipeline (ingest_path + sync_index)", p["passages"], p["seconds"], p["passages_per_s"]],
        ["embedder alone, same passages", e["passages"], e["seconds"], e["passages_per_s"]],
        ["second ingest (unchanged files)", s["passages_embedded_counted"], s["seconds"], "-"],
    ], ["run", "passages", "seconds", "passages/s"]))
    print(f"ratio pipeline/embedder: {results['ratio_pipeline_over_embedder']} "
          "(target: at least 0.85)")
    print(f"pipeline breakdown: embed {p['in_embed_s']} s in {p['embed_calls']} calls, "
          f"count_tokens {p['in_count_tokens_s']} s in {p['count_tokens_calls']} calls, "
          f"everything else {p['other_s']} s (of which sync_index {p['sync_index_s']} s); "
          f"snapshot flush {p['flush_s_not_counted']} s not counted")
    print(f"second run: {len(s['report']['skipped'])} files skipped, "
          f"{s['passages_embedded_reported']} passages embedded, {s['embed_calls']} embed calls, "
          f"{s['speedup_over_first']}x faster than the first (target: at least 50x)")
    write_results(results, out)
    return results


if __name__ == "__main__":
    main()
