"""The MCP ``sql`` tool through the SDK's client: the same statements and answers as the SQL
route, writes refused for a read-only key and on a read-only server, errors in kg's shape."""

from __future__ import annotations

from kg.access import Actor, make_grant
from kg.context import OPERATOR
from kg.mcp.server import build_server, fixed_binding
from kg.sql.execute import run_sql
from tests.mcp.client import call
from tests.mcp.test_mcp_in_memory import READER, acme  # noqa: F401

SCOPED = Actor("key", "scoped", "2" * 16, (make_grant("acme", ["*"], ["notes"], ["read", "write"]),))
KNN = "SELECT path, vector_distance FROM KNN('rotate an API key', 3, workspaces => 'kb')"


def test_the_sql_tool_answers_what_the_library_answers(acme):  # noqa: F811
    server = build_server(acme, fixed_binding("acme", "main"))
    out = call(server, None, "sql", {"sql": KNN})
    assert out["branch"] == "main"
    expected = run_sql(acme, OPERATOR, "acme", "main", KNN).model_dump()
    assert [r["rows"] for r in out["results"]] == [r["rows"] for r in expected["results"]] == [
        [["/keys", expected["results"][0]["rows"][0][1]]]]
    out = call(server, None, "sql", {"sql": "INSERT INTO 'kb' (path, node_type) VALUES ($1, 'kb:Note'); "
                                            "SELECT COUNT(*) FROM 'kb'", "params": ["/n"]})
    assert out["results"][1]["rows"] == [[2]]


def test_a_read_only_key_or_server_runs_reads_only(acme):  # noqa: F811
    insert = {"sql": "INSERT INTO 'kb' (path, node_type) VALUES ('/x', 'kb:Note')"}
    refused = call(build_server(acme, fixed_binding("acme", "main", READER)), None, "sql", insert, error=True)
    assert refused["error"]["code"] == "forbidden"
    read_only = build_server(acme, fixed_binding("acme", "main"), read_only=True)
    refused = call(read_only, None, "sql", insert, error=True)
    assert refused["error"]["code"] == "forbidden" and refused["error"]["details"]["statement"] == 1
    assert call(read_only, None, "sql", {"sql": "SELECT COUNT(*) FROM 'kb'"})["results"][0]["rows"] == [[1]]


def test_a_key_scoped_to_another_workspace_cannot_read_through_sql(acme):  # noqa: F811
    server = build_server(acme, fixed_binding("acme", "main", SCOPED))
    for text in (KNN, "SELECT path FROM 'kb'", "SELECT path FROM NEIGHBORS('kb:/keys', 'BOTH', NULL)"):
        refused = call(server, None, "sql", {"sql": text}, error=True)
        assert refused["error"]["code"] == "not_found", text
    # without naming a workspace, KNN searches only what the key may read: nothing of kb
    out = call(server, None, "sql", {"sql": "SELECT path FROM KNN('rotate an API key', 3)"})
    assert out["results"][0]["rows"] == []


def test_bad_sql_is_a_tool_error_in_kgs_shape(acme):  # noqa: F811
    server = build_server(acme, fixed_binding("acme", "main"))
    bad = call(server, None, "sql", {"sql": "SELECT path FROM 'kb' JOIN x ON 1 = 1"}, error=True)
    assert bad["error"]["code"] == "invalid_input"
    assert bad["error"]["details"] == {"construct": "JOINS", "line": 1, "column": 28, "statement": 1}


def test_a_write_the_key_may_not_make_refuses_the_whole_text_before_anything_runs(acme):  # noqa: F811
    from kg.context import run
    from kg.ops import repos as repo_ops

    run(acme, OPERATOR, repo_ops.create_workspace, "acme", "notes")
    head = run_sql(acme, OPERATOR, "acme", "main", "SHOW BRANCHES").model_dump()["results"][0]
    before = head["rows"][0][head["columns"].index("head_revision")]
    writer = Actor("key", "writer", "3" * 16, (make_grant("acme", ["main", "*"], ["notes"], ["read", "write"]),))
    server = build_server(acme, fixed_binding("acme", "main", writer))
    refused = call(server, None, "sql", {"sql": "INSERT INTO 'notes' (path, node_type) VALUES ('/n', 'kb:Note'); "
                                                "INSERT INTO 'kb' (path, node_type) VALUES ('/k', 'kb:Note')"},
                   error=True)
    assert refused["error"]["code"] == "not_found"  # kb is a workspace the key cannot see
    assert refused["error"]["details"]["statement"] == 2 and refused["error"]["details"]["statements_run"] == 0
    after = run_sql(acme, OPERATOR, "acme", "main", "SHOW BRANCHES").model_dump()["results"][0]
    assert after["rows"][0][after["columns"].index("head_revision")] == before
    assert call(server, None, "sql", {"sql": "SELECT path FROM 'notes'"})["results"][0]["rows"] == []
    # alone, the first statement is one the key may run
    alone = call(server, None, "sql", {"sql": "INSERT INTO 'notes' (path, node_type) VALUES ('/n', 'kb:Note')"})
    assert alone["results"][0]["rows"][0][1] == "/n"
