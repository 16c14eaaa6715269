"""SQLAlchemy models of the store; Alembic migrations (``migrations/``) alone create the schema.

Content is stored as *versions* (docs/concepts/branches.md): a write
adds a row on the writing branch at the new revision, a delete a tombstone (``deleted``). A
branch is one row naming its parent and fork revision. Chunks are keyed by ``content_key``,
shared by every node version with that key.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    false,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# BIGINT on PostgreSQL, INTEGER (rowid alias, autoincrement) on SQLite.
BigId = BigInteger().with_variant(Integer(), "sqlite")
#: A node's ``workspace:path`` kept on its relations, sorted in code-point order on both
#: databases (SQLite compares text as bytes; PostgreSQL is told ``COLLATE "C"``).
Address = String(1300).with_variant(String(1300, collation="C"), "postgresql")


class UTCDateTime(TypeDecorator[datetime]):
    """A timestamp that always comes back timezone-aware in UTC (SQLite keeps no zone)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        """Mark a naive timestamp as UTC before it is stored."""
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        """Mark a timestamp read without a zone (SQLite) as UTC."""
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value


def utcnow() -> datetime:
    """Timezone-aware now, in UTC."""
    return datetime.now(UTC)


class Base(DeclarativeBase):
    """Declarative base of every kg table."""


class Repository(Base):
    """A repository: workspaces, branches and one revision counter."""

    __tablename__ = "repositories"
    __table_args__ = ({"sqlite_autoincrement": True},)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    uid: Mapped[str] = mapped_column(String(36), unique=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    head_revision: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    #: Bumped by every write that changes its branches or workspaces without a revision (a branch
    #: created, deleted or reset, a workspace created): with ``head_revision``, the key of the
    #: cached branch views (:class:`kg.store.repos.ViewCache`). Deferred and set by the database:
    #: only the view cache reads it and :func:`kg.store.repos.bump_layout` writes it.
    layout_version: Mapped[int] = mapped_column(Integer, server_default="0", deferred=True)


class Branch(Base):
    """A branch: its parent and the revision of the parent it forked at."""

    __tablename__ = "branches"
    # Ids are never reused (SQLite AUTOINCREMENT): caches key on (branch id, revision).
    __table_args__ = (
        UniqueConstraint("repo_id", "name", name="uq_branches_repo_name"),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    repo_id: Mapped[int] = mapped_column(ForeignKey("repositories.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(255))
    parent_id: Mapped[int | None] = mapped_column(
        ForeignKey("branches.id", ondelete="CASCADE"), nullable=True
    )
    base_revision: Mapped[int | None] = mapped_column(Integer, nullable=True)
    head_revision: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Revision(Base):
    """One write transaction: its number, branch, message and actor."""

    __tablename__ = "revisions"
    __table_args__ = (
        UniqueConstraint("repo_id", "number", name="uq_revisions_repo_number"),
        Index("ix_revisions_branch_number", "branch_id", "number"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    repo_id: Mapped[int] = mapped_column(ForeignKey("repositories.id", ondelete="CASCADE"))
    number: Mapped[int] = mapped_column(Integer)
    branch_id: Mapped[int] = mapped_column(ForeignKey("branches.id", ondelete="CASCADE"))
    message: Mapped[str | None] = mapped_column(Text, nullable=True)
    actor: Mapped[str | None] = mapped_column(String(255), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Workspace(Base):
    """A workspace: a named tree of nodes with its embedding and chunking configuration."""

    __tablename__ = "workspaces"
    __table_args__ = (UniqueConstraint("repo_id", "name", name="uq_workspaces_repo_name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    repo_id: Mapped[int] = mapped_column(ForeignKey("repositories.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(128))
    config: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class NodeVersion(Base):
    """One version of a node on one branch; ``deleted`` marks a tombstone."""

    __tablename__ = "node_versions"
    __table_args__ = (
        Index("ix_node_versions_path", "branch_id", "workspace_id", "path", "revision"),
        Index("ix_node_versions_parent", "branch_id", "workspace_id", "parent_path", "revision"),
        Index("ix_node_versions_node_id", "branch_id", "node_id", "revision"),
        Index("ix_node_versions_content_key", "repo_id", "content_key"),
        Index("ix_node_versions_branch_revision", "branch_id", "revision"),
        # The feed of the Weaviate index's catch-up (kg.indexing.chunks.SqlChunkFeed.versions).
        Index("ix_node_versions_repo_revision", "repo_id", "revision", "id"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    repo_id: Mapped[int] = mapped_column(ForeignKey("repositories.id", ondelete="CASCADE"))
    branch_id: Mapped[int] = mapped_column(ForeignKey("branches.id", ondelete="CASCADE"))
    workspace_id: Mapped[int] = mapped_column(ForeignKey("workspaces.id", ondelete="CASCADE"))
    revision: Mapped[int] = mapped_column(Integer)
    # The address's id (kg.store.nodes.node_uid): one per (workspace, path), on every branch.
    node_id: Mapped[str] = mapped_column(String(36))
    path: Mapped[str] = mapped_column(String(1024))
    parent_path: Mapped[str] = mapped_column(String(1024))
    name: Mapped[str] = mapped_column(String(255))
    node_type: Mapped[str] = mapped_column(String(255))
    properties: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    order: Mapped[float | None] = mapped_column("sort_order", Float, nullable=True)
    deleted: Mapped[bool] = mapped_column(Boolean, default=False)
    content_key: Mapped[str | None] = mapped_column(String(64), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class IngestRecord(Base):
    """What the last ingest of a file recorded at a node's address on one branch
    (:mod:`kg.store.ingest_records`): versioned like a node, but apart from its versions, so
    people's edits and deletes leave it alone. ``sha256`` hashes the file's bytes; ``base_patch``
    and ``relations`` make the base of the next ingest's merge.
    """

    __tablename__ = "ingest_records"
    __table_args__ = (
        Index("ix_ingest_records_path", "branch_id", "workspace_id", "path", "revision"),
        Index("ix_ingest_records_branch_revision", "branch_id", "revision"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    repo_id: Mapped[int] = mapped_column(ForeignKey("repositories.id", ondelete="CASCADE"))
    branch_id: Mapped[int] = mapped_column(ForeignKey("branches.id", ondelete="CASCADE"))
    workspace_id: Mapped[int] = mapped_column(ForeignKey("workspaces.id", ondelete="CASCADE"))
    revision: Mapped[int] = mapped_column(Integer)
    path: Mapped[str] = mapped_column(String(1024))
    sha256: Mapped[str] = mapped_column(String(64))
    source: Mapped[str] = mapped_column(Text)
    base_patch: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    #: The relations the file asserted, ``[[type, target path], ...]``; null: not recorded.
    relations: Mapped[list[list[str]] | None] = mapped_column(JSON, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class RelationVersion(Base):
    """One version of a typed, weighted edge between two nodes (by node id) on one branch."""

    __tablename__ = "relation_versions"
    __table_args__ = (
        Index(
            "ix_relation_versions_key", "branch_id", "from_node_id", "rel_type", "to_node_id", "revision"
        ),
        Index("ix_relation_versions_to", "branch_id", "to_node_id", "revision"),
        Index("ix_relation_versions_branch_revision", "branch_id", "revision"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    repo_id: Mapped[int] = mapped_column(ForeignKey("repositories.id", ondelete="CASCADE"))
    branch_id: Mapped[int] = mapped_column(ForeignKey("branches.id", ondelete="CASCADE"))
    revision: Mapped[int] = mapped_column(Integer)
    from_node_id: Mapped[str] = mapped_column(String(36))
    to_node_id: Mapped[str] = mapped_column(String(36))
    rel_type: Mapped[str] = mapped_column(String(255))
    weight: Mapped[float | None] = mapped_column(Float, nullable=True)
    properties: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    deleted: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    # The endpoints' addresses ``workspace:path`` (a node id is derived from its address, so
    # they never change): NEIGHBORS' second sort key, indexed with the weight so that the
    # database reads a hub's edges in the stable order and stops at the limit.
    from_address: Mapped[str | None] = mapped_column(Address, nullable=True)
    to_address: Mapped[str | None] = mapped_column(Address, nullable=True)
    # Validity in world time (issue 17): current at t when valid_from <= t < valid_to (null:
    # unbounded); ``invalidated_by`` names the relation that superseded it (``from|type|to``).
    valid_from: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    valid_to: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    invalidated_by: Mapped[str | None] = mapped_column(Text, nullable=True)


# NEIGHBORS in the stable order, by index (kg.store.relations.list_neighbors): a node's
# outgoing, then incoming, edge versions by weight descending, the other end's address, type.
Index("ix_relation_versions_out", RelationVersion.from_node_id, RelationVersion.weight.desc(),
      RelationVersion.to_address, RelationVersion.rel_type)
Index("ix_relation_versions_in", RelationVersion.to_node_id, RelationVersion.weight.desc(),
      RelationVersion.from_address, RelationVersion.rel_type)


class Chunk(Base):
    """A passage of node text with its embedding, shared by all versions with its content key.
    ``seq`` increases in commit order within a repository (writes hold its revision lock), so an
    index catches up by reading ``seq > watermark``.
    """

    __tablename__ = "chunks"
    __table_args__ = (
        UniqueConstraint("repo_id", "content_key", "chunk_index", name="uq_chunks_key"),
        Index("ix_chunks_repo_seq", "repo_id", "seq"),
    )

    seq: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    repo_id: Mapped[int] = mapped_column(ForeignKey("repositories.id", ondelete="CASCADE"))
    content_key: Mapped[str] = mapped_column(String(64))
    chunk_index: Mapped[int] = mapped_column(Integer)
    field: Mapped[str] = mapped_column(String(64))
    text: Mapped[str] = mapped_column(Text)
    char_start: Mapped[int] = mapped_column(Integer)
    char_end: Mapped[int] = mapped_column(Integer)
    model: Mapped[str] = mapped_column(String(255))
    dim: Mapped[int] = mapped_column(Integer)
    embedding: Mapped[bytes] = mapped_column(LargeBinary)


class Merge(Base):
    """A merge of ``source`` into ``target``: the next merge's base is this one."""

    __tablename__ = "merges"
    __table_args__ = (Index("ix_merges_pair", "source_branch_id", "target_branch_id", "target_revision"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    repo_id: Mapped[int] = mapped_column(ForeignKey("repositories.id", ondelete="CASCADE"))
    source_branch_id: Mapped[int] = mapped_column(ForeignKey("branches.id", ondelete="CASCADE"))
    target_branch_id: Mapped[int] = mapped_column(ForeignKey("branches.id", ondelete="CASCADE"))
    source_revision: Mapped[int] = mapped_column(Integer)
    target_revision: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class IndexJob(Base):
    """A content key whose chunks must be embedded: the durable queue feeding the index.

    A write queues one job with its node version when its key has no chunks; the indexer stores
    the chunks and deletes the job, or marks it ``failed``. A claim is held by a
    :class:`QueueWorker` (``claimed_by``) under a lease (``updated_at``, renewed): a ``running``
    job whose lease expired or whose worker is gone is taken again (a crash loses nothing),
    retried alone, and failed after a bounded number of deaths alone (:mod:`kg.indexing.queue`).
    """

    __tablename__ = "index_jobs"
    __table_args__ = (
        UniqueConstraint("repo_id", "content_key", name="uq_index_jobs_key"),
        Index("ix_index_jobs_status", "status", "id"),
        # Claim order: writes' texts (priority 0) before a re-embed's backlog (1).
        Index("ix_index_jobs_claim", "status", "priority", "id"),
        # Fair claim: the lanes (workspaces) with queued jobs, and each lane's head.
        Index("ix_index_jobs_lane", "status", "workspace_id", "priority", "id"),
        # Jobs to run alone (held when their worker died): found without reading the backlog.
        Index("ix_index_jobs_alone", "status", "alone", "priority", "id"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    repo_id: Mapped[int] = mapped_column(ForeignKey("repositories.id", ondelete="CASCADE"))
    content_key: Mapped[str] = mapped_column(String(64))
    workspace_id: Mapped[int] = mapped_column(ForeignKey("workspaces.id", ondelete="CASCADE"))
    node_version_id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer(), "sqlite"))
    status: Mapped[str] = mapped_column(String(16), default="pending")
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    # Progress of a text embedded in steps across indexer passes (null until its first step).
    chunks_done: Mapped[int | None] = mapped_column(Integer, nullable=True)
    chunks_total: Mapped[int | None] = mapped_column(Integer, nullable=True)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    priority: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    claimed_by: Mapped[str | None] = mapped_column(String(32), nullable=True)
    # Retries (kg.indexing.queue): deaths of the job run alone (what the attempt cap counts),
    # whether its next claim runs it alone (it was held when its worker died), its backoff.
    failures: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    alone: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    not_before: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class Reference(Base):
    """A property of one node version that points at a node by address (which need not exist):
    written with the version (:mod:`kg.store.references`), so referrers are found here, not by
    scanning properties. Table ``node_references``: ``REFERENCES`` is an SQL keyword.
    """

    __tablename__ = "node_references"
    __table_args__ = (
        Index("ix_node_references_target", "repo_id", "target_workspace", "target_path", "branch_id", "revision"),
        Index("ix_node_references_source_version", "source_version_id"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    repo_id: Mapped[int] = mapped_column(ForeignKey("repositories.id", ondelete="CASCADE"))
    branch_id: Mapped[int] = mapped_column(ForeignKey("branches.id", ondelete="CASCADE"))
    revision: Mapped[int] = mapped_column(Integer)
    source_node_id: Mapped[str] = mapped_column(String(36))
    source_version_id: Mapped[int] = mapped_column(
        BigId, ForeignKey("node_versions.id", ondelete="CASCADE")
    )
    property_key: Mapped[str] = mapped_column(Text)
    target_workspace: Mapped[str] = mapped_column(String(255))
    target_path: Mapped[str] = mapped_column(String(1024))


class FunctionJob(Base):
    """An asynchronous function invocation (``wait_for_completion: false``): the durable job.

    ``queued``, then claimed (``running``, ``attempts`` + 1, a lease until ``lease_until``,
    renewed), then ``succeeded`` with ``output`` or ``failed`` with ``error`` in the API error
    shape. A job whose lease expired is claimed again, alone, until its runner died a bounded
    number of times (:mod:`kg.rag.function_jobs`, :mod:`kg.indexing.queue`).
    """

    __tablename__ = "function_jobs"
    __table_args__ = (
        Index("ix_function_jobs_state", "state", "created_at"),
        # Fair claim: the lanes (repositories) with queued jobs, and each lane's head.
        Index("ix_function_jobs_lane", "state", "repo_id", "created_at", "id"),
        Index("ix_function_jobs_alone", "state", "alone", "created_at", "id"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    repo_id: Mapped[int] = mapped_column(ForeignKey("repositories.id", ondelete="CASCADE"))
    function: Mapped[str] = mapped_column(String(128))
    branch: Mapped[str] = mapped_column(String(255))
    input: Mapped[dict[str, Any]] = mapped_column(JSON)
    state: Mapped[str] = mapped_column(String(16), default="queued")
    output: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    error: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    lease_until: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    claimed_by: Mapped[str | None] = mapped_column(String(32), nullable=True)
    # Retries (kg.indexing.queue): deaths of the job run alone (what the attempt cap counts),
    # whether its next claim runs it alone (it was held when its worker died), its backoff.
    failures: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    alone: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    not_before: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    #: Who submitted it, ``{"kind", "name"}`` (:class:`kg.context.Actor`); the job runs as them.
    actor: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)


class ConsoleSession(Base):
    """A sign-in to the review console: the cookie carries the session's random id (signed), only its
    SHA-256 is stored; signing out or revoking the key ends it for every copy of the cookie.
    """

    __tablename__ = "console_sessions"
    __table_args__ = (Index("ix_console_sessions_key", "key_id"),)

    id_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    key_id: Mapped[str] = mapped_column(ForeignKey("api_keys.id", ondelete="CASCADE"))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime())
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class ApiKey(Base):
    """An API key (``kg_<id>_<secret>``): only the secret's HMAC-SHA256 under ``KG_KEY_PEPPER`` is
    stored. ``last_used_at`` is written at most every ``KG_KEY_TOUCH_S`` seconds; a revoked or
    expired key is kept (its name stays in the log) and refused.
    """

    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(255), unique=True)
    secret_hash: Mapped[str] = mapped_column(String(64))
    created_by: Mapped[str | None] = mapped_column(String(255), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class ApiKeyGrant(Base):
    """One grant of a key: a repository (name or glob), branch and workspace globs, the actions
    allowed (:class:`kg.access.Grant`).
    """

    __tablename__ = "api_key_grants"
    __table_args__ = (Index("ix_api_key_grants_key", "key_id"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    key_id: Mapped[str] = mapped_column(ForeignKey("api_keys.id", ondelete="CASCADE"))
    repo: Mapped[str] = mapped_column(String(255))
    branches: Mapped[list[str]] = mapped_column(JSON)
    workspaces: Mapped[list[str]] = mapped_column(JSON)
    actions: Mapped[list[str]] = mapped_column(JSON)


class QueueWorker(Base):
    """A process draining a durable queue (:mod:`kg.indexing.queue`): what holds the claims.

    It registers on its first claim and heartbeats while claiming or running. On the same machine
    (``host``, the boot in ``process_start``) whether its ``pid`` still runs is known at once;
    elsewhere it is gone once its heartbeat is stale. A gone worker's claims are taken back
    without waiting for their lease.
    """

    __tablename__ = "queue_workers"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    queue: Mapped[str] = mapped_column(String(32))
    host: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    process_start: Mapped[str] = mapped_column(String(128))
    started_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    heartbeat_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)



class BranchEvent(Base):
    """A branch created, reset or deleted, or a merge: what the change feed (:mod:`kg.ops.changes`)
    tells beside revisions. ``revision`` is the repository's head when it happened (the event
    comes after that revision's writes; a merge: the revision it wrote, with its source branch
    and revision kept here, as the ``merges`` rows go with a deleted branch); written under the
    repository's row lock, so ids grow in the order events commit.
    """

    __tablename__ = "branch_events"
    __table_args__ = (Index("ix_branch_events_repo", "repo_id", "id"), {"sqlite_autoincrement": True})

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    repo_id: Mapped[int] = mapped_column(ForeignKey("repositories.id", ondelete="CASCADE"))
    branch: Mapped[str] = mapped_column(String(255))
    kind: Mapped[str] = mapped_column(String(16))
    revision: Mapped[int] = mapped_column(Integer)
    actor: Mapped[str | None] = mapped_column(String(255), nullable=True)
    source_branch: Mapped[str | None] = mapped_column(String(255), nullable=True)
    source_revision: Mapped[int | None] = mapped_column(Integer, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Webhook(Base):
    """A receiver of a repository's changes (:mod:`kg.ops.webhooks`): its URL, its signing secret,
    the branch globs and event kinds it wants, and how far the dispatcher has read the feed for
    it (``after_revision``, ``after_event``).
    """

    __tablename__ = "webhooks"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    repo_id: Mapped[int] = mapped_column(ForeignKey("repositories.id", ondelete="CASCADE"))
    url: Mapped[str] = mapped_column(Text)
    secret: Mapped[str] = mapped_column(String(128))
    branches: Mapped[list[str]] = mapped_column(JSON)
    events: Mapped[list[str]] = mapped_column(JSON)
    created_by: Mapped[str | None] = mapped_column(String(255), nullable=True)
    after_revision: Mapped[int] = mapped_column(Integer, default=0)
    after_event: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class WebhookDelivery(Base):
    """One change event to deliver to one webhook: a job of the durable queue
    (:mod:`kg.indexing.queue`; group the repository, lane the webhook), retried with exponential
    backoff until delivered or its attempts are used up; its rows are the hook's delivery log.
    """

    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        Index("ix_webhook_deliveries_lane", "state", "webhook_id", "id"),
        Index("ix_webhook_deliveries_alone", "state", "alone", "id"),
        Index("ix_webhook_deliveries_hook", "webhook_id", "id"),
    )

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer(), "sqlite"), primary_key=True,
                                    autoincrement=True)
    repo_id: Mapped[int] = mapped_column(ForeignKey("repositories.id", ondelete="CASCADE"))
    webhook_id: Mapped[str] = mapped_column(ForeignKey("webhooks.id", ondelete="CASCADE"))
    event_id: Mapped[str] = mapped_column(String(64))
    event: Mapped[dict[str, Any]] = mapped_column(JSON)
    state: Mapped[str] = mapped_column(String(16), default="queued")
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    claimed_by: Mapped[str | None] = mapped_column(String(32), nullable=True)
    failures: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    alone: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    not_before: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    lease_until: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    status_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    last_attempt_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    delivered_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


def node_dict(version: NodeVersion, workspace: str) -> dict[str, Any]:
    """The API shape of a node version (:class:`kg.types.nodes.Node`)."""
    return {
        "id": version.node_id,
        "workspace": workspace,
        "path": version.path,
        "name": version.name,
        "parent_path": version.parent_path,
        "node_type": version.node_type,
        "properties": version.properties,
        "order": version.order,
        "revision": version.revision,
        "created_at": version.created_at.isoformat() if version.created_at else None,
        "updated_at": version.updated_at.isoformat() if version.updated_at else None,
    }
