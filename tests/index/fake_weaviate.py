"""An in-memory stand-in for the part of weaviate-client v4's sync API that kg uses.

It checks kg's adapter logic (filters, ranking, tie handling, batching, the RAG lifecycle)
without a server; it is not Weaviate. It answers with the client's own result classes
(``QueryReturn``, ``Object``, ``MetadataReturn``, ``BatchObjectReturn``, ``ErrorObject``) and
evaluates the client's own ``Filter`` objects. Where the server's behaviour is loose it is made
adversarial on purpose: ties come back in reverse id order, and an ``Equal`` filter on a
word-tokenized text property matches by tokens, as Weaviate's does (``"a.txt"`` also matches
``"b a.txt"``). The real server runs the same tests when ``KG_TEST_WEAVIATE_URL`` is set.
"""

from __future__ import annotations

import fnmatch
import math
import re
import threading
import uuid as uuid_package
from collections import Counter
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import httpx
import numpy as np
from weaviate.collections.classes.batch import BatchObjectReturn, ErrorObject
from weaviate.collections.classes.filters import _FilterAnd, _FilterNot, _FilterOr, _FilterValue
from weaviate.collections.classes.internal import MetadataReturn, Object, QueryReturn
from weaviate.exceptions import (
    UnexpectedStatusCodeError,
    WeaviateInsertManyAllFailedError,
    WeaviateQueryError,
)

_WORD = re.compile(r"[0-9A-Za-z\u00c0-\uffff]+")


def _word_tokens(text: str) -> list[str]:
    return [t.lower() for t in _WORD.findall(str(text))]


@dataclass
class _Class:
    name: str
    description: str | None
    properties: list[dict[str, Any]]
    objects: dict[uuid_package.UUID, tuple[dict[str, Any], list[float] | None]] = field(default_factory=dict)
    dim: int | None = None

    def tokenization(self, prop: str) -> str:
        for p in self.properties:
            if p["name"] == prop:
                return p.get("tokenization", "word") if p["dataType"] == ["text"] else "field"
        return "word"


class FakeWeaviate:
    """A client: ``fake.collections`` and ``fake.close()``.

    Attributes
    ----------
    refuse : callable(properties) -> str or None
        Per-object hook: a message makes the batch refuse that object.
    calls : Counter
        Calls per operation name (``near_vector``, ``insert_many``, ...).
    """

    def __init__(self) -> None:
        self.classes: dict[str, _Class] = {}
        self.lock = threading.RLock()
        self.refuse = lambda properties: None
        self.calls: Counter[str] = Counter()
        self.closed = False
        self.collections = _Collections(self)

    def close(self) -> None:
        self.closed = True

    def find(self, name: str) -> _Class | None:
        return self.classes.get(name.lower())


class _Collections:
    def __init__(self, fake: FakeWeaviate) -> None:
        self.fake = fake

    def list_all(self, simple: bool = True) -> dict[str, Any]:
        with self.fake.lock:
            return {
                c.name: SimpleNamespace(
                    name=c.name, description=c.description,
                    properties=[SimpleNamespace(name=p["name"]) for p in c.properties],
                )
                for c in self.fake.classes.values()
            }

    def exists(self, name: str) -> bool:
        return self.fake.find(name) is not None

    def get(self, name: str) -> "_Collection":
        return _Collection(self.fake, name)

    use = get

    def create_from_dict(self, config: dict) -> "_Collection":
        with self.fake.lock:
            name = config["class"]
            if self.fake.find(name) is not None:
                raise UnexpectedStatusCodeError(
                    "Create collection",
                    httpx.Response(422, json={"error": [{"message": f"class name {name!r} already exists"}]}),
                )
            assert config.get("vectorizer") == "none", config
            self.fake.classes[name.lower()] = _Class(name, config.get("description"),
                                                     [dict(p) for p in config.get("properties", [])])
            return _Collection(self.fake, name)

    def delete(self, name: str | list[str]) -> None:
        with self.fake.lock:
            for n in [name] if isinstance(name, str) else name:
                self.fake.classes.pop(n.lower(), None)


class _Collection:
    def __init__(self, fake: FakeWeaviate, name: str) -> None:
        self.fake = fake
        self.name = name
        self.data = _Data(self)
        self.query = _Query(self)
        self.aggregate = SimpleNamespace(over_all=self._over_all)

    def cls(self) -> _Class:
        found = self.fake.find(self.name)
        if found is None:
            raise WeaviateQueryError(f"class {self.name} not found", "GRPC")
        return found

    def _over_all(self, total_count: bool = True) -> Any:
        with self.fake.lock:
            return SimpleNamespace(total_count=len(self.cls().objects))


class _Data:
    def __init__(self, coll: _Collection) -> None:
        self.coll = coll

    def insert_many(self, objects: list[Any]) -> BatchObjectReturn:
        fake = self.coll.fake
        fake.calls["insert_many"] += 1
        with fake.lock:
            c = self.coll.cls()
            errors, uuids = {}, {}
            for i, obj in enumerate(objects):
                uid = uuid_package.UUID(str(obj.uuid)) if obj.uuid is not None else uuid_package.uuid4()
                vector = None if obj.vector is None else [float(x) for x in obj.vector]
                message = fake.refuse(obj.properties)
                if message is None and vector is not None and c.dim is not None and len(vector) != c.dim:
                    message = (f"new node has a vector with length {len(vector)}. "
                               f"Existing nodes have vectors with length {c.dim}")
                if message is not None:
                    errors[i] = ErrorObject(message=message, object_=None, original_uuid=uid)
                    continue
                if vector is not None and c.dim is None:
                    c.dim = len(vector)
                c.objects[uid] = (dict(obj.properties or {}), vector)
                uuids[i] = uid
            if objects and len(errors) == len(objects):
                raise WeaviateInsertManyAllFailedError(
                    "Here is the set of all errors: " + "\n".join({e.message for e in errors.values()}))
            return BatchObjectReturn(errors=errors, uuids=uuids, has_errors=bool(errors))

    def insert(self, properties: dict, uuid: Any = None, vector: Any = None) -> uuid_package.UUID:
        with self.coll.fake.lock:
            c = self.coll.cls()
            uid = uuid_package.UUID(str(uuid)) if uuid is not None else uuid_package.uuid4()
            if uid in c.objects:
                raise UnexpectedStatusCodeError("Insert object", httpx.Response(422, json={"error": "id exists"}))
            c.objects[uid] = (dict(properties), None if vector is None else list(vector))
            return uid

    def replace(self, uuid: Any, properties: dict, vector: Any = None) -> None:
        with self.coll.fake.lock:
            c = self.coll.cls()
            uid = uuid_package.UUID(str(uuid))
            if uid not in c.objects:
                raise UnexpectedStatusCodeError("Replace object", httpx.Response(404, json={}))
            c.objects[uid] = (dict(properties), None if vector is None else list(vector))

    def delete_by_id(self, uuid: Any) -> bool:
        with self.coll.fake.lock:
            return self.coll.cls().objects.pop(uuid_package.UUID(str(uuid)), None) is not None

    def delete_many(self, where: Any, verbose: bool = False, dry_run: bool = False) -> Any:
        with self.coll.fake.lock:
            c = self.coll.cls()
            gone = [uid for uid, (props, _) in c.objects.items() if _matches(c, where, props, uid)]
            if not dry_run:
                for uid in gone:
                    del c.objects[uid]
            return SimpleNamespace(failed=0, matches=len(gone), objects=None, successful=len(gone))


class _Query:
    def __init__(self, coll: _Collection) -> None:
        self.coll = coll

    def _answer(self, c: _Class, scored: list[tuple[float, uuid_package.UUID]], limit: int | None,
                kind: str, include_vector: bool, return_properties: list[str] | None) -> QueryReturn:
        # Weaviate gives ties in no particular order: reverse id order here, on purpose.
        scored = sorted(scored, key=lambda t: str(t[1]), reverse=True)
        scored.sort(key=lambda t: t[0] if kind == "distance" else -t[0])
        objects = []
        for value, uid in scored[: limit if limit is not None else None]:
            props, vector = c.objects[uid]
            if return_properties is not None:
                props = {k: props.get(k) for k in return_properties}
            metadata = MetadataReturn(distance=value) if kind == "distance" else MetadataReturn(score=value)
            objects.append(Object(uuid=uid, metadata=metadata, properties=dict(props), references=None,
                                  vector={"default": list(vector)} if include_vector and vector else {},
                                  collection=c.name))
        return QueryReturn(objects=objects)

    def near_vector(self, near_vector: list[float], *, limit: int | None = None, distance: float | None = None,
                    filters: Any = None, return_metadata: Any = None, return_properties: Any = None,
                    include_vector: bool = False, **_: Any) -> QueryReturn:
        self.coll.fake.calls["near_vector"] += 1
        with self.coll.fake.lock:
            c = self.coll.cls()
            q = np.asarray(near_vector, dtype=np.float32)
            if c.dim is not None and len(q) != c.dim:
                raise WeaviateQueryError(f"vector lengths don't match: {len(q)} vs {c.dim}", "GRPC")
            qn = q / np.linalg.norm(q)
            scored = []
            for uid, (props, vector) in c.objects.items():
                if vector is None or not _matches(c, filters, props, uid):
                    continue
                v = np.asarray(vector, dtype=np.float32)
                d = float(np.float32(1.0) - np.dot(qn, v / np.linalg.norm(v)))
                if distance is None or d <= distance:
                    scored.append((d, uid))
            return self._answer(c, scored, limit, "distance", include_vector, return_properties)

    def _bm25_scores(self, c: _Class, query: str, prop: str, filters: Any) -> dict[uuid_package.UUID, float]:
        split = str.split if c.tokenization(prop) == "whitespace" else _word_tokens
        docs = {uid: split(str(props.get(prop) or "")) for uid, (props, _) in c.objects.items()}
        n = len(docs)
        avgdl = sum(len(t) for t in docs.values()) / n if n else 0.0
        df = Counter(term for t in docs.values() for term in set(t))
        scores: dict[uuid_package.UUID, float] = {}
        for uid, terms in docs.items():
            if not _matches(c, filters, c.objects[uid][0], uid):
                continue
            tf = Counter(terms)
            s = 0.0
            for term in set(split(query)):
                if tf[term]:
                    idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
                    s += idf * tf[term] * 2.2 / (tf[term] + 1.2 * (0.25 + 0.75 * len(terms) / avgdl))
            if s > 0:
                scores[uid] = s
        return scores

    def bm25(self, query: str, *, query_properties: list[str] | None = None, limit: int | None = None,
             filters: Any = None, return_metadata: Any = None, return_properties: Any = None, **_: Any) -> QueryReturn:
        self.coll.fake.calls["bm25"] += 1
        with self.coll.fake.lock:
            c = self.coll.cls()
            scores = self._bm25_scores(c, query, (query_properties or ["content"])[0], filters)
            return self._answer(c, [(s, u) for u, s in scores.items()], limit, "score", False, return_properties)

    def hybrid(self, query: str | None, *, alpha: float = 0.7, vector: Any = None, query_properties: Any = None,
               fusion_type: Any = None, limit: int | None = None, filters: Any = None,
               return_metadata: Any = None, return_properties: Any = None, **_: Any) -> QueryReturn:
        self.coll.fake.calls["hybrid"] += 1
        assert fusion_type is not None and alpha is not None, "kg always sends alpha and fusion_type"
        with self.coll.fake.lock:
            c = self.coll.cls()
            near = self.near_vector(vector, filters=filters).objects
            lexical = self._bm25_scores(c, query or "", (query_properties or ["content"])[0], filters)
            ranked_lexical = sorted(lexical, key=lambda u: -lexical[u])
            fused: Counter[uuid_package.UUID] = Counter()
            for rank, obj in enumerate(near):
                fused[obj.uuid] += alpha / (60 + rank)
            for rank, uid in enumerate(ranked_lexical):
                fused[uid] += (1 - alpha) / (60 + rank)
            return self._answer(c, [(s, u) for u, s in fused.items()], limit, "score", False, return_properties)

    def fetch_objects(self, *, limit: int | None = None, offset: int | None = None, filters: Any = None,
                      include_vector: bool = False, return_properties: Any = None, **_: Any) -> QueryReturn:
        self.coll.fake.calls["fetch_objects"] += 1
        with self.coll.fake.lock:
            c = self.coll.cls()
            uids = sorted((u for u, (p, _) in c.objects.items() if _matches(c, filters, p, u)), key=str)
            uids = uids[offset or 0:]
            return self._answer(c, [(0.0, u) for u in uids], limit, "score", include_vector, return_properties)

    def fetch_object_by_id(self, uuid: Any, **_: Any) -> Any:
        with self.coll.fake.lock:
            c = self.coll.cls()
            uid = uuid_package.UUID(str(uuid))
            if uid not in c.objects:
                return None
            return SimpleNamespace(uuid=uid, properties=dict(c.objects[uid][0]))


def _matches(c: _Class, f: Any, props: dict[str, Any], uid: uuid_package.UUID) -> bool:
    """Evaluate a weaviate-client filter against one object."""
    if f is None:
        return True
    if isinstance(f, _FilterAnd):
        return all(_matches(c, g, props, uid) for g in f.filters)
    if isinstance(f, _FilterOr):
        return any(_matches(c, g, props, uid) for g in f.filters)
    if isinstance(f, _FilterNot):
        return not _matches(c, f.filters[0], props, uid)
    assert isinstance(f, _FilterValue), f
    target, op, value = f.target, f.operator.value, f.value
    assert isinstance(target, str), "no reference filters in kg"
    if target == "_id":
        have = str(uid)
        values = {str(v) for v in (value if isinstance(value, list) else [value])}
        return {"ContainsAny": have in values, "Equal": have in values}[op]
    have = props.get(target)
    word = c.tokenization(target) == "word"
    if op == "IsNull":
        return (have is None) == value
    if op == "Equal":
        if word and isinstance(value, str):
            return set(_word_tokens(value)) <= set(_word_tokens(have or ""))
        return have == value
    if op == "ContainsAny":
        return have in set(value)
    if op == "Like":
        return isinstance(have, str) and fnmatch.fnmatchcase(have, value)
    raise AssertionError(f"operator {op} is not used by kg")
