"""The static gates, run by ``make test`` like every other test: lint, types and docstrings.

Each gate is configured in ``pyproject.toml`` (``[tool.ruff]``, ``[tool.mypy]``) and runs the
tool installed by the ``test`` extra, so ``pytest`` alone shows a violation with its file and line.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_ruff():
    """``ruff check`` over the whole tree (kg, api, migrations, tests, bench, scripts)."""
    from ruff.__main__ import find_ruff_bin

    done = subprocess.run([find_ruff_bin(), "check", "--no-cache", "--output-format", "concise", "."],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="module")
def mypy_run() -> subprocess.CompletedProcess[str]:
    """One ``mypy`` over ``kg``, ``api`` and ``bench`` (one analysis of kg's import graph serves
    all three; ``pyproject.toml``'s overrides set each module's strictness)."""
    done = subprocess.run([sys.executable, "-m", "mypy", "--explicit-package-bases", "kg", "api", "bench"],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert re.search(r"^(Success: no issues|Found \d+ errors?) ", done.stdout, re.M), done.stdout + done.stderr
    return done


def test_mypy_kg_and_api(mypy_run):
    """``mypy kg api`` says nothing: ``--strict`` (the ``[tool.mypy]`` overrides) for the store, the
    use cases, the indexing, the index, the MCP server, the typed contract, the client and the
    framework adapters; mypy's defaults for the rest of the library and the HTTP layer."""
    errors = [line for line in mypy_run.stdout.splitlines() if line.startswith(("kg/", "api/"))]
    assert errors == [], "\n".join(errors)


def test_no_bench_script_reads_a_model_as_a_dict(mypy_run):
    """mypy over ``bench/`` names no :mod:`kg.types` model in an error: the use cases answer
    models, and a script that still reads one as a dict fails only when someone runs it
    (:func:`tests.unit.test_bench_scripts.model_complaints`)."""
    from tests.unit.test_bench_scripts import _model_names, model_complaints

    complaints = model_complaints(mypy_run.stdout, _model_names())
    assert complaints == [], "\n".join(complaints)
