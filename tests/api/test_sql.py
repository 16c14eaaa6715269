"""The SQL endpoint beyond the guide: hierarchy predicates, references, writes, branches,
revisions, aggregates, EXPLAIN, and the refusals (422 naming the construct and its position)."""

from __future__ import annotations

import pytest

from tests.api.test_sql_guide import head, pick, search


def run(client, text, params=None, branch="main"):
    r = client.post(f"/api/sql/acme/{branch}", json={"sql": text, "params": params or []})
    assert r.status_code == 200, r.text
    return r.json()["results"]


def one(client, text, params=None, branch="main"):
    results = run(client, text, params, branch)
    assert len(results) == 1
    return results[0]


def refused(client, text, status=422, params=None):
    r = client.post("/api/sql/acme/main", json={"sql": text, "params": params or []})
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "details"}
    return body["error"]


NODES = [  # path, node_type, properties, order
    ("/kb", "kb:Folder", {"title": "Knowledge"}, None),
    ("/kb/b", "kb:Article", {"title": "Beta", "status": "published", "rank": 2,
                             "content": "Beta explains the storage layer."}, 2),
    ("/kb/a", "kb:Article", {"title": "Alpha", "status": "draft", "rank": 1,
                             "content": "Alpha explains the indexing pipeline."}, 1),
    ("/kb/a/s1", "kb:Section", {"content": "First section of alpha."}, None),
    ("/kb/c", "kb:Note", {"title": "Gamma", "status": "published", "rank": 3,
                          "see": {"kg:ref": "/kb/a", "kg:workspace": "knowledge"}}, None),
    ("/kb-old", "kb:Folder", {"title": "Old"}, None),
]


@pytest.fixture
def kb(client, repo):
    for path, node_type, props, order in NODES:
        body = {"node_type": node_type, "properties": props} | ({"order": order} if order is not None else {})
        r = client.put(f"/api/repos/acme/workspaces/knowledge/nodes{path}", json=body)
        assert r.status_code == 201, r.text
    return client


def test_hierarchy_predicates_answer_what_the_listings_answer(kb):
    out = one(kb, "SELECT path FROM 'knowledge' WHERE DESCENDANT_OF('/kb') ORDER BY path")
    listing = kb.get("/api/repos/acme/workspaces/knowledge/nodes", params={"prefix": "/kb/"}).json()["nodes"]
    assert out["rows"] == [[n["path"]] for n in listing] == [["/kb/a"], ["/kb/a/s1"], ["/kb/b"], ["/kb/c"]]
    out = one(kb, "SELECT path FROM 'knowledge' WHERE PATH_STARTS_WITH(path, '/kb') ORDER BY path")
    assert [r[0] for r in out["rows"]] == ["/kb", "/kb-old", "/kb/a", "/kb/a/s1", "/kb/b", "/kb/c"]
    out = one(kb, "SELECT path, name FROM 'knowledge' WHERE PARENT_OF('/kb/a/s1')")
    assert out["rows"] == [["/kb/a", "a"]]
    out = one(kb, "SELECT path, DEPTH(path) AS depth FROM 'knowledge' WHERE DEPTH(path) = 3")
    assert out["rows"] == [["/kb/a/s1", 3]]
    # children in their order (order, then name), as the children listing answers them
    out = one(kb, "SELECT name FROM 'knowledge' WHERE CHILD_OF('/kb') ORDER BY __order")
    listing = kb.get("/api/repos/acme/workspaces/knowledge/nodes", params={"parent": "/kb"}).json()["nodes"]
    assert out["rows"] == [[n["name"]] for n in listing] == [["a"], ["b"], ["c"]]
    # a parent that does not exist has no children; a workspace that does not exist is a 404
    assert one(kb, "SELECT name FROM 'knowledge' WHERE CHILD_OF('/nope')")["rows"] == []
    assert refused(kb, "SELECT name FROM 'nope' WHERE CHILD_OF('/kb')", 404)["code"] == "not_found"


def test_properties_filters_order_limit_offset_and_star(kb):
    out = one(kb, "SELECT path, properties->>'title' AS title FROM 'knowledge' "
                  "WHERE properties->>'status' = 'published' ORDER BY properties->'rank' DESC")
    assert out["rows"] == [["/kb/c", "Gamma"], ["/kb/b", "Beta"]]
    out = one(kb, "SELECT path FROM 'knowledge' WHERE DESCENDANT_OF('/kb') ORDER BY path LIMIT 2 OFFSET 1")
    assert out["rows"] == [["/kb/a/s1"], ["/kb/b"]]
    out = one(kb, "SELECT * FROM 'knowledge' WHERE path = '/kb/a'")
    node = kb.get("/api/repos/acme/workspaces/knowledge/nodes/kb/a").json()
    assert out["columns"] == ["node_id", "workspace_id", "path", "name", "parent_path", "node_type", "properties",
                              "order", "revision"]
    assert out["rows"] == [[node["id"], "knowledge", "/kb/a", "a", "/kb", "kb:Article", node["properties"], 1.0,
                            node["revision"]]]
    out = one(kb, "SELECT path FROM 'knowledge' WHERE node_type IN ('kb:Note', 'kb:Section') "
                  "AND properties->>'content' IS NOT NULL")
    assert out["rows"] == [["/kb/a/s1"]]


def test_count_and_group_by(kb):
    out = one(kb, "SELECT COUNT(*) FROM 'knowledge'")
    assert out == {**out, "columns": ["count"], "rows": [[6]], "row_count": 1}
    out = one(kb, "SELECT node_type, COUNT(*) AS n FROM 'knowledge' GROUP BY node_type ORDER BY n DESC, node_type")
    assert out["rows"] == [["kb:Article", 2], ["kb:Folder", 2], ["kb:Note", 1], ["kb:Section", 1]]
    out = one(kb, "SELECT COUNT(*) AS n FROM 'knowledge' WHERE CHILD_OF('/nope')")
    assert out["rows"] == [[0]]


def test_references_answer_what_the_references_route_answers(kb):
    out = one(kb, "SELECT path, property_key FROM REFERENCES('knowledge:/kb/a')")
    http = kb.get("/api/repos/acme/references", params={"target": "knowledge:/kb/a"}).json()["references"]
    assert out["rows"] == pick(http, "path", "property_key") == [["/kb/c", "see"]]


def test_fulltext_search(kb):
    out = one(kb, "SELECT path, score FROM FULLTEXT_SEARCH('storage layer', 3, workspaces => 'knowledge')")
    expected = search(kb, query="storage layer", k=3, mode="fulltext", workspaces=["knowledge"], granularity="node")
    assert out["rows"] == pick(expected, "path", "score")
    assert out["rows"][0][0] == "/kb/b"


def test_update_delete_relate_unrelate(kb):
    rev = head(kb)
    out = one(kb, "UPDATE 'knowledge' SET properties = '{\"title\": \"Beta 2\"}'::jsonb WHERE path = '/kb/b'")
    assert out["rows"][0][1] == "/kb/b" and out["rows"][0][4] == rev + 1
    node = kb.get("/api/repos/acme/workspaces/knowledge/nodes/kb/b").json()
    assert node["properties"] == {"title": "Beta 2"} and node["node_type"] == "kb:Article" and node["order"] == 2
    assert one(kb, "UPDATE 'knowledge' SET node_type = 'kb:X' WHERE path = '/nope'")["rows"] == []
    assert head(kb) == rev + 1

    one(kb, "RELATE FROM path='/kb/a' IN WORKSPACE 'knowledge' TO path='/kb/b' IN WORKSPACE 'knowledge' "
            "TYPE 'cites' WEIGHT 0.5")
    out = one(kb, "SELECT path, relation_type, weight, direction FROM NEIGHBORS('knowledge:/kb/a', 'OUT', 'cites')")
    assert out["rows"] == [["/kb/b", "cites", 0.5, "OUT"]]
    out = one(kb, "UNRELATE FROM path='/kb/a' IN WORKSPACE 'knowledge' TO path='/kb/b' IN WORKSPACE 'knowledge'")
    assert one(kb, "SELECT path FROM NEIGHBORS('knowledge:/kb/a', 'BOTH', NULL)")["rows"] == []

    out = one(kb, "DELETE FROM 'knowledge' WHERE path = '/kb/c'")
    assert out["rows"][0][:2] == ["/kb/c", 1]
    assert kb.get("/api/repos/acme/workspaces/knowledge/nodes/kb/c").status_code == 404
    # a node with children is the API's 409, nothing deleted
    assert refused(kb, "DELETE FROM 'knowledge' WHERE path = '/kb/a'", 409)["details"]["statement"] == 1
    assert kb.get("/api/repos/acme/workspaces/knowledge/nodes/kb/a").status_code == 200


def test_branches_revisions_and_merge(kb):
    rev = head(kb)
    one(kb, "INSERT INTO 'knowledge' (path, node_type, properties) VALUES ('/kb/d', 'kb:Note', '{}'::jsonb)")
    # AS OF REVISION reads the branch as it was
    assert one(kb, f"SELECT path FROM 'knowledge' WHERE path = '/kb/d' AS OF REVISION {rev}")["rows"] == []
    assert one(kb, "SELECT path FROM 'knowledge' WHERE path = '/kb/d'")["rows"] == [["/kb/d"]]
    # a branch at that revision does not see it
    out = one(kb, f"CREATE BRANCH 'old' FROM 'main' AT REVISION {rev}")
    assert out["rows"][0][out["columns"].index("base_revision")] == rev
    assert one(kb, "SELECT path FROM 'knowledge' WHERE path = '/kb/d'", branch="old")["rows"] == []
    names = [r[0] for r in one(kb, "SHOW BRANCHES")["rows"]]
    http = [b["name"] for b in kb.get("/api/repos/acme/branches").json()["branches"]]
    assert names == http and "old" in names
    # write on the branch, merge it: the same conflicts as the API
    one(kb, "UPDATE 'knowledge' SET properties = '{\"title\": \"from old\"}'::jsonb WHERE path = '/kb/a'",
        branch="old")
    one(kb, "UPDATE 'knowledge' SET properties = '{\"title\": \"from main\"}'::jsonb WHERE path = '/kb/a'")
    error = refused(kb, "MERGE BRANCH 'old' INTO 'main'", 409)
    assert error["code"] == "merge_conflict"
    assert any(c.get("path") == "/kb/a" for c in error["details"]["conflicts"])
    one(kb, "CREATE BRANCH 'clean' FROM 'main'")
    one(kb, "INSERT INTO 'knowledge' (path, node_type) VALUES ('/kb/e', 'kb:Note')", branch="clean")
    out = one(kb, "MERGE BRANCH 'clean' INTO 'main'")
    assert out["rows"][0][out["columns"].index("revision")] == head(kb)
    assert one(kb, "SELECT path FROM 'knowledge' WHERE path = '/kb/e'")["rows"] == [["/kb/e"]]


def test_explain_names_the_use_cases_and_runs_nothing(kb):
    rev = head(kb)
    out = one(kb, "EXPLAIN INSERT INTO 'knowledge' (path, node_type) VALUES ('/kb/z', 'kb:Note')")
    assert out["columns"] == ["step", "use_case", "access", "arguments"]
    assert [r[:3] for r in out["rows"]] == [[1, "kg.ops.nodes.batch", "write"]]
    assert head(kb) == rev
    out = one(kb, "EXPLAIN SELECT path FROM KNN('x', 3, workspaces => 'knowledge')")
    assert out["rows"][0][1] == "kg.rag.search.search_branch"
    assert '"mode": "vector"' in out["rows"][0][3]
    out = one(kb, "EXPLAIN SELECT path FROM 'knowledge' WHERE CHILD_OF('/kb')")
    assert out["rows"][0][1] == "kg.ops.queries.list_children"


@pytest.mark.parametrize(("text", "construct", "line", "column"), [
    ("SELECT path FROM 'knowledge' JOIN other ON 1 = 1", "JOINS", 1, 35),
    ("SELECT path\nFROM 'knowledge'\nWHERE  path IN (SELECT 1)", "IN", 3, 8),
    ("WITH x AS (SELECT 1) SELECT * FROM x", "WITH", 1, 1),
    ("SELECT path FROM 'knowledge' UNION SELECT path FROM 'knowledge'", "UNION", 1, 1),
    ("SELECT foo(path) FROM 'knowledge'", "FOO", 1, 8),
    ("SELECT nope FROM 'knowledge'", "nope", 1, 8),
    ("SELECT path FROM KNN('x', 3, colour => 'red')", "colour", 1, 40),
    ("CREATE TABLE t (a int)", "TABLE", 1, 8),
    ("DROP TABLE 'knowledge'", "DROP", 1, 1),
    ("SELECT path FROM 'knowledge' WHERE path = ?", "?", 1, 43),
    ("SELECT path FROM 'knowledge' WHERE path = $2", "$2", 1, 43),
    ("INSERT INTO 'knowledge' (path, node_type) SELECT path, node_type FROM 'knowledge'", "INSERT ... SELECT", 1, 50),
    ("UPDATE 'knowledge' SET properties = '{}'::jsonb WHERE node_type = 'x'", "WHERE", 1, 55),
    ("SELECT path FROM 'knowledge' WHERE path = 'a' AS OF REVISION x", "AS OF REVISION", 1, 47),
    ("SELECT ROW_NUMBER() OVER () FROM 'knowledge'", "WINDOW", 1, 8),
])
def test_an_unsupported_construct_is_a_422_naming_it_and_where_it_is(kb, text, construct, line, column):
    rev = head(kb)
    error = refused(kb, text)
    assert error["code"] == "invalid_input"
    assert (error["details"]["construct"], error["details"]["line"], error["details"]["column"]) == \
        (construct, line, column), error
    assert head(kb) == rev


def test_a_bad_statement_anywhere_runs_nothing(kb):
    rev = head(kb)
    error = refused(kb, "INSERT INTO 'knowledge' (path, node_type) VALUES ('/kb/x', 'kb:Note');\nSELECT nope(")
    assert error["details"]["statement"] == 2 and error["details"]["line"] == 2
    assert head(kb) == rev
    assert kb.get("/api/repos/acme/workspaces/knowledge/nodes/kb/x").status_code == 404


def test_an_unknown_branch_is_a_404_not_an_empty_answer(kb):
    for text in ("SELECT path FROM 'knowledge' WHERE path = '/kb/a'",
                 "SELECT path FROM 'knowledge' WHERE CHILD_OF('/kb')",
                 "UPDATE 'knowledge' SET node_type = 'x' WHERE path = '/nope'"):
        r = kb.post("/api/sql/acme/no-such-branch", json={"sql": text})
        assert r.status_code == 404, r.text
        assert r.json()["error"]["code"] == "not_found"
