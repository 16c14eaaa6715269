"""The Weaviate test server (tests/weaviate_server.py) through the real ``weaviate-client``: the
shapes the client parses, the Weaviate rules kg depends on (schema defaults and validation,
class-name collisions, filters on tokenized text, BM25, hybrid fusion, limits), the wire formats
of newer server versions, API keys, and a clean shutdown.

These tests pin the server's behaviour to Weaviate's; they need no real Weaviate.
"""

from __future__ import annotations

import math
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from weaviate.classes.data import DataObject
from weaviate.classes.query import Filter, HybridFusion, MetadataQuery
from weaviate.exceptions import UnexpectedStatusCodeError, WeaviateQueryError

from kg.errors import BackendUnavailable
from kg.index.base import CollectionScope, IndexedChunk, Placement, SearchScope
from kg.index.weaviate import WeaviateVectorIndex, connect
from kg.index.weaviate.schema import _chunks_schema
from kg.ragnode.weaviate import chunks_class_schema, meta_class_schema
from tests.weaviate_server import EN_STOPWORDS, WeaviateTestServer, tokenize


@pytest.fixture
def server(weaviate_test_server: WeaviateTestServer) -> WeaviateTestServer:
    return weaviate_test_server


@pytest.fixture
def db(server) -> Iterator[Any]:
    client = connect(server.url)
    yield client
    client.close()


def _docs(db: Any, properties: list[dict[str, Any]] | None = None, **extra: Any) -> Any:
    db.collections.create_from_dict({
        "class": "Docs", "vectorizer": "none",
        "properties": properties or [{"name": "body", "dataType": ["text"]},
                                     {"name": "path", "dataType": ["text"], "tokenization": "field"},
                                     {"name": "n", "dataType": ["int"]}],
        **extra,
    })
    return db.collections.get("Docs")


def _uid(i: int) -> uuid.UUID:
    return uuid.UUID(int=i + 1)


# -- schema ----------------------------------------------------------------------------------------


def test_classes_come_back_with_weaviates_defaults(db):
    db.collections.create_from_dict(_chunks_schema("KgChunks_a_b", '{"kg": "chunks"}'))
    db.collections.create_from_dict(chunks_class_schema("Ragcollection"))
    db.collections.create_from_dict(meta_class_schema("RagcollectionMeta"))
    full = db.collections.list_all(simple=False)  # the client's full config parser
    assert sorted(full) == ["KgChunks_a_b", "Ragcollection", "RagcollectionMeta"]
    rag = full["Ragcollection"]
    assert {p.name: (p.data_type.value, p.tokenization and p.tokenization.value, p.index_filterable,
                     p.index_searchable) for p in rag.properties} == {
        "content": ("text", "word", True, True), "sourceFile": ("text", "word", True, True),
        "chunkIndex": ("int", None, True, False)}
    assert rag.inverted_index_config.stopwords.preset.value == "en"
    assert rag.vector_index_config.distance_metric.value == "cosine"
    assert rag.vectorizer.value == "none"
    kg = full["KgChunks_a_b"]
    assert kg.inverted_index_config.stopwords.preset.value == "none"
    assert kg.description == '{"kg": "chunks"}'
    assert db.collections.export_config("Ragcollection").replication_config.factor == 1


def test_class_names_collide_without_regard_to_case(db):
    _docs(db)
    with pytest.raises(UnexpectedStatusCodeError) as same:
        _docs(db)
    assert same.value.status_code == 422
    assert 'class name "Docs" already exists' in str(same.value)
    with pytest.raises(UnexpectedStatusCodeError) as permutation:
        db.collections.create_from_dict({"class": "DOCS", "vectorizer": "none"})
    assert ('class name "DOCS" already exists as a permutation of: "Docs". class names must be '
            "unique when lowercased") in str(permutation.value)
    # Lookups are exact after the first letter is upper-cased.
    assert db.collections.exists("Docs") and db.collections.exists("docs")
    assert not db.collections.exists("DOCS")
    db.collections.delete("DOCS")  # unknown: a no-op, as in Weaviate
    assert db.collections.exists("Docs")


@pytest.mark.parametrize("schema, message", [
    ({"class": "2docs"}, "is not a valid class name"),
    ({"class": "Docs", "vectorizer": "text2vec-openai"}, 'no module with name "text2vec-openai"'),
    ({"class": "Docs", "properties": [{"name": "n", "dataType": ["int"], "indexSearchable": True}]},
     "`indexSearchable` is allowed only for text"),
    ({"class": "Docs", "properties": [{"name": "t", "dataType": ["text"], "tokenization": "gse"}]},
     "tokenizer is not enabled"),
    ({"class": "Docs", "properties": [{"name": "t", "dataType": ["text"]}, {"name": "T", "dataType": ["int"]}]},
     "already in use"),
    ({"class": "Docs", "properties": [{"name": "id", "dataType": ["text"]}]}, "reserved property name"),
    ({"class": "Docs", "properties": [{"name": "t", "dataType": ["strings"]}]}, "invalid dataType"),
])
def test_invalid_classes_are_refused_with_422(db, schema, message):
    with pytest.raises(UnexpectedStatusCodeError, match=message) as caught:
        db.collections.create_from_dict({"vectorizer": "none", **schema})
    assert caught.value.status_code == 422


# -- objects ---------------------------------------------------------------------------------------


def test_objects_through_rest_and_batch(db, server):
    docs = _docs(db)
    uid = docs.data.insert(properties={"body": "one", "n": 1}, uuid=_uid(1), vector=[1.0, 0.0])
    with pytest.raises(UnexpectedStatusCodeError, match="already exists"):
        docs.data.insert(properties={"body": "again"}, uuid=uid)
    docs.data.replace(uuid=uid, properties={"body": "uno"}, vector=[0.0, 1.0])
    got = docs.query.fetch_object_by_id(uid, include_vector=True)
    assert got.properties == {"body": "uno"} and got.vector["default"] == [0.0, 1.0]
    assert got.metadata.last_update_time >= got.metadata.creation_time
    with pytest.raises(UnexpectedStatusCodeError) as missing:
        docs.data.replace(uuid=_uid(9), properties={"body": "x"})
    assert missing.value.status_code == 404
    result = docs.data.insert_many([
        DataObject(properties={"body": "two", "n": 2}, uuid=_uid(2), vector=[1.0, 1.0]),
        DataObject(properties={"body": "three", "n": 2.5}, uuid=_uid(3), vector=[1.0, 1.0]),
        DataObject(properties={"body": "four", "colour": "red"}, uuid=_uid(4), vector=[1.0, 1.0]),
        DataObject(properties={"body": "five"}, uuid=_uid(5), vector=[1.0, 1.0, 1.0]),
        DataObject(properties={"body": 6}, uuid=_uid(6)),
    ])
    assert sorted(result.uuids) == [0] and sorted(result.errors) == [1, 2, 3, 4]
    messages = {i: e.message for i, e in result.errors.items()}
    assert "requires an integer" in messages[1]
    assert "no such prop with name 'colour'" in messages[2]
    assert messages[3] == "new node has a vector with length 3. Existing nodes have vectors with length 2"
    assert "not a string" in messages[4]
    assert docs.data.exists(_uid(2)) and not docs.data.exists(_uid(3))
    assert docs.aggregate.over_all(total_count=True).total_count == 2
    assert docs.data.delete_by_id(uid) and not docs.data.delete_by_id(uid)
    assert server.stored("Docs")[0]["properties"] == {"body": "two", "n": 2}


def test_batch_delete_by_filter_with_dry_run_and_verbose(db):
    docs = _docs(db)
    docs.data.insert_many([DataObject(properties={"body": f"doc {i}", "n": i}, uuid=_uid(i))
                           for i in range(6)])
    dry = docs.data.delete_many(where=Filter.by_property("n").less_than(3), dry_run=True, verbose=True)
    assert (dry.matches, dry.successful, dry.failed) == (3, 0, 0)
    assert sorted(o.uuid for o in dry.objects) == [_uid(0), _uid(1), _uid(2)]
    assert docs.aggregate.over_all(total_count=True).total_count == 6
    done = docs.data.delete_many(where=Filter.by_id().contains_any([_uid(0), _uid(4)]))
    assert (done.matches, done.successful, done.objects) == (2, 2, None)
    assert sorted(o.properties["n"] for o in docs.query.fetch_objects().objects) == [1, 2, 3, 5]


# -- filters ---------------------------------------------------------------------------------------


def _bodies(docs: Any, where: Any) -> list[str]:
    return sorted(o.properties["body"] for o in docs.query.fetch_objects(filters=where, limit=100).objects)


def test_text_filters_match_tokens_as_weaviate(db):
    docs = _docs(db)
    for i, (body, path) in enumerate([("a.txt", "/docs/a"), ("b a.txt", "/docs/b"), ("the report", "/x"),
                                      ("Report 2024", "/docs/deep/c")]):
        docs.data.insert(properties={"body": body, "path": path, "n": i}, uuid=_uid(i))
    by = Filter.by_property
    # word tokenization: Equal is the AND of the value's tokens, stop words ("a", "the") dropped
    assert _bodies(docs, by("body").equal("a.txt")) == ["a.txt", "b a.txt"]
    assert _bodies(docs, by("body").equal("REPORT")) == ["Report 2024", "the report"]
    assert _bodies(docs, by("body").not_equal("report")) == ["a.txt", "b a.txt"]
    with pytest.raises(WeaviateQueryError, match="only stopwords provided"):
        docs.query.fetch_objects(filters=by("body").equal("The a"))
    # ContainsAny: one Equal per value, OR-ed
    assert _bodies(docs, by("body").contains_any(["b a", "2024"])) == ["Report 2024", "b a.txt"]
    assert _bodies(docs, by("body").contains_all(["report", "2024"])) == ["Report 2024"]
    # field tokenization: the whole value; Like with * and ?
    assert _bodies(docs, by("path").equal("/docs/a")) == ["a.txt"]
    assert _bodies(docs, by("path").like("/docs/*")) == ["Report 2024", "a.txt", "b a.txt"]
    assert _bodies(docs, by("path").like("/docs/?")) == ["a.txt", "b a.txt"]
    assert _bodies(docs, by("body").like("rep*")) == ["Report 2024", "the report"]
    # ints, ids, And / Or / Not
    assert _bodies(docs, by("n").greater_or_equal(2) & by("n").less_than(3)) == ["the report"]
    assert _bodies(docs, by("n").contains_any([0, 3])) == ["Report 2024", "a.txt"]
    assert _bodies(docs, Filter.by_id().equal(_uid(1)) | by("n").equal(3)) == ["Report 2024", "b a.txt"]
    assert _bodies(docs, Filter.not_(by("n").less_than(3))) == ["Report 2024"]


def test_filters_weaviate_refuses(db):
    docs = _docs(db, [{"name": "body", "dataType": ["text"]},
                      {"name": "raw", "dataType": ["text"], "indexFilterable": False, "indexSearchable": False},
                      {"name": "n", "dataType": ["int"]}])
    docs.data.insert(properties={"body": "x", "raw": "y", "n": 1})
    for where, message in [
        (Filter.by_property("raw").equal("y"), "requires inverted index"),
        (Filter.by_property("nope").equal("y"), "no such prop with name 'nope'"),
        (Filter.by_property("n").is_none(True), "Nullstate must be indexed"),
        (Filter.by_property("n").equal("1"), 'cannot use "valueText" on type "int"'),
    ]:
        with pytest.raises(WeaviateQueryError, match=message):
            docs.query.fetch_objects(filters=where)


def test_is_null_with_the_null_state_indexed(db):
    docs = _docs(db, invertedIndexConfig={"indexNullState": True})
    docs.data.insert(properties={"body": "with", "n": 1}, uuid=_uid(1))
    docs.data.insert(properties={"body": "without"}, uuid=_uid(2))
    assert _bodies(docs, Filter.by_property("n").is_none(True)) == ["without"]
    assert _bodies(docs, Filter.by_property("n").is_none(False)) == ["with"]


# -- ranking ---------------------------------------------------------------------------------------


TEXTS = ["api key rotation", "api key api key api key", "the weather is nice today",
         "key lime pie", "rotate the api key every month and the other key", "lime"]


def _ranked_docs(db: Any) -> Any:
    docs = _docs(db, [{"name": "body", "dataType": ["text"]}, {"name": "n", "dataType": ["int"]}])
    vectors = np.random.default_rng(5).normal(size=(len(TEXTS), 6))
    docs.data.insert_many([DataObject(properties={"body": t, "n": i}, uuid=_uid(i), vector=vectors[i].tolist())
                           for i, t in enumerate(TEXTS)])
    return docs, vectors


def _bm25(query: str, k1: float = 1.2, b: float = 0.75) -> dict[int, float]:
    """Weaviate's BM25 over TEXTS, word tokens, "en" stop words dropped from the query."""
    docs = [tokenize("word", t) for t in TEXTS]
    avg = sum(map(len, docs)) / len(docs)
    scores: Counter[int] = Counter()
    for term, repeats in Counter(t for t in tokenize("word", query) if t not in EN_STOPWORDS).items():
        n = sum(term in d for d in docs)
        idf = math.log(1 + (len(docs) - n + 0.5) / (n + 0.5))
        for i, d in enumerate(docs):
            tf = d.count(term)
            if tf:
                scores[i] += repeats * idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(d) / avg))
    return dict(scores)


def test_bm25_scores_are_weaviates(db):
    docs, _ = _ranked_docs(db)
    for query in ("api key", "the key key", "lime weather"):
        want = _bm25(query)
        got = docs.query.bm25(query, limit=10, return_metadata=MetadataQuery(score=True)).objects
        assert {o.properties["n"]: o.metadata.score for o in got} == pytest.approx(want, rel=1e-6)
        assert [o.metadata.score for o in got] == sorted((o.metadata.score for o in got), reverse=True)
    # Statistics stay collection-wide under a filter.
    filtered = docs.query.bm25("api key", filters=Filter.by_property("n").greater_than(0),
                               return_metadata=MetadataQuery(score=True)).objects
    assert {o.properties["n"]: o.metadata.score for o in filtered} == pytest.approx(
        {n: s for n, s in _bm25("api key").items() if n > 0}, rel=1e-6)


FIELDED = [("api key", "rotate the key every month"), ("weather", "api api key"),
           ("lime pie", "key lime pie with a crust of crumbs"), ("", "nothing here")]


def _fielded_docs(db: Any) -> Any:
    docs = _docs(db, [{"name": "title", "dataType": ["text"]}, {"name": "body", "dataType": ["text"]},
                      {"name": "n", "dataType": ["int"]}])
    docs.data.insert_many([DataObject(properties={"n": i, **({"title": t} if t else {}), "body": body}, uuid=_uid(i))
                           for i, (t, body) in enumerate(FIELDED)])
    return docs


def _bm25f(query: str, boosts: dict[str, float], algorithm: str, k1: float = 1.2, b: float = 0.75
           ) -> dict[int, float]:
    """Weaviate's BM25F over FIELDED (bm25_searcher.go and bm25_searcher_block.go), times k1 + 1."""
    fields = {name: [tokenize("word", row[j]) for row in FIELDED] for j, name in enumerate(("title", "body"))}
    held = {name: [d for d, row in zip(docs, FIELDED, strict=True) if row[j]]
            for j, (name, docs) in enumerate(fields.items())}
    means = {name: sum(map(len, held[name])) / len(held[name]) for name in boosts}
    shared = sum(means.values()) / len(means)
    n_docs = len(FIELDED)
    scores: Counter[int] = Counter()
    for term, repeats in Counter(t for t in tokenize("word", query) if t not in EN_STOPWORDS).items():
        df = {name: sum(term in d for d in fields[name]) for name in boosts}
        if algorithm == "blockmax":
            counts = [c for c in df.values() if c]
            if not counts:
                continue
            n = sum(counts) // len(counts)
            idf = repeats * math.log(1 + (n_docs - n + 0.5) / (n + 0.5))
            for name, boost in boosts.items():
                for i, d in enumerate(fields[name]):
                    if tf := d.count(term):
                        scores[i] += boost * idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(d) / means[name]))
            continue
        n = sum(any(term in fields[name][i] for name in boosts) for i in range(n_docs))
        idf = repeats * math.log(1 + (n_docs - n + 0.5) / (n + 0.5))
        for i in range(n_docs):
            holding = [name for name in boosts if term in fields[name][i]]
            if holding:
                freq = sum(fields[name][i].count(term) * boosts[name] for name in holding)
                length = sum(len(fields[name][i]) for name in holding)
                scores[i] += idf * freq * (k1 + 1) / (freq + k1 * (1 - b + b * length / shared))
    return dict(scores)


@pytest.mark.parametrize("algorithm", ["wand", "blockmax"])
@pytest.mark.parametrize("properties, boosts", [
    (["title", "body"], {"title": 1.0, "body": 1.0}),
    (["title^3", "body"], {"title": 3.0, "body": 1.0}),
    (["title^2", "body^5"], {"title": 2.0, "body": 5.0}),
])
def test_bm25f_over_several_properties_is_weaviates(db, server, algorithm, properties, boosts):
    server.bm25_algorithm = algorithm
    docs = _fielded_docs(db)
    for query in ("api key", "key lime", "weather key key"):
        got = docs.query.bm25(query, query_properties=properties, limit=10,
                              return_metadata=MetadataQuery(score=True)).objects
        assert {o.properties["n"]: o.metadata.score for o in got} == pytest.approx(
            _bm25f(query, boosts, algorithm), rel=1e-6)


def test_boosts_are_integers_before_weaviate_1_38(db, server):
    docs = _fielded_docs(db)
    server.bm25_algorithm = "blockmax"

    def scores(properties: list[str]) -> dict[int, float]:
        got = docs.query.bm25("api key", query_properties=properties, limit=10,
                              return_metadata=MetadataQuery(score=True)).objects
        return {o.properties["n"]: o.metadata.score for o in got}

    # strconv.Atoi("1.5") fails: the title's boost is 0.
    assert scores(["title^1.5", "body"]) == pytest.approx(_bm25f("api key", {"title": 0.0, "body": 1.0}, "blockmax"))
    server.version = "1.38.0"
    try:
        assert scores(["title^1.5", "body"]) == pytest.approx(
            _bm25f("api key", {"title": 1.5, "body": 1.0}, "blockmax"))
    finally:
        server.version = "1.28.4"


def test_a_property_added_to_a_class_is_searchable(db):
    from weaviate.classes.config import DataType, Property, Tokenization

    docs = _docs(db)
    docs.data.insert(properties={"body": "old text", "n": 1}, uuid=_uid(1))
    docs.config.add_property(Property(name="extra", data_type=DataType.TEXT, tokenization=Tokenization.WHITESPACE))
    assert "extra" in {p.name for p in docs.config.get().properties}
    docs.data.insert(properties={"body": "new", "extra": "lime", "n": 2}, uuid=_uid(2))
    got = docs.query.bm25("lime", query_properties=["extra"]).objects
    assert [o.properties["n"] for o in got] == [2]
    with pytest.raises(Exception, match="already exists"):
        docs.config.add_property(Property(name="extra", data_type=DataType.TEXT))


def _cosine_distances(vectors: np.ndarray, query: np.ndarray) -> np.ndarray:
    v = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    return 1 - v @ (query / np.linalg.norm(query))


@pytest.mark.parametrize("fusion", [HybridFusion.RANKED, HybridFusion.RELATIVE_SCORE])
@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.75, 1.0])
def test_hybrid_fuses_as_weaviate(db, fusion, alpha):
    docs, vectors = _ranked_docs(db)
    query = np.random.default_rng(6).normal(size=6)
    dist = _cosine_distances(vectors, query)
    lexical = sorted(_bm25("api key lime").items(), key=lambda t: -t[1])
    vector = sorted(range(len(TEXTS)), key=lambda i: dist[i])
    fused: Counter[int] = Counter()
    if fusion == HybridFusion.RANKED:
        for rank, (i, _) in enumerate(lexical if alpha < 1 else []):
            fused[i] += (1 - alpha) / (rank + 60)
        for rank, i in enumerate(vector if alpha > 0 else []):
            fused[i] += alpha / (rank + 60)
    else:
        if alpha < 1:
            high, low = lexical[0][1], lexical[-1][1]
            for i, s in lexical:
                fused[i] += (1 - alpha) * (s - low) / (high - low)
        if alpha > 0:
            sims = [1 - dist[i] for i in vector]
            for i in vector:
                fused[i] += alpha * ((1 - dist[i]) - min(sims)) / (max(sims) - min(sims))
    got = docs.query.hybrid("api key lime", vector=query.tolist(), alpha=alpha, fusion_type=fusion,
                            limit=10, return_metadata=MetadataQuery(score=True)).objects
    assert {o.properties["n"]: o.metadata.score for o in got} == pytest.approx(dict(fused), rel=1e-5, abs=1e-7)
    assert [o.metadata.score for o in got] == sorted((o.metadata.score for o in got), reverse=True)


def test_near_vector_distances_thresholds_and_ties(db):
    docs, vectors = _ranked_docs(db)
    query = vectors[2] + 0.1
    dist = _cosine_distances(vectors, query)
    got = docs.query.near_vector(query.tolist(), limit=3, return_metadata=MetadataQuery(distance=True)).objects
    assert [o.properties["n"] for o in got] == list(np.argsort(dist)[:3])
    assert [o.metadata.distance for o in got] == pytest.approx(sorted(dist)[:3], abs=1e-6)
    cut = sorted(dist)[1]
    assert len(docs.query.near_vector(query.tolist(), distance=float(cut), limit=10).objects) == 2
    with pytest.raises(WeaviateQueryError, match="vector lengths don't match: 5 vs 6"):
        docs.query.near_vector([1.0] * 5)
    # Equal distances: no order is promised, and the server returns them in descending uuid order.
    twins = db.collections.create_from_dict({"class": "Twins", "vectorizer": "none"})
    twins.data.insert_many([DataObject(properties={}, uuid=_uid(i), vector=[1.0, 2.0]) for i in range(4)])
    assert [o.uuid for o in twins.query.near_vector([1.0, 2.0], limit=4).objects] == [_uid(i) for i in (3, 2, 1, 0)]


def test_limits_as_weaviate(db):
    docs = _docs(db)
    docs.data.insert_many([DataObject(properties={"body": f"d{i}", "n": i}, uuid=_uid(40 - i)) for i in range(25)])
    listed = docs.query.fetch_objects().objects
    assert len(listed) == 10  # QUERY_DEFAULTS_LIMIT
    assert [o.uuid for o in listed] == sorted(o.uuid for o in listed)  # no filter: by uuid
    paged = docs.query.fetch_objects(limit=10, offset=20).objects
    assert len(paged) == 5
    with pytest.raises(WeaviateQueryError, match="query maximum results exceeded"):
        docs.query.fetch_objects(limit=9_995, offset=6)
    assert len(docs.query.fetch_objects(limit=9_995, offset=5).objects) == 20


# -- versions, keys, life cycle --------------------------------------------------------------------


@pytest.mark.parametrize("version", ["1.30.1", "1.36.9"])
def test_newer_wire_formats_carry_kgs_calls(version):
    # From 1.29 the client sends vectors as `vectors` and counts through gRPC Aggregate; from
    # 1.36.6 hybrid's alpha travels as `alpha_param`.
    with WeaviateTestServer(version=version) as server:
        index = WeaviateVectorIndex(server.url)
        try:
            vectors = np.random.default_rng(1).normal(size=(8, 4)).astype(np.float32)
            chunks = [IndexedChunk(seq=i + 1, content_key=f"k{i}", chunk_index=0, text=f"word{i % 3} text",
                                   model="m", vector=vectors[i]) for i in range(8)]
            placements = [Placement(1, 1, f"n{c.seq}", f"/n{c.seq}", "note", {}, (c,)) for c in chunks]
            index.place("r", placements)
            scopes = [CollectionScope("m", 1, 1, frozenset(p.version_key for p in placements))]
            assert [h.seq for h in index.knn("r", vectors[3], 1, model="m", scope=SearchScope((), scopes))] == [4]
            assert sorted(h.seq for h in index.bm25("r", "word1", 5, scope=SearchScope((), scopes))) == [2, 5, 8]
            hybrid = index.hybrid("r", "word1", vectors[3], 3, model="m", scope=SearchScope((), scopes), alpha=0.4)
            assert len(hybrid.hits) == 3
            assert index.stats("r")["chunks"] == 8
            assert server.calls["Aggregate"] == 1 and server.calls["POST /v1/graphql"] == 0
            assert len(server.recorded("Search.near_vector")[-1].near_vector.vectors) == 1
            sent = server.recorded("Search.hybrid")[-1].hybrid_search
            if version >= "1.36.6":
                assert sent.use_alpha_param and sent.alpha_param == pytest.approx(0.4)
            else:
                assert sent.alpha == pytest.approx(0.4)
            index.drop("r")
        finally:
            index.close()


def test_an_api_key_is_required_when_configured():
    with WeaviateTestServer(api_key="s3cret") as server:
        client = connect(server.url, api_key="s3cret")
        try:
            assert client.collections.list_all() == {}
        finally:
            client.close()
        for key in (None, "wrong"):
            with pytest.raises(BackendUnavailable, match="cannot connect to Weaviate"):
                connect(server.url, api_key=key, init_timeout_s=2.0)


def test_the_server_stops_cleanly_with_clients_still_connected():
    server = WeaviateTestServer().start()
    client = connect(server.url)
    client.collections.create_from_dict({"class": "Left", "vectorizer": "none"})
    client.collections.get("Left").query.fetch_objects()  # an idle keep-alive and gRPC channel
    started = time.monotonic()
    server.stop()
    assert time.monotonic() - started < 5
    client.close()
    assert not [t.name for t in threading.enumerate() if t.name.startswith(server.thread_prefix + "-")]
