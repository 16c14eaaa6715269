"""What every console page shares: the Jinja2 environment, the request's :class:`Console`
(services, caller, session), rendering, form reading and the HTML error pages.

Pages are thin adapters: they read the request, call one kg function as the signed-in caller,
and render a template. Access is decided by those functions; the console only asks
:meth:`Console.may` whether to draw a button, and a POST without the right is still refused
by the function it calls.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import jinja2
from fastapi import Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from api.ui.session import (
    CSRF_FIELD,
    CSRF_HEADER,
    ConsoleSession,
    SignInRequired,
    check_csrf,
    codec_of,
    read_session,
    session_caller,
    set_cookie,
)
from kg.access import authorize
from kg.context import Actor
from kg.errors import InvalidInput, KGError
from kg.ops.branches import home_branch
from kg.services import Services
from kg.text.storable import check_text

TEMPLATES = Path(__file__).parent / "templates"
STATIC = Path(__file__).parent / "static"
#: The longest form field the console accepts, in characters (a node's properties as JSON).
MAX_FIELD_CHARS = 1_000_000


def ui_url(path: str, /, **params: Any) -> str:
    """A console URL: ``path`` under ``/ui`` with ``params`` as its query (None values left out).

    Parameters
    ----------
    path : str
        ``"/r/peps/node"``, relative to ``/ui``.
    **params
        Query parameters; a list gives the parameter once per item.

    Returns
    -------
    str

    Examples
    --------
    >>> ui_url("/r/peps/node", branch="agent/s1", path="/a b", at_revision=None)
    '/ui/r/peps/node?branch=agent%2Fs1&path=%2Fa+b'
    """
    query = urlencode([(k, item) for k, v in params.items() if v is not None
                       for item in (v if isinstance(v, list | tuple) else [v])])
    return f"/ui{path}" + (f"?{query}" if query else "")


def age(when: str | datetime | None, now: datetime | None = None) -> str:
    """How long ago ``when`` was, for a person: ``"42 s"``, ``"5 min"``, ``"3 h"``, ``"2 d"``.

    Parameters
    ----------
    when : str (ISO 8601) or datetime or None
    now : datetime, optional
        Default: the current time (UTC).

    Returns
    -------
    str
        ``""`` for None.

    Examples
    --------
    >>> age("2026-01-01T00:00:00+00:00", datetime(2026, 1, 1, 3, tzinfo=UTC))
    '3 h'
    """
    if when is None:
        return ""
    moment = datetime.fromisoformat(when) if isinstance(when, str) else when
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    seconds = max(0.0, ((now or datetime.now(UTC)) - moment).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{math.floor(seconds / size)} {unit}"
    return f"{int(seconds)} s"


def duration(seconds: float | None) -> str:
    """A span of time for a person: ``"20 s"``, ``"3 min 20 s"``, ``"2 h 5 min"``.

    Parameters
    ----------
    seconds : float or None
        The span, in seconds (negative counts as 0).

    Returns
    -------
    str
        Whole seconds under a minute, then the two largest units; ``""`` for None.

    Examples
    --------
    >>> duration(20.4), duration(200), duration(7500), duration(None)
    ('20 s', '3 min 20 s', '2 h 5 min', '')
    """
    if seconds is None:
        return ""
    whole = max(0, round(seconds))
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60} min"


def pretty(value: Any) -> str:
    """``value`` as indented JSON (keys sorted), for a ``<pre>``; escaped by the template."""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def compact(value: Any, limit: int = 200) -> str:
    """``value`` as one line of JSON, cut at ``limit`` characters with an ellipsis."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


#: Headers of every console page: scripts and styles only from the console itself (no inline
#: script, no CDN), no framing by another site (clickjacking), no MIME sniffing, no referrer
#: leaving the server (a URL can name a branch or a path).
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
                               "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; "
                               "form-action 'self'; base-uri 'none'; object-src 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def harden(response: Response) -> Response:
    """Set :data:`SECURITY_HEADERS` on ``response``; returns it."""
    response.headers.update(SECURITY_HEADERS)
    return response


ENV = jinja2.Environment(
    loader=jinja2.FileSystemLoader(TEMPLATES),
    autoescape=True,  # every value from the store is escaped: a node named <script> is text
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
ENV.globals["ui_url"] = ui_url
ENV.filters["age"] = age
ENV.filters["duration"] = duration
ENV.filters["pretty"] = pretty
ENV.filters["compact"] = compact


@dataclass
class Console:
    """One console request: who calls, as what, and how to answer.

    Attributes
    ----------
    request : Request
    services : Services
    caller : Actor
        The signed-in key's actor (anonymous while ``KG_AUTH`` is off and nobody signed in).
    session : ConsoleSession
        The request's session (a fresh one is set as the cookie when it had none).
    form : dict of str to str
        A POST's form fields (the last value of a repeated field; :meth:`values` gives all).
    """

    request: Request
    services: Services
    caller: Actor
    session: ConsoleSession
    fresh: bool = False
    form: dict[str, str] = field(default_factory=dict)
    multi: dict[str, list[str]] = field(default_factory=dict)

    @property
    def htmx(self) -> bool:
        """Whether htmx sent the request (it answers with a fragment, not a page)."""
        return self.request.headers.get("hx-request") == "true"

    @property
    def who(self) -> str:
        """The caller's name for the header: the key's name, or ``anonymous``."""
        return self.caller.name or self.caller.kind

    def may(self, action: str, repo: str, branch: str | None = None, workspace: str | None = None) -> bool:
        """Whether the caller's grants allow ``action`` there (to draw a button or not)."""
        try:
            authorize(self.caller, action, repo, branch, workspace)  # type: ignore[arg-type]
        except KGError:
            return False
        return True

    def render(self, template: str, status: int = 200, **context: Any) -> HTMLResponse:
        """The HTML of ``template`` with ``context``, the console's globals and the cookie."""
        html = ENV.get_template(template).render(console=self, csrf=self.session.csrf, **context)
        response = HTMLResponse(html, status_code=status)
        self.keep(response)
        harden(response)
        return response

    def redirect(self, url: str) -> Response:
        """See ``url`` next: ``HX-Redirect`` for htmx, else 303 See Other (POST-redirect-GET)."""
        response: Response = (Response(status_code=200, headers={"HX-Redirect": url}) if self.htmx
                              else RedirectResponse(url, status_code=303))
        self.keep(response)
        return response

    def home_branch(self, repo: str, named: str | None) -> str:
        """``named`` (stripped), or the branch a page opens on for this caller
        (:func:`kg.ops.branches.home_branch`: ``main`` when it may read it)."""
        if named is not None and named.strip():
            return named.strip()
        return home_branch(self.services, self.caller, repo)

    def flash(self, text: str) -> str:
        """``text`` as a signed ``done=`` parameter (:meth:`SessionCodec.flash`)."""
        return codec_of(self.request).flash(text)

    def flashed(self, token: str | None) -> str | None:
        """The message of a ``done=`` parameter the console made; None for any other text."""
        return codec_of(self.request).read_flash(token)

    def keep(self, response: Response) -> None:
        """Set the session cookie on ``response`` when this request made the session."""
        if self.fresh:
            set_cookie(response, self.request, self.session)

    def field(self, name: str, default: str | None = None, *, required: bool = False) -> str | None:
        """A form field's value, stripped; ``default`` when absent or blank.

        Raises
        ------
        kg.errors.InvalidInput
            ``required`` and absent or blank.
        """
        value = self.form.get(name, "").strip()
        if not value:
            if required:
                raise InvalidInput(f"the form field {name!r} is required")
            return default
        return value

    def values(self, name: str) -> list[str]:
        """Every value of a repeated form field, in order."""
        return self.multi.get(name, [])


def _console(request: Request) -> Console:
    services: Services = request.app.state.services
    session = read_session(request)
    caller = session_caller(services, session)
    if session is None:
        return Console(request, services, caller, ConsoleSession.fresh(), fresh=True)
    return Console(request, services, caller, session)


def page(request: Request) -> Console:
    """Dependency of a console GET: the request's :class:`Console`.

    Raises
    ------
    SignInRequired
        ``KG_AUTH`` is on and nobody (or a key no longer valid) is signed in.
    """
    return _console(request)


async def action(request: Request) -> Console:
    """Dependency of a console POST: the :class:`Console` with its form read and its CSRF token
    checked (before the route runs anything).

    Raises
    ------
    kg.errors.Forbidden
        Missing or wrong CSRF token.
    kg.errors.InvalidInput
        A field over :data:`MAX_FIELD_CHARS`, or with a NUL or a lone surrogate.
    SignInRequired
        As :func:`page`.
    """
    session = read_session(request)
    data = await request.form()
    multi: dict[str, list[str]] = {}
    for name, value in data.multi_items():
        if not isinstance(value, str):
            raise InvalidInput(f"the form field {name!r} must be text, not a file")
        check_text(name, "a form field's name")
        check_text(value, f"the form field {name!r}")
        if len(value) > MAX_FIELD_CHARS:
            raise InvalidInput(f"the form field {name!r} is longer than {MAX_FIELD_CHARS} characters")
        multi.setdefault(name, []).append(value)
    fields = multi.get(CSRF_FIELD)
    sent = request.headers.get(CSRF_HEADER) or (fields[-1] if fields else None)
    check_csrf(session, sent)
    assert session is not None  # check_csrf refused a request without one
    services: Services = request.app.state.services
    caller = session_caller(services, session)
    return Console(request, services, caller, session, form={k: v[-1] for k, v in multi.items()}, multi=multi)


def error_page(request: Request, status: int, code: str, message: str, details: dict[str, Any]) -> Response | None:
    """The console's answer to an error on a ``/ui`` path (None for any other path, which keeps
    the API's JSON shape): an HTML page, or for htmx a fragment, with the same status.

    Parameters
    ----------
    request : Request
    status : int
        The HTTP status :mod:`api.errors` chose.
    code, message : str
        The error's code and its one line for a person.
    details : dict
        The error's details (a merge conflict's ``conflicts``).

    Returns
    -------
    Response or None
    """
    if not (request.url.path == "/ui" or request.url.path.startswith("/ui/")):
        return None
    htmx = request.headers.get("hx-request") == "true"
    html = ENV.get_template("_error.html" if htmx else "error.html").render(
        status=status, code=code, message=message, details=details, console=None, csrf="")
    return harden(HTMLResponse(html, status_code=status))


def sign_in_redirect(request: Request, exc: SignInRequired) -> Response:
    """Send a person without a valid session to the sign-in page, then back where they were."""
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    url = ui_url("/login", next=target if request.method == "GET" else None, reason=exc.reason)
    if request.headers.get("hx-request") == "true":
        return Response(status_code=200, headers={"HX-Redirect": url})
    return RedirectResponse(url, status_code=303)

