"""Webhooks against a real receiver (an HTTP server in a thread): registration refused for a
URL the operator did not allow, signed deliveries that verify with the guide's snippet, branch
and event filters, retries with exponential backoff logged per attempt, a hanging receiver cut
at the deadline, and who may register. On SQLite and PostgreSQL."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import update

from kg.store.models import WebhookDelivery, utcnow
from tests.api.feed_server import Receiver
from tests.api.test_nodes import assert_error

BASE = "/api/repos/acme"
NODES = f"{BASE}/workspaces/knowledge/nodes"
GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "changes-and-webhooks.md"


def documented_verifier():
    """The receiver's verification function as the guide prints it (its ```python block that
    defines ``verify_kg_signature``), executed as is."""
    blocks = re.findall(r"```python\n(.*?)```", GUIDE.read_text(), flags=re.S)
    source = next(b for b in blocks if "def verify_kg_signature" in b)
    namespace: dict = {}
    exec(compile(source, str(GUIDE), "exec"), namespace)  # noqa: S102 - the documented snippet
    return namespace["verify_kg_signature"]


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


@pytest.fixture
def allowed(services, client, receiver):
    """The receiver allowed; the app's delivery thread stopped, so the test alone delivers
    (``drain()``): the thread woke on each commit and raced the counts asserted here."""
    services.webhooks.stop()
    services.settings.webhook_allowed_urls = [receiver.url.rsplit("/", 1)[0] + "/"]
    services.settings.webhook_backoff_s = 5.0
    return receiver


def put(client, path, branch="main"):
    r = client.put(f"{NODES}{path}", params={"branch": branch}, json={"node_type": "kb:Doc", "properties": {}})
    assert r.status_code in (200, 201), r.text


def add(client, url, **body):
    r = client.post(f"{BASE}/webhooks", json={"url": url, **body})
    assert r.status_code == 201, r.text
    return r.json()


def make_due(services):
    """What the clock would do after the backoff: every queued retry is due now."""
    with services.db.write() as session:
        session.execute(update(WebhookDelivery).where(WebhookDelivery.state == "queued")
                        .values(not_before=utcnow() - timedelta(seconds=1)))


def test_a_url_not_allowed_is_refused_at_registration_with_the_error_shape(client, repo, allowed):
    for url in ("http://127.0.0.1:1/hooks/kg", "http://example.com/hooks/kg", "ftp://127.0.0.1/x", "not a url",
                allowed.url.replace("/hooks/", "/other/")):
        r = client.post(f"{BASE}/webhooks", json={"url": url})
        assert_error(r, 422, "invalid_input")
    assert r.json()["error"]["details"]["setting"] == "KG_WEBHOOK_ALLOWED_URLS"
    assert client.get(f"{BASE}/webhooks").json() == {"webhooks": []}
    assert_error(client.post(f"{BASE}/webhooks", json={"url": allowed.url, "events": ["nope"]}), 422)


def test_deliveries_are_signed_filtered_and_logged(client, repo, services, allowed):
    hook = add(client, allowed.url)
    assert hook["secret"].startswith("whsec_") and hook["branches"] == ["*"]
    listed = client.get(f"{BASE}/webhooks").json()["webhooks"]
    assert listed == [{k: v for k, v in hook.items() if k != "secret"}]
    only = add(client, allowed.url + "/features", branches=["feature/*"], events=["branch.created", "revision"])
    put(client, "/a")
    assert client.post(f"{BASE}/branches", json={"name": "feature/x"}).status_code == 201
    put(client, "/b", branch="feature/x")
    assert client.post(f"{BASE}/branches/feature/x/merge", json={}).status_code == 200

    assert services.webhooks.drain() == 6
    by_path: dict[str, list] = {}
    for req in allowed.requests:
        by_path.setdefault(req["path"], []).append(req)
    import json
    assert [json.loads(r["body"])["type"] for r in by_path["/hooks/kg"]] == [
        "revision", "branch.created", "revision", "merge"]
    assert [(json.loads(r["body"])["type"], json.loads(r["body"])["branch"]) for r in by_path["/hooks/kg/features"]] \
        == [("branch.created", "feature/x"), ("revision", "feature/x")]
    verify = documented_verifier()
    for req in by_path["/hooks/kg"]:
        header = req["headers"]["kg-signature"]
        assert re.fullmatch(r"t=\d+,v1=[0-9a-f]{64}", header)
        assert verify(hook["secret"], header, req["body"]) is True
        assert verify(only["secret"], header, req["body"]) is False
        assert verify(hook["secret"], header, req["body"] + b" ") is False
        assert req["headers"]["kg-event-id"] == json.loads(req["body"])["id"]
    log = client.get(f"{BASE}/webhooks/{hook['id']}/deliveries").json()["deliveries"]
    assert [(d["event_type"], d["state"], d["attempts"], d["status_code"], d["error"]) for d in log] == [
        ("merge", "delivered", 1, 200, None), ("revision", "delivered", 1, 200, None),
        ("branch.created", "delivered", 1, 200, None), ("revision", "delivered", 1, 200, None)]
    assert all(d["delivered_at"] and d["last_attempt_at"] and d["next_attempt_at"] is None for d in log)
    # Nothing new: nothing sent again.
    assert services.webhooks.drain() == 0 and len(allowed.requests) == 6
    # Removed: gone with its log.
    assert client.delete(f"{BASE}/webhooks/{only['id']}").status_code == 204
    assert_error(client.get(f"{BASE}/webhooks/{only['id']}/deliveries"), 404, "not_found")
    assert_error(client.delete(f"{BASE}/webhooks/{only['id']}"), 404, "not_found")


def test_a_failing_receiver_gets_retries_with_exponential_backoff_then_fails(client, repo, services, allowed):
    services.settings.webhook_max_attempts = 3
    allowed.statuses = [500]
    hook = add(client, allowed.url)
    put(client, "/a")
    times = []
    for attempt in (1, 2, 3):
        assert services.webhooks.drain() == 1
        [d] = client.get(f"{BASE}/webhooks/{hook['id']}/deliveries").json()["deliveries"]
        assert (d["attempts"], d["status_code"], d["error"]) == (attempt, 500, "the receiver answered 500")
        times.append(d)
        if attempt < 3:
            assert d["state"] == "queued"
            from datetime import datetime
            wait = datetime.fromisoformat(d["next_attempt_at"]) - datetime.fromisoformat(d["last_attempt_at"])
            assert wait == timedelta(seconds=5.0 * 2 ** (attempt - 1))  # 5 s, then 10 s
            assert services.webhooks.drain() == 0  # not due yet: no attempt
            make_due(services)
    assert times[-1]["state"] == "failed" and times[-1]["next_attempt_at"] is None
    assert len(allowed.requests) == 3
    make_due(services)
    assert services.webhooks.drain() == 0  # failed for good


def test_a_receiver_that_recovers_gets_the_event_once(client, repo, services, allowed):
    allowed.statuses = [503, 200]
    hook = add(client, allowed.url)
    put(client, "/a")
    assert services.webhooks.drain() == 1
    make_due(services)
    assert services.webhooks.drain() == 1
    [d] = client.get(f"{BASE}/webhooks/{hook['id']}/deliveries").json()["deliveries"]
    assert (d["state"], d["attempts"], d["status_code"], d["error"]) == ("delivered", 2, 200, None)
    assert len(allowed.requests) == 2 and allowed.requests[0]["body"] == allowed.requests[1]["body"]


def test_a_hanging_receiver_is_cut_at_the_deadline(client, repo, services, allowed):
    services.settings.webhook_timeout_s = 0.5
    allowed.hang = True
    hook = add(client, allowed.url)
    put(client, "/a")
    assert services.webhooks.drain() == 1
    [d] = client.get(f"{BASE}/webhooks/{hook['id']}/deliveries").json()["deliveries"]
    assert (d["state"], d["attempts"], d["status_code"]) == ("queued", 1, None)
    assert d["error"] == "no answer within 0.5 s (KG_WEBHOOK_TIMEOUT_S)"


def test_an_address_disallowed_after_registration_is_never_contacted(client, repo, services, allowed):
    hook = add(client, allowed.url)
    services.settings.webhook_allowed_urls = []
    put(client, "/a")
    assert services.webhooks.drain() == 1
    [d] = client.get(f"{BASE}/webhooks/{hook['id']}/deliveries").json()["deliveries"]
    assert d["status_code"] is None and "KG_WEBHOOK_ALLOWED_URLS" in d["error"]
    assert allowed.requests == []
