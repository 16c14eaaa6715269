"""The embedded index's masks of allowed content keys, kept from one snapshot to the next and
derived from a KeySet's base: a search after a write ranks exactly what a mask looked up whole
ranks, and looks up only the changes."""

from __future__ import annotations

import pytest

from kg.index import embedded
from kg.index.base import KeySet, SearchScope
from kg.index.embedded import EmbeddedVectorIndex
from tests.index.test_contract import MODEL, brute_force, make_chunks, seqs, unit_vectors

REPO = "masks"


@pytest.fixture
def lookups(monkeypatch):
    """Counts the whole lookups of a key set (one dict get per key)."""
    made: list[int] = []
    whole = embedded._View._mask

    def counted(self, content_keys):
        made.append(len(content_keys))
        return whole(self, content_keys)

    monkeypatch.setattr(embedded._View, "_mask", counted)
    return made


def _both_legs(index, keys, query):
    return (seqs(index.knn(REPO, query, 10, model=MODEL, scope=SearchScope(keys))),
            seqs(index.bm25(REPO, "alpha gamma", 10, scope=SearchScope(keys))))


def test_a_derived_set_after_new_chunks_ranks_what_a_whole_lookup_ranks(lookups):
    index = EmbeddedVectorIndex()
    first, later = make_chunks(80), make_chunks(40, start=81, seed=3)
    index.sync(REPO, first)
    query = unit_vectors(1, seed=9)[0]
    base = KeySet(c.content_key for c in first[:60])
    _both_legs(index, base, query)
    assert lookups == [len(base)]  # looked up once for both legs

    index.sync(REPO, later)  # a new snapshot, with keys the base's mask has never seen
    dropped = {c.content_key for c in first[:10]}
    derived = base.derive(removed=dropped, added={c.content_key for c in later[:20]})
    got = _both_legs(index, derived, query)
    assert lookups == [len(base)]  # from the base's mask: no whole lookup
    allowed = [c for c in first + later if c.content_key in derived]
    assert got[0] == brute_force(allowed, query, 10)
    assert got == _both_legs(index, frozenset(derived), query)  # a plain set, looked up whole
    assert lookups == [len(base), len(derived)]


def test_a_set_memoised_before_its_keys_were_indexed_finds_them_once_they_are():
    index = EmbeddedVectorIndex()
    first, later = make_chunks(20), make_chunks(10, start=21, seed=4)
    index.sync(REPO, first)
    keys = KeySet(c.content_key for c in first + later)  # a search's set ahead of the index
    query = unit_vectors(1, seed=2)[0]
    assert seqs(index.knn(REPO, query, 30, model=MODEL, scope=SearchScope(keys))) == brute_force(first, query, 30)
    index.sync(REPO, later)
    assert (seqs(index.knn(REPO, query, 30, model=MODEL, scope=SearchScope(keys)))
            == brute_force(first + later, query, 30))
    assert seqs(index.bm25(REPO, "chunk25", 30, scope=SearchScope(keys))) == [25]


def test_a_derived_set_whose_base_is_not_memoised_is_looked_up_whole(lookups):
    index = EmbeddedVectorIndex()
    chunks = make_chunks(40)
    index.sync(REPO, chunks)
    base = KeySet(c.content_key for c in chunks)
    derived = base.derive(removed={"key1"})
    query = unit_vectors(1, seed=5)[0]
    hits = index.knn(REPO, query, 40, model=MODEL, scope=SearchScope(derived))
    assert lookups == [len(derived)]
    assert seqs(hits) == brute_force([c for c in chunks if c.content_key != "key1"], query, 40)


def test_a_reset_index_drops_the_kept_masks():
    index = EmbeddedVectorIndex()
    chunks = make_chunks(20)
    index.sync(REPO, chunks)
    keys = KeySet(c.content_key for c in chunks)
    index.knn(REPO, unit_vectors(1)[0], 5, model=MODEL, scope=SearchScope(keys))
    index.drop(REPO)
    renumbered = make_chunks(6, start=100)  # other keys take the freed key ids
    index.sync(REPO, renumbered)
    assert index.knn(REPO, unit_vectors(1)[0], 5, model=MODEL, scope=SearchScope(keys)) == []
    assert index.bm25(REPO, "chunk100 chunk101", 5, scope=SearchScope(keys)) == []
    assert seqs(index.bm25(REPO, "chunk101", 5, scope=SearchScope({"key50"}))) == [101]


def test_a_key_set_is_a_read_only_set_the_collector_does_not_walk():
    import gc

    first = KeySet(f"k{i}" for i in range(1000))
    second = first.derive(removed={"k1", "k2", "nope"}, added={"k2", "new"})
    assert second == {f"k{i}" for i in range(1000)} - {"k1"} | {"new"}
    assert second.removed == {"k1"} and second.added == {"new"} and second.base is first
    assert "k1" in first and "k1" not in second and len(second) == 1000
    assert second & {"k3", "zz"} == {"k3"} and not second.isdisjoint({"new"})
    assert len(first) == 1000 and "new" not in first  # the base is not changed
    # The members are the keys of a plain dict of strings: a search state made per write is
    # not walked by each young collection (a frozenset of 1M keys cost 52 ms a collection).
    for keys in (first, second):
        held = [r for r in gc.get_referents(keys) if isinstance(r, dict)]
        assert [len(d) for d in held] == [len(keys)] and not gc.is_tracked(held[0])
    with pytest.raises(TypeError):
        first.members["x"] = None  # type: ignore[index]
