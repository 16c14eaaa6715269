# ruff: noqa: F811  (the fixtures of test_access are imported by name, and requested by it)
"""Repository-level actions under a grant scoped to some workspaces (or branches): ``admin`` on
``team-*`` administers those workspaces, not the repository that also holds ``secret``. Deleting
the repository needs grants covering every workspace and branch in it; creating a workspace
needs an ``admin`` grant whose workspace globs match the new name, decided before the name is
looked up, so a name taken by a hidden workspace answers exactly as a free one; listing shows
only the covered workspaces. On SQLite and PostgreSQL.
"""

from __future__ import annotations

import pytest

from kg.access import Actor, make_grant
from kg.errors import Forbidden
from kg.ops import repos as repo_ops
from tests.api.test_access import admin, api, auth_services, bearer, make_key, settings  # noqa: F401
from tests.api.test_nodes import assert_error

BASE = "/api/repos/acme"
TEAM = {"repo": "acme", "workspaces": ["team-*"], "actions": ["read", "write", "admin"]}


@pytest.fixture
def acme(api, admin):  # noqa: F811
    """acme with workspaces team-a and secret (a node in each) and a branch feature/x; a key
    holding admin on the team-* workspaces only."""
    assert api.post("/api/repos", json={"name": "acme"}, headers=admin).status_code == 201
    for ws in ("team-a", "secret"):
        assert api.post(f"{BASE}/workspaces", json={"name": ws}, headers=admin).status_code == 201
        r = api.put(f"{BASE}/workspaces/{ws}/nodes/n", headers=admin,
                    json={"node_type": "kb:Doc", "properties": {"content": f"in {ws}"}})
        assert r.status_code == 201, r.text
    assert api.post(f"{BASE}/branches", json={"name": "feature/x"}, headers=admin).status_code == 201
    team = make_key(api, admin, "team", [TEAM])
    return {"admin": admin, "team": bearer(team["key"])}


def test_a_workspace_scoped_admin_cannot_delete_the_repository(api, acme):
    r = api.delete(BASE, headers=acme["team"])
    assert_error(r, 403, "forbidden")
    assert "secret" not in r.text  # the refusal names no hidden workspace
    # nothing was deleted: the repository and the workspace the key cannot see are still there
    assert api.get(BASE, headers=acme["admin"]).status_code == 200
    assert api.get(f"{BASE}/workspaces/secret/nodes/n", headers=acme["admin"]).status_code == 200


def test_a_branch_scoped_admin_cannot_delete_the_repository(api, acme):
    agent = make_key(api, acme["admin"], "agent-admin",
                     [{"repo": "acme", "branches": ["main"], "actions": ["read", "admin"]}])
    assert_error(api.delete(BASE, headers=bearer(agent["key"])), 403, "forbidden")
    assert api.get(f"{BASE}/branches/feature/x", headers=acme["admin"]).status_code == 200


def test_grants_covering_every_workspace_and_branch_delete_the_repository(api, acme):
    both = make_key(api, acme["admin"], "both", [TEAM, {**TEAM, "workspaces": ["secret"]}])
    assert api.delete(BASE, headers=bearer(both["key"])).status_code == 204
    assert_error(api.get(BASE, headers=acme["admin"]), 404, "not_found")


def test_a_workspace_outside_the_globs_is_refused_alike_whether_taken_or_free(api, acme):
    taken = api.post(f"{BASE}/workspaces", json={"name": "secret"}, headers=acme["team"])
    free = api.post(f"{BASE}/workspaces", json={"name": "payroll"}, headers=acme["team"])
    assert_error(taken, 403, "forbidden")
    assert_error(free, 403, "forbidden")
    # the same answer but for the name itself
    assert taken.text.replace("secret", "NAME") == free.text.replace("payroll", "NAME")
    names = [w["name"] for w in api.get(f"{BASE}/workspaces", headers=acme["admin"]).json()["workspaces"]]
    assert names == ["secret", "team-a"]  # nothing was made outside the globs


def test_a_workspace_inside_the_globs_is_created_or_a_conflict(api, acme):
    made = api.post(f"{BASE}/workspaces", json={"name": "team-b"}, headers=acme["team"])
    assert made.status_code == 201, made.text
    assert made.json()["name"] == "team-b"
    assert_error(api.post(f"{BASE}/workspaces", json={"name": "team-a"}, headers=acme["team"]), 409, "conflict")


def test_listing_shows_only_the_covered_workspaces(api, acme):
    listed = api.get(f"{BASE}/workspaces", headers=acme["team"])
    assert listed.status_code == 200
    assert [w["name"] for w in listed.json()["workspaces"]] == ["team-a"]
    repos = api.get("/api/repos", headers=acme["team"])
    assert [r["name"] for r in repos.json()["repos"]] == ["acme"]


def test_the_index_status_of_the_whole_repository_needs_a_grant_over_all_of_it(api, acme):
    """It names every workspace, branch and failing path: a workspace-scoped admin gets 403."""
    assert_error(api.get(f"{BASE}/index/status", headers=acme["team"]), 403, "forbidden")
    assert api.get(f"{BASE}/index/status", headers=acme["admin"]).status_code == 200
    both = make_key(api, acme["admin"], "both", [TEAM, {**TEAM, "workspaces": ["secret"]}])
    assert api.get(f"{BASE}/index/status", headers=bearer(both["key"])).status_code == 200


def test_settling_or_rebuilding_the_index_needs_a_grant_over_the_whole_repository(auth_services, acme):
    """The use cases behind ``kg ingest`` and ``kg index rebuild`` work on every workspace."""
    team = Actor("key", "team", "0123456789abcdef", (make_grant("acme", ["*"], ["team-*"], ["read", "admin"]),))
    for use_case in (repo_ops.settle_index, repo_ops.rebuild_index):
        with pytest.raises(Forbidden):
            use_case(auth_services, team, "acme")
    everyone = Actor("key", "all", "0123456789abcdee", (make_grant("acme", ["*"], ["*"], ["admin"]),))
    assert repo_ops.rebuild_index(auth_services, everyone, "acme").chunks >= 2


def test_retrying_failed_texts_needs_a_grant_over_the_whole_repository(api, acme):
    """Retrying re-embeds the failed texts of every workspace and branch: a workspace-scoped
    admin gets 403 (nothing is queued), an admin over all of it gets the count."""
    url = f"{BASE}/index/retry-failed"
    assert_error(api.post(url, headers=acme["team"]), 403, "forbidden")
    r = api.post(url, headers=acme["admin"])
    assert r.status_code == 200, r.text
    assert r.json() == {"retried": 0}
