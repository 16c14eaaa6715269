"""The static gates, run by ``make test`` like every other test: lint, types and docstrings.

Each gate is configured in ``pyproject.toml`` (``[tool.ruff]``, ``[tool.mypy]``) and runs the
tool installed by the ``test`` extra, so ``pytest`` alone shows a violation with its file and line.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_ruff():
    """``ruff check`` over the whole tree (kg, api, migrations, tests, bench, scripts)."""
    from ruff.__main__ import find_ruff_bin

    done = subprocess.run([find_ruff_bin(), "check", "--no-cache", "--output-format", "concise", "."],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy_core_strict():
    """``mypy`` over the store, the use cases, the indexing, the index, the MCP server, the typed contract, the
    client and the framework adapters: the ``[tool.mypy]`` overrides make it ``--strict`` for them."""
    done = _run("mypy", "kg/store", "kg/ops", "kg/context.py", "kg/indexing", "kg/index", "kg/mcp", "kg/types",
                "kg/client", "kg/adapters", "kg/sql")
    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy_kg_and_api():
    """``mypy kg api``: the rest of the library and the HTTP layer with mypy's defaults."""
    done = _run("mypy", "kg", "api")
    assert done.returncode == 0, done.stdout + done.stderr
