"""Screen 7 on SQLite and PostgreSQL: the index status and function jobs, API keys (issue 14)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from kg.context import OPERATOR, run
from kg.index.embedded import EmbeddedVectorIndex
from kg.ops import nodes as node_ops
from kg.ops import repos as repo_ops
from kg.providers.registry import make_embedder
from kg.services import Services
from kg.settings import Settings
from kg.store.db import Database
from kg.store.models import IndexJob, utcnow
from tests.conftest import FAKE_MODEL
from tests.ui.conftest import PEPPER, ConsoleClient, bearer, new_key


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


@pytest.fixture
def stepping(db_url: str, tmp_path: Path) -> Iterator[ConsoleClient]:
    """The console, signed in as an admin, on services whose indexer embeds large texts 16 chunks
    a pass (``KG_INDEX_STEP_CHUNKS``) and only when the test runs a pass: no lifespan, so no
    background indexer."""
    settings = Settings(database_url=db_url, data_dir=tmp_path / "data", embedding_model=FAKE_MODEL,
                        allow_fake_embedder=True, auth=True, key_pepper=PEPPER, key_cache_s=0,
                        index_step_chunks=16)
    db = Database(settings.resolved_database_url())
    db.upgrade()
    services = Services(settings=settings, db=db, index=EmbeddedVectorIndex(settings.data_dir),
                        embedder_factory=lambda name: make_embedder(name, allow_fake=True))
    from api.app import create_app

    c = ConsoleClient(TestClient(create_app(services=services), raise_server_exceptions=False), services)
    c.sign_in(new_key(services, "reviewer", {"repo": "*", "actions": ["admin"]}))
    yield c
    c.http.close()
    services.close()


def test_index_page_shows_each_running_jobs_progress_and_time_left(stepping):
    services = stepping.services
    run(services, OPERATOR, repo_ops.create_repository, "acme")
    run(services, OPERATOR, repo_ops.create_workspace, "acme", "kb")
    big = " ".join(f"zebra{i} stripes." for i in range(10650))  # 48 chunks of the default 512 tokens
    run(services, OPERATOR, node_ops.put_node, "acme", "main", "kb", "/notes/<b>big</b> & co", node_type="kb:Doc",
        properties={"content": big}, parents=True)
    assert services.indexer.run_pending().stepped == 16  # /notes whole, 16 of the 48 chunks of the large text

    r = stepping.get("/ui/r/acme/index")
    assert r.status_code == 200
    rows = r.text.split('id="progress"')[1].split("</table>")[0]
    [row] = re.findall(r"<tr data-content-key=.*?</tr>", rows, flags=re.S)
    assert '<td class="num" data-chunks>16 / 48</td>' in row
    assert "<td>kb</td>" in row and "/notes/&lt;b&gt;big&lt;/b&gt; &amp; co" in row and "<b>" not in row
    assert "<td data-eta>" in row and "ago" in row

    # 16 chunks in 100 s: the 32 left take about 200 s, shown once the rate is known.
    with services.db.write() as s:
        s.execute(update(IndexJob).where(IndexJob.chunks_total.is_not(None))
                  .values(started_at=utcnow() - timedelta(seconds=100)))
    row = stepping.get("/ui/r/acme/index").text.split('id="progress"')[1].split("</table>")[0]
    assert re.search(r"<td data-eta>about 3 min 2\d s</td>", row), row
    assert '<td class="muted">1 min ago</td>' in row


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


def test_index_page_says_what_the_next_text_waits_behind(stepping):
    services = stepping.services
    run(services, OPERATOR, repo_ops.create_repository, "acme")
    run(services, OPERATOR, repo_ops.create_workspace, "acme", "kb")
    big = " ".join(f"zebra{i} stripes." for i in range(10650))  # 48 chunks of the default 512 tokens
    run(services, OPERATOR, node_ops.put_node, "acme", "main", "kb", "/big", node_type="kb:Doc",
        properties={"content": big})
    assert services.indexer.run_pending().stepped == 16
    run(services, OPERATOR, node_ops.put_node, "acme", "main", "kb", "/note", node_type="kb:Note",
        properties={"content": "otters"})
    page = stepping.get("/ui/r/acme/index").text
    row = page.split('id="next"')[1].split("</table>")[0]
    assert '<td class="mono">/note</td>' in row and '<td class="num">6</td>' in row
    behind = re.search(r"<td data-behind>(.*?)</td>", row, flags=re.S).group(1)
    assert behind == f'<span class="mono">/big</span> in kb, {len(big)} characters, 16 / 48 chunks'
    services.indexer.run_pending()  # the note is done between the large text's steps
    assert 'id="next"' not in stepping.get("/ui/r/acme/index").text
