"""Request dependencies: the process's Services, the caller, common query parameters."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Query, Request
from pydantic import AwareDatetime

from kg.access import authenticate
from kg.context import ANONYMOUS, Actor
from kg.errors import Unauthenticated
from kg.services import Services


def get_services(request: Request) -> Services:
    """The Services the app was created with."""
    return request.app.state.services


def get_caller(request: Request) -> Actor:
    """Who calls: the key of ``Authorization: Bearer kg_...``; without one, anonymous while
    ``KG_AUTH`` is off and a 401 (``unauthenticated``, ``WWW-Authenticate: Bearer``) while it
    is on. A key that is sent is always checked, auth on or off."""
    services: Services = request.app.state.services
    header = request.headers.get("authorization")
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
BranchQ = Annotated[str, Query(description="Branch name; may contain '/'.", min_length=1, max_length=255)]
MAX_REVISION = 2_147_483_647
RevisionQ = Annotated[int | None, Query(ge=0, le=MAX_REVISION, description="Read the branch as of this revision.")]
#: The write metadata of DELETE routes, bounded as in request bodies (api/models.py ``WriteMeta``).
AsOfQ = Annotated[AwareDatetime | None, Query(
    description="World time (ISO 8601 with a zone): read the relations valid then; default now.")]
IncludeInvalidQ = Annotated[bool, Query(description="Read every relation, whatever its validity.")]
MessageQ = Annotated[str | None, Query(max_length=10_000, description="Why: kept in the revision log.")]
ActorQ = Annotated[str | None, Query(max_length=255, description="Who: kept in the revision log.")]
