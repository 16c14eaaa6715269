"""``POST /api/repos/{repo}/import``: a file of records (what ``GET /export`` and ``kg export``
write) imported over HTTP as ``kg import`` imports it: NDJSON and Parquet round trips, a bad
record refused with its line and nothing written, the body's own limit (``KG_MAX_IMPORT_BYTES``)
from its ``Content-Length`` and as it streams, the received file gone once answered, keys'
grants, batches. On SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
from pathlib import Path

import pytest
from pydantic import SecretStr

from kg.access import make_grant
from kg.context import OPERATOR, run
from kg.errors import InvalidInput
from kg.ops import imports
from kg.ops import keys as key_ops
from tests.api.test_access import PEPPER, bearer
from tests.api.test_hostile_input import _asgi_post
from tests.api.test_nodes import assert_error

NODES = "/api/repos/acme/workspaces/{ws}/nodes"


def put(client, ws: str, path: str, title: str) -> None:
    r = client.put(f"{NODES.format(ws=ws)}{path}",
                   json={"node_type": "kb:Doc", "properties": {"title": title, "content": f"{title} harbour survey."}})
    assert r.status_code == 201, r.text


@pytest.fixture
def source(client, repo):
    """acme: /a and /b in ``knowledge``, /c in ``notes``, a relation a -> b, chunks embedded."""
    assert client.post("/api/repos/acme/workspaces", json={"name": "notes"}).status_code == 201
    put(client, "knowledge", "/a", "Alpha")
    put(client, "knowledge", "/b", "Beta")
    put(client, "notes", "/c", "Gamma")
    r = client.post("/api/repos/acme/relations", json={"from": "knowledge:/a", "to": "knowledge:/b", "type": "cites"})
    assert r.status_code == 201, r.text
    return "acme"


def records(body: bytes) -> list[dict]:
    """The records of an NDJSON export but its header (which names where it was read)."""
    return [json.loads(line) for line in body.decode("utf-8").splitlines()][1:]


def content(rows: list[dict]) -> list[dict]:
    """Records without their times (an import stamps nodes it writes with its own)."""
    return [{k: v for k, v in r.items() if k not in ("created_at", "updated_at")} for r in rows]


def uploads(services) -> list[str]:
    """The files of the uploads' folder this process holds open (a received file has no name
    there: it is a temporary file, unlinked as it is made), and any that has a name."""
    folder = str(services.settings.data_dir / "uploads")
    held = []
    for fd in Path("/proc/self/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith(folder + "/"):
                held.append(target)
    named = sorted(p.name for p in Path(folder).iterdir()) if Path(folder).exists() else []
    return sorted(held) + named


def test_an_ndjson_export_imports_into_a_new_repository_as_kg_import_does(client, services, source):
    exported = client.get("/api/repos/acme/export", params={"with_chunks": "true"})
    assert exported.status_code == 200, exported.text
    r = client.post("/api/repos/copy/import", content=exported.content,
                    headers={"content-type": "application/x-ndjson"}, params={"message": "copied over HTTP"})
    assert r.status_code == 200, r.text
    report = r.json()
    assert (report["repo"], report["branch"], report["nodes"], report["relations"]) == ("copy", "main", 3, 1)
    assert report["created_repository"] is True and report["revisions"] == [report["revision"]]
    assert report["chunks"] > 0 and report["queued"] == 0  # the vectors came with the file
    again = client.get("/api/repos/copy/export", params={"with_chunks": "true"})
    assert content(records(again.content)) == content(records(exported.content))
    log = client.get("/api/repos/copy/log").json()
    assert log["revisions"][0]["message"] == "copied over HTTP"
    found = client.post("/api/repos/copy/search", json={"query": "Gamma harbour survey", "k": 3, "mode": "fulltext"})
    assert found.status_code == 200 and found.json()["results"][0]["path"] == "/c"
    # the same file again writes nothing: every record is held alike
    second = client.post("/api/repos/copy/import", content=exported.content).json()
    assert second["revision"] is None and second["unchanged"] == {"nodes": 3, "relations": 1}
    assert uploads(services) == []  # the received file is gone once answered


def test_a_parquet_export_imports_as_the_ndjson_one(client, services, source):
    as_parquet = client.get("/api/repos/acme/export", params={"with_chunks": "true", "format": "parquet"})
    assert as_parquet.status_code == 200, as_parquet.text
    r = client.post("/api/repos/columns/import", params={"format": "parquet"}, content=as_parquet.content,
                    headers={"content-type": "application/vnd.apache.parquet"})
    assert r.status_code == 200, r.text
    assert (r.json()["nodes"], r.json()["relations"]) == (3, 1)
    original = client.get("/api/repos/acme/export", params={"with_chunks": "true"}).content
    imported = client.get("/api/repos/columns/export", params={"with_chunks": "true"}).content
    assert content(records(imported)) == content(records(original))
    assert uploads(services) == []


def test_the_route_and_the_library_write_the_same_revision(client, services, source):
    """The route is a thin adapter over kg.ops.imports.import_file: the same file gives the same
    records in a repository imported by the library."""
    exported = client.get("/api/repos/acme/export", params={"with_chunks": "true"}).content
    imports.import_file(services, OPERATOR, "by-library", io.BytesIO(exported))
    assert client.post("/api/repos/by-http/import", content=exported).status_code == 200
    by_library = client.get("/api/repos/by-library/export", params={"with_chunks": "true"}).content
    by_http = client.get("/api/repos/by-http/export", params={"with_chunks": "true"}).content
    assert content(records(by_http)) == content(records(by_library))


def test_a_bad_record_is_refused_with_its_line_and_nothing_is_written(client, services, source):
    lines = client.get("/api/repos/acme/export").content.decode("utf-8").splitlines()
    lines[2] = lines[2].replace('"path":"/b"', '"path":"no-slash"')
    assert lines[2] != client.get("/api/repos/acme/export").content.decode("utf-8").splitlines()[2]
    head = client.get("/api/repos/acme/branches/main").json()["head_revision"]
    r = client.post("/api/repos/acme/import", content="\n".join(lines).encode())
    assert_error(r, 422, "invalid_input")
    assert r.json()["error"]["message"].startswith("line 3: ")
    assert r.json()["error"]["details"]["line"] == 3
    assert client.get("/api/repos/acme/branches/main").json()["head_revision"] == head
    assert_error(client.post("/api/repos/fresh/import", content="\n".join(lines).encode()), 422, "invalid_input")
    assert_error(client.get("/api/repos/fresh"), 404, "not_found")  # not created either
    assert uploads(services) == []


@pytest.mark.parametrize("body, says", [
    (b"", "line 1: the file holds no header record"),
    (b"PAR1 and then anything", "the file is a Parquet file: import it with format parquet"),
    (b"\xff\xfe not text", "line 1: not JSON"),
])
def test_a_body_that_is_no_ndjson_file_is_refused_in_one_line(client, repo, body, says):
    r = client.post("/api/repos/acme/import", content=body)
    assert_error(r, 422, "invalid_input")
    assert r.json()["error"]["message"].startswith(says)


def test_a_body_that_is_no_parquet_file_is_refused(client, repo):
    r = client.post("/api/repos/acme/import", params={"format": "parquet"}, content=b'{"record": "header"}\n')
    assert_error(r, 422, "invalid_input")
    assert r.json()["error"]["message"].startswith("not a Parquet file")


def test_a_damaged_parquet_file_is_refused_never_a_500(client, source):
    """Bytes changed anywhere in a real kg-parquet file: always a 422 naming the file, a row or a
    field, nothing written."""
    good = client.get("/api/repos/acme/export", params={"with_chunks": "true", "format": "parquet"}).content
    for at in range(4, len(good) - 4, max(1, len(good) // 40)):
        damaged = good[:at] + bytes(b ^ 0x5A for b in good[at:at + 16]) + good[at + 16:]
        r = client.post(f"/api/repos/damaged{at}/import", params={"format": "parquet"}, content=damaged)
        assert r.status_code in (200, 422), (at, r.status_code, r.text)
        if r.status_code == 422:
            assert_error(r, 422, "invalid_input")
            assert_error(client.get(f"/api/repos/damaged{at}"), 404, "not_found")


def test_batches_write_a_revision_each(client, source):
    exported = client.get("/api/repos/acme/export").content
    r = client.post("/api/repos/batched/import", params={"batch_size": 2}, content=exported)
    assert r.status_code == 200, r.text
    assert len(r.json()["revisions"]) == 2  # 3 nodes then 1 relation, 2 records a revision
    assert_error(client.post("/api/repos/batched/import", params={"batch_size": 0}, content=exported),
                 422, "invalid_input")


def test_an_unknown_branch_is_404_and_a_branch_import_stays_on_it(client, source):
    exported = client.get("/api/repos/acme/export").content
    assert_error(client.post("/api/repos/acme/import", params={"branch": "agent/none"}, content=exported),
                 404, "not_found")
    assert client.post("/api/repos/acme/branches", json={"name": "agent/import"}).status_code == 201
    assert client.post("/api/repos/target/import", content=exported).status_code == 200
    assert client.post("/api/repos/target/branches", json={"name": "agent/import"}).status_code == 201
    changed = exported.decode("utf-8").replace("Gamma", "Delta").encode()
    r = client.post("/api/repos/target/import", params={"branch": "agent/import"}, content=changed)
    assert r.status_code == 200 and r.json()["nodes"] == 1, r.text
    on_main = client.get("/api/repos/target/workspaces/notes/nodes/c").json()
    on_branch = client.get("/api/repos/target/workspaces/notes/nodes/c", params={"branch": "agent/import"}).json()
    assert (on_main["properties"]["title"], on_branch["properties"]["title"]) == ("Gamma", "Delta")


def test_an_unknown_format_or_query_parameter_is_422(client, repo):
    assert_error(client.post("/api/repos/acme/import", params={"format": "csv"}, content=b"x"), 422, "invalid_input")
    assert_error(client.post("/api/repos/acme/import", params={"repo": "other"}, content=b"x"), 422, "invalid_input")
    with pytest.raises(InvalidInput, match="format must be one of ndjson, parquet"):
        imports.import_file(None, OPERATOR, "acme", io.BytesIO(b""), format="csv")  # type: ignore[arg-type]


def test_with_auth_a_key_writes_only_where_its_grants_allow(client, services, source, monkeypatch):
    exported = client.get("/api/repos/acme/export").content
    assert client.post("/api/repos/acme/branches", json={"name": "agent/w"}).status_code == 201
    monkeypatch.setattr(services.settings, "key_pepper", SecretStr(PEPPER))
    monkeypatch.setattr(services.settings, "auth", True)
    admin = bearer(run(services, OPERATOR, key_ops.create_key, name="admin", grants=[], admin=True).key)

    def key(name: str, grant: dict) -> dict[str, str]:
        made = client.post("/api/keys", headers=admin, json={"name": name, "grants": [grant]})
        assert made.status_code == 201, made.text
        return bearer(made.json()["key"])

    reader = key("reader", {"repo": "acme", "actions": ["read"]})
    writer = key("writer", {"repo": "acme", "branches": ["agent/*"], "actions": ["read", "write"]})
    changed = exported.decode("utf-8").replace("Alpha", "Alef").encode()
    on_w = {"branch": "agent/w"}
    assert_error(client.post("/api/repos/acme/import", params=on_w, content=changed), 401, "unauthenticated")
    assert_error(client.post("/api/repos/acme/import", params=on_w, headers=reader, content=changed),
                 403, "forbidden")
    assert_error(client.post("/api/repos/acme/import", headers=writer, content=changed), 404, "not_found")
    assert_error(client.post("/api/repos/elsewhere/import", headers=writer, content=changed), 404, "not_found")
    node = client.get("/api/repos/acme/workspaces/knowledge/nodes/a", params=on_w, headers=admin).json()
    assert node["properties"]["title"] == "Alpha"  # nothing written by the refusals
    assert_error(client.get("/api/repos/elsewhere", headers=admin), 404, "not_found")
    r = client.post("/api/repos/acme/import", params=on_w, headers=writer, content=changed)
    assert r.status_code == 200 and r.json()["nodes"] == 1, r.text
    node = client.get("/api/repos/acme/workspaces/knowledge/nodes/a", params=on_w, headers=admin).json()
    assert node["properties"]["title"] == "Alef"


# --- the body's own limit, over raw ASGI (what a server receives) ----------------------------


async def _post(app, chunks, *, content_length=None, path="/api/repos/acme/import", query=b"", headers=()):
    """POST ``chunks`` to ``app`` over raw ASGI as an NDJSON file; answer (status, JSON body, chunks read)."""
    return await _asgi_post(app, chunks, content_length=content_length, path=path, query=query, headers=headers,
                            content_type=b"application/x-ndjson")


def _app(services, monkeypatch, *, import_limit: int, body_limit: int = 1000):
    from api.app import create_app

    monkeypatch.setattr(services.settings, "max_import_bytes", import_limit)
    monkeypatch.setattr(services.settings, "max_body_bytes", body_limit)
    return create_app(services=services)


def _file(client) -> bytes:
    return client.get("/api/repos/acme/export").content


def test_an_import_over_its_limit_is_413_from_content_length_before_it_is_read(client, services, source,
                                                                               monkeypatch):
    exported = _file(client)
    app = _app(services, monkeypatch, import_limit=len(exported) - 1)
    status, body, reads = asyncio.run(_post(app, [exported], content_length=len(exported)))
    assert status == 413 and body["error"]["code"] == "too_large", body
    assert "KG_MAX_IMPORT_BYTES" in body["error"]["message"]
    assert body["error"]["details"] == {"max_import_bytes": len(exported) - 1}
    assert reads == 0
    assert uploads(services) == []


def test_a_streamed_import_over_its_limit_is_413_once_past_it_and_nothing_is_written(client, services, source,
                                                                                      monkeypatch):
    exported = _file(client)
    head = client.get("/api/repos/acme/branches/main").json()["head_revision"]
    app = _app(services, monkeypatch, import_limit=len(exported) - 1)
    parts = [exported[i:i + 100] for i in range(0, len(exported), 100)]
    status, body, reads = asyncio.run(_post(app, parts))  # no Content-Length (chunked)
    assert status == 413 and body["error"]["details"] == {"max_import_bytes": len(exported) - 1}, body
    assert reads == len(parts)  # the part that passes the limit is the last read
    assert client.get("/api/repos/acme/branches/main").json()["head_revision"] == head
    assert uploads(services) == []


def test_an_import_is_bounded_by_its_own_limit_not_the_bodies(client, services, source, monkeypatch):
    """A file far over KG_MAX_BODY_BYTES imports (its bytes go to disk, not to the memory every
    JSON body is held in), streamed in parts; the file is gone after."""
    exported = client.get("/api/repos/acme/export", params={"with_chunks": "true"}).content
    assert len(exported) > 4000
    app = _app(services, monkeypatch, import_limit=len(exported), body_limit=1000)
    parts = [exported[i:i + 700] for i in range(0, len(exported), 700)]
    status, body, reads = asyncio.run(_post(app, parts, path="/api/repos/streamed/import"))
    assert status == 200, body
    assert (body["nodes"], body["relations"], reads) == (3, 1, len(parts))
    assert uploads(services) == []
    # and a JSON body still answers to KG_MAX_BODY_BYTES
    status, body, _ = asyncio.run(_post(app, [b" " * 1500], content_length=1500, path="/api/repos"))
    assert status == 413 and "KG_MAX_BODY_BYTES" in body["error"]["message"]


def test_the_route_reads_the_file_the_guard_received(client, source, monkeypatch):
    """What the route hands the library is the guard's file at its start (not the empty body the
    app is given): a library that saw no file would refuse line 1."""
    seen = []
    real = imports.import_file

    def spy(services, caller, repo, source, **kw):
        seen.append(source.tell())
        return real(services, caller, repo, source, **kw)

    monkeypatch.setattr(imports, "import_file", spy)
    assert client.post("/api/repos/spied/import", content=_file(client)).status_code == 200
    assert seen == [0]


def test_a_file_the_server_cannot_store_is_503_never_a_500(client, services, source, monkeypatch):
    exported = _file(client)
    blocked = services.settings.data_dir / "not-a-folder"
    blocked.parent.mkdir(parents=True, exist_ok=True)
    blocked.write_text("a file where the uploads' folder would be")
    monkeypatch.setattr(services.settings, "data_dir", blocked)
    app = _app(services, monkeypatch, import_limit=len(exported))
    status, body, reads = asyncio.run(_post(app, [exported], content_length=len(exported)))
    assert status == 503 and body["error"]["code"] == "backend_unavailable", body
    assert body["error"]["details"] == {"folder": str(blocked / "uploads")}
    assert reads == 0


def test_files_being_received_share_one_bound_and_a_late_one_is_503_until_they_are_done(client, services, source,
                                                                                     monkeypatch):
    """The files to import a process holds on disk, received or being imported, are bounded in
    all by KG_MAX_IMPORT_BYTES: while one is half received, another that would pass the bound is
    refused from its Content-Length (503, Retry-After) and is taken once the first is done."""
    exported = _file(client)
    app = _app(services, monkeypatch, import_limit=len(exported) + 10)
    half = len(exported) // 2
    resume = asyncio.Event()

    async def first() -> tuple[int, dict, int]:
        reads = 0

        async def receive():
            nonlocal reads
            reads += 1
            if reads == 1:
                return {"type": "http.request", "body": exported[:half], "more_body": True}
            if reads == 2:
                await resume.wait()
                return {"type": "http.request", "body": exported[half:], "more_body": False}
            return {"type": "http.disconnect"}

        sent = []

        async def send(message):
            sent.append(message)

        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
                 "scheme": "http", "path": "/api/repos/first/import", "raw_path": b"/api/repos/first/import",
                 "query_string": b"", "root_path": "", "client": ("127.0.0.1", 1), "server": ("testserver", 80),
                 "headers": [(b"host", b"localhost"), (b"content-length", str(len(exported)).encode())]}
        await app(scope, receive, send)
        start = next(m for m in sent if m["type"] == "http.response.start")
        return start["status"], json.loads(b"".join(m.get("body", b"") for m in sent if "body" in m)), reads

    async def both():
        running = asyncio.create_task(first())
        for _ in range(1000):  # the first file is open and half written
            if uploads(services):
                break
            await asyncio.sleep(0.01)
        assert uploads(services), "the first file was never opened"
        await asyncio.sleep(0.05)
        refused = await _post(app, [exported], content_length=len(exported), path="/api/repos/second/import")
        resume.set()
        done = await running
        taken = await _post(app, [exported], content_length=len(exported), path="/api/repos/second/import")
        return refused, done, taken

    (status, body, reads), (done, _, _), (taken, _, _) = asyncio.run(both())
    assert status == 503 and body["error"]["code"] == "overloaded", body
    assert body["error"]["details"] == {"max_import_bytes": len(exported) + 10} and reads == 0
    assert (done, taken) == (200, 200)
    assert uploads(services) == []


def test_a_key_that_may_write_nowhere_there_sends_no_byte(client, services, source, monkeypatch):
    """With auth on, a key that may write nowhere in the repository is refused from the
    request's head (403 for a repository it sees, 404 for one it does not), before any of the
    file is received; a key that may write somewhere there sends the file and the use case
    decides."""
    exported = _file(client)
    monkeypatch.setattr(services.settings, "key_pepper", SecretStr(PEPPER))
    monkeypatch.setattr(services.settings, "auth", True)
    reader = run(services, OPERATOR, key_ops.create_key, name="reader", grants=[make_grant("acme")]).key
    agent = run(services, OPERATOR, key_ops.create_key, name="agent", grants=[
        make_grant("acme", ["agent/*"], actions=["read", "write"])]).key
    app = _app(services, monkeypatch, import_limit=len(exported))
    parts = [exported[:100], exported[100:]]

    def post(key: str, query: bytes = b"", path: str = "/api/repos/acme/import"):
        return asyncio.run(_post(app, parts, path=path, query=query,
                                 headers=[(b"authorization", f"Bearer {key}".encode())]))

    status, body, reads = post(reader)
    assert (status, body["error"]["code"], reads) == (403, "forbidden", 0), body
    status, body, reads = post(agent)  # it may write on agent/*: the use case refuses main
    assert (status, body["error"]["code"], reads) == (404, "not_found", 2), body
    status, body, reads = post(agent, path="/api/repos/elsewhere/import")
    assert (status, body["error"]["code"], reads) == (404, "not_found", 0), body
    status, body, reads = post(agent, query=b"branch=agent/none")  # may write there: received, then 404
    assert (status, body["error"]["code"], reads) == (404, "not_found", 2), body


def test_a_full_disk_is_503_and_the_file_is_closed(client, services, source, monkeypatch):
    import api.guard as guard

    exported = _file(client)
    opened = []

    def full(*args, **kwargs):
        opened.append(open("/dev/full", "w+b", buffering=0))  # noqa: SIM115 (closed by the guard)
        return opened[-1]

    monkeypatch.setattr(guard.tempfile, "TemporaryFile", full)
    app = _app(services, monkeypatch, import_limit=len(exported))
    status, body, _ = asyncio.run(_post(app, [exported], content_length=len(exported)))
    assert status == 503 and body["error"]["code"] == "backend_unavailable", body
    assert "could not store the file to import" in body["error"]["message"]
    assert len(opened) == 1 and opened[0].closed
