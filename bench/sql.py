"""The SQL endpoint's own cost: parse + plan per statement, and a KNN through SQL against the same
search over HTTP.

1. Parse + plan (:func:`kg.sql.execute.compile_sql`: tokenize, sqlglot's parse with kg's
   dialect, compile to use cases; nothing runs) of each of the RAG guide's statements, p50 and
   p95 over ``--repeat`` runs each, the parse cache cleared before each run. Target: p50 <= 2 ms.
2. ``POST /api/sql/{repo}/main`` with the guide's KNN (``granularity => 'chunk'``) against
   ``POST /api/repos/{repo}/search`` with the same request, both in process (FastAPI's
   TestClient, the same app), interleaved, ``--queries`` each, on ``--nodes`` nodes embedded by
   the fake embedder (the baseline is the HTTP search in the same run), the query once as a
   literal in the text (parsed each time) and once as ``$1`` (one text, parsed once). Target:
   ratio of the p50s <= 1.1.

Run: ``python bench/sql.py [--nodes 2000] [--queries 200] [--repeat 500]``; JSON in
``bench/results/sql.json``.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy is imported
os.environ.setdefault("KG_ALLOWED_HOSTS", "testserver")

import argparse  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import RESULTS, isolated_database, machine, percentile, table, write_results  # noqa: E402
from kg.context import OPERATOR, run  # noqa: E402
from kg.ops import nodes as node_ops  # noqa: E402
from kg.ops import repos as repo_ops  # noqa: E402
from kg.services import Services  # noqa: E402
from kg.settings import Settings  # noqa: E402
from kg.sql.execute import compile_sql  # noqa: E402
from kg.sql.parse import _parse_cached  # noqa: E402

WORDS = ("rotate key deploy fail storage layer cursor pagination sign single setup error reset publish "
         "branch merge revision chunk embedding vector index search hybrid fusion relation neighbor").split()
STATEMENTS = {
    "insert": """INSERT INTO 'knowledge' (path, name, node_type, properties) VALUES (
  '/docs/guides/getting-started', 'getting-started', 'kb:Article',
  '{"title": "Getting Started Guide", "content": "RaisinDB is a multi-tenant content database...",
    "status": "published"}'::jsonb);""",
    "knn chunks": """SELECT path, chunk_index, vector_distance, chunk_text
FROM KNN('how do I rotate an API key', 5, workspaces => 'knowledge', granularity => 'chunk');""",
    "operator form": """SELECT path, properties->>'content'::String AS content,
       embedding <=> EMBEDDING('pagination cursors') AS distance
FROM 'knowledge'
WHERE PATH_STARTS_WITH(path, '/docs/api/')
ORDER BY distance
LIMIT 10;""",
    "knn filtered": """SELECT path, chunk_text, vector_distance
FROM KNN('single sign-on setup', 10, workspaces => 'knowledge')
WHERE properties->>'status'::String = 'published'
  AND node_type = 'kb:Article';""",
    "children": """SELECT properties->>'content'::String AS content
FROM 'knowledge'
WHERE CHILD_OF('/docs/architecture/overview') AND node_type = 'kb:Section'
ORDER BY __order;""",
    "hybrid": """SELECT path, score, fulltext_rank, vector_rank, chunk_text
FROM HYBRID_SEARCH('ERR_CONN_RESET during publish', 10,
                   workspaces => 'knowledge', granularity => 'chunk');""",
    "relate": """RELATE FROM path='/entities/dana-weber' IN WORKSPACE 'library'
       TO   path='/entities/acme-marine' IN WORKSPACE 'library'
       TYPE 'works_at';""",
    "neighbors": """SELECT path, relation_type, weight
FROM NEIGHBORS('library:/entities/dana-weber', 'BOTH', NULL);""",
}
KNN = ("SELECT path, chunk_index, vector_distance, chunk_text FROM KNN('{q}', 5, workspaces => 'knowledge', "
       "granularity => 'chunk')")
#: The same with the query as ``$1``: one text, parsed once (kg.sql.parse keeps it).
KNN_PARAM = ("SELECT path, chunk_index, vector_distance, chunk_text FROM KNN($1, 5, workspaces => 'knowledge', "
             "granularity => 'chunk')")


def seed(services: Services, n: int) -> None:
    run(services, OPERATOR, repo_ops.create_repository, "bench")
    run(services, OPERATOR, repo_ops.create_workspace, "bench", "knowledge")
    for start in range(0, n, 500):
        upserts = [{"workspace": "knowledge", "path": f"/docs/d{i}", "node_type": "kb:Article",
                    "properties": {"title": f"Doc {i}",
                                   "content": " ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(60))}}
                   for i in range(start, min(n, start + 500))]
        run(services, OPERATOR, node_ops.batch, "bench", "main", upserts=upserts, parents=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=500)
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args()

    from fastapi.testclient import TestClient

    from api.app import create_app

    with tempfile.TemporaryDirectory() as tmp, isolated_database(args.database_url, Path(tmp)) as (url, backend):
        settings = Settings(database_url=url, data_dir=Path(tmp) / "data", embedding_model="fake:hash-64",
                            index_inline=True, allow_fake_embedder=True)
        services = Services.from_settings(settings)
        services.db.upgrade()
        seed(services, args.nodes)

        rows = []
        plan_p50 = {}
        for name, text in STATEMENTS.items():
            samples = []
            for _ in range(args.repeat):
                _parse_cached.cache_clear()  # parse afresh: the figure is a first parse, not a cache hit
                started = time.perf_counter()
                compile_sql(services, OPERATOR, "bench", "main", text)
                samples.append((time.perf_counter() - started) * 1000)
            plan_p50[name] = percentile(samples, 50)
            rows.append([name, f"{percentile(samples, 50):.3f}", f"{percentile(samples, 95):.3f}"])
        print(f"parse + plan, {args.repeat} runs each (ms):")
        print(table(rows, ["statement", "p50", "p95"]))
        worst = max(plan_p50.values())
        print(f"worst p50 {worst:.3f} ms (target <= 2 ms): {'ok' if worst <= 2 else 'OVER'}")

        figures: dict[str, float] = {}
        with TestClient(create_app(services=services)) as client:
            queries = [" ".join(WORDS[(i * 3 + j) % len(WORDS)] for j in range(4)) for i in range(args.queries)]
            calls = {
                "SQL, query as a literal": lambda q: client.post("/api/sql/bench/main",
                                                                 json={"sql": KNN.format(q=q)}),
                "SQL, query as $1": lambda q: client.post("/api/sql/bench/main",
                                                          json={"sql": KNN_PARAM, "params": [q]}),
                "HTTP POST /search": lambda q: client.post("/api/repos/bench/search", json={
                    "query": q, "k": 5, "mode": "vector", "workspaces": ["knowledge"], "granularity": "chunk"}),
            }
            samples: dict[str, list[float]] = {name: [] for name in calls}
            for q in queries[:5]:  # warm every path (the index, the embedder, the caches)
                for call in calls.values():
                    call(q)
            names = list(calls)
            for i, q in enumerate(queries):
                # a different query each round, each path in a rotating order: the query's
                # embedding (cached after its first use) favours no path
                for name in names[i % 3:] + names[:i % 3]:
                    started = time.perf_counter()
                    r = calls[name](q)
                    elapsed = (time.perf_counter() - started) * 1000
                    assert r.status_code == 200, r.text
                    samples[name].append(elapsed)
        services.close()
        http = percentile(samples["HTTP POST /search"], 50)
        print(f"\nKNN k=5 over {args.nodes} nodes, {args.queries} queries each, in process ({backend}):")
        print(table([[name, f"{percentile(v, 50):.2f}", f"{percentile(v, 95):.2f}",
                      f"{percentile(v, 50) / http:.3f}"] for name, v in samples.items()],
                    ["path", "p50 ms", "p95 ms", "p50 / HTTP"]))
        for name, v in samples.items():
            figures[name] = percentile(v, 50)
        ratio = figures["SQL, query as $1"] / http
        literal = figures["SQL, query as a literal"] / http
        print(f"ratio SQL / HTTP (p50): {ratio:.3f} with $1, {literal:.3f} with a literal (target <= 1.1)")
        write_results({"machine": machine(), "backend": backend, "nodes": args.nodes,
                       "plan_p50_ms": plan_p50, "knn_p50_ms": figures, "ratio_param": ratio,
                       "ratio_literal": literal}, RESULTS / "sql.json")


if __name__ == "__main__":
    main()
