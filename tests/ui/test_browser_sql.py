"""The SQL page in a real browser against a real ``kg serve``: type statements, run them, read
each result as a table; a refused statement is shown with its position, nothing written."""

from __future__ import annotations

from tests.ui.conftest import screenshot, sign_in


def test_a_person_runs_sql_and_reads_the_tables(page, live):
    api = live.api
    assert api.post("/api/repos", json={"name": "sqlr"}).status_code == 201
    assert api.post("/api/repos/sqlr/workspaces", json={"name": "knowledge"}).status_code == 201
    sign_in(page, live.admin)
    page.goto("/ui/r/sqlr/sql")
    assert "HYBRID_SEARCH" in page.input_value("#sql-form textarea[name=sql]")
    page.fill("#sql-form textarea[name=sql]",
              "INSERT INTO 'knowledge' (path, name, node_type, properties) VALUES\n"
              "  ('/docs/a', 'a', 'kb:Article',\n"
              "   '{\"title\": \"Alpha <b>\", \"content\": \"Rotate an API key.\"}'::jsonb);\n"
              "SELECT path, properties->>'title' AS title FROM 'knowledge' WHERE DESCENDANT_OF('/docs');")
    page.click("#sql-form button[type=submit]")
    page.wait_for_selector("#sql-results")
    sections = page.locator(".sql-result")
    assert sections.count() == 2
    second = sections.nth(1)
    headers = second.locator("thead th").evaluate_all("els => els.map(e => e.textContent)")
    assert headers == ["path", "title"]
    cells = second.locator("tbody tr td").evaluate_all("els => els.map(e => e.textContent)")
    assert cells == ["/docs/a", "Alpha <b>"]  # escaped: shown as text
    node = api.get("/api/repos/sqlr/workspaces/knowledge/nodes/docs/a")
    assert node.status_code == 200 and node.json()["properties"]["title"] == "Alpha <b>"
    screenshot(page, "sql")

    head = api.get("/api/repos/sqlr/branches/main").json()["head_revision"]
    page.fill("#sql-form textarea[name=sql]", "DELETE FROM 'knowledge' WHERE path = '/docs/a';\nSELECT nope(")
    page.click("#sql-form button[type=submit]")
    page.wait_for_selector("#sql-error")
    assert "422 invalid_input" in page.inner_text("#sql-error")
    assert "line 2" in page.inner_text("#sql-error")
    assert page.input_value("#sql-form textarea[name=sql]").endswith("SELECT nope(")  # kept for fixing
    assert api.get("/api/repos/sqlr/branches/main").json()["head_revision"] == head
