"""A workspace's embedding configuration: its model and how its text is chunked."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from kg.errors import InvalidInput
from kg.text.chunking import ChunkingConfig

#: The default indexed properties (a workspace's ``embedding.indexed_properties``). Body fields
#: are chunked; short fields are one passage. ``question`` and ``answer`` are those of a stored
#: answer (the "store the answer" pattern: ``kb:Answer`` with ``question``, ``answer``, ``sources``).
BODY_FIELDS: tuple[str, ...] = ("content", "body", "text", "answer")
SHORT_FIELDS: tuple[str, ...] = ("title", "question")
TEXT_FIELDS: tuple[str, ...] = SHORT_FIELDS + BODY_FIELDS
MAX_INDEXED_PROPERTIES = 32


class IndexedProperties(BaseModel):
    """Which node properties a workspace indexes (their string values are embedded and BM25
    indexed; other properties are stored only).

    Attributes
    ----------
    short : list of str
        Properties indexed as one passage each, never chunked (a title, a question).
    body : list of str
        Properties chunked with the workspace's chunking settings (a document body, an answer).
    """

    model_config = ConfigDict(extra="forbid")

    short: list[str] = Field(default_factory=lambda: list(SHORT_FIELDS))
    body: list[str] = Field(default_factory=lambda: list(BODY_FIELDS))

    @model_validator(mode="after")
    def _rules(self) -> IndexedProperties:
        names = self.short + self.body
        if not names:
            raise ValueError("at least one property must be indexed")
        if len(names) > MAX_INDEXED_PROPERTIES:
            raise ValueError(f"at most {MAX_INDEXED_PROPERTIES} properties may be indexed")
        if any(not n or len(n) > 128 or n != n.strip() for n in names):
            raise ValueError("a property name is 1 to 128 characters without surrounding spaces")
        if len(set(names)) != len(names):
            raise ValueError("a property is named twice (short and body are disjoint)")
        return self

    @property
    def fields(self) -> tuple[str, ...]:
        """Every indexed property: short ones first, then body ones (the chunk order)."""
        return tuple(self.short) + tuple(self.body)

    def is_default(self) -> bool:
        """Whether these are kg's defaults (their content keys then omit them)."""
        return tuple(self.short) == SHORT_FIELDS and tuple(self.body) == BODY_FIELDS


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
    indexed_properties : IndexedProperties
        The properties indexed (default: short ``title``, ``question``; body ``content``,
        ``body``, ``text``, ``answer``). Changing them re-plans every text of the workspace
        (a re-embed, ``reembed: true``).
    """

    model_config = ConfigDict(extra="forbid")

    model: str
    chunking: ChunkingConfig = Field(default_factory=ChunkingConfig)
    indexed_properties: IndexedProperties = Field(default_factory=IndexedProperties)


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
            details={"field": f"embedding.{where}" if where else "embedding",
                     "errors": [{"loc": list(e.get("loc", ())), "msg": e["msg"]} for e in exc.errors()]},
        ) from exc


def workspace_embedding(config: dict[str, Any] | None, *, default_model: str) -> EmbeddingConfig:
    """The stored configuration of a workspace (as written by ``create_workspace``)."""
    raw = (config or {}).get("embedding")
    return parse_embedding_config(raw, default_model=default_model)
