"""Access control over HTTP (issue 12, first part): API keys and their lifecycle, how they are
stored, the typical agent key, protected branches, admin-only routes, and the actor of a
revision. On SQLite and PostgreSQL (the ``db_url`` fixture)."""

from __future__ import annotations

import hmac
from datetime import timedelta
from hashlib import sha256

import pytest
from sqlalchemy import select

from kg.access import make_grant
from kg.context import OPERATOR, run
from kg.ops import keys as key_ops
from kg.settings import Settings
from kg.store.models import ApiKey, ApiKeyGrant, utcnow
from tests.api.test_nodes import assert_error
from tests.conftest import FAKE_ASK_MIN_SIMILARITY, FAKE_MODEL

PEPPER = "a-pepper-for-the-tests-only"
NODE = "/api/repos/acme/workspaces/knowledge/nodes"


@pytest.fixture
def settings(db_url, tmp_path) -> Settings:
    """This module's settings (the conftest's ``services`` and ``client`` use them): auth on."""
    return Settings(database_url=db_url, data_dir=tmp_path / "data", embedding_model=FAKE_MODEL,
                    index_inline=True, allow_fake_embedder=True, auth=True, key_pepper=PEPPER,
                    key_cache_s=60,  # long enough that no entry ends inside a test
                    rag_max_distance=2.0,  # the fake embedder: no relevance cut (tests/conftest.py)
                    ask_min_similarity=FAKE_ASK_MIN_SIMILARITY)


@pytest.fixture
def auth_services(services):
    return services


@pytest.fixture
def api(client):
    return client


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def admin(auth_services) -> dict[str, str]:
    """The bootstrap admin key (as ``kg keys create --admin`` makes it), as request headers."""
    created = run(auth_services, OPERATOR, key_ops.create_key, name="admin", grants=[], admin=True)
    return bearer(created.key)


@pytest.fixture
def world(api, admin):
    """acme (workspace knowledge, /docs on main, branch feature/y) and other (a node on main)."""
    for name in ("acme", "other"):
        assert api.post("/api/repos", json={"name": name}, headers=admin).status_code == 201
        assert api.post(f"/api/repos/{name}/workspaces", json={"name": "knowledge"}, headers=admin).status_code == 201
    r = api.put(f"{NODE}/docs", json={"node_type": "kb:Article", "properties": {"title": "Main doc"}}, headers=admin)
    assert r.status_code == 201
    assert api.post("/api/repos/acme/branches", json={"name": "feature/y"}, headers=admin).status_code == 201
    return admin


def make_key(api, admin, name, grants, **extra) -> dict:
    r = api.post("/api/keys", json={"name": name, "grants": grants, **extra}, headers=admin)
    assert r.status_code == 201, r.text
    return r.json()


AGENT_GRANTS = [
    {"repo": "acme", "branches": ["main"], "actions": ["read"]},
    {"repo": "acme", "branches": ["agent/*"], "actions": ["read", "write", "branch:create"]},
]


# -- keys: lifecycle and storage --------------------------------------------------------------


def test_key_lifecycle_created_listed_without_secret_revoked_is_401_on_the_next_request(api, world):
    created = make_key(api, world, "reader", [{"repo": "acme", "actions": ["read"]}])
    token = created["key"]
    assert token.startswith(f"kg_{created['id']}_") and len(token) > 40
    assert created["state"] == "active" and created["created_by"] == "admin"
    assert created["grants"] == [{"repo": "acme", "branches": ["*"], "workspaces": ["*"], "actions": ["read"]}]
    assert api.get(f"{NODE}/docs", headers=bearer(token)).status_code == 200

    listed = api.get("/api/keys", headers=world)
    assert listed.status_code == 200
    mine = [k for k in listed.json()["keys"] if k["name"] == "reader"]
    assert len(mine) == 1 and "key" not in mine[0] and token.split("_", 2)[2] not in listed.text
    assert mine[0]["last_used_at"] is not None  # the request above was its first use

    revoked = api.delete(f"/api/keys/{created['id']}", headers=world)
    assert revoked.status_code == 200 and revoked.json()["state"] == "revoked"
    again = api.get(f"{NODE}/docs", headers=bearer(token))
    assert_error(again, 401, "unauthenticated")
    assert again.headers["WWW-Authenticate"] == "Bearer"
    assert [k["state"] for k in api.get("/api/keys", headers=world).json()["keys"] if k["name"] == "reader"] == \
        ["revoked"]


def test_expired_key_is_401(api, world, auth_services):
    created = make_key(api, world, "brief", [{"repo": "acme"}], expires_in_s=3600)
    assert created["expires_at"] is not None
    assert api.get(f"{NODE}/docs", headers=bearer(created["key"])).status_code == 200
    with auth_services.db.write() as session:
        session.get(ApiKey, created["id"]).expires_at = utcnow() - timedelta(seconds=1)
    # the edit stands for an hour passing; the server's cached entry for the key would have
    # ended at the expiry by then (tests/unit/test_access.py, the key cache)
    auth_services.key_cache.forget(created["id"])
    r = api.get(f"{NODE}/docs", headers=bearer(created["key"]))
    assert_error(r, 401, "unauthenticated")
    assert "expired" in r.json()["error"]["message"]


def test_missing_unknown_malformed_and_wrong_secret_are_401(api, world):
    created = make_key(api, world, "reader", [{"repo": "acme"}])
    key_id, secret = created["id"], created["key"].split("_", 2)[2]
    wrong = f"kg_{key_id}_{'A' * len(secret)}"
    for headers in ({}, bearer("kg_0123456789abcdef_" + secret), bearer("nonsense"), bearer(wrong),
                    {"Authorization": f"Basic {created['key']}"}):
        r = api.get(f"{NODE}/docs", headers=headers)
        assert_error(r, 401, "unauthenticated")
        assert r.headers["WWW-Authenticate"] == "Bearer"
    # every route but /health needs a key, even one that does not use the caller
    assert_error(api.get("/api/repos"), 401, "unauthenticated")
    assert api.get("/health").status_code == 200


def test_the_stored_row_holds_no_secret_only_its_peppered_hmac(api, world, auth_services):
    created = make_key(api, world, "reader", [{"repo": "acme"}])
    key_id, secret = created["id"], created["key"].split("_", 2)[2]
    with auth_services.db.read() as session:
        row = session.get(ApiKey, key_id)
        stored = [str(getattr(row, c.name)) for c in ApiKey.__table__.columns]
        grants = session.execute(select(ApiKeyGrant).where(ApiKeyGrant.key_id == key_id)).scalars().all()
    assert not any(secret in value for value in stored)
    assert row.secret_hash == hmac.new(PEPPER.encode(), f"{key_id}:{secret}".encode(), sha256).hexdigest()
    assert row.secret_hash != sha256(secret.encode()).hexdigest()
    assert [(g.repo, g.actions) for g in grants] == [("acme", ["read"])]


# -- the agent key of the issue ---------------------------------------------------------------


def test_agent_key_reads_main_writes_its_branch_and_cannot_touch_main(api, world):
    agent = bearer(make_key(api, world, "agent-1", AGENT_GRANTS)["key"])
    assert api.get(f"{NODE}/docs", headers=agent).json()["properties"] == {"title": "Main doc"}
    made = api.post("/api/repos/acme/branches", json={"name": "agent/x"}, headers=agent)
    assert made.status_code == 201 and made.json()["parent"] == "main"
    wrote = api.put(f"{NODE}/docs/answer", params={"branch": "agent/x"},
                    json={"node_type": "kb:Note", "properties": {"text": "an answer"}}, headers=agent)
    assert wrote.status_code == 201, wrote.text
    assert api.get(f"{NODE}/docs/answer", params={"branch": "agent/x"}, headers=agent).status_code == 200

    assert_error(api.put(f"{NODE}/docs", json={"node_type": "kb:Article", "properties": {}}, headers=agent),
                 403, "forbidden")
    assert_error(api.post("/api/repos/acme/branches/agent/x/merge", json={"into": "main"}, headers=agent),
                 403, "forbidden")
    assert_error(api.delete("/api/repos/acme/branches/agent/x", headers=agent), 403, "forbidden")
    assert_error(api.post("/api/repos/acme/branches", json={"name": "feature/z"}, headers=agent), 403, "forbidden")
    # main is untouched; the admin can merge what the agent wrote
    assert api.get(f"{NODE}/docs/answer", headers=world).status_code == 404
    merged = api.post("/api/repos/acme/branches/agent/x/merge", json={"into": "main"}, headers=world)
    assert merged.status_code == 200 and merged.json()["revision"] is not None


def test_agent_key_cannot_see_other_repositories_or_branches_outside_its_globs(api, world):
    agent = bearer(make_key(api, world, "agent-1", AGENT_GRANTS)["key"])
    for path in ("/api/repos/other", "/api/repos/other/workspaces/knowledge/nodes/docs",
                 "/api/repos/other/branches", "/api/repos/nope"):
        assert_error(api.get(path, headers=agent), 404, "not_found")
    # the answer for a repository it cannot see is the answer for one that does not exist
    hidden = api.get("/api/repos/other", headers=agent).json()
    missing = api.get("/api/repos/nope", headers=agent).json()
    assert hidden["error"]["message"].replace("other", "X") == missing["error"]["message"].replace("nope", "X")
    assert [r["name"] for r in api.get("/api/repos", headers=agent).json()["repos"]] == ["acme"]
    assert_error(api.get("/api/repos/acme/branches/feature/y", headers=agent), 404, "not_found")
    assert_error(api.get(f"{NODE}/docs", params={"branch": "feature/y"}, headers=agent), 404, "not_found")
    assert_error(api.get("/api/repos/acme/log", params={"branch": "feature/y"}, headers=agent), 404, "not_found")
    assert_error(api.post("/api/repos/acme/branches", json={"name": "agent/copy", "from": "feature/y"},
                          headers=agent), 404, "not_found")
    assert [b["name"] for b in api.get("/api/repos/acme/branches", headers=agent).json()["branches"]] == ["main"]
    assert_error(api.put("/api/repos/other/workspaces/knowledge/nodes/x", params={"branch": "agent/x"},
                         json={"node_type": "kb:Note", "properties": {}}, headers=agent), 404, "not_found")


def test_workspace_globs_hide_other_workspaces(api, world):
    assert api.post("/api/repos/acme/workspaces", json={"name": "private"}, headers=world).status_code == 201
    key = bearer(make_key(api, world, "ws-reader", [{"repo": "acme", "workspaces": ["knowledge"]}])["key"])
    assert api.get(f"{NODE}/docs", headers=key).status_code == 200
    assert_error(api.get("/api/repos/acme/workspaces/private/nodes/docs", headers=key), 404, "not_found")
    assert_error(api.get("/api/repos/acme/workspaces/private", headers=key), 404, "not_found")
    assert [w["name"] for w in api.get("/api/repos/acme/workspaces", headers=key).json()["workspaces"]] == \
        ["knowledge"]


def test_admin_routes_are_403_for_other_keys(api, world):
    agent = bearer(make_key(api, world, "agent-1", AGENT_GRANTS)["key"])
    assert_error(api.get("/api/keys", headers=agent), 403, "forbidden")
    assert_error(api.post("/api/keys", json={"name": "mine", "admin": True}, headers=agent), 403, "forbidden")
    assert_error(api.delete("/api/keys/0123456789abcdef", headers=agent), 403, "forbidden")
    assert_error(api.post("/api/repos", json={"name": "new"}, headers=agent), 403, "forbidden")
    assert_error(api.delete("/api/repos/acme", headers=agent), 403, "forbidden")
    assert_error(api.post("/api/repos/acme/workspaces", json={"name": "w2"}, headers=agent), 403, "forbidden")
    assert api.get("/api/repos/acme", headers=agent).status_code == 200


def test_protected_main_needs_a_grant_naming_it(api, world):
    star = bearer(make_key(api, world, "star", [{"repo": "acme", "actions": ["read", "write", "merge"]}])["key"])
    named = bearer(make_key(api, world, "named", [{"repo": "acme", "branches": ["main"],
                                                    "actions": ["read", "write"]}])["key"])
    body = {"node_type": "kb:Article", "properties": {"title": "edited"}}
    assert_error(api.put(f"{NODE}/docs", json=body, headers=star), 403, "forbidden")
    assert api.put(f"{NODE}/docs", params={"branch": "feature/y"}, json=body, headers=star).status_code == 200
    assert_error(api.post("/api/repos/acme/branches/feature/y/merge", json={"into": "main"}, headers=star),
                 403, "forbidden")
    assert api.put(f"{NODE}/docs", json=body, headers=named).status_code == 200


def test_the_actor_of_a_revision_is_the_keys_name(api, world):
    agent = bearer(make_key(api, world, "agent-1", AGENT_GRANTS)["key"])
    assert api.post("/api/repos/acme/branches", json={"name": "agent/x"}, headers=agent).status_code == 201
    assert api.put(f"{NODE}/n", params={"branch": "agent/x"}, json={"node_type": "kb:Note", "properties": {}},
                   headers=agent).status_code == 201
    assert api.put(f"{NODE}/m", params={"branch": "agent/x"},
                   json={"node_type": "kb:Note", "properties": {}, "actor": "agent-1"},
                   headers=agent).status_code == 201
    assert_error(api.put(f"{NODE}/o", params={"branch": "agent/x"},
                         json={"node_type": "kb:Note", "properties": {}, "actor": "someone-else"}, headers=agent),
                 403, "forbidden")
    log = api.get("/api/repos/acme/log", params={"branch": "agent/x"}, headers=agent).json()["revisions"]
    mine = [r for r in log if r["branch"] == "agent/x"]
    assert len(mine) == 2 and {r.get("actor") for r in mine} == {"agent-1"}
    # an admin may record another actor
    assert api.put(f"{NODE}/p", params={"branch": "agent/x"},
                   json={"node_type": "kb:Note", "properties": {}, "actor": "a person"},
                   headers=world).status_code == 201
    log = api.get("/api/repos/acme/log", params={"branch": "agent/x"}, headers=world).json()["revisions"]
    assert log[0]["actor"] == "a person"


def test_a_grant_star_everywhere_is_warned_about(api, world, caplog):
    created = make_key(api, world, "wide", [{"repo": "*", "actions": ["read"]}])
    assert len(created["warnings"]) == 1 and "everything" in created["warnings"][0]
    assert any("everything" in r.getMessage() for r in caplog.records if r.name == "kg.access")
    assert make_key(api, world, "narrow", [{"repo": "acme"}])["warnings"] == []


def test_key_creation_refuses_bad_grants_and_duplicate_names(api, world):
    assert_error(api.post("/api/keys", json={"name": "k", "grants": [{"repo": "acme", "actions": ["fly"]}]},
                          headers=world), 422, "invalid_input")
    assert_error(api.post("/api/keys", json={"name": "k", "grants": []}, headers=world), 422, "invalid_input")
    make_key(api, world, "k", [{"repo": "acme"}])
    assert_error(api.post("/api/keys", json={"name": "k", "grants": [{"repo": "acme"}]}, headers=world),
                 409, "conflict")


def test_with_auth_off_a_sent_key_still_binds_its_holder(client, services):
    """KG_AUTH off: anonymous may do anything, but a key that is sent is checked and obeyed."""
    services.settings.auth = False
    assert client.post("/api/repos", json={"name": "acme"}).status_code == 201
    created = run(services, OPERATOR, key_ops.create_key, name="reader",
                  grants=[make_grant("acme", actions=("read",))])
    assert client.get("/api/repos/acme", headers=bearer(created.key)).status_code == 200
    assert_error(client.post("/api/repos/acme/branches", json={"name": "b"}, headers=bearer(created.key)),
                 403, "forbidden")
    assert_error(client.get("/api/repos/acme", headers=bearer("kg_0123456789abcdef_" + "x" * 43)),
                 401, "unauthenticated")


def test_an_anonymous_caller_is_refused_by_the_use_cases_while_auth_is_on(auth_services):
    from kg.context import ANONYMOUS
    from kg.errors import Unauthenticated
    from kg.ops import repos as repo_ops

    with pytest.raises(Unauthenticated):
        run(auth_services, ANONYMOUS, repo_ops.create_repository, "acme")
    with pytest.raises(Unauthenticated):
        repo_ops.list_repositories(auth_services, ANONYMOUS)


def test_a_job_is_seen_by_the_key_that_submitted_it_and_by_admins_only(api, world):
    agent = bearer(make_key(api, world, "agent-1", AGENT_GRANTS)["key"])
    other = bearer(make_key(api, world, "reader", [{"repo": "acme"}])["key"])
    r = api.post("/api/functions/acme/search-documents/invoke",
                 json={"input": {"query": "main doc"}, "branch": "main", "wait_for_completion": False},
                 headers=agent)
    assert r.status_code == 202, r.text
    job = f"/api/jobs/{r.json()['job_id']}"
    assert api.get(job, headers=agent).status_code == 200
    assert api.get(job, headers=world).status_code == 200
    assert_error(api.get(job, headers=other), 404, "not_found")
    # a function on a repository the key cannot see is not there either
    assert_error(api.post("/api/functions/other/search-documents/invoke",
                          json={"input": {"query": "x"}, "wait_for_completion": False}, headers=agent),
                 404, "not_found")


def test_a_key_is_read_once_per_cache_period_and_a_wrong_secret_is_still_refused(api, world, monkeypatch):
    from kg.store import keys as key_store

    created = make_key(api, world, "cached", [{"repo": "acme"}])
    reads = []
    real = key_store.read_key
    monkeypatch.setattr(key_store, "read_key", lambda conn, key_id: reads.append(key_id) or real(conn, key_id))
    for _ in range(3):
        assert api.get(f"{NODE}/docs", headers=bearer(created["key"])).status_code == 200
    assert reads == [created["id"]]  # the first request read it; the next two trusted the entry
    secret = created["key"].split("_", 2)[2]
    wrong = f"kg_{created['id']}_{'A' * len(secret)}"
    assert_error(api.get(f"{NODE}/docs", headers=bearer(wrong)), 401, "unauthenticated")
    assert reads == [created["id"]] * 2  # a secret that is not the cached one is checked against the store
    assert api.get(f"{NODE}/docs", headers=bearer(created["key"])).status_code == 200
    assert len(reads) == 2


# -- the research assistant: its session branch is decided by kg.access -------------------------


RESEARCH = "/api/functions/acme/research-assistant/invoke"
RESEARCH_QUESTION = {"input": {"question": "What does the main doc say?"}}


def branch_names(api, headers) -> list[str]:
    return [b["name"] for b in api.get("/api/repos/acme/branches", headers=headers).json()["branches"]]


def test_a_key_with_research_grants_gets_its_answer_on_its_branch_only(api, world):
    key = bearer(make_key(api, world, "researcher", [
        {"repo": "acme", "branches": ["main"], "actions": ["read"]},
        {"repo": "acme", "branches": ["research/*"], "actions": ["read", "write", "branch:create"]},
    ])["key"])
    r = api.post(RESEARCH, json=RESEARCH_QUESTION, headers=key)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["branch"].startswith("research/") and body["mode"] == "fixed-plan"
    stored = f"/api/repos/acme/workspaces/{body['stored']['workspace']}/nodes{body['stored']['path']}"
    assert api.get(stored, params={"branch": body["branch"]}, headers=key).status_code == 200
    assert api.get(stored, headers=key).status_code == 404
    log = api.get("/api/repos/acme/log", params={"branch": body["branch"]}, headers=key).json()["revisions"]
    assert log[0]["actor"] == "researcher"
    # The key may not merge into main; an admin reviews the diff and merges.
    merge = f"/api/repos/acme/branches/{body['branch']}/merge"
    assert_error(api.post(merge, json={"into": "main"}, headers=key), 403, "forbidden")
    assert api.post(merge, json={"into": "main"}, headers=world).status_code == 200
    assert api.get(stored, headers=key).status_code == 200


def test_without_branch_create_nothing_is_made(api, world):
    reader = bearer(make_key(api, world, "reader", [
        {"repo": "acme", "branches": ["main", "research/*"], "actions": ["read", "write"]}])["key"])
    before = branch_names(api, world)
    assert_error(api.post(RESEARCH, json=RESEARCH_QUESTION, headers=reader), 403, "forbidden")
    assert branch_names(api, world) == before


def test_without_write_on_the_session_branch_nothing_is_made(api, world):
    key = bearer(make_key(api, world, "no-write", [
        {"repo": "acme", "branches": ["main"], "actions": ["read"]},
        {"repo": "acme", "branches": ["research/*"], "actions": ["read", "branch:create"]},
    ])["key"])
    before = branch_names(api, world)
    assert_error(api.post(RESEARCH, json=RESEARCH_QUESTION, headers=key), 403, "forbidden")
    assert branch_names(api, world) == before


def test_a_source_branch_the_key_cannot_see_is_404(api, world):
    key = bearer(make_key(api, world, "elsewhere", [
        {"repo": "acme", "branches": ["research/*"], "actions": ["read", "write", "branch:create"]}])["key"])
    assert_error(api.post(RESEARCH, json={**RESEARCH_QUESTION, "branch": "feature/y"}, headers=key), 404)


def test_a_key_stores_an_ask_answer_on_its_branch_as_itself(api, world):
    """``ask`` with ``store_answer`` recorded the actor ``ask``, which a non-admin key may not
    state: every agent key got a 403 for it."""
    agent = bearer(make_key(api, world, "agent-ask", AGENT_GRANTS)["key"])
    assert api.post("/api/repos/acme/branches", json={"name": "agent/ask"}, headers=agent).status_code == 201
    r = api.post("/api/functions/acme/ask/invoke", headers=agent, json={
        "branch": "agent/ask",
        "input": {"question": "What does the main doc say?",
                  "store_answer": {"workspace": "knowledge", "path": "/answers/main-doc"}}})
    assert r.status_code == 200, r.text
    assert r.json()["stored"]["path"] == "/answers/main-doc"
    log = api.get("/api/repos/acme/log", params={"branch": "agent/ask"}, headers=agent).json()["revisions"]
    assert log[0]["actor"] == "agent-ask" and log[0]["message"].startswith("ask: store answer")


def test_a_missing_key_is_401_before_an_unknown_query_parameter(api, admin):
    """Issue 15: the unknown-parameter 422 runs after the caller's key is checked."""
    r = api.get("/api/repos", params={"bogus": "1"})
    assert r.status_code == 401 and r.json()["error"]["code"] == "unauthenticated"
    r = api.get("/api/repos", params={"bogus": "1"}, headers=admin)
    assert r.status_code == 422 and r.json()["error"]["details"]["unknown"] == ["bogus"]


def test_a_request_looks_its_key_up_once_before_its_body_is_read(api, world, monkeypatch):
    """The request guard checks the key (before the body) and leaves the caller for the route:
    one lookup per request, the route's and the guard's being the same."""
    from api import deps

    calls = []
    real = deps.authenticate

    def counting(*args, **kwargs):
        calls.append(args[2])
        return real(*args, **kwargs)

    monkeypatch.setattr(deps, "authenticate", counting)
    r = api.put(f"{NODE}/once", json={"node_type": "kb:Doc", "properties": {}}, headers=world)
    assert r.status_code == 201, r.text
    assert len(calls) == 1
    assert_error(api.post("/api/repos", json={"name": "x"}, headers=bearer("kg_0123456789abcdef_" + "A" * 43)),
                 401, "unauthenticated")
    assert len(calls) == 2
