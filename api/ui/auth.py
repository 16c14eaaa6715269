"""Signing in and out, the console's home and the repository list."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlsplit

from fastapi import APIRouter, Depends, Request
from fastapi.responses import RedirectResponse, Response

from api.ui.core import ENV, Console, action, harden, page, ui_url
from api.ui.session import CSRF_FIELD, ConsoleSession, check_csrf, read_session, set_cookie
from kg.access import authenticate
from kg.errors import Unauthenticated
from kg.ops import repos as repo_ops

router = APIRouter(prefix="/ui")
PageDep = Annotated[Console, Depends(page)]
ActionDep = Annotated[Console, Depends(action)]


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
    """The sign-in form. It ends any session the browser had (a key no longer valid would
    otherwise send every page back here) and keeps its CSRF token for the form."""
    old = read_session(request)
    session = ConsoleSession(key=None, csrf=old.csrf) if old else ConsoleSession.fresh()
    services = request.app.state.services
    html = ENV.get_template("login.html").render(console=None, csrf=session.csrf, next=_safe_next(next),
                                                 reason=reason, error=None, auth=services.settings.auth)
    response = harden(Response(html, media_type="text/html"))
    set_cookie(response, request, session)
    return response


@router.post("/login")
async def login(request: Request) -> Response:
    """Check the key and start a session for it (a new CSRF token: no fixation)."""
    form = await request.form()
    session = read_session(request)
    sent = form.get(CSRF_FIELD)
    check_csrf(session, sent if isinstance(sent, str) else None)
    services = request.app.state.services
    key = form.get("key")
    nxt = form.get("next")
    target = _safe_next(nxt if isinstance(nxt, str) else None)
    try:
        if not isinstance(key, str) or not key.strip():
            raise Unauthenticated("enter an API key")
        authenticate(services.db, services.settings, key.strip(), services.key_cache)
    except Unauthenticated as exc:
        assert session is not None
        html = ENV.get_template("login.html").render(console=None, csrf=session.csrf, next=target, reason=None,
                                                     error=exc.message, auth=services.settings.auth)
        return harden(Response(html, status_code=401, media_type="text/html"))
    response = RedirectResponse(target, status_code=303)
    set_cookie(response, request, ConsoleSession.fresh(key.strip()))
    return response


@router.post("/logout")
def logout(console: ActionDep) -> Response:
    """End the session (a new anonymous one, with a new CSRF token)."""
    response = RedirectResponse("/ui/login", status_code=303)
    set_cookie(response, console.request, ConsoleSession.fresh())
    return response


@router.get("/repos")
def repositories(console: PageDep) -> Response:
    """The repositories the key may read."""
    repos = repo_ops.list_repositories(console.services, console.caller)
    return console.render("repos.html", section="repos", repos=repos)
