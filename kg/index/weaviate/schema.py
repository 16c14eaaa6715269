"""The collections kg keeps in Weaviate: their names, class definitions and descriptions.

A chunks collection per (repository, embedding model, workspace, branch), named
``KgChunks_<sha256(repo_key)[:12]>_<sha256(model)[:10]>_w<workspace id>_b<branch id>`` with a
JSON description kg reads back (:func:`_description`), and beside it the documents collection
of the same suffix (``KgDocs_...``, :func:`_docs_name`); one ``KgIndexState`` collection holds
each repository's placement marks. See :mod:`kg.index.weaviate` for the layout.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from typing import Any

from kg.index.weaviate.objects import object_id

STATE_COLLECTION = "KgIndexState"

CHUNKS_PREFIX = "KgChunks_"

DOCS_PREFIX = "KgDocs_"

_PLAIN_FIELD = re.compile(r"[a-z][a-z0-9]{0,63}")


def _short_hash(text: str, n: int) -> str:
    """The first ``n`` hex digits of sha256(text)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:n]


def _chunks_prefix(repo_key: str) -> str:
    """The name prefix of a repository's chunks collections."""
    return f"{CHUNKS_PREFIX}{_short_hash(repo_key, 12)}_"


def _docs_prefix(repo_key: str) -> str:
    """The name prefix of a repository's documents collections."""
    return f"{DOCS_PREFIX}{_short_hash(repo_key, 12)}_"


def _docs_name(chunks_name: str) -> str:
    """The documents collection beside a chunks collection: the same suffix."""
    return DOCS_PREFIX + chunks_name.removeprefix(CHUNKS_PREFIX)


def terms_property(field: str) -> str:
    """The property of a documents collection holding one node field's terms.

    Parameters
    ----------
    field : str
        The node property the chunks come from (:attr:`kg.index.base.IndexedChunk.field`);
        ``""`` for chunks of unknown field.

    Returns
    -------
    str
        ``terms_<field>`` for a field matching ``[a-z][a-z0-9]{0,63}`` (``terms_title``,
        ``terms_body``); any other (a capital, a space, ``""``) gives
        ``terms__<sha256(field)[:16]>``. Always a valid Weaviate property name, and
        injective: a plain name never holds ``_``.

    Examples
    --------
    >>> terms_property("title")
    'terms_title'
    >>> terms_property("Summary Text").startswith("terms__")
    True
    """
    if _PLAIN_FIELD.fullmatch(field):
        return f"terms_{field}"
    return f"terms__{_short_hash(field, 16)}"


def _legacy_watermark_id(repo_key: str) -> uuid.UUID:
    """The id of the watermark object an earlier kg's shared layout kept (only deleted now)."""
    return object_id(repo_key, "", "index-state", -1, "")


def _placement_state_ids(repo_key: str) -> tuple[uuid.UUID, uuid.UUID]:
    """The ids of a repository's placement marks (chunk seq, node version id)."""
    return (object_id(repo_key, "", "placed-seq", -1, ""),
            object_id(repo_key, "", "placed-version", -1, ""))


def _description(text: str | None) -> dict[str, Any]:
    """A collection description as kg's JSON, or {}."""
    try:
        meta = json.loads(text or "")
    except ValueError:
        return {}
    if not isinstance(meta, dict) or not {"model", "dim", "repo"} <= meta.keys():
        return {}
    return meta


def _field(name: str, *, filterable: bool = True) -> dict[str, Any]:
    """A field-tokenized text property (filterable by default), never BM25-searched."""
    return {"name": name, "dataType": ["text"], "tokenization": "field", "indexFilterable": filterable,
            "indexSearchable": False}


#: The properties the chunk and document objects share: the visibility filter and the search
#: filters' columns, and the row (seq, chunk index) a hit points at.
_SHARED_PROPERTIES: tuple[dict[str, Any], ...] = (
    _field("contentKey"),
    {"name": "chunkIndex", "dataType": ["int"]},
    {"name": "seq", "dataType": ["int"]},
    _field("versionKey"),
    _field("nodeId"),
    _field("path"),
    _field("nodeType"),
    {**_field("props"), "dataType": ["text[]"]},
)


def _class_schema(name: str, description: str, properties: list[dict[str, Any]]) -> dict[str, Any]:
    """A kg collection's class: no vectorizer, HNSW with cosine distance, BM25 k1 1.2, b 0.75
    without stop words (kg's analyzer made the terms)."""
    return {
        "class": name,
        "description": description,
        "vectorizer": "none",
        "vectorIndexType": "hnsw",
        "vectorIndexConfig": {"distance": "cosine"},
        "invertedIndexConfig": {"stopwords": {"preset": "none"}, "bm25": {"k1": 1.2, "b": 0.75}},
        "properties": properties,
    }


def _chunks_schema(name: str, description: str) -> dict[str, Any]:
    """The class definition of the chunks collection of a (workspace, branch) and model."""
    return _class_schema(name, description, [
        {"name": "content", "dataType": ["text"], "indexFilterable": False, "indexSearchable": False},
        {"name": "terms", "dataType": ["text"], "tokenization": "whitespace",
         "indexFilterable": False, "indexSearchable": True},
        *(dict(p) for p in _SHARED_PROPERTIES),
    ])


def _docs_schema(name: str, description: str) -> dict[str, Any]:
    """The class definition of the documents collection beside a chunks collection: one object
    per node version, its ``terms_<field>`` properties added as fields appear
    (:func:`_terms_property_definition`)."""
    return _class_schema(name, description, [
        *(dict(p) for p in _SHARED_PROPERTIES),
        {**_field("fields", filterable=False), "dataType": ["text[]"]},
    ])


def _terms_property_definition(field: str) -> dict[str, Any]:
    """The ``terms_<field>`` property of a documents collection (whitespace-tokenized, BM25
    searchable, like a chunk's ``terms``)."""
    return {"name": terms_property(field), "dataType": ["text"], "tokenization": "whitespace",
            "indexFilterable": False, "indexSearchable": True,
            "description": json.dumps({"kg": "terms", "field": field}, ensure_ascii=False)}


_STATE_SCHEMA: dict[str, Any] = {
    "class": STATE_COLLECTION,
    "description": json.dumps({"kg": "index-state", "format": 1}),
    "vectorizer": "none",
    "properties": [
        {"name": "repoKey", "dataType": ["text"], "tokenization": "field"},
        {"name": "watermark", "dataType": ["int"]},
    ],
}
