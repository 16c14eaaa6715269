"""What an ingest format gives: a node per file, its relations, the stubs of outside targets."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol


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


class IngestFormat(Protocol):
    """How one kind of file becomes a node (a plugin of :data:`kg.ops.formats.FORMATS`)."""

    name: str

    def read(self, text: str, relative: Path) -> FileNode:
        """The node of a file's text.

        Parameters
        ----------
        text : str
            The file's text (UTF-8 decoded).
        relative : Path
            Its path below the ingested folder.

        Returns
        -------
        FileNode
        """

    def stub(self, path: str) -> FileNode | None:
        """The node standing for a relation target no file of the corpus holds.

        Parameters
        ----------
        path : str
            The target's path.

        Returns
        -------
        FileNode or None
            None: the format makes no relation outside the corpus.
        """
