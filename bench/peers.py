#!/usr/bin/env python3
"""kg against the embedded engines a user would pick instead: one run, the same data, ratios.

The peers are not kg's dependencies and never become them: install them in a virtualenv of their
own, outside the repository, with kg installed there from the checkout to measure (nothing is
installed by this script; no network at run time, no model is downloaded):

    python3 -m venv /path/to/peers-venv   # outside the repository, never in kg's dependencies
    /path/to/peers-venv/bin/pip install -e . lancedb chromadb kuzu bm25s tantivy \
        faiss-cpu hnswlib networkx pyarrow pandas pylance

Run from the project's root (``--kg`` is the checkout imported, whatever the venv installed;
``--scifact`` a SciFact folder in the BEIR layout, written ``DATASETS/scifact`` as in the other
benchmarks, needed by the ``quality`` figure):

    /path/to/peers-venv/bin/python bench/peers.py --kg . --size 100000 --scifact DATASETS/scifact \
        --out bench/results/peers-100000.json

The engines' files go to ``--work`` (default ``bench/results/peers/``, emptied; git-ignored), the
SciFact passages' vectors to ``--cache`` (default ``$KG_BENCH_CACHE/peers``, as the other
dataset benchmarks keep theirs; ``~/.cache/kg-bench`` without it), kept for later runs: the
first run embeds SciFact's 14,996 passages with kg's local model (about 20 minutes on 2 cores).
With them cached, a run takes about 5 minutes at 10,000 records and 30 minutes at 100,000 on 2
cores (``--figures`` and ``--ingest-rounds`` make shorter runs).

Figures (``--figures`` picks some; all by default):

1. ``ingest``: N records (1 chunk each, a ~100-word text, a 384-d float32 unit vector):
   kg's bulk import (``kg import ndjson``'s use case: nodes, chunks, vectors, index placed)
   against LanceDB ``create_table`` (+ its ANN and FTS index builds, listed apart) and Chroma
   ``add`` (its HNSW is built while adding); raw faiss / hnswlib builds listed for reference.
2. ``knn``: 200 queries, k 10: p50 / p95 and recall@10 against an exact scan, for kg (its
   search use case in process, its index alone, and ``POST /search`` over HTTP to a running
   kg server), LanceDB (IVF_HNSW_SQ), Chroma (HNSW), raw faiss HNSW and raw hnswlib.
3. ``lexical``: BM25 k 10 over the same texts: kg fulltext, LanceDB native FTS, tantivy,
   bm25s, SQLite FTS5.
4. ``hybrid``: vector + BM25 fused, k 10: kg hybrid (its default relative-score fusion, and
   RRF) against LanceDB hybrid (its default RRF reranker).
5. ``quality``: SciFact (BEIR layout), nDCG@10 on the same passages and the same
   all-MiniLM-L6-v2 vectors (kg's packaged embedder, run once and cached as .npy under
   ``--cache``): kg fulltext / vector / hybrid at node granularity against LanceDB fts /
   vector / hybrid, bm25s, tantivy and SQLite FTS5.
6. ``graph``: 10 N edges over the N nodes (power-law in-degrees, one hub of N / 2 edges):
   NEIGHBORS of the hub (top 10 by weight; 10,000, kg's cap; all of them, kg's library only),
   of an ordinary node (limit 100: all its edges), a 2-hop traverse (out-edges, every node
   reached) from an ordinary node: kg (its graph use case, and its held view in the library),
   kuzu (Cypher), networkx, SQLite (indexes; a recursive CTE for 2 hops). Every answer is
   checked against networkx's (the weights in kg's stable order; the sets reached).
7. ``branch``: create a branch of the N-node collection, write 100 records on it, search it:
   kg's branch against LanceDB (a version tag, a shallow clone, a full copy) and Chroma (a
   collection copied; ``fork`` where the local build has it).

Measurements are interleaved: each query (or each round of a build) runs every engine in turn,
in an order rotated per round, so drift of a shared machine hits them alike. Every engine gets
the same records, texts and vectors, and its answers are checked against the others' (recall,
the same graph sets). Medians print as a table with peer / kg per figure (> 1: kg is faster
for a time; for a rate or a quality figure the ratio is the peer's over kg's as it stands).
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy: the exact scans run on one thread
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")  # Chroma: no telemetry (no network anyway)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("LANCEDB_LOG", "error")  # LanceDB's deprecation note on every hybrid query's projection

import argparse  # noqa: E402
import base64  # noqa: E402
import gc  # noqa: E402
import hashlib  # noqa: E402
import http.client  # noqa: E402
import importlib.metadata  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import random  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import socket  # noqa: E402
import sqlite3  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import TYPE_CHECKING, Any  # noqa: E402

import numpy as np  # noqa: E402

if TYPE_CHECKING:
    from kg.types.bulk import NdjsonImport

HERE = Path(__file__).resolve().parent
DIM = 384
MODEL = "fake:hash-384"  # the synthetic collection's model name: its vectors come with the data
LOCAL_MODEL = "local:all-MiniLM-L6-v2"
REPO, WORKSPACE = "peers", "kb"
TYPES = ("related_to", "mentions", "cites")
WORD = re.compile(r"\w+")
warnings.filterwarnings("ignore", message="create_fts_index is deprecated")  # LanceDB 0.40: native FTS still
warnings.filterwarnings("ignore", message=r"The create_index\(\) API with metric")  # the same, for vector indexes
PACKAGES = ("kg", "lancedb", "pylance", "chromadb", "kuzu", "bm25s", "tantivy", "faiss-cpu", "hnswlib", "networkx",
            "numpy", "pyarrow", "PyStemmer", "SQLAlchemy", "fastapi", "uvicorn", "onnxruntime", "pydantic")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')} load {os.getloadavg()[0]:.1f}] {msg}", file=sys.stderr, flush=True)


def use_kg(path: Path) -> None:
    """Import kg (and its bench helpers) from the checkout ``path``."""
    sys.path.insert(0, str(path.resolve()))


# -- measuring --------------------------------------------------------------------------------


def pct(samples: Sequence[float], q: float) -> float:
    from bench._common import percentile  # kg's own helper

    return percentile(samples, q)


def summary(samples_s: Sequence[float]) -> dict[str, float]:
    ms = [s * 1000 for s in samples_s]
    return {"n": len(ms), "p50_ms": round(pct(ms, 50), 3), "p95_ms": round(pct(ms, 95), 3),
            "mean_ms": round(statistics.fmean(ms), 3) if ms else float("nan")}


def interleaved(calls: dict[str, Callable[[int], Any]], n: int, warmup: int = 5,
                check: Callable[[str, int, Any], None] | None = None) -> dict[str, list[float]]:
    """Run ``calls[name](i)`` for i in 0..n-1, every engine once per i, in an order rotated with
    i (A B C, B C A, ...): drift hits every engine alike. Returns each engine's seconds."""
    names = list(calls)
    for name in names:
        for i in range(min(warmup, n)):
            calls[name](i)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for i in range(n):
        shift = i % len(names)
        for name in names[shift:] + names[:shift]:
            start = time.perf_counter()
            got = calls[name](i)
            samples[name].append(time.perf_counter() - start)
            if check is not None:
                check(name, i, got)
    return samples


def timed_once(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    got = fn()
    return time.perf_counter() - start, got


# -- embedders: precomputed vectors, looked up by the query text --------------------------------


class LookupEmbedder:
    """An embedder that answers the vectors given for known texts, and asks ``inner`` otherwise.

    It has ``inner``'s name, dimension and token counting, so kg plans (chunks, content keys)
    exactly as with ``inner``: queries whose vectors were computed once (the synthetic queries,
    SciFact's queries) cost no model run, in kg as in the peers, which are handed the vectors."""

    def __init__(self, inner: Any, vectors: dict[str, np.ndarray]) -> None:
        self.inner = inner
        self.vectors = vectors
        self.name, self.dim, self.max_tokens = inner.name, inner.dim, inner.max_tokens

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        known = [self.vectors.get(t) for t in texts]
        if all(v is not None for v in known):
            return np.stack(known).astype(np.float32)
        return self.inner.embed(texts)

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)

    def __getattr__(self, name: str) -> Any:  # token_counter and the like
        return getattr(self.inner, name)


# -- SciFact: kg's passages and their all-MiniLM-L6-v2 vectors, computed once --------------------


def load_beir(folder: Path) -> tuple[dict[str, dict], dict[str, str], dict[str, dict[str, int]]]:
    from bench.beir import load_dataset  # kg's own reader (binary qrels, queries with judgements)

    return load_dataset(folder)


def scifact_config() -> Any:
    from kg.indexing.config import workspace_embedding

    return workspace_embedding({"embedding": {"model": LOCAL_MODEL}}, default_model=LOCAL_MODEL)


def scifact_vectors(folder: Path, cache: Path) -> dict[str, Any]:
    """kg's passages of every SciFact document (properties ``title`` and ``text``, planned as a
    workspace with kg's defaults plans them) and the vectors of kg's packaged embedder for them
    and for the queries; computed once and cached under ``cache`` (``scifact-*.npy``/``.json``)."""
    from kg.indexing.chunks import embed_pieces, plan_pieces, plan_text
    from kg.providers.local import LocalEmbedder

    corpus, queries, qrels = load_beir(folder)
    tag = hashlib.sha256((folder / "corpus.jsonl").read_bytes() + (folder / "queries.jsonl").read_bytes()
                         ).hexdigest()[:12]
    pieces_file, vec_file = cache / f"scifact-{tag}-pieces.json", cache / f"scifact-{tag}-passages.npy"
    qvec_file = cache / f"scifact-{tag}-queries.npy"
    embedder = LocalEmbedder()
    config = scifact_config()
    if pieces_file.exists() and vec_file.exists() and qvec_file.exists():
        stored = json.loads(pieces_file.read_text())
        qvec = np.load(qvec_file)
        return {"corpus": corpus, "queries": queries, "qrels": qrels, "pieces": stored["pieces"],
                "vectors": np.load(vec_file), "query_vectors": dict(zip(stored["qids"], qvec, strict=True)),
                "embedder": embedder}
    cache.mkdir(parents=True, exist_ok=True)
    plans = {did: plan_text({"title": d["title"], "text": d["text"]}, config, embedder) for did, d in corpus.items()}
    todo, owner = [], []
    for did, plan in plans.items():
        for piece in plan_pieces(plan, embedder):
            todo.append(piece)
            owner.append(did)
    log(f"scifact: embedding {len(todo):,} passages of {len(corpus):,} documents and {len(queries)} queries "
        f"with {LOCAL_MODEL} (once; cached in {cache})")
    started, done = time.perf_counter(), [0]

    def progress(k: int) -> None:
        done[0] += k
        if done[0] % 512 < k:
            rate = done[0] / (time.perf_counter() - started)
            left = (len(todo) - done[0]) / rate / 60
            log(f"  {done[0]:,}/{len(todo):,} passages ({rate:.1f}/s, {left:.0f} min left)")

    rows = embed_pieces(todo, embedder, batch_size=32, progress=progress)
    qids = list(queries)
    qvec = embedder.embed([queries[q] for q in qids])
    pieces = [{"doc": did, "content_key": r.content_key, "chunk_index": r.chunk_index, "field": r.field,
               "text": r.text, "start": r.start, "end": r.end} for did, r in zip(owner, rows, strict=True)]
    np.save(vec_file, np.stack([r.vector for r in rows]).astype(np.float32))
    np.save(qvec_file, np.asarray(qvec, dtype=np.float32))
    pieces_file.write_text(json.dumps({"pieces": pieces, "qids": qids}))
    log(f"scifact: embedded in {time.perf_counter() - started:.0f} s")
    return scifact_vectors(folder, cache)


# -- the synthetic collection (figures 1-4, 6, 7) ------------------------------------------------


SECTION = 1_000
WORDS_PER_TEXT = 100
CENTROIDS = 1_024


def leaf_path(i: int) -> str:
    return f"/s{i // SECTION}/n{i}"


def leaf_index(path: str) -> int:
    return int(path.rsplit("/n", 1)[1])


def b64(vector: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(vector, dtype="<f4").tobytes()).decode("ascii")


def ndjson_header(repo: str, branch: str, workspace: str, model: str, with_chunks: bool) -> str:
    return json.dumps({"record": "header", "format": "kg-ndjson", "version": 1, "repo": repo, "branch": branch,
                       "revision": 0, "with_chunks": with_chunks,
                       "workspaces": [{"name": workspace, "embedding": {"model": model}}]}) + "\n"


def node_lines(paths: Sequence[str], texts: Sequence[str], vectors: np.ndarray, keys: Sequence[str],
               pieces: Sequence[Any]) -> list[str]:
    lines = []
    for path, text, vector, key, piece in zip(paths, texts, vectors, keys, pieces, strict=True):
        lines.append(json.dumps({"record": "node", "workspace": WORKSPACE, "path": path, "node_type": "kb:Note",
                                 "properties": {"content": text}}, separators=(",", ":")) + "\n")
        lines.append(json.dumps({"record": "chunk", "content_key": key, "chunk_index": 0, "field": piece.field,
                                 "text": piece.text, "char_start": piece.start, "char_end": piece.end,
                                 "model": MODEL, "dim": DIM, "vector": b64(vector)}, separators=(",", ":")) + "\n")
    return lines


def plan_one(text: str, config: Any, embedder: Any) -> tuple[str, Any]:
    """kg's content key and single passage of a node whose only indexed property is ``content``."""
    from kg.indexing.chunks import plan_pieces, plan_text

    plan = plan_text({"content": text}, config, embedder)
    pieces = plan_pieces(plan, embedder)
    assert len(pieces) == 1, f"a text planned as {len(pieces)} chunks, expected 1"
    return plan.content_key, pieces[0]


def generate(n: int, seed: int, work: Path, queries: int) -> dict[str, Any]:
    """N texts (Zipfian pseudo-words, kg's bench vocabulary) with clustered unit vectors, kg's
    NDJSON of them (nodes + chunks with their vectors), the queries (a stored vector plus noise,
    as bench/scale.py's recall; 4-word texts as its ``query``) and their exact top 10."""
    from bench.scale import query as query_text
    from bench.scale import vocabulary
    from kg.indexing.config import workspace_embedding
    from kg.providers.registry import make_embedder

    rng = np.random.default_rng(seed)
    words = vocabulary(50_000)
    zipf = 1.0 / np.arange(1, len(words) + 1) ** 1.07
    zipf /= zipf.sum()
    centroids = rng.standard_normal((CENTROIDS, DIM)).astype(np.float32)
    vectors = centroids[rng.integers(CENTROIDS, size=n)] + 0.6 * rng.standard_normal((n, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    texts: list[str] = []
    for start in range(0, n, 10_000):
        drawn = rng.choice(len(words), size=(min(10_000, n - start), WORDS_PER_TEXT), p=zipf)
        texts.extend(" ".join(words[w] for w in row) for row in drawn)
    embedder = make_embedder(MODEL, allow_fake=True)
    config = workspace_embedding({"embedding": {"model": MODEL}}, default_model=MODEL)
    planned = [plan_one(t, config, embedder) for t in texts]
    keys = [k for k, _ in planned]
    paths = [leaf_path(i) for i in range(n)]
    nodes_file = work / f"nodes-{n}-{seed}.ndjson"
    with nodes_file.open("w", encoding="utf-8") as fh:
        fh.write(ndjson_header(REPO, "main", WORKSPACE, MODEL, True))
        for k in range((n + SECTION - 1) // SECTION):
            fh.write(json.dumps({"record": "node", "workspace": WORKSPACE, "path": f"/s{k}",
                                 "node_type": "kg:Folder", "properties": {"section": k}}) + "\n")
        for start in range(0, n, 5_000):
            sl = slice(start, start + 5_000)
            fh.writelines(node_lines(paths[sl], texts[sl], vectors[sl], keys[sl], [p for _, p in planned[sl]]))
    pyrng = random.Random(seed)
    picks = [pyrng.randrange(n) for _ in range(queries)]
    noise = rng.standard_normal((queries, DIM)).astype(np.float32)
    qv = vectors[picks] + 0.5 * noise / np.sqrt(DIM)
    qv /= np.linalg.norm(qv, axis=1, keepdims=True)
    qtexts = [query_text(words, pyrng) for _ in range(queries)]
    exact = np.argsort(-(qv @ vectors.T), axis=1)[:, :10]
    lookup = {f"q{i}": qv[i] for i in range(queries)}
    for i, t in enumerate(qtexts):
        lookup.setdefault(t, qv[i])
    hybrid_vectors = np.stack([lookup[t] for t in qtexts])
    return {"n": n, "texts": texts, "vectors": vectors, "keys": keys, "paths": paths, "pieces": [p for _, p in planned],
            "nodes_file": nodes_file, "query_vectors": qv, "query_texts": qtexts, "hybrid_vectors": hybrid_vectors,
            "exact": exact, "lookup": lookup, "words": words, "sections": (n + SECTION - 1) // SECTION}


# -- kg ------------------------------------------------------------------------------------------


def kg_services(folder: Path, lookup: dict[str, np.ndarray], extra: dict[str, Any] | None = None) -> Any:
    """kg's services as ``kg serve`` builds them (``Services.from_settings``): SQLite in
    ``folder``, the embedded index in ``folder/data``; the synthetic model's queries answered
    from ``lookup`` (their vectors come with the data, as the peers are handed them)."""
    from kg.providers.registry import make_embedder
    from kg.services import Services
    from kg.settings import Settings

    folder.mkdir(parents=True, exist_ok=True)
    settings = Settings(database_url=f"sqlite:///{folder / 'kg.sqlite3'}", data_dir=folder / "data",
                        embedding_model=MODEL, allow_fake_embedder=True, index_inline=False, **(extra or {}))
    services = Services.from_settings(settings)
    services.db.upgrade()
    services._embedders[MODEL] = LookupEmbedder(make_embedder(MODEL, allow_fake=True), lookup)
    return services


def kg_repo_key(services: Any, repo: str) -> str:
    from kg.store.repos import get_repository

    with services.db.read() as session:
        return get_repository(session, repo).uid


def kg_import(services: Any, lines_or_file: Any, branch: str = "main", repo: str = REPO) -> NdjsonImport:
    from kg.context import OPERATOR
    from kg.ops import bulk

    if isinstance(lines_or_file, Path):
        with lines_or_file.open("rb") as fh:
            return bulk.import_ndjson(services, OPERATOR, repo, fh, branch=branch)
    return bulk.import_ndjson(services, OPERATOR, repo, lines_or_file, branch=branch)


def kg_parquet_file(data: dict[str, Any]) -> Path | None:
    """The N records as a kg-parquet file (``kg import parquet``), written once beside the NDJSON
    one by kg's own writer (not timed); None when the kg measured has no columnar import."""
    try:
        from kg.ops import bulk_parquet
    except ImportError:
        return None
    path = Path(data["nodes_file"]).with_suffix(".parquet")
    if not path.exists():
        sink = bulk_parquet.ParquetSink(path)
        with Path(data["nodes_file"]).open(encoding="utf-8") as fh:
            for line in fh:
                sink.write(line)
        sink.close()
    return path


def kg_ingest(data: dict[str, Any], folder: Path, file_format: str = "ndjson") -> tuple[Any, dict[str, Any]]:
    """kg's bulk import of the N records into a fresh database and index (``file_format``:
    ``ndjson`` or ``parquet``); then its background HNSW build (from ``KG_INDEX_ANN_MIN_ROWS``
    rows) waited for, timed apart."""
    gc.collect()
    services = kg_services(folder, data["lookup"])
    if file_format == "parquet":
        from kg.context import OPERATOR
        from kg.ops import bulk_parquet

        source = kg_parquet_file(data)
        seconds, report = timed_once(lambda: bulk_parquet.import_parquet(services, OPERATOR, REPO, source))
    else:
        seconds, report = timed_once(lambda: kg_import(services, data["nodes_file"]))
    key = kg_repo_key(services, REPO)
    wait_s, _ = timed_once(lambda: services.index.wait_for_background(key))
    return services, {"import_s": seconds, "records_per_s": data["n"] / seconds, "hnsw_background_s": wait_s,
                      "to_ann_searchable_s": seconds + wait_s, "chunks": report.chunks,
                      "revision": report.revision}


KG_SERVER = """
import sys, json
sys.path.insert(0, {kg!r})
sys.path.insert(0, {here!r})
import numpy as np, uvicorn
import peers as pb
from api.app import create_app
from kg.cli import MAX_HEADER_BYTES
from kg.serve_protocol import HeadDeadlineH11Protocol
texts = json.load(open({texts!r}))
vectors = np.load({vectors!r})
services = pb.kg_services(pb.Path({folder!r}), dict(zip(texts, vectors)))
app = create_app(services=services)
uvicorn.run(app, host="127.0.0.1", port={port}, workers=1, log_level="info", http=HeadDeadlineH11Protocol,
            timeout_keep_alive=services.settings.keepalive_timeout_s, h11_max_incomplete_event_size=MAX_HEADER_BYTES)
"""


class KgServer:
    """A kg server over the same database and index snapshot, run as ``kg serve`` runs it (the
    app of ``api.app.create_app``, uvicorn, kg's h11 protocol and limits, access log on), in a
    process of its own; only the query embedder is the lookup one. Requests over one
    keep-alive connection to 127.0.0.1."""

    def __init__(self, kg: Path, folder: Path, lookup: dict[str, np.ndarray], work: Path) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        texts = list(lookup)
        (work / "server-texts.json").write_text(json.dumps(texts))
        np.save(work / "server-vectors.npy", np.stack([lookup[t] for t in texts]))
        code = KG_SERVER.format(kg=str(kg.resolve()), here=str(HERE), texts=str(work / "server-texts.json"),
                                vectors=str(work / "server-vectors.npy"), folder=str(folder), port=self.port)
        self.log = (work / "server.log").open("w")
        self.proc = subprocess.Popen([sys.executable, "-c", code], stdout=self.log, stderr=subprocess.STDOUT)
        self.conn: http.client.HTTPConnection | None = None
        deadline = time.time() + 300
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the kg server exited ({self.proc.returncode}); see {work / 'server.log'}")
            try:
                self.request("GET", "/api/repos")
                return
            except OSError:
                self.conn = None
                time.sleep(0.5)
        raise RuntimeError("the kg server did not answer in 300 s")

    def request(self, method: str, path: str, body: dict | None = None) -> Any:
        payload = json.dumps(body).encode() if body is not None else None
        for attempt in (0, 1):
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
            try:
                self.conn.request(method, path, body=payload, headers={"content-type": "application/json"})
                resp = self.conn.getresponse()
                data = resp.read()
                if resp.status >= 400:
                    raise RuntimeError(f"{method} {path}: {resp.status} {data[:300]!r}")
                return json.loads(data)
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self.conn.close()
                self.conn = None  # the server closed an idle keep-alive connection: reconnect
                if attempt:
                    raise
        return None

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
        self.proc.terminate()  # the pid this benchmark started, and only it
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def kg_paths_ids(results: Sequence[Any]) -> list[int]:
    return [leaf_index(r.path) for r in results]


# -- peers: builds ----------------------------------------------------------------------------


def arrow_table(ids: Sequence[int], texts: Sequence[str], vectors: np.ndarray) -> Any:
    import pyarrow as pa

    return pa.table({"id": pa.array(np.asarray(ids, dtype=np.int64)), "text": pa.array(list(texts)),
                     "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.astype(np.float32).ravel()), DIM)})


LANCE_INDEX = {"index_type": "IVF_HNSW_SQ", "m": 32, "ef_construction": 128}  # kg's M and ef_construction
LANCE_MIN_INDEX_ROWS = 5_000  # below: LanceDB searches flat (exact), as kg does below 20,000 rows


def lance_ingest(data: dict[str, Any], folder: Path) -> tuple[Any, dict[str, Any]]:
    import lancedb

    shutil.rmtree(folder, ignore_errors=True)
    db = lancedb.connect(str(folder))
    table = arrow_table(range(data["n"]), data["texts"], data["vectors"])  # the input, as kg's file is
    add_s, tbl = timed_once(lambda: db.create_table("docs", data=table))
    index_s = 0.0
    if data["n"] >= LANCE_MIN_INDEX_ROWS:
        index_s, _ = timed_once(lambda: tbl.create_index(metric="cosine", **LANCE_INDEX))
    fts_s, _ = timed_once(lambda: tbl.create_fts_index("text"))  # native FTS (use_tantivy=False)
    return (db, tbl), {"add_s": add_s, "records_per_s": data["n"] / add_s, "vector_index_s": index_s,
                       "fts_index_s": fts_s, "to_searchable_s": add_s + index_s + fts_s}


CHROMA_HNSW = {"space": "cosine", "max_neighbors": 32, "ef_construction": 128, "ef_search": 128}  # kg's


def chroma_client(folder: Path) -> Any:
    import chromadb
    from chromadb.config import Settings as ChromaSettings

    return chromadb.PersistentClient(path=str(folder), settings=ChromaSettings(anonymized_telemetry=False,
                                                                                allow_reset=True))


def chroma_add(col: Any, batch: int, ids: Sequence[int], texts: Sequence[str], vectors: np.ndarray) -> None:
    for s in range(0, len(ids), batch):
        col.add(ids=[str(i) for i in ids[s:s + batch]], embeddings=vectors[s:s + batch],
                documents=list(texts[s:s + batch]))


def chroma_ingest(data: dict[str, Any], folder: Path) -> tuple[Any, dict[str, Any]]:
    shutil.rmtree(folder, ignore_errors=True)
    client = chroma_client(folder)
    col = client.create_collection("docs", embedding_function=None, configuration={"hnsw": CHROMA_HNSW})
    batch = client.get_max_batch_size()
    add_s, _ = timed_once(lambda: chroma_add(col, batch, range(data["n"]), data["texts"], data["vectors"]))
    return (client, col), {"add_s": add_s, "records_per_s": data["n"] / add_s}


def faiss_build(vectors: np.ndarray) -> tuple[Any, float]:
    """faiss's HNSW graph, built as kg's builder builds its own (kg/index/ann.py: the usable
    cores, OpenMP waiting passively), searched on one thread as kg searches."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as kg imports faiss (kg.index.ann._faiss)
    import faiss

    faiss.omp_set_num_threads(len(os.sched_getaffinity(0)))
    index = faiss.IndexHNSWFlat(DIM, 32, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = 128
    seconds, _ = timed_once(lambda: index.add(vectors))
    faiss.omp_set_num_threads(1)
    index.hnsw.efSearch = 128
    return index, seconds


def hnswlib_build(vectors: np.ndarray) -> tuple[Any, float]:
    import hnswlib

    index = hnswlib.Index(space="ip", dim=DIM)
    index.init_index(max_elements=len(vectors), M=32, ef_construction=128)
    seconds, _ = timed_once(lambda: index.add_items(vectors, np.arange(len(vectors)),
                                                    num_threads=len(os.sched_getaffinity(0))))
    index.set_ef(128)
    index.set_num_threads(1)
    return index, seconds


def tantivy_build(texts: Sequence[str], folder: Path) -> tuple[Any, float]:
    import tantivy

    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)

    def build() -> Any:
        sb = tantivy.SchemaBuilder()
        sb.add_integer_field("id", stored=True, indexed=True, fast=True)
        sb.add_text_field("text", stored=False, tokenizer_name="en_stem")
        index = tantivy.Index(sb.build(), path=str(folder))
        writer = index.writer(heap_size=256_000_000, num_threads=1)
        for i, t in enumerate(texts):
            writer.add_document(tantivy.Document(id=i, text=t))
        writer.commit()
        writer.wait_merging_threads()
        index.reload()
        return index

    seconds, index = timed_once(build)
    return (index, index.searcher()), seconds


def bm25s_build(texts: Sequence[str]) -> tuple[Any, float]:
    import bm25s
    import Stemmer

    stemmer = Stemmer.Stemmer("english")

    def build() -> Any:
        retriever = bm25s.BM25()
        retriever.index(bm25s.tokenize(list(texts), stopwords="en", stemmer=stemmer, show_progress=False),
                        show_progress=False)
        return retriever

    seconds, retriever = timed_once(build)
    return (retriever, stemmer), seconds


def sqlite_fts_build(texts: Sequence[str], path: Path) -> tuple[Any, float]:
    path.unlink(missing_ok=True)
    conn = sqlite3.connect(str(path), check_same_thread=False)

    def build() -> None:
        conn.execute("CREATE VIRTUAL TABLE docs USING fts5(text, tokenize='porter unicode61')")
        conn.executemany("INSERT INTO docs(rowid, text) VALUES (?, ?)", enumerate(texts))
        conn.commit()

    seconds, _ = timed_once(build)
    return conn, seconds


# -- peers: queries -----------------------------------------------------------------------------


def lance_knn(tbl: Any, vector: np.ndarray, k: int, nprobes: int | None = None) -> list[int]:
    q = tbl.search(vector).distance_type("cosine").limit(k)
    if nprobes:
        q = q.nprobes(nprobes).ef(128)
    return q.select(["id", "text", "_distance"]).to_arrow().column("id").to_pylist()


def lance_fts(tbl: Any, text: str, k: int) -> list[int]:
    return tbl.search(text, query_type="fts").limit(k).select(["id", "text", "_score"]).to_arrow() \
        .column("id").to_pylist()


def lance_hybrid(tbl: Any, text: str, vector: np.ndarray, k: int) -> list[int]:
    return tbl.search(query_type="hybrid").vector(vector).text(text).distance_type("cosine").limit(k) \
        .select(["id", "text"]).to_arrow().column("id").to_pylist()


def chroma_knn(col: Any, vector: np.ndarray, k: int) -> list[int]:
    got = col.query(query_embeddings=vector[None, :], n_results=k, include=["distances", "documents"])
    return [int(i) for i in got["ids"][0]]


def tantivy_search(engine: Any, text: str, k: int) -> list[int]:
    index, searcher = engine
    words = " ".join(w.lower() for w in WORD.findall(text))
    if not words:
        return []
    hits = searcher.search(index.parse_query(words, ["text"]), k).hits
    return [searcher.doc(address)["id"][0] for _, address in hits]


def bm25s_search(engine: Any, text: str, k: int) -> list[int]:
    import bm25s

    retriever, stemmer = engine
    tokens = bm25s.tokenize([text], stopwords="en", stemmer=stemmer, show_progress=False, return_ids=False)
    if not tokens[0]:
        return []
    docs, scores = retriever.retrieve(tokens, k=min(k, retriever.scores["num_docs"]), show_progress=False,
                                      n_threads=1)
    return [int(d) for d, s in zip(docs[0], scores[0], strict=True) if s > 0]


def fts5_query(text: str) -> str:
    return " OR ".join(f'"{w}"' for w in WORD.findall(text.lower()))


def sqlite_fts_search(conn: Any, text: str, k: int) -> list[int]:
    match = fts5_query(text)
    if not match:
        return []
    return [r[0] for r in conn.execute("SELECT rowid FROM docs WHERE docs MATCH ? ORDER BY rank LIMIT ?",
                                       (match, k))]



# -- profiling kg where it is behind -------------------------------------------------------------


def profile_kg(fn: Callable[[int], Any], n: int, kg_root: Path, top: int = 14) -> dict[str, Any]:
    """cProfile of ``n`` calls: the functions with the most time of their own (any code) and the
    kg functions with the most cumulative time (which part of kg dominates)."""
    import cProfile
    import pstats

    prof = cProfile.Profile()
    start = time.perf_counter()
    prof.enable()
    for i in range(n):
        fn(i)
    prof.disable()
    wall = time.perf_counter() - start
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    root = str(kg_root.resolve())

    def name(file: str, line: int, func: str) -> str:
        short = file.replace(root + "/", "") if file.startswith(root) else Path(file).name
        for marker in ("site-packages/", "lib/python3"):
            if marker in file:
                short = file.split(marker, 1)[1]
        return f"{short}:{line}({func})"

    rows = [(ct, tt, nc, name(f, ln, fn_), f.startswith(root)) for (f, ln, fn_), (cc, nc, tt, ct, _) in stats.items()]
    per_call = 1000 / n
    own = sorted(rows, key=lambda r: -r[1])[:top]
    kg_cum = sorted([r for r in rows if r[4]], key=lambda r: -r[0])[:top]
    return {"calls": n, "wall_ms_per_call": round(wall * per_call, 3),
            "self_time": [{"fn": r[3], "ms_per_call": round(r[1] * per_call, 3), "ncalls": r[2]} for r in own],
            "kg_cumulative": [{"fn": r[3], "ms_per_call": round(r[0] * per_call, 3), "ncalls": r[2]} for r in kg_cum]}


def print_profile(title: str, prof: dict[str, Any]) -> None:
    log(f"profile {title}: {prof['wall_ms_per_call']} ms a call under cProfile")
    for r in prof["kg_cumulative"][:8]:
        print(f"    cum {r['ms_per_call']:8.3f} ms  {r['fn']}", file=sys.stderr)
    for r in prof["self_time"][:6]:
        print(f"    own {r['ms_per_call']:8.3f} ms  {r['fn']}", file=sys.stderr)


# -- the table ------------------------------------------------------------------------------------


class Table:
    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def add(self, figure: str, metric: str, kg_label: str, kg_value: float | None, peer: str,
            value: float | None, lower_is_better: bool, note: str = "") -> None:
        ratio = value / kg_value if value is not None and kg_value not in (None, 0) else None
        ahead: bool | None = None
        if ratio is not None and not peer.startswith("kg "):
            ahead = ratio > 1 if lower_is_better else ratio < 1
        self.rows.append({"figure": figure, "metric": metric, "kg": kg_label, "kg_value": kg_value, "peer": peer,
                          "peer_value": value, "peer_over_kg": None if ratio is None else round(ratio, 3),
                          "kg_ahead": ahead, "lower_is_better": lower_is_better, "note": note})

    def render(self) -> str:
        from bench._common import table as kg_table  # kg's own table helper

        def fmt(x: Any) -> str:
            if x is None:
                return "-"
            if isinstance(x, float):
                return f"{x:,.0f}" if abs(x) >= 1000 else (f"{x:.3g}" if abs(x) < 10 else f"{x:,.1f}")
            return str(x)

        body = [[r["figure"], r["metric"], r["kg"], fmt(r["kg_value"]), r["peer"], fmt(r["peer_value"]),
                 fmt(r["peer_over_kg"]), "(kg layer)" if r["peer"].startswith("kg ") else
                 "=" if r["peer_over_kg"] is not None and abs(r["peer_over_kg"] - 1) < 0.005 else
                 {True: "kg", False: "peer", None: ""}[r["kg_ahead"]]] for r in self.rows]
        return kg_table(body, ["figure", "metric", "kg (variant)", "kg", "peer", "peer value", "peer/kg", "ahead"])


def med(values: Sequence[float]) -> float:
    return statistics.median(values)


def recall_at_10(found: Sequence[Sequence[int]], exact: np.ndarray) -> float:
    return round(statistics.fmean(len(set(f) & set(exact[i].tolist())) / 10 for i, f in enumerate(found)), 4)


def first_unique(ids: Sequence[Any], k: int) -> list[Any]:
    out: list[Any] = []
    for i in ids:
        if i not in out:
            out.append(i)
            if len(out) == k:
                break
    return out


# -- figure 1: ingest ------------------------------------------------------------------------------


def fig_ingest(data: dict[str, Any], args: argparse.Namespace, work: Path, res: dict[str, Any],
               table: Table, needs: set[str]) -> dict[str, Any]:
    n = data["n"]
    rounds = args.ingest_rounds or (2 if n >= 50_000 else 3)
    trio = [e for e in ("kg", "lancedb", "chroma") if e in needs]
    if "kg" in trio and kg_parquet_file(data) is not None:
        trio.insert(1, "kg-parquet")
    got: dict[str, list[dict[str, Any]]] = {e: [] for e in trio}
    kept: dict[str, Any] = {}
    for r in range(rounds):
        order = trio[r % len(trio):] + trio[:r % len(trio)]
        for name in order:
            old = kept.pop(name, None)
            if old is not None:
                close_engine(name, old)
            log(f"ingest round {r + 1}/{rounds}: {name} ({n:,} records)")
            folder = work / f"{name}-{r}"
            if name == "kg":
                engine, m = kg_ingest(data, folder)
            elif name == "kg-parquet":
                engine, m = kg_ingest(data, folder, "parquet")
            elif name == "lancedb":
                engine, m = lance_ingest(data, folder)
            else:
                engine, m = chroma_ingest(data, folder)
            kept[name] = (engine, folder)
            got[name].append(m)
            log(f"  {name}: " + ", ".join(f"{k} {v:,.2f}" for k, v in m.items() if isinstance(v, float)))
    if "kg-parquet" in kept:  # measured for its import alone: the later figures read the NDJSON import's
        close_engine("kg-parquet", kept.pop("kg-parquet"))
    refs: dict[str, Any] = {}
    builds: dict[str, float] = {}
    for name in ("faiss", "hnswlib", "tantivy", "bm25s", "sqlite_fts5"):
        if name not in needs:
            continue
        log(f"build {name}")
        if name == "faiss":
            refs[name], builds[name] = faiss_build(data["vectors"])
        elif name == "hnswlib":
            refs[name], builds[name] = hnswlib_build(data["vectors"])
        elif name == "tantivy":
            refs[name], builds[name] = tantivy_build(data["texts"], work / "tantivy")
        elif name == "bm25s":
            refs[name], builds[name] = bm25s_build(data["texts"])
        else:
            refs[name], builds[name] = sqlite_fts_build(data["texts"], work / "fts5.sqlite3")
        log(f"  {name}: {builds[name]:.2f} s")
    out = {"rounds": rounds, "runs": got, "reference_builds_s": builds}
    res["ingest"] = out

    def m(engine: str, key: str) -> float | None:
        return med([x[key] for x in got[engine]]) if got.get(engine) else None

    kg_rate, kg_ann = m("kg", "records_per_s"), m("kg", "to_ann_searchable_s")
    kg_hnsw = m("kg", "hnsw_background_s") if n >= 20_000 else None  # KG_INDEX_ANN_MIN_ROWS: exact below
    fig = f"1 ingest N={n:,}"
    if "lancedb" in got:
        table.add(fig, "records/s (add)", "bulk import", kg_rate, "lancedb create_table", m("lancedb", "records_per_s"),
                  False)
        if got.get("kg-parquet"):
            table.add(fig, "records/s (add)", "import parquet", m("kg-parquet", "records_per_s"),
                      "lancedb create_table", m("lancedb", "records_per_s"), False)
            table.add(fig, "s to searchable, all indexes", "parquet + HNSW", m("kg-parquet", "to_ann_searchable_s"),
                      "lancedb add+IVF_HNSW_SQ+FTS", m("lancedb", "to_searchable_s"), True)
        table.add(fig, "s to searchable, all indexes", "import + HNSW", kg_ann, "lancedb add+IVF_HNSW_SQ+FTS",
                  m("lancedb", "to_searchable_s"), True)
        if kg_hnsw is not None:
            table.add(fig, "s vector index build", "HNSW (background)", kg_hnsw, "lancedb IVF_HNSW_SQ",
                      m("lancedb", "vector_index_s"), True)
    if "chroma" in got:
        table.add(fig, "records/s (add)", "bulk import", kg_rate, "chroma add (HNSW inline)",
                  m("chroma", "records_per_s"), False)
        table.add(fig, "s to searchable, all indexes", "import + HNSW", kg_ann, "chroma add", m("chroma", "add_s"),
                  True)
    for name, seconds in builds.items():
        label = {"faiss": "faiss HNSWFlat build", "hnswlib": "hnswlib build", "tantivy": "tantivy index",
                 "bm25s": "bm25s index", "sqlite_fts5": "SQLite FTS5 insert"}[name]
        kg_value = kg_hnsw if name in ("faiss", "hnswlib") else m("kg", "import_s")
        table.add(fig, "s build (reference)", "HNSW (background)" if name in ("faiss", "hnswlib") else "import",
                  kg_value, label, seconds, True, note="" if kg_value is not None else "kg builds no HNSW below 20,000")
    engines = {name: value[0] for name, value in kept.items()}
    engines.update(refs)
    engines["_folders"] = {name: value[1] for name, value in kept.items()}
    return engines


def close_engine(name: str, value: Any) -> None:
    engine, folder = value
    if name.startswith("kg"):
        engine.close()
    del engine
    gc.collect()
    shutil.rmtree(folder, ignore_errors=True)


# -- figure 2: vector KNN --------------------------------------------------------------------------


def fig_knn(data: dict[str, Any], args: argparse.Namespace, work: Path, res: dict[str, Any], table: Table,
            engines: dict[str, Any]) -> None:
    from kg.context import OPERATOR
    from kg.index.base import KeySet, SearchScope
    from kg.rag.search import SearchRequest, search_branch

    n, qv, exact = data["n"], data["query_vectors"], data["exact"]
    services = engines["kg"]
    repo_key = kg_repo_key(services, REPO)
    scope = SearchScope(KeySet(data["keys"]))  # every record's content key, as the use case's scope holds them
    key_to_id = {k: i for i, k in enumerate(data["keys"])}
    vectors = data["vectors"]
    services.index.flush(repo_key)  # the server loads this snapshot
    server = None
    calls: dict[str, Callable[[int], Any]] = {}

    def kg_case(i: int) -> list[int]:
        answer = search_branch(services, OPERATOR, REPO, "main",
                               SearchRequest(query=f"q{i}", k=10, mode="vector", granularity="chunk"))
        return kg_paths_ids(answer.results)

    calls["kg use case"] = kg_case
    calls["kg index (library)"] = lambda i: [key_to_id[h.content_key] for h in services.index.knn(
        repo_key, qv[i], 10, model=MODEL, scope=scope)]
    if args.http:
        log("starting a kg server for the HTTP figures")
        server = KgServer(args.kg, engines["_folders"]["kg"], data["lookup"], work)
        body = {"k": 10, "mode": "vector", "granularity": "chunk"}
        first, _ = timed_once(lambda: server.request("POST", f"/api/repos/{REPO}/search", {**body, "query": "q0"}))
        log(f"  the server's first search (its snapshot load): {first:.1f} s")
        calls["kg HTTP"] = lambda i: [leaf_index(r["path"]) for r in server.request(
            "POST", f"/api/repos/{REPO}/search", {**body, "query": f"q{i}"})["results"]]
    if "lancedb" in engines:
        tbl = engines["lancedb"][1]
        calls["lancedb"] = lambda i: lance_knn(tbl, qv[i], 10)
    if "chroma" in engines:
        col = engines["chroma"][1]
        calls["chroma"] = lambda i: chroma_knn(col, qv[i], 10)
    if "faiss" in engines:
        fi = engines["faiss"]
        calls["faiss HNSW raw"] = lambda i: fi.search(qv[i:i + 1], 10)[1][0].tolist()
    if "hnswlib" in engines:
        hi = engines["hnswlib"]
        calls["hnswlib raw"] = lambda i: hi.knn_query(qv[i], k=10)[0][0].tolist()
    calls["exact numpy scan"] = lambda i: np.argpartition(-(vectors @ qv[i]), 10)[:10].tolist()
    found: dict[str, dict[int, list[int]]] = {name: {} for name in calls}

    def check(name: str, i: int, got: Any) -> None:
        found[name][i] = [int(x) for x in got]

    log(f"knn: {len(qv)} queries x {len(calls)} engines, interleaved")
    samples = interleaved(calls, len(qv), warmup=args.warmup, check=check)
    out: dict[str, Any] = {}
    for name, s in samples.items():
        out[name] = {**summary(s), "recall_at_10": recall_at_10([found[name][i] for i in range(len(qv))], exact)}
        log(f"  {name}: p50 {out[name]['p50_ms']:.3f} ms p95 {out[name]['p95_ms']:.3f} ms "
            f"recall@10 {out[name]['recall_at_10']}")
    res["knn"] = out
    if args.profile:
        res.setdefault("profiles", {})["knn kg use case"] = prof = profile_kg(kg_case, args.profile, args.kg)
        print_profile("knn kg use case", prof)
    if server is not None:
        server.close()
    fig = f"2 knn N={n:,}"
    base = out["kg use case"]
    for name, o in out.items():
        if name == "kg use case":
            continue
        table.add(fig, "p50 ms", "use case", base["p50_ms"], name, o["p50_ms"], True)
        table.add(fig, "p95 ms", "use case", base["p95_ms"], name, o["p95_ms"], True)
        table.add(fig, "recall@10", "use case", base["recall_at_10"], name, o["recall_at_10"], False)


# -- figure 3: lexical BM25 ------------------------------------------------------------------------


def fig_lexical(data: dict[str, Any], args: argparse.Namespace, res: dict[str, Any], table: Table,
                engines: dict[str, Any]) -> None:
    from kg.context import OPERATOR
    from kg.index.base import KeySet, SearchScope
    from kg.rag.search import SearchRequest, search_branch

    texts = data["query_texts"]
    services = engines["kg"]
    repo_key = kg_repo_key(services, REPO)
    scope = SearchScope(KeySet(data["keys"]))
    key_to_id = {k: i for i, k in enumerate(data["keys"])}

    def kg_case(i: int) -> list[int]:
        return kg_paths_ids(search_branch(services, OPERATOR, REPO, "main", SearchRequest(
            query=texts[i], k=10, mode="fulltext", granularity="chunk")).results)

    calls: dict[str, Callable[[int], Any]] = {
        "kg use case": kg_case,
        "kg index (library)": lambda i: [key_to_id[h.content_key] for h in services.index.bm25(
            repo_key, texts[i], 10, scope=scope)],
    }
    if "lancedb" in engines:
        tbl = engines["lancedb"][1]
        calls["lancedb fts"] = lambda i: lance_fts(tbl, texts[i], 10)
    if "tantivy" in engines:
        calls["tantivy"] = lambda i: tantivy_search(engines["tantivy"], texts[i], 10)
    if "bm25s" in engines:
        calls["bm25s"] = lambda i: bm25s_search(engines["bm25s"], texts[i], 10)
    if "sqlite_fts5" in engines:
        calls["sqlite fts5"] = lambda i: sqlite_fts_search(engines["sqlite_fts5"], texts[i], 10)
    found: dict[str, dict[int, list[int]]] = {name: {} for name in calls}
    log(f"lexical: {len(texts)} queries x {len(calls)} engines, interleaved")
    samples = interleaved(calls, len(texts), warmup=args.warmup,
                          check=lambda name, i, got: found[name].__setitem__(i, [int(x) for x in got]))
    out: dict[str, Any] = {}
    for name, s in samples.items():
        agree = statistics.fmean(len(set(found[name][i]) & set(found["kg use case"][i])) / max(1, len(
            found["kg use case"][i])) for i in range(len(texts)))
        out[name] = {**summary(s), "overlap_at_10_with_kg": round(agree, 3)}
        log(f"  {name}: p50 {out[name]['p50_ms']:.3f} ms p95 {out[name]['p95_ms']:.3f} ms overlap with kg "
            f"{out[name]['overlap_at_10_with_kg']}")
    res["lexical"] = out
    if args.profile:
        res.setdefault("profiles", {})["lexical kg use case"] = prof = profile_kg(kg_case, args.profile, args.kg)
        print_profile("lexical kg use case", prof)
    fig = f"3 bm25 N={data['n']:,}"
    for name, o in out.items():
        if name != "kg use case":
            table.add(fig, "p50 ms", "use case", out["kg use case"]["p50_ms"], name, o["p50_ms"], True,
                      note=f"top-10 overlap with kg {o['overlap_at_10_with_kg']}")


# -- figure 4: hybrid ------------------------------------------------------------------------------


def fig_hybrid(data: dict[str, Any], args: argparse.Namespace, res: dict[str, Any], table: Table,
               engines: dict[str, Any]) -> None:
    from kg.context import OPERATOR
    from kg.rag.search import SearchRequest, search_branch

    texts, hv = data["query_texts"], data["hybrid_vectors"]
    services = engines["kg"]

    def kg_case(i: int, fusion: str | None = None) -> list[int]:
        extra = {"fusion_type": fusion} if fusion else {}
        return kg_paths_ids(search_branch(services, OPERATOR, REPO, "main", SearchRequest(
            query=texts[i], k=10, mode="hybrid", granularity="chunk", **extra)).results)

    calls: dict[str, Callable[[int], Any]] = {
        "kg hybrid (relative score, default)": kg_case,
        "kg hybrid (RRF)": lambda i: kg_case(i, "ranked"),
    }
    if "lancedb" in engines:
        tbl = engines["lancedb"][1]
        calls["lancedb hybrid (RRF, default)"] = lambda i: lance_hybrid(tbl, texts[i], hv[i], 10)
    log(f"hybrid: {len(texts)} queries x {len(calls)} engines, interleaved")
    samples = interleaved(calls, len(texts), warmup=args.warmup)
    out = {name: summary(s) for name, s in samples.items()}
    for name, o in out.items():
        log(f"  {name}: p50 {o['p50_ms']:.3f} ms p95 {o['p95_ms']:.3f} ms")
    res["hybrid"] = out
    if args.profile:
        res.setdefault("profiles", {})["hybrid kg use case"] = prof = profile_kg(kg_case, args.profile, args.kg)
        print_profile("hybrid kg use case", prof)
    fig = f"4 hybrid N={data['n']:,}"
    if "lancedb hybrid (RRF, default)" in out:
        for kg_name in ("kg hybrid (relative score, default)", "kg hybrid (RRF)"):
            table.add(fig, "p50 ms", kg_name.removeprefix("kg hybrid "), out[kg_name]["p50_ms"],
                      "lancedb hybrid (RRF)", out["lancedb hybrid (RRF, default)"]["p50_ms"], True)
            table.add(fig, "p95 ms", kg_name.removeprefix("kg hybrid "), out[kg_name]["p95_ms"],
                      "lancedb hybrid (RRF)", out["lancedb hybrid (RRF, default)"]["p95_ms"], True)


# -- figure 7: branching ---------------------------------------------------------------------------


def chroma_copy(client: Any, col: Any, name: str, batch: int) -> Any:
    """Chroma's way to branch a collection locally (``fork`` is Chroma Cloud's): a new collection
    with every record read back and added (its HNSW rebuilt)."""
    new = client.create_collection(name, embedding_function=None, configuration={"hnsw": CHROMA_HNSW})
    offset = 0
    while True:
        got = col.get(limit=batch, offset=offset, include=["embeddings", "documents"])
        if not got["ids"]:
            return new
        new.add(ids=got["ids"], embeddings=got["embeddings"], documents=got["documents"])
        offset += len(got["ids"])


def fig_branch(data: dict[str, Any], args: argparse.Namespace, work: Path, res: dict[str, Any], table: Table,
               engines: dict[str, Any]) -> None:
    from kg.context import OPERATOR, run
    from kg.indexing.config import workspace_embedding
    from kg.ops import branches as branch_ops
    from kg.rag.search import SearchRequest, search_branch

    n = data["n"]
    services = engines["kg"]
    rounds = args.branch_rounds
    rng = np.random.default_rng(args.seed + 3)
    # 100 new records near the data, and 20 queries that each aim at one of them
    new_v = data["vectors"][rng.integers(n, size=100)] + 0.3 * rng.standard_normal((100, DIM)).astype(np.float32)
    new_v /= np.linalg.norm(new_v, axis=1, keepdims=True)
    new_t = [" ".join(data["words"][w] for w in rng.integers(5_000, size=WORDS_PER_TEXT)) for _ in range(100)]
    aims = list(range(0, 100, 5))
    bq = new_v[aims] + 0.2 * rng.standard_normal((len(aims), DIM)).astype(np.float32) / np.sqrt(DIM)
    bq /= np.linalg.norm(bq, axis=1, keepdims=True)
    for j, v in enumerate(bq):
        data["lookup"][f"bq{j}"] = v
    new_ids = list(range(n, n + 100))
    config = workspace_embedding({"embedding": {"model": MODEL}}, default_model=MODEL)
    from kg.providers.registry import make_embedder

    planned = [plan_one(t, config, make_embedder(MODEL, allow_fake=True)) for t in new_t]
    creates: dict[str, Callable[[int], Any]] = {}
    kg_names: list[str] = []

    def kg_create(r: int) -> None:
        name = f"agent/b{r}"
        run(services, OPERATOR, branch_ops.create_branch, REPO, name=name, from_branch="main")
        kg_names.append(name)

    creates["kg branch"] = kg_create
    lance_branches: list[Any] = []
    if "lancedb" in engines:
        tbl = engines["lancedb"][1]
        creates["lancedb branch"] = lambda r: lance_branches.append(tbl.branches.create(f"b{r}"))
        creates["lancedb tag (read-only)"] = lambda r: tbl.tags.create(f"t{r}", tbl.version)

        def shallow(r: int) -> None:
            ds = tbl.to_lance()
            ds.shallow_clone(str(work / f"lance-shallow-{r}.lance"), ds.version)

        creates["lancedb shallow_clone"] = shallow
    log(f"branch: {rounds} creates x {len(creates)} ways, interleaved")
    samples = interleaved(creates, rounds, warmup=0)
    out: dict[str, Any] = {name: summary(s) for name, s in samples.items()}
    if "lancedb" in engines:
        src = engines["_folders"]["lancedb"] / "docs.lance"
        dst = work / "lance-copy.lance"
        out["lancedb full copy (copytree)"] = summary([timed_once(lambda: shutil.copytree(src, dst))[0]])
        shutil.rmtree(dst, ignore_errors=True)
    chroma_new = None
    if "chroma" in engines:
        client, col = engines["chroma"]
        log("branch: chroma collection copy (fork is not available in local Chroma)")
        try:
            col.fork("fork-probe")
            fork_note = "fork worked locally"
        except NotImplementedError as exc:
            fork_note = f"fork: {exc}"
        seconds, chroma_new = timed_once(lambda: chroma_copy(client, col, "docs-branch", client.get_max_batch_size()))
        out["chroma collection copy"] = {**summary([seconds]), "note": fork_note}
    # write 100 records on the branch, then search it
    branch = kg_names[-1]
    lines = [ndjson_header(REPO, branch, WORKSPACE, MODEL, True)] + node_lines(
        [f"/s0/new{j}" for j in range(100)], new_t, new_v, [k for k, _ in planned], [p for _, p in planned])
    writes: dict[str, float] = {}
    writes["kg branch"], _ = timed_once(lambda: kg_import(services, lines, branch=branch))
    batch = arrow_table(new_ids, new_t, new_v)
    if lance_branches:
        writes["lancedb branch"], _ = timed_once(lambda: lance_branches[-1].add(batch))
    if chroma_new is not None:
        writes["chroma collection copy"], _ = timed_once(
            lambda: chroma_add(chroma_new, 5_000, new_ids, new_t, new_v))
    want = [n + a for a in aims]
    searches: dict[str, Callable[[int], Any]] = {
        "kg branch": lambda j: kg_paths_ids_new(search_branch(services, OPERATOR, REPO, branch, SearchRequest(
            query=f"bq{j}", k=10, mode="vector", granularity="chunk")).results, n)}
    if lance_branches:
        searches["lancedb branch"] = lambda j: lance_knn(lance_branches[-1], bq[j], 10)
    if chroma_new is not None:
        searches["chroma collection copy"] = lambda j: chroma_knn(chroma_new, bq[j], 10)
    hits: dict[str, list[bool]] = {name: [] for name in searches}
    log("branch: searches of the branches, interleaved")
    s2 = interleaved(searches, len(aims), warmup=2, check=lambda name, j, got: hits[name].append(want[j] in got))
    for name in searches:
        out.setdefault(name, {})
        out[name]["write_100_s"] = writes.get(name)
        out[name]["search"] = summary(s2[name])
        out[name]["found_new_record"] = round(statistics.fmean(hits[name]), 3)
    main_sees = kg_paths_ids_new(search_branch(services, OPERATOR, REPO, "main", SearchRequest(
        query="bq0", k=10, mode="vector", granularity="chunk")).results, n)
    out["kg main sees the branch's records"] = bool(main_sees and n + aims[0] in main_sees)
    res["branch"] = out
    for name, o in out.items():
        if isinstance(o, dict):
            log(f"  {name}: " + json.dumps({k: v for k, v in o.items()}))
    fig = f"7 branch N={n:,}"
    kg_create_ms = out["kg branch"]["p50_ms"]
    for name, o in out.items():
        if name != "kg branch" and isinstance(o, dict) and "p50_ms" in o:
            table.add(fig, "create p50 ms", "branch", kg_create_ms, name, o["p50_ms"], True,
                      note="read-only: not a branch to write on" if "tag" in name else "")
    for name in searches:
        if name == "kg branch":
            continue
        table.add(fig, "write 100 ms", "branch", writes["kg branch"] * 1000, name, writes[name] * 1000, True)
        table.add(fig, "search on branch p50 ms", "branch", out["kg branch"]["search"]["p50_ms"], name,
                  out[name]["search"]["p50_ms"], True)


def kg_paths_ids_new(results: Sequence[Any], n: int) -> list[int]:
    """Ids of search rows; the branch's new records (``/s0/new<j>``) are n + j."""
    out = []
    for r in results:
        last = r.path.rsplit("/", 1)[1]
        out.append(n + int(last[3:]) if last.startswith("new") else leaf_index(r.path))
    return out


# -- figure 6: graph --------------------------------------------------------------------------------


def graph_edges(n: int, seed: int) -> dict[str, Any]:
    """10 n directed edges over n nodes: one hub with n / 2 in-edges, the rest from uniform
    sources to power-law targets (Zipf 0.7 over a permutation; the hub excluded), no
    self-loop, no repeated (source, target); a type and a weight (6 decimals) each."""
    rng = np.random.default_rng(seed + 1)
    total, hub_degree = 10 * n, n // 2
    hub = int(rng.integers(n))
    src_h = rng.choice(n - 1, size=hub_degree, replace=False)
    src_h = src_h + (src_h >= hub)
    targets = rng.permutation(np.delete(np.arange(n), hub))
    p = 1.0 / np.arange(1, n) ** 0.7
    p /= p.sum()
    rest = total - hub_degree
    s = rng.integers(n, size=int(rest * 1.3))
    t = targets[rng.choice(n - 1, size=len(s), p=p)]
    keep = s != t
    s, t = s[keep], t[keep]
    _, first = np.unique(s.astype(np.int64) * n + t, return_index=True)
    first = np.sort(first)[:rest]
    assert len(first) == rest, "not enough distinct edges drawn"
    src = np.concatenate([src_h, s[first]])
    dst = np.concatenate([np.full(hub_degree, hub), t[first]])
    types = rng.integers(len(TYPES), size=total)
    weights = np.round(rng.random(total), 6)
    degree = np.bincount(src, minlength=n) + np.bincount(dst, minlength=n)
    ordinary = np.flatnonzero((degree >= 5) & (degree <= 40))
    ordinary = ordinary[ordinary != hub]
    return {"src": src, "dst": dst, "types": types, "weights": weights, "hub": hub, "hub_degree": int(degree[hub]),
            "ordinary": rng.choice(ordinary, size=min(len(ordinary), 1000), replace=False).tolist(),
            "max_other_degree": int(np.sort(degree)[-2])}


def fig_graph(data: dict[str, Any], args: argparse.Namespace, work: Path, res: dict[str, Any], table: Table,
              engines: dict[str, Any]) -> None:
    import heapq
    from itertools import chain
    from operator import itemgetter

    import kuzu
    import networkx as nx

    from kg.context import OPERATOR, reading
    from kg.graph.traverse import traverse
    from kg.rag import graph as graph_ops
    from kg.rag.graph import view_key
    from kg.store.nodes import node_uid
    from kg.store.repos import workspace_id

    n = data["n"]
    services = engines["kg"]
    g = graph_edges(n, args.seed)
    src, dst, types, weights, hub = g["src"], g["dst"], g["types"], g["weights"], g["hub"]
    m = len(src)
    log(f"graph: {m:,} edges over {n:,} nodes, hub {hub} of degree {g['hub_degree']:,} "
        f"(next largest {g['max_other_degree']:,})")
    out: dict[str, Any] = {"edges": m, "hub_degree": g["hub_degree"], "next_largest_degree": g["max_other_degree"]}
    # loads
    rel_file = work / "relations.ndjson"
    with rel_file.open("w", encoding="utf-8") as fh:
        fh.write(ndjson_header(REPO, "main", WORKSPACE, MODEL, False))
        for a, b, t, w in zip(src.tolist(), dst.tolist(), types.tolist(), weights.tolist(), strict=True):
            fh.write(f'{{"record":"relation","from":"{WORKSPACE}:{leaf_path(a)}","to":"{WORKSPACE}:{leaf_path(b)}",'
                     f'"type":"{TYPES[t]}","weight":{w}}}\n')
    loads: dict[str, float] = {}
    log("graph: kg import of the relations")
    loads["kg import"], _ = timed_once(lambda: kg_import(services, rel_file))
    seed_addr = f"{WORKSPACE}:{leaf_path(g['ordinary'][0])}"

    def build_view() -> None:
        services.graphs.clear()
        graph_ops.walk(services, OPERATOR, REPO, "main", [seed_addr], hops=1, max_nodes=10, fan_out=10)
        services.graphs.join_builds(timeout_s=3600)

    loads["kg view build"], _ = timed_once(build_view)
    with reading(services, OPERATOR, REPO, "main") as (_, view):
        graph = services.graphs.get(view_key(view))
        wid, ruid = workspace_id(view, WORKSPACE), view.repo.uid
    if graph is None:
        raise RuntimeError("kg holds no graph view of the branch (over KG_GRAPH_MAX_EDGES?)")
    uid_of: dict[int, Any] = {i: node_uid(ruid, wid, leaf_path(i)) for i in [hub, *g["ordinary"]]}
    log("graph: kuzu COPY")
    kz_dir = work / "kuzu"
    shutil.rmtree(kz_dir, ignore_errors=True)
    (work / "kz-nodes.csv").write_text("".join(f"{i}\n" for i in range(n)))
    with (work / "kz-edges.csv").open("w") as fh:
        fh.writelines(f"{a},{b},{TYPES[t]},{w}\n" for a, b, t, w in zip(src.tolist(), dst.tolist(), types.tolist(),
                                                                       weights.tolist(), strict=True))

    def kuzu_load() -> Any:
        db = kuzu.Database(str(kz_dir))
        conn = kuzu.Connection(db)
        conn.execute("CREATE NODE TABLE N(id INT64, PRIMARY KEY(id))")
        conn.execute("CREATE REL TABLE E(FROM N TO N, t STRING, w DOUBLE)")
        conn.execute(f"COPY N FROM '{work / 'kz-nodes.csv'}'")
        conn.execute(f"COPY E FROM '{work / 'kz-edges.csv'}'")
        return db, conn

    loads["kuzu COPY"], (kz_db, kz) = timed_once(kuzu_load)
    log("graph: networkx")

    def nx_load() -> Any:
        G = nx.DiGraph()
        G.add_nodes_from(range(n))
        G.add_edges_from((a, b, {"type": TYPES[t], "weight": w}) for a, b, t, w in zip(
            src.tolist(), dst.tolist(), types.tolist(), weights.tolist(), strict=True))
        return G

    loads["networkx build"], G = timed_once(nx_load)
    log("graph: SQLite")
    sq_path = work / "graph.sqlite3"
    sq_path.unlink(missing_ok=True)
    sq = sqlite3.connect(str(sq_path), check_same_thread=False)

    def sqlite_load() -> None:
        sq.execute("CREATE TABLE edges(src INTEGER, dst INTEGER, t TEXT, w REAL)")
        sq.executemany("INSERT INTO edges VALUES (?, ?, ?, ?)", zip(src.tolist(), dst.tolist(),
                                                                  [TYPES[t] for t in types.tolist()],
                                                                  weights.tolist(), strict=True))
        sq.execute("CREATE INDEX e_src ON edges(src, w)")
        sq.execute("CREATE INDEX e_dst ON edges(dst, w)")
        sq.commit()

    loads["sqlite insert + indexes"], _ = timed_once(sqlite_load)
    out["loads_s"] = loads
    log("graph loads: " + ", ".join(f"{k} {v:.1f} s" for k, v in loads.items()))

    # the queries, every engine answering the same thing (weight-ordered as kg's stable order)
    def kg_top(i: int, limit: int) -> list[float]:
        got = graph_ops.neighbors(services, OPERATOR, REPO, "main", f"{WORKSPACE}:{leaf_path(i)}", limit=limit)
        return [r["weight"] for r in got["neighbors"]]

    def lib_top(i: int, limit: int) -> list[Any]:
        return graph.neighbors(uid_of[i], limit=limit)[0]

    def kz_top(i: int, limit: int | None) -> list[Any]:
        q = "MATCH (a:N {id: $id})-[e:E]-(b:N) RETURN b.id, e.w"
        q += f" ORDER BY e.w DESC LIMIT {limit}" if limit else ""
        return kz.execute(q, {"id": i}).get_all()

    def nx_top(i: int, limit: int | None) -> list[Any]:
        edges = chain(((v, d["weight"]) for v, d in G._succ[i].items()),
                      ((u, d["weight"]) for u, d in G._pred[i].items()))
        return heapq.nlargest(limit, edges, key=itemgetter(1)) if limit else list(edges)

    def sq_top(i: int, limit: int | None) -> list[Any]:
        if limit is None:
            return sq.execute("SELECT dst, w FROM edges WHERE src = ?1 UNION ALL "
                              "SELECT src, w FROM edges WHERE dst = ?1", (i,)).fetchall()
        return sq.execute("SELECT n, w FROM (SELECT * FROM (SELECT dst AS n, w FROM edges WHERE src = ?1 ORDER BY w "
                          "DESC LIMIT ?2) UNION ALL SELECT * FROM (SELECT src AS n, w FROM edges WHERE dst = ?1 "
                          "ORDER BY w DESC LIMIT ?2)) ORDER BY w DESC LIMIT ?2", (i, limit)).fetchall()

    def kg_walk(i: int) -> set[int]:
        got = graph_ops.walk(services, OPERATOR, REPO, "main", [f"{WORKSPACE}:{leaf_path(i)}"], hops=2, direction="OUT",
                             max_nodes=10_000, fan_out=10_000)
        return {leaf_index(r["path"]) for r in got["nodes"] if r["hop"] > 0}

    def lib_walk(i: int) -> Any:
        return traverse([uid_of[i]], lambda x: graph.iter_neighbors(x, direction="OUT"), hops=2, max_nodes=10_000,
                        fan_out=10_000)

    def kz_walk(i: int) -> set[int]:
        got = kz.execute("MATCH (a:N {id: $id})-[:E*1..2]->(b:N) RETURN DISTINCT b.id", {"id": i}).get_all()
        return {r[0] for r in got} - {i}

    def nx_walk(i: int) -> set[int]:
        seen, frontier = {i}, [i]
        for _ in range(2):
            nxt = []
            for u in frontier:
                for v in G._succ[u]:
                    if v not in seen:
                        seen.add(v)
                        nxt.append(v)
            frontier = nxt
        return seen - {i}

    def sq_walk(i: int) -> set[int]:
        got = sq.execute("WITH RECURSIVE reach(n, d) AS (SELECT dst, 1 FROM edges WHERE src = ?1 UNION SELECT e.dst, "
                         "r.d + 1 FROM reach r JOIN edges e ON e.src = r.n WHERE r.d < 2) SELECT DISTINCT n FROM reach",
                         (i,)).fetchall()
        return {r[0] for r in got} - {i}

    ordinary = g["ordinary"]
    q = args.queries

    def lib_addr(nodes: Sequence[Any]) -> list[int]:
        return [leaf_index(graph.address(x).path) for x in nodes]

    cases: list[tuple[str, int, dict[str, Callable[[int], Any]], Callable[[str, Any], Any]]] = []
    for label, limit, reps in (("NEIGHBORS hub, limit 10", 10, q), ("NEIGHBORS hub, limit 10,000 (kg's cap)", 10_000,
                                                                     max(20, q // 10))):
        cases.append((label, reps, {
            "kg use case": lambda i, L=limit: kg_top(hub, L),
            "kg library (view held)": lambda i, L=limit: lib_top(hub, L),
            "kuzu": lambda i, L=limit: kz_top(hub, L),
            "networkx": lambda i, L=limit: nx_top(hub, L),
            "sqlite": lambda i, L=limit: sq_top(hub, L)},
            lambda name, got: [round(float(x.weight if hasattr(x, "weight") else (x if isinstance(x, float) else x[1])),
                                     6) for x in got]))
    cases.append((f"NEIGHBORS hub, all {g['hub_degree']:,}", max(20, q // 10), {
        "kg library (view held)": lambda i: lib_top(hub, 10**8),
        "kuzu": lambda i: kz_top(hub, None),
        "networkx": lambda i: nx_top(hub, None),
        "sqlite": lambda i: sq_top(hub, None)},
        lambda name, got: len(got)))
    cases.append(("NEIGHBORS ordinary node, limit 100 (all its edges)", q, {
        "kg use case": lambda i: kg_top(ordinary[i % len(ordinary)], 100),
        "kg library (view held)": lambda i: lib_top(ordinary[i % len(ordinary)], 100),
        "kuzu": lambda i: kz_top(ordinary[i % len(ordinary)], 100),
        "networkx": lambda i: nx_top(ordinary[i % len(ordinary)], 100),
        "sqlite": lambda i: sq_top(ordinary[i % len(ordinary)], 100)},
        lambda name, got: sorted(round(float(x.weight if hasattr(x, "weight") else (
            x if isinstance(x, float) else x[1])), 6) for x in got)))
    cases.append(("2-hop traverse (out-edges, all reached)", q, {
        "kg use case": lambda i: kg_walk(ordinary[i % len(ordinary)]),
        "kg library (view held)": lambda i: lib_walk(ordinary[i % len(ordinary)]),
        "kuzu": lambda i: kz_walk(ordinary[i % len(ordinary)]),
        "networkx": lambda i: nx_walk(ordinary[i % len(ordinary)]),
        "sqlite": lambda i: sq_walk(ordinary[i % len(ordinary)])},
        lambda name, got: (set(lib_addr([v.node_id for v in got.visits if v.hop > 0]))
                           if name.startswith("kg library") else got)))
    out["queries"] = {}
    fig = f"6 graph {m:,} edges"
    for label, reps, calls, norm in cases:
        answers: dict[str, dict[int, Any]] = {name: {} for name in calls}
        log(f"graph: {label}: {reps} x {len(calls)} engines, interleaved")
        samples = interleaved(calls, reps, warmup=min(args.warmup, 3),
                              check=lambda name, i, got, a=answers: a[name].__setitem__(i, got))
        ref = {i: norm("networkx", a) for i, a in answers["networkx"].items()}
        row: dict[str, Any] = {}
        for name, s in samples.items():
            agree = sum(norm(name, answers[name][i]) == ref[i] for i in ref) / len(ref)
            row[name] = {**summary(s), "same_answer_as_networkx": round(agree, 3)}
            log(f"  {name}: p50 {row[name]['p50_ms']:.3f} ms p95 {row[name]['p95_ms']:.3f} ms same answer "
                f"{row[name]['same_answer_as_networkx']}")
        out["queries"][label] = row
        base_name = "kg use case" if "kg use case" in row else "kg library (view held)"
        for name, o in row.items():
            if name.startswith("kg"):
                continue
            table.add(fig, f"{label} p50 ms", base_name.removeprefix("kg "), row[base_name]["p50_ms"], name,
                      o["p50_ms"], True)
            if base_name == "kg use case":
                table.add(fig, f"{label} p50 ms", "library (view held)", row["kg library (view held)"]["p50_ms"],
                          name, o["p50_ms"], True)
        if args.profile and "kg use case" in calls:
            key = f"graph {label} kg use case"
            res.setdefault("profiles", {})[key] = prof = profile_kg(calls["kg use case"], min(args.profile, reps),
                                                                    args.kg)
            print_profile(key, prof)
    res["graph"] = out
    for name, seconds in loads.items():
        if name not in ("kg import", "kg view build"):
            table.add(fig, "load s (reference)", "import + view", loads["kg import"] + loads["kg view build"], name,
                      seconds, True)
    G = kz = None  # the references dropped (the closures above read these names: no del)
    del kz_db
    sq.close()
    gc.collect()


# -- figure 5: retrieval quality (SciFact) -----------------------------------------------------------


def fig_quality(args: argparse.Namespace, work: Path, res: dict[str, Any], table: Table, services: Any) -> None:
    import lancedb

    from bench.beir import ndcg_at  # kg's own nDCG@10 (BEIR / pytrec_eval's)
    from kg.context import OPERATOR
    from kg.rag.search import SearchRequest, search_branch

    sf = scifact_vectors(args.scifact, args.cache)
    corpus, queries, qrels, pieces = sf["corpus"], sf["queries"], sf["qrels"], sf["pieces"]
    pv, qv = sf["vectors"], sf["query_vectors"]
    qids = [q for q in queries if q in qrels]
    log(f"quality: SciFact, {len(corpus):,} documents, {len(pieces):,} passages, {len(qids)} queries")
    services._embedders[LOCAL_MODEL] = LookupEmbedder(sf["embedder"], {queries[q]: qv[q] for q in qids})
    by_doc: dict[str, list[int]] = {}
    for j, p in enumerate(pieces):
        by_doc.setdefault(p["doc"], []).append(j)
    lines = [ndjson_header("scifact", "main", "scifact", LOCAL_MODEL, True),
             json.dumps({"record": "node", "workspace": "scifact", "path": "/doc", "node_type": "kg:Folder"}) + "\n"]
    for did, doc in corpus.items():
        lines.append(json.dumps({"record": "node", "workspace": "scifact", "path": f"/doc/{did}",
                                 "node_type": "beir:Doc", "properties": {"title": doc["title"], "text": doc["text"]}})
                     + "\n")
        for j in by_doc.get(did, []):
            p = pieces[j]
            lines.append(json.dumps({"record": "chunk", "content_key": p["content_key"],
                                     "chunk_index": p["chunk_index"], "field": p["field"], "text": p["text"],
                                     "char_start": p["start"], "char_end": p["end"], "model": LOCAL_MODEL, "dim": DIM,
                                     "vector": b64(pv[j])})
                         + "\n")
    kg_import(services, lines, repo="scifact")
    doc_text = {did: f"{d['title']} {d['text']}".strip() for did, d in corpus.items()}
    dids = list(corpus)
    db = lancedb.connect(str(work / "lance-scifact"))
    import pyarrow as pa

    piece_docs = [p["doc"] for p in pieces]
    passages = db.create_table("passages", data=pa.table({
        "doc": pa.array(piece_docs), "text": pa.array([p["text"] for p in pieces]),
        "vector": pa.FixedSizeListArray.from_arrays(pa.array(pv.ravel()), DIM)}))
    passages.create_fts_index("text")
    passages_dt = db.create_table("passages_doc_text", data=pa.table({
        "doc": pa.array(piece_docs), "text": pa.array([doc_text[d] for d in piece_docs]),
        "vector": pa.FixedSizeListArray.from_arrays(pa.array(pv.ravel()), DIM)}))
    passages_dt.create_fts_index("text")
    docs = db.create_table("documents", data=pa.table({"doc": pa.array(dids),
                                                       "text": pa.array([doc_text[d] for d in dids])}))
    docs.create_fts_index("text")
    texts = [doc_text[d] for d in dids]
    tv, _ = tantivy_build(texts, work / "tantivy-scifact")
    b25, _ = bm25s_build(texts)
    fts, _ = sqlite_fts_build(texts, work / "fts5-scifact.sqlite3")

    def kg_mode(mode: str, fusion: str | None = None) -> Callable[[int], list[str]]:
        extra = {"fusion_type": fusion} if fusion else {}

        def call(i: int) -> list[str]:
            got = search_branch(services, OPERATOR, "scifact", "main", SearchRequest(
                query=queries[qids[i]], k=10, mode=mode, granularity="node", workspaces=["scifact"], **extra))
            return [r.path.rsplit("/", 1)[1] for r in got.results]
        return call

    def col(tbl_result: Any, column: str = "doc") -> list[str]:
        return tbl_result.column(column).to_pylist()

    calls: dict[str, Callable[[int], list[str]]] = {
        "kg fulltext": kg_mode("fulltext"),
        "kg vector": kg_mode("vector"),
        "kg hybrid (relative score, default)": kg_mode("hybrid"),
        "kg hybrid (RRF)": kg_mode("hybrid", "ranked"),
        "lancedb fts (documents)": lambda i: col(docs.search(queries[qids[i]], query_type="fts").limit(10)
                                                 .select(["doc", "_score"]).to_arrow()),
        "lancedb fts (passages)": lambda i: first_unique(col(passages.search(queries[qids[i]], query_type="fts")
                                                             .limit(50).select(["doc", "_score"]).to_arrow()), 10),
        "lancedb vector (flat, exact)": lambda i: first_unique(col(passages.search(qv[qids[i]]).distance_type("cosine")
                                                                   .limit(50).select(["doc", "_distance"])
                                                                   .to_arrow()), 10),
        "lancedb hybrid (RRF; FTS on passages)": lambda i: first_unique(col(
            passages.search(query_type="hybrid").vector(qv[qids[i]]).text(queries[qids[i]]).distance_type("cosine")
            .limit(50).select(["doc"]).to_arrow()), 10),
        "lancedb hybrid (RRF; FTS on each passage's document text)": lambda i: first_unique(col(
            passages_dt.search(query_type="hybrid").vector(qv[qids[i]]).text(queries[qids[i]])
            .distance_type("cosine").limit(50).select(["doc"]).to_arrow()), 10),
        "bm25s": lambda i: [dids[j] for j in bm25s_search(b25, queries[qids[i]], 10)],
        "tantivy": lambda i: [dids[j] for j in tantivy_search(tv, queries[qids[i]], 10)],
        "sqlite fts5": lambda i: [dids[j] for j in sqlite_fts_search(fts, queries[qids[i]], 10)],
    }
    ranked: dict[str, dict[int, list[str]]] = {name: {} for name in calls}
    log(f"quality: {len(qids)} queries x {len(calls)} engines, interleaved")
    samples = interleaved(calls, len(qids), warmup=3, check=lambda name, i, got: ranked[name].__setitem__(i, got))
    out: dict[str, Any] = {"documents": len(corpus), "passages": len(pieces), "queries": len(qids)}
    for name in calls:
        ndcg = statistics.fmean(ndcg_at(ranked[name][i], qrels[qids[i]], 10) for i in range(len(qids)))
        out[name] = {"ndcg_at_10": round(ndcg, 4), **summary(samples[name])}
        log(f"  {name}: nDCG@10 {out[name]['ndcg_at_10']:.4f}  p50 {out[name]['p50_ms']:.2f} ms")
    res["quality"] = out
    fig = "5 SciFact nDCG@10"
    pairs = [("kg fulltext", ["lancedb fts (documents)", "lancedb fts (passages)", "bm25s", "tantivy", "sqlite fts5"]),
             ("kg vector", ["lancedb vector (flat, exact)"]),
             ("kg hybrid (relative score, default)", ["lancedb hybrid (RRF; FTS on passages)",
                                                      "lancedb hybrid (RRF; FTS on each passage's document text)"]),
             ("kg hybrid (RRF)", ["lancedb hybrid (RRF; FTS on passages)",
                                  "lancedb hybrid (RRF; FTS on each passage's document text)"])]
    for kg_name, peers in pairs:
        for peer in peers:
            table.add(fig, "nDCG@10", kg_name.removeprefix("kg "), out[kg_name]["ndcg_at_10"], peer,
                      out[peer]["ndcg_at_10"], False)
    for kg_name, peer in (("kg fulltext", "bm25s"), ("kg vector", "lancedb vector (flat, exact)"),
                          ("kg hybrid (relative score, default)", "lancedb hybrid (RRF; FTS on passages)")):
        table.add("5 SciFact latency", "p50 ms (k 10, documents)", kg_name.removeprefix("kg "), out[kg_name]["p50_ms"],
                  peer, out[peer]["p50_ms"], True)
    fts.close()


# -- main -------------------------------------------------------------------------------------------


FIGURES = ("ingest", "knn", "lexical", "hybrid", "branch", "graph", "quality")


def versions(kg: Path) -> dict[str, Any]:
    out: dict[str, Any] = {"python": platform.python_version(), "sqlite": sqlite3.sqlite_version}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    try:
        out["kg_commit"] = subprocess.run(["git", "-C", str(kg), "rev-parse", "--short", "HEAD"], capture_output=True,
                                          text=True, check=True).stdout.strip()
    except (subprocess.CalledProcessError, FileNotFoundError):
        out["kg_commit"] = None
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kg", type=Path, required=True, help="a kg checkout (imported from there)")
    parser.add_argument("--size", type=int, default=100_000, help="N records (and nodes of the graph)")
    parser.add_argument("--out", type=Path, required=True, help="results JSON")
    parser.add_argument("--figures", nargs="+", choices=FIGURES, default=list(FIGURES))
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--ingest-rounds", type=int, default=None,
                        help="default 3 below 50,000 records, 2 from there (a round at 100,000: ~6 min at load 3)")
    parser.add_argument("--branch-rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--profile", type=int, default=50, help="kg calls profiled per figure (0: none)")
    parser.add_argument("--no-http", dest="http", action="store_false", help="skip the kg server figure")
    parser.add_argument("--work", type=Path, default=HERE / "results" / "peers",
                        help="engines' files (emptied; default bench/results/peers, git-ignored)")
    parser.add_argument("--cache", type=Path, default=None,
                        help="SciFact vectors (.npy), kept for later runs (default $KG_BENCH_CACHE/peers)")
    parser.add_argument("--scifact", type=Path, default=None,
                        help="SciFact in the BEIR layout (DATASETS/scifact): needed by the quality figure")
    parser.add_argument("--keep", action="store_true", help="keep --work afterwards")
    args = parser.parse_args(argv)
    if "quality" in args.figures and args.scifact is None:
        parser.error("the quality figure needs --scifact DATASETS/scifact (or leave it out of --figures)")
    use_kg(args.kg)
    import kg
    from bench._common import CACHE  # $KG_BENCH_CACHE, as the other dataset benchmarks

    args.cache = args.cache or CACHE / "peers"
    started = time.perf_counter()
    work = args.work / f"n{args.size}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    figures = set(args.figures)
    res: dict[str, Any] = {"command": " ".join([Path(sys.executable).name, *sys.argv]), "size": args.size,
                           "figures": sorted(figures), "versions": versions(args.kg), "cpus": os.cpu_count(),
                           "load_average": {"start": [round(x, 2) for x in os.getloadavg()]}}
    res["kg_imported_from"] = str(Path(kg.__file__).resolve().parent)
    log(f"kg {res['versions'].get('kg_commit')} (imported from {res['kg_imported_from']}) against peers, "
        f"N={args.size:,}, figures {sorted(figures)}")
    table = Table()
    needs = {"kg"}
    if figures & {"ingest", "knn", "lexical", "hybrid", "branch"}:
        needs |= {"lancedb"}
    if figures & {"ingest", "knn", "branch"}:
        needs |= {"chroma"}
    if figures & {"ingest", "knn"}:
        needs |= {"faiss", "hnswlib"}
    if figures & {"ingest", "lexical"}:
        needs |= {"tantivy", "bm25s", "sqlite_fts5"}
    data = generate(args.size, args.seed, work, args.queries)
    log(f"generated {args.size:,} records ({data['nodes_file'].stat().st_size / 2**20:.0f} MiB of kg NDJSON)")
    engines = fig_ingest(data, args, work, res, table, needs)
    if "ingest" not in figures:
        table.rows = []
    steps = [("knn", lambda: fig_knn(data, args, work, res, table, engines)),
             ("lexical", lambda: fig_lexical(data, args, res, table, engines)),
             ("hybrid", lambda: fig_hybrid(data, args, res, table, engines)),
             ("branch", lambda: fig_branch(data, args, work, res, table, engines))]
    for name, step in steps:
        if name in figures:
            res["load_average"][name] = [round(x, 2) for x in os.getloadavg()]
            step()
    for name in ("lancedb", "chroma", "faiss", "hnswlib", "tantivy", "bm25s", "sqlite_fts5"):
        engines.pop(name, None)
    gc.collect()
    if "graph" in figures:
        res["load_average"]["graph"] = [round(x, 2) for x in os.getloadavg()]
        fig_graph(data, args, work, res, table, engines)
    if "quality" in figures:
        res["load_average"]["quality"] = [round(x, 2) for x in os.getloadavg()]
        fig_quality(args, work, res, table, engines["kg"])
    engines["kg"].close()
    res["load_average"]["end"] = [round(x, 2) for x in os.getloadavg()]
    res["duration_s"] = round(time.perf_counter() - started, 1)
    res["table"] = table.rows
    text = table.render()
    print(text)
    print(f"load average start {res['load_average']['start']} end {res['load_average']['end']}; "
          f"{res['duration_s']:.0f} s")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=2, default=str) + "\n")
    log(f"wrote {args.out}")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return res


if __name__ == "__main__":
    main()
