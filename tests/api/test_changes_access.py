# ruff: noqa: F811  (the fixtures of test_access are imported by name, and requested by it)
"""Who sees what of the change feed, and who may register webhooks (KG_AUTH on): a key scoped
to workspace ``public`` sees only its paths, on the branches it reads, skips revisions it sees
nothing of, and learns no branch it may not see; a webhook needs admin over the whole
repository. On SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from tests.api.test_access import admin, api, auth_services, bearer, make_key, settings  # noqa: F401
from tests.api.test_nodes import assert_error

BASE = "/api/repos/acme"
TOKEN = "quokkazebra"


def node(ws: str, path: str) -> str:
    return f"{BASE}/workspaces/{ws}/nodes{path}"


@pytest.fixture
def world(api, admin):
    assert api.post("/api/repos", json={"name": "acme"}, headers=admin).status_code == 201
    for ws in ("public", "secret"):
        assert api.post(f"{BASE}/workspaces", json={"name": ws}, headers=admin).status_code == 201
    writes = [("public", "/a", "main"), ("secret", f"/{TOKEN}", "main"), ("public", "/b", "main")]
    for ws, path, branch in writes:
        r = api.put(node(ws, path), params={"branch": branch}, json={"node_type": "kb:Doc", "properties": {}},
                    headers=admin)
        assert r.status_code == 201, r.text
    r = api.post(f"{BASE}/relations", json={"from": "public:/a", "to": f"secret:/{TOKEN}", "type": "mentions"},
                 headers=admin)
    assert r.status_code == 201, r.text
    r = api.post(f"{BASE}/relations", json={"from": "public:/a", "to": "public:/b", "type": "cites"}, headers=admin)
    assert r.status_code == 201, r.text
    assert api.post(f"{BASE}/branches", json={"name": "private/x"}, headers=admin).status_code == 201
    r = api.put(node("public", "/c"), params={"branch": "private/x"},
                json={"node_type": "kb:Doc", "properties": {}}, headers=admin)
    assert r.status_code == 201, r.text
    reader = make_key(api, admin, "public-reader", [{"repo": "acme", "branches": ["main"],
                                                     "workspaces": ["public"], "actions": ["read"]}])
    owner = make_key(api, admin, "public-admin", [{"repo": "acme", "branches": ["*"], "workspaces": ["public"],
                                                   "actions": ["read", "write", "admin"]}])
    return {"admin": admin, "reader": bearer(reader["key"]), "owner": bearer(owner["key"])}


def test_a_scoped_key_sees_only_its_workspaces_and_branches(api, world):
    full = api.get(f"{BASE}/changes", headers=world["admin"]).json()
    assert [(e["type"], e["revision"]) for e in full["events"]] == [
        ("revision", 1), ("revision", 2), ("revision", 3), ("revision", 4), ("revision", 5),
        ("branch.created", 5), ("revision", 6)]
    r = api.get(f"{BASE}/changes", headers=world["reader"])
    assert r.status_code == 200, r.text
    assert TOKEN not in r.text and "secret" not in r.text and "private" not in r.text
    page = r.json()
    # Revision 2 (secret only) and 4 (a relation into secret) are skipped; 6 and the branch event
    # are on a branch it may not read.
    assert [(e["revision"], e["changes"]) for e in page["events"]] == [
        (1, [{"kind": "node", "op": "put", "workspace": "public", "path": "/a"}]),
        (3, [{"kind": "node", "op": "put", "workspace": "public", "path": "/b"}]),
        (5, [{"kind": "relation", "op": "put", "from": "public:/a", "type": "cites", "to": "public:/b"}])]
    assert [e["change_count"] for e in page["events"]] == [1, 1, 1]
    # The cursor still moves past what it may not see.
    assert page["next_after"] == full["next_after"] and page["has_more"] is False
    # A page of one: the skipped revisions never come back.
    ids, after = [], None
    while True:
        p = api.get(f"{BASE}/changes", params={"limit": 1, **({"after": after} if after else {})},
                    headers=world["reader"]).json()
        ids += [e["id"] for e in p["events"]]
        after = p["next_after"]
        if not p["has_more"]:
            break
    assert ids == [e["id"] for e in page["events"]]
    assert_error(api.get(f"{BASE}/changes", params={"branch": "private/x"}, headers=world["reader"]), 404)


def test_webhooks_need_admin_over_the_whole_repository(api, world, auth_services):
    auth_services.settings.webhook_allowed_urls = ["http://127.0.0.1:9/"]
    body = {"url": "http://127.0.0.1:9/kg"}
    for who, status in (("reader", 403), ("owner", 403)):
        r = api.post(f"{BASE}/webhooks", json=body, headers=world[who])
        assert_error(r, status)
        assert_error(api.get(f"{BASE}/webhooks", headers=world[who]), status)
    assert_error(api.post(f"{BASE}/webhooks", json=body), 401, "unauthenticated")
    created = api.post(f"{BASE}/webhooks", json=body, headers=world["admin"])
    assert created.status_code == 201, created.text
    hook = created.json()["id"]
    assert_error(api.delete(f"{BASE}/webhooks/{hook}", headers=world["owner"]), 403)
    assert_error(api.get(f"{BASE}/webhooks/{hook}/deliveries", headers=world["reader"]), 403)
    assert [h["id"] for h in api.get(f"{BASE}/webhooks", headers=world["admin"]).json()["webhooks"]] == [hook]
