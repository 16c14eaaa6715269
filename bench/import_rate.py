"""Benchmark of the bulk import (``kg import ndjson``) against the normal batch write path.

Generates a kg-ndjson file of ``--nodes`` nodes in two workspaces (``/section-k`` folders of
``--section-size`` nodes ``/section-k/node-i``, each with a title, small properties and an
order) and ``--relations`` relations between random nodes (a few types, weights, some with
properties). Without embedding: the workspaces use the fake embedder, so each title gets its
content key and its embedding job, as a write queues it, but nothing is embedded.

Measured, in one run on one database:

1. nodes: the file's nodes alone imported into a new repository (parse, check, write, commit);
2. relations: the file's relations alone imported into that repository (their endpoints are
   then on the branch, looked up by one scan);
3. both together into another new repository, for the total;
4. the normal path on a sample: ``--sample`` nodes through the ``nodes:batch`` use case
   (:func:`kg.ops.nodes.batch`, 1,000 nodes a batch as a client sends them), and
   ``--sample`` relations through :func:`kg.ops.nodes.write_graph` (one revision).

5. with ``--growth-parts K``: K more files of ``--relations`` new relations each, imported one
   after another into the branch of (1) and (2): relations/s as the branch's relations grow,
   against the first import's (the branch held none then).

Prints nodes/s, relations/s and the ratio bulk / normal, by the wall clock and by this
process's CPU time (SQLite runs in the process, so its CPU time is the import's whole cost
there; on a loaded machine the wall clock mostly measures the other processes), and writes JSON (default
``bench/results/import_rate.json``, or ``import_rate_postgresql.json`` on PostgreSQL).
Run: ``python bench/import_rate.py [--nodes 50000] [--relations 200000] [--sample 2000] [--growth-parts 0]
[--database-url postgresql+psycopg://postgres@127.0.0.1:5432/test]``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import (  # noqa: E402
    RESULTS,
    isolated_database,
    load_average,
    machine,
    redact,
    table,
    write_results,
)
from kg.context import OPERATOR, run  # noqa: E402
from kg.index.embedded import EmbeddedVectorIndex  # noqa: E402
from kg.ops import bulk  # noqa: E402
from kg.ops import nodes as node_ops  # noqa: E402
from kg.ops import repos as repo_ops  # noqa: E402
from kg.providers.registry import make_embedder  # noqa: E402
from kg.services import Services  # noqa: E402
from kg.settings import Settings  # noqa: E402
from kg.store.db import Database  # noqa: E402
from kg.types.bulk import NdjsonImport  # noqa: E402

MODEL = "fake:hash-64"
WORKSPACES = ("knowledge", "library")
TYPES = ("cites", "mentions", "related_to", "part_of")
STATUSES = ("draft", "review", "published", "archived")


def _embedding() -> dict:
    return {"model": MODEL}


def generate(n_nodes: int, n_relations: int, section_size: int, seed: int) -> tuple[list[dict], list[dict]]:
    """The node and relation records (dicts) of the benchmark's file."""
    rng = random.Random(seed)
    nodes: list[dict] = []
    leaves: list[str] = []
    i = 0
    while len(nodes) < n_nodes:
        ws = WORKSPACES[(i // section_size) % len(WORKSPACES)]
        section = f"/section-{i // section_size}"
        if i % section_size == 0:
            nodes.append({"record": "node", "workspace": ws, "path": section, "node_type": "kg:Folder",
                          "properties": {"title": f"Section {i // section_size}"}})
        if len(nodes) < n_nodes:
            path = f"{section}/node-{i}"
            nodes.append({"record": "node", "workspace": ws, "path": path, "node_type": "kb:Note",
                          "properties": {"title": f"Note {i}", "status": rng.choice(STATUSES), "n": i,
                                         "tags": [f"t{i % 7}", f"t{i % 11}"]},
                          "order": float(i % section_size)})
            leaves.append(f"{ws}:{path}")
        i += 1
    relations = more_relations(leaves, n_relations, rng, set())
    return nodes, relations


def more_relations(leaves: list[str], n: int, rng: random.Random, seen: set[tuple[str, str, str]]) -> list[dict]:
    """``n`` relation records between random ``leaves`` whose keys are not in ``seen`` (which
    they join): a few types, weights, a quarter with properties."""
    relations: list[dict] = []
    while len(relations) < n:
        a, b, t = rng.choice(leaves), rng.choice(leaves), rng.choice(TYPES)
        if a == b or (a, b, t) in seen:
            continue
        seen.add((a, b, t))
        record = {"record": "relation", "from": a, "to": b, "type": t, "weight": round(rng.random(), 3)}
        if len(relations) % 4 == 0:
            record["properties"] = {"source": "bench"}
        relations.append(record)
    return relations


def growth(services: Services, tmp: Path, nodes: list[dict], relations: list[dict], parts: int,
           seed: int) -> list[dict]:
    """Import ``parts`` more files of ``len(relations)`` new relations each into the branch that
    holds the file's nodes and relations: the rate as the branch's relations grow (each import
    checks the branch for the relations it names, and its rows go into larger indexes)."""
    leaves = [f"{n['workspace']}:{n['path']}" for n in nodes if "/node-" in n["path"]]
    seen = {(r["from"], r["to"], r["type"]) for r in relations}
    rng = random.Random(seed + 1)
    out = []
    for part in range(1, parts + 1):
        held = len(relations) * part
        path = write_file(tmp / f"more-{part}.ndjson", [], more_relations(leaves, len(relations), rng, seen))
        seconds, cpu, _ = timed_import(services, "bulk", path)
        out.append({"branch_relations_before": held, "relations_s": round(seconds, 3),
                    "relations_per_s": round(len(relations) / seconds, 1),
                    "relations_per_cpu_s": round(len(relations) / cpu, 1)})
        print(f"  part {part}: {len(relations):,} relations beside {held:,}: {len(relations) / seconds:,.0f}/s",
              file=sys.stderr, flush=True)
        path.unlink()
    return out


def write_file(path: Path, nodes: list[dict], relations: list[dict]) -> Path:
    """A kg-ndjson file of these records (header first)."""
    header = {"record": "header", "format": "kg-ndjson", "version": 1, "repo": "bench", "branch": "main",
              "revision": 0, "workspaces": [{"name": ws, "embedding": _embedding()} for ws in WORKSPACES],
              "counts": {"nodes": len(nodes), "relations": len(relations), "chunks": 0}}
    with path.open("w", encoding="utf-8") as out:
        for record in [header, *nodes, *relations]:
            out.write(json.dumps(record, separators=(",", ":")) + "\n")
    return path


def timed_import(services: Services, repo: str, path: Path) -> tuple[float, float, NdjsonImport]:
    """Wall and CPU seconds (this process) to import the file (read from disk, parsed, checked,
    written, committed)."""
    start, cpu = time.perf_counter(), time.process_time()
    with path.open("rb") as handle:
        report = bulk.import_ndjson(services, OPERATOR, repo, handle)
    return time.perf_counter() - start, time.process_time() - cpu, report


def normal_path(services: Services, nodes: list[dict], relations: list[dict], sample: int) -> dict:
    """Nodes through ``nodes:batch`` (1,000 a batch) and relations through ``write_graph``."""
    run(services, OPERATOR, repo_ops.create_repository, "normal")
    for ws in WORKSPACES:
        run(services, OPERATOR, repo_ops.create_workspace, "normal", ws, _embedding())
    picked = nodes[:sample]
    upserts = [{k: v for k, v in n.items() if k != "record"} for n in picked]
    start, cpu = time.perf_counter(), time.process_time()
    for offset in range(0, len(upserts), 1000):
        run(services, OPERATOR, node_ops.batch, "normal", "main", upserts=upserts[offset:offset + 1000])
    node_s, node_cpu = time.perf_counter() - start, time.process_time() - cpu
    present = {f"{n['workspace']}:{n['path']}" for n in picked}
    rels = [r for r in relations if r["from"] in present and r["to"] in present][:sample]
    if len(rels) < sample:  # a small sample holds few of the random edges: make its own
        rng = random.Random(1)
        leaves = sorted(a for a in present if "/node-" in a)
        seen = {(r["from"], r["to"], r["type"]) for r in rels}
        while len(rels) < sample:
            a, b, t = rng.choice(leaves), rng.choice(leaves), rng.choice(TYPES)
            if a != b and (a, b, t) not in seen:
                seen.add((a, b, t))
                rels.append({"from": a, "to": b, "type": t, "weight": round(rng.random(), 3)})
    todo = node_ops.GraphWrite(relations=[{k: v for k, v in r.items() if k != "record"} for r in rels])
    start, cpu = time.perf_counter(), time.process_time()
    run(services, OPERATOR, node_ops.write_graph, "normal", "main", lambda session, view: todo)
    rel_s, rel_cpu = time.perf_counter() - start, time.process_time() - cpu
    return {"nodes": len(upserts), "nodes_s": round(node_s, 3), "nodes_per_s": round(len(upserts) / node_s, 1),
            "nodes_per_cpu_s": round(len(upserts) / node_cpu, 1),
            "relations": len(rels), "relations_s": round(rel_s, 3),
            "relations_per_s": round(len(rels) / rel_s, 1), "relations_per_cpu_s": round(len(rels) / rel_cpu, 1)}


def main() -> None:
    """Run the benchmark and print and write its figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=50_000)
    parser.add_argument("--relations", type=int, default=200_000)
    parser.add_argument("--section-size", type=int, default=100)
    parser.add_argument("--sample", type=int, default=2_000, help="nodes and relations written the normal way")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--growth-parts", type=int, default=0,
                        help="then import this many more files of --relations new relations each into the same branch")
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    facts = machine()
    with tempfile.TemporaryDirectory() as tmp_name, \
            isolated_database(args.database_url, Path(tmp_name)) as (url, backend):
        tmp = Path(tmp_name)
        settings = Settings(database_url=url, data_dir=tmp / "data", embedding_model=MODEL,
                            allow_fake_embedder=True, index_inline=False)
        db = Database(settings.resolved_database_url())
        db.upgrade()
        services = Services(settings=settings, db=db, index=EmbeddedVectorIndex(settings.data_dir),
                            embedder_factory=lambda name: make_embedder(name, allow_fake=True))
        try:
            nodes, relations = generate(args.nodes, args.relations, args.section_size, args.seed)
            nodes_file = write_file(tmp / "nodes.ndjson", nodes, [])
            relations_file = write_file(tmp / "relations.ndjson", [], relations)
            both_file = write_file(tmp / "both.ndjson", nodes, relations)
            nodes_s, nodes_cpu, node_report = timed_import(services, "bulk", nodes_file)
            relations_s, relations_cpu, _ = timed_import(services, "bulk", relations_file)
            both_s, _, both_report = timed_import(services, "bulk-both", both_file)
            normal = normal_path(services, nodes, relations, args.sample)
            grown = growth(services, tmp, nodes, relations, args.growth_parts, args.seed)
        finally:
            services.close()
    bulk_nodes = len(nodes) / nodes_s
    bulk_relations = len(relations) / relations_s
    results = {
        "benchmark": "import_rate", "database": backend, "url": redact(url), "machine": facts,
        "nodes": len(nodes), "relations": len(relations), "queued_texts": node_report.queued,
        "bulk": {"nodes_s": round(nodes_s, 3), "nodes_per_s": round(bulk_nodes, 1),
                 "nodes_cpu_s": round(nodes_cpu, 3), "nodes_per_cpu_s": round(len(nodes) / nodes_cpu, 1),
                 "relations_s": round(relations_s, 3), "relations_per_s": round(bulk_relations, 1),
                 "relations_cpu_s": round(relations_cpu, 3),
                 "relations_per_cpu_s": round(len(relations) / relations_cpu, 1),
                 "both_s": round(both_s, 3), "both_revisions": both_report.revisions},
        "normal": normal,
        "growth": grown,
        "load_average_at_end": load_average(),
        "ratio": {"nodes": round(bulk_nodes / normal["nodes_per_s"], 1),
                  "relations": round(bulk_relations / normal["relations_per_s"], 1),
                  "nodes_cpu": round(len(nodes) / nodes_cpu / normal["nodes_per_cpu_s"], 1),
                  "relations_cpu": round(len(relations) / relations_cpu / normal["relations_per_cpu_s"], 1)},
    }
    ratio = results["ratio"]
    print(table([
        ["nodes", f"{bulk_nodes:,.0f}", f"{len(nodes) / nodes_cpu:,.0f}", f"{normal['nodes_per_s']:,.0f}",
         f"{normal['nodes_per_cpu_s']:,.0f}", f"{ratio['nodes']}x", f"{ratio['nodes_cpu']}x"],
        ["relations", f"{bulk_relations:,.0f}", f"{len(relations) / relations_cpu:,.0f}",
         f"{normal['relations_per_s']:,.0f}", f"{normal['relations_per_cpu_s']:,.0f}", f"{ratio['relations']}x",
         f"{ratio['relations_cpu']}x"],
    ], ["per second", "bulk (wall)", "bulk (CPU)", "normal (wall)", "normal (CPU)", "ratio (wall)",
        "ratio (CPU)"]))
    if grown:
        first = grown[0]["relations_per_s"]
        print(table([[f"{g['branch_relations_before']:,}", f"{g['relations_per_s']:,.0f}",
                      f"{g['relations_per_s'] / bulk_relations:.2f}", f"{g['relations_per_s'] / first:.2f}"]
                     for g in grown],
                    ["relations on the branch before", "relations/s", "/ first import (none held)", "/ first part"]))
    print(f"load average at the end: {load_average()}")
    print(f"{len(nodes):,} nodes + {len(relations):,} relations in one revision: {both_s:.1f} s ({backend})")
    out = args.out or RESULTS / ("import_rate.json" if backend == "sqlite" else f"import_rate_{backend}.json")
    write_results(results, out)


if __name__ == "__main__":
    main()
