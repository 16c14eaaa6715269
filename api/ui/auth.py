"""Signing in and out, the console's home and the repository list."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlsplit

from fastapi import APIRouter, Depends, Request
from fastapi.responses import RedirectResponse, Response

from api.ui.core import ENV, Console, harden, page, ui_url
from api.ui.session import CSRF_FIELD, SIGN_IN_REASONS, ConsoleSession, check_csrf, read_session, set_cookie
from kg.access import end_console_session, open_console_session
from kg.errors import Unauthenticated
from kg.ops import repos as repo_ops

router = APIRouter(prefix="/ui")
PageDep = Annotated[Console, Depends(page)]


def _safe_next(target: str | None) -> str:
    """Where to go after signing in: a console path only (never another site: an open redirect)."""
    if not target:
        return "/ui"
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not parts.path.startswith("/ui") or target.startswith("//"):
        return "/ui"
    return target


@router.get("")
def home(console: PageDep) -> Response:
    """The console's home: the repository list, or the only repository's branches."""
    return console.redirect(ui_url("/repos"))


@router.get("/login")
def login_form(request: Request, next: str | None = None, reason: str | None = None) -> Response:
    """The sign-in form. Opening it changes nothing: a session the browser has stays as it is
    (only ``POST /ui/logout`` ends one); a browser without one gets one for the form's CSRF
    token. ``reason`` is a key of :data:`api.ui.session.SIGN_IN_REASONS` (any other text is not
    shown: a link cannot make the page say anything)."""
    session = read_session(request)
    fresh = session is None
    session = session or ConsoleSession.fresh()
    services = request.app.state.services
    html = ENV.get_template("login.html").render(console=None, csrf=session.csrf, next=_safe_next(next),
                                                 reason=SIGN_IN_REASONS.get(reason or ""), error=None,
                                                 auth=services.settings.auth, signed_in=session.sid is not None)
    response = harden(Response(html, media_type="text/html"))
    if fresh:
        set_cookie(response, request, session)
    return response


@router.post("/login")
async def login(request: Request) -> Response:
    """Check the key and open a session on the server for it; the cookie gets the session's id
    and a new CSRF token (no fixation), never the key."""
    form = await request.form()
    session = read_session(request)
    sent = form.get(CSRF_FIELD)
    check_csrf(session, sent if isinstance(sent, str) else None)
    assert session is not None
    services = request.app.state.services
    key = form.get("key")
    nxt = form.get("next")
    target = _safe_next(nxt if isinstance(nxt, str) else None)
    try:
        if not isinstance(key, str) or not key.strip():
            raise Unauthenticated("enter an API key")
        sid, _ = open_console_session(services.db, services.settings, key.strip(), services.key_cache)
    except Unauthenticated as exc:
        html = ENV.get_template("login.html").render(console=None, csrf=session.csrf, next=target, reason=None,
                                                     error=exc.message, auth=services.settings.auth,
                                                     signed_in=session.sid is not None)
        return harden(Response(html, status_code=401, media_type="text/html"))
    if session.sid is not None:
        end_console_session(services.db, session.sid)  # signing in again ends the previous sign-in
    response = RedirectResponse(target, status_code=303)
    set_cookie(response, request, ConsoleSession.fresh(sid))
    return response


@router.post("/logout")
async def logout(request: Request) -> Response:
    """End the session on the server (every copy of the cookie is refused from now on) and give
    the browser a new anonymous one with a new CSRF token. Works on a session that has already
    ended (a revoked key), so a person is never stuck."""
    form = await request.form()
    session = read_session(request)
    sent = form.get(CSRF_FIELD)
    check_csrf(session, sent if isinstance(sent, str) else None)
    assert session is not None
    if session.sid is not None:
        end_console_session(request.app.state.services.db, session.sid)
    response = RedirectResponse("/ui/login", status_code=303)
    set_cookie(response, request, ConsoleSession.fresh())
    return response


@router.get("/repos")
def repositories(console: PageDep) -> Response:
    """The repositories the key may read."""
    repos = repo_ops.all_repositories(console.services, console.caller).repos
    return console.render("repos.html", section="repos", repos=repos)
