"""Connections to Weaviate: URLs, connecting with a readiness check, and a pool of clients.

:func:`connect` opens one ``weaviate.WeaviateClient`` (REST and gRPC) and checks it answers;
:class:`ClientPool` keeps connected clients for the RAG node, which names its Weaviate per
request. The configured index (:class:`~kg.index.weaviate.index.WeaviateVectorIndex`) holds a
client of its own.
"""

from __future__ import annotations

import logging
import threading
import urllib.parse
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from kg.errors import BackendUnavailable, InvalidInput, KGError
from kg.index.weaviate.errors import _one_line, import_weaviate

log = logging.getLogger(__name__)


def parse_weaviate_url(url: str) -> dict[str, Any]:
    """Split a Weaviate URL into the REST and gRPC endpoints the v4 client needs.

    Parameters
    ----------
    url : str
        ``http[s]://host[:port][?grpc_port=N&grpc_host=H]``. The REST port defaults to the
        scheme's (80 or 443); gRPC goes to the same host on port 50051 (Weaviate's default),
        secure exactly when the URL is ``https``.

    Returns
    -------
    dict
        Keyword arguments of ``weaviate.connect_to_custom``: ``http_host``, ``http_port``,
        ``http_secure``, ``grpc_host``, ``grpc_port``, ``grpc_secure``.

    Raises
    ------
    kg.errors.InvalidInput
        Not an http(s) URL with a host, a bad port, or REST and gRPC on one host and port.

    Examples
    --------
    >>> parse_weaviate_url("http://localhost:8080")["grpc_port"]
    50051
    """
    if not isinstance(url, str) or not url.strip():
        raise InvalidInput("the Weaviate URL is empty", details={"url": url})
    parts = urllib.parse.urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidInput(
            f"the Weaviate URL {url!r} must look like http://host:8080 or https://host",
            details={"url": url},
        )
    try:
        query = dict(urllib.parse.parse_qsl(parts.query, strict_parsing=bool(parts.query)))
        http_port = parts.port or (443 if parts.scheme == "https" else 80)
        grpc_port = int(query.pop("grpc_port", 50051))
    except ValueError as exc:
        raise InvalidInput(f"the Weaviate URL {url!r} has a bad port: {exc}", details={"url": url}) from exc
    grpc_host = query.pop("grpc_host", parts.hostname)
    if query:
        raise InvalidInput(
            f"the Weaviate URL {url!r} has unknown parameters {sorted(query)} "
            "(allowed: grpc_port, grpc_host)",
            details={"url": url},
        )
    if not 0 < grpc_port < 65536:
        raise InvalidInput(f"the Weaviate gRPC port {grpc_port} is out of range", details={"url": url})
    if grpc_host == parts.hostname and grpc_port == http_port:
        raise InvalidInput(
            f"the Weaviate URL {url!r} puts REST and gRPC on one port; give ?grpc_port=N",
            details={"url": url},
        )
    secure = parts.scheme == "https"
    return {
        "http_host": parts.hostname,
        "http_port": http_port,
        "http_secure": secure,
        "grpc_host": grpc_host,
        "grpc_port": grpc_port,
        "grpc_secure": secure,
    }


def connect(
    url: str,
    *,
    api_key: str | None = None,
    timeout_s: float = 30.0,
    init_timeout_s: float = 5.0,
    error: type[BackendUnavailable] = BackendUnavailable,
) -> Any:
    """Connect to a Weaviate instance (``url``: see :func:`parse_weaviate_url`; ``api_key`` None or
    empty for an unauthenticated one) and check that it answers, REST and gRPC, within
    ``init_timeout_s``; the caller closes the client.

    ``error`` is what an unusable server raises (naming it unreachable, refusing the key, or
    its gRPC port silent): :class:`~kg.errors.BackendUnavailable` for the configured index
    (503), :class:`~kg.errors.UpstreamUnavailable` for a URL a request named (502). A missing
    extra is always ``BackendUnavailable``; a malformed URL ``InvalidInput``.
    """
    weaviate = import_weaviate()
    from weaviate.classes.init import AdditionalConfig, Auth, Timeout

    params = parse_weaviate_url(url)
    config = AdditionalConfig(
        timeout=Timeout(init=init_timeout_s, query=timeout_s, insert=max(timeout_s, 60.0))
    )
    auth = Auth.api_key(api_key) if api_key else None
    try:
        # The client's own start-up checks also ask pypi.org for its latest release (up to
        # init_timeout_s on a machine without internet): kg checks readiness itself instead.
        client = weaviate.connect_to_custom(
            **params, auth_credentials=auth, additional_config=config, skip_init_checks=True
        )
        try:
            ready = client.is_ready()
        except Exception:
            client.close()
            raise
        if not ready:
            client.close()
            raise error(f"Weaviate at {url} is not ready (GET /v1/.well-known/ready)",
                        details={"url": url})
        return client
    except weaviate.exceptions.WeaviateBaseError as exc:
        raise error(
            f"cannot connect to Weaviate at {url} (REST port {params['http_port']}, gRPC port "
            f"{params['grpc_port']}): {_one_line(exc)}",
            details={"url": url},
        ) from exc
    except (OSError, ValueError) as exc:  # DNS failures, pydantic validation of the params
        raise error(f"cannot connect to Weaviate at {url}: {_one_line(exc)}",
                    details={"url": url}) from exc
    except KGError:
        raise
    except Exception as exc:  # an answer that is not Weaviate's (the client raises KeyError, ...)
        raise error(f"Weaviate at {url} answered what kg cannot use: {type(exc).__name__}: {_one_line(exc)}",
                    details={"url": url}) from exc


class ClientPool:
    """Connected Weaviate clients reused across requests, one per (URL, API key, timeout).

    The RAG node names its Weaviate per request (``weaviateUrl``); connecting each time costs a
    readiness round trip and new REST and gRPC connections. The pool keeps the
    ``max_clients`` most recently used clients; one is closed when it is evicted and no request
    holds it, and dropped (closed once idle) after a request through it failed with
    ``error``, so the next request reconnects.

    Parameters
    ----------
    max_clients : int
        Clients kept open at most (idle ones beyond it are closed).

    Notes
    -----
    Thread-safe; a client is shared by concurrent requests, as the configured index shares its
    own.
    """

    def __init__(self, max_clients: int = 8) -> None:
        self.max_clients = max(1, int(max_clients))
        self._entries: dict[tuple[str, str, float], _PoolEntry] = {}
        self._lock = threading.Lock()

    @contextmanager
    def lease(self, url: str, *, api_key: str | None = None, timeout_s: float = 30.0,
              init_timeout_s: float = 5.0,
              error: type[BackendUnavailable] = BackendUnavailable) -> Iterator[Any]:
        """A connected client for the duration of a ``with`` block (see :func:`connect`).

        Raises
        ------
        kg.errors.BackendUnavailable
            As :func:`connect`, as ``error``.
        """
        key = (url, api_key or "", float(timeout_s))
        with self._lock:
            entry = self._entries.pop(key, None)
            if entry is not None:
                self._entries[key] = entry  # most recently used last
                entry.users += 1
        if entry is None:
            client = connect(url, api_key=api_key, timeout_s=timeout_s,
                             init_timeout_s=init_timeout_s, error=error)
            with self._lock:
                entry = self._entries.get(key)
                if entry is None:
                    entry = self._entries[key] = _PoolEntry(client)
                    client = None
                entry.users += 1
                idle = self._evict()
            if client is not None:  # another request connected meanwhile: use its client
                client.close()
            _close_all(idle)
        failed = False
        try:
            yield entry.client
        except error:
            failed = True
            raise
        finally:
            with self._lock:
                entry.users -= 1
                if failed and self._entries.get(key) is entry:
                    del self._entries[key]
                    entry.retired = True
                done = entry.retired and entry.users == 0
            if done:
                _close_all([entry])

    def close(self) -> None:
        """Close every idle client; those in use close when their request ends."""
        with self._lock:
            entries, self._entries = list(self._entries.values()), {}
            idle = []
            for entry in entries:
                entry.retired = True
                if entry.users == 0:
                    idle.append(entry)
        _close_all(idle)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def _evict(self) -> list[_PoolEntry]:
        """Retire the least recently used entries beyond ``max_clients`` (lock held); return
        those no request holds, to close outside the lock."""
        idle = []
        while len(self._entries) > self.max_clients:
            oldest = next(iter(self._entries))
            entry = self._entries.pop(oldest)
            entry.retired = True
            if entry.users == 0:
                idle.append(entry)
        return idle


@dataclass
class _PoolEntry:
    client: Any
    users: int = 0
    retired: bool = False


def _close_all(entries: Sequence[_PoolEntry]) -> None:
    for entry in entries:
        try:
            entry.client.close()
        except Exception:  # closing is best effort; the connection is gone either way
            log.debug("closing a Weaviate client failed", exc_info=True)
