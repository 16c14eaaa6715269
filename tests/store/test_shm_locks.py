"""SQLite's locks on a database's ``-shm`` file stay held while the process uses the database.

POSIX record locks belong to the process and the file, not to a descriptor: closing *any*
descriptor of the ``-shm`` file drops every lock the process holds on it, SQLite's too
(sqlite.org/howtocorrupt.html, section 2.2). SQLite holds a shared "dead man switch" lock there
while a connection is open (sqlite.org/walformat.html, "locks"): without it the next process
that opens the database takes itself for the first, rebuilds the ``-shm`` file and truncates it,
and a process that still maps it dies of SIGBUS at its next read (as ``bench/scale.py`` did at
1,000,000 nodes when the checkpoint thread, idle, closed its descriptor), while a dropped reader
or writer lock lets another process checkpoint over pages a reader still uses, or write at the
same time. kg reads the WAL-index header through a descriptor of its own
(:meth:`kg.store.db.Database.data_version`, the checkpoint thread): these tests check, from
another process (a process never sees its own locks with ``F_GETLK``), that the lock is still
held after each way kg can let go of its descriptor.
"""

from __future__ import annotations

import contextlib
import gc
import os
import subprocess
import sys
import time
from pathlib import Path

from sqlalchemy import text

from kg.store.db import Database

#: The dead man switch: byte 128 of the -shm file (WALINDEX_LOCK_OFFSET 120 + SQLITE_SHM_NLOCK 8).
DMS = 128
PROBE = """
import fcntl, os, struct, sys
fd = os.open(sys.argv[1], os.O_RDWR)
lock = struct.pack("hhqqi", fcntl.F_WRLCK, os.SEEK_SET, int(sys.argv[2]), 1, 0)
kind = struct.unpack("hhqqi", fcntl.fcntl(fd, fcntl.F_GETLK, lock))[0]
print("held" if kind != fcntl.F_UNLCK else "free")
"""


def held_by_another_process(shm) -> bool:
    """Whether some process (this one, seen from a child) holds a lock on the DMS byte."""
    out = subprocess.run([sys.executable, "-c", PROBE, str(shm), str(DMS)], capture_output=True, text=True,
                         check=True)
    return out.stdout.strip() == "held"


def _write(db: Database, value: str) -> None:
    with db.write() as session:
        session.execute(text("CREATE TABLE IF NOT EXISTS t (name TEXT)"))
        session.execute(text("INSERT INTO t VALUES (:name)"), {"name": value})


def _read(db: Database) -> None:
    with db.read() as session:
        session.execute(text("SELECT count(*) FROM t")).scalar()


def test_the_lock_stays_held_when_the_checkpoint_thread_ends_idle(tmp_path):
    path = tmp_path / "kg.sqlite3"
    db = Database(f"sqlite:///{path}")
    try:
        assert db.checkpointer is not None
        db.checkpointer.settle_s = 0.0
        db.checkpointer._idle_s = 0.05
        _write(db, "a")
        assert db.data_version() is not None  # the header read through kg's descriptor
        _read(db)
        assert held_by_another_process(f"{path}-shm")
        assert db.checkpointer.wait_idle()
        deadline = time.monotonic() + 10
        while db.checkpointer._thread is not None and time.monotonic() < deadline:
            time.sleep(0.02)  # the thread ends once idle, letting go of its descriptor
        assert db.checkpointer._thread is None
        assert held_by_another_process(f"{path}-shm")
        assert db.data_version() is not None
    finally:
        db.dispose()


def test_the_lock_stays_held_when_another_store_of_the_file_is_disposed(tmp_path):
    path = tmp_path / "kg.sqlite3"
    first, second = Database(f"sqlite:///{path}"), Database(f"sqlite:///{path}")
    try:
        _write(first, "a")
        _write(second, "b")
        assert first.data_version() is not None and second.data_version() is not None
        second.dispose()
        assert held_by_another_process(f"{path}-shm")
        _read(first)
        assert first.data_version() is not None
    finally:
        first.dispose()


def test_a_disposed_store_lets_go_of_the_file(tmp_path):
    """Once the last store of the file in the process is disposed, its descriptor is closed and
    SQLite's last connection has removed the log and the -shm file (it saw no other user)."""
    path = tmp_path / "kg.sqlite3"
    first, second = Database(f"sqlite:///{path}"), Database(f"sqlite:///{path}")
    _write(first, "a")
    assert first.data_version() is not None and second.data_version() is not None
    shared = second._shm
    assert shared is not None and shared == first._shm  # one descriptor for the file in the process
    first.dispose()
    assert os.readlink(f"/proc/self/fd/{shared}") == str(Path(f"{path}-shm").resolve())  # still open
    assert second.data_version() is not None
    second.dispose()
    assert open_descriptors(f"{path}-shm") == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kg.sqlite3"]


def open_descriptors(target: str) -> int:
    """This process's descriptors of ``target`` (kg's shared one and SQLite's own)."""
    count = 0
    for fd in Path("/proc/self/fd").iterdir():
        with contextlib.suppress(OSError):
            if os.readlink(fd) == str(Path(target).resolve()):
                count += 1
    return count


def test_a_file_made_anew_is_read_anew(tmp_path):
    """The -shm file removed by the file's last connection and made anew by the next: the
    change counter reads the new one (it read a removed inode, so it never moved and the view
    cache answered stale reads), and the checkpoint thread folds the new log."""
    path = tmp_path / "kg.sqlite3"
    later = Database(f"sqlite:///{path}")  # a user of the file that has opened nothing yet
    first = Database(f"sqlite:///{path}")
    try:
        _write(first, "a")
        assert first.data_version() is not None
        first.dispose()  # the last connection: SQLite removes -shm (later holds none open)
        assert not (tmp_path / "kg.sqlite3-shm").exists()
        seen = []
        for value in ("b", "c", "d"):
            _write(later, value)
            seen.append(later.data_version())
        assert None not in seen and len(set(seen)) == 3
        assert later.checkpointer is not None
        later.checkpointer.min_frames = 0
        later.checkpointer.settle_s = 0.0
        _write(later, "e")
        assert later.checkpointer.wait_idle()
        assert later.checkpointer.last is not None and later.checkpointer.last[2] > 0  # frames folded
    finally:
        later.dispose()


def test_a_connection_still_open_at_dispose_keeps_the_lock(tmp_path):
    """A connection still checked out when its store is disposed keeps SQLite's lock: the
    descriptor is closed only once SQLite has let go of the file in the process."""
    path = tmp_path / "kg.sqlite3"
    db = Database(f"sqlite:///{path}")
    _write(db, "a")
    assert db.data_version() is not None
    connection = db.engine.connect()
    connection.exec_driver_sql("SELECT count(*) FROM t").scalar()
    db.dispose()
    try:
        assert held_by_another_process(f"{path}-shm")
        assert open_descriptors(f"{path}-shm") == 2  # SQLite's and kg's, kept
    finally:
        connection.close()  # back to the disposed pool, closed once that pool is collected
    del connection
    gc.collect()
    other = Database(f"sqlite:///{tmp_path / 'other.sqlite3'}")  # any later use closes what was kept
    other.dispose()
    assert open_descriptors(f"{path}-shm") == 0
