"""``GET /api/repos/{repo}/export``: a branch's content as the file ``kg export`` writes, over HTTP
(the same use case: byte for byte the library's file), at a revision, with chunks, as Parquet, and
under a key's grants. On SQLite and PostgreSQL."""

from __future__ import annotations

import io
import json

import pytest

from kg.context import OPERATOR
from kg.ops import bulk
from kg.ops.bulk_parquet import import_parquet
from tests.api.test_nodes import assert_error

EXPORT = "/api/repos/acme/export"
NODES = "/api/repos/acme/workspaces/{ws}/nodes"


def put(client, ws: str, path: str, title: str, headers=None) -> int:
    r = client.put(f"{NODES.format(ws=ws)}{path}", headers=headers,
                   json={"node_type": "kb:Doc", "properties": {"title": title, "content": f"{title} text."}})
    assert r.status_code == 201, r.text
    return r.json()["revision"]


def records_of(body: bytes) -> list[dict]:
    return [json.loads(line) for line in body.decode("utf-8").splitlines()]


@pytest.fixture
def content(client, repo, services):
    """acme: /a and /b in ``knowledge``, /c in ``notes``, a relation a -> b; the revision after /a."""
    assert client.post("/api/repos/acme/workspaces", json={"name": "notes"}).status_code == 201
    first = put(client, "knowledge", "/a", "Alpha")
    put(client, "knowledge", "/b", "Beta")
    put(client, "notes", "/c", "Gamma")
    r = client.post("/api/repos/acme/relations", json={"from": "knowledge:/a", "to": "knowledge:/b", "type": "cites"})
    assert r.status_code == 201, r.text
    return first


def test_the_export_is_the_file_kg_export_writes(client, services, content):
    r = client.get(EXPORT)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/x-ndjson"
    out = io.StringIO()
    header = bulk.export_ndjson(services, OPERATOR, "acme", "main", out=out)
    assert r.content == out.getvalue().encode("utf-8")
    assert r.headers["x-kg-revision"] == str(header.revision)
    assert r.headers["content-disposition"] == f'attachment; filename="acme-main-r{header.revision}.ndjson"'
    records = records_of(r.content)
    assert records[0]["record"] == "header" and records[0]["counts"] == {"nodes": 3, "relations": 1, "chunks": 0}
    assert [(x["workspace"], x["path"]) for x in records if x["record"] == "node"] == [
        ("knowledge", "/a"), ("knowledge", "/b"), ("notes", "/c")]
    assert [(x["from"], x["type"], x["to"]) for x in records if x["record"] == "relation"] == [
        ("knowledge:/a", "cites", "knowledge:/b")]


def test_an_export_at_a_revision_and_on_a_branch(client, content):
    r = client.get(EXPORT, params={"at_revision": content})
    assert r.status_code == 200, r.text
    assert [x["path"] for x in records_of(r.content) if x["record"] == "node"] == ["/a"]
    assert r.headers["x-kg-revision"] == str(content)
    r = client.post("/api/repos/acme/branches", json={"name": "agent/s1", "from": "main"})
    assert r.status_code == 201, r.text
    r = client.put(f"{NODES.format(ws='knowledge')}/d", params={"branch": "agent/s1"},
                   json={"node_type": "kb:Doc", "properties": {"title": "Delta"}})
    assert r.status_code == 201, r.text
    on_branch = client.get(EXPORT, params={"branch": "agent/s1"})
    assert on_branch.status_code == 200, on_branch.text
    assert on_branch.headers["content-disposition"].endswith('filename="acme-agent_s1-r{}.ndjson"'.format(
        on_branch.headers["x-kg-revision"]))
    assert "/d" in [x["path"] for x in records_of(on_branch.content) if x["record"] == "node"]
    assert "/d" not in [x["path"] for x in records_of(client.get(EXPORT).content) if x["record"] == "node"]


def test_an_export_with_chunks_holds_each_chunk_once(client, services, content):
    r = client.get(EXPORT, params={"with_chunks": "true"})
    assert r.status_code == 200, r.text
    out = io.StringIO()
    bulk.export_ndjson(services, OPERATOR, "acme", "main", out=out, with_chunks=True)
    assert r.content == out.getvalue().encode("utf-8")
    records = records_of(r.content)
    chunks = [x for x in records if x["record"] == "chunk"]
    assert records[0]["with_chunks"] is True and chunks and len(chunks) == records[0]["counts"]["chunks"]


def test_a_parquet_export_is_read_back_by_the_parquet_import(client, services, content):
    r = client.get(EXPORT, params={"format": "parquet"})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/vnd.apache.parquet"
    assert r.content[:4] == b"PAR1" and r.content[-4:] == b"PAR1"
    report = import_parquet(services, OPERATOR, "copy", io.BytesIO(r.content))
    assert (report.nodes, report.relations) == (3, 1)
    again = io.StringIO()
    bulk.export_ndjson(services, OPERATOR, "copy", "main", out=again)
    original = records_of(client.get(EXPORT).content)
    copied = records_of(again.getvalue().encode("utf-8"))
    strip = ("created_at", "updated_at")
    assert [{k: v for k, v in x.items() if k not in strip} for x in copied[1:]] == [
        {k: v for k, v in x.items() if k not in strip} for x in original[1:]]


@pytest.mark.parametrize(("params", "status", "code"), [
    ({"format": "xml"}, 422, "invalid_input"),
    ({"with_chunks": "sometimes"}, 422, "invalid_input"),
    ({"at_revision": "-1"}, 422, "invalid_input"),
    ({"at_revision": "999"}, 404, "not_found"),  # past the head, as every read answers it
    ({"branch": "nope"}, 404, "not_found"),
])
def test_bad_parameters_are_refused_in_the_error_shape(client, content, params, status, code):
    assert_error(client.get(EXPORT, params=params), status, code)


def test_an_unknown_repository_is_a_404(client, content):
    assert_error(client.get("/api/repos/nope/export"), 404, "not_found")
