"""Health, repositories and workspaces (their chunking, indexed properties and embedding)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field
from pydantic.config import JsonDict

from kg.indexing.config import BODY_FIELDS, MAX_INDEXED_PROPERTIES, SHORT_FIELDS
from kg.providers.registry import LOCAL_MODELS
from kg.store.paths import TRIMMED_PATTERN
from kg.types.common import (
    NAME_RULE,
    JSONObject,
    Number,
    Schema,
    Strict,
    Timestamp,
    absent,
    shaped,
)

# -- requests ----------------------------------------------------------------------


class RepoCreate(Strict):
    name: str = Field(json_schema_extra=NAME_RULE)


#: An Ollama model (:func:`kg.providers.ollama.canonical_ollama_model`): ``ollama:`` and a name,
#: with a namespace or registry host before ``/`` and a tag after ``:`` (``:latest`` when none).
#: The prefix is required here (a bare name is read as an Ollama name too: the document says
#: the one spelling). Ollama must have the model: a re-embed probes it (502 ``provider_error``).
OLLAMA_MODEL_PATTERN = r"^ollama:(?:[A-Za-z0-9._\-]+/)*[A-Za-z0-9._\-]+(?::[A-Za-z0-9._\-]+)?$"
#: The embedding models by provider (``<provider>:<model>``): ``local:`` the models kg ships
#: (:data:`kg.providers.registry.LOCAL_MODELS`), ``ollama:`` any model of the Ollama server. The
#: ``fake:`` provider (tests only) is added by a server that allows it (``KG_ALLOW_FAKE_EMBEDDER``:
#: ``api.docs``).
EMBEDDING_MODEL_RULE: JsonDict = {"anyOf": [
    {"title": "local", "type": "string", "enum": list(LOCAL_MODELS)},
    {"title": "ollama", "type": "string", "pattern": OLLAMA_MODEL_PATTERN, "maxLength": 240},
]}


def _model_rule(schema: JsonDict) -> None:
    """The model by provider (:data:`EMBEDDING_MODEL_RULE`); left out, not null, for the default."""
    schema.pop("default", None)
    schema.update(EMBEDDING_MODEL_RULE)


class OverlapCount(Strict):
    """An overlap given as a count of units."""

    type: Literal["Tokens"]
    value: int = Field(ge=0, description="Units; below the chunk size.")


class OverlapFraction(Strict):
    """An overlap given as a fraction of the chunk size, ``floor(chunk_size * value)`` units."""

    type: Literal["Percentage"]
    value: float = Field(ge=0.0, le=0.5)


#: The words splitter counts words.
_WORDS_IN_WORDS: JsonDict = {"if": {"required": ["splitter"], "properties": {"splitter": {"const": "words"}}},
                             "then": {"properties": {"unit": {"const": "words"}}}}


class ChunkingRequest(Strict):
    """How a workspace's body fields are chunked (:class:`kg.text.chunking.ChunkingConfig`).

    The overlap, resolved to units, is below ``chunk_size``: a rule across the two fields (422
    ``invalid_input``, the message naming both)."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra=_WORDS_IN_WORDS)
    splitter: Literal["recursive", "fixed_size", "markdown", "code", "words"] = "recursive"
    chunk_size: int = Field(default=512, ge=1, le=1_000_000)
    overlap: Annotated[int, Field(ge=0)] | Annotated[OverlapCount | OverlapFraction, Field(discriminator="type")] = (
        Field(default=64, description="A count below chunk_size, or {type: Tokens, value} / "
                                      "{type: Percentage, value: 0..0.5}."))
    unit: Literal["tokens", "chars", "words"] = Field(default="tokens", description="The words splitter: words "
                                                                                   "(its default).")


#: A property name (kg.indexing.config.IndexedProperties).
PropertyName = Annotated[str, Field(min_length=1, max_length=128, json_schema_extra={"pattern": TRIMMED_PATTERN})]
#: At least one property is indexed (both lists empty is refused).
_SOME_PROPERTY: JsonDict = {"not": {"required": ["short", "body"], "properties": {
    "short": {"maxItems": 0}, "body": {"maxItems": 0}}}}


class IndexedPropertiesRequest(Strict):
    """Which properties a workspace indexes (:class:`kg.indexing.config.IndexedProperties`).

    A property is in one list only, and at most 32 in all: rules across the two lists (422
    ``invalid_input``)."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra=_SOME_PROPERTY)
    short: list[PropertyName] = Field(default_factory=lambda: list(SHORT_FIELDS), max_length=MAX_INDEXED_PROPERTIES,
                                      json_schema_extra={"uniqueItems": True})
    body: list[PropertyName] = Field(default_factory=lambda: list(BODY_FIELDS), max_length=MAX_INDEXED_PROPERTIES,
                                     json_schema_extra={"uniqueItems": True})


class EmbeddingRequest(Strict):
    """A workspace's embedding settings (:class:`kg.indexing.config.EmbeddingConfig`); a key left
    out is the server's default (``KG_EMBEDDING_MODEL``) on create, the current value on a
    change."""

    model: str = Field(default="", description="``<provider>:<model>``.", json_schema_extra=_model_rule)
    chunking: ChunkingRequest = absent("How body fields are chunked.")
    indexed_properties: IndexedPropertiesRequest = absent("Which properties are indexed.")


class WorkspaceCreate(Strict):
    name: str = Field(json_schema_extra=NAME_RULE)
    embedding: Annotated[JSONObject, shaped(EmbeddingRequest)] | None = None


class WorkspacePatch(Strict):
    embedding: Annotated[JSONObject, shaped(EmbeddingRequest)]
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




class IndexRebuilt(Schema):
    """``kg index rebuild``: a repository's search index rebuilt from the chunks and vectors in SQL,
    once its queue was run."""

    chunks: int = Field(description="Chunks placed in the index.")
    jobs_done: int = Field(description="Queued texts embedded before the rebuild.")
    jobs_failed: int = Field(description="Queued texts that failed before the rebuild.")
