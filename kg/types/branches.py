"""Branches, their history (revisions and what each changed), diffs and merges."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field

from kg.types.common import (
    BRANCH_RULE,
    JSONObject,
    Number,
    RevisionNumber,
    Schema,
    Strict,
    Timestamp,
    WriteMeta,
    absent,
)

# -- requests ----------------------------------------------------------------------


class BranchCreate(Strict):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, strict=True)
    name: str = Field(json_schema_extra=BRANCH_RULE)
    from_: str = Field(default="main", alias="from", json_schema_extra=BRANCH_RULE)
    at_revision: RevisionNumber | None = None


class MergeBody(WriteMeta):
    into: str | None = Field(default=None, json_schema_extra=BRANCH_RULE)
    dry_run: bool = False
    resolutions: list[dict[str, Any]] = Field(default_factory=list)
    #: The ``plan`` a dry run answered: the merge is refused (409) if either branch changed since.
    if_plan: str | None = Field(default=None, max_length=200)


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
    """The merge base: a fork point or the last merge between the two branches."""

    kind: Literal["fork", "merge"]
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


