"""The SearchIndex contract (searches through a SearchScope), run against every backend; then the
embedded index's own duties.

A backend enters the suite through :data:`BACKENDS`: how to open an instance over some storage,
how to make its writes durable, and whether a second instance over the same storage sees them.

Weaviate runs the suite in every run through the real ``weaviate-client``: against the
Weaviate-compatible test server of ``tests/weaviate_server.py`` (REST and gRPC on loopback
ports), or against a real Weaviate instead when ``KG_TEST_WEAVIATE_URL`` is set
(docs/guides/scale-out.md says how to start one). Weaviate keeps a collection per workspace and branch
and reads a scope's collections, so the suite drives it through :class:`PlacedByContentKey`
(the scope's collections made from its content keys): what the suite asserts of ranking,
filtering and refusals holds for its searches; ``tests/index/test_weaviate_scoped.py`` tests the
rest (several branches, version keys, translated filters).
"""

from __future__ import annotations

import dataclasses
import json
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pytest

from kg.errors import BackendUnavailable, InvalidInput
from kg.index.base import (
    CollectionScope,
    IndexedChunk,
    IndexHit,
    Placement,
    SearchScope,
)
from kg.index.embedded import EmbeddedVectorIndex
from kg.index.weaviate import WeaviateVectorIndex

DIM = 16
MODEL = "fake:test-16"
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]


@dataclass
class Backend:
    """How the suite drives one kind of index."""

    name: str
    open: Callable[[], ContentKeyed]  # a new instance over this test's storage
    persist: Callable[[ContentKeyed, str], None]  # make a repository's writes durable
    durable: bool  # whether a new instance sees what an earlier one persisted
    close: Callable[[], None] = lambda: None  # release what open() made, after the test


def _embedded_memory(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    return Backend(
        "embedded-memory", lambda: EmbeddedVectorIndex(None), lambda ix, key: None, False
    )


def _embedded_disk(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    return Backend(
        "embedded-disk",
        lambda: EmbeddedVectorIndex(tmp_path / "data"),
        lambda ix, key: ix.flush(key),
        True,
    )


class ContentKeyed(Protocol):
    """What the suite drives: a :class:`~kg.index.base.SearchIndex`'s searches, fed chunk by
    chunk (the embedded index's own ``sync`` and ``watermark``)."""

    engine: str

    def sync(self, repo_key: str, chunks: Sequence[IndexedChunk]) -> None: ...
    def watermark(self, repo_key: str) -> int: ...
    def knn(self, repo_key: str, vector: np.ndarray, k: int, *, model: str, scope: SearchScope,
            max_distance: float | None = None) -> list[IndexHit]: ...
    def bm25(self, repo_key: str, query: str, k: int, *, scope: SearchScope) -> list[IndexHit]: ...
    def flush(self, repo_key: str) -> None: ...
    def drop(self, repo_key: str) -> None: ...
    def stats(self, repo_key: str) -> dict[str, Any]: ...
    def close(self) -> None: ...


class PlacedByContentKey:
    """A :class:`~kg.index.weaviate.WeaviateVectorIndex` fed chunk by chunk, its scopes' collections
    made from their content keys.

    Each content key (per model) is the one node version ``n-<key>`` of workspace 1, branch 1,
    so a search allowing content keys is a search of that collection allowing their version
    keys; ``sync`` places chunks and keeps its watermark in the placement marks.
    """

    def __init__(self, index: WeaviateVectorIndex) -> None:
        self.index = index
        self.engine = index.engine

    def sync(self, repo_key: str, chunks: Sequence[IndexedChunk]) -> None:
        groups: dict[tuple[str, str], dict[int, IndexedChunk]] = {}
        for c in chunks:
            groups.setdefault((c.model, c.content_key), {}).setdefault(c.seq, c)
        if not groups:
            return
        self.index.place(repo_key, [
            Placement(1, 1, f"n-{key}", f"/n/{key}", "note", {},
                      tuple(sorted(group.values(), key=lambda c: c.chunk_index)))
            for (_, key), group in groups.items()])
        top = max(c.seq for c in chunks)
        if top > self.watermark(repo_key):
            self.index.advance_placement_marks(repo_key, top, 0)

    def watermark(self, repo_key: str) -> int:
        return self.index.placement_marks(repo_key)[0]

    def knn(self, repo_key: str, vector: np.ndarray, k: int, *, model: str,
            scope: SearchScope, max_distance: float | None = None) -> list[IndexHit]:
        return self.index.knn(repo_key, vector, k, model=model, max_distance=max_distance,
                              scope=self._placed(scope, model))

    def bm25(self, repo_key: str, query: str, k: int, *, scope: SearchScope) -> list[IndexHit]:
        return self.index.bm25(repo_key, query, k, scope=self._placed(scope, "any model"))

    def flush(self, repo_key: str) -> None:
        self.index.flush(repo_key)

    def drop(self, repo_key: str) -> None:
        self.index.drop(repo_key)

    def stats(self, repo_key: str) -> dict[str, Any]:
        return self.index.stats(repo_key)

    def close(self) -> None:
        self.index.close()

    @staticmethod
    def _placed(scope: SearchScope, model: str) -> SearchScope:
        keys = scope.content_keys
        return SearchScope(keys, [CollectionScope(model, 1, 1, frozenset(f"n-{key}:{key}" for key in keys))])


def _weaviate(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    """Weaviate through the real client: the test server, or KG_TEST_WEAVIATE_URL's server."""
    url = request.getfixturevalue("weaviate_url")
    opened: list[PlacedByContentKey] = []

    def open_index() -> PlacedByContentKey:
        index = PlacedByContentKey(WeaviateVectorIndex(url, init_timeout_s=10.0))
        opened.append(index)
        return index

    def close() -> None:
        for index in opened:
            index.close()

    return Backend("weaviate", open_index, lambda ix, key: ix.flush(key), True, close)


BACKENDS: dict[str, Callable[[pytest.FixtureRequest, Path], Backend]] = {
    "embedded-memory": _embedded_memory,
    "embedded-disk": _embedded_disk,
    "weaviate": _weaviate,
}


@pytest.fixture(params=list(BACKENDS))
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    made = BACKENDS[request.param](request, tmp_path)
    yield made
    made.close()


@pytest.fixture
def index(backend: Backend) -> ContentKeyed:
    return backend.open()


@pytest.fixture
def repo(index: ContentKeyed) -> Iterator[str]:
    """A fresh repository key, dropped afterwards."""
    key = uuid.uuid4().hex
    yield key
    index.drop(key)


def unit_vectors(n: int, dim: int = DIM, seed: int = 0) -> np.ndarray:
    vectors = np.random.default_rng(seed).normal(size=(n, dim))
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


def make_chunks(
    n: int, *, start: int = 1, model: str = MODEL, dim: int = DIM, seed: int = 0
) -> list[IndexedChunk]:
    """n chunks, seqs start..start+n-1, two per content key, each with a unique word."""
    vectors = unit_vectors(n, dim, seed)
    chunks = []
    for i in range(n):
        seq = start + i
        text = f"{WORDS[seq % len(WORDS)]} {WORDS[(seq * 3) % len(WORDS)]} the chunk{seq}"
        chunks.append(
            IndexedChunk(
                seq=seq,
                content_key=f"key{seq // 2}",
                chunk_index=seq % 2,
                text=text,
                model=model,
                vector=vectors[i],
            )
        )
    return chunks


def keys_of(chunks: list[IndexedChunk]) -> set[str]:
    return {c.content_key for c in chunks}


def brute_force(chunks: list[IndexedChunk], query: np.ndarray, k: int) -> list[int]:
    """Seqs of the k most similar chunks, ties by seq."""
    q = query / np.linalg.norm(query)
    scored = sorted(chunks, key=lambda c: (-float(np.dot(c.vector, q)), c.seq))
    return [c.seq for c in scored[:k]]


def seqs(hits: list[IndexHit]) -> list[int]:
    return [h.seq for h in hits]


# -- sync and watermark ----------------------------------------------------------------------------


def test_an_unknown_repository_is_empty(index, repo):
    assert index.watermark(repo) == 0
    assert index.knn(repo, unit_vectors(1)[0], 5, model=MODEL, scope=SearchScope({"key1"})) == []
    assert index.bm25(repo, "alpha", 5, scope=SearchScope({"key1"})) == []


def test_watermark_is_the_highest_seq_held(index, repo):
    chunks = make_chunks(10)
    index.sync(repo, chunks[5:])
    assert index.watermark(repo) == 10
    index.sync(repo, chunks[:5])
    assert index.watermark(repo) == 10


def test_sync_is_idempotent_by_seq(index, repo):
    chunks = make_chunks(20)
    index.sync(repo, chunks)
    index.sync(repo, chunks)
    index.sync(repo, chunks[3:9])
    assert index.watermark(repo) == 20
    every = keys_of(chunks)
    query = unit_vectors(1, seed=9)[0]
    assert len(index.knn(repo, query, 100, model=MODEL, scope=SearchScope(every))) == 20
    assert seqs(index.bm25(repo, "chunk7", 10, scope=SearchScope(every))) == [7]


def test_duplicate_seqs_in_one_batch_are_added_once(index, repo):
    chunks = make_chunks(4)
    index.sync(repo, chunks + chunks[1:3])
    hits = index.bm25(repo, "chunk2", 10, scope=SearchScope(keys_of(chunks)))
    assert seqs(hits) == [2]


def test_a_late_seq_below_the_watermark_is_still_added(index, repo):
    # A transaction that took seq 5 but committed after seq 6..10 were synced.
    chunks = make_chunks(10)
    index.sync(repo, chunks[:4] + chunks[5:])
    assert index.bm25(repo, "chunk5", 5, scope=SearchScope(keys_of(chunks))) == []
    index.sync(repo, chunks)
    assert seqs(index.bm25(repo, "chunk5", 5, scope=SearchScope(keys_of(chunks)))) == [5]
    assert index.watermark(repo) == 10


def test_repositories_are_isolated(index, repo):
    other = uuid.uuid4().hex
    try:
        index.sync(repo, make_chunks(6))
        index.sync(other, make_chunks(3, start=100))
        assert index.watermark(repo) == 6
        assert index.watermark(other) == 102
        assert index.bm25(other, "chunk2", 5, scope=SearchScope({"key1"})) == []
    finally:
        index.drop(other)


@pytest.mark.parametrize(
    "vector",
    [
        np.full(DIM, np.nan, dtype=np.float32),
        np.r_[np.ones(DIM - 1), np.inf].astype(np.float32),
        np.zeros(DIM, dtype=np.float32),
        np.ones(DIM + 1, dtype=np.float32),
        np.ones((2, DIM // 2), dtype=np.float32),
    ],
    ids=["nan", "inf", "zeros", "wrong-dim", "not-1d"],
)
def test_a_bad_vector_refuses_the_whole_batch_and_keeps_earlier_data(index, repo, vector):
    index.sync(repo, make_chunks(4))
    good = make_chunks(3, start=5)
    bad = IndexedChunk(
        seq=8, content_key="key4", chunk_index=0, text="bad", model=MODEL, vector=vector
    )
    with pytest.raises(InvalidInput):
        index.sync(repo, [*good, bad])
    assert index.watermark(repo) == 4
    assert seqs(index.bm25(repo, "chunk2", 5, scope=SearchScope({"key1"}))) == [2]
    assert index.bm25(repo, "chunk5", 5, scope=SearchScope({"key2"})) == []


def test_vectors_are_normalised_on_the_way_in(index, repo):
    chunk = make_chunks(1)[0]
    index.sync(repo, [dataclasses.replace(chunk, vector=chunk.vector * 7.5)])
    (hit,) = index.knn(repo, chunk.vector * 0.1, 1, model=MODEL, scope=SearchScope({chunk.content_key}))
    assert hit.score == pytest.approx(1.0, abs=1e-6)
    assert hit.distance == pytest.approx(0.0, abs=1e-6)


# -- knn ------------------------------------------------------------------------------------------


def test_knn_ranks_by_cosine_similarity(index, repo):
    chunks = make_chunks(60)
    index.sync(repo, chunks)
    query = unit_vectors(1, seed=42)[0]
    hits = index.knn(repo, query, 10, model=MODEL, scope=SearchScope(keys_of(chunks)))
    assert seqs(hits) == brute_force(chunks, query, 10)
    assert [h.rank for h in hits] == list(range(1, 11))
    assert all(a.score >= b.score for a, b in zip(hits, hits[1:], strict=False))
    by_seq = {c.seq: c for c in chunks}
    for hit in hits:
        chunk = by_seq[hit.seq]
        assert (hit.content_key, hit.chunk_index, hit.text) == (
            chunk.content_key,
            chunk.chunk_index,
            chunk.text,
        )
        assert hit.score == pytest.approx(float(np.dot(chunk.vector, query)), abs=1e-5)
        assert hit.distance == pytest.approx(1.0 - hit.score, abs=1e-6)


def test_knn_ranks_only_the_given_content_keys(index, repo):
    chunks = make_chunks(60)
    index.sync(repo, chunks)
    query = unit_vectors(1, seed=42)[0]
    # Leave out the keys of the overall top 10: the top k comes from the rest, not a
    # filtered-down global top k.
    best = set(brute_force(chunks, query, 10))
    allowed_keys = keys_of(chunks) - {c.content_key for c in chunks if c.seq in best}
    allowed = [c for c in chunks if c.content_key in allowed_keys]
    hits = index.knn(repo, query, 10, model=MODEL, scope=SearchScope(allowed_keys))
    assert seqs(hits) == brute_force(allowed, query, 10)
    assert {h.content_key for h in hits} <= allowed_keys


def test_knn_ranks_only_the_given_model(index, repo):
    small = make_chunks(10, model="model-a", dim=8, seed=1)
    large = make_chunks(10, start=11, model="model-b", dim=32, seed=2)
    index.sync(repo, small + large)
    every = keys_of(small) | keys_of(large)
    query_a, query_b = unit_vectors(1, 8, seed=3)[0], unit_vectors(1, 32, seed=3)[0]
    hits_a = index.knn(repo, query_a, 50, model="model-a", scope=SearchScope(every))
    hits_b = index.knn(repo, query_b, 50, model="model-b", scope=SearchScope(every))
    assert sorted(seqs(hits_a)) == [c.seq for c in small]
    assert sorted(seqs(hits_b)) == [c.seq for c in large]
    assert index.knn(repo, unit_vectors(1, 8)[0], 5, model="model-c", scope=SearchScope(every)) == []


def test_knn_with_a_vector_of_the_wrong_dimension_is_refused(index, repo):
    index.sync(repo, make_chunks(4))
    with pytest.raises(InvalidInput):
        index.knn(repo, unit_vectors(1, DIM + 1)[0], 3, model=MODEL, scope=SearchScope({"key1"}))


@pytest.mark.parametrize(
    "vector", [np.zeros(DIM), np.full(DIM, np.nan), np.ones((2, DIM))], ids=["zero", "nan", "2d"]
)
def test_knn_with_an_unusable_query_vector_is_refused(index, repo, vector):
    index.sync(repo, make_chunks(4))
    with pytest.raises(InvalidInput):
        index.knn(repo, vector, 3, model=MODEL, scope=SearchScope({"key1"}))


def test_knn_max_distance_leaves_out_far_chunks(index, repo):
    chunks = make_chunks(60)
    index.sync(repo, chunks)
    query = unit_vectors(1, seed=5)[0]
    every = keys_of(chunks)
    unlimited = index.knn(repo, query, 60, model=MODEL, scope=SearchScope(every))
    limit = unlimited[7].distance
    hits = index.knn(repo, query, 60, model=MODEL, scope=SearchScope(every), max_distance=limit)
    assert seqs(hits) == seqs(unlimited[:8])
    assert all(h.distance <= limit for h in hits)
    assert index.knn(repo, query, 60, model=MODEL, scope=SearchScope(every), max_distance=-0.5) == []


def test_knn_ties_break_by_seq(index, repo):
    same = unit_vectors(1, seed=7)[0]
    chunks = [
        IndexedChunk(seq=s, content_key=f"k{s}", chunk_index=0, text="t", model=MODEL, vector=same)
        for s in (9, 3, 6, 1)
    ]
    index.sync(repo, chunks)
    hits = index.knn(repo, same, 3, model=MODEL, scope=SearchScope(keys_of(chunks)))
    assert seqs(hits) == [1, 3, 6]
    assert [h.rank for h in hits] == [1, 2, 3]


def test_knn_on_a_large_and_a_small_share_of_rows_matches_brute_force(index, repo):
    chunks = make_chunks(400, seed=11)
    index.sync(repo, chunks)
    query = unit_vectors(1, seed=12)[0]
    for share in (0.02, 0.1, 0.5, 1.0):
        allowed = [c for c in chunks if (c.seq // 2) % 100 < share * 100]
        hits = index.knn(repo, query, 15, model=MODEL, scope=SearchScope(keys_of(allowed)))
        assert seqs(hits) == brute_force(allowed, query, 15), share


# -- bm25 -----------------------------------------------------------------------------------------


def _text_chunks(texts: list[str], *, start: int = 1, model: str = MODEL) -> list[IndexedChunk]:
    vectors = unit_vectors(len(texts), seed=start)
    return [
        IndexedChunk(
            seq=start + i,
            content_key=f"doc{start + i}",
            chunk_index=0,
            text=text,
            model=model,
            vector=vectors[i],
        )
        for i, text in enumerate(texts)
    ]


def test_bm25_ranks_by_term_frequency_and_rarity(index, repo):
    chunks = _text_chunks(
        [
            "rotate the api key every month",
            "api key api key api key rotation",
            "the weather is nice",
            "key lime pie recipe",
        ]
    )
    index.sync(repo, chunks)
    hits = index.bm25(repo, "api key", 10, scope=SearchScope(keys_of(chunks)))
    assert seqs(hits) == [2, 1, 4]
    assert [h.rank for h in hits] == [1, 2, 3]
    assert all(h.score > 0 and h.distance is None for h in hits)
    assert hits[0].text == chunks[1].text


def test_bm25_ranks_only_the_given_content_keys(index, repo):
    chunks = _text_chunks(["api key api key", "api key notes", "api docs", "nothing here"])
    index.sync(repo, chunks)
    hits = index.bm25(repo, "api key", 10, scope=SearchScope({"doc2", "doc3", "doc4"}))
    assert seqs(hits) == [2, 3]


def test_bm25_covers_every_model(index, repo):
    a = _text_chunks(["shared word one"], start=1, model="model-a")
    b = _text_chunks(["shared word two"], start=2, model="model-b")
    index.sync(repo, a + b)
    assert sorted(seqs(index.bm25(repo, "shared", 10, scope=SearchScope({"doc1", "doc2"})))) == [1, 2]


def test_bm25_finds_cjk_text(index, repo):
    chunks = _text_chunks(["人工智能技术发展迅速", "机器学习的方法", "plain english"])
    index.sync(repo, chunks)
    assert seqs(index.bm25(repo, "人工智能", 5, scope=SearchScope(keys_of(chunks)))) == [1]


def test_bm25_a_word_in_every_chunk_still_matches(index, repo):
    chunks = _text_chunks(["cat one", "cat two", "cat three"])
    index.sync(repo, chunks)
    hits = index.bm25(repo, "cat", 5, scope=SearchScope(keys_of(chunks)))
    assert seqs(hits) == [1, 2, 3]
    assert all(h.score > 0 for h in hits)


# -- empty cases  -------------------------------------------------------------------


@pytest.mark.parametrize("query", ["", "   ", "the of and ?!", "\n"])
def test_bm25_with_a_query_without_terms_gives_nothing(index, repo, query):
    chunks = make_chunks(6)
    index.sync(repo, chunks)
    assert index.bm25(repo, query, 5, scope=SearchScope(keys_of(chunks))) == []


def test_searches_of_an_empty_repository_give_nothing(index, repo):
    query = unit_vectors(1)[0]
    assert index.knn(repo, query, 5, model=MODEL, scope=SearchScope({"key1"})) == []
    assert index.bm25(repo, "alpha", 5, scope=SearchScope({"key1"})) == []


@pytest.mark.parametrize(
    "content_keys", [set(), [], {"no-such-key"}], ids=["empty-set", "empty-list", "unknown"]
)
def test_a_filter_matching_nothing_gives_nothing(index, repo, content_keys):
    index.sync(repo, make_chunks(6))
    query = unit_vectors(1)[0]
    assert index.knn(repo, query, 5, model=MODEL, scope=SearchScope(content_keys)) == []
    assert index.bm25(repo, "alpha chunk3", 5, scope=SearchScope(content_keys)) == []


@pytest.mark.parametrize("k", [0, -1])
def test_a_nonpositive_k_gives_nothing(index, repo, k):
    chunks = make_chunks(6)
    index.sync(repo, chunks)
    assert index.knn(repo, unit_vectors(1)[0], k, model=MODEL, scope=SearchScope(keys_of(chunks))) == []
    assert index.bm25(repo, "chunk3", k, scope=SearchScope(keys_of(chunks))) == []


def test_a_sync_of_nothing_changes_nothing(index, repo):
    index.sync(repo, [])
    assert index.watermark(repo) == 0


# -- drop and persistence -------------------------------------------------------------------------


def test_drop_forgets_everything(backend, index, repo):
    chunks = make_chunks(8)
    index.sync(repo, chunks)
    backend.persist(index, repo)
    index.drop(repo)
    assert index.watermark(repo) == 0
    assert index.bm25(repo, "chunk3", 5, scope=SearchScope(keys_of(chunks))) == []
    assert backend.open().watermark(repo) == 0
    # The repository can be filled again.
    index.sync(repo, chunks[:2])
    assert index.watermark(repo) == 2


def test_drop_of_an_unknown_repository_is_a_no_op(index):
    index.drop(uuid.uuid4().hex)


def test_a_new_instance_gives_the_same_results_after_persist(backend, index, repo):
    if not backend.durable:
        pytest.skip(f"{backend.name} keeps nothing across instances")
    chunks = make_chunks(50) + make_chunks(10, start=51, model="other", dim=8, seed=3)
    index.sync(repo, chunks)
    backend.persist(index, repo)
    reopened = backend.open()
    every = keys_of(chunks)
    query = unit_vectors(1, seed=21)[0]
    assert reopened.watermark(repo) == index.watermark(repo) == 60
    before = index.knn(repo, query, 10, model=MODEL, scope=SearchScope(every), max_distance=1.2)
    after = reopened.knn(repo, query, 10, model=MODEL, scope=SearchScope(every), max_distance=1.2)
    assert seqs(after) == seqs(before)
    assert [h.score for h in after] == pytest.approx([h.score for h in before], abs=1e-6)
    assert [(h.content_key, h.chunk_index, h.text) for h in after] == [
        (h.content_key, h.chunk_index, h.text) for h in before
    ]
    other_query = unit_vectors(1, 8, seed=4)[0]
    assert seqs(reopened.knn(repo, other_query, 5, model="other", scope=SearchScope(every))) == seqs(
        index.knn(repo, other_query, 5, model="other", scope=SearchScope(every))
    )
    assert reopened.bm25(repo, "alpha beta", 10, scope=SearchScope(every)) == index.bm25(
        repo, "alpha beta", 10, scope=SearchScope(every)
    )
    # And it goes on from the persisted watermark.
    reopened.sync(repo, make_chunks(70))
    assert reopened.watermark(repo) == 70
    assert seqs(reopened.bm25(repo, "chunk65", 5, scope=SearchScope({"key32"}))) == [65]


# -- concurrency ----------------------------------------------------------------------------------


def test_searches_run_safely_while_a_sync_appends(index, repo):
    chunks = make_chunks(3000, seed=13)
    every = keys_of(chunks)
    errors: list[BaseException] = []
    done = threading.Event()
    seen: list[int] = []

    def search() -> None:
        query = unit_vectors(1, seed=14)[0]
        try:
            while not done.is_set():
                hits = index.knn(repo, query, 5, model=MODEL, scope=SearchScope(every))
                found = index.bm25(repo, "alpha", 5, scope=SearchScope(every))
                for batch in (hits, found):
                    assert [h.rank for h in batch] == list(range(1, len(batch) + 1))
                    assert len({h.seq for h in batch}) == len(batch)
                seen.append(len(hits))
        except BaseException as exc:  # reported below
            errors.append(exc)

    readers = [threading.Thread(target=search) for _ in range(2)]
    for reader in readers:
        reader.start()
    try:
        for start in range(0, len(chunks), 100):
            index.sync(repo, chunks[start : start + 100])
    finally:
        done.set()
        for reader in readers:
            reader.join()
    assert not errors, errors
    assert seen
    assert index.watermark(repo) == 3000
    query = unit_vectors(1, seed=14)[0]
    assert seqs(index.knn(repo, query, 5, model=MODEL, scope=SearchScope(every))) == brute_force(
        chunks, query, 5
    )


# -- the embedded index only ----------------------------------------------------------------------


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


def _filled(data_dir: Path, repo: str = "repo-1", n: int = 12) -> EmbeddedVectorIndex:
    index = EmbeddedVectorIndex(data_dir)
    index.sync(repo, make_chunks(n))
    index.flush(repo)
    return index


def test_embedded_snapshot_layout(data_dir):
    index = _filled(data_dir)
    index.sync("repo-1", make_chunks(4, start=13))
    index.flush("repo-1")
    folder = data_dir / "index" / "repo-1"
    names = sorted(p.name for p in folder.iterdir())
    # One generation only: the previous snapshot's files are gone, no temporary file is left.
    assert len(names) == 3
    assert names[0] == "meta.json"
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["format"] == 1
    assert meta["watermark"] == 16
    assert meta["rows"] == 16
    assert meta["models"] == [{"name": MODEL, "dim": DIM, "rows": 16, "file": names[2]}]
    assert meta["rows_file"] == names[1]


def _corrupt_meta(folder: Path) -> None:
    (folder / "meta.json").write_text("{not json")


def _wrong_version(folder: Path) -> None:
    meta = json.loads((folder / "meta.json").read_text())
    (folder / "meta.json").write_text(json.dumps({**meta, "format": 999}))


def _truncated_rows(folder: Path) -> None:
    path = next(folder.glob("rows-*.npz"))
    path.write_bytes(path.read_bytes()[:100])


def _short_vectors(folder: Path) -> None:
    path = next(folder.glob("vectors-*.npy"))
    np.save(path, unit_vectors(3))


def _missing_vectors(folder: Path) -> None:
    next(folder.glob("vectors-*.npy")).unlink()


def _escaping_file_name(folder: Path) -> None:
    meta = json.loads((folder / "meta.json").read_text())
    (folder / "meta.json").write_text(json.dumps({**meta, "rows_file": "../../rows.npz"}))


@pytest.mark.parametrize(
    "damage",
    [
        _corrupt_meta,
        _wrong_version,
        _truncated_rows,
        _short_vectors,
        _missing_vectors,
        _escaping_file_name,
    ],
)
def test_embedded_a_bad_snapshot_is_ignored(data_dir, damage):
    _filled(data_dir)
    damage(data_dir / "index" / "repo-1")
    index = EmbeddedVectorIndex(data_dir)
    assert index.watermark("repo-1") == 0
    assert index.bm25("repo-1", "chunk3", 5, scope=SearchScope({"key1"})) == []
    # The caller re-syncs from SQL; the next flush replaces the bad snapshot.
    index.sync("repo-1", make_chunks(12))
    index.flush("repo-1")
    assert EmbeddedVectorIndex(data_dir).watermark("repo-1") == 12


def test_embedded_flush_without_changes_writes_nothing(data_dir):
    index = _filled(data_dir)
    meta = data_dir / "index" / "repo-1" / "meta.json"
    before = meta.stat().st_mtime_ns, meta.read_bytes()
    index.flush("repo-1")
    assert (meta.stat().st_mtime_ns, meta.read_bytes()) == before
    EmbeddedVectorIndex(data_dir).flush("repo-1")  # loaded, unchanged
    assert (meta.stat().st_mtime_ns, meta.read_bytes()) == before


def test_embedded_flush_without_a_data_dir_is_a_no_op():
    index = EmbeddedVectorIndex(None)
    index.sync("r", make_chunks(3))
    index.flush("r")
    assert index.watermark("r") == 3


def test_embedded_flush_failure_is_backend_unavailable(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    index = EmbeddedVectorIndex(blocker)
    index.sync("r", make_chunks(3))
    with pytest.raises(BackendUnavailable):
        index.flush("r")
    assert index.watermark("r") == 3


def test_embedded_drop_removes_the_folder(data_dir):
    index = _filled(data_dir)
    index.drop("repo-1")
    assert not (data_dir / "index" / "repo-1").exists()


def test_embedded_texts_round_trip_exactly(data_dir):
    texts = ["", "naïve 人工智能 👋🏻", "line\nbreak\ttab", "lone \udc80 surrogate", "x" * 5000]
    index = EmbeddedVectorIndex(data_dir)
    index.sync("r", _text_chunks(texts))
    index.flush("r")
    reopened = EmbeddedVectorIndex(data_dir)
    keys = {f"doc{i}" for i in range(1, 6)}
    hits = reopened.knn("r", unit_vectors(1)[0], 10, model=MODEL, scope=SearchScope(keys))
    assert sorted(h.text for h in hits) == sorted(texts)


def test_embedded_stats(data_dir):
    index = EmbeddedVectorIndex(data_dir)
    assert index.stats("r") == {"chunks": 0, "models": {}, "dims": {}, "watermark": 0}
    index.sync("r", make_chunks(5) + make_chunks(2, start=6, model="other", dim=8))
    assert index.stats("r") == {
        "chunks": 7,
        "models": {MODEL: 5, "other": 2},
        "dims": {MODEL: DIM, "other": 8},
        "watermark": 7,
    }


@pytest.mark.parametrize("key", ["", "..", "../etc", "a/b", ".hidden", "x" * 200, "a\\b"])
def test_embedded_refuses_a_repository_key_that_is_not_a_folder_name(data_dir, key):
    index = EmbeddedVectorIndex(data_dir)
    with pytest.raises(InvalidInput):
        index.watermark(key)
    with pytest.raises(InvalidInput):
        index.drop(key)


def test_embedded_content_keys_must_not_be_a_single_string():
    index = EmbeddedVectorIndex(None)
    index.sync("r", make_chunks(3))
    with pytest.raises(TypeError):
        index.bm25("r", "alpha", 5, scope=SearchScope("key1"))


def test_a_kept_frozenset_of_keys_sees_chunks_synced_after_its_first_use(index, repo):
    """Search passes one frozenset per branch state and the embedded index memoises its mask
    per snapshot: a key that had no chunks at the first query must count once they arrive."""
    first, later = make_chunks(4), make_chunks(4, start=5, seed=1)
    index.sync(repo, first)
    allowed = frozenset(keys_of(first) | keys_of(later))
    query = later[0].vector
    assert set(seqs(index.knn(repo, query, 8, model=MODEL, scope=SearchScope(allowed)))) == {c.seq for c in first}
    index.sync(repo, later)
    hits = index.knn(repo, query, 8, model=MODEL, scope=SearchScope(allowed))
    assert hits[0].seq == later[0].seq and len(hits) == 8
    assert set(seqs(index.bm25(repo, "chunk5", 8, scope=SearchScope(allowed)))) == {5}
    # the same set again, and an equal but distinct set: the same answer
    assert seqs(index.knn(repo, query, 8, model=MODEL, scope=SearchScope(allowed))) == seqs(hits)
    assert seqs(index.knn(repo, query, 8, model=MODEL, scope=SearchScope(frozenset(allowed)))) == seqs(hits)
