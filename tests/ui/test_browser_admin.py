"""Index status, jobs and API keys in a real browser against a real ``kg serve`` (issue 14)."""

from __future__ import annotations

import re

import httpx

from tests.ui.conftest import screenshot, sign_in


def test_an_admin_makes_a_key_in_the_browser_uses_it_and_revokes_it(page, live):
    api = live.api
    assert api.post("/api/repos", json={"name": "keys"}).status_code == 201
    sign_in(page, live.admin)
    page.goto("/ui/keys")
    page.fill("input[name=name]", "agent-9")
    page.fill("#grants", "repo=keys,branches=agent/*,actions=read+write")
    page.click("form[action='/ui/keys'] button[type=submit]")
    token = re.search(r"kg_[0-9a-f]{16}_[A-Za-z0-9_-]+", page.inner_text("#new-token")).group(0)
    screenshot(page, "keys")
    made = httpx.get(f"{live.base}/api/repos/keys/branches", headers={"Authorization": f"Bearer {token}"})
    assert made.status_code == 200
    key_id = token.split("_")[1]
    page.once("dialog", lambda d: d.accept())
    page.locator(f"tr[data-key='{key_id}'] button.danger").click()
    page.wait_for_url(re.compile(r".*/ui/keys$"))
    assert "revoked" in page.inner_text(f"tr[data-key='{key_id}']")
    refused = httpx.get(f"{live.base}/api/repos/keys/branches", headers={"Authorization": f"Bearer {token}"})
    assert refused.status_code == 401


def test_the_index_page_shows_the_queue_and_a_finished_job(page, live):
    api = live.api
    assert api.post("/api/repos", json={"name": "jobs"}).status_code == 201
    assert api.post("/api/repos/jobs/workspaces", json={"name": "kb"}).status_code == 201
    assert api.put("/api/repos/jobs/workspaces/kb/nodes/doc", json={
        "node_type": "kb:Doc", "properties": {"title": "Notice", "content": "Thirty days notice."}}).status_code == 201
    job = api.post("/api/functions/jobs/graph-context/invoke",
                   json={"input": {"query": "notice"}, "wait_for_completion": False}).json()["job_id"]
    for _ in range(100):
        if api.get(f"/api/jobs/{job}").json()["state"] == "succeeded":
            break
        page.wait_for_timeout(100)
    sign_in(page, live.admin)
    page.goto("/ui/r/jobs/index")
    assert page.inner_text("td[data-count=failed]") == "0"
    assert "succeeded" in page.inner_text(f"tr[data-job='{job}']")
    screenshot(page, "index")
