"""Files to nodes: the files an ingest reads, each read by its format (:mod:`kg.ops.formats`),
decoded, with the sha256 of its bytes (the lifecycle's "unchanged" test).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

from kg.errors import InvalidInput
from kg.ops.formats.base import FileNode, IngestFormat

TEXT_SUFFIXES = frozenset({".md", ".markdown", ".txt", ".rst", ".text"})


def iter_files(root: Path) -> Iterator[Path]:
    """Text files under ``root`` (or ``root`` itself), sorted, hidden ones left out.

    Raises
    ------
    kg.errors.InvalidInput
        ``root`` does not exist or holds no text file.
    """
    if not root.exists():
        raise InvalidInput(f"{root} does not exist")
    if root.is_file():
        yield root
        return
    found = False
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.suffix.lower() in TEXT_SUFFIXES and not any(
            part.startswith(".") for part in path.relative_to(root).parts
        ):
            found = True
            yield path
    if not found:
        raise InvalidInput(f"{root} holds no text file ({', '.join(sorted(TEXT_SUFFIXES))})")


def read_file_node(path: Path, root: Path, file_format: IngestFormat) -> FileNode:
    """Read one file into a node with ``file_format``, ``sha256`` of its bytes added.

    Raises
    ------
    kg.errors.InvalidInput
        Unreadable or not UTF-8 (``details``: ``{"file", "reason"}``).
    """
    try:
        raw = path.read_bytes()
    except OSError as exc:
        reason = f"cannot be read: {exc.strerror or exc}"
        raise InvalidInput(f"{path} {reason}", details={"file": str(path), "reason": reason}) from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        reason = f"is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})"
        raise InvalidInput(f"{path} {reason}", details={"file": str(path), "reason": reason}) from exc
    relative = path.relative_to(root) if path != root else Path(path.name)
    node = file_format.read(text, relative)
    node.properties["sha256"] = hashlib.sha256(raw).hexdigest()
    return node
