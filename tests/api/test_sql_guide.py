"""The RAG guide's SQL statements, verbatim, through ``POST /api/sql/{repo}/{branch}``: each
answers the rows the equivalent HTTP calls answer (same paths, order, scores), on SQLite and
PostgreSQL, with the fake embedder."""

from __future__ import annotations

import pytest

# --- the guide's statements, copied verbatim --------------------------------------------------

INSERT_ONE = """INSERT INTO 'knowledge' (path, name, node_type, properties) VALUES (
  '/docs/guides/getting-started',
  'getting-started',
  'kb:Article',
  '{"title": "Getting Started Guide",
    "content": "RaisinDB is a multi-tenant content database with git-like versioning...",
    "status": "published"}'::jsonb
);"""

INSERT_TWO = """INSERT INTO 'knowledge' (path, name, node_type, properties) VALUES
  ('/docs/architecture/overview', 'overview', 'kb:Article',
   '{"title": "Architecture Overview", "content": "Introduction to the system architecture..."}'::jsonb),
  ('/docs/architecture/overview/storage', 'storage', 'kb:Section',
   '{"content": "The storage layer uses RocksDB with 40+ column families...", "position": 1}'::jsonb);"""

KNN_CHUNKS = """SELECT path, chunk_index, vector_distance, chunk_text
FROM KNN('how do I rotate an API key', 5, workspaces => 'knowledge', granularity => 'chunk');"""

KNN_WORKSPACES = """SELECT workspace_id, path, chunk_text, vector_distance
FROM KNN('why did the deploy fail', 10, workspaces => 'support, engineering');"""

OPERATOR_FORM = """SELECT path, properties->>'content'::String AS content,
       embedding <=> EMBEDDING('pagination cursors') AS distance
FROM 'knowledge'
WHERE PATH_STARTS_WITH(path, '/docs/api/')
ORDER BY distance
LIMIT 10;"""

KNN_FILTERED = """SELECT path, chunk_text, vector_distance
FROM KNN('single sign-on setup', 10, workspaces => 'knowledge')
WHERE properties->>'status'::String = 'published'
  AND node_type = 'kb:Article';"""

ARTICLE = """-- The article a section belongs to
SELECT path, properties->>'title'::String AS title, properties->>'content'::String AS content
FROM 'knowledge'
WHERE path = '/docs/architecture/overview';"""

SECTIONS = """-- All sections of that article, in order
SELECT properties->>'content'::String AS content
FROM 'knowledge'
WHERE CHILD_OF('/docs/architecture/overview') AND node_type = 'kb:Section'
ORDER BY __order;"""

HYBRID_PARAM = """SELECT path, chunk_text
       FROM HYBRID_SEARCH($1, 8, workspaces => 'knowledge', granularity => 'chunk')"""

INSERT_ANSWER = """INSERT INTO 'knowledge' (path, name, node_type, properties) VALUES (
  '/answers/2026-03/answer-12345',
  'answer-12345',
  'kb:Answer',
  '{"question": "How does the storage layer work?",
    "answer": "The storage layer uses RocksDB with 40+ column families...",
    "sources": ["/docs/architecture/overview/storage"],
    "generated_at": "2026-03-31T12:00:00Z"}'::jsonb
);"""

HYBRID = """SELECT path, score, fulltext_rank, vector_rank, chunk_text
FROM HYBRID_SEARCH('ERR_CONN_RESET during publish', 10,
                   workspaces => 'knowledge', granularity => 'chunk');"""

CREATE_BRANCH = """CREATE BRANCH 'agent/rag-session-001' FROM 'main';"""

RELATE = """RELATE FROM path='/entities/dana-weber' IN WORKSPACE 'library'
       TO   path='/entities/acme-marine' IN WORKSPACE 'library'
       TYPE 'works_at';"""

NEIGHBORS = """SELECT path, relation_type, weight
FROM NEIGHBORS('library:/entities/dana-weber', 'BOTH', NULL);
-- /entities/acme-marine   works_at   NULL"""

# --- helpers ------------------------------------------------------------------------------------

EXTRA = [  # (workspace, path, node_type, properties): what the searches find besides the INSERTs
    ("knowledge", "/docs/api/pagination", "kb:Article",
     {"title": "Pagination", "content": "List endpoints page with cursors: pass the next cursor back.",
      "status": "published"}),
    ("knowledge", "/docs/api/keys", "kb:Article",
     {"title": "API keys", "content": "Rotate an API key: create a new key, deploy it, revoke the old one.",
      "status": "published"}),
    ("knowledge", "/docs/api/errors", "kb:Article",
     {"title": "Errors", "content": "ERR_CONN_RESET during publish means the connection was reset; retry.",
      "status": "draft"}),
    ("knowledge", "/docs/sso", "kb:Article",
     {"title": "Single sign-on", "content": "Single sign-on setup with SAML: configure the identity provider.",
      "status": "published"}),
    ("knowledge", "/docs/sso/okta", "kb:Section",
     {"content": "Single sign-on setup for Okta.", "status": "published"}),
    ("support", "/tickets/t-1", "kb:Ticket", {"content": "The deploy failed because the disk was full."}),
    ("engineering", "/postmortems/p-1", "kb:Postmortem",
     {"content": "Why the deploy failed: a migration locked the table."}),
    ("library", "/entities/dana-weber", "kb:Person", {"title": "Dana Weber"}),
    ("library", "/entities/acme-marine", "kb:Organisation", {"title": "Acme Marine"}),
]


def sql(client, text, params=None, branch="main"):
    r = client.post(f"/api/sql/acme/{branch}", json={"sql": text, "params": params or []})
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert len(results) == 1
    result = results[0]
    assert result["row_count"] == len(result["rows"])
    assert result["execution_time_ms"] >= 0
    return result


def search(client, **body):
    r = client.post("/api/repos/acme/search", json=body)
    assert r.status_code == 200, r.text
    return r.json()["results"]


def pick(rows, *keys):
    return [[row[k] for k in keys] for row in rows]


def head(client):
    r = client.get("/api/repos/acme/branches/main")
    assert r.status_code == 200, r.text
    return r.json()["head_revision"]


@pytest.fixture
def guide(client, repo):
    for ws in ("support", "engineering", "library"):
        assert client.post("/api/repos/acme/workspaces", json={"name": ws}).status_code == 201
    for ws, path, node_type, props in EXTRA:
        r = client.put(f"/api/repos/acme/workspaces/{ws}/nodes{path}", params={"parents": "true"},
                       json={"node_type": node_type, "properties": props})
        assert r.status_code == 201, r.text
    return client


# --- the guide, step by step ---------------------------------------------------------------------


def test_the_guides_statements_answer_what_the_http_calls_answer(guide):
    client = guide
    # Step 1: one node, its missing ancestors made as folders (as PUT ?parents=true)
    before = head(client)
    out = sql(client, INSERT_ONE)
    assert out["columns"] == ["workspace_id", "path", "node_id", "node_type", "revision"]
    node = client.get("/api/repos/acme/workspaces/knowledge/nodes/docs/guides/getting-started").json()
    assert out["rows"] == [["knowledge", "/docs/guides/getting-started", node["id"], "kb:Article", before + 1]]
    assert node["properties"] == {"title": "Getting Started Guide", "status": "published",
                                  "content": "RaisinDB is a multi-tenant content database with git-like "
                                             "versioning..."}
    # Step 2: two rows, one revision
    out = sql(client, INSERT_TWO)
    assert [r[1] for r in out["rows"]] == ["/docs/architecture/overview", "/docs/architecture/overview/storage"]
    assert {r[4] for r in out["rows"]} == {before + 2} == {head(client)}
    storage = client.get("/api/repos/acme/workspaces/knowledge/nodes/docs/architecture/overview/storage").json()
    assert storage["node_type"] == "kb:Section" and storage["properties"]["position"] == 1

    # Step 3: passages for a prompt
    out = sql(client, KNN_CHUNKS)
    assert out["columns"] == ["path", "chunk_index", "vector_distance", "chunk_text"]
    expected = search(client, query="how do I rotate an API key", k=5, mode="vector", workspaces=["knowledge"],
                      granularity="chunk")
    assert expected and out["rows"] == pick(expected, "path", "chunk_index", "vector_distance", "chunk_text")

    # scoped by workspace: one row per node (no granularity), both workspaces
    out = sql(client, KNN_WORKSPACES)
    expected = search(client, query="why did the deploy fail", k=10, mode="vector",
                      workspaces=["support", "engineering"], granularity="node")
    assert out["rows"] == pick(expected, "workspace", "path", "chunk_text", "vector_distance")
    assert {r[0] for r in out["rows"]} == {"support", "engineering"}

    # scoped by path: the operator form, the prefix pushed into the search
    out = sql(client, OPERATOR_FORM)
    assert out["columns"] == ["path", "content", "distance"]
    expected = search(client, query="pagination cursors", k=10, mode="vector", workspaces=["knowledge"],
                      granularity="node", path_prefix="/docs/api/", path_prefix_mode="raw")
    paths = {p for p in (r["path"] for r in expected)}
    assert paths == {"/docs/api/pagination", "/docs/api/keys", "/docs/api/errors"}
    contents = {r[1] for r in out["rows"]}
    assert "List endpoints page with cursors: pass the next cursor back." in contents
    assert [[r[0], r[2]] for r in out["rows"]] == pick(expected, "path", "vector_distance")
    assert out["rows"][0][0] == "/docs/api/pagination"

    # filtered by property: the WHERE applies to the search's rows
    out = sql(client, KNN_FILTERED)
    expected = search(client, query="single sign-on setup", k=10, mode="vector", workspaces=["knowledge"],
                      granularity="node")
    kept = [r for r in expected if r["node_type"] == "kb:Article"
            and client.get(f"/api/repos/acme/workspaces/knowledge/nodes{r['path']}").json()["properties"]
            .get("status") == "published"]
    assert out["rows"] == pick(kept, "path", "chunk_text", "vector_distance")
    assert "/docs/sso" in [r[0] for r in out["rows"]]
    assert "/docs/sso/okta" not in [r[0] for r in out["rows"]]  # a kb:Section
    assert "/docs/api/errors" not in [r[0] for r in out["rows"]]  # a draft

    # Step 4: the article a section belongs to, and its sections in order
    out = sql(client, ARTICLE)
    assert out["columns"] == ["path", "title", "content"]
    assert out["rows"] == [["/docs/architecture/overview", "Architecture Overview",
                            "Introduction to the system architecture..."]]
    out = sql(client, SECTIONS)
    children = client.get("/api/repos/acme/workspaces/knowledge/nodes",
                          params={"parent": "/docs/architecture/overview", "node_type": "kb:Section"}).json()
    assert out["columns"] == ["content"]
    assert out["rows"] == [[n["properties"]["content"]] for n in children["nodes"]]
    assert out["rows"] == [["The storage layer uses RocksDB with 40+ column families..."]]

    # Step 5: the function's query, with $1
    question = "How does the storage layer work?"
    out = sql(client, HYBRID_PARAM, [question])
    expected = search(client, query=question, k=8, workspaces=["knowledge"], granularity="chunk")
    assert expected and out["rows"] == pick(expected, "path", "chunk_text")

    # Step 6: store the answer
    out = sql(client, INSERT_ANSWER)
    answer = client.get("/api/repos/acme/workspaces/knowledge/nodes/answers/2026-03/answer-12345").json()
    assert out["rows"][0][1:3] == ["/answers/2026-03/answer-12345", answer["id"]]
    assert answer["properties"]["sources"] == ["/docs/architecture/overview/storage"]

    # Hybrid search: score and the legs' ranks
    out = sql(client, HYBRID)
    assert out["columns"] == ["path", "score", "fulltext_rank", "vector_rank", "chunk_text"]
    expected = search(client, query="ERR_CONN_RESET during publish", k=10, workspaces=["knowledge"],
                      granularity="chunk")
    assert out["rows"] == pick(expected, "path", "score", "fulltext_rank", "vector_rank", "chunk_text")
    assert out["rows"][0][0] == "/docs/api/errors" and out["rows"][0][2] == 1

    # Branch isolation
    out = sql(client, CREATE_BRANCH)
    branch = client.get("/api/repos/acme/branches/agent/rag-session-001").json()
    assert out["rows"] == [[branch.get(c) for c in out["columns"]]]
    assert branch["parent"] == "main"
    # searches on the branch see main's nodes
    on_branch = sql(client, KNN_CHUNKS, branch="agent/rag-session-001")
    assert on_branch["rows"] == sql(client, KNN_CHUNKS)["rows"]

    # Graph RAG: RELATE, then NEIGHBORS
    out = sql(client, RELATE)
    assert out["rows"][0][out["columns"].index("type")] == "works_at"
    out = sql(client, NEIGHBORS)
    assert out["columns"] == ["path", "relation_type", "weight"]
    assert out["rows"] == [["/entities/acme-marine", "works_at", None]]
    http = client.get("/api/repos/acme/neighbors", params={"node": "library:/entities/dana-weber",
                                                           "direction": "BOTH"}).json()
    assert out["rows"] == pick(http["neighbors"], "path", "relation_type", "weight")


def test_several_statements_answer_one_result_each_in_order(guide):
    r = guide.post("/api/sql/acme/main", json={"sql": INSERT_TWO + "\n" + SECTIONS + "\n" + ARTICLE})
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert [x["columns"] for x in results] == [["workspace_id", "path", "node_id", "node_type", "revision"],
                                               ["content"], ["path", "title", "content"]]
    assert results[1]["rows"] == [["The storage layer uses RocksDB with 40+ column families..."]]


def test_knn_without_granularity_answers_one_row_per_node_with_its_best_chunk(guide):
    guide.put("/api/repos/acme/workspaces/knowledge/nodes/docs/long", json={
        "node_type": "kb:Article",
        "properties": {"content": " ".join(f"Paragraph {i} about rotating keys and pagination." * 20
                                           for i in range(30))}})
    out = sql(guide, "SELECT path, chunk_index, vector_distance FROM KNN('rotating keys', 5, "
                     "workspaces => 'knowledge')")
    paths = [r[0] for r in out["rows"]]
    assert len(paths) == len(set(paths)) == 5
    expected = search(guide, query="rotating keys", k=5, mode="vector", workspaces=["knowledge"],
                      granularity="node")
    assert out["rows"] == pick(expected, "path", "chunk_index", "vector_distance")
