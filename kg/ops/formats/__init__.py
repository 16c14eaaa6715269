"""Ingest formats: how ``kg ingest --format NAME`` turns a file into a node and its relations.

A format (:class:`kg.ops.formats.base.IngestFormat`) reads a file's text into a
:class:`~kg.ops.formats.base.FileNode` and names the stub of a relation target outside the
corpus; :mod:`kg.ops.ingest` knows none of them, :data:`FORMATS` is the registry:

========  ==================================================================================
text      every file a ``kg:Document`` (the default)
pep       Python Enhancement Proposals: header fields, ``requires`` / ``replaces`` /
          ``superseded_by`` relations, ``pep:External`` stubs (:mod:`kg.ops.formats.pep`)
========  ==================================================================================
"""

from __future__ import annotations

from kg.errors import InvalidInput
from kg.ops.formats.base import FileNode, IngestFormat
from kg.ops.formats.pep import PEP_FORMAT
from kg.ops.formats.text import TEXT_FORMAT

#: The ingest formats by name.
FORMATS: dict[str, IngestFormat] = {"text": TEXT_FORMAT, "pep": PEP_FORMAT}

DEFAULT_FORMAT = "text"

__all__ = ["DEFAULT_FORMAT", "FORMATS", "FileNode", "IngestFormat", "get_format"]


def get_format(name: str) -> IngestFormat:
    """The format registered as ``name``.

    Raises
    ------
    kg.errors.InvalidInput
        An unknown name (the message lists the known ones).
    """
    try:
        return FORMATS[name]
    except (KeyError, TypeError):
        raise InvalidInput(f"unknown format {name!r} (known: {', '.join(sorted(FORMATS))})",
                           details={"format": name}) from None
