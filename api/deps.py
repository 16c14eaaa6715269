"""Request dependencies: the process's Services, the caller, common query parameters."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Query, Request

from kg.context import ANONYMOUS, Actor
from kg.services import Services


def get_services(request: Request) -> Services:
    """The Services the app was created with."""
    return request.app.state.services


def get_caller(request: Request) -> Actor:
    """Who calls: anonymous until API keys identify callers."""
    return ANONYMOUS


ServicesDep = Annotated[Services, Depends(get_services)]
CallerDep = Annotated[Actor, Depends(get_caller)]
BranchQ = Annotated[str, Query(description="Branch name; may contain '/'.", min_length=1, max_length=255)]
MAX_REVISION = 2_147_483_647
RevisionQ = Annotated[int | None, Query(ge=0, le=MAX_REVISION, description="Read the branch as of this revision.")]
#: The write metadata of DELETE routes, bounded as in request bodies (api/models.py ``WriteMeta``).
MessageQ = Annotated[str | None, Query(max_length=10_000, description="Why: kept in the revision log.")]
ActorQ = Annotated[str | None, Query(max_length=255, description="Who: kept in the revision log.")]
