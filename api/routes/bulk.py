"""Export: a branch's content as one file of records (NDJSON or Parquet), over HTTP.

The file is written whole by :func:`kg.ops.bulk.export_ndjson` (or
:func:`kg.ops.bulk_parquet.export_parquet`) in one read of the branch, into a temporary file
(memory up to :data:`SPOOL_BYTES`, then disk), and only then sent: the answer is one revision's
content, and no database connection waits on a slow reader. Imports stay with ``kg import``
(docs/guides/export-import.md).
"""

from __future__ import annotations

import io
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Annotated, Literal

from fastapi import APIRouter, Query
from fastapi.responses import StreamingResponse

from api.deps import BranchQ, CallerDep, RepoP, RevisionQ, ServicesDep
from api.guard import GuardedRoute
from kg.ops import bulk
from kg.ops.bulk_parquet import export_parquet
from kg.types.bulk import HeaderRecord

router = APIRouter(route_class=GuardedRoute, prefix="/api/repos/{repo}", tags=["export"])

#: An export is held in memory up to this size, then in a temporary file.
SPOOL_BYTES = 8 * 1024 * 1024
#: The size of each part of the answer.
PART_BYTES = 64 * 1024
#: The media type of each format.
MEDIA_TYPES = {"ndjson": "application/x-ndjson", "parquet": "application/vnd.apache.parquet"}


def _parts(source: IO[bytes]) -> Iterator[bytes]:
    """The bytes of ``source`` from its start, a part at a time; closed (and gone) at the end."""
    try:
        source.seek(0)
        while part := source.read(PART_BYTES):
            yield part
    finally:
        source.close()


@router.get("/export", response_class=StreamingResponse, responses={200: {
    "description": "The branch's records, the header first (`kg-ndjson`: one JSON record a line; "
                   "`kg-parquet`: one Parquet file, the header in its metadata). `kg import` reads "
                   "either back.",
    "content": {media: {"schema": {"type": "string", "format": "binary"}} for media in MEDIA_TYPES.values()}}})
def export(repo: RepoP, services: ServicesDep, caller: CallerDep, branch: BranchQ = "main",
           at_revision: RevisionQ = None,
           with_chunks: Annotated[bool, Query(description="Add the stored chunks with their vectors.")] = False,
           format: Annotated[Literal["ndjson", "parquet"], Query(  # noqa: A002 (the API's field name)
               description="`ndjson` (`kg-ndjson`) or `parquet` (`kg-parquet`, the server's `parquet` extra)."
           )] = "ndjson") -> StreamingResponse:
    """A branch's content as one file of records: its nodes, relations and, with `with_chunks`,
    chunks, as of `at_revision` when given. A key restricted to some workspaces exports those
    (and the relations between their nodes). `kg import` reads the file back."""
    header: HeaderRecord
    if format == "parquet":
        with tempfile.TemporaryDirectory(prefix="kg-export-") as folder:
            target = Path(folder) / "export.parquet"
            header = export_parquet(services, caller, repo, branch, out=target, at_revision=at_revision,
                                    with_chunks=with_chunks)
            # the file is opened before its folder goes: the open file outlives its name
            body: IO[bytes] = target.open("rb")
    else:
        spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)  # noqa: SIM115 (closed by _parts)
        try:
            text = io.TextIOWrapper(spool, encoding="utf-8", newline="")
            header = bulk.export_ndjson(services, caller, repo, branch, out=text, at_revision=at_revision,
                                        with_chunks=with_chunks)
            text.detach()  # flushed into the spool, which stays open
        except BaseException:
            spool.close()
            raise
        body = spool
    name = f"{header.repo}-{header.branch.replace('/', '_')}-r{header.revision}.{format}"
    return StreamingResponse(_parts(body), media_type=MEDIA_TYPES[format],
                             headers={"Content-Disposition": f'attachment; filename="{name}"',
                                      "X-KG-Revision": str(header.revision)})
