"""kg runs without OpenTelemetry: with the API absent, :mod:`kg.tracing`'s spans are no-ops, and
still refuse an unknown span name."""

from __future__ import annotations

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
