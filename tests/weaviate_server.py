"""A small Weaviate-compatible server for tests (never shipped: it lives in ``tests/``).

No Weaviate server can be installed where kg is tested, so the Weaviate backend is tested through
the real ``weaviate-client`` (v4) against this one: REST (``http.server``) and gRPC (``grpc``,
with the generated stubs the installed client itself imports, ``weaviate.proto.v1``) on two
ephemeral loopback ports, one in-memory single-node store behind both. It follows Weaviate's
request and answer shapes (the client's source is the reference: ``weaviate/connect``,
``weaviate/collections``) and Weaviate's own rules where kg depends on them (the references are
``usecases/schema``, ``adapters/handlers/grpc/v1`` and ``usecases/traverser`` of
weaviate/weaviate).

What the client gets
--------------------
REST, under ``/v1``:

- ``GET /meta`` (``version``, default ``1.28.4``; ``grpcMaxMessageSize``), ``GET
  /.well-known/ready`` and ``/live`` (200), ``GET /.well-known/openid-configuration`` (404:
  no OIDC).
- ``GET /schema`` (``{"classes": [...]}``), ``POST /schema`` (the class with every default
  Weaviate fills in, so the client's full config parser reads it), ``GET /schema/{class}`` (200
  or 404), ``DELETE /schema/{class}`` (200, also for an unknown class, as Weaviate), ``POST
  /schema/{class}/properties`` (``collection.config.add_property``).
- ``POST /objects``, ``GET``/``HEAD``/``PUT``/``DELETE /objects/{class}/{id}``.
- ``POST /graphql``: only ``{Aggregate{Class{meta{count}}}}``, which the client sends for
  ``aggregate.over_all(total_count=True)`` to servers before 1.29.
- Not served: ``/v1/batch/*`` (the v4 client batches over gRPC), ``/v1/nodes``, backups, RBAC.

gRPC, service ``weaviate.v1.Weaviate`` (plus ``grpc.health.v1.Health/Check``, which the client
pings on connect):

- ``Search``: fetch (no search), ``near_vector`` (``distance`` and ``certainty`` thresholds),
  ``bm25_search`` (query properties with ``^boost``, operator Or/And, ``minimum_or_tokens_match``)
  and ``hybrid_search`` (explicit ``alpha`` or ``alpha_param``, fusion ``RANKED`` or
  ``RELATIVE_SCORE``, ``vector_distance``); ``filters``; ``limit`` (default 10), ``offset``;
  return properties (all or a list) and metadata (uuid, vector, creation/update time,
  distance, certainty, score, explain score).
- ``BatchObjects``: per-object errors (an unknown class or property, a value of the wrong type,
  a vector whose length differs from the vectors the class holds -- Weaviate's "new node has a
  vector with length ..."), upsert by uuid.
- ``BatchDelete`` by filter, with ``dry_run`` and ``verbose``.
- ``Aggregate``: ``objects_count`` with filters (clients use it from server version 1.29).

Filters: ``Equal``, ``NotEqual``, ``GreaterThan(Equal)``, ``LessThan(Equal)``, ``Like`` (``*``
and ``?``), ``IsNull`` (needs ``indexNullState``, as in Weaviate), ``ContainsAny``,
``ContainsAll``, ``ContainsNone``, ``And``, ``Or``, ``Not``, on text, text[], int, int[],
number, boolean, date, uuid properties and on ``_id``. Text is compared as Weaviate's searcher
does: a value is tokenized like the property and matches objects holding all its terms
(``Equal "a.txt"`` on a word-tokenized property also matches ``"b a.txt"``); stop words are
dropped from word-tokenized values, and a value left without terms (``"a"``, ``"it.is"``) is
refused ("invalid search term, only stopwords provided"); ``ContainsAny`` / ``All`` / ``None``
are an OR / AND / NOR of one such ``Equal`` per value; ``Like`` keeps ``*`` and ``?`` in its
terms. A property that is neither filterable nor searchable cannot be filtered.

Faithful where kg depends on it
-------------------------------
Class names get their first letter upper-cased and are looked up exactly; creating a class whose
name equals an existing one without regard to case is refused with Weaviate's 422 messages
(``class name "X" already exists`` / ``... already exists as a permutation of: "Y". class names
must be unique when lowercased``). Property names get their first letter lower-cased. Schema
validation covers names, data types, tokenizations, ``indexSearchable`` on non-text, the
vectorizer (only ``none``: ``DEFAULT_VECTORIZER_MODULE=none``) and the index type. Auto-schema
is off (``AUTOSCHEMA_ENABLED=false``, as docs/guides/scale-out.md recommends): an unknown property is
refused per object. ``limit + offset`` above 10,000 (``QUERY_MAXIMUM_RESULTS``) is refused.
Hybrid search fuses exactly as ``hybrid_fusion.go``: each leg asks for max(100, limit + offset)
objects; ranked fusion adds ``weight / (rank + 60)`` with ranks from 0; relative-score fusion
min-max normalises each leg (the vector leg by ``1 - distance``); ties by the secondary value.
BM25 is Weaviate's: ``idf = ln(1 + (N - n + 0.5) / (n + 0.5))`` with N the objects of the
collection and n those holding the term, ``k1`` and ``b`` from the class, property length in
tokens over the collection's average, collection-wide statistics whatever the filter, a
repeated query term counted as often as it appears, stop words removed from the query for
word-tokenized properties only. Over several properties (``query_properties`` with ``prop^boost``)
it is Weaviate's BM25F of the reported version (``adapters/repos/db/inverted/bm25_searcher.go``
and ``bm25_searcher_block.go``): before 1.30 the WAND searcher sums the boosted term frequencies
and the lengths of the properties holding the term, against the mean of the properties' mean
lengths; from 1.30 BlockMax WAND scores each property with its own length normalisation and
sums the boosted scores (``bm25_algorithm`` picks one); boosts are integers before 1.38.
An object update gets a new internal doc id, as in Weaviate.

Simpler than Weaviate
---------------------
One node, one shard, in memory; no persistence, replication, multi-tenancy, named vectors,
modules (vectorizers, generative, rerank), references, grouping, sorting, cursors or autocut:
asking for them is an error naming the test server. Vector search is exact (brute force),
i.e. what a perfect HNSW would answer; cosine, dot and l2-squared distances in float32. Where
Weaviate leaves an order unspecified the server is deliberately unhelpful: objects at equal
distance or score come back in *descending* uuid order; a fetch without filter lists objects by
uuid, with a filter by doc id (insertion/update order). Tokenizers ``word``, ``lowercase``,
``whitespace``, ``field`` and ``trigram`` are re-implemented (word: Unicode letters and digits,
lower-cased); ``gse`` and ``kagome`` are refused as not enabled. BM25 scores carry the classic factor
``k1 + 1`` that Weaviate leaves out (same ranking). A class keeps the
dimension of its vectors until it holds none. Error messages follow Weaviate's where kg or its
tests read them, and are otherwise close paraphrases.

Test hooks (not Weaviate)
-------------------------
:attr:`WeaviateTestServer.refuse` makes ``BatchObjects`` refuse chosen objects;
:meth:`~WeaviateTestServer.fail_next` makes the next matching call fail;
:attr:`~WeaviateTestServer.calls` counts calls (``"Search.near_vector"``, ``"BatchObjects"``,
``"POST /v1/schema"``, ...) and :meth:`~WeaviateTestServer.recorded` returns the latest requests;
:meth:`~WeaviateTestServer.reset` empties the store. ``GET /pypi/weaviate-client/json`` answers
the client's best-effort version check (``weaviate.connect.v4.PYPI_PACKAGE_URL``), so tests that
point it here never reach the internet. With ``api_key`` set, REST and gRPC calls need
``Authorization: Bearer <key>``, as an API-key-protected Weaviate.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import re
import socket
import struct
import threading
import time
import urllib.parse
import uuid as uuid_package
from collections import Counter, deque
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.metadata import version as _package_version
from typing import Any

import grpc
import numpy as np
from google.protobuf import json_format
from weaviate.proto.v1 import (
    aggregate_pb2,
    base_pb2,
    batch_delete_pb2,
    batch_pb2,
    health_weaviate_pb2,
    properties_pb2,
    search_get_pb2,
    weaviate_pb2_grpc,
)

__all__ = ["DEFAULT_VERSION", "WeaviateTestServer", "tokenize"]

log = logging.getLogger(__name__)

DEFAULT_VERSION = "1.28.4"
QUERY_MAXIMUM_RESULTS = 10_000
QUERY_DEFAULTS_LIMIT = 10
HYBRID_SUBSEARCH_LIMIT = 100
RRF_K = 60
GRPC_MAX_MESSAGE = 104_858_000
BATCH_DELETE_LIMIT = 10_000

#: Weaviate's "en" stop-word preset (the Lucene list).
EN_STOPWORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then "
    "there these they this to was will with".split()
)

_CLASS_NAME = re.compile(r"[A-Z][_0-9A-Za-z]{0,254}")
_PROPERTY_NAME = re.compile(r"[_A-Za-z][_0-9A-Za-z]{0,230}")
_RESERVED_PROPERTIES = {"_additional", "_id", "id"}
_PRIMITIVE_TYPES = {"text", "int", "number", "boolean", "date", "uuid"}
_TOKENIZATIONS = {"word", "lowercase", "whitespace", "field", "trigram"}
_WORD = re.compile(r"[^\W_]+")

_F = base_pb2.Filters
_SERVER_NUMBERS = itertools.count(1)


# -- errors ----------------------------------------------------------------------------------------


class WeaviateError(Exception):
    """A refusal, answered as REST ``{"error": [{"message"}]}`` or a gRPC UNKNOWN status."""

    def __init__(self, message: str, status: int = 422) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


def _unsupported(what: str) -> WeaviateError:
    return WeaviateError(f"{what} is not supported by the kg Weaviate test server", 422)


def _no_such_prop(name: str, cls: str) -> WeaviateError:
    return WeaviateError(
        f"no such prop with name '{name}' found in class '{cls}' in the schema. Check your schema "
        "files for which properties in this class are available"
    )


# -- text --------------------------------------------------------------------------------------------


def tokenize(tokenization: str, text: str) -> list[str]:
    """The tokens Weaviate indexes for ``text`` under ``tokenization``.

    Parameters
    ----------
    tokenization : {"word", "lowercase", "whitespace", "field", "trigram"}
    text : str

    Returns
    -------
    list of str
        In order, with repetitions.
    """
    if tokenization == "word":
        return [t.lower() for t in _WORD.findall(text)]
    if tokenization == "lowercase":
        return [t.lower() for t in text.split()]
    if tokenization == "whitespace":
        return text.split()
    if tokenization == "field":
        stripped = text.strip()
        return [stripped] if stripped else []
    if tokenization == "trigram":
        letters = "".join(ch.lower() for ch in text if ch.isalnum())
        return [letters[i : i + 3] for i in range(len(letters) - 2)] or ([letters] if letters else [])
    raise WeaviateError(f"unknown tokenization {tokenization!r}")


def _like(pattern: str) -> re.Pattern[str]:
    """Weaviate's Like: ``*`` any run, ``?`` one character, everything else literal."""
    return re.compile("".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern),
                      re.DOTALL)


def _upper_first(name: str) -> str:
    return name[:1].upper() + name[1:]


def _lower_first(name: str) -> str:
    return name[:1].lower() + name[1:]


def _now_ms() -> int:
    return int(time.time() * 1000)


def _parse_date(value: Any) -> datetime:
    if not isinstance(value, str):
        raise ValueError("not a string")
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


# -- the schema ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Prop:
    name: str
    data_type: str  # "text", "int[]", ...
    tokenization: str | None
    filterable: bool
    searchable: bool

    @property
    def base(self) -> str:
        return self.data_type.removesuffix("[]")

    @property
    def is_array(self) -> bool:
        return self.data_type.endswith("[]")

    @property
    def is_text(self) -> bool:
        return self.base == "text"


def _deep_merge(default: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    out = dict(default)
    for key, value in given.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _hnsw_defaults(distance: str) -> dict[str, Any]:
    return {
        "skip": False, "cleanupIntervalSeconds": 300, "maxConnections": 32, "efConstruction": 128,
        "ef": -1, "dynamicEfMin": 100, "dynamicEfMax": 500, "dynamicEfFactor": 8,
        "vectorCacheMaxObjects": 1_000_000_000_000, "flatSearchCutoff": 40_000, "distance": distance,
        "pq": {"enabled": False, "bitCompression": False, "segments": 0, "centroids": 256,
               "trainingLimit": 100_000, "encoder": {"type": "kmeans", "distribution": "log-normal"}},
        "bq": {"enabled": False}, "sq": {"enabled": False, "trainingLimit": 100_000, "rescoreLimit": 20},
        "filterStrategy": "sweeping", "multivector": {"enabled": False, "aggregation": "maxSim"},
    }


def _property_definition(raw: Any, cls: str, seen: set[str]) -> dict[str, Any]:
    """One property of a POST /v1/schema body, validated and with Weaviate's defaults."""
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
        raise WeaviateError(f"class {cls!r}: every property needs a name")
    name = _lower_first(raw["name"])
    if not _PROPERTY_NAME.fullmatch(name):
        raise WeaviateError(
            f"'{name}' is not a valid property name. Property names in Weaviate are restricted to "
            "valid GraphQL names, which must be “/[_A-Za-z][_0-9A-Za-z]{0,230}/”."
        )
    if name in _RESERVED_PROPERTIES:
        raise WeaviateError(f"'{name}' is a reserved property name")
    if name.lower() in seen:
        raise WeaviateError(f'class "{cls}": conflict for property "{name}": already in use or '
                            "provided multiple times")
    seen.add(name.lower())
    data_type = raw.get("dataType")
    if not isinstance(data_type, list) or len(data_type) != 1 or not isinstance(data_type[0], str):
        raise WeaviateError(f"property '{name}': invalid dataType: {data_type}")
    dtype = data_type[0]
    tokenization = raw.get("tokenization") or None
    if dtype in ("string", "string[]"):  # deprecated since 1.19, migrated as Weaviate does
        dtype = "text" + dtype.removeprefix("string")
        tokenization = "whitespace" if tokenization in (None, "word") else tokenization
    if dtype[:1].isupper():
        raise _unsupported(f"property '{name}': cross-reference dataType {data_type}")
    if dtype.removesuffix("[]") not in _PRIMITIVE_TYPES:
        if dtype in ("blob", "geoCoordinates", "phoneNumber", "object", "object[]"):
            raise _unsupported(f"property '{name}': dataType {dtype}")
        raise WeaviateError(f"property '{name}': invalid dataType: {data_type}: dataType {dtype!r} "
                            "is not a valid data type")
    is_text = dtype.removesuffix("[]") == "text"
    if is_text:
        tokenization = tokenization or "word"
        if tokenization in ("gse", "kagome_kr", "kagome_ja"):
            raise WeaviateError(f"the {tokenization} tokenizer is not enabled")
        if tokenization not in _TOKENIZATIONS:
            raise WeaviateError(f"tokenization '{tokenization}' is not allowed for data type '{dtype}'")
    elif tokenization:
        raise WeaviateError(f"tokenization is not allowed for data type '{dtype}'")
    searchable = raw.get("indexSearchable")
    if searchable and not is_text:
        raise WeaviateError("`indexSearchable` is allowed only for text/text[] data types. For other "
                            "data types set false or leave empty")
    range_filters = raw.get("indexRangeFilters")
    if range_filters and dtype not in ("int", "number", "date"):
        raise WeaviateError("`indexRangeFilters` is allowed only for number/int/date data types. For "
                            "other data types set false or leave empty")
    out: dict[str, Any] = {
        "name": name,
        "dataType": [dtype],
        "indexFilterable": raw.get("indexFilterable", True) is not False,
        "indexSearchable": bool(searchable) if searchable is not None else is_text,
        "indexRangeFilters": bool(range_filters),
    }
    if raw.get("description") is not None:
        out["description"] = raw["description"]
    if is_text:
        out["tokenization"] = tokenization
    return out


def _class_definition(body: Any) -> dict[str, Any]:
    """A POST /v1/schema body as the class Weaviate stores and answers (defaults filled in)."""
    if not isinstance(body, dict) or not isinstance(body.get("class"), str) or not body["class"]:
        raise WeaviateError("class name is required")
    name = _upper_first(body["class"])
    if not _CLASS_NAME.fullmatch(name):
        raise WeaviateError(f"'{name}' is not a valid class name")
    for key in ("vectorConfig", "multiTenancyConfig", "moduleConfig"):
        value = body.get(key)
        if value and not (key == "multiTenancyConfig" and not value.get("enabled")):
            raise _unsupported(key)
    vectorizer = body.get("vectorizer") or "none"
    if vectorizer != "none":
        raise WeaviateError(f'vectorizer: no module with name "{vectorizer}" present')
    index_type = body.get("vectorIndexType") or "hnsw"
    if index_type == "dynamic":
        raise WeaviateError("the dynamic index can only be created under async indexing environment "
                            "(ASYNC_INDEXING=true)")
    if index_type not in ("hnsw", "flat"):
        raise WeaviateError(f'unrecognized or unsupported vectorIndexType "{index_type}"')
    given_vic = body.get("vectorIndexConfig") or {}
    distance = given_vic.get("distance", "cosine")
    if distance not in ("cosine", "dot", "l2-squared"):
        raise _unsupported(f'distance "{distance}"')
    if index_type == "hnsw":
        vic = _deep_merge(_hnsw_defaults(distance), given_vic)
    else:
        vic = _deep_merge({"distance": distance, "vectorCacheMaxObjects": 1_000_000_000_000,
                           "pq": {"enabled": False}, "bq": {"enabled": False},
                           "sq": {"enabled": False}}, given_vic)
    inverted = _deep_merge(
        {"bm25": {"b": 0.75, "k1": 1.2}, "cleanupIntervalSeconds": 60,
         "stopwords": {"preset": "en", "additions": None, "removals": None},
         "usingBlockMaxWAND": False},
        body.get("invertedIndexConfig") or {},
    )
    if inverted["stopwords"].get("preset") not in ("en", "none"):
        raise WeaviateError(f"stopwordPreset: unrecognized preset {inverted['stopwords'].get('preset')!r}")
    bm25 = inverted["bm25"]
    if not (0 <= float(bm25["b"]) <= 1) or float(bm25["k1"]) < 0:
        raise WeaviateError("BM25.b must be <= 0 and <= 1 and BM25.k1 must be >= 0")
    seen: set[str] = set()
    properties = [_property_definition(p, name, seen) for p in body.get("properties") or []]
    out: dict[str, Any] = {
        "class": name,
        "invertedIndexConfig": inverted,
        "multiTenancyConfig": {"autoTenantActivation": False, "autoTenantCreation": False, "enabled": False},
        "properties": properties,
        "replicationConfig": {"asyncEnabled": False, "deletionStrategy": "NoAutomatedResolution", "factor": 1},
        "shardingConfig": {"actualCount": 1, "actualVirtualCount": 128, "desiredCount": 1,
                           "desiredVirtualCount": 128, "function": "murmur3", "key": "_id",
                           "strategy": "hash", "virtualPerPhysical": 128},
        "vectorIndexConfig": vic,
        "vectorIndexType": index_type,
        "vectorizer": "none",
    }
    if body.get("description") is not None:
        out["description"] = body["description"]
    return out


# -- the store -------------------------------------------------------------------------------------


@dataclass(eq=False)
class _Object:
    uid: uuid_package.UUID
    props: dict[str, Any]
    vector: np.ndarray | None
    created: int
    updated: int
    doc_id: int
    tokens: dict[str, list[str]] = field(default_factory=dict)
    token_sets: dict[str, frozenset[str]] = field(default_factory=dict)
    tf: dict[str, Counter[str]] = field(default_factory=dict)


class _Collection:
    """One class: its definition, objects, inverted statistics and a vector matrix cache."""

    def __init__(self, definition: dict[str, Any]) -> None:
        self.definition = definition
        self.name: str = definition["class"]
        self.props = {
            p["name"]: _Prop(p["name"], p["dataType"][0], p.get("tokenization"), p["indexFilterable"],
                             p["indexSearchable"])
            for p in definition["properties"]
        }
        inverted = definition["invertedIndexConfig"]
        self.k1 = float(inverted["bm25"]["k1"])
        self.b = float(inverted["bm25"]["b"])
        stop = inverted["stopwords"]
        words = set(EN_STOPWORDS) if stop.get("preset") == "en" else set()
        words |= set(stop.get("additions") or [])
        words -= set(stop.get("removals") or [])
        self.stopwords = frozenset(words)
        self.index_null_state = bool(inverted.get("indexNullState"))
        self.distance: str = definition["vectorIndexConfig"]["distance"]
        self.objects: dict[uuid_package.UUID, _Object] = {}
        self.next_doc_id = 0
        self.dim: int | None = None
        self.vector_count = 0
        self.postings: dict[str, dict[str, set[uuid_package.UUID]]] = {
            name: {} for name, p in self.props.items() if p.is_text and p.searchable
        }
        self.length_sum: Counter[str] = Counter()
        self.length_count: Counter[str] = Counter()
        self._matrix: tuple[list[uuid_package.UUID], np.ndarray] | None = None

    # -- writes ------------------------------------------------------------------------------

    def prop(self, name: str) -> _Prop:
        found = self.props.get(_lower_first(name))
        if found is None:
            raise _no_such_prop(name, self.name)
        return found

    def coerce(self, props: dict[str, Any]) -> dict[str, Any]:
        """Typed property values, or an error as Weaviate's validation gives it."""
        out: dict[str, Any] = {}
        for raw_name, value in props.items():
            prop = self.prop(raw_name)
            if value is None:
                continue
            if prop.is_array:
                if not isinstance(value, list):
                    raise WeaviateError(f"invalid {prop.data_type} property '{prop.name}' on class "
                                        f"'{self.name}': not a list, but {type(value).__name__}")
                out[prop.name] = [self._scalar(prop, v) for v in value]
            else:
                out[prop.name] = self._scalar(prop, value)
        return out

    def _scalar(self, prop: _Prop, value: Any) -> Any:
        where = f"property '{prop.name}' on class '{self.name}'"
        base = prop.base
        if base == "text":
            if not isinstance(value, str):
                raise WeaviateError(f"invalid text {where}: not a string, but {type(value).__name__}")
            return value
        if base == "int":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or (
                isinstance(value, float) and not value.is_integer()
            ):
                raise WeaviateError(f"invalid integer {where}: requires an integer, the given value is {value!r}")
            return int(value)
        if base == "number":
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise WeaviateError(f"invalid number {where}: requires a float, the given value is {value!r}")
            return float(value)
        if base == "boolean":
            if not isinstance(value, bool):
                raise WeaviateError(f"invalid boolean {where}: requires a boolean, the given value is {value!r}")
            return value
        if base == "date":
            try:
                _parse_date(value)
            except ValueError:
                raise WeaviateError(f"invalid date {where}: requires a string with a RFC3339 formatted "
                                    f"date, but the given value is {value!r}") from None
            return value
        if base == "uuid":
            try:
                return str(uuid_package.UUID(str(value)))
            except ValueError:
                raise WeaviateError(f"invalid uuid {where}: {value!r}") from None
        raise WeaviateError(f"unknown data type {prop.data_type}")

    def check_vector(self, vector: np.ndarray | None) -> None:
        if vector is None:
            return
        if vector.ndim != 1 or not len(vector):
            raise WeaviateError("a vector must be a non-empty list of numbers")
        if self.dim is not None and len(vector) != self.dim:
            raise WeaviateError(f"new node has a vector with length {len(vector)}. Existing nodes have "
                                f"vectors with length {self.dim}", 500)

    def put(self, uid: uuid_package.UUID, props: dict[str, Any], vector: np.ndarray | None) -> _Object:
        """Insert or replace (a replacement keeps the creation time and gets a new doc id)."""
        old = self.objects.get(uid)
        now = _now_ms()
        if old is not None:
            self.remove(uid)
        obj = _Object(uid, props, vector, old.created if old else now, now, self.next_doc_id)
        self.next_doc_id += 1
        for name, prop in self.props.items():
            if not prop.is_text or name not in props:
                continue
            values = props[name] if prop.is_array else [props[name]]
            tokens = [t for v in values for t in tokenize(prop.tokenization or "word", v)]
            obj.tokens[name] = tokens
            obj.token_sets[name] = frozenset(tokens)
            if name in self.postings:
                obj.tf[name] = Counter(tokens)
                for term in obj.tf[name]:
                    self.postings[name].setdefault(term, set()).add(uid)
                self.length_sum[name] += len(tokens)
                self.length_count[name] += 1
        if vector is not None:
            if self.dim is None:
                self.dim = len(vector)
            self.vector_count += 1
        self.objects[uid] = obj
        self._matrix = None
        return obj

    def remove(self, uid: uuid_package.UUID) -> bool:
        obj = self.objects.pop(uid, None)
        if obj is None:
            return False
        for name, tf in obj.tf.items():
            for term in tf:
                holders = self.postings[name][term]
                holders.discard(uid)
                if not holders:
                    del self.postings[name][term]
            self.length_sum[name] -= len(obj.tokens[name])
            self.length_count[name] -= 1
        if obj.vector is not None:
            self.vector_count -= 1
            if self.vector_count == 0:
                self.dim = None
        self._matrix = None
        return True

    # -- reads -------------------------------------------------------------------------------

    def listed(self, allowed: set[uuid_package.UUID] | None) -> list[_Object]:
        """Objects without a search: by uuid without filter, by doc id with one."""
        if allowed is None:
            return sorted(self.objects.values(), key=lambda o: o.uid.int)
        return sorted((self.objects[u] for u in allowed), key=lambda o: o.doc_id)

    def vector_search(self, query: np.ndarray, allowed: set[uuid_package.UUID] | None, limit: int,
                      distance: float | None = None, certainty: float | None = None
                      ) -> list[tuple[_Object, float]]:
        """Exact nearest neighbours: (object, distance) nearest first."""
        if self.dim is None:
            return []
        if len(query) != self.dim:
            raise WeaviateError("vector search: knn search: distance between entrypoint and query node: "
                                f"vector lengths don't match: {len(query)} vs {self.dim}")
        ids, matrix = self._vectors()
        q = query.astype(np.float32)
        if self.distance == "cosine":
            norm = np.linalg.norm(q)
            dists = np.float32(1.0) - matrix @ (q / norm if norm else q)
        elif self.distance == "dot":
            dists = -(matrix @ q)
        else:
            dists = ((matrix - q) ** 2).sum(axis=1, dtype=np.float32)
        pairs = [(self.objects[u], float(d)) for u, d in zip(ids, dists.astype(np.float32), strict=True)
                 if (allowed is None or u in allowed) and not math.isnan(d)]
        if certainty is not None and self.distance == "cosine":
            pairs = [(o, d) for o, d in pairs if 1 - d / 2 >= certainty]
        elif distance is not None:
            pairs = [(o, d) for o, d in pairs if d <= distance or math.isclose(d, distance, abs_tol=1e-6)]
        return _ranked(pairs, ascending=True)[:limit]

    def _vectors(self) -> tuple[list[uuid_package.UUID], np.ndarray]:
        if self._matrix is None:
            held = [o for o in self.objects.values() if o.vector is not None]
            ids = [o.uid for o in held]
            matrix = (np.stack([o.vector for o in held]).astype(np.float32) if held
                      else np.zeros((0, self.dim or 0), np.float32))
            if self.distance == "cosine" and len(matrix):
                norms = np.linalg.norm(matrix, axis=1, keepdims=True)
                matrix = matrix / np.where(norms == 0, 1, norms)
            self._matrix = (ids, matrix.astype(np.float32))
        return self._matrix

    def bm25(self, query: str, properties: Iterable[str], allowed: set[uuid_package.UUID] | None,
             limit: int, *, require_all: bool = False, minimum_match: int | None = None,
             algorithm: str = "wand", float_boosts: bool = False, own_means: bool = True,
             ) -> list[tuple[_Object, float]]:
        """Weaviate's BM25F over the searchable text properties named (all when none are).

        ``algorithm`` is the searcher of ``adapters/repos/db/inverted/bm25_searcher*.go``:

        - ``"wand"`` (the only one before 1.30, ``USE_BLOCKMAX_WAND=false`` later): per query
          term, a document's frequency is the sum over the properties of ``tf_p * boost_p``
          and its length the sum of the lengths of the properties *holding the term*,
          normalised by the mean of the queried properties' mean lengths; n counts documents
          holding the term in any property.
        - ``"blockmax"`` (BlockMax WAND, the default from 1.30): each property is scored on
          its own, ``idf * boost_p * tf_p / (tf_p + k1 (1 - b + b len_p / avg_p))`` with
          ``avg_p`` the property's own mean length (from 1.31; ``own_means=False``: the mean
          of the queried properties' means, as 1.30), and the properties' scores are summed;
          the idf of a term shares one n, the integer mean of its per-property document
          frequencies over the properties holding it.

        Boosts ``prop^w`` are parsed as Go's ``strconv.Atoi`` before 1.38 (``title^1.5`` is a
        boost of 0) and as ``ParseFloat`` from 1.38 (``float_boosts``). Scores are Weaviate's
        times ``k1 + 1`` (the classic BM25 scale; same ranking). Exact: Weaviate's per-segment
        top lists are not modelled.
        """
        weighted: dict[str, float] = {}
        for spec in properties:
            name, caret, boost_text = spec.partition("^")
            prop = self.prop(name)
            if not (prop.is_text and prop.searchable):
                raise WeaviateError(f"property '{prop.name}' of class '{self.name}' is not "
                                    "indexSearchable: it cannot be searched by bm25")
            weighted[prop.name] = _parse_boost(boost_text, float_boosts) if caret else 1.0
        if not weighted:
            weighted = {name: 1.0 for name in self.postings}
        n_docs = len(self.objects)
        means = {name: self.length_sum[name] / self.length_count[name]
                 for name in weighted if self.length_count[name]}
        shared_mean = (sum(means.values()) / len(means)) if means else 0.0
        shared_mean = shared_mean or 40.0  # Weaviate's default for a corrupt or empty tracker
        scores: Counter[uuid_package.UUID] = Counter()
        matched: dict[uuid_package.UUID, set[str]] = {}
        wanted: set[str] = set()
        by_tokenization: dict[str, list[str]] = {}
        for name in weighted:
            by_tokenization.setdefault(self.props[name].tokenization or "word", []).append(name)
        k1, b = self.k1, self.b
        for tokenization, names in by_tokenization.items():
            terms = tokenize(tokenization, query)
            if tokenization == "word":
                terms = [t for t in terms if t not in self.stopwords]
            wanted |= set(terms)
            for term, repeats in Counter(terms).items():
                holders = {name: self.postings[name].get(term) or set() for name in names}
                if algorithm == "blockmax":
                    counts = [len(h) for h in holders.values() if h]
                    if not counts:
                        continue
                    n = sum(counts) // len(counts)
                    idf = math.log(1 + (max(n_docs, n) - n + 0.5) / (n + 0.5)) * repeats
                    for name, held in holders.items():
                        avg = means.get(name, 0.0) if own_means else shared_mean
                        for uid in held:
                            if allowed is not None and uid not in allowed:
                                continue
                            obj = self.objects[uid]
                            tf = obj.tf[name][term]
                            norm = k1 * (1 - b + b * len(obj.tokens[name]) / avg) if avg else k1
                            scores[uid] += weighted[name] * idf * tf * (k1 + 1) / (tf + norm)
                            matched.setdefault(uid, set()).add(term)
                    continue
                every = set().union(*holders.values())
                if not every:
                    continue
                idf = math.log(1 + (n_docs - len(every) + 0.5) / (len(every) + 0.5)) * repeats
                for uid in every:
                    if allowed is not None and uid not in allowed:
                        continue
                    obj = self.objects[uid]
                    freq = sum(obj.tf[name][term] * weighted[name] for name in names if uid in holders[name])
                    length = sum(len(obj.tokens[name]) for name in names if uid in holders[name])
                    norm = k1 * (1 - b + b * length / shared_mean)
                    if freq + norm > 0:
                        scores[uid] += idf * freq * (k1 + 1) / (freq + norm)
                    matched.setdefault(uid, set()).add(term)
        pairs = [(self.objects[u], float(np.float32(s))) for u, s in scores.items()]
        if require_all:
            pairs = [(o, s) for o, s in pairs if matched[o.uid] >= wanted]
        elif minimum_match:
            pairs = [(o, s) for o, s in pairs if len(matched[o.uid]) >= minimum_match]
        return _ranked(pairs, ascending=False)[:limit]

    def add_property(self, raw: Any) -> dict[str, Any]:
        """Add a property to the class (``POST /v1/schema/{class}/properties``); objects held
        have no value for it."""
        definition = _property_definition(raw, self.name, {p.lower() for p in self.props})
        self.definition["properties"].append(definition)
        name = definition["name"]
        self.props[name] = _Prop(name, definition["dataType"][0], definition.get("tokenization"),
                                 definition["indexFilterable"], definition["indexSearchable"])
        if self.props[name].is_text and self.props[name].searchable:
            self.postings[name] = {}
        return definition


def _parse_boost(text: str, float_boosts: bool) -> float:
    """A ``prop^boost`` boost as Weaviate parses it: Go's ``ParseFloat`` (from 1.38) or ``Atoi``
    (before), an unparsable one giving 0."""
    if float_boosts:
        try:
            value = float(text)
        except ValueError:
            return 0.0
        return value if math.isfinite(value) else 0.0
    return float(int(text)) if re.fullmatch(r"[+-]?[0-9]+", text) else 0.0


def _ranked(pairs: list[tuple[_Object, float]], *, ascending: bool) -> list[tuple[_Object, float]]:
    """By value; ties in descending uuid order (Weaviate promises no order: be unhelpful)."""
    pairs = sorted(pairs, key=lambda p: p[0].uid.int, reverse=True)
    return sorted(pairs, key=lambda p: p[1] if ascending else -p[1])


# -- filters ---------------------------------------------------------------------------------------


_OPERATORS = {
    _F.OPERATOR_EQUAL: "Equal", _F.OPERATOR_NOT_EQUAL: "NotEqual", _F.OPERATOR_GREATER_THAN: "GreaterThan",
    _F.OPERATOR_GREATER_THAN_EQUAL: "GreaterThanEqual", _F.OPERATOR_LESS_THAN: "LessThan",
    _F.OPERATOR_LESS_THAN_EQUAL: "LessThanEqual", _F.OPERATOR_AND: "And", _F.OPERATOR_OR: "Or",
    _F.OPERATOR_NOT: "Not", _F.OPERATOR_LIKE: "Like", _F.OPERATOR_IS_NULL: "IsNull",
    _F.OPERATOR_CONTAINS_ANY: "ContainsAny", _F.OPERATOR_CONTAINS_ALL: "ContainsAll",
    _F.OPERATOR_CONTAINS_NONE: "ContainsNone", _F.OPERATOR_WITHIN_GEO_RANGE: "WithinGeoRange",
}
_VALUE_FIELD = {"text": ("value_text", "value_text_array"), "date": ("value_text", "value_text_array"),
                "uuid": ("value_text", "value_text_array"), "int": ("value_int", "value_int_array"),
                "number": ("value_number", "value_number_array"),
                "boolean": ("value_boolean", "value_boolean_array")}
_FILTER_LABEL = {"value_text": "valueText", "value_text_array": "valueTextArray", "value_int": "valueInt",
                 "value_int_array": "valueIntArray", "value_number": "valueNumber",
                 "value_number_array": "valueNumberArray", "value_boolean": "valueBoolean",
                 "value_boolean_array": "valueBooleanArray", "value_geo": "valueGeoRange"}

Predicate = Callable[[_Object], bool]


def _compile(coll: _Collection, f: base_pb2.Filters) -> Predicate:
    """A gRPC filter as a predicate over the collection's objects (errors as Weaviate's)."""
    op = _OPERATORS.get(f.operator)
    if op is None:
        raise WeaviateError(f"unknown filter operator {f.operator}")
    if op in ("And", "Or", "Not"):
        subs = [_compile(coll, g) for g in f.filters]
        if not subs or (op == "Not" and len(subs) != 1):
            raise WeaviateError(f"invalid filter: operator {op} needs {'one operand' if op == 'Not' else 'operands'}")
        if op == "And":
            return lambda o: all(s(o) for s in subs)
        if op == "Or":
            return lambda o: any(s(o) for s in subs)
        return lambda o: not subs[0](o)
    if op == "WithinGeoRange":
        raise _unsupported("the WithinGeoRange filter")
    if f.HasField("target"):
        if f.target.WhichOneof("target") != "property":
            raise _unsupported("a filter on a reference")
        path = f.target.property
    elif len(f.on) == 1:
        path = f.on[0]
    else:
        raise _unsupported("a filter on a reference path")
    which = f.WhichOneof("test_value")
    if path == "_id":
        return _id_predicate(op, f, which)
    if path.startswith("_"):
        raise _unsupported(f"a filter on {path}")
    prop = coll.prop(path)
    if op == "IsNull":
        if not coll.index_null_state:
            raise WeaviateError("Nullstate must be indexed to be filterable! Add `indexNullState: true` "
                                "to the invertedIndexConfig")
        want_null = f.value_boolean

        def is_null(o: _Object) -> bool:
            value = o.props.get(prop.name)
            return (value is None or value == []) == want_null
        return is_null
    if not (prop.filterable or (prop.is_text and prop.searchable)):
        raise WeaviateError(
            f"Filtering by property '{prop.name}' requires inverted index. Is `indexFilterable` option of "
            f"property '{prop.name}' enabled? Set it to `true` or leave empty"
        )
    single, array = _VALUE_FIELD[prop.base]
    if which not in (single, array):
        raise WeaviateError(f'data type filter cannot use "{_FILTER_LABEL.get(which, which)}" on type '
                            f'"{prop.data_type}", use "{_FILTER_LABEL[single]}"')
    raw = getattr(f, which)
    values = list(raw.values) if which == array else [raw]
    if op in ("Equal", "NotEqual", "GreaterThan", "GreaterThanEqual", "LessThan", "LessThanEqual", "Like") \
            and which == array:
        raise WeaviateError(f"operator {op} needs a single value, not an array")
    if prop.is_text:
        return _text_predicate(prop, op, values, coll.stopwords)
    return _value_predicate(prop, op, values)


def _id_predicate(op: str, f: base_pb2.Filters, which: str | None) -> Predicate:
    if which == "value_text":
        ids = {f.value_text.lower()}
    elif which == "value_text_array":
        ids = {v.lower() for v in f.value_text_array.values}
    else:
        raise WeaviateError("filtering by id needs a text value")
    if op in ("Equal", "ContainsAny"):
        return lambda o: str(o.uid) in ids
    if op in ("NotEqual", "ContainsNone"):
        return lambda o: str(o.uid) not in ids
    if op == "ContainsAll":
        return lambda o: ids == {str(o.uid)}
    raise _unsupported(f"operator {op} on _id")


_ONLY_STOPWORDS = ("invalid search term, only stopwords provided. Stopwords can be configured in "
                   "class.invertedIndexConfig.stopwords")


def _filter_terms(prop: _Prop, value: str, stopwords: frozenset[str], *, wildcards: bool = False
                  ) -> frozenset[str]:
    """The terms of a text filter value, as Weaviate's searcher extracts them: tokenized like the
    property (wildcards kept for Like), stop words dropped for word tokenization; a value left
    without terms is refused."""
    tokenization = prop.tokenization or "word"
    if wildcards and tokenization == "word":
        terms = [t.lower() for t in re.findall(r"(?:[^\W_]|[*?])+", value)]
    elif wildcards and tokenization == "field":
        terms = [value.strip()] if value.strip() else []
    else:
        terms = tokenize(tokenization, value)
    if tokenization == "word":
        terms = [t for t in terms if t not in stopwords]
    if not terms:
        raise WeaviateError(_ONLY_STOPWORDS)
    return frozenset(terms)


def _text_predicate(prop: _Prop, op: str, values: list[str], stopwords: frozenset[str]) -> Predicate:
    """A filter on a text property: each value is the AND of its terms; ContainsAny / All / None
    are an OR / AND / NOR of one such Equal per value (Weaviate's extractContains)."""
    name = prop.name
    if op == "Like":
        patterns = [_like(t) for t in _filter_terms(prop, values[0], stopwords, wildcards=True)]
        return lambda o: all(any(p.fullmatch(t) for t in o.token_sets.get(name, ())) for p in patterns)
    groups = [_filter_terms(prop, v, stopwords) for v in values]

    def holds(group: frozenset[str], o: _Object) -> bool:
        return group <= o.token_sets.get(name, frozenset())

    if op == "Equal":
        return lambda o: holds(groups[0], o)
    if op == "NotEqual":
        return lambda o: not holds(groups[0], o)
    if op == "ContainsAny":
        return lambda o: any(holds(g, o) for g in groups)
    if op == "ContainsAll":
        return lambda o: all(holds(g, o) for g in groups)
    if op == "ContainsNone":
        return lambda o: not any(holds(g, o) for g in groups)
    compare = _COMPARISONS[op]
    return lambda o: all(any(compare(t, term) for t in o.token_sets.get(name, ())) for term in groups[0])


_COMPARISONS: dict[str, Callable[[Any, Any], bool]] = {
    "GreaterThan": lambda a, b: a > b, "GreaterThanEqual": lambda a, b: a >= b,
    "LessThan": lambda a, b: a < b, "LessThanEqual": lambda a, b: a <= b,
}


def _value_predicate(prop: _Prop, op: str, values: list[Any]) -> Predicate:
    name = prop.name
    if prop.base == "date":
        key: Callable[[Any], Any] = _parse_date
    elif prop.base == "uuid":
        def key(v: Any) -> Any:
            return str(v).lower()
    else:
        def key(v: Any) -> Any:
            return v
    wanted = [key(v) for v in values]

    def held(o: _Object) -> list[Any]:
        value = o.props.get(name)
        if value is None:
            return []
        return [key(v) for v in (value if prop.is_array else [value])]

    if op == "Equal":
        return lambda o: wanted[0] in held(o)
    if op == "NotEqual":
        return lambda o: wanted[0] not in held(o)
    if op == "ContainsAny":
        return lambda o: any(v in wanted for v in held(o))
    if op == "ContainsAll":
        return lambda o: all(w in held(o) for w in wanted)
    if op == "ContainsNone":
        return lambda o: not any(v in wanted for v in held(o))
    if op == "Like":
        raise WeaviateError(f"operator Like is not supported on type '{prop.data_type}'")
    compare = _COMPARISONS[op]
    return lambda o: any(compare(v, wanted[0]) for v in held(o))


# -- gRPC answers ----------------------------------------------------------------------------------


def _value(prop: _Prop, value: Any) -> properties_pb2.Value:
    """A stored property value as the Value of a SearchReply (the 1.25+ shape)."""
    base = prop.base
    if prop.is_array:
        if base == "text":
            lv = properties_pb2.ListValue(text_values=properties_pb2.TextValues(values=value))
        elif base == "int":
            lv = properties_pb2.ListValue(int_values=properties_pb2.IntValues(
                values=struct.pack(f"<{len(value)}q", *value)))
        elif base == "number":
            lv = properties_pb2.ListValue(number_values=properties_pb2.NumberValues(
                values=struct.pack(f"<{len(value)}d", *value)))
        elif base == "boolean":
            lv = properties_pb2.ListValue(bool_values=properties_pb2.BoolValues(values=value))
        elif base == "date":
            lv = properties_pb2.ListValue(date_values=properties_pb2.DateValues(values=value))
        else:
            lv = properties_pb2.ListValue(uuid_values=properties_pb2.UuidValues(values=value))
        return properties_pb2.Value(list_value=lv)
    if base == "text":
        return properties_pb2.Value(text_value=value)
    if base == "int":
        return properties_pb2.Value(int_value=value)
    if base == "number":
        return properties_pb2.Value(number_value=value)
    if base == "boolean":
        return properties_pb2.Value(bool_value=value)
    if base == "date":
        return properties_pb2.Value(date_value=value)
    return properties_pb2.Value(uuid_value=value)


@dataclass
class _Hit:
    obj: _Object
    distance: float | None = None
    score: float | None = None
    explain: str | None = None


def _vector_from(message: Any) -> np.ndarray | None:
    """The single legacy vector of a NearVector / Hybrid / BatchObject message, or None."""
    if getattr(message, "vector_bytes", b""):
        data = message.vector_bytes
        return np.frombuffer(data, dtype="<f4", count=len(data) // 4).astype(np.float32)
    vectors = list(getattr(message, "vectors", []))
    if vectors:
        if len(vectors) != 1 or vectors[0].name not in ("", "default"):
            raise _unsupported("named or several vectors")
        if vectors[0].type == base_pb2.Vectors.VECTOR_TYPE_MULTI_FP32:
            raise _unsupported("multi-vectors")
        data = vectors[0].vector_bytes
        return np.frombuffer(data, dtype="<f4", count=len(data) // 4).astype(np.float32)
    if len(getattr(message, "vector", [])):
        return np.asarray(message.vector, dtype=np.float32)
    for name in ("vector_for_targets", "vector_per_target", "target_vectors"):
        if len(getattr(message, name, [])):
            raise _unsupported("target vectors")
    return None


# -- the server ------------------------------------------------------------------------------------


@dataclass
class _Fault:
    call: str
    message: str
    code: grpc.StatusCode
    status: int
    times: int


class WeaviateTestServer:
    """A Weaviate-compatible server: REST on ``127.0.0.1:<http_port>``, gRPC on ``<grpc_port>``.

    Parameters
    ----------
    version : str
        The version ``/v1/meta`` reports; the client chooses wire formats by it (before 1.29:
        vectors as ``vector_bytes``, aggregation over GraphQL; from 1.29 ``vectors`` and gRPC
        ``Aggregate``). At least 1.27, as the client requires.
    api_key : str, optional
        When set, every call but the health checks needs ``Authorization: Bearer <api_key>``.
    grpc_workers : int
        Threads serving gRPC calls.

    Attributes
    ----------
    url : str
        ``http://127.0.0.1:<http_port>?grpc_port=<grpc_port>``, kg's ``KG_WEAVIATE_URL`` form.
    refuse : callable (class name, properties) -> str or None, optional
        Consulted for every object of ``BatchObjects``: a message refuses that object.
    bm25_algorithm : {"wand", "blockmax"} or None
        The BM25F searcher (see ``_Collection.bm25``); None: the reported version's default
        (BlockMax WAND from 1.30, as ``USE_BLOCKMAX_WAND`` defaults there). Reset by
        :meth:`reset`.
    calls : collections.Counter
        Calls by name: ``"Search.near_vector"``, ``"Search.bm25"``, ``"Search.hybrid"``,
        ``"Search.fetch"``, ``"BatchObjects"``, ``"BatchDelete"``, ``"Aggregate"``,
        ``"POST /v1/schema"``, ``"PUT /v1/objects/{class}/{id}"``, ...
    """

    def __init__(self, *, version: str = DEFAULT_VERSION, api_key: str | None = None,
                 grpc_workers: int = 8) -> None:
        self.version = version
        self.api_key = api_key
        self.grpc_workers = grpc_workers
        self.refuse: Callable[[str, dict[str, Any]], str | None] | None = None
        self.bm25_algorithm: str | None = None
        self.calls: Counter[str] = Counter()
        self._recorded: deque[tuple[str, Any]] = deque(maxlen=500)
        self._faults: list[_Fault] = []
        self._classes: dict[str, _Collection] = {}  # by lower-case name
        self._lock = threading.RLock()
        self._httpd: _HTTPServer | None = None
        self._http_thread: threading.Thread | None = None
        self._grpc: grpc.Server | None = None
        self._executor: ThreadPoolExecutor | None = None
        self.http_port = 0
        self.grpc_port = 0
        self.thread_prefix = f"weaviate-test-{next(_SERVER_NUMBERS)}"
        """Every thread the server starts is named with this prefix."""

    # -- life cycle --------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}?grpc_port={self.grpc_port}"

    @property
    def pypi_url(self) -> str:
        """Where the client's PyPI version check can be pointed (answers the installed version)."""
        return f"http://127.0.0.1:{self.http_port}/pypi/weaviate-client/json"

    def start(self) -> WeaviateTestServer:
        """Bind two free loopback ports and serve from background threads."""
        handler = type("_BoundHandler", (_Handler,), {"owner": self})
        httpd = _HTTPServer(("127.0.0.1", 0), handler)
        httpd.thread_prefix = self.thread_prefix
        self._httpd = httpd
        self.http_port = httpd.server_address[1]
        self._http_thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
            name=f"{self.thread_prefix}-http", daemon=True,
        )
        self._http_thread.start()
        self._executor = ThreadPoolExecutor(max_workers=self.grpc_workers,
                                            thread_name_prefix=f"{self.thread_prefix}-grpc")
        server = grpc.server(self._executor, options=[
            ("grpc.max_receive_message_length", GRPC_MAX_MESSAGE),
            ("grpc.max_send_message_length", GRPC_MAX_MESSAGE),
            ("grpc.so_reuseport", 0),
        ])
        weaviate_pb2_grpc.add_WeaviateServicer_to_server(_Servicer(self), server)
        server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("grpc.health.v1.Health", {
            "Check": grpc.unary_unary_rpc_method_handler(
                lambda request, context: health_weaviate_pb2.WeaviateHealthCheckResponse(
                    status=health_weaviate_pb2.WeaviateHealthCheckResponse.SERVING),
                request_deserializer=health_weaviate_pb2.WeaviateHealthCheckRequest.FromString,
                response_serializer=health_weaviate_pb2.WeaviateHealthCheckResponse.SerializeToString,
            ),
        })])
        self.grpc_port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        self._grpc = server
        self._wait_ready()
        return self

    def stop(self) -> None:
        """Stop both servers, close open connections and join every thread they started."""
        if self._grpc is not None:
            self._grpc.stop(grace=0.5).wait(timeout=5)
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.close_connections()
            self._httpd.server_close()  # joins the connection threads
        if self._http_thread is not None:
            self._http_thread.join(timeout=5)
        self._grpc = self._executor = self._httpd = self._http_thread = None

    def __enter__(self) -> WeaviateTestServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 5
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.http_port), timeout=1):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    # -- test hooks --------------------------------------------------------------------------

    def reset(self) -> None:
        """Forget every class, object, fault, refusal hook and recorded call."""
        with self._lock:
            self._classes.clear()
            self._faults.clear()
            self._recorded.clear()
            self.calls.clear()
            self.refuse = None
            self.bm25_algorithm = None

    def fail_next(self, call: str, message: str = "injected failure", *, times: int = 1,
                  code: grpc.StatusCode = grpc.StatusCode.UNKNOWN, status: int = 500) -> None:
        """Fail the next ``times`` calls whose name starts with ``call`` (gRPC ``code`` with
        ``message``; REST ``status`` with Weaviate's error body)."""
        with self._lock:
            self._faults.append(_Fault(call, message, code, status, times))

    def recorded(self, call: str) -> list[Any]:
        """The latest requests (at most 500 kept) whose call name starts with ``call``: the
        protobuf request for gRPC, ``(method, path, body)`` for REST."""
        with self._lock:
            return [request for name, request in self._recorded if name.startswith(call)]

    def class_names(self) -> list[str]:
        """The classes held, in Weaviate's spelling."""
        with self._lock:
            return sorted(c.name for c in self._classes.values())

    def stored(self, class_name: str) -> list[dict[str, Any]]:
        """The objects of a class: ``{"uuid", "properties", "vector"}`` in uuid order."""
        with self._lock:
            coll = self._classes[class_name.lower()]
            return [{"uuid": o.uid, "properties": dict(o.props),
                     "vector": None if o.vector is None else o.vector.tolist()}
                    for o in coll.listed(None)]

    def _enter(self, call: str, request: Any) -> _Fault | None:
        with self._lock:
            self.calls[call] += 1
            self._recorded.append((call, request))
            for fault in self._faults:
                if call.startswith(fault.call):
                    fault.times -= 1
                    if fault.times <= 0:
                        self._faults.remove(fault)
                    return fault
        return None

    def _collection(self, name: str) -> _Collection | None:
        """Weaviate's lookup: first letter upper-cased, then the exact name."""
        name = _upper_first(name)
        found = self._classes.get(name.lower())
        return found if found is not None and found.name == name else None

    def _require(self, name: str) -> _Collection:
        found = self._collection(name)
        if found is None:
            raise WeaviateError(f"could not find class {_upper_first(name)} in schema")
        return found

    def _authorised(self, header: str | None) -> bool:
        return self.api_key is None or header == f"Bearer {self.api_key}"

    # -- REST --------------------------------------------------------------------------------

    def _rest(self, method: str, path: str, body: Any, auth: str | None) -> tuple[int, Any, str]:
        """Answer one REST call: (status, JSON payload or None, call name)."""
        if path == "/pypi/weaviate-client/json" and method == "GET":
            return 200, {"info": {"version": _package_version("weaviate-client")}}, "GET /pypi"
        parts = path.strip("/").split("/")
        if not parts or parts[0] != "v1":
            return 404, {"code": 404, "message": f"path {path} was not found"}, f"{method} ?"
        parts = parts[1:]
        if parts[:1] == [".well-known"]:
            name = f"{method} /v1/.well-known/{'/'.join(parts[1:])}"
            if parts[1:] in (["ready"], ["live"]) and method in ("GET", "HEAD"):
                return 200, None, name
            return 404, None, name
        if not self._authorised(auth):
            message = ("anonymous access not enabled. Please authenticate through one of the available "
                       "methods") if auth is None else "unauthorized: invalid api key"
            return 401, {"code": 401, "message": message}, f"{method} /v1/{'/'.join(parts)}"
        routes: list[tuple[str, list[str], Callable[..., tuple[int, Any]]]] = [
            ("GET", ["meta"], lambda: (200, {"hostname": "http://[::]:8080", "modules": {},
                                             "version": self.version,
                                             "grpcMaxMessageSize": GRPC_MAX_MESSAGE})),
            ("GET", ["schema"], self._get_schema),
            ("POST", ["schema"], lambda: self._create_class(body)),
            ("GET", ["schema", "{class}"], self._get_class),
            ("DELETE", ["schema", "{class}"], self._delete_class),
            ("PUT", ["schema", "{class}"], self._update_class),
            ("POST", ["schema", "{class}", "properties"], lambda cls: self._add_property(cls, body)),
            ("POST", ["objects"], lambda: self._insert_object(body)),
            ("GET", ["objects", "{class}", "{id}"], self._get_object),
            ("HEAD", ["objects", "{class}", "{id}"], self._object_exists),
            ("PUT", ["objects", "{class}", "{id}"], lambda cls, uid: self._replace_object(cls, uid, body)),
            ("DELETE", ["objects", "{class}", "{id}"], self._delete_object),
            ("POST", ["graphql"], lambda: self._graphql(body)),
        ]
        for route_method, template, action in routes:
            if len(template) != len(parts) or any(t[0] != "{" and t != p for t, p in zip(template, parts, strict=True)):
                continue
            name = f"{route_method} /v1/{'/'.join(template)}"
            if route_method != method:
                continue
            args = [urllib.parse.unquote(p) for t, p in zip(template, parts, strict=True) if t[0] == "{"]
            fault = self._enter(name, (method, path, body))
            if fault is not None:
                return fault.status, {"error": [{"message": fault.message}]}, name
            try:
                with self._lock:
                    status, payload = action(*args)
            except WeaviateError as exc:
                return exc.status, {"error": [{"message": exc.message}]}, name
            return status, payload, name
        return 404, {"code": 404, "message": f"path {path} was not found"}, f"{method} ?"

    def _get_schema(self) -> tuple[int, Any]:
        return 200, {"classes": [json.loads(json.dumps(c.definition)) for c in self._classes.values()]}

    def _create_class(self, body: Any) -> tuple[int, Any]:
        definition = _class_definition(body)
        name = definition["class"]
        existing = self._classes.get(name.lower())
        if existing is not None:
            if existing.name == name:
                raise WeaviateError(f'class name "{name}" already exists')
            raise WeaviateError(f'class name "{name}" already exists as a permutation of: "{existing.name}". '
                                "class names must be unique when lowercased")
        self._classes[name.lower()] = _Collection(definition)
        return 200, definition

    def _get_class(self, name: str) -> tuple[int, Any]:
        found = self._collection(name)
        return (200, found.definition) if found is not None else (404, None)

    def _update_class(self, name: str) -> tuple[int, Any]:
        raise _unsupported("updating a class")

    def _add_property(self, name: str, body: Any) -> tuple[int, Any]:
        return 200, self._require(name).add_property(body)

    def _delete_class(self, name: str) -> tuple[int, Any]:
        found = self._collection(name)
        if found is not None:
            del self._classes[found.name.lower()]
        return 200, None

    def _object_json(self, coll: _Collection, obj: _Object) -> dict[str, Any]:
        out: dict[str, Any] = {"class": coll.name, "id": str(obj.uid), "properties": dict(obj.props),
                               "creationTimeUnix": obj.created, "lastUpdateTimeUnix": obj.updated}
        if obj.vector is not None:
            out["vector"] = [float(x) for x in obj.vector]
        return out

    def _object_body(self, body: Any) -> tuple[_Collection, dict[str, Any], np.ndarray | None]:
        if not isinstance(body, dict) or not isinstance(body.get("class"), str):
            raise WeaviateError("invalid object: the class is required")
        if body.get("tenant"):
            raise WeaviateError(f"class {body['class']} has multi-tenancy disabled, but request was with tenant")
        if body.get("vectors"):
            raise _unsupported("named vectors")
        coll = self._collection(body["class"])
        if coll is None:
            raise WeaviateError(f"invalid object: class {_upper_first(body['class'])!r} not present in schema")
        props = body.get("properties") or {}
        if not isinstance(props, dict):
            raise WeaviateError("invalid object: properties must be an object")
        vector = body.get("vector")
        array = None if vector is None or vector == [] else np.asarray(vector, dtype=np.float32)
        coll.check_vector(array)
        return coll, coll.coerce(props), array

    def _insert_object(self, body: Any) -> tuple[int, Any]:
        coll, props, vector = self._object_body(body)
        try:
            uid = uuid_package.UUID(str(body.get("id"))) if body.get("id") else uuid_package.uuid4()
        except ValueError:
            raise WeaviateError(f"invalid object: invalid UUID {body.get('id')!r}") from None
        if uid in coll.objects:
            raise WeaviateError(f"id '{uid}' already exists")
        return 200, self._object_json(coll, coll.put(uid, props, vector))

    def _find(self, cls: str, uid: str) -> tuple[_Collection | None, _Object | None]:
        coll = self._collection(cls)
        try:
            key = uuid_package.UUID(uid)
        except ValueError:
            return coll, None
        return coll, None if coll is None else coll.objects.get(key)

    def _get_object(self, cls: str, uid: str) -> tuple[int, Any]:
        coll, obj = self._find(cls, uid)
        return (200, self._object_json(coll, obj)) if coll is not None and obj is not None else (404, None)

    def _object_exists(self, cls: str, uid: str) -> tuple[int, Any]:
        return (204 if self._find(cls, uid)[1] is not None else 404), None

    def _replace_object(self, cls: str, uid: str, body: Any) -> tuple[int, Any]:
        if not isinstance(body, dict):
            raise WeaviateError("invalid object")
        if _upper_first(str(body.get("class", cls))) != _upper_first(cls):
            raise WeaviateError("invalid update: field 'class' is immutable")
        if body.get("id") is not None and str(body["id"]).lower() != uid.lower():
            raise WeaviateError("invalid update: field 'id' is immutable")
        coll, obj = self._find(cls, uid)
        if coll is None or obj is None:
            return 404, None
        _, props, vector = self._object_body({**body, "class": coll.name})
        return 200, self._object_json(coll, coll.put(obj.uid, props, vector))

    def _delete_object(self, cls: str, uid: str) -> tuple[int, Any]:
        coll, obj = self._find(cls, uid)
        if coll is None or obj is None:
            return 404, None
        coll.remove(obj.uid)
        return 204, None

    _AGGREGATE = re.compile(r"\{\s*Aggregate\s*\{\s*([_A-Za-z][_0-9A-Za-z]*)\s*"
                            r"\{\s*meta\s*\{\s*count\s*\}\s*\}\s*\}\s*\}")

    def _graphql(self, body: Any) -> tuple[int, Any]:
        query = body.get("query") if isinstance(body, dict) else None
        match = self._AGGREGATE.fullmatch((query or "").strip())
        if match is None:
            return 200, {"data": None, "errors": [{
                "message": "the kg Weaviate test server answers only {Aggregate{Class{meta{count}}}}"}]}
        name = match.group(1)
        coll = self._collection(name)
        if coll is None or coll.name != name:
            return 200, {"data": {"Aggregate": None}, "errors": [{
                "message": f'Cannot query field "{name}" on type "AggregateObjectsObj".',
                "locations": [{"line": 1, "column": 12}]}]}
        return 200, {"data": {"Aggregate": {name: [{"meta": {"count": len(coll.objects)}}]}}}

    # -- gRPC --------------------------------------------------------------------------------

    def _grpc_call(self, call: str, request: Any, context: grpc.ServicerContext,
                   answer: Callable[[Any], Any]) -> Any:
        if not self._authorised(dict(context.invocation_metadata()).get("authorization")):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "unauthorized: invalid api key")
        fault = self._enter(call, request)
        if fault is not None:
            context.abort(fault.code, fault.message)
        try:
            with self._lock:
                return answer(request)
        except WeaviateError as exc:
            message = exc.message
        except Exception as exc:  # a bug of the test server: say so loudly
            log.exception("weaviate test server failed on %s", call)
            context.abort(grpc.StatusCode.INTERNAL, f"kg Weaviate test server bug: {exc!r}")
        context.abort(grpc.StatusCode.UNKNOWN, message)

    def _allowed(self, coll: _Collection, request: Any) -> set[uuid_package.UUID] | None:
        if not request.HasField("filters"):
            return None
        predicate = _compile(coll, request.filters)
        return {o.uid for o in coll.objects.values() if predicate(o)}

    def _search(self, req: search_get_pb2.SearchRequest) -> search_get_pb2.SearchReply:
        started = time.monotonic()
        coll = self._require(req.collection)
        if req.tenant:
            raise WeaviateError(f"class {coll.name} has multi-tenancy disabled, but request was with tenant")
        for name in ("group_by", "generative", "rerank", "near_object", "near_text", "near_image",
                     "near_audio", "near_video", "near_depth", "near_thermal", "near_imu", "boost"):
            if req.HasField(name):
                raise _unsupported(name)
        if len(req.sort_by):
            raise _unsupported("sorting")
        if req.after:
            raise _unsupported("the cursor (after)")
        if req.autocut:
            raise _unsupported("autocut")
        limit = req.limit or QUERY_DEFAULTS_LIMIT
        offset = req.offset
        if limit + offset > QUERY_MAXIMUM_RESULTS:
            raise WeaviateError("query maximum results exceeded")
        returned = self._returned_properties(coll, req)
        allowed = self._allowed(coll, req)
        total = limit + offset
        if req.HasField("near_vector"):
            nv = req.near_vector
            if nv.HasField("distance") and nv.HasField("certainty"):
                raise WeaviateError("near_vector: cannot provide distance and certainty")
            query = _vector_from(nv)
            if query is None:
                raise WeaviateError("near_vector: a vector is required")
            hits = [_Hit(o, distance=d) for o, d in coll.vector_search(
                query, allowed, total, nv.distance if nv.HasField("distance") else None,
                nv.certainty if nv.HasField("certainty") else None)]
        elif req.HasField("bm25_search"):
            bm = req.bm25_search
            if not bm.query:
                raise WeaviateError("keyword search (bm25) must have query set")
            require_all, minimum = self._operator(bm)
            hits = [_Hit(o, score=s, explain=f"BM25F score {s}") for o, s in coll.bm25(
                bm.query, list(bm.properties), allowed, total, require_all=require_all,
                minimum_match=minimum, **self._bm25_options())]
        elif req.HasField("hybrid_search"):
            hits = self._hybrid(coll, req.hybrid_search, allowed, limit, offset)
        else:
            hits = [_Hit(o) for o in coll.listed(allowed)]
        hits = hits[offset : offset + limit]
        reply = search_get_pb2.SearchReply(
            results=[self._result(coll, hit, returned, req) for hit in hits])
        reply.took = time.monotonic() - started
        return reply

    def _bm25_options(self) -> dict[str, Any]:
        """The BM25F of the reported version (:meth:`_Collection.bm25`), or of
        :attr:`bm25_algorithm` when set."""
        version = tuple(int(p) for p in re.findall(r"[0-9]+", self.version)[:2])
        algorithm = self.bm25_algorithm or ("blockmax" if version >= (1, 30) else "wand")
        return {"algorithm": algorithm, "float_boosts": version >= (1, 38), "own_means": version != (1, 30)}

    @staticmethod
    def _operator(message: Any) -> tuple[bool, int | None]:
        field_name = "search_operator" if message.DESCRIPTOR.name == "BM25" else "bm25_search_operator"
        if not message.HasField(field_name):
            return False, None
        options = getattr(message, field_name)
        if options.operator == options.OPERATOR_AND:
            return True, None
        return False, options.minimum_or_tokens_match if options.HasField("minimum_or_tokens_match") else None

    def _hybrid(self, coll: _Collection, hs: Any, allowed: set[uuid_package.UUID] | None,
                limit: int, offset: int) -> list[_Hit]:
        """Weaviate's hybrid search (usecases/traverser/hybrid, explorer.Hybrid)."""
        if len(hs.target_vectors) or hs.HasField("targets") or hs.HasField("near_text"):
            raise _unsupported("hybrid targets or near_text")
        alpha = (hs.alpha_param if hs.HasField("alpha_param") else 0.75) if hs.use_alpha_param else hs.alpha
        if not 0 <= alpha <= 1:
            raise WeaviateError(f"hybrid search: alpha must be between 0 and 1, got {alpha}")
        fusion = hs.fusion_type or hs.FUSION_TYPE_RELATIVE_SCORE
        total = min(limit + offset, QUERY_MAXIMUM_RESULTS)
        legs: list[list[tuple[_Object, float, float]]] = []  # (object, original, secondary value)
        weights: list[float] = []
        names: list[str] = []
        require_all, minimum = self._operator(hs)
        if alpha < 1 and hs.query:
            sparse = coll.bm25(hs.query, list(hs.properties), allowed,
                               max(offset + HYBRID_SUBSEARCH_LIMIT, total) - offset,
                               require_all=require_all, minimum_match=minimum, **self._bm25_options())
            legs.append([(o, s, s) for o, s in sparse])
            weights.append(1 - alpha)
            names.append("keyword")
        if alpha > 0:
            near = hs.near_vector if hs.HasField("near_vector") else None
            vector = _vector_from(near if near is not None else hs)
            if vector is None:
                raise WeaviateError("hybrid search: no vector given, and the class has no vectorizer "
                                    "(vectorizer \"none\") to make one from the query")
            distance = hs.vector_distance if hs.HasField("vector_distance") else (
                near.distance if near is not None and near.HasField("distance") else None)
            dense_limit = max(HYBRID_SUBSEARCH_LIMIT, limit + offset)
            dense = coll.vector_search(vector, allowed, dense_limit)
            if distance is not None:
                above = {o.uid for o, d in dense if d > distance}
                dense = [(o, d) for o, d in dense if d <= distance]
                if legs and above:
                    legs[0] = [t for t in legs[0] if t[0].uid not in above]
            legs.append([(o, d, 1 - d) for o, d in dense])
            weights.append(alpha)
            names.append("vector")
        if fusion == hs.FUSION_TYPE_RANKED:
            fused = _fusion_ranked(weights, legs, names)
        else:
            fused = _fusion_relative(weights, legs, names)
        return fused[:total]

    def _returned_properties(self, coll: _Collection, req: Any) -> list[_Prop]:
        if not req.HasField("properties") or req.properties.return_all_nonref_properties:
            return list(coll.props.values())
        if len(req.properties.ref_properties) or len(req.properties.object_properties):
            raise _unsupported("returning references or nested properties")
        return [coll.prop(name) for name in req.properties.non_ref_properties]

    def _result(self, coll: _Collection, hit: _Hit, returned: list[_Prop],
                req: search_get_pb2.SearchRequest) -> search_get_pb2.SearchResult:
        obj = hit.obj
        props = properties_pb2.Properties()
        for prop in returned:
            if obj.props.get(prop.name) is not None:
                props.fields[prop.name].CopyFrom(_value(prop, obj.props[prop.name]))
        meta = search_get_pb2.MetadataResult(id=str(obj.uid), id_as_bytes=obj.uid.bytes)
        md = req.metadata
        if len(md.vectors) and set(md.vectors) - {"default"}:
            raise _unsupported("named vectors")
        if (md.vector or len(md.vectors)) and obj.vector is not None:
            meta.vector_bytes = obj.vector.astype("<f4").tobytes()
        if md.creation_time_unix:
            meta.creation_time_unix, meta.creation_time_unix_present = obj.created, True
        if md.last_update_time_unix:
            meta.last_update_time_unix, meta.last_update_time_unix_present = obj.updated, True
        if hit.distance is not None:
            if md.distance:
                meta.distance, meta.distance_present = hit.distance, True
            if md.certainty and coll.distance == "cosine":
                meta.certainty, meta.certainty_present = 1 - hit.distance / 2, True
        if hit.score is not None and md.score:
            meta.score, meta.score_present = hit.score, True
        if hit.explain is not None and md.explain_score:
            meta.explain_score, meta.explain_score_present = hit.explain, True
        return search_get_pb2.SearchResult(
            properties=search_get_pb2.PropertiesResult(non_ref_props=props, target_collection=coll.name),
            metadata=meta,
        )

    def _batch_objects(self, req: batch_pb2.BatchObjectsRequest) -> batch_pb2.BatchObjectsReply:
        started = time.monotonic()
        errors = []
        for index, obj in enumerate(req.objects):
            try:
                self._batch_object(obj)
            except WeaviateError as exc:
                errors.append(batch_pb2.BatchObjectsReply.BatchError(index=index, error=exc.message))
        return batch_pb2.BatchObjectsReply(took=time.monotonic() - started, errors=errors)

    def _batch_object(self, obj: batch_pb2.BatchObject) -> None:
        coll = self._collection(obj.collection)
        if coll is None:
            raise WeaviateError(f'class "{_upper_first(obj.collection)}" not found in schema')
        if obj.tenant:
            raise WeaviateError(f"class {coll.name} has multi-tenancy disabled, but request was with tenant")
        try:
            uid = uuid_package.UUID(obj.uuid)
        except ValueError:
            raise WeaviateError(f"invalid UUID {obj.uuid!r}") from None
        props: dict[str, Any] = {}
        if obj.HasField("properties"):
            p = obj.properties
            if len(p.single_target_ref_props) or len(p.multi_target_ref_props) or len(p.object_properties) \
                    or len(p.object_array_properties):
                raise _unsupported("references and object properties")
            if p.HasField("non_ref_properties"):
                props.update(json_format.MessageToDict(p.non_ref_properties))
            for arrays in (p.text_array_properties, p.int_array_properties, p.boolean_array_properties):
                for a in arrays:
                    props[a.prop_name] = list(a.values)
            for a in p.number_array_properties:
                props[a.prop_name] = (list(struct.unpack(f"<{len(a.values_bytes) // 8}d", a.values_bytes))
                                      if a.values_bytes else list(a.values))
            for name in p.empty_list_props:
                props[name] = []
        typed = coll.coerce(props)
        vector = _vector_from(obj)
        coll.check_vector(vector)
        if self.refuse is not None:
            message = self.refuse(coll.name, dict(typed))
            if message:
                raise WeaviateError(message)
        coll.put(uid, typed, vector)

    def _batch_delete(self, req: batch_delete_pb2.BatchDeleteRequest) -> batch_delete_pb2.BatchDeleteReply:
        started = time.monotonic()
        coll = self._require(req.collection)
        if req.HasField("tenant") and req.tenant:
            raise WeaviateError(f"class {coll.name} has multi-tenancy disabled, but request was with tenant")
        if not req.HasField("filters"):
            raise WeaviateError("batch delete params: filters are required")
        allowed = self._allowed(coll, req) or set()
        matched = coll.listed(allowed)[:BATCH_DELETE_LIMIT]
        if not req.dry_run:
            for obj in matched:
                coll.remove(obj.uid)
        reply = batch_delete_pb2.BatchDeleteReply(
            took=time.monotonic() - started, failed=0, matches=len(matched),
            successful=0 if req.dry_run else len(matched))
        if req.verbose:
            reply.objects.extend(batch_delete_pb2.BatchDeleteObject(uuid=o.uid.bytes, successful=True)
                                 for o in matched)
        return reply

    def _aggregate(self, req: aggregate_pb2.AggregateRequest) -> aggregate_pb2.AggregateReply:
        started = time.monotonic()
        coll = self._require(req.collection)
        if len(req.aggregations) or req.HasField("group_by") or req.WhichOneof("search"):
            raise _unsupported("aggregations other than objects_count")
        allowed = self._allowed(coll, req)
        count = len(coll.objects) if allowed is None else len(allowed)
        single = aggregate_pb2.AggregateReply.Single()
        if req.objects_count:
            single.objects_count = count
        return aggregate_pb2.AggregateReply(took=time.monotonic() - started, single_result=single)


def _fusion_ranked(weights: list[float], legs: list[list[tuple[_Object, float, float]]],
                   names: list[str]) -> list[_Hit]:
    """hybrid.FusionRanked: each leg adds float32(weight / (rank + 60)), ranks from 0."""
    fused: dict[uuid_package.UUID, list[Any]] = {}  # uid -> [object, score, secondary, explain]
    for weight, leg, name in zip(weights, legs, names, strict=True):
        for rank, (obj, _original, secondary) in enumerate(leg):
            part = np.float32(weight / (rank + RRF_K))
            entry = fused.setdefault(obj.uid, [obj, np.float32(0), 0.0, ""])
            entry[1] = np.float32(entry[1] + part)
            entry[2] = secondary
            entry[3] += f"\nHybrid (Result Set {name}) Document {obj.uid} contributed {float(part)} to the score"
    ordered = sorted(fused.values(), key=lambda e: e[0].uid.int, reverse=True)
    ordered.sort(key=lambda e: (-float(e[1]), -e[2]))
    return [_Hit(e[0], score=float(e[1]), explain=e[3].strip()) for e in ordered]


def _fusion_relative(weights: list[float], legs: list[list[tuple[_Object, float, float]]],
                     names: list[str]) -> list[_Hit]:
    """hybrid.FusionRelativeScore: min-max normalised secondary values, weighted, summed."""
    fused: dict[uuid_package.UUID, list[Any]] = {}
    for weight, leg, name in zip(weights, legs, names, strict=True):
        if not leg:
            continue
        values = [np.float32(s) for _, _, s in leg]
        high, low = max(values), min(values)
        for (obj, original, _secondary), value in zip(leg, values, strict=True):
            score = np.float32(weight)
            if high != low:
                score = np.float32(score * np.float32((value - low) / (high - low)))
            entry = fused.setdefault(obj.uid, [obj, np.float32(0), 0.0, ""])
            entry[1] = np.float32(entry[1] + score)
            entry[2] = float(value)
            entry[3] += (f"\nHybrid (Result Set {name}) Document {obj.uid}: original score {original}, "
                         f"normalized score: {float(score)}")
    ordered = sorted(fused.values(), key=lambda e: e[0].uid.int, reverse=True)
    ordered.sort(key=lambda e: (-float(e[1]), -e[2]))
    return [_Hit(e[0], score=float(e[1]), explain=e[3].strip()) for e in ordered]


def _search_kind(request: search_get_pb2.SearchRequest) -> str:
    for name, kind in (("near_vector", "near_vector"), ("bm25_search", "bm25"), ("hybrid_search", "hybrid")):
        if request.HasField(name):
            return kind
    return "fetch"


class _Servicer(weaviate_pb2_grpc.WeaviateServicer):
    """weaviate.v1.Weaviate: every call goes through WeaviateTestServer._grpc_call."""

    def __init__(self, owner: WeaviateTestServer) -> None:
        self.owner = owner

    def Search(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802 - gRPC's name
        return self.owner._grpc_call(f"Search.{_search_kind(request)}", request, context, self.owner._search)

    def BatchObjects(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        return self.owner._grpc_call("BatchObjects", request, context, self.owner._batch_objects)

    def BatchDelete(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        return self.owner._grpc_call("BatchDelete", request, context, self.owner._batch_delete)

    def Aggregate(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        return self.owner._grpc_call("Aggregate", request, context, self.owner._aggregate)


# -- HTTP plumbing ---------------------------------------------------------------------------------


class _HTTPServer(ThreadingHTTPServer):
    """Keeps the open connections and their threads, so that stop() can close idle keep-alive
    connections and join every thread (daemon threads, so a forgotten stop() never blocks exit;
    ``ThreadingMixIn`` itself does not join daemon threads)."""

    daemon_threads = True
    thread_prefix = "weaviate-test"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._connections: set[socket.socket] = set()
        self._threads_alive: set[threading.Thread] = set()
        self._connections_lock = threading.Lock()
        super().__init__(*args, **kwargs)

    def process_request(self, request: Any, client_address: Any) -> None:
        thread = threading.Thread(target=self.process_request_thread, args=(request, client_address),
                                  name=f"{self.thread_prefix}-conn", daemon=True)
        with self._connections_lock:
            self._connections.add(request)
            self._threads_alive.add(thread)
        thread.start()

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._connections_lock:
                self._threads_alive.discard(threading.current_thread())

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        with self._connections_lock:
            for conn in list(self._connections):
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def server_close(self) -> None:
        super().server_close()
        deadline = time.monotonic() + 5
        while True:
            with self._connections_lock:
                alive = [t for t in self._threads_alive if t.is_alive()]
            if not alive or time.monotonic() > deadline:
                return
            alive[0].join(timeout=max(0.0, deadline - time.monotonic()))


class _Handler(BaseHTTPRequestHandler):
    """One REST call (HTTP/1.1 keep-alive, as httpx uses it)."""

    owner: WeaviateTestServer
    protocol_version = "HTTP/1.1"
    server_version = "weaviate-test"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        """Quiet: tests read ``calls`` and ``recorded`` instead."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's names
        self._dispatch("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._dispatch("POST")

    def do_PUT(self) -> None:  # noqa: N802
        self._dispatch("PUT")

    def do_DELETE(self) -> None:  # noqa: N802
        self._dispatch("DELETE")

    def do_HEAD(self) -> None:  # noqa: N802
        self._dispatch("HEAD")

    def do_PATCH(self) -> None:  # noqa: N802
        self._dispatch("PATCH")

    def _dispatch(self, method: str) -> None:
        path = urllib.parse.urlsplit(self.path).path
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body: Any = None
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                return self._send(422, {"code": 602, "message": "parsing body body from \"\" failed, "
                                        "because invalid character in request body"}, method)
        try:
            status, payload, _ = self.owner._rest(method, path, body, self.headers.get("Authorization"))
        except Exception as exc:  # a bug of the test server: answer 500 and say so
            log.exception("weaviate test server failed on %s %s", method, path)
            status, payload = 500, {"error": [{"message": f"kg Weaviate test server bug: {exc!r}"}]}
        self._send(status, payload, method)

    def _send(self, status: int, payload: Any, method: str) -> None:
        data = b"" if payload is None or status == 204 else json.dumps(payload).encode()
        try:
            self.send_response(status)
            if data:
                self.send_header("Content-Type", "application/json")
            if status != 204:
                self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if method != "HEAD" and data:
                self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass
