"""The RAG node: its request and its answer (results, ingestion, collection)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import ConfigDict, Field, PlainValidator

from kg.store.paths import TEXT_PATTERN
from kg.types.common import (
    JSONObject,
    Number,
    Schema,
    Strict,
    absent,
    shaped,
)
from kg.types.repos import EMBEDDING_MODEL_RULE

# -- the RAG node ---------------------------------------------------------------------------


# -- requests ----------------------------------------------------------------------


#: A collection name whose Weaviate class is valid (:func:`kg.ragnode.spec.class_name`): ASCII,
#: its first letter or digit a letter.
COLLECTION_PATTERN = r"^[A-Za-z][A-Za-z0-9_\-]*$"


class RagConfigRequest(Strict):
    """The RAG node's configuration (:data:`kg.ragnode.spec.RAG_CONFIG_SCHEMA`).

    ``chunkOverlap`` is below ``chunkSize``: a rule across the two fields (422 ``invalid_input``,
    ``details.errors`` naming ``chunkOverlap``). ``weaviateUrl`` is ``embedded`` or a URL the
    server lists (``KG_RAG_WEAVIATE_URLS``): the document of each server lists them."""

    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)
    embedding_model: str = Field(alias="embeddingModel", json_schema_extra=EMBEDDING_MODEL_RULE,
                                 description="``<provider>:<model>``; a bare name is an Ollama model.")
    collection_name: str = Field(alias="collectionName", max_length=64,
                                 json_schema_extra={"pattern": COLLECTION_PATTERN})
    chunk_size: int = Field(alias="chunkSize", ge=1, le=100_000, description="Words per chunk.")
    chunk_overlap: int = Field(alias="chunkOverlap", ge=0, description="Words shared by consecutive chunks; below "
                                                                        "chunkSize.")
    top_k: int = Field(alias="topK", ge=1, le=1000)
    weaviate_url: str = Field(alias="weaviateUrl", json_schema_extra={"enum": ["embedded"]},
                              description="``embedded`` (kg's own index) or a Weaviate URL the server lists.")
    weaviate_api_key: str = absent("The Weaviate instance's API key.", alias="weaviateApiKey")


def _any(value: Any) -> Any:
    """The value as it came (the RAG node says what it refuses)."""
    return value


class RagBody(Strict):
    config: Annotated[JSONObject, shaped(RagConfigRequest)]
    input: Annotated[Any, PlainValidator(_any, json_schema_input_type=Annotated[str, Field(pattern=TEXT_PATTERN)])] = (
        Field(description="The node's markdown input: the query, then ``### File name \"<name>\"`` blocks, each "
                          "naming a file once (a name that is not blank, nor ``.`` or ``..``): a repeated or "
                          "blank name is a 422 ``invalid_input``."))



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


