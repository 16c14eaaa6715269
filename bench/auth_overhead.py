"""Issue 12's overhead of authentication: the same requests with and without an API key.

Two apps over one database in this process (``api.app.create_app``): ``unauthenticated``
(``KG_AUTH`` off, no ``Authorization`` header: the caller is anonymous) and ``authenticated``
(``KG_AUTH`` on, ``Authorization: Bearer kg_...`` of a key whose one grant is read on
``peps``/``main``: every request reads the key and its grants, checks the HMAC, and every use case
decides through the grant). Each is driven through ``httpx.ASGITransport`` (no sockets: what
is measured is kg's own work, so the ratio is the strictest one; a real server adds the same
network time to both sides). The data is the PEP demo (``make demo``: ``kg ingest
fixtures/peps/docs --repo peps --workspace peps --format pep``) with the deterministic offline
``fake:hash-384`` embedder, so embedding a query costs next to nothing.

Two figures, each the p50 of its samples:

1. ``get_node``: ``GET /api/repos/peps/workspaces/peps/nodes/{path}``, the 150 PEP documents in
   turn.
2. ``search``: ``POST /api/repos/peps/search`` hybrid, k = 10, the 150 PEP titles in turn.

A round is ``--block`` pairs of calls of each figure: each pair is the same request on both apps,
back to back (who goes first alternates from pair to pair), so both see the same machine load
(this machine's 2 cores are shared with test suites: blocks of 30 calls per app saw per-round
ratios from 0.45 to 2.5); ``--rounds`` rounds after one untimed warm-up round. Printed per
figure: both p50s, authenticated / unauthenticated (the target is < 1.05), and the spread (min /
median / max) of the per-round ratios of p50s. Also measured: ``kg.access.authenticate``
alone (``authenticate_us``, the median of ``--block`` x ``--rounds`` calls), the part of the
overhead that is the key check.

JSON in ``bench/results/auth_overhead_<backend>.json`` (or ``--out``). SQLite in a temporary
folder by default; ``--postgres URL`` runs on a fresh schema of that server (dropped afterwards)::

    .venv/bin/python bench/auth_overhead.py [--rounds 20] [--block 30] [--postgres URL]
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy is imported

import argparse  # noqa: E402
import asyncio  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import (  # noqa: E402
    RESULTS,
    ROOT,
    isolated_database,
    load_average,
    machine,
    percentile,
    redact,
    table,
    write_results,
)

MODEL = "fake:hash-384"
PEPPER = "a-pepper-for-the-auth-overhead-bench"
DOCS = ROOT / "fixtures" / "peps" / "docs"
INDEX = ROOT / "fixtures" / "peps" / "index.jsonl"
FIGURES = [("get_node", "GET one node"), ("search", "hybrid search, k = 10")]
MODES = ("unauthenticated", "authenticated")
TARGET = 1.05


def ingest(tmp: Path, url: str) -> float:
    """``kg ingest`` of the PEPs into ``url`` (the CLI, as ``make demo``); its seconds."""
    env = dict(os.environ, KG_DATA_DIR=str(tmp / "data"), KG_EMBEDDING_MODEL=MODEL, KG_ALLOW_FAKE_EMBEDDER="1",
               KG_DATABASE_URL=url, PYTHONPATH=str(ROOT))
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "kg.cli", "ingest", str(DOCS), "--repo", "peps", "--workspace",
                           "peps", "--format", "pep"], env=env, cwd=tmp, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"kg ingest failed ({done.returncode}):\n{done.stderr[-2000:]}")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    if not report["files"] or report["index_failures"]:
        raise SystemExit(f"kg ingest: {report}")
    return time.perf_counter() - started


def expect(response, status: int = 200):
    if response.status_code != status:
        raise SystemExit(f"{response.request.method} {response.request.url} answered "
                         f"{response.status_code}: {response.text[:500]}")
    return response


class Bench:
    """Both apps, their clients and the workload; :meth:`block` times ``n`` calls of one figure."""

    def __init__(self, url: str, tmp: Path) -> None:
        import httpx

        from api.app import create_app
        from kg.access import make_grant
        from kg.context import OPERATOR, run
        from kg.ops import keys as key_ops
        from kg.settings import Settings

        common: dict[str, Any] = {"database_url": url, "data_dir": tmp / "data", "embedding_model": MODEL,
                  "allow_fake_embedder": True, "key_pepper": PEPPER}
        self.apps = {"unauthenticated": create_app(Settings(**common, auth=False)),
                     "authenticated": create_app(Settings(**common, auth=True))}
        services = self.apps["authenticated"].state.services
        created = run(services, OPERATOR, key_ops.create_key, name="bench-reader",
                      grants=[make_grant("peps", ["main"], ["*"], ["read"])])
        self.token = created.key
        self.settings = services.settings
        self.db = services.db
        headers = {"unauthenticated": {}, "authenticated": {"Authorization": f"Bearer {self.token}"}}
        # No lifespan: the indexer and the job runner stay off (the PEPs are indexed by the ingest).
        self.clients = {mode: httpx.AsyncClient(transport=httpx.ASGITransport(app=self.apps[mode]),
                                                base_url="http://localhost", headers=headers[mode])
                        for mode in MODES}
        self.titles = [json.loads(line)["title"] for line in INDEX.read_text().splitlines() if line.strip()]
        self.paths: list[str] = []
        self.turn = {name: 0 for name, _ in FIGURES}

    async def setup(self) -> None:
        listing = expect(await self.clients["unauthenticated"].get(
            "/api/repos/peps/workspaces/peps/nodes", params={"prefix": "/"})).json()["nodes"]
        self.paths = sorted(n["path"] for n in listing if n["node_type"] != "kg:Folder")
        if len(self.paths) < 100:
            raise SystemExit(f"expected the PEPs, found {len(self.paths)} nodes")
        # the key is refused without its header, and reads with it
        bare = await self.clients["authenticated"].get("/api/repos/peps", headers={"Authorization": ""})
        if bare.status_code != 401:
            raise SystemExit(f"the authenticated app answered {bare.status_code} without a key")

    async def call(self, mode: str, figure: str, i: int):
        client = self.clients[mode]
        if figure == "get_node":
            return expect(await client.get(f"/api/repos/peps/workspaces/peps/nodes{self.paths[i % len(self.paths)]}"))
        response = expect(await client.post("/api/repos/peps/search", json={
            "query": self.titles[i % len(self.titles)], "k": 10, "mode": "hybrid"}))
        if not response.json()["results"]:
            raise SystemExit(f"search: nothing found for {self.titles[i % len(self.titles)]!r}")
        return response

    async def pairs(self, figure: str, n: int, start: int) -> dict[str, list[float]]:
        """``n`` pairs of timed calls, one on each app, the same request (items ``start`` ..
        ``start+n``) back to back; who goes first alternates from pair to pair."""
        samples: dict[str, list[float]] = {mode: [] for mode in MODES}
        for i in range(start, start + n):
            for mode in (MODES if i % 2 == 0 else MODES[::-1]):
                began = time.perf_counter()
                await self.call(mode, figure, i)
                samples[mode].append(time.perf_counter() - began)
        return samples

    def authenticate_us(self, n: int) -> float:
        """Median microseconds of one :func:`kg.access.authenticate` call."""
        from kg.access import authenticate

        samples = []
        for _ in range(n):
            began = time.perf_counter()
            authenticate(self.db, self.settings, self.token)
            samples.append(time.perf_counter() - began)
        return statistics.median(samples) * 1e6

    async def close(self) -> None:
        for client in self.clients.values():
            await client.aclose()
        for app in self.apps.values():
            app.state.services.close()


async def measure(bench: Bench, rounds: int, n: int) -> tuple[dict, float]:
    """Both figures over ``rounds`` interleaved rounds, then ``authenticate`` alone; closes ``bench``."""
    try:
        return await _measure(bench, rounds, n), bench.authenticate_us(n * rounds)
    finally:
        await bench.close()


async def _measure(bench: Bench, rounds: int, n: int) -> dict:
    await bench.setup()
    samples: dict[tuple[str, str], list[float]] = {(figure, mode): [] for figure, _ in FIGURES for mode in MODES}
    ratios: dict[str, list[float]] = {figure: [] for figure, _ in FIGURES}
    for r in range(-1, rounds):  # round -1 warms both apps (caches, the query embedder, the index files)
        for figure, _ in FIGURES:
            got = await bench.pairs(figure, n, (r + 1) * n)
            if r < 0:
                continue
            for mode in MODES:
                samples[(figure, mode)].extend(got[mode])
            ratios[figure].append(statistics.median(got["authenticated"]) / statistics.median(got["unauthenticated"]))
    figures = {}
    for figure, label in FIGURES:
        p50 = {mode: percentile(samples[(figure, mode)], 50) * 1000 for mode in MODES}
        p90 = {mode: percentile(samples[(figure, mode)], 90) * 1000 for mode in MODES}
        figures[figure] = {
            "label": label, "n_per_mode": len(samples[(figure, "authenticated")]),
            "unauthenticated_p50_ms": round(p50["unauthenticated"], 3),
            "authenticated_p50_ms": round(p50["authenticated"], 3),
            "ratio": round(p50["authenticated"] / p50["unauthenticated"], 4),
            "overhead_p50_ms": round(p50["authenticated"] - p50["unauthenticated"], 3),
            "unauthenticated_p90_ms": round(p90["unauthenticated"], 3),
            "authenticated_p90_ms": round(p90["authenticated"], 3),
            "round_ratio_spread": {"min": round(min(ratios[figure]), 4),
                                   "median": round(statistics.median(ratios[figure]), 4),
                                   "max": round(max(ratios[figure]), 4)},
        }
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--block", type=int, default=30, help="pairs of calls per figure and round")
    parser.add_argument("--postgres", metavar="URL", help="run on a fresh schema of this PostgreSQL server")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    for name in [n for n in os.environ if n.startswith("KG_")]:  # only what this run sets
        del os.environ[name]
    with tempfile.TemporaryDirectory(prefix="kg-auth-bench-") as tmp_name:
        tmp = Path(tmp_name)
        with isolated_database(args.postgres, tmp) as (url, backend):
            ingest_s = ingest(tmp, url)
            figures, authenticate_us = asyncio.run(measure(Bench(url, tmp), args.rounds, args.block))
    results = {
        "bench": "auth_overhead", "backend": backend, "database": redact(url) if args.postgres else "sqlite (temp)",
        "model": MODEL, "rounds": args.rounds, "block": args.block, "target_ratio": TARGET,
        "ingest_s": round(ingest_s, 3), "figures": figures, "authenticate_us": round(authenticate_us, 1),
        "machine": machine(), "load_average_at_end": load_average(),
    }
    print(table([[f["label"], f["unauthenticated_p50_ms"], f["authenticated_p50_ms"], f"{f['ratio']:.3f}",
                  f"{f['round_ratio_spread']['min']:.3f} / {f['round_ratio_spread']['median']:.3f} / "
                  f"{f['round_ratio_spread']['max']:.3f}"] for f in figures.values()],
                ["figure", "no auth p50 ms", "auth p50 ms", "auth/no auth", "per round min/med/max"]))
    print(f"authenticate() alone: {authenticate_us:.0f} us a call; target ratio < {TARGET}")
    write_results(results, args.out or RESULTS / f"auth_overhead_{backend}.json")


if __name__ == "__main__":
    main()
