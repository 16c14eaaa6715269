"""The change feed (issue: a change feed and signed webhooks): every revision once, in order,
per branch, under concurrent writers; JSON pages with a cursor; Server-Sent Events resumed with
``Last-Event-ID``; branch events; a scoped key sees only its workspaces; streams bounded per
key. On SQLite and PostgreSQL."""

from __future__ import annotations

import threading

import httpx
import pytest

from api.app import create_app
from kg.context import OPERATOR, run
from kg.ops import changes as change_ops
from kg.ops import nodes as node_ops
from kg.ops.branches import create_branch
from tests.api.feed_server import live_server, read_events
from tests.api.test_nodes import assert_error

BASE = "/api/repos/acme"
NODES = f"{BASE}/workspaces/knowledge/nodes"


def put(client, path, branch="main", **extra):
    r = client.put(f"{NODES}{path}", params={"branch": branch},
                   json={"node_type": "kb:Doc", "properties": {"title": path}, **extra})
    assert r.status_code in (200, 201), r.text
    return r.json()


def all_pages(client, **params) -> tuple[list[dict], str]:
    events, after = [], params.pop("after", None)
    while True:
        r = client.get(f"{BASE}/changes", params={**params, **({"after": after} if after else {})})
        assert r.status_code == 200, r.text
        page = r.json()
        events += page["events"]
        after = page["next_after"]
        if not page["has_more"]:
            return events, after


def test_the_json_page_lists_revisions_and_branch_events_in_order_with_a_cursor(client, repo):
    put(client, "/a", message="first")
    assert client.post(f"{BASE}/branches", json={"name": "feature/x"}).status_code == 201
    put(client, "/b", branch="feature/x")
    r = client.post(f"{BASE}/relations", json={"from": "knowledge:/a", "to": "knowledge:/b", "type": "cites"},
                    params={"branch": "feature/x"})
    assert r.status_code == 201, r.text
    assert client.post(f"{BASE}/branches/feature/x/merge", json={}).status_code == 200

    page = client.get(f"{BASE}/changes", params={"format": "json"}).json()
    assert [(e["type"], e["revision"], e["branch"]) for e in page["events"]] == [
        ("revision", 1, "main"), ("branch.created", 1, "feature/x"), ("revision", 2, "feature/x"),
        ("revision", 3, "feature/x"), ("merge", 4, "main")]
    assert [e["id"] for e in page["events"]] == ["1.0", "1.1", "2.1", "3.1", "4.1"]
    first, _, _, rel, merged = page["events"]
    assert first["message"] == "first" and first["changes"] == [
        {"kind": "node", "op": "put", "workspace": "knowledge", "path": "/a"}]
    assert rel["changes"] == [{"kind": "relation", "op": "put", "from": "knowledge:/a", "type": "cites",
                               "to": "knowledge:/b"}]
    assert merged["merge"] == {"branch": "feature/x", "revision": 3}
    assert merged["changes"] == [{"kind": "node", "op": "put", "workspace": "knowledge", "path": "/b"},
                                 {"kind": "relation", "op": "put", "from": "knowledge:/a", "type": "cites",
                                  "to": "knowledge:/b"}]
    assert page["next_after"] == "4.1" and page["has_more"] is False

    # Pages of two walk the same events; a plain revision is a cursor too.
    paged, after = all_pages(client, limit=2)
    assert paged == page["events"] and after == "4.1"
    assert [e["id"] for e in client.get(f"{BASE}/changes", params={"after": "2"}).json()["events"]] == [
        "3.1", "4.1"]
    # One branch only.
    only = client.get(f"{BASE}/changes", params={"branch": "main"}).json()["events"]
    assert [e["revision"] for e in only] == [1, 4]

    # A deleted branch: an event; its revisions go with it (the merge still names it).
    assert client.delete(f"{BASE}/branches/feature/x").status_code == 204
    tail = client.get(f"{BASE}/changes", params={"after": "4.1"}).json()
    assert [(e["id"], e["type"], e["branch"]) for e in tail["events"]] == [("4.3", "branch.deleted", "feature/x")]
    replay = client.get(f"{BASE}/changes").json()["events"]
    assert [e["id"] for e in replay] == ["1.0", "1.1", "4.1", "4.3"]
    assert replay[2]["merge"] == {"branch": "feature/x", "revision": 3}
    # Nothing new: an empty page whose cursor stays.
    assert client.get(f"{BASE}/changes", params={"after": "4.3"}).json() == {
        "events": [], "next_after": "4.3", "has_more": False}


def test_reset_is_an_event(client, repo):
    assert client.post(f"{BASE}/branches", json={"name": "f"}).status_code == 201
    put(client, "/x", branch="f")
    before = client.get(f"{BASE}/changes").json()["events"]
    assert [(e["id"], e["type"]) for e in before] == [("0.1", "branch.created"), ("1.1", "revision")]
    assert client.post(f"{BASE}/branches/f/reset").status_code == 200
    events = client.get(f"{BASE}/changes", params={"after": "1.1"}).json()["events"]
    assert [(e["id"], e["type"], e["branch"]) for e in events] == [("1.2", "branch.reset", "f")]
    # A plain revision counts the branch events up to it as seen.
    assert client.get(f"{BASE}/changes", params={"after": "1"}).json()["events"] == []


def test_a_cursor_past_the_32_bit_ids_is_past_everything(client, repo):
    """The document allows twelve digits; ids are 32-bit columns (a 500 on PostgreSQL before)."""
    page = client.get(f"{BASE}/changes", params={"after": "3000000000.3000000000"})
    assert page.status_code == 200 and page.json()["events"] == [] and page.json()["has_more"] is False


@pytest.mark.parametrize("after", ["x", "1.2.3", "-1", "1.", ".1"])
def test_a_malformed_cursor_is_a_422_in_the_error_shape(client, repo, after):
    assert_error(client.get(f"{BASE}/changes", params={"after": after}), 422, "invalid_input")
    assert_error(client.get(f"{BASE}/changes", headers={"Last-Event-ID": after,
                                                         "Accept": "text/event-stream"}), 422, "invalid_input")


def test_an_unknown_repository_is_a_404_a_branch_not_created_yet_is_followed(client, repo):
    assert_error(client.get("/api/repos/nope/changes"), 404, "not_found")
    page = client.get(f"{BASE}/changes", params={"branch": "later"}).json()
    assert page == {"events": [], "next_after": "0.0", "has_more": False}
    assert client.post(f"{BASE}/branches", json={"name": "later"}).status_code == 201
    put(client, "/z", branch="later")
    put(client, "/y")
    page = client.get(f"{BASE}/changes", params={"branch": "later", "after": page["next_after"]}).json()
    assert [(e["type"], e["revision"]) for e in page["events"]] == [("branch.created", 0), ("revision", 1)]


def test_eight_concurrent_writers_lose_and_repeat_nothing(services, repo):
    """8 threads write 6 revisions each on 4 branches while a reader follows the feed page by
    page: it reads every revision once, in order, each on its branch."""
    branches = ["main", "b1", "b2", "b3"]
    for name in branches[1:]:
        run(services, OPERATOR, create_branch, "acme", name=name)
    start = change_ops.changes(services, OPERATOR, "acme").next_after
    written: list[tuple[int, str]] = []
    lock = threading.Lock()
    done = threading.Event()
    errors: list[BaseException] = []

    def writer(i: int) -> None:
        try:
            for j in range(6):
                branch = branches[(i + j) % len(branches)]
                node, _ = run(services, OPERATOR, node_ops.put_node, "acme", branch, "knowledge", f"/w{i}-n{j}",
                              node_type="kb:Doc", properties={"i": i, "j": j})
                with lock:
                    written.append((node.revision, branch))
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    seen: list[dict] = []

    def reader() -> None:
        after = start
        while True:
            finished = done.is_set()
            page = change_ops.changes(services, OPERATOR, "acme", after=after, limit=5)
            seen.extend(e.model_dump(mode="json", by_alias=True, exclude_unset=True) for e in page.events)
            after = page.next_after
            if finished and not page.has_more:
                return

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
    follow = threading.Thread(target=reader)
    follow.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done.set()
    follow.join()
    assert not errors, errors
    assert len(written) == 48
    assert [(e["revision"], e["branch"]) for e in seen] == sorted(written)
    assert [e["id"] for e in seen] == sorted({e["id"] for e in seen}, key=lambda c: tuple(map(int, c.split("."))))
    for branch in branches:
        mine = [e["revision"] for e in seen if e["branch"] == branch]
        assert mine == sorted(r for r, b in written if b == branch)


def test_the_stream_follows_new_writes_and_resumes_from_last_event_id(services, repo):
    services.settings.changes_poll_s = 0.05
    def put_(path: str) -> None:
        run(services, OPERATOR, node_ops.put_node, "acme", "main", "knowledge", path, node_type="kb:Doc",
            properties={})

    for i in range(3):
        put_(f"/s{i}")
    with live_server(create_app(services=services)) as base:
        url = f"{base}{BASE}/changes"
        got: list[dict] = []
        reading = threading.Thread(target=lambda: got.extend(read_events(url, 6)))
        reading.start()
        for i in range(3, 6):  # written while the stream is open: followed
            put_(f"/s{i}")
        reading.join(60)
        assert [e["data"]["revision"] for e in got] == [1, 2, 3, 4, 5, 6]
        assert [e["id"] for e in got] == [e["data"]["id"] for e in got] == [f"{n}.0" for n in range(1, 7)]
        assert {e["event"] for e in got} == {"revision"}
        # A reconnect with Last-Event-ID resumes exactly after it.
        put_("/s6")
        again = read_events(url, 4, headers={"Last-Event-ID": got[2]["id"]})
        assert [e["data"]["revision"] for e in again] == [4, 5, 6, 7]
        # ?after= too, and format=sse streams whatever Accept says.
        tail = read_events(url, 1, params={"after": "6", "format": "sse"})
        assert [e["data"]["revision"] for e in tail] == [7]
        # The JSON form from the live server as well.
        assert httpx.get(url, params={"after": "6.0"}).json()["events"][0]["revision"] == 7


def test_streams_per_key_are_bounded_with_a_429(services, repo):
    services.settings.changes_max_streams = 1
    services.settings.changes_poll_s = 0.05
    with live_server(create_app(services=services)) as base:
        url = f"{base}{BASE}/changes"
        with httpx.stream("GET", url, headers={"Accept": "text/event-stream"}, timeout=30) as first:
            assert first.status_code == 200
            second = httpx.get(url, headers={"Accept": "text/event-stream"}, timeout=30)
            assert_error(second, 429, "rate_limited")
            assert second.json()["error"]["details"] == {"limit": 1}
        # The first one closed: its slot is free again (the server notices within a poll).
        for _ in range(100):
            third = httpx.get(url, params={"format": "json"}, timeout=30)
            assert third.status_code == 200
            with httpx.stream("GET", url, headers={"Accept": "text/event-stream"}, timeout=30) as again:
                if again.status_code == 200:
                    break
            threading.Event().wait(0.05)
        else:
            pytest.fail("the closed stream's slot was never given back")
