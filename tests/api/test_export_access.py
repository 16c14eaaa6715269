"""``GET /api/repos/{repo}/export`` under a key's grants (auth on): a key of one workspace exports
that workspace and no relation leaving it; no key, nothing. On SQLite and PostgreSQL."""

from __future__ import annotations

from tests.api import test_access
from tests.api.test_access import bearer, make_key
from tests.api.test_export import EXPORT, put, records_of
from tests.api.test_nodes import assert_error

settings, auth_services, api, admin = (test_access.settings, test_access.auth_services, test_access.api,
                                      test_access.admin)
world = test_access.world


def test_a_key_of_one_workspace_exports_that_workspace(api, admin, world):
    assert api.post("/api/repos/acme/workspaces", json={"name": "notes"}, headers=admin).status_code == 201
    put(api, "knowledge", "/a", "Alpha", headers=admin)
    put(api, "notes", "/c", "Gamma", headers=admin)
    r = api.post("/api/repos/acme/relations", headers=admin,
                 json={"from": "knowledge:/a", "to": "notes:/c", "type": "cites"})
    assert r.status_code == 201, r.text
    key = make_key(api, admin, "notes-reader", [{"repo": "acme", "branches": ["main"], "workspaces": ["notes"],
                                                  "actions": ["read"]}])
    r = api.get(EXPORT, headers=bearer(key["key"]))
    assert r.status_code == 200, r.text
    records = records_of(r.content)
    assert [w["name"] for w in records[0]["workspaces"]] == ["notes"]
    assert [(x["workspace"], x["path"]) for x in records if x["record"] == "node"] == [("notes", "/c")]
    assert [x for x in records if x["record"] == "relation"] == []  # its source is outside the grant
    # without a key: 401 in the error shape, nothing exported
    assert_error(api.get(EXPORT), 401, "unauthenticated")
