"""Issue 11's before/after figures of the use-case-layer redesign, through the HTTP API.

Five figures, each measured in-process through FastAPI's ``TestClient`` over
``api.app.create_app(Settings(...))`` (the HTTP API is the stable contract; the internal Python
APIs differ between the checkouts compared, so nothing here imports them except ``create_app``,
``Settings`` and the ``kg`` command line, which both have):

1. ``batch_1000_s``: ``POST /api/repos/{repo}/nodes:batch`` of 1,000 new nodes, wall time per
   call (the median call; one untimed call first). Each node is a small document
   (title, status, owner, priority, score and a one-sentence ``content``, so its text is planned
   and queued for indexing as a real write's is).
2. ``put_p50_ms``: ``PUT .../nodes/{path}`` replacing one existing node (200), p50 of its calls
   (each on a distinct node; 20 untimed first). Also reported: creating one (201).
3. ``search_p50_ms``: ``POST /api/repos/peps/search`` hybrid, k = 10, over the 150 PEPs
   ingested as ``make demo`` does (``kg ingest <docs> --repo peps --workspace peps``, the
   checkout's own command line in a subprocess); the queries are the 150 PEP titles of
   ``index.jsonl`` in turn, after 20 untimed queries; p50.
4. ``merge_100_ms``: ``POST .../branches/{b}/merge {"into": "main"}`` of a fresh branch with 100
   node changes (40 modified, 40 added, 20 deleted leaves, written on the branch in four
   ``nodes:batch`` calls of 25, as ``bench/diff_merge.py`` writes its changes) into a main of
   ``--merge-nodes`` nodes; the median merge (one untimed first). Each answer is
   checked (40 / 40 / 20 applied). Unlike diff_merge.py, no relation changes: the two
   checkouts treat a deleted endpoint's edges differently, and this is a like-for-like figure.
5. ``sql_per_put``: SQL statements of one replacing PUT, counted with a SQLAlchemy
   ``before_cursor_execute`` listener on the app's engine (median of 20 PUTs after the timed
   ones, without the timed ones; the JSON lists the last one's statements). Also counted: a creating PUT and a
   1,000-node batch.

The embedder is the deterministic offline ``fake:hash-384`` (``KG_EMBEDDING_MODEL``; the
``fake:hash-*`` models of the other benches and the tests; 384 = MiniLM's dimension): embedding
costs next to nothing, so the figures are kg's own. No background indexer runs during the
measurements (the app's lifespan is not entered): writes are answered once stored, as with the
default ``index_inline=False``, and their queued texts wait. SQLite in a temporary folder by
default; ``--postgres URL`` runs on a fresh schema of that server (dropped afterwards).

The calls are made in blocks (``BLOCKS``: 30 searches, 20 replacing PUTs, 20 creating PUTs,
one batch, one merge); a round is one block of each, ``--rounds`` rounds (default 20). A figure
is the p50 (or median call) over all its samples.

Modes::

    # one run of the code on PYTHONPATH (prints the figures; JSON in
    # bench/results/redesign_figures_run_<backend>.json, or --out)
    python bench/redesign_figures.py --dataset DATASETS/python-peps
    # old against new, each checkout in its own subprocess (PYTHONPATH=that checkout),
    # their blocks interleaved: old, new / new, old / ... (who goes first alternates)
    python bench/redesign_figures.py --dataset DATASETS/python-peps --compare OLD_CHECKOUT NEW_CHECKOUT [--rounds 20]

``--compare`` starts both checkouts' workers (each sets up its own database, ingest and
repositories), then runs every block in old and new back to back, a few seconds apart, so both
see the same machine load (2 cores shared with test suites here: a round-per-process design
saw PUT p50 ratios of 0.6 to 1.9 between rounds). It prints per figure old, new, new/old, and
the spread min / median / max of the new/old ratio of each pair of blocks and of the blocks'
own values, and writes ``bench/results/redesign_figures.json`` (``_postgresql`` with
``--postgres``).

This script never imports kg from its own checkout: it does not put its checkout on
``sys.path``; each subprocess checks that ``kg``, ``api`` and ``migrations`` (what
``kg.store.db.alembic_config`` resolves with ``resources.files("migrations")``) come from the
checkout it was started for.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy is imported

import argparse  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def _load_common():
    """bench/_common.py loaded by file: importing it as ``bench._common`` would need this
    checkout on sys.path, and then its ``kg`` could shadow the checkout measured."""
    spec = importlib.util.spec_from_file_location("_redesign_common", HERE / "_common.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


common = _load_common()

MODEL = "fake:hash-384"
STATUSES = ("draft", "review", "published", "archived")
OWNERS = ("ada", "grace", "linus", "barbara", "ken", "margaret")
WORDS = ("branch", "merge", "node", "graph", "index", "search", "revision", "workspace", "chunk",
         "vector", "relation", "agent", "query", "store", "batch", "history")

# (key, label, unit): the five figures of the issue, lower is better for all of them.
FIGURES = [
    ("batch_1000_s", "nodes:batch of 1,000 nodes (s/call)", "s"),
    ("put_p50_ms", "PUT one node, replace, p50 (ms)", "ms"),
    ("search_p50_ms", "hybrid search over the PEPs, p50 (ms)", "ms"),
    ("merge_100_ms", "merge of 100 node changes (ms)", "ms"),
    ("sql_per_put", "SQL statements per PUT (replace)", ""),
]
EXTRAS = [
    ("put_create_p50_ms", "PUT one node, create, p50 (ms)"),
    ("put_p90_ms", "PUT one node, replace, p90 (ms)"),
    ("search_p95_ms", "hybrid search, p95 (ms)"),
    ("sql_per_put_create", "SQL statements per PUT (create)"),
    ("sql_per_batch_1000", "SQL statements per 1,000-node batch"),
    ("ingest_s", "kg ingest of the 150 PEPs (s, set-up)"),
]


# -- one run (the subprocess of --compare, or a direct run) -----------------------------------


def doc(rng: random.Random, label: str) -> dict:
    """A small document node's properties, text included."""
    sentence = " ".join(rng.choice(WORDS) for _ in range(12))
    return {"title": label, "status": rng.choice(STATUSES), "owner": rng.choice(OWNERS),
            "priority": rng.randint(1, 5), "score": round(rng.random(), 4),
            "content": f"{label}: {sentence}."}


def expect(response, *statuses: int):
    if response.status_code not in statuses:
        raise SystemExit(f"{response.request.method} {response.request.url} answered "
                         f"{response.status_code}: {response.text[:500]}")
    return response


def check_imports(expect_root: str | None) -> dict:
    """Where kg, api and the migrations come from; exit when not from ``expect_root``."""
    from importlib import resources

    import api
    import kg
    import migrations
    from kg.store.db import alembic_config

    found = {"kg": str(Path(kg.__file__).resolve().parent.parent),
             "api": str(Path(api.__file__).resolve().parent.parent),
             "migrations": str(Path(str(resources.files("migrations"))).resolve().parent),
             "alembic_script_location": alembic_config("sqlite://").get_main_option("script_location")}
    assert Path(migrations.__file__).resolve().parent.parent == Path(found["migrations"])
    if expect_root is not None:
        root = Path(expect_root).resolve()
        wrong = {k: v for k, v in found.items()
                 if k != "alembic_script_location" and Path(v) != root}
        if wrong or Path(found["alembic_script_location"]).resolve() != root / "migrations":
            raise SystemExit(f"imports not from {root}: {found}")
    return found


def ingest(tmp: Path, url: str | None, docs: Path) -> float:
    """``kg ingest docs --repo peps --workspace peps`` with this interpreter and PYTHONPATH, as
    PEPs: ``--format pep`` where the checkout has ingest formats (the baseline read PEP headers
    of every file it ingested)."""
    env = dict(os.environ, KG_DATA_DIR=str(tmp / "data"), KG_EMBEDDING_MODEL=MODEL, KG_ALLOW_FAKE_EMBEDDER="1")
    if url is not None:
        env["KG_DATABASE_URL"] = url
    command = [sys.executable, "-c", "from kg.cli import main; main()", "ingest"]
    helped = subprocess.run([*command, "--help"], env=env, cwd=tmp, capture_output=True, text=True, check=False)
    as_pep = ["--format", "pep"] if "--format" in helped.stdout else []
    started = time.perf_counter()
    done = subprocess.run([*command, str(docs), "--repo", "peps", "--workspace", "peps", *as_pep], env=env,
                          cwd=tmp, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"kg ingest failed ({done.returncode}):\n{done.stderr[-2000:]}")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    if not report["files"] or report["index_failures"]:
        raise SystemExit(f"kg ingest: {report}")
    return time.perf_counter() - started


def timed(call, *args, **kwargs):
    """Seconds ``call(*args, **kwargs)`` took, and its answer."""
    started = time.perf_counter()
    response = call(*args, **kwargs)
    return time.perf_counter() - started, response


class Counter:
    """SQL statements executed on an engine while active (``statements``: the last count's,
    each its first line, cut at 100 characters)."""

    def __init__(self, engine):
        from sqlalchemy import event

        self.n = 0
        self.active = False
        self.statements: list[str] = []
        event.listen(engine, "before_cursor_execute", self._on)

    def _on(self, conn, cursor, statement, parameters, context, executemany):
        if self.active:
            self.n += 1
            self.statements.append(" ".join(statement.split())[:100])

    def count(self, call) -> int:
        self.n, self.active, self.statements = 0, True, []
        try:
            call()
        finally:
            self.active = False
        return self.n


class Worker:
    """The five figures' workloads on the code on sys.path, measured in blocks.

    :meth:`setup` ingests the PEPs and builds the repositories; each :meth:`block` call then
    measures a few calls of one figure and answers their samples. ``--compare`` drives one
    worker per checkout over a pipe and alternates their blocks, so both see the same load.
    """

    def __init__(self, args):
        self.args = args
        self.rng = random.Random(11)
        self.tmp = tempfile.TemporaryDirectory(prefix="kg-redesign-")
        self._db = None

    def setup(self) -> dict:
        for name in [n for n in os.environ if n.startswith("KG_")]:  # only what this run sets
            del os.environ[name]
        # The fake embedder is for tests and benches: a checkout that guards it needs this (one
        # that does not ignores it).
        os.environ["KG_ALLOW_FAKE_EMBEDDER"] = "1"
        imports = check_imports(self.args.expect_root)
        tmp = Path(self.tmp.name)
        self._db = common.isolated_database(self.args.postgres, tmp)
        url, backend = self._db.__enter__()
        ingest_s = ingest(tmp, url if self.args.postgres else None, self.args.dataset / "docs")
        from fastapi.testclient import TestClient

        from api.app import create_app
        from kg.settings import Settings

        settings = Settings(database_url=url if self.args.postgres else None, data_dir=tmp / "data",
                            embedding_model=MODEL, index_inline=False)
        self.app = create_app(settings)
        self.counter = Counter(self.app.state.services.db.engine)
        self.client = TestClient(self.app)  # no ``with``: the lifespan (indexer, job runner) stays off
        self.titles = [json.loads(line)["title"] for line in
                       (self.args.dataset / "index.jsonl").read_text().splitlines() if line.strip()]
        self._setup_search()
        self._setup_writes()
        self._setup_merge()
        return {"imports": imports, "backend": backend, "ingest_s": round(ingest_s, 3)}

    def close(self) -> None:
        self.app.state.services.close()
        if self._db is not None:
            self._db.__exit__(None, None, None)
        self.tmp.cleanup()

    def block(self, figure: str, n: int) -> dict:
        """``n`` timed calls of ``figure``: ``{"samples": [seconds...]}`` (``sql``: counts)."""
        return getattr(self, f"_block_{figure}")(n)

    # search: hybrid, k = 10, the PEP titles in turn
    def _search(self, q: str):
        return expect(self.client.post("/api/repos/peps/search", json={"query": q, "k": 10, "mode": "hybrid"}), 200)

    def _setup_search(self) -> None:
        hybrid = 0
        for q in self.titles[:20]:  # warm: the searchable set, the query embedder, the index files
            rows = self._search(q).json()["results"]
            hybrid += any(r["vector_rank"] is not None and r["fulltext_rank"] is not None for r in rows)
        if not hybrid:
            raise SystemExit("search: no row ranked by both legs; is the vector index loaded?")
        self.next_query = 0

    def _block_search(self, n: int) -> dict:
        samples = []
        for _ in range(n):
            q = self.titles[self.next_query % len(self.titles)]
            self.next_query += 1
            s, response = timed(self._search, q)
            if not response.json()["results"]:
                raise SystemExit(f"search: nothing found for {q!r}")
            samples.append(s)
        return {"samples": samples}

    # writes: repository "bench", workspace "docs"
    NODES = "/api/repos/bench/workspaces/docs/nodes"

    def _batch_call(self):
        j = self.next_batch
        self.next_batch += 1
        expect(self.client.put(f"{self.NODES}/b{j}", json={"node_type": "bench:Section",
                                                          "properties": {"title": f"Batch {j}"}}), 201)
        body = {"upserts": [{"workspace": "docs", "path": f"/b{j}/n{i}", "node_type": "bench:Doc",
                             "properties": doc(self.rng, f"Doc {j}.{i}")} for i in range(1000)]}
        self.replace_targets += [f"/b{j}/n{i}" for i in range(1000)]
        return lambda: self._batch_check(self.client.post("/api/repos/bench/nodes:batch", json=body))

    @staticmethod
    def _batch_check(response):
        expect(response, 200)
        if len(response.json()["upserted"]) != 1000:
            raise SystemExit("batch: not 1000 nodes upserted")
        return response

    def _put(self, path: str, status: int):
        return lambda: expect(self.client.put(f"{self.NODES}{path}", json={
            "node_type": "bench:Doc", "properties": doc(self.rng, f"Put {path}")}), status)

    def _setup_writes(self) -> None:
        expect(self.client.post("/api/repos", json={"name": "bench"}), 201)
        expect(self.client.post("/api/repos/bench/workspaces", json={"name": "docs"}), 201)
        self.next_batch, self.replace_targets, self.next_create = 0, [], 0
        self._batch_call()()  # untimed: the first batch, and nodes for the PUTs to replace
        self.rng.shuffle(self.replace_targets)
        for _ in range(20):
            self._put(self.replace_targets.pop(), 200)()
        expect(self.client.put(f"{self.NODES}/p", json={"node_type": "bench:Section",
                                                       "properties": {"title": "Puts"}}), 201)
        for _ in range(20):
            self._put_create()()

    def _put_create(self):
        self.next_create += 1
        return self._put(f"/p/c{self.next_create}", 201)

    def _block_batch(self, n: int) -> dict:
        samples = []
        for _ in range(n):
            s, _ = timed(self._batch_call())
            samples.append(s)
        self.rng.shuffle(self.replace_targets)
        return {"samples": samples}

    def _block_put(self, n: int) -> dict:
        return {"samples": [timed(self._put(self.replace_targets.pop(), 200))[0] for _ in range(n)]}

    def _block_put_create(self, n: int) -> dict:
        return {"samples": [timed(self._put_create())[0] for _ in range(n)]}

    def _block_sql(self, n: int) -> dict:
        put = [self.counter.count(self._put(self.replace_targets.pop(), 200)) for _ in range(n)]
        statements = self.counter.statements
        create = [self.counter.count(self._put_create()) for _ in range(n)]
        batch = self.counter.count(self._batch_call())
        return {"put": put, "put_statements": statements, "put_create": create, "batch_1000": batch}

    # merge: repository "merging", a fresh branch with 100 node changes merged into main
    def _setup_merge(self) -> None:
        expect(self.client.post("/api/repos", json={"name": "merging"}), 201)
        expect(self.client.post("/api/repos/merging/workspaces", json={"name": "docs"}), 201)
        section_size = 100
        self.sections = max(1, self.args.merge_nodes // section_size)
        self.alive: list[str] = []
        upserts = []
        for k in range(self.sections):
            upserts.append({"workspace": "docs", "path": f"/s{k}", "node_type": "bench:Section",
                            "properties": {"title": f"Section {k}"}})
            for i in range(section_size - 1):
                path = f"/s{k}/n{i}"
                upserts.append({"workspace": "docs", "path": path, "node_type": "bench:Doc",
                                "properties": doc(self.rng, f"Item {k}.{i}")})
                self.alive.append(path)
        for start in range(0, len(upserts), 1000):  # sections come before their leaves
            expect(self.client.post("/api/repos/merging/nodes:batch",
                                    json={"upserts": upserts[start:start + 1000]}), 200)
        self.main_nodes = self.sections * section_size
        self.merge_rep = 0
        self._merge_once()  # untimed

    def _merge_once(self) -> tuple[float, dict]:
        n_modify, n_add, n_delete = 40, 40, 20
        rep, rng, client = self.merge_rep, self.rng, self.client
        self.merge_rep += 1
        branch = f"change/m{rep}"
        expect(client.post("/api/repos/merging/branches", json={"name": branch, "from": "main"}), 201)
        delete = rng.sample(self.alive, n_delete)
        gone = set(delete)
        modify = rng.sample([p for p in self.alive if p not in gone], n_modify)
        adds = [f"/s{rng.randrange(self.sections)}/r{rep}-a{j}" for j in range(n_add)]
        self.alive = [p for p in self.alive if p not in gone] + adds
        ops = [("put", p) for p in modify + adds] + [("delete", p) for p in delete]
        rng.shuffle(ops)
        for start in range(0, len(ops), 25):
            chunk = ops[start:start + 25]
            body = {"upserts": [{"workspace": "docs", "path": p, "node_type": "bench:Doc",
                                 "properties": doc(rng, f"Changed {p}")} for op, p in chunk if op == "put"],
                    "deletes": [{"workspace": "docs", "path": p} for op, p in chunk if op == "delete"]}
            expect(client.post("/api/repos/merging/nodes:batch", params={"branch": branch}, json=body), 200)
        s, response = timed(client.post, f"/api/repos/merging/branches/{branch}/merge", json={"into": "main"})
        answer = expect(response, 200).json()
        applied = {kind: (len(v) if isinstance(v, list) else v)
                   for kind, v in answer["applied"]["nodes"].items() if kind in ("added", "modified", "deleted")}
        if applied != {"added": n_add, "modified": n_modify, "deleted": n_delete}:
            raise SystemExit(f"merge {rep}: applied {applied}")
        return s, answer

    def _block_merge(self, n: int) -> dict:
        samples, fast_forward = [], []
        for _ in range(n):
            s, answer = self._merge_once()
            samples.append(s)
            fast_forward.append(answer.get("fast_forward"))
        return {"samples": samples, "fast_forward": fast_forward, "main_nodes": self.main_nodes}


# The schedule: per round, one block of each figure: (figure, calls per block).
BLOCKS = [("search", 30), ("put", 20), ("put_create", 20), ("batch", 1), ("merge", 1)]


def serve_worker(args) -> None:
    """The subprocess of ``--compare``: set up, then answer block commands (JSON lines on
    stdin) with JSON lines on the original stdout (anything else printed goes to stderr)."""
    proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    worker = Worker(args)
    try:
        proto.write(json.dumps({"ready": worker.setup()}) + "\n")
        proto.flush()
        for line in sys.stdin:
            command = json.loads(line)
            if command.get("stop"):
                break
            proto.write(json.dumps(worker.block(command["figure"], command["n"])) + "\n")
            proto.flush()
    finally:
        worker.close()


class Remote:
    """A worker subprocess running one checkout (PYTHONPATH=that checkout)."""

    def __init__(self, name: str, checkout: Path, args):
        cmd = [sys.executable, str(Path(__file__).resolve()), "--serve", "--expect-root", str(checkout),
               "--merge-nodes", str(args.merge_nodes), "--dataset", str(args.dataset)]
        if args.postgres:
            cmd += ["--postgres", args.postgres]
        self.name, self.checkout = name, checkout
        self.proc = subprocess.Popen(cmd, env=dict(os.environ, PYTHONPATH=str(checkout)), cwd=tempfile.gettempdir(),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"the {self.name} worker ({self.checkout}) stopped: exit {self.proc.wait()}")
        return json.loads(line)

    def block(self, figure: str, n: int) -> dict:
        self.proc.stdin.write(json.dumps({"figure": figure, "n": n}) + "\n")
        self.proc.stdin.flush()
        return self.read()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.write(json.dumps({"stop": True}) + "\n")
            self.proc.stdin.flush()
        self.proc.wait(timeout=120)


def summarize(blocks: dict[str, list[list[float]]], sql: dict) -> dict:
    """The figures of one version from its blocks' samples (seconds)."""
    def p(figure: str, q: float) -> float:
        return round(common.percentile([x * 1000 for b in blocks[figure] for x in b], q), 3)

    return {"batch_1000_s": round(statistics.median([x for b in blocks["batch"] for x in b]), 4),
            "put_p50_ms": p("put", 50), "put_p90_ms": p("put", 90),
            "search_p50_ms": p("search", 50), "search_p95_ms": p("search", 95),
            "merge_100_ms": p("merge", 50), "put_create_p50_ms": p("put_create", 50),
            "sql_per_put": statistics.median(sql["put"]), "sql_per_put_create": statistics.median(sql["put_create"]),
            "sql_per_batch_1000": sql["batch_1000"]}


def block_value(figure: str, samples: list[float]) -> float:
    """One block's figure (its median), in the figure's unit."""
    m = statistics.median(samples)
    return m if figure == "batch" else m * 1000


FIGURE_OF_BLOCK = {"search": "search_p50_ms", "put": "put_p50_ms", "put_create": "put_create_p50_ms",
                   "batch": "batch_1000_s", "merge": "merge_100_ms"}


def spread(values: list[float]) -> dict:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def fmt(v: float, unit: str) -> str:
    if unit == "s":
        return f"{v:.3f}"
    if unit == "ms":
        return f"{v:.2f}"
    return f"{v:g}"


def compare(args) -> None:
    old, new = Path(args.compare[0]).resolve(), Path(args.compare[1]).resolve()
    names = ("old", "new")
    remotes = {"old": Remote("old", old, args), "new": Remote("new", new, args)}
    try:
        ready = {name: remotes[name].read()["ready"] for name in names}
        print("set up: " + ", ".join(f"{n} ingest {ready[n]['ingest_s']} s" for n in names), file=sys.stderr,
              flush=True)
        blocks = {n: {figure: [] for figure, _ in BLOCKS} for n in names}
        pair_ratios: dict[str, list[float]] = {figure: [] for figure, _ in BLOCKS}
        order_log = []
        for r in range(args.rounds):
            for i, (figure, n) in enumerate(BLOCKS):
                order = names if (r + i) % 2 == 0 else names[::-1]
                got = {}
                for name in order:
                    got[name] = remotes[name].block(figure, n)["samples"]
                    blocks[name][figure].append(got[name])
                order_log.append(f"{figure}:{order[0]}")
                pair_ratios[figure].append(block_value(figure, got["new"]) / block_value(figure, got["old"]))
            print(f"round {r + 1}/{args.rounds}: " + ", ".join(
                f"{f} {block_value(f, blocks['old'][f][-1]):.1f}/{block_value(f, blocks['new'][f][-1]):.1f}"
                for f, _ in BLOCKS) + f" (old/new; load {common.load_average()[0]})", file=sys.stderr, flush=True)
        sql = {name: remotes[name].block("sql", 20) for name in names}
    finally:
        for remote in remotes.values():
            remote.stop()

    summary = {n: summarize(blocks[n], sql[n]) for n in names}
    block_of = {v: k for k, v in FIGURE_OF_BLOCK.items()}
    rows, figures = [], {}
    for key, label, unit in FIGURES + [(k, label, "ms" if k.endswith("ms") else ("s" if k.endswith("_s") else ""))
                                       for k, label in EXTRAS]:
        if key == "ingest_s":
            o, n = ready["old"]["ingest_s"], ready["new"]["ingest_s"]
        else:
            o, n = summary["old"][key], summary["new"][key]
        ratio = n / o if o else float("nan")
        entry = {"label": label, "unit": unit, "old": o, "new": n, "ratio_new_old": round(ratio, 3),
                 "extra": key not in {k for k, _, _ in FIGURES}}
        figure = block_of.get(key)
        if figure is not None:
            entry["block_ratio_spread"] = {k: round(v, 3) for k, v in spread(pair_ratios[figure]).items()}
            entry["old_block_spread"] = spread([block_value(figure, b) for b in blocks["old"][figure]])
            entry["new_block_spread"] = spread([block_value(figure, b) for b in blocks["new"][figure]])
            sr, so, sn = entry["block_ratio_spread"], entry["old_block_spread"], entry["new_block_spread"]
            cells = [f"{sr['min']:.2f} / {sr['median']:.2f} / {sr['max']:.2f}",
                     f"{fmt(so['min'], unit)} / {fmt(so['max'], unit)}",
                     f"{fmt(sn['min'], unit)} / {fmt(sn['max'], unit)}"]
        elif key.startswith("sql_per_put"):
            vals = {v: sql[v]["put" if key == "sql_per_put" else "put_create"] for v in names}
            cells = ["(exact)", f"{min(vals['old'])} / {max(vals['old'])}", f"{min(vals['new'])} / {max(vals['new'])}"]
        else:
            cells = ["(one value)", "", ""]
        figures[key] = entry
        rows.append([label, fmt(o, unit), fmt(n, unit), f"{ratio:.2f}", *cells])
        if key == FIGURES[-1][0]:
            rows.append(["-- extras --", "", "", "", "", "", ""])
    backend = ready["old"]["backend"]
    print()
    print(f"{args.rounds} rounds of blocks, old = {old}, new = {new}, {backend}, embedder {MODEL}. "
          "old / new: over all samples (p50, or the median call); new/old: their ratio; block ratios: "
          "new/old of each pair of blocks run back to back (min / median / max); old, new min/max: "
          "the blocks' own medians")
    print(common.table(rows, ["figure", "old", "new", "new/old", "block ratios min/med/max",
                              "old blocks min/max", "new blocks min/max"]))
    worse = [figures[k]["label"] for k, _, _ in FIGURES if figures[k]["ratio_new_old"] > 1.1]
    print("worse than 1.1x old: " + (", ".join(worse) if worse else "none"))
    put = figures["put_p50_ms"]["ratio_new_old"]
    print(f"PUT p50 new/old {put:.2f} ({'faster' if put < 1 else 'not faster'})")

    results = {
        "benchmark": "redesign_figures", "backend": backend, "embedder": MODEL,
        "database": common.redact(args.postgres) if args.postgres else "sqlite (temporary file per worker)",
        "old": str(old), "new": str(new), "old_commit": _head(old), "new_commit": _head(new),
        "rounds": args.rounds, "blocks": BLOCKS, "first_of_each_pair": order_log,
        "parameters": {"merge_nodes": args.merge_nodes, "dataset": str(args.dataset)},
        "machine": common.machine(), "load_average_at_end": common.load_average(),
        "figures": figures, "setup": ready, "sql": sql,
        "samples_s": blocks,
    }
    out = args.out or common.RESULTS / ("redesign_figures.json" if backend == "sqlite"
                                        else f"redesign_figures_{backend}.json")
    common.write_results(results, out)


def run_local(args) -> None:
    """One checkout (the code on PYTHONPATH), in this process, the same schedule."""
    worker = Worker(args)
    try:
        ready = worker.setup()
        blocks = {figure: [] for figure, _ in BLOCKS}
        for _ in range(args.rounds):
            for figure, n in BLOCKS:
                blocks[figure].append(worker.block(figure, n)["samples"])
        sql = worker.block("sql", 20)
    finally:
        worker.close()
    answer = {**ready, **summarize(blocks, sql)}
    print(f"kg from {ready['imports']['kg']}, migrations {ready['imports']['alembic_script_location']}, "
          f"{ready['backend']}, embedder {MODEL}, {args.rounds} rounds of blocks")
    print(common.table([[label, answer[key]] for key, label, _ in FIGURES]
                       + [[label, answer[key]] for key, label in EXTRAS], ["figure", "value"]))
    common.write_results({"benchmark": "redesign_figures", "embedder": MODEL, "machine": common.machine(),
                          **answer, "sql": sql, "samples_s": blocks},
                         args.out or common.RESULTS / f"redesign_figures_run_{ready['backend']}.json")


def _head(checkout: Path) -> str | None:
    try:
        return subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--compare", nargs=2, metavar=("OLD_DIR", "NEW_DIR"),
                        help="run each checkout in its own subprocess, their blocks interleaved")
    parser.add_argument("--rounds", type=int, default=20, help="rounds of blocks (one block of each figure)")
    parser.add_argument("--postgres", metavar="URL", help="PostgreSQL server (a fresh schema per worker)")
    parser.add_argument("--merge-nodes", type=int, default=2000, help="nodes on main of the merge repository")
    parser.add_argument("--dataset", type=Path, required=True, help="the PEP dataset (docs/, index.jsonl)")
    parser.add_argument("--out", type=Path, help="JSON output (default bench/results/redesign_figures*.json)")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)  # the worker subprocess
    parser.add_argument("--expect-root", help=argparse.SUPPRESS)                 # its checkout
    args = parser.parse_args()
    if not (args.dataset / "index.jsonl").exists():
        args.dataset = ROOT / "fixtures" / "peps"
    if args.serve:
        serve_worker(args)
    elif args.compare:
        compare(args)
    else:
        run_local(args)


if __name__ == "__main__":
    main()
