"""What ``kg.client`` costs per call: the same search through the client and through httpx directly.

One real ``kg serve`` process (auth on, an admin key, the deterministic ``fake:hash-384`` embedder
so that the figures are the client's and kg's, not the model's), the 150 PEPs of
``fixtures/peps`` as nodes (title and the first 4,000 characters), written through the client.
The same hybrid search (k = 10) is sent ``--calls`` times each way, in turn (client, httpx,
httpx, client, ...: both see the same load, each goes first half the time), after ``--warmup``
calls, over ONE ``httpx.Client`` (the client is given it: the same pool, the same keep-alive
connection):

- client: ``Client.search(...)``: the request built from the operation's builder, the answer
  validated into ``kg.types.SearchResponse``;
- httpx: ``http.post(url, json=body)`` and ``response.json()``.

The ratio client / httpx of the medians is the client's overhead per call (target <= 1.05).

Run: ``python bench/client_overhead.py [--calls 300]``; JSON in ``bench/results/client_overhead.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import _common as common  # noqa: E402
from kg.client import Client  # noqa: E402

MODEL = "fake:hash-384"
QUERY = {"query": "how are packages installed and uninstalled", "k": 10, "mode": "hybrid"}


def seed(kg: Client) -> None:
    """Repository ``peps``, workspace ``peps``: one node per PEP, in one batch."""
    kg.create_repo("peps")
    kg.create_workspace("peps", "peps")
    kg.batch("peps", upserts=common.pep_upserts("peps"))


def interleaved(calls: int, warmup: int, ways: dict[str, Callable[[], Any]]) -> dict[str, list[float]]:
    """Durations of each way, called in turn (so that all see the same load), the order reversed
    after each round (so that neither is always the first after the other)."""
    for _ in range(warmup):
        for once in ways.values():
            once()
    samples: dict[str, list[float]] = {name: [] for name in ways}
    order = list(ways.items())
    for _ in range(calls):
        for name, once in order:
            start = time.perf_counter()
            once()
            samples[name].append(time.perf_counter() - start)
        order.reverse()  # each way goes first half the time
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--out", type=Path, default=common.RESULTS / "client_overhead.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = common.serve_env(Path(tmp) / "data", MODEL, "bench-pepper-not-a-secret")
        admin = json.loads(common.kg_cli(env, "keys", "create", "--name", "bench-admin", "--admin"))["key"]
        proc, base = common.start_serve(env)
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
    latency = {name: common.summary_ms(s) for name, s in samples.items()}
    ratio = round(latency["client"]["median_ms"] / latency["httpx"]["median_ms"], 3)
    print(common.table([(name, lat["median_ms"], lat["p90_ms"]) for name, lat in latency.items()],
                ["search through", "p50 ms", "p90 ms"]))
    print(f"client / httpx (p50): {ratio}  (target <= 1.05)")
    common.write_results({"benchmark": "client_overhead", "machine": common.machine(), "calls": args.calls,
                          "warmup": args.warmup, "embedder": MODEL, "query": QUERY, "latency_ms": latency,
                          "ratio_client_over_httpx_p50": ratio}, args.out)


if __name__ == "__main__":
    main()
