"""The process's metrics in Prometheus's format: what :mod:`kg.metrics` counted, and the state
read at scrape time (queues, caches, the database pool) by :class:`StateCollector`.

``/metrics`` answers :func:`scrape`; the separate port (``KG_METRICS_PORT``) serves
:func:`registry` with prometheus-client's own server. Every family is documented in
``docs/guides/observability.md``.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import func, select

from kg.access import authorize_monitoring
from kg.context import Actor, Resources, admit
from kg.errors import NotFound
from kg.metrics import COLLECTORS
from kg.store.models import FunctionJob, IndexJob

__all__ = ["CONTENT_TYPE", "StateCollector", "registry", "scrape"]

#: The content type of the text exposition format.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class StateCollector(Collector):
    """Gauges read at scrape time, never by a background thread.

    The database is read by three small queries on indexed columns (index jobs by status,
    the oldest pending one, function jobs by state); the rest is read from memory.

    Parameters
    ----------
    services : kg.context.Resources
    """

    def __init__(self, services: Resources) -> None:
        self.services = services

    def collect(self) -> Iterator[Metric]:
        """The families of one scrape (see docs/guides/observability.md)."""
        yield from self._queues()
        yield from self._caches()
        yield from self._pool()

    def _queues(self) -> Iterator[Metric]:
        jobs = GaugeMetricFamily("kg_index_jobs", "Index jobs in the durable queue, by status (pending, running, "
                                 "failed).", labels=["status"])
        lag = GaugeMetricFamily("kg_index_lag_seconds", "Age of the oldest pending index job (0: none pending): how "
                                "far search is behind the writes.")
        functions = GaugeMetricFamily("kg_function_jobs", "Function jobs, by state (queued, running, done, failed).",
                                      labels=["state"])
        with self.services.db.read() as session:
            counts = dict(session.execute(select(IndexJob.status, func.count()).group_by(IndexJob.status)).all())
            oldest = session.execute(select(IndexJob.created_at).where(IndexJob.status == "pending")
                                     .order_by(IndexJob.id).limit(1)).scalar()
            states = dict(session.execute(select(FunctionJob.state, func.count()).group_by(FunctionJob.state)).all())
        for status in ("pending", "running", "failed"):
            jobs.add_metric([status], float(counts.get(status, 0)))
        lag.add_metric([], _age_s(oldest))
        for state in ("queued", "running", "done", "failed"):
            functions.add_metric([state], float(states.get(state, 0)))
        yield from (jobs, lag, functions)

    def _caches(self) -> Iterator[Metric]:
        services = self.services
        entries = GaugeMetricFamily("kg_cache_entries", "Entries held by each cache.", labels=["cache"])
        size = GaugeMetricFamily("kg_cache_bytes", "Estimated bytes held by each cache (graph views, index memory).",
                                 labels=["cache"])
        hits = CounterMetricFamily("kg_cache_hits", "Cache lookups answered from the cache.", labels=["cache"])
        misses = CounterMetricFamily("kg_cache_misses", "Cache lookups that were not.", labels=["cache"])
        ratio = GaugeMetricFamily("kg_cache_hit_ratio", "hits / (hits + misses) since start (0 before any lookup).",
                                  labels=["cache"])
        graphs, sets, views = services.graphs, services.search_cache, services.views
        entries.add_metric(["graph_views"], float(len(graphs)))
        size.add_metric(["graph_views"], float(graphs.bytes_held))
        entries.add_metric(["branch_search_sets"], float(len(sets)))
        entries.add_metric(["branch_views"], float(len(views)))
        for name, hit, miss in (("graph_views", graphs.hits, graphs.misses),
                                ("branch_search_sets", sets.hits, sets.misses),
                                ("branch_views", views.hits, views.misses)):
            hits.add_metric([name], float(hit))
            misses.add_metric([name], float(miss))
            ratio.add_metric([name], hit / (hit + miss) if hit + miss else 0.0)
        held = services.index.held_in_memory()
        if held is not None:  # an index held in this process: its bytes and repositories
            size.add_metric(["index_memory"], float(held[0]))
            entries.add_metric(["index_memory"], float(held[1]))
        yield from (entries, size, hits, misses, ratio)

    def _pool(self) -> Iterator[Metric]:
        pool: Any = self.services.db.engine.pool
        if not all(hasattr(pool, name) for name in ("size", "checkedout", "overflow", "checkedin")):
            return
        use = GaugeMetricFamily("kg_db_pool_connections", "Database pool connections: size (configured), "
                                "checked_out (in use), checked_in (idle), overflow.", labels=["state"])
        use.add_metric(["size"], float(pool.size()))
        use.add_metric(["checked_out"], float(pool.checkedout()))
        use.add_metric(["checked_in"], float(pool.checkedin()))
        use.add_metric(["overflow"], float(max(0, pool.overflow())))
        yield use


def _age_s(created: datetime | None) -> float:
    if created is None:
        return 0.0
    if created.tzinfo is None:
        created = created.replace(tzinfo=UTC)
    return max(0.0, (datetime.now(UTC) - created).total_seconds())


def registry(services: Resources) -> CollectorRegistry:
    """A registry of every kg metric: :data:`kg.metrics.REGISTRY`'s families and the state of
    ``services`` (:class:`StateCollector`).

    Returns
    -------
    prometheus_client.CollectorRegistry
        A new registry; the process's families in it are shared, the state collector is its own.
    """
    out = CollectorRegistry(auto_describe=False)
    for collector in COLLECTORS:  # the process's counters and histograms, shared
        out.register(collector)
    out.register(StateCollector(services))
    return out


def scrape(services: Resources, caller: Actor, client_host: str | None) -> bytes:
    """The metrics in Prometheus's text format, for an admin key (``KG_AUTH`` on) or a loopback
    client (off): :func:`kg.access.authorize_monitoring`.

    Parameters
    ----------
    services : kg.context.Resources
        The settings (``KG_METRICS``, ``KG_AUTH``), the store and caches read.
    caller : kg.context.Actor
        Who asks.
    client_host : str or None
        The client's address.

    Returns
    -------
    bytes
        In :data:`CONTENT_TYPE`.

    Raises
    ------
    kg.errors.NotFound
        Metrics are off (``KG_METRICS=false``) or served on their own port (``KG_METRICS_PORT``).
    kg.errors.Unauthenticated, kg.errors.Forbidden
        As :func:`kg.access.authorize_monitoring`.
    """
    settings = services.settings
    if not settings.metrics or settings.metrics_port is not None:
        raise NotFound("no metrics here: KG_METRICS is off, or they are served on KG_METRICS_PORT")
    admit(services, caller)
    authorize_monitoring(caller, auth=settings.auth, client_host=client_host)
    return generate_latest(registry(services))
