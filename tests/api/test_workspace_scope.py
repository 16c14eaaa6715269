# ruff: noqa: F811  (the fixtures of test_access are imported by name, and requested by it)
"""Workspace scope inside retrieval (issue 12): a key that may read workspace ``public`` but not
``secret`` learns nothing of ``secret`` from any read route: not its nodes, not the relations
that reach into it, not their counts, ``truncated`` flags, log entries, diff entries or search
hits. Writes check every workspace they touch. On SQLite and PostgreSQL.

The planted token ``quokkazebra`` is written only in ``secret``; no response body given to the
scoped key may hold it, and every figure (neighbors, ``truncated``, walk sizes) must be the one
of a repository where ``secret`` does not exist.
"""

from __future__ import annotations

import pytest

from tests.api.test_access import admin, api, auth_services, bearer, make_key, settings  # noqa: F401
from tests.api.test_nodes import assert_error

TOKEN = "quokkazebra"
BASE = "/api/repos/acme"


def node(ws: str, path: str) -> str:
    return f"{BASE}/workspaces/{ws}/nodes{path}"


@pytest.fixture
def scoped(api, admin):  # noqa: F811
    """acme with workspaces public and secret; /a -> /b in public, and public:/a -> secret:/s,
    secret:/s -> public:/b; a reader of public only (main and review/*), and an admin."""
    assert api.post("/api/repos", json={"name": "acme"}, headers=admin).status_code == 201
    for ws in ("public", "secret"):
        assert api.post(f"{BASE}/workspaces", json={"name": ws}, headers=admin).status_code == 201
    docs = {("public", "/a"): "Alpha notes about the harbour survey.",
            ("public", "/b"): "Beta notes about the harbour survey results.",
            ("secret", "/s"): f"The {TOKEN} harbour survey codename, secret."}
    for (ws, path), text in docs.items():
        r = api.put(node(ws, path), json={"node_type": "kb:Doc", "properties": {"content": text}}, headers=admin)
        assert r.status_code == 201, r.text
    for src, dst, w in (("public:/a", "secret:/s", 0.9), ("public:/a", "public:/b", 0.5),
                        ("secret:/s", "public:/b", 0.7)):
        r = api.post(f"{BASE}/relations", json={"from": src, "to": dst, "type": "mentions", "weight": w},
                     headers=admin)
        assert r.status_code == 201, r.text
    reader = make_key(api, admin, "public-reader",
                      [{"repo": "acme", "branches": ["main", "review/*"], "workspaces": ["public"],
                        "actions": ["read"]}])
    return {"admin": admin, "reader": bearer(reader["key"])}


def no_token(response) -> dict:
    assert response.status_code == 200, response.text
    assert TOKEN not in response.text and "secret" not in response.text, response.text
    return response.json()


def test_a_node_of_an_unreadable_workspace_is_not_found(api, scoped):
    assert_error(api.get(node("secret", "/s"), headers=scoped["reader"]), 404, "not_found")
    assert_error(api.get(f"{BASE}/workspaces/secret/nodes?prefix=/", headers=scoped["reader"]), 404, "not_found")
    assert api.get(node("public", "/a"), headers=scoped["reader"]).status_code == 200


@pytest.mark.parametrize("warm", [False, True], ids=["sql", "graph-view"])
def test_neighbors_leave_out_edges_into_unreadable_workspaces_before_the_cut(api, scoped, warm):
    reader, admin_ = scoped["reader"], scoped["admin"]
    if warm:  # a traversal builds the branch's networkx view; NEIGHBORS then reads it
        assert api.post(f"{BASE}/traverse", json={"seeds": ["public:/a"], "hops": 1}, headers=admin_).status_code == 200
    full = api.get(f"{BASE}/neighbors", params={"node": "public:/a", "limit": 1}, headers=admin_).json()
    assert [n["path"] for n in full["neighbors"]] == ["/s"] and full["truncated"] is True
    got = no_token(api.get(f"{BASE}/neighbors", params={"node": "public:/a", "limit": 1}, headers=reader))
    assert [(n["workspace"], n["path"], n["weight"]) for n in got["neighbors"]] == [("public", "/b", 0.5)]
    assert got["truncated"] is False  # the edge to secret:/s does not count
    into_b = no_token(api.get(f"{BASE}/neighbors", params={"node": "public:/b", "direction": "IN"}, headers=reader))
    assert [n["path"] for n in into_b["neighbors"]] == ["/a"]
    assert_error(api.get(f"{BASE}/neighbors", params={"node": "secret:/s"}, headers=reader), 404, "not_found")


@pytest.mark.parametrize("warm", [False, True], ids=["sql", "graph-view"])
def test_a_walk_never_enters_an_unreadable_workspace(api, scoped, warm):
    reader, admin_ = scoped["reader"], scoped["admin"]
    if warm:
        assert api.post(f"{BASE}/traverse", json={"seeds": ["public:/b"], "hops": 1}, headers=admin_).status_code == 200
    body = {"seeds": ["public:/a"], "hops": 2, "max_nodes": 2}
    full = api.post(f"{BASE}/traverse", json=body, headers=admin_).json()
    assert len(full["nodes"]) == 2 and full["truncated"] is True  # a, s, b: the budget cut it
    got = no_token(api.post(f"{BASE}/traverse", json=body, headers=reader))
    assert [(n["path"], n["hop"]) for n in got["nodes"]] == [("/a", 0), ("/b", 1)]
    assert got["truncated"] is False
    assert_error(api.post(f"{BASE}/traverse", json={"seeds": ["secret:/s"]}, headers=reader), 404, "not_found")


@pytest.mark.parametrize("mode", ["vector", "fulltext", "hybrid"])
@pytest.mark.parametrize("granularity", ["chunk", "node"])
def test_search_reads_only_readable_workspaces(api, scoped, mode, granularity):
    body = {"query": f"{TOKEN} harbour survey", "k": 10, "mode": mode, "granularity": granularity}
    full = api.post(f"{BASE}/search", json=body, headers=scoped["admin"]).json()
    assert {r["workspace"] for r in full["results"]} == {"public", "secret"}
    got = no_token(api.post(f"{BASE}/search", json=body, headers=scoped["reader"]))
    assert {(r["workspace"], r["path"]) for r in got["results"]} == {("public", "/a"), ("public", "/b")}
    named = api.post(f"{BASE}/search", json={**body, "workspaces": ["secret"]}, headers=scoped["reader"])
    assert_error(named, 404, "not_found")


def test_bm25_scores_do_not_depend_on_unreadable_documents(api, scoped):
    """BM25's statistics are over what the reader may search: adding documents to ``secret``
    changes no score the reader sees."""
    body = {"query": "harbour survey results", "k": 10, "mode": "fulltext"}
    before = no_token(api.post(f"{BASE}/search", json=body, headers=scoped["reader"]))
    for i in range(5):
        r = api.put(node("secret", f"/more{i}"), headers=scoped["admin"],
                    json={"node_type": "kb:Doc", "properties": {"content": f"survey results {i}"}})
        assert r.status_code == 201
    after = no_token(api.post(f"{BASE}/search", json=body, headers=scoped["reader"]))
    assert [(r["path"], r["score"]) for r in after["results"]] == [(r["path"], r["score"]) for r in before["results"]]


@pytest.mark.parametrize("name,payload", [
    ("search-documents", {"query": "harbour survey codename"}),
    ("ask", {"question": "What is the harbour survey codename?"}),
    ("ask", {"question": "What is the harbour survey codename?", "use_graph": True}),
    ("graph-context", {"query": "harbour survey codename", "hops": 2}),
])
def test_functions_read_only_readable_workspaces(api, scoped, name, payload):
    r = api.post(f"/api/functions/acme/{name}/invoke", json={"input": payload}, headers=scoped["reader"])
    no_token(r)
    full = api.post(f"/api/functions/acme/{name}/invoke", json={"input": payload}, headers=scoped["admin"])
    # the unrestricted answer does reach into secret: what the reader misses is there to miss
    assert full.status_code == 200 and (TOKEN in full.text or '"workspace":"secret"' in full.text), full.text


def test_references_from_unreadable_workspaces_are_not_listed(api, scoped):
    ref = {"node_type": "kb:Doc", "properties": {"about": {"kg:ref": "/b", "kg:workspace": "public"}}}
    for ws, path in (("secret", "/cites-b"), ("public", "/also-b")):
        assert api.put(node(ws, path), json=ref, headers=scoped["admin"]).status_code == 201
    full = api.get(f"{BASE}/references", params={"target": "public:/b", "limit": 1}, headers=scoped["admin"]).json()
    assert full["truncated"] is True
    got = no_token(api.get(f"{BASE}/references", params={"target": "public:/b", "limit": 1},
                           headers=scoped["reader"]))
    assert [(r["workspace"], r["path"]) for r in got["references"]] == [("public", "/also-b")]
    assert got["truncated"] is False


def test_log_and_diff_show_only_readable_changes(api, scoped):
    admin_, reader = scoped["admin"], scoped["reader"]
    assert api.post(f"{BASE}/branches", json={"name": "review/1"}, headers=admin_).status_code == 201
    q = {"branch": "review/1"}
    assert api.put(node("secret", "/s2") + "?branch=review/1", headers=admin_,
                   json={"node_type": "kb:Doc", "properties": {"content": TOKEN}, "message": f"add {TOKEN}"}
                   ).status_code == 201
    assert api.put(node("public", "/c") + "?branch=review/1", headers=admin_,
                   json={"node_type": "kb:Doc", "properties": {"content": "gamma"}}).status_code == 201
    r = api.post(f"{BASE}/relations?branch=review/1", headers=admin_,
                 json={"from": "public:/c", "to": "secret:/s2", "type": "mentions"})
    assert r.status_code == 201

    full = api.get(f"{BASE}/log", params={**q, "limit": 1000}, headers=admin_).json()
    log = no_token(api.get(f"{BASE}/log", params={**q, "limit": 1000}, headers=reader))
    # hidden: secret:/s, the edges a -> s and s -> b, secret:/s2 and the edge c -> s2
    assert len(full["revisions"]) - len(log["revisions"]) == 5
    changes = [c for rev in log["revisions"] for c in rev["changes"]]
    assert changes and all(c.get("workspace", "public") == "public" for c in changes)
    assert all("secret" not in (c.get("from") or "") + (c.get("to") or "") for c in changes)
    page = no_token(api.get(f"{BASE}/log", params={**q, "limit": 2}, headers=reader))
    assert len(page["revisions"]) == 2  # the page is cut after the scope, not before

    diff = no_token(api.get(f"{BASE}/branches/review/1/diff", headers=reader))
    assert [(n["workspace"], n["path"]) for n in diff["nodes"]["added"]] == [("public", "/c")]
    assert diff["relations"]["added"] == []
    admin_diff = api.get(f"{BASE}/branches/review/1/diff", headers=admin_).json()
    assert len(admin_diff["nodes"]["added"]) == 2 and len(admin_diff["relations"]["added"]) == 1


def test_writes_check_every_workspace_they_touch(api, scoped):
    admin_ = scoped["admin"]
    agent = bearer(make_key(api, admin_, "agent", [
        {"repo": "acme", "branches": ["main", "agent/*"], "workspaces": ["public"], "actions": ["read"]},
        {"repo": "acme", "branches": ["agent/*"], "workspaces": ["public"],
         "actions": ["read", "write", "branch:create"]},
        {"repo": "acme", "branches": ["agent/*"], "workspaces": ["notes"], "actions": ["read"]},
    ])["key"])
    assert api.post(f"{BASE}/workspaces", json={"name": "notes"}, headers=admin_).status_code == 201
    assert api.post(f"{BASE}/branches", json={"name": "agent/1"}, headers=agent).status_code == 201
    on = "?branch=agent/1"
    doc = {"node_type": "kb:Doc", "properties": {"content": "x"}}
    # a batch touching a workspace the key cannot see: 404, and nothing of the batch is written
    r = api.post(f"{BASE}/nodes:batch{on}", headers=agent,
                 json={"upserts": [{"workspace": "public", "path": "/ok", **doc},
                                   {"workspace": "secret", "path": "/x", **doc}]})
    assert_error(r, 404, "not_found")
    # one it sees (notes: read only) but may not write: 403
    r = api.post(f"{BASE}/nodes:batch{on}", headers=agent,
                 json={"upserts": [{"workspace": "public", "path": "/ok", **doc},
                                   {"workspace": "notes", "path": "/x", **doc}]})
    assert_error(r, 403, "forbidden")
    assert_error(api.get(node("public", "/ok") + on, headers=agent), 404, "not_found")
    # relations: write on the source's workspace, read on the target's
    assert api.put(node("public", "/ok") + on, json=doc, headers=agent).status_code == 201
    assert_error(api.post(f"{BASE}/relations{on}", headers=agent,
                          json={"from": "public:/ok", "to": "secret:/s", "type": "t"}), 404, "not_found")
    assert api.put(node("notes", "/n") + on, json=doc, headers=admin_).status_code == 201
    assert api.post(f"{BASE}/relations{on}", headers=agent,
                    json={"from": "public:/ok", "to": "notes:/n", "type": "t"}).status_code == 201
    assert_error(api.post(f"{BASE}/relations{on}", headers=agent,
                          json={"from": "notes:/n", "to": "public:/ok", "type": "t"}), 403, "forbidden")
    assert_error(api.delete(f"{BASE}/relations", headers=agent,
                            params={"from": "notes:/n", "to": "public:/ok", "branch": "agent/1"}), 403, "forbidden")


def test_a_merge_needs_write_on_every_workspace_it_changes(api, scoped):
    admin_ = scoped["admin"]
    merger = bearer(make_key(api, admin_, "merger", [
        {"repo": "acme", "branches": ["*"], "workspaces": ["public"], "actions": ["read", "write", "merge"]},
    ])["key"])
    assert api.post(f"{BASE}/branches", json={"name": "dev"}, headers=admin_).status_code == 201
    assert api.post(f"{BASE}/branches", json={"name": "feature/2", "from": "dev"}, headers=admin_).status_code == 201
    assert api.put(node("secret", "/t") + "?branch=feature/2", headers=admin_,
                   json={"node_type": "kb:Doc", "properties": {"content": "t"}}).status_code == 201
    assert_error(api.post(f"{BASE}/branches/feature/2/merge", json={}, headers=merger), 404, "not_found")
    assert api.get(node("secret", "/t") + "?branch=dev", headers=admin_).status_code == 404  # nothing merged
    assert api.put(node("public", "/p") + "?branch=feature/2", headers=merger,
                   json={"node_type": "kb:Doc", "properties": {"content": "p"}}).status_code == 201
    assert api.delete(node("secret", "/t") + "?branch=feature/2", headers=admin_).status_code == 200
    assert api.post(f"{BASE}/branches/feature/2/merge", json={}, headers=merger).status_code == 200
    assert api.get(node("public", "/p") + "?branch=dev", headers=admin_).status_code == 200


def test_a_branch_whose_parent_is_unreadable_tells_nothing_of_it(api, scoped):
    admin_ = scoped["admin"]
    assert api.post(f"{BASE}/branches", json={"name": "agent/7"}, headers=admin_).status_code == 201
    agent = bearer(make_key(api, admin_, "agent-only", [
        {"repo": "acme", "branches": ["agent/*"], "actions": ["read", "write"]}])["key"])
    seen = api.get(f"{BASE}/branches/agent/7", headers=agent)
    assert seen.status_code == 200
    assert seen.json()["parent"] is None and "ahead" not in seen.json() and "behind" not in seen.json()
    listed = api.get(f"{BASE}/branches", headers=agent).json()["branches"]
    assert [(b["name"], b["parent"]) for b in listed] == [("agent/7", None)]
    assert "main" not in api.get(f"{BASE}/branches", headers=agent).text
    r = api.get(f"{BASE}/branches/agent/7/diff", headers=agent)
    assert_error(r, 404, "not_found")
    assert "main" not in r.text
    full = api.get(f"{BASE}/branches/agent/7", headers=admin_).json()
    assert full["parent"] == "main" and full["ahead"] == 0


def test_the_graph_view_a_restricted_reader_builds_is_the_whole_branch_for_the_next(api, scoped):
    """The in-memory graph is shared by every reader of a branch: a restricted key that builds it
    first must not leave it restricted for an unrestricted one (and the other way round)."""
    body = {"seeds": ["public:/a"], "hops": 2}
    got = no_token(api.post(f"{BASE}/traverse", json=body, headers=scoped["reader"]))
    assert [n["path"] for n in got["nodes"]] == ["/a", "/b"]
    full = api.post(f"{BASE}/traverse", json=body, headers=scoped["admin"]).json()
    assert sorted(n["path"] for n in full["nodes"]) == ["/a", "/b", "/s"]
    around = api.get(f"{BASE}/neighbors", params={"node": "secret:/s"}, headers=scoped["admin"]).json()
    assert sorted(n["path"] for n in around["neighbors"]) == ["/a", "/b"]
    again = no_token(api.post(f"{BASE}/traverse", json=body, headers=scoped["reader"]))
    assert [n["path"] for n in again["nodes"]] == ["/a", "/b"]


def test_ahead_and_behind_count_only_revisions_the_key_may_read(api, scoped):
    admin_, reader = scoped["admin"], scoped["reader"]
    assert api.post(f"{BASE}/branches", json={"name": "review/2"}, headers=admin_).status_code == 201
    doc = {"node_type": "kb:Doc", "properties": {"content": "x"}}
    for ws, path, branch in (("secret", "/x1", "review/2"), ("public", "/x2", "review/2"), ("secret", "/x3", "main"),
                             ("secret", "/x4", "main"), ("public", "/x5", "main")):
        assert api.put(node(ws, path) + f"?branch={branch}", json=doc, headers=admin_).status_code == 201
    full = api.get(f"{BASE}/branches/review/2", headers=admin_).json()
    assert (full["ahead"], full["behind"]) == (2, 3)
    seen = no_token(api.get(f"{BASE}/branches/review/2", headers=reader))
    assert (seen["ahead"], seen["behind"]) == (1, 1)
    listed = {b["name"]: b for b in api.get(f"{BASE}/branches", headers=reader).json()["branches"]}
    assert (listed["review/2"]["ahead"], listed["review/2"]["behind"]) == (1, 1)


def test_a_merge_dry_run_names_no_lineage_item_of_a_workspace_the_key_cannot_read(api, scoped):
    """A mention from an entity in ``secret`` to public:/a, asserted on main after the branch
    forked, which the branch's rewrite of /a no longer names: the merge's lineage decision
    names the entity, so the reader's dry run, and a merge by a key that may merge but not read
    ``secret``, are a 404 that names nothing of ``secret``; the admin's dry run lists the
    decision."""
    admin = scoped["admin"]
    assert api.post(f"{BASE}/branches", json={"name": "review/x"}, headers=admin).status_code == 201
    r = api.put(node("secret", "/quokkazebra"), headers=admin,  # on main, after the fork
                json={"node_type": "kg:Entity", "properties": {"name": f"{TOKEN} harbour"}})
    assert r.status_code == 201, r.text
    r = api.post(f"{BASE}/relations", headers=admin,
                 json={"from": f"secret:/{TOKEN}", "to": "public:/a", "type": "mentioned_in"})
    assert r.status_code == 201, r.text
    r = api.put(node("public", "/a") + "?branch=review/x", headers=admin,
                json={"node_type": "kb:Doc", "properties": {"content": "Alpha notes, rewritten."}})
    assert r.status_code == 200, r.text
    body = {"into": "main", "dry_run": True}
    seen = api.post(f"{BASE}/branches/review/x/merge", json=body, headers=scoped["reader"])
    assert_error(seen, 404, "not_found")
    assert TOKEN not in seen.text and "secret" not in seen.text
    merger = make_key(api, admin, "public-merger",
                      [{"repo": "acme", "branches": ["main", "review/*"], "workspaces": ["public"],
                        "actions": ["read", "write", "merge"]}])
    refused = api.post(f"{BASE}/branches/review/x/merge", json={"into": "main"}, headers=bearer(merger["key"]))
    assert_error(refused, 404, "not_found")
    assert TOKEN not in refused.text and "secret" not in refused.text
    full = api.post(f"{BASE}/branches/review/x/merge", json=body, headers=admin)
    assert_error(full, 409, "merge_conflict")
    assert [(c["kind"], c["from"]) for c in full.json()["error"]["details"]["conflicts"]] == [
        ("lineage", f"secret:/{TOKEN}")]
