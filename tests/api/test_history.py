"""Revisions, batches, diff, three-way merge, reset, ahead / behind, if_revision (both databases)."""

from __future__ import annotations

from tests.api.test_nodes import assert_error

BASE = "/api/repos/acme"
NODES = f"{BASE}/workspaces/knowledge/nodes"


def put(client, path, props, branch="main", **body):
    r = client.put(f"{NODES}{path}", params={"branch": branch},
                   json={"node_type": "kb:Doc", "properties": props, **body})
    assert r.status_code in (200, 201), r.text
    return r.json()


def get(client, path, branch="main"):
    r = client.get(f"{NODES}{path}", params={"branch": branch})
    return r.json() if r.status_code == 200 else None


def branch(client, name, **body):
    r = client.post(f"{BASE}/branches", json={"name": name, **body})
    assert r.status_code == 201, r.text
    return r.json()


def merge(client, name, **body):
    return client.post(f"{BASE}/branches/{name}/merge", json=body)


def test_log_lists_revisions_newest_first_with_changes(client, repo):
    put(client, "/a", {"title": "A"}, message="first", actor="dana")
    put(client, "/b", {"title": "B"})
    client.post(f"{BASE}/relations", json={"from": "knowledge:/a", "to": "knowledge:/b", "type": "links",
                                           "message": "relate"})
    revs = client.get(f"{BASE}/log").json()["revisions"]
    assert [r["revision"] for r in revs] == [3, 2, 1]
    assert revs[2]["message"] == "first" and revs[2]["actor"] == "dana" and revs[2]["branch"] == "main"
    assert revs[2]["changes"] == [{"kind": "node", "op": "put", "workspace": "knowledge", "path": "/a"}]
    assert revs[0]["changes"][0] == {"kind": "relation", "op": "put", "from": "knowledge:/a", "type": "links",
                                     "to": "knowledge:/b"}
    branch(client, "agent/x")
    put(client, "/c", {"title": "C"}, branch="agent/x")
    put(client, "/d", {"title": "D"})  # on main after the fork: not in the branch's history
    on_branch = client.get(f"{BASE}/log", params={"branch": "agent/x"}).json()["revisions"]
    assert [(r["revision"], r["branch"]) for r in on_branch] == [(4, "agent/x"), (3, "main"), (2, "main"), (1, "main")]


def test_log_lists_at_most_changes_per_revision_and_counts_them_all(client, repo, services):
    """A revision of many writes (a bulk import writes millions in one) lists its first
    ``changes`` writes, nodes then relations in write order, and counts them all: one page of
    the log, and every branch listing (each branch's last revision), read every write before."""
    upserts = [{"workspace": "knowledge", "path": f"/n{i:03d}", "node_type": "kb:Doc", "properties": {}}
               for i in range(150)]
    r = client.post(f"{BASE}/nodes:batch", json={"upserts": upserts, "message": "many"})
    assert r.status_code == 200, r.text
    for i in range(30):
        r = client.post(f"{BASE}/relations", json={"from": "knowledge:/n000", "to": f"knowledge:/n{i + 1:03d}",
                                                   "type": "links"})
        assert r.status_code in (200, 201), r.text
    (many,) = [rev for rev in client.get(f"{BASE}/log").json()["revisions"] if rev["message"] == "many"]
    assert many["change_count"] == 150
    assert [c["path"] for c in many["changes"]] == [f"/n{i:03d}" for i in range(100)]
    page = client.get(f"{BASE}/log", params={"changes": 160, "limit": 31}).json()["revisions"]
    assert [len(rev["changes"]) for rev in page] == [1] * 30 + [150]
    assert [rev["change_count"] for rev in page] == [1] * 30 + [150]
    none = client.get(f"{BASE}/log", params={"changes": 0}).json()["revisions"]
    assert all(rev["changes"] == [] for rev in none) and none[-1]["change_count"] == 150
    for bad in (-1, 10_001, "x"):
        assert_error(client.get(f"{BASE}/log", params={"changes": bad}), 422)


def test_a_revision_of_nodes_and_relations_lists_nodes_first_up_to_the_cap(services):
    from kg.context import OPERATOR, run
    from kg.ops import queries
    from kg.ops import repos as repo_ops
    from kg.ops.nodes import GraphWrite, write_graph

    run(services, OPERATOR, repo_ops.create_repository, "capped")
    run(services, OPERATOR, repo_ops.create_workspace, "capped", "w")
    nodes = [{"workspace": "w", "path": f"/n{i}", "node_type": "kb:Doc", "properties": {}} for i in range(4)]
    relations = [{"from": "w:/n0", "to": f"w:/n{i}", "type": "links"} for i in (1, 2, 3)]
    run(services, OPERATOR, write_graph, "capped", "main",
        lambda session, view: GraphWrite(upserts=nodes, relations=relations))
    (rev,) = queries.revision_log(services, OPERATOR, "capped", "main", max_changes=6).revisions
    assert rev.change_count == 7
    assert [c.kind for c in rev.changes] == ["node"] * 4 + ["relation"] * 2
    (rev,) = queries.revision_log(services, OPERATOR, "capped", "main", max_changes=3).revisions
    assert [getattr(c, "path", None) for c in rev.changes] == ["/n0", "/n1", "/n2"]


def test_a_branch_listing_reads_no_write_of_the_last_revisions(services, repo, client):
    """Each branch's last revision is listed with its row alone (number, time, message, actor)."""
    from sqlalchemy import event

    from kg.context import OPERATOR
    from kg.ops import branches as branch_ops

    put(client, "/a", {"title": "A"}, message="first", actor="dana")
    branch(client, "agent/x")
    statements: list[str] = []

    def record(conn, cursor, statement, parameters, context, executemany):
        statements.append(" ".join(statement.split()).lower())

    event.listen(services.db.engine, "before_cursor_execute", record)
    try:
        listed = branch_ops.branch_overview(services, OPERATOR, "acme")
    finally:
        event.remove(services.db.engine, "before_cursor_execute", record)
    main = next(b for b in listed if b.name == "main")
    assert main.last_revision is not None
    assert main.last_revision.message == "first" and main.last_revision.actor == "dana"
    assert main.last_revision.revision == 1 and main.last_revision.created_at
    assert not any("from node_versions" in s and "node_versions.revision =" in s for s in statements)


def test_batch_is_one_revision_all_or_nothing(client, repo):
    r = client.post(f"{BASE}/nodes:batch", json={
        "upserts": [{"workspace": "knowledge", "path": "/docs", "node_type": "kb:Folder", "properties": {}},
                    {"workspace": "knowledge", "path": "/docs/a", "node_type": "kb:Doc", "properties": {"title": "a"}}],
        "message": "import"})
    assert r.status_code == 200, r.text
    assert r.json()["revision"] == 1 and len(r.json()["upserted"]) == 2
    bad = client.post(f"{BASE}/nodes:batch", json={
        "upserts": [{"workspace": "knowledge", "path": "/docs/b", "node_type": "kb:Doc", "properties": {}},
                    {"workspace": "knowledge", "path": "/nope/c", "node_type": "kb:Doc", "properties": {}}],
        "deletes": [{"workspace": "knowledge", "path": "/docs/a"}]})
    assert_error(bad, 404)
    assert get(client, "/docs/b") is None and get(client, "/docs/a") is not None
    assert client.get(BASE).json()["head_revision"] == 1
    assert_error(client.post(f"{BASE}/nodes:batch", json={"upserts": [{"path": "/x"}]}), 422)
    assert_error(client.post(f"{BASE}/nodes:batch", json={}), 422)
    both = client.post(f"{BASE}/nodes:batch", json={
        "deletes": [{"workspace": "knowledge", "path": "/docs", "recursive": True}],
        "upserts": [{"workspace": "knowledge", "path": "/fresh", "properties": {"title": "f"}}]})
    assert both.status_code == 200 and both.json()["deleted"] == 2 and both.json()["revision"] == 2


def test_diff_reports_property_changes(client, repo):
    put(client, "/a", {"title": "A", "status": "draft"})
    put(client, "/gone", {"title": "G"})
    put(client, "/x", {"title": "X"})
    put(client, "/y", {"title": "Y"})
    client.post(f"{BASE}/relations", json={"from": "knowledge:/x", "to": "knowledge:/y", "type": "rw", "weight": 1})
    branch(client, "b")
    put(client, "/a", {"title": "A", "status": "published"}, branch="b")
    put(client, "/new", {"title": "N"}, branch="b")
    client.delete(f"{NODES}/gone", params={"branch": "b"})
    client.post(f"{BASE}/relations", params={"branch": "b"},
                json={"from": "knowledge:/a", "to": "knowledge:/new", "type": "links"})
    client.post(f"{BASE}/relations", params={"branch": "b"},
                json={"from": "knowledge:/x", "to": "knowledge:/y", "type": "rw", "weight": 2})
    d = client.get(f"{BASE}/branches/b/diff", params={"against": "main"}).json()
    assert [n["path"] for n in d["nodes"]["added"]] == ["/new"]
    assert [n["path"] for n in d["nodes"]["deleted"]] == ["/gone"]
    assert d["nodes"]["modified"][0]["path"] == "/a"
    assert d["nodes"]["modified"][0]["changes"] == {"status": {"old": "draft", "new": "published"}}
    assert d["relations"]["added"][0]["from"] == "knowledge:/a" and d["relations"]["added"][0]["type"] == "links"
    assert d["relations"]["modified"][0]["old"]["weight"] == 1 and d["relations"]["modified"][0]["new"]["weight"] == 2
    assert d["relations"]["removed"] == []
    assert client.get(f"{BASE}/branches/b/diff").json()["nodes"] == d["nodes"]  # default: the parent


def test_fast_forward_merge_then_merge_again(client, repo):
    put(client, "/a", {"title": "A"})
    branch(client, "agent/s1")
    put(client, "/a", {"title": "A2"}, branch="agent/s1")
    put(client, "/b", {"title": "B"}, branch="agent/s1")
    listed = {b["name"]: b for b in client.get(f"{BASE}/branches").json()["branches"]}
    assert listed["agent/s1"]["ahead"] == 2 and listed["agent/s1"]["behind"] == 0
    dry = merge(client, "agent/s1", into="main", dry_run=True).json()
    assert dry["dry_run"] and dry["revision"] is None
    assert get(client, "/b") is None
    r = merge(client, "agent/s1", into="main")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["fast_forward"] is True and isinstance(body["revision"], int)
    assert {n["path"] for n in body["applied"]["nodes"]["added"]} == {"/b"}
    assert get(client, "/a")["properties"]["title"] == "A2" and get(client, "/b") is not None
    assert get(client, "/b")["id"] == get(client, "/b", branch="agent/s1")["id"]
    # the branch goes on; the next merge's base is the last merge
    put(client, "/c", {"title": "C"}, branch="agent/s1")
    put(client, "/a", {"title": "A3"})  # main moved: not a fast-forward any more, but no conflict
    again = merge(client, "agent/s1")
    assert again.status_code == 200, again.text
    assert again.json()["fast_forward"] is False
    assert get(client, "/c") is not None and get(client, "/a")["properties"]["title"] == "A3"
    nothing = merge(client, "agent/s1").json()
    assert nothing["revision"] is None and nothing.get("up_to_date") is True


def test_three_way_merge_at_property_level(client, repo):
    put(client, "/a", {"title": "T", "status": "draft", "owner": "x"})
    branch(client, "b")
    put(client, "/a", {"title": "T", "status": "published", "owner": "x"}, branch="b")
    put(client, "/a", {"title": "T2", "status": "draft", "owner": "x"})
    r = merge(client, "b")
    assert r.status_code == 200, r.text
    assert get(client, "/a")["properties"] == {"title": "T2", "status": "published", "owner": "x"}


def test_conflicts_are_409_and_write_nothing_until_resolved(client, repo):
    put(client, "/a", {"title": "T", "status": "draft"})
    put(client, "/d", {"title": "D"})
    branch(client, "b")
    put(client, "/a", {"title": "T", "status": "published"}, branch="b")
    put(client, "/a", {"title": "T", "status": "archived"})
    client.delete(f"{NODES}/d", params={"branch": "b"})
    put(client, "/d", {"title": "D2"})
    put(client, "/n", {"title": "ours"})
    put(client, "/n", {"title": "theirs"}, branch="b")
    head = client.get(BASE).json()["head_revision"]
    r = merge(client, "b")
    assert_error(r, 409, "merge_conflict")
    conflicts = {c["path"]: c for c in r.json()["error"]["details"]["conflicts"]}
    assert set(conflicts) == {"/a", "/d", "/n"}
    assert conflicts["/a"]["base"]["properties"]["status"] == "draft"
    assert conflicts["/a"]["ours"]["properties"]["status"] == "archived"
    assert conflicts["/a"]["theirs"]["properties"]["status"] == "published"
    assert conflicts["/a"]["properties"] == ["status"]
    assert conflicts["/d"]["theirs"] is None and conflicts["/n"]["base"] is None
    assert client.get(BASE).json()["head_revision"] == head
    assert get(client, "/a")["properties"]["status"] == "archived"
    partial = merge(client, "b", resolutions=[{"workspace": "knowledge", "path": "/a", "take": "theirs"}])
    assert_error(partial, 409, "merge_conflict")
    assert len(partial.json()["error"]["details"]["conflicts"]) == 2
    unused = merge(client, "b", resolutions=[{"workspace": "knowledge", "path": "/zzz", "take": "ours"},
                                             {"from": "knowledge:/a", "to": "knowledge:/zzz", "type": "t",
                                              "take": "ours"}])
    assert_error(unused, 422)
    # named back as written: the workspace by name, the relation by its addresses
    assert unused.json()["error"]["details"] == {"field": "resolutions", "unused": [
        {"workspace": "knowledge", "path": "/zzz"}, {"from": "knowledge:/a", "type": "t", "to": "knowledge:/zzz"}]}
    # names of the wrong type are a 422, not a 500 (a list is unhashable), dry run or not
    for bad in ({"workspace": ["knowledge"], "path": "/a", "take": "ours"},
                {"workspace": "knowledge", "path": {"x": 1}, "take": "ours"},
                {"from": ["knowledge:/a"], "to": "knowledge:/d", "type": "t", "take": "ours"},
                {"from": "knowledge:/a", "to": {"x": 1}, "type": "t", "take": "ours"}):
        assert_error(merge(client, "b", resolutions=[bad]), 422)
        assert_error(merge(client, "b", resolutions=[bad], dry_run=True), 422)
    ok = merge(client, "b", resolutions=[
        {"workspace": "knowledge", "path": "/a", "take": "theirs"},
        {"workspace": "knowledge", "path": "/d", "take": "ours"},
        {"workspace": "knowledge", "path": "/n", "take": "value", "value": {"title": "both"}},
    ])
    assert ok.status_code == 200, ok.text
    assert get(client, "/a")["properties"]["status"] == "published"
    assert get(client, "/d")["properties"]["title"] == "D2"
    assert get(client, "/n")["properties"]["title"] == "both"


def test_merge_refuses_orphans(client, repo):
    put(client, "/docs", {"title": "docs"})
    branch(client, "b")
    client.delete(f"{NODES}/docs", params={"branch": "b"})
    put(client, "/docs/new", {"title": "child added on main"})
    r = merge(client, "b")
    assert_error(r, 409, "merge_conflict")
    assert r.json()["error"]["details"]["conflicts"][0]["path"] == "/docs/new"


def _applied(r):
    """``{path: "added" | "modified" | "deleted" | "kept"}`` of a merge's report."""
    assert r.status_code == 200, r.text
    return {n["path"]: outcome for outcome, nodes in r.json()["applied"]["nodes"].items() for n in nodes}


def _orphan_conflicts(r):
    assert_error(r, 409, "merge_conflict")
    return {(c.get("path") or f'{c["from"]} -[{c["type"]}]-> {c["to"]}', c["reason"])
            for c in r.json()["error"]["details"]["conflicts"]}


def test_a_child_written_under_a_parent_the_target_deleted_is_decided_by_its_resolution(client, repo):
    """The branch adds /folder/kid, main deletes /folder: the conflict names the child, and a
    resolution of the child decides it (it was refused again, whatever it said)."""
    put(client, "/folder", {"title": "folder", "year": 2020})
    branch(client, "b")
    put(client, "/folder/kid", {"title": "kid"}, branch="b")
    put(client, "/folder", {"title": "folder", "year": 2021}, branch="b")
    client.delete(f"{NODES}/folder", params={"recursive": "true"})
    reason = "its parent is deleted on the target"
    assert _orphan_conflicts(merge(client, "b")) >= {("/folder/kid", reason)}
    kid = [{"workspace": "knowledge", "path": "/folder/kid", "take": "ours"}]
    folder = [{"workspace": "knowledge", "path": "/folder", "take": "ours"}]  # the modify / delete conflict
    # ours: the target keeps its delete, the child is not written
    assert "/folder/kid" not in _applied(merge(client, "b", resolutions=kid + folder, dry_run=True))
    # theirs: the child is written and its parent restored as the branch has it
    theirs = merge(client, "b", resolutions=[{**kid[0], "take": "theirs"}, {**folder[0], "take": "theirs"}],
                   dry_run=True)
    assert _applied(theirs) == {"/folder": "added", "/folder/kid": "added"}
    # value: the child with the given properties (its parent resolved ours stays deleted: refused)
    value = [{**kid[0], "take": "value", "value": {"title": "kid, reviewed"}}]
    assert _orphan_conflicts(merge(client, "b", resolutions=value + folder)) == {("/folder/kid", reason)}
    ok = merge(client, "b", resolutions=value + [{**folder[0], "take": "theirs"}])
    assert ok.status_code == 200, ok.text
    assert get(client, "/folder/kid")["properties"] == {"title": "kid, reviewed"}
    assert get(client, "/folder")["properties"] == {"title": "folder", "year": 2021}


def test_a_child_of_the_target_under_a_node_the_source_deleted_is_decided_by_its_resolution(client, repo):
    put(client, "/docs", {"title": "docs"})
    branch(client, "b")
    client.delete(f"{NODES}/docs", params={"branch": "b"})
    put(client, "/docs/new", {"title": "child added on main"})
    put(client, "/docs/new/deeper", {"title": "grandchild"})
    reason = "the target has a child under a node the source deleted"
    assert ("/docs/new", reason) in _orphan_conflicts(merge(client, "b"))
    new = {"workspace": "knowledge", "path": "/docs/new"}
    # ours: the child stays, so its parent's delete is not applied (reported kept)
    kept = merge(client, "b", resolutions=[{**new, "take": "ours"}], dry_run=True)
    assert _applied(kept) == {"/docs": "kept"}
    # theirs: the child and what is under it go with their parent
    gone = merge(client, "b", resolutions=[{**new, "take": "theirs"}])
    assert _applied(gone) == {"/docs": "deleted", "/docs/new": "deleted", "/docs/new/deeper": "deleted"}
    assert get(client, "/docs") is None and get(client, "/docs/new/deeper") is None


def test_a_child_resolution_decides_it_after_a_relation_resolution_restored_its_parent(client, repo):
    put(client, "/backup", {"title": "backup"})
    put(client, "/other", {"title": "other"})
    branch(client, "b")
    client.post(f"{BASE}/relations", params={"branch": "b"},
                json={"from": "knowledge:/other", "to": "knowledge:/backup", "type": "cites"})
    put(client, "/backup/child", {"title": "child"}, branch="b")
    client.delete(f"{NODES}/backup")
    conflicts = _orphan_conflicts(merge(client, "b"))
    assert ("/backup/child", "its parent is deleted on the target") in conflicts
    edge = {"from": "knowledge:/other", "to": "knowledge:/backup", "type": "cites", "take": "theirs"}
    # the relation brings /backup back; the child resolved ours is still not written
    r = merge(client, "b", resolutions=[edge, {"workspace": "knowledge", "path": "/backup/child", "take": "ours"}])
    assert r.status_code == 200, r.text
    assert get(client, "/backup") is not None and get(client, "/backup/child") is None


def test_merge_relations_and_conflicting_weights(client, repo):
    put(client, "/x", {"title": "X"})
    put(client, "/y", {"title": "Y"})
    client.post(f"{BASE}/relations", json={"from": "knowledge:/x", "to": "knowledge:/y", "type": "rw", "weight": 1})
    branch(client, "b")
    client.post(f"{BASE}/relations", params={"branch": "b"},
                json={"from": "knowledge:/x", "to": "knowledge:/y", "type": "rw", "weight": 2})
    client.post(f"{BASE}/relations", params={"branch": "b"},
                json={"from": "knowledge:/y", "to": "knowledge:/x", "type": "back"})
    client.post(f"{BASE}/relations", json={"from": "knowledge:/x", "to": "knowledge:/y", "type": "rw", "weight": 3})
    r = merge(client, "b")
    assert_error(r, 409)
    (c,) = r.json()["error"]["details"]["conflicts"]
    assert c["kind"] == "relation" and c["ours"]["weight"] == 3 and c["theirs"]["weight"] == 2
    ok = merge(client, "b", resolutions=[{"from": "knowledge:/x", "to": "knowledge:/y", "type": "rw",
                                          "take": "theirs"}])
    assert ok.status_code == 200, ok.text
    n = client.get(f"{BASE}/neighbors", params={"node": "knowledge:/x"}).json()["neighbors"]
    assert sorted((x["relation_type"], x["weight"]) for x in n) == [("back", None), ("rw", 2.0)]


def test_merge_rules(client, repo):
    branch(client, "a")
    branch(client, "b")
    assert_error(merge(client, "a", into="b"), 422)
    assert_error(merge(client, "a", into="a"), 422)
    # main has no parent to merge into: a state of the branch (409, as its reset), not a bad request
    r = merge(client, "main")
    assert_error(r, 409)
    assert r.json()["error"]["details"] == {"branch": "main"}
    d = client.get("/api/repos/acme/branches/main/diff")
    assert_error(d, 409)
    assert "against" in d.json()["error"]["message"] and d.json()["error"]["details"] == {"branch": "main"}
    assert client.get("/api/repos/acme/branches/main/diff", params={"against": "a"}).status_code == 200
    assert_error(merge(client, "nope"), 404)


def test_reset_and_ahead_behind(client, repo):
    put(client, "/a", {"title": "A"})
    branch(client, "b")
    put(client, "/x", {"title": "X"}, branch="b")
    put(client, "/main-only", {"title": "M"})
    put(client, "/main-only2", {"title": "M"})
    info = client.get(f"{BASE}/branches/b").json()
    assert (info["ahead"], info["behind"]) == (1, 2)
    r = client.post(f"{BASE}/branches/b/reset")
    assert r.status_code == 200 and r.json()["base_revision"] == client.get(BASE).json()["head_revision"]
    assert get(client, "/x", branch="b") is None and get(client, "/main-only", branch="b") is not None
    info = client.get(f"{BASE}/branches/b").json()
    assert (info["ahead"], info["behind"]) == (0, 0)
    assert_error(client.post(f"{BASE}/branches/main/reset"), 409)


def test_if_revision_refuses_stale_writes(client, repo):
    node = put(client, "/a", {"title": "A"})
    put(client, "/a", {"title": "B"})
    stale = client.put(f"{NODES}/a", json={"node_type": "kb:Doc", "properties": {"title": "C"},
                                           "if_revision": node["revision"]})
    assert_error(stale, 409)
    assert get(client, "/a")["properties"]["title"] == "B"
    assert_error(client.patch(f"{NODES}/a", json={"properties": {"x": 1}, "if_revision": node["revision"]}), 409)
    assert_error(client.delete(f"{NODES}/a", params={"if_revision": node["revision"]}), 409)
    fresh = get(client, "/a")["revision"]
    assert client.put(f"{NODES}/a", json={"node_type": "kb:Doc", "properties": {"title": "C"},
                                          "if_revision": fresh}).status_code == 200
    assert_error(client.put(f"{NODES}/new", json={"node_type": "kb:Doc", "properties": {}, "if_revision": 5}), 409)


def test_at_revision_on_reads(client, repo):
    put(client, "/a", {"title": "v1", "content": "alpha words"})
    put(client, "/a", {"title": "v2", "content": "omega words"})
    put(client, "/b", {"title": "b"})
    client.post(f"{BASE}/relations", json={"from": "knowledge:/a", "to": "knowledge:/b", "type": "t"})
    assert client.get(f"{NODES}/a", params={"at_revision": 1}).json()["properties"]["title"] == "v1"
    kids = client.get(NODES, params={"parent": "/", "at_revision": 2}).json()["nodes"]
    assert [n["path"] for n in kids] == ["/a"]
    s1 = client.post(f"{BASE}/search", params={"at_revision": 1}, json={"query": "alpha", "mode": "fulltext"}).json()
    assert [r["path"] for r in s1["results"]] == ["/a"]
    s2 = client.post(f"{BASE}/search", json={"query": "alpha", "mode": "fulltext"}).json()
    assert s2["results"] == []
    assert client.get(f"{BASE}/neighbors", params={"node": "knowledge:/a", "at_revision": 3}).json()["neighbors"] == []
    assert len(client.get(f"{BASE}/neighbors", params={"node": "knowledge:/a"}).json()["neighbors"]) == 1


def test_a_revision_not_written_yet_is_refused_on_reads(client, repo):
    put(client, "/a", {"title": "v1", "content": "alpha words"})
    head = client.get("/api/repos/acme").json()["head_revision"]
    assert client.get(f"{NODES}/a", params={"at_revision": head}).json()["properties"]["title"] == "v1"
    # Reading the future would answer with today's state now and with something else later: that
    # revision is not found (404), as a branch that does not exist.
    for call in (lambda: client.get(f"{NODES}/a", params={"at_revision": head + 1}),
                 lambda: client.get(NODES, params={"parent": "/", "at_revision": head + 1}),
                 lambda: client.post(f"{BASE}/search", params={"at_revision": head + 1}, json={"query": "alpha"}),
                 lambda: client.get(f"{BASE}/neighbors", params={"node": "knowledge:/a", "at_revision": head + 1})):
        response = call()
        assert_error(response, 404, "not_found")
        assert response.json()["error"]["details"] == {"at_revision": head + 1, "head_revision": head}


def test_reset_branch_is_not_served_from_a_stale_cache(client, repo):
    put(client, "/a", {"title": "A", "content": "anchor text"})
    put(client, "/b", {"title": "B"})
    branch(client, "b")
    put(client, "/x", {"title": "X", "content": "xylophone"}, branch="b")
    client.post(f"{BASE}/relations", params={"branch": "b"},
                json={"from": "knowledge:/a", "to": "knowledge:/b", "type": "t"})
    # warm the search and graph caches at the branch's head
    assert client.post(f"{BASE}/search", params={"branch": "b"},
                       json={"query": "xylophone", "mode": "fulltext"}).json()["results"]
    assert client.get(f"{BASE}/neighbors", params={"node": "knowledge:/a", "branch": "b"}).json()["neighbors"]
    assert client.post(f"{BASE}/branches/b/reset").status_code == 200
    assert client.post(f"{BASE}/search", params={"branch": "b"},
                       json={"query": "xylophone", "mode": "fulltext"}).json()["results"] == []
    assert client.get(f"{BASE}/neighbors", params={"node": "knowledge:/a", "branch": "b"}).json()["neighbors"] == []


def test_a_batch_naming_one_path_twice_is_422_and_writes_nothing(client, repo):
    """Issue 15: two upserts of one path made two versions at one revision. A batch names each
    node once, across upserts and deletes, and NFC / NFD spellings are one path."""
    put(client, "/docs", {"title": "D"})
    head = client.get(BASE).json()["head_revision"]
    item = {"workspace": "knowledge", "node_type": "kb:Doc"}
    docs = {"workspace": "knowledge", "path": "/docs"}
    for body in (
        {"upserts": [{**item, "path": "/docs/a", "properties": {"v": 1}},
                     {**item, "path": "/docs/a", "properties": {"v": 2}}]},
        {"upserts": [{**item, "path": "/docs/caf\u00e9", "properties": {}},
                     {**item, "path": "/docs/cafe\u0301", "properties": {}}]},
        {"deletes": [docs], "upserts": [{**item, "path": "/docs", "properties": {}}]},
        {"deletes": [docs, docs]},
    ):
        r = client.post(f"{BASE}/nodes:batch", json=body)
        assert_error(r, 422)
        assert len(r.json()["error"]["details"]["items"]) == 2
    assert client.get(BASE).json()["head_revision"] == head
    assert get(client, "/docs/a") is None and get(client, "/docs")["properties"] == {"title": "D"}
    # one path in two workspaces is two nodes
    assert client.post("/api/repos/acme/workspaces", json={"name": "other"}).status_code == 201
    ok = client.post(f"{BASE}/nodes:batch", json={"upserts": [{**item, "path": "/x", "properties": {}},
                                                              {**item, "workspace": "other", "path": "/x",
                                                               "properties": {}}]})
    assert ok.status_code == 200, ok.text


def test_a_batch_upsert_below_a_node_it_deletes_is_422_naming_the_parent_and_writes_nothing(client, repo, services):
    """A recursive delete of /a and an upsert of its child /a/b in one batch made two versions of
    /a/b (its tombstone and the new one) and, with ``parents: true``, two of /a (the tombstone and
    a folder) at one revision. The deletes come first, so /a/b's parent would be gone: 422."""
    from kg.context import OPERATOR
    from kg.ops.queries import node_history

    put(client, "/a", {"title": "A"})
    put(client, "/a/b", {"title": "B"})
    put(client, "/a/b/c", {"title": "C"})
    put(client, "/keep", {"title": "K"})
    head = client.get(BASE).json()["head_revision"]
    item = {"workspace": "knowledge", "node_type": "kb:Doc", "properties": {"title": "new"}}
    cases = [  # (the delete, the upsert, its parent that would not exist, the deleted ancestor)
        ({"path": "/a", "recursive": True}, "/a/b", "/a", "/a"),
        ({"path": "/a", "recursive": True}, "/a/b/c", "/a/b", "/a"),
        ({"path": "/a/b/c"}, "/a/b/c/d", "/a/b/c", "/a/b/c"),  # a new child of a deleted leaf
    ]
    for delete, path, parent, deleted in cases:
        for parents in (False, True):
            r = client.post(f"{BASE}/nodes:batch", json={
                "parents": parents, "deletes": [{"workspace": "knowledge", **delete}],
                "upserts": [{**item, "path": "/keep"}, {**item, "path": path}]})
            assert_error(r, 422)
            error = r.json()["error"]
            assert error["details"] == {"field": "upserts", "workspace": "knowledge", "path": path, "parent": parent,
                                        "deleted": deleted, "items": ["deletes[0]", "upserts[1]"]}
            assert f"knowledge:{parent} would not exist" in error["message"]
    assert client.get(BASE).json()["head_revision"] == head
    for path, title in (("/a", "A"), ("/a/b", "B"), ("/a/b/c", "C"), ("/keep", "K")):
        assert get(client, path)["properties"] == {"title": title}
        assert len(node_history(services, OPERATOR, "acme", "main", "knowledge", path)) == 1
    # Deleting a subtree and writing beside it is one version of each node at the revision.
    ok = client.post(f"{BASE}/nodes:batch", json={"parents": True,
                     "deletes": [{"workspace": "knowledge", "path": "/a/b", "recursive": True}],
                     "upserts": [{**item, "path": "/a/bb"}, {**item, "path": "/a"}]})
    assert ok.status_code == 200, ok.text
    assert ok.json()["deleted"] == 2 and get(client, "/a/b") is None and get(client, "/a/bb") is not None
    revision = ok.json()["revision"]
    for path in ("/a", "/a/b", "/a/b/c", "/a/bb"):
        versions = node_history(services, OPERATOR, "acme", "main", "knowledge", path)
        assert [v.revision for v in versions].count(revision) == 1, (path, versions)


def test_a_batch_child_before_its_parent_makes_one_version_of_the_parent(client, repo, services):
    """A child upserted before its parent with ``parents: true`` made the parent a folder, then
    the parent's own upsert a second version at the same revision."""
    from kg.context import OPERATOR
    from kg.ops.queries import node_history

    item = {"workspace": "knowledge", "node_type": "kb:Doc"}
    r = client.post(f"{BASE}/nodes:batch", json={"parents": True, "upserts": [
        {**item, "path": "/p/c", "properties": {"v": "child"}}, {**item, "path": "/p", "properties": {"v": "parent"}}]})
    assert r.status_code == 200, r.text
    assert [n["path"] for n in r.json()["upserted"]] == ["/p/c", "/p"]
    parent = get(client, "/p")
    assert parent["node_type"] == "kb:Doc" and parent["properties"] == {"v": "parent"}
    versions = node_history(services, OPERATOR, "acme", "main", "knowledge", "/p")
    assert [v.revision for v in versions] == [r.json()["revision"]]


def test_if_plan_garbage_or_of_other_branches_is_422_and_a_stale_one_409(client, repo):
    """A new user's made-up ``if_plan`` was answered 409 "changed since the dry run", as if
    the branches had moved. A string that is no plan token, or the token of another pair of
    branches, is the caller's mistake (422); a token of these branches at other revisions is
    the stale plan (409); the dry run's own token merges."""
    put(client, "/a", {"title": "A"})
    branch(client, "agent/s1")
    branch(client, "agent/s2")
    put(client, "/b", {"title": "B"}, branch="agent/s1")
    put(client, "/c", {"title": "C"}, branch="agent/s2")
    other = merge(client, "agent/s2", into="main", dry_run=True).json()["plan"]
    seen = merge(client, "agent/s1", into="main", dry_run=True).json()["plan"]
    for bad in ("garbage", "", "1.2.3", other, seen + "x"):
        r = merge(client, "agent/s1", into="main", if_plan=bad)
        assert_error(r, 422, "invalid_input")
        assert "is not the plan token of a merge of agent/s1 into main" in r.json()["error"]["message"]
    assert get(client, "/b") is None  # nothing written
    put(client, "/d", {"title": "D"}, branch="agent/s1")
    r = merge(client, "agent/s1", into="main", if_plan=seen)
    assert_error(r, 409, "conflict")
    assert r.json()["error"]["details"]["reason"] == "stale_plan"
    fresh = merge(client, "agent/s1", into="main", dry_run=True).json()["plan"]
    r = merge(client, "agent/s1", into="main", if_plan=fresh)
    assert r.status_code == 200, r.text
    assert get(client, "/b") is not None and get(client, "/d") is not None
