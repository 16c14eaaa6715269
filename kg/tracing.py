"""OpenTelemetry spans around requests, use cases, search legs, embedding batches, LLM calls and
SQL statement groups, without requiring OpenTelemetry.

kg calls only :func:`span` and :func:`annotate`. They use the OpenTelemetry API
(``opentelemetry-api``, the ``kg[otel]`` extra) when it is installed and a tracer provider has
been set (by :func:`configure` from the standard ``OTEL_*`` variables, by
``opentelemetry-instrument``, or by a test); otherwise they do nothing (a no-op shim: kg runs
without the SDK and without the API).

Every span name is in :data:`SPAN_NAMES` and every attribute key in :data:`ATTRIBUTES`:
:func:`span` refuses any other, so that no span carries a property value, a query text or a
key by mistake (only names of repositories, branches, use cases and route templates, and
counts).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from importlib.metadata import entry_points
from typing import Any, ParamSpec, TypeVar

log = logging.getLogger("kg.tracing")
P = ParamSpec("P")
T = TypeVar("T")

try:  # the API is optional: without it every span is a no-op
    from opentelemetry import trace as _trace
    from opentelemetry.trace import ProxyTracerProvider as _Proxy
except ImportError:  # pragma: no cover - exercised where the extra is absent
    _trace = None  # type: ignore[assignment]
    _Proxy = None  # type: ignore[assignment,misc]

#: Every span kg makes, with what it covers (docs/guides/observability.md lists each one).
SPAN_NAMES: dict[str, str] = {
    "kg.http.request": "One HTTP request, from its head to its last byte (route template, method, status).",
    "kg.use_case": "One write use case in its unit of work (kg.context.run): the use case's name, its repo "
                   "and branch.",
    "kg.read": "One read of a branch (kg.context.reading): the reading use case's name, repo and branch.",
    "kg.search.bm25": "The BM25 (full-text) leg of a search.",
    "kg.search.knn": "The vector KNN leg of a search (with the query's embedding).",
    "kg.search.fusion": "Reciprocal rank fusion of the legs (or the index's own hybrid query).",
    "kg.search.rerank": "Reranking the first candidates with the configured reranker.",
    "kg.embed.batch": "One embedder call on a batch of passages (indexing) or a query.",
    "kg.llm.call": "One call to the language model (chat or tool chat).",
    "kg.db.read": "A read session: the SQL statements of one read, as a group.",
    "kg.db.write": "A write transaction: the SQL statements of one write, committed together.",
}

#: The attributes a kg span may carry (names and counts, never values or texts): the keyword
#: :func:`span` takes -> the attribute's key.
ATTRIBUTES: dict[str, str] = {
    "repo": "kg.repo", "branch": "kg.branch", "use_case": "kg.use_case", "mode": "kg.search.mode",
    "k": "kg.search.k", "hits": "kg.hits", "count": "kg.count", "model": "kg.model",
    "route": "http.route", "method": "http.request.method", "status": "http.response.status_code",
}

_TRACER_NAME = "kg"


#: Whether a tracer provider was found set: OpenTelemetry sets one once per process, never unsets it.
_seen_active = False
#: A provider named by the environment (``OTEL_PYTHON_TRACER_PROVIDER``), loaded by the API on
#: first use: then the API is asked every time until it is set.
_PROVIDER_FROM_ENV = "OTEL_PYTHON_TRACER_PROVIDER" in os.environ
#: The block of a span that is not recorded.
_NOT_RECORDED = nullcontext(None)


def active() -> bool:
    """Whether spans are recorded: the API is installed and a tracer provider was set.

    Once true it stays true (OpenTelemetry sets a provider once); while no provider is set it
    reads one module attribute of the API, not the environment: every use case asks this for
    each of its spans, and a read of a held view costs about 60 µs less with the CPU's caches
    cold.
    """
    global _seen_active
    if _seen_active:
        return True
    if _trace is None:
        return False
    if getattr(_trace, "_TRACER_PROVIDER", True) is None and not _PROVIDER_FROM_ENV:
        return False  # the API's own test, without its lookup of the environment
    _seen_active = not isinstance(_trace.get_tracer_provider(), _Proxy)
    return _seen_active


def span(name: str, **attributes: Any) -> AbstractContextManager[Any]:
    """Run the block in a span called ``name`` (one of :data:`SPAN_NAMES`) with ``attributes``
    (keywords of :data:`ATTRIBUTES`: ``repo="peps"``; None values are left out). A no-op when
    :func:`active` is false (the block gets None).

    Raises
    ------
    ValueError
        An unknown span name or attribute key (a programming error, raised even when inactive).
    """
    if name not in SPAN_NAMES:
        raise ValueError(f"unknown span name {name!r}: add it to kg.tracing.SPAN_NAMES and document it")
    if not active():
        if not attributes.keys() <= ATTRIBUTES.keys():  # one test in C for the usual case
            for key in attributes:
                _attribute_key(key)  # raises for the unknown one
        return _NOT_RECORDED
    return _recorded(name, attributes)


@contextmanager
def _recorded(name: str, attributes: dict[str, Any]) -> Iterator[Any]:
    tracer = _trace.get_tracer(_TRACER_NAME)
    with tracer.start_as_current_span(name, attributes=_attributes(attributes)) as current:
        yield current


def annotate(target: Any = None, /, **attributes: Any) -> None:
    """Set ``attributes`` (as for :func:`span`) on ``target`` (a span :func:`span` yielded;
    default: the current span), if it is recorded."""
    if not active():
        return
    current = target if target is not None else _trace.get_current_span()
    if current.is_recording():
        current.set_attributes(_attributes(attributes))


def _attribute_key(key: str) -> str:
    """The span attribute of the keyword ``key`` (:data:`ATTRIBUTES`); ValueError for another."""
    name = ATTRIBUTES.get(key)
    if name is None:
        raise ValueError(f"span attribute {key!r} is not one of kg.tracing.ATTRIBUTES")
    return name


def _attributes(given: dict[str, Any]) -> dict[str, Any]:
    named = {_attribute_key(key): value for key, value in given.items()}
    return {name: value for name, value in named.items() if value is not None}


def configure() -> bool:
    """Set the global tracer provider from the standard variables, once per process.

    ``OTEL_TRACES_EXPORTER`` names the exporters (comma-separated, as the SDK's autoconfigure
    reads it: ``console``, ``otlp`` with ``opentelemetry-exporter-otlp`` installed, or any
    exporter registered under the ``opentelemetry_traces_exporter`` entry-point group; ``none``:
    nothing). Unset, or with ``OTEL_SDK_DISABLED=true``, or when a provider is set already
    (``opentelemetry-instrument``, an embedding application, a test), nothing is done. The
    resource comes from ``OTEL_SERVICE_NAME`` / ``OTEL_RESOURCE_ATTRIBUTES`` (default service
    name ``kg``); each exporter gets a ``BatchSpanProcessor`` (``OTEL_BSP_*``).

    Returns
    -------
    bool
        Whether a provider was set here.
    """
    names = [n.strip() for n in os.environ.get("OTEL_TRACES_EXPORTER", "").split(",") if n.strip()]
    if (_trace is None or not names or names == ["none"] or active()
            or os.environ.get("OTEL_SDK_DISABLED", "").lower() == "true"):
        return False
    try:
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning("OTEL_TRACES_EXPORTER is set but opentelemetry-sdk is not installed (pip install 'kg[otel]'): "
                    "no traces")
        return False
    resource = Resource.create({SERVICE_NAME: os.environ.get("OTEL_SERVICE_NAME", "kg")})
    provider = TracerProvider(resource=resource)
    for name in names:
        if name == "none":
            continue
        found = [ep for ep in entry_points(group="opentelemetry_traces_exporter") if ep.name == name]
        if not found:
            log.warning("OTEL_TRACES_EXPORTER=%s: no such exporter installed (the otlp one is "
                        "opentelemetry-exporter-otlp): skipped", name)
            continue
        provider.add_span_processor(BatchSpanProcessor(found[0].load()()))
    _trace.set_tracer_provider(provider)
    return True


def traced(name: str, call: Callable[P, T], **attributes: Any) -> Callable[P, T]:
    """``call`` run in a span ``name`` (as :func:`span`): ``traced("kg.llm.call", llm.chat)(messages)``."""
    def run(*args: P.args, **kwargs: P.kwargs) -> T:
        with span(name, **attributes):
            return call(*args, **kwargs)
    return run
