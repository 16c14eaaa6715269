"""A request of the HTTP API as data: what both clients send, and how an answer is read.

Each operation of :mod:`kg.client.operations` builds a :class:`Call` (method, path, query, body
and the decoder of its answer); :class:`kg.client.Client` and :class:`kg.client.AsyncClient` only
send it. Everything that is not I/O lives here once: the URL, the query's encoding, the answer's
model, the error's class (:func:`kg.errors.error_from_body`) and the wait before a retry.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from kg.errors import KGError, error_from_body

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

#: The server's address when neither the argument nor ``KG_URL`` gives one (``kg serve``'s default).
DEFAULT_URL = "http://127.0.0.1:8765"
#: The statuses whose ``Retry-After`` a client honours: 429 rate limited, 503 overloaded.
RETRY_STATUSES = frozenset({429, 503})

Decoder = Callable[[int, bytes], T]


def returns(model: type[M]) -> Decoder[M]:
    """The decoder of an answer that is always ``model``."""
    return lambda status, content: model.model_validate_json(content)


def returns_by_status(models: Mapping[int, type[BaseModel]], default: type[M]) -> Decoder[Any]:
    """The decoder of an answer whose model depends on its status (``invoke``: 200 output, 202 job)."""
    return lambda status, content: models.get(status, default).model_validate_json(content)


def returns_bytes(status: int, content: bytes) -> bytes:
    """The decoder of an answer that is a file (an export): its bytes as they came."""
    return content


def returns_nothing(status: int, content: bytes) -> None:
    """The decoder of a 204."""
    return None


@dataclass(frozen=True)
class Call(Generic[T]):
    """One HTTP request of the API and the type of its answer.

    Attributes
    ----------
    method : str
        ``GET``, ``POST``, ...
    template : str
        The operation's path as the OpenAPI document writes it (``/api/repos/{repo}``).
    decode : callable
        ``(status, body bytes) -> T`` for a 2xx answer.
    path_params : dict
        The template's values, quoted when the URL is made (``branch`` and ``path`` keep ``/``).
    query : dict
        Query parameters; ``None`` values are left out.
    body : dict, optional
        The JSON body; ``None`` values are left out.
    content : bytes, optional
        A body of raw bytes instead (a file to import), sent as ``content_type``.
    content_type : str, optional
    """

    method: str
    template: str
    decode: Decoder[T]
    path_params: dict[str, str] = field(default_factory=dict)
    query: dict[str, Any] = field(default_factory=dict)
    body: dict[str, Any] | None = None
    content: bytes | None = None
    content_type: str | None = None

    @property
    def path(self) -> str:
        """The template with its values, percent-encoded."""
        values = {name: quote(value.lstrip("/") if name == "path" else value, safe="/" if name in ("branch", "path")
                              else "") for name, value in self.path_params.items()}
        return self.template.format(**values)

    def params(self) -> dict[str, str]:
        """The query as strings: booleans ``true``/``false``, datetimes ISO 8601, lists comma-separated."""
        return {name: _query_value(value) for name, value in self.query.items() if value is not None}

    def json(self) -> Any:
        """The body as JSON values (models by alias, datetimes ISO 8601), ``None`` fields left out."""
        if self.body is None:
            return None
        return to_jsonable_python({k: v for k, v in self.body.items() if v is not None}, by_alias=True,
                                  exclude_none=True)

    def next_page(self, **query: Any) -> Call[T]:
        """The same call with ``query`` changed (the next page's cursor)."""
        return replace(self, query={**self.query, **query})

    def answer(self, response: httpx.Response) -> T:
        """The answer's model; a kg error for a 4xx or 5xx.

        Raises
        ------
        kg.errors.KGError
            The class of the body's ``error.code`` (:func:`kg.errors.error_from_body`), with its
            message and details; a body that is not kg's error shape gives a :class:`KGError`
            naming the status.
        """
        if response.is_success:
            return self.decode(response.status_code, response.content)
        raise error_of(response)


def error_of(response: httpx.Response) -> KGError:
    """The kg error of a refused request."""
    try:
        error = response.json()["error"]
        if not isinstance(error, dict):
            raise TypeError(type(error).__name__)
    except (ValueError, KeyError, TypeError):
        exc = KGError(f"HTTP {response.status_code}: {response.text[:200]}",
                      details={"status": response.status_code})
        exc.code = "http_error"
        return exc
    return error_from_body(error, retry_after_s=retry_after(response))


def retry_after(response: httpx.Response) -> float | None:
    """The answer's ``Retry-After`` in seconds (delay-seconds or an HTTP-date), None without one."""
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, (when - datetime.now(when.tzinfo)).total_seconds())


def retry_delay(response: httpx.Response, attempt: int, max_retries: int) -> float | None:
    """How long to wait before sending the request again, or None to answer now.

    Parameters
    ----------
    response : httpx.Response
        The answer to attempt ``attempt`` (0 for the first).
    attempt, max_retries : int
        A request is sent at most ``1 + max_retries`` times.

    Returns
    -------
    float or None
        ``Retry-After`` of a 429 or 503 that has one, while retries are left.
    """
    if response.status_code not in RETRY_STATUSES or attempt >= max_retries:
        return None
    return retry_after(response)


def _query_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


@dataclass(frozen=True)
class Connection:
    """What both clients share: where the server is, the key, and how to retry.

    Attributes
    ----------
    base_url : str
        Without a trailing ``/``.
    headers : dict
        ``Authorization: Bearer <key>`` when there is a key.
    max_retries : int
        Retries after a 429 or 503 with ``Retry-After``.
    """

    base_url: str
    headers: dict[str, str]
    max_retries: int

    @classmethod
    def of(cls, base_url: str | None, api_key: str | None, max_retries: int) -> Connection:
        """From the arguments, else ``KG_URL`` (default :data:`DEFAULT_URL`) and ``KG_API_KEY``."""
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        url = base_url or os.environ.get("KG_URL") or DEFAULT_URL
        key = api_key if api_key is not None else os.environ.get("KG_API_KEY")
        return cls(url.rstrip("/"), {"Authorization": f"Bearer {key}"} if key else {}, max_retries)

    def request(self, call: Call[Any]) -> dict[str, Any]:
        """The keyword arguments of ``httpx.Client.request`` for ``call``."""
        sent: dict[str, Any] = {"method": call.method, "url": self.base_url + call.path, "params": call.params()}
        if call.content is None:
            return {**sent, "json": call.json(), "headers": self.headers}
        return {**sent, "content": call.content,
                "headers": {**self.headers, "content-type": call.content_type or "application/octet-stream"}}
