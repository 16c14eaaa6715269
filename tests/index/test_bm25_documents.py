"""The embedded index's node-level BM25F (``bm25_documents``): one hit per content key with its
best passage, restricted to the allowed keys, field weights, and fields kept in snapshots."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kg.errors import InvalidInput
from kg.index.base import IndexedChunk, SearchScope
from kg.index.embedded import EmbeddedVectorIndex

REPO = "r1"


def _chunk(seq: int, key: str, index: int, text: str, field: str) -> IndexedChunk:
    vector = np.zeros(4, np.float32)
    vector[seq % 4] = 1.0
    return IndexedChunk(seq, key, index, text, "m", vector, field)


CHUNKS = [
    _chunk(1, "k-title", 0, "Heart disease", "title"),
    _chunk(2, "k-title", 1, "A cohort followed for ten years.", "text"),
    _chunk(3, "k-body", 0, "Outcomes", "title"),
    _chunk(4, "k-body", 1, "Heart rate, heart disease and the heart of the matter.", "text"),
    _chunk(5, "k-body", 2, "Another passage about nothing in particular.", "text"),
    _chunk(6, "k-other", 0, "Kidney", "title"),
]


@pytest.fixture
def index(tmp_path):
    ix = EmbeddedVectorIndex(tmp_path)
    ix.sync(REPO, CHUNKS)
    return ix


def test_one_hit_per_content_key_carrying_its_best_passage(index):
    hits = index.bm25_documents(REPO, "heart", 10, scope=SearchScope({"k-title", "k-body", "k-other"}))
    assert [h.content_key for h in hits] == ["k-body", "k-title"]
    assert [(h.chunk_index, h.rank) for h in hits] == [(1, 1), (0, 2)]
    assert hits[0].text.startswith("Heart rate")
    assert all(h.distance is None and h.score > 0 for h in hits)


def test_a_title_weight_reorders_nodes(index):
    hits = index.bm25_documents(REPO, "heart", 10, scope=SearchScope({"k-title", "k-body"}),
                                field_weights={"title": 10.0})
    assert [h.content_key for h in hits] == ["k-title", "k-body"]


def test_only_the_allowed_content_keys_are_ranked_and_counted(index):
    hits = index.bm25_documents(REPO, "heart", 10, scope=SearchScope({"k-title", "k-other"}))
    assert [h.content_key for h in hits] == ["k-title"]
    assert index.bm25_documents(REPO, "heart", 10, scope=SearchScope({"k-other"})) == []
    assert index.bm25_documents(REPO, "heart", 10, scope=SearchScope({"unknown"})) == []


def test_k_and_queries_without_terms(index):
    keys = {"k-title", "k-body"}
    assert len(index.bm25_documents(REPO, "heart", 1, scope=SearchScope(keys))) == 1
    assert index.bm25_documents(REPO, "heart", 0, scope=SearchScope(keys)) == []
    assert index.bm25_documents(REPO, "   ", 10, scope=SearchScope(keys)) == []


@pytest.mark.parametrize("weight", [-1.0, float("inf"), "2"])
def test_a_bad_field_weight_is_refused(index, weight):
    with pytest.raises(InvalidInput):
        index.bm25_documents(REPO, "heart", 10, scope=SearchScope({"k-body"}), field_weights={"title": weight})


def test_fields_survive_a_snapshot(index, tmp_path):
    before = index.bm25_documents(REPO, "heart", 10, scope=SearchScope({"k-title", "k-body"}),
                                  field_weights={"title": 10.0})
    index.flush(REPO)
    again = EmbeddedVectorIndex(tmp_path)
    after = again.bm25_documents(REPO, "heart", 10, scope=SearchScope({"k-title", "k-body"}),
                                 field_weights={"title": 10.0})
    assert [(h.content_key, h.chunk_index, h.score) for h in after] == \
        [(h.content_key, h.chunk_index, h.score) for h in before]


def test_a_snapshot_written_without_fields_loads_with_fields_unknown(index, tmp_path):
    index.flush(REPO)
    folder = tmp_path / "index" / REPO
    meta = json.loads((folder / "meta.json").read_text())
    rows_file = folder / meta["rows_file"]
    with np.load(rows_file) as rows:
        old = {name: rows[name] for name in rows.files if name != "field_id"}
    with open(rows_file, "wb") as fh:
        np.savez(fh, **old)
    del meta["fields"]
    (folder / "meta.json").write_text(json.dumps(meta))
    again = EmbeddedVectorIndex(tmp_path)
    assert again.stats(REPO)["chunks"] == len(CHUNKS)
    # Every field is unknown, so a title weight changes nothing.
    plain = again.bm25_documents(REPO, "heart", 10, scope=SearchScope({"k-title", "k-body"}))
    titled = again.bm25_documents(REPO, "heart", 10, scope=SearchScope({"k-title", "k-body"}),
                                  field_weights={"title": 10.0})
    assert [(h.content_key, h.score) for h in plain] == [(h.content_key, h.score) for h in titled]


def _scores(hits):
    return [(h.content_key, h.chunk_index, round(h.score, 12)) for h in hits]


def test_statistics_memoised_per_branch_state_are_never_served_to_another(index):
    """A frozenset (a branch state) pays BM25F's O(rows) statistics once per snapshot; another
    state, and the same state after a sync, gets its own: results equal a plain set's."""
    everything = frozenset({"k-title", "k-body", "k-other"})
    branch = frozenset({"k-title", "k-other"})  # a branch that deleted k-body
    for keys in (everything, branch, everything, branch):
        assert _scores(index.bm25_documents(REPO, "heart disease", 10, scope=SearchScope(keys))) == \
            _scores(index.bm25_documents(REPO, "heart disease", 10, scope=SearchScope(set(keys))))
    view = index._view(REPO)
    assert {id(everything), id(branch)} == set(view.group_memo)
    assert [h.content_key for h in index.bm25_documents(REPO, "heart", 10, scope=SearchScope(branch))] == ["k-title"]
    # a sync publishes a new snapshot: the new text is counted (N, df, lengths), nothing stale
    index.sync(REPO, [_chunk(7, "k-new", 0, "Heart heart heart", "text")])
    grown = index.bm25_documents(REPO, "heart", 10, scope=SearchScope(everything | {"k-new"}))
    assert grown[0].content_key == "k-new"
    assert _scores(index.bm25_documents(REPO, "heart", 10, scope=SearchScope(everything))) == \
        _scores(index.bm25_documents(REPO, "heart", 10, scope=SearchScope(set(everything))))
