"""API keys through the MCP SDK's token verification (bearer tokens on streamable HTTP).

The SDK's bearer middleware hands the token of ``Authorization: Bearer kg_<id>_<secret>`` to
:class:`KeyVerifier`, which asks :func:`kg.access.authenticate` (the HTTP API's own check: hash,
revocation, expiry) and answers a :class:`KeyToken` carrying the caller, or None: the SDK then
refuses the request with 401 before any MCP message is read. Inside a handler,
:func:`caller_of_request` reads the caller back from the SDK's request context.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Annotated

import anyio.to_thread
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from pydantic import SkipValidation

from kg.access import ANONYMOUS, Actor, KeyCache, authenticate
from kg.errors import Forbidden, KGError, Unauthenticated
from kg.settings import Settings
from kg.store.db import Database

#: Why :class:`KeyVerifier` refused the current request's key (the SDK keeps only "refused").
_REFUSAL: ContextVar[Unauthenticated | None] = ContextVar("kg_mcp_key_refusal", default=None)
#: What a request without a key is told (the HTTP API's words).
KEY_REQUIRED = "an API key is required: Authorization: Bearer kg_<id>_<secret>"


class KeyToken(AccessToken):
    """The SDK's access token of a kg API key, with the caller it identifies.

    Attributes
    ----------
    actor : kg.access.Actor
        The key as a caller: its name and grants, read when the request arrived.
    """

    actor: Annotated[Actor, SkipValidation]


class KeyVerifier:
    """The SDK's ``TokenVerifier`` for kg's API keys.

    Parameters
    ----------
    db : kg.store.db.Database
        Where the keys are stored.
    settings : kg.settings.Settings
        The pepper, the protected branches, how often ``last_used_at`` is written.
    cache : kg.access.KeyCache or None
        The process's key cache (as the HTTP API's lookup): over HTTP the request guard has
        just checked the same key, so this check finds it there.
    """

    def __init__(self, db: Database, settings: Settings, cache: KeyCache | None = None) -> None:
        self.db = db
        self.settings = settings
        self.cache = cache

    async def verify_token(self, token: str) -> AccessToken | None:
        """The access token of ``token``, or None for a key that is malformed, unknown,
        revoked or expired.

        Parameters
        ----------
        token : str
            ``kg_<id>_<secret>`` as sent after ``Bearer``.

        Returns
        -------
        KeyToken or None
            The token with the key's caller; None refuses the request (401).
        """
        try:
            actor = await anyio.to_thread.run_sync(authenticate, self.db, self.settings, token, self.cache)
        except Unauthenticated as exc:
            _REFUSAL.set(exc)
            return None
        return KeyToken(token=token, client_id=actor.key_id or "", scopes=[], actor=actor)


def caller_of_request() -> Actor:
    """The caller of the current streamable HTTP request.

    Returns
    -------
    kg.access.Actor
        The key the SDK's bearer middleware verified; :data:`kg.access.ANONYMOUS` when the
        request carried none (only possible while ``KG_AUTH`` is off).
    """
    token = get_access_token()
    return token.actor if isinstance(token, KeyToken) else ANONYMOUS


def forget_refusal() -> None:
    """Start a request with no refusal recorded (:func:`refusal_of_request`)."""
    _REFUSAL.set(None)


def refusal_of_request(status: int, has_key: bool, description: str = "") -> KGError:
    """The kg error of a request the SDK's bearer middleware refused.

    Parameters
    ----------
    status : int
        The SDK's status: 401 (no valid key) or 403 (a key without what the resource needs).
    has_key : bool
        Whether the request carried an ``Authorization`` header.
    description : str
        The SDK's own words, for a 403.

    Returns
    -------
    kg.errors.KGError
        A 401's :class:`kg.errors.Unauthenticated`: why :class:`KeyVerifier` refused the key
        (unknown, revoked, expired: :func:`kg.access.authenticate`'s message), or that a key is
        required; a 403's :class:`kg.errors.Forbidden`.
    """
    if status == 403:
        return Forbidden(description or "this API key may not use the MCP endpoint")
    refused = _REFUSAL.get()
    if refused is not None:
        return refused
    return Unauthenticated("invalid API key" if has_key else KEY_REQUIRED)
