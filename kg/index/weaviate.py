"""The Weaviate search index: the :class:`~kg.index.base.VectorIndex` contract over Weaviate.

Selected by ``KG_INDEX=weaviate`` with ``KG_WEAVIATE_URL`` (and ``KG_WEAVIATE_API_KEY``); it
needs the optional extra ``pip install 'kg[weaviate]'`` (the official ``weaviate-client``, v4
API). A missing extra or an unreachable server is a :class:`~kg.errors.BackendUnavailable`
(HTTP 503), never a silent fallback to the embedded index.

Layout in Weaviate
------------------
kg's workspaces: one collection per (workspace, branch) and embedding model, filled by
:meth:`WeaviateVectorIndex.place` from SQL's node versions (``kg.indexing.chunks.sync_placements``)::

    KgChunks_<sha256(repo_key)[:12]>_<sha256(model)[:10]>_w<workspace id>_b<branch id>
        vectorizer "none", HNSW, cosine distance; description = JSON {"kg": "chunks",
        "format": 1, "repo", "model", "dim", "workspace", "branch"}
        content     text    the passage, returned by searches (not indexed)
        terms       text    kg's BM25 analyzer output (kg.index.tokenize), whitespace-tokenized
        contentKey  text    field-tokenized, filterable
        chunkIndex  int
        seq         int     the chunk's row id in SQL
        versionKey  text    "{node_id}:{content_key}", field-tokenized: the visibility filter
        nodeId, path, nodeType  text, field-tokenized, filterable
        props       text[]  one property_pair per scalar property, field-tokenized

(the model is in the name because a Weaviate vector index has one dimension; a workspace embeds
with one model at a time). The SQL ids make the names stable and collision-free (branch ids are
never reused), and a collection is created on its branch's first write: a new branch reads its
ancestors' collections and is searchable at once, with nothing copied. A search passes one
:class:`~kg.index.base.SearchScope` per (workspace, branch) that provides visible versions, with
the version keys SQL resolved for the searched branch state (so what a branch rewrote or
deleted is hidden, and an ancestor is read as of the fork); the search's path, type and
property filters are sent as well where the objects carry the searched versions' own values.
Rows of several collections are merged: exactly by distance; BM25 and hybrid scores each come
from their own collection's statistics (see :meth:`WeaviateVectorIndex.bm25`).

The :class:`~kg.index.base.VectorIndex` protocol's own ``sync`` (content-addressed chunks, the
contract every index fulfils) fills one shared collection per repository and model,
``KgChunks_<sha256(repo_key)[:12]>_<sha256(model)[:10]>``, with the properties above up to
``seq``; kg's searches use the scoped collections (``scoped = True``).

The ``terms`` property carries kg's own analysis (NFKC case folding, CJK bigrams, Lucene's stop
words, English stemming), so full-text search matches what the embedded index matches, without
Weaviate's optional GSE tokenizer; the collection's own stop-word list is switched off.

A collection ``KgIndexState`` holds per repository the ``sync`` watermark and the two placement
marks (head revision and chunk seq placed). A mark advances only after every object up to it
was acknowledged, so a batch that failed half-way leaves no hole below it: the caller redoes the
pass from the old mark, and deterministic object ids (:func:`object_id`) make the retry
overwrite instead of duplicate.

Large allowed sets
------------------
Up to :attr:`WeaviateVectorIndex.filter_batch_keys` keys (default 1,000; content keys, or
version keys in a scoped collection) go into one ``ContainsAny`` filter. Above that, a search
first asks Weaviate for a deeper top list (``probe_depth``) without the key filter (with the
search's translated filters, if any) and keeps the allowed rows client-side; when that yields
``k`` rows whose last score is strictly above the deepest probed score, they are the exact top
``k`` (every row outside the probe scores lower). Otherwise the keys are split into batches of
``filter_batch_keys``, each batch is one filtered query for the top ``k``, and the batches are
merged: exact, since a chunk's score does not depend on the filter (cosine distance; BM25 uses
collection-wide statistics). The probe makes the common case (a branch that sees most of the
repository) one query; the batches bound the size of any one filter.

:meth:`WeaviateVectorIndex.hybrid` is the exception: a fused score depends on the filtered set
(ranks within each filtered leg for ranked fusion, the legs' minimum and maximum for relative-score
fusion), so neither an unfiltered probe nor merged batches give Weaviate's filtered answer. A
hybrid search is always one query whose filter is an ``Or`` of ``ContainsAny`` batches of at most
``filter_batch_keys`` keys each.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import threading
import urllib.parse
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from kg.errors import BackendUnavailable, InvalidInput, KGError
from kg.index.base import (
    IndexedChunk,
    IndexHit,
    Placement,
    SearchScope,
    checked_vectors,
    fresh_chunks,
    query_vector,
)
from kg.index.tokenize import analyze
from kg.providers.registry import canonical_model_name

__all__ = [
    "ClientPool",
    "FUSION_TYPES",
    "HybridResult",
    "KG_UUID_NAMESPACE",
    "WeaviateVectorIndex",
    "check_batch_result",
    "check_vector_dimension",
    "connect",
    "import_weaviate",
    "insert_objects",
    "object_id",
    "parse_weaviate_url",
    "property_pair",
    "translate_filters",
    "vendor_errors",
]

log = logging.getLogger(__name__)

KG_UUID_NAMESPACE = uuid.UUID("5f1c0a52-8a4e-5d0b-9a57-3c6a1e0d4b21")
"""Namespace of kg's uuid5 object ids (fixed: changing it would orphan every stored object)."""

FUSION_TYPES: dict[str, str] = {"ranked": "RANKED", "relative_score": "RELATIVE_SCORE"}
"""kg's names of Weaviate's hybrid fusion types -> members of ``HybridFusion``."""

MAX_QUERY_RESULTS = 10_000
"""Weaviate's default ``QUERY_MAXIMUM_RESULTS``: a query's ``limit + offset`` may not exceed it."""

STATE_COLLECTION = "KgIndexState"
CHUNKS_PREFIX = "KgChunks_"
_INSERT_BATCH = 256
_MAX_PAIR_TEXT = 256


# -- the client ------------------------------------------------------------------------------------


def import_weaviate() -> Any:
    """The ``weaviate`` package, imported on first use.

    Returns
    -------
    module
        ``weaviate`` (weaviate-client v4).

    Raises
    ------
    kg.errors.BackendUnavailable
        The optional extra is not installed; the message says how to install it.
    """
    try:
        import weaviate
        import weaviate.classes  # noqa: F401  (Filter, DataObject, MetadataQuery, ...)
    except ImportError as exc:
        raise BackendUnavailable(
            "the Weaviate backend needs the optional extra: pip install 'kg[weaviate]' "
            f"(weaviate-client v4); import failed: {exc}",
            details={"extra": "weaviate"},
        ) from exc
    return weaviate


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
    """Connect to a Weaviate instance and check that it answers (REST and gRPC).

    Parameters
    ----------
    url : str
        See :func:`parse_weaviate_url`.
    api_key : str, optional
        Weaviate API key; ``None`` or ``""`` for an unauthenticated instance.
    timeout_s : float
        Timeout of queries and inserts, in seconds.
    init_timeout_s : float
        Timeout of the connection checks, in seconds: an unreachable server fails this fast.
    error : type
        The kg error raised when the server cannot be used: :class:`~kg.errors.BackendUnavailable`
        for the configured index (503), :class:`~kg.errors.UpstreamUnavailable` for a URL a
        request named (502).

    Returns
    -------
    weaviate.WeaviateClient
        Connected; the caller closes it (``client.close()``).

    Raises
    ------
    kg.errors.BackendUnavailable
        The extra is missing (always this class), or, as ``error``, the server is unreachable,
        refuses the key, or its gRPC port does not answer.
    kg.errors.InvalidInput
        A malformed URL.
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


@contextmanager
def vendor_errors(action: str, error: type[BackendUnavailable] = BackendUnavailable) -> Iterator[None]:
    """Translate weaviate-client errors raised inside the block into ``error`` (``from exc``).

    Parameters
    ----------
    action : str
        What was being done, for the message (``"query collection KgChunks_..."``).
    error : type
        :class:`~kg.errors.BackendUnavailable` or a subclass.
    """
    weaviate = import_weaviate()
    try:
        yield
    except KGError:
        raise
    except weaviate.exceptions.WeaviateBaseError as exc:
        raise error(f"Weaviate failed to {action}: {_one_line(exc)}",
                    details={"action": action}) from exc


def _one_line(exc: object, limit: int = 500) -> str:
    """An exception's message on one line, at most ``limit`` characters."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


# -- pure parts ------------------------------------------------------------------------------------


def object_id(collection: str, branch: str, source: str, chunk_index: int, model: str) -> uuid.UUID:
    """The deterministic Weaviate id of one chunk, so a retried batch overwrites, never duplicates.

    Parameters
    ----------
    collection : str
        The kg repository key, or the RAG collection's class key (lower-case class name).
    branch : str
        The branch the object belongs to; ``""`` for the content-addressed kg index, whose
        chunks every branch shares.
    source : str
        The node's content key, or the RAG file name.
    chunk_index : int
        Position of the chunk in its source, from 0; ``-1`` for a collection's meta object.
    model : str
        Embedding model name.

    Returns
    -------
    uuid.UUID
        ``uuid5(KG_UUID_NAMESPACE, json.dumps([collection, branch, source, chunk_index, model]))``:
        the JSON array keeps the parts apart (no two tuples give one string).

    Raises
    ------
    kg.errors.InvalidInput
        A part of the wrong type.

    References
    ----------
    .. [1] P. Leach, M. Mealling and R. Salz, "A Universally Unique IDentifier (UUID) URN
       Namespace", RFC 4122, 2005, section 4.3 (name-based UUIDs, version 5).
    """
    if not all(isinstance(p, str) for p in (collection, branch, source, model)) or isinstance(
        chunk_index, bool
    ) or not isinstance(chunk_index, int):
        raise InvalidInput(
            "object ids need str collection, branch, source, model and an int chunk index",
            details={"chunk_index": repr(chunk_index)},
        )
    name = json.dumps([collection, branch, source, chunk_index, model], ensure_ascii=False)
    return uuid.uuid5(KG_UUID_NAMESPACE, name)


def translate_filters(
    *,
    content_keys: Collection[str] | None = None,
    version_keys: Collection[str] | None = None,
    path_prefix: str | None = None,
    node_type: str | None = None,
    where: Mapping[str, Any] | None = None,
) -> Any:
    """kg's search filters as one Weaviate filter (``weaviate.classes.query.Filter``).

    Parameters
    ----------
    content_keys : collection of str, optional
        ``contentKey`` ``ContainsAny`` the keys (the visibility filter of the shared,
        content-addressed collections).
    version_keys : collection of str, optional
        ``versionKey`` ``ContainsAny`` the keys (``"{node_id}:{content_key}"``: the visibility
        filter of a (workspace, branch) collection).
    path_prefix : str, optional
        ``path`` ``Like`` ``prefix*`` (a field-tokenized ``path`` property); ``"/"`` is no filter.
    node_type : str, optional
        ``nodeType`` ``Equal``.
    where : mapping of str to value, optional
        Node property equality, on the ``props`` array of a (workspace, branch) collection,
        which holds one :func:`property_pair` per scalar property: a str (up to 256
        characters), int, float or bool value becomes ``props`` ``ContainsAll`` its pair. Other
        values (None, lists, objects, longer strings) add no condition: SQL compares them,
        and a translated filter only ever narrows what SQL already allowed.

    Returns
    -------
    weaviate filter or None
        The conditions joined with ``Filter.all_of`` (one condition alone as itself); ``None``
        when nothing filters.

    Raises
    ------
    kg.errors.InvalidInput
        ``content_keys`` or ``version_keys`` given but empty or a single ``str``; a path prefix
        holding Like's wildcards ``*`` or ``?`` (they cannot be escaped); a property name that
        is not a str.
    kg.errors.BackendUnavailable
        The weaviate extra is not installed.

    Notes
    -----
    Pure: builds filter objects, talks to no server. O(len(content_keys) + len(where)).
    """
    import_weaviate()
    from weaviate.classes.query import Filter

    parts = []
    for prop, given, label in (("contentKey", content_keys, "content_keys"),
                               ("versionKey", version_keys, "version_keys")):
        if given is None:
            continue
        if isinstance(given, str):
            raise InvalidInput(f"{label} must be a collection of keys, not one str")
        keys = list(dict.fromkeys(given))
        if not keys:
            raise InvalidInput(f"{label} is empty: a search over no key has no filter",
                               details={label: []})
        parts.append(Filter.by_property(prop).contains_any(keys))
    if path_prefix is not None and path_prefix != "/":
        if not isinstance(path_prefix, str) or not path_prefix.startswith("/"):
            raise InvalidInput(f"path prefix {path_prefix!r} must start with /",
                               details={"path_prefix": path_prefix})
        if "*" in path_prefix or "?" in path_prefix:
            raise InvalidInput(
                f"path prefix {path_prefix!r} holds * or ?, which Weaviate's Like filter reads "
                "as wildcards and cannot escape",
                details={"path_prefix": path_prefix},
            )
        parts.append(Filter.by_property("path").like(path_prefix + "*"))
    if node_type is not None:
        if not isinstance(node_type, str):
            raise InvalidInput("node_type must be a string", details={"node_type": repr(node_type)})
        parts.append(Filter.by_property("nodeType").equal(node_type))
    pairs = []
    for name, value in (where or {}).items():
        if not isinstance(name, str):
            raise InvalidInput(f"property name {name!r} must be a str", details={"property": repr(name)})
        pair = property_pair(name, value)
        if pair is not None:
            pairs.append(pair)
    if pairs:
        parts.append(Filter.by_property("props").contains_all(pairs))
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else Filter.all_of(parts)


def property_pair(name: str, value: Any) -> str | None:
    """One scalar node property as the string a (workspace, branch) collection stores in its
    ``props`` array, or None for a value that is not stored (and so never filtered on).

    Parameters
    ----------
    name : str
    value : Any
        A str of at most 256 characters, an int, float or bool; anything else gives None.

    Returns
    -------
    str or None
        ``"{name}=s:{value}"`` for a str; ``"{name}=n:{repr(float(value))}"`` for a number or
        bool. Two values equal in Python (``1``, ``1.0``, ``True``) give one pair, so the
        translated filter never excludes what SQL's comparison admits; ints too large for a
        float, NaN and infinities give None.
    """
    if isinstance(value, str):
        return f"{name}=s:{value}" if len(value) <= _MAX_PAIR_TEXT else None
    if isinstance(value, (bool, int, float)):
        try:
            number = float(value)
        except OverflowError:
            return None
        # + 0.0 makes -0.0 into 0.0: equal in Python, one pair here
        return f"{name}=n:{number + 0.0!r}" if math.isfinite(number) else None
    return None


def check_batch_result(
    result: Any,
    labels: Sequence[str],
    *,
    collection: str,
    error: type[BackendUnavailable] = BackendUnavailable,
) -> None:
    """Raise for every object a Weaviate batch refused; return quietly when all were stored.

    Parameters
    ----------
    result : weaviate BatchObjectReturn
        What ``collection.data.insert_many`` answered: ``errors`` maps the index of each
        failed object in the batch to an ``ErrorObject`` (``message``, ``original_uuid``);
        ``has_errors`` says whether any failed.
    labels : sequence of str, length n_objects
        A name per object of the batch, in batch order (``"seq 12"``, ``"file a.txt chunk 3"``).
    collection : str
        The collection written, for the message.
    error : type
        The kg error class to raise.

    Raises
    ------
    kg.errors.BackendUnavailable
        (as ``error``) naming each failed object, its uuid and Weaviate's message; the full
        list is in ``details["failed"]`` as ``[{"index", "object", "uuid", "message"}]``.
    """
    errors = dict(getattr(result, "errors", None) or {})
    if not errors and not getattr(result, "has_errors", False):
        return
    failed = []
    for index, err in sorted(errors.items()):
        label = labels[index] if 0 <= index < len(labels) else f"object #{index}"
        uid = getattr(err, "original_uuid", None)
        failed.append({"index": index, "object": label, "uuid": None if uid is None else str(uid),
                       "message": _one_line(getattr(err, "message", err), 300)})
    if not failed:
        raise error(f"Weaviate reported errors for a batch of {len(labels)} objects in "
                    f"{collection} without naming them", details={"collection": collection})
    shown = "; ".join(f"{f['object']} ({f['uuid']}): {f['message']}" for f in failed[:5])
    more = f"; and {len(failed) - 5} more" if len(failed) > 5 else ""
    raise error(
        f"Weaviate refused {len(failed)} of {len(labels)} objects in {collection}: {shown}{more}",
        details={"collection": collection, "failed": failed},
    )


def insert_objects(
    collection: Any,
    objects: Sequence[Any],
    labels: Sequence[str],
    *,
    error: type[BackendUnavailable] = BackendUnavailable,
) -> None:
    """Insert one batch with ``collection.data.insert_many`` and check every object's outcome.

    Parameters
    ----------
    collection : weaviate Collection
    objects : sequence of weaviate.classes.data.DataObject, length n
    labels : sequence of str, length n
        A name per object, for errors (see :func:`check_batch_result`).
    error : type
        The kg error class to raise.

    Raises
    ------
    kg.errors.BackendUnavailable
        (as ``error``) some objects were refused (each named), all of them were (the client
        then raises ``WeaviateInsertManyAllFailedError`` with the distinct messages: every
        object is named with them), or the call failed.
    """
    weaviate = import_weaviate()
    name = getattr(collection, "name", "?")
    try:
        with vendor_errors(f"insert {len(objects)} objects into {name}", error):
            try:
                result = collection.data.insert_many(list(objects))
            except weaviate.exceptions.WeaviateInsertManyAllFailedError as exc:
                message = _one_line(exc, 300)
                failed = [{"index": i, "object": label, "uuid": None, "message": message}
                          for i, label in enumerate(labels)]
                shown = ", ".join(labels[:5]) + (f" and {len(labels) - 5} more" if len(labels) > 5 else "")
                raise error(
                    f"Weaviate refused all {len(labels)} objects in {name} ({shown}): {message}",
                    details={"collection": name, "failed": failed},
                ) from exc
    except KGError:
        raise
    check_batch_result(result, labels, collection=name, error=error)


def check_vector_dimension(vectors: np.ndarray, dim: int | None, *, what: str) -> None:
    """Refuse vectors whose dimension differs from a collection's, before any write.

    Parameters
    ----------
    vectors : ndarray, shape (n, d) or (d,)
        The vectors about to be written or queried.
    dim : int or None
        The collection's dimension; ``None`` when it holds no vector yet (anything goes).
    what : str
        The collection or model, for the message.

    Raises
    ------
    kg.errors.InvalidInput
        ``d != dim``, or ``vectors`` is neither 1-D nor 2-D.
    """
    array = np.asarray(vectors)
    if array.ndim not in (1, 2):
        raise InvalidInput(f"vectors for {what} must be 1-D or 2-D, got shape {array.shape}")
    got = array.shape[-1]
    if dim is not None and got != dim:
        raise InvalidInput(
            f"vectors of dimension {got} do not fit {what}, which holds dimension {dim}",
            details={"dim": dim, "got": got, "collection": what},
        )


# -- the index -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HybridResult:
    """What :meth:`WeaviateVectorIndex.hybrid` answers: the hits and the fusion that ranked them.

    Attributes
    ----------
    hits : list of IndexHit
        Best first; ``score`` is Weaviate's fused score, ``distance`` None.
    alpha : float
        Weight of the vector leg, 0 (BM25 only) to 1 (vector only), as sent to Weaviate.
    fusion_type : str
        ``"ranked"`` or ``"relative_score"``, as sent to Weaviate.
    """

    hits: list[IndexHit]
    alpha: float
    fusion_type: str


@dataclass(frozen=True, slots=True)
class _Held:
    """One chunks collection of a repository: the shared one of a model (``workspace_id`` and
    ``branch_id`` None) or the one of a (workspace, branch) and model."""

    name: str
    model: str
    dim: int
    workspace_id: int | None = None
    branch_id: int | None = None


@dataclass(frozen=True, slots=True)
class _Row:
    """One ranked object of a query, before ranks are given; ``key`` is the property the
    visibility filter tests (``contentKey``, or ``versionKey`` in a (workspace, branch)
    collection)."""

    seq: int
    content_key: str
    chunk_index: int
    text: str
    score: float
    distance: float | None
    key: str = ""


class WeaviateVectorIndex:
    """The :class:`~kg.index.base.VectorIndex` contract over a Weaviate server.

    ``engine = "weaviate"`` names it in a search answer's ``fusion`` when its own hybrid query
    fused the legs.

    Parameters
    ----------
    url : str
        The server, ``http://host:8080`` (see :func:`parse_weaviate_url`).
    api_key : str, optional
        Weaviate API key; empty for an unauthenticated instance.
    timeout_s : float
        Query timeout, in seconds.
    init_timeout_s : float
        Connection-check timeout, in seconds.
    client : weaviate.WeaviateClient, optional
        A connected client to use instead of connecting to ``url`` (tests); not closed by
        :meth:`close`.
    filter_batch_keys : int
        Most content keys in one ``ContainsAny`` filter (see the module notes).
    probe_depth : int
        Depth of the unfiltered probe query for large allowed sets.

    Raises
    ------
    kg.errors.BackendUnavailable
        The ``weaviate`` extra is not installed (checked here, at start-up); the server is
        contacted on first use.

    Notes
    -----
    Thread-safe: one client, created on first use under a lock. Several processes may share a
    server: writes are idempotent (deterministic ids) and the watermark only ever lags.
    """

    engine = "weaviate"

    def __init__(
        self,
        url: str | None = None,
        *,
        api_key: str | None = None,
        timeout_s: float = 30.0,
        init_timeout_s: float = 5.0,
        client: Any = None,
        filter_batch_keys: int = 1000,
        probe_depth: int = 1000,
    ) -> None:
        import_weaviate()
        if client is None and not url:
            raise InvalidInput("WeaviateVectorIndex needs a URL (KG_WEAVIATE_URL) or a client")
        if url:
            parse_weaviate_url(url)  # a malformed URL fails at start-up, not on first search
        self.url = url
        self._api_key = api_key or None
        self.timeout_s = timeout_s
        self.init_timeout_s = init_timeout_s
        self.filter_batch_keys = max(1, int(filter_batch_keys))
        self.probe_depth = max(1, min(int(probe_depth), MAX_QUERY_RESULTS))
        self._client = client
        self._owns_client = client is None
        self._lock = threading.Lock()

    # -- connection --------------------------------------------------------------------------

    @property
    def client(self) -> Any:
        """The connected client (connects on first use)."""
        if self._client is None:
            with self._lock:
                if self._client is None:
                    self._client = connect(
                        self.url or "", api_key=self._api_key, timeout_s=self.timeout_s,
                        init_timeout_s=self.init_timeout_s,
                    )
        return self._client

    def close(self) -> None:
        """Close the connection this index opened (a client handed in is left open)."""
        with self._lock:
            if self._client is not None and self._owns_client:
                try:
                    self._client.close()
                finally:
                    self._client = None

    # -- the VectorIndex protocol --------------------------------------------------------------

    def sync(self, repo_key: str, chunks: Sequence[IndexedChunk]) -> None:
        """Store chunks; a chunk already held is overwritten with itself (idempotent by id).

        Parameters
        ----------
        repo_key : str
            Repository key.
        chunks : sequence of IndexedChunk
            In any order; duplicates by ``seq`` are written once. Each vector is 1-D, finite,
            non-zero and of its model's dimension; it is stored L2-normalised as float32.

        Raises
        ------
        kg.errors.InvalidInput
            A ``seq`` <= 0 or a bad vector (wrong dimension for the model's collection,
            non-finite, zero, not 1-D): checked for the whole call before anything is sent.
        kg.errors.BackendUnavailable
            Weaviate is unreachable, or refused objects: the message names each one (seq and
            uuid). The watermark is not advanced, so the caller re-syncs from SQL.

        Notes
        -----
        One ``insert_many`` per 256 chunks and model. Object ids are :func:`object_id` of
        ``(repo_key, "", content_key, chunk_index, model)``.
        """
        if not chunks:
            return
        fresh = fresh_chunks(chunks, np.empty(0, dtype=np.int64), 0)
        held = self._held(repo_key)
        matrices = checked_vectors(fresh, {model: h.dim for model, h in held.items()})
        for model, matrix in matrices.items():
            if model in held:
                check_vector_dimension(matrix, held[model].dim, what=held[model].name)
        by_model: dict[str, list[IndexedChunk]] = {}
        for chunk in fresh:
            by_model.setdefault(chunk.model, []).append(chunk)
        from weaviate.classes.data import DataObject

        for model, members in by_model.items():
            matrix = matrices[model]
            target = held.get(model) or self._create_chunks_collection(repo_key, model, matrix.shape[1])
            collection = self.client.collections.get(target.name)
            for start in range(0, len(members), _INSERT_BATCH):
                batch = members[start : start + _INSERT_BATCH]
                objects = [
                    DataObject(
                        properties={
                            "content": c.text,
                            "terms": " ".join(analyze(c.text)),
                            "contentKey": c.content_key,
                            "chunkIndex": c.chunk_index,
                            "seq": c.seq,
                        },
                        uuid=object_id(repo_key, "", c.content_key, c.chunk_index, model),
                        vector=matrix[start + i].tolist(),
                    )
                    for i, c in enumerate(batch)
                ]
                insert_objects(collection, objects, [f"seq {c.seq}" for c in batch])
        self._advance_watermark(repo_key, max(c.seq for c in fresh))

    def watermark(self, repo_key: str) -> int:
        """Highest ``seq`` up to which every synced batch was stored (0 when empty).

        Parameters
        ----------
        repo_key : str

        Returns
        -------
        int

        Raises
        ------
        kg.errors.BackendUnavailable
            Weaviate is unreachable.
        """
        state = self._state_object(repo_key)
        return 0 if state is None else int(state.properties.get("watermark") or 0)

    def knn(
        self,
        repo_key: str,
        vector: np.ndarray,
        k: int,
        *,
        model: str,
        content_keys: Collection[str],
        max_distance: float | None = None,
        scopes: Sequence[SearchScope] | None = None,
    ) -> list[IndexHit]:
        """Top ``k`` chunks by cosine similarity among ``content_keys`` embedded by ``model``.

        Parameters
        ----------
        repo_key : str
        vector : ndarray, shape (dim,), float
            The query embedding; normalised here.
        k : int
            Maximum number of hits; ``k <= 0`` gives ``[]``.
        model : str
            Only collections of this model are searched.
        content_keys : collection of str
            Only chunks of these keys are ranked (see the module notes for large sets); with
            ``scopes``, only the keys of the chunks the scopes allow (a check, not a filter).
        max_distance : float, optional
            Leave out chunks with cosine distance above this.
        scopes : sequence of SearchScope, optional
            Search the (workspace, branch) collections of these scopes (those of ``model``),
            each filtered by its version keys (and its ``filters``), instead of the shared
            collection; hits of one chunk in several collections are returned once.

        Returns
        -------
        list of IndexHit
            By similarity descending, ties by ``seq``; ``score = 1 - distance``,
            ``distance >= 0``; ranks 1..len.

        Raises
        ------
        kg.errors.InvalidInput
            An unusable query vector (not 1-D, non-finite, zero), one whose dimension differs
            from the model's collection, or a NaN ``max_distance``.
        kg.errors.BackendUnavailable
            Weaviate is unreachable or failed.

        Notes
        -----
        Weaviate's ``nearVector`` over its HNSW index; with a filter that leaves fewer objects
        than the collection's ``flatSearchCutoff`` (40,000 by default) Weaviate scans them
        exactly, otherwise HNSW is approximate. Merging several collections by distance is
        exact.
        """
        query = query_vector(vector)
        if max_distance is not None and math.isnan(max_distance):
            raise InvalidInput("max_distance must be a number", details={"max_distance": None})
        _check_keys(content_keys)
        targets = self._targets(repo_key, scopes, {model}, content_keys)
        if not targets:
            return []
        for held, _, _ in targets:
            check_vector_dimension(query, held.dim, what=f"model {model!r}")
        if k <= 0 or not content_keys or (max_distance is not None and max_distance < 0):
            return []
        from weaviate.classes.query import MetadataQuery

        # Weaviate compares in float32: ask with a hair of slack and cut exactly here.
        threshold = None if max_distance is None else float(max_distance) + 1e-6
        rows: list[_Row] = []
        for held, keys, base in targets:
            collection = self.client.collections.get(held.name)
            returned = _returned(held)

            def run(filters: Any, limit: int, collection: Any = collection, held: _Held = held,
                    returned: list[str] = returned) -> list[_Row]:
                with vendor_errors(f"search {held.name} by vector"):
                    answer = collection.query.near_vector(
                        near_vector=query.tolist(), limit=limit, distance=threshold, filters=filters,
                        return_metadata=MetadataQuery(distance=True), return_properties=returned,
                    )
                out = []
                for obj in answer.objects:
                    distance = float(obj.metadata.distance)
                    out.append(_row(obj, 1.0 - distance, max(0.0, distance)))
                return out

            rows.extend(self._ranked(self._unless_dropped(run, held), k, keys, prop=_key_property(held),
                                     base=base))
        rows = _merged(rows)
        if max_distance is not None:
            rows = [r for r in rows if r.distance is not None and r.distance <= max_distance]
        return _hits(rows[:k])

    def bm25(
        self,
        repo_key: str,
        query: str,
        k: int,
        *,
        content_keys: Collection[str],
        scopes: Sequence[SearchScope] | None = None,
    ) -> list[IndexHit]:
        """Top ``k`` chunks by BM25 among ``content_keys``, over every model's collection.

        Parameters
        ----------
        repo_key : str
        query : str
            Analyzed with :func:`kg.index.tokenize.analyze`, as the chunks' ``terms`` were.
        k : int
        content_keys : collection of str
        scopes : sequence of SearchScope, optional
            Search these (workspace, branch) collections instead of the shared ones (see
            :meth:`knn`).

        Returns
        -------
        list of IndexHit
            By BM25 score descending, ties by ``seq``; ``distance`` None. ``[]`` for a query
            without terms, no key, or ``k <= 0``.

        Raises
        ------
        kg.errors.BackendUnavailable
            Weaviate is unreachable or failed.

        Notes
        -----
        Weaviate's BM25F over ``terms`` (k1 1.2, b 0.75, statistics of the whole collection).
        Hits of several collections (one per model; with ``scopes``, one per workspace, branch
        and model) are merged by score, each scored with its own collection's statistics, as
        a sharded engine scores each shard with its own (Elasticsearch's default
        ``query_then_fetch``).

        References
        ----------
        .. [1] S. Robertson and H. Zaragoza, "The Probabilistic Relevance Framework: BM25 and
           Beyond", Foundations and Trends in Information Retrieval 3(4), 2009, pp. 333-389.
        """
        _check_keys(content_keys)
        terms = analyze(query) if isinstance(query, str) else []
        if k <= 0 or not terms or not content_keys:
            return []
        from weaviate.classes.query import MetadataQuery

        text = " ".join(terms)
        rows: list[_Row] = []
        for held, keys, base in self._targets(repo_key, scopes, None, content_keys):
            collection = self.client.collections.get(held.name)

            def run(filters: Any, limit: int, collection: Any = collection, held: _Held = held) -> list[_Row]:
                with vendor_errors(f"search {held.name} by BM25"):
                    answer = collection.query.bm25(
                        query=text, query_properties=["terms"], limit=limit, filters=filters,
                        return_metadata=MetadataQuery(score=True), return_properties=_returned(held),
                    )
                return [_row(obj, float(obj.metadata.score or 0.0), None) for obj in answer.objects]

            rows.extend(self._ranked(self._unless_dropped(run, held), k, keys, prop=_key_property(held),
                                     base=base))
        rows = [r for r in _merged(rows) if r.score > 0]
        return _hits(rows[:k])

    def hybrid(
        self,
        repo_key: str,
        query: str,
        vector: np.ndarray,
        k: int,
        *,
        model: str,
        content_keys: Collection[str],
        alpha: float = 0.5,
        fusion_type: str = "ranked",
        max_vector_distance: float | None = None,
        scopes: Sequence[SearchScope] | None = None,
    ) -> HybridResult:
        """Top ``k`` chunks by Weaviate's own hybrid query (BM25 and vector, fused in Weaviate).

        Parameters
        ----------
        repo_key : str
        query : str
            The full-text leg, analyzed like :meth:`bm25`'s.
        vector : ndarray, shape (dim,), float
            The vector leg, embedded by ``model``.
        k : int
        model : str
            The collections searched.
        content_keys : collection of str
        alpha : float
            0 (BM25 only) to 1 (vector only); sent explicitly, never Weaviate's default.
        fusion_type : {"ranked", "relative_score"}
            Weaviate's ``rankedFusion`` (reciprocal rank fusion) or ``relativeScoreFusion``.
        max_vector_distance : float, optional
            The vector leg keeps only objects within this cosine distance (Weaviate's
            ``max_vector_distance``); the BM25 leg is not bounded.
        scopes : sequence of SearchScope, optional
            Search these (workspace, branch) collections instead of the shared one (see
            :meth:`knn`).

        Returns
        -------
        HybridResult
            The hits (fused score descending, ties by ``seq``) with the ``alpha`` and
            ``fusion_type`` used, to echo in a response.

        Raises
        ------
        kg.errors.InvalidInput
            ``alpha`` outside [0, 1], an unknown fusion type, or a bad query vector.
        kg.errors.BackendUnavailable
            Weaviate is unreachable or failed.

        Notes
        -----
        One query per collection (fused scores depend on the filtered set, module notes);
        several collections' answers are merged by fused score, which is Weaviate's exact
        answer only when one collection holds everything searched (``main``, or a branch
        that wrote nothing in the searched workspaces).

        References
        ----------
        .. [1] G. V. Cormack, C. L. A. Clarke and S. Buettcher, "Reciprocal rank fusion
           outperforms Condorcet and individual rank learning methods", SIGIR 2009.
        """
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 <= alpha <= 1:
            raise InvalidInput("alpha must be a number from 0 to 1", details={"alpha": repr(alpha)})
        if fusion_type not in FUSION_TYPES:
            raise InvalidInput(
                f"unknown fusion type {fusion_type!r}: use {' or '.join(FUSION_TYPES)}",
                details={"fusion_type": fusion_type},
            )
        if max_vector_distance is not None and not (
                isinstance(max_vector_distance, (int, float)) and math.isfinite(max_vector_distance)):
            raise InvalidInput("max_vector_distance must be a finite number",
                               details={"max_vector_distance": repr(max_vector_distance)})
        unit = query_vector(vector)
        _check_keys(content_keys)
        result = HybridResult([], float(alpha), fusion_type)
        targets = self._targets(repo_key, scopes, {model}, content_keys)
        if not targets:
            return result
        for held, _, _ in targets:
            check_vector_dimension(unit, held.dim, what=f"model {model!r}")
        if k <= 0 or not content_keys:
            return result
        from weaviate.classes.query import Filter, HybridFusion, MetadataQuery

        terms = analyze(query) if isinstance(query, str) else []
        fusion = getattr(HybridFusion, FUSION_TYPES[fusion_type])
        rows: list[_Row] = []
        for held, keys, base in targets:
            collection = self.client.collections.get(held.name)

            def run(filters: Any, limit: int, collection: Any = collection, held: _Held = held) -> list[_Row]:
                with vendor_errors(f"search {held.name} by hybrid query"):
                    answer = collection.query.hybrid(
                        query=" ".join(terms) if terms else None, vector=unit.tolist(),
                        alpha=float(alpha), fusion_type=fusion, query_properties=["terms"],
                        max_vector_distance=None if max_vector_distance is None else float(max_vector_distance),
                        limit=limit, filters=filters, return_metadata=MetadataQuery(score=True),
                        return_properties=_returned(held),
                    )
                return [_row(obj, float(obj.metadata.score or 0.0), None) for obj in answer.objects]

            # One query over every allowed key: fused scores depend on the filtered set.
            filters = self._any_key_filter(keys, prop=_key_property(held))
            if base is not None:
                filters = Filter.all_of([base, filters])
            rows.extend(_complete(self._unless_dropped(run, held), filters, k))
        return HybridResult(_hits(_merged(rows)[:k]), float(alpha), fusion_type)

    def flush(self, repo_key: str) -> None:
        """Nothing to do: Weaviate persists every acknowledged write.

        Parameters
        ----------
        repo_key : str
        """

    def drop(self, repo_key: str) -> None:
        """Delete every collection of the repository (shared and per branch) and its marks.

        Parameters
        ----------
        repo_key : str
            An unknown one is a no-op.

        Raises
        ------
        kg.errors.BackendUnavailable
            Weaviate is unreachable or failed.
        """
        names = [h.name for h in self._collections(repo_key)]
        with vendor_errors(f"drop the collections of repository {repo_key!r}"):
            if names:
                self.client.collections.delete(names)
            if self.client.collections.exists(STATE_COLLECTION):
                state = self.client.collections.get(STATE_COLLECTION)
                for uid in (_state_id(repo_key), *_placement_state_ids(repo_key)):
                    state.data.delete_by_id(uid)

    def drop_branch(self, repo_key: str, branch_id: int) -> list[str]:
        """Delete the collections of one branch (every workspace and model), after SQL deleted
        the branch; its id is never reused, so nothing else ever reads them.

        Parameters
        ----------
        repo_key : str
        branch_id : int

        Returns
        -------
        list of str
            The collections deleted.

        Raises
        ------
        kg.errors.BackendUnavailable
            Weaviate is unreachable or failed.
        """
        names = [h.name for h in self._collections(repo_key) if h.branch_id == branch_id]
        if names:
            with vendor_errors(f"drop the collections of branch {branch_id}"):
                self.client.collections.delete(names)
        return names

    def drop_workspace_model(self, repo_key: str, workspace_id: int, model: str) -> list[str]:
        """Delete a workspace's collections of one embedding model (every branch), once a
        re-embed made another model current: no version points at their chunks any more.

        Parameters
        ----------
        repo_key : str
        workspace_id : int
        model : str
            Compared by canonical name (``nomic-embed-text`` is ``ollama:nomic-embed-text:latest``).

        Returns
        -------
        list of str
            The collections deleted.

        Raises
        ------
        kg.errors.BackendUnavailable
        """
        wanted = canonical_model_name(model)
        names = [h.name for h in self._collections(repo_key)
                 if h.workspace_id == workspace_id and canonical_model_name(h.model) == wanted]
        if names:
            with vendor_errors(f"drop the {model!r} collections of workspace {workspace_id}"):
                self.client.collections.delete(names)
        return names

    def stats(self, repo_key: str) -> dict[str, Any]:
        """What the index holds for a repository, for a status route.

        Returns
        -------
        dict
            ``{"chunks": int, "models": {model: objects}, "dims": {model: dim},
            "watermark": int, "placed": {"seq": int, "version": int},
            "collections": [{"name", "model", "workspace_id", "branch_id", "objects"}]}``
            (``workspace_id`` and ``branch_id`` are None for a shared collection).

        Raises
        ------
        kg.errors.BackendUnavailable
        """
        counts: dict[str, int] = {}
        dims: dict[str, int] = {}
        listed = []
        for h in self._collections(repo_key):
            with vendor_errors(f"count the objects of {h.name}"):
                n = int(self.client.collections.get(h.name).aggregate.over_all(total_count=True).total_count
                        or 0)
            counts[h.model] = counts.get(h.model, 0) + n
            dims[h.model] = h.dim
            listed.append({"name": h.name, "model": h.model, "workspace_id": h.workspace_id,
                           "branch_id": h.branch_id, "objects": n})
        seq, version = self.placement_marks(repo_key)
        return {
            "chunks": sum(counts.values()),
            "models": counts,
            "dims": dims,
            "watermark": self.watermark(repo_key),
            "placed": {"seq": seq, "version": version},
            "collections": listed,
        }

    # -- (workspace, branch) collections -----------------------------------------------------

    scoped = True
    """kg searches this index through :class:`~kg.index.base.SearchScope` and fills it with
    :meth:`place` (``kg.indexing.chunks.sync_placements``)."""

    def place(self, repo_key: str, placements: Sequence[Placement]) -> int:
        """Store node versions' chunks in the collections of their (workspace, branch).

        Parameters
        ----------
        repo_key : str
        placements : sequence of Placement
            In version order: a later placement of the same node and content key overwrites
            an earlier one (its path and properties win). Placements without chunks are
            skipped.

        Returns
        -------
        int
            Objects written.

        Raises
        ------
        kg.errors.InvalidInput
            A bad vector, or chunks of one placement from several content keys or models:
            checked for the whole call before anything is sent.
        kg.errors.BackendUnavailable
            Weaviate is unreachable or refused objects (each named). Marks are advanced by the
            caller only after every call succeeded, so a failed pass is redone whole, and
            deterministic ids make the redo overwrite.

        Notes
        -----
        A collection is created on the first placement of its (workspace, branch, model):
        a new branch has none until it writes, and reads its ancestors' (the caller's
        scopes). Object ids are :func:`object_id` of ``(repo_key + "/w" + workspace_id,
        "b" + branch_id, version_key, chunk_index, model)``.
        """
        todo = [p for p in placements if p.chunks]
        if not todo:
            return 0
        unique: dict[int, IndexedChunk] = {}
        for p in todo:
            first = p.chunks[0]
            if any(c.content_key != first.content_key or c.model != first.model for c in p.chunks):
                raise InvalidInput(f"placement of node {p.node_id!r} mixes content keys or models",
                                   details={"node_id": p.node_id})
            for c in p.chunks:
                unique.setdefault(c.seq, c)
        chunks = list(unique.values())
        held = {(h.model, h.workspace_id, h.branch_id): h for h in self._collections(repo_key)}
        dims = {h.model: h.dim for h in held.values() if h.branch_id is not None}
        matrices = checked_vectors(chunks, dims)
        row_of: dict[int, np.ndarray] = {}
        positions: dict[str, int] = {}
        for c in chunks:
            i = positions.get(c.model, 0)
            row_of[c.seq] = matrices[c.model][i]
            positions[c.model] = i + 1
        groups: dict[tuple[str, int, int], list[Placement]] = {}
        for p in todo:
            groups.setdefault((p.chunks[0].model, p.workspace_id, p.branch_id), []).append(p)
        from weaviate.classes.data import DataObject

        written = 0
        for (model, wid, bid), members in groups.items():
            target = held.get((model, wid, bid))
            dim = len(row_of[members[0].chunks[0].seq])
            if target is None:
                target = self._create_chunks_collection(repo_key, model, dim, scope=(wid, bid))
            check_vector_dimension(np.zeros(dim), target.dim, what=target.name)
            collection = self.client.collections.get(target.name)
            # Last placement of a (node, key) wins: its path and properties are the newest.
            latest: dict[str, Placement] = {}
            for p in members:
                latest.pop(p.version_key, None)
                latest[p.version_key] = p
            objects, labels = [], []
            for p in latest.values():
                props = sorted({pair for name, value in (p.properties or {}).items()
                                if (pair := property_pair(str(name), value)) is not None})
                for c in p.chunks:
                    objects.append(DataObject(
                        properties={
                            "content": c.text, "terms": " ".join(analyze(c.text)),
                            "contentKey": c.content_key, "chunkIndex": c.chunk_index, "seq": c.seq,
                            "versionKey": p.version_key, "nodeId": p.node_id, "path": p.path,
                            "nodeType": p.node_type, "props": props,
                        },
                        uuid=object_id(f"{repo_key}/w{wid}", f"b{bid}", p.version_key,
                                       c.chunk_index, model),
                        vector=row_of[c.seq].tolist(),
                    ))
                    labels.append(f"node {p.node_id} chunk {c.chunk_index}")
            for start in range(0, len(objects), _INSERT_BATCH):
                insert_objects(collection, objects[start : start + _INSERT_BATCH],
                               labels[start : start + _INSERT_BATCH])
            written += len(objects)
        return written

    def placement_marks(self, repo_key: str) -> tuple[int, int]:
        """How far :meth:`place` has been fed from SQL: (chunk seq, node version id).

        Returns
        -------
        (int, int)
            Both 0 for a repository never placed.

        Raises
        ------
        kg.errors.BackendUnavailable
        """
        marks = []
        with vendor_errors("read the index placement marks"):
            exists = self.client.collections.exists(STATE_COLLECTION)
            for uid in _placement_state_ids(repo_key):
                obj = (self.client.collections.get(STATE_COLLECTION).query.fetch_object_by_id(uid)
                       if exists else None)
                marks.append(0 if obj is None else int(obj.properties.get("watermark") or 0))
        return marks[0], marks[1]

    def advance_placement_marks(self, repo_key: str, seq: int, version: int) -> None:
        """Store the placement marks (after every placement up to them succeeded; or lower, to
        place again, see :meth:`rewind_placement`).

        Parameters
        ----------
        repo_key : str
        seq : int
            Chunks with ``seq <= seq`` are placed wherever SQL's node versions point at them.
        version : int
            Node versions with ``id <= version`` are placed wherever their chunks exist.

        Raises
        ------
        kg.errors.BackendUnavailable
        """
        from weaviate.classes.data import DataObject

        self._ensure_state_collection()
        objects = [DataObject(properties={"repoKey": repo_key, "watermark": int(mark)}, uuid=uid)
                   for uid, mark in zip(_placement_state_ids(repo_key), (seq, version), strict=True)]
        insert_objects(self.client.collections.get(STATE_COLLECTION), objects,
                       [f"placed seq of {repo_key!r}", f"placed version of {repo_key!r}"])

    def rewind_placement(self, repo_key: str, seq: int) -> None:
        """Lower the placed-seq mark to ``seq``, so the next pass places again every version
        pointing at chunks above it (a re-embed re-points versions at chunks that may have
        been fed before any version pointed at them).

        Raises
        ------
        kg.errors.BackendUnavailable
        """
        placed_seq, placed_revision = self.placement_marks(repo_key)
        if seq < placed_seq:
            self.advance_placement_marks(repo_key, max(0, int(seq)), placed_revision)

    # -- internals -------------------------------------------------------------------------------

    def _targets(self, repo_key: str, scopes: Sequence[SearchScope] | None,
                 models: set[str] | None,
                 content_keys: Collection[str]) -> list[tuple[_Held, Collection[str], Any]]:
        """The collections a search reads, each with its allowed keys and extra filter.

        Without scopes: the shared collections (of ``models``, or all) with ``content_keys``.
        With scopes: the collection of each scope that exists (a scope not placed yet has
        nothing to find), its version keys and its translated filters.
        """
        if scopes is None:
            shared = self._held(repo_key)
            return [(h, content_keys, None) for m, h in sorted(shared.items())
                    if models is None or m in models]
        held: dict[tuple[int | None, int], list[_Held]] = {}
        for h in self._collections(repo_key):
            if h.branch_id is not None and (models is None or h.model in models):
                held.setdefault((h.workspace_id, h.branch_id), []).append(h)
        out: list[tuple[_Held, Collection[str], Any]] = []
        for scope in scopes:
            if not scope.version_keys:
                continue
            base = translate_filters(**scope.filters) if scope.filters else None
            # Every model's collection of the scope: version keys hold the content key, which
            # holds the model, so a collection of a model the versions no longer use finds nothing.
            for h in sorted(held.get((scope.workspace_id, scope.branch_id), []), key=lambda h: h.name):
                out.append((h, scope.version_keys, base))
        return out

    def _unless_dropped(self, run: Callable[[Any, int], list[_Row]],
                        held: _Held) -> Callable[[Any, int], list[_Row]]:
        """``run``, answering no rows when its collection was deleted after the search listed
        it (a branch reset or deleted, a reindex under way) instead of failing the search."""

        def guarded(filters: Any, limit: int) -> list[_Row]:
            try:
                return run(filters, limit)
            except BackendUnavailable:
                with vendor_errors(f"check collection {held.name}"):
                    gone = not self.client.collections.exists(held.name)
                if gone:
                    return []
                raise

        return guarded

    def _collections(self, repo_key: str) -> list[_Held]:
        """Every chunks collection of the repository (shared and per branch), from the schema."""
        if not isinstance(repo_key, str) or not repo_key:
            raise InvalidInput(f"invalid index repository key {repo_key!r}",
                               details={"repo_key": repr(repo_key)})
        prefix = _chunks_prefix(repo_key).lower()
        with vendor_errors("list collections"):
            schema = self.client.collections.list_all(simple=True)
        held: list[_Held] = []
        for name, config in schema.items():
            if not name.lower().startswith(prefix):
                continue
            meta = _description(getattr(config, "description", None))
            if meta.get("kg") != "chunks" or meta.get("repo") != repo_key:
                log.warning("ignoring collection %s: its description is not kg's", name)
                continue
            wid, bid = meta.get("workspace"), meta.get("branch")
            held.append(_Held(name, str(meta["model"]), int(meta["dim"]),
                              None if wid is None else int(wid), None if bid is None else int(bid)))
        return held

    def _held(self, repo_key: str) -> dict[str, _Held]:
        """The repository's shared chunks collections by model."""
        return {h.model: h for h in self._collections(repo_key) if h.branch_id is None}

    def _create_chunks_collection(self, repo_key: str, model: str, dim: int,
                                  scope: tuple[int, int] | None = None) -> _Held:
        """Create the collection of (repository, model) or of (repository, model, workspace,
        branch); another process may win the race."""
        name = _chunks_prefix(repo_key) + _short_hash(model, 10)
        meta: dict[str, Any] = {"kg": "chunks", "format": 1, "repo": repo_key, "model": model, "dim": dim}
        if scope is not None:
            name += f"_w{scope[0]}_b{scope[1]}"
            meta.update(workspace=scope[0], branch=scope[1])
        description = json.dumps(meta, ensure_ascii=False)
        weaviate = import_weaviate()
        try:
            with vendor_errors(f"create collection {name}"):
                self.client.collections.create_from_dict(
                    _chunks_schema(name, description, scoped=scope is not None))
        except BackendUnavailable as exc:
            if not isinstance(exc.__cause__, weaviate.exceptions.UnexpectedStatusCodeError):
                raise
            # Created meanwhile by another process?
            again = [h for h in self._collections(repo_key) if h.model == model
                     and (h.workspace_id, h.branch_id) == (scope or (None, None))]
            if not again:
                raise
            check_vector_dimension(np.zeros(dim), again[0].dim, what=again[0].name)
            return again[0]
        return _Held(name, model, dim, *(scope or (None, None)))

    def _state_object(self, repo_key: str) -> Any:
        """The repository's state object (watermark), or None."""
        with vendor_errors("read the index watermark"):
            if not self.client.collections.exists(STATE_COLLECTION):
                return None
            return self.client.collections.get(STATE_COLLECTION).query.fetch_object_by_id(
                _state_id(repo_key)
            )

    def _advance_watermark(self, repo_key: str, seq: int) -> None:
        """Raise the stored watermark to ``seq``: a batch upsert of the state object, so
        concurrent writers never fail on each other (the last one wins; a lag only re-syncs)."""
        if seq <= self.watermark(repo_key):
            return
        from weaviate.classes.data import DataObject

        self._ensure_state_collection()
        insert_objects(self.client.collections.get(STATE_COLLECTION),
                       [DataObject(properties={"repoKey": repo_key, "watermark": int(seq)},
                                   uuid=_state_id(repo_key))],
                       [f"watermark of {repo_key!r}"])

    def _ensure_state_collection(self) -> None:
        """Create ``KgIndexState`` unless it exists (another process may win the race)."""
        with vendor_errors("create the index state collection"):
            if not self.client.collections.exists(STATE_COLLECTION):
                try:
                    self.client.collections.create_from_dict(_STATE_SCHEMA)
                except import_weaviate().exceptions.UnexpectedStatusCodeError:
                    if not self.client.collections.exists(STATE_COLLECTION):
                        raise

    def _any_key_filter(self, keys: Collection[str], *, prop: str = "contentKey") -> Any:
        """One filter admitting exactly ``keys`` of ``prop``: a ``ContainsAny`` per batch of
        ``filter_batch_keys`` keys, joined with ``Or`` when there are several."""
        from weaviate.classes.query import Filter

        unique = list(dict.fromkeys(keys))
        parts = [_key_filter(prop, unique[start : start + self.filter_batch_keys])
                 for start in range(0, len(unique), self.filter_batch_keys)]
        return parts[0] if len(parts) == 1 else Filter.any_of(parts)

    def _ranked(self, run: Callable[[Any, int], list[_Row]], k: int, keys: Collection[str], *,
                prop: str = "contentKey", base: Any = None) -> list[_Row]:
        """The best rows (score descending, ties by seq) among ``keys`` of ``prop`` that also
        pass ``base``: at least the top ``k`` when that many exist; see the module notes for
        the strategy."""
        unique = list(dict.fromkeys(keys))

        def allowing(batch: list[str]) -> Any:
            only = _key_filter(prop, batch)
            if base is None:
                return only
            from weaviate.classes.query import Filter

            return Filter.all_of([base, only])

        if len(unique) <= self.filter_batch_keys:
            return _complete(run, allowing(unique), k)
        allowed = set(unique)
        depth = min(max(self.probe_depth, 4 * k), MAX_QUERY_RESULTS)
        probed = _sorted(run(base, depth))
        kept = _distinct([r for r in probed if r.key in allowed])
        if len(probed) < depth or (len(kept) >= k and kept[k - 1].score > probed[-1].score):
            return kept
        merged: dict[int, _Row] = {}
        for start in range(0, len(unique), self.filter_batch_keys):
            for row in _complete(run, allowing(unique[start : start + self.filter_batch_keys]), k):
                merged[row.seq] = row
        return _sorted(list(merged.values()))


_RETURNED = ["content", "contentKey", "chunkIndex", "seq"]
_RETURNED_SCOPED = [*_RETURNED, "versionKey"]


def _returned(held: _Held) -> list[str]:
    """The properties a query of ``held`` returns."""
    return _RETURNED if held.branch_id is None else _RETURNED_SCOPED


def _key_property(held: _Held) -> str:
    """The property the visibility filter of ``held`` tests."""
    return "contentKey" if held.branch_id is None else "versionKey"


def _key_filter(prop: str, keys: list[str]) -> Any:
    """``prop`` ``ContainsAny`` ``keys`` (contentKey or versionKey)."""
    if prop == "contentKey":
        return translate_filters(content_keys=keys)
    return translate_filters(version_keys=keys)


def _row(obj: Any, score: float, distance: float | None) -> _Row:
    """A query answer's object as a row."""
    p = obj.properties
    content_key = str(p["contentKey"])
    return _Row(int(p["seq"]), content_key, int(p["chunkIndex"]), str(p.get("content") or ""),
                score, distance, str(p.get("versionKey") or content_key))


def _merged(rows: list[_Row]) -> list[_Row]:
    """Rows of several queries by score descending (ties by seq), each chunk (seq) once at its
    best score: a chunk placed for several nodes or branches is one hit, as in the shared
    collection (the caller maps a chunk to every node that shows it)."""
    best: dict[int, _Row] = {}
    for row in rows:
        held = best.get(row.seq)
        if held is None or row.score > held.score:
            best[row.seq] = row
    return _sorted(list(best.values()))


def _sorted(rows: list[_Row]) -> list[_Row]:
    """Rows by score descending, ties by seq ascending."""
    return sorted(rows, key=lambda r: (-r.score, r.seq))


def _complete(run: Callable[[Any, int], list[_Row]], filters: Any, k: int) -> list[_Row]:
    """The top ``k`` chunks of one query, each once, deepened until ties at the cut are all in
    (ties by seq).

    A chunk shown by several nodes is one object per node in a (workspace, branch)
    collection: the cut counts distinct chunks, not objects.
    """
    limit = min(MAX_QUERY_RESULTS, k + max(k, 10))
    while True:
        rows = _sorted(run(filters, limit))
        chunks = _distinct(rows)
        if len(rows) < limit or limit >= MAX_QUERY_RESULTS or (
                len(chunks) >= k and chunks[k - 1].score > rows[-1].score):
            return chunks
        limit = min(MAX_QUERY_RESULTS, 2 * limit)


def _distinct(rows: list[_Row]) -> list[_Row]:
    """Sorted rows with each chunk (seq) once, at its first (best) place."""
    seen: set[int] = set()
    out = []
    for row in rows:
        if row.seq not in seen:
            seen.add(row.seq)
            out.append(row)
    return out


def _hits(rows: list[_Row]) -> list[IndexHit]:
    """Rows as hits ranked 1..n."""
    return [IndexHit(r.seq, r.content_key, r.chunk_index, r.text, r.score, rank, r.distance)
            for rank, r in enumerate(rows, start=1)]


def _check_keys(content_keys: Collection[str]) -> None:
    """Refuse a single str where a collection of keys belongs."""
    if isinstance(content_keys, str):
        raise TypeError("content_keys must be a collection of keys, not one str")


def _short_hash(text: str, n: int) -> str:
    """The first ``n`` hex digits of sha256(text)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:n]


def _chunks_prefix(repo_key: str) -> str:
    """The name prefix of a repository's chunks collections."""
    return f"{CHUNKS_PREFIX}{_short_hash(repo_key, 12)}_"


def _state_id(repo_key: str) -> uuid.UUID:
    """The id of a repository's state object."""
    return object_id(repo_key, "", "index-state", -1, "")


def _placement_state_ids(repo_key: str) -> tuple[uuid.UUID, uuid.UUID]:
    """The ids of a repository's placement marks (chunk seq, node version id)."""
    return (object_id(repo_key, "", "placed-seq", -1, ""),
            object_id(repo_key, "", "placed-version", -1, ""))


def _description(text: str | None) -> dict[str, Any]:
    """A collection description as kg's JSON, or {}."""
    try:
        meta = json.loads(text or "")
    except ValueError:
        return {}
    if not isinstance(meta, dict) or not {"model", "dim", "repo"} <= meta.keys():
        return {}
    return meta


def _chunks_schema(name: str, description: str, *, scoped: bool = False) -> dict[str, Any]:
    """The class definition of a chunks collection (``scoped``: of a (workspace, branch))."""
    schema: dict[str, Any] = {
        "class": name,
        "description": description,
        "vectorizer": "none",
        "vectorIndexType": "hnsw",
        "vectorIndexConfig": {"distance": "cosine"},
        "invertedIndexConfig": {"stopwords": {"preset": "none"}, "bm25": {"k1": 1.2, "b": 0.75}},
        "properties": [
            {"name": "content", "dataType": ["text"], "indexFilterable": False,
             "indexSearchable": False},
            {"name": "terms", "dataType": ["text"], "tokenization": "whitespace",
             "indexFilterable": False, "indexSearchable": True},
            {"name": "contentKey", "dataType": ["text"], "tokenization": "field",
             "indexFilterable": True, "indexSearchable": False},
            {"name": "chunkIndex", "dataType": ["int"]},
            {"name": "seq", "dataType": ["int"]},
        ],
    }
    if scoped:
        schema["properties"] += [
            {"name": "versionKey", "dataType": ["text"], "tokenization": "field",
             "indexFilterable": True, "indexSearchable": False},
            {"name": "nodeId", "dataType": ["text"], "tokenization": "field",
             "indexFilterable": True, "indexSearchable": False},
            {"name": "path", "dataType": ["text"], "tokenization": "field",
             "indexFilterable": True, "indexSearchable": False},
            {"name": "nodeType", "dataType": ["text"], "tokenization": "field",
             "indexFilterable": True, "indexSearchable": False},
            {"name": "props", "dataType": ["text[]"], "tokenization": "field",
             "indexFilterable": True, "indexSearchable": False},
        ]
    return schema


_STATE_SCHEMA: dict[str, Any] = {
    "class": STATE_COLLECTION,
    "description": json.dumps({"kg": "index-state", "format": 1}),
    "vectorizer": "none",
    "properties": [
        {"name": "repoKey", "dataType": ["text"], "tokenization": "field"},
        {"name": "watermark", "dataType": ["int"]},
    ],
}
