"""Benchmark of the console's branch review page: server time of ``GET /ui/r/{repo}/review`` and
of its dry run for a branch of 100 node changes and 5 relation changes (issue 14: under 150 ms).

1. One repository with ``--nodes`` nodes ``/s{k}/n{i}`` (written through ``POST nodes:batch``
   in batches of 500) and a ``links`` relation between ``/s0/n{i}`` and ``/s0/n{i+1}`` for
   i < 10.
2. A branch ``agent/bench`` with 40 nodes modified, 40 added, 20 deleted (one batch) and 5
   relation changes (3 added, 1 re-weighted, 1 removed), through the API.
3. Timed in process (``TestClient``, ``KG_AUTH`` off, the fake embedder, inline indexing):
   ``--repeats`` GETs of the review page and POSTs of the dry run after ``--warmup`` rounds; the
   answers are checked (status 200, 100 node changes shown). Median and p90.

Prints a table and writes JSON (default ``bench/results/review_page.json``). Run: ``python
bench/review_page.py [--nodes 1000] [--repeats 20] [--database-url postgresql+psycopg://...]``.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy is imported

import argparse  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import RESULTS, isolated_database, machine, redact, summary_ms, table, write_results  # noqa: E402

MODEL = "fake:hash-64"
SECTION = 100


def _ok(r, *codes: int):  # noqa: ANN001, ANN202
    assert r.status_code in codes, r.text[:500]
    return r


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--out", type=Path, default=RESULTS / "review_page.json")
    args = parser.parse_args()

    from fastapi.testclient import TestClient

    from api.app import create_app
    from kg.index.embedded import EmbeddedVectorIndex
    from kg.providers.registry import make_embedder
    from kg.services import Services
    from kg.settings import Settings
    from kg.store.db import Database

    with tempfile.TemporaryDirectory() as tmp, isolated_database(args.database_url, Path(tmp)) as (url, backend):
        settings = Settings(database_url=url, data_dir=Path(tmp) / "data", embedding_model=MODEL,
                            index_inline=True, allow_fake_embedder=True)
        db = Database(settings.resolved_database_url())
        db.upgrade()
        services = Services(settings=settings, db=db, index=EmbeddedVectorIndex(settings.data_dir),
                            embedder_factory=lambda name: make_embedder(name, allow_fake=True))
        with TestClient(create_app(services=services), base_url="http://localhost") as http:
            _ok(http.post("/api/repos", json={"name": "bench"}), 201)
            _ok(http.post("/api/repos/bench/workspaces", json={"name": "kb"}), 201)
            sections = max(1, args.nodes // SECTION)
            upserts = [{"workspace": "kb", "path": f"/s{k}", "node_type": "kb:Folder", "properties": {}}
                       for k in range(sections)]
            upserts += [{"workspace": "kb", "path": f"/s{k}/n{i}", "node_type": "kb:Doc",
                         "properties": {"title": f"node {k}.{i}", "status": "draft"}}
                        for k in range(sections) for i in range(SECTION)]
            for start in range(0, len(upserts), 500):
                _ok(http.post("/api/repos/bench/nodes:batch", json={"upserts": upserts[start:start + 500]}), 200)
            for i in range(10):
                _ok(http.post("/api/repos/bench/relations", json={"from": f"kb:/s0/n{i}", "to": f"kb:/s0/n{i + 1}",
                                                                  "type": "links", "weight": 1.0}), 201)
            _ok(http.post("/api/repos/bench/branches", json={"name": "agent/bench", "from": "main"}), 201)
            changes = [{"workspace": "kb", "path": f"/s0/n{i}", "node_type": "kb:Doc",
                        "properties": {"title": f"node 0.{i}", "status": "published"}} for i in range(40)]
            changes += [{"workspace": "kb", "path": f"/s0/new{i}", "node_type": "kb:Doc",
                         "properties": {"title": f"new {i}"}} for i in range(40)]
            deletes = [{"workspace": "kb", "path": f"/s0/n{i}"} for i in range(60, 80)]
            _ok(http.post("/api/repos/bench/nodes:batch", params={"branch": "agent/bench"},
                          json={"upserts": changes, "deletes": deletes}), 200)
            rel = "/api/repos/bench/relations"
            for i in range(3):
                _ok(http.post(rel, params={"branch": "agent/bench"},
                              json={"from": f"kb:/s0/new{i}", "to": "kb:/s0/n0", "type": "cites"}), 201)
            _ok(http.post(rel, params={"branch": "agent/bench"},
                          json={"from": "kb:/s0/n0", "to": "kb:/s0/n1", "type": "links", "weight": 2.0}), 200)
            _ok(http.delete(rel, params={"branch": "agent/bench", "from": "kb:/s0/n1", "to": "kb:/s0/n2",
                                         "type": "links"}), 200)

            page = http.get("/ui/r/bench/review", params={"branch": "agent/bench"})
            _ok(page, 200)
            shown = len(re.findall(r'class="change (added|modified|deleted)"', page.text))
            assert shown == 100, shown
            token = re.search(r'name="csrf_token" value="([^"]+)"', page.text).group(1)  # type: ignore[union-attr]
            form = {"csrf_token": token, "branch": "agent/bench", "into": "main", "dry_run": "1"}

            timings: dict[str, list[float]] = {"review page": [], "dry run": []}
            for n in range(args.warmup + args.repeats):
                t0 = time.perf_counter()
                _ok(http.get("/ui/r/bench/review", params={"branch": "agent/bench"}), 200)
                t1 = time.perf_counter()
                _ok(http.post("/ui/r/bench/review/merge", data=form, headers={"HX-Request": "true"}), 200)
                t2 = time.perf_counter()
                if n >= args.warmup:
                    timings["review page"].append(t1 - t0)
                    timings["dry run"].append(t2 - t1)
        services.close()
    results = {"benchmark": "review_page", "backend": backend, "database": redact(url), "nodes": len(upserts),
               "node_changes": 100, "relation_changes": 5, "machine": machine(),
               "timings": {k: summary_ms(v) for k, v in timings.items()}}
    print(table([(k, v["median_ms"], v["p90_ms"]) for k, v in results["timings"].items()],
                ["request", "median ms", "p90 ms"]))
    write_results(results, args.out)


if __name__ == "__main__":
    main()
