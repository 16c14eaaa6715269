"""How long other requests wait while a large graph view is built in the background, and after.

A branch of more relations than ``GraphCache.inline_build_max`` gets its networkx view built in
a background thread (:func:`kg.rag.graph.load_view`) while requests go on. The view holds about
three containers per relation that Python's cyclic garbage collector tracks; the collector's
passes hold the interpreter lock, so a pass that walks them makes every thread wait.

Each mode runs in a child process of its own (a fresh heap):

- ``held`` (the baseline, what a background build did before): the collector held for the
  load, then given back as it was;
- ``frozen`` (now): the same load, collecting and freezing (``gc.freeze``) every
  :data:`kg.rag.graph.FREEZE_EVERY` relations and at the end.

In each, a thread builds a view of ``--edges`` synthetic relations (power-law targets, among
``--edges / 5`` nodes), while the main thread serves a stand-in request arriving every millisecond
(open loop: its latency counts from its arrival, the wait for the interpreter lock included):
NEIGHBORS (limit 10) on a hub of a small warm view, plus the allocations a request makes (200
dicts and lists, 80 objects of them in reference cycles: a hybrid search through the use case
leaves 82 objects of cyclic garbage, SQLAlchemy's statements). It goes on for
``--after-s`` seconds after the build, when the collector's passes over the new objects come.
Reported per mode: the build's seconds, requests served, the requests' p50 / p99 / max latency
during the build and after it, and the time of one full ``gc.collect()`` once the view is built
(the pause that recurs whenever the oldest generation has grown by a quarter). The ratio is
frozen / held.

Prints a table and writes JSON (default ``bench/results/view_build_pause.json``). Run:
``python bench/view_build_pause.py [--edges 1000000] [--after-s 10]``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import RESULTS, load_average, machine, percentile, table, write_results  # noqa: E402

MODES = ("held", "frozen")
GIVEN_UP_MODES = ("dropped", "released")


def _edges(n_edges: int, seed: int):  # type: ignore[no-untyped-def]
    """``n_edges`` EdgeRows among ``n_edges // 5`` nodes, targets by a power law (hubs)."""
    import numpy as np

    from kg.graph.view import EdgeRow

    rng = np.random.default_rng(seed)
    n_nodes = max(n_edges // 5, 10)
    weights = 1.0 / np.arange(1, n_nodes + 1) ** 0.9
    weights /= weights.sum()
    types = ("cites", "mentions", "related_to")
    made = 0
    while made < n_edges:
        batch = min(100_000, n_edges - made)
        sources = rng.integers(n_nodes, size=batch).tolist()
        targets = rng.choice(n_nodes, size=batch, p=weights).tolist()
        kinds = rng.integers(len(types), size=batch).tolist()
        for a, b, t, i in zip(sources, targets, kinds, range(made, made + batch), strict=True):
            # distinct (from, type, to) keys: the edge number makes each relation type unique
            yield EdgeRow(f"n{a}", f"{types[t]}-{i % 7}", f"n{b}", round((i * 7919 % 1000) / 1000, 3), None)
        made += batch


def _resolve(ids: set[str]) -> dict[str, Any]:
    from kg.graph.view import NodeAddress

    return {i: NodeAddress("w", f"/{i}", f"w:/{i}") for i in ids}


def child(mode: str, n_edges: int, after_s: float, seed: int, heap: int = 0,
          max_edges: int | None = None) -> dict[str, Any]:
    """One mode in this process: the build in a thread, requests here; the figures. The
    given-up modes read ``n_edges`` relations with a budget of ``max_edges``."""
    import gc

    # The state a serving process holds before the build (other views, caches): ``heap``
    # containers the collector tracks, long-lived (promoted to the oldest generation).
    state = [[i] for i in range(heap)]
    gc.collect()

    from kg.graph.view import GraphView
    from kg.rag.graph import FREEZE_EVERY, load_view

    small = GraphView(1)
    assert load_view(small, _edges(10_000, seed + 1), _resolve)
    hub = "n0"
    given_up = mode in GIVEN_UP_MODES
    holder = [GraphView(1)]
    big = None if given_up else holder[0]  # a given-up build's view is the thread's alone
    finished: dict[str, float] = {}

    def build() -> None:
        start = time.perf_counter()
        graph = holder.pop()
        if given_up:  # past the budget: the build gives up at max_edges (a background build freezes)
            load_view(graph, _edges(n_edges, seed), _resolve, max_edges=max_edges, freeze_every=FREEZE_EVERY,
                      release=mode == "released")
            del graph  # "dropped": what was built is freed here, in one go
        else:
            load_view(graph, _edges(n_edges, seed), _resolve,
                      freeze_every=FREEZE_EVERY if mode == "frozen" else None)
        finished["s"] = time.perf_counter() - start
        finished["at"] = time.perf_counter()

    def request() -> None:
        with small.lock:
            small.neighbors(hub, limit=10)
        junk = [{"k": [i, str(i)]} for i in range(100)]
        for j in range(0, 80, 2):  # 40 dicts and their lists in cycles: 80 objects of cyclic garbage
            junk[j]["self"] = junk[j]

    for _ in range(200):
        request()
    gc.collect()
    during: list[float] = []
    after: list[float] = []
    thread = threading.Thread(target=build)
    thread.start()
    arrival = time.perf_counter()
    while True:
        # A request arrives every millisecond (open loop): its latency counts from its arrival,
        # so the wait for the interpreter lock and a backlog behind a pause are counted.
        arrival += 0.001
        wait = arrival - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        t = arrival
        request()
        took = (time.perf_counter() - t) * 1000
        if "at" not in finished:
            during.append(took)
        elif t - finished["at"] < after_s:
            after.append(took)
        else:
            break
    thread.join()
    start = time.perf_counter()
    gc.collect()
    full_pass_ms = (time.perf_counter() - start) * 1000

    def stats(samples: list[float]) -> dict[str, float]:
        if not samples:
            return {"requests": 0}
        return {"requests": len(samples), "p50_ms": round(percentile(samples, 50), 3),
                "p99_ms": round(percentile(samples, 99), 3), "max_ms": round(max(samples), 1)}

    del state
    return {"mode": mode, "edges": max_edges if big is None else big.edge_count, "heap_objects": heap,
            "build_s": round(finished["s"], 2),
            "during_build": stats(during), "after_build": stats(after),
            "full_gc_pass_ms": round(full_pass_ms, 1), "frozen_objects": gc.get_freeze_count()}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--edges", type=int, default=1_000_000)
    parser.add_argument("--after-s", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument("--heap", type=int, default=0,
                        help="containers the process holds before the build (a serving process's state)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--max-edges", type=int, default=None,
                        help="a budget below --edges: compare a build that gives up there and drops what it "
                             "built at once ('dropped', before) with one that releases it in slices ('released')")
    parser.add_argument("--child", choices=MODES + GIVEN_UP_MODES, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.edges, args.after_s, args.seed, args.heap, args.max_edges)))
        return {}
    runs = {}
    modes = GIVEN_UP_MODES if args.max_edges else MODES
    for mode in modes:
        done = subprocess.run([sys.executable, __file__, "--child", mode, "--edges", str(args.edges),
                               "--after-s", str(args.after_s), "--seed", str(args.seed), "--heap", str(args.heap),
                               *(["--max-edges", str(args.max_edges)] if args.max_edges else [])],
                              check=True, capture_output=True, text=True)
        runs[mode] = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"  {mode}: done", file=sys.stderr, flush=True)
    held, frozen = (runs[m] for m in modes)  # before, now

    def worst(r: dict[str, Any]) -> float:
        return max(r["during_build"].get("max_ms", 0.0), r["after_build"].get("max_ms", 0.0))

    ratios = {"worst_request": round(worst(frozen) / worst(held), 3),
              "full_gc_pass": round(frozen["full_gc_pass_ms"] / held["full_gc_pass_ms"], 4),
              "build_s": round(frozen["build_s"] / held["build_s"], 3)}
    rows = [
        ["build (s)", held["build_s"], frozen["build_s"]],
        ["requests during the build / p50 / p99 / max (ms)",
         *(f"{r['during_build']['requests']} / {r['during_build'].get('p50_ms')} / "
           f"{r['during_build'].get('p99_ms')} / {r['during_build'].get('max_ms')}" for r in (held, frozen))],
        [f"requests in {args.after_s:g} s after / p50 / p99 / max (ms)",
         *(f"{r['after_build']['requests']} / {r['after_build'].get('p50_ms')} / "
           f"{r['after_build'].get('p99_ms')} / {r['after_build'].get('max_ms')}" for r in (held, frozen))],
        ["one full gc.collect() with the view held (ms)", held["full_gc_pass_ms"], frozen["full_gc_pass_ms"]],
    ]
    print(table(rows, [f"{held['edges']:,} relations, {args.heap:,} objects held", f"{modes[0]} (before)",
                       f"{modes[1]} (now)"]))
    print(f"ratio {modes[1]} / {modes[0]}: worst request {ratios['worst_request']}, "
          f"full pass {ratios['full_gc_pass']}, build {ratios['build_s']}")
    results = {"benchmark": "view_build_pause", "machine": machine(), "load_average": load_average(),
               "edges": args.edges, "max_edges": args.max_edges, "heap_objects": args.heap,
               "after_s": args.after_s, "runs": runs, "ratios": ratios}
    write_results(results, args.out or RESULTS / "view_build_pause.json")
    return results


if __name__ == "__main__":
    main()
