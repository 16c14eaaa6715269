"""Engines and sessions: SQLite (WAL, busy timeout, foreign keys, ``BEGIN IMMEDIATE`` for
writes) or PostgreSQL, and the Alembic upgrade that creates the schema. The caller owns the
transaction (:meth:`Database.write`, :meth:`Database.read`); store functions never commit.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import Dialect, make_url
from sqlalchemy.exc import ArgumentError, OperationalError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from kg.errors import BackendUnavailable
from kg.store.repos import count_config_changes
from kg.tracing import span

if TYPE_CHECKING:
    from alembic.config import Config

_upgrade_lock = threading.Lock()


log = logging.getLogger(__name__)

#: How a SQLite file's write-ahead log is folded into the database (:class:`Database`'s
#: ``checkpoint``, ``KG_SQLITE_CHECKPOINT``).
CheckpointMode = Literal["background", "commit"]


class Database:
    """One engine and its session factories.

    Parameters
    ----------
    url : str
        ``sqlite:///path`` or ``postgresql+psycopg://...``.
    busy_timeout_s : float
        SQLite's lock wait, in seconds.
    checkpoint : {"background", "commit"}
        SQLite file only: who folds the write-ahead log into the database file. ``commit``:
        SQLite's automatic checkpoint, run by the write whose commit takes the log past 1,000
        pages (that write waits for the copy and its two syncs: 8 MiB at kg's page size).
        ``background``: a thread of this process (:class:`_Checkpointer`), after writes, never
        inside one; writes do not checkpoint (``PRAGMA wal_autocheckpoint=0``).
    """

    def __init__(self, url: str, *, busy_timeout_s: float = 30.0, checkpoint: CheckpointMode = "background") -> None:
        self.url = url
        self.busy_timeout_s = busy_timeout_s
        try:
            parsed = make_url(url)
        except ArgumentError as exc:
            raise BackendUnavailable(f"cannot parse the database URL {url!r}: use sqlite:///path "
                                     "or postgresql+psycopg://user@host/db") from exc
        self.dialect = parsed.get_backend_name()
        if self.dialect == "sqlite":
            if parsed.database and parsed.database != ":memory:":
                Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
            self.engine = create_engine(
                url,
                connect_args={"timeout": busy_timeout_s, "check_same_thread": False},
                pool_size=8,
                max_overflow=16,
            )
            _configure_sqlite(self.engine, busy_timeout_s, autocheckpoint=checkpoint == "commit")
        elif self.dialect == "postgresql":
            self.engine = create_engine(url, pool_size=8, max_overflow=16, pool_pre_ping=True)
        else:
            raise BackendUnavailable(
                f"unsupported database {self.dialect!r}: use sqlite:/// or postgresql+psycopg://"
            )
        # SQLite's change counter (data_version), read on a connection of its own: None on
        # PostgreSQL or an in-memory database.
        self._sentinel_path = (parsed.database if self.dialect == "sqlite" and parsed.database
                               and parsed.database != ":memory:" and not parsed.query else None)
        self._sentinel: sqlite3.Connection | None = None
        self._sentinel_cursor: sqlite3.Cursor | None = None
        #: This store's place among the users of the file's -shm descriptor (:class:`_ShmFiles`),
        #: taken before any connection opens and given back after all are closed.
        self._shm_key = _ShmFiles.join(self._sentinel_path) if self._sentinel_path is not None else None
        #: The -shm file's descriptor, once the sentinel has read the database (data_version).
        self._shm: int | None = None
        self._sentinel_lock = threading.Lock()
        #: The thread that folds the write-ahead log (a SQLite file, ``checkpoint="background"``).
        self.checkpointer = (_Checkpointer(self._sentinel_path, busy_timeout_s)
                             if self._sentinel_path is not None and checkpoint == "background" else None)
        # A SQLite file: the connections lazy reads run their driver statements on, apart from the
        # pool (an in-memory database is its pool's one connection: those reads make a session).
        self._drivers = _DriverConnections(self.engine) if self._sentinel_path is not None else None
        self._reader = sessionmaker(self.engine, expire_on_commit=False)
        self._writer = sessionmaker(
            self.engine.execution_options(kg_write=True), expire_on_commit=False
        )
        for factory in (self._reader, self._writer):
            event.listen(factory, "before_flush", count_config_changes)

    @contextmanager
    def read(self) -> Iterator[Session]:
        """A read session, rolled back at the end; the objects it loaded stay readable."""
        with span("kg.db.read"), self._reader() as session:
            yield session

    @contextmanager
    def read_lazily(self) -> Iterator[Session]:
        """:meth:`read`, but the session is made on its first use: a read answered from what the
        process holds (a cached branch view under SQLite's unmoved change counter, a held graph
        view) makes none. Opening and closing a session costs about 13 µs with the CPU's caches
        warm and 0.2 ms when other work has evicted them (``bench/use_case_overhead.py
        --pollute-mb``), most of a NEIGHBORS answered from a held view.

        ``session.info`` may be written before the session exists (it is carried over).
        """
        with span("kg.db.read"):
            lazy = _LazySession(self._reader, self._drivers)
            try:
                yield cast(Session, lazy)
            finally:
                lazy.close()

    def lazy_read_session(self) -> Session:
        """The session of :meth:`read_lazily`, without its span and context manager: the caller
        closes it (``close()``) when the read ends (:func:`kg.context.reading`)."""
        return cast(Session, _LazySession(self._reader, self._drivers))

    @contextmanager
    def read_connection(self) -> Iterator[Connection]:
        """A plain connection for one small Core read, rolled back at the end: half the cost of
        :meth:`read` (authenticating a key on every request).
        """
        with self.engine.connect() as connection:
            yield connection

    @contextmanager
    def write(self) -> Iterator[Session]:
        """A write transaction (``BEGIN IMMEDIATE`` on SQLite): committed on success, rolled back on any
        error, so no error leaves a partial write. Store functions flush; this commits.
        """
        with span("kg.db.write"), self._writer() as session:
            try:
                yield session
                session.commit()
            except BaseException:
                session.rollback()
                raise
        if self.checkpointer is not None:
            self.checkpointer.wrote()

    def upgrade(self, target: str = "head") -> None:
        """Apply pending Alembic migrations up to ``target`` (the only way kg creates tables).

        Raises
        ------
        kg.errors.BackendUnavailable
            The database cannot be reached.
        """
        self._migrate("upgrade", target)

    def downgrade(self, target: str) -> None:
        """Undo migrations down to ``target`` (a revision id, or ``base``): what a store of that
        age holds stays, what later migrations added is dropped.

        Raises
        ------
        kg.errors.BackendUnavailable
            The database cannot be reached.
        """
        self._migrate("downgrade", target)

    def _migrate(self, direction: str, target: str) -> None:
        """One migration run in one transaction, one migrator at a time.

        Notes
        -----
        On SQLite, Alembic's batch mode changes a table by copying it into a new one and dropping
        the old; with foreign keys on, that drop is a DELETE that cascades (sqlite.org/lang_droptable.html):
        changing ``repositories`` deleted every branch, workspace and version. So foreign keys are
        off while migrating (the pragma is ignored inside a transaction: it is set before BEGIN),
        ``PRAGMA foreign_key_check`` must find no orphan before the commit, and they are on again
        after (sqlite.org/lang_altertable.html, "Making Other Kinds Of Table Schema Changes").
        """
        with _upgrade_lock:
            from alembic import command

            run = command.upgrade if direction == "upgrade" else command.downgrade
            try:
                with self.engine.execution_options(kg_write=True).connect() as connection:
                    sqlite = self.dialect == "sqlite"
                    if sqlite:
                        connection.connection.driver_connection.execute("PRAGMA foreign_keys=OFF")  # type: ignore[union-attr]
                    try:
                        # The write lock up front (BEGIN IMMEDIATE on SQLite): Alembic reads the
                        # version table before it creates anything, and a deferred transaction
                        # that must turn a read into a write while another process migrates the
                        # same fresh file fails at once with "database is locked" (SQLite cannot
                        # wait: its snapshot is stale). With the lock taken first, the second
                        # process waits, then finds the schema at head.
                        with connection.begin():
                            if self.dialect == "postgresql":
                                # The same for PostgreSQL: one migrator of a schema at a time (the
                                # second would fail creating a table the first made), released at
                                # commit.
                                connection.exec_driver_sql(
                                    "SELECT pg_advisory_xact_lock(hashtext('kg migrations in '"
                                    " || current_schema()))")
                            cfg = alembic_config(self.url)
                            cfg.attributes["connection"] = connection
                            run(cfg, target)
                            if sqlite:
                                orphans = connection.exec_driver_sql("PRAGMA foreign_key_check").all()
                                if orphans:
                                    raise RuntimeError(f"migrating to {target} left rows whose foreign key "
                                                       f"points nowhere (rolled back): {orphans[:5]}")
                    finally:
                        if sqlite:
                            connection.connection.driver_connection.execute("PRAGMA foreign_keys=ON")  # type: ignore[union-attr]
            except OperationalError as exc:
                raise BackendUnavailable(f"cannot reach the database: {exc.orig}") from exc

    def analyze(self) -> None:
        """Refresh the planner's statistics after a large write: without them PostgreSQL may scan every
        version of a branch for a one-path lookup (bench/diff_merge.py --no-analyze). SQLite: ``PRAGMA
        optimize``, then :meth:`checkpoint`.
        """
        # Best effort, after the write committed: a busy database (SQLite's lock held by the
        # indexer) must not turn a stored batch into an error that a client would retry.
        try:
            with self.engine.begin() as conn:
                if self.dialect == "postgresql":
                    conn.exec_driver_sql("ANALYZE node_versions, relation_versions, chunks")
                else:
                    conn.exec_driver_sql("PRAGMA optimize")
        except SQLAlchemyError as exc:
            log.warning("refreshing the planner's statistics failed (the write stands): %s", exc)
        if self.dialect == "sqlite":
            self.checkpoint()

    def checkpoint(self, *, wait_s: float = 0.25) -> bool:
        """SQLite: fold the write-ahead log into the database and truncate it, waiting at most
        ``wait_s`` for readers (writers wait too); best effort. True when folded and truncated.

        A reader looks every page up in the log's index, which covers every frame since the log was
        last reset: after a bulk import (1.7 GB of log at a million nodes) NEIGHBORS took 7.5 ms, 2.7
        ms after a truncating checkpoint (``bench/scale.py``; not a strict A/B). Automatic checkpoints
        do not reset the log while a reader holds an older snapshot. See sqlite.org/wal.html and
        "PRAGMA wal_checkpoint".
        """
        if self.dialect != "sqlite":
            return False
        try:
            with self.engine.connect() as conn:
                conn.exec_driver_sql(f"PRAGMA busy_timeout={int(wait_s * 1000)}")
                try:
                    busy = int(conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)").one()[0])
                finally:
                    conn.exec_driver_sql(f"PRAGMA busy_timeout={int(self.busy_timeout_s * 1000)}")
        except SQLAlchemyError as exc:
            log.warning("folding the write-ahead log into the database failed (the write stands): %s", exc)
            return False
        return busy == 0

    def data_version(self) -> int | None:
        """SQLite: a number that changes whenever a transaction commits on the database file, in
        this process or another. Equal numbers mean nothing was committed in between, so what was
        read from the database then is what it holds now (:class:`kg.store.repos.ViewCache`
        answers a read from its cache without a statement). None on PostgreSQL, an in-memory
        database, or when the counter cannot be read: the caller asks the database.

        The number is the write-ahead log's index header, read from the ``-shm`` file
        (:func:`_wal_index_header`): what SQLite itself compares at the start of each read
        transaction to learn whether another connection committed, and what ``PRAGMA
        data_version`` reports from (sqlite.org/walformat.html, "the WAL-index header"; the
        format is shared by every process and SQLite version that opens the file, so it does not
        change). A commit moves the log's last frame and its checksum; a log restarted after a
        checkpoint takes new salts. Reading it is one ``pread`` (17 µs with the CPU's caches
        cold) where the pragma, a statement on a connection of its own, costs 40 to 55 µs. The
        header is read only while that connection (which never writes) holds the file open, so
        the ``-shm`` read is the one SQLite keeps (it is removed only by the file's last
        connection), through the process's one descriptor of it (:class:`_ShmFiles`: closing a
        descriptor of the file would drop SQLite's locks on it). While a writer is halfway through
        updating it (its two copies differ), or on any doubt, the answer is None (the read asks the
        database); the pragma answers only until the ``-shm`` file is open (numbers of the two are
        never equal: the header's initialised flag is its 13th byte, so its number is at least
        2**96).
        """
        if self._sentinel_path is None:
            return None
        shm = self._shm
        if shm is not None:
            return _wal_index_header(shm)
        with self._sentinel_lock:
            try:
                cursor = self._sentinel_cursor
                if cursor is None:
                    self._sentinel = sqlite3.connect(self._sentinel_path, timeout=self.busy_timeout_s,
                                                     isolation_level=None, check_same_thread=False)
                    cursor = self._sentinel_cursor = self._sentinel.cursor()  # one cursor, not one a read
                version = int(cursor.execute("PRAGMA data_version").fetchone()[0])
            except sqlite3.Error as exc:
                log.warning("SQLite's change counter could not be read (reads check the database): %s", exc)
                return None
            if self._shm is None and self._sentinel is not None and self._shm_key is not None:
                # The sentinel has read the database: its connection holds the -shm file open.
                self._shm = _ShmFiles.fd(self._shm_key)
                if self._shm is None:
                    return version
                return _wal_index_header(self._shm)  # from here on the header alone answers
            return version

    def dispose(self) -> None:
        """Close every pooled connection (and the change counter's); the checkpointer folds what the
        log holds and stops."""
        if self.checkpointer is not None:
            self.checkpointer.close()
        with self._sentinel_lock:
            self._shm = None  # the shared descriptor: closed below by the file's last user, if this is it
            if self._sentinel is not None:
                self._sentinel.close()
                self._sentinel = self._sentinel_cursor = None
        if self._drivers is not None:
            self._drivers.close()
        self.engine.dispose()
        with self._sentinel_lock:
            key, self._shm_key = self._shm_key, None
        if key is not None:  # every connection of this store is closed: no lock of it is left to drop
            _ShmFiles.leave(key)


def alembic_config(url: str) -> Config:
    """An Alembic ``Config`` for ``url`` with kg's ``migrations`` as its script location."""
    from alembic.config import Config

    script_location = str(resources.files("migrations"))
    # Alembic's default stdout is bound when alembic.config is first imported; pass the
    # current one, or a stream swapped at that moment (a CLI runner) is kept after it closes.
    cfg = Config(stdout=sys.stdout)
    cfg.set_main_option("script_location", script_location)
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


class _ShmFiles:
    """One read-only descriptor per ``-shm`` file for the whole process, shared by every
    :class:`Database` of the file and its checkpoint thread, and never closed while SQLite may
    hold a lock on the file in this process.

    POSIX record locks belong to the process and the file, not to a descriptor: closing any
    descriptor of the file drops every lock the process holds on it, SQLite's own (its shared
    "dead man switch" lock that tells other processes the ``-shm`` file is in use, and its reader
    and writer locks; sqlite.org/howtocorrupt.html, section 2.2). A user joins before it opens
    any connection (:meth:`join`) and leaves once it has closed them (:meth:`leave`); the
    descriptor is opened on first need (:meth:`fd`, after a connection of the caller has read
    the database: the ``-shm`` file exists then, and stays while that connection is open), and
    is replaced if the file was removed and made anew meanwhile (SQLite's last connection removes
    it). When the last user has left, the descriptor is closed only if SQLite itself holds no
    descriptor of the file in this process any more (``/proc/self/fd``: SQLite keeps one while a
    connection of the process maps the file, such as a pooled connection still checked out);
    otherwise it is kept and closed by a later call once SQLite has let go. Where
    ``/proc/self/fd`` cannot be read, it is never closed.
    """

    _lock = threading.Lock()
    #: realpath of the database file -> [users, descriptor or None]
    _files: dict[str, list[Any]] = {}
    #: Descriptors whose users have all left while SQLite still held the file: (path, fd).
    _kept: list[tuple[str, int]] = []

    @classmethod
    def join(cls, path: str) -> str:
        """Count a user of the database file at ``path``; answers the key to give back."""
        key = os.path.realpath(path)
        with cls._lock:
            cls._files.setdefault(key, [0, None])[0] += 1
            cls._close_kept()
        return key

    @classmethod
    def fd(cls, key: str) -> int | None:
        """The file's current ``-shm`` descriptor (opened now, or anew if the file was made anew),
        None when it cannot be opened or no user has joined."""
        shm = f"{key}-shm"
        with cls._lock:
            entry = cls._files.get(key)
            if entry is None:
                return None
            if entry[1] is not None and not cls._current(entry[1], shm):
                os.close(entry[1])  # a removed file's inode: no lock of this process is on it any more
                entry[1] = None
            if entry[1] is None:
                try:
                    entry[1] = os.open(shm, os.O_RDONLY | os.O_CLOEXEC)
                except OSError:
                    return None
            return int(entry[1])

    @classmethod
    def leave(cls, key: str) -> None:
        """A user has closed its connections: the last to leave lets go of the descriptor."""
        with cls._lock:
            entry = cls._files.get(key)
            if entry is None:
                return
            entry[0] -= 1
            if entry[0] > 0:
                return
            del cls._files[key]
            if entry[1] is not None:
                cls._kept.append((f"{key}-shm", int(entry[1])))
            cls._close_kept()

    @staticmethod
    def _current(fd: int, shm: str) -> bool:
        """Whether ``fd`` is the file now at ``shm``."""
        try:
            held, now = os.fstat(fd), os.stat(shm)
        except OSError:
            return False
        return held.st_nlink > 0 and (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino)

    @classmethod
    def _close_kept(cls) -> None:
        """Close the kept descriptors of files SQLite no longer holds open in this process."""
        if not cls._kept:
            return
        try:
            others = cls._descriptors()
        except OSError:
            return  # no /proc: never closed
        still = []
        for shm, fd in cls._kept:
            try:
                inode = os.fstat(fd).st_ino
            except OSError:
                continue
            if any(ino == inode and other != fd for other, ino in others):
                still.append((shm, fd))  # SQLite still maps the file here: its locks would go
            else:
                os.close(fd)
        cls._kept = still

    @staticmethod
    def _descriptors() -> list[tuple[int, int]]:
        """(descriptor, inode) of every open descriptor of this process."""
        out = []
        for name in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError, ValueError):
                out.append((int(name), os.stat(f"/proc/self/fd/{name}").st_ino))
        return out


def _reset_shm_lock() -> None:
    """A forked child starts with a lock no thread of it holds."""
    _ShmFiles._lock = threading.Lock()


os.register_at_fork(after_in_child=_reset_shm_lock)


#: The WAL-index format's version, the header's first field (sqlite.org/walformat.html).
_WAL_INDEX_VERSION = 3007000
#: The header: 48 bytes, written twice in a row (a writer updates the second copy, then the first).
_WAL_HEADER = 48


def _wal_index(fd: int, extra: int = 0) -> bytes | None:
    """The first copy of the WAL-index header of an open ``-shm`` file followed by the ``extra``
    bytes after the second copy, or None when the header cannot be trusted: its two copies
    differ (a writer is updating it), it is not initialised, or not of the format this reads
    (sqlite.org/walformat.html)."""
    try:
        raw = os.pread(fd, 2 * _WAL_HEADER + extra, 0)
    except OSError:
        return None
    first = raw[:_WAL_HEADER]
    if (len(raw) != 2 * _WAL_HEADER + extra or first != raw[_WAL_HEADER:2 * _WAL_HEADER] or first[12] != 1
            or int.from_bytes(first[:4], sys.byteorder) != _WAL_INDEX_VERSION):
        return None
    return first + raw[2 * _WAL_HEADER:]


def _wal_unfolded(fd: int) -> int | None:
    """How many frames of the log are not folded into the database yet: the header's ``mxFrame``
    less the checkpoint information's ``nBackfill`` (the 32-bit words at bytes 16 and 96 of the
    ``-shm`` file); None as :func:`_wal_index`."""
    raw = _wal_index(fd, 4)
    if raw is None:
        return None
    return max(int.from_bytes(raw[16:20], sys.byteorder) - int.from_bytes(raw[_WAL_HEADER:], sys.byteorder), 0)


def _wal_index_header(fd: int) -> int | None:
    """The WAL-index header of an open ``-shm`` file as one number (:meth:`Database.data_version`),
    or None as :func:`_wal_index`."""
    raw = _wal_index(fd)
    return None if raw is None else int.from_bytes(raw, "little")


class _DriverConnections:
    """Idle SQLite connections for the driver statements of lazy reads
    (:meth:`_LazySession.kg_driver`), kept apart from the engine's pool: a read takes one and
    gives it back with a list's ``pop`` and ``append``, where the pool's checkout, its events and
    its reset on return cost about 0.08 ms a read with the CPU's caches cold. Each is made by the
    engine (its connect hook's pragmas set, autocommit) and detached from its pool; a connection
    is given back with no transaction open (a read's statements run in autocommit, each reading
    the latest commit), and at most ``keep`` are kept idle."""

    __slots__ = ("_closed", "_engine", "_idle", "_keep", "dialect")

    def __init__(self, engine: Engine, keep: int = 8) -> None:
        self._engine = engine
        self._idle: list[Any] = []
        self._keep = keep
        self._closed = False
        self.dialect = engine.dialect

    def __len__(self) -> int:
        """Connections idle."""
        return len(self._idle)

    def take(self) -> Any:
        """An idle connection, or a new one (list operations are atomic: no lock)."""
        try:
            return self._idle.pop()
        except IndexError:
            fairy = self._engine.raw_connection()
            connection = fairy.driver_connection
            fairy.detach()  # ours now: the pool neither counts nor resets it
            return connection

    def give(self, connection: Any) -> None:
        """``connection`` back, idle; closed past ``keep``."""
        if connection.in_transaction:  # never after autocommit reads; not kept open across reads
            connection.rollback()
        if not self._closed and len(self._idle) < self._keep:
            self._idle.append(connection)
        else:
            connection.close()

    def close(self) -> None:
        """Close the idle connections; one given back afterwards (a read still open) is closed."""
        self._closed = True
        while self._idle:
            self._idle.pop().close()


class _LazySession:
    """A stand-in for a read :class:`Session` that makes it on first use
    (:meth:`Database.read_lazily`): every attribute but ``info``, ``kg_driver`` and ``close`` is
    the session's."""

    __slots__ = ("_factory", "_drivers", "_raw", "_session", "info")

    def __init__(self, factory: sessionmaker[Session], drivers: _DriverConnections | None = None) -> None:
        self._factory = factory
        self._drivers = drivers
        self._raw: Any = None
        self._session: Session | None = None
        self.info: dict[Any, Any] = {}

    def kg_driver(self) -> tuple[Any, Dialect]:
        """The DBAPI connection and dialect a :class:`kg.store.driver.DriverStatement` runs on:
        the session's when it exists (its transaction), else, on a SQLite file, a connection of
        its own (one of :class:`_DriverConnections`, not the pool's) in autocommit (each
        statement reads the latest commit: the read is capped at its view's revision, as every
        statement after the view's check is), which costs a fifth of a session and its
        transaction with the CPU's caches cold (0.14 against 0.37 ms)."""
        if self._session is None and self._drivers is not None:
            if self._raw is None:
                self._raw = self._drivers.take()
            return self._raw, self._drivers.dialect
        connection = self._made().connection()
        return connection.connection.driver_connection, connection.dialect

    def _made(self) -> Session:
        if self._session is None:
            session = self._factory()
            session.info.update(self.info)
            self.info = session.info
            self._session = session
        return self._session

    def __getattr__(self, name: str) -> Any:
        return getattr(self._made(), name)

    def close(self) -> None:
        try:
            if self._session is not None:
                self._session.close()
                self._session = None
        finally:
            if self._raw is not None and self._drivers is not None:
                self._drivers.give(self._raw)
                self._raw = None


SQLITE_PAGE_SIZE = 8192
"""Bytes per page of a SQLite database kg creates (an existing one keeps its own).

A chunk row (its text and a 384-d float32 embedding: about 2.4 KB) takes a 4 KiB page to
itself; at 8 KiB three share one, so a bulk import writes, commits and checkpoints fewer
pages. 100,000 chunks with their nodes imported in 9.0 s against 10.8 at 4 KiB, the file 368
MiB against 499; point reads of ten rows by id cost the same (0.04 ms), where 16 KiB pages, a
little faster still to import, read them 1.6x slower through the default 2 MiB page cache.
"""


def _configure_sqlite(engine: Engine, busy_timeout_s: float, *, autocheckpoint: bool = True) -> None:
    """WAL, busy timeout, foreign keys, :data:`SQLITE_PAGE_SIZE` for a new file; explicit BEGIN
    so writes can take the lock up front; without ``autocheckpoint``, commits never checkpoint
    (:class:`_Checkpointer` does)."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:  # pragma: no cover - driver hook
        dbapi_connection.isolation_level = None  # we emit BEGIN ourselves
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA page_size={SQLITE_PAGE_SIZE}")  # a no-op once the file has a table
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout_s * 1000)}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=NORMAL")
        if not autocheckpoint:
            cursor.execute("PRAGMA wal_autocheckpoint=0")
        # Paths are case-sensitive: a prefix filter (LIKE 'prefix%') must not match /UPPER for
        # /upper, as it does not on PostgreSQL.
        cursor.execute("PRAGMA case_sensitive_like=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:  # pragma: no cover - driver hook
        if connection.get_execution_options().get("kg_write"):
            connection.exec_driver_sql("BEGIN IMMEDIATE")  # may wait for the lock: errors wrapped
        else:  # never waits: on the driver's connection, every read's first statement
            connection.connection.driver_connection.execute("BEGIN")  # type: ignore[union-attr]


class _Checkpointer:
    """Folds a SQLite file's write-ahead log into the database from a thread of its own, so that
    no write waits for a checkpoint.

    In WAL mode a commit appends pages to the log; a *checkpoint* copies them back into the
    database file and syncs both (sqlite.org/wal.html#ckpt). By default the connection whose
    commit takes the log past 1,000 pages runs it before its commit returns: at 100 records
    with vectors written on a branch of 10,000 (``bench/branch_write.py``) that was one write in
    about eight, and it took the writes' p95 from 17.6 to 33 ms and their median from 14.0 to
    16.7. Here every connection of the engine has ``wal_autocheckpoint=0``; each committed
    write (:meth:`Database.write`) calls :meth:`wrote`, and this thread, woken, waits
    ``settle_s`` (commits in that time are judged by the same pass), reads how many of the log's
    frames are not folded yet (the WAL-index's ``mxFrame`` less its ``nBackfill``, one
    ``pread`` of the ``-shm`` file), and when they are ``min_frames`` or more (SQLite's own
    threshold: checkpoints as often as before, each a pair of syncs) runs ``PRAGMA
    wal_checkpoint(PASSIVE)`` on a connection of its own: it copies what no reader still needs,
    waits for no reader or writer, and takes no write lock (writes go on while it copies). What
    readers held back is copied by a later pass. A thread idle for ``idle_s`` folds whatever is
    left, closes its connection and ends; the next write starts another (a forked child too: its
    parent's thread is not alive there).

    The log's size is bounded as with SQLite's own checkpoint: by what readers hold, by
    ``min_frames`` and by the writes of one ``settle_s``; :meth:`close` folds the rest.
    """

    def __init__(self, path: str, busy_timeout_s: float, *, settle_s: float = 0.2, idle_s: float = 30.0,
                 min_frames: int = 1000) -> None:
        self._path = path
        self._busy_timeout_s = busy_timeout_s
        self.settle_s = settle_s
        self.min_frames = min_frames
        self._shm: int | None = None  # the -shm file's shared descriptor, once the thread's connection has read
        self._shm_key = ""  # its place among the file's users (_ShmFiles), while the thread runs
        self._idle_s = idle_s
        self._wake = threading.Condition(threading.Lock())
        self._stop = threading.Event()
        self._pending = False
        self._closed = False
        self._thread: threading.Thread | None = None
        self._waiting = False  # the thread waits for a write (between passes)
        #: Passes run, and the last pass's answer: (1 if it could not run, frames in the log,
        #: frames copied), as ``PRAGMA wal_checkpoint`` gives it.
        self.passes = 0
        self.last: tuple[int, int, int] | None = None

    def wrote(self) -> None:
        """A write transaction committed: fold the log soon. O(1)."""
        with self._wake:
            self._pending = True
            if self._closed:
                return
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="kg-sqlite-checkpoint", daemon=True)
                self._thread.start()
            self._wake.notify()

    def wait_idle(self, timeout_s: float = 10.0) -> bool:
        """Wait until no pass is pending or running (tests, benchmarks); False on timeout."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._wake:
                thread = self._thread
                if not self._pending and (thread is None or not thread.is_alive() or self._waiting):
                    return True
            time.sleep(0.01)
        return False

    def close(self, timeout_s: float = 10.0) -> None:
        """Run a last pass and stop the thread (:meth:`Database.dispose`); later commits start none."""
        with self._wake:
            self._closed = True
            thread = self._thread
            self._wake.notify()
        self._stop.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)

    def _run(self) -> None:
        connection: sqlite3.Connection | None = None
        self._shm_key = _ShmFiles.join(self._path)  # before the connection opens, left after it closes
        try:
            while True:
                with self._wake:
                    if not self._pending and not self._closed:
                        self._waiting = True
                        self._wake.wait(self._idle_s)
                        self._waiting = False
                    if not self._pending:  # idle (or closed with nothing new): a last pass, then end
                        self._thread = None if self._thread is threading.current_thread() else self._thread
                        break
                    self._pending = False
                self._stop.wait(self.settle_s)  # commits of this time join the pass; close ends the wait
                connection = self._checkpoint(connection, every_frame=self._closed)
            self._checkpoint(connection, every_frame=True)
        finally:
            self._shm = None
            if connection is not None:
                connection.close()
            _ShmFiles.leave(self._shm_key)  # never closes a descriptor while a connection of the file is open here

    def _checkpoint(self, connection: sqlite3.Connection | None, *, every_frame: bool) -> sqlite3.Connection | None:
        """One pass: fold the log when ``min_frames`` of it are unfolded (or any, ``every_frame``)."""
        try:
            if connection is None:
                connection = sqlite3.connect(self._path, timeout=self._busy_timeout_s, isolation_level=None,
                                             check_same_thread=False)
            if self._shm is None:
                connection.execute("PRAGMA data_version").fetchone()  # a read: the connection holds -shm open
                self._shm = _ShmFiles.fd(self._shm_key)
            unfolded = _wal_unfolded(self._shm) if self._shm is not None else None
            if unfolded == 0 or (not every_frame and unfolded is not None and unfolded < self.min_frames):
                return connection
            busy, log_frames, copied = connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            self.last = (int(busy), int(log_frames), int(copied))
            self.passes += 1
        except sqlite3.Error as exc:  # the next pass tries again; writes are not affected
            log.warning("folding SQLite's write-ahead log into the database failed: %s", exc)
        return connection


__all__ = ["SQLITE_PAGE_SIZE", "CheckpointMode", "Database", "alembic_config", "SQLAlchemyError"]
