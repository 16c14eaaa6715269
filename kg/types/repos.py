"""Health, repositories and workspaces (their chunking, indexed properties and embedding)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from kg.types.common import (
    NAME_RULE,
    Number,
    Schema,
    Strict,
    Timestamp,
)

# -- requests ----------------------------------------------------------------------


class RepoCreate(Strict):
    name: str = Field(json_schema_extra=NAME_RULE)


class WorkspaceCreate(Strict):
    name: str = Field(json_schema_extra=NAME_RULE)
    embedding: dict[str, Any] | None = None


class WorkspacePatch(Strict):
    embedding: dict[str, Any]
    reembed: bool = False


# -- health, repositories, workspaces -------------------------------------------------------


class Health(Schema):
    """``GET /health``: the service answers."""

    status: Literal["ok"]
    version: str = Field(description="kg's version.")


class Repo(Schema):
    """A repository."""

    name: str
    created_at: Timestamp
    head_revision: int = Field(description="The newest revision of the repository (0: none yet).")


class RepoList(Schema):
    """A page of the repositories, by name."""

    repos: list[Repo]
    next_cursor: str | None = Field(default=None, description="The cursor of the next page, null on the last.")


class ChunkOverlap(Schema):
    """An overlap given as ``{"type", "value"}``: a count, or a fraction of the chunk size."""

    type: Literal["Tokens", "Percentage"]
    value: Number


class ChunkingSettings(Schema):
    """How a workspace's body fields are chunked."""

    splitter: str = Field(description="recursive, fixed_size, markdown, code or words.")
    chunk_size: int
    overlap: int | ChunkOverlap = Field(description="Units shared by consecutive chunks.")
    unit: str = Field(description="tokens, chars or words.")


class IndexedPropertiesSettings(Schema):
    """Which properties a workspace indexes."""

    short: list[str] = Field(description="Indexed as one passage each (never chunked).")
    body: list[str] = Field(description="Chunked with the workspace's chunking.")


class EmbeddingSettings(Schema):
    """A workspace's embedding model, chunking and indexed properties."""

    model: str = Field(description="``<provider>:<model>``.")
    chunking: ChunkingSettings
    indexed_properties: IndexedPropertiesSettings


class Reembedding(Schema):
    """A re-embed under way: the settings it builds, and the failures holding its switch back."""

    embedding: EmbeddingSettings
    failed_texts: int


class Workspace(Schema):
    """A workspace and its embedding settings."""

    name: str
    created_at: Timestamp
    embedding: EmbeddingSettings
    reembedding: Reembedding | None = Field(description="null when no re-embed is under way.")


class WorkspaceList(Schema):
    """The workspaces of a repository."""

    workspaces: list[Workspace]


class EmbeddingChange(Schema):
    """``PATCH .../workspaces/{ws}``: the requested settings and what re-embedding them queued."""

    workspace: str
    embedding: EmbeddingSettings
    reembedded: bool = Field(description="false when the settings were current (a re-embed under way is "
                                         "cancelled).")
    node_versions: int = Field(description="Node versions to re-point at their text under the new settings.")
    queued: int = Field(description="Texts queued for embedding.")
    switched: bool = Field(description="Whether the new settings are current already.")


