"""Bulk work: the records of a ``kg-ndjson`` file (:mod:`kg.ops.bulk`), and what ``kg import
ndjson``, ``kg import memory-jsonl`` and ``kg ingest`` report."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from kg.types.common import Schema, absent

#: The format's name and version (the header's ``format`` and ``version``).
FORMAT = "kg-ndjson"
FORMAT_VERSION = 1
#: The columnar format's name (the same records as columns of one Parquet file, the header in its metadata).
PARQUET_FORMAT = "kg-parquet"
#: The media type of each file format (``format``: ``ndjson`` or ``parquet``), as the export
#: answers it and the import takes it.
MEDIA_TYPES = {"ndjson": "application/x-ndjson", "parquet": "application/vnd.apache.parquet"}
#: The type of a node record that names none.
DEFAULT_NODE_TYPE = "kg:Node"

# -- the records of a kg-ndjson file ------------------------------------------------------------


class _Record(BaseModel):
    """A record of the file: strict JSON types, no unknown field, no NaN or infinity."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class WorkspaceSpec(_Record):
    """A workspace of the header: its name and embedding settings (None: the service's)."""

    name: str
    embedding: dict[str, Any] | None = None


class Counts(_Record):
    """How many records of each kind follow the header."""

    nodes: int = Field(ge=0)
    relations: int = Field(ge=0)
    chunks: int = Field(ge=0)


class HeaderRecord(_Record):
    """The first record: the format, where the content was read, the workspaces."""

    record: Literal["header"]
    format: Literal["kg-ndjson", "kg-parquet"]
    version: Literal[1]
    repo: str
    branch: str
    revision: int = Field(ge=0)
    with_chunks: bool = False
    workspaces: list[WorkspaceSpec]
    counts: Counts | None = None


class NodeRecord(_Record):
    """A node: its address, type, properties, order and timestamps."""

    record: Literal["node"]
    workspace: str
    path: str
    node_type: str = DEFAULT_NODE_TYPE
    properties: dict[str, Any] = Field(default_factory=dict)
    order: float | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None


class RelationRecord(_Record):
    """A relation between two node addresses."""

    record: Literal["relation"]
    source: str = Field(alias="from")
    to: str
    type: str
    weight: float | None = None
    properties: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime | None = None
    #: Validity in world time: ISO 8601 with a zone; absent or null: unbounded.
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    invalidated_by: str | None = Field(default=None, min_length=1, max_length=2000)


class ChunkRecord(_Record):
    """A chunk of a node's indexed text with its embedding (base64 float32 little-endian)."""

    record: Literal["chunk"]
    content_key: str = Field(pattern=r"^[0-9a-f]{64}$")
    chunk_index: int = Field(ge=0)
    field: str
    text: str
    char_start: int = Field(ge=0)
    char_end: int = Field(ge=0)
    model: str
    dim: int = Field(gt=0)
    vector: str


# -- reports ----------------------------------------------------------------------------------


class UnchangedRecords(Schema):
    """Records an import found held alike on the branch (no new version)."""

    nodes: int
    relations: int


class NdjsonImport(Schema):
    """``kg import ndjson``: what the import wrote."""

    repo: str
    branch: str
    revision: int | None = Field(description="The last revision written (null: nothing was).")
    revisions: list[int] = Field(description="Every revision written, one per batch.")
    nodes: int = Field(description="Node records written.")
    relations: int = Field(description="Relation records written.")
    unchanged: UnchangedRecords
    chunks: int = Field(description="Chunks stored with their vectors.")
    queued: int = Field(description="Texts without chunks, queued for embedding.")
    created_repository: bool
    index_failures: int = absent("Texts the indexer could not embed once the import was settled (the CLI's).")


class MemoryImport(Schema):
    """``kg import memory-jsonl``: what the import of a memory file wrote."""

    revision: int | None = Field(description="The revision written (null: the branch held it all).")
    entities: int = Field(description="Entities in the file.")
    relations: int = Field(description="Relations in the file (duplicates dropped).")
    nodes_written: int
    relations_written: int
    unchanged: bool = Field(description="Nothing was written.")
    index_failures: int = absent("Texts the indexer could not embed once the import was settled (the CLI's).")


class UnreadableFile(Schema):
    """A file an ingest skipped because it could not be read."""

    file: str
    reason: str


class KeptEdit(Schema):
    """A property a person and the file both changed since the last ingest, kept as the person
    wrote it (``key`` ``kg:node_type`` for the node's type; a value absent on one side is null)."""

    path: str
    key: str
    kept: Any = Field(description="The person's value, kept.")
    file: Any = Field(description="The file's value, not written.")


class IngestSummary(Schema):
    """``kg ingest``: what an ingest did, counted."""

    files: int
    inserted: int
    replaced: int
    skipped: int
    passages_embedded: int
    relations_added: int
    relations_unchanged: int
    relations_removed: int
    stub_nodes: int
    index_failures: int
    unreadable: int
    kept_edits: int
    kept_deleted: int
    review_branch: str | None


class IngestReport(Schema):
    """What an ingest did (:func:`kg.ops.ingest.ingest_path`), file by file; :meth:`summary`
    counts it."""

    model_config = ConfigDict(extra="forbid", strict=True, validate_assignment=False)

    files: int = 0
    inserted: list[str] = Field(default_factory=list, description="Paths of the nodes inserted.")
    replaced: list[str] = Field(default_factory=list, description="Paths of the nodes written again.")
    skipped: list[str] = Field(default_factory=list, description="Paths of the files unchanged since their "
                                                                 "last ingest (or only recorded).")
    passages_embedded: int = 0
    relations_added: int = 0
    relations_unchanged: int = 0
    relations_removed: int = Field(default=0, description="Relations a changed file no longer asserts, removed.")
    stub_nodes: list[str] = Field(default_factory=list, description="Nodes made for relation targets no file is.")
    index_failures: int = 0
    unreadable: list[UnreadableFile] = Field(default_factory=list)
    kept_edits: list[KeptEdit] = Field(default_factory=list)
    kept_deleted: list[str] = Field(default_factory=list, description="Paths of nodes people deleted whose file "
                                                                      "changed since: they stay deleted.")
    review_branch: str | None = Field(default=None, description="The branch holding the files' versions of the "
                                                                "nodes above (``conflicts=\"review\"``).")

    def summary(self) -> IngestSummary:
        """The counts, as ``kg ingest`` prints them."""
        return IngestSummary(
            files=self.files, inserted=len(self.inserted), replaced=len(self.replaced), skipped=len(self.skipped),
            passages_embedded=self.passages_embedded, relations_added=self.relations_added,
            relations_unchanged=self.relations_unchanged, relations_removed=self.relations_removed,
            stub_nodes=len(self.stub_nodes), index_failures=self.index_failures, unreadable=len(self.unreadable),
            kept_edits=len(self.kept_edits), kept_deleted=len(self.kept_deleted), review_branch=self.review_branch)
