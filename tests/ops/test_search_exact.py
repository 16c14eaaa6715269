"""A search through the use case is exact: its rows are the branch's own ranking, not a shortcut's.

On a branch with overrides, tombstones and nodes of its own (and a write on main after the fork
that the branch must not see), a fulltext search at chunk granularity answers what BM25 computed
by hand over the passages the branch sees answers (scores, order, ties by the nodes' paths), for
every k, whether the index's MaxScore pruned the frequent terms or scored every posting; a
vector search answers the exact cosine ranking; each row carries the properties and title the
branch sees. Both databases.
"""

from __future__ import annotations

import math
import random
from collections import Counter

import numpy as np
import pytest

from kg.context import OPERATOR, run
from kg.index.bm25 import BM25Index
from kg.index.tokenize import analyze
from kg.ops.branches import create_branch
from kg.ops.nodes import batch, delete_node, put_node
from kg.ops.queries import get_node
from kg.ops.repos import create_repository, create_workspace
from kg.rag.search import SearchRequest, search_branch

# Zipf-like: a few words in most passages, most words in a few, so MaxScore has terms to prune.
WORDS = [f"w{i}" for i in range(60)]
WEIGHTS = [1 / (i + 1) ** 1.1 for i in range(len(WORDS))]


def text(rng: random.Random) -> str:
    return " ".join(rng.choices(WORDS, weights=WEIGHTS, k=rng.randint(4, 24)))


@pytest.fixture
def corpus(services):
    """Repository ``r`` (workspace ``kb``), 300 nodes on main, branch ``b`` with 20 overrides,
    10 tombstones, 12 nodes of its own and two nodes of one text; then a write on main. Returns
    the branch's {path: properties}."""
    rng = random.Random(11)
    run(services, OPERATOR, create_repository, "r")
    run(services, OPERATOR, create_workspace, "r", "kb")
    main = {f"/n{i:03d}": {"content": text(rng), "title": f"note {i}"} for i in range(300)}
    run(services, OPERATOR, batch, "r", "main", upserts=[
        {"workspace": "kb", "path": p, "node_type": "t", "properties": props} for p, props in main.items()])
    run(services, OPERATOR, create_branch, "r", name="b")
    seen = dict(main)
    for i in range(0, 200, 10):
        seen[f"/n{i:03d}"] = {"content": text(rng), "title": f"override {i}"}
    for i in range(12):
        seen[f"/own{i:02d}"] = {"content": text(rng), "title": f"own {i}"}
    seen["/twin-a"] = seen["/twin-b"] = {"content": "w0 w40 w41 w41", "title": "twin"}
    run(services, OPERATOR, batch, "r", "b", upserts=[
        {"workspace": "kb", "path": p, "node_type": "t", "properties": props}
        for p, props in seen.items() if main.get(p) != props])
    for i in range(5, 300, 30):
        run(services, OPERATOR, delete_node, "r", "b", "kb", f"/n{i:03d}")
        del seen[f"/n{i:03d}"]
    run(services, OPERATOR, put_node, "r", "main", "kb", "/n001", node_type="t",
        properties={"content": "w59 " * 8, "title": "main only"})
    return seen


def reference_bm25(passages: dict[str, str], query: str, k1: float = 1.2, b: float = 0.75) -> dict[str, float]:
    """BM25 over distinct passages (one index row each), straight from the formula."""
    docs = {p: Counter(analyze(p)) for p in passages}
    n = len(docs)
    avgdl = sum(sum(d.values()) for d in docs.values()) / n
    scores: dict[str, float] = {}
    for term in dict.fromkeys(analyze(query)):
        df = sum(1 for d in docs.values() if term in d)
        if not df:
            continue
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        for passage, d in docs.items():
            if d[term]:
                norm = k1 * (1 - b + b * sum(d.values()) / avgdl)
                scores[passage] = scores.get(passage, 0.0) + idf * d[term] * (k1 + 1) / (d[term] + norm)
    return scores


@pytest.fixture
def pruned(monkeypatch):
    """Whether each fulltext search's MaxScore pruned (tried from the first posting on: the
    corpus is small)."""
    from kg.index import bm25 as bm25_module

    monkeypatch.setattr(bm25_module, "_PRUNE_MIN_POSTINGS", 0)
    seen: list[bool] = []
    candidates = BM25Index._candidates

    def spy(self, *args, **kwargs):
        out = candidates(self, *args, **kwargs)
        seen.append(out is not None)
        return out

    monkeypatch.setattr(BM25Index, "_candidates", spy)
    return seen


def test_fulltext_rows_are_the_branch_ranking_at_every_k(services, corpus, pruned):
    # each node has two passages (its title, its content): the index ranks them all
    passages = {props[field] for props in corpus.values() for field in ("content", "title")}
    by_text: dict[str, list[str]] = {}
    for path, props in sorted(corpus.items()):
        for field in ("title", "content"):
            by_text.setdefault(props[field], []).append(path)
    rng = random.Random(5)
    queries = [" ".join([WORDS[rng.randrange(3)], WORDS[rng.randrange(20, 60)], WORDS[rng.randrange(10, 60)]])
               for _ in range(12)] + ["w41 w0", "w59", "w2 w3 w4 w5"]
    for query in queries:
        expected = reference_bm25(passages, query)
        # rows: passages by score, ties by the index row (sync order: not checked), each passage's
        # nodes by path
        everything = search_branch(services, OPERATOR, "r", "b", SearchRequest(
            query=query, k=1000, mode="fulltext", granularity="chunk"))
        got = [(r.path, r.chunk_text, r.score) for r in everything.results]
        assert {text for _, text, _ in got} == set(expected)
        for _, text_, score in got:
            assert score == pytest.approx(expected[text_], rel=1e-9)
        assert [score for *_, score in got] == sorted((score for *_, score in got), reverse=True)
        for text_ in expected:
            assert [path for path, t, _ in got if t == text_] == by_text[text_]  # one row per node, by path
        assert not {path for path, *_ in got} - set(corpus)  # nothing the branch does not see
        for k in (1, 3, 10, 25):
            top = search_branch(services, OPERATOR, "r", "b", SearchRequest(
                query=query, k=k, mode="fulltext", granularity="chunk"))
            assert [(r.path, r.chunk_text, r.score) for r in top.results] == got[:k]
            for r in top.results:
                assert r.properties == corpus[r.path] and r.title == corpus[r.path]["title"]
    assert True in pruned and False in pruned  # both evaluations were checked


def test_vector_rows_are_the_exact_cosine_ranking(services, corpus):
    embedder = services.embedder(services.settings.embedding_model)
    passages = sorted({props[field] for props in corpus.values() for field in ("content", "title")})
    vectors = np.asarray(embedder.embed(passages), dtype=np.float64)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    for query in ["w0 w41", "w7 w33 w50", "w59"]:
        q = np.asarray(embedder.embed([query])[0], dtype=np.float64)
        cosine = dict(zip(passages, vectors @ (q / np.linalg.norm(q)), strict=True))
        answer = search_branch(services, OPERATOR, "r", "b", SearchRequest(
            query=query, k=15, mode="vector", granularity="chunk"))
        assert len(answer.results) == 15
        similarities = [cosine[r.chunk_text] for r in answer.results]
        assert similarities == sorted(similarities, reverse=True)
        threshold = similarities[-1]
        assert {t for t, s in cosine.items() if s > threshold + 1e-6} <= {r.chunk_text for r in answer.results}
        for r in answer.results:
            assert r.vector_distance == pytest.approx(1 - cosine[r.chunk_text], abs=1e-5)
            assert r.properties == corpus[r.path] and r.title == corpus[r.path]["title"]
            assert get_node(services, OPERATOR, "r", "b", "kb", r.path).properties == r.properties
