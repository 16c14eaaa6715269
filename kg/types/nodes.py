"""Nodes: what a write sends, what a read answers, batches and references."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field
from pydantic.config import JsonDict

from kg.store.paths import (
    MAX_PATH_CHARS,
    NAME_PATTERN,
    PATH_PATTERN,
    TEXT_PATTERN,
)
from kg.store.references import REF_KEY, WORKSPACE_KEY
from kg.types.common import (
    GLOB_RULE,
    NAME_RULE,
    JSONObject,
    Number,
    RevisionNumber,
    Schema,
    StorableObject,
    Strict,
    Timestamp,
    WriteMeta,
    absent,
    shaped,
)
from kg.types.relations import RelationKey

# -- requests ----------------------------------------------------------------------


#: A property value that is a reference ``{"kg:ref": path, "kg:workspace": name}`` holds a node path
#: and a workspace name (kg.store.references; its target need not exist).
_REFERENCE: JsonDict = {"if": {"type": "object", "required": [REF_KEY]}, "then": {"properties": {
    REF_KEY: {"type": "string", "pattern": PATH_PATTERN, "maxLength": MAX_PATH_CHARS},
    WORKSPACE_KEY: {"type": "string", "pattern": NAME_PATTERN, "maxLength": 128}}}}


def _properties(schema: dict[str, Any]) -> None:
    """Node properties: JSON the store can hold at any depth (:data:`~kg.types.common.StorableJSON`:
    no NUL in a key or a string), with well-formed references in top-level values and in the items
    of top-level lists (the ones kg reads)."""
    schema["propertyNames"] = {"pattern": TEXT_PATTERN}
    schema["additionalProperties"] = {"allOf": [_REFERENCE, {"if": {"type": "array"}, "then": {"items": _REFERENCE}},
                                                schema["additionalProperties"]]}


#: Node properties (a node write's, a batch upsert's, a merge resolution's value).
NodeProperties = Annotated[StorableObject, Field(json_schema_extra=_properties)]


class NodePut(WriteMeta):
    node_type: str = Field(default="kg:Node", json_schema_extra=GLOB_RULE,
                           description="The node's type, e.g. kb:Note (default kg:Node).")
    properties: NodeProperties = Field(default_factory=dict, description="The node's JSON properties.")
    order: float | None = Field(default=None, description="Its place among its siblings.")
    if_revision: RevisionNumber | None = None


class NodePatch(WriteMeta):
    properties: NodeProperties = Field(default_factory=dict)
    node_type: str | None = Field(default=None, json_schema_extra=GLOB_RULE)
    order: float | None = None
    if_revision: RevisionNumber | None = None


class BatchUpsert(Strict):
    """A node a batch creates or replaces."""

    workspace: str = Field(json_schema_extra=NAME_RULE)
    path: str = Field(max_length=MAX_PATH_CHARS, json_schema_extra={"pattern": PATH_PATTERN})
    node_type: str = Field(default="kg:Node", json_schema_extra=GLOB_RULE)
    properties: NodeProperties = Field(default_factory=dict)
    order: float | None = None


class BatchDelete(Strict):
    """A node a batch deletes (with its descendants when ``recursive``)."""

    workspace: str = Field(json_schema_extra=NAME_RULE)
    path: str = Field(max_length=MAX_PATH_CHARS, json_schema_extra={"pattern": PATH_PATTERN})
    recursive: bool = False


#: At most this many items (upserts and deletes together) in a batch.
MAX_BATCH_ITEMS = 10_000
#: A batch has at least one item.
_SOME_ITEM: JsonDict = {"anyOf": [{"required": ["upserts"], "properties": {"upserts": {"minItems": 1}}},
                                  {"required": ["deletes"], "properties": {"deletes": {"minItems": 1}}}]}


class BatchBody(WriteMeta):
    """Deletes, then upserts, as one revision. Rules across the items (422 ``invalid_input``,
    ``details.field`` the list): each (workspace, path) once in the batch, in either list; no upsert
    below a node the batch deletes; at most 10,000 items in all."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra=_SOME_ITEM)
    upserts: list[Annotated[JSONObject, shaped(BatchUpsert)]] = Field(default_factory=list, max_length=MAX_BATCH_ITEMS)
    deletes: list[Annotated[JSONObject, shaped(BatchDelete)]] = Field(default_factory=list, max_length=MAX_BATCH_ITEMS)
    parents: bool = False


# -- nodes ----------------------------------------------------------------------------------


class Node(Schema):
    """A node."""

    id: str = Field(description="The node's id: derived from its workspace and path, the same on "
                                "every branch and after a delete and re-creation.")
    workspace: str
    path: str
    name: str = Field(description="The last segment of the path.")
    parent_path: str | None
    node_type: str
    properties: JSONObject
    order: Number | None
    revision: int = Field(description="The revision that wrote this version.")
    created_at: Timestamp | None
    updated_at: Timestamp | None


class NodeList(Schema):
    """Children in order, or a page of the nodes under a prefix."""

    nodes: list[Node]
    next_cursor: str | None = absent("The cursor of the next page, null on the last.")


class TreeNode(Node):
    """A child in a lazily expanded tree: the node, and whether it has children of its own."""

    has_children: bool


class TreePage(Schema):
    """A page of a node's children as a tree shows them (the MCP ``get_node`` tool, the console)."""

    nodes: list[TreeNode]
    next_cursor: str | None = Field(description="The cursor of the next page, null on the last.")


class NodeChunk(Schema):
    """A passage of a node's text as it was embedded."""

    chunk_index: int
    field: str = Field(description="The property the passage is from.")
    text: str
    char_start: int
    char_end: int
    model: str = Field(description="The embedding model.")
    dim: int = Field(description="The vector's dimension.")


class NodeChunks(Schema):
    """The passages a node's text was split into and embedded (shared by content key: a branch
    that did not change the node shows its parent's)."""

    content_key: str | None = Field(description="The text's content key; null: the node has no text.")
    pending: bool = Field(description="The text waits in (or failed in) the index queue.")
    chunks: list[NodeChunk]


class NodeHistoryEntry(Schema):
    """A revision of a branch's history that wrote a node."""

    revision: int
    branch: str = Field(description="The branch the revision was written on (the branch or an ancestor).")
    actor: str | None
    message: str | None
    created_at: Timestamp
    op: Literal["put", "delete"]


class NodesDeleted(Schema):
    """``DELETE`` of a node: the revision made and how many nodes it tombstoned."""

    revision: int
    deleted: int


class BatchResult(Schema):
    """``POST .../nodes:batch``: one revision for the whole batch."""

    revision: int
    upserted: list[Node]
    deleted: int


class GraphWritten(Schema):
    """Nodes and the relations between them written as one revision (:func:`kg.ops.nodes.write_graph`)."""

    revision: int
    upserted: list[Node] = Field(description="The nodes written, in the order planned.")
    related: int = Field(description="Relations asserted.")
    unrelated: int = Field(description="Edges removed.")
    invalidated: list[RelationKey] = Field(description="Relations whose validity ended now.")


class Reference(Node):
    """A node whose properties reference the target, with the property that does."""

    property_key: str


class ReferenceList(Schema):
    """``GET .../references``."""

    references: list[Reference]
    truncated: bool = Field(description="More references exist than ``limit``.")


