"""Issue 11's before/after figures of the use-case-layer redesign, through the HTTP API.

Five figures, each measured in-process through FastAPI's ``TestClient`` over
``api.app.create_app(Settings(...))`` (the HTTP API is the stable contract; the internal Python
APIs differ between the checkouts compared, so nothing here imports them except ``create_app``,
``Settings`` and the ``kg`` command line, which both have):

1. ``batch_1000_s``: ``POST /api/repos/{repo}/nodes:batch`` of 1,000 new nodes, wall time per
   call (median of ``--batches`` calls after one untimed call). Each node is a small document
   (title, status, owner, priority, score and a one-sentence ``content``, so its text is planned
   and queued for indexing as a real write's is).
2. ``put_p50_ms``: ``PUT .../nodes/{path}`` replacing one existing node (200), p50 of ``--puts``
   calls on distinct nodes after 20 untimed ones. Also reported: creating one (201).
3. ``search_p50_ms``: ``POST /api/repos/peps/search`` hybrid, k = 10, over the 150 PEPs
   ingested as ``make demo`` does (``kg ingest <docs> --repo peps --workspace peps``, the
   checkout's own command line in a subprocess); the queries are the 150 PEP titles of
   ``index.jsonl``, ``--search-passes`` passes after 20 untimed queries; p50.
4. ``merge_100_ms``: ``POST .../branches/{b}/merge {"into": "main"}`` of a fresh branch with 100
   node changes (40 modified, 40 added, 20 deleted leaves, written on the branch in four
   ``nodes:batch`` calls of 25, as ``bench/diff_merge.py`` writes its changes) into a main of
   ``--merge-nodes`` nodes; median of ``--merges`` merges after one untimed one. Each answer is
   checked (40 / 40 / 20 applied). Unlike diff_merge.py, no relation changes: the two
   checkouts treat a deleted endpoint's edges differently, and this is a like-for-like figure.
5. ``sql_per_put``: SQL statements of one replacing PUT, counted with a SQLAlchemy
   ``before_cursor_execute`` listener on the app's engine (median of 20 PUTs, outside the timed
   ones; the JSON lists the last one's statements). Also counted: a creating PUT and a
   1,000-node batch.

The embedder is the deterministic offline ``fake:hash-384`` (``KG_EMBEDDING_MODEL``; the
``fake:hash-*`` models of the other benches and the tests; 384 = MiniLM's dimension): embedding
costs next to nothing, so the figures are kg's own. No background indexer runs during the
measurements (the app's lifespan is not entered): writes are answered once stored, as with the
default ``index_inline=False``, and their queued texts wait. SQLite in a temporary folder by
default; ``--postgres URL`` runs on a fresh schema of that server (dropped afterwards).

Modes::

    # one run of the code on PYTHONPATH (prints the figures; JSON in
    # bench/results/redesign_figures_run_<backend>.json, or --out)
    PYTHONPATH=/work/main python bench/redesign_figures.py
    # old against new, each checkout in its own subprocess (PYTHONPATH=that checkout),
    # interleaved over --rounds rounds, the order alternating (old, new, new, old, ...)
    python bench/redesign_figures.py --compare /work/wt-baseline /work/main [--rounds 5]

``--compare`` prints per figure old and new (median over rounds), new/old (ratio of those
medians) and the spread min / median / max of the per-round values and of the per-round ratios
(each round's old and new ran back to back, under the same machine load), and writes
``bench/results/redesign_figures.json`` (``_postgresql`` added with ``--postgres``).

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
DATASET = Path("/work/shared/datasets/python-peps")
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
    """``kg ingest docs --repo peps --workspace peps`` with this interpreter and PYTHONPATH."""
    env = dict(os.environ, KG_DATA_DIR=str(tmp / "data"), KG_EMBEDDING_MODEL=MODEL)
    if url is not None:
        env["KG_DATABASE_URL"] = url
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", "from kg.cli import main; main()", "ingest", str(docs),
                           "--repo", "peps", "--workspace", "peps"], env=env, cwd=tmp,
                          capture_output=True, text=True, check=False)
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


def run_once(args) -> dict:
    """Measure the five figures with the code on sys.path; the answer as a dict."""
    for name in [n for n in os.environ if n.startswith("KG_")]:  # only what this run sets
        del os.environ[name]
    imports = check_imports(args.expect_root)
    rng = random.Random(11)
    with tempfile.TemporaryDirectory(prefix="kg-redesign-") as tmp_name:
        tmp = Path(tmp_name)
        with common.isolated_database(args.postgres, tmp) as (url, backend):
            ingest_s = ingest(tmp, url if args.postgres else None, args.dataset / "docs")
            from fastapi.testclient import TestClient

            from api.app import create_app
            from kg.settings import Settings

            settings = Settings(database_url=url if args.postgres else None, data_dir=tmp / "data",
                                embedding_model=MODEL, index_inline=False)
            app = create_app(settings)
            services = app.state.services
            counter = Counter(services.db.engine)
            client = TestClient(app)  # no ``with``: the lifespan (indexer, job runner) stays off
            try:
                out = {"imports": imports, "backend": backend, "ingest_s": round(ingest_s, 3)}
                out.update(measure_search(client, args))
                out.update(measure_writes(client, counter, args, rng))
                out.update(measure_merge(client, args, rng))
            finally:
                services.close()
    return out


def measure_search(client, args) -> dict:
    titles = [json.loads(line)["title"] for line in (args.dataset / "index.jsonl").read_text().splitlines()
              if line.strip()]
    url = "/api/repos/peps/search"

    def one(q: str):
        return expect(client.post(url, json={"query": q, "k": 10, "mode": "hybrid"}), 200)

    hybrid = 0
    for q in titles[:20]:  # warm: the searchable set, the query embedder, the index files
        rows = one(q).json()["results"]
        hybrid += any(r["vector_rank"] is not None and r["fulltext_rank"] is not None for r in rows)
    if not hybrid:
        raise SystemExit("search: no row ranked by both legs; is the vector index loaded?")
    samples = []
    for _ in range(args.search_passes):
        for q in titles:
            s, response = timed(one, q)
            if not response.json()["results"]:
                raise SystemExit(f"search: nothing found for {q!r}")
            samples.append(s)
    ms = [s * 1000 for s in samples]
    return {"search_p50_ms": round(common.percentile(ms, 50), 3),
            "search_p95_ms": round(common.percentile(ms, 95), 3), "search_n": len(ms)}


def measure_writes(client, counter: Counter, args, rng: random.Random) -> dict:
    expect(client.post("/api/repos", json={"name": "bench"}), 201)
    expect(client.post("/api/repos/bench/workspaces", json={"name": "docs"}), 201)
    nodes = "/api/repos/bench/workspaces/docs/nodes"

    def batch_call(j: int):
        expect(client.put(f"{nodes}/b{j}", json={"node_type": "bench:Section",
                                                 "properties": {"title": f"Batch {j}"}}), 201)
        body = {"upserts": [{"workspace": "docs", "path": f"/b{j}/n{i}", "node_type": "bench:Doc",
                             "properties": doc(rng, f"Doc {j}.{i}")} for i in range(1000)]}
        return lambda: client.post("/api/repos/bench/nodes:batch", json=body)

    batch_s = []
    for j in range(args.batches + 1):
        call = batch_call(j)
        s, response = timed(call)
        expect(response, 200)
        if len(response.json()["upserted"]) != 1000:
            raise SystemExit("batch: not 1000 nodes upserted")
        if j:  # the first call is untimed
            batch_s.append(s)
    sql_batch = counter.count(lambda: expect(batch_call(args.batches + 1)(), 200))

    # PUT replacing an existing node: distinct nodes of /b0 .. /b{batches}, new properties.
    targets = [f"/b{j}/n{i}" for i in range(1000) for j in range(args.batches + 1)]
    rng.shuffle(targets)

    def put(path: str, status: int):
        return lambda: expect(client.put(f"{nodes}{path}", json={
            "node_type": "bench:Doc", "properties": doc(rng, f"Put {path}")}), status)

    it = iter(targets)
    for _ in range(20):
        put(next(it), 200)()
    put_s = [timed(put(next(it), 200))[0] for _ in range(args.puts)]
    sql_put = [counter.count(put(next(it), 200)) for _ in range(20)]
    put_statements = counter.statements

    expect(client.put(f"{nodes}/p", json={"node_type": "bench:Section", "properties": {"title": "Puts"}}), 201)
    for i in range(20):
        put(f"/p/w{i}", 201)()
    create_s = [timed(put(f"/p/c{i}", 201))[0] for i in range(args.puts)]
    sql_create = [counter.count(put(f"/p/s{i}", 201)) for i in range(20)]

    put_ms = [s * 1000 for s in put_s]
    return {"batch_1000_s": round(statistics.median(batch_s), 4), "batch_samples_s": [round(s, 4) for s in batch_s],
            "sql_per_batch_1000": sql_batch,
            "put_p50_ms": round(common.percentile(put_ms, 50), 3),
            "put_p90_ms": round(common.percentile(put_ms, 90), 3), "put_n": len(put_ms),
            "put_create_p50_ms": round(common.percentile([s * 1000 for s in create_s], 50), 3),
            "sql_per_put": statistics.median(sql_put), "sql_per_put_spread": [min(sql_put), max(sql_put)],
            "sql_put_statements": put_statements,
            "sql_per_put_create": statistics.median(sql_create),
            "sql_per_put_create_spread": [min(sql_create), max(sql_create)]}


def measure_merge(client, args, rng: random.Random) -> dict:
    n_modify, n_add, n_delete = 40, 40, 20
    expect(client.post("/api/repos", json={"name": "merging"}), 201)
    expect(client.post("/api/repos/merging/workspaces", json={"name": "docs"}), 201)
    section_size = 100
    sections = max(1, args.merge_nodes // section_size)
    alive: list[str] = []
    upserts = []
    for k in range(sections):
        upserts.append({"workspace": "docs", "path": f"/s{k}", "node_type": "bench:Section",
                        "properties": {"title": f"Section {k}"}})
        for i in range(section_size - 1):
            path = f"/s{k}/n{i}"
            upserts.append({"workspace": "docs", "path": path, "node_type": "bench:Doc",
                            "properties": doc(rng, f"Item {k}.{i}")})
            alive.append(path)
    for start in range(0, len(upserts), 1000):  # sections come before their leaves
        expect(client.post("/api/repos/merging/nodes:batch", json={"upserts": upserts[start:start + 1000]}), 200)

    merge_s, fast_forward = [], []
    for rep in range(args.merges + 1):
        branch = f"change/m{rep}"
        expect(client.post("/api/repos/merging/branches", json={"name": branch, "from": "main"}), 201)
        delete = rng.sample(alive, n_delete)
        gone = set(delete)
        modify = rng.sample([p for p in alive if p not in gone], n_modify)
        alive = [p for p in alive if p not in gone]
        adds = [f"/s{rng.randrange(sections)}/r{rep}-a{j}" for j in range(n_add)]
        alive += adds
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
        if rep:
            merge_s.append(s)
            fast_forward.append(answer.get("fast_forward"))
    return {"merge_100_ms": round(statistics.median(merge_s) * 1000, 3),
            "merge_samples_ms": [round(s * 1000, 3) for s in merge_s],
            "merge_fast_forward": sorted(set(map(str, fast_forward))),
            "merge_main_nodes": sections * section_size}


# -- --compare: the checkouts in subprocesses, interleaved ------------------------------------


def child(checkout: Path, args, out: Path) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--emit", str(out), "--expect-root", str(checkout),
           "--batches", str(args.batches), "--puts", str(args.puts), "--merges", str(args.merges),
           "--merge-nodes", str(args.merge_nodes), "--search-passes", str(args.search_passes),
           "--dataset", str(args.dataset)]
    if args.postgres:
        cmd += ["--postgres", args.postgres]
    env = dict(os.environ, PYTHONPATH=str(checkout))
    started = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, cwd=tempfile.gettempdir())
    answer = json.loads(out.read_text())
    answer["wall_s"] = round(time.perf_counter() - started, 1)
    answer["load_average_after"] = common.load_average()
    return answer


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
    runs: dict[str, list[dict]] = {"old": [], "new": []}
    order_log = []
    with tempfile.TemporaryDirectory(prefix="kg-redesign-cmp-") as tmp_name:
        for r in range(args.rounds):
            order = ("old", "new") if r % 2 == 0 else ("new", "old")
            for name in order:
                checkout = old if name == "old" else new
                print(f"round {r + 1}/{args.rounds}: {name} ({checkout}) ...", file=sys.stderr, flush=True)
                answer = child(checkout, args, Path(tmp_name) / f"{name}-{r}.json")
                runs[name].append(answer)
                order_log.append(name)
                print(f"  {name}: " + ", ".join(f"{k} {answer[k]}" for k, _, _ in FIGURES)
                      + f" ({answer['wall_s']} s)", file=sys.stderr, flush=True)

    rows, figures = [], {}
    for key, label, unit in FIGURES + [(k, label, "ms" if k.endswith("ms") else ("s" if k.endswith("_s") else ""))
                                       for k, label in EXTRAS]:
        o = [run[key] for run in runs["old"]]
        n = [run[key] for run in runs["new"]]
        ratios = [b / a for a, b in zip(o, n) if a]
        so, sn, sr = spread(o), spread(n), spread(ratios)
        ratio = sn["median"] / so["median"] if so["median"] else float("nan")
        figures[key] = {"label": label, "unit": unit, "old": o, "new": n, "old_spread": so, "new_spread": sn,
                        "ratio_new_old": round(ratio, 3), "round_ratio_spread": {k: round(v, 3) for k, v in sr.items()},
                        "extra": key not in {k for k, _, _ in FIGURES}}
        rows.append([label, fmt(so["median"], unit), fmt(sn["median"], unit), f"{ratio:.2f}",
                     f"{sr['min']:.2f} / {sr['median']:.2f} / {sr['max']:.2f}",
                     f"{fmt(so['min'], unit)} / {fmt(so['max'], unit)}",
                     f"{fmt(sn['min'], unit)} / {fmt(sn['max'], unit)}"])
        if key == FIGURES[-1][0]:
            rows.append(["-- extras --", "", "", "", "", "", ""])
    backend = runs["old"][0]["backend"]
    print()
    print(f"{args.rounds} rounds, old = {old}, new = {new}, {backend}, embedder {MODEL}; "
          "per figure the median over rounds; ratio = new / old of those medians")
    print(common.table(rows, ["figure", "old", "new", "new/old", "round ratios min/med/max",
                              "old min/max", "new min/max"]))
    worse = [figures[k]["label"] for k, _, _ in FIGURES if figures[k]["ratio_new_old"] > 1.1]
    print("worse than 1.1x old: " + (", ".join(worse) if worse else "none"))
    put = figures["put_p50_ms"]["ratio_new_old"]
    print(f"PUT p50 new/old {put:.2f} ({'faster' if put < 1 else 'not faster'})")

    results = {
        "benchmark": "redesign_figures", "backend": backend, "embedder": MODEL,
        "database": common.redact(args.postgres) if args.postgres else "sqlite (temporary file per run)",
        "old": str(old), "new": str(new),
        "old_commit": _head(old), "new_commit": _head(new),
        "rounds": args.rounds, "order": order_log,
        "parameters": {"batches": args.batches, "puts": args.puts, "merges": args.merges,
                       "merge_nodes": args.merge_nodes, "search_passes": args.search_passes,
                       "dataset": str(args.dataset)},
        "machine": common.machine(), "load_average_at_end": common.load_average(),
        "figures": figures, "runs": runs,
    }
    out = args.out or common.RESULTS / ("redesign_figures.json" if backend == "sqlite"
                                        else f"redesign_figures_{backend}.json")
    common.write_results(results, out)


def _head(checkout: Path) -> str | None:
    try:
        return subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--compare", nargs=2, metavar=("OLD_DIR", "NEW_DIR"),
                        help="run each checkout in its own subprocess, interleaved over --rounds")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--postgres", metavar="URL", help="PostgreSQL server (a fresh schema per run)")
    parser.add_argument("--batches", type=int, default=5, help="timed 1,000-node batch calls per run")
    parser.add_argument("--puts", type=int, default=200, help="timed PUTs per run (replace, and create)")
    parser.add_argument("--merges", type=int, default=5, help="timed merges per run")
    parser.add_argument("--merge-nodes", type=int, default=2000, help="nodes on main of the merge repository")
    parser.add_argument("--search-passes", type=int, default=2, help="passes over the 150 title queries")
    parser.add_argument("--dataset", type=Path, default=DATASET, help="the PEP dataset (docs/, index.jsonl)")
    parser.add_argument("--out", type=Path, help="JSON output (default bench/results/redesign_figures*.json)")
    parser.add_argument("--emit", type=Path, help=argparse.SUPPRESS)         # subprocess: JSON here
    parser.add_argument("--expect-root", help=argparse.SUPPRESS)             # subprocess: its checkout
    args = parser.parse_args()
    if not (args.dataset / "index.jsonl").exists():
        args.dataset = ROOT / "fixtures" / "peps"
    if args.compare:
        compare(args)
        return
    answer = run_once(args)
    if args.emit:
        args.emit.write_text(json.dumps(answer))
        return
    print(f"kg from {answer['imports']['kg']}, migrations {answer['imports']['alembic_script_location']}, "
          f"{answer['backend']}, embedder {MODEL}")
    print(common.table([[label, answer[key]] for key, label, _ in FIGURES]
                       + [[label, answer[key]] for key, label in EXTRAS], ["figure", "value"]))
    common.write_results({"benchmark": "redesign_figures", "embedder": MODEL, "machine": common.machine(), **answer},
                         args.out or common.RESULTS / f"redesign_figures_run_{answer['backend']}.json")


if __name__ == "__main__":
    main()
