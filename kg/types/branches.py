"""Branches, their history (revisions and what each changed), diffs and merges."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field
from pydantic.config import JsonDict

from kg.store.paths import MAX_PATH_CHARS, PATH_PATTERN
from kg.types.common import (
    ADDRESS_RULE,
    BRANCH_RULE,
    NAME_RULE,
    TYPE_RULE,
    JSONObject,
    Number,
    RevisionNumber,
    Schema,
    Strict,
    Timestamp,
    WriteMeta,
    absent,
    shaped,
)
from kg.types.nodes import NodeProperties

# -- requests ----------------------------------------------------------------------


class BranchCreate(Strict):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, strict=True)
    name: str = Field(json_schema_extra=BRANCH_RULE, description="The new branch, e.g. agent/session-1.")
    from_: str = Field(default="main", alias="from", json_schema_extra=BRANCH_RULE,
                       description="Its parent (default main).")
    at_revision: RevisionNumber | None = None


#: A take 'value' resolution carries the node's properties.
_VALUE_NEEDS_PROPERTIES: JsonDict = {"if": {"properties": {"take": {"const": "value"}}, "required": ["take"]},
                                     "then": {"required": ["value"], "properties": {"value": {"type": "object"}}}}


class NodeResolution(Strict):
    """How a node conflict of the merge is resolved: the target's value (``ours``), the source's
    (``theirs``), or ``value``, the node's properties given here."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra=_VALUE_NEEDS_PROPERTIES)
    workspace: str = Field(json_schema_extra=NAME_RULE)
    path: str = Field(max_length=MAX_PATH_CHARS, json_schema_extra={"pattern": PATH_PATTERN})
    take: Literal["ours", "theirs", "value"]
    value: NodeProperties | None = Field(default=None, description="With take 'value': the node's properties.")


class RelationResolution(Strict):
    """How a relation conflict of the merge is resolved: the target's (``ours``) or the source's
    (``theirs``)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, strict=True)
    from_: str = Field(alias="from", json_schema_extra=ADDRESS_RULE)
    to: str = Field(json_schema_extra=ADDRESS_RULE)
    type: str = Field(json_schema_extra=TYPE_RULE)
    take: Literal["ours", "theirs"]


#: A merge's plan token (:func:`kg.ops.merge.plan_token`, with its digest).
PLAN_PATTERN = r"^[0-9]+\.[0-9]+\.[0-9]+-[0-9]+\.[0-9]+\.[0-9]+(\.[0-9a-f]{12})?$"


class MergeBody(WriteMeta):
    into: str | None = Field(default=None, json_schema_extra=BRANCH_RULE, description=(
        "The branch's parent or one of its children (default: its parent); not the branch itself."))
    dry_run: bool = Field(default=False, description="Only report what would change.")
    resolutions: list[Annotated[JSONObject, shaped(NodeResolution | RelationResolution)]] = Field(
        default_factory=list, description="One per conflict of the merge (as its dry run lists them): a resolution "
                                          "naming no conflict is refused.")
    #: The ``plan`` a dry run answered: the merge is refused (409) if either branch changed since.
    if_plan: str | None = Field(default=None, max_length=200, json_schema_extra={"pattern": PLAN_PATTERN},
                                description="The `plan` of a dry run of this merge (these two branches): 409 "
                                            "`conflict` when either changed since.")


# -- branches and history -------------------------------------------------------------------


class Branch(Schema):
    """A branch: its parent, the parent's revision it forked at, and its newest revision."""

    name: str
    parent: str | None = Field(description="null for main.")
    base_revision: int | None
    head_revision: int
    created_at: Timestamp
    ahead: int = absent("Revisions on the branch since its merge base with its parent "
                        "(listing and reading a branch).")
    behind: int = absent("Revisions on the parent since that merge base (listing and reading a branch).")


class LastRevision(Schema):
    """The newest revision that changed what a branch reads."""

    revision: int
    created_at: Timestamp
    message: str | None
    actor: str | None


class BranchOverview(Branch):
    """A branch as the console's branches page lists it."""

    last_revision: LastRevision | None = Field(description="null: no revision changed what it reads.")
    protected: bool = Field(description="Matches ``KG_PROTECTED_BRANCHES``.")
    children: list[str] = Field(description="The branches forked from it that the caller sees, by name.")


class BranchList(Schema):
    """Every branch of a repository."""

    branches: list[Branch]


class BranchReset(Schema):
    """``POST .../reset``: the branch forked again from its parent's head."""

    name: str
    parent: str | None
    base_revision: int | None
    head_revision: int


class NodeChangeEntry(Schema):
    """A node version a revision wrote."""

    kind: Literal["node"]
    op: Literal["put", "delete"]
    workspace: str | None
    path: str


class RelationChangeEntry(Schema):
    """A relation version a revision wrote (addresses ``workspace:/path``)."""

    kind: Literal["relation"]
    op: Literal["put", "delete"]
    from_: str | None = Field(alias="from")
    type: str
    to: str | None


class Revision(Schema):
    """One revision of the log, with what it changed."""

    revision: int
    branch: str | None
    created_at: Timestamp
    message: str | None
    actor: str | None
    changes: list[Annotated[NodeChangeEntry | RelationChangeEntry, Field(discriminator="kind")]] = Field(
        description="The first `changes` (query parameter, default 100) writes of the revision: nodes, then "
                    "relations, in write order.")
    change_count: int = Field(description="How many writes the revision made (those the caller may read).")


class RevisionLog(Schema):
    """``GET .../log``: revisions newest first."""

    revisions: list[Revision]


class MergePoint(Schema):
    """The merge base: a fork point or the last merge between the two branches (a diff of a
    branch against itself: its head)."""

    kind: Literal["fork", "merge", "head"]
    branch: str
    revision: int


class PropertyChange(Schema):
    """A property's value before and after (null: absent)."""

    old: Any
    new: Any


class DiffNode(Schema):
    """A node the branch added or deleted (its state after, or before)."""

    workspace: str | None
    path: str
    node_id: str | None
    node_type: str | None
    properties: JSONObject | None


class DiffModifiedNode(DiffNode):
    """A node the branch changed: per property, the old and new value."""

    changes: dict[str, PropertyChange]


class DiffNodes(Schema):
    """Nodes by what happened to them."""

    added: list[DiffNode]
    modified: list[DiffModifiedNode]
    deleted: list[DiffNode]


class RelationValue(Schema):
    """A relation's weight, properties and validity."""

    weight: Number | None
    properties: JSONObject
    valid_from: str | None = None
    valid_to: str | None = None
    invalidated_by: str | None = None


class DiffRelation(Schema):
    """A relation the branch added or removed."""

    from_: str | None = Field(alias="from")
    to: str | None
    type: str
    weight: Number | None
    properties: JSONObject
    valid_from: str | None = None
    valid_to: str | None = None
    invalidated_by: str | None = None


class DiffModifiedRelation(Schema):
    """A relation the branch re-weighted or whose properties it changed."""

    from_: str | None = Field(alias="from")
    to: str | None
    type: str
    old: RelationValue
    new: RelationValue


class DiffRelations(Schema):
    """Relations by what happened to them."""

    added: list[DiffRelation]
    removed: list[DiffRelation]
    modified: list[DiffModifiedRelation]


class Diff(Schema):
    """``GET .../diff``: what the branch changed since its merge base with ``against``."""

    branch: str
    against: str
    base: MergePoint
    nodes: DiffNodes
    relations: DiffRelations


class NodeAddress(Schema):
    """A node by workspace and path."""

    workspace: str | None
    path: str


class MergedNodes(Schema):
    """The nodes a merge wrote on the target (or would write: a dry run), as a reader of the
    target sees them change."""

    added: list[NodeAddress]
    modified: list[NodeAddress]
    deleted: list[NodeAddress]
    kept: list[NodeAddress] = Field(description="Conflicts resolved 'ours': the target's value, "
                                                "re-asserted (recorded, unchanged for a reader).")


class MergedRelations(Schema):
    """How many relations a merge wrote on the target, as a reader of the target sees them change."""

    upserted: int
    removed: int
    kept: int = Field(description="Relation conflicts resolved 'ours' that keep the target's edge "
                                  "(recorded, unchanged for a reader).")


class MergeApplied(Schema):
    """What a merge applied."""

    nodes: MergedNodes
    relations: MergedRelations


class DerivedRefresh(Schema):
    """What lineage did, in the same revision, to the records derived from the nodes a write
    changed (docs/concepts/lineage.md)."""

    unlinked: int = Field(description="``mentioned_in`` edges removed: the entity is no longer named in the text.")
    restamped: int = Field(description="``mentioned_in`` edges kept and stamped with the text's new hash.")
    orphaned: int = Field(description="Entities left with no edge, flagged ``orphan`` (not deleted).")
    stale: int = Field(description="Stored answers marked ``stale``: a cited passage changed or was deleted.")
    queued: int = Field(description="Texts queued for ``extract-entities`` again (with an LLM configured).")


class MergeResult(Schema):
    """``POST .../merge``: the revision it made on the target (null: nothing to apply, or a dry run)."""

    revision: int | None
    dry_run: bool
    fast_forward: bool
    applied: MergeApplied
    base: MergePoint
    up_to_date: bool = absent("true when there was nothing to merge (no revision was made).")
    derived: DerivedRefresh = absent("What lineage does to the records derived from the merged changes, "
                                     "in the merge's revision: the counts of ``derived_writes`` (a dry run "
                                     "says what the merge will do).")
    derived_writes: list[JSONObject] = absent(
        "Lineage's writes, in the order applied (docs/concepts/lineage.md, \"Branches and merges\"): ``kind`` "
        "``unlinked`` / ``restamped`` (``from``, ``type``, ``to``; a restamp's ``source_hash``), "
        "``orphaned`` / ``queued`` (``workspace``, ``path``), ``stale`` (``workspace``, ``path``, "
        "``stale_citations``). The merge writes exactly the list of the dry run it was asked from.")
    plan: str = absent("A dry run's token of what it planned from: send it as ``if_plan`` with the merge.")




class ReviewedBranch(Branch):
    """The branch a review is of."""

    protected: bool = Field(description="Matches ``KG_PROTECTED_BRANCHES``.")


class MergeTarget(Schema):
    """The branch a review merges into."""

    name: str
    protected: bool = Field(description="Matches ``KG_PROTECTED_BRANCHES``.")


class BranchReview(Schema):
    """What a person reviews before merging a branch (:func:`kg.ops.queries.branch_review`)."""

    branch: ReviewedBranch
    into: MergeTarget | None = Field(description="null: ``main`` without a target.")
    diff: Diff | None = Field(description="What the branch changed since its merge base with ``into``.")
    plan: str | None = Field(description="The plan token read before the diff (for ``if_plan``).")


class MergeReview(Schema):
    """A merge's dry run as the review page shows it (:func:`kg.ops.queries.merge_review`)."""

    plan: str | None = Field(description="The dry run's plan token.")
    derived: DerivedRefresh | None = Field(description="Lineage's write counts; null while conflicts remain.")
    derived_writes: list[JSONObject] = Field(description="Lineage's writes, as :class:`MergeResult` lists them.")
    decisions: list[JSONObject] = Field(description="The lineage decisions (conflicts of kind ``lineage``).")
    conflicts: int = Field(description="How many other conflicts the merge has.")
