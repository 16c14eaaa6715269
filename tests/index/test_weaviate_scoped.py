"""The scoped layout of :class:`~kg.index.weaviate.WeaviateVectorIndex`.

One Weaviate collection per (workspace, branch, embedding model), filled by ``place`` and read
through :class:`~kg.index.base.CollectionScope` by ``knn``, ``bm25`` and ``hybrid``. Every test runs
the real ``weaviate-client`` against the test server of ``tests/weaviate_server.py`` (or the
Weaviate of ``KG_TEST_WEAVIATE_URL``), each in a repository of its own, dropped afterwards.

Expected answers are computed here by brute force: the objects each scope's collection holds
(the last placement of each version key), kept when their version key is allowed, each chunk
(``seq``) once at its best cosine similarity, ranked by similarity descending, ties by seq.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator, Sequence

import numpy as np
import pytest

from kg.errors import InvalidInput
from kg.index.base import CollectionScope, IndexedChunk, IndexHit, Placement, SearchScope
from kg.index.weaviate import WeaviateVectorIndex, object_id

MODEL = "scoped-test-model"
DIM = 8
WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]


@pytest.fixture
def open_index(weaviate_url: str) -> Iterator:
    """A factory of indexes on the test server (kwargs go to the constructor); closes them."""
    opened: list[WeaviateVectorIndex] = []

    def make(**kwargs) -> WeaviateVectorIndex:
        index = WeaviateVectorIndex(weaviate_url, init_timeout_s=10.0, **kwargs)
        opened.append(index)
        return index

    yield make
    for index in opened:
        index.close()


@pytest.fixture
def index(open_index) -> WeaviateVectorIndex:
    return open_index()


@pytest.fixture
def repo(index: WeaviateVectorIndex) -> Iterator[str]:
    key = f"scoped-{uuid.uuid4().hex}"
    yield key
    index.drop(key)


def unit(n: int, seed: int, dim: int = DIM) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=(n, dim))
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


def chunks(key: str, seqs: Sequence[int], vectors: np.ndarray, *, model: str = MODEL,
           texts: Sequence[str] | None = None) -> tuple[IndexedChunk, ...]:
    """Chunks 0.. of content key ``key`` with the given seqs and vectors."""
    return tuple(IndexedChunk(s, key, i, texts[i] if texts else f"{WORDS[s % 8]} chunk{s}",
                              model, np.asarray(vectors[i], dtype=np.float32))
                 for i, s in enumerate(seqs))


def put(ws: int, br: int, node: str, cs: tuple[IndexedChunk, ...], *, path: str = "/docs/x",
        node_type: str = "note", properties: dict | None = None) -> Placement:
    return Placement(ws, br, node, path, node_type, properties or {}, cs)


def scope(ws: int, br: int, keys, filters: dict | None = None, model: str = MODEL) -> CollectionScope:
    return CollectionScope(model, ws, br, frozenset(keys), filters)


def seqs(hits: list[IndexHit]) -> list[int]:
    return [h.seq for h in hits]


def brute(placements: Sequence[Placement], scopes: Sequence[CollectionScope], query: np.ndarray,
          k: int) -> list[tuple[int, float]]:
    """(seq, similarity) of the exact top k of a search of ``MODEL``, as the module docstring
    describes (a scope reads its (workspace, branch) collection of the searched model)."""
    q = query / np.linalg.norm(query)
    best: dict[int, float] = {}
    for s in scopes:
        held: dict[str, Placement] = {}
        for p in placements:
            if (p.workspace_id, p.branch_id, p.chunks[0].model) == (s.workspace_id, s.branch_id, MODEL):
                held[p.version_key] = p
        for vk, p in held.items():
            if vk in s.version_keys:
                for c in p.chunks:
                    score = float(np.dot(c.vector / np.linalg.norm(c.vector), q))
                    best[c.seq] = max(best.get(c.seq, -2.0), score)
    return sorted(best.items(), key=lambda t: (-t[1], t[0]))[:k]


def assert_exact(hits: list[IndexHit], expected: list[tuple[int, float]]) -> None:
    assert seqs(hits) == [s for s, _ in expected]
    assert [h.rank for h in hits] == list(range(1, len(hits) + 1))
    for h, (_, score) in zip(hits, expected, strict=True):
        assert h.score == pytest.approx(score, abs=1e-5)
        assert h.distance == pytest.approx(max(0.0, 1.0 - score), abs=1e-5)


def scoped_name(repo: str, model: str, ws: int, br: int) -> str:
    h = lambda t, n: hashlib.sha256(t.encode()).hexdigest()[:n]  # noqa: E731
    return f"KgChunks_{h(repo, 12)}_{h(model, 10)}_w{ws}_b{br}"


def counts(index: WeaviateVectorIndex, repo: str) -> dict[tuple, int]:
    return {(c["name"], c["workspace_id"], c["branch_id"]): c["objects"]
            for c in index.stats(repo)["collections"]}


# -- 1. collections --------------------------------------------------------------------------------


def test_place_creates_only_the_placed_collection(index, repo):
    v = unit(3, 1)
    written = index.place(repo, [put(1, 7, "n1", chunks("K1", [1, 2], v[:2])),
                                 put(1, 7, "n2", chunks("K2", [3], v[2:]))])
    assert written == 3
    name = scoped_name(repo, MODEL, 1, 7)
    stats = index.stats(repo)
    assert stats["collections"] == [{"name": name, "model": MODEL, "workspace_id": 1,
                                     "branch_id": 7, "objects": 3}]
    assert stats["chunks"] == 3 and stats["models"] == {MODEL: 3} and stats["dims"] == {MODEL: DIM}
    assert index.client.collections.exists(name)
    assert not index.client.collections.exists(scoped_name(repo, MODEL, 1, 8))
    assert index.knn(repo, v[0], 5, model=MODEL, scope=SearchScope((), [scope(1, 8, {"n1:K1"})])) == []


# -- 2. visibility ---------------------------------------------------------------------------------


def test_knn_returns_only_allowed_version_keys(index, repo):
    v = unit(5, 2)
    ps = [put(1, 1, f"n{i}", chunks(f"K{i}", [i + 1], v[i:i + 1])) for i in range(4)]
    ps.append(put(1, 2, "n4", chunks("K4", [5], v[4:5])))  # only in branch 2
    index.place(repo, ps)
    allowed = {"n0:K0", "n2:K2", "n4:K4", "n1:K0"}  # n4 is not in branch 1; n1 never had K0
    sc = [scope(1, 1, allowed)]
    hits = index.knn(repo, v[1], 10, model=MODEL, scope=SearchScope((), sc))
    assert_exact(hits, brute(ps, sc, v[1], 10))
    assert sorted(seqs(hits)) == [1, 3]
    for missing in (scope(1, 9, {"n0:K0"}), scope(2, 1, {"n0:K0"})):
        assert index.knn(repo, v[0], 5, model=MODEL, scope=SearchScope((), [missing])) == []
    assert index.knn(repo, v[0], 5, model="other-model", scope=SearchScope((), [scope(1, 1, {"n0:K0"})])) == []
    assert index.knn(repo, v[0], 5, model=MODEL, scope=SearchScope((), [scope(1, 1, set())])) == []


# -- 3. several scopes -----------------------------------------------------------------------------


def test_own_and_ancestor_scopes_merge_exactly_and_once_per_chunk(index, repo):
    v = unit(12, 3)
    parent = [put(1, 1, f"p{i}", chunks(f"P{i}", [10 + 2 * i, 11 + 2 * i], v[2 * i:2 * i + 2]))
              for i in range(4)]
    shared = chunks("S", [30], v[8:9])
    parent.append(put(1, 1, "s1", shared))
    child = [put(1, 2, f"c{i}", chunks(f"C{i}", [40 + i], v[9 + i:10 + i])) for i in range(2)]
    child += [put(1, 2, "s2", shared), put(1, 2, "s3", shared)]  # one chunk, three nodes
    ps = parent + child
    index.place(repo, ps)
    sc = [scope(1, 2, {p.version_key for p in child}),
          scope(1, 1, {p.version_key for p in parent if p.node_id != "p3"})]
    for q in [*unit(4, 33), v[8]]:
        for k in (1, 3, 20):
            hits = index.knn(repo, q, k, model=MODEL, scope=SearchScope((), sc))
            assert_exact(hits, brute(ps, sc, q, k))
    everything = index.knn(repo, v[8], 50, model=MODEL, scope=SearchScope((), sc))
    assert seqs(everything)[0] == 30 and seqs(everything).count(30) == 1
    assert len(everything) == 6 + 1 + 2  # p0..p2 two chunks each, shared once, c0, c1
    assert not {16, 17} & set(seqs(everything))


# -- 4. overrides ----------------------------------------------------------------------------------


def test_a_child_override_hides_the_parents_version(index, repo):
    v = unit(5, 4)
    ps = [put(1, 1, "n1", chunks("K1", [1, 2], v[:2])), put(1, 1, "n2", chunks("K3", [5], v[4:])),
          put(1, 2, "n1", chunks("K2", [3, 4], v[2:4]))]
    index.place(repo, ps)
    sc = [scope(1, 2, {"n1:K2"}), scope(1, 1, {"n2:K3"})]
    hits = index.knn(repo, v[0], 10, model=MODEL, scope=SearchScope((), sc))
    assert_exact(hits, brute(ps, sc, v[0], 10))
    assert sorted(seqs(hits)) == [3, 4, 5]
    assert {h.content_key for h in hits} == {"K2", "K3"}
    text = index.bm25(repo, "chunk1 chunk2 chunk3 chunk4", 10,
                      scope=SearchScope((), [scope(1, 2, {"n1:K2"}), scope(1, 1, {"n2:K3"})]))
    assert sorted(seqs(text)) == [3, 4]


# -- 5. filters ------------------------------------------------------------------------------------


FILTER_NODES = [  # node, path, type, properties
    ("a", "/docs/a", "note", {"status": "open", "count": 3, "flag": True, "tags": ["x"], "z": None}),
    ("b", "/docs/b", "task", {"status": "done", "count": 4, "flag": False}),
    ("c", "/notes/c", "note", {"status": "open", "count": 3, "flag": False}),
    ("d", "/docs2/d", "task", {"status": "open", "count": 5, "flag": True}),
]


@pytest.mark.parametrize("filters, expected", [
    ({"path_prefix": "/docs/"}, {"a", "b"}),
    ({"path_prefix": "/docs"}, {"a", "b"}),  # whole segments: not /docs2/d
    ({"path_prefix": "/docs", "path_prefix_mode": "raw"}, {"a", "b", "d"}),
    ({"path_prefix": "/docs/a"}, {"a"}),
    ({"path_prefix": "/docs/a", "path_prefix_mode": "raw"}, {"a"}),
    ({"path_prefix": "/"}, {"a", "b", "c", "d"}),
    ({"node_type": "note"}, {"a", "c"}),
    ({"where": {"status": "open"}}, {"a", "c", "d"}),
    ({"where": {"count": 3}}, {"a", "c"}),
    ({"where": {"count": 3.0}}, {"a", "c"}),
    ({"where": {"flag": True}}, {"a", "d"}),
    ({"where": {"flag": False, "status": "open"}}, {"c"}),
    ({"where": {"status": "open"}, "node_type": "task", "path_prefix": "/docs"}, set()),
    ({"where": {"status": "open"}, "node_type": "task", "path_prefix": "/docs", "path_prefix_mode": "raw"}, {"d"}),
    ({"where": {"status": "closed"}}, set()),
    ({"where": {"tags": ["x"]}}, {"a", "b", "c", "d"}),
    ({"where": {"z": None}}, {"a", "b", "c", "d"}),
    ({"where": {"tags": ["x"], "z": None, "count": 4}}, {"b"}),
])
def test_scope_filters_narrow_inside_weaviate(index, repo, filters, expected):
    v = unit(8, 5)
    ps = [put(3, 4, n, chunks(f"K{n}", [10 + 2 * i, 11 + 2 * i], v[2 * i:2 * i + 2]), path=path,
              node_type=t, properties=props) for i, (n, path, t, props) in enumerate(FILTER_NODES)]
    index.place(repo, ps)
    keys = {p.version_key for p in ps}
    sc = [scope(3, 4, keys, filters)]
    only = [p for p in ps if p.node_id in expected]
    for k in (1, 2, 8):  # the filter applies before the top k: k hits whenever k exist
        hits = index.knn(repo, v[7], k, model=MODEL, scope=SearchScope((), sc))
        assert_exact(hits, brute(only, [scope(3, 4, keys)], v[7], k))
    text = index.bm25(repo, "chunk10 chunk12 chunk14 chunk16", 8, scope=SearchScope((), sc))
    assert sorted(seqs(text)) == sorted(10 + 2 * i for i, n in enumerate("abcd") if n in expected)


# -- 6. re-placing ---------------------------------------------------------------------------------


def test_placing_again_is_idempotent_and_the_latest_placement_wins(index, repo):
    v = unit(3, 6)
    ps = [put(2, 5, "n1", chunks("K1", [1, 2], v[:2]), path="/docs/one", properties={"s": "a"}),
          put(2, 5, "n2", chunks("K2", [3], v[2:]), path="/docs/two")]
    name = scoped_name(repo, MODEL, 2, 5)
    assert index.place(repo, ps) == 3
    assert index.place(repo, ps + ps) == 3
    assert counts(index, repo) == {(name, 2, 5): 3}
    fetched = index.client.collections.get(name).query.fetch_objects(limit=100).objects
    assert {str(o.uuid) for o in fetched} == {
        str(object_id(f"{repo}/w2", "b5", p.version_key, c.chunk_index, MODEL))
        for p in ps for c in p.chunks}
    moved = put(2, 5, "n1", ps[0].chunks, path="/moved/one", properties={"s": "b"})
    assert index.place(repo, [moved]) == 2
    assert counts(index, repo) == {(name, 2, 5): 3}
    keys = {"n1:K1", "n2:K2"}

    def found(filters):
        return sorted(seqs(index.knn(repo, v[0], 10, model=MODEL, scope=SearchScope((), [scope(2, 5, keys, filters)]))))

    assert found({"path_prefix": "/moved/"}) == [1, 2]
    assert found({"path_prefix": "/docs/"}) == [3]
    assert found({"where": {"s": "a"}}) == []
    assert found({"where": {"s": "b"}}) == [1, 2]
    # In one call the later of two placements of one version wins.
    assert index.place(repo, [moved, ps[0]]) == 2
    assert found({"path_prefix": "/docs/"}) == [1, 2, 3]


# -- 7. marks and drops ----------------------------------------------------------------------------


def test_marks_drop_and_drop_branch(index, repo):
    assert index.placement_marks(repo) == (0, 0)
    index.advance_placement_marks(repo, 17, 4)
    assert index.placement_marks(repo) == (17, 4)
    assert index.stats(repo)["placed"] == {"seq": 17, "version": 4}
    index.advance_placement_marks(repo, 20, 9)
    assert index.placement_marks(repo) == (20, 9)
    v = unit(4, 7)
    ps = [put(1, 1, "a", chunks("A", [1], v[:1])), put(1, 2, "b", chunks("B", [2], v[1:2])),
          put(2, 2, "c", chunks("C", [3], v[2:3])),
          put(1, 2, "d", chunks("D", [4], v[3:4], model="model-two"))]
    index.place(repo, ps)
    names = {(1, 1): scoped_name(repo, MODEL, 1, 1), (1, 2): scoped_name(repo, MODEL, 1, 2),
             (2, 2): scoped_name(repo, MODEL, 2, 2)}
    two = scoped_name(repo, "model-two", 1, 2)
    assert sorted(index.drop_branch(repo, 2)) == sorted([names[1, 2], names[2, 2], two])
    assert counts(index, repo) == {(names[1, 1], 1, 1): 1}
    assert index.drop_branch(repo, 2) == []
    assert index.knn(repo, v[1], 5, model=MODEL, scope=SearchScope((), [scope(1, 2, {"b:B"})])) == []
    assert seqs(index.knn(repo, v[0], 5, model=MODEL, scope=SearchScope((), [scope(1, 1, {"a:A"})]))) == [1]
    index.drop(repo)
    assert index.placement_marks(repo) == (0, 0)
    assert index.stats(repo)["collections"] == []
    assert not index.client.collections.exists(names[1, 1])


# -- 8. bm25 and hybrid ----------------------------------------------------------------------------


def test_bm25_and_hybrid_with_scopes(index, repo):
    v = unit(6, 8)
    texts = ["golf hotel", "golf india", "golf juliet", "kilo lima", "golf golf", "golf mike"]
    ps = [put(1, 1, f"n{i}", chunks(f"K{i}", [i + 1], v[i:i + 1], texts=[texts[i]])) for i in range(5)]
    ps += [put(1, 1, "copy", ps[0].chunks), put(1, 2, "n5", chunks("K5", [6], v[5:], texts=[texts[5]])),
           put(1, 2, "copy2", ps[0].chunks)]
    index.place(repo, ps)
    allowed = {"n0:K0", "n1:K1", "n3:K3", "copy:K0"}
    sc = [scope(1, 2, {"n5:K5", "copy2:K0"}), scope(1, 1, allowed)]
    hits = index.bm25(repo, "golf", 10, scope=SearchScope((), sc))
    assert sorted(seqs(hits)) == [1, 2, 6]  # seq 3 and 5 not allowed, seq 4 has no golf
    assert all(h.score > 0 and h.distance is None for h in hits)
    assert [h.rank for h in hits] == [1, 2, 3]
    for fusion in ("ranked", "relative_score"):
        result = index.hybrid(repo, "golf", v[3], 10, model=MODEL, alpha=0.25, fusion_type=fusion,
                              scope=SearchScope((), sc))
        assert (result.alpha, result.fusion_type) == (0.25, fusion)
        assert sorted(seqs(result.hits)) == [1, 2, 4, 6]
        assert [h.rank for h in result.hits] == [1, 2, 3, 4]
    only_vector = index.hybrid(repo, "golf", v[3], 3, model=MODEL, alpha=1.0, scope=SearchScope((), sc[1:]))
    knn = index.knn(repo, v[3], 3, model=MODEL, scope=SearchScope((), sc[1:]))
    assert seqs(only_vector.hits) == seqs(knn)
    assert index.hybrid(repo, "golf", v[0], 5, model=MODEL, scope=SearchScope((), [scope(1, 9, {"n0:K0"})])).hits == []


# -- 9. large allowed sets -------------------------------------------------------------------------


U = unit(1, 77)[0]  # the direction of a cluster of hidden nodes


def _large_world() -> list[Placement]:
    """20 nodes n0..n19 over branches 1 and 2 (every third with two chunks), and per branch six
    nodes z.. next to ``U`` whose text repeats "zulu" (hidden: they force the batched path)."""
    v = unit(30, 9)
    out = []
    for i in range(20):
        vs = v[i:i + 1] if i % 3 else v[20 + i // 3:21 + i // 3].repeat(2, 0) * [[1], [0.5]] + v[i:i + 1]
        seq0 = 100 + 2 * i
        texts = [f"{WORDS[i % 8]} {WORDS[(i * 3 + j) % 8]} extra{i % 4} zulu" for j in range(len(vs))]
        out.append(put(1, 1 + i % 2, f"n{i}", chunks(f"K{i}", list(range(seq0, seq0 + len(vs))), vs,
                                                    texts=texts), path=f"/p{i % 3}/n{i}"))
    near = U + 0.1 * unit(12, 78)
    for j in range(12):
        out.append(put(1, 1 + j % 2, f"z{j}", chunks(f"Z{j}", [200 + j], near[j:j + 1],
                                                    texts=["zulu zulu zulu"]), path="/p1/z"))
    return out


def _shown(p: Placement) -> bool:
    return p.node_id.startswith("n") and int(p.node_id[1:]) % 4 in (0, 3)


def test_large_allowed_sets_are_exact(open_index, repo):
    small = open_index(filter_batch_keys=3, probe_depth=4)
    big = open_index(filter_batch_keys=1000)
    ps = _large_world()
    small.place(repo, ps)
    by_branch = {b: {p.version_key for p in ps if p.branch_id == b and _shown(p)} for b in (1, 2)}
    assert [len(by_branch[b]) for b in (1, 2)] == [5, 5]
    for filters in (None, {"path_prefix": "/p1/"}):
        sc = [scope(1, 2, by_branch[2], filters), scope(1, 1, by_branch[1], filters)]
        visible = [p for p in ps if filters is None or p.path.startswith("/p1/")]
        for q in [U, -U, *unit(4, 99), *(ps[i].chunks[0].vector for i in (1, 2, 3, 5))]:
            for k in (1, 2, 5, 40):
                hits = small.knn(repo, q, k, model=MODEL, scope=SearchScope((), sc))
                assert_exact(hits, brute(visible, sc, q, k))
        allowed_seqs = {c.seq for p in visible if _shown(p) for c in p.chunks}
        for query in ("zulu", "alpha", "bravo extra1", "golf hotel extra3", "echo"):
            for k in (1, 3, 40):
                got = small.bm25(repo, query, k, scope=SearchScope((), sc))
                want = big.bm25(repo, query, k, scope=SearchScope((), sc))
                assert [(h.seq, h.content_key) for h in got] == [(h.seq, h.content_key) for h in want]
                assert [h.score for h in got] == pytest.approx([h.score for h in want])
                assert len(want) == len(set(seqs(want))) and set(seqs(got)) <= allowed_seqs
        assert len(small.bm25(repo, "zulu", 40, scope=SearchScope((), sc))) == len(allowed_seqs)


def test_large_allowed_set_counts_a_chunk_shown_by_two_nodes_once(open_index, repo):
    """k distinct chunks when k exist, although one chunk is placed for two allowed nodes."""
    small = open_index(filter_batch_keys=3, probe_depth=4)
    q = unit(1, 10)[0]
    near = (q + 0.05 * unit(6, 11)).astype(np.float32)   # not allowed, next to the query
    far = (-q + 0.3 * unit(3, 12)).astype(np.float32)    # allowed, far from it
    hit = chunks("KA", [1], q[None, :], texts=["golf golf golf"])
    ps = [put(1, 1, "a1", hit), put(1, 1, "a2", hit)]
    ps += [put(1, 1, f"x{i}", chunks(f"X{i}", [10 + i], near[i:i + 1], texts=["golf hotel"]))
           for i in range(6)]
    ps += [put(1, 1, f"f{i}", chunks(f"F{i}", [20 + i], far[i:i + 1], texts=["golf india"]))
           for i in range(3)]
    small.place(repo, ps)
    big = open_index(filter_batch_keys=1000)
    sc = [scope(1, 1, {"a1:KA", "a2:KA", "f0:F0", "f1:F1", "f2:F2"})]
    for index in (big, small):
        hits = index.knn(repo, q, 2, model=MODEL, scope=SearchScope((), sc))
        assert_exact(hits, brute(ps, sc, q, 2))  # [1, 21]
    want = big.bm25(repo, "golf", 2, scope=SearchScope((), sc))
    assert seqs(want) == [1, 20]
    assert seqs(small.bm25(repo, "golf", 2, scope=SearchScope((), sc))) == seqs(want)


def test_a_chunk_placed_for_many_nodes_leaves_k_distinct_hits(index, repo):
    """Rows of one chunk for several nodes must not crowd distinct chunks out of the top k."""
    e = np.eye(DIM, dtype=np.float32)
    a = chunks("A", [1], e[:1], texts=["golf golf golf"])
    b = chunks("B", [2], (e[0] + 0.5 * e[1])[None, :], texts=["golf golf hotel"])
    c = chunks("C", [3], (e[0] + 2.0 * e[1])[None, :], texts=["golf hotel india"])
    ps = ([put(1, 1, f"a{i}", a) for i in range(3)] + [put(1, 1, f"b{i}", b) for i in range(10)]
          + [put(1, 1, "c", c)])
    index.place(repo, ps)
    sc = [scope(1, 1, {p.version_key for p in ps})]
    hits = index.knn(repo, e[0], 3, model=MODEL, scope=SearchScope((), sc))
    assert_exact(hits, brute(ps, sc, e[0], 3))  # [1, 2, 3]
    assert seqs(index.bm25(repo, "golf", 3, scope=SearchScope((), sc))) == [1, 2, 3]
    fused = index.hybrid(repo, "golf", e[0], 3, model=MODEL, scope=SearchScope((), sc))
    assert seqs(fused.hits) == [1, 2, 3]


# -- 10. refusals ----------------------------------------------------------------------------------


def test_place_refuses_mixed_keys_and_a_wrong_dimension(index, repo):
    v = unit(3, 13)
    mixed = chunks("K1", [1], v[:1]) + chunks("K2", [2], v[1:2])
    ok = put(1, 1, "good", chunks("G", [5], v[2:]))
    with pytest.raises(InvalidInput):
        index.place(repo, [ok, put(1, 1, "bad", mixed)])
    assert index.stats(repo)["collections"] == []
    index.place(repo, [ok])
    before = counts(index, repo)
    wide = chunks("W", [7], unit(1, 14, dim=DIM + 4))
    for ws, br in ((1, 1), (1, 3)):  # the same collection, and a new branch of the same model
        with pytest.raises(InvalidInput):
            index.place(repo, [put(ws, br, "w", wide), put(1, 1, "fine", chunks("F", [8], v[:1]))])
        assert counts(index, repo) == before


def test_a_collection_dropped_during_a_search_answers_nothing_instead_of_failing(index, repo, monkeypatch):
    """Found by a new-user pass: a branch reset (or a reindex) while a search of it ran gave 503
    "could not find class". The search listed the collection, then it was deleted: it now
    counts as empty; a failure of a collection that still exists is still raised."""
    vectors = unit(4, seed=7)
    own = put(1, 2, "n1", chunks("k1", [1, 2], vectors[:2]))
    parent = put(1, 1, "n2", chunks("k2", [3, 4], vectors[2:]))
    index.place(repo, [own, parent])
    scopes = [scope(1, 2, {own.version_key}), scope(1, 1, {parent.version_key})]
    listed = index._collections(repo)
    assert len(seqs(index.knn(repo, vectors[0], 4, model=MODEL, scope=SearchScope((), scopes)))) == 4
    index.drop_branch(repo, 2)  # deleted after the search listed it
    monkeypatch.setattr(index, "_collections", lambda repo_key: listed)
    for hits in (index.knn(repo, vectors[0], 4, model=MODEL, scope=SearchScope((), scopes)),
                 index.bm25(repo, " ".join(WORDS), 4, scope=SearchScope((), scopes)),
                 index.hybrid(repo, " ".join(WORDS), vectors[0], 4, model=MODEL, scope=SearchScope((), scopes)).hits):
        assert set(seqs(hits)) <= {3, 4} and seqs(hits)
