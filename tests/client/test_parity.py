"""Every operation of the OpenAPI document has a client method and every method an operation
(an explicit table, checked both ways), and each method sends its operation's method and path
(a recording transport, both clients)."""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.app import create_app
from kg.client import AsyncClient, Client, Operations
from kg.client.client import operation, pages
from kg.settings import Settings

#: Operation (method, path of the OpenAPI document) -> client method.
OPERATIONS: dict[tuple[str, str], str] = {
    ("GET", "/health"): "health",
    ("GET", "/api/health"): "health",
    ("POST", "/api/repos"): "create_repo",
    ("GET", "/api/repos"): "list_repos",
    ("GET", "/api/repos/{repo}"): "get_repo",
    ("DELETE", "/api/repos/{repo}"): "delete_repo",
    ("POST", "/api/repos/{repo}/workspaces"): "create_workspace",
    ("GET", "/api/repos/{repo}/workspaces"): "list_workspaces",
    ("GET", "/api/repos/{repo}/workspaces/{ws}"): "get_workspace",
    ("PATCH", "/api/repos/{repo}/workspaces/{ws}"): "patch_workspace",
    ("GET", "/api/repos/{repo}/log"): "log",
    ("POST", "/api/repos/{repo}/nodes:batch"): "batch",
    ("GET", "/api/repos/{repo}/branches/{branch}/diff"): "diff",
    ("POST", "/api/repos/{repo}/branches/{branch}/merge"): "merge",
    ("POST", "/api/repos/{repo}/branches/{branch}/reset"): "reset_branch",
    ("POST", "/api/repos/{repo}/branches"): "create_branch",
    ("GET", "/api/repos/{repo}/branches"): "list_branches",
    ("GET", "/api/repos/{repo}/branches/{branch}"): "get_branch",
    ("DELETE", "/api/repos/{repo}/branches/{branch}"): "delete_branch",
    ("PUT", "/api/repos/{repo}/workspaces/{ws}/nodes/{path}"): "put_node",
    ("PATCH", "/api/repos/{repo}/workspaces/{ws}/nodes/{path}"): "patch_node",
    ("GET", "/api/repos/{repo}/workspaces/{ws}/nodes/{path}"): "get_node",
    ("DELETE", "/api/repos/{repo}/workspaces/{ws}/nodes/{path}"): "delete_node",
    ("GET", "/api/repos/{repo}/workspaces/{ws}/nodes"): "list_nodes",
    ("GET", "/api/repos/{repo}/workspaces/{ws}/lineage/{path}"): "lineage",
    ("GET", "/api/repos/{repo}/references"): "references",
    ("POST", "/api/repos/{repo}/search"): "search",
    ("GET", "/api/repos/{repo}/index/status"): "index_status",
    ("GET", "/api/repos/{repo}/export"): "export",
    ("POST", "/api/repos/{repo}/import"): "import_file",
    ("POST", "/api/repos/{repo}/index/retry-failed"): "retry_failed",
    ("POST", "/api/repos/{repo}/relations"): "relate",
    ("DELETE", "/api/repos/{repo}/relations"): "unrelate",
    ("GET", "/api/repos/{repo}/neighbors"): "neighbors",
    ("POST", "/api/repos/{repo}/traverse"): "traverse",
    ("POST", "/api/repos/{repo}/workspaces/{ws}/relations/invalidate"): "invalidate",
    ("GET", "/api/repos/{repo}/workspaces/{ws}/relation-types"): "get_relation_types",
    ("PUT", "/api/repos/{repo}/workspaces/{ws}/relation-types"): "put_relation_types",
    ("POST", "/api/rag"): "rag",
    ("POST", "/api/sql/{repo}/{branch}"): "sql",
    ("POST", "/api/functions/{repo}/search-documents/invoke"): "invoke_function",
    ("POST", "/api/functions/{repo}/ask/invoke"): "invoke_function",
    ("POST", "/api/functions/{repo}/graph-context/invoke"): "invoke_function",
    ("POST", "/api/functions/{repo}/extract-entities/invoke"): "invoke_function",
    ("POST", "/api/functions/{repo}/research-assistant/invoke"): "invoke_function",
    ("POST", "/api/functions/{repo}/resolve-entities/invoke"): "invoke_function",
    ("GET", "/api/jobs/{job_id}"): "get_job",
    ("POST", "/api/keys"): "create_key",
    ("GET", "/api/keys"): "list_keys",
    ("DELETE", "/api/keys/{key_id}"): "revoke_key",
    ("GET", "/api/repos/{repo}/changes"): "changes",
    ("POST", "/api/repos/{repo}/webhooks"): "add_webhook",
    ("GET", "/api/repos/{repo}/webhooks"): "list_webhooks",
    ("DELETE", "/api/repos/{repo}/webhooks/{webhook_id}"): "remove_webhook",
    ("GET", "/api/repos/{repo}/webhooks/{webhook_id}/deliveries"): "webhook_deliveries",
}

#: A value of each required parameter (a branch with '/', a node path with a space and a '?').
SAMPLES: dict[str, Any] = {
    "repo": "acme", "ws": "kb", "path": "/docs/a b?", "branch": "feature/x", "name": "n1", "key_id": "k1",
    "job_id": "j1", "from_": "kb:/a", "to": "kb:/b", "type": "cites", "node": "kb:/a", "target": "kb:/a",
    "query": "rotate", "seeds": ["kb:/a"], "input": {"query": "x"}, "config": {}, "single_valued": [],
    "embedding": {"model": "fake:hash-64"}, "sql": "SHOW BRANCHES", "webhook_id": "h1",
    "url": "http://hooks.invalid/kg", "data": b"{}",
}


@pytest.fixture(scope="module")
def document(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder: Path = tmp_path_factory.mktemp("openapi")
    app = create_app(Settings(database_url=f"sqlite:///{folder / 'kg.sqlite3'}", data_dir=folder / "data"))
    return app.openapi()


def declared(document: dict[str, Any]) -> set[tuple[str, str]]:
    return {(method.upper(), path) for path, item in document["paths"].items() for method in item}


def methods() -> dict[str, operation[Any, Any]]:
    return {name: value for name, value in vars(Operations).items() if isinstance(value, operation)}


def test_every_operation_has_a_method_and_every_method_an_operation(document: dict[str, Any]) -> None:
    assert declared(document) - set(OPERATIONS) == set(), "operations without a client method"
    assert set(OPERATIONS) - declared(document) == set(), "table rows the API does not have"
    assert set(methods()) == set(OPERATIONS.values())
    listings = {value.build.__name__ for value in vars(Operations).values() if isinstance(value, pages)}
    assert listings == {"list_repos", "list_nodes", "log", "changes"}


def test_methods_have_their_builders_signature_and_docstring() -> None:
    kg = Client("http://kg.invalid")
    for name, described in methods().items():
        method = getattr(kg, name)
        assert inspect.signature(method) == inspect.signature(described.build)
        assert method.__doc__ and method.__doc__ == described.build.__doc__, name


class Sent(Exception):
    """Raised by the recording transport once it has the request."""


def record(request: httpx.Request) -> httpx.Response:
    raise Sent(request)


def arguments(build: Any) -> tuple[list[Any], dict[str, Any]]:
    """The sample arguments of a builder's required parameters."""
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for parameter in inspect.signature(build).parameters.values():
        if parameter.default is inspect.Parameter.empty:
            if parameter.kind is inspect.Parameter.KEYWORD_ONLY:
                kwargs[parameter.name] = SAMPLES[parameter.name]
            else:
                args.append(SAMPLES[parameter.name])
    return args, kwargs


def expected_path(template: str) -> str:
    values = {name.rstrip("_"): value for name, value in SAMPLES.items() if isinstance(value, str)}
    values["path"] = values["path"].lstrip("/")
    return template.format(**values)


def sent_by(kg: Client | AsyncClient, name: str, run: Any, template: str = "") -> httpx.Request:
    build = methods()[name].build
    args, kwargs = arguments(build)
    function = re.fullmatch(r"/api/functions/\{repo\}/([a-z-]+)/invoke", template)
    if function:  # one method, invoke_function, for each function's documented operation
        args[list(inspect.signature(build).parameters).index("name")] = function.group(1)
    with pytest.raises(Sent) as sent:
        run(getattr(kg, name)(*args, **kwargs))
    request: httpx.Request = sent.value.args[0]
    return request


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_each_method_sends_its_operation(kind: str) -> None:
    import anyio

    if kind == "sync":
        kg: Client | AsyncClient = Client("http://kg.test", api_key="kg_a_b", transport=httpx.MockTransport(record))

        def run(value: Any) -> Any:
            return value
    else:
        kg = AsyncClient("http://kg.test", api_key="kg_a_b", transport=httpx.MockTransport(record))

        def run(value: Any) -> Any:
            async def wait() -> Any:
                return await value
            return anyio.run(wait)

    for (method, template), name in OPERATIONS.items():
        if template == "/health":
            continue  # health() asks /api/health, the same operation
        request = sent_by(kg, name, run, template)
        assert (request.method, request.url.path) == (method, expected_path(template)), name
        assert request.headers["authorization"] == "Bearer kg_a_b"
    # Path values are percent-encoded; a branch and a node path keep their '/'.
    raw = sent_by(kg, "get_node", run).url.raw_path.decode()
    assert raw == "/api/repos/acme/workspaces/kb/nodes/docs/a%20b%3F"


def test_query_and_body_use_the_api_field_names() -> None:
    kg = Client("http://kg.test", transport=httpx.MockTransport(record))
    with pytest.raises(Sent) as sent:
        kg.relate("acme", "kb:/a", "kb:/b", "cites", weight=1, branch="feature/x")
    request: httpx.Request = sent.value.args[0]
    assert dict(request.url.params) == {"branch": "feature/x"}
    import json
    assert json.loads(request.content) == {"from": "kb:/a", "to": "kb:/b", "type": "cites", "weight": 1}
    with pytest.raises(Sent) as sent:
        kg.unrelate("acme", "kb:/a", "kb:/b", type="cites")
    assert dict(sent.value.args[0].url.params) == {"from": "kb:/a", "to": "kb:/b", "type": "cites"}
    with pytest.raises(Sent) as sent:
        kg.neighbors("acme", "kb:/a", type=["cites", "see_also"], include_invalid=True)
    assert dict(sent.value.args[0].url.params) == {"node": "kb:/a", "type": "cites,see_also", "include_invalid": "true"}


def test_an_import_sends_the_file_as_its_body() -> None:
    kg = Client("http://kg.test", transport=httpx.MockTransport(record))
    with pytest.raises(Sent) as sent:
        kg.import_file("acme", b"PAR1 columns", format="parquet", branch="agent/x", batch_size=10, create=False)
    request: httpx.Request = sent.value.args[0]
    assert request.content == b"PAR1 columns"
    assert request.headers["content-type"] == "application/vnd.apache.parquet"
    assert dict(request.url.params) == {"branch": "agent/x", "format": "parquet", "batch_size": "10",
                                        "create": "false"}
    with pytest.raises(Sent) as sent:
        kg.import_file("acme", b'{"record": "header"}\n')
    assert sent.value.args[0].headers["content-type"] == "application/x-ndjson"
    assert dict(sent.value.args[0].url.params) == {}
