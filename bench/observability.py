"""What metrics and traces cost per request: a hybrid search and a PUT, with metrics on and off,
and with tracing on and off, interleaved in one run.

One app in this process over a SQLite store holding the 150 PEPs of ``fixtures/peps`` (title and
the first 4,000 characters) embedded by the deterministic ``fake:hash-384`` embedder (so that the
figures are kg's, not a model's), called through an in-process ``TestClient``. Each request runs
in one of four configurations, switched at run time on the same app and store (separate apps
over separate stores differed by more than the code measured here):

- ``off`` and ``off2``: metrics off (the request middleware does not count, the use cases'
  settings say ``KG_METRICS=false``), no tracing; ``off2 / off`` is the noise floor of the run
  (two identical configurations; on a loaded machine it is not 1.00). The middleware's
  pass-through stays (a few microseconds): ``KG_METRICS=false`` does not install it at all;
- ``metrics``: metrics on (the default), no tracing;
- ``traced``: metrics on, and tracing on: the OpenTelemetry SDK's ``TracerProvider`` with a
  ``SimpleSpanProcessor`` into an ``InMemorySpanExporter`` (cleared every round), every span
  of every request recorded.

Tracing is one process-wide provider, so ``traced`` differs from ``metrics`` by
:func:`kg.tracing.active` answering True rather than False (the switch the absence of a provider
or of the API makes). Each round sends one search and one PUT (a new text, indexed inline) in
each configuration, in a shuffled order (seeded: a store's periodic work, a flush or a merge
every so many writes, does not line up with one configuration as a fixed rotation let it), after
``--warmup`` rounds. Printed: p50 per configuration and the ratios ``metrics / off`` (target
<= 1.03) and ``traced / metrics`` (target <= 1.10).

Run: ``python bench/observability.py [--rounds 300]``; JSON in ``bench/results/observability.json``.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("KG_ALLOWED_HOSTS", "testserver")

from fastapi.testclient import TestClient  # noqa: E402
from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

from api.app import create_app  # noqa: E402
from bench import _common as common  # noqa: E402
from kg import tracing  # noqa: E402
from kg.services import Services  # noqa: E402
from kg.settings import Settings  # noqa: E402

MODEL = "fake:hash-384"
SEARCH = {"query": "how are packages installed and uninstalled", "k": 10, "mode": "hybrid"}
CONFIGS = ("off", "off2", "metrics", "traced")


def make_client(folder: Path) -> TestClient:
    settings = Settings(data_dir=folder, embedding_model=MODEL, allow_fake_embedder=True, index_inline=True,
                        index_flush_interval_s=0)
    client = TestClient(create_app(services=Services.from_settings(settings)), client=("127.0.0.1", 50000))
    client.__enter__()
    assert client.post("/api/repos", json={"name": "peps"}).status_code == 201
    assert client.post("/api/repos/peps/workspaces", json={"name": "peps"}).status_code == 201
    r = client.post("/api/repos/peps/nodes:batch", json={"upserts": common.pep_upserts("peps")})
    assert r.status_code in (200, 201), r.text
    return client


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=20)
    args = parser.parse_args()

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    real_active = tracing.active
    shuffle = random.Random(20261205).shuffle

    with tempfile.TemporaryDirectory() as tmp:
        tracing.active = lambda: False  # type: ignore[assignment]
        client = make_client(Path(tmp))
        app: Any = client.app
        services, middleware = app.state.services, app.state.request_metrics
        on, off = services.settings, services.settings.model_copy(update={"metrics": False})
        samples: dict[str, dict[str, list[float]]] = {op: {c: [] for c in CONFIGS} for op in ("search", "put")}
        spans = 0
        for round_ in range(args.warmup + args.rounds):
            order = list(CONFIGS)
            shuffle(order)  # seeded: no periodic work of the store lines up with one configuration
            for config in order:
                tracing.active = real_active if config == "traced" else (lambda: False)  # type: ignore[assignment]
                metrics = config in ("metrics", "traced")
                middleware.count, services.settings = metrics, on if metrics else off
                started = time.perf_counter()
                r = client.post("/api/repos/peps/search", json=SEARCH)
                search_s = time.perf_counter() - started
                assert r.status_code == 200 and r.json()["results"], r.text
                started = time.perf_counter()
                r = client.put(f"/api/repos/peps/workspaces/peps/nodes/bench-{config}-{round_}",
                               json={"node_type": "kb:Note", "properties": {
                                   "content": f"note {round_}: packages are installed by pip and uninstalled"}})
                put_s = time.perf_counter() - started
                assert r.status_code == 201, r.text
                if round_ >= args.warmup:
                    samples["search"][config].append(search_s)
                    samples["put"][config].append(put_s)
            spans += len(exporter.get_finished_spans())
            exporter.clear()
        tracing.active = real_active  # type: ignore[assignment]
        services.settings = on
        client.__exit__(None, None, None)

    results: dict[str, Any] = {"machine": common.machine(), "rounds": args.rounds, "warmup": args.warmup,
                               "spans_recorded": spans}
    rows = []
    for op, by_config in samples.items():
        p50 = {c: common.percentile(by_config[c], 50) * 1000 for c in CONFIGS}
        ratios = {"off2/off": p50["off2"] / p50["off"], "metrics/off": p50["metrics"] / p50["off"],
                  "traced/metrics": p50["traced"] / p50["metrics"]}
        results[op] = {"p50_ms": p50, "ratios": ratios}
        rows.append([op, *(f"{p50[c]:.2f}" for c in CONFIGS), *(f"{r:.3f}" for r in ratios.values())])
    print(common.table(rows, ["request", *(f"{c} p50 ms" for c in CONFIGS), "off2/off (noise)",
                              "metrics/off (<=1.03)", "traced/metrics (<=1.10)"]))
    print(f"spans recorded: {spans}")
    common.write_results(results, ROOT / "bench" / "results" / "observability.json")


if __name__ == "__main__":
    main()
