"""The collections kg keeps in Weaviate: their names, class definitions and descriptions.

A chunks collection per (repository, embedding model, workspace, branch), named
``KgChunks_<sha256(repo_key)[:12]>_<sha256(model)[:10]>_w<workspace id>_b<branch id>`` with a
JSON description kg reads back (:func:`_description`); one ``KgIndexState`` collection holds
each repository's placement marks. See :mod:`kg.index.weaviate` for the layout.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import Any

from kg.index.weaviate.objects import object_id

STATE_COLLECTION = "KgIndexState"

CHUNKS_PREFIX = "KgChunks_"


def _short_hash(text: str, n: int) -> str:
    """The first ``n`` hex digits of sha256(text)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:n]


def _chunks_prefix(repo_key: str) -> str:
    """The name prefix of a repository's chunks collections."""
    return f"{CHUNKS_PREFIX}{_short_hash(repo_key, 12)}_"


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


def _chunks_schema(name: str, description: str) -> dict[str, Any]:
    """The class definition of the chunks collection of a (workspace, branch) and model."""
    return {
        "class": name,
        "description": description,
        "vectorizer": "none",
        "vectorIndexType": "hnsw",
        "vectorIndexConfig": {"distance": "cosine"},
        "invertedIndexConfig": {"stopwords": {"preset": "none"}, "bm25": {"k1": 1.2, "b": 0.75}},
        "properties": [
            {"name": "content", "dataType": ["text"], "indexFilterable": False,
             "indexSearchable": False},
            {"name": "terms", "dataType": ["text"], "tokenization": "whitespace",
             "indexFilterable": False, "indexSearchable": True},
            {"name": "contentKey", "dataType": ["text"], "tokenization": "field",
             "indexFilterable": True, "indexSearchable": False},
            {"name": "chunkIndex", "dataType": ["int"]},
            {"name": "seq", "dataType": ["int"]},
            {"name": "versionKey", "dataType": ["text"], "tokenization": "field",
             "indexFilterable": True, "indexSearchable": False},
            {"name": "nodeId", "dataType": ["text"], "tokenization": "field",
             "indexFilterable": True, "indexSearchable": False},
            {"name": "path", "dataType": ["text"], "tokenization": "field",
             "indexFilterable": True, "indexSearchable": False},
            {"name": "nodeType", "dataType": ["text"], "tokenization": "field",
             "indexFilterable": True, "indexSearchable": False},
            {"name": "props", "dataType": ["text[]"], "tokenization": "field",
             "indexFilterable": True, "indexSearchable": False},
        ],
    }


_STATE_SCHEMA: dict[str, Any] = {
    "class": STATE_COLLECTION,
    "description": json.dumps({"kg": "index-state", "format": 1}),
    "vectorizer": "none",
    "properties": [
        {"name": "repoKey", "dataType": ["text"], "tokenization": "field"},
        {"name": "watermark", "dataType": ["int"]},
    ],
}
