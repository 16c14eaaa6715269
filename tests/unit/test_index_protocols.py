"""Every search index is a :class:`~kg.index.base.SearchIndex` (kg/index/base.py), and no caller
asks which one it holds.

Checked at run time through the ``runtime_checkable`` protocol (every member present), and
statically: the typed functions below fail ``mypy`` when a signature drifts from the protocol,
and a test runs ``mypy --strict`` over ``kg/index`` and this file (skipped where mypy is not
installed; it is in the ``test`` extra). The last tests read the source: outside ``kg/index``
nothing dispatches on an engine's layout, and only the composition root names an engine.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from kg.errors import InvalidInput
from kg.index.base import CollectionScope, SearchIndex, SearchScope
from kg.index.embedded import EmbeddedVectorIndex
from kg.index.weaviate import WeaviateVectorIndex

ROOT = Path(__file__).resolve().parents[2]


def _embedded() -> SearchIndex:
    return EmbeddedVectorIndex(None)  # mypy: EmbeddedVectorIndex must be a SearchIndex


def _weaviate() -> SearchIndex:
    return WeaviateVectorIndex("http://localhost:8080")  # connects on first use only


@pytest.mark.parametrize("make, engine, native_hybrid, eager_catch_up", [
    (_embedded, "embedded", False, False),
    (_weaviate, "weaviate", True, True),
])
def test_each_index_is_a_search_index_stating_its_capabilities(
        make: Callable[[], SearchIndex], engine: str, native_hybrid: bool, eager_catch_up: bool) -> None:
    index = make()
    assert isinstance(index, SearchIndex)
    assert (index.engine, index.native_hybrid, index.eager_catch_up) == (engine, native_hybrid, eager_catch_up)
    index.close()


def test_an_index_without_native_hybrid_refuses_the_hybrid_query() -> None:
    index = _embedded()
    with pytest.raises(InvalidInput) as caught:
        index.hybrid("r", "query", np.ones(4), 5, model="m", scope=SearchScope())
    assert caught.value.code == "invalid_input"
    assert "no hybrid query of its own" in caught.value.message


def test_the_embedded_index_keeps_nothing_per_branch_or_model() -> None:
    index = _embedded()
    assert index.drop_branch("r", 7) == []
    assert index.drop_workspace_model("r", 1, "fake:hash-384") == []
    assert index.rewind("r", 10) is False


def test_a_scope_makes_its_collections_once_and_only_when_read() -> None:
    made: list[int] = []

    def collections() -> list[CollectionScope]:
        made.append(1)
        return []

    scope = SearchScope({"k"}, collections)
    assert made == [] and sorted(scope.content_keys) == ["k"]
    assert scope.collections == () and scope.collections == ()
    assert made == [1]


def _sources() -> list[Path]:
    """kg and api modules outside kg/index (and kg/data, the tokenizer)."""
    paths = [*(ROOT / "kg").rglob("*.py"), *(ROOT / "api").rglob("*.py")]
    return [p for p in paths if not p.relative_to(ROOT).as_posix().startswith(("kg/index/", "kg/data/"))]


def test_no_caller_dispatches_on_the_index_layout() -> None:
    pattern = re.compile(r"\.layout\b|\blayout\s*[!=]=")
    found = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}" for p in _sources()
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), start=1) if pattern.search(line)]
    assert found == []


def test_only_the_composition_root_names_an_engine() -> None:
    pattern = re.compile(r"\b(EmbeddedVectorIndex|WeaviateVectorIndex)\b")
    found = sorted({p.relative_to(ROOT).as_posix() for p in _sources()
                    if pattern.search(p.read_text(encoding="utf-8"))})
    assert found == ["kg/services.py"]


def test_the_index_package_type_checks_strictly(tmp_path: Path) -> None:
    api = pytest.importorskip("mypy.api")
    # Imported modules outside kg/index are read for their types, not checked themselves.
    out, err, status = api.run(["--strict", "--follow-imports=silent", "--cache-dir", str(tmp_path / "mypy"),
                                str(ROOT / "kg" / "index"), __file__])
    assert status == 0, out + err
