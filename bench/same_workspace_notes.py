"""Benchmark: how long ten small notes take to become searchable when they are written, over
HTTP, right after a 1 MB document in the same workspace, with the default local model.

For each source tree given (``--tree NAME=DIR``, e.g. the base commit and this checkout), in a
fresh SQLite file and data directory:

1. ``kg serve`` is started from that tree (``python -m kg.cli serve``, its background indexer
   on, ``KG_EMBEDDING_MODEL`` left at its default ``local:all-MiniLM-L6-v2``);
2. a repository ``r`` with one workspace ``w`` is created, and a ``--megabytes`` MB document is
   written to ``/handbook`` (``PUT``);
3. once ``index/status`` shows its job running and ``--lead-s`` seconds have passed, ten two-word
   notes are written to ``/note-0`` ... ``/note-9`` of the same workspace (timing starts when
   the first ``PUT`` is sent);
4. each note is searched (``POST .../search``, full text, its own word) every ``--poll-ms``
   until all ten are found: the figure is the time until the last one is.

The server is stopped (SIGTERM to the process this script started) once the figure is taken;
the large document need not finish. Prints one line per tree, then the ratio of the first tree's
figure to each other's, and writes JSON (default ``bench/results/same_workspace_notes.json``).
It never asserts times.

Run: ``python bench/same_workspace_notes.py --tree before=/tmp/kg-base --tree after=.``
(make the base tree with ``git archive <commit> | tar -x -C /tmp/kg-base``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import RESULTS, load_average, machine, write_results  # noqa: E402

WORDS = ("storage", "search", "graph", "branch", "merge", "index", "queue", "lease", "revision",
         "tombstone", "workspace", "relation", "chunk", "embedding", "hybrid", "fusion")
NOTE_WORDS = ("narwhal", "quokka", "axolotl", "pangolin", "okapi", "tapir", "wombat", "dugong", "ibex",
              "marmot")


def large_text(megabytes: float) -> str:
    """About ``megabytes`` MB of prose-like text (none of the notes' words)."""
    out, size, i = [], 0, 0
    while size < megabytes * 1_000_000:
        words = " ".join(WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(10))
        sentence = f"Section {i} of the handbook covers {words}. "
        out.append(sentence)
        size += len(sentence)
        i += 1
    return "".join(out)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def call(base: str, method: str, path: str, body: Any = None, timeout_s: float = 600.0) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        raw = response.read()
    return json.loads(raw) if raw else None


def wait_for(check, timeout_s: float, poll_s: float, what: str) -> float:
    started = time.perf_counter()
    while not check():
        if time.perf_counter() - started > timeout_s:
            raise SystemExit(f"{what}: not after {timeout_s} s")
        time.sleep(poll_s)
    return time.perf_counter() - started


def up(base: str) -> bool:
    try:
        call(base, "GET", "/api/health", timeout_s=2)
        return True
    except (urllib.error.URLError, ConnectionError, OSError):
        return False


def one_tree(name: str, tree: Path, text: str, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="kg-bench-notes-") as tmp_name:
        tmp = Path(tmp_name)
        port = free_port()
        env = {**os.environ, "KG_DATABASE_URL": f"sqlite:///{tmp / 'kg.sqlite3'}", "KG_DATA_DIR": str(tmp / "data"),
               "KG_HOST": "127.0.0.1", "KG_PORT": str(port), "PYTHONPATH": str(tree)}
        env.pop("KG_EMBEDDING_MODEL", None)
        env.pop("KG_INDEX_INLINE", None)
        log = open(tmp / "serve.log", "w")  # noqa: SIM115  # closed below
        server = subprocess.Popen([sys.executable, "-m", "kg.cli", "serve", "--port", str(port)], cwd=tree,
                                  env=env, stdout=log, stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{port}"
        try:
            wait_for(lambda: up(base) or server.poll() is not None, 120, 0.2, "kg serve")
            if server.poll() is not None:
                raise SystemExit(f"{name}: kg serve exited: {(tmp / 'serve.log').read_text()[-2000:]}")
            call(base, "POST", "/api/repos", {"name": "r"})
            call(base, "POST", "/api/repos/r/workspaces", {"name": "w"})
            nodes = "/api/repos/r/workspaces/w/nodes"
            call(base, "PUT", f"{nodes}/handbook", {"node_type": "kb:Document", "properties": {"content": text}})
            wait_for(lambda: call(base, "GET", "/api/repos/r/index/status")["running"] > 0, args.timeout_s,
                     0.1, "the document's job")
            time.sleep(args.lead_s)
            started = time.perf_counter()
            for i, word in enumerate(NOTE_WORDS):
                call(base, "PUT", f"{nodes}/note-{i}",
                     {"node_type": "kb:Note", "properties": {"content": f"{word} sighting"}})
            written_s = time.perf_counter() - started
            left = dict(enumerate(NOTE_WORDS))
            found_at: dict[int, float] = {}

            def all_found() -> bool:
                for i, word in list(left.items()):
                    hits = call(base, "POST", "/api/repos/r/search",
                                {"query": word, "mode": "fulltext", "k": 1, "workspaces": ["w"]})["results"]
                    if hits and hits[0]["path"] == f"/note-{i}":
                        found_at[i] = time.perf_counter() - started
                        del left[i]
                return not left

            wait_for(all_found, args.timeout_s, args.poll_ms / 1000, f"{name}: the notes")
            status = call(base, "GET", "/api/repos/r/index/status")
            return {"tree": name, "notes_searchable_s": round(max(found_at.values()), 2),
                    "first_note_searchable_s": round(min(found_at.values()), 2),
                    "writes_s": round(written_s, 2), "document_progress": status.get("progress"),
                    "load_average": load_average()}
        finally:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
            log.close()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", required=True, metavar="NAME=DIR",
                        help="a source tree to run kg serve from (repeat; the first is the reference)")
    parser.add_argument("--megabytes", type=float, default=1.0)
    parser.add_argument("--lead-s", type=float, default=2.0, help="embedding time before the notes, s")
    parser.add_argument("--poll-ms", type=float, default=100.0)
    parser.add_argument("--timeout-s", type=float, default=1200.0)
    parser.add_argument("--out", type=Path, default=RESULTS / "same_workspace_notes.json")
    args = parser.parse_args(argv)
    text = large_text(args.megabytes)
    results: dict[str, Any] = {"machine": machine(), "model": "local:all-MiniLM-L6-v2 (KG_EMBEDDING_MODEL default)",
                               "document_chars": len(text), "trees": []}
    for spec in args.tree:
        name, _, directory = spec.partition("=")
        row = one_tree(name, Path(directory).resolve(), text, args)
        results["trees"].append(row)
        print(f"{name}: ten notes searchable after {row['notes_searchable_s']} s "
              f"(first after {row['first_note_searchable_s']} s)", flush=True)
    first = results["trees"][0]
    for row in results["trees"][1:]:
        ratio = first["notes_searchable_s"] / max(row["notes_searchable_s"], 1e-9)
        row["speedup_vs_" + first["tree"]] = round(ratio, 1)
        print(f"ratio {first['tree']} / {row['tree']}: {ratio:.1f}x", flush=True)
    write_results(results, args.out)
    return results


if __name__ == "__main__":
    main()
