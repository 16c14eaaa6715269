"""A merge from the console applies what the reviewer saw, or nothing (issue 14; a new-user pass
found that a merge applied writes made on the branch after the dry run)."""

from __future__ import annotations

import re

from tests.ui.conftest import ConsoleClient, bearer
from tests.ui.test_review_html import MERGE, REVIEW, _api, _props, _put, _seed


def _plan(html: str) -> str:
    match = re.search(r'name="plan" value="([^"]*)"', html)
    assert match and match.group(1), "the merge form carries no plan"
    return match.group(1)


def _form(plan: str, dry_run: str) -> dict:
    return {"branch": "agent/s1", "into": "main", "plan": plan, "dry_run": dry_run}


def test_a_write_on_the_branch_after_the_dry_run_makes_the_merge_refuse_and_write_nothing(console: ConsoleClient):
    _seed(console)
    page = console.get(REVIEW)
    dry = console.post(MERGE, _form(_plan(page.text), "1"))
    assert dry.status_code == 200 and "merge-preview" in dry.text
    seen = _plan(dry.text)
    _put(console, "/a", {"title": "UNSEEN", "status": "published"}, branch="agent/s1")  # the agent goes on
    before = _props(console, "/a")
    r = console.post(MERGE, _form(seen, "0"))
    assert r.status_code == 409 and "changed since the dry run" in r.text and "merge-stale" in r.text
    assert _props(console, "/a") == before == {"title": "T", "status": "draft"}
    # Reviewed again, the new state merges.
    again = console.get(REVIEW)
    assert "UNSEEN" in again.text
    dry = console.post(MERGE, _form(_plan(again.text), "1"))
    r = console.post(MERGE, _form(_plan(dry.text), "0"))
    assert r.status_code == 200, r.text
    assert _props(console, "/a") == {"title": "UNSEEN", "status": "published"}


def test_a_write_on_the_target_after_the_page_was_opened_refuses_the_dry_run(console: ConsoleClient):
    _seed(console)
    page = console.get(REVIEW)
    _put(console, "/b", {"title": "moved"})  # main moves under the reviewer
    r = console.post(MERGE, _form(_plan(page.text), "1"))
    assert r.status_code == 409 and "merge-stale" in r.text and "merge-preview" not in r.text


def test_the_api_merge_takes_the_dry_runs_plan(console: ConsoleClient):
    _seed(console)
    url = "/api/repos/acme/branches/agent/s1/merge"
    dry = console.http.post(url, json={"into": "main", "dry_run": True}, **_api(console))
    assert dry.status_code == 200, dry.text
    plan = dry.json()["plan"]
    _put(console, "/b", {"title": "late"}, branch="agent/s1")
    r = console.http.post(url, json={"into": "main", "if_plan": plan}, headers=bearer(console.admin))
    assert r.status_code == 409
    assert r.json()["error"]["details"]["reason"] == "stale_plan"
    assert _props(console, "/b") == {"title": "B"}
    fresh = console.http.post(url, json={"into": "main", "dry_run": True}, **_api(console)).json()["plan"]
    assert fresh != plan
    r = console.http.post(url, json={"into": "main", "if_plan": fresh}, **_api(console))
    assert r.status_code == 200 and _props(console, "/b") == {"title": "late"}
