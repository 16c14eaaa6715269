"""Small writes on a branch, set-based (issue 37), against the row-by-row path, on both databases.

``nodes:batch`` and ``write_graph`` write their upserts through :func:`kg.ops.texts.write_nodes`
(one lookup, one insert of the versions, one of the references, one of the jobs), the NDJSON
import through its columnar plan. These tests pin what the set-based path must keep: the rows
written one node at a time by :func:`kg.ops.texts.write_node` (nodes, versions, properties,
content keys, folders made by ``parents``, overrides of main's nodes seen on the branch and not
on main, references, embedding jobs), one revision, nothing written when a record fails, and a
number of SQL statements that does not grow with the number of records.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from sqlalchemy import event, select

from kg.context import OPERATOR, run, unit_of_work
from kg.errors import InvalidInput, NotFound
from kg.indexing.chunks import plan_pieces, plan_text
from kg.indexing.config import workspace_embedding
from kg.ops import branches as branch_ops
from kg.ops import bulk
from kg.ops import repos as repo_ops
from kg.ops.nodes import GraphWrite, batch, write_graph
from kg.ops.text_store import queue_jobs
from kg.ops.texts import write_node
from kg.providers.registry import make_embedder
from kg.rag.search import SearchRequest, search_branch
from kg.store.models import Branch, IndexJob, NodeVersion, Reference, Repository
from kg.store.nodes import get_node
from kg.store.repos import branch_view

MODEL = "fake:hash-64"
WORDS = ["apple", "river", "stone", "cloud", "maple", "ember", "quartz", "willow", "harbor", "lantern"]


def _text(i: int) -> str:
    return " ".join(WORDS[(i * 7 + k * 3) % len(WORDS)] + str(i % (k + 2)) for k in range(12)) + f" item{i}"


@pytest.fixture
def acme(services) -> str:
    """``acme``: workspace ``w`` with ``/docs/d0``..``/docs/d19`` (texts) and ``/plain`` on main."""
    run(services, OPERATOR, repo_ops.create_repository, "acme")
    run(services, OPERATOR, repo_ops.create_workspace, "acme", "w", {"model": MODEL})
    run(services, OPERATOR, batch, "acme", "main", parents=True, upserts=[
        *({"workspace": "w", "path": f"/docs/d{i}", "node_type": "kb:Doc",
           "properties": {"content": f"main {_text(i)}"}} for i in range(20)),
        {"workspace": "w", "path": "/plain", "properties": {"n": 1}}])
    return "acme"


def _upserts(n: int, tag: str = "") -> list[dict[str, Any]]:
    """``n`` upserts: overrides of main's nodes, new ones beside them, new ones below new folders
    (``parents``), a child named before its parent, a reference, a node with no text, one text twice."""
    out: list[dict[str, Any]] = [
        {"workspace": "w", "path": "/new/deep/leaf", "node_type": "kb:Note", "properties": {"content": f"leaf {tag}"}},
        {"workspace": "w", "path": "/new", "node_type": "kb:Topic", "properties": {"content": f"topic {tag}"},
         "order": 2.5},
        {"workspace": "w", "path": "/docs/d1", "node_type": "kb:Doc",
         "properties": {"content": f"changed {tag}", "see": {"kg:ref": "/plain"}}},
        {"workspace": "w", "path": "/docs/same-a", "properties": {"content": f"twice {tag}"}},
        {"workspace": "w", "path": "/docs/same-b", "properties": {"content": f"twice {tag}"}},
        {"workspace": "w", "path": "/docs/empty", "properties": {"n": 2}},
    ]
    for i in range(n - len(out)):
        if i % 5 == 0 and i // 5 < 18:
            path = f"/docs/d{2 + i // 5}"  # an override of main's node
        elif i % 3:
            path = f"/docs/n{i}"
        else:
            path = f"/more/m{i // 10}/n{i}"  # below folders made by parents
        out.append({"workspace": "w", "path": path, "node_type": "kb:Note",
                    "properties": {"content": f"{tag} {_text(100 + i)}", "i": i}})
    return out[:n]


def _row_by_row(uow, repo: str, branch: str, upserts: list[dict[str, Any]], parents: bool) -> list[Any]:
    """The batch as it was written before it was set-based: :func:`write_node` per upsert,
    ancestors first, the jobs queued together."""
    ctx = uow.begin(repo, branch)
    jobs: list[tuple[int, str | None, int]] = []
    written = {}
    for i in sorted(range(len(upserts)), key=lambda i: upserts[i]["path"].count("/")):
        u = upserts[i]
        written[i], _ = write_node(uow, ctx, u["workspace"], u["path"], node_type=u.get("node_type", "kg:Node"),
                                   properties=u.get("properties", {}), order=u.get("order"), parents=parents,
                                   jobs=jobs)
    queue_jobs(uow, ctx, jobs)
    return [(written[i].path, written[i].revision) for i in range(len(upserts))]


def _branch_rows(session, repo: str, branch: str) -> dict[str, Any]:
    """What a write left on ``branch`` itself, by path, with the version ids made relative."""
    bid = session.scalar(select(Branch.id).join(Repository).where(Repository.name == repo, Branch.name == branch))
    versions = list(session.scalars(select(NodeVersion).where(NodeVersion.branch_id == bid).order_by(NodeVersion.id)))
    refs = sorted((r.source_node_id, r.property_key, r.target_workspace, r.target_path, r.revision)
                  for r in session.scalars(select(Reference).where(Reference.branch_id == bid)))
    by_id = {v.id: n for n, v in enumerate(versions)}
    jobs = sorted((j.content_key, versions[by_id[j.node_version_id]].path, j.status, j.workspace_id)
                  for j in session.scalars(select(IndexJob)) if j.node_version_id in by_id)
    nodes = {v.path: (n, v.node_id, v.node_type, v.properties, v.order, v.content_key, v.parent_path, v.name,
                      v.deleted, v.revision, v.workspace_id, v.created_at) for n, v in enumerate(versions)}
    return {"nodes": nodes, "references": refs, "jobs": jobs}


def _same(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a["nodes"].keys() == b["nodes"].keys()
    for path in a["nodes"]:
        left, right = a["nodes"][path], b["nodes"][path]
        assert left[:11] == right[:11], path
        if path.startswith("/docs/d"):  # an override keeps main's creation time
            assert left[11] == right[11], path
    assert a["references"] == b["references"]
    assert a["jobs"] == b["jobs"]


class _RolledBack(Exception):
    pass


def _rows_of_row_by_row(services, repo: str, branch: str, upserts: list[dict[str, Any]]) -> dict[str, Any]:
    """What the row-by-row batch writes on ``branch``, read in its transaction, then rolled back."""
    try:
        with unit_of_work(services, OPERATOR) as uow:
            written = _row_by_row(uow, repo, branch, upserts, parents=True)
            uow.session.flush()
            rows = _branch_rows(uow.session, repo, branch)
            rows["answer"] = written
            raise _RolledBack
    except _RolledBack:
        return rows


def _search(services, repo: str, branch: str, text: str) -> list[str]:
    hits = search_branch(services, OPERATOR, repo, branch, SearchRequest(query=text, k=5, mode="fulltext")).results
    return [h.path for h in hits]


def test_a_batch_on_a_branch_writes_what_row_by_row_writes(services, acme):
    services.settings.index_inline = False  # the jobs stay in the queue, to be compared
    run(services, OPERATOR, branch_ops.create_branch, acme, name="agent/set")
    upserts = _upserts(100)
    theirs = _rows_of_row_by_row(services, acme, "agent/set", upserts)
    done = run(services, OPERATOR, batch, acme, "agent/set", upserts=upserts, parents=True)
    with services.db.read() as s:
        mine = _branch_rows(s, acme, "agent/set")
    _same(mine, theirs)
    assert [n.path for n in done.upserted] == [u["path"] for u in upserts]
    assert [(n.path, n.revision) for n in done.upserted] == theirs["answer"]
    assert {n[9] for n in mine["nodes"].values()} == {done.revision}
    assert mine["nodes"]["/new/deep"][2] == "kg:Folder" and mine["nodes"]["/new"][2] == "kb:Topic"
    assert {j[1] for j in mine["jobs"]} >= {"/docs/same-a", "/docs/d1", "/new/deep/leaf"}
    assert "/docs/same-b" not in {j[1] for j in mine["jobs"]}  # its text's job names the first version
    assert len(mine["references"]) == 1
    # the answer is the stored node, in the order given
    with services.db.read() as s:
        view = branch_view(s, acme, "agent/set")
        for node, u in zip(done.upserted, upserts, strict=True):
            stored = get_node(s, view, "w", u["path"])
            assert (node.id, node.node_type, node.properties, node.order, node.revision) == (
                stored.node_id, stored.node_type, stored.properties, stored.order, stored.revision)
            assert node.created_at == stored.created_at.isoformat()
    # main is untouched: its overridden nodes as they were, the new ones absent
    with services.db.read() as s:
        view = branch_view(s, acme, "main")
        assert get_node(s, view, "w", "/docs/d1").properties == {"content": f"main {_text(1)}"}
        with pytest.raises(NotFound):
            get_node(s, view, "w", "/new/deep/leaf")
    services.indexer.drain()
    assert _search(services, acme, "agent/set", "changed")[0] == "/docs/d1"
    assert "/docs/d1" not in _search(services, acme, "main", "changed")


def test_a_batch_refreshes_what_was_derived_from_the_nodes_it_replaces(services, acme):
    """The overrides' lineage is refreshed (one lookup for all of them): an answer citing a
    replaced node is marked stale on the branch, as one write of the node marks it."""
    from kg.ops.relations import relate

    run(services, OPERATOR, batch, acme, "main", upserts=[{
        "workspace": "w", "path": "/answers/a1", "node_type": "kg:Answer",
        "properties": {"citations": [{"marker": 1, "workspace": "w", "path": "/docs/d3", "chunk_index": 0,
                                      "chunk_sha256": "0" * 64}]}}], parents=True)
    run(services, OPERATOR, relate, acme, "main", "w:/answers/a1", "w:/docs/d3", "cites")
    run(services, OPERATOR, branch_ops.create_branch, acme, name="agent/lineage")
    run(services, OPERATOR, batch, acme, "agent/lineage", upserts=_upserts(30), parents=True)
    with services.db.read() as s:
        answer = get_node(s, branch_view(s, acme, "agent/lineage"), "w", "/answers/a1")
        on_main = get_node(s, branch_view(s, acme, "main"), "w", "/answers/a1")
    assert answer.properties.get("stale") is True
    assert [c["path"] for c in answer.properties["stale_citations"]] == ["/docs/d3"]
    assert "stale" not in on_main.properties


@pytest.mark.parametrize("bad", ["missing parent", "bad reference", "bad type"])
def test_a_bad_upsert_in_the_middle_of_a_batch_writes_nothing(services, acme, bad):
    run(services, OPERATOR, branch_ops.create_branch, acme, name="agent/bad")
    upserts = _upserts(100)
    if bad == "missing parent":
        upserts[50] = {"workspace": "w", "path": "/nowhere/x", "properties": {"content": "orphan"}}
        expected: type[Exception] = NotFound
    elif bad == "bad reference":
        upserts[50] = {**upserts[50], "properties": {"see": {"kg:ref": "no-slash"}}}
        expected = InvalidInput
    else:
        upserts[50] = {**upserts[50], "node_type": ""}
        expected = InvalidInput
    with services.db.read() as s:
        head = s.scalar(select(Repository.head_revision).where(Repository.name == acme))
    with pytest.raises(expected):
        run(services, OPERATOR, batch, acme, "agent/bad", upserts=upserts, parents=bad != "missing parent")
    with services.db.read() as s:
        assert s.scalar(select(Repository.head_revision).where(Repository.name == acme)) == head
        rows = _branch_rows(s, acme, "agent/bad")
    assert rows["nodes"] == {} and rows["jobs"] == [] and rows["references"] == []


def test_a_missing_parent_is_named_as_row_by_row_names_it(services, acme):
    """Without ``parents``, the first upsert (shallowest first) whose parent is neither on the
    branch nor in the batch is named."""
    upserts = [{"workspace": "w", "path": "/docs/x/y/z", "properties": {}},
               {"workspace": "w", "path": "/docs/x", "properties": {}},
               {"workspace": "w", "path": "/other/q", "properties": {}}]
    with pytest.raises(NotFound) as caught:
        run(services, OPERATOR, batch, acme, "main", upserts=upserts)
    assert caught.value.details == {"workspace": "w", "path": "/other/q", "parent": "/other"}


def test_a_graph_write_makes_its_nodes_as_a_batch_does(services, acme):
    run(services, OPERATOR, branch_ops.create_branch, acme, name="agent/graph")
    upserts = _upserts(20, tag="graph")
    written = run(services, OPERATOR, write_graph, acme, "agent/graph",
                  lambda session, view: GraphWrite(upserts=upserts, relations=[
                      {"from": "w:/new/deep/leaf", "to": "w:/docs/d1", "type": "cites"}]))
    assert written is not None and [n.path for n in written.upserted] == [u["path"] for u in upserts]
    assert written.related == 1
    with services.db.read() as s:
        rows = _branch_rows(s, acme, "agent/graph")
    assert {n[9] for n in rows["nodes"].values()} == {written.revision}
    assert rows["nodes"]["/new/deep"][2] == "kg:Folder"


# -- SQL statements per write ------------------------------------------------------------------


@contextmanager
def _counting(services) -> Iterator[Callable[[], int]]:
    seen = [0]

    def count(*_: Any) -> None:
        seen[0] += 1

    event.listen(services.db.engine, "before_cursor_execute", count)
    try:
        yield lambda: seen[0]
    finally:
        event.remove(services.db.engine, "before_cursor_execute", count)


def test_a_batch_on_a_branch_makes_as_many_statements_for_100_upserts_as_for_10(services, acme):
    services.settings.index_inline = False  # indexing after the commit is not the write's
    counts = {}
    for n in (10, 100):
        run(services, OPERATOR, branch_ops.create_branch, acme, name=f"agent/count{n}")
        upserts = _upserts(n, tag=f"count{n}")
        with _counting(services) as seen:
            run(services, OPERATOR, batch, acme, f"agent/count{n}", upserts=upserts, parents=True)
            counts[n] = seen()
    assert counts[10] == counts[100], counts
    assert counts[100] <= 16, counts  # 15 with a reference; 324 when each upsert was a lookup, an insert and a flush


def _import_lines(repo: str, branch: str, paths: list[str], tag: str) -> list[str]:
    embedder = make_embedder(MODEL, allow_fake=True)
    config = workspace_embedding({"embedding": {"model": MODEL}}, default_model=MODEL)
    lines = [json.dumps({"record": "header", "format": "kg-ndjson", "version": 1, "repo": repo, "branch": branch,
                         "revision": 0, "with_chunks": True,
                         "workspaces": [{"name": "w", "embedding": {"model": MODEL}}]})]
    rng = np.random.default_rng(len(paths))
    for path in paths:
        properties = {"content": f"{tag} {path} {_text(len(path))}"}
        plan = plan_text(properties, config, embedder)
        lines.append(json.dumps({"record": "node", "workspace": "w", "path": path, "node_type": "kb:Note",
                                 "properties": properties}))
        for piece in plan_pieces(plan, embedder):
            vector = rng.standard_normal(embedder.dim).astype("<f4")
            lines.append(json.dumps({"record": "chunk", "content_key": plan.content_key,
                                     "chunk_index": piece.chunk_index, "field": piece.field, "text": piece.text,
                                     "char_start": piece.start, "char_end": piece.end, "model": MODEL,
                                     "dim": embedder.dim, "vector": base64.b64encode(vector.tobytes()).decode()}))
    return lines


def test_an_import_on_a_branch_makes_as_many_statements_for_100_records_as_for_10(services, acme):
    counts = {}
    for n in (10, 100):
        branch = f"agent/import{n}"
        run(services, OPERATOR, branch_ops.create_branch, acme, name=branch)
        paths = [f"/docs/d{i}" for i in range(3)] + [f"/docs/i{n}-{i}" for i in range(n - 3)]
        lines = _import_lines(acme, branch, paths, tag=f"import{n}")
        with _counting(services) as seen:
            report = bulk.import_ndjson(services, OPERATOR, acme, lines, branch=branch)
            counts[n] = seen()
        assert report.nodes == n and report.chunks >= n
    assert counts[10] == counts[100], counts
    assert counts[100] <= 18, counts  # 17: the write's, and placing the chunks inline after the commit


def test_a_batch_queues_a_failed_text_again_through_the_driver_executemany(services, acme):
    """The jobs are inserted by the driver's executemany (:func:`kg.store.rows.execute_rows`):
    a text whose job failed is queued afresh, as the statement's ON CONFLICT says, and a new
    one gets every column the model's defaults would give."""
    from sqlalchemy import update

    services.settings.index_inline = False
    upserts = [{"workspace": "w", "path": "/docs/f1", "properties": {"content": "a text that failed"}}]
    run(services, OPERATOR, batch, acme, "main", upserts=upserts)
    with services.db.write() as s:
        s.execute(update(IndexJob).values(status="failed", attempts=3, failures=2, alone=True, error="boom"))
    run(services, OPERATOR, batch, acme, "main", upserts=[{**upserts[0], "path": "/docs/f2"},
                                                         {"workspace": "w", "path": "/docs/f3",
                                                          "properties": {"content": "a new text"}}])
    with services.db.read() as s:
        jobs = {j.content_key: j for j in s.scalars(select(IndexJob))}
        keys = dict(s.execute(select(NodeVersion.path, NodeVersion.content_key)).all())
        ids = dict(s.execute(select(NodeVersion.path, NodeVersion.id)).all())
    again, new = jobs[keys["/docs/f2"]], jobs[keys["/docs/f3"]]
    assert (again.status, again.attempts, again.failures, again.alone, again.error, again.node_version_id) == (
        "pending", 0, 0, False, None, ids["/docs/f2"])
    assert (new.status, new.attempts, new.failures, new.alone, new.priority, new.node_version_id) == (
        "pending", 0, 0, False, 0, ids["/docs/f3"])


def test_execute_rows_refuses_a_statement_whose_defaults_are_computed_in_python(services):
    from sqlalchemy import insert

    from kg.store.rows import execute_rows

    with services.db.write() as s, pytest.raises(ValueError, match="name every value"):  # status, created_at...
        execute_rows(s, insert(IndexJob), [{"repo_id": 1, "content_key": "k", "workspace_id": 1,
                                            "node_version_id": 1}])
