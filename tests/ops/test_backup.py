"""Backup and restore of a whole store (``kg.backup``), on both databases: a backup taken while a
writer keeps writing is one consistent point (every revision up to some R, nothing after); the
store restored into a new data directory or database answers the same searches (hits and order),
log and NEIGHBORS as the original as of R; the manifest's refusals write nothing."""

from __future__ import annotations

import json
import os
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import SecretStr
from sqlalchemy import create_engine, func, select
from sqlalchemy.engine import make_url

from kg import backup as backup_ops
from kg.access import Actor, make_grant
from kg.context import OPERATOR, run
from kg.errors import Conflict, Forbidden, InvalidInput
from kg.index.base import IndexedChunk
from kg.index.embedded import EmbeddedVectorIndex
from kg.indexing.index_jobs import INDEX_QUEUE
from kg.indexing.queue import DurableQueue
from kg.ops import branches as branch_ops
from kg.ops import keys as key_ops
from kg.ops import queries
from kg.ops import relations as relation_ops
from kg.ops import repos as repo_ops
from kg.ops.nodes import batch
from kg.providers.registry import make_embedder
from kg.rag.graph import neighbors
from kg.rag.search import SearchRequest, search_branch
from kg.services import Services
from kg.settings import Settings
from kg.store.db import Database
from kg.store.models import IndexJob, QueueWorker
from tests.conftest import POSTGRES_URL

TOPICS = ["rotate the signing keys every ninety days", "the ledger reconciles payments nightly",
          "backups are restored into a scratch database", "vector search ranks passages by cosine",
          "branches fork from main and merge back", "the indexer embeds queued texts in the background"]


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """The conftest's settings with a pepper (the store holds an API key)."""
    return settings.model_copy(update={"key_pepper": SecretStr("a pepper for the backup tests, long enough")})


def _open(settings: Settings) -> Services:
    """Services over ``settings`` as the CLI opens them (the probes' store)."""
    return Services(settings=settings, db=Database(settings.resolved_database_url()),
                    index=EmbeddedVectorIndex(settings.data_dir),
                    embedder_factory=lambda name: make_embedder(name, allow_fake=True))


def _build(services: Services, repo: str = "acme") -> None:
    run(services, OPERATOR, repo_ops.create_repository, repo)
    run(services, OPERATOR, repo_ops.create_workspace, repo, "notes")
    run(services, OPERATOR, batch, repo, "main", upserts=[
        {"workspace": "notes", "path": f"/t{i}", "node_type": "kb:Note",
         "properties": {"title": f"Topic {i}", "content": f"{topic}. " * 12}} for i, topic in enumerate(TOPICS)])
    for i in range(len(TOPICS) - 1):
        run(services, OPERATOR, relation_ops.relate, repo, "main", f"notes:/t{i}", f"notes:/t{i + 1}", "next",
            weight=round(0.1 * (i + 1), 2))
    run(services, OPERATOR, branch_ops.create_branch, repo, name="draft")
    run(services, OPERATOR, batch, repo, "draft", upserts=[
        {"workspace": "notes", "path": "/t0", "node_type": "kb:Note",
         "properties": {"title": "Topic 0 (draft)", "content": "rotate keys weekly on the draft branch"}}])
    run(services, OPERATOR, key_ops.create_key, name="reader", grants=[make_grant("acme", "*", ["read"])])
    search_branch(services, OPERATOR, repo, "main", SearchRequest(query="keys", k=1))  # the index catches up
    assert services.index.loaded_repositories()
    for key in services.index.loaded_repositories():  # snapshots older than what follows: caught up
        services.index.flush(key)


@contextmanager
def _target(source_url: str, tmp: Path) -> Iterator[str]:
    """An empty database to restore into: a new SQLite file, or a scratch PostgreSQL database
    (``test_restore_<pid>``, created and dropped here) whose search path names the source's schema."""
    if make_url(source_url).get_backend_name() == "sqlite":
        yield f"sqlite:///{tmp / 'restored' / 'kg.sqlite3'}"
        return
    assert POSTGRES_URL
    name = f"test_restore_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    admin = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    try:
        schema = make_url(source_url).query["options"].split("=", 1)[1]
        url = make_url(POSTGRES_URL).set(database=name, query={"options": f"-csearch_path={schema}"})
        yield url.render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


def _restored_settings(settings: Settings, url: str, tmp: Path) -> Settings:
    return settings.model_copy(update={"database_url": url, "data_dir": tmp / "restored"})


def _reads(services: Any, repo: str, branch: str, revision: int) -> dict[str, Any]:
    """What the read use cases answer as of ``revision``: searches (hits, order, scores), the log,
    NEIGHBORS of every topic."""
    out: dict[str, Any] = {"log": queries.revision_log(services, OPERATOR, repo, branch, at_revision=revision,
                                                       limit=100, max_changes=10)}
    for query in ("rotate keys", "restored scratch database", "cosine ranking of passages"):
        # Every hit (k above the passages held), in order; hits of equal score are ordered by
        # address: a text embedded again from the restored queue gets a new chunk number, and
        # the index breaks ties by chunk number.
        answer = search_branch(services, OPERATOR, repo, branch, SearchRequest(query=query, k=500),
                               at_revision=revision)
        rows = [(round(r.score, 6), r.workspace, r.path, r.chunk_index) for r in answer.results]
        assert [row[0] for row in rows] == sorted((row[0] for row in rows), reverse=True)
        out[query] = sorted(rows, key=lambda row: (-row[0], row[1:]))
        assert out[query], query
    for i in range(len(TOPICS)):
        out[f"t{i}"] = neighbors(services, OPERATOR, repo, branch, f"notes:/t{i}", at_revision=revision)
    return out


def test_a_backup_taken_while_writing_restores_one_consistent_point(services, settings, tmp_path):
    _build(services)
    written: list[tuple[int, int]] = []  # (write number, its revision)
    stop = threading.Event()
    started = threading.Event()
    failures: list[BaseException] = []

    def writer() -> None:
        i = 0
        try:
            while not stop.is_set() or i < 3:
                done = run(services, OPERATOR, batch, "acme", "main", upserts=[
                    {"workspace": "notes", "path": f"/w/{i}", "node_type": "kb:Note",
                     "properties": {"title": f"Write {i}", "content": f"write number {i} of the writer"}}],
                    parents=True)
                written.append((i, done.revision))
                i += 1
                if i >= 3:
                    started.set()
        except BaseException as exc:  # reported by the test
            failures.append(exc)
            started.set()

    thread = threading.Thread(target=writer)
    thread.start()
    assert started.wait(60)
    try:
        manifest = backup_ops.backup_store(services, OPERATOR, tmp_path / "backup", open_store=_open)
    finally:
        stop.set()
        thread.join(60)
    assert not failures
    repo_state = next(r for r in manifest.repositories if r.name == "acme")
    cut = repo_state.head_revision
    before = [i for i, rev in written if rev <= cut]
    after = [i for i, rev in written if rev > cut]
    assert before and after, (cut, written)  # the backup fell between two of the writer's revisions
    assert manifest.probes and {p.kind for p in manifest.probes} == {"search", "log", "neighbors"}

    with _target(settings.resolved_database_url(), tmp_path) as url:
        target = _restored_settings(settings, url, tmp_path)
        restored_manifest = backup_ops.restore_store(target, OPERATOR, tmp_path / "backup")
        assert restored_manifest == manifest
        # right after the restore, the store answers the recorded probes alike
        report = backup_ops.verify_store(target, OPERATOR, tmp_path / "backup", open_store=_open)
        assert report.ok and report.matched == report.probes == len(manifest.probes)
        restored = _open(target)
        try:
            # every revision up to the cut, nothing after
            log = queries.revision_log(restored, OPERATOR, "acme", "main", limit=1000, max_changes=0)
            assert [r.revision for r in log.revisions] == sorted(
                {r.revision for r in queries.revision_log(services, OPERATOR, "acme", "main", limit=1000,
                                                          at_revision=cut, max_changes=0).revisions}, reverse=True)
            assert log.revisions[0].revision == cut
            nodes = queries.list_prefix(restored, OPERATOR, "acme", "main", "notes", "/w/").nodes
            assert sorted(int(n.path.rsplit("/", 1)[1]) for n in nodes) == sorted(before)
            # the texts whose embedding was still queued at the cut are embedded from the restored
            # queue (as kg serve's indexer does); then the same answers as the original as of the
            # cut, on both branches
            repo_ops.settle_index(restored, OPERATOR, "acme")
            for branch in ("main", "draft"):
                revision = cut if branch == "main" else repo_state.branches["draft"]
                assert _reads(restored, "acme", branch, revision) == _reads(services, "acme", branch, revision)
            # keys and the queue state came along
            assert [k.name for k in key_ops.list_keys(restored, OPERATOR).keys] == ["reader"]
            assert queries.index_status(restored, OPERATOR, "acme").failed == 0
        finally:
            restored.close()


def test_a_text_being_embedded_at_the_cut_is_embedded_by_the_restored_store(services, settings, tmp_path):
    # A backup of a live store copies the claim of a worker that is still running (here, this
    # process): neither its pid nor its lease frees it in the restored store, whose search missed
    # the text until the lease expired (the flake of the backup-while-writing test). The restore
    # requeues it and forgets the original's workers.
    _build(services)
    queued = _open(settings.model_copy(update={"index_inline": False}))
    try:
        run(queued, OPERATOR, batch, "acme", "main", upserts=[
            {"workspace": "notes", "path": "/late", "node_type": "kb:Note",
             "properties": {"title": "Late", "content": "a quokka photographed on the ferry at dawn"}}])
        worker = DurableQueue(services.db, INDEX_QUEUE)
        with services.db.write() as session:
            claimed = worker.claim(session, 10).claims
        assert len(claimed) == 1
        status = queries.index_status(services, OPERATOR, "acme")
        assert (status.pending, status.running) == (0, 1)
        backup_ops.backup_store(services, OPERATOR, tmp_path / "backup", open_store=_open)
    finally:
        queued.close()
    with _target(settings.resolved_database_url(), tmp_path) as url:
        target = _restored_settings(settings, url, tmp_path)
        backup_ops.restore_store(target, OPERATOR, tmp_path / "backup")
        restored = _open(target)
        try:
            status = queries.index_status(restored, OPERATOR, "acme")
            assert (status.pending, status.running, status.failed) == (1, 0, 0)
            with restored.db.read() as session:
                assert session.scalar(select(func.count()).select_from(QueueWorker)) == 0
            # requeued as it was: no death counted, claimable at once
            with restored.db.read() as session:
                job = session.execute(select(IndexJob.failures, IndexJob.alone, IndexJob.not_before,
                                             IndexJob.claimed_by)).one()
            assert tuple(job) == (0, False, None, None)
            assert repo_ops.settle_index(restored, OPERATOR, "acme").done == 1
            answer = search_branch(restored, OPERATOR, "acme", "main", SearchRequest(query="quokka ferry", k=1))
            assert [(r.workspace, r.path) for r in answer.results] == [("notes", "/late")]
        finally:
            restored.close()


def test_verify_reports_a_store_that_answers_otherwise(services, settings, tmp_path):
    _build(services)
    backup_ops.backup_store(services, OPERATOR, tmp_path / "backup", open_store=_open)
    with _target(settings.resolved_database_url(), tmp_path) as url:
        target = _restored_settings(settings, url, tmp_path)
        backup_ops.restore_store(target, OPERATOR, tmp_path / "backup")
        restored = _open(target)
        try:  # a relation removed after the restore: NEIGHBORS of both ends and the log differ
            run(restored, OPERATOR, relation_ops.unrelate, "acme", "main", "notes:/t0", "notes:/t1", "next")
        finally:
            restored.close()
        # the probes are read as of the backup's revision: a later write changes none of them...
        assert backup_ops.verify_store(target, OPERATOR, tmp_path / "backup", open_store=_open).ok
        # ...but the same write in place of the backup's last revision does
        manifest_path = tmp_path / "backup" / "manifest.json"
        manifest = json.loads(manifest_path.read_text())
        for probe in manifest["probes"]:
            if probe["branch"] == "main":
                probe["at_revision"] += 1
        manifest_path.write_text(json.dumps(manifest))
        report = backup_ops.verify_store(target, OPERATOR, tmp_path / "backup", open_store=_open)
        assert not report.ok
        assert {m.kind for m in report.mismatches} >= {"log"}
        assert report.matched == report.probes - len(report.mismatches)


@pytest.fixture
def backed_up(services, tmp_path) -> Path:
    _build(services)
    backup_ops.backup_store(services, OPERATOR, tmp_path / "backup", open_store=_open)
    return tmp_path / "backup"


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_restore_refuses_a_newer_migration_head(backed_up, settings, tmp_path):
    path = backed_up / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["migration_head"] = "9999_from_the_future"
    path.write_text(json.dumps(manifest))
    with _target(settings.resolved_database_url(), tmp_path) as url:
        target = _restored_settings(settings, url, tmp_path)
        with pytest.raises(InvalidInput, match="migration 9999_from_the_future, which this kg"):
            backup_ops.restore_store(target, OPERATOR, backed_up)
    assert not (tmp_path / "restored").exists()


@pytest.mark.parametrize("damage", ["flip", "truncate", "remove"])
def test_restore_refuses_a_corrupted_file(backed_up, settings, tmp_path, damage):
    data = backed_up / ("kg.sqlite3" if (backed_up / "kg.sqlite3").exists() else "kg.dump")
    if damage == "flip":
        blob = bytearray(data.read_bytes())
        blob[len(blob) // 2] ^= 0xFF
        data.write_bytes(bytes(blob))
        expected = "does not match its SHA-256"
    elif damage == "truncate":
        data.write_bytes(data.read_bytes()[:-1])
        expected = "has .* bytes, the manifest says"
    else:
        index_file = next(p for p in (backed_up / "index").rglob("*.npz"))
        index_file.unlink()
        expected = "incomplete: index/.* is missing"
    with _target(settings.resolved_database_url(), tmp_path) as url:
        target = _restored_settings(settings, url, tmp_path)
        with pytest.raises(InvalidInput, match=expected):
            backup_ops.restore_store(target, OPERATOR, backed_up)
    assert not (tmp_path / "restored").exists()


def test_restore_refuses_a_store_with_data_unless_forced(backed_up, services, settings, tmp_path):
    # the backed-up store itself is not empty: nothing of it changes
    before = queries.revision_log(services, OPERATOR, "acme", "main", limit=1000)
    run(services, OPERATOR, repo_ops.create_repository, "other")
    with pytest.raises(Conflict, match="not empty.*--force"):
        backup_ops.restore_store(settings, OPERATOR, backed_up)
    assert [r.name for r in repo_ops.list_repositories(services, OPERATOR).repos] == ["acme", "other"]
    assert queries.revision_log(services, OPERATOR, "acme", "main", limit=1000) == before
    # forced: the store is the backup's again (the repository made after it is gone)
    services.close()
    backup_ops.restore_store(settings, OPERATOR, backed_up, force=True)
    again = _open(settings)
    try:
        assert [r.name for r in repo_ops.list_repositories(again, OPERATOR).repos] == ["acme"]
        assert queries.revision_log(again, OPERATOR, "acme", "main", limit=1000) == before
    finally:
        again.close()
    assert backup_ops.verify_store(settings, OPERATOR, backed_up, open_store=_open).ok


def test_backup_refuses_a_folder_with_files_and_a_caller_who_is_not_an_administrator(services, tmp_path):
    _build(services)
    dest = tmp_path / "used"
    dest.mkdir()
    (dest / "keep.txt").write_text("mine")
    with pytest.raises(Conflict, match="not an empty folder"):
        backup_ops.backup_store(services, OPERATOR, dest, open_store=_open)
    assert _files(dest) == {"keep.txt": b"mine"}
    reader = Actor("key", name="reader", key_id="k1", grants=(make_grant("acme", "*", ["read", "write"]),))
    with pytest.raises(Forbidden):
        backup_ops.backup_store(services, reader, tmp_path / "new", open_store=_open)
    with pytest.raises(Forbidden):
        backup_ops.restore_store(services.settings, reader, tmp_path / "new")
    assert not (tmp_path / "new").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".new.partial")]


def test_restore_refuses_another_database_kind_and_a_folder_without_manifest(backed_up, settings, tmp_path):
    other = ("postgresql+psycopg://postgres@127.0.0.1:5432/test" if settings.resolved_database_url().startswith(
        "sqlite") else f"sqlite:///{tmp_path / 'other' / 'kg.sqlite3'}")
    with pytest.raises(InvalidInput, match="the backup is of a .* store and the target database is"):
        backup_ops.restore_store(settings.model_copy(update={"database_url": other}), OPERATOR, backed_up)
    (tmp_path / "empty").mkdir()
    with pytest.raises(InvalidInput, match="is not a kg backup: no manifest.json"):
        backup_ops.restore_store(settings, OPERATOR, tmp_path / "empty")


def test_index_snapshots_are_copied_whole_while_the_index_keeps_flushing(tmp_path):
    """Every copy taken while another thread syncs and flushes is a snapshot that loads with all
    its rows (never a meta.json naming a file the copy lacks)."""
    index = EmbeddedVectorIndex(tmp_path / "live")
    rng = np.random.default_rng(3)
    stop = threading.Event()
    seq = [0]

    def flusher() -> None:
        while not stop.is_set():
            chunks = []
            for _ in range(20):
                seq[0] += 1
                chunks.append(IndexedChunk(seq=seq[0], content_key=f"k{seq[0]}", chunk_index=0, model="m",
                                           text=f"text {seq[0]}", vector=rng.standard_normal(8).astype(np.float32)))
            index.sync("repo", chunks)
            index.flush("repo")

    thread = threading.Thread(target=flusher)
    thread.start()
    try:
        copies = 0
        while copies < 25:
            target = tmp_path / f"copy{copies}"
            backup_ops.copy_index(tmp_path / "live" / "index", target)
            if (target / "repo" / "meta.json").exists():
                meta = json.loads((target / "repo" / "meta.json").read_text())
                loaded = EmbeddedVectorIndex(target.parent / f"load{copies}")
                (target.parent / f"load{copies}").mkdir()
                os.rename(target, target.parent / f"load{copies}" / "index")
                assert loaded.watermark("repo") == meta["watermark"] > 0
                assert loaded.stats("repo")["chunks"] == meta["rows"]
                loaded.close()
            copies += 1
    finally:
        stop.set()
        thread.join(30)
        index.close()


@contextmanager
def _scratch_database(prefix: str) -> Iterator[str]:
    """A new PostgreSQL database (its schema ``public``), dropped afterwards."""
    assert POSTGRES_URL
    name = f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    admin = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    try:
        yield make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


@pytest.mark.skipif(not POSTGRES_URL, reason="needs KG_TEST_POSTGRES_URL")
def test_a_store_in_the_public_schema_restores_into_a_new_database(settings, tmp_path):
    """The usual deployment: kg's tables in ``public`` of their own database, restored into a new
    database (which has a ``public`` schema already)."""
    if not settings.resolved_database_url().startswith("postgresql"):
        pytest.skip("once, with the PostgreSQL settings")
    with _scratch_database("test_backup_src") as source, _scratch_database("test_restore") as target_url:
        live = settings.model_copy(update={"database_url": source, "data_dir": tmp_path / "live"})
        services = _open(live)
        try:
            services.db.upgrade()
            _build(services)
            manifest = backup_ops.backup_store(services, OPERATOR, tmp_path / "backup", open_store=_open)
            assert manifest.schema_name == "public"
            target = _restored_settings(settings, target_url, tmp_path)
            backup_ops.restore_store(target, OPERATOR, tmp_path / "backup")
            assert backup_ops.verify_store(target, OPERATOR, tmp_path / "backup", open_store=_open).ok
            restored = _open(target)
            try:
                head = manifest.repositories[0].head_revision
                assert _reads(restored, "acme", "main", head) == _reads(services, "acme", "main", head)
            finally:
                restored.close()
        finally:
            services.close()
