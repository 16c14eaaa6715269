"""The ``text`` format: every file is a ``kg:Document`` holding its text as ``content``."""

from __future__ import annotations

import re
from pathlib import Path

from kg.ops.formats.base import FileNode, IngestFormat

_SEGMENT_UNSAFE = re.compile(r"[^\w.\- ]+", re.UNICODE)


def _segment(name: str) -> str:
    """A file or folder name as a path segment."""
    cleaned = _SEGMENT_UNSAFE.sub("-", name).strip(" .-") or "file"
    return cleaned[:200]


def document_node(text: str, relative: Path) -> FileNode:
    """A ``kg:Document`` with ``content``, ``title`` (first heading or file name) and ``source``, at
    the file's path without its suffix (``notes/a b.md`` -> ``/notes/a b``).
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


#: Plain text and markdown files as documents (the default format).
TEXT_FORMAT = IngestFormat("text", read=document_node)
