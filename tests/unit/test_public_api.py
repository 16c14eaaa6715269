"""The library's public surface is declared: each public module lists what it offers in
``__all__``, every name listed exists, and every public function or class a module defines is
listed (a new one is either declared or given a leading underscore, never public by accident).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest
from pydantic import BaseModel

import kg.types

#: The modules a program using kg as a library imports: the client, the contract, the errors,
#: the use cases and the agent functions, the unit of work, settings and services, the adapters.
PUBLIC_MODULES = [
    "kg.client", "kg.client.client", "kg.types", "kg.errors", "kg.context", "kg.settings", "kg.services",
    "kg.adapters.langchain", "kg.adapters.llamaindex", "kg.adapters.hits", "kg.backup",
    "kg.ops.nodes", "kg.ops.relations", "kg.ops.queries", "kg.ops.branches", "kg.ops.repos", "kg.ops.keys",
    "kg.ops.lineage", "kg.ops.ingest", "kg.ops.texts", "kg.ops.webhooks", "kg.ops.observability",
    "kg.ops.bulk", "kg.ops.memory",
    "kg.rag.search", "kg.rag.functions", "kg.rag.graph", "kg.rag.entities", "kg.rag.resolve",
]


def _optional(name: str) -> bool:
    return name.startswith("kg.adapters.")


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_a_public_module_declares_its_surface(name):
    try:
        module = importlib.import_module(name)
    except ImportError:  # an adapter whose framework (an optional extra) is not installed
        if _optional(name):
            pytest.skip(f"{name}: its extra is not installed")
        raise
    declared = getattr(module, "__all__", None)
    assert isinstance(declared, list | tuple), f"{name} declares no __all__"
    assert len(declared) == len(set(declared)), f"{name}.__all__ names something twice"
    missing = [n for n in declared if not hasattr(module, n)]
    assert missing == [], f"{name}.__all__ names what it does not define: {missing}"
    undeclared = sorted(n for n, obj in vars(module).items()
                        if not n.startswith("_") and (inspect.isfunction(obj) or inspect.isclass(obj))
                        and getattr(obj, "__module__", None) == name and n not in declared)
    assert undeclared == [], f"{name} defines public names it does not declare in __all__: {undeclared}"


def test_the_contract_exports_every_model_of_its_modules():
    """``from kg.types import X`` reaches every request and result model of the contract."""
    models = {obj.__name__ for info in pkgutil.iter_modules(kg.types.__path__, "kg.types.")
              for obj in vars(importlib.import_module(info.name)).values()
              if inspect.isclass(obj) and issubclass(obj, BaseModel) and obj.__module__ == info.name
              and not obj.__name__.startswith("_") and "[" not in obj.__name__}  # not a generic's alias
    assert sorted(models - set(kg.types.__all__)) == []


def test_the_check_sees_an_undeclared_function(tmp_path, monkeypatch):
    """The rule itself: a module defining a public function it does not declare fails it."""
    (tmp_path / "kg_surface_probe.py").write_text("__all__ = ['declared']\n\ndef declared(): ...\n\ndef stray(): ...\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("kg_surface_probe")
    undeclared = [n for n, obj in vars(module).items() if inspect.isfunction(obj) and not n.startswith("_")
                  and obj.__module__ == "kg_surface_probe" and n not in module.__all__]
    assert undeclared == ["stray"]
