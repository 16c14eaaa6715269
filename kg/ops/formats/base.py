"""What an ingest format gives: a node per file, its relations, the stubs of outside targets."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class FileNode:
    """A node parsed from a file, and the ``(relation type, target path)`` relations it asserts in
    the same workspace; ``source`` is the file relative to the ingested folder (in the revision
    message), and the ingest adds ``sha256`` of its bytes to the properties.
    """

    path: str
    node_type: str
    properties: dict[str, Any]
    relations: list[tuple[str, str]] = field(default_factory=list)
    source: str = ""


@dataclass(frozen=True)
class IngestFormat:
    """How one kind of file becomes a node (a plugin of :data:`kg.ops.formats.FORMATS`).

    Attributes
    ----------
    read : callable(text, relative) -> FileNode
        The node of a file's text (UTF-8 decoded); ``relative`` is the file's path below the
        ingested folder.
    stub : callable(path) -> FileNode, or None
        The node standing for a relation target no file of the corpus holds; None: the format
        makes no relation outside the corpus.
    """

    name: str
    read: Callable[[str, Path], FileNode]
    stub: Callable[[str], FileNode] | None = None
