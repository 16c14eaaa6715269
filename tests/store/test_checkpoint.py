"""SQLite's write-ahead log folded by a thread of the process, never inside a write's commit
(``KG_SQLITE_CHECKPOINT=background``, the default), or by SQLite's automatic checkpoint (``commit``).

Whether a commit reached the database file is read off a copy of the file alone (no ``-wal``
beside it): a page still in the log is not in the copy.
"""

from __future__ import annotations

import shutil
import sqlite3
import threading

from sqlalchemy import text

from kg.store.db import Database, _Checkpointer

BLOB = 9 * 1024 * 1024  # more than the 1,000 pages of 8 KiB that trigger SQLite's own checkpoint


def _write(db: Database, value: str, size: int = 16) -> None:
    with db.write() as session:
        session.execute(text("CREATE TABLE IF NOT EXISTS t (name TEXT, payload BLOB)"))
        session.execute(text("INSERT INTO t VALUES (:name, zeroblob(:size))"), {"name": value, "size": size})


def _in_file(path, tmp_path, value: str) -> bool:
    """Whether the database file itself (without its log) holds the row ``value``."""
    copy = tmp_path / f"copy-{value}.sqlite3"
    shutil.copyfile(path, copy)
    connection = sqlite3.connect(copy)
    try:
        tables = connection.execute("SELECT count(*) FROM sqlite_master WHERE name = 't'").fetchone()[0]
        return bool(tables) and connection.execute("SELECT count(*) FROM t WHERE name = ?", (value,)).fetchone()[0] == 1
    finally:
        connection.close()


def test_writes_do_not_checkpoint_and_the_thread_folds_the_log_after_them(tmp_path):
    path = tmp_path / "kg.sqlite3"
    db = Database(f"sqlite:///{path}")
    try:
        assert db.checkpointer is not None
        with db.engine.connect() as connection:
            assert connection.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar() == 0
        db.checkpointer.settle_s = 1.0  # the pass waits: the commit below is read before it runs
        _write(db, "big", BLOB)
        assert not _in_file(path, tmp_path, "big")  # past 1,000 pages, yet the commit did not fold the log
        assert db.checkpointer.wait_idle()
        assert _in_file(path, tmp_path, "big")
        busy, frames, copied = db.checkpointer.last
        assert busy == 0 and frames == copied > 1000
        db.checkpointer.settle_s = 0.0
        passes = db.checkpointer.passes
        _write(db, "small")
        assert db.checkpointer.wait_idle()
        # below SQLite's own threshold of 1,000 frames the thread leaves the log as SQLite would
        assert not _in_file(path, tmp_path, "small") and db.checkpointer.passes == passes
        db.checkpointer.close()  # folds the rest
        assert _in_file(path, tmp_path, "small")
    finally:
        db.dispose()


def test_with_no_threshold_every_write_is_folded_after_it(tmp_path):
    path = tmp_path / "kg.sqlite3"
    db = Database(f"sqlite:///{path}")
    try:
        assert db.checkpointer is not None
        db.checkpointer.settle_s, db.checkpointer.min_frames = 0.0, 0
        for value in ("one", "two"):
            _write(db, value)
            assert db.checkpointer.wait_idle()
            assert _in_file(path, tmp_path, value)
            assert db.checkpointer.last is not None and db.checkpointer.last[1] == db.checkpointer.last[2]
    finally:
        db.dispose()


def test_commit_mode_keeps_sqlites_own_checkpoint_in_the_write(tmp_path):
    path = tmp_path / "kg.sqlite3"
    db = Database(f"sqlite:///{path}", checkpoint="commit")
    try:
        assert db.checkpointer is None
        with db.engine.connect() as connection:
            assert connection.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar() == 1000
        _write(db, "small")
        assert not _in_file(path, tmp_path, "small")  # below 1,000 pages: still in the log
        _write(db, "big", BLOB)
        assert _in_file(path, tmp_path, "big")  # the commit past 1,000 pages folded the log itself
    finally:
        db.dispose()


def test_dispose_folds_the_log_and_stops_the_thread(tmp_path):
    path = tmp_path / "kg.sqlite3"
    db = Database(f"sqlite:///{path}")
    assert db.checkpointer is not None
    db.checkpointer.settle_s = 30.0  # would wait long: dispose ends the wait
    _write(db, "last")
    thread = db.checkpointer._thread
    assert thread is not None and thread.is_alive()
    with db.engine.connect():  # a connection still open: closing the others does not fold the log
        pass
    db.checkpointer.close()
    assert not thread.is_alive()
    assert _in_file(path, tmp_path, "last")
    _write(db, "after")  # a commit after close starts no thread
    assert db.checkpointer._thread is None or not db.checkpointer._thread.is_alive()
    db.dispose()


def test_an_idle_thread_ends_and_the_next_write_starts_another(tmp_path):
    path = tmp_path / "kg.sqlite3"
    db = Database(f"sqlite:///{path}", checkpoint="commit")  # rows written; the checkpointer under test is ours
    checkpointer = _Checkpointer(str(path), 5.0, settle_s=0.0, idle_s=0.05)
    try:
        _write(db, "one")
        checkpointer.wrote()
        first = checkpointer._thread
        assert first is not None
        first.join(5)
        assert not first.is_alive() and checkpointer._thread is None
        assert checkpointer.passes >= 1 and _in_file(path, tmp_path, "one")
        _write(db, "two")
        checkpointer.wrote()
        second = checkpointer._thread
        assert second is not None and second is not first
        second.join(5)
        assert _in_file(path, tmp_path, "two")
    finally:
        checkpointer.close()
        db.dispose()


def test_only_a_sqlite_file_has_a_checkpointer_and_its_thread_never_holds_the_process(empty_db_url):
    db = Database(empty_db_url)
    try:
        if empty_db_url.startswith("postgresql"):
            assert db.checkpointer is None
            return
        assert db.checkpointer is not None
        db.upgrade()
        with db.write() as session:
            session.execute(text("SELECT 1"))
        assert db.checkpointer._thread is not None and db.checkpointer._thread.daemon
    finally:
        db.dispose()
    assert not [t for t in threading.enumerate() if t.name == "kg-sqlite-checkpoint" and not t.daemon]


def test_the_change_counter_is_the_wal_index_header_and_differs_after_every_commit(tmp_path):
    """Every commit, across log restarts (a truncating checkpoint, the background one), gives a
    number never seen before; reads and checkpoints do not move it."""
    db = Database(f"sqlite:///{tmp_path / 'kg.sqlite3'}")
    try:
        _write(db, "first")
        db.data_version()  # the pragma, until the -shm file is open
        seen = [db.data_version()]
        assert seen[0] is not None and seen[0] >= 2**96
        for i in range(30):
            _write(db, f"row{i}")
            if i % 7 == 3:
                assert db.checkpoint()  # the log folded and truncated: the next commit restarts it
            elif i % 7 == 5:
                assert db.checkpointer.wait_idle()
            now = db.data_version()
            assert now is not None and now not in seen
            with db.read() as session:
                session.execute(text("SELECT count(*) FROM t")).one()
            assert db.data_version() == now
            seen.append(now)
    finally:
        db.dispose()


def test_a_header_being_written_or_not_readable_is_no_counter(tmp_path):
    import os
    import sys

    from kg.store.db import _wal_index_header

    def header(*, version=3007000, init=1, change=5, frames=0):
        one = bytearray(48)
        one[0:4] = version.to_bytes(4, sys.byteorder)
        one[8:12] = change.to_bytes(4, sys.byteorder)
        one[12] = init
        one[16:20] = frames.to_bytes(4, sys.byteorder)
        return bytes(one)

    path = tmp_path / "x-shm"
    cases = {"whole": header() * 2, "torn": header() + header(change=6), "uninitialised": header(init=0) * 2,
             "other format": header(version=3007001) * 2, "short": header()}
    got = {}
    for name, data in cases.items():
        path.write_bytes(data)
        fd = os.open(path, os.O_RDONLY)
        try:
            got[name] = _wal_index_header(fd)
        finally:
            os.close(fd)
    assert got["whole"] == int.from_bytes(header(), "little")
    assert [got[n] for n in ("torn", "uninitialised", "other format", "short")] == [None] * 4

    from kg.store.db import _wal_unfolded

    def unfolded(data: bytes):
        path.write_bytes(data)
        fd = os.open(path, os.O_RDONLY)
        try:
            return _wal_unfolded(fd)
        finally:
            os.close(fd)

    backfill = (300).to_bytes(4, sys.byteorder)
    assert unfolded(header(frames=1200) * 2 + backfill) == 900
    assert unfolded(header(frames=1200) * 2 + (1200).to_bytes(4, sys.byteorder)) == 0
    assert unfolded(header(frames=1200) + header(frames=1201) + backfill) is None
    assert unfolded(header(frames=1200) * 2) is None  # no checkpoint information


def test_two_stores_on_one_file_each_fold_their_writes(tmp_path):
    """Two processes' stores on one file (a server and a CLI import): each folds the log after its
    own writes, while the other holds connections open; no write is lost or left unfolded."""
    path = tmp_path / "kg.sqlite3"
    one, two = Database(f"sqlite:///{path}"), Database(f"sqlite:///{path}")
    try:
        for db in (one, two):
            assert db.checkpointer is not None
            db.checkpointer.settle_s, db.checkpointer.min_frames = 0.0, 0
        for i in range(6):
            _write(one if i % 2 else two, f"row{i}")
            before = one.data_version()
            with two.read() as session:
                assert session.execute(text("SELECT count(*) FROM t")).scalar_one() == i + 1
            assert one.data_version() == before  # the other store's read moved nothing
        assert one.checkpointer.wait_idle() and two.checkpointer.wait_idle()
        assert all(_in_file(path, tmp_path, f"row{i}") for i in range(6))
    finally:
        one.dispose()
        two.dispose()


def test_the_unfolded_frames_read_off_the_shm_file_are_what_sqlite_folds(tmp_path):
    import os

    from kg.store.db import _wal_unfolded

    path = tmp_path / "kg.sqlite3"
    db = Database(f"sqlite:///{path}", checkpoint="commit")
    try:
        for i in range(5):
            _write(db, f"row{i}")
        connection = sqlite3.connect(path)
        fd = os.open(f"{path}-shm", os.O_RDONLY)
        try:
            before = _wal_unfolded(fd)
            busy, frames, copied = connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            assert busy == 0 and before == frames == copied > 0
            assert _wal_unfolded(fd) == 0
        finally:
            os.close(fd)
            connection.close()
    finally:
        db.dispose()
