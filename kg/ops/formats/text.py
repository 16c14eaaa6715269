"""The ``text`` format: every file is a ``kg:Document`` holding its text as ``content``."""

from __future__ import annotations

import re
from pathlib import Path

from kg.ops.formats.base import FileNode

_SEGMENT_UNSAFE = re.compile(r"[^\w.\- ]+", re.UNICODE)


def _segment(name: str) -> str:
    """A file or folder name as a path segment."""
    cleaned = _SEGMENT_UNSAFE.sub("-", name).strip(" .-") or "file"
    return cleaned[:200]


def document_node(text: str, relative: Path) -> FileNode:
    """A plain document: ``content`` is the text, ``title`` its first heading or file name.

    Parameters
    ----------
    text : str
        The file's text.
    relative : Path
        The file's path below the ingested folder; the node's path follows it, without the
        suffix (``notes/a b.md`` -> ``/notes/a b``).

    Returns
    -------
    FileNode
        A ``kg:Document`` with ``title``, ``content`` and ``source``, and no relations.
    """
    title = relative.stem
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            title = stripped.lstrip("#").strip() or title
            break
        if stripped:
            break
    parts = [_segment(p) for p in relative.with_suffix("").parts]
    return FileNode("/" + "/".join(parts), "kg:Document",
                    {"title": title, "content": text, "source": relative.as_posix()},
                    source=relative.as_posix())


class TextFormat:
    """Plain text and markdown files as documents (the default format)."""

    name = "text"

    def read(self, text: str, relative: Path) -> FileNode:
        """The document of a file (:func:`document_node`).

        Parameters
        ----------
        text : str
            The file's text.
        relative : Path
            Its path below the ingested folder.

        Returns
        -------
        FileNode
        """
        return document_node(text, relative)

    def stub(self, path: str) -> FileNode | None:
        """None: a document asserts no relation.

        Parameters
        ----------
        path : str
            A relation's target path.

        Returns
        -------
        None
        """
        return None


TEXT_FORMAT = TextFormat()
