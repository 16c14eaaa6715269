"""A file of records in either format imported (``POST /api/repos/{repo}/import``): ``kg-ndjson``
lines (:mod:`kg.ops.bulk`) or a ``kg-parquet`` file (:mod:`kg.ops.bulk_parquet`)."""

from __future__ import annotations

from typing import BinaryIO

from kg.context import Actor, Resources
from kg.errors import InvalidInput
from kg.ops.bulk import check_batch_size, import_ndjson
from kg.ops.bulk_parquet import import_parquet
from kg.store.repos import MAIN
from kg.types.bulk import MEDIA_TYPES, NdjsonImport

__all__ = ["IMPORT_FORMATS", "PARQUET_MAGIC", "import_file"]

#: The formats :func:`import_file` reads (the keys of :data:`kg.types.bulk.MEDIA_TYPES`).
IMPORT_FORMATS = tuple(MEDIA_TYPES)
#: The first bytes of a Parquet file (and its last).
PARQUET_MAGIC = b"PAR1"


def import_file(services: Resources, caller: Actor, repo: str, source: BinaryIO, *, format: str = "ndjson",  # noqa: A002 (the API's field name)
                branch: str = MAIN, batch_size: int | None = None, create: bool = True,
                message: str | None = None) -> NdjsonImport:
    """Import a file of records in either format: ``ndjson`` (``kg-ndjson`` lines,
    :func:`kg.ops.bulk.import_ndjson`) or ``parquet`` (a ``kg-parquet`` file,
    :func:`kg.ops.bulk_parquet.import_parquet`), read from ``source``, a seekable binary file at
    its start. What ``POST /api/repos/{repo}/import`` does with the file it received.

    Raises
    ------
    kg.errors.InvalidInput
        An unknown ``format``; a Parquet file sent as ``ndjson`` (said so, rather than "line 1:
        not JSON"); whatever the format's import refuses (``line N`` / ``row N``), nothing
        written.
    kg.errors.NotFound
        As :func:`kg.ops.bulk.import_ndjson`.
    """
    if format not in IMPORT_FORMATS:
        raise InvalidInput(f"format must be one of {', '.join(IMPORT_FORMATS)}, not {format!r}",
                           details={"format": format})
    check_batch_size(batch_size)
    if format == "parquet":
        return import_parquet(services, caller, repo, source, branch=branch, batch_size=batch_size, create=create,
                              message=message)
    if source.read(len(PARQUET_MAGIC)) == PARQUET_MAGIC:
        raise InvalidInput("the file is a Parquet file: import it with format parquet", details={"format": format})
    source.seek(0)
    return import_ndjson(services, caller, repo, source, branch=branch, batch_size=batch_size, create=create,
                         message=message)
