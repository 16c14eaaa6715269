"""Backup and restore of a whole store at N nodes, against a plain copy of the stopped store.

1. **Store**: N nodes with their chunks and vectors and ``--edges-per-node`` x N relations,
   generated and imported as ``bench/scale.py`` does (:func:`bench.scale.generate`, the bulk
   import's use case), the embedded index synced and its snapshot written (with the HNSW graph
   once a model has ``KG_INDEX_ANN_MIN_ROWS`` rows), on SQLite in a temporary data directory
   (``--database-url`` for PostgreSQL, in a schema of its own).
2. **Plain copy** (the peer, SQLite only): the stopped store's database file and index folder
   copied with ``shutil.copy2`` (best of ``--repeats``): what an operator would do with the
   server down.
3. **Backup** through :func:`kg.backup.backup_store` (what ``kg backup`` runs): without
   probes, then with them (the recorded searches, logs and NEIGHBORS), each timed; its size.
4. **Restore** into a fresh data directory (PostgreSQL: a scratch database, dropped after)
   through :func:`kg.backup.restore_store`, timed; then :func:`kg.backup.verify_store`,
   timed, and whether every probe matched.

Prints a table with each time's ratio to the plain copy and writes
``bench/results/backup.json`` (``backup_<backend>.json``). Run:
``python bench/backup.py --nodes 100000`` (the data files are kept in ``--workdir``).
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy is imported

import argparse  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from sqlalchemy.engine import make_url  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import RESULTS, isolated_database, load_average, machine, redact, table, write_results  # noqa: E402
from bench.scale import MODEL, generate, import_file, sync  # noqa: E402
from kg import backup as backup_ops  # noqa: E402
from kg.context import OPERATOR  # noqa: E402
from kg.errors import NotFound  # noqa: E402
from kg.services import Services  # noqa: E402
from kg.settings import Settings  # noqa: E402
from kg.store.repos import get_repository  # noqa: E402

#: KG_INDEX_ANN_MIN_ROWS of the run (``--ann-min-rows``; None: kg's default).
ANN_MIN_ROWS: list[int | None] = [None]


def make_services(url: str, data_dir: Path) -> Services:
    """The services as ``kg serve`` builds them, on the fake model of the generated vectors."""
    extra = {} if ANN_MIN_ROWS[0] is None else {"index_ann_min_rows": ANN_MIN_ROWS[0]}
    settings = Settings(database_url=url, data_dir=data_dir, embedding_model=MODEL, allow_fake_embedder=True,
                        **extra)
    services = Services.from_settings(settings)
    services.db.upgrade()
    return services


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def build(n: int, args: argparse.Namespace, url: str, data_dir: Path) -> dict[str, Any]:
    """Import the generated store (unless ``data_dir`` holds it already: a SQLite store is kept
    in ``--workdir`` between runs) and write its index snapshot; the figures of what was done."""
    marker = data_dir.parent / "built.json"
    if marker.exists():
        return {**json.loads(marker.read_text()), "reused": True}
    data = generate(args.workdir, n, args.edges_per_node, args.seed)
    out: dict[str, Any] = {"nodes": n, "chunks": data["chunks"], "relations": data["relations"],
                           "ann_min_rows": ANN_MIN_ROWS[0]}
    services = make_services(url, data_dir)
    try:
        try:
            with services.db.read() as session:
                get_repository(session, "scale")
            out["import"] = "imported by an earlier run"
        except NotFound:
            nodes_s, _, _ = import_file(services, "scale", data["nodes_file"], part=args.part_nodes)
            relations_s, _, _ = import_file(services, "scale", data["relations_file"])
            out["import_nodes_s"], out["import_relations_s"] = round(nodes_s, 1), round(relations_s, 1)
        sync_s, graph_s = sync(services, "scale")
        out["index_sync_s"] = round(sync_s + graph_s, 1)
        with services.db.read() as session:
            uid = get_repository(session, "scale").uid
        services.index.flush(uid)
        services.db.checkpoint(wait_s=5.0)
    finally:
        services.close()
    if make_url(url).get_backend_name() == "sqlite":
        marker.write_text(json.dumps(out))
    return out


def plain_copy(data_dir: Path, tmp: Path, repeats: int) -> tuple[float, int]:
    """Best time of copying the stopped store's files (database and index), and their bytes."""
    best = float("inf")
    for i in range(repeats):
        target = tmp / f"plain-{i}"
        start = time.perf_counter()
        shutil.copytree(data_dir, target)
        best = min(best, time.perf_counter() - start)
        size = folder_bytes(target)
        shutil.rmtree(target)
    return best, size


def timed_backup(url: str, data_dir: Path, dest: Path, probes: bool) -> tuple[float, Any]:
    services = make_services(url, data_dir)
    try:
        start = time.perf_counter()
        manifest = backup_ops.backup_store(services, OPERATOR, dest, open_store=Services.from_settings, probes=probes)
        return time.perf_counter() - start, manifest
    finally:
        services.close()


def restore_target(url: str, backend: str, tmp: Path) -> tuple[str, Any]:
    """A URL to restore into and a function that drops it (PostgreSQL: a scratch database whose
    search path names the backed-up schema)."""
    if backend == "sqlite":
        return f"sqlite:///{tmp / 'restored' / 'kg.sqlite3'}", lambda: None
    from sqlalchemy import create_engine
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    name = f"kg_bench_restore_{uuid.uuid4().hex[:8]}"
    admin = create_engine(parsed.set(query={}), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')

    def drop() -> None:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()

    return parsed.set(database=name).render_as_string(hide_password=False), drop


@contextlib.contextmanager
def store_database(args: argparse.Namespace, n: int, tmp: Path) -> Iterator[tuple[str, str, Path]]:
    """The store's URL, backend and data directory: SQLite in ``--workdir/store-<n>/data``
    (kept, so a second run skips the import), PostgreSQL in a schema of its own (dropped)."""
    if args.database_url is None:
        data_dir = args.workdir / f"store-{n}" / "data"
        data_dir.mkdir(parents=True, exist_ok=True)
        yield f"sqlite:///{data_dir / 'kg.sqlite3'}", "sqlite", data_dir
        return
    with isolated_database(args.database_url, tmp) as (url, backend):
        yield url, backend, tmp / "data"


def measure(n: int, args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp_name, \
            store_database(args, n, Path(tmp_name)) as (url, backend, data_dir):
        tmp = Path(tmp_name)
        out["database"], out["url"] = backend, redact(url)
        out.update(build(n, args, url, data_dir))
        print(f"  [{n:,}] store built", file=sys.stderr, flush=True)
        if backend == "sqlite":
            copy_s, copy_bytes = plain_copy(data_dir, tmp, args.repeats)
            out["plain_copy"] = {"s": round(copy_s, 2), "bytes": copy_bytes}
        else:
            out["plain_copy"] = None
        seconds, manifest = timed_backup(url, data_dir, tmp / "backup-bare", probes=False)
        out["backup_no_probes"] = {"s": round(seconds, 2), "bytes": folder_bytes(tmp / "backup-bare")}
        shutil.rmtree(tmp / "backup-bare")
        seconds, manifest = timed_backup(url, data_dir, tmp / "backup", probes=True)
        out["backup"] = {"s": round(seconds, 2), "bytes": folder_bytes(tmp / "backup"),
                         "files": len(manifest.files), "probes": len(manifest.probes)}
        print(f"  [{n:,}] backed up", file=sys.stderr, flush=True)
        target_url, drop = restore_target(url, backend, tmp)
        try:
            extra = {} if ANN_MIN_ROWS[0] is None else {"index_ann_min_rows": ANN_MIN_ROWS[0]}
            settings = Settings(database_url=target_url, data_dir=tmp / "restored", embedding_model=MODEL,
                                allow_fake_embedder=True, **extra)
            start = time.perf_counter()
            backup_ops.restore_store(settings, OPERATOR, tmp / "backup")
            out["restore"] = {"s": round(time.perf_counter() - start, 2)}
            start = time.perf_counter()
            report = backup_ops.verify_store(settings, OPERATOR, tmp / "backup", open_store=Services.from_settings)
            out["verify"] = {"s": round(time.perf_counter() - start, 2), "ok": report.ok, "probes": report.probes,
                             "matched": report.matched}
        finally:
            drop()
    return out


def ratio(seconds: float | None, base: dict[str, Any] | None) -> str:
    if seconds is None or not base or not base["s"]:
        return "-"
    return f"{seconds / base['s']:.1f}x"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--edges-per-node", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3, help="plain copies timed (the best is kept)")
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "kg-bench-scale")
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--part-nodes", type=int, default=None,
                        help="import the nodes file in parts of this many nodes (1M: 100000)")
    parser.add_argument("--ann-min-rows", type=int, default=None,
                        help="KG_INDEX_ANN_MIN_ROWS (above the chunks: no HNSW graph is built or copied)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    ANN_MIN_ROWS[0] = args.ann_min_rows
    args.workdir.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"benchmark": "backup", "machine": machine()}
    r = measure(args.nodes, args)
    results["result"] = r
    results["load_average_at_end"] = load_average()
    base = r["plain_copy"]
    mib = 2 ** 20
    rows = [
        ["plain copy of the stopped store", f"{base['s']:.2f} s" if base else "-",
         f"{base['bytes'] / mib:,.0f} MiB" if base else "-", "1.0x" if base else "-"],
        ["backup, no probes", f"{r['backup_no_probes']['s']:.2f} s", f"{r['backup_no_probes']['bytes'] / mib:,.0f} MiB",
         ratio(r["backup_no_probes"]["s"], base)],
        [f"backup with {r['backup']['probes']} probes", f"{r['backup']['s']:.2f} s",
         f"{r['backup']['bytes'] / mib:,.0f} MiB", ratio(r["backup"]["s"], base)],
        ["restore", f"{r['restore']['s']:.2f} s", "", ratio(r["restore"]["s"], base)],
        [f"verify ({r['verify']['matched']}/{r['verify']['probes']} match)", f"{r['verify']['s']:.2f} s", "",
         ratio(r["verify"]["s"], base)],
    ]
    print(table(rows, [f"{r['nodes']:,} nodes, {r['chunks']:,} chunks, {r['relations']:,} relations ({r['database']})",
                       "time", "size", "vs copy"]))
    print(f"load average at end: {results['load_average_at_end']}")
    backend = r["database"]
    write_results(results, args.out or RESULTS / ("backup.json" if backend == "sqlite" else f"backup_{backend}.json"))
    return results


if __name__ == "__main__":
    main()
