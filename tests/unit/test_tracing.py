"""kg runs without OpenTelemetry: with the API absent, :mod:`kg.tracing`'s spans are no-ops, and
still refuse an unknown span name. With it, the exporter is the one ``OTEL_TRACES_EXPORTER`` names.
Each case runs in a process of its own (the tracer provider is set once per process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import sys
sys.modules["opentelemetry"] = None  # as if opentelemetry-api were not installed
from kg import tracing
assert tracing._trace is None and not tracing.active()
with tracing.span("kg.search.bm25", k=3) as current:
    assert current is None
tracing.annotate(repo="r")
assert tracing.traced("kg.llm.call", lambda x: x + 1)(1) == 2
assert tracing.configure() is False
try:
    with tracing.span("kg.nope"):
        pass
except ValueError:
    print("ok")
"""


def test_spans_are_no_ops_without_the_opentelemetry_api():
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


EXPORTING = """
from opentelemetry import trace
from kg import tracing
assert not tracing.active()
assert tracing.configure() is True
assert tracing.active() and tracing.configure() is False  # once per process
with tracing.span("kg.search.bm25", repo="acme", k=50):
    pass
trace.get_tracer_provider().force_flush()
"""


def test_the_exporter_is_the_one_otel_traces_exporter_names():
    env = {**os.environ, "OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "kg-test"}
    out = subprocess.run([sys.executable, "-c", EXPORTING], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env=env)
    assert out.returncode == 0, out.stderr
    span = json.loads(out.stdout[out.stdout.index("{"):])
    assert span["name"] == "kg.search.bm25"
    assert span["attributes"] == {"kg.repo": "acme", "kg.search.k": 50}
    assert span["resource"]["attributes"]["service.name"] == "kg-test"


def test_nothing_is_set_up_without_otel_traces_exporter():
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    script = "from kg import tracing\nassert tracing.configure() is False and not tracing.active()\nprint('ok')"
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


INACTIVE_THEN_SET = """
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from kg import tracing
assert not tracing.active()
first = tracing.span("kg.read", repo="r")
assert first is tracing.span("kg.db.read")  # one shared null context while nothing records
with first as current:
    assert current is None
try:
    tracing.span("kg.read", password="x")  # an unknown attribute is refused even when inactive
except ValueError:
    pass
else:
    raise AssertionError("an unknown attribute passed")
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)  # set by a test or opentelemetry-instrument, after import
assert tracing.active()
with tracing.span("kg.read", repo="r") as current:
    assert current is not None
assert [s.name for s in exporter.get_finished_spans()] == ["kg.read"]
print("ok")
"""


def test_a_provider_set_after_import_is_seen_and_an_unknown_attribute_is_refused_while_inactive():
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    out = subprocess.run([sys.executable, "-c", INACTIVE_THEN_SET], cwd=ROOT, capture_output=True, text=True,
                         timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
