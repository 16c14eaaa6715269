"""kg's use-case histogram exposes what prometheus-client's own histogram would, for any
durations: the same bucket, count and sum samples per label pair."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from kg.metrics import UseCaseHistogram

BOUNDS = (0.001, 0.0025, 0.005, 0.01, 0.25, 1.0, 60.0)


def _samples(registry: CollectorRegistry, name: str) -> list[str]:
    lines = generate_latest(registry).decode().splitlines()
    return sorted(line.removeprefix(name) for line in lines
                  if line.startswith(name) and not line.startswith(f"{name}_created"))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["ops.nodes.put_node", "rag.graph.neighbors"]),
                          st.sampled_from(["ok", "error"]),
                          st.one_of(st.sampled_from(BOUNDS), st.floats(0, 100, allow_nan=False))),
                max_size=40))
def test_exposition_equals_prometheus_clients_histogram(observations):
    ours_registry, theirs_registry = CollectorRegistry(), CollectorRegistry()
    ours = UseCaseHistogram("x_seconds", "d", ["use_case", "outcome"], BOUNDS)
    ours_registry.register(ours)
    theirs = Histogram("x_seconds", "d", ["use_case", "outcome"], buckets=BOUNDS, registry=theirs_registry)
    for use_case, outcome, seconds in observations:
        ours.observe(use_case, outcome, seconds)
        theirs.labels(use_case, outcome).observe(seconds)
    assert _samples(ours_registry, "x_seconds") == _samples(theirs_registry, "x_seconds")


def test_a_value_on_a_bound_counts_in_that_bucket_and_bounds_must_increase():
    import pytest

    histogram = UseCaseHistogram("y_seconds", "d", ["use_case", "outcome"], (0.01, 0.1))
    registry = CollectorRegistry()
    registry.register(histogram)
    histogram.observe("a", "ok", 0.01)
    assert 'y_seconds_bucket{le="0.01",outcome="ok",use_case="a"} 1.0' in generate_latest(registry).decode()
    with pytest.raises(ValueError):
        UseCaseHistogram("z_seconds", "d", ["use_case", "outcome"], (0.1, 0.01))
