"""The one error tree of kg.

::

    KGError
    ├── NotFound            unknown repository, branch, workspace, node, relation, job
    ├── Unauthenticated     no API key, or an unknown, revoked or expired one (KG_AUTH on)
    ├── Forbidden           an action outside the key's grants on something it can see
    ├── RateLimited         more expensive calls than the caller's token bucket allows
    ├── Overloaded          the server holds as many request bodies as it may (KG_MAX_BUFFERED_BODY_BYTES)
    ├── Misdirected         a Host (or Origin) this server does not answer for (KG_AUTH off)
    ├── RequestTimeout      a request body that did not arrive in time (KG_BODY_TIMEOUT_S)
    ├── Conflict            exists already, stale revision, node has children
    │   ├── MergeConflict   a merge that cannot be applied without resolutions
    │   └── ModelLocked     a workspace's embedding settings changed without re-embedding
    ├── InvalidInput        valid JSON that breaks a rule (bad path, overlap >= size, ...)
    │   ├── MalformedInput  input that cannot be parsed at all
    │   └── TooLarge        more than a configured limit (body bytes, chunks per request)
    ├── BackendUnavailable  an index or database that cannot be reached
    │   └── UpstreamUnavailable  a named external service (a Weaviate URL) that cannot be used
    └── ProviderError       an embedder or LLM failed or answered something unusable

Vendor errors (SQLAlchemy, onnxruntime, httpx) are translated into this tree at the boundary,
``raise ... from exc``. Every error class of kg is defined here and drawn above, with its own
``code`` (kg's error code); ``api/errors.py`` maps each class to one HTTP status
(``tests/api/test_errors.py`` holds both to it); the CLI maps every ``KGError`` to exit code 1.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "BackendUnavailable", "Conflict", "ERROR_CLASSES", "Forbidden", "InvalidInput", "KGError",
    "MalformedInput", "MergeConflict", "Misdirected", "ModelLocked", "NotFound", "Overloaded",
    "ProviderError", "RateLimited", "RequestTimeout", "TooLarge", "Unauthenticated", "UpstreamUnavailable",
    "error_body", "error_from_body", "invalid_fields",
]


class KGError(Exception):
    """Base of every error kg raises on purpose.

    Parameters
    ----------
    message : str
        One line for a person.
    details : dict, optional
        Machine-readable context (the offending field, the conflicting value, ...).
    """

    code = "error"

    def __init__(self, message: str, *, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or {}


def error_body(code: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """The one error shape of every surface (docs/reference/errors.md): HTTP answers, MCP tool errors,
    and the answers ``kg serve`` gives to requests that are not HTTP at all.

    Parameters
    ----------
    code : str
        A kg error code (:attr:`KGError.code`, or one of the HTTP layer's own).
    message : str
        One line for a person.
    details : dict, optional
        Machine-readable context; ``{}`` when omitted.

    Returns
    -------
    dict
        ``{"error": {"code", "message", "details"}}``.
    """
    return {"error": {"code": code, "message": message, "details": details or {}}}


class NotFound(KGError):
    """An addressed object does not exist (or is not visible on the branch)."""

    code = "not_found"


class Unauthenticated(KGError):
    """No API key where one is required, or a key that is unknown, revoked or expired."""

    code = "unauthenticated"


class Forbidden(KGError):
    """The caller can see the object, but none of its grants allows the action."""

    code = "forbidden"


class RateLimited(KGError):
    """The caller made more expensive calls (ask, extract-entities, re-embed, the RAG node)
    than ``KG_RATE_EXPENSIVE_PER_MIN`` and ``KG_RATE_EXPENSIVE_BURST`` allow (HTTP 429).

    Parameters
    ----------
    message : str
        One line for a person.
    retry_after_s : float
        Seconds until the same call would be admitted, > 0 (HTTP: the ``Retry-After`` header,
        rounded up to whole seconds).
    details : dict, optional
        Machine-readable context (:func:`kg.context.throttle` gives ``retry_after_s``, the
        limit and the burst).
    """

    code = "rate_limited"

    def __init__(self, message: str, *, retry_after_s: float = 1.0, details: dict[str, Any] | None = None) -> None:
        super().__init__(message, details=details)
        self.retry_after_s = retry_after_s


class Overloaded(KGError):
    """The server already holds as many bytes of request bodies as ``KG_MAX_BUFFERED_BODY_BYTES``
    allows (HTTP 503 with ``Retry-After``): a server-wide bound, whoever sends them.

    Parameters
    ----------
    message : str
        One line for a person.
    retry_after_s : float
        Seconds after which the request may be sent again, > 0 (HTTP: ``Retry-After``).
    details : dict, optional
        Machine-readable context.
    """

    code = "overloaded"

    def __init__(self, message: str, *, retry_after_s: float = 1.0, details: dict[str, Any] | None = None) -> None:
        super().__init__(message, details=details)
        self.retry_after_s = retry_after_s


class Misdirected(KGError):
    """A request addressed to a name this server does not answer for: while ``KG_AUTH`` is off,
    a ``Host`` other than a loopback one (or a name in ``KG_ALLOWED_HOSTS``), the mark of a
    DNS-rebinding page (HTTP 421); an ``Origin`` of another site is :class:`Forbidden`."""

    code = "misdirected"


class RequestTimeout(KGError):
    """A request body that did not arrive within ``KG_BODY_TIMEOUT_S`` at the rate
    ``KG_BODY_MIN_BYTES_PER_S`` (HTTP 408; the connection is closed)."""

    code = "request_timeout"


class Conflict(KGError):
    """The request clashes with the current state (exists already, stale, has children)."""

    code = "conflict"


class MergeConflict(Conflict):
    """A merge found changes on both sides that it will not resolve silently."""

    code = "merge_conflict"


class ModelLocked(Conflict):
    """A workspace's embedding model (or chunking) cannot change without re-embedding."""

    code = "model_locked"


class InvalidInput(KGError):
    """Well-formed input that breaks a rule of kg (bad path, chunk overlap >= size, ...)."""

    code = "invalid_input"


def invalid_fields(problems: Any, *, prefix: str = "") -> InvalidInput:
    """The :class:`InvalidInput` of the problems pydantic found in some input.

    One definition of how a field-by-field refusal reads, wherever the input came from (a
    search request, an MCP tool's arguments): the message names the first field, as the
    HTTP API's does (``"k: Input should be a valid integer"``); the details list them all.

    Parameters
    ----------
    problems : pydantic.ValidationError or list of dict
        The error, or its ``errors()`` (each with ``loc``, ``msg`` and ``type``).
    prefix : str
        Put before the message (``"invalid embedding configuration: "``).

    Returns
    -------
    InvalidInput
        Message ``"<loc>: <msg>"`` (the first problem; its ``loc`` joined by ``.``); details
        ``{"errors": [{"loc": [str, ...], "msg", "type"}, ...]}``.
    """
    listed = problems.errors(include_url=False) if hasattr(problems, "errors") else list(problems)
    first = listed[0] if listed else {"loc": (), "msg": "invalid input"}
    where = ".".join(str(part) for part in first.get("loc", ()))
    return InvalidInput(f"{prefix}{where}: {first['msg']}" if where else f"{prefix}{first['msg']}",
                        details={"errors": [{"loc": [str(part) for part in p.get("loc", ())], "msg": p.get("msg", ""),
                                             "type": p.get("type", "")} for p in listed]})


class MalformedInput(InvalidInput):
    """Input that cannot be parsed at all (malformed JSON, wrong types)."""

    code = "malformed"


class TooLarge(InvalidInput):
    """A request larger than a limit the operator configured (``KG_MAX_BODY_BYTES``,
    ``KG_MAX_CHUNKS_PER_REQUEST``): refused before the work is done (HTTP 413)."""

    code = "too_large"


class BackendUnavailable(KGError):
    """A database or index backend that cannot be reached or is not installed."""

    code = "backend_unavailable"


class UpstreamUnavailable(BackendUnavailable):
    """A service the request named (a Weaviate URL) cannot be reached or used: never a
    silent fallback to another backend."""

    code = "upstream_unavailable"


class ProviderError(KGError):
    """An embedder or LLM failed, or answered something that cannot be used."""

    code = "provider_error"


def _tree(root: type[KGError]) -> list[type[KGError]]:
    """``root`` and every class below it, parents first."""
    return [root, *(cls for sub in root.__subclasses__() for cls in _tree(sub))]


#: The class of each error code: every class of the tree above, by its ``code``. The one mapping
#: from an answer's ``error.code`` back to the error (:func:`error_from_body`; the HTTP client).
ERROR_CLASSES: dict[str, type[KGError]] = {cls.code: cls for cls in _tree(KGError)}


def error_from_body(error: dict[str, Any], *, retry_after_s: float | None = None) -> KGError:
    """The kg error an error body names: the inverse of :func:`error_body`.

    Parameters
    ----------
    error : dict
        The body's ``error`` object: ``{"code", "message", "details"}``.
    retry_after_s : float, optional
        The answer's ``Retry-After`` (seconds), kept on :class:`RateLimited` and :class:`Overloaded`.

    Returns
    -------
    KGError
        An instance of the code's class (:data:`ERROR_CLASSES`) with the message and details; a
        code no class has (``method_not_allowed``, ``internal``) gives a :class:`KGError` whose
        ``code`` is that code.

    Examples
    --------
    >>> err = error_from_body({"code": "merge_conflict", "message": "2 conflicts", "details": {"n": 2}})
    >>> type(err).__name__, isinstance(err, Conflict), err.details
    ('MergeConflict', True, {'n': 2})
    >>> error_from_body({"code": "method_not_allowed", "message": "Method Not Allowed"}).code
    'method_not_allowed'
    """
    code = str(error.get("code", KGError.code))
    message = str(error.get("message", ""))
    details = error.get("details") if isinstance(error.get("details"), dict) else None
    cls = ERROR_CLASSES.get(code, KGError)
    if issubclass(cls, (RateLimited, Overloaded)):
        return cls(message, retry_after_s=retry_after_s or 1.0, details=details)
    exc = cls(message, details=details)
    if cls is KGError:
        exc.code = code
    return exc
