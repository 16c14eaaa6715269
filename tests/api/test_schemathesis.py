"""Property-based fuzzing of every API operation with schemathesis ("Never a 500 for bad
input"; every error is ``{"error": {"code", "message", "details"}}``).

The schema is read once from the app's own ``/openapi.json``; each operation is one pytest test
(per database backend) on a fresh database and app, built as the ``client`` fixture builds it
(fake embedder, ``index_inline=True``) and seeded with a repository ``acme``, a workspace
``knowledge``, a few nodes with a reference and a relation, a branch ``feature/x`` whose merge
conflicts, and a finished job. Hooks mix those real names (and realistic batch items, merge
resolutions, embedding and RAG configurations) into the generated path parameters, query
strings and bodies, so that requests reach the data paths and not only the 404s.

Checks, per response: no 5xx (``not_a_server_error``; a body its route's response model refuses
is a 500 as well); every 4xx/5xx carries the API's error shape with a specific code; the
response conforms to the OpenAPI document (``response_schema_conformance``,
``status_code_conformance``, ``content_type_conformance``): every 2xx body against its response
model (kg.types, which refuses unknown keys), errors against ``ErrorBody``; and the
document describes what the server accepts (``positive_data_acceptance``): a request schemathesis
generated as schema-valid is not refused with a 4xx other than 401, 403, 404, 409 or 429, for
every operation. Where a rule spans fields or the server's state (and JSON Schema cannot say
it), the operation states it in its description and its documented 422 / 409, and the
``map_case`` hook (:data:`DOCUMENTED_RULES`) makes generated requests obey it; each such
refusal has a plain test (test_documented_rules.py). The hooks keep the values they mix in
schema-valid. Deterministic (``derandomize``) and bounded (``max_examples``) for CI;
``KG_FUZZ_EXAMPLES=500 KG_FUZZ_RANDOM=1`` hunts longer with fresh
random data.
"""

from __future__ import annotations

import base64
import json
import os
import tempfile
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck
from hypothesis import settings as fuzz_settings
from hypothesis import strategies as st
from pydantic import SecretStr
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    positive_data_acceptance,
    response_schema_conformance,
    status_code_conformance,
)

from api.app import create_app
from kg.ragnode.spec import _FILE_HEADER
from kg.settings import Settings
from kg.types.bulk import MEDIA_TYPES

#: Examples per operation; ``KG_FUZZ_EXAMPLES=500`` for a longer local hunt.
MAX_EXAMPLES = int(os.environ.get("KG_FUZZ_EXAMPLES", "30"))
#: Reproducible unless ``KG_FUZZ_RANDOM`` is set.
DERANDOMIZE = "KG_FUZZ_RANDOM" not in os.environ
NODES = "/api/repos/acme/workspaces/knowledge/nodes"


class _CurrentApp:
    """The ASGI app schemathesis sends to: forwards each request to the app of the running test.

    The test's app runs its own lifespan (the ``client`` fixture's TestClient); this proxy only
    acknowledges the lifespan messages schemathesis sends it.
    """

    def __init__(self, target) -> None:
        self.target = target

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        assert self.target is not None, "no kg app: the test must use the kg_app fixture"
        await self.target(scope, receive, send)


# The OpenAPI document does not depend on the database: an app on no services serves it.
# Built with the settings the document depends on as the tests' app has them: fake embedders
# allowed (tests/conftest.py), no reranker (api.docs.describe_server).
_SCHEMA_ONLY = create_app(services=SimpleNamespace(db=SimpleNamespace(upgrade=lambda: None), key_cache=None,
                                                  settings=Settings(allow_fake_embedder=True), reranker=None))
APP = _CurrentApp(_SCHEMA_ONLY)
schema = schemathesis.openapi.from_asgi("/openapi.json", APP)
APP.target = None

# Real names, mixed into generated requests (each value is sometimes replaced, sometimes kept).
SEED: dict[str, Any] = {"job_id": "no-job-yet"}
REAL_PATH = {
    "repo": ["acme"],
    "ws": ["knowledge"],
    "branch": ["main", "feature/x"],
    "path": ["docs", "docs/guide", "docs/guide/intro", "docs/new"],
}
#: Characters of text the store can hold (no NUL, no lone surrogate).
_STORABLE = st.characters(exclude_characters="\x00", exclude_categories=("Cs",))
ADDRESSES = ["knowledge:/docs", "knowledge:/docs/guide", "knowledge:/docs/guide/intro"]
REAL_QUERY = {
    "branch": ["main", "feature/x"],
    "against": ["main", "feature/x"],
    "at_revision": [0, 1, 3],
    "node": ADDRESSES,
    "target": ADDRESSES,
    "from": ADDRESSES,
    "to": ADDRESSES,
    "type": ["links", "mentions"],
    "parent": ["/", "/docs"],
    "prefix": ["/", "/docs/", "/docs"],
    "direction": ["OUT", "IN", "BOTH"],
    # Long values, up to the declared bounds: they reach the columns' limits (and stay
    # schema-valid: the positive-data check holds the server to the document).
    "actor": st.text(_STORABLE, min_size=250, max_size=255),
    "message": st.text(_STORABLE, min_size=250, max_size=300) | st.text(_STORABLE, min_size=9_990, max_size=10_000),
}
_SCALARS = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
            | st.text(_STORABLE, max_size=20))
_JSON = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.text(_STORABLE, max_size=5), inner, max_size=3), max_leaves=8)
_PATHS = (st.sampled_from(["/docs", "/docs/guide", "/docs/guide/intro", "/docs/new", "/other"])
          | st.from_regex(r"\A/[a-z][a-z0-9_-]{0,8}(/[a-z][a-z0-9_-]{0,8}){0,2}\Z"))
#: References as the document describes them (a node path; the target need not exist).
_REF = st.fixed_dictionaries({"kg:ref": st.sampled_from(["/docs", "/docs/guide", "/docs/new", "/other"])},
                             optional={"kg:workspace": st.sampled_from(["knowledge", "nope"])})
_PROPS = st.dictionaries(st.sampled_from(["title", "content", "see", "status"]) | st.text(_STORABLE, max_size=5),
                         _JSON | _REF | st.lists(_REF, max_size=2), max_size=4)
_CHUNKING = st.fixed_dictionaries({}, optional={
    "splitter": st.sampled_from(["recursive", "fixed_size", "markdown", "code", "words", "nope"]),
    "chunk_size": st.integers(-1, 600),
    "overlap": st.integers(-1, 600) | st.fixed_dictionaries({"type": st.sampled_from(["Tokens", "Percentage"]),
                                                             "value": st.floats(-1, 2) | st.integers(-1, 600)}),
    "unit": st.sampled_from(["tokens", "chars", "words"]),
})
_MARKDOWN = st.builds(lambda q, name, body: f'{q}\n\n### File name "{name}"\n{body}',
                      st.text(_STORABLE, max_size=20), st.text(_STORABLE, max_size=12),
                      st.text(_STORABLE, max_size=200))
REAL_BODY: dict[str, st.SearchStrategy] = {
    "from": st.sampled_from(["main", "feature/x", *ADDRESSES]),
    "to": st.sampled_from(ADDRESSES),
    "type": st.sampled_from(["links"]),
    "into": st.sampled_from(["main", "feature/x"]),
    "seeds": st.lists(st.sampled_from(ADDRESSES), min_size=1, max_size=3),
    "workspaces": st.just(["knowledge"]),
    "path_prefix": st.sampled_from(["/docs", "/docs/"]),
    "name": st.sampled_from(["acme", "knowledge", "feature/y"]),
    "query": st.sampled_from(["getting started guide"]) | st.text(_STORABLE, min_size=1, max_size=30).filter(str.strip),
    "where": st.dictionaries(st.sampled_from(["title", "status"]), _SCALARS, max_size=2),
    "properties": _PROPS,
    "upserts": st.lists(st.fixed_dictionaries({"workspace": st.just("knowledge"), "path": _PATHS}, optional={
        "node_type": st.sampled_from(["kg:Node", "kb:Article"]), "properties": _PROPS,
        "order": st.none() | st.floats(allow_nan=False, allow_infinity=False)}), max_size=3),
    "deletes": st.lists(st.fixed_dictionaries({"workspace": st.just("knowledge"), "path": _PATHS},
                                              optional={"recursive": st.booleans()}), max_size=2),
    "resolutions": st.lists(st.fixed_dictionaries(
        {"workspace": st.just("knowledge"), "path": _PATHS, "take": st.sampled_from(["ours", "theirs", "value"])},
        optional={"value": _PROPS}), max_size=2),
    "embedding": st.fixed_dictionaries({}, optional={"model": st.sampled_from(["fake:hash-64", "fake:hash-32"]),
                                                     "chunking": _CHUNKING}),
    "config": st.fixed_dictionaries({
        "embeddingModel": st.just("fake:hash-64"), "collectionName": st.sampled_from(["kcol", "rag_collection"]),
        "chunkSize": st.integers(1, 300), "chunkOverlap": st.integers(0, 300), "topK": st.integers(1, 10),
        "weaviateUrl": st.just("embedded")}),
}
#: Real values of the functions' inputs (each function's input takes some of them).
_FUNCTION_INPUT: dict[str, st.SearchStrategy] = {
    "query": st.sampled_from(["getting started guide", "documentation"]),
    "question": st.sampled_from(["What is the guide about?", "What does acme document?"]),
    "k": st.integers(1, 20), "hops": st.integers(0, 2), "seeds": st.lists(st.sampled_from(ADDRESSES), min_size=1,
                                                                          max_size=2),
    "path": st.sampled_from(["/docs", "/docs/guide", "/docs/guide/intro"]), "workspace": st.just("knowledge"),
    "workspaces": st.just(["knowledge"]), "use_graph": st.booleans(),
}


def _mixed(values: Any, real: dict[str, Any], weight: int = 1) -> st.SearchStrategy:
    """``values`` as generated, or (``weight`` times as often) with its keys that have real
    names replaced by one of them (a list of values to sample, or a strategy)."""
    if not isinstance(values, dict):
        return st.just(values)
    keys = [k for k in values if k in real]
    if not keys:
        return st.just(values)
    real_values = st.fixed_dictionaries({k: real[k] if isinstance(real[k], st.SearchStrategy)
                                         else st.sampled_from(real[k]) for k in keys})
    return st.one_of(st.just(values), *[real_values.map(lambda r: {**values, **r})] * weight)


@schema.hook
def flatmap_path_parameters(context, path_parameters):
    real = {**REAL_PATH, "job_id": [SEED["job_id"]]}
    return _mixed(path_parameters, real, weight=3)


@schema.hook
def flatmap_query(context, query):
    if context.operation.path.endswith("/changes"):
        # A stream never ends in-process: the fuzz reads pages (the stream: tests/api/test_changes.py).
        return _mixed(query, REAL_QUERY).map(lambda q: {**(q or {}), "format": "json"})
    return _mixed(query, REAL_QUERY)


#: Real names of the bodies that name a repository, a workspace or a key (no '/').
_NAMES = st.sampled_from(["acme", "knowledge", "other"])


@schema.hook
def flatmap_body(context, body):
    if context.operation.path.endswith("/branches"):  # "name" and "from" are branches there
        return _mixed(body, {**REAL_BODY, "from": st.sampled_from(["main", "feature/x"])})
    if context.operation.path == "/api/rag":  # the RAG node's input is its markdown
        return _mixed(body, {**REAL_BODY, "input": _MARKDOWN})
    if context.operation.path.startswith("/api/functions/") and isinstance(body, dict) \
            and isinstance(body.get("input"), dict):  # the input's keys the function takes
        return _mixed(body["input"], _FUNCTION_INPUT).map(lambda values: {**body, "input": values})
    return _mixed(body, {**REAL_BODY, "name": _NAMES, "from": st.sampled_from(ADDRESSES)})


def _when(value: Any) -> datetime | None:
    """A date-time of a generated body (None: absent or not one)."""
    try:
        return datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        return None


def _valid_to_after_valid_from(case) -> None:
    """``POST .../relations``: ``valid_to`` not earlier than ``valid_from`` (documented rule)."""
    start, end = _when(case.body.get("valid_from")), _when(case.body.get("valid_to"))
    if start is not None and end is not None and start.tzinfo and end.tzinfo and end < start:
        case.body["valid_from"], case.body["valid_to"] = case.body["valid_to"], case.body["valid_from"]


def _from_in_workspace(case) -> None:
    """``POST .../workspaces/{ws}/relations/invalidate``: ``from`` is a node of ``{ws}``, and
    ``valid_to`` not earlier than the seeded relation's ``valid_from`` (documented rules)."""
    source = case.body.get("from")
    if isinstance(source, str) and ":" in source:
        case.body["from"] = f"{case.path_parameters.get('ws', 'knowledge')}:{source.partition(':')[2]}"
    end, start = _when(case.body.get("valid_to")), _when(SEED.get("valid_from"))
    if end is not None and start is not None and end.tzinfo and end < start:
        case.body["valid_to"] = SEED["valid_from"]


def _mergeable(case) -> None:
    """``POST .../branches/{branch}/merge``: ``into`` is not the branch itself; resolutions name
    a conflict of the merge (the seeded one, ``knowledge:/docs/guide``, of ``feature/x`` into
    ``main``: :func:`_seed` keeps it); ``if_plan`` is the plan of a dry run of these branches, so
    none is sent (documented rules)."""
    branch = case.path_parameters.get("branch")
    if case.body.get("into") == branch:
        del case.body["into"]
    case.body.pop("if_plan", None)
    resolutions = case.body.get("resolutions")
    if not isinstance(resolutions, list):
        return
    seeded = branch == "feature/x" and case.body.get("into") in (None, "main")
    nodes = [r for r in resolutions if isinstance(r, dict) and "path" in r]
    case.body["resolutions"] = ([{**nodes[0], "workspace": "knowledge", "path": "/docs/guide"}]
                                if seeded and nodes else [])


def _next_cursor_of_repositories(case) -> None:
    """``GET /api/repos``: a cursor is a ``next_cursor`` of the listing: base64url of a
    repository name (documented rule)."""
    if isinstance(case.query, dict) and case.query.get("cursor") is not None:
        case.query["cursor"] = base64.urlsafe_b64encode(b"acme").decode().rstrip("=")


def _one_listing(case) -> None:
    """``GET .../nodes``: exactly one of ``parent`` and ``prefix``; ``order_by``, ``direction``
    and ``node_type`` with ``parent`` only, ``prefix_mode`` with ``prefix`` only; no
    ``-order_by`` with ``direction=asc``; a cursor only from a previous page, so none (the
    documented rules)."""
    query = case.query
    if not isinstance(query, dict):
        return
    query.pop("cursor", None)
    if query.get("parent") is None and query.get("prefix") is None:
        query["parent"] = "/"
    if query.get("parent") is not None:
        query.pop("prefix", None)
        query.pop("prefix_mode", None)
        order_by = query.get("order_by")
        if isinstance(order_by, str) and order_by.startswith("-") and query.get("direction") == "asc":
            del query["direction"]
    else:
        for name in ("order_by", "direction", "node_type"):
            query.pop(name, None)


def _integral(value: Any) -> int | None:
    """A JSON integer (``3`` or ``3.0``), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not float(value).is_integer():
        return None
    return int(value)


def _ollama(model: Any) -> bool:
    """An Ollama model name (any name not of the ``local:`` or ``fake:`` provider)."""
    return isinstance(model, str) and not model.startswith(("local:", "fake:"))


def _embedding_rules(case) -> None:
    """``POST .../workspaces`` and ``PATCH .../workspaces/{ws}``: the chunk overlap (a count)
    below the chunk size, a property indexed once (short or body), at most 32 in all (documented
    rules); and, as the test runs no Ollama server, a re-embed (whose probe of the model would
    be a 502) to an Ollama model goes to a fake one instead."""
    embedding = case.body.get("embedding")
    if not isinstance(embedding, dict):
        return
    embedding = case.body["embedding"] = dict(embedding)
    chunking = embedding.get("chunking")
    if isinstance(chunking, dict):
        chunking = embedding["chunking"] = dict(chunking)
        size = _integral(chunking.get("chunk_size", 512))
        overlap = chunking.get("overlap", 64)
        count = _integral(overlap.get("value") if isinstance(overlap, dict) and overlap.get("type") == "Tokens"
                          else overlap)
        if size is not None and count is not None and count >= size:
            chunking["overlap"] = size - 1
    indexed = embedding.get("indexed_properties")
    if isinstance(indexed, dict):
        indexed = embedding["indexed_properties"] = dict(indexed)
        short = indexed.get("short", ["title", "question"])
        body = indexed.get("body", ["content", "body", "text", "answer"])
        if isinstance(short, list) and isinstance(body, list):
            indexed["short"], indexed["body"] = short[:32], [p for p in body if p not in short][:32 - len(short[:32])]
            if not indexed["short"] and not indexed["body"]:
                indexed["body"] = ["content"]
    if case.body.get("reembed") is True and _ollama(embedding.get("model")):
        embedding["model"] = "fake:hash-64"


def _batch_rules(case) -> None:
    """``POST .../nodes:batch``: each (workspace, path) once (deletes first, then upserts); no
    upsert below a node the batch deletes (documented rules)."""
    seen: set[tuple[Any, Any]] = set()
    kept: dict[str, list[Any]] = {}
    for kind in ("deletes", "upserts"):
        items = case.body.get(kind)
        if not isinstance(items, list):
            continue
        kept[kind] = []
        for item in items:
            if not isinstance(item, dict):
                kept[kind].append(item)
                continue
            key = (repr(item.get("workspace")), item.get("path"))
            below = kind == "upserts" and isinstance(key[1], str) and any(
                isinstance(d, dict) and repr(d.get("workspace")) == key[0] and isinstance(d.get("path"), str)
                and key[1].startswith(d["path"] + "/") for d in kept.get("deletes", []))
            if not isinstance(key[1], str):
                kept[kind].append(item)
            elif key not in seen and not below:
                seen.add(key)
                kept[kind].append(item)
        case.body[kind] = kept[kind]
    if not case.body.get("upserts") and not case.body.get("deletes") and kept:
        case.body["upserts"] = [{"workspace": "knowledge", "path": "/docs/new"}]


def _rag_rules(case) -> None:
    """``POST /api/rag``: ``chunkOverlap`` below ``chunkSize``; each file block of the input names
    a file once, by a name that is not blank (documented rules); and, as the test runs no Ollama
    server, an Ollama model (which the node would call to embed: a 502) is a fake one instead."""
    config = case.body.get("config")
    if isinstance(config, dict):
        config = case.body["config"] = dict(config)
        size, overlap = _integral(config.get("chunkSize")), _integral(config.get("chunkOverlap"))
        if size is not None and overlap is not None and overlap >= size:
            config["chunkOverlap"] = size - 1
        if _ollama(config.get("embeddingModel")):
            config["embeddingModel"] = "fake:hash-64"
    text = case.body.get("input")
    if isinstance(text, str):
        names = iter(range(1, 1 << 30))
        case.body["input"] = _FILE_HEADER.sub(lambda _: f'### File name "file-{next(names)}.md"', text)


def _a_document(case) -> None:
    """``extract-entities``: the node is a document, not an entity (``/entities``) nor an
    extraction record (``/kg/extractions``) (documented rule)."""
    source = case.body.get("input")
    path = source.get("path") if isinstance(source, dict) else None
    if isinstance(path, str) and (path in ("/entities", "/kg/extractions")
                                  or path.startswith(("/entities/", "/kg/extractions/"))):
        case.body["input"] = {**source, "path": "/docs/guide"}


#: Statements that parse and compile (the SQL route documents its grammar in docs/guides/sql.md and
#: answers anything else with a 422 naming the construct: tests/api/test_sql_hostile.py), with the
#: parameters each binds.
SQL_STATEMENTS: list[tuple[str, list[Any]]] = [
    ("SHOW BRANCHES", []),
    ("SELECT path, node_type FROM 'knowledge' WHERE path = $1", ["/docs"]),
    ("SELECT path, score FROM HYBRID_SEARCH($1, 3, workspaces => 'knowledge', granularity => 'chunk')", ["guide"]),
    ("SELECT path FROM 'knowledge' WHERE CHILD_OF('/docs') ORDER BY __order LIMIT 5", []),
    ("SELECT path, relation_type, weight FROM NEIGHBORS('knowledge:/docs', 'BOTH', NULL)", []),
]
#: What the test's server lets a webhook deliver to (``KG_WEBHOOK_ALLOWED_URLS``, a setting of the
#: server: see the ``settings`` fixture); nothing listens there.
WEBHOOK_URL = "http://127.0.0.1:9/hooks/"


def _parsable_sql(case) -> None:
    """``POST /api/sql/{repo}/{branch}``: statements of the documented grammar (a grammar, which a
    JSON Schema does not describe), picked by the generated text so that examples vary."""
    text = case.body.get("sql")
    statement, params = SQL_STATEMENTS[sum(map(ord, text)) % len(SQL_STATEMENTS) if isinstance(text, str) else 0]
    case.body["sql"], case.body["params"] = statement, params


def _allowed_webhook_url(case) -> None:
    """``POST .../webhooks``: a URL the server's ``KG_WEBHOOK_ALLOWED_URLS`` allows (documented rule:
    a setting of the server; the refusal is tested in tests/api/test_webhooks.py)."""
    case.body["url"] = WEBHOOK_URL + "kg"


#: Node texts the store can hold (no NUL, no lone surrogate), for the files the import is sent.
STORABLE_TEXT = st.text(alphabet=st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=120)


def _ndjson_file(texts: list[str]) -> bytes:
    """A ``kg-ndjson`` file for ``acme``'s ``knowledge``: a folder and a node per text."""
    records: list[dict[str, Any]] = [
        {"record": "header", "format": "kg-ndjson", "version": 1, "repo": "acme", "branch": "main", "revision": 0,
         "workspaces": [{"name": "knowledge"}]},
        {"record": "node", "workspace": "knowledge", "path": "/imported", "node_type": "kg:Folder"}]
    records += [{"record": "node", "workspace": "knowledge", "path": f"/imported/n{i}", "node_type": "kb:Doc",
                 "properties": {"content": text}} for i, text in enumerate(texts)]
    return "".join(json.dumps(record) + "\n" for record in records).encode("utf-8")


def _parquet_file(texts: list[str]) -> bytes:
    """The same records as a ``kg-parquet`` file."""
    from kg.ops.bulk_parquet import ParquetSink

    with tempfile.TemporaryDirectory() as folder:
        target = Path(folder) / "records.parquet"
        sink = ParquetSink(target)
        for line in _ndjson_file(texts).decode("utf-8").splitlines():
            sink.write(line + "\n")
        sink.close()
        return target.read_bytes()


# The import's body: a file of records in the media type's format (JSON Schema says "binary").
schemathesis.openapi.media_type(MEDIA_TYPES["ndjson"], st.lists(STORABLE_TEXT, max_size=4).map(_ndjson_file))
schemathesis.openapi.media_type(MEDIA_TYPES["parquet"], st.lists(STORABLE_TEXT, max_size=4).map(_parquet_file))


def _format_of_the_body(case) -> None:
    """``POST /api/repos/{repo}/import``: ``format`` names what the body is (documented rule: a
    Parquet file sent as ``ndjson`` is refused with 422, tests/api/test_import_http.py)."""
    case.query = {**(case.query or {}), "format": "parquet" if case.media_type == MEDIA_TYPES["parquet"] else "ndjson"}


#: The rules across fields (or with the server's state) each operation documents, in its
#: description and its 422 / 409 answer: a generated request is made to obey them, so that the
#: positive-data check holds the server to the rest of the document. Each rule's refusal has a
#: plain test of its own (tests/api/test_documented_rules.py).
DOCUMENTED_RULES: dict[str, Any] = {
    "POST /api/repos/{repo}/relations": _valid_to_after_valid_from,
    "POST /api/repos/{repo}/workspaces/{ws}/relations/invalidate": _from_in_workspace,
    "POST /api/repos/{repo}/branches/{branch}/merge": _mergeable,
    "GET /api/repos": _next_cursor_of_repositories,
    "GET /api/repos/{repo}/workspaces/{ws}/nodes": _one_listing,
    "POST /api/repos/{repo}/workspaces": _embedding_rules,
    "PATCH /api/repos/{repo}/workspaces/{ws}": _embedding_rules,
    "POST /api/repos/{repo}/nodes:batch": _batch_rules,
    "POST /api/rag": _rag_rules,
    "POST /api/functions/{repo}/extract-entities/invoke": _a_document,
    "POST /api/sql/{repo}/{branch}": _parsable_sql,
    "POST /api/repos/{repo}/webhooks": _allowed_webhook_url,
    "POST /api/repos/{repo}/import": _format_of_the_body,
}


@schema.hook
def map_case(context, case):
    rule = DOCUMENTED_RULES.get(case.operation.label)
    if rule is _format_of_the_body:  # a file, whatever schemathesis made of it: the query names its format
        rule(case)
        return case
    if rule is not None and (isinstance(case.body, dict) or case.operation.method.upper() == "GET"):
        # The coverage phase shares one container between cases: each rule edits its own copy.
        if isinstance(case.body, dict):
            case.body = dict(case.body)
        if isinstance(case.query, dict):
            case.query = dict(case.query)
        rule(case)
    return case


def _seed(client) -> None:
    """Repository, workspace, nodes, a relation, a branch ``feature/x`` whose merge into ``main``
    conflicts, a finished job.
    Idempotent: run again after a request that may have deleted some of it."""
    client.post("/api/repos", json={"name": "acme"})
    client.post("/api/repos/acme/workspaces", json={"name": "knowledge"})
    for path, props in (("/docs", {"title": "Docs", "content": "The documentation of acme."}),
                        ("/docs/guide", {"title": "Guide", "content": "A getting started guide.",
                                         "see": {"kg:ref": "/docs", "kg:workspace": "knowledge"}}),
                        ("/docs/guide/intro", {"content": "Introduction to the guide."})):
        if client.get(f"{NODES}{path}").status_code != 200:
            assert client.put(f"{NODES}{path}", params={"parents": "true"},
                              json={"node_type": "kb:Article", "properties": props}).status_code in (200, 201)
    relation = client.post("/api/repos/acme/relations", json={"from": "knowledge:/docs", "to": "knowledge:/docs/guide",
                                                              "type": "links", "weight": 0.5})
    if relation.status_code in (200, 201) and relation.json().get("valid_from"):
        SEED["valid_from"] = relation.json()["valid_from"]
    if client.get("/api/repos/acme/branches/feature/x").status_code != 200:
        assert client.post("/api/repos/acme/branches", json={"name": "feature/x"}).status_code == 201
    dry_run = client.post("/api/repos/acme/branches/feature/x/merge", json={"into": "main", "dry_run": True})
    if dry_run.status_code == 200:  # no conflict (yet, or no more: a merge resolved it): a new one
        SEED["edits"] = SEED.get("edits", 0) + 1
        client.patch(f"{NODES}/docs/guide", params={"branch": "feature/x"},
                     json={"properties": {"title": f"Guide (feature {SEED['edits']})"}})
        client.patch(f"{NODES}/docs/guide", json={"properties": {"title": f"Guide (main {SEED['edits']})"}})
    job = client.post("/api/functions/acme/search-documents/invoke",
                      json={"input": {"query": "guide"}, "wait_for_completion": False})
    if job.status_code == 202:
        SEED["job_id"] = job.json()["job_id"]


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """The ``client`` fixture's settings with a key pepper (``POST /api/keys`` makes keys) and a
    webhook URL allowed."""
    return settings.model_copy(update={"key_pepper": SecretStr("schemathesis-pepper-" + "x" * 32),
                                       "webhook_allowed_urls": [WEBHOOK_URL]})


@pytest.fixture
def kg_app(client):
    """This test's app (fresh database, seeded), reachable by schemathesis through ``APP``."""
    _seed(client)
    APP.target = client.app
    try:
        yield client
    finally:
        APP.target = None


#: Fallback codes: a 4xx/5xx answering one of them was not mapped to a kg error.
GENERIC_CODES = {"error", "http_error", "internal"}


def kg_error_shape(ctx, response, case) -> None:
    """Every 4xx/5xx body is ``{"error": {"code", "message", "details"}}`` (docs/reference/errors.md)
    with a specific code."""
    if response.status_code < 400:
        return None
    try:
        body = response.json()
    except Exception as exc:  # noqa: BLE001
        raise AssertionError(f"{response.status_code} without a JSON body: {response.text[:200]!r}") from exc
    assert isinstance(body, dict) and set(body) == {"error"}, f"not the API's error shape: {body!r}"
    error = body["error"]
    assert isinstance(error, dict) and set(error) == {"code", "message", "details"}, \
        f"not the API's error shape: {body!r}"
    assert isinstance(error["code"], str) and error["code"] not in GENERIC_CODES, f"generic error code: {body!r}"
    assert isinstance(error["message"], str) and error["message"], f"empty error message: {body!r}"
    assert isinstance(error["details"], dict), f"details is not an object: {body!r}"
    return None


#: Not ``negative_data_rejection``: the hooks above may turn a generated schema-violating value
#: into a valid one after schemathesis recorded it as negative, so that check would misfire.
CHECKS = [not_a_server_error, kg_error_shape, response_schema_conformance, status_code_conformance,
          content_type_conformance]


@schema.parametrize()
@fuzz_settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=DERANDOMIZE, database=None,
          suppress_health_check=list(HealthCheck))
def test_api_never_500_and_errors_have_the_api_shape(case, kg_app):
    response = case.call()
    case.validate_response(response, checks=[*CHECKS, positive_data_acceptance])
    if response.status_code < 300 and (case.method.upper() == "DELETE" or case.path.endswith(("/reset", "/merge"))):
        _seed(kg_app)  # the next examples find the data again


def test_openapi_documents_the_error_shape_and_every_status():
    """The document tells the truth: errors are ``ErrorBody`` (not FastAPI's
    ``HTTPValidationError``), and the 201 / 202 answers are listed."""
    doc = _SCHEMA_ONLY.openapi()
    schemas = doc["components"]["schemas"]
    assert "HTTPValidationError" not in schemas and "ValidationError" not in schemas
    assert schemas["ErrorBody"]["required"] == ["error"]
    assert schemas["ErrorInfo"]["required"] == ["code", "message", "details"]
    error_ref = {"$ref": "#/components/schemas/ErrorBody"}
    for path, operations in doc["paths"].items():
        for method, operation in operations.items():
            for status in ("4XX", "5XX"):
                assert operation["responses"][status]["content"]["application/json"]["schema"] == error_ref, \
                    (method, path, status)
            for status in ("409", "422"):  # documented refusals: the error shape, not HTTPValidationError
                if status in operation["responses"]:
                    assert operation["responses"][status]["content"]["application/json"]["schema"] == error_ref, \
                        (method, path, status)
    paths = doc["paths"]
    assert {"200", "201"} <= set(paths["/api/repos/{repo}/workspaces/{ws}/nodes/{path}"]["put"]["responses"])
    assert {"200", "201"} <= set(paths["/api/repos/{repo}/relations"]["post"]["responses"])
    for name in ("search-documents", "ask", "graph-context", "extract-entities", "research-assistant",
                 "resolve-entities"):  # one operation per function, with its own input
        invoke = paths[f"/api/functions/{{repo}}/{name}/invoke"]["post"]
        assert {"200", "202"} <= set(invoke["responses"])
    assert "/api/functions/{repo}/{name}/invoke" not in paths
    delete_params = {p["name"]: p["schema"] for p in paths["/api/repos/{repo}/relations"]["delete"]["parameters"]}
    assert delete_params["actor"]["anyOf"][0]["maxLength"] == 255


def test_openapi_documents_the_names_paths_and_texts_kg_accepts():
    """The document carries kg's own patterns (kg/store/paths.py): a schema-valid name, path or
    address is one the server accepts (it said only "string", and refused ``""``, ``a/b`` as a
    repository, ``/a//b`` as a path... with a 422)."""
    from kg.store.paths import ADDRESS_PATTERN, BRANCH_PATTERN, NAME_PATTERN, PATH_TAIL_PATTERN, TEXT_PATTERN

    doc = _SCHEMA_ONLY.openapi()
    node = doc["paths"]["/api/repos/{repo}/workspaces/{ws}/nodes/{path}"]["get"]
    params = {p["name"]: p["schema"] for p in node["parameters"]}
    assert params["repo"]["pattern"] == params["ws"]["pattern"] == NAME_PATTERN
    assert params["path"]["pattern"] == PATH_TAIL_PATTERN and params["path"]["maxLength"] == 1023
    assert params["branch"]["pattern"] == BRANCH_PATTERN and params["branch"]["maxLength"] == 255
    merge = doc["paths"]["/api/repos/{repo}/branches/{branch}/merge"]["post"]
    assert {p["name"]: p["schema"] for p in merge["parameters"]}["branch"]["pattern"] == BRANCH_PATTERN
    schemas = doc["components"]["schemas"]
    assert schemas["RepoCreate"]["properties"]["name"]["pattern"] == NAME_PATTERN
    assert schemas["BranchCreate"]["properties"]["name"]["pattern"] == BRANCH_PATTERN
    assert schemas["RelationCreate"]["properties"]["from"]["pattern"] == ADDRESS_PATTERN
    assert schemas["NodePut"]["properties"]["actor"]["pattern"] == TEXT_PATTERN


def test_openapi_documents_the_rules_across_fields():
    """Rules the server checks beyond single fields are in the document: a key needs grants or
    ``admin``; a hybrid search keeps a weight above 0 and fusion is for hybrid only; node
    properties hold keys without NUL and well-formed references; integers are bounded."""
    from kg.store.paths import NON_BLANK_PATTERN, PATH_PATTERN, PREFIX_PATTERN, TEXT_PATTERN

    schemas = _SCHEMA_ONLY.openapi()["components"]["schemas"]
    key = schemas["KeyCreate"]
    assert {"required": ["admin"], "properties": {"admin": {"const": True}}} in key["anyOf"]
    assert key["properties"]["expires_in_s"]["anyOf"][0] == {"type": "integer", "minimum": 1,
                                                             "maximum": 10 * 366 * 86400}
    search = schemas["SearchRequest"]
    assert search["properties"]["query"]["pattern"] == NON_BLANK_PATTERN
    assert search["properties"]["path_prefix"]["pattern"] == PREFIX_PATTERN
    assert search["allOf"][1]["then"]["properties"]["fusion"] == {"type": "null"}
    for model in ("NodePut", "NodePatch"):
        properties = schemas[model]["properties"]["properties"]
        assert properties["propertyNames"] == {"pattern": TEXT_PATTERN}
        reference = properties["additionalProperties"]["allOf"][0]
        assert reference["then"]["properties"]["kg:ref"]["pattern"] == PATH_PATTERN
    revision = schemas["BranchCreate"]["properties"]["at_revision"]["anyOf"][0]
    assert revision == {"type": "integer", "minimum": 0, "maximum": 2_147_483_647}
