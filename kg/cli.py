"""The ``kg`` command line: serve, db upgrade, backup, restore, ingest, import, export, search, sql, ask, log,
diff, merge, branch, keys, mcp, relate, invalidate, relation-types, neighbors."""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, BinaryIO, Final

import anyio
import typer
from pydantic import BaseModel, ValidationError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from kg import backup as backup_ops
from kg.access import parse_grant
from kg.context import OPERATOR, run
from kg.errors import InvalidInput, KGError, MergeConflict
from kg.graph.validity import maybe_aware
from kg.ops import branches as branch_ops
from kg.ops import bulk as bulk_ops
from kg.ops import bulk_parquet as parquet_ops
from kg.ops import changes as change_ops
from kg.ops import imports as import_ops
from kg.ops import keys as key_ops
from kg.ops import memory as memory_ops
from kg.ops import queries
from kg.ops import relations as relation_ops
from kg.ops import repos as repo_ops
from kg.ops import webhooks as webhook_ops
from kg.ops.formats import DEFAULT_FORMAT, FORMATS
from kg.ops.ingest import ingest_path
from kg.ops.lineage import describe_derived, node_lineage
from kg.ops.merge import merge_branch, preview_merge
from kg.rag.functions import ask as ask_question
from kg.rag.functions import invoke as invoke_function
from kg.rag.graph import neighbors as graph_neighbors
from kg.rag.search import SearchRequest, search_branch
from kg.services import Services, build_index
from kg.settings import Settings
from kg.sql.execute import run_sql
from kg.store.db import Database
from kg.store.models import utcnow
from kg.store.paths import validate_path
from kg.types.branches import DerivedRefresh, Diff, NodeChangeEntry
from kg.types.bulk import IngestReport, NdjsonImport
from kg.types.functions import ResolveEntitiesOutput

# Help texts are Markdown: a docstring's hard line ends flow as one paragraph, ``code`` is styled
# (typer's default "rich" mode kept the line ends in the command list, breaking sentences).
_HELP_MARKUP: Final = "markdown"
app = typer.Typer(help="kg: a knowledge-graph service with branching storage for AI agents.",
                  no_args_is_help=True, pretty_exceptions_enable=False, rich_markup_mode=_HELP_MARKUP)
db_app = typer.Typer(help="Database schema.", no_args_is_help=True, rich_markup_mode=_HELP_MARKUP)
branch_app = typer.Typer(help="Branches.", no_args_is_help=True, rich_markup_mode=_HELP_MARKUP)
app.add_typer(db_app, name="db")
keys_app = typer.Typer(help="API keys (on the local database).", no_args_is_help=True,
                       rich_markup_mode=_HELP_MARKUP)
app.add_typer(branch_app, name="branch")
app.add_typer(keys_app, name="keys")
import_app = typer.Typer(help="Import other tools' data into a branch.", no_args_is_help=True,
                         rich_markup_mode=_HELP_MARKUP)
app.add_typer(import_app, name="import")
webhooks_app = typer.Typer(help="Webhooks of a repository (on the local database).", no_args_is_help=True,
                           rich_markup_mode=_HELP_MARKUP)
app.add_typer(webhooks_app, name="webhooks")
err = Console(stderr=True)


@app.callback()
def _main() -> None:
    """kg: a knowledge-graph service with branching storage for AI agents."""
    # One BLAS thread: matrix-vector products on 2 cores are several times faster that way
    # under load (bench/index_embedded.py). Must be set before numpy is first imported.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _fail(exc: Exception) -> None:
    message = exc.message if isinstance(exc, KGError) else str(exc)
    typer.echo(f"error: {_one_line(message)}", err=True)
    raise typer.Exit(1)


_OPENED: list = []
"""Services made by this command, closed by :func:`main` when it ends."""


def _services():
    """The services of one command (closed by :func:`main` when the command ends: the database
    pool and any Weaviate connection, which would otherwise warn at exit)."""
    services = Services.from_settings(Settings())
    _OPENED.append(services)
    services.db.upgrade()
    return services


def _close_opened() -> None:
    while _OPENED:
        _OPENED.pop().close()


@app.command()
def serve(host: Annotated[str | None, typer.Option(help="Interface to listen on.")] = None,
          port: Annotated[int | None, typer.Option(help="TCP port.")] = None,
          workers: Annotated[int, typer.Option(help="uvicorn worker processes.")] = 1) -> None:
    """Run the HTTP API (pending migrations are applied at start)."""
    import uvicorn

    settings = Settings()
    try:
        Database(settings.resolved_database_url()).upgrade()
    except KGError as exc:
        _fail(exc)
    host, port = host or settings.host, port or settings.port
    if not 1 <= port <= 65535:  # the socket layer would take it modulo 65536 and listen elsewhere
        typer.echo(f"error: port {port} is not a TCP port (1 to 65535)", err=True)
        raise typer.Exit(1)
    if not settings.auth and not _is_loopback(host):
        typer.echo(f"error: refusing to listen on {host} without authentication: set KG_AUTH=true "
                   "(and KG_KEY_PEPPER) or listen on 127.0.0.1", err=True)
        raise typer.Exit(1)
    _check_can_listen(host, port)
    if workers > 1 and settings.metrics:
        # Each worker counts for itself (docs/guides/observability.md): a scrape reads one of them.
        typer.echo(f"note: {workers} workers keep {workers} sets of metrics; /metrics answers one worker's. "
                   "Run one process per port to scrape them all", err=True)
        if settings.metrics_port is not None:
            typer.echo("error: KG_METRICS_PORT needs one worker (each would bind the port)", err=True)
            raise typer.Exit(1)
    # The app (built in each worker from the environment) needs the interface it is served on:
    # the MCP transport accepts only localhost Host headers on a loopback one.
    os.environ["KG_HOST"], os.environ["KG_PORT"] = host, str(port)
    from kg.serve_protocol import HeadDeadlineH11Protocol

    # An idle connection is closed after KG_KEEPALIVE_TIMEOUT_S, one whose request head takes
    # longer than KG_HEADER_TIMEOUT_S too (kg.serve_protocol); heads are capped at 64 KiB (h11);
    # bodies are bounded by the request guard (KG_MAX_BODY_BYTES, KG_BODY_TIMEOUT_S and
    # KG_BODY_MIN_BYTES_PER_S, KG_MAX_BUFFERED_BODY_BYTES), read only once the key is checked.
    uvicorn.run("api.main:app", host=host, port=port, workers=workers, log_level="info",
                http=HeadDeadlineH11Protocol, timeout_keep_alive=settings.keepalive_timeout_s,
                h11_max_incomplete_event_size=MAX_HEADER_BYTES)


MAX_HEADER_BYTES = 64 * 1024
"""Largest request head (request line and headers) ``kg serve`` reads, in bytes."""


def _is_loopback(host: str) -> bool:
    """Whether every address ``host`` names is a loopback one (``localhost``, 127.0.0.0/8, ::1)."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError:
        return False
    addresses = {str(info[4][0]) for info in infos}
    return bool(addresses) and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addresses)


def _check_can_listen(host: str, port: int) -> None:
    """Exit 1 with one line when ``host:port`` cannot be bound (in use, no such address),
    rather than uvicorn's log lines and exit 3. Binds as uvicorn does (SO_REUSEADDR), so a
    port in TIME_WAIT is not mistaken for a busy one."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, kind, proto, _, address = infos[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except OSError as exc:
        typer.echo(f"error: cannot listen on {host}:{port}: {exc.strerror or exc}", err=True)
        raise typer.Exit(1) from exc


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Apply pending migrations."""
    settings = Settings()
    try:
        Database(settings.resolved_database_url()).upgrade()
    except KGError as exc:
        _fail(exc)
    typer.echo("database is up to date")


@app.command("backup")
def backup(dest: Annotated[Path, typer.Argument(help="A new folder for the backup.")],
           probes: Annotated[bool, typer.Option(
               "--probes/--no-probes", help="Record searches, logs and NEIGHBORS for `kg restore --verify`.")]
           = True) -> None:
    """Back up the whole store (every repository, branch, revision, key and queued job, and the
    embedded index's snapshots) into a new folder, while `kg serve` keeps serving and writing:
    SQLite through its online backup API, PostgreSQL through `pg_dump -Fc`."""
    try:
        services = _services()
        manifest = backup_ops.backup_store(services, OPERATOR, dest, open_store=Services.from_settings,
                                           probes=probes)
    except KGError as exc:
        _fail(exc)
    typer.echo(json.dumps({"backup": str(dest), "database": manifest.database,
                           "migration_head": manifest.migration_head,
                           "repositories": len(manifest.repositories), "files": len(manifest.files),
                           "bytes": sum(f.bytes for f in manifest.files), "probes": len(manifest.probes)}))


@app.command("restore")
def restore(src: Annotated[Path, typer.Argument(help="A folder written by `kg backup`.")],
            force: Annotated[bool, typer.Option("--force", help="Replace a target store that holds data.")] = False,
            verify: Annotated[bool, typer.Option(
                "--verify", help="Then check that the store answers the backup's recorded probes alike.")]
            = False,
            verify_only: Annotated[bool, typer.Option(
                "--verify-only", help="Restore nothing: check the configured store against the probes.")]
            = False) -> None:
    """Restore a backup into the store KG_DATABASE_URL / KG_DATA_DIR name (stop `kg serve` first):
    its manifest and every file's SHA-256 are checked first; a newer migration head, a corrupted
    file or a target that holds data (without `--force`) is refused and nothing is written."""
    settings = Settings()
    try:
        out: dict[str, Any] = {}
        if not verify_only:
            manifest = backup_ops.restore_store(settings, OPERATOR, src, force=force)
            out = {"restored": str(src), "database": manifest.database,
                   "repositories": len(manifest.repositories), "files": len(manifest.files)}
        if verify or verify_only:
            report = backup_ops.verify_store(settings, OPERATOR, src, open_store=Services.from_settings)
            out["verify"] = report.model_dump()
    except KGError as exc:
        _fail(exc)
    typer.echo(json.dumps(out))
    if "verify" in out and not out["verify"]["ok"]:
        first = out["verify"]["mismatches"][0]
        typer.echo(f"error: the store answers {len(out['verify']['mismatches'])} of {out['verify']['probes']} "
                   f"probes otherwise, first a {first['kind']} on {first['repo']}/{first['branch']}", err=True)
        raise typer.Exit(1)


@app.command()
def ingest(path: Annotated[Path, typer.Argument(help="A file or a folder of text files.")],
           repo: Annotated[str, typer.Option(help="Repository (created if missing).")],
           workspace: Annotated[str, typer.Option(help="Workspace (created if missing).")],
           branch: Annotated[str, typer.Option(help="Branch to write on.")] = "main",
           format_name: Annotated[str, typer.Option(
               "--format", help=f"What a file becomes: {' | '.join(FORMATS)}.")] = DEFAULT_FORMAT,
           strict: Annotated[bool, typer.Option(
               "--strict", help="Refuse the whole ingest at the first unreadable file (nothing is "
                                "written) instead of skipping it.")] = False,
           conflicts: Annotated[str, typer.Option(
               help="A property both a person and the file changed since the last ingest: keep the "
                    "person's value (keep), or also put the file's version of the node on a review "
                    "branch to diff and merge (review).")] = "keep",
           review_branch: Annotated[str | None, typer.Option(
               help="The review branch's name (--conflicts review); default ingest/<UTC time>.")] = None,
           ) -> None:
    """Ingest files as nodes: a file unchanged since its last ingest is skipped, whatever
    happened to its node since; a changed one is merged with people's edits of its node (a
    property both changed keeps the person's value and is listed) and re-embedded. The
    format says what a file becomes: ``text`` a document, ``pep`` a Python Enhancement
    Proposal with its relations. A file that cannot be read (not UTF-8, no permission) is
    skipped and reported at the end, unless ``--strict``. Progress is a bar on a terminal,
    else one line on stderr per group of files."""
    progress = _IngestProgress(err.is_terminal)
    try:
        services = _services()
        try:
            report = ingest_path(services, OPERATOR, path, repo=repo, workspace=workspace, branch=branch,
                                 format_name=format_name, on_files=progress.listed, on_progress=progress.advance,
                                 skip_unreadable=not strict, conflicts=conflicts, review_branch=review_branch)
        finally:
            progress.stop()
        # Only this repository's queue: another repository's backlog is the server's business.
        report.index_failures = repo_ops.settle_index(services, OPERATOR, repo).failed
    except KGError as exc:
        _fail(exc)
    if report.unreadable:
        typer.echo(f"skipped {len(report.unreadable)} unreadable file(s):", err=True)
        for entry in report.unreadable:
            typer.echo(f"  {entry.file}: {entry.reason}", err=True)
    _echo_kept(report, repo)
    typer.echo(_model_json(report.summary()))


def _shown(value: Any, width: int = 60) -> str:
    """A property value as JSON on one line, cut to ``width`` characters."""
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= width else text[:width - 1] + "…"


def _model_json(model: BaseModel, **options: Any) -> str:
    """A use case's answer as the JSON every surface answers (aliases, keys left out stay out)."""
    return json.dumps(model.model_dump(mode="json", by_alias=True, exclude_unset=True), **options)


def _echo_kept(report: IngestReport, repo: str) -> None:
    """The people's edits an ingest kept, and the review branch, on stderr."""
    if report.kept_edits:
        typer.echo(f"kept {len(report.kept_edits)} edited propert(ies) the files also changed:", err=True)
        for entry in report.kept_edits:
            typer.echo(f"  {entry.path} {entry.key}: kept {_shown(entry.kept)}, file {_shown(entry.file)}", err=True)
    if report.kept_deleted:
        typer.echo(f"kept {len(report.kept_deleted)} deleted node(s) whose file changed:", err=True)
        for path in report.kept_deleted:
            typer.echo(f"  {path}", err=True)
    if report.review_branch:
        typer.echo(f"the files' versions are on branch {report.review_branch}: review them with "
                   f"kg diff --repo {repo} --branch {report.review_branch}, then kg merge", err=True)


class _IngestProgress:
    """Ingest progress: a rich bar on a terminal, else a line per group of files on stderr
    (files done / total, elapsed), so a log shows that a long ingest is moving."""

    def __init__(self, terminal: bool) -> None:
        self.terminal, self.total, self.done = terminal, 0, 0
        self.started = time.monotonic()
        self.bar: Progress | None = None
        self.running = False
        if terminal:
            self.bar = Progress(TextColumn("[bold]ingest"), BarColumn(), MofNCompleteColumn(),
                                TimeElapsedColumn(), console=err)
            self.task = self.bar.add_task("files", total=None)

    def listed(self, n: int) -> None:
        self.total = n
        if self.bar is not None:
            self.bar.update(self.task, total=n)
            self.bar.start()
            self.running = True

    def advance(self, n: int) -> None:
        if self.bar is None and not self.done:
            # said with the first group written, not when the files are listed: an ingest refused
            # before it writes (a reserved repository, an unknown branch) prints its error alone
            typer.echo(f"ingest: {self.total} file(s) to read", err=True)
        self.done += n
        if self.bar is not None:
            self.bar.advance(self.task, n)
        else:
            typer.echo(f"ingest: {self.done}/{self.total} files ({time.monotonic() - self.started:.1f} s)",
                       err=True)

    def stop(self) -> None:
        if self.bar is not None and self.running:
            self.bar.stop()


@import_app.command("memory-jsonl")
def import_memory_jsonl(
        file: Annotated[Path, typer.Argument(help="The memory server's JSONL file (memory.jsonl).")],
        repo: Annotated[str, typer.Option(help="Repository (created if missing).")],
        branch: Annotated[str, typer.Option(help="Branch to write on (must exist).")] = "main",
        workspace: Annotated[str, typer.Option(help="Workspace of the entity nodes (created if missing).")]
        = memory_ops.DEFAULT_WORKSPACE) -> None:
    """Import the knowledge graph of the MCP memory server (@modelcontextprotocol/server-memory):
    entities become nodes at `/entities/<slug>` with their observations indexed, relations typed
    relations; all in one revision, none when nothing changed. A malformed line is refused with
    its number and nothing is written."""
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        typer.echo(f"error: cannot read {file}: {_one_line(str(exc))}", err=True)
        raise typer.Exit(1) from exc
    try:
        services = _services()
        report = run(services, OPERATOR, memory_ops.import_memory_jsonl, repo, branch, text, workspace=workspace)
        report.index_failures = repo_ops.settle_index(services, OPERATOR, repo).failed
    except KGError as exc:
        _fail(exc)
    typer.echo(_model_json(report))


_ImportRepo = Annotated[str, typer.Option("--repo", help="Repository (created with the file's workspaces if missing).")]
_ImportBranch = Annotated[str, typer.Option("--branch", help="Branch to write on (must exist).")]
_ImportBatch = Annotated[int | None, typer.Option(
    "--batch-size", help="Records (nodes, then relations) per revision; default: the whole file as one.")]
_ImportMessage = Annotated[str | None, typer.Option("--message", help="The revisions' message.")]


def _import_file(file: Path, repo: str, read: Callable[[Services, BinaryIO], NdjsonImport]) -> None:
    """Open ``file``, import it with ``read`` (a use case of kg.ops), settle the index, print the
    report; an unreadable file or a refused record is one line and exit 1."""
    try:
        with file.open("rb") as handle:
            services = _services()
            report = read(services, handle)
        report.index_failures = repo_ops.settle_index(services, OPERATOR, repo).failed
    except OSError as exc:
        typer.echo(f"error: cannot read {file}: {_one_line(exc.strerror or str(exc))}", err=True)
        raise typer.Exit(1) from exc
    except KGError as exc:
        _fail(exc)
    typer.echo(_model_json(report))


@import_app.command("ndjson")
def import_ndjson(
        file: Annotated[Path, typer.Argument(help="A file `kg export` wrote (kg-ndjson records).")],
        repo: _ImportRepo, branch: _ImportBranch = "main", batch_size: _ImportBatch = None,
        message: _ImportMessage = None) -> None:
    """Import nodes, relations and chunks with their vectors from an NDJSON export, as one
    revision (or one per --batch-size records). Every record is checked first: the first bad one
    is named by its line and nothing is written. Chunks with vectors are stored as they are (not
    embedded again); texts without them are embedded after the import."""
    _import_file(file, repo, lambda services, handle: import_ops.import_file(
        services, OPERATOR, repo, handle, format="ndjson", branch=branch, batch_size=batch_size, message=message))


@import_app.command("parquet")
def import_parquet(
        file: Annotated[Path, typer.Argument(help="A kg-parquet file (`kg export --format parquet` writes one).")],
        repo: _ImportRepo, branch: _ImportBranch = "main", batch_size: _ImportBatch = None,
        message: _ImportMessage = None) -> None:
    """Import the records of a kg-parquet file (the NDJSON export's records as columns; vectors
    as float32 lists): checked a row group at a time, the first bad row named and nothing
    written; then as `kg import ndjson`."""
    _import_file(file, repo, lambda services, handle: import_ops.import_file(
        services, OPERATOR, repo, handle, format="parquet", branch=branch, batch_size=batch_size, message=message))


@app.command("export")
def export(repo: Annotated[str, typer.Option(help="Repository.")],
           branch: Annotated[str, typer.Option(help="Branch.")] = "main",
           out: Annotated[Path | None, typer.Option(help="Write to this file (default: standard output).")] = None,
           with_chunks: Annotated[bool, typer.Option(
               "--with-chunks", help="Add the chunks of the nodes' texts with their vectors.")] = False,
           at_revision: Annotated[int | None, typer.Option(help="The branch as of this revision.")] = None,
           file_format: Annotated[str, typer.Option(
               "--format", help="ndjson (records a line) or parquet (the same records as columns; needs --out)."
           )] = "ndjson") -> None:
    """Export a branch as NDJSON: a header, then its nodes, relations and (--with-chunks) chunks
    with their vectors; `kg import ndjson` reads it back (--format parquet: `kg import parquet`).
    With --out the file appears only once complete, and a summary is printed."""
    if file_format not in ("ndjson", "parquet"):
        typer.echo(f"error: --format must be ndjson or parquet, not {file_format!r}", err=True)
        raise typer.Exit(1)
    if file_format == "parquet" and out is None:
        typer.echo("error: --format parquet writes a file: give --out", err=True)
        raise typer.Exit(1)
    try:
        services = _services()
        if file_format == "parquet":
            assert out is not None
            partial = out.with_name(out.name + ".partial")
            try:
                header = parquet_ops.export_parquet(services, OPERATOR, repo, branch, out=partial,
                                                    at_revision=at_revision, with_chunks=with_chunks)
                partial.replace(out)
            finally:
                partial.unlink(missing_ok=True)
        elif out is None:
            bulk_ops.export_ndjson(services, OPERATOR, repo, branch, out=sys.stdout, at_revision=at_revision,
                                   with_chunks=with_chunks)
            return
        else:
            partial = out.with_name(out.name + ".partial")
            try:
                with partial.open("w", encoding="utf-8") as handle:
                    header = bulk_ops.export_ndjson(services, OPERATOR, repo, branch, out=handle,
                                                    at_revision=at_revision, with_chunks=with_chunks)
                partial.replace(out)
            finally:
                partial.unlink(missing_ok=True)
    except BrokenPipeError:
        raise  # the reader left (`kg export | head`): click exits quietly with status 1
    except OSError as exc:
        typer.echo(f"error: cannot write {out if out is not None else 'to standard output'}: "
                   f"{_one_line(exc.strerror or str(exc))}", err=True)
        raise typer.Exit(1) from exc
    except KGError as exc:
        _fail(exc)
    assert header.counts is not None  # an export writes them
    typer.echo(json.dumps({"out": str(out), "repo": header.repo, "branch": header.branch,
                           "revision": header.revision, **header.counts.model_dump()}))


@app.command()
def search(query: Annotated[str, typer.Argument(help="What to look for.")],
           repo: Annotated[str, typer.Option(help="Repository.")],
           branch: Annotated[str, typer.Option(help="Branch.")] = "main",
           k: Annotated[int, typer.Option(help="Rows.")] = 5,
           mode: Annotated[str, typer.Option(help="vector | fulltext | hybrid")] = "hybrid",
           granularity: Annotated[str, typer.Option(help="chunk | node")] = "node",
           workspace: Annotated[list[str] | None, typer.Option(help="Limit to a workspace (repeatable).")] = None,
           path_prefix: Annotated[str | None, typer.Option(help="Only paths under this (whole segments).")]
           = None,
           node_type: Annotated[str | None, typer.Option(help="Only nodes of this type.")] = None,
           where: Annotated[str | None, typer.Option(
               help='Property conditions as a JSON object: {"status": "published"} or operators, '
                    '{"year": {"$gte": 2020}} ($eq $ne $in $nin $gt $gte $lt $lte $exists).')] = None,
           context: Annotated[int | None, typer.Option(
               help="Attach each hit's parent and this many neighbouring sections on each side (0: the "
                    "parent only).")] = None,
           context_order_by: Annotated[str | None, typer.Option(
               help="The sections' order: order (default), name or `properties.<key>`.")] = None,
           as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """Search a repository's nodes on a branch."""
    raw: dict = {"query": query, "k": k, "mode": mode, "granularity": granularity,
                 "workspaces": workspace or None, "path_prefix": path_prefix, "node_type": node_type}
    if context is not None or context_order_by is not None:
        raw["context"] = {"siblings": 1 if context is None else context, "order_by": context_order_by}
    try:
        if where is not None:
            try:
                raw["where"] = json.loads(where)
            except ValueError as exc:
                raise InvalidInput(f"--where is not JSON: {exc}") from exc
            if not isinstance(raw["where"], dict):
                raise InvalidInput('--where must be a JSON object, e.g. {"status": "published"}')
        services = _services()
        request = SearchRequest.parse(raw)
        answer = search_branch(services, OPERATOR, repo, branch, request)
        results, took = answer.results, answer.took_ms
    except KGError as exc:
        _fail(exc)
    if as_json:
        typer.echo(json.dumps({"results": [r.as_dict() for r in results], "took_ms": took}, indent=2))
        return
    if not results:  # said, so that a search that found nothing is not taken for one that did not run
        typer.echo("no results", err=True)
    for i, r in enumerate(results, start=1):
        title = r.properties.get("title", "")
        snippet = " ".join(r.chunk_text.split())[:160]
        typer.echo(f"{i}. {r.workspace}:{r.path}  {title}  (score {r.score:.4f})\n   {snippet}")
        if r.context is not None:
            parent = r.context.get("parent")
            if parent is not None:
                typer.echo(f"   in {parent['path']}  {parent['properties'].get('title', '')}".rstrip())
            for label in ("before", "after"):
                if r.context.get(label):
                    typer.echo(f"   {label}: " + ", ".join(n["path"] for n in r.context[label]))


def _sql_table(result: Any) -> None:
    """One statement's result as a rich table on stdout (then its row count)."""
    table = Table(*result.columns, show_lines=False)
    for row in result.rows:
        table.add_row(*(_sql_cell(v) for v in row))
    out = Console()
    out.print(table)
    out.print(f"({result.row_count} row{'s' if result.row_count != 1 else ''}, {result.execution_time_ms:g} ms)")


def _sql_cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def _sql_run(services: Any, repo: str, branch: str, text: str, params: list[Any], as_json: bool) -> None:
    answer = run_sql(services, OPERATOR, repo, branch, text, params)
    if as_json:
        typer.echo(json.dumps(answer.model_dump(), indent=2, default=str))
        return
    for result in answer.results:
        _sql_table(result)


@app.command("sql")
def sql(statement: Annotated[str | None, typer.Argument(
            help="Statements separated by ';'; none and no --file: an interactive prompt.")] = None,
        repo: Annotated[str, typer.Option(help="Repository.")] = "",
        branch: Annotated[str, typer.Option(help="Branch.")] = "main",
        file: Annotated[Path | None, typer.Option("--file", help="Read the statements from this file.")] = None,
        param: Annotated[list[str] | None, typer.Option(
            "--param", help="The value of $1, $2, ... in order (repeatable); JSON when it parses as JSON, "
                            "else the string.")] = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print the results as JSON.")] = False) -> None:
    """Run SQL statements (RAG patterns: KNN, HYBRID_SEARCH, INSERT, RELATE, NEIGHBORS, CREATE BRANCH, ...) on
    a branch, as the operator; each result is printed as a table."""
    params: list[Any] = []
    for raw in param or []:
        try:
            params.append(json.loads(raw))
        except ValueError:
            params.append(raw)
    try:
        if not repo:
            raise InvalidInput("--repo is required")
        if statement is not None and file is not None:
            raise InvalidInput("give a statement or --file, not both")
        text = statement
        if file is not None:
            try:
                text = file.read_text(encoding="utf-8")
            except OSError as exc:
                raise InvalidInput(f"cannot read {file}: {exc.strerror}") from exc
        services = _services()
        if text is not None:
            _sql_run(services, repo, branch, text, params, as_json)
            return
    except KGError as exc:
        _fail(exc)
    _sql_prompt(services, repo, branch, params, as_json)


def _sql_prompt(services: Any, repo: str, branch: str, params: list[Any], as_json: bool) -> None:
    """The interactive prompt: statements end with ';'; an error is printed and the prompt goes on."""
    err.print(f"kg sql on {repo}/{branch}: statements end with ';', Ctrl-D to quit")
    buffer = ""
    while True:
        try:
            line = input("kg> " if not buffer else "... ")
        except EOFError:
            break
        buffer += line + "\n"
        if not line.rstrip().endswith(";"):
            continue
        text, buffer = buffer, ""
        try:
            _sql_run(services, repo, branch, text, params, as_json)
        except KGError as exc:
            typer.echo(f"error: {_one_line(exc.message)}", err=True)


@app.command()
def ask(question: Annotated[str, typer.Argument(help="The question.")],
        repo: Annotated[str, typer.Option(help="Repository.")],
        branch: Annotated[str, typer.Option(help="Branch.")] = "main",
        workspace: Annotated[list[str] | None, typer.Option(help="Limit to a workspace (repeatable).")] = None,
        use_graph: Annotated[bool, typer.Option("--graph", help="Add the graph leg.")] = False,
        as_json: Annotated[bool, typer.Option("--json", help="Print the answer's JSON.")] = False) -> None:
    """Answer a question from the branch's documents, with citations (the ``ask`` function)."""
    raw: dict = {"question": question, "use_graph": use_graph}
    if workspace:
        raw["workspaces"] = workspace
    try:
        services = _services()
        answer = ask_question(services, OPERATOR, repo, branch, raw)
    except KGError as exc:
        _fail(exc)
    if as_json:
        typer.echo(_model_json(answer, indent=2))
        return
    typer.echo(answer.answer)
    typer.echo("")
    typer.echo(f"grounded: {'yes' if answer.grounded else 'no'} ({answer.mode})")
    for c in answer.citations:
        via = "  (graph)" if c.via == "graph" else ""
        if c.kind == "relation":
            typer.echo(f"[{c.marker}] {c.workspace}:{c.from_} -{c.type}-> {c.to}")
        elif c.kind == "property":
            typer.echo(f"[{c.marker}] {c.workspace}:{c.path} {c.property}: {c.value}")
        else:
            typer.echo(f"[{c.marker}] {c.workspace}:{c.path} chunk {c.chunk_index}{via}")
    for c in answer.leads or []:
        typer.echo(f"lead: {c.workspace}:{c.path} chunk {c.chunk_index}")


@app.command()
def lineage(path: Annotated[str, typer.Argument(help="The node's path (/docs/a), or workspace:/path.")],
            repo: Annotated[str, typer.Option(help="Repository.")],
            workspace: Annotated[str | None, typer.Option(help="Workspace (or give workspace:/path).")] = None,
            branch: Annotated[str, typer.Option(help="Branch.")] = "main",
            as_json: Annotated[bool, typer.Option("--json", help="Print the lineage's JSON.")] = False) -> None:
    """What was derived from a node (chunks, entity mentions, its extraction record, stored
    answers) with the source revision each recorded and whether it is current, and what the
    node was derived from (docs/concepts/lineage.md)."""
    if ":" in path and not path.startswith("/"):
        workspace, path = path.split(":", 1)
    try:
        if workspace is None:
            raise InvalidInput("give --workspace or a workspace:/path address")
        services = _services()
        report = node_lineage(services, OPERATOR, repo, branch, workspace, validate_path(path))
    except KGError as exc:
        _fail(exc)
    if as_json:
        typer.echo(_model_json(report, indent=2))
        return
    typer.echo(f"{report.workspace}:{report.path} (revision {report.revision})")
    for row in report.derived:
        if row["kind"] == "chunks":
            typer.echo(f"  derived  chunks {row['count']} of {row['content_key'][:12]}")
            continue
        state = "current" if row["current"] else "stale"
        flags = [f for f in ("orphan", "stale") if row.get(f) is True]
        extra = f" [{', '.join(flags)}]" if flags else ""
        typer.echo(f"  derived  {row['kind']} {row['workspace']}:{row['path']} from {_read_of(row)} ({state}){extra}")
    for row in report.derived_from:
        state = "current" if row["current"] else "stale"
        typer.echo(f"  from     {row['kind']} {row['workspace']}:{row['path']} {_read_of(row)} ({state})")


def _read_of(row: dict[str, Any]) -> str:
    """What a lineage row says its record read: a revision (answers) or a text hash (mentions)."""
    if row.get("source_revision") is not None:
        return f"revision {row['source_revision']}"
    digest = row.get("source_hash")
    return f"text {digest[:12]}" if isinstance(digest, str) else "an unrecorded version"


@app.command("resolve-entities")
def resolve_entities(workspace: Annotated[str, typer.Argument(help="The workspace whose entities are resolved.")],
                     repo: Annotated[str, typer.Option(help="Repository.")],
                     branch: Annotated[str, typer.Option(help="Source branch.")] = "main",
                     threshold: Annotated[float | None, typer.Option(help="Score to merge (0.5..1).")] = None,
                     proposal_only: Annotated[bool, typer.Option(
                         "--proposal-only", help="List the merges, write no branch.")] = False,
                     as_json: Annotated[bool, typer.Option("--json", help="Print the proposal's JSON.")] = False,
                     ) -> None:
    """Find duplicate entities and propose their merges on a new branch (``resolve-entities``)."""
    raw: dict = {"workspace": workspace, "dry_run": proposal_only}
    if threshold is not None:
        raw["threshold"] = threshold
    try:
        services = _services()
        out = invoke_function(services, OPERATOR, repo, "resolve-entities", raw, branch=branch, charged=True)
    except KGError as exc:
        _fail(exc)
    assert isinstance(out, ResolveEntitiesOutput)
    if as_json:
        typer.echo(_model_json(out, indent=2))
        return
    for m in out.merges:
        typer.echo(f"{m.kept} <- {', '.join(m.merged)}  score {m.score}  ({', '.join(m.reasons)})")
        for held in m.held_back or []:
            typer.echo(f"  held back: {held.path} (has children; not merged)")
    typer.echo(f"{len(out.merges)} merge(s) among {out.entities} entities; "
               + (f"proposal branch {out.branch}" if out.branch else "nothing written"))


def _value(value: object) -> str:
    """A property value on one line (JSON, so strings are quoted and absent is ``-``)."""
    if value is None:
        return "-"
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 120 else text[:117] + "..."


def _diff_lines(report: Diff) -> list[str]:
    """A diff (:func:`kg.ops.queries.diff`) as readable lines."""
    nodes, rels, base = report.nodes, report.relations, report.base
    # Revision numbers are the repository's (every branch's writes draw from one sequence): the
    # base is the parent as of that number, which may have been written on another branch.
    lines = [f"diff {report.branch} against {report.against} (base: {base.branch} as of revision "
             f"{base.revision})",
             f"nodes: {len(nodes.added)} added, {len(nodes.modified)} modified, {len(nodes.deleted)} deleted"]
    for n in nodes.added:
        lines.append(f"  + {n.workspace}:{n.path}  {n.node_type}")
    for m in nodes.modified:
        lines.append(f"  ~ {m.workspace}:{m.path}  {m.node_type}")
        for key, change in sorted(m.changes.items()):
            lines.append(f"      {key}: {_value(change.old)} -> {_value(change.new)}")
    for n in nodes.deleted:
        lines.append(f"  - {n.workspace}:{n.path}  {n.node_type}")
    lines.append(f"relations: {len(rels.added)} added, {len(rels.modified)} modified, {len(rels.removed)} removed")
    for r in rels.added:
        lines.append(f"  + {r.from_} -[{r.type}]-> {r.to}  weight {r.weight}")
    for c in rels.modified:
        lines.append(f"  ~ {c.from_} -[{c.type}]-> {c.to}  weight {c.old.weight} -> {c.new.weight}")
    for r in rels.removed:
        lines.append(f"  - {r.from_} -[{r.type}]-> {r.to}")
    return lines


@app.command()
def diff(repo: Annotated[str, typer.Option(help="Repository.")],
         branch: Annotated[str, typer.Option(help="The branch whose changes are listed.")],
         against: Annotated[str | None, typer.Option(help="Compared with (default: its parent).")] = None,
         as_json: Annotated[bool, typer.Option("--json", help="Print the diff's JSON.")] = False) -> None:
    """What a branch changed since its merge base: nodes added, modified (per property) and
    deleted, and relations."""
    try:
        services = _services()
        report = queries.diff(services, OPERATOR, repo, branch, against)
    except KGError as exc:
        _fail(exc)
    if as_json:
        typer.echo(json.dumps(report.as_json(), indent=2))
        return
    typer.echo("\n".join(_diff_lines(report)))


@app.command("log")
def log(repo: Annotated[str, typer.Option(help="Repository.")],
        branch: Annotated[str, typer.Option(help="Branch whose history is listed.")] = "main",
        limit: Annotated[int, typer.Option(help="Most revisions listed (1 to 1000).")] = 20,
        before: Annotated[int | None, typer.Option(help="Only revisions older than this one.")] = None,
        changes: Annotated[int, typer.Option(help="Changes listed per revision (0 to 10,000).")] = 5,
        as_json: Annotated[bool, typer.Option("--json", help="Print the log's JSON.")] = False) -> None:
    """The branch's revisions, newest first (its own, then its ancestors' up to the fork): who
    wrote what, and its first changes."""
    try:
        services = _services()
        revisions = queries.revision_log(services, OPERATOR, repo, branch, limit=limit, before=before,
                                         max_changes=changes)
    except KGError as exc:
        _fail(exc)
    if as_json:
        typer.echo(json.dumps(revisions.as_json(), indent=2))
        return
    for rev in revisions.revisions:
        count = rev.change_count
        typer.echo(f"r{rev.revision}  {rev.created_at[:19].replace('T', ' ')}  {rev.branch}  "
                   f"{rev.actor or '-'}  ({count} change{'' if count == 1 else 's'})  {rev.message or ''}")
        for change in rev.changes:
            if isinstance(change, NodeChangeEntry):
                typer.echo(f"    {change.op:<6} {change.workspace}:{change.path}")
            else:
                typer.echo(f"    {change.op:<6} {change.from_} -{change.type}-> {change.to}")
        if count > len(rev.changes) and changes:
            typer.echo(f"    ... and {count - len(rev.changes)} more")


def _conflict_lines(conflicts: list[dict]) -> list[str]:
    """Merge conflicts (:func:`kg.store.history.plan_merge`) as readable lines."""
    lines = []
    for c in conflicts:
        if c["kind"] == "lineage":  # kg.ops.merge_lineage: keep or drop the mention
            lines.append(f"lineage: {c['from']} -[{c['type']}]-> {c['to']}: {c['reason']}")
            continue
        if c["kind"] == "relation":
            lines.append(f"conflict: relation {c['from']} -[{c['type']}]-> {c['to']}: {c['reason']}")
            for side in ("base", "ours", "theirs"):
                lines.append(f"    {side}: {_value(c.get(side))}")
            continue
        lines.append(f"conflict: node {c['workspace']}:{c['path']}: {c['reason']}")
        sides = {side: (c.get(side) or {}) for side in ("base", "ours", "theirs")}
        keys = c.get("properties")
        if keys:
            for key in keys:
                values = ", ".join(f"{side} {_value((v.get('properties') or {}).get(key)) if v else '-'}"
                                   for side, v in sides.items())
                lines.append(f"    {key}: {values}")
        else:
            for side, v in sides.items():
                lines.append(f"    {side}: {_value(v.get('properties')) if v else 'absent'}")
    return lines


def _read_resolutions(file: Path) -> list[dict]:
    """The resolutions of ``--resolutions``: a JSON list, or an object with a ``resolutions`` list."""
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        typer.echo(f"error: cannot read {file}: {_one_line(str(exc))}", err=True)
        raise typer.Exit(1) from exc
    except json.JSONDecodeError as exc:
        typer.echo(f"error: {file} is not JSON: {exc.msg} at line {exc.lineno}", err=True)
        raise typer.Exit(1) from exc
    if isinstance(data, dict) and "resolutions" in data:
        data = data["resolutions"]
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        typer.echo(f"error: {file} must hold a list of resolutions (objects)", err=True)
        raise typer.Exit(1)
    return data


@app.command()
def merge(repo: Annotated[str, typer.Option(help="Repository.")],
          branch: Annotated[str, typer.Option(help="The branch merged.")],
          into: Annotated[str | None, typer.Option(help="The target (default: its parent).")] = None,
          dry_run: Annotated[bool, typer.Option("--dry-run", help="Say what it would do; write nothing.")] = False,
          resolutions: Annotated[Path | None, typer.Option(
              help="A JSON file: a list of {workspace, path, take: ours|theirs|value, value} or "
                   "{from, to, type, take: ours|theirs|keep|drop} (keep or drop: a lineage decision).")] = None,
          message: Annotated[str | None, typer.Option(help="The revision's message.")] = None,
          as_json: Annotated[bool, typer.Option("--json", help="Print the result's JSON.")] = False) -> None:
    """Merge a branch into its parent (or ``--into``): fast-forward or three-way, one revision.
    Conflicts are listed and nothing is written (exit 1)."""
    chosen = _read_resolutions(resolutions) if resolutions is not None else None
    try:
        services = _services()
        if dry_run:
            result = preview_merge(services, OPERATOR, repo, branch, into, resolutions=chosen)
        else:
            result = run(services, OPERATOR, merge_branch, repo, branch, into, resolutions=chosen, message=message)
    except MergeConflict as exc:
        conflicts = exc.details.get("conflicts", [])
        if as_json:
            typer.echo(json.dumps({"error": {"code": exc.code, "message": exc.message,
                                             "details": {"conflicts": conflicts}}}, indent=2, default=str))
        else:
            typer.echo("\n".join(_conflict_lines(conflicts)))
        typer.echo(f"error: {_one_line(exc.message.replace(chr(39) + 'resolutions' + chr(39), '--resolutions'))}; "
                   "nothing was written", err=True)
        raise typer.Exit(1) from exc
    except KGError as exc:
        _fail(exc)
    if as_json:
        typer.echo(json.dumps(result.as_json(), indent=2))
        return
    target = into or branch_ops.get_branch(services, OPERATOR, repo, branch).parent
    nodes, rels = result.applied.nodes, result.applied.relations
    how = "fast-forward" if result.fast_forward else "three-way"
    counts = (f"nodes {len(nodes.added)} added, {len(nodes.modified)} modified, "
              f"{len(nodes.deleted)} deleted; relations {rels.upserted} upserted, {rels.removed} removed")
    where = f"{branch} into {target}"
    if dry_run:
        typer.echo(f"dry run: merging {where} ({how}) would write {counts}")
        lineage = _derived_line(result.derived)
        if lineage:
            typer.echo(f"{lineage} (would be)")
    elif result.revision is None:
        typer.echo(f"merged {where}: nothing to apply (up to date)")
    else:
        typer.echo(f"merged {where} ({how}) as revision {result.revision}: {counts}")
        lineage = _derived_line(result.derived)
        if lineage:
            typer.echo(lineage)


def _derived_line(derived: DerivedRefresh | None) -> str:
    """One line of what lineage did in a write (empty when nothing), e.g. ``lineage: 2
    mention(s) unlinked, 1 entity(ies) flagged orphan``."""
    told = describe_derived(derived.model_dump() if derived is not None else {})
    return f"lineage: {told}" if told else ""


def _time_option(value: str | None, name: str):
    """A CLI time (ISO 8601 with a zone), or None; a bad one is a one-line error, exit 1."""
    try:
        return maybe_aware(value, name)
    except KGError as exc:
        _fail(exc)


@app.command()
def relate(repo: Annotated[str, typer.Option(help="Repository.")],
           source: Annotated[str, typer.Option("--from", help="Source node 'workspace:/path'.")],
           target: Annotated[str, typer.Option("--to", help="Target node 'workspace:/path'.")],
           rel_type: Annotated[str, typer.Option("--type", help="Relation type, e.g. works_at.")],
           branch: Annotated[str, typer.Option(help="Branch written.")] = "main",
           weight: Annotated[float | None, typer.Option(help="Weight (default: none).")] = None,
           valid_from: Annotated[str | None, typer.Option(
               "--valid-from", help="World time the fact holds from (ISO 8601 with a zone).")] = None,
           valid_to: Annotated[str | None, typer.Option(
               "--valid-to", help="World time the fact holds until (ISO 8601 with a zone).")] = None,
           message: Annotated[str | None, typer.Option(help="The revision's message.")] = None) -> None:
    """Assert a typed relation between two nodes, optionally valid over a world-time interval; a
    single-valued type (``kg relation-types``) invalidates the source's previous target."""
    try:
        services = _services()
        relation, created = run(services, OPERATOR, relation_ops.relate, repo, branch, source, target, rel_type,
                                weight=weight, valid_from=valid_from, valid_to=valid_to, message=message)
    except KGError as exc:
        _fail(exc)
    typer.echo(json.dumps({"created": created, **relation.as_json()}))


@app.command()
def invalidate(repo: Annotated[str, typer.Option(help="Repository.")],
               source: Annotated[str, typer.Option("--from", help="Source node 'workspace:/path'.")],
               target: Annotated[str, typer.Option("--to", help="Target node 'workspace:/path'.")],
               rel_type: Annotated[str, typer.Option("--type", help="Relation type.")],
               branch: Annotated[str, typer.Option(help="Branch written.")] = "main",
               valid_to: Annotated[str | None, typer.Option(
                   "--valid-to", help="When it stopped holding (ISO 8601 with a zone; default now).")] = None,
               invalidated_by: Annotated[str | None, typer.Option(
                   "--invalidated-by", help="What superseded it.")] = None,
               message: Annotated[str | None, typer.Option(help="The revision's message.")] = None) -> None:
    """Mark a relation as no longer holding from ``--valid-to`` (it stays in the history)."""
    try:
        services = _services()
        relation = run(services, OPERATOR, relation_ops.invalidate, repo, branch, source, target, rel_type,
                       valid_to=valid_to, invalidated_by=invalidated_by, message=message)
    except KGError as exc:
        _fail(exc)
    typer.echo(json.dumps(relation.as_json()))


@app.command("relation-types")
def relation_types(repo: Annotated[str, typer.Option(help="Repository.")],
                   workspace: Annotated[str, typer.Option(help="Workspace.")],
                   single_valued: Annotated[list[str] | None, typer.Option(
                       "--single-valued", help="Declare this type single-valued per source (repeat); "
                                               "replaces the list. Without it: show the list.")] = None,
                   clear: Annotated[bool, typer.Option("--clear", help="Declare no single-valued type.")] = False,
                   ) -> None:
    """Show or declare a workspace's single-valued relation types."""
    try:
        services = _services()
        if single_valued or clear:
            answer = run(services, OPERATOR, relation_ops.set_relation_types, repo, workspace,
                         [] if clear else list(single_valued or []))
        else:
            answer = relation_ops.get_relation_types(services, OPERATOR, repo, workspace)
    except KGError as exc:
        _fail(exc)
    typer.echo(json.dumps(answer.as_json()))


@app.command()
def neighbors(repo: Annotated[str, typer.Option(help="Repository.")],
              node: Annotated[str, typer.Option(help="Node 'workspace:/path'.")],
              branch: Annotated[str, typer.Option(help="Branch read.")] = "main",
              direction: Annotated[str, typer.Option(help="OUT, IN or BOTH.")] = "BOTH",
              as_of: Annotated[str | None, typer.Option(
                  "--as-of", help="World time (ISO 8601 with a zone): relations valid then; default now.")] = None,
              include_invalid: Annotated[bool, typer.Option(
                  "--include-invalid", help="Every relation, whatever its validity.")] = False,
              at_revision: Annotated[int | None, typer.Option("--at-revision", help="Read as of this revision.")]
              = None) -> None:
    """NEIGHBORS of a node: its current relations by default (JSON)."""
    when = _time_option(as_of, "as_of")
    try:
        services = _services()
        answer = graph_neighbors(services, OPERATOR, repo, branch, node, direction=direction, as_of=when,
                                 include_invalid=include_invalid, at_revision=at_revision)
    except KGError as exc:
        _fail(exc)
    typer.echo(json.dumps({"neighbors": list(answer["neighbors"]), "truncated": answer["truncated"]}))


@app.command()
def reindex(repo: Annotated[str, typer.Option(help="Repository whose search index to rebuild.")],
            index: Annotated[str | None, typer.Option(
                "--index", help="embedded | weaviate (default: KG_INDEX).")] = None,
            retry_failed: Annotated[bool, typer.Option(
                "--retry-failed", help="First queue the failed texts again (they are embedded).")] = False) -> None:
    """Rebuild a search index from the chunks and vectors stored in SQL (no re-embedding),
    after finishing any queued indexing. ``--index weaviate`` fills Weaviate
    (KG_WEAVIATE_URL) whatever KG_INDEX says. ``--retry-failed`` first sets the failed texts
    (``index/status`` lists them) back to pending, so they are embedded again, and reports how
    many (``retried``)."""
    try:
        services = _services()
        retried = run(services, OPERATOR, repo_ops.retry_failed_index, repo) if retry_failed else None
        target = services.index if index in (None, services.settings.index) else build_index(
            services.settings, index)
        try:
            rebuilt = repo_ops.rebuild_index(services, OPERATOR, repo, target)
        finally:
            if target is not services.index:
                target.close()
    except KGError as exc:
        _fail(exc)
    typer.echo(json.dumps({"repo": repo, "index": index or services.settings.index,
                           **(retried.model_dump() if retried is not None else {}), **rebuilt.model_dump()}))


@branch_app.command("create")
def branch_create(name: str, repo: Annotated[str, typer.Option()],
                  from_: Annotated[str, typer.Option("--from")] = "main") -> None:
    """Create a branch (one row; nothing is copied)."""
    try:
        services = _services()
        created = run(services, OPERATOR, branch_ops.create_branch, repo, name=name, from_branch=from_)
        typer.echo(json.dumps({"name": created.name, "base_revision": created.base_revision}))
    except KGError as exc:
        _fail(exc)


@branch_app.command("list")
def branch_list(repo: Annotated[str, typer.Option()]) -> None:
    """List branches."""
    try:
        services = _services()
        for b in branch_ops.list_branches(services, OPERATOR, repo).branches:
            typer.echo(f"{b.name}\tbase={b.base_revision}\thead={b.head_revision}")
    except KGError as exc:
        _fail(exc)


@branch_app.command("delete")
def branch_delete(name: str, repo: Annotated[str, typer.Option()]) -> None:
    """Delete a branch and what was written on it (not ``main``, not a branch with children)."""
    try:
        services = _services()
        run(services, OPERATOR, branch_ops.delete_branch, repo, name)
    except KGError as exc:
        _fail(exc)
    typer.echo(json.dumps({"deleted": name}))


@branch_app.command("reset")
def branch_reset(name: str, repo: Annotated[str, typer.Option()]) -> None:
    """Drop what was written on a branch and fork it again from its parent's head."""
    try:
        services = _services()
        reset = run(services, OPERATOR, branch_ops.reset_branch, repo, name)
    except KGError as exc:
        _fail(exc)
    typer.echo(json.dumps(reset.as_json()))


@app.command("mcp")
def mcp_stdio(repo: Annotated[str | None, typer.Option(help="Repository (local store).")] = None,
              branch: Annotated[str, typer.Option(help="Branch the tools act on by default.")] = "main",
              url: Annotated[str | None, typer.Option(
                  help="Relay to a kg server instead: http://HOST:PORT/mcp/REPO/BRANCH.")] = None,
              key: Annotated[str | None, typer.Option(
                  envvar="KG_MCP_KEY", help="API key for --url (or KG_MCP_KEY).")] = None) -> None:
    """Serve MCP over stdio for a desktop agent: on the local store as the operator (--repo,
    --branch), or relayed to a kg server's /mcp endpoint with an API key (--url, --key)."""
    from kg.mcp.stdio import relay_stdio, serve_stdio  # the MCP SDK: over a second to import

    if url is not None:
        anyio.run(relay_stdio, url, key)
        return
    if repo is None:
        typer.echo("error: give --repo (the local store) or --url (a kg server)", err=True)
        raise typer.Exit(1)
    try:
        services = _services()
        # the tools' default repository and branch exist: an agent whose every call would be a
        # not_found learns it from the exit, not from its first tool call
        branch_ops.get_branch(services, OPERATOR, repo, branch)
    except KGError as exc:
        _fail(exc)
    services.indexer.start()
    services.jobs.start()
    anyio.run(serve_stdio, services, repo, branch)


@keys_app.command("create")
def keys_create(name: Annotated[str, typer.Option(help="The key's name: the actor of its revisions.")],
                grant: Annotated[list[str] | None, typer.Option(
                    help="repo=NAME|*,branches=GLOB+GLOB,workspaces=GLOB,actions=read+write (repeatable).")] = None,
                admin: Annotated[bool, typer.Option("--admin", help="An administrator key: everything.")] = False,
                expires_in_days: Annotated[float | None, typer.Option(help="Days until it expires.")] = None) -> None:
    """Create an API key (needs KG_KEY_PEPPER); the token is printed once, never stored."""
    try:
        grants = [parse_grant(g) for g in grant or []]
        expires = utcnow() + timedelta(days=expires_in_days) if expires_in_days is not None else None
        services = _services()
        created = run(services, OPERATOR, key_ops.create_key, name=name, grants=grants, expires_at=expires,
                      admin=admin)
    except KGError as exc:
        _fail(exc)
    for warning in created.warnings:
        typer.echo(f"warning: {warning}", err=True)
    typer.echo(_model_json(created))
    err.print("[bold]Keep the key now: it is not shown again.[/bold]")


@keys_app.command("list")
def keys_list() -> None:
    """List API keys (never their secrets), one JSON object a line."""
    try:
        services = _services()
        for key in key_ops.list_keys(services, OPERATOR).keys:
            typer.echo(_model_json(key))
    except KGError as exc:
        _fail(exc)


@keys_app.command("revoke")
def keys_revoke(key_id: Annotated[str, typer.Argument(help="The key's id (`kg_<id>_...`).")]) -> None:
    """Revoke an API key: refused from the next request on."""
    try:
        services = _services()
        revoked = run(services, OPERATOR, key_ops.revoke_key, key_id)
    except KGError as exc:
        _fail(exc)
    typer.echo(_model_json(revoked))


@app.command("changes")
def changes(repo: Annotated[str, typer.Option(help="Repository.")],
            branch: Annotated[str | None, typer.Option(help="Only this branch.")] = None,
            after: Annotated[str | None, typer.Option(
                help="Resume after this cursor (an event's id, `<revision>[.<event>]`).")] = None,
            follow: Annotated[bool, typer.Option("--follow", help="Keep waiting for new events.")] = False,
            limit: Annotated[int, typer.Option(help="Events read at a time (1 to 1000).")] = 100) -> None:
    """The repository's change feed: one JSON line per event (revision, merge, branch created,
    reset, deleted), oldest first; with --follow, new ones as they are written."""
    try:
        services = _services()
        while True:
            page = change_ops.changes(services, OPERATOR, repo, branch=branch, after=after, limit=limit)
            for event in page.events:
                typer.echo(_model_json(event))
            after = page.next_after
            if not page.has_more:
                if not follow:
                    return
                time.sleep(services.settings.changes_poll_s)
    except KGError as exc:
        _fail(exc)


@webhooks_app.command("add")
def webhooks_add(repo: Annotated[str, typer.Option(help="Repository.")],
                 url: Annotated[str, typer.Option(help="Where to POST events (allowed by KG_WEBHOOK_ALLOWED_URLS).")],
                 branch: Annotated[list[str] | None, typer.Option(help="Branch glob (repeatable; default *).")] = None,
                 event: Annotated[list[str] | None, typer.Option(
                     help="Event kind: revision, merge, branch.created, branch.reset, branch.deleted "
                          "(repeatable; default all).")] = None) -> None:
    """Register a webhook; prints it with its signing secret, shown this once."""
    try:
        services = _services()
        created = run(services, OPERATOR, webhook_ops.add_webhook, repo, url, branches=branch or ["*"],
                      events=event)
    except KGError as exc:
        _fail(exc)
    typer.echo(_model_json(created))
    err.print("[bold]Keep the secret now: it is not shown again.[/bold]")


@webhooks_app.command("list")
def webhooks_list(repo: Annotated[str, typer.Option(help="Repository.")]) -> None:
    """List the repository's webhooks (never their secrets), one JSON object a line."""
    try:
        services = _services()
        for hook in webhook_ops.list_webhooks(services, OPERATOR, repo).webhooks:
            typer.echo(_model_json(hook))
    except KGError as exc:
        _fail(exc)


@webhooks_app.command("remove")
def webhooks_remove(repo: Annotated[str, typer.Option(help="Repository.")],
                    webhook_id: Annotated[str, typer.Argument(help="The webhook's id.")]) -> None:
    """Delete a webhook and its delivery log."""
    try:
        services = _services()
        run(services, OPERATOR, webhook_ops.remove_webhook, repo, webhook_id)
    except KGError as exc:
        _fail(exc)
    typer.echo(json.dumps({"removed": webhook_id}))


def main() -> None:
    """The ``kg`` entry point: every error is one line on stderr and exit code 1; a closed
    pipe on standard output (``kg export | head``) ends it quietly with 1 (click's way)."""
    try:
        try:
            code = app(standalone_mode=False)
        finally:
            _close_opened()
    except ValidationError as exc:  # a bad KG_* setting
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        # A check across settings (a model validator) has no single setting to name.
        message = _one_line(first["msg"]).removeprefix("Value error, ")
        typer.echo(f"error: invalid setting KG_{where.upper()}: {message}" if where
                   else f"error: invalid settings: {message}", err=True)
        sys.exit(1)
    except KGError as exc:
        typer.echo(f"error: {_one_line(exc.message)}", err=True)
        sys.exit(1)
    except OSError as exc:
        typer.echo(f"error: {_one_line(str(exc))}", err=True)
        sys.exit(1)
    except Exception as exc:  # typer vendors click: match its exceptions by what they carry
        if type(exc).__name__ == "Exit" and hasattr(exc, "exit_code"):
            sys.exit(exc.exit_code)
        if type(exc).__name__ == "Abort":
            typer.echo("error: aborted", err=True)
            sys.exit(1)
        if not hasattr(exc, "format_message"):
            raise
        message = _one_line(exc.format_message()) or "missing command (see the usage above)"
        typer.echo(f"error: {message}", err=True)
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":  # pragma: no cover
    main()
