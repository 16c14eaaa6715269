"""What an ingest format gives: a node per file, its relations, the stubs of outside targets."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class FileNode:
    """A node parsed from a file, and the relations it asserts to other paths.

    Attributes
    ----------
    path : str
        The node's path.
    node_type : str
    properties : dict
        Its JSON properties (the ingest adds ``sha256``, of the file's bytes).
    relations : list of (str, str)
        ``(relation type, target path)`` in the same workspace.
    source : str
        The file, relative to the ingested folder (recorded in the revision message).
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
    name : str
        What ``kg ingest --format`` calls it.
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
