"""What an ingest format gives: a node per file, its relations, the stubs of outside targets."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class FileNode:
    """A node parsed from a file with the ``(type, target path)`` relations it asserts in its
    workspace; ``source``: the file below the ingested folder. The ingest adds ``sha256``.
    """

    path: str
    node_type: str
    properties: dict[str, Any]
    relations: list[tuple[str, str]] = field(default_factory=list)
    source: str = ""


@dataclass(frozen=True)
class IngestFormat:
    """How one kind of file becomes a node: ``read(text, relative)`` gives a file's node (``relative``:
    its path below the ingested folder), ``stub(path)`` the node of a relation target no file holds
    (None: the format relates nothing outside the corpus).
    """

    name: str
    read: Callable[[str, Path], FileNode]
    stub: Callable[[str], FileNode] | None = None
