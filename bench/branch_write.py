"""Small writes on a fresh branch (issue 37): 100 records onto a branch of a large repository.

An agent's write: a branch freshly created from ``main`` of a repository of ``--nodes`` nodes
(one chunk each, a ~100-word ``content``, a 384-d vector), then 100 records written on it.
Two of kg's write paths are timed, each round on a branch of its own:

- ``import``: ``kg.ops.bulk.import_ndjson`` of 100 nodes with their chunks and vectors (base64),
  as ``peers_bench.py``'s branch figure writes them (new paths under ``/s0``);
- ``batch``: ``kg.ops.nodes.batch`` of 100 upserts in one revision (``nodes:batch``): 90 new
  paths, some below a new folder (``parents``), and 10 overrides of main's nodes.

Every round writes new texts (new content keys: chunks stored, jobs queued as for new content).
Branch creation is timed apart. The SQL statements of each write are counted by a
``before_cursor_execute`` listener on the engine (an ``executemany`` is one; PostgreSQL's
``COPY`` of a bulk insert goes past SQLAlchemy and is not counted). With ``lancedb`` importable
(not one of kg's dependencies: run under a venv that has it, with this checkout on
``PYTHONPATH``), LanceDB's ``table.branches.create`` and ``branch.add`` of the same 100 rows
(the same vectors and texts) are timed in the same rounds, interleaved, and the ratio
LanceDB / kg printed (>= 1: kg as fast or faster). ``--baseline`` (an earlier results file of
this script) prints the ratio against it instead, or as well.

The database is built anew per run, in a temporary folder (``--database-url``: a fresh schema of
that PostgreSQL database instead of SQLite); the background index catch-up and the embedding
queue are drained between writes, outside the timings.

Run: ``python bench/branch_write.py [--nodes 10000] [--rounds 30] [--database-url URL]
[--profile DIR] [--data DIR]`` (``--profile``: a cProfile of each path's writes, one file per
path; ``--data``: a SQLite database kept between runs, for profiling at 100,000 nodes).
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy is imported
os.environ.setdefault("LANCEDB_LOG", "error")

import argparse  # noqa: E402
import base64  # noqa: E402
import cProfile  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sqlalchemy import event  # noqa: E402

from bench._common import (  # noqa: E402
    RESULTS,
    isolated_database,
    load_average,
    machine,
    percentile,
    redact,
    table,
    write_results,
)
from kg.context import OPERATOR, run  # noqa: E402
from kg.indexing.chunks import plan_pieces, plan_text  # noqa: E402
from kg.indexing.config import workspace_embedding  # noqa: E402
from kg.ops import branches as branch_ops  # noqa: E402
from kg.ops import bulk  # noqa: E402
from kg.ops.nodes import batch  # noqa: E402
from kg.providers.registry import make_embedder  # noqa: E402
from kg.services import Services  # noqa: E402
from kg.settings import Settings  # noqa: E402
from kg.store.repos import get_repository  # noqa: E402

REPO, WORKSPACE = "peers", "kb"
MODEL = "fake:hash-384"
DIM = 384
SECTION = 1_000
WORDS_PER_TEXT = 100
WRITES = 100
OVERRIDES = 10


class Corpus:
    """Texts and unit vectors drawn from one seeded generator, and kg's content key and single
    passage of each text (as ``peers_bench.py``'s ``plan_one``)."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.words = [f"w{i}" for i in range(20_000)]
        zipf = 1.0 / np.arange(1, len(self.words) + 1) ** 1.07
        self.p = zipf / zipf.sum()
        self.embedder = make_embedder(MODEL, allow_fake=True)
        self.config = workspace_embedding({"embedding": {"model": MODEL}}, default_model=MODEL)

    def draw(self, n: int) -> tuple[list[str], np.ndarray]:
        drawn = self.rng.choice(len(self.words), size=(n, WORDS_PER_TEXT), p=self.p)
        texts = [" ".join(self.words[w] for w in row) for row in drawn]
        vectors = self.rng.standard_normal((n, DIM)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        return texts, vectors

    def node_lines(self, paths: list[str], texts: list[str], vectors: np.ndarray) -> list[str]:
        """A node line and its chunk line (with the vector, base64) per record."""
        lines = []
        for path, text, vector in zip(paths, texts, vectors, strict=True):
            plan = plan_text({"content": text}, self.config, self.embedder)
            pieces = plan_pieces(plan, self.embedder)
            assert len(pieces) == 1, f"a text planned as {len(pieces)} chunks, expected 1"
            piece = pieces[0]
            lines.append(json.dumps({"record": "node", "workspace": WORKSPACE, "path": path, "node_type": "kb:Note",
                                     "properties": {"content": text}}, separators=(",", ":")))
            lines.append(json.dumps({
                "record": "chunk", "content_key": plan.content_key, "chunk_index": 0, "field": piece.field,
                "text": piece.text, "char_start": piece.start, "char_end": piece.end, "model": MODEL, "dim": DIM,
                "vector": base64.b64encode(np.ascontiguousarray(vector, dtype="<f4").tobytes()).decode("ascii")},
                separators=(",", ":")))
        return lines


def header(branch: str) -> str:
    return json.dumps({"record": "header", "format": "kg-ndjson", "version": 1, "repo": REPO, "branch": branch,
                       "revision": 0, "with_chunks": True,
                       "workspaces": [{"name": WORKSPACE, "embedding": {"model": MODEL}}]})


def build(services: Services, corpus: Corpus, n: int) -> tuple[dict[str, Any], list[str], np.ndarray]:
    """The repository: ``/s<k>`` folders of ``SECTION`` nodes ``/s<k>/n<i>``, one chunk each, imported
    in parts of 20,000 records; its texts and vectors (for LanceDB's table)."""
    started = time.perf_counter()
    texts: list[str] = []
    vectors: list[np.ndarray] = []
    sections = (n + SECTION - 1) // SECTION
    folders = [json.dumps({"record": "node", "workspace": WORKSPACE, "path": f"/s{k}", "node_type": "kg:Folder",
                           "properties": {"section": k}}) for k in range(sections)]
    for start in range(0, n, 20_000):
        size = min(20_000, n - start)
        part_texts, part_vectors = corpus.draw(size)
        paths = [f"/s{i // SECTION}/n{i}" for i in range(start, start + size)]
        lines = [header("main"), *(folders if start == 0 else []),
                 *corpus.node_lines(paths, part_texts, part_vectors)]
        bulk.import_ndjson(services, OPERATOR, REPO, lines)
        texts += part_texts
        vectors.append(part_vectors)
    settle(services)
    return {"nodes": n, "build_s": round(time.perf_counter() - started, 1)}, texts, np.concatenate(vectors)


def settle(services: Services) -> None:
    """The embedding queue drained and the index's background work done (outside the timings)."""
    while True:
        done = services.indexer.run_pending()
        if not done.done and not done.failed:
            break
    with services.db.read() as session:
        key = get_repository(session, REPO).uid
    wait = getattr(services.index, "wait_for_background", None)  # the embedded index's
    if wait is not None:
        wait(key)


class StatementCounter:
    """SQL statements sent through the engine while :meth:`counting` is open."""

    def __init__(self, engine: Any) -> None:
        self.count = 0
        self.on = False
        event.listen(engine, "before_cursor_execute", self._seen)

    def _seen(self, *_: Any) -> None:
        if self.on:
            self.count += 1

    @contextmanager
    def counting(self) -> Iterator[None]:
        self.count, self.on = 0, True
        try:
            yield
        finally:
            self.on = False


def summary(samples: list[float]) -> dict[str, float]:
    return {"p50_ms": round(percentile(samples, 50), 2), "p95_ms": round(percentile(samples, 95), 2),
            "min_ms": round(min(samples), 2), "max_ms": round(max(samples), 2), "n": len(samples)}


def lance_table(folder: Path, texts: list[str], vectors: np.ndarray) -> Any:
    """LanceDB's table of the same records (``id``, ``text``, ``vector``), or None without lancedb."""
    try:
        import lancedb  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return None
    db = lancedb.connect(str(folder / "lance"))
    return db.create_table("docs", data=arrow_rows(range(len(texts)), texts, vectors))


def arrow_rows(ids: Any, texts: list[str], vectors: np.ndarray) -> Any:
    import pyarrow as pa  # type: ignore[import-not-found, unused-ignore]

    return pa.table({"id": pa.array(np.asarray(list(ids), dtype=np.int64)), "text": pa.array(texts),
                     "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.astype(np.float32).ravel()), DIM)})


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--database-url", default=None, help="a PostgreSQL URL (a fresh schema); default SQLite")
    parser.add_argument("--baseline", type=Path, default=None, help="an earlier results file of this script")
    parser.add_argument("--profile", type=Path, default=None, help="a folder for the cProfile of each path")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="wall: elapsed time; cpu: the process's CPU time, all its threads (steadier when other "
                             "processes load the machine; leaves out waits for the disk)")
    parser.add_argument("--no-lancedb", action="store_true", help="leave LanceDB out even if importable")
    parser.add_argument("--data", type=Path, default=None,
                        help="keep the SQLite database and index in this folder, built once and reused by later runs "
                             "(their branches accumulate); default: a temporary folder per run")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    results: dict[str, Any] = {"machine": machine(), "load_average_before": load_average(), "nodes": args.nodes,
                               "rounds": args.rounds, "writes": WRITES, "clock": args.clock}
    corpus = Corpus(args.seed)
    with tempfile.TemporaryDirectory(prefix="kg-branch-write-") as tmp, \
            isolated_database(args.database_url if args.data is None else None, Path(tmp)) as (url, backend):
        folder = Path(tmp) if args.data is None else args.data
        kept = args.data is not None and (folder / "kg.sqlite3").exists()
        if args.data is not None:
            folder.mkdir(parents=True, exist_ok=True)
            url = f"sqlite:///{folder / 'kg.sqlite3'}"
        results["database"] = {"backend": backend, "url": redact(url), "kept": kept}
        settings = Settings(database_url=url, data_dir=folder / "data", embedding_model=MODEL,
                            index_inline=False, allow_fake_embedder=True)
        services = Services.from_settings(settings)
        try:
            services.db.upgrade()
            if kept:
                texts, vectors = corpus.draw(args.nodes)  # LanceDB's table: records like the kept ones
            else:
                print(f"building {args.nodes:,} nodes ...", file=sys.stderr, flush=True)
                results["build"], texts, vectors = build(services, corpus, args.nodes)
            lance = None if args.no_lancedb else lance_table(Path(tmp), texts, vectors)
            results["lancedb"] = lance is not None
            results.update(rounds(services, corpus, lance, args))
        finally:
            services.close()
    results["load_average_after"] = load_average()
    report(results, args)
    out = args.out or RESULTS / f"branch_write_{args.nodes}_{results['database']['backend']}.json"
    write_results(results, out)
    return results


def rounds(services: Services, corpus: Corpus, lance: Any, args: argparse.Namespace) -> dict[str, Any]:
    """The timed rounds, interleaved: each round creates the branches and writes each way, in an
    order rotated per round."""
    counter = StatementCounter(services.db.engine)
    samples: dict[str, list[float]] = {"kg create branch": [], "kg import": [], "kg batch": []}
    statements: dict[str, list[int]] = {"kg import": [], "kg batch": []}
    if lance is not None:
        samples.update({"lancedb create branch": [], "lancedb add": []})
    profiles = {name: cProfile.Profile() for name in ("kg import", "kg batch")} if args.profile else {}
    n = args.nodes
    clock = time.perf_counter if args.clock == "wall" else time.process_time

    def kg_branch(name: str) -> None:
        started = clock()
        run(services, OPERATOR, branch_ops.create_branch, REPO, name=name, from_branch="main")
        samples["kg create branch"].append((clock() - started) * 1000)

    def timed(name: str, write: Callable[[], Any]) -> None:
        profile = profiles.get(name)
        with counter.counting():
            started = clock()
            if profile is not None:
                profile.enable()
            write()
            if profile is not None:
                profile.disable()
            samples[name].append((clock() - started) * 1000)
        statements[name].append(counter.count)

    tag = f"{time.time_ns():x}"  # branch names of their own in a kept database

    def kg_import(r: int) -> None:
        branch = f"agent/i{r}-{tag}"
        kg_branch(branch)
        texts, vectors = corpus.draw(WRITES)
        lines = [header(branch), *corpus.node_lines([f"/s0/new{j}" for j in range(WRITES)], texts, vectors)]
        timed("kg import", lambda: bulk.import_ndjson(services, OPERATOR, REPO, lines, branch=branch))

    def kg_batch(r: int) -> None:
        branch = f"agent/b{r}-{tag}"
        kg_branch(branch)
        texts, _ = corpus.draw(WRITES)
        picked = [k * (n // OVERRIDES) + r % (n // OVERRIDES) for k in range(OVERRIDES)]
        paths = [f"/s{i // SECTION}/n{i}" for i in picked]  # main's nodes, overridden
        paths += [f"/s0/b{j}" if j % 2 else f"/notes/{tag}-{r}/b{j}" for j in range(WRITES - OVERRIDES)]
        upserts = [{"workspace": WORKSPACE, "path": p, "node_type": "kb:Note", "properties": {"content": t}}
                   for p, t in zip(paths, texts, strict=True)]
        timed("kg batch", lambda: run(services, OPERATOR, batch, REPO, branch, upserts=upserts, parents=True))

    def lance_write(r: int) -> None:
        texts, vectors = corpus.draw(WRITES)
        rows = arrow_rows(range(n + r * WRITES, n + (r + 1) * WRITES), texts, vectors)
        started = clock()
        branch = lance.branches.create(f"b{r}")
        between = clock()
        branch.add(rows)
        done = clock()
        samples["lancedb create branch"].append((between - started) * 1000)
        samples["lancedb add"].append((done - between) * 1000)

    ways: list[Callable[[int], None]] = [kg_import, kg_batch]
    if lance is not None:
        ways.append(lance_write)
    for r in range(args.warmup + args.rounds):
        if r == args.warmup:
            for kept in (samples, statements):
                for values in kept.values():
                    values.clear()
        shift = r % len(ways)
        for way in ways[shift:] + ways[:shift]:
            way(r)
            settle(services)
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
        for name, profile in profiles.items():
            profile.dump_stats(str(args.profile / f"{name.replace(' ', '_')}_{n}.prof"))
    return {"figures": {name: summary(s) for name, s in samples.items()},
            "statements": {name: {"min": min(c), "max": max(c)} for name, c in statements.items()}}


def report(results: dict[str, Any], args: argparse.Namespace) -> None:
    figures, statements = results["figures"], results["statements"]
    base = json.loads(args.baseline.read_text())["figures"] if args.baseline else {}
    base_statements = json.loads(args.baseline.read_text())["statements"] if args.baseline else {}
    rows = []
    for name, f in figures.items():
        sql = statements.get(name)
        row = [name, f["p50_ms"], f["p95_ms"], "" if sql is None else
               (f"{sql['min']}" if sql["min"] == sql["max"] else f"{sql['min']}-{sql['max']}")]
        if base:
            before = base.get(name)
            row += [before["p50_ms"] if before else "", round(before["p50_ms"] / f["p50_ms"], 2) if before else "",
                    base_statements.get(name, {}).get("max", "")]
        rows.append(row)
    print(table(rows, ["write", "p50 ms", "p95 ms", "SQL statements"]
                + (["before p50 ms", "before / now", "before SQL"] if base else [])))
    if results["lancedb"]:
        add = figures["lancedb add"]["p50_ms"]
        both = add + figures["lancedb create branch"]["p50_ms"]
        create = figures["kg create branch"]["p50_ms"]
        for name in ("kg import", "kg batch"):
            mine = figures[name]["p50_ms"]
            print(f"lancedb / kg, p50: {name} {add / mine:.2f} (lancedb add {add} ms, kg {mine} ms); "
                  f"create + write {both / (create + mine):.2f}")
    print(f"{results['nodes']:,} nodes, {results['database']['backend']}, {results['clock']} clock; load average "
          f"before {results['load_average_before']}, after {results['load_average_after']}")


if __name__ == "__main__":
    main()
