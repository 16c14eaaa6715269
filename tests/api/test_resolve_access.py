"""Who may propose entity merges (``resolve-entities``): reading the source branch lists them
(dry run); writing a proposal needs ``branch:create`` and ``write`` on ``proposals/...``; a key
without them gets 403 and nothing is written. Auth on; both databases."""

from __future__ import annotations

from tests.api import test_access
from tests.api.test_access import bearer, make_key
from tests.api.test_nodes import assert_error

settings, auth_services, api, admin = (
    test_access.settings,
    test_access.auth_services,
    test_access.api,
    test_access.admin,
)

R = "/api/repos/acme"
NODES = f"{R}/workspaces/knowledge/nodes"
INVOKE = "/api/functions/acme/resolve-entities/invoke"


def _world(api, admin):
    assert api.post("/api/repos", json={"name": "acme"}, headers=admin).status_code == 201
    assert api.post(f"{R}/workspaces", json={"name": "knowledge"}, headers=admin).status_code == 201
    for slug, name in (("ahab", "Ahab"), ("captain-ahab", "Captain Ahab")):
        r = api.put(
            f"{NODES}/entities/{slug}",
            params={"parents": True},
            headers=admin,
            json={"node_type": "kg:Entity", "properties": {"name": name, "entity_type": "person"}},
        )
        assert r.status_code == 201, r.text


def branches(api, admin):
    return [b["name"] for b in api.get(f"{R}/branches", headers=admin).json()["branches"]]


def test_proposals_need_write_and_branch_create_on_the_proposal_branch(api, admin):
    _world(api, admin)
    reader = bearer(make_key(api, admin, "reader", [{"repo": "acme", "actions": ["read"]}])["key"])
    writer = bearer(make_key(api, admin, "writer", [{"repo": "acme", "actions": ["read", "write"]}])["key"])
    proposer = bearer(
        make_key(
            api,
            admin,
            "proposer",
            [
                {"repo": "acme", "branches": ["main"], "actions": ["read"]},
                {"repo": "acme", "branches": ["proposals/*"], "actions": ["read", "write", "branch:create"]},
            ],
        )["key"]
    )
    body = {"input": {"workspace": "knowledge"}}
    dry = api.post(INVOKE, json={"input": {"workspace": "knowledge", "dry_run": True}}, headers=reader)
    assert dry.status_code == 200, dry.text
    assert [m["kept"] for m in dry.json()["merges"]] == ["/entities/ahab"]
    assert_error(api.post(INVOKE, json=body, headers=reader), 403, "forbidden")
    assert_error(api.post(INVOKE, json=body, headers=writer), 403, "forbidden")  # no branch:create
    assert branches(api, admin) == ["main"]
    ok = api.post(INVOKE, json=body, headers=proposer)
    assert ok.status_code == 200, ok.text
    assert branches(api, admin) == ["main", ok.json()["branch"]]
    outsider = bearer(make_key(api, admin, "outsider", [{"repo": "other", "actions": ["read"]}])["key"])
    assert_error(api.post(INVOKE, json=body, headers=outsider), 404, "not_found")
