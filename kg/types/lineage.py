"""Lineage: what was derived from a node and what it was derived from."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from kg.types.common import (
    Schema,
)

# -- lineage --------------------------------------------------------------------------------


class Lineage(Schema):
    """``GET .../lineage/{path}``: what was derived from a node and what it was derived from
    (docs/concepts/lineage.md)."""

    workspace: str
    path: str
    node_id: str
    node_type: str
    revision: int
    source_hash: str = Field(description="sha256 of the node's text fields, as derived records record it.")
    derived: list[dict[str, Any]] = Field(
        description="Records derived from the node: ``chunks``, ``mention`` (entities with a ``mentioned_in`` "
                    "edge here), ``extraction`` (the extraction record), ``answer`` (stored answers citing it), "
                    "each with what it read (``source_hash`` of the text for mentions and extraction records, "
                    "``source_revision`` for answers) and ``current``.")
    derived_from: list[dict[str, Any]] = Field(
        description="What the node was derived from: ``mentioned_in``, ``cites``, ``extraction_of`` rows.")
