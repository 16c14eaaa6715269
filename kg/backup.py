"""Backup and restore of a whole store: every repository, branch, revision, key and queued job (the
database), and the embedded index's snapshots (derived state under ``KG_DATA_DIR/index``).

A backup is a folder::

    manifest.json   kg version, database kind, migration head, repositories with their head
                    revisions, every file with its size and SHA-256, the recorded probes
    kg.sqlite3      SQLite: a copy by SQLite's online backup API (sqlite.org/backup.html)
    kg.dump         PostgreSQL: ``pg_dump -Fc`` of the store's schema
    index/<uid>/    the embedded index's snapshot of each repository (kg.index.embedded)

**Consistency.** The database copy is one transaction's view, taken while writers go on: SQLite's
backup API copies every page in one step under a read transaction (WAL readers never block
writers, and the copy is of one commit), PostgreSQL's ``pg_dump`` runs in a snapshot exported
by a repeatable-read transaction kg holds open (``pg_export_snapshot``), in which the manifest's
revisions are read too. The index snapshots are copied *before* the database: a snapshot's files
are immutable once ``meta.json`` names them (each is written aside and renamed; a newer snapshot
has new names), so kg reads ``meta.json``, opens the files it names (or links them) and copies
those, retrying when a flush removed one first. Every chunk an index holds was committed before
it was indexed, and chunk ``seq`` grows in commit order under the repository's revision lock
(:class:`kg.index.base.ChunkFeed`), so a snapshot with watermark ``W`` copied before a database
copy at revision ``R'`` holds only chunks the copy holds: the restored index loads it and its
catch-up adds the chunks above ``W`` from SQL, as it does after any restart. Rows of the snapshot
that the copy no longer references (a node deleted meanwhile) are in no branch state's content
keys, so no search sees them.

**Claims.** A copy of a live store holds the jobs its workers were running at the cut
(``running``, claimed by a worker of the original) and those workers' rows. They belong to no
process of the restored store, and the original's processes may still run, so neither their pid
nor a lease would free them before the lease expired: :func:`restore_store` requeues them as they
were (no death counted) and forgets the workers, and the restored store's first worker runs them.

**Probes.** After the copy, kg reads the copy itself (SQLite: the copied file; PostgreSQL: the
exported snapshot) through the ordinary read use cases: per repository (at most
:data:`MAX_REPOSITORIES`) and branch (``main`` and at most :data:`MAX_BRANCHES` in all), the log,
hybrid searches of passages' first words and NEIGHBORS of related nodes, as of the branch's
revision in the copy, on a private index loaded from the copied snapshots (searched exactly: an
HNSW graph is approximate, and what is checked is the data). :func:`verify_store` reads a
restored store the same way and compares.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import sqlite3
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, event, func, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

import kg
from kg.context import Actor, Resources
from kg.errors import BackendUnavailable, Conflict, Forbidden, InvalidInput, KGError
from kg.indexing.index_jobs import INDEX_QUEUE
from kg.indexing.queue import release_claims
from kg.ops import queries
from kg.ops.webhooks import WEBHOOK_QUEUE
from kg.rag.function_jobs import FUNCTION_QUEUE
from kg.rag.graph import neighbors as graph_neighbors
from kg.rag.search import SearchRequest, search_branch
from kg.settings import Settings
from kg.store.db import Database, alembic_config
from kg.store.models import Branch, Chunk, RelationVersion, Repository
from kg.types.backup import (
    BACKUP_FORMAT,
    BackupFile,
    DatabaseKind,
    Manifest,
    Probe,
    ProbeKind,
    ProbeMismatch,
    RepositoryState,
    VerifyReport,
)

__all__ = ["MANIFEST", "StoreFactory", "backup_store", "check_backup", "copy_index", "read_manifest", "restore_store",
           "verify_store"]

log = logging.getLogger("kg.backup")

MANIFEST = "manifest.json"
SQLITE_FILE = "kg.sqlite3"
DUMP_FILE = "kg.dump"
INDEX_DIR = "index"
#: Repositories probed, in name order, and branches per repository (``main`` first).
MAX_REPOSITORIES = 8
MAX_BRANCHES = 3
#: Searches and NEIGHBORS recorded per branch.
PROBES_PER_KIND = 3
_COPY_ATTEMPTS = 20

#: Builds a store's services from settings (the CLI passes ``Services.from_settings``).
StoreFactory = Callable[[Settings], Resources]


def _require_operator(caller: Actor) -> None:
    if not caller.is_admin:
        raise Forbidden("backup and restore need an administrator")


def _kind(url: str) -> DatabaseKind:
    backend = make_url(url).get_backend_name()
    if backend == "sqlite":
        return "sqlite"
    if backend == "postgresql":
        return "postgresql"
    raise InvalidInput(f"cannot back up a {backend!r} database: kg stores are SQLite or PostgreSQL")


def _sqlite_path(url: str) -> Path:
    database = make_url(url).database
    if not database or database == ":memory:":
        raise InvalidInput("an in-memory SQLite database has nothing to back up or restore into")
    return Path(database)


# -- backup --------------------------------------------------------------------------------------


def backup_store(services: Resources, caller: Actor, dest: Path, *, open_store: StoreFactory,
                 probes: bool = True) -> Manifest:
    """Write a backup of the whole store into the new folder ``dest``, while it serves.

    Parameters
    ----------
    services : kg.context.Resources
        The store backed up (its settings name the database and data directory).
    caller : kg.context.Actor
        Who asks: the operator or an administrator.
    dest : Path
        A folder that does not exist yet (or is empty); the backup is written beside it and
        renamed into place once complete, so ``dest`` never holds a partial backup.
    open_store : callable(Settings) -> Resources
        Opens a store (the probes read the copy through one).
    probes : bool
        Record the probes :func:`verify_store` compares (default on).

    Returns
    -------
    kg.types.backup.Manifest
        What was written to ``dest/manifest.json``.

    Raises
    ------
    kg.errors.Forbidden
        A caller that is not an administrator.
    kg.errors.Conflict
        ``dest`` exists and is not an empty folder.
    kg.errors.InvalidInput
        A database kg cannot back up (in-memory SQLite).
    kg.errors.BackendUnavailable
        The database cannot be read, or ``pg_dump`` is missing or failed.
    """
    _require_operator(caller)
    dest = Path(dest)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise Conflict(f"{dest} exists and is not an empty folder: back up into a new one",
                       details={"dest": str(dest)})
    settings = services.settings
    url = settings.resolved_database_url()
    kind = _kind(url)
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.partial-", dir=dest.parent))
    try:
        if settings.index == "embedded":
            copy_index(settings.data_dir / INDEX_DIR, staging / INDEX_DIR)
        if kind == "sqlite":
            manifest = _backup_sqlite(settings, caller, url, staging, open_store, probes)
        else:
            manifest = _backup_postgres(settings, caller, url, staging, open_store, probes)
        _write_manifest(staging, manifest)
        if dest.exists():
            dest.rmdir()
        os.replace(staging, dest)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return manifest


def copy_index(source: Path, target: Path) -> None:
    """Copy the embedded index's committed snapshots from ``source`` (``data_dir/index``) to
    ``target``: per repository, ``meta.json`` and the files it names, opened before any is
    copied (a flush may remove them once a newer ``meta.json`` is in place; an open file stays
    readable), again from a fresh ``meta.json`` when one was removed first. A folder without
    ``meta.json`` (none written yet) is skipped: its repository is rebuilt from SQL.

    Parameters
    ----------
    source : Path
        The live index folder.
    target : Path
        Where the copies go (``<target>/<repository uid>/``).

    Raises
    ------
    kg.errors.BackendUnavailable
        A snapshot kept changing under the copy (more than ``_COPY_ATTEMPTS`` flushes).
    """
    if not source.is_dir():
        return
    for folder in sorted(p for p in source.iterdir() if p.is_dir() and not p.name.startswith(".")):
        for _ in range(_COPY_ATTEMPTS):
            try:
                meta_bytes = (folder / "meta.json").read_bytes()
            except FileNotFoundError:
                break
            try:
                names = _snapshot_files(json.loads(meta_bytes))
            except (ValueError, KeyError, TypeError):
                break  # a damaged snapshot: the index ignores it too
            with contextlib.ExitStack() as stack:
                try:
                    opened = {name: stack.enter_context((folder / name).open("rb")) for name in names}
                except FileNotFoundError:
                    continue  # a flush replaced the snapshot between the two reads
                out = target / folder.name
                out.mkdir(parents=True, exist_ok=True)
                for name, handle in opened.items():
                    with (out / name).open("wb") as copy:
                        shutil.copyfileobj(handle, copy, 1 << 20)
                (out / "meta.json").write_bytes(meta_bytes)
            break
        else:
            raise BackendUnavailable(f"the index snapshot in {folder} kept changing during the backup: retry")


def _snapshot_files(meta: dict[str, Any]) -> list[str]:
    names = [meta["rows_file"]]
    for model in meta.get("models", []):
        names.append(model["file"])
        if "hnsw" in model:
            names.append(model["hnsw"]["file"])
    for name in names:
        if not isinstance(name, str) or Path(name).name != name or name.startswith("."):
            raise ValueError(f"bad file name {name!r}")
    return names


def _backup_sqlite(settings: Settings, caller: Actor, url: str, staging: Path, open_store: StoreFactory,
                   probes: bool) -> Manifest:
    source = _sqlite_path(url)
    if not source.exists():
        raise BackendUnavailable(f"no database at {source}")
    copy = staging / SQLITE_FILE
    try:
        src = sqlite3.connect(source, timeout=settings.sqlite_busy_timeout_s)
        try:
            dst = sqlite3.connect(copy)
            try:
                # One step (pages=-1): the whole database under one read transaction, a single
                # commit's state whatever the writers do meanwhile.
                src.backup(dst, pages=-1)
            finally:
                dst.close()
        finally:
            src.close()
    except sqlite3.Error as exc:
        raise BackendUnavailable(f"cannot back up {source}: {exc}") from exc
    copy_url = f"sqlite:///{copy.resolve()}"
    head, repositories = _read_state(Database(copy_url), None)
    recorded = _record_probes(settings, caller, copy_url, staging, repositories, None, open_store) if probes else []
    _self_contained(copy)
    return _manifest(settings, "sqlite", None, head, repositories, staging, recorded)


def _self_contained(path: Path) -> None:
    """Leave a SQLite copy as one file (rollback journal, no ``-wal``)."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA journal_mode=DELETE")
    finally:
        conn.close()


def _libpq(url: str) -> tuple[str, dict[str, str]]:
    """A libpq connection string for ``url`` (a SQLAlchemy URL) and the environment holding its
    password (never on a command line)."""
    parsed = make_url(url)
    env = dict(os.environ)
    if parsed.password is not None:
        env["PGPASSWORD"] = str(parsed.password)
    plain = parsed.set(drivername="postgresql", password=None)
    return plain.render_as_string(hide_password=False), env


def _pg_tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise BackendUnavailable(f"{name} not found: install PostgreSQL's client tools (postgresql-client)")
    return found


def _run_tool(argv: list[str], env: dict[str, str]) -> None:
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        raise BackendUnavailable(f"{Path(argv[0]).name} failed: {last}")


def _backup_postgres(settings: Settings, caller: Actor, url: str, staging: Path, open_store: StoreFactory,
                     probes: bool) -> Manifest:
    pg_dump = _pg_tool("pg_dump")
    conninfo, env = _libpq(url)
    db = Database(url)
    try:
        with db.engine.connect() as holder:
            # The snapshot the dump, the manifest and the probes read: valid while this
            # transaction is open.
            holder.exec_driver_sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            snapshot = holder.exec_driver_sql("SELECT pg_export_snapshot()").scalar_one()
            schema = holder.exec_driver_sql("SELECT current_schema()").scalar_one()
            with Session(bind=holder) as session:
                head, repositories = _read_state(None, session)
            _run_tool([pg_dump, "--format=custom", f"--snapshot={snapshot}", f"--schema={schema}",
                       "--no-owner", "--no-acl", f"--file={staging / DUMP_FILE}", f"--dbname={conninfo}"], env)
            recorded = (_record_probes(settings, caller, url, staging, repositories, snapshot, open_store)
                        if probes else [])
            holder.rollback()
    finally:
        db.dispose()
    return _manifest(settings, "postgresql", schema, head, repositories, staging, recorded)


def _read_state(db: Database | None, session: Session | None) -> tuple[str, list[RepositoryState]]:
    """The migration head and every repository's and branch's head revision."""
    with contextlib.ExitStack() as stack:
        if session is None:
            assert db is not None
            stack.callback(db.dispose)
            session = stack.enter_context(db.read())
        head = session.execute(text("SELECT version_num FROM alembic_version")).scalar_one()
        branches: dict[int, dict[str, int]] = {}
        for repo_id, name, revision in session.execute(
                select(Branch.repo_id, Branch.name, Branch.head_revision).order_by(Branch.repo_id, Branch.name)):
            branches.setdefault(repo_id, {})[name] = revision
        repositories = [RepositoryState(name=r.name, uid=r.uid, head_revision=r.head_revision,
                                        branches=branches.get(r.id, {}))
                        for r in session.scalars(select(Repository).order_by(Repository.name))]
    return str(head), repositories


def _manifest(settings: Settings, kind: DatabaseKind, schema: str | None, head: str,
              repositories: list[RepositoryState], staging: Path, probes: list[Probe]) -> Manifest:
    files = [BackupFile(path=p.relative_to(staging).as_posix(), bytes=p.stat().st_size, sha256=_sha256(p))
             for p in sorted(staging.rglob("*")) if p.is_file()]
    return Manifest(format=BACKUP_FORMAT, kg_version=kg.__version__,
                    created_at=datetime.now(UTC).isoformat(timespec="seconds"), database=kind,
                    schema_name=schema, migration_head=head, index=settings.index,
                    repositories=repositories, files=files, probes=probes)


def _write_manifest(folder: Path, manifest: Manifest) -> None:
    path = folder / MANIFEST
    with path.open("w", encoding="utf-8") as fh:
        fh.write(manifest.model_dump_json(indent=1))
        fh.flush()
        os.fsync(fh.fileno())


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


# -- probes --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Target:
    """Where probes read: a database URL (pinned to an exported PostgreSQL snapshot or not) and
    the index snapshots to load (linked into a scratch data directory)."""

    url: str
    index_dir: Path
    snapshot: str | None = None


@contextlib.contextmanager
def _probe_store(settings: Settings, target: _Target, open_store: StoreFactory) -> Iterator[Resources]:
    """A store over ``target`` whose index is private (a scratch data directory holding links to
    the snapshots, so nothing it writes reaches them) and searched exactly."""
    scratch = Path(tempfile.mkdtemp(prefix=".kg-probe-"))
    try:
        if target.index_dir.is_dir():
            shutil.copytree(target.index_dir, scratch / INDEX_DIR, copy_function=_link_or_copy)
        probe_settings = settings.model_copy(update={
            "database_url": target.url, "data_dir": scratch, "index": "embedded", "index_ann_min_rows": 0,
            "index_flush_interval_s": 1e9, "index_memory_budget_mb": 0, "metrics": False, "rerank_model": "none"})
        store = open_store(probe_settings)
        try:
            if target.snapshot is not None:
                _pin_to_snapshot(store.db, target.snapshot)
            yield store
        finally:
            close = getattr(store, "close", None)
            if close is not None:
                close()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _link_or_copy(src: str, dst: str) -> str:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
    return dst


def _pin_to_snapshot(db: Database, snapshot: str) -> None:
    """Every transaction of ``db`` reads the exported PostgreSQL snapshot ``snapshot``."""

    @event.listens_for(db.engine, "begin")
    def _begin(connection: Connection) -> None:
        connection.exec_driver_sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        connection.exec_driver_sql(f"SET TRANSACTION SNAPSHOT '{snapshot}'")


def _record_probes(settings: Settings, caller: Actor, url: str, staging: Path,
                   repositories: list[RepositoryState], snapshot: str | None,
                   open_store: StoreFactory) -> list[Probe]:
    with _probe_store(settings, _Target(url, staging / INDEX_DIR, snapshot), open_store) as store:
        planned = _plan_probes(store, repositories)
        return [_answer(store, caller, probe) for probe in planned]


def _plan_probes(store: Resources, repositories: list[RepositoryState]) -> list[Probe]:
    """The reads to record: per repository, the log, searches and NEIGHBORS of some branches."""
    planned: list[Probe] = []
    for repo in repositories[:MAX_REPOSITORIES]:
        names = sorted(repo.branches, key=lambda b: (b != "main", b))[:MAX_BRANCHES]
        with store.db.read() as session:
            repo_id = session.scalar(select(Repository.id).where(Repository.uid == repo.uid))
            queries_ = _spread(session, repo_id, Chunk.seq, Chunk.text)
            addresses = _spread(session, repo_id, RelationVersion.id, RelationVersion.from_address)
        for branch in names:
            def probe(kind: ProbeKind, args: dict[str, Any], branch: str = branch,
                      repo: RepositoryState = repo) -> Probe:
                return Probe(kind=kind, repo=repo.name, branch=branch, at_revision=repo.head_revision,
                             args=args, digest="")

            planned.append(probe("log", {"limit": 20}))
            planned += [probe("search", {"query": " ".join(p.split()[:8]), "k": 10}) for p in queries_ if p.split()]
            planned += [probe("neighbors", {"address": a}) for a in addresses if a]
    return planned


def _spread(session: Session, repo_id: int | None, key: Any, column: Any) -> list[Any]:
    """``column`` of up to :data:`PROBES_PER_KIND` rows of the repository spread over ``key``'s
    range (first, middle, last): cheap on an indexed key at any size."""
    if repo_id is None:
        return []
    table = key.class_
    low, high = session.execute(select(func.min(key), func.max(key)).where(table.repo_id == repo_id)).one()
    if low is None:
        return []
    out: list[Any] = []
    for step in range(PROBES_PER_KIND):
        mark = low + (high - low) * step // max(PROBES_PER_KIND - 1, 1)
        value = session.scalar(select(column).where(table.repo_id == repo_id, key >= mark).order_by(key).limit(1))
        if value is not None and value not in out:
            out.append(value)
    return out


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def _answer(store: Resources, caller: Actor, probe: Probe) -> Probe:
    """``probe`` with the digest and summary of its answer on ``store``."""
    answer: Any
    summary: Any
    try:
        if probe.kind == "log":
            log = queries.revision_log(store, caller, probe.repo, probe.branch, limit=probe.args["limit"],
                                       at_revision=probe.at_revision, max_changes=5)
            answer = [r.as_json() for r in log.revisions]
            summary = [r.revision for r in log.revisions]
        elif probe.kind == "search":
            result = search_branch(store, caller, probe.repo, probe.branch,
                                   SearchRequest(query=probe.args["query"], k=probe.args["k"]),
                                   at_revision=probe.at_revision)
            answer = [[r.workspace, r.path, r.chunk_index, round(r.score, 6)] for r in result.results]
            summary = [f"{r[0]}:{r[1]}" for r in answer]
        else:
            found = graph_neighbors(store, caller, probe.repo, probe.branch, probe.args["address"], limit=50,
                                    at_revision=probe.at_revision)
            answer = {"neighbors": list(found["neighbors"]), "truncated": found["truncated"]}
            summary = len(answer["neighbors"])
    except KGError as exc:
        answer = summary = {"error": exc.code}
    digest = hashlib.sha256(_canonical(answer).encode()).hexdigest()
    return probe.model_copy(update={"digest": digest, "summary": summary})


# -- restore -------------------------------------------------------------------------------------


def read_manifest(src: Path) -> Manifest:
    """The manifest of the backup folder ``src``.

    Parameters
    ----------
    src : Path
        A backup folder.

    Returns
    -------
    kg.types.backup.Manifest
        As written, not checked against the files (:func:`check_backup` does).

    Raises
    ------
    kg.errors.InvalidInput
        No manifest, or one kg cannot read (another format).
    """
    path = Path(src) / MANIFEST
    try:
        raw = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise InvalidInput(f"{src} is not a kg backup: no {MANIFEST}") from None
    except (OSError, ValueError) as exc:
        raise InvalidInput(f"cannot read {path}: {exc}") from exc
    if not isinstance(raw, dict) or raw.get("format") != BACKUP_FORMAT:
        found = raw.get("format") if isinstance(raw, dict) else None
        raise InvalidInput(f"{path} is of backup format {found!r}; this kg reads format {BACKUP_FORMAT}")
    try:
        return Manifest.model_validate(raw)
    except ValueError as exc:
        raise InvalidInput(f"{path} is not a valid manifest: {' '.join(str(exc).split())[:200]}") from exc


def check_backup(src: Path) -> Manifest:
    """Check the backup folder ``src`` before anything is restored from it: its manifest, a
    migration head this kg knows (not a newer one), and every file's size and SHA-256.

    Parameters
    ----------
    src : Path
        A folder written by :func:`backup_store`.

    Returns
    -------
    kg.types.backup.Manifest
        Its manifest, checked.

    Raises
    ------
    kg.errors.InvalidInput
        No or a bad manifest, a newer migration head, a missing, resized or corrupted file.
    """
    src = Path(src)
    manifest = read_manifest(src)
    known = _known_migrations()
    if manifest.migration_head not in known:
        raise InvalidInput(f"the backup's database is at migration {manifest.migration_head}, which this kg "
                           f"(version {kg.__version__}) does not know: restore it with a newer kg")
    for entry in manifest.files:
        path = src / entry.path
        if Path(entry.path).is_absolute() or ".." in Path(entry.path).parts:
            raise InvalidInput(f"the manifest names a file outside the backup: {entry.path!r}")
        if not path.is_file():
            raise InvalidInput(f"the backup is incomplete: {entry.path} is missing")
        if path.stat().st_size != entry.bytes:
            raise InvalidInput(f"the backup is corrupted: {entry.path} has {path.stat().st_size} bytes, "
                               f"the manifest says {entry.bytes}")
        if _sha256(path) != entry.sha256:
            raise InvalidInput(f"the backup is corrupted: {entry.path} does not match its SHA-256")
    expected = {SQLITE_FILE if manifest.database == "sqlite" else DUMP_FILE}
    if not expected <= {f.path for f in manifest.files}:
        raise InvalidInput(f"the backup is incomplete: the manifest names no {expected.pop()}")
    return manifest


def _known_migrations() -> set[str]:
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    return {rev.revision for rev in script.walk_revisions()}


def restore_store(settings: Settings, caller: Actor, src: Path, *, force: bool = False) -> Manifest:
    """Restore the backup folder ``src`` into the store ``settings`` names (its database and
    ``data_dir``), then apply any migration newer than the backup's and requeue the jobs that
    were running at the cut (the module's **Claims**). Stop ``kg serve`` first.

    Parameters
    ----------
    settings : Settings
        The target: ``KG_DATABASE_URL`` (or the SQLite file in ``KG_DATA_DIR``) and
        ``KG_DATA_DIR`` (the index snapshots). The database must be of the backup's kind.
    caller : kg.context.Actor
        The operator or an administrator.
    src : Path
        A folder written by :func:`backup_store`.
    force : bool
        Replace a target that holds data (default: refuse it).

    Returns
    -------
    kg.types.backup.Manifest
        The restored backup's manifest.

    Raises
    ------
    kg.errors.Forbidden
        A caller that is not an administrator.
    kg.errors.InvalidInput
        A bad backup (:func:`check_backup`), or a target of another database kind or (PostgreSQL)
        another schema.
    kg.errors.Conflict
        The target holds data and ``force`` is off.
    kg.errors.BackendUnavailable
        The target cannot be written, or ``pg_restore`` is missing or failed (nothing restored).
    """
    _require_operator(caller)
    src = Path(src)
    manifest = check_backup(src)
    url = settings.resolved_database_url()
    kind = _kind(url)
    if kind != manifest.database:
        raise InvalidInput(f"the backup is of a {manifest.database} store and the target database is "
                           f"{kind}: set KG_DATABASE_URL to a {manifest.database} database")
    index_dir = settings.data_dir / INDEX_DIR
    if kind == "postgresql":
        _check_schema(url, manifest)
    held = _holds_data(url, kind) or (index_dir.is_dir() and any(index_dir.iterdir()))
    if held and not force:
        raise Conflict("the target store is not empty: restore into an empty one, or pass --force to replace it",
                       details={"database": make_url(url).render_as_string(hide_password=True)})
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    staged_index = Path(tempfile.mkdtemp(prefix=".index.restore-", dir=settings.data_dir))
    try:
        if (src / INDEX_DIR).is_dir():
            shutil.copytree(src / INDEX_DIR, staged_index, dirs_exist_ok=True)
        if kind == "sqlite":
            _restore_sqlite(src / SQLITE_FILE, _sqlite_path(url))
        else:
            _restore_postgres(src / DUMP_FILE, url)
        _swap_in(staged_index, index_dir)
    except BaseException:
        shutil.rmtree(staged_index, ignore_errors=True)
        raise
    db = Database(url, busy_timeout_s=settings.sqlite_busy_timeout_s)
    try:
        db.upgrade()
        with db.write() as session:
            released = release_claims(session, (INDEX_QUEUE, FUNCTION_QUEUE, WEBHOOK_QUEUE))
        if released:
            log.info("restore: %d job(s) claimed by the original's workers at the cut requeued", released)
    finally:
        db.dispose()
    return manifest


def _holds_data(url: str, kind: DatabaseKind) -> bool:
    """Whether the target database has any table with a row (kg's or another's)."""
    if kind == "sqlite" and not _sqlite_path(url).exists():
        return False
    db = Database(url)
    try:
        with db.read() as session:
            if kind == "sqlite":
                tables = session.execute(text(
                    "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")).scalars()
            else:
                tables = session.execute(text(
                    "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")).scalars()
            for table in list(tables):
                if table == "alembic_version":
                    continue
                quoted = '"' + str(table).replace('"', '""') + '"'
                if session.execute(text(f"SELECT 1 FROM {quoted} LIMIT 1")).first() is not None:
                    return True
    except KGError:
        raise
    except Exception as exc:
        raise BackendUnavailable(f"cannot read the target database: {' '.join(str(exc).split())[:200]}") from exc
    finally:
        db.dispose()
    return False


def _check_schema(url: str, manifest: Manifest) -> None:
    """A PostgreSQL dump is restored under its schema's name: the target's search path must name
    it first, as the backed-up store's did."""
    db = Database(url)
    try:
        with db.engine.connect() as conn:
            path = conn.exec_driver_sql("SHOW search_path").scalar_one()
    except Exception as exc:
        raise BackendUnavailable(f"cannot reach the target database: {' '.join(str(exc).split())[:200]}") from exc
    finally:
        db.dispose()
    first = next((s.strip().strip('"') for s in str(path).split(",") if s.strip() != '"$user"'), "public")
    if first != manifest.schema_name:
        raise InvalidInput(f"the backup holds schema {manifest.schema_name!r} and the target database's search "
                           f"path starts with {first!r}: point KG_DATABASE_URL at schema {manifest.schema_name!r} "
                           f"(options=-csearch_path={manifest.schema_name})")


def _restore_sqlite(copy: Path, target: Path) -> None:
    """Copy the backup's database beside ``target``, then rename it over: the old file and its
    write-ahead log go at once."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.restore-", dir=target.parent)
    os.close(fd)
    try:
        shutil.copyfile(copy, tmp)
        shutil.copymode(copy, tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        for suffix in ("-wal", "-shm"):
            Path(f"{target}{suffix}").unlink(missing_ok=True)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _restore_postgres(dump: Path, url: str) -> None:
    """``pg_restore`` in one transaction: all of it or nothing. ``--clean --if-exists`` drops each
    object it restores first, the schema too: a dump of ``public`` recreates it, which a new
    database already has (and a forced restore replaces what the target held)."""
    pg_restore = _pg_tool("pg_restore")
    conninfo, env = _libpq(url)
    _run_tool([pg_restore, "--single-transaction", "--exit-on-error", "--no-owner", "--no-acl", "--clean",
               "--if-exists", f"--dbname={conninfo}", str(dump)], env)


def _swap_in(staged: Path, index_dir: Path) -> None:
    """Put the staged index folder in place of ``index_dir`` (the old one is removed)."""
    old: Path | None = None
    if index_dir.exists():
        old = index_dir.with_name(f".index.old-{os.getpid()}-{time.monotonic_ns()}")
        os.replace(index_dir, old)
    os.replace(staged, index_dir)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


# -- verify --------------------------------------------------------------------------------------


def verify_store(settings: Settings, caller: Actor, src: Path, *, open_store: StoreFactory) -> VerifyReport:
    """Whether the store ``settings`` names answers the probes recorded in the backup ``src``
    alike (its searches' hits and order, logs and NEIGHBORS), read on a private copy of its index.

    Parameters
    ----------
    settings : Settings
        The store checked (after :func:`restore_store`, the restored one).
    caller : kg.context.Actor
        The operator or an administrator.
    src : Path
        The backup folder whose manifest holds the probes.
    open_store : callable(Settings) -> Resources
        Opens the store.

    Returns
    -------
    kg.types.backup.VerifyReport
        How many probes matched, and what each one that did not answered.

    Raises
    ------
    kg.errors.Forbidden
        A caller that is not an administrator.
    kg.errors.InvalidInput
        No or a bad manifest.
    """
    _require_operator(caller)
    manifest = read_manifest(Path(src))
    target = _Target(settings.resolved_database_url(), settings.data_dir / INDEX_DIR)
    mismatches: list[ProbeMismatch] = []
    with _probe_store(settings, target, open_store) as store:
        for probe in manifest.probes:
            got = _answer(store, caller, probe.model_copy(update={"digest": "", "summary": None}))
            if got.digest != probe.digest:
                mismatches.append(ProbeMismatch(kind=probe.kind, repo=probe.repo, branch=probe.branch,
                                                args=probe.args, expected=probe.summary, got=got.summary))
    total = len(manifest.probes)
    return VerifyReport(ok=not mismatches, probes=total, matched=total - len(mismatches), mismatches=mismatches)
