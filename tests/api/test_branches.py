"""Branches over HTTP: isolation, names with '/', time travel, concurrent creation."""

from __future__ import annotations

import threading

from tests.api.test_nodes import assert_error, put

BR = "agent/rag-session-001"


def test_branch_sees_main_and_writes_stay_on_it(client, repo):
    put(client, "/docs", {"title": "Main doc"})
    r = client.post("/api/repos/acme/branches", json={"name": BR, "from": "main"})
    assert r.status_code == 201
    body = r.json()
    assert body["name"] == BR and body["parent"] == "main"
    assert body["base_revision"] == body["head_revision"] == 1
    assert client.get("/api/repos/acme/workspaces/knowledge/nodes/docs", params={"branch": BR}).status_code == 200
    assert put(client, "/docs/answer", {"title": "Answer"}, branch=BR).status_code == 201
    assert client.get("/api/repos/acme/workspaces/knowledge/nodes/docs/answer").status_code == 404
    assert client.get("/api/repos/acme/workspaces/knowledge/nodes/docs/answer",
                      params={"branch": BR}).status_code == 200
    # a write on main after the fork is not seen by the branch
    put(client, "/later", {"title": "Later"})
    assert client.get("/api/repos/acme/workspaces/knowledge/nodes/later", params={"branch": BR}).status_code == 404
    # a delete on the branch does not touch main
    d = client.delete("/api/repos/acme/workspaces/knowledge/nodes/docs",
                      params={"branch": BR, "recursive": "true"})
    assert d.status_code == 200 and d.json()["deleted"] == 2
    assert client.get("/api/repos/acme/workspaces/knowledge/nodes/docs").status_code == 200
    assert client.get("/api/repos/acme/workspaces/knowledge/nodes/docs", params={"branch": BR}).status_code == 404


def test_branch_name_with_slash_plain_and_encoded(client, repo):
    client.post("/api/repos/acme/branches", json={"name": BR})
    plain = client.get(f"/api/repos/acme/branches/{BR}")
    encoded = client.get("/api/repos/acme/branches/agent%2Frag-session-001")
    assert plain.status_code == encoded.status_code == 200
    assert plain.json() == encoded.json()
    listed = [b["name"] for b in client.get("/api/repos/acme/branches").json()["branches"]]
    assert listed == [BR, "main"]


def test_branch_of_branch_and_at_revision(client, repo):
    put(client, "/a", {"title": "v1"})                 # r1
    put(client, "/a", {"title": "v2"})                 # r2
    r = client.post("/api/repos/acme/branches", json={"name": "old", "at_revision": 1})
    assert r.status_code == 201 and r.json()["base_revision"] == 1
    assert client.get("/api/repos/acme/workspaces/knowledge/nodes/a",
                      params={"branch": "old"}).json()["properties"]["title"] == "v1"
    client.post("/api/repos/acme/branches", json={"name": "old/child", "from": "old"})
    assert client.get("/api/repos/acme/workspaces/knowledge/nodes/a",
                      params={"branch": "old/child"}).json()["properties"]["title"] == "v1"
    # time travel on main
    assert client.get("/api/repos/acme/workspaces/knowledge/nodes/a",
                      params={"at_revision": 1}).json()["properties"]["title"] == "v1"
    # a revision not written yet is not found, as a branch that does not exist
    assert_error(client.post("/api/repos/acme/branches", json={"name": "x", "at_revision": 99}), 404)
    assert_error(client.post("/api/repos/acme/branches", json={"name": "y", "from": "nope"}), 404)


def test_delete_branch_rules(client, repo):
    client.post("/api/repos/acme/branches", json={"name": "p"})
    client.post("/api/repos/acme/branches", json={"name": "p/c", "from": "p"})
    assert_error(client.delete("/api/repos/acme/branches/main"), 409)
    assert_error(client.delete("/api/repos/acme/branches/p"), 409)
    assert client.delete("/api/repos/acme/branches/p/c").status_code == 204
    assert client.delete("/api/repos/acme/branches/p").status_code == 204
    assert_error(client.get("/api/repos/acme/branches/p"), 404)


def test_bad_branch_names_are_422(client, repo):
    for name in ["", "/x", "x/", "a//b", "a/../b", "-x"]:
        assert_error(client.post("/api/repos/acme/branches", json={"name": name}), 422)


def test_two_concurrent_creations_of_one_branch(client, repo):
    statuses: list[int] = []
    barrier = threading.Barrier(2)

    def create():
        barrier.wait()
        statuses.append(client.post("/api/repos/acme/branches", json={"name": "race"}).status_code)

    threads = [threading.Thread(target=create) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(statuses) == [201, 409]


def test_recreated_branch_does_not_see_the_deleted_ones_relations(client, repo):
    put(client, "/a")
    put(client, "/b")
    client.post("/api/repos/acme/branches", json={"name": "tmp"})
    client.post("/api/repos/acme/relations", params={"branch": "tmp"},
                json={"from": "knowledge:/a", "to": "knowledge:/b", "type": "links"})
    assert len(client.get("/api/repos/acme/neighbors",
                          params={"node": "knowledge:/a", "branch": "tmp"}).json()["neighbors"]) == 1
    assert client.delete("/api/repos/acme/branches/tmp").status_code == 204
    client.post("/api/repos/acme/branches", json={"name": "tmp2"})
    assert client.get("/api/repos/acme/neighbors",
                      params={"node": "knowledge:/a", "branch": "tmp2"}).json()["neighbors"] == []
