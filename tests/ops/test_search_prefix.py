"""The k-prefix property of search (kg.rag.search, kg.rag.fusion): the first n hits of a search
are the same, with the same scores, for every k >= n, at node and chunk granularity, with
relative score fusion and with RRF; and a corpus of one chunk per node ranks alike at both
granularities. Random corpora on the library (embedded index, fake embedder), both databases.

The fusion window and the legs' first read are drawn small (monkeypatched) so that corpora of a
few dozen nodes cut the legs and make the search read deeper; one test keeps the defaults."""

from __future__ import annotations

import itertools
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kg.context import OPERATOR, run
from kg.ops.nodes import batch
from kg.ops.repos import create_repository, create_workspace
from kg.rag import search as search_module
from kg.rag.search import SearchRequest, search_branch

WORDS = ["whale", "harpoon", "captain", "sea", "ship", "storm", "oil", "voyage", "crew", "island", "rope", "mast"]
FUSIONS = ("ranked", "relative_score")
_repos = itertools.count()


def _corpus(services, texts: list[tuple[str | None, str]]) -> str:
    """A new repository holding one node per text (a title when given, and a content)."""
    repo = f"prefix{next(_repos)}"
    run(services, OPERATOR, create_repository, repo)
    run(services, OPERATOR, create_workspace, repo, "kb")
    upserts = [{"workspace": "kb", "path": f"/n{i:03d}", "node_type": "kb:Fact",
                "properties": {"content": content} | ({"title": title} if title else {})}
               for i, (title, content) in enumerate(texts)]
    for start in range(0, len(upserts), 200):
        run(services, OPERATOR, batch, repo, "main", upserts=upserts[start:start + 200])
    return repo


def _rows(services, repo: str, query: str, k: int, granularity: str, fusion: str, vector_weight: float):
    request = SearchRequest(query=query, k=k, granularity=granularity, fusion_type=fusion,
                            vector_weight=vector_weight, fulltext_weight=1.0)
    return [(r.path, r.chunk_index, round(r.score, 9))
            for r in search_branch(services, OPERATOR, repo, "main", request).results]


def _words(draw_rng: random.Random, low: int, high: int) -> str:
    return " ".join(draw_rng.choice(WORDS) for _ in range(draw_rng.randint(low, high)))


def _assert_prefixes(services, repo, query, ks, vector_weight):
    for granularity in ("node", "chunk"):
        for fusion in FUSIONS:
            deepest = _rows(services, repo, query, max(ks), granularity, fusion, vector_weight)
            for k in ks:
                got = _rows(services, repo, query, k, granularity, fusion, vector_weight)
                assert got == deepest[:k], (granularity, fusion, k, max(ks))


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), nodes=st.integers(8, 45), window=st.integers(2, 12),
       titled=st.floats(0.0, 1.0), ks=st.lists(st.integers(1, 60), min_size=2, max_size=4),
       vector_weight=st.sampled_from([0.25, 1.0, 3.0]))
def test_a_result_prefix_never_depends_on_k(services, monkeypatch, seed, nodes, window, titled, ks, vector_weight):
    """Nodes of one or two chunks (a title for some), the legs cut at a small window and depth."""
    rng = random.Random(seed)
    monkeypatch.setattr(search_module, "FUSION_WINDOW", window)
    monkeypatch.setattr(search_module, "DEPTH_PER_HIT", {"node": 1, "chunk": 1})
    texts = [(_words(rng, 1, 2) if rng.random() < titled else None, _words(rng, 1, 6)) for _ in range(nodes)]
    repo = _corpus(services, texts)
    _assert_prefixes(services, repo, _words(rng, 1, 3), ks, vector_weight)


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), nodes=st.integers(5, 45), window=st.integers(2, 12),
       k=st.integers(1, 50), vector_weight=st.sampled_from([0.25, 1.0, 3.0]))
def test_one_chunk_per_node_ranks_alike_at_both_granularities(services, monkeypatch, seed, nodes, window, k,
                                                              vector_weight):
    """Distinct texts (a text shared by two nodes is one passage but two nodes)."""
    rng = random.Random(seed)
    monkeypatch.setattr(search_module, "FUSION_WINDOW", window)
    monkeypatch.setattr(search_module, "DEPTH_PER_HIT", {"node": 1, "chunk": 1})
    contents = list(dict.fromkeys(_words(rng, 1, 6) for _ in range(nodes)))
    repo = _corpus(services, [(None, c) for c in contents])
    query = _words(rng, 1, 3)
    for fusion in FUSIONS:
        by_node = _rows(services, repo, query, k, "node", fusion, vector_weight)
        by_chunk = _rows(services, repo, query, k, "chunk", fusion, vector_weight)
        assert by_node == by_chunk, fusion


def test_rrf_chunks_first_20_are_the_first_20_of_80_with_the_defaults(services):
    """The defaults (window 80, three chunks read per hit): a corpus larger than the window,
    where k = 20 read 60 chunks per leg and k = 80 read 240, and RRF ranked differently from
    position 15 on when a leg's unread ranks counted."""
    rng = random.Random(7)
    texts = [(_words(rng, 1, 2), _words(rng, 2, 8)) for _ in range(160)]
    repo = _corpus(services, texts)
    for query in ("whale sea", "storm captain oil", "rope"):
        _assert_prefixes(services, repo, query, [5, 20, 80], 0.25)
        _assert_prefixes(services, repo, query, [20, 80], 1.0)
