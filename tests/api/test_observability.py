"""Metrics (``/metrics``, Prometheus's format) and traces (OpenTelemetry spans), on SQLite and
PostgreSQL: counters move by the right amounts under route templates, the endpoint is behind
the access rules, the queue gauges reflect pending index jobs, and spans nest request -> use
case -> search legs with the repository and branch, never a value, a query or a key."""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.parser import text_string_to_metric_families

from api.app import create_app
from kg.context import OPERATOR, run
from kg.ops import keys as key_ops
from kg.ops import observability
from kg.ratelimit import RateLimiter
from kg.services import Services
from kg.settings import Settings
from kg.store.db import Database
from kg.tracing import SPAN_NAMES
from tests.api.test_nodes import assert_error
from tests.conftest import FAKE_MODEL

LOOPBACK = ("127.0.0.1", 50123)
NODES = "/api/repos/acme/workspaces/knowledge/nodes"
SECRET_VALUE = "walrus-confidential-7731"
SECRET_QUERY = "narwhal-query-4242"
PEPPER = "a-pepper-for-the-observability-tests"


def make_services(settings: Settings) -> Services:
    from kg.index.embedded import EmbeddedVectorIndex
    from kg.providers.registry import make_embedder

    db = Database(settings.resolved_database_url())
    db.upgrade()
    return Services(settings=settings, db=db, index=EmbeddedVectorIndex(settings.data_dir),
                    embedder_factory=lambda name: make_embedder(name, allow_fake=True))


def base_settings(db_url: str, tmp_path, **over) -> Settings:
    values = {"database_url": db_url, "data_dir": tmp_path / "data", "embedding_model": FAKE_MODEL,
              "index_inline": True, "allow_fake_embedder": True, **over}
    return Settings(**values)


@pytest.fixture
def local(services) -> Iterator[TestClient]:
    """The app (auth off) as a loopback client calls it."""
    with TestClient(create_app(services=services), raise_server_exceptions=False, client=LOOPBACK) as c:
        yield c


def scrape(client: TestClient, **kw) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    r = client.get("/metrics", **kw)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain")
    return parse(r.text)


def parse(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def seed(client: TestClient, headers=None) -> None:
    headers = headers or {}
    assert client.post("/api/repos", json={"name": "acme"}, headers=headers).status_code == 201
    assert client.post("/api/repos/acme/workspaces", json={"name": "knowledge"}, headers=headers).status_code == 201


def test_requests_are_counted_and_timed_by_route_template_and_status(local):
    seed(local)
    put_route = "/api/repos/{repo}/workspaces/{ws}/nodes/{path:path}"
    get_route = "/api/repos/{repo}"
    before = scrape(local)
    for i in range(3):
        r = local.put(f"{NODES}/doc-{i}", json={"node_type": "kb:Doc", "properties": {"content": f"text {i}"}})
        assert r.status_code == 201, r.text
    assert local.get("/api/repos/nope").status_code == 404
    assert local.get("/api/repos/nope2").status_code == 404
    after = scrape(local)

    assert value(after, "kg_http_requests_total", method="PUT", route=put_route, status="201") - \
        value(before, "kg_http_requests_total", method="PUT", route=put_route, status="201") == 3
    assert value(after, "kg_http_request_duration_seconds_count", method="PUT", route=put_route, status="201") - \
        value(before, "kg_http_request_duration_seconds_count", method="PUT", route=put_route, status="201") == 3
    # the 4xx with its status, under the template: no label holds the raw path
    assert value(after, "kg_http_requests_total", method="GET", route=get_route, status="404") - \
        value(before, "kg_http_requests_total", method="GET", route=get_route, status="404") == 2
    assert not any("nope" in v for (_, labels) in after for _, v in labels)
    assert not any("doc-1" in v for (_, labels) in after for _, v in labels)
    # the use case's duration, by its name
    assert value(after, "kg_use_case_duration_seconds_count", use_case="ops.nodes.put_node", outcome="ok") - \
        value(before, "kg_use_case_duration_seconds_count", use_case="ops.nodes.put_node", outcome="ok") == 3
    # three passages embedded (index_inline)
    assert value(after, "kg_index_embedded_passages_total") - value(before, "kg_index_embedded_passages_total") == 3
    # the scrape itself is counted after it answered
    assert value(after, "kg_http_requests_total", method="GET", route="/metrics", status="200") - \
        value(before, "kg_http_requests_total", method="GET", route="/metrics", status="200") == 1


def test_a_refusal_by_the_guard_is_counted_under_its_route(local):
    seed(local)
    route = "/api/repos/{repo}/workspaces/{ws}/nodes/{path:path}"
    before = scrape(local)
    r = local.put(f"{NODES}/x", content=b'{"properties": {"v": NaN}}', headers={"content-type": "application/json"})
    assert_error(r, 400, "malformed")
    after = scrape(local)
    assert value(after, "kg_http_requests_total", method="PUT", route=route, status="400") - \
        value(before, "kg_http_requests_total", method="PUT", route=route, status="400") == 1


def test_cache_gauges_and_hit_counters_move(local):
    seed(local)
    assert local.put(f"{NODES}/a", json={"properties": {"content": "alpha beta"}}).status_code == 201
    before = scrape(local)
    for _ in range(3):
        assert local.post("/api/repos/acme/search", json={"query": "alpha"}).status_code == 200
    after = scrape(local)
    lookups = sum(value(after, f"kg_cache_{kind}_total", cache="branch_search_sets")
                  - value(before, f"kg_cache_{kind}_total", cache="branch_search_sets") for kind in ("hits", "misses"))
    assert lookups >= 3
    assert value(after, "kg_cache_hits_total", cache="branch_search_sets") > \
        value(before, "kg_cache_hits_total", cache="branch_search_sets")
    assert value(after, "kg_cache_entries", cache="branch_search_sets") >= 1
    assert value(after, "kg_cache_bytes", cache="index_memory") > 0
    assert 0 < value(after, "kg_cache_hit_ratio", cache="branch_search_sets") <= 1
    assert value(after, "kg_db_pool_connections", state="size") == 8


def test_branch_view_cache_gauges_count_reads_and_writes(local):
    seed(local)
    assert local.put(f"{NODES}/a", json={"properties": {"content": "alpha"}}).status_code == 201
    before = scrape(local)
    for _ in range(3):  # nothing written between them: the first may read the layout, the others not
        assert local.post("/api/repos/acme/search", json={"query": "alpha"}).status_code == 200
    middle = scrape(local)
    assert local.put(f"{NODES}/b", json={"properties": {"content": "beta"}}).status_code == 201
    assert local.post("/api/repos/acme/search", json={"query": "beta"}).status_code == 200
    after = scrape(local)

    def moved(kind, a, b):
        return value(b, f"kg_cache_{kind}_total", cache="branch_views") - value(a, f"kg_cache_{kind}_total",
                                                                               cache="branch_views")

    assert moved("hits", before, middle) >= 2 and moved("misses", before, middle) <= 1
    assert moved("misses", middle, after) >= 1  # the write changed the repository's revision
    assert value(after, "kg_cache_entries", cache="branch_views") >= 1
    assert 0 < value(after, "kg_cache_hit_ratio", cache="branch_views") < 1


def test_a_client_off_loopback_is_refused_while_auth_is_off(services):
    with TestClient(create_app(services=services), raise_server_exceptions=False,
                    client=("203.0.113.9", 40000)) as far:
        assert_error(far.get("/metrics"), 403, "forbidden")
    with TestClient(create_app(services=services), raise_server_exceptions=False, client=("::1", 40000)) as near:
        assert near.get("/metrics").status_code == 200


def test_an_admin_key_is_required_while_auth_is_on(db_url, tmp_path):
    services = make_services(base_settings(db_url, tmp_path, auth=True, key_pepper=PEPPER))
    admin = run(services, OPERATOR, key_ops.create_key, name="admin", grants=[], admin=True).key
    reader = run(services, OPERATOR, key_ops.create_key, name="reader",
                 grants=[key_ops.Grant(repo="*", actions=frozenset({"read", "write"}))]).key
    try:
        # a far client: with auth on, the key decides, not the address
        with TestClient(create_app(services=services), raise_server_exceptions=False,
                        client=("203.0.113.9", 40000)) as c:
            assert_error(c.get("/metrics"), 401, "unauthenticated")
            assert_error(c.get("/metrics", headers={"Authorization": "Bearer kg_nope_nope"}), 401, "unauthenticated")
            assert_error(c.get("/metrics", headers={"Authorization": f"Bearer {reader}"}), 403, "forbidden")
            samples = scrape(c, headers={"Authorization": f"Bearer {admin}"})
            assert value(samples, "kg_http_requests_total", method="GET", route="/metrics", status="403") >= 1
    finally:
        services.close()


def test_rate_limit_refusals_are_counted_by_call(db_url, tmp_path):
    services = make_services(base_settings(db_url, tmp_path, auth=True, key_pepper=PEPPER))
    services.rate_limiter = RateLimiter(per_min=1, burst=1, clock=lambda: 10.0)
    admin = {"Authorization": "Bearer " + run(services, OPERATOR, key_ops.create_key, name="admin", grants=[],
                                              admin=True).key}
    reader = {"Authorization": "Bearer " + run(services, OPERATOR, key_ops.create_key, name="reader", grants=[
        key_ops.Grant(repo="acme", actions=frozenset({"read", "write"}))]).key}
    try:
        with TestClient(create_app(services=services), raise_server_exceptions=False) as c:
            seed(c, admin)
            before = scrape(c, headers=admin)
            ask = {"input": {"question": "what?"}}
            assert c.post("/api/functions/acme/ask/invoke", headers=reader, json=ask).status_code == 200
            assert_error(c.post("/api/functions/acme/ask/invoke", headers=reader, json=ask), 429, "rate_limited")
            after = scrape(c, headers=admin)
            assert value(after, "kg_rate_limit_refusals_total", call="ask") - \
                value(before, "kg_rate_limit_refusals_total", call="ask") == 1
    finally:
        services.close()


def test_metrics_off_count_nothing_and_answer_404(db_url, tmp_path, local):
    seed(local)
    services = make_services(base_settings(db_url, tmp_path, metrics=False))
    try:
        with TestClient(create_app(services=services), raise_server_exceptions=False, client=LOOPBACK) as off:
            before = scrape(local)
            assert off.post("/api/repos", json={"name": "quiet"}).status_code == 201
            assert_error(off.get("/metrics"), 404, "not_found")
            after = scrape(local)
    finally:
        services.close()
    assert value(after, "kg_http_requests_total", method="POST", route="/api/repos", status="201") == \
        value(before, "kg_http_requests_total", method="POST", route="/api/repos", status="201")
    assert value(after, "kg_use_case_duration_seconds_count", use_case="ops.repos.create_repository",
                 outcome="ok") == value(before, "kg_use_case_duration_seconds_count",
                                        use_case="ops.repos.create_repository", outcome="ok")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_separate_port_serves_the_metrics(db_url, tmp_path):
    port = free_port()
    services = make_services(base_settings(db_url, tmp_path, metrics_port=port))
    try:
        with TestClient(create_app(services=services), raise_server_exceptions=False, client=LOOPBACK) as c:
            assert c.post("/api/repos", json={"name": "acme"}).status_code == 201
            assert_error(c.get("/metrics"), 404, "not_found")
            r = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10)
            assert r.status_code == 200
            samples = parse(r.text)
            assert value(samples, "kg_http_requests_total", method="POST", route="/api/repos", status="201") >= 1
            assert ("kg_index_lag_seconds", ()) in samples
        with pytest.raises(httpx.TransportError):  # stopped with the app
            httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2)
    finally:
        services.close()


def test_queue_depth_and_lag_reflect_pending_index_jobs(db_url, tmp_path):
    services = make_services(base_settings(db_url, tmp_path, index_inline=False))
    try:
        # no lifespan: the background indexer never starts (a paused worker)
        c = TestClient(create_app(services=services), raise_server_exceptions=False, client=LOOPBACK)
        seed(c)
        for i in range(4):
            assert c.put(f"{NODES}/n{i}", json={"properties": {"content": f"pending text {i}"}}).status_code == 201
        samples = scrape(c)
        assert value(samples, "kg_index_jobs", status="pending") == 4
        assert value(samples, "kg_index_lag_seconds") > 0
        services.indexer.drain()
        samples = scrape(c)
        assert value(samples, "kg_index_jobs", status="pending") == 0
        assert value(samples, "kg_index_lag_seconds") == 0
    finally:
        services.close()


# -- traces -------------------------------------------------------------------------------------

_EXPORTER = InMemorySpanExporter()


@pytest.fixture(scope="module")
def exporter() -> InMemorySpanExporter:
    """The SDK with the in-memory exporter, as the process's tracer provider (set once)."""
    current = trace.get_tracer_provider()
    if not isinstance(current, TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
    return _EXPORTER


def parent_of(span: ReadableSpan, spans: list[ReadableSpan]) -> ReadableSpan | None:
    if span.parent is None:
        return None
    return next((s for s in spans if s.context.span_id == span.parent.span_id), None)


def chain(span: ReadableSpan, spans: list[ReadableSpan]) -> list[str]:
    """The names of ``span`` and its ancestors, kg's only (FastAPI makes spans of its own)."""
    out = []
    current: ReadableSpan | None = span
    while current is not None:
        if current.name in SPAN_NAMES:
            out.append(current.name)
        current = parent_of(current, spans)
    return out


def test_spans_nest_request_use_case_and_search_legs_without_values(exporter, db_url, tmp_path):
    services = make_services(base_settings(db_url, tmp_path, auth=True, key_pepper=PEPPER))
    token = run(services, OPERATOR, key_ops.create_key, name="admin", grants=[], admin=True).key
    headers = {"Authorization": f"Bearer {token}"}
    try:
        with TestClient(create_app(services=services), raise_server_exceptions=False) as c:
            seed(c, headers)
            r = c.put(f"{NODES}/secret", headers=headers,
                      json={"properties": {"content": f"the {SECRET_VALUE} is here", "code": SECRET_VALUE}})
            assert r.status_code == 201, r.text
            exporter.clear()
            r = c.post("/api/repos/acme/search", headers=headers, json={"query": SECRET_QUERY, "mode": "hybrid"})
            assert r.status_code == 200, r.text
            searched = list(exporter.get_finished_spans())
            exporter.clear()
            r = c.put(f"{NODES}/other", headers=headers, json={"properties": {"content": SECRET_VALUE}})
            assert r.status_code == 201, r.text
            wrote = list(exporter.get_finished_spans())
    finally:
        services.close()

    names = {s.name for s in searched}
    assert {"kg.http.request", "kg.read", "kg.search.bm25", "kg.search.knn", "kg.search.fusion",
            "kg.embed.batch", "kg.db.read"} <= names
    for leg in ("kg.search.bm25", "kg.search.knn", "kg.search.fusion"):
        span = next(s for s in searched if s.name == leg)
        assert chain(span, searched) == [leg, "kg.db.read", "kg.read", "kg.http.request"]
    request = next(s for s in searched if s.name == "kg.http.request")
    assert request.attributes["http.route"] == "/api/repos/{repo}/search"
    assert request.attributes["http.response.status_code"] == 200
    assert request.attributes["kg.repo"] == "acme"
    read = next(s for s in searched if s.name == "kg.read")
    assert (read.attributes["kg.repo"], read.attributes["kg.branch"]) == ("acme", "main")
    assert read.attributes["kg.use_case"] == "rag.search.search_branch"

    use_case = next(s for s in wrote if s.name == "kg.use_case")
    assert dict(use_case.attributes) == {"kg.use_case": "ops.nodes.put_node", "kg.repo": "acme", "kg.branch": "main"}
    assert chain(use_case, wrote) == ["kg.use_case", "kg.http.request"]
    # the request's own write (the app's background workers write too, in traces of their own:
    # the indexer, the job runner, the webhook delivery)
    db_write = next(s for s in wrote if s.name == "kg.db.write" and s.context.trace_id == use_case.context.trace_id)
    assert chain(db_write, wrote)[:2] == ["kg.db.write", "kg.use_case"]

    for span in searched + wrote:  # kg's spans and FastAPI's
        for key, attribute in (span.attributes or {}).items():
            text = f"{key}={attribute}"
            # the key's secret is what follows "kg_<id>_" (it may hold "_" itself: splitting on
            # the last one once gave "c", found in every attribute)
            for secret in (SECRET_VALUE, SECRET_QUERY, token, token.split("_", 2)[2]):
                assert secret not in text, (span.name, text)


def test_a_span_attribute_that_is_not_a_name_or_count_is_refused(exporter):
    from kg.tracing import span

    with pytest.raises(ValueError, match="query"):
        with span("kg.search.bm25", query="what the user typed"):
            pass
    with pytest.raises(ValueError, match="unknown span name"):
        with span("kg.made.up"):
            pass


# -- every metric and span is documented ------------------------------------------------------------

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "observability.md"


def exposed_names(services) -> set[str]:
    """The names as a scrape shows them (a counter's with ``_total``), of every family kg
    registers: the process's and the state collector's."""
    names = set()
    for family in observability.registry(services).collect():
        names.add(family.name + ("_total" if family.type == "counter" else ""))
    return names


def test_every_metric_and_span_name_is_documented_and_every_documented_one_exists(services):
    guide = GUIDE.read_text()
    exposed = exposed_names(services)
    assert {"kg_http_requests_total", "kg_index_lag_seconds", "kg_db_pool_connections"} <= exposed
    documented_metrics = set(re.findall(r"^\| `(kg_[a-z0-9_]+)` \|", guide, flags=re.M))
    assert exposed - documented_metrics == set(), "metrics without documentation"
    assert documented_metrics - exposed == set(), "documented metrics that do not exist"
    documented_spans = set(re.findall(r"^\| `(kg\.[a-z0-9_.]+)` \|", guide, flags=re.M))
    assert set(SPAN_NAMES) - documented_spans == set(), "spans without documentation"
    assert documented_spans - set(SPAN_NAMES) == set(), "documented spans that do not exist"
