"""The leak matrix of issue 12 ("Proof"): every route of the app x every kind of caller -> the
exact status, with the API's error shape for the errors. On SQLite and PostgreSQL.

The callers: no key, an unknown key, a revoked one, an expired one, a read-only key on the
repository, a key on another repository, one on another workspace only, one on another branch
glob only, and the admin. The rules (kg/access.py): 401 for the first four; 404 for a repository,
branch or workspace the key cannot see at all; 403 for an action outside its grants on something
it sees (protected ``main`` needs a grant naming it for write, merge and branch:delete; admin-only
routes); 2xx for the admin. ``test_the_matrix_has_a_row_for_every_route`` fails when a route is
added without a row here.

The world is built once per module and backend (tests/api/access_world.py). A row that changes
it (a delete, a merge, a reset) acts on something its ``setup`` made for that one test, so the
rows are independent of each other and of their order.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest

from kg.store.models import ApiKey, utcnow
from tests.api.access_world import App, api_routes, auth_app
from tests.api.test_access import bearer
from tests.api.test_nodes import assert_error
from tests.conftest import BACKENDS, FAKE_MODEL

ACME = "/api/repos/acme"
KNOWLEDGE = f"{ACME}/workspaces/knowledge/nodes"
EVERY_ACTION = ["read", "write", "branch:create", "branch:delete", "merge"]

#: The callers, in the order of the matrix's columns.
CALLERS = ("no_key", "unknown", "revoked", "expired", "read_only", "other_repo", "other_workspace",
           "other_branch", "admin")
UNAUTHENTICATED = CALLERS[:4]
#: The grants of the keys that hold some. ``acme*``: the rows that delete a repository delete
#: one made for them (``acme-del<n>``), which the keys see as they see ``acme``.
GRANTS: dict[str, list[dict[str, Any]]] = {
    "read_only": [{"repo": "acme*", "actions": ["read"]}],
    "other_repo": [{"repo": "other", "branches": ["main", "*"], "actions": EVERY_ACTION}],
    "other_workspace": [{"repo": "acme*", "branches": ["main", "*"], "workspaces": ["elsewhere"],
                         "actions": EVERY_ACTION}],
    "other_branch": [{"repo": "acme*", "branches": ["agent/*"], "actions": EVERY_ACTION}],
    "revoked": [{"repo": "*", "branches": ["main", "*"], "actions": EVERY_ACTION}],
    "expired": [{"repo": "*", "branches": ["main", "*"], "actions": EVERY_ACTION}],
}
ERROR_CODES = {401: "unauthenticated", 403: "forbidden", 404: "not_found"}
_serial = itertools.count(1)


@dataclass
class World:
    app: App
    headers: dict[str, dict[str, str]]
    job_id: str


def _rag_body(collection: str, file: str) -> dict[str, Any]:
    """A RAG-node call on the embedded index that stores ``file`` in ``collection`` and asks of it."""
    return {"config": {"embeddingModel": FAKE_MODEL, "collectionName": collection, "chunkSize": 50,
                       "chunkOverlap": 0, "topK": 2, "weaviateUrl": "embedded", "weaviateApiKey": ""},
            "input": f'What is in it?\n\n### File name "{file}"\nThe harbour survey, in {file}.\n'}


def _ok(r, status: int = 201) -> dict:
    assert r.status_code == status, r.text
    return r.json() if r.content else {}


@pytest.fixture(scope="module", params=BACKENDS)
def world(request, tmp_path_factory) -> World:
    """acme (workspaces knowledge and elsewhere; on main knowledge:/docs, /docs/a, a relation
    between them, elsewhere:/e; branch feature/x with knowledge:/docs/f), other (knowledge:/o),
    a job the admin submitted, and one key per caller of the matrix."""
    with auth_app(request.param, tmp_path_factory.mktemp("leak-matrix")) as app:
        api, admin = app.client, app.admin
        for repo, workspaces in (("acme", ("knowledge", "elsewhere")), ("other", ("knowledge",))):
            _ok(api.post("/api/repos", json={"name": repo}, headers=admin))
            for ws in workspaces:
                _ok(api.post(f"/api/repos/{repo}/workspaces", json={"name": ws}, headers=admin))
        for url, text in ((f"{KNOWLEDGE}/docs", "Main doc about the harbour survey."),
                          (f"{KNOWLEDGE}/docs/a", "A note on the survey."),
                          (f"{ACME}/workspaces/elsewhere/nodes/e", "Elsewhere."),
                          ("/api/repos/other/workspaces/knowledge/nodes/o", "Other.")):
            _ok(api.put(url, json={"node_type": "kb:Doc", "properties": {"content": text}}, headers=admin))
        _ok(api.post(f"{ACME}/relations", json={"from": "knowledge:/docs", "to": "knowledge:/docs/a",
                                                "type": "cites"}, headers=admin))
        _ok(api.post(f"{ACME}/branches", json={"name": "feature/x"}, headers=admin))
        _ok(api.put(f"{KNOWLEDGE}/docs/f", params={"branch": "feature/x"},
                    json={"node_type": "kb:Doc", "properties": {"content": "On the feature."}}, headers=admin))
        job = _ok(api.post("/api/functions/acme/search-documents/invoke", headers=admin,
                           json={"input": {"query": "harbour"}, "wait_for_completion": False}), 202)
        _ok(api.post("/api/rag", headers=admin, json=_rag_body("matrix", "f0.txt")), 200)  # the RAG repository
        headers = {"no_key": {}, "admin": admin,
                   "unknown": bearer("kg_0123456789abcdef_" + "A" * 43)}
        keys = {}
        for caller, grants in GRANTS.items():
            keys[caller] = _ok(api.post("/api/keys", json={"name": caller, "grants": grants}, headers=admin))
            headers[caller] = bearer(keys[caller]["key"])
        _ok(api.delete(f"/api/keys/{keys['revoked']['id']}", headers=admin), 200)
        with app.services.db.write() as session:
            session.get(ApiKey, keys["expired"]["id"]).expires_at = utcnow() - timedelta(seconds=1)
        yield World(app, headers, job["job_id"])


# -- what each row's setup makes for its one test (as the admin) ------------------------------


def _node(w: World, n: int) -> dict:
    _ok(w.app.client.put(f"{KNOWLEDGE}/del{n}", json={"node_type": "kb:Doc", "properties": {}},
                         headers=w.app.admin))
    return {}


def _fork(prefix: str) -> Callable[[World, int], dict]:
    """A setup: a branch ``<prefix><n>`` off main that changed knowledge (``/docs/<n>-<prefix>``)."""

    def setup(w: World, n: int) -> dict:
        api, admin, branch = w.app.client, w.app.admin, f"{prefix}{n}"
        _ok(api.post(f"{ACME}/branches", json={"name": branch}, headers=admin))
        _ok(api.put(f"{KNOWLEDGE}/docs/{n}-{prefix.replace('/', '-')}", params={"branch": branch},
                    json={"node_type": "kb:Doc", "properties": {"content": f"on {branch}"}}, headers=admin))
        return {}

    return setup


_branch, _agent_branch = _fork("feature/b"), _fork("agent/b")


def _relation(w: World, n: int) -> dict:
    _ok(w.app.client.post(f"{ACME}/relations", headers=w.app.admin,
                          json={"from": "knowledge:/docs/a", "to": "knowledge:/docs", "type": f"t{n}"}))
    return {}


def _repo(w: World, n: int) -> dict:
    _ok(w.app.client.post("/api/repos", json={"name": f"acme-del{n}"}, headers=w.app.admin))
    return {}


def _key(w: World, n: int) -> dict:
    made = _ok(w.app.client.post("/api/keys", json={"name": f"doomed{n}", "grants": [{"repo": "acme"}]},
                                 headers=w.app.admin))
    return {"key_id": made["id"]}


HOOKS = "http://127.0.0.1:9/kg"


def _allow_hooks(w: World, n: int) -> dict:
    w.app.services.settings.webhook_allowed_urls = [HOOKS]
    return {}


def _hook(w: World, n: int) -> dict:
    _allow_hooks(w, n)
    made = _ok(w.app.client.post(f"{ACME}/webhooks", json={"url": HOOKS}, headers=w.app.admin))
    return {"hook": made["id"]}


# -- the rows -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One request, and the status each caller gets.

    ``statuses`` are those of read_only, other_repo, other_workspace, other_branch and admin;
    the four unauthenticated callers get 401 (a public row: every caller gets ``admin``'s).
    Strings in ``url``, ``params`` and ``body`` are formatted with ``n`` (this test's serial
    number), ``job_id`` and what ``setup`` returned.
    """

    name: str
    method: str
    route: str
    url: str
    statuses: tuple[int, int, int, int, int]
    body: Any = None
    content: bytes | None = None
    params: dict[str, str] = field(default_factory=dict)
    setup: Callable[[World, int], dict] | None = None
    public: bool = False

    def status(self, caller: str) -> int:
        if self.public:
            return self.statuses[-1]
        if caller in UNAUTHENTICATED:
            return 401
        return dict(zip(CALLERS[4:], self.statuses, strict=True))[caller]


R = "/api/repos/{repo}"
NODE_ROUTE = f"{R}/workspaces/{{ws}}/nodes/{{path:path}}"
BRANCH_ROUTE = f"{R}/branches/{{branch:path}}"
DOC = {"node_type": "kb:Doc", "properties": {"content": "written by the matrix"}}
#: A file of records to import: one node of knowledge on main (written again alike: unchanged).
IMPORTED = "\n".join(json.dumps(record) for record in (
    {"record": "header", "format": "kg-ndjson", "version": 1, "repo": "acme", "branch": "main", "revision": 0,
     "workspaces": [{"name": "knowledge"}]},
    {"record": "node", "workspace": "knowledge", "path": "/imported", "node_type": "kb:Doc",
     "properties": {"content": "imported by the matrix"}})).encode()
#: Columns: read_only, other_repo, other_workspace, other_branch, admin.
READ = (200, 404, 404, 404, 200)            # content of knowledge on main
BRANCH_READ = (200, 404, 200, 404, 200)     # a branch as a whole: scoped to the readable workspaces
REPO_READ = (200, 404, 200, 200, 200)       # the repository as a whole
WRITE = (403, 404, 404, 404, 200)           # content of knowledge on main
ADMIN_ONLY = (403, 404, 403, 403, 200)      # on acme
SEARCH = {"query": "harbour survey", "k": 5}
SQL_ROUTE = "/api/sql/{repo}/{branch:path}"
SQL = "/api/sql/acme"

ROWS = [
    Row("health", "GET", "/api/health", "/api/health", (200,) * 5, public=True),
    Row("create repo", "POST", "/api/repos", "/api/repos", (403, 403, 403, 403, 201),
        body={"name": "acme-new{n}"}),
    Row("list repos", "GET", "/api/repos", "/api/repos", (200,) * 5),
    Row("get repo", "GET", R, ACME, REPO_READ),
    Row("delete repo", "DELETE", R, "/api/repos/acme-del{n}", (403, 404, 403, 403, 204), setup=_repo),
    Row("create workspace", "POST", f"{R}/workspaces", f"{ACME}/workspaces", (403, 404, 403, 403, 201),
        body={"name": "ws{n}"}),
    Row("list workspaces", "GET", f"{R}/workspaces", f"{ACME}/workspaces", REPO_READ),
    Row("get workspace", "GET", f"{R}/workspaces/{{ws}}", f"{ACME}/workspaces/knowledge", (200, 404, 404, 200, 200)),
    Row("patch workspace", "PATCH", f"{R}/workspaces/{{ws}}", f"{ACME}/workspaces/knowledge",
        (403, 404, 404, 403, 200), body={"embedding": {"model": FAKE_MODEL}}),
    Row("log", "GET", f"{R}/log", f"{ACME}/log", BRANCH_READ),
    Row("batch", "POST", f"{R}/nodes:batch", f"{ACME}/nodes:batch", WRITE,
        body={"upserts": [{"workspace": "knowledge", "path": "/batch{n}", **DOC}]}),
    Row("batch delete", "POST", f"{R}/nodes:batch", f"{ACME}/nodes:batch", WRITE, setup=_node,
        body={"deletes": [{"workspace": "knowledge", "path": "/del{n}"}]}),
    Row("diff", "GET", f"{BRANCH_ROUTE}/diff", f"{ACME}/branches/feature/x/diff", BRANCH_READ),
    Row("merge", "POST", f"{BRANCH_ROUTE}/merge", f"{ACME}/branches/feature/b{{n}}/merge", WRITE,
        body={"into": "main"}, setup=_branch),
    # a dry run is a read, of every workspace the merge would change
    Row("merge dry run", "POST", f"{BRANCH_ROUTE}/merge", f"{ACME}/branches/feature/b{{n}}/merge",
        (200, 404, 404, 404, 200), body={"into": "main", "dry_run": True}, setup=_branch),
    Row("reset", "POST", f"{BRANCH_ROUTE}/reset", f"{ACME}/branches/feature/b{{n}}/reset", (403, 404, 404, 404, 200),
        setup=_branch),
    Row("create branch from a branch", "POST", f"{R}/branches", f"{ACME}/branches", (403, 404, 201, 404, 201),
        body={"name": "agent/c{n}", "from": "feature/x"}),
    # the branch-glob key sees agent/b<n> but not main, its parent and the merge's target
    Row("merge an agent branch", "POST", f"{BRANCH_ROUTE}/merge", f"{ACME}/branches/agent/b{{n}}/merge",
        (403, 404, 404, 404, 200), body={}, setup=_agent_branch),
    # a reset forks the branch again from its parent's head: it reads the parent
    Row("reset an agent branch", "POST", f"{BRANCH_ROUTE}/reset", f"{ACME}/branches/agent/b{{n}}/reset",
        (403, 404, 404, 403, 200), setup=_agent_branch),
    Row("delete an agent branch", "DELETE", BRANCH_ROUTE, f"{ACME}/branches/agent/b{{n}}",
        (403, 404, 404, 204, 204), setup=_agent_branch),
    Row("create branch", "POST", f"{R}/branches", f"{ACME}/branches", (403, 404, 201, 404, 201),
        body={"name": "feature/c{n}"}),
    Row("list branches", "GET", f"{R}/branches", f"{ACME}/branches", REPO_READ),
    Row("get branch", "GET", BRANCH_ROUTE, f"{ACME}/branches/feature/x", BRANCH_READ),
    Row("delete branch", "DELETE", BRANCH_ROUTE, f"{ACME}/branches/feature/b{{n}}", (403, 404, 404, 404, 204),
        setup=_branch),
    Row("put node", "PUT", NODE_ROUTE, f"{KNOWLEDGE}/put{{n}}", (403, 404, 404, 404, 201), body=DOC),
    Row("patch node", "PATCH", NODE_ROUTE, f"{KNOWLEDGE}/docs/a", WRITE, body={"properties": {"touched": "{n}"}}),
    Row("get node", "GET", NODE_ROUTE, f"{KNOWLEDGE}/docs", READ),
    Row("delete node", "DELETE", NODE_ROUTE, f"{KNOWLEDGE}/del{{n}}", WRITE, setup=_node),
    Row("children", "GET", f"{R}/workspaces/{{ws}}/nodes", KNOWLEDGE, READ, params={"parent": "/docs"}),
    Row("prefix", "GET", f"{R}/workspaces/{{ws}}/nodes", KNOWLEDGE, READ, params={"prefix": "/"}),
    Row("search", "POST", f"{R}/search", f"{ACME}/search", BRANCH_READ, body=SEARCH),
    Row("search a workspace", "POST", f"{R}/search", f"{ACME}/search", READ,
        body={**SEARCH, "workspaces": ["knowledge"]}),
    Row("index status", "GET", f"{R}/index/status", f"{ACME}/index/status", ADMIN_ONLY),
    Row("export", "GET", f"{R}/export", f"{ACME}/export", BRANCH_READ),
    # a workspace the key cannot see is one the file would create, which needs admin (create=true):
    # 403 whether or not it exists
    Row("import", "POST", f"{R}/import", f"{ACME}/import", (403, 404, 403, 404, 200), content=IMPORTED),
    Row("retry failed texts", "POST", f"{R}/index/retry-failed", f"{ACME}/index/retry-failed", ADMIN_ONLY),
    Row("relate", "POST", f"{R}/relations", f"{ACME}/relations", (403, 404, 404, 404, 201),
        body={"from": "knowledge:/docs", "to": "knowledge:/docs/a", "type": "r{n}"}),
    Row("unrelate", "DELETE", f"{R}/relations", f"{ACME}/relations", WRITE, setup=_relation,
        params={"from": "knowledge:/docs/a", "to": "knowledge:/docs", "type": "t{n}"}),
    Row("invalidate", "POST", f"{R}/workspaces/{{ws}}/relations/invalidate",
        f"{ACME}/workspaces/knowledge/relations/invalidate", WRITE, setup=_relation,
        body={"from": "knowledge:/docs/a", "to": "knowledge:/docs", "type": "t{n}"}),
    Row("get relation types", "GET", f"{R}/workspaces/{{ws}}/relation-types",
        f"{ACME}/workspaces/knowledge/relation-types", (200, 404, 404, 200, 200)),
    Row("put relation types", "PUT", f"{R}/workspaces/{{ws}}/relation-types",
        f"{ACME}/workspaces/knowledge/relation-types", (403, 404, 404, 403, 200), body={"single_valued": []}),
    Row("sql select", "POST", SQL_ROUTE, f"{SQL}/main", READ,
        body={"sql": "SELECT path FROM 'knowledge' WHERE CHILD_OF('/docs')"}),
    Row("sql knn of a workspace", "POST", SQL_ROUTE, f"{SQL}/main", READ,
        body={"sql": "SELECT path FROM KNN('harbour survey', 5, workspaces => 'knowledge')"}),
    Row("sql knn", "POST", SQL_ROUTE, f"{SQL}/main", BRANCH_READ,
        body={"sql": "SELECT workspace_id, path FROM KNN('harbour survey', 5)"}),
    Row("sql neighbors", "POST", SQL_ROUTE, f"{SQL}/main", READ,
        body={"sql": "SELECT path FROM NEIGHBORS('knowledge:/docs', 'BOTH', NULL)"}),
    Row("sql insert", "POST", SQL_ROUTE, f"{SQL}/main", WRITE,
        body={"sql": "INSERT INTO 'knowledge' (path, node_type) VALUES ('/sql{n}', 'kb:Doc')"}),
    Row("neighbors", "GET", f"{R}/neighbors", f"{ACME}/neighbors", READ, params={"node": "knowledge:/docs"}),
    Row("traverse", "POST", f"{R}/traverse", f"{ACME}/traverse", READ, body={"seeds": ["knowledge:/docs"]}),
    Row("lineage", "GET", f"{R}/workspaces/{{ws}}/lineage/{{path:path}}", f"{ACME}/workspaces/knowledge/lineage/docs",
        READ),
    Row("references", "GET", f"{R}/references", f"{ACME}/references", READ, params={"target": "knowledge:/docs"}),
    # the RAG node's repository is reserved: no grant above names it
    Row("rag node", "POST", "/api/rag", "/api/rag", (404, 404, 404, 404, 200), body=_rag_body("matrix", "f{n}.txt")),
    Row("search-documents", "POST", "/api/functions/{repo}/search-documents/invoke",
        "/api/functions/acme/search-documents/invoke", BRANCH_READ, body={"input": {"query": "harbour"}}),
    Row("ask", "POST", "/api/functions/{repo}/ask/invoke", "/api/functions/acme/ask/invoke", BRANCH_READ,
        body={"input": {"question": "What is the harbour survey?", "use_graph": True}}),
    Row("graph-context", "POST", "/api/functions/{repo}/graph-context/invoke",
        "/api/functions/acme/graph-context/invoke", BRANCH_READ, body={"input": {"query": "harbour", "hops": 2}}),
    Row("extract-entities", "POST", "/api/functions/{repo}/extract-entities/invoke",
        "/api/functions/acme/extract-entities/invoke", WRITE,
        body={"input": {"path": "/docs", "workspace": "knowledge"}}),
    Row("research-assistant", "POST", "/api/functions/{repo}/research-assistant/invoke",
        "/api/functions/acme/research-assistant/invoke", (403, 404, 200, 404, 200),  # it opens a research branch
        body={"input": {"question": "What is the harbour survey?", "max_steps": 2}}),
    Row("resolve-entities", "POST", "/api/functions/{repo}/resolve-entities/invoke",
        "/api/functions/acme/resolve-entities/invoke", WRITE, body={"input": {"workspace": "knowledge"}}),
    # the generic route answers the functions' names (it is left out of the document)
    Row("a function job", "POST", "/api/functions/{repo}/{name}/invoke",
        "/api/functions/acme/search-documents/invoke", (202, 404, 202, 404, 202),
        body={"input": {"query": "harbour"}, "wait_for_completion": False}),
    # the admin's job: seen by its submitter and admins only
    Row("get job", "GET", "/api/jobs/{job_id}", "/api/jobs/{job_id}", (404, 404, 404, 404, 200)),
    Row("create key", "POST", "/api/keys", "/api/keys", (403, 403, 403, 403, 201),
        body={"name": "made{n}", "grants": [{"repo": "acme"}]}),
    Row("changes", "GET", f"{R}/changes", f"{ACME}/changes", REPO_READ),
    Row("changes of a branch", "GET", f"{R}/changes", f"{ACME}/changes", BRANCH_READ, params={"branch": "main"}),
    Row("add webhook", "POST", f"{R}/webhooks", f"{ACME}/webhooks", (403, 404, 403, 403, 201), body={"url": HOOKS},
        setup=_allow_hooks),
    Row("list webhooks", "GET", f"{R}/webhooks", f"{ACME}/webhooks", ADMIN_ONLY),
    Row("remove webhook", "DELETE", f"{R}/webhooks/{{webhook_id}}", f"{ACME}/webhooks/{{hook}}",
        (403, 404, 403, 403, 204), setup=_hook),
    Row("webhook deliveries", "GET", f"{R}/webhooks/{{webhook_id}}/deliveries", f"{ACME}/webhooks/{{hook}}/deliveries",
        ADMIN_ONLY, setup=_hook),
    Row("list keys", "GET", "/api/keys", "/api/keys", (403, 403, 403, 403, 200)),
    Row("revoke key", "DELETE", "/api/keys/{key_id}", "/api/keys/{key_id}", (403, 403, 403, 403, 200),
        setup=_key),
]


def _fill(value: Any, ctx: dict[str, Any]) -> Any:
    if isinstance(value, str):
        return value.format(**ctx)
    if isinstance(value, dict):
        return {k: _fill(v, ctx) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, ctx) for v in value]
    return value


def test_the_matrix_has_a_row_for_every_route(world):
    app = world.app.client.app
    served = api_routes(app)
    # the walk over app.routes misses nothing the OpenAPI document lists
    documented = {(m.upper(), p) for p, ops in app.openapi()["paths"].items() if p.startswith("/api") for m in ops}
    assert documented <= {(m, p.replace(":path}", "}")) for m, p in served}
    covered = {(row.method, row.route) for row in ROWS}
    assert served - covered == set(), "routes without a row in the leak matrix"
    assert covered - served == set(), "rows for routes the app does not serve"


@pytest.mark.parametrize("caller", CALLERS)
@pytest.mark.parametrize("row", ROWS, ids=[row.name for row in ROWS])
def test_leak_matrix(world, row, caller):
    n = next(_serial)
    ctx = {"n": n, "job_id": world.job_id}
    if row.setup is not None:
        ctx.update(row.setup(world, n))
    kwargs: dict[str, Any] = {"params": _fill(row.params, ctx), "headers": world.headers[caller]}
    if row.body is not None:
        kwargs["json"] = _fill(row.body, ctx)
    if row.content is not None:
        kwargs["content"] = row.content
    r = world.app.client.request(row.method, _fill(row.url, ctx), **kwargs)
    expected = row.status(caller)
    if expected >= 400:
        assert_error(r, expected, ERROR_CODES[expected])
        if expected == 401:
            assert r.headers["WWW-Authenticate"] == "Bearer"
    else:
        assert r.status_code == expected, r.text


def _collections(world: World) -> list[str]:
    """The RAG node's collections (its repository's workspaces), lower-cased, as the admin lists them."""
    listed = world.app.client.get(f"/api/repos/{world.app.services.settings.rag_repo}/workspaces",
                                  headers=world.app.admin)
    return [w["name"].lower() for w in _ok(listed, 200)["workspaces"]]


@pytest.mark.parametrize("caller", ["read_only", "other_repo", "other_workspace", "other_branch"])
def test_a_refused_rag_node_call_leaves_no_collection_behind(world, caller):
    """The RAG node's repository is reserved: a key without a grant on it gets the 404 of the
    matrix, and the collection it named is not created either (no write on any error)."""
    collection = f"squat{next(_serial)}"
    refused = world.app.client.post("/api/rag", json=_rag_body(collection, "mine.txt"), headers=world.headers[caller])
    assert_error(refused, 404, "not_found")
    assert collection not in _collections(world)


def test_a_rag_node_collection_needs_write_on_the_rag_repository(world):
    """A key that may read the RAG repository, but not write it, is refused a new collection
    (403, nothing created); one with write there (naming protected main) creates it."""
    api, admin = world.app.client, world.app.admin
    rag = world.app.services.settings.rag_repo
    n = next(_serial)
    reader = _ok(api.post("/api/keys", headers=admin, json={"name": f"rag-reader{n}", "grants": [
        {"repo": rag, "actions": ["read"]}]}))
    writer = _ok(api.post("/api/keys", headers=admin, json={"name": f"rag-writer{n}", "grants": [
        {"repo": rag, "branches": ["main"], "actions": ["read", "write"]}]}))
    body = _rag_body(f"mine{n}", "mine.txt")
    assert_error(api.post("/api/rag", json=body, headers=bearer(reader["key"])), 403, "forbidden")
    assert f"mine{n}" not in _collections(world)
    made = api.post("/api/rag", json=body, headers=bearer(writer["key"]))
    assert made.status_code == 200, made.text
    assert made.json()["ingestion"]["inserted"] == ["mine.txt"] and "harbour" in made.json()["context"]


def test_a_merge_conflict_in_a_workspace_the_key_cannot_see_is_not_described(world):
    """A key that may merge into main but sees only ``elsewhere`` is answered 404 for a merge,
    or a dry run, whose conflict is in ``knowledge``: not the 409 that names the node and holds
    both sides' properties."""
    api, admin = world.app.client, world.app.admin
    n = next(_serial)
    node, branch = f"{KNOWLEDGE}/conflict{n}", f"feature/k{n}"
    _ok(api.put(node, json={"node_type": "kb:Doc", "properties": {"content": "base"}}, headers=admin))
    _ok(api.post(f"{ACME}/branches", json={"name": branch}, headers=admin))
    _ok(api.put(node, params={"branch": branch}, json={"node_type": "kb:Doc", "properties": {"content": "theirs"}},
                headers=admin), 200)
    _ok(api.put(node, json={"node_type": "kb:Doc", "properties": {"content": "ours"}}, headers=admin), 200)
    for dry_run in (False, True):
        body = {"into": "main", "dry_run": dry_run}
        r = api.post(f"{ACME}/branches/{branch}/merge", json=body, headers=world.headers["other_workspace"])
        assert_error(r, 404, "not_found")
        assert f"conflict{n}" not in r.text and "theirs" not in r.text
        assert "knowledge" not in r.text  # nor the workspace's name (a new-user pass saw it)
        full = api.post(f"{ACME}/branches/{branch}/merge", json=body, headers=admin)
        assert_error(full, 409, "merge_conflict")
        assert [c["path"] for c in full.json()["error"]["details"]["conflicts"]] == [f"/conflict{n}"]


@pytest.mark.parametrize("caller,hidden,missing", [
    ("other_repo", f"{KNOWLEDGE}/docs", "/api/repos/nope/workspaces/knowledge/nodes/docs"),
    ("other_workspace", f"{KNOWLEDGE}/docs", f"{ACME}/workspaces/nope/nodes/docs"),
    ("other_workspace", f"{ACME}/workspaces/knowledge", f"{ACME}/workspaces/nope"),
    ("other_workspace", f"{ACME}/neighbors?node=knowledge:/docs", f"{ACME}/neighbors?node=nope:/docs"),
    ("other_workspace", f"{ACME}/references?target=knowledge:/docs", f"{ACME}/references?target=nope:/docs"),
    ("other_workspace", f"{ACME}/workspaces/knowledge/lineage/docs", f"{ACME}/workspaces/nope/lineage/docs"),
    ("other_branch", f"{ACME}/branches/feature/x", f"{ACME}/branches/feature/nope"),
    ("other_branch", f"{KNOWLEDGE}/docs?branch=feature/x", f"{KNOWLEDGE}/docs?branch=feature/nope"),
    ("other_branch", f"{ACME}/log?branch=main", f"{ACME}/log?branch=nope"),
    ("read_only", "/api/jobs/{job_id}", "/api/jobs/0123456789abcdef0123456789abcdef"),
])
def test_what_a_key_cannot_see_is_answered_as_what_does_not_exist(world, caller, hidden, missing):
    """The 404 for a hidden repository, workspace, branch, node or job is, but for the name, the
    404 for one that does not exist: message and details tell nothing more."""
    def seen(url: str) -> dict:
        r = world.app.client.get(url.format(job_id=world.job_id), headers=world.headers[caller])
        assert_error(r, 404, "not_found")
        return r.json()["error"]

    def names(url: str) -> list[str]:
        return [part for part in url.replace("?", "/").replace("=", "/").replace(":", "/").split("/") if part]

    one, other = seen(hidden), seen(missing)
    swap = [(a, b) for a, b in zip(names(hidden.format(job_id=world.job_id)), names(missing), strict=True) if a != b]
    text = json.dumps(one)
    for a, b in swap:
        text = text.replace(a, b)
    assert json.loads(text) == other


def test_a_rag_node_collection_in_weaviate_belongs_to_the_grants_on_the_rag_repository(world, weaviate_url,
                                                                                         monkeypatch):
    """``weaviateUrl`` naming a listed Weaviate instance: the same grants as the embedded index
    (404 without a grant on the RAG repository, 403 with read only and files to ingest), checked
    before the instance is contacted; the admin is served."""
    api, admin = world.app.client, world.app.admin
    monkeypatch.setattr(world.app.services.settings, "rag_weaviate_urls", [weaviate_url])
    n = next(_serial)
    reader = _ok(api.post("/api/keys", headers=admin, json={"name": f"rag-w-reader{n}", "grants": [
        {"repo": world.app.services.settings.rag_repo, "actions": ["read"]}]}))
    body = _rag_body(f"weaviate{n}", "w.txt")
    body["config"]["weaviateUrl"] = weaviate_url
    for caller in ("read_only", "other_repo", "other_workspace", "other_branch"):
        assert_error(api.post("/api/rag", json=body, headers=world.headers[caller]), 404, "not_found")
    assert_error(api.post("/api/rag", json=body, headers=bearer(reader["key"])), 403, "forbidden")
    served = api.post("/api/rag", json=body, headers=admin)
    assert served.status_code == 200, served.text
    assert served.json()["ingestion"]["inserted"] == ["w.txt"]
    ask = {**body, "input": "What is in it?"}  # no file: a read, which the reader may do
    answered = api.post("/api/rag", json=ask, headers=bearer(reader["key"]))
    assert answered.status_code == 200, answered.text
    assert "harbour" in answered.json()["context"]


def test_a_reset_refused_for_a_hidden_parent_does_not_name_it(world):
    """A key on ``agent/*`` only may not reset an agent branch: the reset would show it main's
    head, and its 403 does not name main (the answer of a reset names the parent)."""
    n = next(_serial)
    _agent_branch(world, n)
    r = world.app.client.post(f"{ACME}/branches/agent/b{n}/reset", headers=world.headers["other_branch"])
    assert_error(r, 403, "forbidden")
    assert "main" not in r.text
