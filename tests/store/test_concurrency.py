"""Concurrent writers, readers, an ingest and merges through the in-process app (both databases).

Every write transaction takes the repository's revision lock (``BEGIN IMMEDIATE`` on SQLite,
the repository row lock on PostgreSQL), so concurrent writers serialise: each acknowledged write
has its own revision, none is lost, and the last acknowledged write of a path (the highest
revision) is what a read returns afterwards. An ingest running beside node writers
on SQLite must not surface "database is locked" as a 500, and reads go on succeeding meanwhile.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import func, select

from kg.context import OPERATOR
from kg.ops.ingest import ingest_path
from kg.store.models import Merge, NodeVersion, Revision
from kg.store.repos import get_branch, get_repository

BASE = "/api/repos/acme"
NODES = f"{BASE}/workspaces/knowledge/nodes"
WRITERS = 8
WRITES = 100
SHARED = "/shared"          # every writer of a branch writes it: same-path contention
JOIN_TIMEOUT_S = 120


@dataclass(frozen=True)
class Ack:
    """One acknowledged write."""

    branch: str
    path: str
    writer: int
    seq: int
    status: int
    revision: int
    node_id: str
    properties: dict


def _path(writer: int, seq: int) -> str:
    """Every tenth write goes to the shared path; the others revisit 45 own paths (most twice)."""
    return SHARED if seq % 10 == 9 else f"/w{writer}-n{seq % 45}"


def _writer(client, branch: str, writer: int, writes: int, barrier: threading.Barrier,
            acks: list[Ack], failures: list[tuple]) -> None:
    barrier.wait()
    for seq in range(writes):
        path = _path(writer, seq)
        properties = {"title": f"writer {writer} write {seq}", "writer": writer, "seq": seq}
        r = client.put(f"{NODES}{path}", params={"branch": branch},
                       json={"node_type": "kb:Doc", "properties": properties})
        if r.status_code in (200, 201):
            body = r.json()
            acks.append(Ack(branch, path, writer, seq, r.status_code, body["revision"], body["id"], properties))
        else:
            failures.append((branch, path, r.status_code, r.text))


def _run(threads: list[threading.Thread]) -> None:
    for t in threads:
        t.start()
    for t in threads:
        t.join(JOIN_TIMEOUT_S)
    assert not any(t.is_alive() for t in threads), "a thread did not finish"


def _put(client, path: str, properties: dict, branch: str = "main", workspace: str = "knowledge") -> dict:
    r = client.put(f"{BASE}/workspaces/{workspace}/nodes{path}", params={"branch": branch},
                   json={"node_type": "kb:Doc", "properties": properties})
    assert r.status_code in (200, 201), r.text
    return r.json()


def _head(client) -> int:
    return client.get(BASE).json()["head_revision"]


def _check_acknowledged_writes_are_readable(client, acks: list[Ack]) -> None:
    """Per (branch, path): one creation (the first revision), one node id, and the read value
    is the acknowledged write with the highest revision."""
    by_path: dict[tuple[str, str], list[Ack]] = defaultdict(list)
    for ack in acks:
        by_path[(ack.branch, ack.path)].append(ack)
    listed = {branch: _top_level(client, branch) for branch in {a.branch for a in acks}}
    for (branch, path), group in by_path.items():
        group.sort(key=lambda a: a.revision)
        assert [a.status for a in group] == [201] + [200] * (len(group) - 1), (branch, path)
        assert len({a.node_id for a in group}) == 1, (branch, path)
        node = listed[branch].get(path)
        assert node is not None, (branch, path)
        assert node["revision"] == group[-1].revision, (branch, path)
        assert node["properties"] == group[-1].properties, (branch, path)
        assert node["id"] == group[0].node_id
    for branch, path in [(b, SHARED) for b in listed] + [(a.branch, a.path) for a in acks[::97]]:
        r = client.get(f"{NODES}{path}", params={"branch": branch})
        assert r.status_code == 200 and r.json() == listed[branch][path], (branch, path, r.text)
    by_writer: dict[tuple[str, int], list[Ack]] = defaultdict(list)
    for ack in acks:
        by_writer[(ack.branch, ack.writer)].append(ack)
    for group in by_writer.values():
        revisions = [a.revision for a in sorted(group, key=lambda a: a.seq)]
        assert revisions == sorted(revisions), "one writer's sequential writes got decreasing revisions"


def _top_level(client, branch: str, workspace: str = "knowledge") -> dict[str, dict]:
    """The top-level nodes of a branch (every node these tests write), by path."""
    r = client.get(f"{BASE}/workspaces/{workspace}/nodes", params={"branch": branch, "parent": "/"})
    assert r.status_code == 200, r.text
    return {n["path"]: n for n in r.json()["nodes"]}


def _children(client, branch: str) -> set[str]:
    return set(_top_level(client, branch))


def test_concurrent_writers_on_one_branch_lose_no_acknowledged_write(client, repo):
    _put(client, "/seed", {"title": "seed"})
    start = _head(client)
    acks: list[Ack] = []
    failures: list[tuple] = []
    barrier = threading.Barrier(WRITERS)
    _run([threading.Thread(target=_writer, args=(client, "main", w, WRITES, barrier, acks, failures))
          for w in range(WRITERS)])

    assert failures == []
    assert len(acks) == WRITERS * WRITES
    revisions = [a.revision for a in acks]
    assert len(set(revisions)) == len(revisions), "two writes got the same revision"
    assert _head(client) == start + WRITERS * WRITES
    assert set(revisions) == set(range(start + 1, start + WRITERS * WRITES + 1))
    _check_acknowledged_writes_are_readable(client, acks)
    shared = [a for a in acks if a.path == SHARED]
    assert len(shared) == WRITERS * (WRITES // 10) and len({a.writer for a in shared}) == WRITERS
    assert _children(client, "main") == {"/seed"} | {a.path for a in acks}


def test_concurrent_writers_on_separate_branches_stay_isolated(client, repo):
    _put(client, "/seed", {"title": "seed"})
    branches = [f"agent/w{w}" for w in range(WRITERS)]
    for name in branches:
        r = client.post(f"{BASE}/branches", json={"name": name})
        assert r.status_code == 201, r.text
    start = _head(client)
    acks: list[Ack] = []
    failures: list[tuple] = []
    barrier = threading.Barrier(WRITERS)
    _run([threading.Thread(target=_writer, args=(client, branches[w], w, WRITES, barrier, acks, failures))
          for w in range(WRITERS)])

    assert failures == []
    assert len(acks) == WRITERS * WRITES
    revisions = [a.revision for a in acks]
    assert len(set(revisions)) == len(revisions), "two writes got the same revision"
    assert _head(client) == start + WRITERS * WRITES
    assert set(revisions) == set(range(start + 1, start + WRITERS * WRITES + 1))
    _check_acknowledged_writes_are_readable(client, acks)
    # the shared path is one node (its id is its address's), created on each branch by that
    # branch's writer (201) and read there as that writer's last write, never another's
    shared = [a for a in acks if a.path == SHARED]
    assert len({a.node_id for a in shared}) == 1
    for name in branches:
        mine = sorted((a for a in shared if a.branch == name), key=lambda a: a.revision)
        assert mine[0].status == 201
        assert _top_level(client, name)[SHARED]["properties"] == mine[-1].properties
    for w, name in enumerate(branches):
        own = {a.path for a in acks if a.branch == name}
        assert _children(client, name) == {"/seed"} | own, name
        assert all(a.writer == w for a in acks if a.branch == name)
    assert _children(client, "main") == {"/seed"}
    branch_heads = {b["name"]: b["head_revision"] for b in client.get(f"{BASE}/branches").json()["branches"]}
    for name in branches:
        assert branch_heads[name] == max(a.revision for a in acks if a.branch == name)


def _write_notes(folder: Path, round_: int) -> dict[str, str]:
    """Ten small markdown files whose text changes every round; their contents by node path."""
    out = {}
    for i in range(10):
        text = f"# Note {i}\n\nRound {round_} of the ingest: cache invalidation and shard {i}.\n"
        (folder / f"note-{i}.md").write_text(text)
        out[f"/note-{i}"] = text
    return out


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_node_writes_beside_an_ingest_all_land_and_reads_keep_succeeding(client, repo, services, tmp_path):
    """On SQLite ("database is locked"): 8 threads x 50 node writes while an ingest
    runs; all written, no 500, reads (GET, children, search) succeed meanwhile."""
    writers, writes = 8, 50
    folder = tmp_path / "notes"
    folder.mkdir()
    expected_docs = _write_notes(folder, 0)
    ingest_path(services, OPERATOR, folder, repo="acme", workspace="docs")   # the reader searches these
    _put(client, "/seed", {"title": "seed", "content": "cache invalidation notes"})
    start = _head(client)

    writers_done, done = threading.Event(), threading.Event()
    barrier = threading.Barrier(writers + 2)
    acks: list[tuple[str, int, dict]] = []
    failures: list[tuple] = []
    reads: list[tuple[str, int]] = []
    ingest_reports: list[dict] = []
    ingest_errors: list[BaseException] = []

    def write(w: int) -> None:
        barrier.wait()
        for seq in range(writes):
            path = f"/t{w}-n{seq}"
            props = {"title": f"text {w}/{seq}", "content": f"writer {w} wrote passage {seq} about caches"}
            r = client.put(f"{NODES}{path}", params={"branch": "main"},
                           json={"node_type": "kb:Doc", "properties": props})
            if r.status_code in (200, 201):
                acks.append((path, r.json()["revision"], props))
            else:
                failures.append((path, r.status_code, r.text))

    def ingest() -> None:
        barrier.wait()
        try:
            round_ = 0
            while round_ < 2 or (not writers_done.is_set() and round_ < 4):
                round_ += 1
                expected_docs.update(_write_notes(folder, round_))
                report = ingest_path(services, OPERATOR, folder, repo="acme", workspace="docs")
                ingest_reports.append(report.summary().model_dump())
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            ingest_errors.append(exc)

    def read() -> None:
        barrier.wait()
        while not done.is_set():
            r = client.get(f"{NODES}/seed")
            reads.append(("get", r.status_code))
            r = client.get(NODES, params={"parent": "/"})
            reads.append(("children", r.status_code))
            for mode in ("hybrid", "fulltext"):
                r = client.post(f"{BASE}/search", json={"query": "cache invalidation", "mode": mode, "k": 5})
                reads.append((mode, r.status_code))
                if r.status_code == 200 and not r.json()["results"]:
                    reads.append((mode, "no results"))
            done.wait(0.02)  # a reader, not a busy loop starving the writers

    writer_threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    side = [threading.Thread(target=ingest), threading.Thread(target=read)]
    for t in writer_threads + side:
        t.start()
    for t in writer_threads:
        t.join(JOIN_TIMEOUT_S)
    writers_done.set()
    side[0].join(JOIN_TIMEOUT_S)
    done.set()
    side[1].join(JOIN_TIMEOUT_S)
    assert not any(t.is_alive() for t in writer_threads + side)

    assert ingest_errors == []
    assert failures == []
    assert len(acks) == writers * writes
    assert reads and all(status == 200 for _, status in reads), set(reads)
    ingested = sum(r["inserted"] + r["replaced"] for r in ingest_reports)
    assert all(r["files"] == 10 and r["inserted"] + r["replaced"] == 10 for r in ingest_reports)
    revisions = [rev for _, rev, _ in acks]
    assert len(set(revisions)) == len(revisions)
    assert _head(client) == start + writers * writes + ingested
    listed = _top_level(client, "main")
    for path, revision, props in acks:
        assert listed[path]["revision"] == revision and listed[path]["properties"] == props, path
    docs = _top_level(client, "main", "docs")
    assert {path: docs[path]["properties"]["content"] for path in expected_docs} == expected_docs
    found = client.post(f"{BASE}/search", json={"query": "writer 7 wrote passage 49", "mode": "fulltext",
                                                "k": 1, "workspaces": ["knowledge"]}).json()["results"]
    assert found and found[0]["path"] == "/t7-n49"


def test_two_concurrent_merges_of_one_branch_make_one_revision(client, repo, services):
    """Two merges of one branch at once: one writes the changes as one revision; the other finds
    the branch up to date (or is refused with 409) and writes no revision and no version."""
    for name in ("a", "b", "c", "d", "e"):
        _put(client, f"/{name}", {"title": name.upper()})
    assert client.post(f"{BASE}/relations", json={"from": "knowledge:/a", "to": "knowledge:/b",
                                                  "type": "links"}).status_code in (200, 201)
    assert client.post(f"{BASE}/branches", json={"name": "agent/m"}).status_code == 201
    for round_ in range(3):
        # each round: modify, add, delete and relate on the branch, then merge it twice at once
        _put(client, "/a", {"title": f"A{round_}"}, branch="agent/m")
        _put(client, f"/new{round_}", {"title": f"N{round_}"}, branch="agent/m")
        assert client.delete(f"{NODES}/{'cde'[round_]}", params={"branch": "agent/m"}).status_code == 200
        assert client.post(f"{BASE}/relations", params={"branch": "agent/m"},
                           json={"from": "knowledge:/b", "to": f"knowledge:/new{round_}",
                                 "type": "cites"}).status_code in (200, 201)
        head = _head(client)
        expected = _children(client, "agent/m")
        answers: list = []
        barrier = threading.Barrier(2)

        def merge(barrier: threading.Barrier = barrier, answers: list = answers) -> None:
            barrier.wait()
            r = client.post(f"{BASE}/branches/agent/m/merge", json={"into": "main"})
            answers.append((r.status_code, r.json()))

        _run([threading.Thread(target=merge) for _ in range(2)])

        statuses = sorted(s for s, _ in answers)
        assert all(s in (200, 409) for s in statuses), answers
        made = [body for s, body in answers if s == 200 and body["revision"] is not None]
        assert len(made) == 1, f"round {round_}: {len(made)} merges made a revision: {answers}"
        others = [(s, body) for s, body in answers if not (s == 200 and body["revision"] is not None)]
        assert all(s == 409 or body.get("up_to_date") is True for s, body in others), answers
        assert _head(client) == head + 1, "a merge made an empty revision"
        diff = client.get(f"{BASE}/branches/agent/m/diff", params={"against": "main"}).json()
        assert all(v == [] for v in diff["nodes"].values()), diff["nodes"]
        assert all(v == [] for v in diff["relations"].values()), diff["relations"]
        assert _children(client, "main") == expected
        with services.db.read() as session:
            repo_row = get_repository(session, "acme")
            main = get_branch(session, repo_row, "main")
            versions = session.execute(
                select(NodeVersion.path, func.count()).where(NodeVersion.branch_id == main.id,
                                                             NodeVersion.revision > head)
                .group_by(NodeVersion.path)
            ).all()
            made_revisions = session.scalar(select(func.count()).select_from(Revision)
                                            .where(Revision.repo_id == repo_row.id, Revision.number > head))
            recorded = set(session.scalars(select(Merge.source_revision)
                                           .where(Merge.target_branch_id == main.id, Merge.target_revision > head)))
        assert dict(versions) == {"/a": 1, f"/new{round_}": 1, f"/{'cde'[round_]}": 1}, versions
        assert made_revisions == 1
        assert len(recorded) == 1, "the two merges recorded different points of the branch"
