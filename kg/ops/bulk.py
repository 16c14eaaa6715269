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
import functools
import json
import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import IO, Annotated, Any, NamedTuple

import numpy as np
from pydantic import Field, TypeAdapter, ValidationError
from sqlalchemy import JSON, Table, Text, cast, func, insert, select, text
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
from kg.indexing.chunks import ChunkRow, existing_content_keys, store_chunks, sync_index
from kg.indexing.config import parse_embedding_config, workspace_embedding
from kg.indexing.index_jobs import enqueue_many
from kg.ops.text_store import plan_for
from kg.providers.base import Embedder
from kg.store import repos as repo_store
from kg.store.models import Chunk, NodeVersion, Reference, RelationVersion, utcnow
from kg.store.nodes import node_uid, validate_node_input
from kg.store.paths import name_of, parent_of, parse_address, validate_name, validate_path
from kg.store.references import extract_references
from kg.store.relations import RELATION_KEY, validate_relation_type
from kg.store.repos import MAIN, BranchView, WriteContext
from kg.store.visibility import visible_select
from kg.text.storable import check_json
from kg.types.bulk import (
    FORMAT,
    FORMAT_VERSION,
    ChunkRecord,
    HeaderRecord,
    NdjsonImport,
    NodeRecord,
    RelationRecord,
    UnchangedRecords,
)

__all__ = ["FORMAT", "FORMAT_VERSION", "BulkFile", "export_ndjson", "import_ndjson", "parse_ndjson"]

log = logging.getLogger(__name__)

#: Addresses looked up one statement per this many; above ``_SCAN_ABOVE`` a workspace is scanned.
_LOOKUP_BATCH = 500
_SCAN_ABOVE = 5_000
#: Rows per executemany (bounded memory for the driver's parameter lists).
_INSERT_BATCH = 20_000
#: SQLite's page cache while an import writes, in KiB (given back afterwards).
_SQLITE_CACHE_KIB = 256 * 1024


# -- records (kg.types.bulk) -----------------------------------------------------------------

_ANY_RECORD: TypeAdapter[HeaderRecord | NodeRecord | RelationRecord | ChunkRecord] = TypeAdapter(
    Annotated[HeaderRecord | NodeRecord | RelationRecord | ChunkRecord, Field(discriminator="record")])
_KINDS = "'header', 'node', 'relation' or 'chunk'"


@dataclass(frozen=True, slots=True)
class _Node:
    line: int
    workspace: str
    path: str
    record: NodeRecord
    references: list[tuple[str, str, str]]


@dataclass(frozen=True, slots=True)
class _Relation:
    line: int
    source: tuple[str, str]
    target: tuple[str, str]
    record: RelationRecord


@dataclass(frozen=True, slots=True)
class _Chunk:
    line: int
    record: ChunkRecord
    vector: np.ndarray


@dataclass
class BulkFile:
    """A file of records checked on its own (:func:`parse_ndjson`): the header, then the node
    (paths in NFC), relation (endpoints parsed) and chunk records (vectors decoded) in file order.
    """

    header: HeaderRecord
    nodes: list[_Node] = field(default_factory=list)
    relations: list[_Relation] = field(default_factory=list)
    chunks: list[_Chunk] = field(default_factory=list)
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


def _decode_vector(line: int, record: ChunkRecord) -> np.ndarray:
    """The chunk's vector, checked: ``dim`` finite float32 values, not all zero."""
    try:
        raw = base64.b64decode(record.vector, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise _bad(line, f"chunk vector is not base64: {exc}") from exc
    if len(raw) != 4 * record.dim:
        raise _bad(line, f"chunk vector holds {len(raw) / 4:g} float32 values, but its dim is {record.dim}",
                   dim=record.dim)
    vector = np.frombuffer(raw, dtype="<f4").astype(np.float32)
    if not np.isfinite(vector).all():
        raise _bad(line, "chunk vector has non-finite values (NaN or inf)")
    if not vector.any():
        raise _bad(line, "chunk vector is all zeros")
    return vector


def _plain_json(line: int, what: str, value: dict[str, Any]) -> None:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise _bad(line, f"{what} must be plain JSON: {exc}") from exc


def parse_ndjson(lines: Iterable[str | bytes]) -> BulkFile:
    """Read and check a file of records on its own (no database; blank lines skipped). O(size):
    pydantic-core parses and validates each line in one call.

    Raises
    ------
    kg.errors.InvalidInput
        ``"line N: ..."`` (``details["line"]``): not a JSON object, an unknown record type or
        field, a wrong type, no header first or a second one, a workspace the header does not
        list, a bad path, type, properties, reference, relation type or weight, a node, relation
        or chunk named twice, a vector not of ``dim`` finite float32; other counts than announced.
    """
    header: HeaderRecord | None = None
    bulk: BulkFile | None = None
    workspaces: set[str] = set()
    nodes: dict[tuple[str, str], int] = {}
    relations: dict[tuple[tuple[str, str], tuple[str, str], str], int] = {}
    chunks: dict[tuple[str, int], int] = {}
    addresses: dict[str, tuple[str, str]] = {}
    types: set[str] = set()
    number = 0
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            record = _ANY_RECORD.validate_json(raw)
        except ValidationError as exc:
            raise _record_error(number, exc) from exc
        # text the store cannot hold (a NUL, a lone surrogate) can only come as a \u escape
        if ("\\u" if isinstance(raw, str) else b"\\u") in raw:  # type: ignore[operator]
            try:
                check_json(record.model_dump(by_alias=True), "the record")
            except InvalidInput as exc:
                raise _bad(number, exc.message) from exc
        if bulk is None:
            if not isinstance(record, HeaderRecord):
                raise _bad(number, f"the first record must be the header, not a {record.record}")
            header = record
            bulk = BulkFile(header=header)
            for ws in header.workspaces:
                try:
                    validate_name("workspace", ws.name)
                    parse_embedding_config(ws.embedding, default_model="none")
                except InvalidInput as exc:
                    raise _bad(number, f"header workspace {ws.name!r}: {exc.message}") from exc
                if ws.name in workspaces:
                    raise _bad(number, f"header names workspace {ws.name!r} twice")
                workspaces.add(ws.name)
            continue
        if isinstance(record, HeaderRecord):
            raise _bad(number, "a second header: a file holds one")
        if isinstance(record, NodeRecord):
            bulk.nodes.append(_check_node(number, record, workspaces, nodes))
        elif isinstance(record, RelationRecord):
            bulk.relations.append(_check_relation(number, record, relations, addresses, types))
        else:
            key = (record.content_key, record.chunk_index)
            if key in chunks:
                raise _bad(number, f"chunk {record.chunk_index} of content key {record.content_key} is named "
                                   f"twice (first on line {chunks[key]})")
            chunks[key] = number
            if record.char_end < record.char_start:
                raise _bad(number, "chunk char_end is before its char_start")
            bulk.chunks.append(_Chunk(number, record, _decode_vector(number, record)))
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


def _check_node(line: int, record: NodeRecord, workspaces: set[str], seen: dict[tuple[str, str], int]) -> _Node:
    """A node record checked as a write checks it; ``seen`` holds the addresses so far."""
    if record.workspace not in workspaces:
        raise _bad(line, f"node workspace {record.workspace!r} is not one of the header's workspaces")
    try:
        path = validate_path(record.path)
        validate_node_input(record.node_type, record.properties, record.order)
        references = extract_references(record.properties, workspace=record.workspace)
    except InvalidInput as exc:
        raise _bad(line, exc.message) from exc
    address = (record.workspace, path)
    if address in seen:
        raise _bad(line, f"node {record.workspace}:{path} is named twice (first on line {seen[address]})",
                   workspace=record.workspace, path=path)
    seen[address] = line
    return _Node(line, record.workspace, path, record, references)


def _check_relation(line: int, record: RelationRecord,
                    seen: dict[tuple[tuple[str, str], tuple[str, str], str], int],
                    addresses: dict[str, tuple[str, str]], types: set[str]) -> _Relation:
    """A relation record checked as a relate checks it; ``addresses`` and ``types`` cache what was
    checked (an endpoint recurs).
    """
    try:
        source = addresses.get(record.source) or addresses.setdefault(record.source, parse_address(record.source))
        target = addresses.get(record.to) or addresses.setdefault(record.to, parse_address(record.to))
        if record.type not in types:
            types.add(validate_relation_type(record.type))
    except InvalidInput as exc:
        raise _bad(line, exc.message) from exc
    if record.properties:
        _plain_json(line, "relation properties", record.properties)
    try:
        check_interval(maybe_aware(record.valid_from, "valid_from"), maybe_aware(record.valid_to, "valid_to"))
    except InvalidInput as exc:
        raise _bad(line, exc.message) from exc
    key = (source, target, record.type)
    if key in seen:
        raise _bad(line, f"relation {record.source} -[{record.type}]-> {record.to} is named twice "
                         f"(first on line {seen[key]})")
    seen[key] = line
    return _Relation(line, source, target, record)


# -- import ---------------------------------------------------------------------------------


@dataclass
class _Plan:
    """What an import writes, resolved against the target branch (inside its first transaction)."""

    repo_id: int
    repo_uid: str
    wids: dict[str, int]
    nodes: list[dict[str, Any]]
    references: list[list[tuple[str, str, str]]]
    relations: list[dict[str, Any]]
    chunks: list[ChunkRow]
    created_repository: bool
    unchanged_nodes: int = 0
    unchanged_relations: int = 0

    @functools.cached_property
    def chunk_keys(self) -> frozenset[str]:
        """The content keys of the file's chunks (stored by the first batch)."""
        return frozenset(c.content_key for c in self.chunks)


def _ensure_target(uow: UnitOfWork, repo: str, branch: str, bulk: BulkFile, *, create: bool) -> bool:
    """Create the repository and the header's workspaces when missing (and ``create``); whether the
    repository was. Checks write on the branch first in an existing repository.
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
    existing = {w.name for w in repo_store.list_workspaces(session, r)}
    for spec in bulk.header.workspaces:
        if create and not can_see(uow.actor, repo, workspace=spec.name):
            # Before existence: a name outside the key's workspaces answers alike, taken or free.
            authorize_new_workspace(uow.actor, repo, spec.name)
        if spec.name in existing:
            continue
        if not create:
            raise NotFound(f"workspace {spec.name!r} not found in repository {repo!r}",
                           details={"workspace": spec.name})
        uow.authorize("admin", repo)
        authorize_new_workspace(uow.actor, repo, spec.name)
        refuse_reserved_workspace(repo, spec.name, reserved_repositories(services.settings))
        config = parse_embedding_config(spec.embedding, default_model=default)
        services.embedder(config.model)  # an unknown model is refused before anything is written
        repo_store.create_workspace(session, r, name=spec.name, config={"embedding": config.model_dump()})
    return created


def _authorize_content(uow: UnitOfWork, repo: str, branch: str, bulk: BulkFile) -> None:
    """Write on each node's workspace; write on each relation's source workspace, read on its
    target's (as :meth:`kg.context.UnitOfWork.authorize_relation`), each pair checked once."""
    uow.authorize_workspaces("write", repo, branch, [n.workspace for n in bulk.nodes])
    pairs = dict.fromkeys((r.source[0], r.target[0]) for r in bulk.relations)
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
    return {(wid, path): _OnBranch(*found) for wid, path, *found in _live_at(session, view, addresses, cols)}


def _branch_ids(session: Session, view: BranchView, addresses: set[tuple[int, str]]) -> dict[tuple[int, str], str]:
    """The ids of the live nodes among ``addresses`` (parents and endpoints outside the file)."""
    return {(wid, path): node_id for wid, path, node_id in _live_at(session, view, addresses, (NodeVersion.node_id,))}


def _live_at(session: Session, view: BranchView, addresses: set[tuple[int, str]],
             columns: tuple[Any, ...]) -> Iterator[Sequence[Any]]:
    """``(workspace id, path, *columns)`` of the live nodes among ``addresses``: 500 addresses a
    statement, or one scan of a workspace holding many; plain Core rows, no ORM row per node.
    """
    if not addresses or view.repo.head_revision == 0:
        return
    by_ws: dict[int, list[str]] = {}
    for wid, path in addresses:
        by_ws.setdefault(wid, []).append(path)
    cols = (NodeVersion.workspace_id, NodeVersion.path, *columns)
    connection = session.connection()
    for wid, paths in by_ws.items():
        if len(paths) > _SCAN_ABOVE:
            stmt, _ = visible_select(NodeVersion, view, (NodeVersion.workspace_id, NodeVersion.path),
                                     NodeVersion.workspace_id == wid)
            wanted = set(paths)
            yield from (row for row in connection.execute(stmt.with_only_columns(*cols)) if row[1] in wanted)
            continue
        for start in range(0, len(paths), _LOOKUP_BATCH):
            stmt, _ = visible_select(NodeVersion, view, (NodeVersion.workspace_id, NodeVersion.path),
                                     NodeVersion.workspace_id == wid,
                                     NodeVersion.path.in_(paths[start:start + _LOOKUP_BATCH]))
            yield from connection.execute(stmt.with_only_columns(*cols))


def _canonical(value: Any) -> str:
    """A JSON value as one string, so that equal means equal as JSON (``true`` is not ``1``)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _unchanged_relations(session: Session, view: BranchView, relations: list[dict[str, Any]],
                         existing_ids: set[str]) -> set[int]:
    """The positions in ``relations`` of rows the branch holds alike (weight, properties, validity):
    a re-import writes nothing for them. Only sources on the branch before the import are looked
    up, 500 a statement by the key index, as Core rows with the stored JSON text; only the rows
    the file names are decoded: an ORM instance and canonical JSON per row took 35 of the 71 s of
    importing 500,000 relations beside 1M (``bench/import_rate.py --growth-parts``).
    """
    wanted: dict[tuple[str, str, str], int] = {}
    for i, r in enumerate(relations):
        if r["from_node_id"] in existing_ids:
            wanted[(r["from_node_id"], r["rel_type"], r["to_node_id"])] = i
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
            r = relations[position]
            if ((weight, _utc(valid_from), _utc(valid_to), invalidated_by)
                    == (r["weight"], r["valid_from"], r["valid_to"], r["invalidated_by"])
                    and _canonical((json.loads(properties) if properties else None) or {})
                    == _canonical(r["properties"] or {})):
                same.add(position)
    return same


def _utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _resolve(uow: UnitOfWork, ctx: WriteContext, bulk: BulkFile, created: bool) -> _Plan:
    """Check the file against the branch (parents, endpoints, chunks) and compute every row."""
    session, services, view = uow.session, uow.services, ctx.view
    repo = ctx.repo
    wids = {name: wid for wid, name in view.workspaces.items()}

    def wid_of(line: int, workspace: str) -> int:
        wid = wids.get(workspace)
        if wid is None:
            raise _bad(line, f"workspace {workspace!r} not found in repository {repo.name!r}", workspace=workspace)
        return wid

    in_file = {(n.workspace, n.path) for n in bulk.nodes}
    own = {(wid_of(n.line, n.workspace), n.path) for n in bulk.nodes}
    others: set[tuple[int, str]] = set()  # parents and endpoints the file does not hold
    for n in bulk.nodes:
        parent = parent_of(n.path)
        if parent != "/" and (n.workspace, parent) not in in_file:
            others.add((wids[n.workspace], parent))
    for r in bulk.relations:
        for ws, path in (r.source, r.target):
            if (ws, path) not in in_file:
                others.add((wid_of(r.line, ws), path))
    on_branch = _branch_nodes(session, view, own)
    present = _branch_ids(session, view, others)

    now = utcnow()
    nodes: list[dict[str, Any]] = []
    references: list[list[tuple[str, str, str]]] = []
    keys: dict[str, tuple[int, str]] = {}  # content key -> (line, workspace) of its first node
    names = {wid: name for name, wid in wids.items()}
    ids: dict[tuple[str, str], str] = {(names[wid], path): node_id for (wid, path), node_id in present.items()}
    ids.update(((names[wid], path), found.node_id) for (wid, path), found in on_branch.items())
    existing_ids = set(ids.values())  # the nodes on the branch before the import
    unchanged_nodes = 0
    ordered = sorted(bulk.nodes, key=lambda n: n.path.count("/"))  # ancestors first, as batch writes
    for n in ordered:
        wid = wids[n.workspace]
        parent = parent_of(n.path)
        if parent != "/" and (n.workspace, parent) not in in_file and (wid, parent) not in present:
            raise _bad(n.line, f"parent {n.workspace}:{parent} of node {n.workspace}:{n.path} is neither in the "
                               "file nor on the branch", workspace=n.workspace, path=n.path, parent=parent)
        rec = n.record
        key = plan_for(services, session, repo, n.workspace, rec.properties).content_key
        if key is not None:
            keys.setdefault(key, (n.line, n.workspace))
        existing = on_branch.get((wid, n.path))
        if (existing is not None and existing.node_type == rec.node_type and existing.order == rec.order
                and _canonical(existing.properties) == _canonical(rec.properties)):
            unchanged_nodes += 1  # the branch holds this node as the file has it: no new version
            continue
        stamp = _utc(rec.updated_at) or now
        node_id = ids[(n.workspace, n.path)] = node_uid(repo.uid, wid, n.path)
        nodes.append({
            "repo_id": repo.id, "branch_id": ctx.branch.id, "workspace_id": wid,
            "node_id": node_id, "path": n.path, "parent_path": parent,
            "name": name_of(n.path), "node_type": rec.node_type, "properties": rec.properties,
            "sort_order": rec.order, "deleted": False, "content_key": key,
            "created_at": _utc(rec.created_at) or (existing.created_at if existing is not None else now),
            "updated_at": stamp,
        })
        references.append(n.references)

    relations = []
    for r in bulk.relations:
        for end, address in (("from", r.source), ("to", r.target)):
            if address not in ids:
                raise _bad(r.line, f"relation {end} {address[0]}:{address[1]} is neither a node of the file nor on "
                                   "the branch", endpoint=f"{address[0]}:{address[1]}")
        edge = r.record
        relations.append({
            "repo_id": repo.id, "branch_id": ctx.branch.id, "from_node_id": ids[r.source],
            "to_node_id": ids[r.target], "from_address": f"{r.source[0]}:{r.source[1]}",
            "to_address": f"{r.target[0]}:{r.target[1]}", "rel_type": edge.type, "weight": edge.weight,
            "properties": edge.properties,
            "deleted": False, "created_at": _utc(edge.created_at) or now,
            "valid_from": _utc(edge.valid_from), "valid_to": _utc(edge.valid_to),
            "invalidated_by": edge.invalidated_by})
    same = _unchanged_relations(session, view, relations, existing_ids)
    if same:
        relations = [r for i, r in enumerate(relations) if i not in same]
    # Inserted by source node: the two indexes that lead with it (the key, NEIGHBORS' out
    # order) then fill in order instead of at random pages (node ids are uuid5 hashes); a file
    # names each relation once, so no two rows share a key and the order changes nothing else.
    relations.sort(key=lambda r: str(r["from_node_id"]))
    return _Plan(repo.id, repo.uid, wids, nodes, references, relations,
                 _check_chunks(services, session, repo, bulk, keys), created, unchanged_nodes, len(same))


def _check_chunks(services: Resources, session: Session, repo: Any, bulk: BulkFile,
                  keys: dict[str, tuple[int, str]]) -> list[ChunkRow]:
    """The chunk rows to store: each chunk's key must be a node's of the file, its model and
    dimension the workspace's, and each key's chunks numbered 0..n-1."""
    rows: list[ChunkRow] = []
    indexes: dict[str, list[tuple[int, int]]] = {}
    embedders: dict[str, Embedder] = {}
    for c in bulk.chunks:
        rec = c.record
        owner = keys.get(rec.content_key)
        if owner is None:
            raise _bad(c.line, f"chunk content key {rec.content_key} is the key of no node of the file (under the "
                               "target workspaces' embedding settings)", content_key=rec.content_key)
        embedder = embedders.get(owner[1])
        if embedder is None:
            config = workspace_embedding(repo_store.get_workspace(session, repo, owner[1]).config,
                                         default_model=services.settings.embedding_model)
            embedder = embedders[owner[1]] = services.embedder(config.model)
        if rec.model != embedder.name:
            raise _bad(c.line, f"chunk model {rec.model!r} is not {embedder.name!r}, the model of workspace "
                               f"{owner[1]!r} (line {owner[0]})")
        if rec.dim != embedder.dim:
            raise _bad(c.line, f"chunk vector dim {rec.dim} is not {embedder.dim}, the dimension of {embedder.name}",
                       dim=rec.dim, expected=embedder.dim)
        indexes.setdefault(rec.content_key, []).append((rec.chunk_index, c.line))
        rows.append(ChunkRow(rec.content_key, rec.chunk_index, rec.field, rec.text, rec.char_start, rec.char_end,
                             rec.model, c.vector))
    for key, found in indexes.items():
        numbers = sorted(i for i, _ in found)
        if numbers != list(range(len(numbers))):
            raise _bad(min(line for _, line in found), f"the chunks of content key {key} are numbered "
                       f"{numbers[:5]}{'...' if len(numbers) > 5 else ''}, not 0 to {len(numbers) - 1}")
    return rows


def _insert_rows(session: Session, table: Any, rows: Sequence[dict[str, Any]], **constant: Any) -> None:
    """Insert ``rows`` (plus the ``constant`` columns) into ``table`` by the driver's bulk path.

    Values are bound by each column's bind processor, then written by one ``cursor.executemany``
    on SQLite, one ``COPY ... FROM STDIN`` (psycopg) on PostgreSQL, SQLAlchemy's executemany
    elsewhere: the per-row parameter handling of a compiled statement is spared (and on
    PostgreSQL a protocol round per row: 100,000 relations took 7.1 s through psycopg's
    executemany pipeline); the stored values are the same.
    """
    if not rows:
        return
    connection = session.connection()
    dialect = connection.dialect
    names = [c.name for c in table.c if c.name in rows[0] or c.name in constant]
    if dialect.name not in ("sqlite", "postgresql"):
        session.execute(insert(table), [{**row, **constant} for row in rows])
        return
    columns: list[list[Any]] = []
    for name in names:
        values = [constant[name]] * len(rows) if name in constant else [row[name] for row in rows]
        process = table.c[name].type.dialect_impl(dialect).bind_processor(dialect)
        if process is not None and isinstance(table.c[name].type, JSON):
            # An empty JSON object, the usual relation properties, binds as the text "{}" always.
            empty = process({})
            values = [None if v is None else empty if v == {} else process(v) for v in values]
        elif process is not None:
            # Timestamps, flags and numbers repeat (one import time for every row): bound once each.
            memo: dict[Any, Any] = {}
            values = [None if v is None else memo[v] if v in memo else memo.setdefault(v, process(v))
                      for v in values]
        columns.append(values)
    quote = dialect.identifier_preparer.quote
    listed = ", ".join(quote(n) for n in names)
    if dialect.name == "postgresql":
        driver = connection.connection.driver_connection  # psycopg's, inside this transaction
        if driver is None:
            raise KGError("the database connection is closed")
        with driver.cursor() as cursor, cursor.copy(f"COPY {quote(table.name)} ({listed}) FROM STDIN") as copy:
            for row in zip(*columns, strict=True):
                copy.write_row(row)
        return
    sql = f"INSERT INTO {quote(table.name)} ({listed}) VALUES ({', '.join('?' * len(names))})"
    connection.exec_driver_sql(sql, list(zip(*columns, strict=True)))


@functools.lru_cache(maxsize=4)
def _returning_insert(dialect: str) -> Any:
    """The node-version insert returning ids in parameter order (batched ``INSERT ... RETURNING``)."""
    table: Table = NodeVersion.__table__  # type: ignore[assignment]
    return insert(table).returning(table.c.id, sort_by_parameter_order=True)


def _insert_nodes(session: Session, values: list[dict[str, Any]], revision: int) -> list[int]:
    """Insert node versions at ``revision``; their ids, in order.

    SQLite has no ordered ``RETURNING`` for many rows, so the ids are given: the transaction holds
    the write lock (``BEGIN IMMEDIATE``) and a rowid table without AUTOINCREMENT gives a new row
    the largest id plus one. PostgreSQL's come from the sequence in one statement, then the rows
    are copied in.
    """
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        ids = list(session.scalars(text("SELECT nextval(pg_get_serial_sequence('node_versions', 'id')) "
                                        "FROM generate_series(1, :n)"), {"n": len(values)}))
    elif dialect == "sqlite":
        top = session.scalar(select(func.max(NodeVersion.id))) or 0
        ids = list(range(top + 1, top + 1 + len(values)))
    else:
        return list(session.execute(_returning_insert(dialect), [{**row, "revision": revision} for row in values])
                    .scalars())
    _insert_rows(session, NodeVersion.__table__, [{**row, "id": vid} for row, vid in zip(values, ids, strict=True)],
                 revision=revision)
    return ids


def _write(uow: UnitOfWork, ctx: WriteContext, plan: _Plan, nodes: range, relations: range, *,
           with_chunks: bool) -> tuple[int, list[str]]:
    """Write one batch of the plan at the context's revision; its number and the keys queued."""
    session = uow.session
    sqlite = session.get_bind().dialect.name == "sqlite"
    cache = session.scalar(text("PRAGMA cache_size")) if sqlite else None
    if sqlite:  # a page cache that holds the indexes being filled (the default holds 2 MiB)
        session.execute(text(f"PRAGMA cache_size = {-_SQLITE_CACHE_KIB}"))
    try:
        return _write_rows(uow, ctx, plan, nodes, relations, with_chunks=with_chunks)
    finally:
        if sqlite:
            session.execute(text(f"PRAGMA cache_size = {int(cache if cache is not None else -2000)}"))


def _write_rows(uow: UnitOfWork, ctx: WriteContext, plan: _Plan, nodes: range, relations: range, *,
                with_chunks: bool) -> tuple[int, list[str]]:
    """:func:`_write` once the connection is set up."""
    session = uow.session
    revision = ctx.revision  # the revision row and the branch head, as every write makes them
    # Which texts have chunks stored, asked before this write inserts the file's: on PostgreSQL
    # the lookup after 40,000 fresh chunk rows in the same transaction (no statistics yet)
    # scanned the table once per 500 keys (11.5 s of a 20,000-node import).
    keys = {key for i in nodes if (key := plan.nodes[i]["content_key"]) is not None and key not in plan.chunk_keys}
    stored = existing_content_keys(session, plan.repo_id, keys) | plan.chunk_keys
    if with_chunks and plan.chunks:
        store_chunks(session, plan.repo_id, plan.chunks)
    jobs: list[tuple[int, str | None, int]] = []
    reference_rows: list[dict[str, Any]] = []
    for start in range(nodes.start, nodes.stop, _INSERT_BATCH):
        part = range(start, min(start + _INSERT_BATCH, nodes.stop))
        values = [plan.nodes[i] for i in part]
        ids = _insert_nodes(session, values, revision)
        for i, vid, row in zip(part, ids, values, strict=True):
            jobs.append((row["workspace_id"], row["content_key"], vid))
            reference_rows.extend(
                {"repo_id": plan.repo_id, "branch_id": row["branch_id"], "revision": revision,
                 "source_node_id": row["node_id"], "source_version_id": vid, "property_key": key,
                 "target_workspace": ws, "target_path": path}
                for key, ws, path in plan.references[i])
    if reference_rows:
        session.execute(insert(Reference.__table__), reference_rows)  # type: ignore[arg-type]
    queued = enqueue_many(session, repo_id=plan.repo_id, jobs=jobs, stored=stored)
    for start in range(relations.start, relations.stop, _INSERT_BATCH):
        _insert_rows(session, RelationVersion.__table__,
                     plan.relations[start:min(start + _INSERT_BATCH, relations.stop)], revision=revision)
    return revision, queued


def _after_commit(uow: UnitOfWork, plan: _Plan, queued: list[str], *, synced: bool, items: int) -> None:
    """The hooks of every write (index the queued texts, statistics after a large write), and the
    stored chunks placed in the search index.
    """
    services = uow.services
    uow.index_after_commit(plan.repo_id, queued)
    if synced:
        def sync() -> None:
            try:
                with services.db.read() as session:
                    sync_index(session, services.index, plan.repo_id, plan.repo_uid)
            except KGError as exc:  # SQL holds them: the next search or indexer pass places them
                log.warning("import: placing the imported chunks in the index failed: %s", exc.message)
        uow.after_commit(sync)
    if items >= 1000:
        uow.after_commit(services.db.analyze)


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
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int)
                                   or batch_size < 1):
        raise InvalidInput("batch_size must be an integer >= 1", details={"batch_size": batch_size})
    # An import keeps millions of records and rows until it ends: the collector's passes over
    # them are waste (kg.collector).
    with collector.held():
        return _import_ndjson(services, caller, repo, lines, branch=branch, batch_size=batch_size, create=create,
                              message=message)


def _import_ndjson(services: Resources, caller: Actor, repo: str, lines: Iterable[str | bytes], *,
                   branch: str, batch_size: int | None, create: bool, message: str | None) -> NdjsonImport:
    """:func:`import_ndjson` once its arguments are checked."""
    bulk = parse_ndjson(lines)
    source = f"{bulk.header.repo}@{bulk.header.branch} r{bulk.header.revision}"
    revisions: list[int] = []
    queued_total = 0
    with unit_of_work(services, caller) as uow:
        created = _ensure_target(uow, repo, branch, bulk, create=create)
        _authorize_content(uow, repo, branch, bulk)
        # The batches count what is written: the nodes and relations the branch does not hold
        # as the file has them (a re-import of the same file writes no revision).
        ctx = uow.begin(repo, branch, message=message)
        plan = _resolve(uow, ctx, bulk, created)
        batches = _batches(len(plan.nodes), len(plan.relations), batch_size)
        unchanged = plan.unchanged_nodes + plan.unchanged_relations
        summary = message or (f"import ndjson: {len(plan.nodes)} nodes, {len(plan.relations)} relations from "
                              f"{source}" + (f" ({unchanged} records unchanged)" if unchanged else ""))
        ctx.retitle(_batch_message(summary, 0, len(batches)))
        nodes, relations = batches[0]
        queued: list[str] = []
        if len(nodes) + len(relations):
            revision, queued = _write(uow, ctx, plan, nodes, relations, with_chunks=True)
            revisions.append(revision)
            queued_total += len(queued)
        elif plan.chunks:  # vectors for texts the branch holds already: stored, no revision
            store_chunks(uow.session, plan.repo_id, plan.chunks)
        _after_commit(uow, plan, queued, synced=bool(plan.chunks), items=len(nodes) + len(relations))
    for number, (nodes, relations) in enumerate(batches[1:], start=1):
        with unit_of_work(services, caller) as uow:
            ctx = uow.begin(repo, branch, message=_batch_message(summary, number, len(batches)))
            revision, queued = _write(uow, ctx, plan, nodes, relations, with_chunks=False)
            revisions.append(revision)
            queued_total += len(queued)
            _after_commit(uow, plan, queued, synced=bool(plan.chunks), items=len(nodes) + len(relations))
    return NdjsonImport(repo=repo, branch=branch, revision=revisions[-1] if revisions else None,
                        revisions=revisions, nodes=len(plan.nodes), relations=len(plan.relations),
                        unchanged=UnchangedRecords(nodes=plan.unchanged_nodes, relations=plan.unchanged_relations),
                        chunks=len(plan.chunks), queued=queued_total, created_repository=plan.created_repository)


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
