"""The fulltext leg ranks a branch's own texts: a branch with overrides, tombstones and new nodes
searches exactly as a repository holding only what the branch sees (the same hits and BM25 /
BM25F scores, so N, df and the average lengths are the branch's and its top k is not a
post-filter of main's), with or without a property filter, at both granularities; and the first
n hits are the same for any k >= n."""

from __future__ import annotations

import random

import pytest

WORDS = ["quasar", "zebra", "crossing", "nebula", "orbit", "comet", "lantern", "harbor", "violet", "ember",
         "glacier", "meadow"]


def text(rng: random.Random) -> str:
    # frequent words first: a Zipf-like draw, so terms overlap and frequencies differ
    return " ".join(rng.choices(WORDS, weights=[1 / (i + 1) for i in range(len(WORDS))], k=rng.randint(3, 30)))


def put(client, repo: str, path: str, props: dict, branch: str = "main") -> None:
    r = client.put(f"/api/repos/{repo}/workspaces/knowledge/nodes{path}", params={"branch": branch},
                   json={"node_type": "kb:Article", "properties": props})
    assert r.status_code in (200, 201), r.text


def search(client, repo: str, body: dict, branch: str = "main") -> list[dict]:
    r = client.post(f"/api/repos/{repo}/search", params={"branch": branch}, json={"mode": "fulltext", **body})
    assert r.status_code == 200, r.text
    return r.json()["results"]


def hit_key(row: dict) -> tuple:
    return (row["path"], row["chunk_index"]) if "chunk_index" in row else (row["path"],)


@pytest.mark.parametrize("granularity", ["node", "chunk"])
def test_a_branch_searches_as_a_repository_of_only_what_it_sees(client, repo, granularity):
    rng = random.Random(7)
    main = {f"/n{i}": {"title": text(rng)[:40].strip(), "content": text(rng), "status": rng.choice(["a", "b"])}
            for i in range(30)}
    for path, props in main.items():
        put(client, "acme", path, props)
    assert client.post("/api/repos/acme/branches", json={"name": "agent/lex"}).status_code == 201
    seen = dict(main)
    for path in ["/n1", "/n4", "/n7", "/n10", "/n13", "/n16"]:  # overrides
        seen[path] = {"title": text(rng)[:40].strip(), "content": text(rng), "status": rng.choice(["a", "b"])}
        put(client, "acme", path, seen[path], branch="agent/lex")
    deleted = ["/n2", "/n5", "/n8", "/n20", "/n25"]  # tombstones
    for path in deleted:
        r = client.delete(f"/api/repos/acme/workspaces/knowledge/nodes{path}", params={"branch": "agent/lex"})
        assert r.status_code in (200, 204), r.text
        del seen[path]
    for i in range(30, 34):  # nodes only the branch has
        seen[f"/n{i}"] = {"title": text(rng)[:40].strip(), "content": text(rng), "status": rng.choice(["a", "b"])}
        put(client, "acme", f"/n{i}", seen[f"/n{i}"], branch="agent/lex")
    # main changes after the fork: the branch must not see it
    put(client, "acme", "/n3", {"title": "quasar quasar", "content": "quasar " * 20, "status": "a"})

    assert client.post("/api/repos", json={"name": "alone"}).status_code == 201
    assert client.post("/api/repos/alone/workspaces", json={"name": "knowledge"}).status_code == 201
    for path, props in seen.items():
        put(client, "alone", path, props)

    for query in ["quasar", "zebra nebula", "comet lantern harbor", "glacier meadow quasar", "ember"]:
        for where in (None, {"status": "a"}):
            body = {"query": query, "granularity": granularity, **({"where": where} if where else {})}
            full = search(client, "acme", {**body, "k": 100}, branch="agent/lex")
            expected = search(client, "alone", {**body, "k": 100})
            assert full, query
            assert {hit_key(r): r["score"] for r in full} == pytest.approx(
                {hit_key(r): r["score"] for r in expected}, rel=1e-12)
            assert not {r["path"] for r in full} & set(deleted)
            for r in full:
                if granularity == "chunk":  # each passage is the branch's text of its node
                    assert r["chunk_text"] in (seen[r["path"]]["title"], seen[r["path"]]["content"])
                if where:
                    assert seen[r["path"]]["status"] == "a"
            for k in (1, 3, 7):
                top = search(client, "acme", {**body, "k": k}, branch="agent/lex")
                assert [(hit_key(r), r["score"]) for r in top] == [(hit_key(r), r["score"]) for r in full[:k]]
