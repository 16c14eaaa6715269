"""Files to nodes: plain text and markdown documents, and Python Enhancement Proposals.

A PEP (reStructuredText with an RFC 822 style header, PEP 1 / PEP 12) becomes a node at
``/pep-NNNN`` with its header fields as properties and its body as ``body``; its ``Requires``,
``Replaces`` and ``Superseded-By`` headers become relations ``requires``, ``replaces`` and
``superseded_by``. Any other text file becomes a ``kg:Document`` with its text as ``content``.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from kg.errors import InvalidInput

TEXT_SUFFIXES = frozenset({".md", ".markdown", ".txt", ".rst", ".text"})
PEP_RELATIONS = {"requires": "requires", "replaces": "replaces", "superseded-by": "superseded_by"}
_HEADER_RE = re.compile(r"^([A-Za-z][A-Za-z0-9-]*):\s?(.*)$")
_PEP_NUMBER_RE = re.compile(r"\d+")
_SEGMENT_UNSAFE = re.compile(r"[^\w.\- ]+", re.UNICODE)


@dataclass
class FileNode:
    """A node parsed from a file, and the relations it asserts to other paths."""

    path: str
    node_type: str
    properties: dict[str, Any]
    relations: list[tuple[str, str]] = field(default_factory=list)  # (type, target path)
    source: str = ""


def pep_path(number: int) -> str:
    """The node path of PEP ``number``: ``/pep-0440``."""
    return f"/pep-{number:04d}"


def parse_pep(text: str) -> tuple[dict[str, str], str] | None:
    """Split a PEP into its header fields (lower-case names) and body; None if not a PEP.

    References
    ----------
    PEP 1 and PEP 12: the header preamble is RFC 2822 style, continuation lines indented.
    """
    lines = text.splitlines()
    if not lines or not re.match(r"^PEP:\s*\d+\s*$", lines[0]):
        return None
    headers: dict[str, str] = {}
    current: str | None = None
    i = 0
    for i, line in enumerate(lines):
        if not line.strip():
            break
        if line[0] in " \t" and current is not None:
            headers[current] += " " + line.strip()
            continue
        match = _HEADER_RE.match(line)
        if match is None:
            break
        current = match.group(1).lower()
        headers[current] = match.group(2).strip()
    else:
        i = len(lines)
    body = "\n".join(lines[i:]).strip("\n")
    return headers, body


def pep_node(text: str, source: str) -> FileNode | None:
    """The node and relations of a PEP, or None when ``text`` is not a PEP."""
    parsed = parse_pep(text)
    if parsed is None:
        return None
    headers, body = parsed
    number = int(headers["pep"])
    props: dict[str, Any] = {
        "pep": number,
        "title": headers.get("title", f"PEP {number}"),
        "status": headers.get("status"),
        "type": headers.get("type"),
        "created": headers.get("created"),
        "body": body,
    }
    for extra in ("topic", "author", "python-version", "requires", "replaces", "superseded-by"):
        if extra in headers:
            props[extra.replace("-", "_")] = headers[extra]
    relations = [
        (rel, pep_path(int(n)))
        for header, rel in PEP_RELATIONS.items()
        for n in _PEP_NUMBER_RE.findall(headers.get(header, ""))
    ]
    props = {k: v for k, v in props.items() if v is not None}
    return FileNode(pep_path(number), "pep:PEP", props, relations, source)


def _segment(name: str) -> str:
    cleaned = _SEGMENT_UNSAFE.sub("-", name).strip(" .-") or "file"
    return cleaned[:200]


def document_node(text: str, relative: Path) -> FileNode:
    """A plain document: ``content`` is the text, ``title`` its first heading or file name."""
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


def iter_files(root: Path) -> Iterator[Path]:
    """Text files under ``root`` (or ``root`` itself), sorted.

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


def read_file_node(path: Path, root: Path) -> FileNode:
    """Parse one file into a node (a PEP when it has a PEP header).

    Raises
    ------
    kg.errors.InvalidInput
        The file is not UTF-8 text.
    """
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{path} is not UTF-8 text") from exc
    relative = path.relative_to(root) if path != root else Path(path.name)
    node = pep_node(text, relative.as_posix()) or document_node(text, relative)
    node.properties["sha256"] = hashlib.sha256(raw).hexdigest()
    return node
