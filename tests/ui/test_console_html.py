"""The console's frame on SQLite and PostgreSQL: sign-in, the session cookie, CSRF, error
pages, and the branches screen (issue 14)."""

from __future__ import annotations

import base64

from fastapi.testclient import TestClient

from tests.ui.conftest import ConsoleClient, bearer, console_routes, csrf_of, new_key


def _seed(console: ConsoleClient) -> None:
    api = {"headers": bearer(console.admin)}
    assert console.http.post("/api/repos", json={"name": "acme"}, **api).status_code == 201
    assert console.http.post("/api/repos/acme/workspaces", json={"name": "kb"}, **api).status_code == 201
    r = console.http.put("/api/repos/acme/workspaces/kb/nodes/doc", json={"node_type": "kb:Doc",
                         "properties": {"title": "t"}, "message": "first", "actor": "alice"}, **api)
    assert r.status_code in (200, 201), r.text
    for name in ("agent/s1", "agent/s2", "feature"):
        assert console.http.post("/api/repos/acme/branches", json={"name": name, "from": "main"},
                                 **api).status_code == 201
    r = console.http.put("/api/repos/acme/workspaces/kb/nodes/new?branch=agent/s2",
                         json={"node_type": "kb:Doc", "properties": {"title": "n"}, "message": "agent wrote"}, **api)
    assert r.status_code == 201, r.text


def test_without_a_session_every_page_sends_a_person_to_sign_in_and_back(console_services):
    from api.app import create_app

    with TestClient(create_app(services=console_services)) as http:
        r = http.get("/ui/r/acme/branches?sort=name", follow_redirects=False)
        assert r.status_code == 303
        assert r.headers["location"].startswith("/ui/login?next=%2Fui%2Fr%2Facme%2Fbranches%3Fsort%3Dname")
        r = http.get("/ui/r/acme/branches", headers={"HX-Request": "true"}, follow_redirects=False)
        assert r.status_code == 200 and r.headers["HX-Redirect"].startswith("/ui/login")


def test_a_wrong_key_is_refused_on_the_form_and_no_session_is_made(console):
    console.post("/ui/logout")
    form = console.get("/ui/login")
    r = console.post("/ui/login", {"key": "kg_0123456789abcdef_nope", "next": "/ui",
                                   "csrf_token": csrf_of(form.text)}, csrf=False)
    assert r.status_code == 401
    assert "invalid API key" in r.text or "unknown" in r.text or "API key" in r.text
    assert console.get("/ui/repos", follow_redirects=False).status_code == 303


def test_sign_in_never_redirects_off_the_console(console):
    console.post("/ui/logout")
    form = console.get("/ui/login")
    r = console.post("/ui/login", {"key": console.admin, "next": "https://evil.example/x",
                                   "csrf_token": csrf_of(form.text)}, csrf=False)
    assert r.status_code == 303 and r.headers["location"] == "/ui"
    form = console.get("/ui/login")
    r = console.post("/ui/login", {"key": console.admin, "next": "//evil.example",
                                   "csrf_token": csrf_of(form.text)}, csrf=False)
    assert r.headers["location"] == "/ui"


def test_the_session_cookie_is_httponly_strict_and_signed(console):
    console.post("/ui/logout")
    form = console.get("/ui/login")
    r = console.post("/ui/login", {"key": console.admin, "next": "/ui/repos", "csrf_token": csrf_of(form.text)},
                     csrf=False)
    cookie = r.headers["set-cookie"]
    assert "kg_console=" in cookie and "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
    value = cookie.split(";")[0].split("=", 1)[1]
    payload = value.split(".")[0]
    decoded = base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)).decode()
    secret = console.admin.split("_", 2)[2]
    assert secret not in decoded and console.admin not in decoded  # the cookie never holds the key
    console.http.cookies.clear()
    console.http.cookies.set("kg_console", value[:-3] + ("AAA" if not value.endswith("AAA") else "BBB"),
                             domain="testserver.local", path="/ui")
    assert console.get("/ui/repos", follow_redirects=False).status_code == 303  # an altered cookie is no session
    console.http.cookies.clear()
    console.http.cookies.set("kg_console", value, domain="testserver.local", path="/ui")
    assert console.get("/ui/repos", follow_redirects=False).status_code == 200  # the cookie as signed is


def test_a_post_without_the_csrf_token_is_refused_and_changes_nothing(console):
    _seed(console)
    for sent in ({}, {"csrf_token": "forged"}):
        r = console.post("/ui/r/acme/branches/delete", {"branch": "feature", **sent}, csrf=False)
        assert r.status_code == 403
        assert "CSRF" in r.text and "<html" in r.text
    assert console.http.get("/api/repos/acme/branches/feature", headers=bearer(console.admin)).status_code == 200


def test_branches_screen_shows_the_tree_the_agents_and_their_last_revision(console):
    _seed(console)
    r = console.get("/ui/r/acme/branches")
    assert r.status_code == 200
    tree = r.text.split('id="branch-tree"')[1].split("</table>")[0]
    agents = r.text.split('id="agent-branches"')[1].split("</table>")[0]
    assert 'data-branch="main"' in tree and 'data-branch="feature"' in tree and "agent/s1" not in tree
    assert 'data-branch="agent/s1"' in agents and 'data-branch="agent/s2"' in agents
    assert "protected" in tree.split('data-branch="feature"')[0]  # main's badge
    s2 = agents.split('data-branch="agent/s2"')[1].split("</tr>")[0]
    assert "agent wrote" in s2 and 'class="num ahead">1<' in s2
    # stalest first: s1 (no revision of its own, forked before s2 wrote) before s2
    assert agents.index("agent/s1") < agents.index("agent/s2")
    fresh = console.get("/ui/r/acme/branches?sort=fresh").text.split('id="agent-branches"')[1]
    assert fresh.index("agent/s2") < fresh.index("agent/s1")


def test_deleting_and_resetting_a_branch_from_the_screen(console):
    _seed(console)
    r = console.post("/ui/r/acme/branches/reset", {"branch": "agent/s2"})
    assert r.status_code == 303
    assert console.http.get("/api/repos/acme/branches/agent/s2", headers=bearer(console.admin)).json()["ahead"] == 0
    r = console.post("/ui/r/acme/branches/delete", {"branch": "agent/s1"})
    assert r.status_code == 303 and "done=" in r.headers["location"]
    assert "deleted agent/s1" in console.get(r.headers["location"]).text
    assert console.http.get("/api/repos/acme/branches/agent/s1", headers=bearer(console.admin)).status_code == 404
    r = console.post("/ui/r/acme/branches/delete", {"branch": "main"})
    assert r.status_code in (403, 409) and "<html" in r.text  # an HTML error page, never a 500


def test_a_read_only_key_sees_no_action_and_is_refused_if_it_posts(console):
    _seed(console)
    reader = new_key(console.services, "reader", {"repo": "acme", "actions": ["read"]})
    console.sign_in(reader)
    r = console.get("/ui/r/acme/branches")
    assert r.status_code == 200 and "agent/s2" in r.text
    assert "Merge…" not in r.text and ">Delete<" not in r.text and ">Reset<" not in r.text
    r = console.post("/ui/r/acme/branches/delete", {"branch": "agent/s2"})
    assert r.status_code == 403 and "forbidden" in r.text
    assert console.http.get("/api/repos/acme/branches/agent/s2", headers=bearer(console.admin)).status_code == 200


def test_a_key_sees_only_the_repositories_it_may_read(console):
    _seed(console)
    assert console.http.post("/api/repos", json={"name": "secret"}, headers=bearer(console.admin)).status_code == 201
    reader = new_key(console.services, "reader", {"repo": "acme", "actions": ["read"]})
    console.sign_in(reader)
    r = console.get("/ui/repos")
    assert "acme" in r.text and "secret" not in r.text
    assert console.get("/ui/r/secret/branches").status_code == 404


def test_an_unknown_console_page_is_an_html_404(console):
    r = console.get("/ui/no/such/page")
    assert r.status_code == 404 and r.headers["content-type"].startswith("text/html")
    assert console.http.get("/api/no/such").headers["content-type"].startswith("application/json")


def test_static_assets_are_served_from_the_package(console):
    for path in ("/ui/static/vendor/htmx.min.js", "/ui/static/vendor/cytoscape.min.js", "/ui/static/console.css"):
        r = console.get(path)
        assert r.status_code == 200 and len(r.content) > 1000, path


def test_every_console_post_refuses_a_missing_csrf_token(console):
    """Every state-changing console route, found in the app's routes (a new one is covered the
    day it is added), answers 403 without the session's token, before it does anything."""
    _seed(console)
    posts = sorted(path for method, path in console_routes(console.http.app) if method == "POST")
    assert "/ui/r/{repo}/branches/delete" in posts and "/ui/login" in posts
    for path in posts:
        url = path.replace("{repo}", "acme")
        for token in (None, "forged"):
            data = {"branch": "feature", "key": console.admin} | ({"csrf_token": token} if token else {})
            r = console.post(url, data, csrf=False)
            assert r.status_code == 403, (url, r.status_code, r.text[:200])
    assert console.http.get("/api/repos/acme/branches/feature", headers=bearer(console.admin)).status_code == 200


def test_console_pages_forbid_framing_and_foreign_scripts(console):
    _seed(console)
    for url in ("/ui/r/acme/branches", "/ui/no/such/page", "/ui/login"):
        r = console.get(url)
        policy = r.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in policy and "script-src 'self'" in policy, url
        assert r.headers["x-content-type-options"] == "nosniff"


def test_text_the_store_cannot_hold_in_a_console_url_is_an_html_422(console):
    """The request guard refuses a NUL before any route runs; on /ui it answers with the
    console's page (it answered JSON), on /api with the API's shape."""
    r = console.get("/ui/r/acme/node?workspace=kb&path=/a%00b")
    assert r.status_code == 422 and r.headers["content-type"].startswith("text/html")
    assert "NUL" in r.text and "frame-ancestors" in r.headers["content-security-policy"]
    r = console.http.get("/api/repos/acme/workspaces/kb/nodes/a%00b", headers=bearer(console.admin))
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_input"


def _cookie(console: ConsoleClient) -> str:
    return next(c.value for c in console.http.cookies.jar if c.name == "kg_console")


def _with_cookie(console: ConsoleClient, value: str) -> None:
    console.http.cookies.clear()
    console.http.cookies.set("kg_console", value, domain="testserver.local", path="/ui")


def test_signing_out_ends_every_copy_of_the_session_cookie(console):
    """A new-user pass found that a copy of the cookie kept working after sign-out (the cookie
    held the key itself): the session is now on the server and sign-out ends it."""
    copy = _cookie(console)
    assert console.get("/ui/repos", follow_redirects=False).status_code == 200
    r = console.post("/ui/logout")
    assert r.status_code == 303
    _with_cookie(console, copy)
    r = console.get("/ui/repos", follow_redirects=False)
    assert r.status_code == 303 and "reason=ended" in r.headers["location"]


def test_opening_the_sign_in_page_does_not_sign_out(console):
    """A GET changes nothing: an <img src=/ui/login> on another site signed people out."""
    assert console.get("/ui/login").status_code == 200
    assert console.get("/ui/repos", follow_redirects=False).status_code == 200


def test_the_sign_in_page_shows_only_its_own_messages(console):
    r = console.get("/ui/login?reason=Paste+your+key+at+https://evil.example")
    assert "evil.example" not in r.text
    r = console.get("/ui/login?reason=ended")
    assert "Your console session ended" in r.text


def test_revoking_the_key_ends_its_console_session_at_once(console):
    reader = new_key(console.services, "short", {"repo": "*", "actions": ["read"]})
    console.sign_in(reader)
    assert console.get("/ui/repos", follow_redirects=False).status_code == 200
    key_id = reader.split("_")[1]
    assert console.http.delete(f"/api/keys/{key_id}", headers=bearer(console.admin)).status_code == 200
    r = console.get("/ui/repos", follow_redirects=False)
    assert r.status_code == 303 and "reason=ended" in r.headers["location"]
    # Signing out still works on the ended session, and the person can sign in again.
    form = console.get("/ui/login")
    assert "sign-out" in form.text
    r = console.post("/ui/logout", {"csrf_token": csrf_of(form.text)}, csrf=False)
    assert r.status_code == 303
    console.sign_in(console.admin)
    assert console.get("/ui/repos", follow_redirects=False).status_code == 200


def test_a_page_shows_only_messages_the_console_signed(console):
    """``done=`` carried any text a link gave it (phishing in the console's own message box)."""
    _seed(console)
    r = console.get("/ui/r/acme/branches?done=Your+key+expired:+paste+it+at+https://evil.example")
    assert r.status_code == 200 and "evil.example" not in r.text
    r = console.get("/ui/r/acme/tree?workspace=kb&done=Paste+your+key+at+https://evil.example")
    assert r.status_code == 200 and "evil.example" not in r.text


def test_a_key_without_main_opens_pages_on_a_branch_it_reads_and_is_told_why_it_cannot_review(console):
    """A key with grants on agent/* only met 404 'branch main not found' on every page the
    navigation opened, and a review that said its branch had no parent."""
    _seed(console)
    agent = new_key(console.services, "agent-only", {"repo": "acme", "branches": ["agent/*"],
                                                     "actions": ["read", "write"]})
    console.sign_in(agent)
    for url in ("/ui/r/acme/tree", "/ui/r/acme/graph", "/ui/r/acme/search", "/ui/r/acme/ask"):
        r = console.get(url)
        assert r.status_code == 200, (url, r.status_code)
        assert 'value="agent/s1"' in r.text or "agent/s1" in r.text, url
    r = console.get("/ui/r/acme/review?branch=agent/s2")
    assert r.status_code == 200 and 'id="hidden-parent"' in r.text and "no parent" not in r.text


def test_the_tree_and_node_pages_list_the_branches_without_counting_revisions(console):
    """The branch picker of the tree and node pages needs names: it counted every branch's
    revisions ahead of and behind its parent, which for a key limited to some workspaces walks
    the writes of every revision since the fork (millions after a bulk import)."""
    from sqlalchemy import event

    _seed(console)
    docs_only = new_key(console.services, "kb-reader", {"repo": "acme", "branches": ["*"], "workspaces": ["kb"],
                                                         "actions": ["read"]})
    console.sign_in(docs_only)
    statements: list[str] = []

    def record(conn, cursor, statement, parameters, context, executemany):
        statements.append(" ".join(statement.split()).lower())

    event.listen(console.services.db.engine, "before_cursor_execute", record)
    try:
        tree = console.get("/ui/r/acme/tree?workspace=kb")
        node = console.get("/ui/r/acme/node?workspace=kb&path=/doc")
    finally:
        event.remove(console.services.db.engine, "before_cursor_execute", record)
    assert tree.status_code == 200 and node.status_code == 200, (tree.text[:300], node.text[:300])
    for page in (tree, node):
        for name in ("main", "agent/s1", "agent/s2", "feature"):
            assert f'value="{name}"' in page.text, name
    assert not any("count(" in s and "from revisions" in s for s in statements)
