"""API keys and their grants."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BeforeValidator, ConfigDict, Field

from kg.access import ACTIONS
from kg.store.numbers import integral
from kg.types.common import (
    Glob,
    Schema,
    Strict,
    Timestamp,
)

# -- requests ----------------------------------------------------------------------


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


# -- API keys ---------------------------------------------------------------------------------


class KeyGrant(Schema):
    """One grant of a key."""

    repo: str
    branches: list[str]
    workspaces: list[str]
    actions: list[str]


class ApiKeyInfo(Schema):
    """An API key as listed: never its secret."""

    id: str = Field(description="The key's id (the <id> of kg_<id>_<secret>).")
    name: str = Field(description="The actor of the key's revisions.")
    state: Literal["active", "revoked", "expired"]
    created_by: str | None
    created_at: Timestamp
    expires_at: Timestamp | None
    revoked_at: Timestamp | None
    last_used_at: Timestamp | None = Field(description="Written at most every KG_KEY_TOUCH_S seconds.")
    grants: list[KeyGrant]


class ApiKeyCreated(ApiKeyInfo):
    """A new key: the token is in this answer and never again."""

    key: str = Field(description="The bearer token kg_<id>_<secret>: shown once.")
    warnings: list[str] = Field(description="One line per grant that is '*' everywhere.")


class ApiKeyList(Schema):
    """Every key, revoked and expired ones included."""

    keys: list[ApiKeyInfo]


