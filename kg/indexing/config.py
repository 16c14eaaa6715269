"""A workspace's embedding configuration: its model and how its text is chunked."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kg.errors import InvalidInput
from kg.text.chunking import ChunkingConfig

#: Properties whose text is indexed. Body fields are chunked; short fields are one passage.
BODY_FIELDS: tuple[str, ...] = ("content", "body", "text")
SHORT_FIELDS: tuple[str, ...] = ("title",)
TEXT_FIELDS: tuple[str, ...] = SHORT_FIELDS + BODY_FIELDS


NEXT = "embedding_next"
"""The workspace config key of the settings a re-embed is building."""

HELD = "embedding_next_failed"
"""The workspace config key of how many texts failed under a re-embed's settings, when that
many hold its switch back."""


class EmbeddingConfig(BaseModel):
    """How a workspace's nodes are embedded.

    Attributes
    ----------
    model : str
        ``<provider>:<model>``; the default comes from ``KG_EMBEDDING_MODEL``.
    chunking : ChunkingConfig
        Splitter settings for body fields (default: recursive, 512 tokens, 64 overlap).
    """

    model_config = ConfigDict(extra="forbid")

    model: str
    chunking: ChunkingConfig = Field(default_factory=ChunkingConfig)


def parse_embedding_config(raw: Any, *, default_model: str) -> EmbeddingConfig:
    """Validate a workspace's ``embedding`` object (None gives the defaults).

    Raises
    ------
    kg.errors.InvalidInput
        Unknown keys, wrong types, ``chunk_size <= 0``, negative overlap, overlap >= size.
    """
    if raw is None:
        return EmbeddingConfig(model=default_model)
    if not isinstance(raw, dict):
        raise InvalidInput("embedding must be a JSON object")
    data = dict(raw)
    data.setdefault("model", default_model)
    try:
        return EmbeddingConfig.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        raise InvalidInput(
            f"invalid embedding configuration: {where + ': ' if where else ''}{first['msg']}",
            details={"errors": [{"loc": list(e.get("loc", ())), "msg": e["msg"]} for e in exc.errors()]},
        ) from exc


def workspace_embedding(config: dict[str, Any] | None, *, default_model: str) -> EmbeddingConfig:
    """The stored configuration of a workspace (as written by ``create_workspace``)."""
    raw = (config or {}).get("embedding")
    return parse_embedding_config(raw, default_model=default_model)
