"""The RAG node over Weaviate (``weaviateUrl`` other than ``embedded``): the contract's schema and
lifecycle, interoperability with collections the original node wrote, branches.

Every test goes through the real ``weaviate-client``: against the Weaviate-compatible test server
(tests/weaviate_server.py) in every run, or against a real Weaviate instead when
``KG_TEST_WEAVIATE_URL`` is set.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from kg.ragnode.spec import class_name
from kg.ragnode.weaviate import chunks_class_schema, meta_class_schema, rag_class_names
from tests.api.test_nodes import assert_error

MODEL = "fake:hash-64"
DOC_A = "Standing rigging must be replaced every ten years in temperate waters and seven in the tropics."
DOC_B = "Invoices are issued monthly and paid by card. Late invoices incur a fee of two percent."


@pytest.fixture
def settings(settings, weaviate_url):
    """The test settings with the Weaviate under test listed (KG_RAG_WEAVIATE_URLS)."""
    return settings.model_copy(update={"rag_weaviate_urls": [weaviate_url]})


@dataclass
class Target:
    """Where the node's collections live, and a client to look at them directly."""

    url: str
    db: Any  # a connected weaviate client
    collection: str  # a collection name unique to the test


@pytest.fixture
def target(weaviate_url) -> Iterator[Target]:
    base = f"rag_{uuid.uuid4().hex[:10]}"
    from kg.index.weaviate import connect

    db = connect(weaviate_url, init_timeout_s=10.0)
    try:
        yield Target(weaviate_url, db, base)
    finally:
        prefix = class_name(base).lower()
        doomed = [n for n in db.collections.list_all(simple=True) if n.lower().startswith(prefix)]
        if doomed:
            db.collections.delete(doomed)
        db.close()


def rag(client, target: Target, text: str, branch: str | None = None, **config) -> Any:
    body = {"embeddingModel": MODEL, "collectionName": target.collection, "chunkSize": 8,
            "chunkOverlap": 2, "topK": 3, "weaviateUrl": target.url, "weaviateApiKey": "", **config}
    url = "/api/rag" + (f"?branch={branch}" if branch else "")
    return client.post(url, json={"config": body, "input": text})


def doc(query: str, files: list[tuple[str, str]]) -> str:
    blocks = "".join(f'\n\n### File name "{name}"\n{content}' for name, content in files)
    return f"Using the attached document, answer:\n\n{query}{blocks}"


def objects(target: Target, name: str) -> list[Any]:
    return target.db.collections.get(name).query.fetch_objects(limit=1000, include_vector=True).objects


def meta_of(target: Target, name: str) -> dict[str, Any]:
    (meta,) = objects(target, name)
    return meta.properties


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_lifecycle_table_row_by_row(client, services, target):
    embedder = services.embedder(MODEL)
    r = rag(client, target, doc("How often is rigging replaced?", [("rigging.txt", DOC_A), ("billing.md", DOC_B)]))
    assert r.status_code == 200, r.text
    body = r.json()
    assert sorted(body["ingestion"]["inserted"]) == ["billing.md", "rigging.txt"]
    assert body["context"].startswith("[1] (rigging.txt)\n")
    calls = embedder.calls
    # unchanged: skipped, one embedding call (the query)
    r = rag(client, target, doc("rigging", [("rigging.txt", DOC_A)]))
    assert r.json()["ingestion"] == {"inserted": [], "skipped": ["rigging.txt"], "replaced": []}
    assert embedder.calls == calls + 1
    # changed: replaced, the old chunks gone
    new_a = "Only quokka facts live here now, nothing else at all."
    r = rag(client, target, doc("quokka", [("rigging.txt", new_a)]))
    assert r.json()["ingestion"]["replaced"] == ["rigging.txt"]
    texts = [x["content"] for x in rag(client, target, "temperate tropics rigging", topK=10).json()["results"]]
    assert not any("temperate" in t for t in texts)
    # removed from input: kept; query only: nothing ingested
    kept = rag(client, target, "invoices monthly card fee").json()
    assert any(x["file"] == "billing.md" for x in kept["results"])
    assert kept["ingestion"] == {"inserted": [], "skipped": [], "replaced": []}
    # the meta object holds the hashes of both files
    chunks, meta = rag_class_names(target.collection)
    assert json.loads(meta_of(target, meta)["documentHash"]) == {"rigging.txt": sha(new_a), "billing.md": sha(DOC_B)}


def test_collections_are_written_in_the_spec_schema(client, target):
    assert rag(client, target, doc("q", [("a.txt", DOC_A)])).status_code == 200
    chunks, meta = rag_class_names(target.collection)
    assert (chunks, meta) == (class_name(target.collection), class_name(target.collection) + "Meta")
    names = {n.lower(): n for n in target.db.collections.list_all(simple=True)}
    assert names[chunks.lower()] == chunks and names[meta.lower()] == meta
    stored = objects(target, chunks)
    assert {tuple(sorted(o.properties)) for o in stored} == {("chunkIndex", "content", "sourceFile")}
    assert sorted(o.properties["chunkIndex"] for o in stored) == list(range(len(stored)))
    assert all(o.properties["sourceFile"] == "a.txt" and len(o.vector["default"]) == 64 for o in stored)
    assert meta_of(target, meta) == {"documentHash": json.dumps({"a.txt": sha(DOC_A)}),
                                     "embeddingModel": MODEL, "originalName": target.collection}


def test_a_collection_written_by_the_original_node_is_queried_without_reingestion(client, services, target):
    # The "minimum viable external collection": the chunks class with vectors, and one
    # meta object with an empty documentHash.
    chunks, meta = rag_class_names(target.collection)
    target.db.collections.create_from_dict(chunks_class_schema(chunks))
    target.db.collections.create_from_dict(meta_class_schema(meta))
    from weaviate.classes.data import DataObject

    texts = ["Rigging is replaced every ten years.", "Invoices are paid by card."]
    vectors = services.embedder(MODEL).embed(texts)
    target.db.collections.get(chunks).data.insert_many([
        DataObject(properties={"content": t, "sourceFile": "ext.md", "chunkIndex": i}, vector=v.tolist())
        for i, (t, v) in enumerate(zip(texts, vectors, strict=True))])
    target.db.collections.get(meta).data.insert(
        properties={"documentHash": "{}", "embeddingModel": MODEL, "originalName": target.collection})
    r = rag(client, target, "rigging replaced years", topK=1)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["ingestion"] == {"inserted": [], "skipped": [], "replaced": []}
    assert body["context"] == "[1] (ext.md)\nRigging is replaced every ten years."
    assert len(objects(target, chunks)) == 2


def test_query_only_uses_the_collections_locked_model(client, target):
    rag(client, target, doc("q", [("a.txt", DOC_A)]))
    r = rag(client, target, "rigging temperate", embeddingModel="fake:hash-32")
    assert r.status_code == 200, r.text
    assert r.json()["collection"]["embedding_model"] == MODEL
    assert r.json()["results"] and not r.json()["collection"]["model_changed"]


def test_model_change_drops_the_chunks_and_reingests(client, target):
    rag(client, target, doc("q", [("a.txt", DOC_A), ("b.txt", DOC_B)]))
    r = rag(client, target, doc("rigging", [("a.txt", DOC_A)]), embeddingModel="fake:hash-32")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["collection"]["model_changed"] is True
    assert body["ingestion"]["inserted"] == ["a.txt"]
    chunks, meta = rag_class_names(target.collection)
    stored = objects(target, chunks)
    assert {o.properties["sourceFile"] for o in stored} == {"a.txt"}
    assert {len(o.vector["default"]) for o in stored} == {32}
    assert meta_of(target, meta)["embeddingModel"] == "fake:hash-32"
    assert json.loads(meta_of(target, meta)["documentHash"]) == {"a.txt": sha(DOC_A)}


def test_replacing_a_file_deletes_exactly_its_chunks(client, target):
    # sourceFile is word-tokenized: an Equal filter on "a.txt" also matches "b a.txt".
    rag(client, target, doc("q", [("a.txt", DOC_A), ("b a.txt", DOC_B)]))
    rag(client, target, doc("q", [("a.txt", "Quokkas only.")]))
    chunks, _ = rag_class_names(target.collection)
    files = sorted({o.properties["sourceFile"] for o in objects(target, chunks)})
    assert files == ["a.txt", "b a.txt"]
    assert any(o.properties["content"].startswith("Invoices") for o in objects(target, chunks))


def test_a_retried_ingest_never_duplicates(client, target):
    rag(client, target, doc("q", [("a.txt", DOC_A)]))
    chunks, meta = rag_class_names(target.collection)
    n = len(objects(target, chunks))
    # A crash after the chunks but before the meta object: the file counts as new again.
    target.db.collections.get(meta).data.replace(
        uuid=objects(target, meta)[0].uuid,
        properties={"documentHash": "{}", "embeddingModel": MODEL, "originalName": target.collection})
    r = rag(client, target, doc("q", [("a.txt", DOC_A)]))
    assert r.json()["ingestion"]["inserted"] == ["a.txt"]
    assert len(objects(target, chunks)) == n


def test_colliding_names_and_foreign_classes_are_refused(client, target):
    assert rag(client, target, doc("q", [("a.txt", DOC_A)])).status_code == 200
    assert_error(rag(client, target, "q", collectionName=target.collection.replace("_", "-")), 409)
    assert_error(rag(client, target, "q", collectionName=target.collection.upper()), 409)
    other = f"x{uuid.uuid4().hex[:8]}"
    target.db.collections.create_from_dict({"class": class_name(other), "vectorizer": "none",
                                            "properties": [{"name": "title", "dataType": ["text"]}]})
    try:
        assert_error(rag(client, target, doc("q", [("a.txt", DOC_A)]), collectionName=other), 409)
    finally:
        target.db.collections.delete(class_name(other))
    for bad in ["", "123abc", "collé", "___"]:
        assert_error(rag(client, target, "q", collectionName=bad), 422)


def test_vectors_of_another_dimension_are_refused_before_any_write(client, services, target):
    chunks, meta = rag_class_names(target.collection)
    target.db.collections.create_from_dict(chunks_class_schema(chunks))
    target.db.collections.create_from_dict(meta_class_schema(meta))
    from weaviate.classes.data import DataObject

    vector = services.embedder("fake:hash-32").embed(["x"])[0]
    target.db.collections.get(chunks).data.insert_many(
        [DataObject(properties={"content": "x", "sourceFile": "x.md", "chunkIndex": 0}, vector=vector.tolist())])
    target.db.collections.get(meta).data.insert(
        properties={"documentHash": "{}", "embeddingModel": MODEL, "originalName": target.collection})
    assert_error(rag(client, target, doc("q", [("a.txt", DOC_A)])), 422)
    assert [o.properties["sourceFile"] for o in objects(target, chunks)] == ["x.md"]


def test_a_failing_model_writes_nothing(client, target):
    r = rag(client, target, doc("q", [("a.txt", DOC_A)]), embeddingModel="ollama:nomic-embed-text:latest")
    assert r.status_code in (502, 503)
    chunks, meta = rag_class_names(target.collection)
    assert not target.db.collections.exists(chunks) and not target.db.collections.exists(meta)


def test_a_branch_reads_its_ancestors_and_hides_what_it_replaced(client, target):
    # The first ingest on main makes the node's repository (POST /api/repos refuses its name).
    rag(client, target, doc("q", [("a.txt", DOC_A), ("b.txt", DOC_B)]))
    assert client.post("/api/repos/rag/branches", json={"name": "agent/1", "from": "main"}).status_code == 201
    # A new branch sees main at once; an unchanged file is skipped, nothing is copied.
    r = rag(client, target, doc("rigging temperate", [("a.txt", DOC_A)]), branch="agent/1")
    assert r.json()["ingestion"]["skipped"] == ["a.txt"]
    assert r.json()["results"][0]["file"] == "a.txt"
    branch_chunks, branch_meta = rag_class_names(target.collection, "agent/1")
    assert not target.db.collections.exists(branch_chunks)
    # A changed file is written to the branch's own classes and hides main's chunks of it.
    r = rag(client, target, doc("quokka", [("a.txt", "Quokkas live on Rottnest island.")]), branch="agent/1")
    assert r.json()["ingestion"]["replaced"] == ["a.txt"]
    assert r.json()["collection"]["class"] == branch_chunks
    on_branch = rag(client, target, "rigging temperate quokka invoices", branch="agent/1", topK=20).json()
    assert not any("temperate" in x["content"] for x in on_branch["results"])
    assert {x["file"] for x in on_branch["results"]} == {"a.txt", "b.txt"}
    on_main = rag(client, target, "rigging temperate quokka invoices", topK=20).json()
    assert any("temperate" in x["content"] for x in on_main["results"])
    assert not any("Quokkas" in x["content"] for x in on_main["results"])
    assert json.loads(meta_of(target, branch_meta)["documentHash"]) == {
        "a.txt": sha("Quokkas live on Rottnest island.")}
    assert_error(rag(client, target, "q", branch="no-such-branch"), 404)


def closed_ports(n: int, avoid: tuple[int, ...] = ()) -> list[int]:
    """``n`` distinct loopback ports nothing listens on (bound together, then released), none
    of them in ``avoid`` (a port in use by the test: a released port can be handed out again)."""
    import socket

    while True:
        sockets = [socket.socket() for _ in range(n)]
        try:
            for s in sockets:
                s.bind(("127.0.0.1", 0))
            ports = [s.getsockname()[1] for s in sockets]
        finally:
            for s in sockets:
                s.close()
        if not set(ports) & set(avoid):
            return ports


@contextmanager
def fake_upstream(kind: str) -> Iterator[str]:
    """A URL where no Weaviate answers: ``closed`` (connection refused), ``silent`` (accepts,
    never answers), ``json`` (HTTP 200 ``{"hello": "world"}`` to everything), ``html``."""
    import socket
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    if kind == "closed":
        # Drawn together, so they differ (two draws one after the other can give one port twice).
        http, grpc = closed_ports(2)
        yield f"http://127.0.0.1:{http}?grpc_port={grpc}"
        return
    if kind == "silent":
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen(16)
            port = listener.getsockname()[1]
            yield f"http://127.0.0.1:{port}?grpc_port={closed_ports(1, avoid=(port,))[0]}"
        return
    payload, ctype = (b'{"hello": "world"}', "application/json") if kind == "json" else \
        (b"<html><body>router login</body></html>", "text/html")

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = do_PUT = do_DELETE = _answer

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    port = server.server_address[1]
    try:
        yield f"http://127.0.0.1:{port}?grpc_port={closed_ports(1, avoid=(port,))[0]}"
    finally:
        server.shutdown()
        server.server_close()


def test_every_upstream_failure_is_one_502_that_tells_no_port_state(client, services, monkeypatch):
    """Refused, timed out, a JSON answer that is not Weaviate's, an HTML page: one status, one
    code, one message (the URL aside), so the RAG node cannot be used as a port scanner."""
    monkeypatch.setattr(services.settings, "weaviate_timeout_s", 0.5)
    answers = {}
    for kind in ("closed", "silent", "json", "html"):
        with fake_upstream(kind) as url:
            monkeypatch.setattr(services.settings, "rag_weaviate_urls", [url])
            body = {"embeddingModel": MODEL, "collectionName": "rag_collection", "chunkSize": 8,
                    "chunkOverlap": 2, "topK": 3, "weaviateUrl": url, "weaviateApiKey": "k"}
            r = client.post("/api/rag", json={"config": body, "input": doc("q", [("a.txt", DOC_A)])})
            assert_error(r, 502, "upstream_unavailable")
            error = r.json()["error"]
            answers[kind] = (error["message"].replace(url, "<url>"),
                             json.dumps(error["details"]).replace(json.dumps(url)[1:-1], "<url>"))
    assert "Weaviate" in answers["closed"][0]
    assert len(set(answers.values())) == 1, answers


def test_a_weaviate_url_the_operator_did_not_list_is_422_and_never_contacted(client, services):
    import socket

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        listener.setblocking(False)
        port = listener.getsockname()[1]
        url = f"http://127.0.0.1:{port}?grpc_port={closed_ports(1, avoid=(port,))[0]}"
        body = {"embeddingModel": MODEL, "collectionName": "rag_collection", "chunkSize": 8,
                "chunkOverlap": 2, "topK": 3, "weaviateUrl": url, "weaviateApiKey": "secret-key"}
        r = client.post("/api/rag", json={"config": body, "input": doc("q", [("a.txt", DOC_A)])})
        assert_error(r, 422, "invalid_input")
        assert "KG_RAG_WEAVIATE_URLS" in r.json()["error"]["message"]
        with pytest.raises(BlockingIOError):
            listener.accept()  # no connection was made, so no key was sent
    assert services.settings.rag_weaviate_urls != [url]


def test_replacing_a_file_named_only_with_stop_words(client, target):
    # sourceFile is word-tokenized with the "en" stop words: Weaviate drops them from a filter
    # value and refuses a value left without terms ("a", "it.is"), so such a file must be found
    # without that filter.
    assert rag(client, target, doc("q", [("a", DOC_A), ("it.is", DOC_B), ("b", DOC_B)])).status_code == 200
    r = rag(client, target, doc("q", [("a", "Quokkas only."), ("it.is", "Wombats only.")]))
    assert r.status_code == 200, r.text
    assert sorted(r.json()["ingestion"]["replaced"]) == ["a", "it.is"]
    chunks, _ = rag_class_names(target.collection)
    stored = objects(target, chunks)
    by_file = {f: sorted(o.properties["content"] for o in stored if o.properties["sourceFile"] == f)
               for f in ("a", "it.is", "b")}
    assert by_file["a"] == ["Quokkas only."] and by_file["it.is"] == ["Wombats only."]
    assert by_file["b"] and by_file["b"][0].startswith("Invoices")


def test_requests_to_one_weaviate_share_one_connection(client, services, target, monkeypatch):
    import kg.index.weaviate.client as kw  # where ClientPool looks connect up

    made = []
    real = kw.connect
    monkeypatch.setattr(kw, "connect", lambda *a, **k: made.append(1) or real(*a, **k))
    services.weaviate_clients.close()
    for question in ("rigging", "invoices", "fees"):
        r = rag(client, target, doc(question, [("rigging.txt", DOC_A), ("billing.md", DOC_B)]))
        assert r.status_code == 200, r.text
    assert len(made) == 1


def test_chunks_per_request_are_bounded_before_weaviate_is_written(client, services, target, monkeypatch):
    monkeypatch.setattr(services.settings, "max_chunks_per_request", 50)
    words = " ".join(f"w{i}" for i in range(100))
    r = rag(client, target, doc("q", [("a.txt", words)]), chunkSize=1, chunkOverlap=0)
    assert_error(r, 413, "too_large")
    assert r.json()["error"]["details"] == {"chunks": 100, "max_chunks_per_request": 50}
    names = {n.lower() for n in target.db.collections.list_all(simple=True)}
    assert class_name(target.collection).lower() not in names
