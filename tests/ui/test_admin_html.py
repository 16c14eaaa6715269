"""Screen 7 on SQLite and PostgreSQL: the index status and function jobs, API keys (issue 14)."""

from __future__ import annotations

import re
import time

from tests.ui.conftest import ConsoleClient, bearer, new_key


def _seed(console: ConsoleClient) -> None:
    api = {"headers": bearer(console.admin)}
    assert console.http.post("/api/repos", json={"name": "acme"}, **api).status_code == 201
    assert console.http.post("/api/repos/acme/workspaces", json={"name": "kb"}, **api).status_code == 201
    r = console.http.put("/api/repos/acme/workspaces/kb/nodes/doc", json={"node_type": "kb:Doc",
                         "properties": {"title": "Leases", "content": "Termination requires thirty days notice."}},
                         **api)
    assert r.status_code == 201, r.text


def _job(console: ConsoleClient, token: str, query: str) -> str:
    r = console.http.post("/api/functions/acme/graph-context/invoke", headers=bearer(token),
                          json={"input": {"query": query}, "wait_for_completion": False})
    assert r.status_code == 202, r.text
    job_id = r.json()["job_id"]
    for _ in range(200):
        if console.http.get(f"/api/jobs/{job_id}", headers=bearer(token)).json()["state"] in ("succeeded", "failed"):
            return job_id
        time.sleep(0.05)
    raise AssertionError("the job did not finish")


def test_index_page_shows_the_queue_the_index_and_the_jobs(console):
    _seed(console)
    job = _job(console, console.admin, "termination notice")
    r = console.get("/ui/r/acme/index")
    assert r.status_code == 200
    assert re.search(r'data-count="pending">0<', r.text) and re.search(r'data-count="failed">0<', r.text)
    stats = r.text.split('id="index-stats"')[1].split("</table>")[0]
    assert "<th>chunks</th>" in stats and "fake:hash-64" in stats
    jobs = r.text.split('id="jobs"')[1].split("</table>")[0]
    assert f'data-job="{job}"' in jobs and "graph-context" in jobs and "succeeded" in jobs


def test_a_key_sees_only_its_own_jobs_and_no_index_status_without_admin(console):
    _seed(console)
    agent = new_key(console.services, "agent", {"repo": "acme", "actions": ["read"]})
    mine = _job(console, agent, "notice")
    theirs = _job(console, console.admin, "termination")
    console.sign_in(agent)
    r = console.get("/ui/r/acme/index")
    assert r.status_code == 200
    assert 'id="queue"' not in r.text  # the status names every branch: admins only
    refused = r.text.split('<div class="flash info">')[1].split("</div>")[0]
    assert "admin" in refused
    assert f'data-job="{mine}"' in r.text and f'data-job="{theirs}"' not in r.text
    assert "API keys" not in r.text  # no keys link for a non-admin
    assert console.get("/ui/keys").status_code == 403


def test_an_admin_makes_a_key_sees_its_token_once_and_revokes_it(console):
    _seed(console)
    r = console.post("/ui/keys", {"name": "agent-7", "grants": "repo=acme,branches=agent/*,actions=read+write\n"
                                  "repo=acme,branches=main,actions=read", "expires_in_h": "24"})
    assert r.status_code == 201, r.text
    token = re.search(r"(kg_[0-9a-f]{16}_[A-Za-z0-9_-]+)", r.text).group(1)
    # The token works on the API with exactly its grants.
    assert console.http.get("/api/repos/acme/branches", headers=bearer(token)).status_code == 200
    assert console.http.put("/api/repos/acme/workspaces/kb/nodes/x", headers=bearer(token),
                            json={"node_type": "kb:Doc", "properties": {}}).status_code == 403
    listed = console.get("/ui/keys").text
    assert "agent-7" in listed and token not in listed  # shown once, never again
    key_id = token.split("_")[1]
    assert "repo=acme,branches=agent/*,workspaces=*,actions=read+write" in listed
    r = console.post("/ui/keys/revoke", {"key_id": key_id})
    assert r.status_code == 303
    assert console.http.get("/api/repos/acme/branches", headers=bearer(token)).status_code == 401
    row = console.get("/ui/keys").text.split(f'data-key="{key_id}"')[1].split("</tr>")[0]
    assert "revoked" in row and "Revoke</button>" not in row


def test_a_bad_key_form_is_a_422_page_and_makes_no_key(console):
    before = console.get("/ui/keys").text.count("data-key=")
    for form, needle in (({"name": "x", "grants": "repo=acme,colour=blue"}, "expected repo="),
                         ({"name": "x", "grants": ""}, "at least one grant"),
                         ({"name": "x", "grants": "repo=acme", "expires_in_h": "soon"}, "not a number"),
                         ({"name": "x", "grants": "repo=acme", "expires_in_h": "-1"}, "more than 0"),
                         ({"name": "", "grants": "repo=acme"}, "required")):
        r = console.post("/ui/keys", form)
        assert r.status_code == 422, (form, r.status_code)
        assert needle in r.text and "<html" in r.text
    assert console.get("/ui/keys").text.count("data-key=") == before


def test_key_forms_need_the_csrf_token(console):
    r = console.post("/ui/keys", {"name": "x", "grants": "repo=acme"}, csrf=False)
    assert r.status_code == 403
    assert "x</td>" not in console.get("/ui/keys").text
