"""Bulk export and import (``kg.ops.bulk``): a round trip is identical, the rows are those of the
normal write path, chunks with vectors are not embedded again, every bad record is refused with
its line and nothing written, and access is decided as for every write; on both databases."""

from __future__ import annotations

import base64
import io
import json
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest
from sqlalchemy import select

from kg.access import Actor, make_grant
from kg.context import OPERATOR, run
from kg.errors import Forbidden, InvalidInput, NotFound
from kg.indexing.chunks import plan_text
from kg.indexing.config import parse_embedding_config
from kg.ops import branches as branch_ops
from kg.ops import bulk, queries
from kg.ops import relations as relation_ops
from kg.ops import repos as repo_ops
from kg.ops.nodes import GraphWrite, batch, write_graph
from kg.providers.registry import make_embedder
from kg.rag.graph import neighbors
from kg.rag.search import SearchRequest, search_branch
from kg.store.models import (
    Branch,
    Chunk,
    IndexJob,
    NodeVersion,
    Reference,
    RelationVersion,
    Repository,
    Revision,
    Workspace,
)
from kg.store.nodes import node_uid

UPSERTS: list[dict[str, Any]] = [
    {"workspace": "knowledge", "path": "/docs", "node_type": "kb:Folder", "properties": {"title": "Docs"}},
    {"workspace": "knowledge", "path": "/docs/guides", "node_type": "kb:Folder", "properties": {}, "order": 2.0},
    {"workspace": "knowledge", "path": "/docs/api", "node_type": "kb:Folder", "properties": {}, "order": 1.0},
    {"workspace": "knowledge", "path": "/docs/guides/rotate-keys", "node_type": "kb:Article", "order": 1.5,
     "properties": {"title": "Rotate API keys", "content": "Rotate your API keys every ninety days. " * 30,
                    "author": {"kg:ref": "/people/dana", "kg:workspace": "library"}, "status": "published"}},
    {"workspace": "knowledge", "path": "/docs/guides/getting-started", "node_type": "kb:Article", "order": 0.5,
     "properties": {"title": "Getting started", "content": "Install kg, then create a repository.",
                    "tags": ["intro", {"kg:ref": "/docs/api"}]}},
    {"workspace": "knowledge", "path": "/docs/guides/ünïcode é", "node_type": "kb:Article",
     "properties": {"title": "Ünïcode", "nested": {"a": [1, 2.5, None, True]}}},
    {"workspace": "library", "path": "/people", "node_type": "kg:Folder", "properties": {}},
    {"workspace": "library", "path": "/people/dana", "node_type": "kg:Person", "properties": {"name": "Dana Weber"}},
    {"workspace": "library", "path": "/people/lee", "node_type": "kg:Person", "properties": {"name": "Lee"}},
]
RELATIONS: list[dict[str, Any]] = [
    {"from": "knowledge:/docs/guides/rotate-keys", "to": "library:/people/dana", "type": "written_by",
     "weight": 0.9, "properties": {"since": "2024", "confidence": [0.5, 1]}},
    {"from": "knowledge:/docs/guides/rotate-keys", "to": "knowledge:/docs/guides/getting-started",
     "type": "cites", "weight": None, "properties": {}},
    {"from": "library:/people/dana", "to": "library:/people/lee", "type": "knows", "weight": 0.25,
     "properties": {}},
    {"from": "library:/people/lee", "to": "library:/people/dana", "type": "knows", "weight": 1, "properties": {}},
]


def _setup(services, repo: str = "acme") -> None:
    run(services, OPERATOR, repo_ops.create_repository, repo)
    run(services, OPERATOR, repo_ops.create_workspace, repo, "knowledge")
    run(services, OPERATOR, repo_ops.create_workspace, repo, "library", {"chunking": {"chunk_size": 64,
                                                                                    "overlap": 8}})


def _build(services, repo: str = "acme") -> None:
    """Two workspaces, nested and ordered nodes, weighted relations, a branch with its own writes."""
    _setup(services, repo)
    run(services, OPERATOR, batch, repo, "main", upserts=UPSERTS)
    for r in RELATIONS:
        run(services, OPERATOR, relation_ops.relate, repo, "main", r["from"], r["to"], r["type"],
            weight=r["weight"], properties=r["properties"])
    run(services, OPERATOR, branch_ops.create_branch, repo, name="agent/session-1")
    run(services, OPERATOR, batch, repo, "agent/session-1", upserts=[
        {"workspace": "knowledge", "path": "/docs/guides/rotate-keys", "node_type": "kb:Article",
         "properties": {"title": "Rotate API keys (v2)", "content": "Rotate every thirty days."}, "order": 1.5},
        {"workspace": "library", "path": "/people/kim", "node_type": "kg:Person", "properties": {"name": "Kim"}}])
    run(services, OPERATOR, relation_ops.relate, repo, "agent/session-1", "library:/people/kim",
        "library:/people/dana", "knows", weight=0.5)


def _export(services, repo: str, branch: str = "main", **kw: Any) -> list[str]:
    out = io.StringIO()
    header = bulk.export_ndjson(services, OPERATOR, repo, branch, out=out, **kw)
    assert out.getvalue().endswith("\n")
    # the use case answers the header it wrote, as the file has it
    first_line = out.getvalue().split("\n")[0]
    assert header.model_dump(mode="json", by_alias=True, exclude_unset=True) == json.loads(first_line)
    return out.getvalue().splitlines()


def _reads(services, repo: str, branch: str = "main", *, timestamps: bool = True) -> dict[str, Any]:
    """What the use-case layer answers about every node: the node, its children in order, its
    neighbors, what references it (ids and revisions left out: they are the repository's; the
    timestamps too unless ``timestamps``)."""
    dropped = ("id", "revision", "node_id") + (() if timestamps else ("created_at", "updated_at"))

    def strip(node: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in node.items() if k not in dropped}

    out: dict[str, Any] = {}
    for ws in ("knowledge", "library"):
        nodes = queries.list_prefix(services, OPERATOR, repo, branch, ws, "/").as_json()["nodes"]
        for node in nodes:
            address = f"{ws}:{node['path']}"
            out[address] = {
                "node": strip(queries.get_node(services, OPERATOR, repo, branch, ws, node["path"]).as_json()),
                "children": [c.path for c in queries.list_children(services, OPERATOR, repo, branch, ws,
                                                                      node["path"])],
                "neighbors": [strip(n) for n in neighbors(services, OPERATOR, repo, branch, address)["neighbors"]],
                "references": [strip(n.as_json()) for n in queries.references(services, OPERATOR, repo, branch,
                                                                              address).references],
            }
        out[f"{ws}:/"] = [c.path for c in queries.list_children(services, OPERATOR, repo, branch, ws, "/")]
    return out


def _body(lines: list[str]) -> tuple[dict[str, Any], list[str]]:
    header = json.loads(lines[0])
    return {k: v for k, v in header.items() if k not in ("repo", "revision")}, lines[1:]


@pytest.mark.parametrize("branch", ["main", "agent/session-1"])
@pytest.mark.parametrize("with_chunks", [False, True])
def test_a_round_trip_is_identical_and_reads_agree(services, branch, with_chunks):
    _build(services)
    first = _export(services, "acme", branch, with_chunks=with_chunks)
    header = json.loads(first[0])
    assert header["format"] == "kg-ndjson" and header["version"] == 1
    assert (header["repo"], header["branch"]) == ("acme", branch)
    assert [w["name"] for w in header["workspaces"]] == ["knowledge", "library"]
    assert header["workspaces"][1]["embedding"]["chunking"]["chunk_size"] == 64
    kinds = [json.loads(line)["record"] for line in first[1:]]
    assert kinds == sorted(kinds, key=["node", "relation", "chunk"].index)
    assert header["counts"] == {"nodes": kinds.count("node"), "relations": kinds.count("relation"),
                                "chunks": kinds.count("chunk")}
    assert (kinds.count("chunk") > 0) == with_chunks
    report = bulk.import_ndjson(services, OPERATOR, "copy", first)
    assert report.created_repository and len(report.revisions) == 1
    assert report.queued == (0 if with_chunks else report.queued)
    second = _export(services, "copy", "main", with_chunks=with_chunks)
    (old_header, old_body), (new_header, new_body) = _body(first), _body(second)
    assert new_body == old_body
    assert new_header == {**old_header, "branch": "main"}  # imported into main
    assert json.loads(second[0])["revision"] == report.revision
    assert _reads(services, "copy") == _reads(services, "acme", branch)


def test_ordered_children_and_relations_survive(services):
    _build(services)
    bulk.import_ndjson(services, OPERATOR, "copy", _export(services, "acme"))
    children = queries.list_children(services, OPERATOR, "copy", "main", "knowledge", "/docs/guides")
    assert [c.path for c in children] == ["/docs/guides/getting-started", "/docs/guides/rotate-keys",
                                             "/docs/guides/ünïcode é"]
    out = neighbors(services, OPERATOR, "copy", "main", "knowledge:/docs/guides/rotate-keys", direction="OUT")
    assert {(n["path"], n["relation_type"], n["weight"]) for n in out["neighbors"]} == {
        ("/people/dana", "written_by", 0.9), ("/docs/guides/getting-started", "cites", None)}
    edge = next(n for n in out["neighbors"] if n["relation_type"] == "written_by")
    assert edge["properties"] == {"since": "2024", "confidence": [0.5, 1]}


def _rows(services, repo: str) -> dict[str, Any]:
    """Every row a write made in ``repo``, its ids replaced by what they stand for."""
    with services.db.read() as s:
        r = s.scalar(select(Repository).where(Repository.name == repo))
        ws = dict(s.execute(select(Workspace.id, Workspace.name).where(Workspace.repo_id == r.id)).all())
        branches = dict(s.execute(select(Branch.id, Branch.name).where(Branch.repo_id == r.id)).all())
        versions = s.scalars(select(NodeVersion).where(NodeVersion.repo_id == r.id).order_by(NodeVersion.id)).all()
        address = {v.node_id: f"{ws[v.workspace_id]}:{v.path}" for v in versions}
        for v in versions:  # the same ids as the normal path: the address's
            assert v.node_id == node_uid(r.uid, v.workspace_id, v.path)
        by_version = {v.id: address[v.node_id] for v in versions}
        nodes = [(branches[v.branch_id], ws[v.workspace_id], v.path, v.parent_path, v.name, v.node_type,
                  v.properties, v.order, v.deleted, v.content_key) for v in versions]
        relations = sorted((branches[e.branch_id], address[e.from_node_id], address[e.to_node_id], e.rel_type,
                            e.weight, e.properties, e.deleted)
                           for e in s.scalars(select(RelationVersion).where(RelationVersion.repo_id == r.id)))
        refs = sorted((branches[x.branch_id], address[x.source_node_id], by_version[x.source_version_id],
                       x.property_key, x.target_workspace, x.target_path)
                      for x in s.scalars(select(Reference).where(Reference.repo_id == r.id)))
        jobs = sorted((j.content_key, ws[j.workspace_id], by_version[j.node_version_id], j.status, j.attempts,
                       j.priority, j.error) for j in s.scalars(select(IndexJob).where(IndexJob.repo_id == r.id)))
        chunks = [(c.content_key, c.chunk_index, c.field, c.text, c.char_start, c.char_end, c.model, c.dim,
                   c.embedding) for c in s.scalars(select(Chunk).where(Chunk.repo_id == r.id)
                                                   .order_by(Chunk.content_key, Chunk.chunk_index))]
        revisions = [(x.number, branches[x.branch_id], x.actor)
                     for x in s.scalars(select(Revision).where(Revision.repo_id == r.id).order_by(Revision.number))]
        heads = {branches[b.id]: b.head_revision for b in s.scalars(select(Branch).where(Branch.repo_id == r.id))}
        # Version rows in the normal path's order: shallowest path first, as given within a depth.
        order = [(ws[v.workspace_id], v.path) for v in versions]
        return {"nodes": nodes, "relations": relations, "references": refs, "jobs": jobs, "chunks": chunks,
                "revisions": revisions, "heads": heads, "head": r.head_revision, "order": order}


def _stored(services, repo: str) -> list[Any]:
    """The values as the database holds them (the JSON text, the timestamps' storage form)."""
    with services.db.read() as s:
        repo_id = s.scalar(select(Repository.id).where(Repository.name == repo))
        conn = s.connection()
        if conn.dialect.name == "sqlite":
            when = "typeof({0}) || ':' || length({0})"
        else:
            when = "pg_typeof({0})::text || ':' || extract(timezone from {0})::text"
        nodes = conn.exec_driver_sql(
            f"SELECT path, properties, sort_order, deleted, content_key, {when.format('created_at')}, "
            f"{when.format('updated_at')} FROM node_versions WHERE repo_id = {repo_id} ORDER BY id").all()
        # Edges by what they are, not by id: the import inserts them by source node, so that
        # the indexes leading with it fill in order (kg.ops.bulk._resolve).
        edges = conn.exec_driver_sql(
            f"SELECT from_address, to_address, rel_type, weight, properties, deleted, {when.format('created_at')} "
            f"FROM relation_versions WHERE repo_id = {repo_id} ORDER BY from_address, to_address, rel_type, id").all()
        return [tuple(str(v) for v in row) for row in [*nodes, *edges]]


def test_the_rows_are_those_of_the_normal_write_path(services):
    """The same content through write_graph (the batch path with relations, one revision) and
    through the bulk import: node by node the rows agree, and so do the reads."""
    services.settings.index_inline = False  # compare the queue as the writes left it
    _setup(services, "normal")
    run(services, OPERATOR, write_graph, "normal", "main",
        lambda session, view: GraphWrite(upserts=UPSERTS, relations=RELATIONS))
    _setup(services, "bulk")
    header = {"record": "header", "format": "kg-ndjson", "version": 1, "repo": "x", "branch": "main",
              "revision": 0, "workspaces": [{"name": "knowledge"}, {"name": "library"}]}
    lines = [json.dumps(header)] + [json.dumps({"record": "node", **u}) for u in UPSERTS] + [
        json.dumps({"record": "relation", **r}) for r in RELATIONS]
    report = bulk.import_ndjson(services, OPERATOR, "bulk", lines)
    assert report.revision == 1 and report.queued > 0
    normal, bulked = _rows(services, "normal"), _rows(services, "bulk")
    assert bulked == normal
    assert _stored(services, "bulk") == _stored(services, "normal")
    assert len(bulked["jobs"]) == report.queued
    assert _reads(services, "bulk", timestamps=False) == _reads(services, "normal", timestamps=False)
    # And on a branch holding content already: the replaced nodes keep their created_at.
    before = queries.get_node(services, OPERATOR, "bulk", "main", "library", "/people/dana").as_json()
    again = [json.dumps(header), json.dumps({"record": "node", "workspace": "library", "path": "/people/dana",
                                             "node_type": "kg:Person", "properties": {"name": "Dana W."}})]
    bulk.import_ndjson(services, OPERATOR, "bulk", again)
    run(services, OPERATOR, batch, "normal", "main", upserts=[
        {"workspace": "library", "path": "/people/dana", "node_type": "kg:Person", "properties": {"name": "Dana W."}}])
    after = queries.get_node(services, OPERATOR, "bulk", "main", "library", "/people/dana").as_json()
    assert after["created_at"] == before["created_at"] and after["revision"] == 2
    assert _rows(services, "bulk") == _rows(services, "normal")


def test_chunks_with_vectors_are_stored_not_embedded(services):
    _build(services)
    lines = _export(services, "acme", with_chunks=True)
    calls: list[int] = []
    embedder = services.embedder("fake:hash-64")
    original = embedder.embed

    def counting(texts):
        calls.append(len(texts))
        return original(texts)

    embedder.embed = counting  # type: ignore[method-assign]
    try:
        report = bulk.import_ndjson(services, OPERATOR, "copy", lines)
        assert report.queued == 0 and report.chunks > 0
        assert calls == []  # nothing embedded, inline indexing on or not
        with services.db.read() as s:
            copy_id = s.scalar(select(Repository.id).where(Repository.name == "copy"))
            assert s.scalar(select(IndexJob.id).where(IndexJob.repo_id == copy_id)) is None
        request = SearchRequest.parse({"query": "rotate API keys ninety days", "k": 3, "mode": "vector"})
        hits = search_branch(services, OPERATOR, "copy", "main", request).results
        assert hits and hits[0].path == "/docs/guides/rotate-keys"
    finally:
        embedder.embed = original  # type: ignore[method-assign]
    chunks = [json.loads(line) for line in lines if '"record":"chunk"' in line]
    vector = np.frombuffer(base64.b64decode(chunks[0]["vector"]), dtype="<f4")
    assert vector.shape == (chunks[0]["dim"],) and abs(float(np.linalg.norm(vector)) - 1) < 1e-5


def test_the_chunk_lookup_asks_only_for_texts_without_chunks_and_before_the_chunks_are_inserted(services):
    """The import asks which texts have stored chunks before it inserts the file's chunks, and
    never for the texts whose chunks the file carries: on PostgreSQL the lookup after tens of
    thousands of fresh chunk rows in the same transaction (no statistics yet) was planned as a
    scan per 500 keys (11.5 s of a 20,000-node import)."""
    from sqlalchemy import event

    _build(services)
    lines = _export(services, "acme", with_chunks=True)
    records = [json.loads(line) for line in lines]
    dropped = next(r["content_key"] for r in records if r["record"] == "chunk")
    kept = {r["content_key"] for r in records if r["record"] == "chunk"} - {dropped}
    # One text's chunks left out of the file: it is the only one to look up and to queue.
    lines = [line for line, r in zip(lines, records, strict=True)
             if not (r["record"] == "chunk" and r["content_key"] == dropped)]
    header = records[0]
    header["counts"]["chunks"] = sum(r["record"] == "chunk" and r["content_key"] != dropped for r in records)
    lines[0] = json.dumps(header)
    statements: list[tuple[str, str]] = []

    def record(conn, cursor, statement, parameters, context, executemany):
        statements.append((" ".join(statement.split()).lower(), repr(parameters)))

    event.listen(services.db.engine, "before_cursor_execute", record)
    try:
        report = bulk.import_ndjson(services, OPERATOR, "copy", lines)
    finally:
        event.remove(services.db.engine, "before_cursor_execute", record)
    assert report.queued == 1 and report.chunks == header["counts"]["chunks"]
    lookups = [i for i, (sql, _) in enumerate(statements)
               if sql.startswith("select chunks.content_key from chunks")]
    inserts = [i for i, (sql, _) in enumerate(statements) if sql.startswith("insert into chunks")]
    assert lookups and inserts and max(lookups) < min(inserts)
    asked = " ".join(statements[i][1] for i in lookups)
    assert dropped in asked and not any(key in asked for key in kept)


def test_batches_make_one_revision_each_and_the_same_content(services):
    _build(services)
    lines = _export(services, "acme")
    report = bulk.import_ndjson(services, OPERATOR, "copy", lines, batch_size=4)
    n = len(lines) - 1
    assert report.revisions == list(range(1, (n + 3) // 4 + 1))
    log = queries.revision_log(services, OPERATOR, "copy", "main").as_json()["revisions"]
    assert "(batch 1 of" in log[-1]["message"]
    assert _body(_export(services, "copy")) == _body(lines)
    with pytest.raises(InvalidInput, match="batch_size"):
        bulk.import_ndjson(services, OPERATOR, "copy2", lines, batch_size=0)


def test_into_an_existing_branch(services):
    _build(services)
    lines = _export(services, "acme", "main")
    _setup(services, "other")
    run(services, OPERATOR, branch_ops.create_branch, "other", name="imports")
    report = bulk.import_ndjson(services, OPERATOR, "other", lines, branch="imports")
    assert not report.created_repository
    assert queries.list_children(services, OPERATOR, "other", "main", "knowledge", "/") == []
    assert _reads(services, "other", "imports") == _reads(services, "acme", "main")
    with pytest.raises(NotFound, match="branch"):
        bulk.import_ndjson(services, OPERATOR, "other", lines, branch="nope")


def test_a_re_import_writes_only_what_changed_and_of_the_same_file_nothing(services):
    """Re-importing the file just imported wrote a second revision of every node and relation
    (a new user's `kg import` run twice). Now records the branch holds as the file has them
    get no new version: the same file again is no revision; a file with one node and one
    relation changed writes those two, in one revision."""
    _build(services)
    lines = _export(services, "acme", with_chunks=True)
    first = bulk.import_ndjson(services, OPERATOR, "copy", lines)
    n_nodes, n_relations = first.nodes, first.relations
    assert first.unchanged.model_dump() == {"nodes": 0, "relations": 0} and n_nodes > 3 and n_relations > 1
    before = queries.revision_log(services, OPERATOR, "copy", "main").as_json()["revisions"]
    again = bulk.import_ndjson(services, OPERATOR, "copy", lines)
    assert again.revision is None and again.revisions == []
    assert (again.nodes, again.relations) == (0, 0)
    assert again.unchanged.model_dump() == {"nodes": n_nodes, "relations": n_relations}
    assert queries.revision_log(services, OPERATOR, "copy", "main").as_json()["revisions"] == before
    records = [json.loads(line) for line in _export(services, "copy")]  # no chunks: a text changes
    node = next(r for r in records if r["record"] == "node" and r["path"] == "/docs/guides/rotate-keys")
    node["properties"] = {**node["properties"], "title": "Rotating keys, revised"}
    edge = next(r for r in records if r["record"] == "relation")
    edge["weight"] = 0.125
    changed = [json.dumps(r) for r in records]
    third = bulk.import_ndjson(services, OPERATOR, "copy", changed)
    assert (third.nodes, third.relations) == (1, 1) and len(third.revisions) == 1
    assert third.unchanged.model_dump() == {"nodes": n_nodes - 1, "relations": n_relations - 1}
    got = queries.get_node(services, OPERATOR, "copy", "main", "knowledge", "/docs/guides/rotate-keys").as_json()
    assert got["properties"]["title"] == "Rotating keys, revised" and got["revision"] == third.revision
    weights = {(n["path"], n["relation_type"]): n["weight"] for n in neighbors(
        services, OPERATOR, "copy", "main", edge["from"], direction="OUT")["neighbors"]}
    assert weights[(edge["to"].split(":", 1)[1], edge["type"])] == 0.125
    log = queries.revision_log(services, OPERATOR, "copy", "main").as_json()["revisions"]
    assert len(log) == len(before) + 1
    assert log[0]["message"].startswith("import ndjson: 1 nodes, 1 relations from ")  # what it wrote
    assert log[0]["message"].endswith(f"({n_nodes - 1 + n_relations - 1} records unchanged)")


HEADER = {"record": "header", "format": "kg-ndjson", "version": 1, "repo": "x", "branch": "main", "revision": 0,
          "workspaces": [{"name": "w"}]}


def _node(path: str, **extra: Any) -> dict[str, Any]:
    return {"record": "node", "workspace": "w", "path": path, "node_type": "kb:Doc", "properties": {}, **extra}


#: The content key of a node ``{"title": "A"}`` in a workspace of the default settings.
KEY_A = plan_text({"title": "A"}, parse_embedding_config(None, default_model="fake:hash-64"),
                  make_embedder("fake:hash-64", allow_fake=True)).content_key


def _chunk(dim: int = 64, **extra: Any) -> dict[str, Any]:
    return {"record": "chunk", "content_key": KEY_A, "chunk_index": 0, "field": "title", "text": "A",
            "char_start": 0, "char_end": 1, "model": "fake:hash-64", "dim": dim,
            "vector": base64.b64encode(np.ones(dim, dtype="<f4").tobytes()).decode(), **extra}


BAD = {
    "malformed JSON": ([HEADER, _node("/a"), '{"record": "node", "workspace": "w",'], 3, "not JSON"),
    "not an object": ([HEADER, "[1, 2]"], 2, "must be a JSON object"),
    "unknown record type": ([HEADER, _node("/a"), {"record": "edge", "from": "w:/a"}], 3,
                            "unknown record type 'edge'"),
    "no record field": ([HEADER, {"path": "/a"}], 2, "needs a 'record' field"),
    "unknown field": ([HEADER, _node("/a"), _node("/b", colour="red")], 3, "unknown field 'colour'"),
    "wrong field type": ([HEADER, _node("/a", order="1")], 2, "field 'order'"),
    "missing field": ([HEADER, {"record": "node", "workspace": "w"}], 2, "needs the field 'path'"),
    "header not first": ([_node("/a"), HEADER], 1, "must be the header"),
    "second header": ([HEADER, _node("/a"), HEADER], 3, "second header"),
    "unknown format version": ([{**HEADER, "version": 2}], 1, "version"),
    "bad path": ([HEADER, _node("/a"), _node("/a//b")], 3, "empty segment"),
    "workspace not in the header": ([HEADER, {**_node("/a"), "workspace": "elsewhere"}], 2,
                                    "not one of the header's workspaces"),
    "duplicate path": ([HEADER, _node("/a"), _node("/b"), _node("/a")], 4, "named twice (first on line 2)"),
    "duplicate path in NFD": ([HEADER, _node("/caf\u00e9"), _node("/cafe\u0301")], 3, "named twice"),
    "NaN in properties": ([HEADER, '{"record":"node","workspace":"w","path":"/a","properties":{"x":NaN}}'], 2,
                          "plain JSON"),
    "NaN order": ([HEADER, '{"record":"node","workspace":"w","path":"/a","order":NaN}'], 2, "order"),
    # found by a new user: kg import stored what HTTP refuses (and PostgreSQL text cannot hold)
    "NUL in properties": ([HEADER, _node("/a", properties={"content": "a\u0000b"})], 2, "NUL character"),
    "lone surrogate in a key": ([HEADER, '{"record":"node","workspace":"w","path":"/a","properties":{"\\ud800":1}}'],
                                2, "not JSON"),  # the JSON parser refuses a lone surrogate escape
    "NUL in relation properties": ([HEADER, _node("/a"), {"record": "relation", "from": "w:/a", "to": "w:/a",
                                                          "type": "t", "properties": {"x": "\u0000"}}],
                                   3, "NUL character"),
    "parent missing": ([HEADER, _node("/a"), _node("/b/c")], 3, "parent w:/b"),
    "relation endpoint missing": ([HEADER, _node("/a"), _node("/b"),
                                   {"record": "relation", "from": "w:/a", "to": "w:/nowhere", "type": "cites"}],
                                  4, "relation to w:/nowhere"),
    "relation endpoint workspace unknown": ([HEADER, _node("/a"),
                                             {"record": "relation", "from": "w:/a", "to": "zz:/b", "type": "t"}],
                                            3, "workspace 'zz' not found"),
    "bad relation type": ([HEADER, _node("/a"), {"record": "relation", "from": "w:/a", "to": "w:/a",
                                                 "type": "has space"}], 3, "invalid relation type"),
    "duplicate relation": ([HEADER, _node("/a"), _node("/b"),
                            {"record": "relation", "from": "w:/a", "to": "w:/b", "type": "t", "weight": 1},
                            {"record": "relation", "from": "w:/a", "to": "w:/b", "type": "t", "weight": 2}],
                           5, "named twice (first on line 4)"),
    "wrong vector dim": ([HEADER, _node("/a", properties={"title": "A"}), _chunk(dim=64, vector=base64.b64encode(
        np.ones(32, dtype="<f4").tobytes()).decode())], 3, "holds 32 float32 values, but its dim is 64"),
    "vector dim of another model": ([HEADER, _node("/a", properties={"title": "A"}), _chunk(dim=32)], 3,
                                    "dim 32 is not 64"),
    "vector not base64": ([HEADER, _chunk(vector="***")], 2, "not base64"),
    "all-zero vector": ([HEADER, _chunk(vector=base64.b64encode(np.zeros(64, dtype="<f4").tobytes()).decode())],
                        2, "all zeros"),
    "chunk of no node": ([HEADER, _node("/a", properties={"title": "B"}), _chunk()], 3, "the key of no node"),
    "chunk of another model": ([HEADER, _node("/a", properties={"title": "A"}), _chunk(model="fake:other")], 3,
                               "is not 'fake:hash-64'"),
    "truncated file": ([{**HEADER, "counts": {"nodes": 3, "relations": 0, "chunks": 0}}, _node("/a"), _node("/b")],
                       3, "announces 3"),
    "empty file": ([], 1, "no header"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_record_is_named_by_its_line_and_nothing_is_written(services, case):
    records, line, words = BAD[case]
    lines = [r if isinstance(r, str) else json.dumps(r) for r in records]
    with pytest.raises(InvalidInput) as caught:
        bulk.import_ndjson(services, OPERATOR, "fresh", lines)
    assert caught.value.message.startswith(f"line {line}: "), caught.value.message
    assert words in caught.value.message, caught.value.message
    assert caught.value.details["line"] == line
    assert "\n" not in caught.value.message
    with services.db.read() as s:  # not even the repository
        assert s.scalar(select(Repository.id).where(Repository.name == "fresh")) is None
        assert s.scalar(select(NodeVersion.id)) is None


def test_a_bad_record_writes_nothing_into_an_existing_repository(services):
    _build(services)
    head = queries.revision_log(services, OPERATOR, "acme", "main").revisions[0].revision
    lines = _export(services, "acme")
    lines.append(json.dumps({"record": "relation", "from": "knowledge:/docs", "to": "library:/gone", "type": "t"}))
    lines[0] = json.dumps({**json.loads(lines[0]), "counts": None})
    with pytest.raises(InvalidInput, match=f"line {len(lines)}: relation to library:/gone"):
        bulk.import_ndjson(services, OPERATOR, "acme", lines, batch_size=2)
    assert queries.revision_log(services, OPERATOR, "acme", "main").revisions[0].revision == head


def test_a_chunk_whose_text_is_numbered_with_a_gap_is_refused(services):
    _build(services)
    lines = _export(services, "acme", with_chunks=True)
    chunk_lines = [i for i, line in enumerate(lines) if '"record":"chunk"' in line]
    records = [json.loads(lines[i]) for i in chunk_lines]
    key = next(r["content_key"] for r in records if r["chunk_index"] == 1)
    dropped = next(i for i, r in zip(chunk_lines, records, strict=True)
                   if r["content_key"] == key and r["chunk_index"] == 0)
    del lines[dropped]
    lines[0] = json.dumps({**json.loads(lines[0]), "counts": None})
    with pytest.raises(InvalidInput, match="not 0 to"):
        bulk.import_ndjson(services, OPERATOR, "copy", lines)


WRITER = Actor("key", "writer", "0123456789abcdef", (make_grant("acme", ("*",), actions=("read", "write")),))
READER = Actor("key", "reader", "0123456789abcdee", (make_grant("acme", ("*",), actions=("read",)),))
KB_ONLY = Actor("key", "kb", "0123456789abcded", (make_grant("acme", ("*",), ("knowledge",), ("read", "write")),))
STRANGER = Actor("key", "stranger", "0123456789abcdec", (make_grant("other", ("*",), actions=("read",)),))


def test_access_is_decided_as_for_every_write_and_read(services):
    _build(services)
    lines = _export(services, "acme")
    run(services, OPERATOR, branch_ops.create_branch, "acme", name="agent/imports", from_branch="main",
        at_revision=0)
    with pytest.raises(Forbidden, match="protected"):  # main needs a grant naming it
        bulk.import_ndjson(services, WRITER, "acme", lines)
    with pytest.raises(Forbidden):
        bulk.import_ndjson(services, READER, "acme", lines, branch="agent/imports")
    with pytest.raises((Forbidden, NotFound)):  # the library workspace is not the key's
        bulk.import_ndjson(services, KB_ONLY, "acme", lines, branch="agent/imports")
    with pytest.raises(NotFound):
        bulk.import_ndjson(services, STRANGER, "acme", lines, branch="agent/imports")
    with pytest.raises(Forbidden):  # a new repository needs admin
        bulk.import_ndjson(services, WRITER, "newrepo", lines)
    report = bulk.import_ndjson(services, WRITER, "acme", lines, branch="agent/imports")
    assert queries.revision_log(services, OPERATOR, "acme", "agent/imports").revisions[0].actor == "writer"
    assert report.nodes == len([line for line in lines if '"record":"node"' in line])
    # Export needs read; a key restricted to a workspace exports it only.
    with pytest.raises(NotFound):
        _export_as(services, STRANGER, "acme")
    kb = _export_as(services, KB_ONLY, "acme")
    records = [json.loads(line) for line in kb]
    assert [w["name"] for w in records[0]["workspaces"]] == ["knowledge"]
    assert {r["workspace"] for r in records if r["record"] == "node"} == {"knowledge"}
    assert [(r["from"], r["to"]) for r in records if r["record"] == "relation"] == [
        ("knowledge:/docs/guides/rotate-keys", "knowledge:/docs/guides/getting-started")]


def _export_as(services, caller: Actor, repo: str) -> list[str]:
    out = io.StringIO()
    bulk.export_ndjson(services, caller, repo, "main", out=out)
    return out.getvalue().splitlines()


def test_export_as_of_a_revision(services):
    _build(services)
    at_one = _export(services, "acme", at_revision=1)
    assert json.loads(at_one[0])["revision"] == 1
    assert all(json.loads(line)["record"] == "node" for line in at_one[1:])
    assert len(at_one) - 1 == len(UPSERTS)


def test_validity_round_trips(services):
    """valid_from / valid_to / invalidated_by are exported when set and imported as they were
    (issue 17); a naive time or an interval ending before it starts is refused by its line."""
    _build(services)
    run(services, OPERATOR, relation_ops.relate, "acme", "main", "library:/people/dana", "library:/people/lee",
        "knows", weight=0.25, valid_from="2020-01-01T00:00:00+02:00")
    run(services, OPERATOR, relation_ops.invalidate, "acme", "main", "library:/people/dana", "library:/people/lee",
        "knows", valid_to="2022-01-01T00:00:00Z", invalidated_by="a quarrel")
    first = _export(services, "acme")
    [record] = [json.loads(line) for line in first if '"knows"' in line and "dana" in line.split('"to"')[0]]
    assert (record["valid_from"], record["valid_to"], record["invalidated_by"]) == (
        "2019-12-31T22:00:00+00:00", "2022-01-01T00:00:00+00:00", "a quarrel")
    assert sum("valid_from" in line for line in first) == 1  # only the relation that has one
    bulk.import_ndjson(services, OPERATOR, "copy", first)
    assert _body(_export(services, "copy"))[1] == _body(first)[1]
    current = neighbors(services, OPERATOR, "copy", "main", "library:/people/dana", direction="OUT")
    assert [n["path"] for n in current["neighbors"]] == []
    then = neighbors(services, OPERATOR, "copy", "main", "library:/people/dana", direction="OUT",
                     as_of=datetime(2021, 1, 1, tzinfo=UTC))
    assert [n["path"] for n in then["neighbors"]] == ["/people/lee"]
    bad = [line.replace('"valid_to":"2022-01-01T00:00:00+00:00"', '"valid_to":"2010-01-01T00:00:00+00:00"')
           for line in first]
    with pytest.raises(InvalidInput, match="line"):
        bulk.import_ndjson(services, OPERATOR, "copy2", bad)
    naive = [line.replace('"valid_to":"2022-01-01T00:00:00+00:00"', '"valid_to":"2022-01-01T00:00:00"')
             for line in first]
    with pytest.raises(InvalidInput, match="zone"):
        bulk.import_ndjson(services, OPERATOR, "copy3", naive)
    edge = [line.replace('"valid_to":"2022-01-01T00:00:00+00:00"', '"valid_to":"9999-12-31T23:59:59-01:00"')
            for line in first]
    with pytest.raises(InvalidInput, match="out of range"):  # was an OverflowError
        bulk.import_ndjson(services, OPERATOR, "copy4", edge)


def _wal_bytes(services) -> int:
    from pathlib import Path

    from sqlalchemy.engine import make_url

    wal = Path(f"{make_url(services.db.url).database}-wal")
    return wal.stat().st_size if wal.exists() else 0


def test_a_large_import_leaves_sqlite_no_write_ahead_log_to_search(services):
    if services.db.dialect != "sqlite":
        assert services.db.checkpoint() is False  # PostgreSQL has no such log to fold
        return
    services.settings.index_inline = False
    _setup(services, "big")
    header = {"record": "header", "format": "kg-ndjson", "version": 1, "repo": "x", "branch": "main",
              "revision": 0, "workspaces": [{"name": "knowledge"}]}
    lines = [json.dumps(header)] + [
        json.dumps({"record": "node", "workspace": "knowledge", "path": f"/n{i}", "node_type": "kb:Note",
                    "properties": {"title": f"note {i}"}}) for i in range(1200)]
    report = bulk.import_ndjson(services, OPERATOR, "big", lines)
    assert report.revision == 1
    # the import's frames are in the database file and the log is truncated: readers search nothing
    assert _wal_bytes(services) == 0
    assert queries.get_node(services, OPERATOR, "big", "main", "knowledge", "/n1199").properties == {
        "title": "note 1199"}


def test_a_checkpoint_held_back_by_a_reader_says_so_and_loses_nothing(services):
    if services.db.dialect != "sqlite":
        return
    _setup(services, "held")
    run(services, OPERATOR, batch, "held", "main", upserts=[
        {"workspace": "knowledge", "path": "/a", "node_type": "kb:Note", "properties": {"title": "a"}}])
    with services.db.read() as session:  # a reader of the snapshot before the next write
        session.execute(select(NodeVersion.id).limit(1)).all()
        run(services, OPERATOR, batch, "held", "main", upserts=[
            {"workspace": "knowledge", "path": "/b", "node_type": "kb:Note", "properties": {"title": "b"}}])
        assert services.db.checkpoint(wait_s=0.05) is False
    assert services.db.checkpoint() is True and _wal_bytes(services) == 0
    assert queries.get_node(services, OPERATOR, "held", "main", "knowledge", "/b").properties == {"title": "b"}


def test_a_re_import_compares_relations_by_properties_and_validity_as_json(services):
    """A relation the branch holds is unchanged only when its weight, properties (as JSON: key
    order aside, ``true`` is not ``1``) and validity are the file's; a relation deleted on the
    branch is written again. The branch's relations are read as columns with the properties'
    stored JSON text, decoded only for the keys the file names (not one ORM instance each)."""
    def rel(to: str, **extra: Any) -> dict[str, Any]:
        return {"record": "relation", "from": "w:/a", "to": f"w:/{to}", "type": "cites", **extra}

    nodes = [_node(f"/{p}") for p in "abcdefg"]
    first = [rel("b", properties={"x": 1, "y": [1, 2]}), rel("c", properties={"flag": True}),
             rel("d", weight=0.5), rel("e", valid_from="2026-01-01T00:00:00Z"), rel("f"), rel("g")]
    lines = [json.dumps(r) for r in [HEADER, *nodes, *first]]
    assert bulk.import_ndjson(services, OPERATOR, "rels", lines).relations == 6
    run(services, OPERATOR, relation_ops.unrelate, "rels", "main", "w:/a", "w:/g", "cites")
    again = [rel("b", properties={"y": [1, 2], "x": 1}),  # the same JSON, keys in another order
             rel("c", properties={"flag": 1}),  # 1 is not true
             rel("d", weight=0.5),
             rel("e", valid_from="2026-01-01T00:00:00+00:00"),  # the same instant
             rel("f", valid_to="2027-01-01T00:00:00Z"),  # a validity added
             rel("g")]  # deleted on the branch: written again
    report = bulk.import_ndjson(services, OPERATOR, "rels", [json.dumps(r) for r in [HEADER, *nodes, *again]])
    assert report.unchanged.model_dump() == {"nodes": 7, "relations": 3}
    assert report.relations == 3
    out = {n["path"]: n for n in neighbors(services, OPERATOR, "rels", "main", "w:/a", direction="OUT")["neighbors"]}
    assert sorted(out) == ["/b", "/c", "/d", "/e", "/f", "/g"]
    assert out["/c"]["properties"] == {"flag": 1} and out["/b"]["properties"] == {"x": 1, "y": [1, 2]}


@pytest.mark.parametrize(("scan_above", "lookup_batch"), [(5_000, 500), (2, 500), (5_000, 2)],
                         ids=["by-address", "workspace-scan", "small-batches"])
def test_an_import_reads_the_branch_the_same_by_address_batches_or_scan(services, monkeypatch, scan_above,
                                                                         lookup_batch):
    """What an import reads of the branch (its own nodes as the branch has them, the parents and
    relation endpoints it does not hold, the relations it names again) is the same whether the
    addresses are looked up a few a statement or the workspace is scanned."""
    monkeypatch.setattr(bulk, "_SCAN_ABOVE", scan_above)
    monkeypatch.setattr(bulk, "_LOOKUP_BATCH", lookup_batch)
    first = [HEADER, _node("/p"), *[_node(f"/p/c{i}", properties={"i": i}) for i in range(5)],
             *[{"record": "relation", "from": "w:/p/c0", "to": f"w:/p/c{i}", "type": "t", "weight": 0.5}
               for i in range(1, 5)]]
    assert bulk.import_ndjson(services, OPERATOR, "reads", [json.dumps(r) for r in first]).nodes == 6
    second = [HEADER,
              _node("/p/c0", properties={"i": 0}),  # unchanged
              _node("/p/c1", properties={"i": 100}),  # changed
              _node("/p/new"),  # its parent /p is on the branch only
              {"record": "relation", "from": "w:/p/c0", "to": "w:/p/c1", "type": "t", "weight": 0.5},  # unchanged
              {"record": "relation", "from": "w:/p/c0", "to": "w:/p/c2", "type": "t", "weight": 0.9},  # changed
              {"record": "relation", "from": "w:/p/new", "to": "w:/p/c3", "type": "t"}]  # to a node on the branch
    report = bulk.import_ndjson(services, OPERATOR, "reads", [json.dumps(r) for r in second])
    assert report.unchanged.model_dump() == {"nodes": 1, "relations": 1}
    assert (report.nodes, report.relations) == (2, 2)
    out = {n["path"]: n["weight"] for n in neighbors(services, OPERATOR, "reads", "main", "w:/p/c0",
                                                     direction="OUT")["neighbors"]}
    assert out == {"/p/c1": 0.5, "/p/c2": 0.9, "/p/c3": 0.5, "/p/c4": 0.5}
    assert [n["path"] for n in neighbors(services, OPERATOR, "reads", "main", "w:/p/new",
                                         direction="OUT")["neighbors"]] == ["/p/c3"]
    orphan = [HEADER, _node("/q/x")]  # a parent neither in the file nor on the branch
    with pytest.raises(InvalidInput, match="parent w:/q of node w:/q/x is neither in the file nor on the branch"):
        bulk.import_ndjson(services, OPERATOR, "reads", [json.dumps(r) for r in orphan])


KB_ADMIN = Actor("key", "kb-admin", "0123456789abcdeb",
                 (make_grant("acme", ("agent/*",), ("knowledge",), ("read", "write", "admin")),))


def test_a_workspace_outside_the_keys_globs_is_refused_alike_whether_it_exists_or_not(services):
    """An import whose header names a workspace the key's admin grant does not cover is refused
    before existence is looked at: ``library`` (taken, hidden from the key) and ``archive``
    (free) answer alike, and neither is made."""
    _build(services)
    run(services, OPERATOR, branch_ops.create_branch, "acme", name="agent/imports", from_branch="main",
        at_revision=0)
    header = json.loads(_export(services, "acme")[0])
    refused = {}
    for name in ("library", "archive"):
        lines = [json.dumps({**header, "counts": None,
                             "workspaces": [w | {"name": name} if w["name"] == "library" else w
                                            for w in header["workspaces"]]})]
        with pytest.raises(Forbidden) as caught:
            bulk.import_ndjson(services, KB_ADMIN, "acme", lines, branch="agent/imports")
        refused[name] = caught.value.message.replace(name, "NAME")
    assert refused["library"] == refused["archive"]
    assert [w.name for w in repo_ops.list_workspaces(services, OPERATOR, "acme").workspaces] == ["knowledge", "library"]
