"""Bulk export and import of a branch as NDJSON (``kg export``, ``kg import ndjson``).

The format (``kg-ndjson``, version 1) is one JSON object a line, UTF-8, its ``record`` field
saying what it is. In the order :func:`export_ndjson` writes them:

``header`` (the first line, once)
    ``{"record": "header", "format": "kg-ndjson", "version": 1, "repo", "branch", "revision",
    "with_chunks", "workspaces": [{"name", "embedding"}], "counts": {"nodes", "relations",
    "chunks"}}``: where the content was read, the workspaces' embedding settings
    (:class:`kg.indexing.config.EmbeddingConfig`), how many records follow (optional on
    import; when given, a file holding another number, a truncated one, is refused).
``node``
    ``{"record": "node", "workspace", "path", "node_type", "properties", "order",
    "created_at", "updated_at"}`` by workspace then path (parents first); id, name, parent and
    content key are derived as every write derives them. Defaults: ``kg:Node``, ``{}``, null,
    and the import's time for the ISO 8601 timestamps.
``relation``
    ``{"record": "relation", "from", "to", "type", "weight", "properties", "created_at",
    "valid_from"?, "valid_to"?, "invalidated_by"?}``, ``workspace:/path`` endpoints, by (from,
    type, to); the validity fields (ISO 8601 with a zone) only when set.
``chunk`` (with ``--with-chunks``)
    ``{"record": "chunk", "content_key", "chunk_index", "field", "text", "char_start",
    "char_end", "model", "dim", "vector"}``: a passage of a node's indexed text (its content
    key under the workspace's settings) and its embedding, ``vector`` base64 of ``dim``
    float32 little-endian values; by content key then index.

An import checks every record before it writes anything: each line against a pydantic model
(unknown fields refused), then the file whole (one node per address, one relation per (from,
to, type), parents and endpoints in the file or on the branch, chunks of the file's nodes at
their model's dimension); the first bad record is named by its line (``"line N: ..."``) and
nothing is written. It then writes, as one revision by default, exactly the rows
:func:`kg.ops.nodes.write_graph` writes for the same content (node versions, reference rows,
embedding jobs of texts without stored chunks, relation versions, revision, branch head), by
executemany of whole batches instead of a lookup and a flush per node. Chunks are stored with
their vectors, not embedded again. A node on the branch is replaced; an import never deletes.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import functools
import json
import logging
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import IO, Annotated, Any, NamedTuple

import numpy as np
import orjson
from pydantic import ConfigDict, Field, TypeAdapter, ValidationError
from sqlalchemy import Text, cast, func, insert, select, text
from sqlalchemy.orm import Session

from kg import collector
from kg.access import (
    authorize_new_repository,
    authorize_new_workspace,
    can_see,
    refuse_reserved_workspace,
    reserved_repositories,
)
from kg.context import Actor, Resources, UnitOfWork, reading, unit_of_work
from kg.errors import InvalidInput, KGError, NotFound
from kg.graph.validity import check_interval, maybe_aware
from kg.indexing.chunks import SqlChunkFeed, content_keyer, existing_content_keys, sync_index
from kg.indexing.config import parse_embedding_config, workspace_embedding
from kg.indexing.index_jobs import enqueue_many
from kg.providers.base import Embedder
from kg.store import repos as repo_store
from kg.store.models import Chunk, NodeVersion, Reference, RelationVersion, utcnow
from kg.store.nodes import live_rows, node_uids, validate_node_input
from kg.store.paths import name_of, parent_of, parse_address, validate_name, validate_path
from kg.store.references import extract_references
from kg.store.relations import RELATION_KEY, validate_relation_type
from kg.store.repos import MAIN, BranchView, WriteContext
from kg.store.rows import insert_node_versions, insert_rows
from kg.store.visibility import visible_select
from kg.text.storable import check_json
from kg.types.bulk import (
    DEFAULT_NODE_TYPE,
    FORMAT,
    FORMAT_VERSION,
    PARQUET_FORMAT,
    ChunkRecord,
    HeaderRecord,
    NdjsonImport,
    NodeRecord,
    RelationRecord,
    UnchangedRecords,
)

__all__ = ["FORMAT", "FORMAT_VERSION", "BulkFile", "check_batch_size", "export_ndjson", "import_ndjson",
           "import_records", "parse_ndjson"]

log = logging.getLogger(__name__)

#: Addresses looked up one statement per this many; above ``_SCAN_ABOVE`` a workspace is scanned.
_LOOKUP_BATCH = 500
_SCAN_ABOVE = 5_000
#: Rows per executemany (bounded memory for the driver's parameter lists).
_INSERT_BATCH = 20_000
#: SQLite's page cache while an import of at least ``_BIG_WRITE`` rows writes, in KiB (given back afterwards).
_SQLITE_CACHE_KIB = 256 * 1024
_BIG_WRITE = 5_000


# -- records (kg.types.bulk) -----------------------------------------------------------------

_ANY_RECORD: TypeAdapter[HeaderRecord | NodeRecord | RelationRecord | ChunkRecord] = TypeAdapter(
    Annotated[HeaderRecord | NodeRecord | RelationRecord | ChunkRecord, Field(discriminator="record")])
_KINDS = "'header', 'node', 'relation' or 'chunk'"


class _Slow(Exception):  # noqa: N818 (a signal, not an error)
    """A line the fast reader does not take as it stands: pydantic reads it (and names the problem)."""


_NODE_FIELDS = frozenset(NodeRecord.model_fields)
_RELATION_FIELDS = frozenset(f.alias or name for name, f in RelationRecord.model_fields.items())
_CHUNK_FIELDS = frozenset(ChunkRecord.model_fields)
_HEX64 = re.compile(r"[0-9a-f]{64}")
#: orjson reads an integer past 64 bits as a float: a whole float this large sends the line to pydantic.
_LONG_FLOAT = 2.0**63
_WHEN: TypeAdapter[datetime] = TypeAdapter(datetime, config=ConfigDict(strict=True))
#: Chunks whose vectors are decoded together (one base64 decode and one check of a matrix).
_VECTOR_BATCH = 4096
_MISSING: Any = object()


@dataclass
class _Nodes:
    """The node records of a file as columns, in file order (paths in NFC)."""

    line: list[int] = field(default_factory=list)
    workspace: list[str] = field(default_factory=list)
    path: list[str] = field(default_factory=list)
    node_type: list[str] = field(default_factory=list)
    properties: list[dict[str, Any]] = field(default_factory=list)
    order: list[float | None] = field(default_factory=list)
    created_at: list[datetime | None] = field(default_factory=list)
    updated_at: list[datetime | None] = field(default_factory=list)
    references: list[list[tuple[str, str, str]]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.line)


@dataclass
class _Relations:
    """The relation records of a file as columns, in file order (endpoints parsed)."""

    line: list[int] = field(default_factory=list)
    source: list[tuple[str, str]] = field(default_factory=list)
    target: list[tuple[str, str]] = field(default_factory=list)
    type: list[str] = field(default_factory=list)
    weight: list[float | None] = field(default_factory=list)
    properties: list[dict[str, Any]] = field(default_factory=list)
    created_at: list[datetime | None] = field(default_factory=list)
    valid_from: list[datetime | None] = field(default_factory=list)
    valid_to: list[datetime | None] = field(default_factory=list)
    invalidated_by: list[str | None] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.line)


@dataclass
class _Chunks:
    """The chunk records of a file as columns, in file order; ``embedding`` the vector's float32
    bytes (native order, as the store holds them) once decoded and checked."""

    line: list[int] = field(default_factory=list)
    content_key: list[str] = field(default_factory=list)
    chunk_index: list[int] = field(default_factory=list)
    source_field: list[str] = field(default_factory=list)  # the record's ``field``
    text: list[str] = field(default_factory=list)
    char_start: list[int] = field(default_factory=list)
    char_end: list[int] = field(default_factory=list)
    model: list[str] = field(default_factory=list)
    dim: list[int] = field(default_factory=list)
    embedding: list[bytes] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.line)


@dataclass
class BulkFile:
    """A file of records checked on its own (:func:`parse_ndjson`): the header, then the node
    (paths in NFC), relation (endpoints parsed) and chunk records (vectors decoded) as columns,
    in file order.
    """

    header: HeaderRecord
    nodes: _Nodes = field(default_factory=_Nodes)
    relations: _Relations = field(default_factory=_Relations)
    chunks: _Chunks = field(default_factory=_Chunks)
    last_line: int = 0


def _bad(line: int, why: str, **details: Any) -> InvalidInput:
    return InvalidInput(f"line {line}: {why}", details={"line": line, **details})


def _record_error(line: int, exc: ValidationError) -> InvalidInput:
    """The first problem pydantic found in a line, as one sentence naming the line."""
    first = exc.errors(include_url=False)[0]
    kind, loc, msg = first["type"], first["loc"], first["msg"]
    if kind == "json_invalid":
        return _bad(line, f"not JSON ({msg.removeprefix('Invalid JSON: ')})")
    if kind == "union_tag_invalid":
        tag = (first.get("ctx") or {}).get("tag")
        return _bad(line, f"unknown record type {tag!r} (expected {_KINDS})")
    if kind == "union_tag_not_found":
        return _bad(line, f"a record needs a 'record' field: {_KINDS}")
    if not loc:
        return _bad(line, "a record must be a JSON object")
    kind_name, where = loc[0], ".".join(str(p) for p in loc[1:])
    if kind == "extra_forbidden":
        return _bad(line, f"{kind_name} record has an unknown field {where!r}")
    if kind == "missing":
        return _bad(line, f"{kind_name} record needs the field {where!r}")
    return _bad(line, f"{kind_name} record field {where!r}: {msg}")


def _decode_vector(line: int, vector: str, dim: int) -> np.ndarray:
    """One chunk's vector, checked: ``dim`` finite float32 values, not all zero."""
    try:
        raw = base64.b64decode(vector, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise _bad(line, f"chunk vector is not base64: {exc}") from exc
    if len(raw) != 4 * dim:
        raise _bad(line, f"chunk vector holds {len(raw) / 4:g} float32 values, but its dim is {dim}", dim=dim)
    values = np.frombuffer(raw, dtype="<f4").astype(np.float32)
    if not np.isfinite(values).all():
        raise _bad(line, "chunk vector has non-finite values (NaN or inf)")
    if not values.any():
        raise _bad(line, "chunk vector is all zeros")
    return values


def _decode_vectors(lines: Sequence[int], vectors: Sequence[str], dim: int) -> list[bytes]:
    """The vectors of chunks of one dimension, decoded and checked together: their base64 texts
    joined and decoded by one call when each is whole (``4 * dim`` bytes need no padding when
    ``dim`` is a multiple of 3), else one call each; then the matrix checked for finite, non-zero
    rows at once. A bad vector is named as :func:`_decode_vector` names it (the first by line).
    O(total base64 length) in C, with no array per chunk.
    """
    width = 4 * dim
    try:
        if dim % 3 == 0 and all(len(v) == width // 3 * 4 for v in vectors):
            raw = base64.b64decode("".join(vectors), validate=True)
        else:
            parts = [base64.b64decode(v, validate=True) for v in vectors]
            if any(len(p) != width for p in parts):
                raise ValueError("a vector of another length")
            raw = b"".join(parts)
        matrix = np.frombuffer(raw, dtype="<f4").reshape(len(vectors), dim)
        bad = ~(np.isfinite(matrix).all(axis=1) & matrix.any(axis=1))
    except (binascii.Error, ValueError):
        bad = np.ones(len(vectors), dtype=bool)
    if bad.any():
        for i in np.flatnonzero(bad):
            _decode_vector(lines[int(i)], vectors[int(i)], dim)  # raises for the first bad one
        matrix = np.stack([_decode_vector(line, vector, dim) for line, vector in zip(lines, vectors, strict=True)])
    native = matrix.astype(np.float32, copy=False).tobytes()
    return [native[i:i + width] for i in range(0, len(native), width)]


def _plain_json(line: int, what: str, value: dict[str, Any]) -> None:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise _bad(line, f"{what} must be plain JSON: {exc}") from exc


class _Reader:
    """:func:`parse_ndjson`'s state: the file's columns and what was seen so far.

    A line is parsed by orjson and its fields checked by hand against the record's model (exact
    JSON types, no unknown field, the constraints); a line that does not pass as it stands (a
    wrong type, a header, a number past 64 bits) is read by pydantic, which names its problem,
    so every line is accepted or refused as the models decide, with one dict per line and no
    model object per record. Chunk vectors are decoded in batches of :data:`_VECTOR_BATCH`.
    """

    def __init__(self) -> None:
        self.bulk: BulkFile | None = None
        self.workspaces: set[str] = set()
        self.nodes: dict[tuple[str, str], int] = {}
        self.relations: dict[tuple[tuple[str, str], tuple[str, str], str], int] = {}
        self.chunks: dict[tuple[str, int], int] = {}
        self.addresses: dict[str, tuple[str, str]] = {}
        self.types: set[str] = set()
        self.times: dict[str, datetime] = {}
        self.pending: list[tuple[int, str, int]] = []  # (line, base64, dim) of chunks not decoded yet

    # -- reading a line

    def read(self, number: int, raw: str | bytes) -> None:
        """Take one non-blank line (a bad one raises, after any earlier bad vector)."""
        try:
            self._read(number, raw)
        except InvalidInput:
            self.flush()  # a bad vector on an earlier line is the first problem
            raise

    def _read(self, number: int, raw: str | bytes) -> None:
        escaped = ("\\u" if isinstance(raw, str) else b"\\u") in raw  # type: ignore[operator]
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            value = None
        kind: str | None = value.get("record") if type(value) is dict else None
        fields: dict[str, Any] | None = None
        record: Any = None
        if kind in ("node", "relation", "chunk") and self.bulk is not None:
            try:
                fields = self._fields(kind, value)
            except _Slow:
                fields = None
        fast = fields is not None
        if not fast:
            try:
                record = _ANY_RECORD.validate_json(raw)
            except ValidationError as exc:
                raise _record_error(number, exc) from exc
            kind, value = record.record, record.model_dump(by_alias=True)
            fields = None if isinstance(record, HeaderRecord) else record.model_dump()
        # text the store cannot hold (a NUL, a lone surrogate) can only come as a \u escape
        if escaped:
            try:
                check_json(value, "the record")
            except InvalidInput as exc:
                raise _bad(number, exc.message) from exc
        if self.bulk is None:
            if kind != "header":
                raise _bad(number, f"the first record must be the header, not a {kind}")
            self._header(number, record)  # a header is always read by pydantic
            return
        if kind == "header":
            raise _bad(number, "a second header: a file holds one")
        assert fields is not None
        if kind == "node":
            refs = escaped or ("kg:ref" if isinstance(raw, str) else b"kg:ref") in raw  # type: ignore[operator]
            growth = _JSON_GROWTH if isinstance(raw, bytes) else 2 * _JSON_GROWTH  # a character: 4 bytes
            self._node(number, fields, size=growth * len(raw) if fast else None, refs=refs)
        elif kind == "relation":
            self._relation(number, fields, plain=fast)
        else:
            self._chunk(number, fields)

    def _fields(self, kind: str, value: dict[str, Any]) -> dict[str, Any]:
        """The record's fields as its model would give them (defaults, floats, datetimes), or
        :class:`_Slow` when the line is not plainly valid."""
        get = value.get
        if kind == "node":
            if not value.keys() <= _NODE_FIELDS:
                raise _Slow
            properties = get("properties", _MISSING)
            out = {"workspace": _text(get("workspace")), "path": _text(get("path")),
                   "node_type": _text(get("node_type", DEFAULT_NODE_TYPE)),
                   "properties": {} if properties is _MISSING else _object(properties),
                   "order": _number(get("order")), "created_at": self._when(get("created_at")),
                   "updated_at": self._when(get("updated_at"))}
            return out
        if kind == "relation":
            if not value.keys() <= _RELATION_FIELDS:
                raise _Slow
            properties = get("properties", _MISSING)
            by = get("invalidated_by")
            if by is not None and (type(by) is not str or not 1 <= len(by) <= 2000):
                raise _Slow
            return {"source": _text(get("from")), "to": _text(get("to")), "type": _text(get("type")),
                    "weight": _number(get("weight")),
                    "properties": {} if properties is _MISSING else _object(properties),
                    "created_at": self._when(get("created_at")), "valid_from": self._when(get("valid_from")),
                    "valid_to": self._when(get("valid_to")), "invalidated_by": by}
        if value.keys() != _CHUNK_FIELDS:
            raise _Slow
        key = _text(value["content_key"])
        if not _HEX64.fullmatch(key):
            raise _Slow
        out = {"content_key": key, "chunk_index": _count(value["chunk_index"]), "field": _text(value["field"]),
               "text": _text(value["text"]), "char_start": _count(value["char_start"]),
               "char_end": _count(value["char_end"]), "model": _text(value["model"]),
               "dim": _count(value["dim"]), "vector": _text(value["vector"])}
        if out["dim"] == 0:
            raise _Slow
        return out

    def _when(self, value: Any) -> datetime | None:
        """A timestamp field as pydantic reads it (strict, from JSON), each distinct text once."""
        if value is None:
            return None
        if type(value) is not str:
            raise _Slow
        found = self.times.get(value)
        if found is None:
            try:
                found = _WHEN.validate_json(orjson.dumps(value))
            except ValidationError as exc:
                raise _Slow from exc
            if len(self.times) < 100_000:
                self.times[value] = found
        return found

    # -- checking a record

    def _header(self, number: int, header: Any, *, format_name: str = FORMAT) -> None:
        assert isinstance(header, HeaderRecord)
        if header.format != format_name:
            raise _bad(number, f"the header says {header.format!r}: this reader takes {format_name!r} files")
        self.bulk = BulkFile(header=header)
        for ws in header.workspaces:
            try:
                validate_name("workspace", ws.name)
                parse_embedding_config(ws.embedding, default_model="none")
            except InvalidInput as exc:
                raise _bad(number, f"header workspace {ws.name!r}: {exc.message}") from exc
            if ws.name in self.workspaces:
                raise _bad(number, f"header names workspace {ws.name!r} twice")
            self.workspaces.add(ws.name)

    def _node(self, line: int, f: dict[str, Any], *, size: int | None, refs: bool) -> None:
        """A node record checked as a write checks it. ``size`` (a line parsed as plain JSON): its
        length bounds the properties' serialisation; ``refs``: the line may hold a reference."""
        assert self.bulk is not None
        workspace = f["workspace"]
        if workspace not in self.workspaces:
            raise _bad(line, f"node workspace {workspace!r} is not one of the header's workspaces")
        try:
            path = validate_path(f["path"])
            validate_node_input(f["node_type"], f["properties"], f["order"],
                                json_size_bound=None if size is None else size)
            references = extract_references(f["properties"], workspace=workspace) if refs else []
        except InvalidInput as exc:
            raise _bad(line, exc.message) from exc
        address = (workspace, path)
        if address in self.nodes:
            raise _bad(line, f"node {workspace}:{path} is named twice (first on line {self.nodes[address]})",
                       workspace=workspace, path=path)
        self.nodes[address] = line
        n = self.bulk.nodes
        n.line.append(line)
        n.workspace.append(workspace)
        n.path.append(path)
        n.node_type.append(f["node_type"])
        n.properties.append(f["properties"])
        n.order.append(f["order"])
        n.created_at.append(f["created_at"])
        n.updated_at.append(f["updated_at"])
        n.references.append(references)

    def _relation(self, line: int, f: dict[str, Any], *, plain: bool) -> None:
        """A relation record checked as a relate checks it (``plain``: parsed as plain JSON)."""
        assert self.bulk is not None
        addresses, raw_source, raw_target, rel_type = self.addresses, f["source"], f["to"], f["type"]
        try:
            source = addresses.get(raw_source) or addresses.setdefault(raw_source, parse_address(raw_source))
            target = addresses.get(raw_target) or addresses.setdefault(raw_target, parse_address(raw_target))
            if rel_type not in self.types:
                self.types.add(validate_relation_type(rel_type))
        except InvalidInput as exc:
            raise _bad(line, exc.message) from exc
        if f["properties"] and not plain:
            _plain_json(line, "relation properties", f["properties"])
        try:
            check_interval(maybe_aware(f["valid_from"], "valid_from"), maybe_aware(f["valid_to"], "valid_to"))
        except InvalidInput as exc:
            raise _bad(line, exc.message) from exc
        key = (source, target, rel_type)
        if key in self.relations:
            raise _bad(line, f"relation {raw_source} -[{rel_type}]-> {raw_target} is named twice "
                             f"(first on line {self.relations[key]})")
        self.relations[key] = line
        r = self.bulk.relations
        r.line.append(line)
        r.source.append(source)
        r.target.append(target)
        r.type.append(rel_type)
        r.weight.append(f["weight"])
        r.properties.append(f["properties"])
        r.created_at.append(f["created_at"])
        r.valid_from.append(f["valid_from"])
        r.valid_to.append(f["valid_to"])
        r.invalidated_by.append(f["invalidated_by"])

    def _chunk(self, line: int, f: dict[str, Any]) -> None:
        assert self.bulk is not None
        key = (f["content_key"], f["chunk_index"])
        if key in self.chunks:
            raise _bad(line, f"chunk {key[1]} of content key {key[0]} is named twice (first on line "
                             f"{self.chunks[key]})")
        self.chunks[key] = line
        if f["char_end"] < f["char_start"]:
            raise _bad(line, "chunk char_end is before its char_start")
        c = self.bulk.chunks
        c.line.append(line)
        c.content_key.append(f["content_key"])
        c.chunk_index.append(f["chunk_index"])
        c.source_field.append(f["field"])
        c.text.append(f["text"])
        c.char_start.append(f["char_start"])
        c.char_end.append(f["char_end"])
        c.model.append(f["model"])
        c.dim.append(f["dim"])
        self.pending.append((line, f["vector"], f["dim"]))
        if len(self.pending) >= _VECTOR_BATCH:
            self.flush()

    def flush(self) -> None:
        """Decode and check the vectors read so far (by dimension), in file order."""
        pending, self.pending = self.pending, []
        if not pending or self.bulk is None:
            return
        by_dim: dict[int, list[int]] = {}
        for i, (_, _, dim) in enumerate(pending):
            by_dim.setdefault(dim, []).append(i)
        decoded: list[bytes] = [b""] * len(pending)
        failures: list[tuple[int, InvalidInput]] = []
        for dim, positions in by_dim.items():
            try:
                vectors = _decode_vectors([pending[i][0] for i in positions], [pending[i][1] for i in positions], dim)
            except InvalidInput as exc:
                failures.append((exc.details["line"], exc))
                continue
            for i, vector in zip(positions, vectors, strict=True):
                decoded[i] = vector
        if failures:
            raise min(failures, key=lambda f: f[0])[1]
        self.bulk.chunks.embedding.extend(decoded)

    def finish(self, number: int) -> BulkFile:
        """The file once its last line is read; its counts checked against the header's."""
        self.flush()
        bulk = self.bulk
        if bulk is None:
            raise _bad(max(number, 1), "the file holds no header record (is it empty?)")
        bulk.last_line = number
        counts = bulk.header.counts
        if counts is not None:
            held = {"nodes": len(bulk.nodes), "relations": len(bulk.relations), "chunks": len(bulk.chunks)}
            for kind, announced in counts.model_dump().items():
                if held[kind] != announced:
                    raise _bad(number, f"the file ends with {held[kind]} {kind} records where its header announces "
                                       f"{announced} (a truncated file?)", announced=announced, held=held[kind])
        return bulk


#: How much longer than its line's bytes a record's properties can serialise as :func:`json.dumps`
#: does (ASCII escapes of non-ASCII text, ", " separators, floats written out: "9e15" is 18
#: characters); twice that per character of a line given as text.
_JSON_GROWTH = 6


def _text(value: Any) -> str:
    if type(value) is not str:
        raise _Slow
    return value


def _object(value: Any) -> dict[str, Any]:
    """A JSON object none of whose numbers may have been an integer past 64 bits."""
    if type(value) is not dict:
        raise _Slow
    todo: list[Any] = [value]
    while todo:
        item = todo.pop()
        for v in item.values() if type(item) is dict else item:
            t = type(v)
            if t is dict or t is list:
                todo.append(v)
            elif t is float and abs(v) >= _LONG_FLOAT and v.is_integer():
                raise _Slow
    return value


def _count(value: Any) -> int:
    """A non-negative JSON integer (not a boolean, not a float)."""
    if type(value) is not int or value < 0:
        raise _Slow
    return value


def _number(value: Any) -> float | None:
    """A finite JSON number as a float, or None."""
    if value is None:
        return None
    if type(value) is int:
        return float(value)
    if type(value) is not float or not math.isfinite(value):
        raise _Slow
    return value


def parse_ndjson(lines: Iterable[str | bytes]) -> BulkFile:
    """Read and check a file of records on its own (no database; blank lines skipped). O(size):
    orjson parses each line, its fields are checked as its pydantic model checks them (pydantic
    reads and names any line that is not plainly valid), vectors are decoded a batch at a time.

    Raises
    ------
    kg.errors.InvalidInput
        ``"line N: ..."`` (``details["line"]``): not a JSON object, an unknown record type or
        field, a wrong type, no header first or a second one, a workspace the header does not
        list, a bad path, type, properties, reference, relation type or weight, a node, relation
        or chunk named twice, a vector not of ``dim`` finite float32; other counts than announced.
    """
    reader = _Reader()
    number = 0
    for number, raw in enumerate(lines, start=1):
        if raw.isspace() or not raw:
            continue
        reader.read(number, raw)
    return reader.finish(number)


# -- import ---------------------------------------------------------------------------------


@dataclass
class _Plan:
    """What an import writes, resolved against the target branch (inside its first transaction):
    the rows of each table as columns, in the order they are written."""

    repo_id: int
    repo_uid: str
    wids: dict[str, int]
    nodes: dict[str, list[Any]]
    references: list[list[tuple[str, str, str]]]
    relations: dict[str, list[Any]]
    chunks: dict[str, list[Any]]
    created_repository: bool
    unchanged_nodes: int = 0
    unchanged_relations: int = 0

    @property
    def n_nodes(self) -> int:
        return len(self.nodes["node_id"])

    @property
    def n_relations(self) -> int:
        return len(self.relations["rel_type"])

    @property
    def n_chunks(self) -> int:
        return len(self.chunks["content_key"])

    @functools.cached_property
    def chunk_keys(self) -> frozenset[str]:
        """The content keys of the file's chunks (stored by the first batch)."""
        return frozenset(self.chunks["content_key"])


def _ensure_target(uow: UnitOfWork, repo: str, branch: str, bulk: BulkFile, *,
                   create: bool) -> tuple[bool, dict[str, dict[str, Any]]]:
    """Create the repository and the header's workspaces when missing (and ``create``): whether the
    repository was, and the configs of the repository's workspaces by name (read once, as the
    import's content keys are computed under them). Checks write on the branch first in an
    existing repository.
    """
    session, services = uow.session, uow.services
    created = False
    try:
        r = repo_store.get_repository(session, repo, lock=True)
    except NotFound:
        if not create:
            raise
        authorize_new_repository(uow.actor, repo, reserved_repositories(services.settings))
        r = repo_store.create_repository(session, name=repo)
        created = True
    uow.authorize("write", repo, branch)
    default = services.settings.embedding_model
    configs = repo_store.workspace_configs(session, r)
    for spec in bulk.header.workspaces:
        if create and not can_see(uow.actor, repo, workspace=spec.name):
            # Before existence: a name outside the key's workspaces answers alike, taken or free.
            authorize_new_workspace(uow.actor, repo, spec.name)
        if spec.name in configs:
            continue
        if not create:
            raise NotFound(f"workspace {spec.name!r} not found in repository {repo!r}",
                           details={"workspace": spec.name})
        uow.authorize("admin", repo)
        authorize_new_workspace(uow.actor, repo, spec.name)
        refuse_reserved_workspace(repo, spec.name, reserved_repositories(services.settings))
        config = parse_embedding_config(spec.embedding, default_model=default)
        services.embedder(config.model)  # an unknown model is refused before anything is written
        configs[spec.name] = {"embedding": config.model_dump()}
        repo_store.create_workspace(session, r, name=spec.name, config=configs[spec.name])
    return created, configs


def _authorize_content(uow: UnitOfWork, repo: str, branch: str, bulk: BulkFile) -> None:
    """Write on each node's workspace; write on each relation's source workspace, read on its
    target's (as :meth:`kg.context.UnitOfWork.authorize_relation`), each pair checked once."""
    uow.authorize_workspaces("write", repo, branch, bulk.nodes.workspace)
    pairs = dict.fromkeys((s[0], t[0]) for s, t in zip(bulk.relations.source, bulk.relations.target, strict=True))
    uow.authorize_workspaces("write", repo, branch, [s for s, _ in pairs])
    uow.authorize_workspaces("read", repo, branch, [t for _, t in pairs])


class _OnBranch(NamedTuple):
    """A live node of the branch at an address the file names."""

    node_id: str
    created_at: datetime
    node_type: str
    properties: dict[str, Any]
    order: float | None


def _branch_nodes(session: Session, view: BranchView,
                  addresses: set[tuple[int, str]]) -> dict[tuple[int, str], _OnBranch]:
    """The live nodes on the branch among ``addresses`` (the file's own, compared with the file)."""
    cols = (NodeVersion.node_id, NodeVersion.created_at, NodeVersion.node_type, NodeVersion.properties,
            NodeVersion.order)
    found = live_rows(session, view, addresses, cols, lookup_batch=_LOOKUP_BATCH, scan_above=_SCAN_ABOVE)
    return {(wid, path): _OnBranch(*rest) for wid, path, *rest in found}


def _branch_ids(session: Session, view: BranchView, addresses: set[tuple[int, str]]) -> dict[tuple[int, str], str]:
    """The ids of the live nodes among ``addresses`` (parents and endpoints outside the file)."""
    return {(wid, path): node_id for wid, path, node_id in live_rows(
        session, view, addresses, (NodeVersion.node_id,), lookup_batch=_LOOKUP_BATCH, scan_above=_SCAN_ABOVE)}


def _canonical(value: Any) -> str:
    """A JSON value as one string, so that equal means equal as JSON (``true`` is not ``1``)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _unchanged_relations(session: Session, view: BranchView, relations: dict[str, list[Any]],
                         existing_ids: set[str]) -> set[int]:
    """The positions in ``relations`` of rows the branch holds alike (weight, properties, validity):
    a re-import writes nothing for them. Only sources on the branch before the import are looked
    up, 500 a statement by the key index, as Core rows with the stored JSON text; only the rows
    the file names are decoded: an ORM instance and canonical JSON per row took 35 of the 71 s of
    importing 500,000 relations beside 1M (``bench/import_rate.py --growth-parts``).
    """
    wanted: dict[tuple[str, str, str], int] = {}
    for i, key in enumerate(zip(relations["from_node_id"], relations["rel_type"], relations["to_node_id"],
                                strict=True)):
        if key[0] in existing_ids:
            wanted[key] = i
    if not wanted:
        return set()
    sources = sorted({source for source, _, _ in wanted})
    columns = (RelationVersion.from_node_id, RelationVersion.rel_type, RelationVersion.to_node_id,
               RelationVersion.weight, cast(RelationVersion.properties, Text), RelationVersion.valid_from,
               RelationVersion.valid_to, RelationVersion.invalidated_by)
    connection = session.connection()
    same = set()
    for start in range(0, len(sources), _LOOKUP_BATCH):
        stmt, _ = visible_select(RelationVersion, view, RELATION_KEY,
                                 RelationVersion.from_node_id.in_(sources[start:start + _LOOKUP_BATCH]))
        for source, rel_type, target, weight, properties, valid_from, valid_to, invalidated_by in connection.execute(
                stmt.with_only_columns(*columns)):
            position = wanted.get((source, rel_type, target))
            if position is None:
                continue
            r = relations
            if ((weight, _utc(valid_from), _utc(valid_to), invalidated_by)
                    == (r["weight"][position], r["valid_from"][position], r["valid_to"][position],
                        r["invalidated_by"][position])
                    and _canonical((json.loads(properties) if properties else None) or {})
                    == _canonical(r["properties"][position] or {})):
                same.add(position)
    return same


def _utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _resolve(uow: UnitOfWork, ctx: WriteContext, bulk: BulkFile, created: bool,
             configs: Mapping[str, dict[str, Any]]) -> _Plan:
    """Check the file against the branch (parents, endpoints, chunks) and compute every row, as
    columns: content keys by each workspace's settings (``configs``, by name), ids a workspace at
    a time."""
    session, services, view = uow.session, uow.services, ctx.view
    repo = ctx.repo
    wids = {name: wid for wid, name in view.workspaces.items()}
    f = bulk.nodes

    def wid_of(line: int, workspace: str) -> int:
        wid = wids.get(workspace)
        if wid is None:
            raise _bad(line, f"workspace {workspace!r} not found in repository {repo.name!r}", workspace=workspace)
        return wid

    in_file = set(zip(f.workspace, f.path, strict=True))
    own = {(wid_of(line, ws), path) for line, ws, path in zip(f.line, f.workspace, f.path, strict=True)}
    others: set[tuple[int, str]] = set()  # parents and endpoints the file does not hold
    parents = [parent_of(path) for path in f.path]
    for ws, parent in zip(f.workspace, parents, strict=True):
        if parent != "/" and (ws, parent) not in in_file:
            others.add((wids[ws], parent))
    r = bulk.relations
    for line, source, target in zip(r.line, r.source, r.target, strict=True):
        for ws, path in (source, target):
            if (ws, path) not in in_file:
                others.add((wid_of(line, ws), path))
    on_branch = _branch_nodes(session, view, own)
    present = _branch_ids(session, view, others)

    now = utcnow()
    names = {wid: name for name, wid in wids.items()}
    ids: dict[tuple[str, str], str] = {(names[wid], path): node_id for (wid, path), node_id in present.items()}
    ids.update(((names[wid], path), found.node_id) for (wid, path), found in on_branch.items())
    existing_ids = set(ids.values())  # the nodes on the branch before the import
    default = services.settings.embedding_model
    keyers: dict[str, Callable[[dict[str, Any]], str | None]] = {}
    embedders: dict[str, Embedder] = {}
    for ws in dict.fromkeys(f.workspace):
        config = workspace_embedding(configs[ws], default_model=default)
        embedders[ws] = services.embedder(config.model)
        keyers[ws] = content_keyer(config, embedders[ws])
    keys: dict[str, tuple[int, str]] = {}  # content key -> (line, workspace) of its first node
    written: list[int] = []
    content_keys: list[str | None] = []
    unchanged_nodes = 0
    for i in sorted(range(len(f)), key=lambda i: f.path[i].count("/")):  # ancestors first, as batch writes
        ws, path, parent = f.workspace[i], f.path[i], parents[i]
        if parent != "/" and (ws, parent) not in in_file and (wids[ws], parent) not in present:
            raise _bad(f.line[i], f"parent {ws}:{parent} of node {ws}:{path} is neither in the file nor on the "
                                  "branch", workspace=ws, path=path, parent=parent)
        properties = f.properties[i]
        key = keyers[ws](properties)
        if key is not None and key not in keys:
            keys[key] = (f.line[i], ws)
        existing = on_branch.get((wids[ws], path))
        if (existing is not None and existing.node_type == f.node_type[i] and existing.order == f.order[i]
                and _canonical(existing.properties) == _canonical(properties)):
            unchanged_nodes += 1  # the branch holds this node as the file has it: no new version
            continue
        written.append(i)
        content_keys.append(key)
    by_ws: dict[str, list[int]] = {}
    for i in written:
        by_ws.setdefault(f.workspace[i], []).append(i)
    for ws, positions in by_ws.items():
        ids.update(zip(((ws, f.path[i]) for i in positions),
                       node_uids(repo.uid, wids[ws], [f.path[i] for i in positions]), strict=True))
    created_at: list[datetime | None] = []
    for i in written:
        stamp = f.created_at[i]
        if stamp is None:
            existing = on_branch.get((wids[f.workspace[i]], f.path[i]))
            created_at.append(existing.created_at if existing is not None else now)
        else:
            created_at.append(_utc(stamp))
    nodes: dict[str, list[Any]] = {
        "workspace_id": [wids[f.workspace[i]] for i in written],
        "node_id": [ids[(f.workspace[i], f.path[i])] for i in written],
        "path": [f.path[i] for i in written],
        "parent_path": [parents[i] for i in written],
        "name": [name_of(f.path[i]) for i in written],
        "node_type": [f.node_type[i] for i in written],
        "properties": [f.properties[i] for i in written],
        "sort_order": [f.order[i] for i in written],
        "content_key": content_keys,
        "created_at": created_at,
        "updated_at": [_utc(f.updated_at[i]) or now for i in written],
    }
    references = [f.references[i] for i in written]

    for line, source, target in zip(r.line, r.source, r.target, strict=True):
        for end, address in (("from", source), ("to", target)):
            if address not in ids:
                raise _bad(line, f"relation {end} {address[0]}:{address[1]} is neither a node of the file nor on "
                                 "the branch", endpoint=f"{address[0]}:{address[1]}")
    relations: dict[str, list[Any]] = {
        "from_node_id": [ids[s] for s in r.source],
        "to_node_id": [ids[t] for t in r.target],
        "from_address": [f"{s[0]}:{s[1]}" for s in r.source],
        "to_address": [f"{t[0]}:{t[1]}" for t in r.target],
        "rel_type": list(r.type),
        "weight": list(r.weight),
        "properties": list(r.properties),
        "created_at": [_utc(c) or now for c in r.created_at],
        "valid_from": [_utc(v) for v in r.valid_from],
        "valid_to": [_utc(v) for v in r.valid_to],
        "invalidated_by": list(r.invalidated_by),
    }
    same = _unchanged_relations(session, view, relations, existing_ids)
    # Inserted by source node: the two indexes that lead with it (the key, NEIGHBORS' out
    # order) then fill in order instead of at random pages (node ids are uuid5 hashes); a file
    # names each relation once, so no two rows share a key and the order changes nothing else.
    kept = sorted((i for i in range(len(r)) if i not in same), key=lambda i: relations["from_node_id"][i])
    relations = {name: [column[i] for i in kept] for name, column in relations.items()}
    return _Plan(repo.id, repo.uid, wids, nodes, references, relations,
                 _check_chunks(bulk.chunks, keys, embedders), created, unchanged_nodes, len(same))


def _check_chunks(c: _Chunks, keys: dict[str, tuple[int, str]], embedders: dict[str, Embedder]) -> dict[str, list[Any]]:
    """The chunk rows to store, as columns: each chunk's key must be a node's of the file, its
    model and dimension the workspace's, and each key's chunks numbered 0..n-1."""
    indexes: dict[str, list[tuple[int, int]]] = {}
    for line, key, index, model, dim in zip(c.line, c.content_key, c.chunk_index, c.model, c.dim, strict=True):
        owner = keys.get(key)
        if owner is None:
            raise _bad(line, f"chunk content key {key} is the key of no node of the file (under the "
                             "target workspaces' embedding settings)", content_key=key)
        embedder = embedders[owner[1]]
        if model != embedder.name:
            raise _bad(line, f"chunk model {model!r} is not {embedder.name!r}, the model of workspace "
                             f"{owner[1]!r} (line {owner[0]})")
        if dim != embedder.dim:
            raise _bad(line, f"chunk vector dim {dim} is not {embedder.dim}, the dimension of {embedder.name}",
                       dim=dim, expected=embedder.dim)
        indexes.setdefault(key, []).append((index, line))
    for key, found in indexes.items():
        numbers = sorted(i for i, _ in found)
        if numbers != list(range(len(numbers))):
            raise _bad(min(line for _, line in found), f"the chunks of content key {key} are numbered "
                       f"{numbers[:5]}{'...' if len(numbers) > 5 else ''}, not 0 to {len(numbers) - 1}")
    return {"content_key": c.content_key, "chunk_index": c.chunk_index, "field": c.source_field, "text": c.text,
            "char_start": c.char_start, "char_end": c.char_end, "model": c.model, "dim": c.dim,
            "embedding": c.embedding}


def _write(uow: UnitOfWork, ctx: WriteContext, plan: _Plan, nodes: range, relations: range, *,
           with_chunks: bool) -> tuple[int, list[str]]:
    """Write one batch of the plan at the context's revision; its number and the keys queued."""
    session = uow.session
    # a small write (an agent's batch on a branch) fits the default cache: no PRAGMA round trips
    sqlite = session.get_bind().dialect.name == "sqlite" and len(nodes) + len(relations) >= _BIG_WRITE
    cache = session.scalar(text("PRAGMA cache_size")) if sqlite else None
    if sqlite:  # a page cache that holds the indexes being filled (the default holds 2 MiB)
        session.execute(text(f"PRAGMA cache_size = {-_SQLITE_CACHE_KIB}"))
    try:
        return _write_rows(uow, ctx, plan, nodes, relations, with_chunks=with_chunks)
    finally:
        if sqlite:
            session.execute(text(f"PRAGMA cache_size = {int(cache if cache is not None else -2000)}"))


def _store_chunks(session: Session, plan: _Plan) -> None:
    """The file's chunks inserted (a key a concurrent writer stored is skipped, as
    :func:`kg.indexing.chunks.store_chunks` skips it), in file order: their seqs follow it."""
    insert_rows(session, Chunk.__table__, plan.chunks, conflict=("repo_id", "content_key", "chunk_index"),
                 repo_id=plan.repo_id)


def _write_rows(uow: UnitOfWork, ctx: WriteContext, plan: _Plan, nodes: range, relations: range, *,
                with_chunks: bool) -> tuple[int, list[str]]:
    """:func:`_write` once the connection is set up."""
    session = uow.session
    revision = ctx.revision  # the revision row and the branch head, as every write makes them
    # Which texts have chunks stored, asked before this write inserts the file's: on PostgreSQL
    # the lookup after 40,000 fresh chunk rows in the same transaction (no statistics yet)
    # scanned the table once per 500 keys (11.5 s of a 20,000-node import).
    content_keys = plan.nodes["content_key"]
    keys = {key for i in nodes if (key := content_keys[i]) is not None and key not in plan.chunk_keys}
    stored = existing_content_keys(session, plan.repo_id, keys) | plan.chunk_keys
    if with_chunks and plan.n_chunks:
        _store_chunks(session, plan)
    branch_id = ctx.branch.id
    jobs: list[tuple[int, str | None, int]] = []
    reference_rows: list[dict[str, Any]] = []
    for start in range(nodes.start, nodes.stop, _INSERT_BATCH):
        stop = min(start + _INSERT_BATCH, nodes.stop)
        part = {name: column[start:stop] for name, column in plan.nodes.items()}
        ids = insert_node_versions(session, part, revision, repo_id=plan.repo_id, branch_id=branch_id, deleted=False)
        jobs.extend(zip(part["workspace_id"], part["content_key"], ids, strict=True))
        for i, vid, node_id in zip(range(start, stop), ids, part["node_id"], strict=True):
            reference_rows.extend(
                {"repo_id": plan.repo_id, "branch_id": branch_id, "revision": revision,
                 "source_node_id": node_id, "source_version_id": vid, "property_key": key,
                 "target_workspace": ws, "target_path": path}
                for key, ws, path in plan.references[i])
    if reference_rows:
        session.execute(insert(Reference.__table__), reference_rows)  # type: ignore[arg-type]
    queued = enqueue_many(session, repo_id=plan.repo_id, jobs=jobs, stored=stored)
    for start in range(relations.start, relations.stop, _INSERT_BATCH):
        stop = min(start + _INSERT_BATCH, relations.stop)
        insert_rows(session, RelationVersion.__table__, {name: column[start:stop]
                                                          for name, column in plan.relations.items()},
                     revision=revision, repo_id=plan.repo_id, branch_id=branch_id, deleted=False)
    return revision, queued


def _after_commit(uow: UnitOfWork, plan: _Plan, queued: list[str], *, synced: bool, items: int) -> None:
    """The hooks of every write (index the queued texts, statistics after a large write), and the
    stored chunks placed in the search index: at once with ``KG_INDEX_INLINE``, else by the
    index's background catch-up (the import answers once its rows are durable; a search waits
    for that catch-up as after any write, and ``index/status`` compares the index's watermark
    with the chunks stored).
    """
    services = uow.services
    uow.index_after_commit(plan.repo_id, queued)
    if synced:
        def sync() -> None:
            if not services.settings.index_inline:
                services.index.catch_up_later(plan.repo_uid, functools.partial(_feed, services, plan.repo_id))
                return
            try:
                with services.db.read() as session:
                    sync_index(session, services.index, plan.repo_id, plan.repo_uid)
            except KGError as exc:  # SQL holds them: the next search or indexer pass places them
                log.warning("import: placing the imported chunks in the index failed: %s", exc.message)
        uow.after_commit(sync)
    if items >= 1000:
        uow.after_commit(services.db.analyze)


@contextlib.contextmanager
def _feed(services: Resources, repo_id: int) -> Iterator[SqlChunkFeed]:
    """What SQL holds for the repository, read in a session of its own (a background catch-up)."""
    with services.db.read() as session:
        yield SqlChunkFeed(session, repo_id)


def _batches(n_nodes: int, n_relations: int, batch_size: int | None) -> list[tuple[range, range]]:
    """The (nodes, relations) index ranges of each revision: nodes first, then relations."""
    total = n_nodes + n_relations
    size = total if batch_size is None else batch_size
    out = []
    for start in range(0, max(total, 1), max(size, 1)):
        stop = min(start + size, total)
        out.append((range(min(start, n_nodes), min(stop, n_nodes)),
                    range(max(start - n_nodes, 0), max(stop - n_nodes, 0))))
    return out


def import_ndjson(services: Resources, caller: Actor, repo: str, lines: Iterable[str | bytes], *,
                  branch: str = MAIN, batch_size: int | None = None, create: bool = True,
                  message: str | None = None) -> NdjsonImport:
    """Import a file of records (:mod:`kg.ops.bulk`) into a branch: one revision, or one per
    ``batch_size`` records (nodes, then relations; a batch the database refuses leaves the earlier,
    committed, ones written). Chunks with vectors are stored and placed in the search index; only
    texts without chunks are queued. O(records): a parse per line, a lookup per 500 addresses the
    branch must hold, an executemany per 20,000 rows (``bench/import_rate.py``).

    Needs ``write`` on the branch and on each node's and relation source's workspace, ``read`` on
    each relation target's; with ``create``, what creating a missing repository (with the
    header's workspaces) or workspace needs (:func:`kg.access.authorize_new_repository`).
    Answers the records written, those ``unchanged`` (held alike: no new version), and the last
    ``revision`` (None when nothing was written).

    Raises
    ------
    kg.errors.InvalidInput
        A bad record (``"line N: ..."``), a parent or endpoint neither in the file nor on the
        branch, a chunk of no node, another model or dimension, a ``batch_size`` below 1.
    kg.errors.NotFound
        Repository or workspace missing without ``create``.
    """
    check_batch_size(batch_size)
    # An import keeps millions of records and rows until it ends: the collector's passes over
    # them are waste (kg.collector).
    with collector.held():
        return import_records(services, caller, repo, parse_ndjson(lines), branch=branch, batch_size=batch_size,
                              create=create, message=message)


def check_batch_size(batch_size: int | None) -> None:
    """Refuse a ``batch_size`` that is not None or an integer >= 1 (before a file is read).

    Raises
    ------
    kg.errors.InvalidInput
        Not None and not an integer >= 1 (a boolean is not one).
    """
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int)
                                   or batch_size < 1):
        raise InvalidInput("batch_size must be an integer >= 1", details={"batch_size": batch_size})


def import_records(services: Resources, caller: Actor, repo: str, bulk: BulkFile, *, branch: str = MAIN,
                   batch_size: int | None = None, create: bool = True, message: str | None = None) -> NdjsonImport:
    """Import records already read and checked on their own (:func:`parse_ndjson`,
    :func:`kg.ops.bulk_parquet.read_parquet`): :func:`import_ndjson` after its parse, whatever
    the file's format. Call it with the cyclic collector held (:func:`kg.collector.held`) for a
    large file."""
    check_batch_size(batch_size)
    source = f"{bulk.header.repo}@{bulk.header.branch} r{bulk.header.revision}"
    revisions: list[int] = []
    queued_total = 0
    with unit_of_work(services, caller) as uow:
        created, configs = _ensure_target(uow, repo, branch, bulk, create=create)
        _authorize_content(uow, repo, branch, bulk)
        # The batches count what is written: the nodes and relations the branch does not hold
        # as the file has them (a re-import of the same file writes no revision).
        ctx = uow.begin(repo, branch, message=message)
        plan = _resolve(uow, ctx, bulk, created, configs)
        batches = _batches(plan.n_nodes, plan.n_relations, batch_size)
        unchanged = plan.unchanged_nodes + plan.unchanged_relations
        summary = message or (f"import {_KIND_OF[bulk.header.format]}: {plan.n_nodes} nodes, {plan.n_relations} "
                              f"relations from {source}"
                              + (f" ({unchanged} records unchanged)" if unchanged else ""))
        ctx.retitle(_batch_message(summary, 0, len(batches)))
        nodes, relations = batches[0]
        queued: list[str] = []
        if len(nodes) + len(relations):
            revision, queued = _write(uow, ctx, plan, nodes, relations, with_chunks=True)
            revisions.append(revision)
            queued_total += len(queued)
        elif plan.n_chunks:  # vectors for texts the branch holds already: stored, no revision
            _store_chunks(uow.session, plan)
        _after_commit(uow, plan, queued, synced=bool(plan.n_chunks), items=len(nodes) + len(relations))
    for number, (nodes, relations) in enumerate(batches[1:], start=1):
        with unit_of_work(services, caller) as uow:
            ctx = uow.begin(repo, branch, message=_batch_message(summary, number, len(batches)))
            revision, queued = _write(uow, ctx, plan, nodes, relations, with_chunks=False)
            revisions.append(revision)
            queued_total += len(queued)
            _after_commit(uow, plan, queued, synced=bool(plan.n_chunks), items=len(nodes) + len(relations))
    return NdjsonImport(repo=repo, branch=branch, revision=revisions[-1] if revisions else None,
                        revisions=revisions, nodes=plan.n_nodes, relations=plan.n_relations,
                        unchanged=UnchangedRecords(nodes=plan.unchanged_nodes, relations=plan.unchanged_relations),
                        chunks=plan.n_chunks, queued=queued_total, created_repository=plan.created_repository)


_KIND_OF = {FORMAT: "ndjson", PARQUET_FORMAT: "parquet"}


def _batch_message(summary: str, number: int, total: int) -> str:
    return summary if total <= 1 else f"{summary} (batch {number + 1} of {total})"


# -- export ---------------------------------------------------------------------------------


def _dumps(value: dict[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _iso(value: datetime | None) -> str | None:
    return value.astimezone(UTC).isoformat() if value is not None else None


def export_ndjson(services: Resources, caller: Actor, repo: str, branch: str = MAIN, *, out: IO[str],
                  at_revision: int | None = None, with_chunks: bool = False) -> HeaderRecord:
    r"""Write a branch's content to ``out`` as a file of records (:mod:`kg.ops.bulk`, lines ending
    ``\n``); the header written. A key restricted to some workspaces exports those (and the
    relations between their nodes); ``with_chunks`` adds the stored chunks with their vectors.

    One window query for the nodes, one for the relations, a chunk read per 500 keys; nodes and
    relations are sorted in memory (by code point, parents first: two exports of one content are
    byte for byte equal), chunks streamed.
    """
    with reading(services, caller, repo, branch, at_revision) as (session, view):
        default = services.settings.embedding_model
        names = {wid: name for wid, name in view.workspaces.items() if view.can_read(wid)}
        configs = {w.name: w.config for w in repo_store.list_workspaces(session, view.repo) if w.name in names.values()}
        stmt, _ = visible_select(NodeVersion, view, (NodeVersion.workspace_id, NodeVersion.path))
        stmt = stmt.with_only_columns(
            NodeVersion.workspace_id, NodeVersion.path, NodeVersion.node_type, NodeVersion.properties,
            NodeVersion.order, NodeVersion.created_at, NodeVersion.updated_at, NodeVersion.node_id,
            NodeVersion.content_key)
        nodes = sorted(((names[r[0]], *r[1:]) for r in session.execute(stmt) if r[0] in names),
                       key=lambda r: (r[0], r[1]))
        address = {r[7]: f"{r[0]}:{r[1]}" for r in nodes}
        rel_stmt, _ = visible_select(RelationVersion, view, (RelationVersion.from_node_id, RelationVersion.rel_type,
                                                             RelationVersion.to_node_id))
        rel_stmt = rel_stmt.with_only_columns(
            RelationVersion.from_node_id, RelationVersion.rel_type, RelationVersion.to_node_id,
            RelationVersion.weight, RelationVersion.properties, RelationVersion.created_at,
            RelationVersion.valid_from, RelationVersion.valid_to, RelationVersion.invalidated_by)
        relations = sorted(((address[f], t, address[to], w, p, c, vf, vt, by)
                            for f, t, to, w, p, c, vf, vt, by in session.execute(rel_stmt)
                            if f in address and to in address), key=lambda r: (r[0], r[1], r[2]))
        keys = sorted({r[8] for r in nodes if r[8] is not None}) if with_chunks else []
        n_chunks = _count_chunks(session, view.repo.id, keys)
        header = {"record": "header", "format": FORMAT, "version": FORMAT_VERSION, "repo": view.repo.name,
                  "branch": view.branch.name, "revision": view.revision, "with_chunks": with_chunks,
                  "workspaces": [{"name": name, "embedding": workspace_embedding(configs[name], default_model=default)
                                  .model_dump()} for name in sorted(names.values())],
                  "counts": {"nodes": len(nodes), "relations": len(relations), "chunks": n_chunks}}
        out.write(_dumps(header) + "\n")
        for ws, path, node_type, properties, order, created, updated, _, _ in nodes:
            out.write(_dumps({"record": "node", "workspace": ws, "path": path, "node_type": node_type,
                              "properties": properties, "order": order, "created_at": _iso(created),
                              "updated_at": _iso(updated)}) + "\n")
        for source, rel_type, target, weight, properties, created, valid_from, valid_to, by in relations:
            record = {"record": "relation", "from": source, "to": target, "type": rel_type,
                      "weight": weight, "properties": properties or {}, "created_at": _iso(created)}
            # validity only when set: files of relations without one are as before (issue 17)
            for name, value in (("valid_from", _iso(valid_from)), ("valid_to", _iso(valid_to)),
                                ("invalidated_by", by)):
                if value is not None:
                    record[name] = value
            out.write(_dumps(record) + "\n")
        for line in _chunk_lines(session, view.repo.id, keys):
            out.write(line + "\n")
    return HeaderRecord.model_validate(header)


def _count_chunks(session: Session, repo_id: int, keys: Sequence[str]) -> int:
    """How many chunks the content keys have (500 keys a statement)."""
    total = 0
    for start in range(0, len(keys), _LOOKUP_BATCH):
        total += session.scalar(select(func.count()).select_from(Chunk).where(
            Chunk.repo_id == repo_id, Chunk.content_key.in_(keys[start:start + _LOOKUP_BATCH]))) or 0
    return total


def _chunk_lines(session: Session, repo_id: int, keys: Sequence[str]) -> Iterator[str]:
    """The chunk records of the content keys (sorted), by key then index."""
    for start in range(0, len(keys), _LOOKUP_BATCH):
        rows = session.execute(
            select(Chunk.content_key, Chunk.chunk_index, Chunk.field, Chunk.text, Chunk.char_start, Chunk.char_end,
                   Chunk.model, Chunk.dim, Chunk.embedding)
            .where(Chunk.repo_id == repo_id, Chunk.content_key.in_(keys[start:start + _LOOKUP_BATCH]))
        ).all()
        for key, index, name, passage, begin, end, model, dim, embedding in sorted(rows, key=lambda r: (r[0], r[1])):
            vector = np.frombuffer(embedding, dtype=np.float32).astype("<f4").tobytes()
            yield _dumps({"record": "chunk", "content_key": key, "chunk_index": index, "field": name, "text": passage,
                          "char_start": begin, "char_end": end, "model": model, "dim": dim,
                          "vector": base64.b64encode(vector).decode("ascii")})
