"""Screen 3 of the console, node tree and node page, on SQLite and PostgreSQL (issue 14): the
tree's order, lazy children and paging, the node page's content, the node as of a revision,
edit and delete, refusals (CSRF, a read-only key, a key of one workspace), escaping."""

from __future__ import annotations

import html
import re

from tests.ui.conftest import ConsoleClient, bearer, new_key

BODY = ("Rotating an API key takes three steps. " * 40).strip()


def _api(console: ConsoleClient) -> dict:
    return {"headers": bearer(console.admin)}


def _put(console: ConsoleClient, ws: str, path: str, props: dict, *, node_type: str = "kb:Doc",
         order: float | None = None, branch: str = "main", message: str | None = None, expect: int = 201) -> dict:
    body: dict = {"node_type": node_type, "properties": props, "order": order}
    if message:
        body["message"] = message
    r = console.http.put(f"/api/repos/acme/workspaces/{ws}/nodes{path}?branch={branch}&parents=true", json=body,
                         **_api(console))
    assert r.status_code == expect, r.text
    return r.json()


def _seed(console: ConsoleClient) -> dict[str, int]:
    """acme: workspaces kb and private; kb:/docs with children c (order 2), a (order 1), b (no
    order), /docs/a/deep; two entities with a relation and a reference; private:/secret."""
    api = _api(console)
    assert console.http.post("/api/repos", json={"name": "acme"}, **api).status_code == 201
    for ws in ("kb", "private"):
        assert console.http.post("/api/repos/acme/workspaces", json={"name": ws}, **api).status_code == 201
    _put(console, "kb", "/docs", {"title": "Docs"}, node_type="kg:Folder")
    _put(console, "kb", "/docs/c", {"title": "C"}, order=2)
    _put(console, "kb", "/docs/a", {"title": "A"}, order=1)
    _put(console, "kb", "/docs/b", {"title": "B"})
    _put(console, "kb", "/docs/a/deep", {"title": "Deep"})
    first = _put(console, "kb", "/entities/dana", {"title": "Dana Weber", "body": BODY, "status": "draft"},
                 node_type="kg:Entity", message="dana first")
    _put(console, "kb", "/entities/acme", {"title": "Acme Marine",
                                           "employs": {"kg:ref": "/entities/dana"}}, node_type="kg:Entity")
    second = _put(console, "kb", "/entities/dana", {"title": "Dana Weber", "body": BODY, "status": "published",
                                                    "site": {"kg:ref": "/docs/a"}},
                  node_type="kg:Entity", message="dana published", expect=200)
    for frm, to, rel, weight in (("kb:/entities/dana", "kb:/entities/acme", "works_at", 0.9),
                                 ("kb:/docs/a", "kb:/entities/dana", "mentions", 0.5)):
        r = console.http.post("/api/repos/acme/relations", json={"from": frm, "to": to, "type": rel,
                                                                 "weight": weight}, **api)
        assert r.status_code == 201, r.text
    _put(console, "private", "/secret", {"title": "hidden"})
    return {"first": first["revision"], "second": second["revision"]}


def _section(text: str, element_id: str) -> str:
    start = text.index(f'id="{element_id}"')
    return text[start:text.index("</table>", start)]


def test_the_tree_lists_the_workspaces_and_the_top_level_in_order(console):
    _seed(console)
    r = console.get("/ui/r/acme/tree?branch=main&workspace=kb")
    assert r.status_code == 200
    assert 'data-workspace="kb"' in r.text and 'data-workspace="private"' in r.text
    tree = r.text.split('id="tree"')[1]
    assert re.findall(r'<li data-path="([^"]+)"', tree) == ["/docs", "/entities"]
    # /docs has children: it expands lazily, from the children fragment
    assert 'hx-get="/ui/r/acme/tree/children?branch=main&amp;workspace=kb&amp;parent=%2Fdocs' in tree
    # the branch selector lists the branches the key sees
    assert '<option value="main" selected>main</option>' in r.text


def test_the_tree_defaults_to_the_first_workspace(console):
    _seed(console)
    r = console.get("/ui/r/acme/tree")
    assert r.status_code == 200 and 'data-workspace="kb">kb</strong>' in r.text


def test_the_children_fragment_gives_children_in_their_stored_order(console):
    _seed(console)
    r = console.get("/ui/r/acme/tree/children?branch=main&workspace=kb&parent=/docs", headers={"HX-Request": "true"})
    assert r.status_code == 200 and "<html" not in r.text
    assert re.findall(r'<li data-path="([^"]+)"', r.text) == ["/docs/a", "/docs/c", "/docs/b"]
    # /docs/a has a child (lazily expandable), /docs/b is a leaf linked to its page
    a = r.text.split('data-path="/docs/a"')[1].split("</li>")[0]
    assert "<details" in a and "parent=%2Fdocs%2Fa" in a
    b = r.text.split('data-path="/docs/b"')[1].split("</li>")[0]
    assert "<details" not in b and 'href="/ui/r/acme/node?branch=main&amp;workspace=kb&amp;path=%2Fdocs%2Fb"' in b
    deep = console.get("/ui/r/acme/tree/children?workspace=kb&parent=/docs/a")
    assert re.findall(r'<li data-path="([^"]+)"', deep.text) == ["/docs/a/deep"]


def test_many_children_are_paged_with_a_more_link_and_its_cursor(console):
    _seed(console)
    for i in range(7):
        _put(console, "kb", f"/many-{i}", {"title": str(i)}, order=float(i))
    seen: list[str] = []
    url = "/ui/r/acme/tree/children?branch=main&workspace=kb&parent=/&limit=3"
    pages = 0
    while url:
        r = console.get(url)
        assert r.status_code == 200
        seen += re.findall(r'<li data-path="([^"]+)"', r.text)
        more = re.search(r'<li class="more">.*?hx-get="([^"]+)"', r.text, re.S)
        url = html.unescape(more.group(1)) if more else ""
        pages += 1
    assert pages == 3  # 9 top-level nodes, 3 a page
    assert seen == [f"/many-{i}" for i in range(7)] + ["/docs", "/entities"]
    # without htmx, the top level's "more" link is the tree page's next page
    first = console.get("/ui/r/acme/tree?workspace=kb&limit=3").text
    href = html.unescape(re.search(r'<li class="more">.*?<a href="([^"]+)"', first, re.S).group(1))
    assert href.startswith("/ui/r/acme/tree?branch=main&workspace=kb&cursor=")
    second = console.get(href)
    assert re.findall(r'<li data-path="([^"]+)"', second.text) == ["/many-3", "/many-4", "/many-5"]
    assert console.get("/ui/r/acme/tree/children?workspace=kb&parent=/&cursor=%%%").status_code == 422


def test_the_node_page_shows_type_properties_chunks_references_relations_and_history(console):
    revs = _seed(console)
    r = console.get("/ui/r/acme/node?branch=main&workspace=kb&path=/entities/dana")
    assert r.status_code == 200
    assert 'id="node-type">kg:Entity<' in r.text
    props = _section(r.text, "properties")
    assert ('<tr data-key="status"><td class="mono nowrap">status</td>'
            '<td><pre class="value">&#34;published&#34;</pre>') in props
    assert "&#34;kg:ref&#34;: &#34;/docs/a&#34;" in props
    chunks = _section(r.text, "chunks")
    indexes = re.findall(r'<tr data-index="(\d+)">', chunks)
    assert indexes[0] == "0" and len(indexes) >= 2  # the title, then the body's chunks
    assert indexes == [str(i) for i in range(len(indexes))]
    assert "fake:hash-64" in chunks and "Rotating an API key" in chunks
    # references: from this node (its site) and to it (acme employs dana)
    out = _section(r.text, "references-out")
    assert "site" in out and "path=%2Fdocs%2Fa" in out
    into = _section(r.text, "references-in")
    assert "kb:/entities/acme" in into and "employs" in into
    # relations out (works_at acme, 0.9) and in (mentioned by /docs/a, 0.5), linked to their pages
    rel_out = _section(r.text, "relations-out")
    assert "works_at" in rel_out and "0.9" in rel_out
    assert 'href="/ui/r/acme/node?branch=main&amp;workspace=kb&amp;path=%2Fentities%2Facme"' in rel_out
    rel_in = _section(r.text, "relations-in")
    assert "mentions" in rel_in and "0.5" in rel_in and "kb:/docs/a" in rel_in
    history = _section(r.text, "history")
    assert re.findall(r'<tr data-revision="(\d+)"', history) == [str(revs["second"]), str(revs["first"])]
    assert "dana published" in history and "dana first" in history and "reviewer" in history
    assert f"path=%2Fentities%2Fdana&amp;at_revision={revs['first']}" in history
    assert 'href="/ui/r/acme/graph?branch=main&amp;workspace=kb&amp;path=%2Fentities%2Fdana"' in r.text
    assert 'href="/ui/r/acme/review?branch=main"' in r.text
    assert 'id="as-of"' not in r.text
    assert 'id="edit-form"' in r.text and 'id="delete-form"' in r.text


def test_the_node_as_of_a_revision_shows_the_old_value_and_no_edit(console):
    revs = _seed(console)
    r = console.get(f"/ui/r/acme/node?branch=main&workspace=kb&path=/entities/dana&at_revision={revs['first']}")
    assert r.status_code == 200
    assert 'id="as-of"' in r.text and f"As of revision <strong>{revs['first']}</strong>" in r.text
    props = _section(r.text, "properties")
    assert "&#34;draft&#34;" in props and "published" not in props and "site" not in props
    assert re.findall(r'<tr data-revision="(\d+)"', _section(r.text, "history")) == [str(revs["first"])]
    assert 'id="edit-form"' not in r.text
    # before the node existed: a 404 page
    r = console.get(f"/ui/r/acme/node?workspace=kb&path=/entities/dana&at_revision={revs['first'] - 1}")
    assert r.status_code == 404 and "<html" in r.text


def test_edit_writes_one_revision_with_the_new_properties(console):
    revs = _seed(console)
    head = console.http.get("/api/repos/acme/log?branch=main&limit=1", **_api(console)).json()["revisions"][0]
    r = console.post("/ui/r/acme/node/edit", {
        "branch": "main", "workspace": "kb", "path": "/entities/dana", "node_type": "kg:Person",
        "properties": '{"title": "Dana W.", "status": "retired"}', "if_revision": str(revs["second"]),
        "message": "retire dana"})
    assert r.status_code == 303
    new = head["revision"] + 1
    assert r.headers["location"].startswith("/ui/r/acme/node?branch=main&workspace=kb&path=%2Fentities%2Fdana"
                                            "&done=")  # a message signed by the console
    node = console.http.get("/api/repos/acme/workspaces/kb/nodes/entities/dana", **_api(console)).json()
    assert node["node_type"] == "kg:Person" and node["properties"] == {"title": "Dana W.", "status": "retired"}
    assert node["revision"] == new
    log = console.http.get("/api/repos/acme/log?branch=main&limit=2", **_api(console)).json()["revisions"]
    assert [x["revision"] for x in log] == [new, head["revision"]]
    assert log[0]["message"] == "retire dana" and log[0]["actor"] == "reviewer"
    page = console.get(r.headers["location"])
    assert f"saved: revision {new}" in page.text
    assert re.findall(r'<tr data-revision="(\d+)"', _section(page.text, "history"))[0] == str(new)
    # the order is kept
    kids = console.http.get("/api/repos/acme/workspaces/kb/nodes?parent=/docs", **_api(console)).json()["nodes"]
    assert [k["name"] for k in kids] == ["a", "c", "b"]


def test_an_edit_of_a_stale_revision_is_a_conflict_and_writes_nothing(console):
    revs = _seed(console)
    r = console.post("/ui/r/acme/node/edit", {"branch": "main", "workspace": "kb", "path": "/entities/dana",
                                              "node_type": "kg:Entity", "properties": "{}",
                                              "if_revision": str(revs["first"])})
    assert r.status_code == 409 and "<html" in r.text
    node = console.http.get("/api/repos/acme/workspaces/kb/nodes/entities/dana", **_api(console)).json()
    assert node["properties"]["status"] == "published"


def test_invalid_json_is_a_422_page_and_nothing_is_written(console):
    _seed(console)
    before = console.http.get("/api/repos/acme/log?branch=main&limit=1", **_api(console)).json()["revisions"]
    for raw, message in (('{"title": ', "properties are not valid JSON"),
                         ('["a list"]', "properties must be a JSON object"),
                         ('{"a": NaN}', "NaN is not a JSON value"),
                         ('{"a": "\\u0000"}', "contains a NUL character"),
                         ('{"a": ' + "[" * 50_000 + "]" * 50_000 + "}", "nested deeper than 64 levels")):
        r = console.post("/ui/r/acme/node/edit", {"branch": "main", "workspace": "kb", "path": "/entities/dana",
                                                  "node_type": "kg:Entity", "properties": raw})
        assert r.status_code == 422 and "<html" in r.text
        assert message in r.text
    after = console.http.get("/api/repos/acme/log?branch=main&limit=1", **_api(console)).json()["revisions"]
    assert after == before


def test_delete_tombstones_the_node_and_redirects_to_the_tree(console):
    _seed(console)
    r = console.post("/ui/r/acme/node/delete", {"branch": "main", "workspace": "kb", "path": "/docs/b"})
    assert r.status_code == 303 and r.headers["location"].startswith("/ui/r/acme/tree?branch=main&workspace=kb")
    assert console.http.get("/api/repos/acme/workspaces/kb/nodes/docs/b", **_api(console)).status_code == 404
    assert "deleted kb:/docs/b (1 node)" in console.get(r.headers["location"]).text
    # a node with children needs "with its descendants"
    r = console.post("/ui/r/acme/node/delete", {"branch": "main", "workspace": "kb", "path": "/docs/a"})
    assert r.status_code == 409
    r = console.post("/ui/r/acme/node/delete", {"branch": "main", "workspace": "kb", "path": "/docs/a",
                                                "recursive": "on"})
    assert r.status_code == 303 and "deleted kb:/docs/a (2 nodes)" in console.get(r.headers["location"]).text
    assert console.http.get("/api/repos/acme/workspaces/kb/nodes/docs/a/deep", **_api(console)).status_code == 404


def test_posts_without_the_csrf_token_are_refused_and_change_nothing(console):
    _seed(console)
    for sent in ({}, {"csrf_token": "forged"}):
        r = console.post("/ui/r/acme/node/delete", {"branch": "main", "workspace": "kb", "path": "/docs/b", **sent},
                         csrf=False)
        assert r.status_code == 403 and "CSRF" in r.text
        r = console.post("/ui/r/acme/node/edit", {"branch": "main", "workspace": "kb", "path": "/docs/b",
                                                  "node_type": "x", "properties": "{}", **sent}, csrf=False)
        assert r.status_code == 403 and "CSRF" in r.text
    node = console.http.get("/api/repos/acme/workspaces/kb/nodes/docs/b", **_api(console)).json()
    assert node["node_type"] == "kb:Doc" and node["properties"] == {"title": "B"}


def test_a_read_only_key_sees_no_edit_and_is_refused_if_it_posts(console):
    _seed(console)
    reader = new_key(console.services, "reader", {"repo": "acme", "actions": ["read"]})
    console.sign_in(reader)
    r = console.get("/ui/r/acme/node?workspace=kb&path=/docs/b")
    assert r.status_code == 200 and 'id="properties"' in r.text
    assert 'id="edit-form"' not in r.text and 'id="delete-form"' not in r.text and "/node/edit" not in r.text
    r = console.post("/ui/r/acme/node/edit", {"branch": "main", "workspace": "kb", "path": "/docs/b",
                                              "node_type": "kb:Doc", "properties": '{"title": "X"}'})
    assert r.status_code == 403 and "<html" in r.text
    r = console.post("/ui/r/acme/node/delete", {"branch": "main", "workspace": "kb", "path": "/docs/b"})
    assert r.status_code == 403
    node = console.http.get("/api/repos/acme/workspaces/kb/nodes/docs/b", **_api(console)).json()
    assert node["properties"] == {"title": "B"}


def test_an_agent_key_without_a_grant_naming_main_cannot_write_main(console):
    _seed(console)
    assert console.http.post("/api/repos/acme/branches", json={"name": "agent/s1", "from": "main"},
                             **_api(console)).status_code == 201
    agent = new_key(console.services, "agent", {"repo": "acme", "branches": ["*"], "actions": ["read", "write"]})
    console.sign_in(agent)
    assert 'id="edit-form"' not in console.get("/ui/r/acme/node?branch=main&workspace=kb&path=/docs/b").text
    r = console.post("/ui/r/acme/node/edit", {"branch": "main", "workspace": "kb", "path": "/docs/b",
                                              "node_type": "kb:Doc", "properties": '{"title": "X"}'})
    assert r.status_code == 403 and "protected" in r.text
    # its own branch it may edit
    page = console.get("/ui/r/acme/node?branch=agent/s1&workspace=kb&path=/docs/b")
    assert 'id="edit-form"' in page.text
    r = console.post("/ui/r/acme/node/edit", {"branch": "agent/s1", "workspace": "kb", "path": "/docs/b",
                                              "node_type": "kb:Doc", "properties": '{"title": "X"}'})
    assert r.status_code == 303
    on_main = console.http.get("/api/repos/acme/workspaces/kb/nodes/docs/b", **_api(console)).json()
    on_branch = console.http.get("/api/repos/acme/workspaces/kb/nodes/docs/b?branch=agent/s1", **_api(console)).json()
    assert (on_main["properties"], on_branch["properties"]) == ({"title": "B"}, {"title": "X"})


def test_a_key_of_one_workspace_sees_only_it_and_cannot_open_a_node_of_another(console):
    _seed(console)
    kb_only = new_key(console.services, "kb-reader", {"repo": "acme", "workspaces": ["kb"], "actions": ["read"]})
    console.sign_in(kb_only)
    r = console.get("/ui/r/acme/tree")
    assert r.status_code == 200
    assert 'data-workspace="kb"' in r.text and "private" not in r.text
    r = console.get("/ui/r/acme/node?workspace=private&path=/secret")
    assert r.status_code == 404 and "hidden" not in r.text
    assert console.get("/ui/r/acme/tree?workspace=private").status_code == 404
    assert console.get("/ui/r/acme/tree/children?workspace=private&parent=/").status_code == 404


def test_a_node_named_script_renders_as_text(console):
    _seed(console)
    evil = "<script>alert(1)</script>"
    _put(console, "kb", "/docs/<script>alert(1)<", {"title": evil, evil: evil, "body": evil}, node_type=evil)
    r = console.http.post("/api/repos/acme/relations", json={"from": "kb:/docs/<script>alert(1)<",
                                                             "to": "kb:/docs/a", "type": "links"}, **_api(console))
    assert r.status_code == 201, r.text
    for url in ("/ui/r/acme/tree/children?workspace=kb&parent=/docs",
                "/ui/r/acme/node?workspace=kb&path=/docs/<script>alert(1)<",
                "/ui/r/acme/node?workspace=kb&path=/docs/a"):
        page = console.get(url)
        assert page.status_code == 200, url
        assert "<script>alert" not in page.text, url
        assert "&lt;script&gt;alert(1)" in page.text, url


def test_unknown_nodes_and_bad_input_are_html_errors_never_5xx(console):
    _seed(console)
    for url, status in (("/ui/r/acme/node?workspace=kb&path=/nope", 404),
                        ("/ui/r/acme/node?workspace=nope&path=/docs", 404),
                        ("/ui/r/acme/node?workspace=kb&path=/docs&branch=nope", 404),
                        ("/ui/r/nope/node?workspace=kb&path=/docs", 404),
                        ("/ui/r/nope/tree", 404),
                        ("/ui/r/acme/node?workspace=kb&path=no-slash", 422),
                        ("/ui/r/acme/node?workspace=kb&path=/a/../b", 422),
                        ("/ui/r/acme/node?workspace=kb&path=/docs&at_revision=999999", 404),
                        ("/ui/r/acme/tree/children?workspace=kb&parent=/nope", 404),
                        ("/ui/r/acme/tree/children?workspace=kb&parent=bad", 422)):
        r = console.get(url)
        assert r.status_code == status, (url, r.status_code, r.text[:300])
        assert r.headers["content-type"].startswith("text/html"), url
    r = console.get("/ui/r/acme/node?workspace=kb&path=/nope", headers={"HX-Request": "true"})
    assert r.status_code == 404 and "<html" not in r.text and 'data-status="404"' in r.text
    r = console.post("/ui/r/acme/node/edit", {"branch": "main", "workspace": "kb", "path": "/nope",
                                              "node_type": "kb:Doc", "properties": "{}"})
    assert r.status_code == 404
    r = console.post("/ui/r/acme/node/edit", {"branch": "main", "workspace": "kb", "path": "/docs/b",
                                              "properties": "{}"})
    assert r.status_code == 422 and "node_type" in r.text
