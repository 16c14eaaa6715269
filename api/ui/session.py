"""The console's session: a signed HttpOnly cookie, the caller it names, and CSRF tokens.

Signing in with an API key opens a session on the server (:func:`kg.access.open_console_session`:
a row keyed by the SHA-256 of a random id, the key's id, an expiry); the cookie holds that random
id and a CSRF token, never the key, signed with itsdangerous (HMAC over a timestamped payload,
``URLSafeTimedSerializer``) so that a browser cannot forge or alter it. It is ``HttpOnly`` (no
script reads it), ``SameSite=Strict`` (no other site's page sends it) and ``Secure`` when the
console is served over HTTPS. Every page reads the session and its key again
(:func:`kg.access.console_session_actor`): signing out ends the session for every copy of the
cookie, and revoking the key ends it at once, in every process.

Every state-changing form carries the session's CSRF token (a hidden ``csrf_token`` field, or
the ``X-CSRF-Token`` header htmx sends): the synchroniser-token pattern of the OWASP CSRF
Prevention Cheat Sheet. A POST without the right token is refused with 403 before anything runs.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from itsdangerous import BadSignature, URLSafeTimedSerializer

from kg.access import console_session_actor
from kg.context import ANONYMOUS, Actor
from kg.errors import Forbidden, Unauthenticated
from kg.services import Services
from kg.settings import Settings

#: The session cookie's name.
COOKIE = "kg_console"
#: The form field and the header that carry the CSRF token.
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "x-csrf-token"
_SALT = "kg-console-session"


#: Why the sign-in page is shown: the only messages it shows (a URL cannot make it say anything).
SIGN_IN_REASONS = {
    "required": "Sign in with an API key: this server requires one (KG_AUTH).",
    "ended": "Your console session ended: you signed out, it expired, or its key was revoked or expired. "
             "Sign in again.",
}


class SignInRequired(Exception):
    """The console needs a signed-in key (``KG_AUTH`` on and no valid session): the console's
    handler answers with a redirect to the sign-in page, not an error page.

    Parameters
    ----------
    reason : {"required", "ended"}
        A key of :data:`SIGN_IN_REASONS`.
    """

    def __init__(self, reason: str = "required") -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class ConsoleSession:
    """What the cookie holds.

    Attributes
    ----------
    sid : str or None
        The id of the server's session (:func:`kg.access.open_console_session`); None: nobody
        signed in.
    csrf : str
        The session's CSRF token (32 random bytes, URL-safe base64).
    """

    sid: str | None
    csrf: str

    @classmethod
    def fresh(cls, sid: str | None = None) -> ConsoleSession:
        """A new session with a new CSRF token."""
        return cls(sid=sid, csrf=secrets.token_urlsafe(32))


def signing_secret(settings: Settings) -> bytes:
    """The key that signs the cookie: ``KG_UI_SECRET``, else one derived from ``KG_KEY_PEPPER``
    (HMAC-SHA256 of a fixed label), else None (the caller draws a random one per process).

    Parameters
    ----------
    settings : Settings

    Returns
    -------
    bytes
        The secret; empty when neither setting is present.
    """
    if settings.ui_secret is not None and settings.ui_secret.get_secret_value().strip():
        return settings.ui_secret.get_secret_value().encode()
    if settings.key_pepper is not None and settings.key_pepper.get_secret_value().strip():
        return hmac.new(settings.key_pepper.get_secret_value().encode(), b"kg console session cookie",
                        hashlib.sha256).digest()
    return b""


class SessionCodec:
    """Signs and reads the session cookie.

    Parameters
    ----------
    settings : Settings
        ``ui_secret`` / ``key_pepper`` for the secret, ``ui_session_s`` for the lifetime.
    """

    def __init__(self, settings: Settings) -> None:
        secret = signing_secret(settings) or secrets.token_bytes(32)
        self._serializer = URLSafeTimedSerializer(secret, salt=_SALT)
        self._flashes = URLSafeTimedSerializer(secret, salt=_SALT + "-flash")
        self.max_age_s = settings.ui_session_s

    def dumps(self, session: ConsoleSession) -> str:
        """The cookie's value for ``session``."""
        return str(self._serializer.dumps({"s": session.sid, "c": session.csrf}))

    def flash(self, text: str) -> str:
        """``text`` signed, for a ``done=`` query parameter: a page shows a message only when
        the console itself made it (a link cannot make a page say anything)."""
        return str(self._flashes.dumps(text))

    def read_flash(self, token: str | None) -> str | None:
        """The message a :meth:`flash` token carries; None when absent, forged or older than 10 min."""
        if not token:
            return None
        try:
            text: Any = self._flashes.loads(token, max_age=600)
        except BadSignature:
            return None
        return text if isinstance(text, str) else None

    def loads(self, value: str | None) -> ConsoleSession | None:
        """The session a cookie holds; None when it is absent, forged, altered or too old."""
        if not value:
            return None
        try:
            data: Any = self._serializer.loads(value, max_age=int(self.max_age_s))
        except BadSignature:  # SignatureExpired is a BadSignature
            return None
        if not isinstance(data, dict) or not isinstance(data.get("c"), str):
            return None
        sid = data.get("s")
        return ConsoleSession(sid=sid if isinstance(sid, str) else None, csrf=data["c"])


def codec_of(request: Request) -> SessionCodec:
    """The app's :class:`SessionCodec` (made once, when the console is installed)."""
    codec: SessionCodec = request.app.state.console_codec
    return codec


def read_session(request: Request) -> ConsoleSession | None:
    """The request's session, None without a valid cookie."""
    return codec_of(request).loads(request.cookies.get(COOKIE))


def signed_in(request: Request) -> bool:
    """Whether the request carries the signed cookie of a signed-in session (the cookie's
    signature only: the session itself is checked by the page)."""
    session = read_session(request)
    return session is not None and session.sid is not None


def session_caller(services: Services, session: ConsoleSession | None) -> Actor:
    """Who a session is: its key's actor; without a sign-in, anonymous while ``KG_AUTH`` is off.

    Parameters
    ----------
    services : Services
    session : ConsoleSession or None

    Returns
    -------
    Actor

    Raises
    ------
    SignInRequired
        ``KG_AUTH`` is on and nobody signed in, or the session ended (signed out, expired) or its
        key is no longer valid (revoked, expired, deleted).
    """
    if session is None or session.sid is None:
        if services.settings.auth:
            raise SignInRequired("required")
        return ANONYMOUS
    try:
        return console_session_actor(services.db, services.settings, session.sid)
    except Unauthenticated:
        raise SignInRequired("ended") from None


def check_csrf(session: ConsoleSession | None, sent: str | None) -> None:
    """Refuse a state-changing request whose CSRF token is missing or wrong.

    Parameters
    ----------
    session : ConsoleSession or None
        The request's session.
    sent : str or None
        The token the form or the ``X-CSRF-Token`` header carried.

    Raises
    ------
    kg.errors.Forbidden
        No session, no token, or a token that is not the session's (compared in constant time).
    """
    if session is None or not sent or not hmac.compare_digest(session.csrf.encode(), sent.encode()):
        raise Forbidden("the form's CSRF token is missing or does not match your session: reload the page "
                        "and send it again", details={"reason": "csrf"})


def set_cookie(response: Any, request: Request, session: ConsoleSession) -> None:
    """Write ``session`` into ``response``'s cookie (HttpOnly, SameSite=Strict, Secure on HTTPS)."""
    codec = codec_of(request)
    response.set_cookie(COOKIE, codec.dumps(session), max_age=int(codec.max_age_s), httponly=True,
                        samesite="strict", secure=request.url.scheme == "https", path="/ui")
