"""What ``kg.client`` costs per call: the same search through the client and through httpx directly.

One real ``kg serve`` process (auth on, an admin key, the deterministic ``fake:hash-384`` embedder
so that the figures are the client's and kg's, not the model's), the 150 PEPs of
``fixtures/peps`` as nodes (title and the first 4,000 characters), written through the client.
The same hybrid search (k = 10) is sent ``--calls`` times each way, in turn (client, httpx,
client, ...: both see the same load), after ``--warmup`` calls, over ONE ``httpx.Client`` (the
client is given it: the same pool, the same keep-alive connection):

- client: ``Client.search(...)``: the request built from the operation's builder, the answer
  validated into ``kg.types.SearchResponse``;
- httpx: ``http.post(url, json=body)`` and ``response.json()``.

The ratio client / httpx of the medians is the client's overhead per call (target <= 1.05).

Run: ``python bench/client_overhead.py [--calls 300]``; JSON in ``bench/results/client_overhead.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import RESULTS, kg_cli, machine, start_serve, summary_ms, table, write_results  # noqa: E402
from kg.client import Client  # noqa: E402

MODEL = "fake:hash-384"
QUERY = {"query": "how are packages installed and uninstalled", "k": 10, "mode": "hybrid"}


def seed(kg: Client) -> None:
    """Repository ``peps``, workspace ``peps``: one node per PEP, in one batch."""
    kg.create_repo("peps")
    kg.create_workspace("peps", "peps")
    upserts = []
    for path in sorted((ROOT / "fixtures" / "peps" / "docs").glob("pep-*.rst")):
        text = path.read_text(encoding="utf-8")
        title = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Title:")),
                     path.stem)
        upserts.append({"workspace": "peps", "path": f"/{path.stem}", "node_type": "pep:PEP",
                        "properties": {"title": title, "content": text[:4000]}})
    kg.batch("peps", upserts=upserts)


def interleaved(calls: int, warmup: int, ways: dict[str, Callable[[], Any]]) -> dict[str, list[float]]:
    """Durations of each way, called in turn (so that all see the same load)."""
    for _ in range(warmup):
        for once in ways.values():
            once()
    samples: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(calls):
        for name, once in ways.items():
            start = time.perf_counter()
            once()
            samples[name].append(time.perf_counter() - start)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--out", type=Path, default=RESULTS / "client_overhead.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KG_")}
        env.update({"KG_DATA_DIR": str(Path(tmp) / "data"), "KG_EMBEDDING_MODEL": MODEL,
                    "KG_ALLOW_FAKE_EMBEDDER": "true", "KG_INDEX_INLINE": "true", "KG_AUTH": "true",
                    "KG_KEY_PEPPER": "bench-pepper-not-a-secret", "OPENBLAS_NUM_THREADS": "1"})
        admin = json.loads(kg_cli(env, "keys", "create", "--name", "bench-admin", "--admin"))["key"]
        proc, base = start_serve(env)
        try:
            with httpx.Client(timeout=120) as http:
                kg = Client(base, api_key=admin, http=http)
                seed(kg)
                url, headers = f"{base}/api/repos/peps/search", {"Authorization": f"Bearer {admin}"}

                def through_client() -> None:
                    assert kg.search("peps", **QUERY).results  # type: ignore[arg-type]

                def through_httpx() -> None:
                    response = http.post(url, json=QUERY, headers=headers)
                    response.raise_for_status()
                    assert response.json()["results"]

                samples = interleaved(args.calls, args.warmup, {"client": through_client, "httpx": through_httpx})
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    latency = {name: summary_ms(s) for name, s in samples.items()}
    ratio = round(latency["client"]["median_ms"] / latency["httpx"]["median_ms"], 3)
    print(table([(name, lat["median_ms"], lat["p90_ms"]) for name, lat in latency.items()],
                ["search through", "p50 ms", "p90 ms"]))
    print(f"client / httpx (p50): {ratio}  (target <= 1.05)")
    write_results({"benchmark": "client_overhead", "machine": machine(), "calls": args.calls, "warmup": args.warmup,
                   "embedder": MODEL, "query": QUERY, "latency_ms": latency, "ratio_client_over_httpx_p50": ratio},
                  args.out)


if __name__ == "__main__":
    main()
