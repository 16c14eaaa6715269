"""The change feed (Server-Sent Events or JSON pages) and webhooks: thin adapters over
:mod:`kg.ops.changes` and :mod:`kg.ops.webhooks`.

The stream is sse-starlette's ``EventSourceResponse``: it sends the ``ping`` comments that keep
proxies open, stops when the client goes away, and ends every open stream when the server shuts
down (it listens for uvicorn's exit), which a bare ``StreamingResponse`` would not.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import JSONResponse
from sse_starlette import EventSourceResponse
from starlette.concurrency import run_in_threadpool

from api.deps import CallerDep, RepoP, ServicesDep
from api.guard import GuardedRoute
from kg.context import run
from kg.ops import changes as change_ops
from kg.ops import webhooks as hook_ops
from kg.store.history import DEFAULT_LOG_CHANGES, MAX_LOG_CHANGES
from kg.types.changes import ChangePage, DeliveryList, WebhookCreate, WebhookCreated, WebhookList

#: A cursor of the feed (:func:`kg.ops.changes.parse_cursor`).
CURSOR_PATTERN = r"^\d{1,12}(\.\d{1,12})?$"

router = APIRouter(route_class=GuardedRoute, prefix="/api/repos/{repo}", tags=["changes"])

@router.get("/changes", response_model=ChangePage, responses={200: {"content": {"text/event-stream": {}}}})
async def changes(
    repo: RepoP, request: Request, services: ServicesDep, caller: CallerDep,
    branch: Annotated[str | None, Query(min_length=1, max_length=255, description="Only this branch.")] = None,
    after: Annotated[str | None, Query(max_length=40, pattern=CURSOR_PATTERN, description=(
        "Resume after this cursor (`<revision>` or `<revision>.<event>`, an event's `id`); "
        "default: the start."))] = None,
    fmt: Annotated[Literal["json", "sse"] | None, Query(alias="format", description=(
        "`json`: one page; `sse`: a stream. Default: from `Accept` (`text/event-stream` streams)."))] = None,
    limit: Annotated[int, Query(ge=1, le=change_ops.MAX_PAGE)] = change_ops.DEFAULT_PAGE,
    changes: Annotated[int, Query(ge=0, le=MAX_LOG_CHANGES, description="Writes listed per revision.")]
    = DEFAULT_LOG_CHANGES,
    last_event_id: Annotated[str | None, Header(max_length=40, pattern=CURSOR_PATTERN, description=(
        "An SSE client's reconnect: resume after this event id (it wins over `after`)."))] = None,
) -> Any:
    """The repository's revisions and branch events after ``after``, in order, as the caller may
    see them: a JSON page, or Server-Sent Events (``Accept: text/event-stream``) that follow
    new writes and resume from ``Last-Event-ID``."""
    start = last_event_id if last_event_id else after
    stream = fmt == "sse" or (fmt is None and "text/event-stream" in request.headers.get("accept", ""))

    def page(cursor: str | None) -> ChangePage:
        return change_ops.changes(services, caller, repo, branch=branch, after=cursor, limit=limit,
                                  max_changes=changes)

    first = await run_in_threadpool(page, start)  # errors (a bad cursor, no access) answer before streaming
    if not stream:
        return JSONResponse(first.model_dump(mode="json", by_alias=True, exclude_unset=True))
    slot = change_ops.stream_slot(services, caller)
    slot.__enter__()

    async def events() -> AsyncIterator[dict[str, Any]]:
        try:
            current = first
            while True:
                for event in current.events:
                    yield {"id": event.id, "event": event.type,
                           "data": json.dumps(event.model_dump(mode="json", by_alias=True, exclude_unset=True))}
                if not current.has_more:
                    if await request.is_disconnected():
                        return
                    await asyncio.sleep(services.settings.changes_poll_s)
                current = await run_in_threadpool(page, current.next_after)
        finally:
            slot.__exit__(None, None, None)

    return EventSourceResponse(events(), ping=services.settings.changes_heartbeat_s,
                               headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


@router.post("/webhooks", status_code=201, response_model=WebhookCreated)
def add_webhook(repo: RepoP, body: WebhookCreate, services: ServicesDep, caller: CallerDep) -> WebhookCreated:
    """Register a webhook; its signing secret is in this answer only."""
    return run(services, caller, hook_ops.add_webhook, repo, body.url, branches=body.branches, events=body.events)


@router.get("/webhooks", response_model=WebhookList)
def list_webhooks(repo: RepoP, services: ServicesDep, caller: CallerDep) -> WebhookList:
    """The repository's webhooks, without their secrets."""
    return hook_ops.list_webhooks(services, caller, repo)


@router.delete("/webhooks/{webhook_id}", status_code=204)
def remove_webhook(repo: RepoP, webhook_id: str, services: ServicesDep, caller: CallerDep) -> None:
    """Delete a webhook and its delivery log."""
    run(services, caller, hook_ops.remove_webhook, repo, webhook_id)


@router.get("/webhooks/{webhook_id}/deliveries", response_model=DeliveryList)
def webhook_deliveries(repo: RepoP, webhook_id: str, services: ServicesDep, caller: CallerDep,
                       limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> DeliveryList:
    """The webhook's delivery log, newest first: state, attempts, last answer, error, times."""
    return hook_ops.deliveries(services, caller, repo, webhook_id, limit=limit)



