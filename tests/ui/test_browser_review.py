"""The branch review screen in a real browser against a real ``kg serve`` (issue 14): a person
reads an agent's diff, resolves its conflict with main, merges, and sees main updated."""

from __future__ import annotations

import json

from tests.ui.conftest import screenshot, sign_in


def _seed(api, repo: str) -> None:
    """``repo`` with /a on main, an agent branch that publishes /a and adds /n, and main then
    archiving /a: one conflict on /a's status."""
    assert api.post("/api/repos", json={"name": repo}).status_code == 201
    assert api.post(f"/api/repos/{repo}/workspaces", json={"name": "kb"}).status_code == 201
    nodes = f"/api/repos/{repo}/workspaces/kb/nodes"

    def put(path: str, props: dict, branch: str = "main") -> None:
        r = api.put(f"{nodes}{path}", params={"branch": branch}, json={"node_type": "kb:Doc", "properties": props})
        assert r.status_code in (200, 201), r.text

    put("/a", {"title": "A", "status": "draft"})
    assert api.post(f"/api/repos/{repo}/branches", json={"name": "agent/rag-1", "from": "main"}).status_code == 201
    put("/a", {"title": "A", "status": "published"}, branch="agent/rag-1")
    put("/n", {"title": "found by the agent"}, branch="agent/rag-1")
    put("/a", {"title": "A", "status": "archived"})


def test_a_person_reviews_an_agent_branch_resolves_the_conflict_and_merges(page, live):
    api = live.api
    _seed(api, "shop")
    sign_in(page, live.admin)
    page.goto("/ui/r/shop/branches")
    page.click("#agent-branches tr[data-branch='agent/rag-1'] a.branch-name")
    page.wait_for_url("**/ui/r/shop/review?branch=agent%2Frag-1")
    status = page.locator(".change[data-path='/a'] tr[data-key='status']")
    assert status.locator(".text-diff del.old").inner_text() == "draft"  # a word diff of the two strings
    assert status.locator(".text-diff ins.new").inner_text() == "published"
    assert page.locator(".change[data-path='/n']").get_attribute("data-kind") == "added"
    assert page.inner_text("#branch-info .parent") == "main"
    screenshot(page, "review")

    page.click("#dry-run")
    page.wait_for_selector("#conflicts fieldset.conflict")
    conflict = page.locator("#conflicts fieldset.conflict[data-path='/a']")
    assert '"archived"' in conflict.locator(".grid3 .ours").inner_text()
    assert '"published"' in conflict.locator(".grid3 .theirs").inner_text()
    assert '"draft"' in conflict.locator(".grid3 .base").inner_text()
    screenshot(page, "conflict")

    conflict.locator("input[value=edit]").check()
    conflict.locator("textarea").fill(json.dumps({"title": "A", "status": "reviewed", "note": "both sides read"}))
    page.click("#dry-run-picks")
    page.wait_for_selector("#merge-preview")
    assert "1 added, 1 modified, 0 deleted nodes" in page.inner_text("#merge-preview")
    page.fill("#merge-preview input[name=message]", "reviewed in the console")
    page.click("#merge-button")
    page.wait_for_selector("#merge-result")
    revision = page.inner_text("#merge-result .revision")
    assert "as revision" in page.inner_text("#merge-result")

    # main is updated, exactly
    a = api.get("/api/repos/shop/workspaces/kb/nodes/a").json()
    assert a["properties"] == {"title": "A", "status": "reviewed", "note": "both sides read"}
    assert api.get("/api/repos/shop/workspaces/kb/nodes/n").json()["properties"] == {"title": "found by the agent"}
    log = api.get("/api/repos/shop/log", params={"branch": "main"}).json()["revisions"]
    assert f"r{log[0]['revision']}" == revision and log[0]["message"] == "reviewed in the console"
    # and the branches page shows main's last revision as the merge
    page.click("#to-branches")
    page.wait_for_url("**/ui/r/shop/branches")
    main = page.locator("#branch-tree tr[data-branch=main]")
    assert revision in main.inner_text() and "reviewed in the console" in main.inner_text()


def test_a_read_only_key_sees_no_merge_button_and_gets_403_if_it_posts(page, live):
    api = live.api
    _seed(api, "shop2")
    reader = live.key("reader", {"repo": "shop2", "actions": ["read"]})
    sign_in(page, reader)
    page.goto("/ui/r/shop2/review?branch=agent/rag-1")
    assert page.locator(".change[data-path='/a']").count() == 1
    assert page.locator("#dry-run").count() == 0 and page.locator("#merge-button").count() == 0
    assert page.locator("#no-merge").count() == 1
    token = page.locator("input[name=csrf_token]").first.get_attribute("value")
    status = page.evaluate("""async (token) => {
        const body = new URLSearchParams({csrf_token: token, branch: "agent/rag-1", into: "main"});
        const r = await fetch("/ui/r/shop2/review/merge", {method: "POST", body});
        return r.status;
    }""", token)
    assert status == 403
    a = api.get("/api/repos/shop2/workspaces/kb/nodes/a").json()
    assert a["properties"] == {"title": "A", "status": "archived"}
