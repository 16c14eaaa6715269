"""Relations, neighbors and hop-bounded walks."""

from __future__ import annotations

from typing import Literal

from pydantic import AwareDatetime, ConfigDict, Field

from kg.graph.traverse import MAX_FAN_OUT, MAX_HOPS, MAX_NODES
from kg.store.numbers import Integer
from kg.types.common import (
    ADDRESS_RULE,
    TEXT_RULE,
    TYPE_RULE,
    Address,
    JSONObject,
    Number,
    RelationType,
    Schema,
    StorableObject,
    Strict,
    WriteMeta,
)

# -- requests ----------------------------------------------------------------------


class TraverseBody(Strict):
    """``POST /traverse``: seeds, hop bound, direction, relation types and the two budgets."""

    seeds: list[Address] = Field(min_length=1, max_length=MAX_NODES, description="The seed nodes' addresses.")
    hops: Integer = Field(default=2, ge=0, le=MAX_HOPS, description="Hops from the seeds at most.")
    direction: Literal["OUT", "IN", "BOTH"] = Field(default="BOTH", description="The edges followed.")
    types: list[RelationType] | None = Field(default=None, description="Relation types followed; default: all.")
    max_nodes: Integer = Field(default=200, ge=1, le=MAX_NODES, description="Nodes reached at most (seeds count).")
    fan_out: Integer = Field(default=50, ge=1, le=MAX_FAN_OUT, description="Edges followed per node at most.")
    as_of: AwareDatetime | None = Field(default=None, strict=False, description=(
        "World time (ISO 8601 with a zone): follow the relations valid then; default now."))
    include_invalid: bool = Field(default=False, description="Follow every relation, whatever its validity.")


class RelationCreate(WriteMeta):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, strict=True)
    from_: str = Field(alias="from", json_schema_extra=ADDRESS_RULE)
    to: str = Field(json_schema_extra=ADDRESS_RULE)
    type: str = Field(json_schema_extra=TYPE_RULE, description="The relation type, e.g. cites.")
    weight: float | None = Field(default=None, description="The edge's weight.")
    properties: StorableObject = Field(default_factory=dict, description="The relation's JSON properties.")
    valid_from: AwareDatetime | None = Field(default=None, strict=False, description=(
        "World time the fact holds from (ISO 8601 with a zone; a naive time is refused)."))
    valid_to: AwareDatetime | None = Field(default=None, strict=False, description=(
        "World time the fact holds until (ISO 8601 with a zone), not earlier than valid_from (a rule across "
        "the two fields: invalid_input, details.field 'valid_to')."))


class RelationInvalidate(WriteMeta):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, strict=True)
    from_: str = Field(alias="from", json_schema_extra=ADDRESS_RULE)
    to: str = Field(json_schema_extra=ADDRESS_RULE)
    type: str = Field(json_schema_extra=TYPE_RULE, description="The relation type, e.g. works_at.")
    valid_to: AwareDatetime | None = Field(default=None, strict=False, description=(
        "When the fact stopped holding (ISO 8601 with a zone); default now."))
    invalidated_by: str | None = Field(default=None, min_length=1, max_length=2000, json_schema_extra=TEXT_RULE,
                                       description="What superseded it.")


class RelationTypesPut(Strict):
    #: Relation types that are single-valued per source in the workspace (replaced whole).
    single_valued: list[RelationType] = Field(max_length=1000)
# -- relations and the graph ----------------------------------------------------------------


class Relation(Schema):
    """A relation as asserted, and the revision that wrote it."""

    from_: str = Field(alias="from")
    to: str
    type: str
    weight: Number | None
    properties: JSONObject
    valid_from: str | None = None
    valid_to: str | None = None
    invalidated_by: str | None = None
    revision: int


class RelationKey(Schema):
    """A relation by its ends (``workspace:/path``) and type."""

    from_: str = Field(alias="from")
    type: str
    to: str


class RelationTypes(Schema):
    """A workspace's single-valued relation types."""

    workspace: str
    single_valued: list[str]


class RelationsDeleted(Schema):
    """``DELETE .../relations``: null revision when there was no such edge."""

    revision: int | None
    deleted: int


class Neighbor(Schema):
    """An edge seen from the node: the node at the other end."""

    workspace: str
    path: str
    node_id: str
    relation_type: str
    weight: Number | None
    direction: Literal["OUT", "IN"]
    properties: JSONObject
    valid_from: str | None = Field(description="World time the relation starts holding (ISO 8601, UTC); "
                                               "null: always had.")
    valid_to: str | None = Field(description="World time it stops holding; null: still holds.")
    invalidated_by: str | None = Field(description="What superseded it (``from|type|to`` of the "
                                                   "relation that replaced it, or free text).")


class NeighborList(Schema):
    """``GET .../neighbors`` in the stable order."""

    neighbors: list[Neighbor]
    truncated: bool = Field(description="More edges matched than ``limit``.")


class TraversedNode(Schema):
    """A node a walk reached, once, at its shortest hop; ``via``, ``weight`` and ``from``
    describe the edge that reached it (null for a seed)."""

    workspace: str
    path: str
    node_id: str
    hop: int
    via: str | None
    weight: Number | None
    from_: str | None = Field(alias="from")


class Traversal(Schema):
    """``POST .../traverse``."""

    nodes: list[TraversedNode]
    truncated: bool = Field(description="A budget left nodes unvisited.")


