"""Node routes on both databases: CRUD, children, prefix listing, paths, errors."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event

from api.app import create_app
from kg.index.embedded import EmbeddedVectorIndex
from kg.providers.registry import make_embedder
from kg.services import Services
from kg.store.db import Database


def put(client, path, props=None, branch="main", node_type="kb:Article", **params):
    return client.put(f"/api/repos/acme/workspaces/knowledge/nodes{path}",
                      params={"branch": branch, **params},
                      json={"node_type": node_type, "properties": props or {}})


def assert_error(response, status, code=None):
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message", "details"}
    assert body["error"]["message"]
    if code:
        assert body["error"]["code"] == code


def test_health(client):
    r = client.get("/health")
    assert r.status_code == 200 and r.json()["status"] == "ok"


def test_health_is_also_under_api(client):
    """The README says every route is under /api: so is the health check."""
    r = client.get("/api/health")
    assert r.status_code == 200 and r.json()["status"] == "ok"


def test_put_get_replace_patch_delete(client, repo):
    r = put(client, "/docs", {"title": "Docs"})
    assert r.status_code == 201
    node = r.json()
    assert node["path"] == "/docs" and node["name"] == "docs" and node["parent_path"] == "/"
    assert node["workspace"] == "knowledge" and node["node_type"] == "kb:Article"
    assert isinstance(node["revision"], int)
    r2 = put(client, "/docs", {"title": "Docs v2"})
    assert r2.status_code == 200
    assert r2.json()["id"] == node["id"] and r2.json()["revision"] > node["revision"]
    r3 = client.patch("/api/repos/acme/workspaces/knowledge/nodes/docs",
                      json={"properties": {"status": "draft", "title": None}})
    assert r3.status_code == 200
    assert r3.json()["properties"] == {"status": "draft"}
    got = client.get("/api/repos/acme/workspaces/knowledge/nodes/docs").json()
    assert got["properties"] == {"status": "draft"} and got["id"] == node["id"]
    d = client.delete("/api/repos/acme/workspaces/knowledge/nodes/docs")
    assert d.status_code == 200 and d.json()["deleted"] == 1
    assert_error(client.get("/api/repos/acme/workspaces/knowledge/nodes/docs"), 404, "not_found")


def test_missing_parent_and_parents_true(client, repo):
    assert_error(put(client, "/a/b/c"), 404)
    r = put(client, "/a/b/c", parents="true")
    assert r.status_code == 201
    a = client.get("/api/repos/acme/workspaces/knowledge/nodes/a").json()
    assert a["node_type"] == "kg:Folder"
    assert client.get("/api/repos/acme/workspaces/knowledge/nodes/a/b").status_code == 200


def test_children_in_order_then_name(client, repo):
    put(client, "/docs")
    for name, order in [("zeta", None), ("beta", 2.0), ("alpha", None), ("gamma", 1.0)]:
        client.put(f"/api/repos/acme/workspaces/knowledge/nodes/docs/{name}",
                   json={"node_type": "kb:Section", "properties": {}, "order": order})
    r = client.get("/api/repos/acme/workspaces/knowledge/nodes", params={"parent": "/docs"})
    assert [n["name"] for n in r.json()["nodes"]] == ["gamma", "beta", "alpha", "zeta"]
    top = client.get("/api/repos/acme/workspaces/knowledge/nodes", params={"parent": "/"}).json()
    assert [n["path"] for n in top["nodes"]] == ["/docs"]


def test_prefix_listing_paginates(client, repo):
    put(client, "/docs")
    put(client, "/docs/api")
    for i in range(7):
        put(client, f"/docs/api/p{i}")
    put(client, "/docsother")
    seen, cursor = [], None
    while True:
        params = {"prefix": "/docs/api/", "limit": 3}
        if cursor:
            params["cursor"] = cursor
        body = client.get("/api/repos/acme/workspaces/knowledge/nodes", params=params).json()
        seen += [n["path"] for n in body["nodes"]]
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert seen == [f"/docs/api/p{i}" for i in range(7)]
    everything = client.get("/api/repos/acme/workspaces/knowledge/nodes", params={"prefix": "/"}).json()
    assert len(everything["nodes"]) == 10 and everything["next_cursor"] is None


def test_path_prefixes_are_case_sensitive_on_both_databases(client, repo):
    """Found by a new-user pass: SQLite's LIKE ignores ASCII case, so /upper listed /UPPER there
    and not on PostgreSQL (nor in Weaviate's path filter)."""
    put(client, "/UPPER", {"content": "shouting about caches"})
    put(client, "/UPPER/x", {"content": "more shouting about caches"})
    put(client, "/upper", {"content": "quiet words about caches"})
    listed = client.get("/api/repos/acme/workspaces/knowledge/nodes", params={"prefix": "/upper"}).json()
    assert [n["path"] for n in listed["nodes"]] == ["/upper"]
    listed = client.get("/api/repos/acme/workspaces/knowledge/nodes",
                        params={"prefix": "/UP", "prefix_mode": "raw"}).json()
    assert [n["path"] for n in listed["nodes"]] == ["/UPPER", "/UPPER/x"]
    found = client.post("/api/repos/acme/search", json={"query": "caches", "mode": "fulltext", "path_prefix": "/upper"})
    assert [r["path"] for r in found.json()["results"]] == ["/upper"]


def test_delete_with_children_needs_recursive(client, repo):
    put(client, "/docs")
    put(client, "/docs/a")
    put(client, "/docs/a/b")
    assert_error(client.delete("/api/repos/acme/workspaces/knowledge/nodes/docs"), 409, "conflict")
    assert client.get("/api/repos/acme/workspaces/knowledge/nodes/docs/a").status_code == 200
    r = client.delete("/api/repos/acme/workspaces/knowledge/nodes/docs", params={"recursive": "true"})
    assert r.json()["deleted"] == 3
    assert client.get("/api/repos/acme/workspaces/knowledge/nodes/docs/a/b").status_code == 404


def test_path_with_space_is_one_node(client, repo):
    put(client, "/docs")
    assert put(client, "/docs/a b").status_code == 201
    r = client.get("/api/repos/acme/workspaces/knowledge/nodes/docs/a%20b")
    assert r.status_code == 200 and r.json()["path"] == "/docs/a b"


@pytest.mark.parametrize("raw", ["docs/", "docs//x", "docs/%2E%2E/x", "docs/%2E/x", "%2E%2E", "docs/%00x"])
def test_bad_paths_are_422(client, repo, raw):
    put(client, "/docs")
    r = client.put(f"/api/repos/acme/workspaces/knowledge/nodes/{raw}",
                   json={"node_type": "t", "properties": {}})
    assert_error(r, 422, "invalid_input")


def test_unknown_repo_workspace_branch_are_404(client, repo):
    assert_error(client.get("/api/repos/nope/workspaces/knowledge/nodes/x"), 404)
    assert_error(client.get("/api/repos/acme/workspaces/nope/nodes/x"), 404)
    assert_error(client.get("/api/repos/acme/workspaces/knowledge/nodes/x", params={"branch": "nope"}), 404)
    assert_error(put(client, "/x", branch="nope"), 404)


def test_malformed_json_is_400_and_writes_nothing(client, repo):
    r = client.put("/api/repos/acme/workspaces/knowledge/nodes/x", content=b"{not json",
                   headers={"content-type": "application/json"})
    assert_error(r, 400, "malformed")
    r = client.put("/api/repos/acme/workspaces/knowledge/nodes/x", json=[1, 2])
    assert_error(r, 400, "malformed")
    r = client.put("/api/repos/acme/workspaces/knowledge/nodes/x", json={"properties": "nope"})
    assert_error(r, 422)
    assert client.get("/api/repos/acme/workspaces/knowledge/nodes/x").status_code == 404
    assert client.get("/api/repos/acme").json()["head_revision"] == 0


def test_duplicate_repo_and_branch_are_409(client, repo):
    assert_error(client.post("/api/repos", json={"name": "acme"}), 409)
    assert client.post("/api/repos/acme/branches", json={"name": "b1"}).status_code == 201
    assert_error(client.post("/api/repos/acme/branches", json={"name": "b1"}), 409)
    assert_error(client.post("/api/repos/acme/workspaces", json={"name": "knowledge"}), 409)


def test_bad_chunking_is_422_before_any_write(client, repo):
    r = client.post("/api/repos/acme/workspaces",
                    json={"name": "w2", "embedding": {"chunking": {"chunk_size": 64, "overlap": 64}}})
    assert_error(r, 422)
    assert "overlap" in r.json()["error"]["message"] and "64" in r.json()["error"]["message"]
    names = [w["name"] for w in client.get("/api/repos/acme/workspaces").json()["workspaces"]]
    assert names == ["knowledge"]


def test_unknown_route_and_method_use_error_shape(client):
    assert_error(client.get("/api/nothing"), 404)
    assert_error(client.patch("/api/repos"), 405)


def test_delete_write_meta_is_bounded_as_in_bodies(client, repo):
    # `actor` > 255 characters in the DELETE query string was a 500 on PostgreSQL (the revision
    # log's actor column is VARCHAR(255)) and stored as given on SQLite; a body refuses it (422).
    put(client, "/a")
    nodes = "/api/repos/acme/workspaces/knowledge/nodes"
    head = client.get("/api/repos/acme").json()["head_revision"]
    assert_error(client.delete(f"{nodes}/a", params={"actor": "x" * 256}), 422)
    assert_error(client.delete(f"{nodes}/a", params={"message": "m" * 10_001}), 422)
    assert_error(client.delete(f"{nodes}/a", params={"if_revision": 2**31}), 422)  # as PUT / PATCH
    assert client.get(f"{nodes}/a").status_code == 200
    assert client.get("/api/repos/acme").json()["head_revision"] == head
    r = client.delete(f"{nodes}/a", params={"actor": "x" * 255, "message": "m" * 10_000})
    assert r.status_code == 200 and r.json()["deleted"] == 1
    assert client.get("/api/repos/acme/log", params={"limit": 1}).json()["revisions"][0]["actor"] == "x" * 255


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_put_runs_a_pinned_number_of_sql_statements(settings):
    """Regression (issue 11): a PUT looked its node up twice (``if_revision``, then the put),
    validated its input twice, read the repository row twice (the lock, then a refresh) and
    wrote its head twice: 15 statements for a node with text, 13 without; 12 and 10 now.
    Replacing a node adds one: the indexed lookup of records derived from it (issue 17,
    docs/concepts/lineage.md); creating one adds none. Counted on SQLite, in-process, with no
    background indexer (the app's lifespan is not run) and no inline indexing, so every
    statement counted is the PUT's own."""
    settings = settings.model_copy(update={"index_inline": False})
    db = Database(settings.resolved_database_url())
    services = Services(settings=settings, db=db, index=EmbeddedVectorIndex(settings.data_dir),
                        embedder_factory=lambda name: make_embedder(name, allow_fake=True))
    statements: list[str] = []

    def counted(conn, cursor, statement, parameters, context, executemany):
        statements.append(" ".join(statement.split()))

    def statements_of_put(path: str, body: dict) -> int:
        statements.clear()
        r = client.put(f"/api/repos/acme/workspaces/knowledge/nodes{path}", json=body)
        assert r.status_code in (200, 201), r.text
        return len(statements)

    client = TestClient(create_app(services=services))
    try:
        assert client.post("/api/repos", json={"name": "acme"}).status_code == 201
        assert client.post("/api/repos/acme/workspaces", json={"name": "knowledge"}).status_code == 201
        event.listen(db.engine, "before_cursor_execute", counted)
        text = {"node_type": "kb:Article", "properties": {"content": "hello world"}}
        assert statements_of_put("/a", text) == 12, statements  # created, its text queued
        text["properties"] = {"content": "hello again"}
        assert statements_of_put("/a", text) == 13, statements  # replaced: + the lineage lookup
        text.update(properties={"content": "third"}, if_revision=2)
        assert statements_of_put("/a", text) == 13, statements  # if_revision: no extra lookup
        assert statements_of_put("/b", {"node_type": "kb:Article", "properties": {"n": 1}}) == 10, \
            statements  # no text: nothing queued
    finally:
        event.remove(db.engine, "before_cursor_execute", counted)
        client.close()
        services.close()


def _children(client, **params):
    r = client.get("/api/repos/acme/workspaces/knowledge/nodes", params={"parent": "/doc", **params})
    assert r.status_code == 200, r.text
    return r.json()


def _sections(client):
    put(client, "/doc")
    for name, position in [("d", 2), ("b", 1), ("a", None), ("c", 2), ("e", 10), ("f", "x")]:
        props = {} if position is None else {"position": position}
        put(client, f"/doc/{name}", props, node_type="kb:Section")
    put(client, "/doc/notes", {"position": 0}, node_type="kb:Note")


def test_children_ordered_by_a_property_with_direction(client, repo):
    """Sections carry ``position``; children can be ordered by it, nodes
    without it last, ties by name, numbers numerically (10 after 2), strings after numbers."""
    _sections(client)
    names = [n["name"] for n in _children(client, order_by="properties.position")["nodes"]]
    assert names == ["notes", "b", "c", "d", "e", "f", "a"]
    names = [n["name"] for n in _children(client, order_by="properties.position", direction="desc")["nodes"]]
    assert names == ["f", "e", "c", "d", "b", "notes", "a"]
    names = [n["name"] for n in _children(client, order_by="-properties.position")["nodes"]]
    assert names == ["f", "e", "c", "d", "b", "notes", "a"]
    assert [n["name"] for n in _children(client, order_by="name", direction="desc")["nodes"]] == \
        ["notes", "f", "e", "d", "c", "b", "a"]
    # the default stays `order`, then name
    assert [n["name"] for n in _children(client)["nodes"]] == ["a", "b", "c", "d", "e", "f", "notes"]


def test_children_filtered_by_node_type(client, repo):
    """Issue 15: ``node_type`` was silently ignored on children."""
    _sections(client)
    body = _children(client, node_type="kb:Section", order_by="properties.position")
    assert [n["name"] for n in body["nodes"]] == ["b", "c", "d", "e", "f", "a"]
    assert {n["node_type"] for n in body["nodes"]} == {"kb:Section"}
    assert _children(client, node_type="kb:Nothing")["nodes"] == []


def test_children_cursor_paging_follows_order_by(client, repo):
    """A cursor encodes the sort key: pages of 2 under a descending property sort rebuild the
    whole listing, and a cursor made for one sort is refused under another."""
    _sections(client)
    whole = [n["name"] for n in _children(client, order_by="-properties.position")["nodes"]]
    seen, cursor = [], None
    while True:
        params = {"order_by": "-properties.position", "limit": 2, **({"cursor": cursor} if cursor else {})}
        body = _children(client, **params)
        seen += [n["name"] for n in body["nodes"]]
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert seen == whole and len(seen) == 7
    first = _children(client, order_by="properties.position", limit=2)
    r = client.get("/api/repos/acme/workspaces/knowledge/nodes",
                   params={"parent": "/doc", "order_by": "name", "cursor": first["next_cursor"]})
    assert_error(r, 422)


@pytest.mark.parametrize("params", [{"order_by": "position"}, {"order_by": "properties."},
                                    {"direction": "up"}, {"order_by": "-name", "direction": "asc"}])
def test_children_bad_order_by_is_422(client, repo, params):
    put(client, "/doc")
    r = client.get("/api/repos/acme/workspaces/knowledge/nodes", params={"parent": "/doc", **params})
    assert_error(r, 422)


def test_path_prefix_matches_whole_segments_in_listing_and_search(client, repo):
    """Issue 15: ``path_prefix: "/answers"`` matched ``/answers-old``. A prefix is whole segments
    (the node itself and what is under it) in the prefix listing and in every search mode;
    ``raw`` keeps the plain string prefix."""
    for path in ("/answers", "/answers/x", "/answers-old", "/answers-old/y"):
        put(client, path, {"content": f"stored answer about caching {path}"})
    listed = client.get("/api/repos/acme/workspaces/knowledge/nodes", params={"prefix": "/answers"}).json()
    assert [n["path"] for n in listed["nodes"]] == ["/answers", "/answers/x"]
    below = client.get("/api/repos/acme/workspaces/knowledge/nodes", params={"prefix": "/answers/"}).json()
    assert [n["path"] for n in below["nodes"]] == ["/answers/x"]
    raw = client.get("/api/repos/acme/workspaces/knowledge/nodes",
                     params={"prefix": "/answers", "prefix_mode": "raw"}).json()
    assert [n["path"] for n in raw["nodes"]] == ["/answers", "/answers-old", "/answers-old/y", "/answers/x"]
    for mode in ("fulltext", "vector", "hybrid"):
        for where in (None, {"content": "stored answer about caching /answers/x"}):
            body = {"query": "stored answer caching", "mode": mode, "k": 10, "path_prefix": "/answers",
                    **({"where": where} if where else {})}
            found = client.post("/api/repos/acme/search", json=body)
            assert found.status_code == 200, found.text
            expected = {"/answers/x"} if where else {"/answers", "/answers/x"}
            assert {r["path"] for r in found.json()["results"]} == expected, (mode, where)
        found = client.post("/api/repos/acme/search", json={"query": "stored answer caching", "mode": mode, "k": 10,
                                                            "path_prefix": "/answers", "path_prefix_mode": "raw"})
        assert {r["path"] for r in found.json()["results"]} == \
            {"/answers", "/answers/x", "/answers-old", "/answers-old/y"}
    assert_error(client.post("/api/repos/acme/search", json={"query": "x", "path_prefix": "/a",
                                                            "path_prefix_mode": "glob"}), 422)
    assert_error(client.get("/api/repos/acme/workspaces/knowledge/nodes",
                            params={"prefix": "/answers", "prefix_mode": "glob"}), 422)


@pytest.mark.parametrize("listing", [{"prefix": "/doc/"}, {"parent": "/doc"}])
def test_a_bad_cursor_is_422_not_page_one(client, repo, listing):
    """Issue 15: a bad cursor restarted at page 1 (children ignored the cursor altogether)."""
    import base64

    put(client, "/doc")
    for i in range(4):
        put(client, f"/doc/p{i}")
    url = "/api/repos/acme/workspaces/knowledge/nodes"
    first = client.get(url, params={**listing, "limit": 2}).json()
    assert [n["name"] for n in first["nodes"]] == ["p0", "p1"]
    second = client.get(url, params={**listing, "limit": 2, "cursor": first["next_cursor"]}).json()
    assert [n["name"] for n in second["nodes"]] == ["p2", "p3"] and second["next_cursor"] is None
    other = {"parent": "/doc"} if "prefix" in listing else {"prefix": "/doc/"}
    foreign = client.get(url, params={**other, "limit": 2}).json()["next_cursor"]
    b64 = base64.urlsafe_b64encode
    for cursor in ("", "not a cursor", "zz", b64(b"hello").decode(), b64(b"/elsewhere/x").decode(),
                   b64(b"\xff\xfe").decode(), foreign, first["next_cursor"] + "A"):
        assert_error(client.get(url, params={**listing, "limit": 2, "cursor": cursor}), 422)


NFC_NAME = "caf\u00e9"          # é as one code point
NFD_NAME = "cafe\u0301"         # e and a combining acute accent: prints the same


def test_nfc_and_nfd_spellings_address_one_node(client, repo):
    """Issue 15: NFC and NFD spellings of a name were two nodes that print the same. Paths are
    NFC on write and on read: PUT, GET, PATCH, children, prefix listing, batch, relations,
    search's path_prefix and DELETE all reach the one node."""
    from urllib.parse import quote

    url = "/api/repos/acme/workspaces/knowledge/nodes"
    assert put(client, f"/{quote(NFD_NAME)}", {"content": "a menu of coffees"}).status_code == 201
    again = put(client, f"/{quote(NFC_NAME)}", {"content": "a menu of teas"})
    assert again.status_code == 200, again.text  # replaced, not a second node
    node = again.json()
    assert node["path"] == f"/{NFC_NAME}" and node["name"] == NFC_NAME
    for spelling in (NFC_NAME, NFD_NAME):
        got = client.get(f"{url}/{quote(spelling)}")
        assert got.status_code == 200 and got.json()["id"] == node["id"]
        assert got.json()["properties"] == {"content": "a menu of teas"}
    assert client.patch(f"{url}/{quote(NFD_NAME)}", json={"properties": {"k": 1}}).status_code == 200
    top = client.get(url, params={"parent": "/"}).json()["nodes"]
    assert [n["path"] for n in top] == [f"/{NFC_NAME}"]
    assert put(client, f"/{quote(NFD_NAME)}/menu", node_type="kb:Section").status_code == 201
    kids = client.get(url, params={"parent": f"/{NFD_NAME}"}).json()["nodes"]
    assert [n["path"] for n in kids] == [f"/{NFC_NAME}/menu"]
    listed = client.get(url, params={"prefix": f"/{NFD_NAME}/"}).json()["nodes"]
    assert [n["path"] for n in listed] == [f"/{NFC_NAME}/menu"]
    found = client.post("/api/repos/acme/search", json={"query": "teas menu", "mode": "fulltext",
                                                        "path_prefix": f"/{NFD_NAME}"}).json()["results"]
    assert {r["path"] for r in found} == {f"/{NFC_NAME}"}
    r = client.post("/api/repos/acme/nodes:batch", json={"upserts": [
        {"workspace": "knowledge", "path": f"/{NFD_NAME}/menu", "node_type": "kb:Section", "properties": {"x": 2}}]})
    assert r.status_code == 200, r.text
    assert client.get(f"{url}/{quote(NFC_NAME)}/menu").json()["properties"] == {"x": 2}
    assert put(client, "/other").status_code == 201
    rel = client.post("/api/repos/acme/relations", json={"from": f"knowledge:/{NFD_NAME}", "to": "knowledge:/other",
                                                         "type": "serves"})
    assert rel.status_code == 201, rel.text
    nb = client.get("/api/repos/acme/neighbors", params={"node": f"knowledge:/{NFC_NAME}"}).json()["neighbors"]
    assert [(n["path"], n["relation_type"]) for n in nb] == [("/other", "serves")]
    everything = client.get(url, params={"prefix": "/"}).json()["nodes"]
    assert sorted(n["path"] for n in everything) == sorted([f"/{NFC_NAME}", f"/{NFC_NAME}/menu", "/other"])
    deleted = client.delete(f"{url}/{quote(NFD_NAME)}", params={"recursive": "true"})
    assert deleted.status_code == 200 and deleted.json()["deleted"] == 2
    assert client.get(f"{url}/{quote(NFC_NAME)}").status_code == 404


def test_children_type_filter_sees_a_retyped_child_as_it_is_now(client, repo):
    """The type filter is applied to each child's newest version, never to its versions:
    a section re-typed to a note is a note, and no longer a section (filtering the versions
    first picked the older, still-a-section version as the winner)."""
    put(client, "/doc")
    put(client, "/doc/a", node_type="kb:Section")
    put(client, "/doc/b", node_type="kb:Section")
    assert put(client, "/doc/a", {"now": "a note"}, node_type="kb:Note").status_code == 200
    sections = _children(client, node_type="kb:Section")["nodes"]
    assert [(n["name"], n["node_type"]) for n in sections] == [("b", "kb:Section")]
    notes = _children(client, node_type="kb:Note")["nodes"]
    assert [(n["name"], n["properties"]) for n in notes] == [("a", {"now": "a note"})]
