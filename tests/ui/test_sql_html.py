"""The SQL page in process: a POST without the session's CSRF token runs nothing, a read-only
key's write is the API's 403 on the page, and the page is listed in the navigation."""

from __future__ import annotations

from tests.ui.conftest import ConsoleClient, bearer, new_key

INSERT = "INSERT INTO 'kb' (path, node_type) VALUES ('/x', 'kb:Note')"


def _seed(console: ConsoleClient) -> None:
    api = {"headers": bearer(console.admin)}
    assert console.http.post("/api/repos", json={"name": "acme"}, **api).status_code == 201
    assert console.http.post("/api/repos/acme/workspaces", json={"name": "kb"}, **api).status_code == 201


def _head(console: ConsoleClient) -> int:
    return console.http.get("/api/repos/acme/branches/main", headers=bearer(console.admin)).json()["head_revision"]


def test_the_sql_page_needs_the_csrf_token_and_runs_as_the_key(console):
    _seed(console)
    page = console.get("/ui/r/acme/sql")
    assert page.status_code == 200 and 'href="/ui/r/acme/sql' in page.text
    head = _head(console)
    assert console.post("/ui/r/acme/sql", {"sql": INSERT}, csrf=False).status_code == 403
    assert _head(console) == head
    ran = console.post("/ui/r/acme/sql", {"sql": INSERT + "; SELECT path FROM 'kb'"})
    assert ran.status_code == 200, ran.text
    assert "<td>/x</td>" in ran.text and _head(console) == head + 1

    reader = new_key(console.services, "reader", {"repo": "acme", "actions": ["read"]})
    console.sign_in(reader)
    refused = console.post("/ui/r/acme/sql", {"sql": "INSERT INTO 'kb' (path, node_type) VALUES ('/y', 'kb:Note')"})
    assert refused.status_code == 403 and "403 forbidden" in refused.text
    assert _head(console) == head + 1
    assert "<td>/x</td>" in console.post("/ui/r/acme/sql", {"sql": "SELECT path FROM 'kb'"}).text
