"""Merges keep every relation (issue 10): a node is its (workspace, path) on every branch, an
edge between two paths stays an edge between them through a merge, and a merge never leaves an
edge whose endpoint the target deleted (that is a conflict). Both databases.

Each test asserts the exact NEIGHBORS a reader sees after the merge.
"""

from __future__ import annotations

import pytest

from tests.api.test_history import BASE, NODES, branch, merge, put

WS = "knowledge"


def relate(client, a, b, rel_type="links", branch="main", weight=None):
    body = {"from": f"{WS}:{a}", "to": f"{WS}:{b}", "type": rel_type, "weight": weight}
    r = client.post(f"{BASE}/relations", params={"branch": branch}, json=body)
    assert r.status_code in (200, 201), r.text


def delete(client, path, branch="main", recursive=False):
    r = client.delete(f"{NODES}{path}", params={"branch": branch, "recursive": recursive})
    assert r.status_code == 200, r.text
    return r.json()


def neighbors(client, path, branch="main"):
    """``{(direction, other path, type, weight)}`` of one node, as a reader sees them."""
    r = client.get(f"{BASE}/neighbors", params={"node": f"{WS}:{path}", "direction": "BOTH", "branch": branch})
    assert r.status_code == 200, r.text
    return {(n["direction"], n["path"], n["relation_type"], n["weight"]) for n in r.json()["neighbors"]}


def merged(client, name, **body):
    r = merge(client, name, into="main", **body)
    assert r.status_code == 200, r.text
    return r.json()


def conflicts(client, name, **body):
    r = merge(client, name, into="main", **body)
    assert r.status_code == 409, r.text
    return r.json()["error"]["details"]["conflicts"]


def test_the_reproduction_of_issue_10_keeps_the_branch_edges(client, repo):
    """extract-entities on main and on a branch name one entity: both mentions survive."""
    put(client, "/docA", {"content": "the audit of DGIA was completed on time."})
    put(client, "/docB", {"content": "the board approved new funding for DGIA yesterday."})
    branch(client, "agent/x")
    invoke = "/api/functions/acme/extract-entities/invoke"
    r = client.post(invoke, json={"input": {"workspace": WS, "path": "/docA"}})
    assert r.status_code == 200, r.text
    r = client.post(invoke, json={"input": {"workspace": WS, "path": "/docB"}, "branch": "agent/x"})
    assert r.status_code == 200, r.text
    assert [e["path"] for e in r.json()["entities"]] == ["/entities/dgia"]
    result = merged(client, "agent/x")
    assert result["applied"]["relations"]["upserted"] == 1
    assert neighbors(client, "/entities/dgia") == {
        ("OUT", "/docA", "mentioned_in", None), ("OUT", "/docB", "mentioned_in", None)}
    # main's record for docB is trusted (its entity and edge are there): no second extraction
    again = client.post(invoke, json={"input": {"workspace": WS, "path": "/docB"}}).json()
    assert again["skipped"] is True


def test_same_path_created_on_both_sides_with_equal_content_is_one_node(client, repo):
    put(client, "/x", {"title": "x"})
    put(client, "/y", {"title": "y"})
    branch(client, "agent/a")
    put(client, "/e", {"name": "E"})
    relate(client, "/e", "/x")
    put(client, "/e", {"name": "E"}, branch="agent/a")
    relate(client, "/e", "/y", branch="agent/a")
    result = merged(client, "agent/a")
    assert result["applied"]["nodes"] == {"added": [], "modified": [], "deleted": [], "kept": []}
    assert result["applied"]["relations"] == {"upserted": 1, "removed": 0, "kept": 0}
    assert neighbors(client, "/e") == {("OUT", "/x", "links", None), ("OUT", "/y", "links", None)}


@pytest.mark.parametrize("take", ["ours", "theirs", "value"])
def test_add_add_conflict_resolved_any_way_keeps_both_sides_edges(client, repo, take):
    put(client, "/x", {"title": "x"})
    put(client, "/y", {"title": "y"})
    branch(client, "agent/a")
    put(client, "/e", {"name": "E main"})
    relate(client, "/x", "/e", "cites", weight=2.0)
    put(client, "/e", {"name": "E branch"}, branch="agent/a")
    relate(client, "/e", "/y", branch="agent/a")
    [conflict] = conflicts(client, "agent/a")
    assert (conflict["kind"], conflict["path"], conflict["reason"]) == (
        "node", "/e", "added on both sides with different content")
    resolution = {"workspace": WS, "path": "/e", "take": take}
    if take == "value":
        resolution["value"] = {"name": "E"}
    merged(client, "agent/a", resolutions=[resolution])
    expected_name = {"ours": "E main", "theirs": "E branch", "value": "E"}[take]
    assert client.get(f"{NODES}/e").json()["properties"] == {"name": expected_name}
    assert neighbors(client, "/e") == {("IN", "/x", "cites", 2.0), ("OUT", "/y", "links", None)}


def test_node_deleted_and_created_again_on_the_target_keeps_the_branch_edges_to_it(client, repo):
    put(client, "/x", {"title": "x"})
    put(client, "/y", {"title": "y"})
    relate(client, "/x", "/y", "old")
    branch(client, "agent/a")
    delete(client, "/x")                 # removes x -old-> y on main
    put(client, "/x", {"title": "x again"})
    put(client, "/z", {"title": "z"}, branch="agent/a")
    relate(client, "/z", "/x", branch="agent/a")
    merged(client, "agent/a")
    assert neighbors(client, "/x") == {("IN", "/z", "links", None)}
    assert client.get(f"{NODES}/x").json()["properties"] == {"title": "x again"}


def test_node_deleted_and_created_again_on_the_branch_carries_the_edge_removal(client, repo):
    put(client, "/x", {"title": "x"})
    put(client, "/y", {"title": "y"})
    relate(client, "/x", "/y", "old")
    branch(client, "agent/a")
    delete(client, "/x", branch="agent/a")
    put(client, "/x", {"title": "x again"}, branch="agent/a")
    relate(client, "/y", "/x", "new", branch="agent/a")
    put(client, "/w", {"title": "w"})
    relate(client, "/w", "/x")           # main relates to the node the branch re-creates
    result = merged(client, "agent/a")
    assert result["applied"]["relations"] == {"upserted": 1, "removed": 1, "kept": 0}
    assert neighbors(client, "/x") == {("IN", "/y", "new", None), ("IN", "/w", "links", None)}


def test_rename_on_the_branch_while_main_relates_to_the_old_path_is_a_conflict(client, repo):
    put(client, "/old", {"title": "doc"})
    put(client, "/y", {"title": "y"})
    branch(client, "agent/a")
    delete(client, "/old", branch="agent/a")           # rename: delete + create elsewhere
    put(client, "/new", {"title": "doc"}, branch="agent/a")
    relate(client, "/y", "/old")                       # main adds an edge to the old path
    [conflict] = conflicts(client, "agent/a")
    assert conflict["kind"] == "relation"
    assert (conflict["from"], conflict["type"], conflict["to"]) == (f"{WS}:/y", "links", f"{WS}:/old")
    assert conflict["deleted_endpoints"] == [f"{WS}:/old"]
    assert (conflict["base"], conflict["ours"], conflict["theirs"]) == (
        None, {"weight": None, "properties": {}, "valid_from": None, "valid_to": None,
                 "invalidated_by": None}, None)
    # nothing was written
    assert neighbors(client, "/old") == {("IN", "/y", "links", None)}
    # theirs: the rename wins, the edge goes with the old path
    result = merged(client, "agent/a", resolutions=[
        {"from": f"{WS}:/y", "type": "links", "to": f"{WS}:/old", "take": "theirs"}])
    assert result["applied"]["nodes"]["deleted"] == [{"workspace": WS, "path": "/old"}]
    assert result["applied"]["relations"]["removed"] == 1
    assert client.get(f"{NODES}/old").status_code == 404
    assert neighbors(client, "/y") == set()


def test_rename_conflict_resolved_ours_keeps_the_old_node_and_its_edge(client, repo):
    put(client, "/old", {"title": "doc"})
    put(client, "/y", {"title": "y"})
    branch(client, "agent/a")
    delete(client, "/old", branch="agent/a")
    put(client, "/new", {"title": "doc"}, branch="agent/a")
    relate(client, "/y", "/old")
    result = merged(client, "agent/a", resolutions=[
        {"from": f"{WS}:/y", "type": "links", "to": f"{WS}:/old", "take": "ours"}])
    assert result["applied"]["nodes"]["added"] == [{"workspace": WS, "path": "/new"}]
    assert result["applied"]["nodes"]["deleted"] == []
    assert neighbors(client, "/old") == {("IN", "/y", "links", None)}
    assert client.get(f"{NODES}/new").status_code == 200


def test_rename_on_main_while_the_branch_relates_to_the_old_path_is_a_conflict(client, repo):
    put(client, "/old", {"title": "doc"})
    put(client, "/y", {"title": "y"})
    branch(client, "agent/a")
    delete(client, "/old")
    put(client, "/new", {"title": "doc"})
    relate(client, "/y", "/old", branch="agent/a")     # the branch relates to what main deleted
    [conflict] = conflicts(client, "agent/a")
    assert conflict["kind"] == "relation" and conflict["deleted_endpoints"] == [f"{WS}:/old"]
    assert (conflict["ours"], conflict["theirs"]) == (None, {"weight": None, "properties": {}, "valid_from": None,
                                                             "valid_to": None, "invalidated_by": None})
    # ours: the edge is dropped, main's rename stands
    result = merged(client, "agent/a", resolutions=[
        {"from": f"{WS}:/y", "type": "links", "to": f"{WS}:/old", "take": "ours"}])
    assert result["revision"] is None and result.get("up_to_date") is True
    assert client.get(f"{NODES}/old").status_code == 404
    assert neighbors(client, "/y") == set()


def test_edge_to_a_node_the_target_deleted_resolved_theirs_restores_the_node(client, repo):
    put(client, "/gone", {"title": "gone"})
    put(client, "/y", {"title": "y"})
    branch(client, "agent/a")
    delete(client, "/gone")
    relate(client, "/y", "/gone", "cites", branch="agent/a", weight=0.5)
    result = merged(client, "agent/a", resolutions=[
        {"from": f"{WS}:/y", "type": "cites", "to": f"{WS}:/gone", "take": "theirs"}])
    assert result["applied"]["nodes"]["added"] == [{"workspace": WS, "path": "/gone"}]
    assert result["applied"]["relations"]["upserted"] == 1
    assert client.get(f"{NODES}/gone").json()["properties"] == {"title": "gone"}
    assert neighbors(client, "/gone") == {("IN", "/y", "cites", 0.5)}


def test_dry_run_reports_what_the_merge_then_does(client, repo):
    put(client, "/old", {"title": "doc"})
    put(client, "/y", {"title": "y"})
    branch(client, "agent/a")
    delete(client, "/old", branch="agent/a")
    relate(client, "/y", "/old")
    res = [{"from": f"{WS}:/y", "type": "links", "to": f"{WS}:/old", "take": "theirs"}]
    dry = merge(client, "agent/a", into="main", dry_run=True).json()
    assert dry["error"]["details"]["conflicts"] == conflicts(client, "agent/a")
    preview = merged(client, "agent/a", dry_run=True, resolutions=res)
    real = merged(client, "agent/a", resolutions=res)
    assert (preview["applied"], preview["base"], preview["fast_forward"]) == (
        real["applied"], real["base"], real["fast_forward"])


def test_extraction_on_a_branch_then_merge_equals_extraction_on_main(client, repo):
    """Two repositories: one extracts docB on a branch and merges, one extracts on main."""
    texts = {"/docA": "Dana Weber audited DGIA in Hamburg.",
             "/docB": "The DGIA board met Dana Weber and the Acme Marine staff."}
    assert client.post("/api/repos", json={"name": "twin"}).status_code == 201
    assert client.post("/api/repos/twin/workspaces", json={"name": WS}).status_code == 201
    invoke = "/api/functions/{}/extract-entities/invoke"
    for repo_name in ("acme", "twin"):
        for path, text in texts.items():
            r = client.put(f"/api/repos/{repo_name}/workspaces/{WS}/nodes{path}",
                           json={"properties": {"content": text}})
            assert r.status_code == 201, r.text
    branch(client, "agent/x")
    assert client.post(invoke.format("acme"), json={"input": {"workspace": WS, "path": "/docA"}}).status_code == 200
    r = client.post(invoke.format("acme"), json={"input": {"workspace": WS, "path": "/docB"}, "branch": "agent/x"})
    assert r.status_code == 200, r.text
    merged(client, "agent/x")
    for path in texts:
        assert client.post(invoke.format("twin"), json={"input": {"workspace": WS, "path": path}}).status_code == 200

    def state(repo_name):
        listing = client.get(f"/api/repos/{repo_name}/workspaces/{WS}/nodes", params={"prefix": "/"}).json()
        nodes = {n["path"]: (n["node_type"], n["properties"]) for n in listing["nodes"]}
        edges = set()
        for path in nodes:
            r = client.get(f"/api/repos/{repo_name}/neighbors", params={"node": f"{WS}:{path}", "direction": "OUT"})
            edges |= {(path, n["relation_type"], n["path"]) for n in r.json()["neighbors"]}
        return nodes, edges

    acme_nodes, acme_edges = state("acme")
    twin_nodes, twin_edges = state("twin")
    # record paths name the document's node id, which differs per repository: compare by source
    def records(nodes):
        return {p.rsplit("/", 1)[0] if p.startswith("/kg/extractions/") else p: v for p, v in nodes.items()}
    assert records(acme_nodes).keys() == records(twin_nodes).keys()
    entity_paths = {p for p in acme_nodes if p.startswith("/entities/")}
    assert {p: acme_nodes[p] for p in entity_paths} == {p: twin_nodes[p] for p in entity_paths}
    assert ({e for e in acme_edges if not e[0].startswith("/kg/")}
            == {e for e in twin_edges if not e[0].startswith("/kg/")})
    assert ("/entities/dgia", "mentioned_in", "/docA") in acme_edges
    assert ("/entities/dgia", "mentioned_in", "/docB") in acme_edges


def test_a_record_whose_entity_was_deleted_is_not_trusted(client, repo):
    put(client, "/doc", {"content": "The audit of DGIA was completed."})
    invoke = "/api/functions/acme/extract-entities/invoke"
    first = client.post(invoke, json={"input": {"workspace": WS, "path": "/doc"}}).json()
    assert first["skipped"] is False and [e["path"] for e in first["entities"]] == ["/entities/dgia"]
    delete(client, "/entities/dgia")
    again = client.post(invoke, json={"input": {"workspace": WS, "path": "/doc"}}).json()
    assert again["skipped"] is False and again["revision"] is not None
    assert neighbors(client, "/entities/dgia") == {("OUT", "/doc", "mentioned_in", None)}
    third = client.post(invoke, json={"input": {"workspace": WS, "path": "/doc"}}).json()
    assert third["skipped"] is True


def test_dry_run_and_merge_report_one_base_when_the_parent_did_not_write_since_the_fork(client, repo):
    """The model-based test's seed: the repository's head moved on another branch before the
    fork, so the parent's head is below the fork revision; the merge's own revision then moved
    the parent's head, and the real merge reported another base revision than the dry run."""
    put(client, "/a", {"title": "main"})                      # revision 1 on main
    branch(client, "agent/one")
    put(client, "/a", {"title": "one"}, branch="agent/one")   # revision 2 on agent/one
    fork = branch(client, "agent/two")                        # forks main at revision 2
    put(client, "/b", {"title": "two"}, branch="agent/two")
    dry = merged(client, "agent/two", dry_run=True)
    real = merged(client, "agent/two")
    assert dry["base"] == real["base"] == {"kind": "fork", "branch": "main", "revision": fork["base_revision"]}
    assert fork["base_revision"] == 2


def test_take_ours_on_a_deleted_endpoint_keeps_the_node_and_says_so(client):
    """The source deletes x; the target re-weights a->x. One conflict names the relation (not
    one per reason), and ``take: ours`` keeps the edge and x: x is reported ``kept`` (before,
    the delete was dropped without a word), while the source's removal of y->x, which the target
    did not touch, applies."""
    assert client.post("/api/repos", json={"name": "r"}).status_code == 201
    assert client.post("/api/repos/r/workspaces", json={"name": "w"}).status_code == 201
    for path in ("a", "x", "y"):
        assert client.put(f"/api/repos/r/workspaces/w/nodes/{path}",
                          json={"node_type": "t", "properties": {"title": path}}).status_code == 201
    for source in ("a", "y"):
        assert client.post("/api/repos/r/relations", json={"from": f"w:/{source}", "to": "w:/x", "type": "rel",
                                                           "weight": 1.0}).status_code == 201
    assert client.post("/api/repos/r/branches", json={"name": "b", "from": "main"}).status_code == 201
    assert client.delete("/api/repos/r/workspaces/w/nodes/x?branch=b").status_code == 200
    assert client.post("/api/repos/r/relations", json={"from": "w:/a", "to": "w:/x", "type": "rel",
                                                       "weight": 0.5}).status_code == 200
    r = client.post("/api/repos/r/branches/b/merge", json={"into": "main", "dry_run": True})
    assert r.status_code == 409
    conflicts = r.json()["error"]["details"]["conflicts"]
    assert len(conflicts) == 1
    assert conflicts[0]["from"] == "w:/a" and conflicts[0]["to"] == "w:/x"
    assert conflicts[0]["deleted_endpoints"] == ["w:/x"] and conflicts[0]["ours"]["weight"] == 0.5
    resolution = [{"from": "w:/a", "to": "w:/x", "type": "rel", "take": "ours"}]
    preview = client.post("/api/repos/r/branches/b/merge", json={"into": "main", "dry_run": True,
                                                                 "resolutions": resolution})
    r = client.post("/api/repos/r/branches/b/merge", json={"into": "main", "resolutions": resolution})
    assert r.status_code == 200, r.text
    assert r.json()["applied"] == preview.json()["applied"]
    assert r.json()["applied"]["nodes"] == {"added": [], "modified": [], "deleted": [],
                                            "kept": [{"workspace": "w", "path": "/x"}]}
    assert r.json()["applied"]["relations"] == {"upserted": 0, "removed": 1, "kept": 1}
    assert client.get("/api/repos/r/workspaces/w/nodes/x").json()["properties"] == {"title": "x"}
    edges = client.get("/api/repos/r/neighbors?node=w:/x").json()["neighbors"]
    assert [(e["path"], e["weight"]) for e in edges] == [("/a", 0.5)]
