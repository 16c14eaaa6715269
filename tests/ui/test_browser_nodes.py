"""The node tree and the node page in a real browser against a real ``kg serve`` (issue 14):
sign in, expand a node (its children load lazily), open a node, edit a property, see the new
value and the new revision in the node's history."""

from __future__ import annotations

import json
import re

from tests.ui.conftest import screenshot, sign_in


def _put(api, path: str, props: dict, order: float | None = None, expect: int = 201) -> dict:
    r = api.put(f"/api/repos/lib/workspaces/kb/nodes{path}?parents=true",
                json={"node_type": "kb:Doc", "properties": props, "order": order})
    assert r.status_code == expect, r.text
    return r.json()


def test_a_person_browses_the_tree_opens_a_node_and_edits_it(page, live):
    api = live.api
    assert api.post("/api/repos", json={"name": "lib"}).status_code == 201
    assert api.post("/api/repos/lib/workspaces", json={"name": "kb"}).status_code == 201
    _put(api, "/guides", {"title": "Guides"})
    _put(api, "/guides/rotate", {"title": "Rotate a key", "body": "Three steps rotate a key. " * 30,
                                 "status": "draft"}, order=2)
    _put(api, "/guides/install", {"title": "Install"}, order=1)
    before = api.get("/api/repos/lib/workspaces/kb/nodes/guides/rotate").json()["revision"]

    sign_in(page, live.admin)
    page.goto("/ui/r/lib/tree?workspace=kb")
    guides = page.locator("#tree li[data-path='/guides']")
    assert guides.count() == 1
    assert page.locator("#tree li[data-path='/guides/rotate']").count() == 0  # not loaded yet
    guides.locator("summary .node-name").click()
    page.wait_for_selector("#tree li[data-path='/guides/rotate']")
    children = page.locator("#tree li[data-path='/guides'] ul.children > li").evaluate_all(
        "els => els.map(e => e.dataset.path)")
    assert children == ["/guides/install", "/guides/rotate"]
    screenshot(page, "tree")

    page.locator("#tree li[data-path='/guides/rotate'] a.node-name").click()
    page.wait_for_selector("#node-title")
    assert "kb:/guides/rotate" in page.inner_text("#node-title")
    assert json.loads(page.inner_text("#properties tr[data-key=status] pre")) == "draft"
    assert page.locator("#chunks tbody tr").count() >= 2
    assert page.locator("#history tbody tr").count() == 1

    props = json.loads(page.input_value("#edit-properties"))
    props["status"] = "published"
    page.fill("#edit-properties", json.dumps(props, indent=2))
    page.fill("#edit-form input[name=message]", "publish the rotation guide")
    page.click("#edit-form button[type=submit]")
    page.wait_for_selector(".flash.ok")
    assert re.search(r"saved: revision \d+", page.inner_text(".flash.ok"))
    assert json.loads(page.inner_text("#properties tr[data-key=status] pre")) == "published"
    rows = page.locator("#history tbody tr")
    assert rows.count() == 2
    newest = rows.first
    new_revision = int(newest.get_attribute("data-revision") or "0")
    assert new_revision > before
    assert "publish the rotation guide" in newest.inner_text() and "admin" in newest.inner_text()
    screenshot(page, "node")

    stored = api.get("/api/repos/lib/workspaces/kb/nodes/guides/rotate").json()
    assert (stored["revision"], stored["properties"]["status"]) == (new_revision, "published")
    # the older revision, from the history, shows the old value
    page.locator(f"#history tr[data-revision='{before}'] a").click()
    page.wait_for_selector("#as-of")
    assert json.loads(page.inner_text("#properties tr[data-key=status] pre")) == "draft"
    assert page.locator("#edit-form").count() == 0

    # the branch selector shows the node as another branch sees it (a script file, no inline handler)
    assert api.post("/api/repos/lib/branches", json={"name": "agent/x", "from": "main"}).status_code == 201
    r = api.patch("/api/repos/lib/workspaces/kb/nodes/guides/rotate?branch=agent/x",
                  json={"properties": {"status": "on the branch"}})
    assert r.status_code == 200, r.text
    page.goto("/ui/r/lib/node?workspace=kb&path=/guides/rotate")
    page.select_option(".branch-select select[name=branch]", "agent/x")
    page.wait_for_url(re.compile(r".*branch=agent%2Fx.*"))
    assert json.loads(page.inner_text("#properties tr[data-key=status] pre")) == "on the branch"
