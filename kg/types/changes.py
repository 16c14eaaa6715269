"""The change feed (revisions and branch events, as a page or a stream) and webhooks."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from kg.types.branches import NodeChangeEntry, RelationChangeEntry
from kg.types.common import Glob, Schema, Strict, Timestamp, absent

#: The kinds of change event: a write, a merge (a write that merged a branch), a branch created,
#: reset (forked again from its parent) or deleted.
EventKind = Literal["revision", "merge", "branch.created", "branch.reset", "branch.deleted"]
EVENT_KINDS: tuple[EventKind, ...] = ("revision", "merge", "branch.created", "branch.reset", "branch.deleted")


class MergeSource(Schema):
    """The branch a merge revision merged, at its revision."""

    branch: str | None
    revision: int


class ChangeEvent(Schema):
    """One event of the change feed, as its reader may see it.

    ``id`` is the feed's cursor after this event (``<revision>.<branch event>``): send it as
    ``after`` or ``Last-Event-ID`` to resume after it.
    """

    id: str = Field(description="The cursor after this event, `<revision>.<branch event number>`.")
    type: EventKind
    revision: int = Field(description="The revision written (a branch event: the repository's head then).")
    branch: str
    created_at: Timestamp
    actor: str | None
    message: str | None = absent("Why (revisions only).")
    changes: list[Annotated[NodeChangeEntry | RelationChangeEntry, Field(discriminator="kind")]] | None = absent(
        "The first writes of the revision the reader may see: nodes, then relations, in write order.")
    change_count: int | None = absent("How many writes of the revision the reader may see.")
    merge: MergeSource | None = absent("The merged branch (merge events only).")


class ChangePage(Schema):
    """``GET .../changes`` as JSON: the events after ``after``, oldest first."""

    events: list[ChangeEvent]
    next_after: str = Field(description="The cursor to send as `after` for the next page (past events "
                                        "the caller may not see, too).")
    has_more: bool = Field(description="Whether more events were already written past this page.")


class WebhookCreate(Strict):
    """``POST .../webhooks``: where to deliver, which branches and which events."""

    url: str = Field(min_length=1, max_length=2048,
                     description="An http(s) URL the operator allows (`KG_WEBHOOK_ALLOWED_URLS`).")
    branches: list[Glob] = Field(default_factory=lambda: ["*"], min_length=1, max_length=100,
                                 description="Branch globs (fnmatch); default every branch.")
    events: list[EventKind] = Field(default_factory=lambda: list(EVENT_KINDS), min_length=1,
                                    description="Event kinds delivered; default all.")


class Webhook(Schema):
    """A registered webhook (its secret is shown once, at creation)."""

    id: str
    url: str
    branches: list[str]
    events: list[EventKind]
    created_by: str | None
    created_at: Timestamp
    after: str = Field(description="The feed cursor up to which events were queued for delivery.")


class WebhookCreated(Webhook):
    """A new webhook, with the secret that signs its deliveries (shown this once)."""

    secret: str = Field(description="HMAC-SHA256 key of the `kg-signature` header; not shown again.")


class WebhookList(Schema):
    """``GET .../webhooks``."""

    webhooks: list[Webhook]


class Delivery(Schema):
    """One event queued for one webhook, and how its delivery went."""

    id: int
    event_id: str
    event_type: str
    state: Literal["queued", "running", "delivered", "failed"]
    attempts: int
    status_code: int | None = Field(description="The receiver's last HTTP status (null: no answer).")
    error: str | None = Field(description="Why the last attempt failed.")
    created_at: Timestamp
    last_attempt_at: Timestamp | None
    next_attempt_at: Timestamp | None = Field(description="When a queued retry is due (backoff).")
    delivered_at: Timestamp | None


class DeliveryList(Schema):
    """``GET .../webhooks/{id}/deliveries``: newest first."""

    deliveries: list[Delivery]
