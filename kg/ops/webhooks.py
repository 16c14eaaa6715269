"""Webhooks: a repository's change events (:mod:`kg.ops.changes`) delivered, signed, to URLs the
operator allows, from a durable queue with retries and exponential backoff.

Registration, listing, removal and the delivery log need ``admin`` over the whole repository
(:func:`kg.access.authorize_whole_repository`): a webhook receives every branch and workspace
its globs match, unscoped, so only a caller who may administer all of them may register one.

Delivery
    :meth:`kg.delivery.WebhookWorker.dispatch` reads the feed after each hook's cursor (as :data:`SYSTEM`)
    and queues one ``webhook_deliveries`` row per event its branch globs and event kinds match,
    moving the cursor in the same transaction (each event queued once per hook, in order).
    :meth:`kg.delivery.WebhookWorker.run_pending` claims deliveries through :class:`kg.indexing.queue.DurableQueue`
    (group the repository, lane the hook) and POSTs each event as JSON, signed::

        kg-signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>

    (Stripe's scheme: the receiver recomputes the HMAC over the timestamp, a dot and the raw
    body, compares in constant time and refuses an old timestamp). A 2xx answer delivers; any
    other answer, a refused connection or the deadline (``KG_WEBHOOK_TIMEOUT_S``) fails the
    attempt: it is retried after ``KG_WEBHOOK_BACKOFF_S`` times 1, 2, 4, ... (at most an hour)
    until ``KG_WEBHOOK_MAX_ATTEMPTS``, then ``failed``. The URL is checked against
    ``KG_WEBHOOK_ALLOWED_URLS`` again before each attempt; redirects are not followed.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import time
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import select
from sqlalchemy.orm import Session

from kg.access import authorize_whole_repository
from kg.context import Actor, Resources, UnitOfWork, permit
from kg.errors import InvalidInput, NotFound
from kg.indexing.queue import QueueSpec
from kg.ops import changes as feed
from kg.store import repos as repo_store
from kg.store.models import BranchEvent, Repository, Webhook, WebhookDelivery, utcnow
from kg.types.changes import EVENT_KINDS, Delivery, DeliveryList, WebhookCreated, WebhookList
from kg.types.changes import Webhook as WebhookInfo

__all__ = [
    "MAX_BACKOFF_S", "MAX_WEBHOOKS", "SIGNATURE_HEADER", "WEBHOOK_QUEUE", "add_webhook", "check_webhook_url_allowed",
    "deliveries", "delivery_info", "list_webhooks", "remove_webhook", "sign", "verify", "webhook_info",
]

log = logging.getLogger("kg.ops.webhooks")

WEBHOOK_QUEUE = QueueSpec(
    name="webhook", model=WebhookDelivery, state="state", queued="queued", group="repo_id", lane="webhook_id",
    order=("id",), priority=None,
    claim_values=lambda now, lease: {"lease_until": now + lease},
    renew_values=lambda now, lease: {"lease_until": now + lease},
    lease_expired=lambda now, lease: (WebhookDelivery.state == "running") & (WebhookDelivery.lease_until < now),
    requeue_values=lambda now: {"lease_until": None},
    exhausted_values=lambda deaths, cap, now: {"error": f"its worker died {deaths} times while delivering it",
                                                "lease_until": None},
)
"""``webhook_deliveries`` as a durable queue (:class:`kg.delivery.WebhookWorker` runs it): shared
across repositories, then their webhooks; the lease is ``lease_until``."""

#: Webhooks one repository may hold.
MAX_WEBHOOKS = 100
#: Longest wait between two attempts of a delivery, in seconds.
MAX_BACKOFF_S = 3600.0
SIGNATURE_HEADER = "kg-signature"


# -- URLs and signatures ----------------------------------------------------------------------


def _endpoint(url: str) -> tuple[str, str, int, str]:
    """``(scheme, host, port, path)`` of an http(s) URL, host lower-cased, port defaulted.

    Raises
    ------
    kg.errors.InvalidInput
        Not an http(s) URL with a host.
    """
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        raise InvalidInput(f"{url!r} is not a URL", details={"url": url}) from None
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.username or parts.password:
        raise InvalidInput(f"{url!r} is not an http(s) URL with a host (and no credentials)", details={"url": url})
    return parts.scheme, parts.hostname.lower(), port or (443 if parts.scheme == "https" else 80), parts.path or "/"


def check_webhook_url_allowed(url: str, allowed: Sequence[str]) -> None:
    """Refuse a webhook URL the operator did not allow: the rule of ``KG_RAG_WEAVIATE_URLS``
    (endpoints compared: scheme, host without regard to case, port with its default), the URL's
    path starting with the allowed one's. An allowed entry that does not parse matches nothing.

    >>> check_webhook_url_allowed("http://Hooks:80/kg/1", ["http://hooks/kg/"])
    >>> check_webhook_url_allowed("http://hooks:81/kg/1", ["http://hooks/kg/"])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    kg.errors.InvalidInput: webhook URL 'http://hooks:81/kg/1' is not allowed: ...

    Raises
    ------
    kg.errors.InvalidInput
        A malformed URL, or none of ``allowed`` (422, naming the setting).
    """
    scheme, host, port, path = _endpoint(url)
    for entry in allowed:
        try:
            a_scheme, a_host, a_port, a_path = _endpoint(entry)
        except InvalidInput:
            log.warning("KG_WEBHOOK_ALLOWED_URLS holds %r, which is not an http(s) URL; ignored", entry)
            continue
        if (a_scheme, a_host, a_port) == (scheme, host, port) and path.startswith(a_path):
            return
    raise InvalidInput(f"webhook URL {url!r} is not allowed: the operator lists the allowed ones in "
                       "KG_WEBHOOK_ALLOWED_URLS", details={"url": url, "setting": "KG_WEBHOOK_ALLOWED_URLS"})


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The ``kg-signature`` header value of ``body`` sent at ``timestamp`` (Unix seconds).

    >>> sign("whsec_x", 1700000000, b"{}")[:15]
    't=1700000000,v1'
    """
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={mac}"


def verify(secret: str, header: str, body: bytes, *, now: float | None = None, tolerance_s: float = 300) -> bool:
    """Whether ``header`` (``kg-signature``) signs ``body`` with ``secret``, sent within
    ``tolerance_s`` of ``now``: what a receiver runs (docs/guides/changes-and-webhooks.md).

    >>> verify("s", sign("s", 100, b"x"), b"x", now=100), verify("s", sign("s", 100, b"x"), b"y", now=100)
    (True, False)
    """
    fields = dict(part.split("=", 1) for part in header.split(",") if "=" in part)
    try:
        timestamp = int(fields["t"])
    except (KeyError, ValueError):
        return False
    if abs((time.time() if now is None else now) - timestamp) > tolerance_s:
        return False
    expected = sign(secret, timestamp, body).split("v1=", 1)[1]
    return hmac.compare_digest(expected, fields.get("v1", ""))


# -- use cases --------------------------------------------------------------------------------


def _authorize(services: Resources, caller: Actor, session: Session, repo: str) -> Repository:
    """``admin`` over the whole of ``repo`` (every workspace and branch): the one decision of
    every webhook use case."""
    permit(services, caller, "admin", repo)
    r = repo_store.get_repository(session, repo)
    authorize_whole_repository(caller, "admin", repo, [w.name for w in repo_store.list_workspaces(session, r)],
                               [b.name for b in repo_store.list_branches(session, r)])
    return r


def _webhook_fields(hook: Webhook) -> dict[str, Any]:
    """The fields of :class:`kg.types.changes.Webhook` of a hook, without its secret."""
    return {"id": hook.id, "url": hook.url, "branches": list(hook.branches), "events": list(hook.events),
            "created_by": hook.created_by, "created_at": hook.created_at.isoformat(),
            "after": feed.cursor(hook.after_revision, hook.after_event)}


def webhook_info(hook: Webhook) -> WebhookInfo:
    """A webhook as every surface lists it, without its secret."""
    return WebhookInfo(**_webhook_fields(hook))


def add_webhook(uow: UnitOfWork, repo: str, url: str, *, branches: Sequence[str] = ("*",),
                events: Sequence[str] | None = None) -> WebhookCreated:
    """Register a webhook on ``repo`` delivering the events (kinds ``events``, default all) of the
    branches matching ``branches`` (globs) written from now on (:class:`kg.types.changes.WebhookCreated`,
    with its secret).

    Raises
    ------
    kg.errors.InvalidInput
        A URL not allowed (``KG_WEBHOOK_ALLOWED_URLS``), an unknown event kind, no glob, or the
        repository already holds :data:`MAX_WEBHOOKS`.
    """
    kinds = list(dict.fromkeys(events or EVENT_KINDS))
    unknown = [k for k in kinds if k not in EVENT_KINDS]
    if unknown:
        raise InvalidInput(f"unknown event kinds: {', '.join(unknown)} (known: {', '.join(EVENT_KINDS)})",
                           details={"events": unknown})
    globs = list(dict.fromkeys(branches))
    if not globs or any(not g or len(g) > 255 for g in globs):
        raise InvalidInput("branches must hold 1 to 100 globs of 1 to 255 characters", details={"branches": globs})
    r = _authorize(uow.services, uow.actor, uow.session, repo)
    check_webhook_url_allowed(url, uow.services.settings.webhook_allowed_urls)
    held = uow.session.scalars(select(Webhook.id).where(Webhook.repo_id == r.id)).all()
    if len(held) >= MAX_WEBHOOKS:
        raise InvalidInput(f"repository {repo!r} already holds {MAX_WEBHOOKS} webhooks",
                           details={"limit": MAX_WEBHOOKS})
    r = repo_store.get_repository(uow.session, repo, lock=True)  # the head and last event, as of the lock
    last_event = uow.session.scalar(select(BranchEvent.id).where(BranchEvent.repo_id == r.id)
                                    .order_by(BranchEvent.id.desc()).limit(1)) or 0
    hook = Webhook(id=uuid.uuid4().hex, repo_id=r.id, url=url.strip(), secret="whsec_" + secrets.token_hex(24),
                   branches=globs, events=kinds, created_by=uow.actor.name, after_revision=r.head_revision,
                   after_event=last_event, created_at=utcnow())
    uow.session.add(hook)
    uow.session.flush()
    return WebhookCreated(**_webhook_fields(hook), secret=hook.secret)


def list_webhooks(services: Resources, caller: Actor, repo: str) -> WebhookList:
    """The webhooks of ``repo``, oldest first (no secret)."""
    with services.db.read() as session:
        r = _authorize(services, caller, session, repo)
        hooks = session.scalars(select(Webhook).where(Webhook.repo_id == r.id).order_by(Webhook.created_at))
        return WebhookList(webhooks=[webhook_info(h) for h in hooks])


def _hook(session: Session, r: Repository, webhook_id: str) -> Webhook:
    hook = session.get(Webhook, webhook_id)
    if hook is None or hook.repo_id != r.id:
        raise NotFound(f"no webhook {webhook_id!r} in repository {r.name!r}", details={"webhook": webhook_id})
    return hook


def remove_webhook(uow: UnitOfWork, repo: str, webhook_id: str) -> None:
    """Delete a webhook, its queued deliveries and its log.

    Raises
    ------
    kg.errors.NotFound
        No such webhook in ``repo``.
    """
    r = _authorize(uow.services, uow.actor, uow.session, repo)
    uow.session.delete(_hook(uow.session, r, webhook_id))
    uow.session.flush()


def deliveries(services: Resources, caller: Actor, repo: str, webhook_id: str, *,
               limit: int = 100) -> DeliveryList:
    """The delivery log of a webhook, newest first.

    Raises
    ------
    kg.errors.NotFound
        No such webhook in ``repo``.
    kg.errors.InvalidInput
        ``limit`` outside 1..1000.
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 1000:
        raise InvalidInput("limit must be between 1 and 1000", details={"limit": limit})
    with services.db.read() as session:
        r = _authorize(services, caller, session, repo)
        hook = _hook(session, r, webhook_id)
        rows = session.scalars(select(WebhookDelivery).where(WebhookDelivery.webhook_id == hook.id)
                               .order_by(WebhookDelivery.id.desc()).limit(limit))
        return DeliveryList(deliveries=[delivery_info(d) for d in rows])


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def delivery_info(d: WebhookDelivery) -> Delivery:
    """A delivery of the log, as every surface answers it."""
    return Delivery.model_validate({
        "id": d.id, "event_id": d.event_id, "event_type": d.event.get("type", ""), "state": d.state,
        "attempts": d.attempts, "status_code": d.status_code, "error": d.error,
        "created_at": d.created_at.isoformat(), "last_attempt_at": _iso(d.last_attempt_at),
        "next_attempt_at": _iso(d.not_before) if d.state == "queued" else None,
        "delivered_at": _iso(d.delivered_at)})
