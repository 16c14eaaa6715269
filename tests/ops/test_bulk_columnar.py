"""The columnar bulk import (``kg.ops.bulk``) against the row-by-row write path, on both
databases: the reader takes each line as the pydantic models do, the imported nodes, chunks,
vectors and relations export as the batch path's do, searches find them once the index caught
up (in the background), a branch import is the branch's alone, and ``index/status`` says how
far the index is."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest
from sqlalchemy import select

from kg.context import OPERATOR, run
from kg.errors import InvalidInput
from kg.ops import branches as branch_ops
from kg.ops import bulk, queries
from kg.ops import relations as relation_ops
from kg.ops import repos as repo_ops
from kg.ops.nodes import batch
from kg.rag.search import SearchRequest, search_branch
from kg.store.models import IndexJob, NodeVersion, Repository

#: A model whose vectors are whole base64 groups (dim a multiple of 3: decoded joined), and the
#: tests' default one (64: decoded one by one).
MODELS = ["fake:hash-48", "fake:hash-64"]
TEXTS = {
    "/notes/kiwi": "Kiwi fruit ripens after the harvest, stored cool.",
    "/notes/fig": "Figs are harvested by hand in late summer.",
    "/notes/plum": "Plums bloom early; frost ruins the crop.",
}


def _header(repo: str = "x", branch: str = "main", model: str = "fake:hash-64", **extra: Any) -> str:
    return json.dumps({"record": "header", "format": "kg-ndjson", "version": 1, "repo": repo, "branch": branch,
                       "revision": 0, "workspaces": [{"name": "w", "embedding": {"model": model}}], **extra})


def _export(services, repo: str, branch: str = "main") -> list[str]:
    import io

    out = io.StringIO()
    bulk.export_ndjson(services, OPERATOR, repo, branch, out=out, with_chunks=True)
    return out.getvalue().splitlines()


def _normal(services, repo: str, model: str) -> None:
    """The content written the row-by-row way: a batch of nodes, relations one by one."""
    run(services, OPERATOR, repo_ops.create_repository, repo)
    run(services, OPERATOR, repo_ops.create_workspace, repo, "w", {"model": model})
    run(services, OPERATOR, batch, repo, "main", upserts=[
        {"workspace": "w", "path": "/notes", "node_type": "kg:Folder", "properties": {}},
        *({"workspace": "w", "path": path, "node_type": "kb:Note", "order": float(i),
           "properties": {"title": path.rsplit("/", 1)[1], "content": text, "big": 2**70, "see": {"kg:ref": "/notes"}}}
          for i, (path, text) in enumerate(TEXTS.items()))])
    run(services, OPERATOR, relation_ops.relate, repo, "main", "w:/notes/kiwi", "w:/notes/fig", "cites", weight=0.5,
        properties={"n": 10**20})
    run(services, OPERATOR, relation_ops.relate, repo, "main", "w:/notes/fig", "w:/notes/plum", "cites")


@pytest.mark.parametrize("model", MODELS)
def test_imported_nodes_chunks_vectors_and_relations_export_as_the_row_by_row_paths(services, model):
    _normal(services, "normal", model)
    exported = _export(services, "normal")
    assert sum('"record":"chunk"' in line for line in exported) >= len(TEXTS)
    report = bulk.import_ndjson(services, OPERATOR, "bulk", [line.encode() for line in exported])
    assert (report.nodes, report.relations, report.queued) == (4, 2, 0)
    again = _export(services, "bulk")
    assert again[1:] == exported[1:]  # nodes, relations, chunks with their vectors, byte for byte
    node = queries.get_node(services, OPERATOR, "bulk", "main", "w", "/notes/kiwi").as_json()
    assert node["properties"]["big"] == 2**70 and isinstance(node["properties"]["big"], int)  # not a float
    refs = queries.references(services, OPERATOR, "bulk", "main", "w:/notes").references
    assert sorted(r.path for r in refs) == sorted(TEXTS)


def test_the_reader_takes_each_line_as_the_models_do():
    when = "2024-05-01T10:00:00Z"
    lines = [_header(), json.dumps({"record": "node", "workspace": "w", "path": "/a", "order": 3,
                                    "created_at": when, "properties": {"n": 2**64, "f": 1.5, "l": [1, {"x": None}]}}),
             '{"record":"node","workspace":"w","path":"/b","properties":{"t":"caf\\u00e9"}}',
             json.dumps({"record": "relation", "from": "w:/a", "to": "w:/b", "type": "t", "weight": 1,
                         "valid_from": when, "invalidated_by": "review"})]
    for given in (lines, [line.encode() for line in lines]):
        got = bulk.parse_ndjson(given)
        n, r = got.nodes, got.relations
        assert n.path == ["/a", "/b"] and n.node_type == ["kg:Node", "kg:Node"]
        assert n.order == [3.0, None] and isinstance(n.order[0], float)
        assert n.created_at[0] == datetime(2024, 5, 1, 10, tzinfo=UTC) and n.updated_at == [None, None]
        assert n.properties == [{"n": 2**64, "f": 1.5, "l": [1, {"x": None}]}, {"t": "café"}]
        assert isinstance(n.properties[0]["n"], int)
        assert (r.source, r.target, r.weight, r.invalidated_by) == ([("w", "/a")], [("w", "/b")], [1.0], ["review"])
        assert r.valid_from == [datetime(2024, 5, 1, 10, tzinfo=UTC)] and r.properties == [{}]


def _vector(dim: int, value: float = 1.0) -> str:
    return base64.b64encode(np.full(dim, value, dtype="<f4").tobytes()).decode()


@pytest.mark.parametrize("dim", [48, 64])
def test_the_first_bad_line_is_named_when_a_vector_batch_is_decoded_after_it(services, dim):
    """Vectors are decoded a batch at a time: a bad vector before another bad line is still the
    one named, and a bad vector among good ones is named by its own line."""
    node = json.dumps({"record": "node", "workspace": "w", "path": "/a", "properties": {"title": "A"}})

    def chunk(index: int, vector: str) -> str:
        return json.dumps({"record": "chunk", "content_key": "a" * 64, "chunk_index": index, "field": "title",
                           "text": "A", "char_start": 0, "char_end": 1, "model": f"fake:hash-{dim}", "dim": dim,
                           "vector": vector})

    zero = _vector(dim, 0.0)
    cases = [([_header(), node, chunk(0, _vector(dim)), chunk(1, zero), node], 4, "all zeros"),
             ([_header(), chunk(0, _vector(dim)), chunk(1, _vector(dim, float("nan"))), chunk(2, _vector(dim))], 3,
              "non-finite"),
             ([_header(), chunk(0, _vector(dim)), chunk(1, _vector(dim - 3))], 3, "float32 values"),
             ([_header(), chunk(0, _vector(dim)), chunk(1, "!" + _vector(dim)[1:]), "[1]"], 3, "not base64")]
    for lines, line, words in cases:
        with pytest.raises(InvalidInput) as caught:
            bulk.import_ndjson(services, OPERATOR, "fresh", lines)
        assert caught.value.details["line"] == line and words in caught.value.message, caught.value.message
    with services.db.read() as s:
        assert s.scalar(select(Repository.id).where(Repository.name == "fresh")) is None


def _chunk_lines(model: str, dim: int) -> list[str]:
    """Nodes of TEXTS with one chunk each under ``model`` (the keys the import computes)."""
    from kg.indexing.chunks import plan_pieces, plan_text
    from kg.indexing.config import workspace_embedding
    from kg.providers.registry import make_embedder

    embedder = make_embedder(model, allow_fake=True)
    config = workspace_embedding({"embedding": {"model": model}}, default_model=model)
    lines = [json.dumps({"record": "node", "workspace": "w", "path": "/notes", "node_type": "kg:Folder"})]
    for path, text in TEXTS.items():
        plan = plan_text({"content": text}, config, embedder)
        (piece,) = plan_pieces(plan, embedder)
        lines.append(json.dumps({"record": "node", "workspace": "w", "path": path, "properties": {"content": text}}))
        lines.append(json.dumps({"record": "chunk", "content_key": plan.content_key, "chunk_index": 0,
                                 "field": piece.field, "text": piece.text, "char_start": piece.start,
                                 "char_end": piece.end, "model": model, "dim": dim,
                                 "vector": base64.b64encode(embedder.embed([piece.text])[0].astype("<f4").tobytes())
                                 .decode()}))
    return lines


def _search(services, repo: str, branch: str, query: str, mode: str = "fulltext") -> list[str]:
    answer = search_branch(services, OPERATOR, repo, branch, SearchRequest(query=query, k=5, mode=mode))
    return [hit.path for hit in answer.results]


def test_an_import_answers_before_placing_and_searches_find_it_after_the_catch_up(services):
    """Without ``KG_INDEX_INLINE`` the chunks are placed by the index's background catch-up:
    the import answers once they are stored, a search then finds them (waiting for it, or
    catching up itself), and ``index/status`` compares the index's watermark with the store."""
    services.settings.index_inline = False
    report = bulk.import_ndjson(services, OPERATOR, "acme", [_header(model="fake:hash-48"),
                                                               *_chunk_lines("fake:hash-48", 48)])
    assert report.chunks == len(TEXTS) and report.queued == 0
    assert _search(services, "acme", "main", "harvested by hand")[0] == "/notes/fig"
    assert _search(services, "acme", "main", "frost ruins crop", mode="vector")[0] == "/notes/plum"
    with services.db.read() as s:
        key = s.scalar(select(Repository.uid).where(Repository.name == "acme"))
    assert services.index.wait_for_background(key, timeout=60)
    status = queries.index_status(services, OPERATOR, "acme").as_json()
    assert status["index"]["stored"] == status["index"]["watermark"] == len(TEXTS)


def test_a_branch_import_is_seen_on_the_branch_alone_with_its_revision_in_the_log(services):
    """100 records with vectors on a branch (the small write of an agent's branch): one revision
    on the branch, found there by search, not on main, main's head and log unchanged."""
    services.settings.index_inline = False
    bulk.import_ndjson(services, OPERATOR, "acme", [_header(), json.dumps(
        {"record": "node", "workspace": "w", "path": "/notes", "node_type": "kg:Folder"})])
    run(services, OPERATOR, branch_ops.create_branch, "acme", name="agent/one")
    main_log = queries.revision_log(services, OPERATOR, "acme", "main")
    lines = [_header(branch="agent/one", model="fake:hash-64")] + _chunk_lines("fake:hash-64", 64)[1:]
    report = bulk.import_ndjson(services, OPERATOR, "acme", lines, branch="agent/one", message="agent notes")
    assert len(report.revisions) == 1
    assert _search(services, "acme", "agent/one", "harvested by hand")[0] == "/notes/fig"
    assert "/notes/fig" not in _search(services, "acme", "main", "harvested by hand")
    assert queries.revision_log(services, OPERATOR, "acme", "main") == main_log
    entries = queries.revision_log(services, OPERATOR, "acme", "agent/one")
    top = entries.revisions[0]
    assert (top.revision, top.message) == (report.revision, "agent notes")


def test_a_batch_queues_its_texts_together_as_node_by_node(services):
    """A batch queues the embedding jobs of its texts in one statement: one job per new text,
    naming the first version written with it (shallowest first), none for a text whose chunks
    are stored."""
    services.settings.index_inline = False
    run(services, OPERATOR, repo_ops.create_repository, "acme")
    run(services, OPERATOR, repo_ops.create_workspace, "acme", "w")
    same = {"content": "the same words"}
    done = run(services, OPERATOR, batch, "acme", "main", upserts=[
        {"workspace": "w", "path": "/a/deep", "properties": same, "node_type": "kg:Note"},
        {"workspace": "w", "path": "/a", "properties": same},
        {"workspace": "w", "path": "/b", "properties": {"content": "other words"}},
        {"workspace": "w", "path": "/c", "properties": {"n": 1}}])
    assert [n.path for n in done.upserted] == ["/a/deep", "/a", "/b", "/c"]  # answered as given
    with services.db.read() as s:
        jobs = sorted((j.content_key, j.node_version_id, j.status) for j in s.scalars(select(IndexJob)))
        keys = dict(s.execute(select(NodeVersion.path, NodeVersion.content_key)).all())
        ids = dict(s.execute(select(NodeVersion.path, NodeVersion.id)).all())
    assert jobs == sorted([(keys["/a"], ids["/a"], "pending"), (keys["/b"], ids["/b"], "pending")])
    assert keys["/a"] == keys["/a/deep"] and keys["/c"] is None
    services.indexer.drain()
    run(services, OPERATOR, branch_ops.create_branch, "acme", name="agent/two")
    run(services, OPERATOR, batch, "acme", "agent/two", upserts=[
        {"workspace": "w", "path": "/d", "properties": same}])  # its chunks are stored: no job
    with services.db.read() as s:
        assert s.scalar(select(IndexJob.id).where(IndexJob.status == "pending")) is None


def test_an_import_into_a_branch_of_a_branch_compares_with_the_version_that_branch_sees(services):
    """The branch lookups are one statement per chain depth with the chain's branches and
    revisions bound: a branch of a branch sees its parent's change over main's version, and
    main's node where the parent changed nothing."""
    node = {"record": "node", "workspace": "w", "path": "/a", "properties": {"v": 1}}
    bulk.import_ndjson(services, OPERATOR, "acme", [_header(), json.dumps(node),
                                                      json.dumps({**node, "path": "/b"})])
    run(services, OPERATOR, branch_ops.create_branch, "acme", name="one")
    bulk.import_ndjson(services, OPERATOR, "acme", [_header(branch="one"),
                                                      json.dumps({**node, "properties": {"v": 2}})], branch="one")
    run(services, OPERATOR, branch_ops.create_branch, "acme", name="two", from_branch="one")
    for branch in ("two", "two"):  # the second time the statement is the cached one
        same = bulk.import_ndjson(services, OPERATOR, "acme", [
            _header(branch=branch), json.dumps({**node, "properties": {"v": 2}}),
            json.dumps({**node, "path": "/b"})], branch=branch)
        assert (same.revision, same.unchanged.nodes) == (None, 2)
    changed = bulk.import_ndjson(services, OPERATOR, "acme", [_header(branch="two"), json.dumps(node)], branch="two")
    assert (changed.nodes, changed.unchanged.nodes) == (1, 0)
    assert queries.get_node(services, OPERATOR, "acme", "two", "w", "/a").properties == {"v": 1}
    assert queries.get_node(services, OPERATOR, "acme", "one", "w", "/a").properties == {"v": 2}
