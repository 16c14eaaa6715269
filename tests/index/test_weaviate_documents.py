"""Node-level BM25F on Weaviate: :meth:`~kg.index.weaviate.WeaviateVectorIndex.bm25_documents`.

A documents collection (``KgDocs_...``) beside each (workspace, branch, model) chunks
collection holds one object per placed node version, a ``terms_<field>`` property per field;
the search is Weaviate's BM25 with ``query_properties`` boosts (its BM25F) and the visibility
filter of the chunk searches, and each hit carries its node's best passage. Every test runs the
real ``weaviate-client`` against the test server of ``tests/weaviate_server.py`` (under both of
its BM25F searchers, Weaviate's WAND before 1.30 and BlockMax WAND after) and compares with the
embedded index's :meth:`~kg.index.embedded.EmbeddedVectorIndex.bm25_documents` on the same
chunks.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator, Sequence

import numpy as np
import pytest

from kg.errors import BackendUnavailable, InvalidInput
from kg.index.base import CollectionScope, IndexedChunk, IndexHit, Placement, SearchScope
from kg.index.embedded import EmbeddedVectorIndex
from kg.index.weaviate import WeaviateVectorIndex, connect
from kg.index.weaviate.index import _integer_boosts
from kg.index.weaviate.schema import terms_property
from tests.weaviate_fixtures import REAL_WEAVIATE_URL

MODEL = "docs-test-model"
DIM = 4


@pytest.fixture(params=["wand", "blockmax"])
def algorithm(request, weaviate_server, weaviate_url) -> Iterator[str]:
    """The test server's BM25F searcher for one test; a real Weaviate runs its version's own
    (BlockMax WAND from 1.30), once."""
    if REAL_WEAVIATE_URL:
        client = connect(weaviate_url)
        try:
            version = tuple(int(p) for p in client.get_meta()["version"].split(".")[:2])
        finally:
            client.close()
        own = "blockmax" if version >= (1, 30) else "wand"
        if request.param != own:
            pytest.skip(f"this Weaviate ({version}) runs {own}")
        yield own
        return
    weaviate_server.bm25_algorithm = request.param
    try:
        yield request.param
    finally:
        weaviate_server.bm25_algorithm = None


@pytest.fixture
def index(weaviate_url: str) -> Iterator[WeaviateVectorIndex]:
    ix = WeaviateVectorIndex(weaviate_url, init_timeout_s=10.0)
    yield ix
    ix.close()


@pytest.fixture
def repo(index: WeaviateVectorIndex) -> Iterator[str]:
    key = f"docs-{uuid.uuid4().hex}"
    yield key
    index.drop(key)


_SEQ = iter(range(1, 1_000_000))


def node_chunks(key: str, fields: Sequence[tuple[str, str]]) -> tuple[IndexedChunk, ...]:
    """The chunks of content key ``key``: one per (field, text), in order, with fresh seqs."""
    out = []
    for i, (field, text) in enumerate(fields):
        seq = next(_SEQ)
        vector = np.zeros(DIM, np.float32)
        vector[seq % DIM] = 1.0
        out.append(IndexedChunk(seq, key, i, text, MODEL, vector, field))
    return tuple(out)


def put(node: str, cs: tuple[IndexedChunk, ...], *, ws: int = 1, br: int = 1, path: str | None = None) -> Placement:
    return Placement(ws, br, node, path or f"/docs/{node}", "note", {}, cs)


def scope(keys, *, ws: int = 1, br: int = 1, filters: dict | None = None) -> CollectionScope:
    return CollectionScope(MODEL, ws, br, frozenset(keys), filters)


def embedded(placements: Sequence[Placement]) -> EmbeddedVectorIndex:
    ix = EmbeddedVectorIndex()
    ix.sync("r", [c for p in placements for c in p.chunks])
    return ix


def ranking(hits: list[IndexHit]) -> list[tuple[str, int]]:
    return [(h.content_key, h.chunk_index) for h in hits]


def docs_name(repo: str, ws: int, br: int, model: str = MODEL) -> str:
    h = lambda t, n: hashlib.sha256(t.encode()).hexdigest()[:n]  # noqa: E731
    return f"KgDocs_{h(repo, 12)}_{h(model, 10)}_w{ws}_b{br}"


# A node whose query terms are spread over two passages (SPREAD) beats a node with one
# strongly matching passage (SINGLE) at node level; at passage level SINGLE's passage wins.
SPREAD = put("spread", node_chunks("K-spread", [
    ("title", "Cohort outcomes"),
    ("body", "Heart failure: the study recorded outcomes in adults across several"),
    ("body", "Disease progression: the study recorded outcomes in adults across several"),
]))
SINGLE = put("single", node_chunks("K-single", [
    ("title", "Notes"),
    ("body", "Heart failure clinic notes"),
]))
TITLED = put("titled", node_chunks("K-titled", [
    ("title", "Heart disease"),
    ("body", "A registry of patients enrolled by general practitioners over many years of follow up"),
]))
OTHER = put("other", node_chunks("K-other", [
    ("title", "Kidney function"),
    ("body", "Renal clearance measured in healthy volunteers and in patients"),
]))
CORPUS = [SPREAD, SINGLE, TITLED, OTHER]
ALL = {p.version_key for p in CORPUS}


def test_node_ranking_equals_the_embedded_index_where_passage_ranking_differs(index, repo, algorithm):
    index.place(repo, CORPUS)
    keys = {p.chunks[0].content_key for p in CORPUS}
    expected = embedded(CORPUS).bm25_documents("r", "heart disease", 10, scope=SearchScope(keys))
    hits = index.bm25_documents(repo, "heart disease", 10, scope=SearchScope((), [scope(ALL)]))
    assert ranking(hits) == ranking(expected)
    assert ranking(hits) == [("K-titled", 0), ("K-spread", 2), ("K-single", 1)]
    assert [h.rank for h in hits] == [1, 2, 3]
    assert all(h.score > 0 and h.distance is None for h in hits)
    assert [h.text for h in hits] == [h.text for h in expected]
    assert [h.seq for h in hits] == [h.seq for h in expected]
    # Passages alone rank differently: SINGLE's passage beats both of SPREAD's.
    passages = index.bm25(repo, "heart disease", 10, scope=SearchScope((), [scope(ALL)]))
    first_of = [h.content_key for h in passages]
    assert first_of.index("K-single") < first_of.index("K-spread")
    spread_at = [h.content_key for h in hits].index("K-spread")
    assert spread_at < [h.content_key for h in hits].index("K-single")


@pytest.mark.parametrize("weight", [0.2, 1.0, 1.5, 4.0])
def test_the_title_weight_orders_nodes_as_the_embedded_index(index, repo, algorithm, weight):
    if algorithm == "wand" and weight != int(weight):
        pytest.skip("the WAND searcher saturates boosted frequencies: a scaled boost is not the weight")
    index.place(repo, CORPUS)
    keys = {p.chunks[0].content_key for p in CORPUS}
    expected = embedded(CORPUS).bm25_documents("r", "heart disease", 10, scope=SearchScope(keys),
                                               field_weights={"title": weight})
    hits = index.bm25_documents(repo, "heart disease", 10, scope=SearchScope((), [scope(ALL)]),
                                field_weights={"title": weight})
    assert ranking(hits) == ranking(expected)


def test_a_title_weight_changes_the_order(index, repo, algorithm):
    index.place(repo, CORPUS)
    plain = index.bm25_documents(repo, "heart", 10, scope=SearchScope((), [scope(ALL)]), field_weights={"title": 0.0})
    titled = index.bm25_documents(repo, "heart", 10, scope=SearchScope((), [scope(ALL)]), field_weights={"title": 8.0})
    assert [h.content_key for h in plain][0] == "K-single"
    assert [h.content_key for h in titled][0] == "K-titled"


def test_a_node_deleted_or_rewritten_on_a_branch(index, repo, algorithm):
    index.place(repo, CORPUS)
    rewritten = put("single", node_chunks("K-single-2", [("title", "Notes"), ("body", "Kidney stones")]), br=2)
    index.place(repo, [rewritten])
    # The branch sees its own version of "single", no "titled" (deleted there), main's others.
    branch = [scope({rewritten.version_key}, br=2),
              scope({SPREAD.version_key, OTHER.version_key})]
    hits = index.bm25_documents(repo, "heart disease", 10, scope=SearchScope((), branch))
    assert [h.content_key for h in hits] == ["K-spread"]
    kidney = index.bm25_documents(repo, "kidney", 10, scope=SearchScope((), branch))
    assert {h.content_key for h in kidney} == {"K-single-2", "K-other"}
    assert next(h for h in kidney if h.content_key == "K-single-2").text == "Kidney stones"
    # main still sees its own versions.
    found = index.bm25_documents(repo, "heart", 10, scope=SearchScope((), [scope(ALL)]))
    assert "K-titled" in {h.content_key for h in found}


def test_scope_filters_narrow_documents_too(index, repo, algorithm):
    index.place(repo, [put(p.node_id, p.chunks, path=f"/a/{p.node_id}" if p is TITLED else None)
                       for p in CORPUS])
    hits = index.bm25_documents(repo, "heart", 10, scope=SearchScope((), [scope(ALL, filters={"path_prefix": "/a"})]))
    assert [h.content_key for h in hits] == ["K-titled"]


def test_large_allowed_sets_probe_and_batch_documents(weaviate_url, repo, algorithm):
    ix = WeaviateVectorIndex(weaviate_url, init_timeout_s=10.0, filter_batch_keys=2, probe_depth=2)
    try:
        ix.place(repo, CORPUS)
        keys = {p.chunks[0].content_key for p in CORPUS}
        expected = embedded(CORPUS).bm25_documents("r", "heart disease", 10, scope=SearchScope(keys))
        assert (ranking(ix.bm25_documents(repo, "heart disease", 10, scope=SearchScope((), [scope(ALL)])))
                == ranking(expected))
        hidden = ALL - {TITLED.version_key}
        assert "K-titled" not in {h.content_key for h in ix.bm25_documents(repo, "heart", 10,
                                                                            scope=SearchScope((), [scope(hidden)]))}
    finally:
        ix.close()


def test_one_hit_per_content_key_shown_by_two_nodes(index, repo, algorithm):
    twin = put("twin", SPREAD.chunks)
    index.place(repo, [*CORPUS, twin])
    hits = index.bm25_documents(repo, "heart disease", 10, scope=SearchScope((), [scope(ALL | {twin.version_key})]))
    assert [h.content_key for h in hits].count("K-spread") == 1
    only_twin = index.bm25_documents(repo, "disease", 10, scope=SearchScope((), [scope({twin.version_key})]))
    assert ranking(only_twin) == [("K-spread", 2)]


def test_placing_again_is_idempotent(index, repo, algorithm, weaviate_test_server):
    if REAL_WEAVIATE_URL:
        pytest.skip("uses the test server's refusal hook")
    weaviate_test_server.refuse = lambda cls, props: "refused" if cls.startswith("KgDocs_") else None
    with pytest.raises(BackendUnavailable):
        index.place(repo, CORPUS)
    weaviate_test_server.refuse = None
    # The chunks were written, their documents refused: nothing to rank until the redo.
    assert index.bm25(repo, "heart", 10, scope=SearchScope((), [scope(ALL)]))
    assert index.bm25_documents(repo, "heart", 10, scope=SearchScope((), [scope(ALL)])) == []
    index.place(repo, CORPUS)
    first = index.bm25_documents(repo, "heart disease", 10, scope=SearchScope((), [scope(ALL)]))
    index.place(repo, CORPUS)
    again = index.bm25_documents(repo, "heart disease", 10, scope=SearchScope((), [scope(ALL)]))
    assert [(h.content_key, h.seq, h.score) for h in again] == [(h.content_key, h.seq, h.score) for h in first]
    docs = index.client.collections.get(docs_name(repo, 1, 1))
    assert docs.aggregate.over_all(total_count=True).total_count == len(CORPUS)


def test_drops_delete_the_documents_collections(index, repo):
    index.place(repo, [put("a", node_chunks("A", [("title", "heart")]), ws=1, br=1),
                       put("b", node_chunks("B", [("title", "heart")]), ws=1, br=2),
                       put("c", node_chunks("C", [("title", "heart")]), ws=2, br=3)])
    exists = index.client.collections.exists
    assert all(exists(docs_name(repo, w, b)) for w, b in [(1, 1), (1, 2), (2, 3)])
    index.drop_branch(repo, 2)
    assert not exists(docs_name(repo, 1, 2)) and exists(docs_name(repo, 1, 1))
    index.drop_workspace_model(repo, 2, MODEL)
    assert not exists(docs_name(repo, 2, 3))
    index.drop(repo)
    assert not exists(docs_name(repo, 1, 1))


def test_a_collection_placed_before_documents_ranks_nodes_by_their_best_passage(index, repo):
    index.place(repo, CORPUS)
    index.client.collections.delete(docs_name(repo, 1, 1))
    hits = index.bm25_documents(repo, "heart disease", 10, scope=SearchScope((), [scope(ALL)]))
    passages = index.bm25(repo, "heart disease", 10, scope=SearchScope((), [scope(ALL)]))
    best: dict[str, IndexHit] = {}
    for h in passages:
        best.setdefault(h.content_key, h)
    assert [(h.content_key, h.chunk_index) for h in hits] == [(h.content_key, h.chunk_index) for h in best.values()]
    assert [h.score for h in hits] == [h.score for h in best.values()]
    # Placing more there writes no partial documents collection; a reindex (drop, place) does.
    index.place(repo, [put("late", node_chunks("K-late", [("title", "Heart disease")]))])
    assert not index.client.collections.exists(docs_name(repo, 1, 1))
    index.drop(repo)
    index.place(repo, CORPUS)
    assert index.client.collections.exists(docs_name(repo, 1, 1))
    again = index.bm25_documents(repo, "heart disease", 10, scope=SearchScope((), [scope(ALL)]))
    assert [h.content_key for h in again] == ["K-titled", "K-spread", "K-single"]


def test_fields_become_properties_as_they_appear(index, repo):
    index.place(repo, [put("a", node_chunks("A", [("title", "heart")]))])
    index.place(repo, [put("b", node_chunks("B", [("Summary Text", "heart heart"), ("", "disease")]))])
    names = {p.name for p in index.client.collections.get(docs_name(repo, 1, 1)).config.get().properties}
    assert {terms_property("title"), terms_property("Summary Text"), terms_property("")} <= names
    hits = index.bm25_documents(repo, "heart disease", 10, scope=SearchScope((), [scope({"a:A", "b:B"})]))
    assert [h.content_key for h in hits][0] == "B"


def test_queries_without_terms_k_and_bad_weights(index, repo):
    index.place(repo, CORPUS)
    assert index.bm25_documents(repo, "  ", 10, scope=SearchScope((), [scope(ALL)])) == []
    assert index.bm25_documents(repo, "heart", 0, scope=SearchScope((), [scope(ALL)])) == []
    assert len(index.bm25_documents(repo, "heart", 1, scope=SearchScope((), [scope(ALL)]))) == 1
    assert index.bm25_documents(repo, "heart", 10, scope=SearchScope((), [scope(ALL, br=9)])) == []
    for weight in (-1.0, float("nan"), "2"):
        with pytest.raises(InvalidInput):
            index.bm25_documents(repo, "heart", 10, scope=SearchScope((), [scope(ALL)]),
                                 field_weights={"title": weight})


def test_integer_boosts_and_terms_property_names():
    assert _integer_boosts({"a": 1.5, "b": 1.0}) == ({"a": 3, "b": 2}, 2)
    assert _integer_boosts({"a": 2.0, "b": 0.0}) == ({"a": 2, "b": 0}, 1)
    assert _integer_boosts({"a": 0.25, "b": 1 / 3}) == ({"a": 3, "b": 4}, 12)
    assert terms_property("title") == "terms_title"
    odd = [terms_property(f) for f in ("Title", "", "a b", "x" * 65)]
    assert len(set(odd)) == 4 and all(n.startswith("terms__") for n in odd)
