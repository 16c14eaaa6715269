"""A backup of a whole store: its manifest (what restore checks) and the probes it recorded.

The manifest is ``manifest.json`` at the top of a backup folder (:mod:`kg.backup` writes and
reads it; docs/guides/operating.md describes the folder).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

#: Version of the backup folder's layout; a backup of another format is refused.
BACKUP_FORMAT = 1

DatabaseKind = Literal["sqlite", "postgresql"]
ProbeKind = Literal["search", "log", "neighbors"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BackupFile(_Model):
    """One file of a backup, relative to its folder, with its size and SHA-256 (hex)."""

    path: str
    bytes: int = Field(ge=0)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class RepositoryState(_Model):
    """A repository as the backup holds it: its head revision and each branch's."""

    name: str
    uid: str
    head_revision: int
    branches: dict[str, int]


class Probe(_Model):
    """A read recorded when the backup was taken, and a digest of its answer.

    ``kind`` is ``search`` (a hybrid search of ``args["query"]``: the hits and their order),
    ``log`` (the branch's last revisions) or ``neighbors`` (NEIGHBORS of ``args["address"]``),
    read on ``branch`` as of ``at_revision``. ``digest`` is the SHA-256 of the answer's canonical
    JSON (scores rounded to 6 places); ``summary`` a short readable part of it (the hits'
    addresses, the revision numbers, the neighbour count), or the error code of a read that
    failed (which a restored store must fail alike).
    """

    kind: ProbeKind
    repo: str
    branch: str
    at_revision: int
    args: dict[str, Any]
    digest: str
    summary: Any = None


class Manifest(_Model):
    """What a backup holds: written last into the backup folder, checked first by restore.

    Attributes
    ----------
    format : int
        :data:`BACKUP_FORMAT`.
    kg_version : str
        The kg that took the backup.
    created_at : str
        When (ISO 8601, UTC).
    database : {"sqlite", "postgresql"}
        The store's database: a ``kg.sqlite3`` file (SQLite's online backup) or a
        ``kg.dump`` (``pg_dump -Fc``).
    schema_name : str or None
        PostgreSQL: the schema the dump holds (restored under the same name).
    migration_head : str
        The Alembic revision of the database (restore refuses one its kg does not know).
    index : {"embedded", "weaviate"}
        The store's search index; the embedded one's snapshots are under ``index/``.
    repositories : list of RepositoryState
        Every repository, with its head revision and branches, as of the database's copy.
    files : list of BackupFile
        Every file of the backup but the manifest.
    probes : list of Probe
        Reads a restored store must answer alike (``kg restore --verify``).
    """

    format: int
    kg_version: str
    created_at: str
    database: DatabaseKind
    schema_name: str | None = None
    migration_head: str
    index: Literal["embedded", "weaviate"]
    repositories: list[RepositoryState]
    files: list[BackupFile]
    probes: list[Probe] = Field(default_factory=list)


class ProbeMismatch(_Model):
    """A recorded probe that the checked store answered otherwise."""

    kind: ProbeKind
    repo: str
    branch: str
    args: dict[str, Any]
    expected: Any
    got: Any


class VerifyReport(_Model):
    """Whether a store answers a backup's probes alike: ``ok`` when every one matched."""

    ok: bool
    probes: int
    matched: int
    mismatches: list[ProbeMismatch]


__all__ = ["BACKUP_FORMAT", "BackupFile", "DatabaseKind", "Manifest", "Probe", "ProbeKind",
           "ProbeMismatch", "RepositoryState", "VerifyReport"]
