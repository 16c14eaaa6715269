"""Webhook delivery: the worker that queues each hook's events and posts them, signed, from the
durable queue with retries and backoff (:mod:`kg.ops.webhooks` registers hooks and signs). A
worker, like the indexer: it opens its own transactions, which use cases never do.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from fnmatch import fnmatchcase
from typing import Any

import httpx
from sqlalchemy import select

from kg.access import SYSTEM
from kg.context import Resources
from kg.errors import InvalidInput
from kg.indexing.queue import Claim, DurableQueue
from kg.ops import changes as feed
from kg.ops.webhooks import MAX_BACKOFF_S, SIGNATURE_HEADER, WEBHOOK_QUEUE, check_webhook_url_allowed, sign
from kg.store.models import Repository, Webhook, WebhookDelivery, utcnow

log = logging.getLogger("kg.delivery")


# -- the worker -------------------------------------------------------------------------------


class WebhookWorker:
    """Queues and delivers webhook events (one per process, :class:`kg.services.Services`).

    Parameters
    ----------
    services : Resources
    poll_s : float
        How often the background thread (:meth:`start`) looks for new events and due deliveries.
    post : callable, optional
        ``post(url, body, headers, timeout_s) -> status code`` (default: httpx, no redirects);
        it raises on a connection error or timeout.
    """

    def __init__(self, services: Resources, *, poll_s: float = 1.0,
                 post: Callable[[str, bytes, dict[str, str], float], int] | None = None) -> None:
        self.services = services
        self.poll_s = poll_s
        self.post = post or _post
        self.queue = DurableQueue(services.db, WEBHOOK_QUEUE,
                                  lease_s=max(60.0, 3 * services.settings.webhook_timeout_s))
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def dispatch(self, repo_id: int | None = None) -> int:
        """Queue the events written since each hook's cursor that it wants; return how many."""
        queued = 0
        with self.services.db.read() as session:
            hooks = [(h.id, h.repo_id) for h in session.scalars(
                select(Webhook).where(*([] if repo_id is None else [Webhook.repo_id == repo_id])))]
            repos = {r.id: r.name for r in session.scalars(select(Repository))}
        for hook_id, rid in hooks:
            with self.services.db.write() as session:
                hook = session.scalars(select(Webhook).where(Webhook.id == hook_id).with_for_update()).first()
                if hook is None:
                    continue
                while True:
                    page = feed.changes(self.services, SYSTEM, repos[rid],
                                        after=feed.cursor(hook.after_revision, hook.after_event), limit=200)
                    for event in page.events:
                        if event.type in hook.events and any(fnmatchcase(event.branch, g) for g in hook.branches):
                            session.add(WebhookDelivery(
                                repo_id=rid, webhook_id=hook.id, event_id=event.id, state="queued",
                                event=event.model_dump(mode="json", by_alias=True, exclude_unset=True),
                                created_at=utcnow()))
                            queued += 1
                    hook.after_revision, event_part = feed.parse_cursor(page.next_after)
                    hook.after_event = event_part or 0
                    if not page.has_more:
                        break
        return queued

    def backoff(self, attempts: int) -> timedelta:
        """The wait after the ``attempts``-th failed attempt: ``KG_WEBHOOK_BACKOFF_S`` times
        2 ** (attempts - 1), at most an hour."""
        base = self.services.settings.webhook_backoff_s
        return timedelta(seconds=min(base * 2 ** min(max(attempts - 1, 0), 32), MAX_BACKOFF_S))

    def run_pending(self, limit: int = 16) -> int:
        """Claim up to ``limit`` due deliveries and attempt each once; return how many were attempted."""
        with self.services.db.write() as session:
            claims = self.queue.claim(session, limit).claims
            rows = {d.id: (d.webhook_id, d.event) for d in session.scalars(
                select(WebhookDelivery).where(WebhookDelivery.id.in_([c.id for c in claims])))}
            hooks = {h.id: (h.url, h.secret) for h in session.scalars(
                select(Webhook).where(Webhook.id.in_([w for w, _ in rows.values()])))}
        with self.queue.renewing(claims):
            for claim in claims:
                hook_id, event = rows[claim.id]
                url, secret = hooks[hook_id]
                self._attempt(claim, url, secret, event)
        return len(claims)

    def _attempt(self, claim: Claim, url: str, secret: str, event: dict[str, Any]) -> None:
        settings = self.services.settings
        body = json.dumps(event, separators=(",", ":"), sort_keys=True).encode()
        status: int | None = None
        error: str | None = None
        try:
            check_webhook_url_allowed(url, settings.webhook_allowed_urls)  # the operator may have changed it
            headers = {"content-type": "application/json", SIGNATURE_HEADER: sign(secret, int(time.time()), body),
                       "kg-event": event.get("type", ""), "kg-event-id": event.get("id", "")}
            status = self.post(url, body, headers, settings.webhook_timeout_s)
            if not 200 <= status < 300:
                error = f"the receiver answered {status}"
        except InvalidInput as exc:
            error = str(exc)
        except httpx.TimeoutException:
            error = f"no answer within {settings.webhook_timeout_s:g} s (KG_WEBHOOK_TIMEOUT_S)"
        except httpx.HTTPError as exc:
            error = f"{type(exc).__name__}: {exc}"
        now = utcnow()
        with self.services.db.write() as session:
            done = {"status_code": status, "error": error, "last_attempt_at": now, "lease_until": None}
            if error is None:
                self.queue.finish(session, [claim], {**done, "state": "delivered", "delivered_at": now})
            elif claim.attempt >= settings.webhook_max_attempts:
                self.queue.finish(session, [claim], {**done, "state": "failed"})
            else:
                self.queue.release(session, [claim], {**done, "not_before": now + self.backoff(claim.attempt)},
                                   count_attempt=True)

    def drain(self) -> int:
        """Dispatch, then attempt due deliveries until none is due; return how many attempts ran
        (nothing, not even a claim, while no webhook is registered)."""
        with self.services.db.read() as session:
            if session.scalar(select(Webhook.id).limit(1)) is None:
                return 0
        self.dispatch()
        total = 0
        while n := self.run_pending():
            total += n
        return total

    def wake(self) -> None:
        """Look for new events now."""
        self._wake.set()

    def start(self) -> None:
        """Deliver in a daemon thread until :meth:`close`."""
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name="kg-webhooks", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.drain()
            except Exception:  # noqa: BLE001 - the loop must survive a database hiccup
                log.exception("webhook delivery pass failed")
            self._wake.wait(self.poll_s)
            self._wake.clear()

    def stop(self) -> None:
        """Stop the thread (after its current pass); :meth:`drain` still delivers when called."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=self.services.settings.webhook_timeout_s + 5)
            self._thread = None

    def close(self) -> None:
        """Stop the thread; claims held go back to the queue."""
        self.stop()
        self.queue.close()


def _post(url: str, body: bytes, headers: dict[str, str], timeout_s: float) -> int:
    """POST ``body`` to ``url`` within ``timeout_s`` (each phase), following no redirect."""
    with httpx.Client(timeout=httpx.Timeout(timeout_s), follow_redirects=False, trust_env=False) as client:
        return client.post(url, content=body, headers=headers).status_code
