"""Input that once gave a 500 or a partial write (found by trying to break kg as a new user)."""

from __future__ import annotations

import pytest

from tests.api.test_nodes import assert_error, put

NODES = "/api/repos/acme/workspaces/knowledge/nodes"


def raw(client, method, url, text):
    return client.request(method, url, content=text.encode(), headers={"content-type": "application/json"})


@pytest.mark.parametrize("body", ['{"node_type": "t", "properties": {"k": "\\ud800"}}',
                                  '{"node_type": "t", "properties": {"\\udfff": 1}}',
                                  '{"node_type": "\\ud800", "properties": {}}',
                                  '{"node_type": "t", "properties": {"content": "a\\u0000b"}}',
                                  '{"node_type": "t", "properties": {}, "message": "m\\u0000"}'])
def test_unstorable_text_is_refused_and_nothing_is_written(client, repo, body):
    assert_error(raw(client, "PUT", f"{NODES}/x", body), 422)
    assert client.get(f"{NODES}/x").status_code == 404
    assert client.get("/api/repos/acme").json()["head_revision"] == 0


@pytest.mark.parametrize("body", ['{"from": "knowledge:/a", "to": "knowledge:/b", "type": "t", "weight": NaN}',
                                  '{"from": "knowledge:/a", "to": "knowledge:/b", "type": "t", "weight": Infinity}'])
def test_non_json_constants_are_400(client, repo, body):
    put(client, "/a")
    put(client, "/b")
    assert_error(raw(client, "POST", "/api/repos/acme/relations", body), 400, "malformed")


def test_surrogates_and_nul_in_paths_and_queries(client, repo):
    # an encoded surrogate is not UTF-8: refused, not decoded to U+FFFD and looked up
    assert_error(client.get(f"{NODES}/a%ED%A0%80"), 422, "invalid_input")
    assert_error(client.get(f"{NODES}/a%00b"), 422)
    assert_error(client.get(f"{NODES}/a", params={"branch": "x\x00"}), 422)
    # a newline as any other control character: the path check's 422, not a 404 of no route
    # (Starlette's path convertor, ``.*``, did not match across it)
    for method in ("GET", "PUT", "DELETE"):
        r = client.request(method, f"{NODES}/a%0Ab", json={"node_type": "t", "properties": {}})
        assert_error(r, 422, "invalid_input")
        assert "control characters" in r.json()["error"]["message"]


def test_merge_value_resolution_is_validated(client, repo):
    put(client, "/a", {"title": "T"})
    client.post("/api/repos/acme/branches", json={"name": "b"})
    put(client, "/a", {"title": "theirs"}, branch="b")
    put(client, "/a", {"title": "ours"})
    r = client.post("/api/repos/acme/branches/b/merge", json={"resolutions": [
        {"workspace": "knowledge", "path": "/a", "take": "value", "value": {"x": {"nested": [1, 2**70]}}}]})
    assert r.status_code in (200, 422)
    bad = raw(client, "POST", "/api/repos/acme/branches/b/merge",
              '{"resolutions": [{"workspace": "knowledge", "path": "/a", "take": "value", "value": {"x": NaN}}]}')
    assert_error(bad, 400)


def test_huge_revisions_are_422_not_500(client, repo):
    assert_error(client.get("/api/repos/acme/log", params={"before": 99999999999999999999}), 422)
    assert_error(client.get(f"{NODES}/a", params={"at_revision": 2**40}), 422)


def test_loose_types_are_refused(client, repo):
    assert_error(client.post("/api/repos/acme/branches", json={"name": "f1", "at_revision": True}), 422)
    assert_error(client.post("/api/repos/acme/search", json={"query": "x", "k": "3"}), 422)
    assert_error(client.post("/api/repos/acme/search", json={"query": "x", "k": True}), 422)


def test_batch_items_are_strict(client, repo):
    put(client, "/p")
    put(client, "/p/c")
    assert_error(client.post("/api/repos/acme/nodes:batch", json={
        "upserts": [{"workspace": "knowledge", "path": "/typo", "propertes": {"a": 1}}]}), 422)
    assert_error(client.post("/api/repos/acme/nodes:batch", json={
        "deletes": [{"workspace": "knowledge", "path": "/p", "recursive": "false"}]}), 422)
    assert client.get(f"{NODES}/p/c").status_code == 200


def test_branch_names_that_clash_with_routes(client, repo):
    for name in ("x/diff", "x/merge", "a/b/reset"):
        assert_error(client.post("/api/repos/acme/branches", json={"name": name}), 422)
    assert client.post("/api/repos/acme/branches", json={"name": "diff"}).status_code == 201


def test_rag_node_refuses_before_writing(client, services):
    config = {"embeddingModel": "fake:hash-64", "collectionName": "kcol", "chunkSize": 8, "chunkOverlap": 2,
              "topK": 5000, "weaviateUrl": "embedded"}
    text = 'q\n\n### File name "k.txt"\nsome words here'
    assert_error(client.post("/api/rag", json={"config": config, "input": text}), 422)
    assert_error(client.post("/api/rag", params={"branch": "nope"},
                             json={"config": {**config, "topK": 3}, "input": text}), 404)
    assert client.get("/api/repos/rag").status_code == 404
    ok = client.post("/api/rag", json={"config": {**config, "topK": 3}, "input": text})
    assert ok.status_code == 200 and ok.json()["ingestion"]["inserted"] == ["k.txt"]


def test_405_allow_names_every_method_of_the_path(client, repo):
    # Found by schemathesis (allow_header_conformance): Starlette named only the methods of the
    # first route matching the path (`OPTIONS /api/repos` -> `Allow: POST`, GET missing).
    r = client.options("/api/repos")
    assert_error(r, 405, "method_not_allowed")
    assert r.headers["allow"] == "GET, POST"
    r = client.post(f"{NODES}/a")
    assert_error(r, 405, "method_not_allowed")
    assert r.headers["allow"] == "GET, PUT, PATCH, DELETE"
    r = client.delete("/health")
    assert_error(r, 405)
    assert r.headers["allow"] == "GET"


@pytest.mark.parametrize("body", [b'{"node_type": "t", "properties": {"k": "caf\xe9"}}',  # Latin-1, not UTF-8
                                  b'{"properties": {"a": ' + b"[" * 5000 + b"]" * 5000 + b"}}"])
def test_unparseable_bodies_are_400_malformed_and_write_nothing(client, repo, body):
    # FastAPI's own "error parsing the body" 400 came out with the generic code "http_error".
    r = client.put(f"{NODES}/x", content=body, headers={"content-type": "application/json"})
    assert_error(r, 400, "malformed")
    assert client.get(f"{NODES}/x").status_code == 404
    assert client.get("/api/repos/acme").json()["head_revision"] == 0


def test_a_path_that_is_not_utf8_once_decoded_is_refused(client, repo):
    """Regression: PUT .../nodes/%ff%fe stored a node at "/\ufffd\ufffd" (the server decodes
    with replacement characters), so different byte sequences met on one node."""
    r = client.put("/api/repos/acme/workspaces/knowledge/nodes/%ff%fe", json={"properties": {}})
    assert_error(r, 422, "invalid_input")
    assert "UTF-8" in r.json()["error"]["message"]
    listed = client.get("/api/repos/acme/workspaces/knowledge/nodes", params={"prefix": "/"}).json()["nodes"]
    assert listed == []
    ok = client.put("/api/repos/acme/workspaces/knowledge/nodes/caf%C3%A9", json={"properties": {}})
    assert ok.status_code == 201 and ok.json()["path"] == "/café"


@pytest.mark.parametrize("content_type", ["", "text/plain", "application/x-www-form-urlencoded"])
def test_a_body_not_sent_as_json_says_which_content_type_to_send(client, content_type):
    r = client.post("/api/repos", content=b'{"name": "x"}', headers={"content-type": content_type})
    assert_error(r, 400, "malformed")
    error = r.json()["error"]
    assert "Content-Type: application/json" in error["message"]
    assert error["details"]["content_type"] == (content_type or None)
    assert client.get("/api/repos/x").status_code == 404  # nothing was created


def test_a_json_body_that_is_not_an_object_keeps_its_message(client):
    r = client.post("/api/repos", content=b"[1]", headers={"content-type": "application/json; charset=utf-8"})
    assert_error(r, 400, "malformed")
    assert r.json()["error"]["message"].startswith("the request body must be a JSON object")


# --- request size and the event loop (issue 12, "one request stalls the server") -------------


async def _asgi_post(app, body_chunks, *, content_length=None, path="/api/repos", query=b"",
                     content_type=b"application/json", headers=()):
    """POST ``body_chunks`` to ``app`` over raw ASGI; answer (status, JSON body, chunks read)."""
    import json as _json

    reads = 0

    async def receive():
        nonlocal reads
        if reads < len(body_chunks):
            reads += 1
            return {"type": "http.request", "body": body_chunks[reads - 1], "more_body": reads < len(body_chunks)}
        return {"type": "http.disconnect"}

    sent = []

    async def send(message):
        sent.append(message)

    headers = [(b"host", b"localhost"), (b"content-type", content_type), *headers]
    if content_length is not None:
        headers.append((b"content-length", str(content_length).encode()))
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
             "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": query,
             "root_path": "", "headers": headers, "client": ("127.0.0.1", 1), "server": ("testserver", 80)}
    await app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    text = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], _json.loads(text), reads


def _small_limit_app(services, monkeypatch, limit=1000):
    from api.app import create_app

    monkeypatch.setattr(services.settings, "max_body_bytes", limit)
    return create_app(services=services)


def _check_413(status, body):
    assert status == 413, body
    assert set(body["error"]) == {"code", "message", "details"}
    assert body["error"]["code"] == "too_large"
    assert "KG_MAX_BODY_BYTES" in body["error"]["message"]


def test_a_body_over_the_limit_is_413_from_content_length_before_it_is_read(services, monkeypatch):
    import asyncio

    app = _small_limit_app(services, monkeypatch)
    chunks = [b"[" + b"1," * 499 + b"1]"] + [b" " * 1000] * 4  # 5000 bytes in all
    status, body, reads = asyncio.run(_asgi_post(app, chunks, content_length=5000))
    _check_413(status, body)
    assert body["error"]["details"]["max_body_bytes"] == 1000
    assert reads == 0  # refused from the header alone
    status, _, reads = asyncio.run(_asgi_post(app, [b'{"name": "ok"}'], content_length=14))
    assert status == 201 and reads == 1  # under the limit: served


def test_a_streamed_body_over_the_limit_is_413_once_it_passes_the_limit(services, monkeypatch):
    import asyncio

    app = _small_limit_app(services, monkeypatch)
    chunks = [b" " * 400] * 20  # 8000 bytes, no Content-Length (chunked)
    status, body, reads = asyncio.run(_asgi_post(app, chunks))
    _check_413(status, body)
    assert reads == 3  # 1200 bytes read, the rest never
    status, _, _ = asyncio.run(_asgi_post(app, [b'{"name": ', b'"streamed"}']))
    assert status == 201


def test_health_answers_while_a_large_body_is_parsed(services, monkeypatch):
    """The body's JSON is parsed and checked off the event loop: the check below waits for
    /health to answer, which it can only do while the loop is free."""
    import asyncio
    import threading

    import httpx

    import api.guard as guard
    from api.app import create_app

    app = create_app(services=services)
    walk_started, health_answered = threading.Event(), threading.Event()
    seen: list[bool] = []
    real_walk = guard.check_json

    def waiting_walk(value, where="the request body", depth=0):
        if depth == 0:
            walk_started.set()
            seen.append(health_answered.wait(10))
        real_walk(value, where, depth)

    monkeypatch.setattr(guard, "check_json", waiting_walk)
    big = b'{"name": "big", "pad": [' + b",".join([b'"xxxxxxxx"'] * 200_000) + b"]}"  # ~2.2 MB

    async def main():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost") as c:
            post = asyncio.create_task(c.post("/api/repos", content=big,
                                              headers={"content-type": "application/json"}))
            for _ in range(2000):  # until the check runs (on the loop, this waits for its end)
                if walk_started.is_set():
                    break
                await asyncio.sleep(0.01)
            health = await c.get("/health")
            health_answered.set()
            return health, await post

    health, post = asyncio.run(main())
    assert health.status_code == 200 and health.json()["status"] == "ok"
    assert seen == [True]  # /health answered while the body was being checked
    assert_error(post, 422)  # the body itself: an unknown field, answered as before


def test_a_route_takes_the_body_as_the_guard_parsed_it(client, repo, monkeypatch):
    """The body is parsed once, in the guard's worker thread, not again on the event loop."""
    from types import SimpleNamespace

    import starlette.requests

    def no_second_parse(*args, **kwargs):
        raise AssertionError("the body was parsed again on the event loop")

    monkeypatch.setattr(starlette.requests, "json", SimpleNamespace(loads=no_second_parse))
    assert put(client, "/parsed-once").status_code == 201


def test_a_name_longer_than_its_column_is_422_not_500(client):
    """Found by the positive-data fuzzing once the document gave names their bound: a
    repository or workspace name of 129 to 255 characters passed the check (255) and overflowed
    its 128-character column on PostgreSQL (a 500)."""
    assert_error(client.post("/api/repos", json={"name": "r" * 129}), 422, "invalid_input")
    assert client.post("/api/repos", json={"name": "r" * 128}).status_code == 201
    assert_error(client.post(f"/api/repos/{'r' * 128}/workspaces", json={"name": "w" * 129}), 422, "invalid_input")
    assert client.post(f"/api/repos/{'r' * 128}/workspaces", json={"name": "w" * 128}).status_code == 201
