"""The Weaviate backend's own duties: class names and their collisions, filter translation,
object ids, batch errors, dimension checks, the missing extra, an unreachable server, the
strategy for large allowed sets, and Weaviate's hybrid query.

The pure parts need no server. The rest runs through the real ``weaviate-client`` against the
Weaviate-compatible test server (``tests/weaviate_server.py``), whose hooks count calls, refuse
chosen objects and inject failures."""

from __future__ import annotations

import socket
import sys
import uuid
from collections.abc import Iterator

import numpy as np
import pytest
from weaviate.classes.query import Filter
from weaviate.collections.classes.batch import BatchObjectReturn, ErrorObject
from weaviate.collections.classes.filters import _FilterAnd, _FilterOr, _FilterValue

from kg.errors import BackendUnavailable, InvalidInput, UpstreamUnavailable
from kg.index.base import CollectionScope, IndexedChunk, Placement, SearchScope
from kg.index.weaviate import (
    WeaviateVectorIndex,
    check_batch_result,
    check_vector_dimension,
    connect,
    import_weaviate,
    object_id,
    parse_weaviate_url,
    property_pair,
    translate_filters,
)
from kg.ragnode.spec import classes_collide
from kg.ragnode.weaviate import rag_class_names
from tests.weaviate_server import WeaviateTestServer

DIM = 8
MODEL = "fake:test-8"


WS, BR = 1, 1  # the (workspace, branch) whose collection the tests write


def unit_vectors(n: int, dim: int = DIM, seed: int = 0) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=(n, dim))
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


def chunks(n: int, *, start: int = 1, model: str = MODEL, dim: int = DIM, seed: int = 0) -> list[IndexedChunk]:
    vectors = unit_vectors(n, dim, seed)
    return [IndexedChunk(seq=start + i, content_key=f"key{start + i}", chunk_index=0,
                         text=f"word{(start + i) % 5} chunk{start + i}", model=model, vector=vectors[i])
            for i in range(n)]


def place(index: WeaviateVectorIndex, repo: str, cs: list[IndexedChunk]) -> list[CollectionScope]:
    """Place each chunk as the one chunk of node ``n<seq>`` in (WS, BR); the scopes allowing
    them all."""
    index.place(repo, [Placement(WS, BR, f"n{c.seq}", f"/docs/n{c.seq}", "note", {}, (c,)) for c in cs])
    return scopes_of(cs)


def scopes_of(cs: list[IndexedChunk], model: str = MODEL) -> list[CollectionScope]:
    """The scopes allowing exactly the versions :func:`place` made of ``cs``."""
    return [CollectionScope(model, WS, BR, frozenset(f"n{c.seq}:{c.content_key}" for c in cs))]


@pytest.fixture
def server(weaviate_test_server: WeaviateTestServer) -> WeaviateTestServer:
    """The Weaviate test server, empty, for this test alone."""
    return weaviate_test_server


@pytest.fixture
def index(server) -> Iterator[WeaviateVectorIndex]:
    opened = WeaviateVectorIndex(server.url)
    yield opened
    opened.close()


def closed_ports(n: int) -> list[int]:
    """Loopback ports nothing listens on (bound, then released)."""
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


# -- class names ------------------------------------------------------------------------------------


def test_main_uses_exactly_the_spec_names():
    assert rag_class_names("rag_collection") == ("Ragcollection", "RagcollectionMeta")
    assert rag_class_names("rag_collection", "main") == ("Ragcollection", "RagcollectionMeta")


def test_a_branch_gets_a_stable_name_with_a_short_hash_suffix():
    chunks_name, meta_name = rag_class_names("rag_collection", "agent/rag-session-001")
    assert chunks_name == rag_class_names("rag_collection", "agent/rag-session-001")[0]
    assert chunks_name.startswith("Ragcollection_b") and len(chunks_name) == len("Ragcollection_b") + 10
    assert meta_name == chunks_name + "Meta"
    int(chunks_name[-10:], 16)


def test_names_never_collide_across_collections_and_branches_ignoring_case():
    collections = ["rag_collection", "docs", "docs_meta", "Docsmeta2", "a", "A1", "x_b1"]
    branches = ["main", "dev", "Dev", "agent/1", "agent/2", "feature.x", "main2"]
    owners: dict[str, tuple[str, str, str]] = {}
    for c in collections:
        for b in branches:
            for kind, name in zip(("chunks", "meta"), rag_class_names(c, b), strict=True):
                key = name.lower()
                assert key not in owners or owners[key][:2] == (c, b) or classes_collide(owners[key][0], c), (
                    name, owners.get(key))
                owners[key] = (c, b, kind)


@pytest.mark.parametrize("first, second", [("rag_collection", "rag-collection"),
                                           ("rag_collection", "RAG_collection"),
                                           ("docs_meta", "docs")])
def test_colliding_collection_names_are_detected_without_regard_to_case(first, second):
    assert classes_collide(first, second)
    # ... because Weaviate would store both in one class: their names are equal ignoring case.
    assert {n.lower() for n in rag_class_names(first)} & {n.lower() for n in rag_class_names(second)}


@pytest.mark.parametrize("bad", ["", "   ", "___", "123abc", "2024_docs", "collé", "数据", "x" * 300])
def test_invalid_collection_names_are_refused(bad):
    with pytest.raises(InvalidInput):
        rag_class_names(bad)
    with pytest.raises(InvalidInput):
        rag_class_names(bad, "dev")


@pytest.mark.parametrize("branch", ["", "  ", None, 3])
def test_invalid_branch_names_are_refused(branch):
    with pytest.raises(InvalidInput):
        rag_class_names("rag_collection", branch)


def test_kg_index_collections_are_per_repository_workspace_branch_and_model(index, server):
    place(index, "repo-a", chunks(3))
    place(index, "repo-a", chunks(2, start=10, model="other", dim=4))
    place(index, "repo-b", chunks(2, start=20))
    names = [n for n in server.class_names() if n.startswith("KgChunks_")]
    assert len(names) == 3 and len({n.lower() for n in names}) == 3
    assert all(n.endswith(f"_w{WS}_b{BR}") for n in names)
    assert index.stats("repo-a")["models"] == {MODEL: 3, "other": 2}
    assert index.stats("repo-a")["dims"] == {MODEL: DIM, "other": 4}


# -- filters ----------------------------------------------------------------------------------------


def test_path_prefix_node_type_and_properties():
    f = translate_filters(path_prefix="/docs/", node_type="Doc", where={"lang": "en", "n": 2, "ok": True,
                                                                         "x": 1.5, "gone": None})
    assert isinstance(f, _FilterAnd)
    assert f.filters == [
        Filter.by_property("path").like("/docs/*"),
        Filter.by_property("nodeType").equal("Doc"),
        # Scalars as the pairs a (workspace, branch) collection stores; None adds no condition.
        Filter.by_property("props").contains_all(["lang=s:en", "n=n:2.0", "ok=n:1.0", "x=n:1.5"]),
    ]


def test_a_path_prefix_matches_whole_segments_unless_raw():
    """Issue 15: ``/answers`` is ``/answers`` and what is under it, never ``/answers-old``."""
    either = translate_filters(path_prefix="/answers")
    assert isinstance(either, _FilterOr)
    assert either.filters == [Filter.by_property("path").equal("/answers"),
                              Filter.by_property("path").like("/answers/*")]
    assert translate_filters(path_prefix="/answers", path_prefix_mode="raw") == \
        Filter.by_property("path").like("/answers*")
    assert translate_filters(path_prefix="/answers/") == Filter.by_property("path").like("/answers/*")
    with pytest.raises(InvalidInput):
        translate_filters(path_prefix="/answers", path_prefix_mode="prefix")


def test_version_keys_become_one_contains_any():
    f = translate_filters(version_keys=["n1:k1", "n2:k1", "n1:k1"])
    assert f == Filter.by_property("versionKey").contains_any(["n1:k1", "n2:k1"])


def test_property_pairs_equal_exactly_when_python_values_are_equal():
    # SQL compares with ==: 1, 1.0 and True are equal there, "1" is not. A translated filter may
    # only narrow what SQL allowed, so equal values must give one pair and unequal ones two.
    assert property_pair("n", 1) == property_pair("n", 1.0) == property_pair("n", True) == "n=n:1.0"
    assert property_pair("n", False) == property_pair("n", 0) == property_pair("n", -0.0) == "n=n:0.0"
    assert property_pair("n", "1") == "n=s:1" != property_pair("n", 1)
    assert property_pair("n", "a=s:b") == "n=s:a=s:b"
    # Not stored, never filtered: SQL decides these alone.
    for value in (None, [1], {"a": 1}, float("nan"), float("inf"), 10**400, "x" * 257):
        assert property_pair("n", value) is None
    assert property_pair("n", "x" * 256) == "n=s:" + "x" * 256


def test_values_kg_cannot_pair_add_no_condition():
    assert translate_filters(where={"tags": ["a"], "nested": {"a": 1}, "gone": None,
                                    "x": float("nan"), "big": 10**400}) is None
    assert translate_filters(where={"bad name": 1}) == Filter.by_property("props").contains_all(["bad name=n:1.0"])


def test_no_filter_is_none_and_root_prefix_is_no_filter():
    assert translate_filters() is None
    assert translate_filters(path_prefix="/") is None
    single = translate_filters(node_type="Doc")
    assert isinstance(single, _FilterValue) and single.target == "nodeType"


@pytest.mark.parametrize("kwargs", [
    {"version_keys": "n:k"},
    {"version_keys": []},
    {"path_prefix": "/a*b"},
    {"path_prefix": "/a?"},
    {"path_prefix": "docs"},
    {"where": {1: "a"}},
    {"node_type": 3},
])
def test_untranslatable_filters_are_refused(kwargs):
    with pytest.raises(InvalidInput):
        translate_filters(**kwargs)


# -- object ids -------------------------------------------------------------------------------------


def test_object_ids_are_deterministic_uuid5():
    a = object_id("ragcollection", "main", "a.txt", 0, "ollama:nomic-embed-text:latest")
    assert a == object_id("ragcollection", "main", "a.txt", 0, "ollama:nomic-embed-text:latest")
    assert isinstance(a, uuid.UUID) and a.version == 5


def test_object_ids_differ_in_every_part():
    base = ("c", "main", "a.txt", 0, "m")
    ids = {object_id(*base)}
    for i, other in enumerate(["c2", "dev", "b.txt", 1, "m2"]):
        parts = list(base)
        parts[i] = other
        ids.add(object_id(*parts))
    assert len(ids) == 6
    # The parts are kept apart: no two splits of one string give one id.
    assert object_id("a|b", "c", "s", 0, "m") != object_id("a", "b|c", "s", 0, "m")
    assert object_id("a", "", "s", 0, "m") != object_id("", "a", "s", 0, "m")


@pytest.mark.parametrize("bad", [("c", "main", "s", True, "m"), ("c", "main", "s", "0", "m"), (1, "main", "s", 0, "m")])
def test_object_ids_refuse_wrong_types(bad):
    with pytest.raises(InvalidInput):
        object_id(*bad)


# -- batch errors -----------------------------------------------------------------------------------


def _result(errors: dict[int, str], n: int) -> BatchObjectReturn:
    ids = {i: uuid.uuid4() for i in range(n)}
    return BatchObjectReturn(
        errors={i: ErrorObject(message=m, object_=None, original_uuid=ids[i]) for i, m in errors.items()},
        uuids={i: u for i, u in ids.items() if i not in errors}, has_errors=bool(errors))


def test_a_clean_batch_passes():
    check_batch_result(_result({}, 3), ["seq 1", "seq 2", "seq 3"], collection="C")


def test_every_failed_object_is_named():
    result = _result({1: "store is read-only", 2: "vector length mismatch"}, 3)
    with pytest.raises(BackendUnavailable) as caught:
        check_batch_result(result, ["seq 1", "seq 2", "seq 3"], collection="KgChunks_x")
    err = caught.value
    assert "2 of 3" in err.message and "seq 2" in err.message and "seq 3" in err.message
    assert "read-only" in err.message and "KgChunks_x" in err.message
    assert [f["object"] for f in err.details["failed"]] == ["seq 2", "seq 3"]
    assert err.details["failed"][0]["uuid"] == str(result.errors[1].original_uuid)


def test_errors_flagged_but_unnamed_still_raise():
    with pytest.raises(BackendUnavailable):
        check_batch_result(BatchObjectReturn(has_errors=True), ["seq 1"], collection="C")


def test_the_error_class_is_the_callers():
    with pytest.raises(UpstreamUnavailable):
        check_batch_result(_result({0: "nope"}, 1), ["file 'a' chunk 0"], collection="C", error=UpstreamUnavailable)


def test_a_refused_object_fails_the_placement_naming_it(index, server):
    place(index, "r", chunks(4))
    server.refuse = lambda cls, props: "disk full" if props.get("seq") == 7 else None
    with pytest.raises(BackendUnavailable) as caught:
        place(index, "r", chunks(6, start=5))
    assert "node n7 chunk 0" in caught.value.message and "disk full" in caught.value.message
    server.refuse = None
    place(index, "r", chunks(6, start=5))  # the retry overwrites, never duplicates
    assert index.stats("r")["chunks"] == 10


def test_a_batch_refused_whole_names_every_object(index, server):
    server.refuse = lambda cls, props: "class is read-only"
    with pytest.raises(BackendUnavailable) as caught:
        place(index, "r", chunks(3))
    assert "all 3" in caught.value.message and "node n1 chunk 0" in caught.value.message
    assert len(caught.value.details["failed"]) == 3


# -- dimensions -------------------------------------------------------------------------------------


def test_check_vector_dimension():
    check_vector_dimension(np.zeros((3, 8)), 8, what="C")
    check_vector_dimension(np.zeros(8), None, what="C")
    with pytest.raises(InvalidInput, match="dimension 9"):
        check_vector_dimension(np.zeros((3, 9)), 8, what="C")
    with pytest.raises(InvalidInput):
        check_vector_dimension(np.zeros((1, 2, 8)), 8, what="C")


def test_vectors_of_the_wrong_dimension_are_refused_before_the_call(index, server):
    allowed = place(index, "r", chunks(2))
    calls = server.calls["BatchObjects"]
    with pytest.raises(InvalidInput):
        place(index, "r", chunks(2, start=3, dim=DIM + 1))
    assert server.calls["BatchObjects"] == calls
    with pytest.raises(InvalidInput):
        index.knn("r", np.ones(DIM + 1), 3, model=MODEL, scope=SearchScope((), allowed))
    assert server.calls["Search.near_vector"] == 0


# -- the extra and the server -----------------------------------------------------------------------


def test_a_missing_extra_is_a_clear_backend_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "weaviate", None)  # import weaviate -> ImportError
    with pytest.raises(BackendUnavailable, match=r"pip install 'kg\[weaviate\]'"):
        import_weaviate()
    with pytest.raises(BackendUnavailable, match="kg\\[weaviate\\]"):
        WeaviateVectorIndex("http://localhost:8080")
    from kg.services import build_index
    from kg.settings import Settings

    with pytest.raises(BackendUnavailable):
        build_index(Settings(index="weaviate", weaviate_url="http://localhost:8080"))


def test_an_unreachable_server_is_a_clear_error():
    http, grpc = closed_ports(2)
    url = f"http://127.0.0.1:{http}?grpc_port={grpc}"
    with pytest.raises(BackendUnavailable) as caught:
        connect(url, init_timeout_s=1.0, timeout_s=1.0)
    assert type(caught.value) is BackendUnavailable
    assert f"127.0.0.1:{http}" in caught.value.message
    with pytest.raises(UpstreamUnavailable):
        connect(url, init_timeout_s=1.0, timeout_s=1.0, error=UpstreamUnavailable)
    index = WeaviateVectorIndex(url, init_timeout_s=1.0, timeout_s=1.0)  # connects on first use
    with pytest.raises(BackendUnavailable, match="cannot connect to Weaviate"):
        index.placement_marks("r")


@pytest.mark.parametrize("url, expected", [
    ("http://localhost:8080", ("localhost", 8080, False, "localhost", 50051)),
    ("https://w.example.org", ("w.example.org", 443, True, "w.example.org", 50051)),
    ("http://h:8080?grpc_port=50052&grpc_host=g", ("h", 8080, False, "g", 50052)),
])
def test_weaviate_urls(url, expected):
    p = parse_weaviate_url(url)
    assert (p["http_host"], p["http_port"], p["http_secure"], p["grpc_host"], p["grpc_port"]) == expected


@pytest.mark.parametrize("url", ["", "localhost:8080", "ftp://h", "http://", "http://h:50051",
                                 "http://h:8080?grpc_port=x", "http://h:8080?token=1", "http://h:99999"])
def test_bad_weaviate_urls_are_refused(url):
    with pytest.raises(InvalidInput):
        parse_weaviate_url(url)


def test_settings_select_the_weaviate_index():
    from pydantic import ValidationError

    from kg.services import build_index
    from kg.settings import Settings

    with pytest.raises(ValidationError, match="KG_WEAVIATE_URL"):
        Settings(index="weaviate")
    index = build_index(Settings(index="weaviate", weaviate_url="http://localhost:8080",
                                 weaviate_api_key="wv-s3cr3t-key"))
    assert isinstance(index, WeaviateVectorIndex) and index.url == "http://localhost:8080"
    # The value, not the word: field names such as ui_secret are in any repr.
    assert "wv-s3cr3t-key" not in repr(Settings(weaviate_api_key="wv-s3cr3t-key"))
    assert type(build_index(Settings())).__name__ == "EmbeddedVectorIndex"


# -- large allowed sets -----------------------------------------------------------------------------


def _brute(cs: list[IndexedChunk], query: np.ndarray, k: int) -> list[int]:
    q = query / np.linalg.norm(query)
    return [c.seq for c in sorted(cs, key=lambda c: (-float(np.dot(c.vector, q)), c.seq))[:k]]


def test_a_large_allowed_set_is_probed_then_batched_and_stays_exact(server):
    index = WeaviateVectorIndex(server.url, filter_batch_keys=4, probe_depth=20)
    cs = chunks(120, seed=3)
    place(index, "r", cs)
    query = unit_vectors(1, seed=4)[0]
    # Nearly everything allowed: the unfiltered probe answers alone.
    allowed = [c for c in cs if c.seq % 10 != 0]
    before = server.calls["Search.near_vector"]
    hits = index.knn("r", query, 5, model=MODEL, scope=SearchScope((), scopes_of(allowed)))
    assert [h.seq for h in hits] == _brute(allowed, query, 5)
    assert server.calls["Search.near_vector"] - before == 1
    # A small share allowed (12 keys): the probe falls short, 3 filtered batches of 4 follow.
    allowed = [c for c in cs if c.seq % 10 == 0]
    before = server.calls["Search.near_vector"]
    hits = index.knn("r", query, 5, model=MODEL, scope=SearchScope((), scopes_of(allowed)))
    assert [h.seq for h in hits] == _brute(allowed, query, 5)
    assert server.calls["Search.near_vector"] - before == 1 + 3
    found = index.bm25("r", "word2", 50, scope=SearchScope((), scopes_of(allowed)))
    assert sorted(h.seq for h in found) == sorted(c.seq for c in allowed if c.seq % 5 == 2)
    found = index.bm25("r", "word0", 50, scope=SearchScope((), scopes_of(allowed)))
    assert sorted(h.seq for h in found) == [c.seq for c in allowed]
    index.close()


# -- hybrid -----------------------------------------------------------------------------------------


def test_hybrid_goes_through_weaviate_and_echoes_alpha_and_fusion(index, server):
    cs = chunks(20)
    allowed = place(index, "r", cs)
    keys = {c.content_key for c in cs}
    result = index.hybrid("r", "word3", cs[2].vector, 5, model=MODEL, scope=SearchScope((), allowed),
                          alpha=0.25, fusion_type="relative_score")
    assert (result.alpha, result.fusion_type) == (0.25, "relative_score")
    assert server.calls["Search.hybrid"] == 1
    (sent,) = server.recorded("Search.hybrid")
    assert sent.hybrid_search.alpha == pytest.approx(0.25)
    assert sent.hybrid_search.fusion_type == sent.hybrid_search.FUSION_TYPE_RELATIVE_SCORE
    assert list(sent.hybrid_search.properties) == ["terms"]
    assert 0 < len(result.hits) <= 5 and [h.rank for h in result.hits] == list(range(1, len(result.hits) + 1))
    assert {h.content_key for h in result.hits} <= keys


@pytest.mark.parametrize("kwargs", [{"alpha": 1.5}, {"alpha": -0.1}, {"alpha": True}, {"fusion_type": "rrf"}])
def test_hybrid_refuses_bad_alpha_or_fusion(index, kwargs):
    allowed = place(index, "r", chunks(2))
    with pytest.raises(InvalidInput):
        index.hybrid("r", "word1", unit_vectors(1)[0], 3, model=MODEL, scope=SearchScope((), allowed), **kwargs)


def test_hybrid_over_a_large_allowed_set_is_weaviates_filtered_query(server):
    # A fused score depends on the filtered set (ranks in each filtered leg, the legs' min and
    # max), so an unfiltered probe or merged per-batch queries rank differently from Weaviate's
    # hybrid query filtered to the allowed keys. kg sends that one query, the keys batched in an Or.
    batched = WeaviateVectorIndex(server.url, filter_batch_keys=4, probe_depth=20)
    single = WeaviateVectorIndex(server.url)
    try:
        cs = chunks(120, seed=3)
        place(single, "r", cs)
        query = unit_vectors(1, seed=4)[0]
        for allowed in ([c for c in cs if c.seq % 10 == 0], [c for c in cs if c.seq % 3 == 0],
                        [c for c in cs if c.seq % 10 != 0]):
            keys = scopes_of(allowed)[0].version_keys
            for fusion in ("ranked", "relative_score"):
                before = server.calls["Search.hybrid"]
                got = batched.hybrid("r", "word2 word3", query, 5, model=MODEL,
                                     scope=SearchScope((), scopes_of(allowed)), alpha=0.5, fusion_type=fusion)
                assert server.calls["Search.hybrid"] - before == 1
                sent = server.recorded("Search.hybrid")[-1].filters
                assert sent.operator == sent.OPERATOR_OR
                assert all(len(f.value_text_array.values) <= 4 for f in sent.filters)
                assert sum(len(f.value_text_array.values) for f in sent.filters) == len(keys)
                want = single.hybrid("r", "word2 word3", query, 5, model=MODEL,
                                     scope=SearchScope((), scopes_of(allowed)), alpha=0.5, fusion_type=fusion)
                assert [h.seq for h in got.hits] == [h.seq for h in want.hits], (len(keys), fusion)
                assert [h.score for h in got.hits] == [h.score for h in want.hits]
    finally:
        batched.close()
        single.close()


def test_vectors_weaviate_refuses_for_their_dimension_fail_the_placement_naming_each(index, server):
    # A collection whose description says DIM but which holds vectors of DIM + 1 (written by
    # someone else): kg's own check passes, Weaviate refuses every object for its length.
    from weaviate.classes.data import DataObject

    from kg.index.weaviate.schema import _chunks_prefix, _chunks_schema, _short_hash

    name = _chunks_prefix("r") + _short_hash(MODEL, 10) + f"_w{WS}_b{BR}"
    description = (f'{{"kg": "chunks", "format": 1, "repo": "r", "model": "{MODEL}", "dim": {DIM:d}, '
                   f'"workspace": {WS:d}, "branch": {BR:d}}}')
    index.client.collections.create_from_dict(_chunks_schema(name, description))
    index.client.collections.get(name).data.insert_many([DataObject(
        properties={"content": "x", "terms": "x", "contentKey": "k0", "chunkIndex": 0, "seq": 99},
        vector=[1.0] * (DIM + 1))])
    with pytest.raises(BackendUnavailable) as caught:
        place(index, "r", chunks(3))
    err = caught.value
    assert "all 3" in err.message and "node n1 chunk 0" in err.message
    assert f"new node has a vector with length {DIM}" in err.message
    assert [f["object"] for f in err.details["failed"]] == [f"node n{i} chunk 0" for i in (1, 2, 3)]


def test_a_failing_weaviate_call_is_backend_unavailable(index, server):
    cs = chunks(3)
    place(index, "r", cs)
    server.fail_next("Search.bm25", "shard KgChunks is read-only")
    with pytest.raises(BackendUnavailable, match="read-only") as caught:
        index.bm25("r", "word1", 3, scope=SearchScope((), scopes_of(cs[:1])))
    assert "search" in caught.value.message and "BM25" in caught.value.message
    assert [h.seq for h in index.bm25("r", "word1", 3, scope=SearchScope((), scopes_of(cs[:1])))] == [1]


def test_a_collection_created_meanwhile_by_another_process_is_used(server):
    # Two writers race to create the (repository, workspace, branch, model) collection: the
    # loser gets Weaviate's 422 "already exists" and must use the winner's collection.
    first = WeaviateVectorIndex(server.url)
    second = WeaviateVectorIndex(server.url)
    try:
        place(first, "r", chunks(2))
        real_listed = second._listed
        calls = []

        def stale_listed(repo_key):  # the second writer looked before the first one created it
            calls.append(repo_key)
            return ([], []) if len(calls) == 1 else real_listed(repo_key)

        second._listed = stale_listed
        before = server.calls["POST /v1/schema"]
        place(second, "r", chunks(2, start=3))
        assert server.calls["POST /v1/schema"] == before + 1  # refused: it exists
        assert first.stats("r")["chunks"] == 4
    finally:
        first.close()
        second.close()


@pytest.mark.parametrize("name, filtered", [
    ("a.txt", True), ("The End", True), ("人工智能.md", True), ("2024", True),
    ("a", False), ("it.is", False), ("A-The", False), ("--", False), ("", False),
])
def test_rag_file_names_that_a_token_filter_can_select(name, filtered):
    from kg.ragnode.weaviate import _filters_by_token

    assert _filters_by_token(name) is filtered
