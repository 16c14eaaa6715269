"""Helpers shared by the benchmarks: an isolated database, machine facts, percentiles, output.

Not a benchmark itself (the leading underscore keeps it apart from the scripts).
"""

from __future__ import annotations

import json
import math
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
#: Kept databases, indexes and embeddings of the dataset benchmarks (outside git): ``KG_BENCH_CACHE``,
#: default ``~/.cache/kg-bench``.
CACHE = Path(os.environ.get("KG_BENCH_CACHE") or Path.home() / ".cache" / "kg-bench")


@contextmanager
def isolated_database(url: str | None, tmp: Path) -> Iterator[tuple[str, str]]:
    """A database URL for one benchmark run, and its backend name.

    ``None`` gives a SQLite file in ``tmp``. A PostgreSQL URL gets a fresh schema (selected
    with ``options=-csearch_path=...``, as ``tests/conftest.py`` does), dropped afterwards.
    Any other URL is used as given.
    """
    if url is None:
        yield f"sqlite:///{tmp / 'kg.sqlite3'}", "sqlite"
        return
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    backend = make_url(url).get_backend_name()
    if backend != "postgresql":
        yield url, backend
        return
    schema = f"kg_bench_{uuid.uuid4().hex[:12]}"
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    sep = "&" if "?" in url else "?"
    try:
        yield f"{url}{sep}options=-csearch_path%3D{schema}", backend
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


def load_average() -> list[float]:
    """1, 5 and 15 minute load averages, rounded."""
    return [round(x, 2) for x in os.getloadavg()]


def machine() -> dict[str, Any]:
    """Facts that make figures comparable: versions, cores, load, thread settings."""
    import numpy as np
    import sqlalchemy

    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "numpy": np.__version__,
        "sqlalchemy": sqlalchemy.__version__,
        "cpus": os.cpu_count(),
        "load_average_at_start": load_average(),
        "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS"),
    }


def percentile(samples: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) by linear interpolation between order statistics."""
    ordered = sorted(samples)
    if not ordered:
        return math.nan
    pos = (len(ordered) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summary_ms(samples_s: Sequence[float]) -> dict[str, float]:
    """Median, p90, min and max of durations given in seconds, in milliseconds."""
    ms = [s * 1000 for s in samples_s]
    return {
        "n": len(ms),
        "median_ms": round(statistics.median(ms), 3),
        "p90_ms": round(percentile(ms, 90), 3),
        "min_ms": round(min(ms), 3),
        "max_ms": round(max(ms), 3),
    }


def redact(url: str) -> str:
    """The URL without its password."""
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def write_results(results: dict[str, Any], out: Path) -> None:
    """Write ``results`` as indented JSON and say where."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    shown = out.relative_to(ROOT) if out.is_relative_to(ROOT) else out
    print(f"wrote {shown}")


def table(rows: Sequence[Sequence[Any]], header: Sequence[str]) -> str:
    """A plain-text table, columns right-aligned except the first."""
    cells = [[str(c) for c in header]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = []
    for n, row in enumerate(cells):
        lines.append("  ".join(
            c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(row)
        ))
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def start_serve(env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    """``kg serve`` with ``env`` on a free loopback port, once ``/health`` answers: (the process,
    its base URL). Stop it with ``terminate()``."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "kg.cli", "serve", "--port", str(port)], env=env, cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                return proc, base
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("kg serve did not start in 60 s")


def kg_cli(env: dict[str, str], *args: str) -> str:
    """What ``kg <args>`` prints with ``env`` (``keys create`` prints the key as JSON)."""
    return subprocess.run([sys.executable, "-m", "kg.cli", *args], env=env, cwd=ROOT, capture_output=True,
                          text=True, check=True).stdout


def serve_env(data: Path, model: str, pepper: str) -> dict[str, str]:
    """The environment of a benchmark's ``kg serve``: no ``KG_`` variable of the caller's, the data
    in ``data``, auth on with ``pepper``, the (fake) embedder ``model``, inline indexing."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KG_")}
    env.update({"KG_DATA_DIR": str(data), "KG_EMBEDDING_MODEL": model, "KG_ALLOW_FAKE_EMBEDDER": "true",
                "KG_INDEX_INLINE": "true", "KG_AUTH": "true", "KG_KEY_PEPPER": pepper, "OPENBLAS_NUM_THREADS": "1"})
    return env


def pep_upserts(workspace: str) -> list[dict[str, Any]]:
    """The 150 PEPs of ``fixtures/peps`` as batch upserts: ``/pep-NNNN``, type ``pep:PEP``, the
    title and the first 4,000 characters."""
    upserts = []
    for path in sorted((ROOT / "fixtures" / "peps" / "docs").glob("pep-*.rst")):
        text = path.read_text(encoding="utf-8")
        title = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Title:")),
                     path.stem)
        upserts.append({"workspace": workspace, "path": f"/{path.stem}", "node_type": "pep:PEP",
                        "properties": {"title": title, "content": text[:4000]}})
    return upserts
