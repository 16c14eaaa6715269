"""Hostile SQL: injection through literals and parameters, a 1 MB statement, nesting 10,000
deep, every unsupported construct: a 4xx in kg's error shape, never a 500, nothing written
(head revision unchanged)."""

from __future__ import annotations

import pytest

from tests.api.test_sql import kb, refused  # noqa: F401
from tests.api.test_sql_guide import head

INJECTIONS = [
    "x'; DROP TABLE nodes; --",
    "/kb/a' OR '1'='1",
    "'); DELETE FROM 'knowledge' WHERE path = '/kb/a'; --",
    "$1",
    "\\'; SELECT 1; --",
]


@pytest.mark.parametrize("value", INJECTIONS)
def test_a_parameter_is_a_value_never_sql(kb, value):  # noqa: F811
    rev = head(kb)
    r = kb.post("/api/sql/acme/main", json={"sql": "SELECT path FROM 'knowledge' WHERE path = $1",
                                            "params": [value]})
    assert r.status_code == 200, r.text
    assert r.json()["results"][0]["rows"] == []
    r = kb.post("/api/sql/acme/main", json={"sql": "SELECT path, properties->>'title' AS t FROM 'knowledge' "
                                                   "WHERE properties->>'title' = $1", "params": [value]})
    assert r.json()["results"][0]["rows"] == []
    # written as a value, read back as the same value
    r = kb.post("/api/sql/acme/main", json={
        "sql": "INSERT INTO 'knowledge' (path, node_type, properties) VALUES ('/inj', 'kb:Note', $1); "
               "SELECT properties->>'v' FROM 'knowledge' WHERE path = '/inj'", "params": [{"v": value}]})
    assert r.status_code == 200, r.text
    assert r.json()["results"][1]["rows"] == [[value]]
    assert head(kb) == rev + 1
    assert kb.get("/api/repos/acme/workspaces/knowledge/nodes/kb/a").status_code == 200


def test_a_quote_in_a_literal_is_part_of_the_string(kb):  # noqa: F811
    rev = head(kb)
    r = kb.post("/api/sql/acme/main", json={"sql": "SELECT path FROM 'knowledge' WHERE path = "
                                                   "'/kb/a'' OR ''1''=''1'"})
    assert r.status_code == 200 and r.json()["results"][0]["rows"] == []
    error = refused(kb, "SELECT path FROM 'knowledge' WHERE path = '/kb/a'; DROP TABLE nodes; --'")
    assert error["details"]["statement"] == 2 and error["details"]["construct"] == "DROP"
    assert head(kb) == rev


def test_a_text_too_long_or_too_deep_is_refused_before_parsing(kb):  # noqa: F811
    rev = head(kb)
    long = "SELECT path FROM 'knowledge' WHERE path = '" + "a" * 1_048_576 + "'"
    r = kb.post("/api/sql/acme/main", json={"sql": long})
    assert r.status_code in (413, 422), r.text[:300]  # the body limit or the model's max_length
    assert set(r.json()["error"]) == {"code", "message", "details"}
    deep = "SELECT path FROM 'knowledge' WHERE " + "(" * 10_000 + "path = 'x'" + ")" * 10_000
    error = refused(kb, deep)
    assert error["details"]["construct"] == "nesting"
    many = "SELECT " + " + ".join(["1"] * 20_000) + " FROM 'knowledge'"
    r = kb.post("/api/sql/acme/main", json={"sql": many})
    assert r.status_code == 422, r.text[:300]
    assert head(kb) == rev


def test_the_library_refuses_a_long_text_too():
    from kg.errors import TooLarge
    from kg.sql.parse import parse

    with pytest.raises(TooLarge):
        parse("SELECT 1 FROM k WHERE a = '" + "a" * 200_000 + "'")


UNSUPPORTED = [
    "SELECT * FROM 'knowledge' a, 'knowledge' b",
    "SELECT path FROM 'knowledge' LEFT JOIN 'x' USING (path)",
    "SELECT path FROM (SELECT path FROM 'knowledge')",
    "SELECT path FROM 'knowledge' WHERE EXISTS (SELECT 1)",
    "SELECT path FROM 'knowledge' INTERSECT SELECT path FROM 'knowledge'",
    "SELECT path, RANK() OVER (ORDER BY path) FROM 'knowledge'",
    "SELECT DISTINCT ON (path) path FROM 'knowledge'",
    "SELECT COUNT(DISTINCT path) FROM 'knowledge'",
    "SELECT path FROM 'knowledge' FOR UPDATE",
    "SELECT path FROM 'knowledge' TABLESAMPLE SYSTEM (10)",
    "SELECT pg_sleep(10) FROM 'knowledge'",
    "SELECT path FROM 'knowledge' WHERE path = CURRENT_USER",
    "SELECT t.path FROM 'knowledge'",
    "SELECT path FROM public.nodes",
    "SELECT path FROM nodes WHERE 1 = 1",
    "SELECT 1",
    "INSERT INTO 'knowledge' VALUES ('/a', 'a', 'kb:X', '{}'::jsonb)",
    "INSERT INTO 'knowledge' (path, node_type, colour) VALUES ('/a', 'kb:X', 'red')",
    "INSERT INTO 'knowledge' (path, node_type) VALUES ('/a', 'kb:X') ON CONFLICT DO NOTHING",
    "INSERT INTO 'knowledge' (path, node_type) VALUES ('/a', 'kb:X') RETURNING path",
    "INSERT INTO 'knowledge' (path, node_type, properties) VALUES ('/a', 'kb:X', '{not json'::jsonb)",
    "INSERT INTO 'knowledge' (path, name, node_type) VALUES ('/a', 'b', 'kb:X')",
    "INSERT INTO 'knowledge' (path, node_type) VALUES ('/a', 'kb:X'), ('/b')",
    "UPDATE 'knowledge' SET path = '/z' WHERE path = '/kb/a'",
    "UPDATE 'knowledge' SET properties = '[1]'::jsonb WHERE path = '/kb/a'",
    "DELETE FROM 'knowledge'",
    "DELETE FROM 'knowledge' WHERE path LIKE '/kb%'",
    "TRUNCATE 'knowledge'",
    "DROP TABLE 'knowledge'",
    "ALTER TABLE nodes ADD COLUMN x int",
    "CREATE TABLE x (a int)",
    "CREATE BRANCH",
    "CREATE BRANCH 'x' FROM",
    "CREATE BRANCH 'x' AT REVISION 'one'",
    "MERGE BRANCH 'x' INTO 'main' WITH FORCE",
    "SHOW TABLES",
    "RELATE FROM path='/kb/a' TO path='/kb/b' TYPE 'x'",
    "RELATE FROM path='/kb/a' IN WORKSPACE 'knowledge' TO path='/kb/b' IN WORKSPACE 'knowledge'",
    "UNRELATE FROM '/kb/a' TO '/kb/b'",
    "GRANT ALL ON nodes TO public",
    "COPY nodes TO '/tmp/x'",
    "SET search_path = public",
    "BEGIN",
    "EXPLAIN",
    "SELECT path FROM KNN('q')",
    "SELECT path FROM KNN('q', 'ten')",
    "SELECT path FROM KNN('q', 5000)",
    "SELECT path FROM KNN('q', 5, granularity => 'page')",
    "SELECT path FROM KNN('q', 5, fulltext_weight => 1)",
    "SELECT path FROM HYBRID_SEARCH('q', 5, fulltext_weight => 0, vector_weight => 0)",
    "SELECT path FROM NEIGHBORS('knowledge:/kb/a', 'SIDEWAYS', NULL)",
    "SELECT path FROM NEIGHBORS('not an address')",
    "SELECT path FROM GRAPH_TABLE('x')",
    "SELECT path, embedding <=> EMBEDDING('q') AS d FROM 'knowledge' ORDER BY d",
    "SELECT path, embedding <=> EMBEDDING('q') AS d FROM 'knowledge' WHERE path LIKE '/a%' LIMIT 3",
    "SELECT path FROM 'knowledge' WHERE path = 'a' AS OF REVISION 999999",
    "SELECT path FROM 'knowledge' LIMIT -1",
    "SELECT path FROM 'knowledge' WHERE properties->>'rank' > 1 + 'a'",
    "",
    ";;;",
    "SELECT 'unterminated",
]


@pytest.mark.parametrize("text", UNSUPPORTED)
def test_every_unsupported_construct_is_a_4xx_in_the_error_shape_nothing_written(kb, text):  # noqa: F811
    rev = head(kb)
    r = kb.post("/api/sql/acme/main", json={"sql": text})
    assert 400 <= r.status_code < 500, (r.status_code, r.text)
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "details"}
    assert head(kb) == rev
