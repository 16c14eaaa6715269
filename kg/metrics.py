"""The process's Prometheus metrics that kg counts as it works (``prometheus-client``).

Counters and histograms updated where things happen live here, in :data:`REGISTRY`; the gauges
that need a database read or a look at a cache (queue depth, lag, failed jobs, cache sizes and
hit ratios, pool use) are computed at scrape time by :class:`kg.ops.observability.StateCollector`.
``/metrics`` (or the separate port, ``KG_METRICS_PORT``) serves both
(:func:`kg.ops.observability.registry`). Every metric is listed in
``docs/guides/observability.md`` (a test refuses one that is not).

Label values are bounded: route templates (never raw paths), use-case names, status codes.
The metrics are per process: ``kg serve --workers N`` runs N processes, each with its own.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.registry import Collector

#: Where kg's own counters and histograms are registered (not prometheus-client's global one:
#: an application embedding kg keeps its own).
REGISTRY = CollectorRegistry(auto_describe=True)

#: Latency buckets in seconds, from a cached read to a large ingest.
_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

HTTP_REQUESTS = Counter("kg_http_requests", "HTTP requests answered, by method, route template and status.",
                        ["method", "route", "status"], registry=REGISTRY)
HTTP_DURATION = Histogram("kg_http_request_duration_seconds",
                          "HTTP request latency (head received to last byte sent), by method, route template and "
                          "status.", ["method", "route", "status"], buckets=_BUCKETS, registry=REGISTRY)


class UseCaseHistogram(Collector):
    """A histogram by use case and outcome, observed in O(log buckets) under one lock and exposed
    at scrape time as a Prometheus histogram family (a custom collector:
    prometheus.github.io/client_python/collector/custom/).

    Every use case observes one duration: prometheus-client's histogram child takes that
    through a method per bucket test and two locked counters (about 25 µs with the CPU's caches
    cold, a fifth of a read answered from a held view); here it is one ``bisect`` and two list
    updates. The exposition is the same: ``_bucket{le=...}`` cumulative counts, ``_count``,
    ``_sum``, per label pair.

    Parameters
    ----------
    name, documentation : str
        The family's name (without ``_bucket``/``_count``/``_sum``) and help text.
    labels : sequence of str
        Two label names: the use case and the outcome.
    buckets : sequence of float
        Upper bounds, increasing (``+Inf`` is added).
    """

    def __init__(self, name: str, documentation: str, labels: Sequence[str], buckets: Sequence[float]) -> None:
        self.name = name
        self.documentation = documentation
        self.labels = list(labels)
        self.bounds = tuple(float(b) for b in buckets)
        if list(self.bounds) != sorted(set(self.bounds)):
            raise ValueError("buckets must increase")
        self._lock = threading.Lock()
        #: label values -> counts per bucket (not cumulative; the last is +Inf), then the sum
        self._series: dict[tuple[str, str], list[float]] = {}

    def observe(self, use_case: str, outcome: str, seconds: float) -> None:
        """Count one duration (``seconds``) for the label pair."""
        i = bisect_left(self.bounds, seconds)  # the first bound >= seconds: Prometheus's le
        with self._lock:
            series = self._series.get((use_case, outcome))
            if series is None:
                series = self._series[(use_case, outcome)] = [0.0] * (len(self.bounds) + 2)
            series[i] += 1
            series[-1] += seconds

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labels)
        with self._lock:
            held = [(key, list(series)) for key, series in self._series.items()]
        for key, series in sorted(held):
            buckets, total = [], 0.0
            for bound, count in zip((*self.bounds, float("inf")), series[:-1], strict=True):
                total += count
                buckets.append((_le(bound), total))
            family.add_metric(list(key), buckets, series[-1])
        yield family

    def describe(self) -> Iterator[HistogramMetricFamily]:
        yield HistogramMetricFamily(self.name, self.documentation, labels=self.labels)


def _le(bound: float) -> str:
    """A bucket's ``le`` label as prometheus-client writes it (``0.001``, ``1.0``, ``+Inf``)."""
    return "+Inf" if bound == float("inf") else repr(bound)


USE_CASE_DURATION = UseCaseHistogram("kg_use_case_duration_seconds",
                                     "Duration of use cases (writes through kg.context.run, reads through "
                                     "kg.context.reading), by use case and outcome (ok or error).",
                                     ["use_case", "outcome"], _BUCKETS)
REGISTRY.register(USE_CASE_DURATION)
EMBEDDED_PASSAGES = Counter("kg_index_embedded_passages", "Passages embedded for the index (rate(): the embedding "
                            "rate).", registry=REGISTRY)
RATE_LIMITED = Counter("kg_rate_limit_refusals", "Expensive calls refused by the rate limiter "
                       "(KG_RATE_EXPENSIVE_*), by call.", ["call"], registry=REGISTRY)

#: Record one use case's duration (use case, outcome, seconds) in :data:`USE_CASE_DURATION`.
observe_use_case = USE_CASE_DURATION.observe


#: Every family above (what :func:`kg.ops.observability.registry` registers).
COLLECTORS = (HTTP_REQUESTS, HTTP_DURATION, USE_CASE_DURATION, EMBEDDED_PASSAGES, RATE_LIMITED)
