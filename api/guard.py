"""Refuse request text the store cannot hold, before any route runs: lone UTF-16 surrogates
(not encodable as UTF-8), NUL characters (PostgreSQL text cannot hold them), and the JSON
constants NaN / Infinity (not JSON). Each is a kg error (:class:`kg.errors.InvalidInput`, 422,
or :class:`kg.errors.MalformedInput`, 400) answered by the one error mapper
(:func:`api.errors.error_response`) with the API's error shape, never a 500 or a stored value
that later breaks every read.

It also bounds the work one request can cause before any route runs: a body larger than
``Settings.max_body_bytes`` (``KG_MAX_BODY_BYTES``) is refused with 413
(:class:`kg.errors.TooLarge`) from its ``Content-Length`` before a byte of it is read, or, sent
without one (chunked), as soon as the bytes received pass the limit; and the JSON is parsed
and checked in a worker thread, so a large body never holds the event loop (``/health`` and
every other request are served meanwhile).

And it decides who may send a body at all before a byte of it is read (a body is memory held
for its sender):

- **Host**: while ``KG_AUTH`` is off (the server then listens on loopback only), a request whose
  ``Host`` is not a loopback name (``localhost``, a loopback address, with any port) nor one of
  ``KG_ALLOWED_HOSTS`` is refused with 421 (:class:`kg.errors.Misdirected`) on every path, and
  one whose ``Origin`` names another site with 403: a web page whose name was re-pointed at
  127.0.0.1 (DNS rebinding) reads and writes nothing.
- **Key**: on ``/api`` and ``/mcp`` (but ``/health``), the bearer key is checked here, by the
  one lookup the routes use (:func:`api.deps.caller_of_header`, with the key cache), and the
  caller left in the scope for them (``api.deps.CALLER``): with ``KG_AUTH`` on, a request
  without a valid key is answered 401 from its head alone. Elsewhere (the console's sign-in
  form) a request with no credentials may send :data:`ANONYMOUS_BODY_BYTES` at most.
- **Time**: a body must arrive within ``KG_BODY_TIMEOUT_S`` seconds, extended by one second
  per ``KG_BODY_MIN_BYTES_PER_S`` bytes received, and never pause longer than
  ``KG_BODY_TIMEOUT_S`` between two parts; slower, it is cut with 408
  (:class:`kg.errors.RequestTimeout`) and the connection closed.
- **Memory**: the bytes held by the bodies being received are bounded in all
  (``KG_MAX_BUFFERED_BODY_BYTES``, per process); past it, 503 with ``Retry-After``
  (:class:`kg.errors.Overloaded`).

A refusal made before the body is read closes the connection (``Connection: close``): the rest
of the body is never read."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import re
import tempfile
import time
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import IO, Any
from urllib.parse import parse_qsl, unquote, unquote_to_bytes

import anyio
import anyio.to_thread
from fastapi import Depends, Request, Response
from fastapi.dependencies.models import Dependant
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from api.deps import CALLER, caller_of_header
from api.errors import answer, error_response
from kg.access import Actor, authorize, may_somewhere
from kg.errors import (
    BackendUnavailable,
    Forbidden,
    InvalidInput,
    KGError,
    MalformedInput,
    Misdirected,
    Overloaded,
    RequestTimeout,
    TooLarge,
)
from kg.services import Services
from kg.text.storable import check_json, check_text


def _constant(name: str) -> Any:
    raise MalformedInput(f"{name} is not valid JSON")


def _check_target(scope: Scope) -> None:
    """Refuse a path or query string that holds text the store cannot hold."""
    check_text(scope.get("path", ""), "the path")
    raw_qs = scope.get("query_string", b"").decode("latin-1")
    for key, value in parse_qsl(raw_qs, keep_blank_values=True, errors="surrogateescape"):
        check_text(key, "a query parameter")
        check_text(value, f"query parameter {key!r}")
    check_text(unquote(scope.get("path", ""), errors="surrogateescape"), "the path")
    raw_path = scope.get("raw_path")
    if raw_path:
        # The server decodes the path with replacement characters: %ff%fe would land on
        # a node named "\ufffd\ufffd", as would any other invalid byte sequence.
        try:
            unquote_to_bytes(raw_path).decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidInput("the path is not valid UTF-8 once percent-decoded") from None


def _too_large(limit: int, length: int | None = None, *, setting: str = "max_body_bytes") -> TooLarge:
    """The 413 of a body over ``limit`` bytes, naming the setting that bounds it."""
    size = f"of {length} bytes " if length is not None else ""
    return TooLarge(f"the request body {size}is larger than the {limit} bytes this server accepts "
                    f"(KG_{setting.upper()})", details={setting: limit})


#: ``POST`` paths whose body is a file to import (``/api/repos/{repo}/import``): received into a
#: temporary file on disk, bounded by ``KG_MAX_IMPORT_BYTES``, never held in memory nor parsed
#: as JSON here.
UPLOAD_PATH = re.compile(r"^/api/repos/(?P<repo>[^/]+)/import$")
#: Where the guard leaves an upload's file (a binary file at its start) in the ASGI scope, for
#: the route; the guard closes it once the route has answered.
UPLOADED_FILE = "kg.uploaded_file"


def _declared_length(scope: Scope) -> int | None:
    """The request's Content-Length, None when absent or not a number."""
    for name, value in scope.get("headers", ()):
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


#: Where the guard leaves a body's parsed JSON in the ASGI scope, for :class:`GuardedRoute`.
PARSED_JSON = "kg.parsed_json"


def _parse_body(body: bytes, scope: Scope) -> None:
    """Parse and check a JSON body (run in a worker thread) and leave it in the scope; a body
    that is not JSON passes, for the route to answer 400 with its own message."""
    try:
        parsed = json.loads(body, parse_constant=_constant)
    except (ValueError, RecursionError):
        return
    check_json(parsed)
    scope[PARSED_JSON] = parsed


def _query_names(dependant: Dependant) -> set[str]:
    """The query parameter names a route declares, in itself and in its dependencies."""
    names: set[str] = set()
    stack, seen = [dependant], set()
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        for field in current.query_params:
            names.add(field.alias)
            choices = getattr(field.field_info.validation_alias, "choices", None)
            names.update(c for c in choices or () if isinstance(c, str))
        stack.extend(current.dependencies)
    return names


def refuse_unknown_query(request: Request) -> None:
    """Refuse a query parameter the matched route does not declare (a dependency of every
    :class:`GuardedRoute` under ``/api``), as bodies refuse unknown fields.

    Parameters
    ----------
    request : fastapi.Request
        The request; its matched route (``scope["route"]``) says which names it accepts.

    Raises
    ------
    kg.errors.InvalidInput
        422 naming the unknown parameters and the accepted ones (``details={"unknown": [...],
        "accepted": [...]}``).
    """
    route = request.scope.get("route")
    accepted = route.accepted_query if isinstance(route, GuardedRoute) else None
    if accepted is None:
        return
    unknown = sorted({key for key in request.query_params.keys() if key not in accepted})
    if unknown:
        names = ", ".join(sorted(accepted)) or "none"
        raise InvalidInput(f"unknown query parameter{'s' if len(unknown) > 1 else ''} "
                           f"{', '.join(repr(u) for u in unknown)}; this route accepts: {names}",
                           details={"unknown": unknown, "accepted": sorted(accepted)})


class GuardedRoute(APIRoute):
    """A route that takes the body's JSON as the guard parsed it (off the event loop), so
    FastAPI does not parse it a second time on the loop (``Request.json`` caches ``_json``).

    Under ``/api`` it also refuses query parameters it does not declare
    (:func:`refuse_unknown_query`, run after the router's own dependencies, so a missing key
    is still a 401 first)."""

    def __init__(self, path: str, endpoint: Any, **kwargs: Any) -> None:
        if path.startswith("/api/") or path == "/api":
            dependencies = list(kwargs.get("dependencies") or [])
            if not any(getattr(d, "dependency", None) is refuse_unknown_query for d in dependencies):
                dependencies.append(Depends(refuse_unknown_query))
            kwargs["dependencies"] = dependencies
        super().__init__(path, endpoint, **kwargs)
        self.accepted_query: frozenset[str] | None = (
            frozenset(_query_names(self.dependant)) if path.startswith("/api/") or path == "/api" else None)

    def get_route_handler(self) -> Any:
        """The route's handler, given the guard's parsed body first."""
        handler = super().get_route_handler()

        async def handle(request: Request) -> Response:
            if PARSED_JSON in request.scope:
                request._json = request.scope[PARSED_JSON]
            return await handler(request)

        return handle


#: The largest body a request with no credentials may send with ``KG_AUTH`` on, where a key is
#: not required (the console's sign-in form, which carries the key in its body).
ANONYMOUS_BODY_BYTES = 64 * 1024

#: Paths that answer without a key, auth on or off.
PUBLIC_PATHS = frozenset({"/health", "/api/health"})

_HOST = re.compile(r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<name>[^:\[\]/@\s]+))(?::(?P<port>[0-9]{1,5}))?$")


def _header(scope: Scope, wanted: bytes) -> str | None:
    """The value of the request's header ``wanted`` (lower case), None when absent."""
    for name, value in scope.get("headers", ()):
        if name.lower() == wanted:
            return str(value.decode("latin-1"))
    return None


def host_is_local(host: str | None, allowed: frozenset[str]) -> bool:
    """Whether a ``Host`` header names this machine's loopback, or one of ``allowed``.

    Parameters
    ----------
    host : str or None
        The header's value (``name[:port]``, ``[v6][:port]``); None when absent.
    allowed : frozenset of str
        Further names the operator allows (``KG_ALLOWED_HOSTS``), lower case.

    Returns
    -------
    bool
        True for ``localhost``, a loopback address (``127.0.0.0/8``, ``[::1]``) or a name of
        ``allowed``, with or without a port; False for anything else, an absent or malformed
        header included.

    Examples
    --------
    >>> [host_is_local(h, frozenset()) for h in ("localhost:8765", "127.0.0.1", "[::1]:80", "evil.example")]
    [True, True, True, False]
    """
    match = _HOST.match((host or "").strip())
    if match is None:
        return False
    name = (match.group("v6") or match.group("name")).lower()
    if name == "localhost" or name in allowed:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def origin_is_local(origin: str | None, allowed: frozenset[str]) -> bool:
    """Whether an ``Origin`` header is absent or names a page served from a local name
    (:func:`host_is_local`); ``null`` (a sandboxed or local file page) is not.

    Parameters
    ----------
    origin : str or None
        The header's value (``scheme://host[:port]``).
    allowed : frozenset of str
        As :func:`host_is_local`.

    Returns
    -------
    bool
    """
    if origin is None:
        return True
    scheme, sep, rest = origin.strip().partition("://")
    return bool(sep) and scheme.lower() in ("http", "https") and host_is_local(rest, allowed)


def _needs_key(path: str) -> bool:
    """Whether ``path`` is one the bearer key governs (the API and the MCP server)."""
    if path in PUBLIC_PATHS:
        return False
    return path in ("/api", "/mcp") or path.startswith(("/api/", "/mcp/"))


class BodyBudget:
    """The bytes held by request bodies being received in this process, and their bound.

    Used from the event loop only (no lock): :meth:`take` before a chunk is kept, :meth:`give`
    once the request is answered.

    Parameters
    ----------
    limit : int
        The most bytes held at once (``KG_MAX_BUFFERED_BODY_BYTES``).
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0

    def fits(self, n: int) -> bool:
        """Whether ``n`` more bytes would fit now."""
        return self.held + n <= self.limit

    def take(self, n: int) -> bool:
        """Hold ``n`` more bytes if they fit; whether they did."""
        if not self.fits(n):
            return False
        self.held += n
        return True

    def give(self, n: int) -> None:
        """Release ``n`` bytes taken before."""
        self.held -= n


def _write_all(file: IO[bytes], chunk: bytes) -> None:
    """Write ``chunk`` whole to an unbuffered file (a raw write may take part of it)."""
    view = memoryview(chunk)
    while view:
        written = file.write(view)
        view = view[written or 0:]
        if not written:
            raise OSError("the file to import could not be written")


def _may_import(scope: Scope, repo: str) -> None:
    """Refuse, before the body is read, a key that may write nowhere in ``repo``, the repository
    the import names (:func:`kg.access.may_somewhere`), as :func:`kg.access.authorize` refuses
    ``write`` on it: 403 where the key sees the repository, 404 where it does not (a repository
    it may not see is one it may not create either). Everything else (the branch, the
    workspaces, creating the repository) the use case decides; this only spares receiving a
    file that could not be written. Without a key (``KG_AUTH`` off) nothing is refused here."""
    caller = scope.get(CALLER)
    if isinstance(caller, Actor) and not may_somewhere(caller, "write", repo):
        authorize(caller, "write", repo)


def _unstorable(folder: Path, exc: OSError) -> BackendUnavailable:
    """The 503 of a file to import the server could not write (a full disk, a folder it may not
    write in): said with the folder, never a 500."""
    return BackendUnavailable(f"the server could not store the file to import in {folder}: "
                              f"{exc.strerror or exc}", details={"folder": str(folder)})


def _uploads_full(limit: int) -> Overloaded:
    """The 503 of a file to import while others hold the process's share of the disk."""
    return Overloaded("the server holds as many bytes of files to import as it may (KG_MAX_IMPORT_BYTES, "
                      "the files being received or imported); send it again once they are done",
                      retry_after_s=5.0, details={"max_import_bytes": limit})


def _overloaded(limit: int) -> Overloaded:
    return Overloaded("the server is receiving as many request bodies as it may hold "
                      "(KG_MAX_BUFFERED_BODY_BYTES); send it again shortly", retry_after_s=1.0,
                      details={"max_buffered_body_bytes": limit})


class RequestGuard:
    """ASGI middleware: checks the Host, the key, the path, the query string and JSON bodies;
    bounds a body's size, its time and the bytes all bodies hold.

    Parameters
    ----------
    app : ASGI application
    services : kg.services.Services
        Its settings (``KG_AUTH``, ``KG_ALLOWED_HOSTS``, ``KG_MAX_BODY_BYTES``,
        ``KG_BODY_TIMEOUT_S``, ``KG_BODY_MIN_BYTES_PER_S``, ``KG_MAX_BUFFERED_BODY_BYTES``),
        the store and the key cache (the key lookup).
    clock : callable() -> float
        A monotonic clock in seconds.
    """

    def __init__(self, app: ASGIApp, services: Services, clock: Callable[[], float] = time.monotonic) -> None:
        self.app = app
        self.services = services
        settings = services.settings
        self.max_body_bytes = settings.max_body_bytes
        self.max_import_bytes = settings.max_import_bytes
        self.upload_dir = settings.data_dir / "uploads"
        #: The bytes of files to import held on disk (received, or being imported) in this
        #: process: at most ``KG_MAX_IMPORT_BYTES`` in all, so that concurrent uploads (by any
        #: key, before the route decides its grants) cannot fill the disk.
        self.uploads = BodyBudget(settings.max_import_bytes)
        self.allowed_hosts = frozenset(h.strip().lower() for h in settings.allowed_hosts if h.strip())
        self.budget = BodyBudget(settings.max_buffered_body_bytes)
        self._clock = clock

    @staticmethod
    async def _refuse(exc: KGError, scope: Scope, receive: Receive, send: Send, *, close: bool = False) -> None:
        """Answer ``exc`` as the error handlers do (the API's JSON, the console's HTML page);
        ``close``: and close the connection (a body left unread is never read)."""
        response: JSONResponse | Response = error_response(exc)
        if "app" in scope:  # set by the application before its middleware runs
            response = answer(Request(scope), error_response(exc))
        if close:
            response.headers["connection"] = "close"
        await response(scope, receive, send)

    def _check_addressed(self, scope: Scope) -> None:
        """With auth off: refuse a Host (421) or an Origin (403) that is not local."""
        if self.services.settings.auth:
            return
        host = _header(scope, b"host")
        if not host_is_local(host, self.allowed_hosts):
            raise Misdirected("this server answers only requests addressed to localhost while KG_AUTH is off "
                              "(a name in KG_ALLOWED_HOSTS is allowed too)", details={"host": host})
        origin = _header(scope, b"origin")
        if not origin_is_local(origin, self.allowed_hosts):
            raise Forbidden("a page of another site may not call this server while KG_AUTH is off",
                            details={"origin": origin})

    async def _authenticate(self, scope: Scope) -> bool:
        """Check the caller before the body: on the API and MCP paths the bearer key (leaving
        the caller in the scope), elsewhere a signed-in console session. Whether the request
        carries credentials (a body without any is held to :data:`ANONYMOUS_BODY_BYTES` with
        ``KG_AUTH`` on)."""
        path = scope.get("path", "")
        header = _header(scope, b"authorization")
        if _needs_key(path):
            if header is None and not self.services.settings.auth:
                return False
            scope[CALLER] = await anyio.to_thread.run_sync(caller_of_header, self.services, header)
            return True
        signed_in: Callable[[Request], bool] | None = getattr(getattr(scope.get("app"), "state", None),
                                                              "console_signed_in", None)
        return signed_in is not None and signed_in(Request(scope))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            self._check_addressed(scope)
            _check_target(scope)
            credentials = await self._authenticate(scope)
        except KGError as exc:
            await self._refuse(exc, scope, receive, send, close=True)
            return
        upload = UPLOAD_PATH.match(scope.get("path", "")) if scope.get("method") == "POST" else None
        limit, setting = (self.max_import_bytes, "max_import_bytes") if upload else (self.max_body_bytes,
                                                                                      "max_body_bytes")
        if self.services.settings.auth and not credentials:
            limit = min(limit, ANONYMOUS_BODY_BYTES)
        declared = _declared_length(scope)
        if declared is not None and declared > limit:
            await self._refuse(_too_large(limit, declared, setting=setting), scope, receive, send, close=True)
            return
        if scope.get("method") not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        if upload:
            await self._upload(scope, receive, send, limit, upload.group("repo"))
            return
        if declared is not None and not self.budget.fits(declared):
            await self._refuse(_overloaded(self.budget.limit), scope, receive, send, close=True)
            return
        held = 0
        try:
            body, refusal = await self._read_body(scope, receive, limit)
            held = len(body) if body is not None else 0
            if refusal is not None:
                await self._refuse(refusal, scope, receive, send, close=True)
                return
            if body is None:  # the client went away
                return
            if body.strip():
                try:
                    await anyio.to_thread.run_sync(_parse_body, body, scope)
                except KGError as exc:
                    await self._refuse(exc, scope, receive, send)
                    return
            sent = False

            async def replay() -> MutableMapping[str, Any]:
                nonlocal sent
                if not sent:
                    sent = True
                    return {"type": "http.request", "body": body, "more_body": False}
                return await receive()

            await self.app(scope, replay, send)
        finally:
            self.budget.give(held)

    async def _read_body(self, scope: Scope, receive: Receive, limit: int) -> tuple[bytes | None, KGError | None]:
        """Receive the whole body, within its deadline and the budget: (the body, None), or
        (what was held, the refusal), or (None, None) when the client disconnected. Every byte
        returned is held in :attr:`budget` until the caller gives it back."""
        chunks: list[bytes] = []

        async def keep(chunk: bytes) -> KGError | None:
            if not self.budget.take(len(chunk)):
                return _overloaded(self.budget.limit)
            chunks.append(chunk)
            return None

        try:
            refusal, gone = await self._receive(receive, limit, "max_body_bytes", keep)
        except BaseException:
            self.budget.give(sum(map(len, chunks)))
            raise
        if gone:
            self.budget.give(sum(map(len, chunks)))
            return None, None
        return b"".join(chunks), refusal

    async def _upload(self, scope: Scope, receive: Receive, send: Send, limit: int, repo: str) -> None:
        """Receive a file to import into a temporary file of :attr:`upload_dir` (the same
        deadline as any body; bounded by ``limit`` and, with the other files being received or
        imported, by :attr:`uploads`, not by the memory budget: its bytes are on disk), then run
        the app with the file in the scope (:data:`UPLOADED_FILE`) and an empty body; the file
        is gone once the app has answered."""
        try:  # a key that may write nowhere the file could go sends no byte of it
            _may_import(scope, repo)
        except KGError as exc:
            await self._refuse(exc, scope, receive, send, close=True)
            return
        declared = _declared_length(scope)
        held = 0
        if declared is not None:  # the whole file's share, before a byte is read
            if not self.uploads.take(declared):
                await self._refuse(_uploads_full(self.uploads.limit), scope, receive, send, close=True)
                return
            held = declared

        def open_file() -> IO[bytes]:
            self.upload_dir.mkdir(parents=True, exist_ok=True)
            # unbuffered: a full disk is met by the write that fills it, not later by a seek or close
            return tempfile.TemporaryFile(prefix="kg-import-", dir=self.upload_dir, buffering=0)  # noqa: SIM115 (closed below)

        try:
            file = await anyio.to_thread.run_sync(open_file)
        except OSError as exc:
            self.uploads.give(held)
            await self._refuse(_unstorable(self.upload_dir, exc), scope, receive, send, close=True)
            return
        received = 0
        try:
            async def keep(chunk: bytes) -> KGError | None:
                nonlocal held, received
                received += len(chunk)
                if received > held:  # a streamed body (no Content-Length) takes its share as it comes
                    if not self.uploads.take(received - held):
                        return _uploads_full(self.uploads.limit)
                    held = received
                try:
                    await anyio.to_thread.run_sync(_write_all, file, chunk)
                except OSError as exc:  # a full disk: the rest of the body is not read
                    return _unstorable(self.upload_dir, exc)
                return None

            refusal, gone = await self._receive(receive, limit, "max_import_bytes", keep)
            if refusal is not None:
                await self._refuse(refusal, scope, receive, send, close=True)
                return
            if gone:
                return
            await anyio.to_thread.run_sync(file.seek, 0)
            scope[UPLOADED_FILE] = file
            sent = False

            async def empty() -> MutableMapping[str, Any]:
                nonlocal sent
                if not sent:
                    sent = True
                    return {"type": "http.request", "body": b"", "more_body": False}
                return await receive()

            await self.app(scope, empty, send)
        finally:
            scope.pop(UPLOADED_FILE, None)
            self.uploads.give(held)
            with contextlib.suppress(OSError):
                file.close()  # here, not in a worker: a cancelled request closes it too

    async def _receive(self, receive: Receive, limit: int, setting: str,
                       keep: Callable[[bytes], Awaitable[KGError | None]]) -> tuple[KGError | None, bool]:
        """Receive a body a part at a time, each given to ``keep`` (which may refuse it), within
        its deadline and ``limit`` (``setting`` names it in a 413): ``(None, False)`` once
        whole, ``(the refusal, False)``, or ``(None, True)`` when the client disconnected."""
        settings = self.services.settings
        started = last = self._clock()
        received = 0
        more = True
        while more:
            # The whole body: the timeout plus a second per min-rate bytes received; and no
            # pause longer than the timeout between two parts (sent fast, then held open).
            allowed = settings.body_timeout_s + received / settings.body_min_bytes_per_s
            deadline = min(started + allowed, last + settings.body_timeout_s)
            message: MutableMapping[str, Any] | None = None
            with anyio.move_on_after(max(0.0, deadline - self._clock())):
                message = await receive()
            last = self._clock()
            if message is None:
                return RequestTimeout(
                    f"the request body did not arrive in time: {received} bytes in "
                    f"{self._clock() - started:.1f} s (KG_BODY_TIMEOUT_S={settings.body_timeout_s:g}, "
                    f"KG_BODY_MIN_BYTES_PER_S={settings.body_min_bytes_per_s})",
                    details={"received_bytes": received, "body_timeout_s": settings.body_timeout_s,
                             "body_min_bytes_per_s": settings.body_min_bytes_per_s}), False
            if message["type"] == "http.disconnect":
                return None, True
            chunk = message.get("body", b"")
            if received + len(chunk) > limit:  # a streamed body (no Content-Length, or a false one)
                return _too_large(limit, setting=setting), False
            refusal = await keep(chunk)
            if refusal is not None:
                return refusal, False
            received += len(chunk)
            more = message.get("more_body", False)
        return None, False
