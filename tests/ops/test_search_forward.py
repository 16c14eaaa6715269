"""Search's searchable sets brought forward (kg.rag.search): after a write, the next state's set
is the last one with the branch's changes applied, not a read of every visible node. It must
hold exactly what a whole read holds, on every branch, after puts, edits, deletes, type and
text changes, resets and merges, with filters, for old snapshots too; and the index's masks
derived from it must rank what a fresh set ranks. Both databases."""

from __future__ import annotations

import copy
import random

import pytest

from kg.context import OPERATOR, reading, run
from kg.errors import Conflict, MergeConflict, NotFound
from kg.lru import LRUCache
from kg.ops.branches import create_branch, reset_branch
from kg.ops.merge import merge_branch
from kg.ops.nodes import batch, delete_node, put_node
from kg.ops.repos import create_repository, create_workspace
from kg.rag import search as search_module
from kg.rag.search import SearchRequest, _searchable, search_branch

WORDS = ["whale", "harpoon", "captain", "sea", "ship", "storm", "oil", "voyage", "crew", "island"]
PATHS = [f"/{folder}/{name}" for folder in ("a", "b", "a/deep") for name in ("x", "y", "z")]
REQUESTS = [
    SearchRequest(query="whale sea", k=5),
    SearchRequest(query="whale sea", k=5, path_prefix="/a"),
    SearchRequest(query="whale sea", k=5, path_prefix="/a", path_prefix_mode="raw"),
    SearchRequest(query="whale sea", k=5, node_type="kb:Fact"),
    SearchRequest(query="whale sea", k=5, workspaces=["kb"]),
]


@pytest.fixture
def store(services):
    run(services, OPERATOR, create_repository, "sea")
    run(services, OPERATOR, create_workspace, "sea", "kb")
    run(services, OPERATOR, create_workspace, "sea", "notes", {"model": "fake:other-64"})
    return services


def _text(rng: random.Random) -> str:
    # few distinct texts, so nodes share content keys (a key leaves the set only with its last node)
    return " ".join(rng.sample(WORDS, 2))


def _shape(searchable) -> dict:
    return {
        "by_key": {key: sorted(n.node_id for n in nodes) for key, nodes in searchable.by_key.items()},
        "keys": set(searchable.keys),
        "keys_by_model": {model: set(keys) for model, keys in searchable.keys_by_model.items()},
        "node_key": dict(searchable.node_key),
    }


def _check(services, branch, at_revision=None):
    """Every request's kept set equals a whole read's; the searches rank the same rows."""
    fresh = copy.copy(services)
    fresh.search_cache = LRUCache(32)
    for request in REQUESTS:
        with reading(services, OPERATOR, "sea", branch, at_revision) as (session, view):
            wids = sorted(w for w, name in view.workspaces.items() if request.workspaces is None or
                          name in request.workspaces)
            kept = _searchable(session, services, view, wids, request)
            whole = _searchable(session, fresh, view, wids, request)
            assert _shape(kept) == _shape(whole), (branch, at_revision, request)
        if at_revision is None:
            got = search_branch(services, OPERATOR, "sea", branch, request)
            want = search_branch(fresh, OPERATOR, "sea", branch, request)
            assert [(r.node_id, r.chunk_index, round(r.score, 9)) for r in got.results] == \
                [(r.node_id, r.chunk_index, round(r.score, 9)) for r in want.results], (branch, request)


@pytest.mark.parametrize("seed", range(3))
def test_a_brought_forward_set_holds_what_a_whole_read_holds(store, seed):
    rng = random.Random(seed)
    branches = ["main"]
    revisions: list[tuple[str, int]] = []
    for step in range(36):
        op = rng.random()
        branch = rng.choice(branches)
        workspace = rng.choice(["kb", "notes"])
        path = rng.choice(PATHS)
        if op < 0.5:
            run(store, OPERATOR, put_node, "sea", branch, workspace, path,
                node_type=rng.choice(["kb:Fact", "kb:Note"]),
                properties={"title": rng.choice(WORDS), "text": _text(rng)}, parents=True)
        elif op < 0.6:
            run(store, OPERATOR, batch, "sea", branch, parents=True, upserts=[
                {"workspace": workspace, "path": f"/b/n{step}-{i}", "node_type": "kb:Fact",
                 "properties": {"text": _text(rng)}} for i in range(3)])
        elif op < 0.72:
            try:
                run(store, OPERATOR, delete_node, "sea", branch, workspace, path, recursive=True)
            except (NotFound, Conflict):  # nothing there, or children without recursive
                pass
        elif op < 0.8 and len(branches) < 4:
            made = f"agent/s{step}"
            run(store, OPERATOR, create_branch, "sea", name=made, from_branch=branch)
            branches.append(made)
        elif op < 0.88 and branch != "main":
            try:
                run(store, OPERATOR, reset_branch, "sea", branch)
            except Conflict:  # a branch with child branches is not reset
                pass
        elif branch != "main":
            try:
                run(store, OPERATOR, merge_branch, "sea", branch, None)  # into its parent
            except MergeConflict:
                pass
        with reading(store, OPERATOR, "sea", branch) as (_, view):
            revisions.append((branch, view.revision))
        _check(store, branch)
    for branch in branches:
        _check(store, branch)
    for branch, revision in rng.sample(revisions, 5):  # old snapshots, behind the kept states
        _check(store, branch, at_revision=revision)


def test_an_agents_writes_read_the_visible_nodes_whole_once(store, monkeypatch):
    reads = []
    whole = search_module.visible_node_heads
    monkeypatch.setattr(search_module, "visible_node_heads", lambda *a, **kw: reads.append(1) or whole(*a, **kw))
    run(store, OPERATOR, create_branch, "sea", name="agent/one", from_branch="main")
    for i in range(8):
        run(store, OPERATOR, put_node, "sea", "agent/one", "kb", f"/answers/{i}", node_type="kb:Answer",
            properties={"text": f"whale answer mark{i}"}, parents=True)
        found = search_branch(store, OPERATOR, "sea", "agent/one", SearchRequest(query=f"mark{i}", k=3))
        assert found.results[0].path == f"/answers/{i}"  # the write is searchable at once
        if i == 2:  # a state the later ones are made from: they must not change it
            with reading(store, OPERATOR, "sea", "agent/one") as (session, view):
                earlier = _searchable(session, store, view, view.readable_ids(), SearchRequest(query="x"))
                before = _shape(earlier)
    run(store, OPERATOR, delete_node, "sea", "agent/one", "kb", "/answers/2")
    found = search_branch(store, OPERATOR, "sea", "agent/one", SearchRequest(query="whale answer", k=20))
    assert sorted(r.path for r in found.results) == sorted(f"/answers/{i}" for i in range(8) if i != 2)
    assert len(reads) == 1
    assert _shape(earlier) == before and len(before["node_key"]) == 3


def test_a_new_branchs_first_state_is_its_parents_at_the_fork_brought_forward(store, monkeypatch):
    rng = random.Random(5)
    for i in range(6):
        run(store, OPERATOR, put_node, "sea", "main", "kb", f"/facts/{i}", node_type="kb:Fact",
            properties={"text": _text(rng)}, parents=True)
    reads = []
    whole = search_module.visible_node_heads
    monkeypatch.setattr(search_module, "visible_node_heads", lambda *a, **kw: reads.append(1) or whole(*a, **kw))
    for request in REQUESTS:
        search_branch(store, OPERATOR, "sea", "main", request)
    searched = len(reads)
    run(store, OPERATOR, create_branch, "sea", name="agent/new", from_branch="main")
    _check(store, "agent/new")  # no write yet: the parent's state itself
    run(store, OPERATOR, put_node, "sea", "agent/new", "kb", "/facts/1", node_type="kb:Note",  # an override
        properties={"text": "storm island"}, parents=True)
    run(store, OPERATOR, delete_node, "sea", "agent/new", "kb", "/facts/2")                   # a tombstone
    run(store, OPERATOR, put_node, "sea", "main", "kb", "/facts/7", node_type="kb:Fact",     # after the fork
        properties={"text": "storm ship"}, parents=True)
    for request in REQUESTS:  # main's state at the next fork, brought forward from its last
        search_branch(store, OPERATOR, "sea", "main", request)
    run(store, OPERATOR, create_branch, "sea", name="agent/late", from_branch="main")          # forked later
    _check(store, "agent/new")
    _check(store, "agent/late")
    assert len(reads) - searched == 3 * len(REQUESTS)  # _check's fresh whole reads only: none by the kept sets


def test_a_bulk_write_is_read_whole_not_node_by_node(store, monkeypatch):
    reads = []
    whole = search_module.visible_node_heads
    monkeypatch.setattr(search_module, "visible_node_heads", lambda *a, **kw: reads.append(1) or whole(*a, **kw))
    monkeypatch.setattr(search_module, "FORWARD_MAX_SHARE", 0.0)
    monkeypatch.setattr(search_module, "FORWARD_MIN_CHANGES", 2)
    request = SearchRequest(query="storm", k=50)
    search_branch(store, OPERATOR, "sea", "main", request)
    run(store, OPERATOR, put_node, "sea", "main", "kb", "/one", node_type="kb:Fact", properties={"text": "storm"})
    search_branch(store, OPERATOR, "sea", "main", request)
    assert len(reads) == 1  # one change: brought forward
    run(store, OPERATOR, batch, "sea", "main", parents=True, upserts=[
        {"workspace": "kb", "path": f"/many/{i}", "node_type": "kb:Fact", "properties": {"text": f"storm {i}"}}
        for i in range(5)])
    found = search_branch(store, OPERATOR, "sea", "main", request)
    assert len(reads) == 2  # five changes, past the bound: read whole
    assert {r.path for r in found.results} == {"/one", *(f"/many/{i}" for i in range(5))}
