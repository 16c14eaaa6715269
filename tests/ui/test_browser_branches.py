"""The branches screen in a real browser against a real ``kg serve`` (issue 14)."""

from __future__ import annotations

from tests.ui.conftest import screenshot, sign_in


def test_a_person_signs_in_and_sees_the_branches_and_deletes_one(page, live):
    api = live.api
    assert api.post("/api/repos", json={"name": "shop"}).status_code == 201
    assert api.post("/api/repos/shop/workspaces", json={"name": "kb"}).status_code == 201
    for name in ("agent/a", "agent/b"):
        assert api.post("/api/repos/shop/branches", json={"name": name, "from": "main"}).status_code == 201
    sign_in(page, live.admin)
    page.goto("/ui/r/shop/branches")
    assert page.locator("#branch-tree tr[data-branch=main] .badge.protected").count() == 1
    assert page.locator("#agent-branches tbody tr").count() == 2
    screenshot(page, "branches")
    page.once("dialog", lambda d: d.accept())
    page.locator("#agent-branches tr[data-branch='agent/a'] button.danger").click()
    page.wait_for_selector(".flash.ok")
    assert "deleted agent/a" in page.inner_text(".flash.ok")
    assert page.locator("#agent-branches tbody tr").count() == 1
    assert api.get("/api/repos/shop/branches/agent/a").status_code == 404
