"""The ``pep`` format: Python Enhancement Proposals (``kg ingest --format pep``).

A PEP (reStructuredText under an RFC 822 style header, PEP 1 and PEP 12) becomes a node at
``/pep-NNNN``, header fields as properties, body as ``body``; ``Requires``, ``Replaces`` and
``Superseded-By`` become relations ``requires``, ``replaces``, ``superseded_by``, a target
outside the corpus a ``pep:External`` stub. A file without a PEP header is a plain document.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from kg.ops.formats.base import FileNode, IngestFormat
from kg.ops.formats.text import document_node

PEP_RELATIONS = {"requires": "requires", "replaces": "replaces", "superseded-by": "superseded_by"}
_HEADER_RE = re.compile(r"^([A-Za-z][A-Za-z0-9-]*):\s?(.*)$")
#: A PEP number in a ``Requires`` / ``Replaces`` / ``Superseded-By`` list: a whole token of digits.
_PEP_NUMBER_RE = re.compile(r"(?:pep-?)?(\d{1,5})", re.IGNORECASE)


def pep_numbers(value: str) -> list[int]:
    """The PEP numbers a header's list names, in order (``703, 793``, ``PEP 8``, ``pep-0008``); a
    token that is not a whole number is not a PEP.

    >>> pep_numbers("703, 793, 697"), pep_numbers("PEP 484, pep-0008"), pep_numbers("not-a-number, 12x")
    ([703, 793, 697], [484, 8], [])
    """
    found = (_PEP_NUMBER_RE.fullmatch(token) for token in re.split(r"[,\s]+", value))
    return [int(match.group(1)) for match in found if match is not None]


def pep_path(number: int) -> str:
    """The node path of PEP ``number``, four digits at least: ``/pep-0008``."""
    return f"/pep-{number:04d}"


def parse_pep(text: str) -> tuple[dict[str, str], str] | None:
    """A PEP's header fields (lower-case names, indented continuation lines joined, RFC 2822 style
    as PEP 1 and PEP 12 say) and body; None when the first line is not ``PEP: <number>``.
    """
    lines = text.splitlines()
    if not lines or not re.match(r"^PEP:\s*\d+\s*$", lines[0]):
        return None
    headers: dict[str, str] = {}
    current: str | None = None
    i = 0
    for i, line in enumerate(lines):  # noqa: B007 - i is read after the loop: where the header ends
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
    """A ``pep:PEP`` node at :func:`pep_path` with its relations; None when ``text`` is not a PEP."""
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
        (rel, pep_path(n))
        for header, rel in PEP_RELATIONS.items()
        for n in pep_numbers(headers.get(header, ""))
    ]
    props = {k: v for k, v in props.items() if v is not None}
    return FileNode(pep_path(number), "pep:PEP", props, relations, source)


def read_pep_file(text: str, relative: Path) -> FileNode:
    """The PEP of a file (:func:`pep_node`), or its plain document when it has no PEP header."""
    return pep_node(text, relative.as_posix()) or document_node(text, relative)


def external_pep(path: str) -> FileNode:
    """The ``pep:External`` stub (``{"pep": NNNN, "in_corpus": False}``) at ``path``."""
    number = path.rsplit("-", 1)[-1].lstrip("0") or "0"
    return FileNode(path, "pep:External", {"pep": int(number), "in_corpus": False})


#: PEPs with their relations and stubs; other files as documents.
PEP_FORMAT = IngestFormat("pep", read=read_pep_file, stub=external_pep)
