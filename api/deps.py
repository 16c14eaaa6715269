"""Request dependencies: the process's Services, the caller, common query parameters."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Path, Query, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import AwareDatetime

from kg.access import authenticate
from kg.context import ANONYMOUS, Actor
from kg.errors import Unauthenticated
from kg.services import Services
from kg.store.paths import (
    ADDRESS_PATTERN,
    BRANCH_PATTERN,
    MAX_PATH_CHARS,
    NAME_PATTERN,
    PATH_TAIL_PATTERN,
    TEXT_PATTERN,
)
from kg.store.relations import RELATION_TYPE_PATTERN


def get_services(request: Request) -> Services:
    """The Services the app was created with."""
    return request.app.state.services


#: Where the request guard (api/guard.py) leaves the caller it authenticated, before the body
#: was read: :func:`get_caller` takes it from there rather than checking the key again.
CALLER = "kg.caller"

#: The bearer scheme of the OpenAPI document (``components.securitySchemes``): every operation
#: that depends on :func:`get_caller` names it, and ``/docs`` offers "Authorize". It refuses
#: nothing itself (``auto_error=False``): :func:`caller_of_header` decides, in the API's error shape.
BEARER = HTTPBearer(scheme_name="bearer", auto_error=False, bearerFormat="kg_<id>_<secret>",
                    description="An API key: `Authorization: Bearer kg_<id>_<secret>` (needed while KG_AUTH is on).")


def get_caller(request: Request,
               _bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)] = None) -> Actor:
    """Who calls: the key of ``Authorization: Bearer kg_...``; without one, anonymous while
    ``KG_AUTH`` is off and a 401 (``unauthenticated``, ``WWW-Authenticate: Bearer``) while it
    is on. A key that is sent is always checked, auth on or off. The request guard has
    checked it already for every ``/api`` request (the caller it left in the scope)."""
    known = request.scope.get(CALLER)
    if isinstance(known, Actor):
        return known
    services: Services = request.app.state.services
    return caller_of_header(services, request.headers.get("authorization"))


def caller_of_header(services: Services, header: str | None) -> Actor:
    """The caller an ``Authorization`` header names (the one key lookup of HTTP requests).

    Parameters
    ----------
    services : kg.services.Services
        The store, the settings (``KG_AUTH``) and the key cache.
    header : str or None
        The header's value; None when the request has none.

    Returns
    -------
    kg.access.Actor
        The key's caller; :data:`kg.context.ANONYMOUS` without a header while ``KG_AUTH`` is off.

    Raises
    ------
    kg.errors.Unauthenticated
        No header while ``KG_AUTH`` is on; a header that is not ``Bearer <token>``; a key that
        is unknown, wrong, revoked or expired (:func:`kg.access.authenticate`).
    """
    if header is None:
        if services.settings.auth:
            raise Unauthenticated("an API key is required: Authorization: Bearer kg_<id>_<secret>")
        return ANONYMOUS
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthenticated("the Authorization header must be 'Bearer kg_<id>_<secret>'")
    return authenticate(services.db, services.settings, token, services.key_cache)


ServicesDep = Annotated[Services, Depends(get_services)]
CallerDep = Annotated[Actor, Depends(get_caller)]
# The patterns of the names, paths and texts kg accepts (kg.store.paths) are documented in the
# OpenAPI document (json_schema_extra) and checked by the library, whose refusal says why.
#: A repository name (path parameter).
RepoP = Annotated[str, Path(description="Repository name.", json_schema_extra={"pattern": NAME_PATTERN,
                                                                              "maxLength": 128})]
#: A workspace name (path parameter).
WorkspaceP = Annotated[str, Path(description="Workspace name.", json_schema_extra={"pattern": NAME_PATTERN,
                                                                                  "maxLength": 128})]
#: A branch name (path parameter; may contain '/').
BranchP = Annotated[str, Path(description="Branch name; may contain '/'.",
                              json_schema_extra={"pattern": BRANCH_PATTERN, "maxLength": 255})]
#: A node path without its leading '/' (path parameter).
NodePathP = Annotated[str, Path(description="Node path without its leading '/'.",
                                json_schema_extra={"pattern": PATH_TAIL_PATTERN, "maxLength": MAX_PATH_CHARS - 1})]
#: A node address 'workspace:/path' (query parameter).
AddressQ = Annotated[str, Query(description="Node address 'workspace:/path'.",
                                json_schema_extra={"pattern": ADDRESS_PATTERN, "maxLength": 1300})]
#: One relation type (query parameter).
RelationTypeQ = Annotated[str | None, Query(description="Relation type.",
                                            json_schema_extra={"pattern": RELATION_TYPE_PATTERN, "maxLength": 255})]
BranchQ = Annotated[str, Query(description="Branch name; may contain '/'.", min_length=1, max_length=255,
                               json_schema_extra={"pattern": BRANCH_PATTERN})]
MAX_REVISION = 2_147_483_647
RevisionQ = Annotated[int | None, Query(ge=0, le=MAX_REVISION, description="Read the branch as of this revision.")]
#: The write metadata of DELETE routes, bounded as in request bodies (:class:`kg.types.WriteMeta`).
AsOfQ = Annotated[AwareDatetime | None, Query(
    description="World time (ISO 8601 with a zone): read the relations valid then; default now.")]
IncludeInvalidQ = Annotated[bool, Query(description="Read every relation, whatever its validity.")]
MessageQ = Annotated[str | None, Query(max_length=10_000, description="Why: kept in the revision log.",
                                       json_schema_extra={"pattern": TEXT_PATTERN})]
ActorQ = Annotated[str | None, Query(max_length=255, description="Who: kept in the revision log.",
                                     json_schema_extra={"pattern": TEXT_PATTERN})]
