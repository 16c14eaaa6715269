"""Export and import: a branch's content as one file of records (NDJSON or Parquet), over HTTP.

Export: the file is written whole by :func:`kg.ops.bulk.export_ndjson` (or
:func:`kg.ops.bulk_parquet.export_parquet`) in one read of the branch, into a temporary file
(memory up to :data:`SPOOL_BYTES`, then disk), and only then sent: the answer is one revision's
content, and no database connection waits on a slow reader.

Import: the request guard receives the body into a temporary file on disk (bounded by
``KG_MAX_IMPORT_BYTES``, with any body's deadline; :class:`api.guard.RequestGuard`), and the
route hands that file to :func:`kg.ops.imports.import_file`, what ``kg import`` does with a file
(docs/guides/export-import.md).
"""

from __future__ import annotations

import io
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Annotated, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import StreamingResponse

from api.deps import BranchQ, CallerDep, MessageQ, RepoP, RevisionQ, ServicesDep
from api.guard import UPLOADED_FILE, GuardedRoute
from kg.errors import MalformedInput
from kg.ops import bulk, imports
from kg.ops.bulk_parquet import export_parquet
from kg.types.bulk import MEDIA_TYPES, HeaderRecord, NdjsonImport

router = APIRouter(route_class=GuardedRoute, prefix="/api/repos/{repo}", tags=["export and import"])

#: An export is held in memory up to this size, then in a temporary file.
SPOOL_BYTES = 8 * 1024 * 1024
#: The size of each part of the answer.
PART_BYTES = 64 * 1024


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


#: The import's body: the file, in the format the ``format`` parameter names.
IMPORT_BODY = {"required": True, "description": "The file: `kg-ndjson` lines (`format=ndjson`) or a `kg-parquet` "
                                                "file (`format=parquet`), as `GET /export` answers it.",
               "content": {media: {"schema": {"type": "string", "format": "binary"}}
                           for media in MEDIA_TYPES.values()}}


@router.post("/import", response_model=NdjsonImport, response_model_exclude_unset=True,
             openapi_extra={"requestBody": IMPORT_BODY})
def import_file(request: Request, repo: RepoP, services: ServicesDep, caller: CallerDep, branch: BranchQ = "main",
                format: Annotated[Literal["ndjson", "parquet"], Query(  # noqa: A002 (the API's field name)
                    description="What the body is: `ndjson` (`kg-ndjson` lines) or `parquet` (a `kg-parquet` file, "
                                "the server's `parquet` extra).")] = "ndjson",
                batch_size: Annotated[int | None, Query(
                    ge=1, le=2_147_483_647,
                    description="Records (nodes, then relations) per revision; default: the whole file as one.")]
                = None,
                create: Annotated[bool, Query(
                    description="Create the repository (with the file's workspaces) and the workspaces it lacks, "
                                "as far as the key may.")] = True,
                message: MessageQ = None) -> NdjsonImport:
    """Import a file of records (what `GET /export` and `kg export` write) into `branch`, as
    `kg import` does: every record is checked first, the first bad one named (`line N` /
    `row N`, 422) and nothing written; then one revision (or one per `batch_size` records).
    Chunks with their vectors are stored as they are; texts without them are queued for
    embedding (`queued`), and search finds them once embedded. The body may be as large as
    `KG_MAX_IMPORT_BYTES` (413 past it); it is received into a temporary file on disk. Needs
    write on the branch and on each node's (and relation source's) workspace, read on each
    relation target's; with `create`, what creating the repository or a workspace needs."""
    source = request.scope.get(UPLOADED_FILE)
    if source is None:  # the request guard receives every import's body: not reached through the app
        raise MalformedInput("the file to import was not received")
    return imports.import_file(services, caller, repo, source, format=format, branch=branch, batch_size=batch_size,
                               create=create, message=message)
