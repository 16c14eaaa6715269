"""Each search index satisfies the protocol of its layout (kg/index/base.py), and only that one.

Checked twice: at run time through the ``runtime_checkable`` protocols (every member present),
and statically: the typed assignments below fail ``mypy`` when a signature drifts from its
protocol, and the last test runs ``mypy --strict`` over ``kg/index`` and this file (skipped where
mypy is not installed; it is in the ``test`` extra).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from kg.index.base import ContentAddressedIndex, ScopedIndex, SearchIndex, VectorIndex
from kg.index.embedded import EmbeddedVectorIndex
from kg.index.weaviate import WeaviateVectorIndex

ROOT = Path(__file__).resolve().parents[2]


def _embedded() -> ContentAddressedIndex:
    return EmbeddedVectorIndex(None)  # mypy: EmbeddedVectorIndex must be a ContentAddressedIndex


def _weaviate() -> ScopedIndex:
    return WeaviateVectorIndex("http://localhost:8080")  # connects on first use only


@pytest.mark.parametrize("make, protocol, other, layout, engine", [
    (_embedded, ContentAddressedIndex, ScopedIndex, "content-addressed", "embedded"),
    (_weaviate, ScopedIndex, ContentAddressedIndex, "scoped", "weaviate"),
])
def test_each_index_has_its_layouts_protocol_and_not_the_other(
        make: Callable[[], VectorIndex], protocol: type, other: type, layout: str, engine: str) -> None:
    index = make()
    assert isinstance(index, protocol)
    assert not isinstance(index, other)
    assert (index.layout, index.engine) == (layout, engine)
    index.close()


def test_callers_tell_the_layouts_apart_by_layout_alone() -> None:
    seen = []
    for index in (_embedded(), _weaviate()):
        either: VectorIndex = index
        common: SearchIndex = either
        if either.layout == "scoped":
            seen.append(("scoped", either.drop_workspace_model.__name__))  # narrowed: ScopedIndex
        else:
            seen.append(("content-addressed", either.watermark.__name__))  # ContentAddressedIndex
        common.close()
    assert seen == [("content-addressed", "watermark"), ("scoped", "drop_workspace_model")]


def test_the_index_package_type_checks_strictly(tmp_path: Path) -> None:
    api = pytest.importorskip("mypy.api")
    # Imported modules outside kg/index are read for their types, not checked themselves.
    out, err, status = api.run(["--strict", "--follow-imports=silent", "--cache-dir", str(tmp_path / "mypy"),
                                str(ROOT / "kg" / "index"), __file__])
    assert status == 0, out + err
