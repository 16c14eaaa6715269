"""Request bodies (pydantic). Unknown fields are refused so that typos do not pass silently."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, BaseModel, BeforeValidator, ConfigDict, Field
from pydantic.config import JsonDict

from kg.access import ACTIONS
from kg.store.numbers import integral
from kg.store.paths import (
    ADDRESS_PATTERN,
    BRANCH_PATTERN,
    MAX_PATH_CHARS,
    NAME_PATTERN,
    NON_BLANK_PATTERN,
    PATH_PATTERN,
    TEXT_PATTERN,
)
from kg.store.references import REF_KEY, WORKSPACE_KEY
from kg.store.relations import RELATION_TYPE_PATTERN

# Documented patterns (json_schema_extra): the library checks them and says why (kg.store.paths).
_NAME: JsonDict = {"pattern": NAME_PATTERN, "maxLength": 128}
_BRANCH: JsonDict = {"pattern": BRANCH_PATTERN, "maxLength": 255}
_ADDRESS: JsonDict = {"pattern": ADDRESS_PATTERN, "maxLength": 1300}
_TEXT: JsonDict = {"pattern": TEXT_PATTERN}
_TYPE: JsonDict = {"pattern": RELATION_TYPE_PATTERN, "maxLength": 255}
#: A node address 'workspace:/path' and a relation type, items of request lists.
Address = Annotated[str, Field(json_schema_extra=_ADDRESS)]
RelationType = Annotated[str, Field(json_schema_extra=_TYPE)]
#: A revision number (the bounds before :func:`~kg.store.numbers.integral`, so that the document
#: states them as ``minimum`` / ``maximum`` on an optional field too).
Revision = Annotated[int, Field(ge=0, le=2_147_483_647), BeforeValidator(integral)]


class ErrorInfo(BaseModel):
    """What went wrong: a stable machine-readable ``code``, a human ``message``, and ``details``."""

    model_config = ConfigDict(extra="forbid")
    code: str = Field(description="Stable error code: malformed, invalid_input, not_found, conflict, ...")
    message: str = Field(description="What went wrong, for a human.")
    details: dict[str, Any] = Field(description="Structured details (may be empty).")


class ErrorBody(BaseModel):
    """The one error shape of every 4xx/5xx answer (API.md, "Errors")."""

    model_config = ConfigDict(extra="forbid")
    error: ErrorInfo


#: Documented on every route (api/app.py): errors answer :class:`ErrorBody`, not FastAPI's
#: ``HTTPValidationError``.
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    "4XX": {"model": ErrorBody, "description": "Refused: 400 malformed, 404 unknown repository / branch / "
                                              "workspace / node, 409 conflict, 422 valid JSON that breaks a rule; "
                                              "401 no valid API key, 403 outside the key's grants."},
    "5XX": {"model": ErrorBody, "description": "502 / 503: an upstream (embedding provider, Weaviate, "
                                              "database) is unreachable."},
}

class Strict(BaseModel):
    """Refuses unknown fields."""

    model_config = ConfigDict(extra="forbid", strict=True)


class RepoCreate(Strict):
    name: str = Field(json_schema_extra=_NAME)


class WorkspaceCreate(Strict):
    name: str = Field(json_schema_extra=_NAME)
    embedding: dict[str, Any] | None = None


class WorkspacePatch(Strict):
    embedding: dict[str, Any]
    reembed: bool = False


class BranchCreate(Strict):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, strict=True)
    name: str = Field(json_schema_extra=_BRANCH)
    from_: str = Field(default="main", alias="from", json_schema_extra=_BRANCH)
    at_revision: Revision | None = None


#: A name or glob of a grant, or a key's name: 1 to 255 characters, not only blanks (kg.access.grant),
#: no NUL (:data:`~kg.store.paths.TEXT_PATTERN`).
_GLOB: JsonDict = {"pattern": NON_BLANK_PATTERN, "maxLength": 255}
Glob = Annotated[str, Field(min_length=1, max_length=255, json_schema_extra=_GLOB)]


class GrantBody(Strict):
    """One grant of a key (:class:`kg.access.Grant`)."""

    repo: Glob = Field(description="Repository name or glob ('*': every one).")
    branches: list[Glob] = Field(default_factory=lambda: ["*"], min_length=1, max_length=100,
                                 description="Branch globs ('agent/*').")
    workspaces: list[Glob] = Field(default_factory=lambda: ["*"], min_length=1, max_length=100,
                                   description="Workspace names or globs.")
    actions: list[Literal[ACTIONS]] = Field(  # type: ignore[valid-type]
        default_factory=lambda: ["read"], min_length=1, max_length=6,
        description="read, write, branch:create, branch:delete, merge, admin.")


class KeyCreate(Strict):
    """A new API key: its name, its grants, and when it expires. A key needs a grant or ``admin``
    (the document says so: one of the two is required)."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={"anyOf": [
        {"required": ["grants"], "properties": {"grants": {"minItems": 1}}},
        {"required": ["admin"], "properties": {"admin": {"const": True}}}]})
    name: Glob
    grants: list[GrantBody] = Field(default_factory=list, max_length=100)
    admin: bool = Field(default=False, description="Also grant everything everywhere (an administrator key).")
    expires_in_s: Annotated[int, Field(ge=1, le=10 * 366 * 86400), BeforeValidator(integral)] | None = Field(
        default=None, description="Seconds until the key stops working (default: never).")


#: A property value that is a reference ``{"kg:ref": path, "kg:workspace": name}`` holds a node path
#: and a workspace name (kg.store.references; its target need not exist).
_REFERENCE: JsonDict = {"if": {"type": "object", "required": [REF_KEY]}, "then": {"properties": {
    REF_KEY: {"type": "string", "pattern": PATH_PATTERN, "maxLength": MAX_PATH_CHARS},
    WORKSPACE_KEY: {"type": "string", "pattern": NAME_PATTERN, "maxLength": 128}}}}
#: Node properties: keys the store can hold (no NUL), references in top-level values and in the
#: items of top-level lists (the ones kg reads) well formed.
_PROPERTIES: JsonDict = {"propertyNames": {"pattern": TEXT_PATTERN}, "additionalProperties": {
    "allOf": [_REFERENCE, {"if": {"type": "array"}, "then": {"items": _REFERENCE}}]}}


class WriteMeta(Strict):
    """Optional on every write: why, by whom, and the revision the writer's view was at."""

    message: str | None = Field(default=None, max_length=10_000, json_schema_extra=_TEXT)
    actor: str | None = Field(default=None, max_length=255, json_schema_extra=_TEXT)


class NodePut(WriteMeta):
    node_type: str = Field(default="kg:Node", json_schema_extra=_GLOB)
    properties: dict[str, Any] = Field(default_factory=dict, json_schema_extra=_PROPERTIES)
    order: float | None = None
    if_revision: Revision | None = None


class NodePatch(WriteMeta):
    properties: dict[str, Any] = Field(default_factory=dict, json_schema_extra=_PROPERTIES)
    node_type: str | None = Field(default=None, json_schema_extra=_GLOB)
    order: float | None = None
    if_revision: Revision | None = None


class BatchBody(WriteMeta):
    upserts: list[dict[str, Any]] = Field(default_factory=list)
    deletes: list[dict[str, Any]] = Field(default_factory=list)
    parents: bool = False


class MergeBody(WriteMeta):
    into: str | None = Field(default=None, json_schema_extra=_BRANCH)
    dry_run: bool = False
    resolutions: list[dict[str, Any]] = Field(default_factory=list)
    #: The ``plan`` a dry run answered: the merge is refused (409) if either branch changed since.
    if_plan: str | None = Field(default=None, max_length=200)


class RelationCreate(WriteMeta):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, strict=True)
    from_: str = Field(alias="from", json_schema_extra=_ADDRESS)
    to: str = Field(json_schema_extra=_ADDRESS)
    type: str = Field(json_schema_extra=_TYPE)
    weight: float | None = None
    properties: dict[str, Any] = Field(default_factory=dict)
    #: World time the fact holds from / until (ISO 8601 with a zone; a naive time is a 422).
    valid_from: AwareDatetime | None = Field(default=None, strict=False)
    valid_to: AwareDatetime | None = Field(default=None, strict=False)


class RelationInvalidate(WriteMeta):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, strict=True)
    from_: str = Field(alias="from", json_schema_extra=_ADDRESS)
    to: str = Field(json_schema_extra=_ADDRESS)
    type: str = Field(json_schema_extra=_TYPE)
    #: When the fact stopped holding (ISO 8601 with a zone); default now.
    valid_to: AwareDatetime | None = Field(default=None, strict=False)
    invalidated_by: str | None = Field(default=None, min_length=1, max_length=2000)


class RelationTypesPut(Strict):
    #: Relation types that are single-valued per source in the workspace (replaced whole).
    single_valued: list[RelationType] = Field(max_length=1000)
