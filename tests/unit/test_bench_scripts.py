"""The benchmark scripts keep up with the library they measure.

The use cases answer :mod:`kg.types` models; a script that still reads one as a dict
(``result["x"]``, ``result.get("x")``) fails only when someone runs it, possibly months later.
Two cheap checks: every script imports (its module-level imports resolve), and mypy, run over
``bench/`` (``check_untyped_defs`` for ``bench.*`` in ``pyproject.toml``), says nothing about a
:mod:`kg.types` model in a script (``tests/unit/test_gates.py``, in the gates' one mypy run).
Other complaints mypy has about the scripts (loose
annotations of their own dicts) are not what this guards.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest
from pydantic import BaseModel

import kg.types

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(p.stem for p in (ROOT / "bench").glob("*.py"))


def _model_names() -> set[str]:
    """The class names of every pydantic model :mod:`kg.types` defines."""
    names = set()
    for info in pkgutil.iter_modules(kg.types.__path__, "kg.types."):
        module = importlib.import_module(info.name)
        names |= {name for name, value in vars(module).items()
                  if inspect.isclass(value) and issubclass(value, BaseModel) and value.__module__ == info.name}
    return names


def model_complaints(mypy_output: str, models: set[str]) -> list[str]:
    """mypy's error lines about a script (``bench/...``) that name one of ``models``."""
    return [line for line in mypy_output.splitlines()
            if line.startswith("bench/") and ": error:" in line
            and models & set(re.findall(r'"(\w+)"', line.split(": error:", 1)[1]))]


@pytest.mark.parametrize("name", SCRIPTS)
def test_script_imports(name: str, monkeypatch: pytest.MonkeyPatch):
    """Each script imports as the others import it (``bench.<name>``, the checkout on ``sys.path``)."""
    monkeypatch.syspath_prepend(str(ROOT))
    module = importlib.import_module(f"bench.{name}")
    assert module.__file__ is not None and Path(module.__file__).parent == ROOT / "bench"


def test_model_complaints_catch_a_dict_read():
    """The filter keeps a model read as a dict and drops mypy's other complaints."""
    models = _model_names()
    assert {"AskOutput", "NdjsonImport", "GraphContextOutput"} <= models
    output = "\n".join([
        'bench/a.py:3: error: Value of type "AskOutput" is not indexable  [index]',
        'bench/b.py:4: error: "NdjsonImport" has no attribute "get"  [attr-defined]',
        'bench/c.py:5: error: Need type annotation for "samples"  [var-annotated]',
        'kg/x.py:6: error: Value of type "AskOutput" is not indexable  [index]',
    ])
    assert [line.split(":")[0] for line in model_complaints(output, models)] == ["bench/a.py", "bench/b.py"]
