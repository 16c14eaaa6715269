"""The RAG node: its request and its answer (results, ingestion, collection)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from kg.types.common import (
    Number,
    Schema,
    Strict,
    absent,
)

# -- the RAG node ---------------------------------------------------------------------------


# -- requests ----------------------------------------------------------------------


class RagBody(Strict):
    config: dict[str, Any]
    input: Any = Field(description="The node's markdown input: query, then ### File name blocks.")



class RagResult(Schema):
    """A retrieved chunk (embedded index: with its node ``path``; Weaviate: with its ``branch``
    and ``class``)."""

    file: Any = Field(description="The file name: a string as the RAG node writes it (embedded index: the "
                                  "node's ``source_file`` property as stored, else its path without the "
                                  "leading ``/``).")
    chunk_index: int
    content: str
    distance: Number | None
    path: str = absent("Embedded index: the file's node path.")
    branch: str = absent("Weaviate: the kg branch whose class held the chunk.")
    class_: str = absent("Weaviate: the chunks class.", alias="class")


class RagKeptEdit(Schema):
    """A property of a file's node both a person and the file changed: the person's value is kept."""

    file: str = Field(description="The input's file.")
    key: str = Field(description="The property (``kg:node_type`` for the node's type).")
    kept: Any = Field(description="The value kept: the person's (null: they removed it).")
    file_value: Any = Field(description="The file's value (null: the file has none).")


class RagIngestion(Schema):
    """The input's files by what ingesting them did."""

    inserted: list[str]
    skipped: list[str]
    replaced: list[str]
    reembedded: list[str] = absent("Embedded index: files re-embedded because the model changed.")
    kept_edits: list[RagKeptEdit] = absent(
        "Embedded index: properties of a file's node that a person edited and the file changed too "
        "since its last ingest: the person's value is kept (present only when there are some).")


class RagCollection(Schema):
    """The collection the node used."""

    name: str
    class_: str = Field(alias="class")
    meta_class: str = absent("Weaviate: the meta class.")
    embedding_model: str
    model_changed: bool
    weaviate_url: str = absent("Weaviate: the instance.")


class RagAnswer(Schema):
    """``POST /api/rag``: the context string the node injects (null: nothing relevant)."""

    context: str | None
    results: list[RagResult]
    ingestion: RagIngestion
    collection: RagCollection


