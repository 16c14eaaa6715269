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

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

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
USE_CASE_DURATION = Histogram("kg_use_case_duration_seconds",
                              "Duration of use cases (writes through kg.context.run, reads through "
                              "kg.context.reading), by use case and outcome (ok or error).",
                              ["use_case", "outcome"], buckets=_BUCKETS, registry=REGISTRY)
EMBEDDED_PASSAGES = Counter("kg_index_embedded_passages", "Passages embedded for the index (rate(): the embedding "
                            "rate).", registry=REGISTRY)
RATE_LIMITED = Counter("kg_rate_limit_refusals", "Expensive calls refused by the rate limiter "
                       "(KG_RATE_EXPENSIVE_*), by call.", ["call"], registry=REGISTRY)

#: The use-case histogram's children by (use case, outcome): a bounded set (one name per
#: function of kg), looked up without the family's lock and label checks on every call.
_USE_CASE_CHILDREN: dict[tuple[str, str], Any] = {}


def observe_use_case(use_case: str, outcome: str, seconds: float) -> None:
    """Record one use case's duration in :data:`USE_CASE_DURATION`."""
    child = _USE_CASE_CHILDREN.get((use_case, outcome))
    if child is None:
        child = _USE_CASE_CHILDREN.setdefault((use_case, outcome), USE_CASE_DURATION.labels(use_case, outcome))
    child.observe(seconds)


#: Every family above (what :func:`kg.ops.observability.registry` registers).
COLLECTORS = (HTTP_REQUESTS, HTTP_DURATION, USE_CASE_DURATION, EMBEDDED_PASSAGES, RATE_LIMITED)
