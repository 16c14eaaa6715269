"""Import of the reference MCP memory server's knowledge graph (``@modelcontextprotocol/server-memory``).

Its file (``memory.jsonl``) holds one object a line: an entity ``{"type": "entity", "name",
"entityType", "observations": [str, ...]}`` or a relation ``{"type": "relation", "from", "to",
"relationType"}`` between entity names. Blank lines and other keys are ignored, as the server
does; but where its loader skips a bad line, :func:`import_memory_jsonl` refuses the file,
naming the first malformed record's line, and writes nothing. It writes, as one revision:

- each entity as a ``kg:Entity`` node at ``/entities/{slug}`` (:func:`kg.text.names.entity_slug`,
  as ``extract-entities`` names entities: case, accents and punctuation folded, so a ``/`` never
  nests: ``AC/DC`` -> ``/entities/ac-dc``, ``C++`` -> ``/entities/c-plus-plus``), the name
  verbatim in ``name``; a slug another name holds (on the branch or earlier in the file) gets
  ``-`` and 8 hex digits of the name's SHA-256, so a name keeps one path for good;
- ``entityType`` as ``entity_type``, the observations as the list ``observations`` and, one a
  line, as ``content`` (indexed for search), the name as ``title``; other properties (an
  extracted entity's ``aliases``) are kept;
- each relation as a typed relation between the two nodes; a ``relationType`` that is not a kg
  type (``works at``) becomes one (``works_at``, :func:`relation_type`), the original kept in
  ``memory_relation_type``.

A relation naming no entity of the file is malformed (the server refuses it too). A second
import of the same file writes nothing; what the file no longer holds is left (no deletes).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from kg.context import UnitOfWork
from kg.errors import Conflict, InvalidInput
from kg.ops.ingest import ensure_repo_workspace
from kg.ops.nodes import GraphWrite, write_graph
from kg.store.nodes import find_node
from kg.store.relations import find_relation
from kg.store.repos import BranchView
from kg.text.names import entity_slug
from kg.types.bulk import MemoryImport

__all__ = ["MemoryGraph", "import_memory_jsonl", "parse_memory_jsonl", "relation_type"]

ENTITY_ROOT = "/entities"
ENTITY_NODE_TYPE = "kg:Entity"
DEFAULT_WORKSPACE = "memory"
_TYPE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_:\-.]{0,254}$")
_NOT_TYPE_CHARS = re.compile(r"[^A-Za-z0-9_:\-.]+")


@dataclass
class MemoryGraph:
    """The checked records of a memory file, in file order: ``entities`` (``{"line", "name",
    "entity_type", "observations"}``, names unique), ``relations`` (``{"line", "from", "to",
    "type", "memory_type"}``, duplicates dropped).
    """

    entities: list[dict[str, Any]] = field(default_factory=list)
    relations: list[dict[str, Any]] = field(default_factory=list)


def _bad(line: int, why: str) -> InvalidInput:
    return InvalidInput(f"line {line}: {why}", details={"line": line})


def _string(record: dict[str, Any], key: str, line: int, *, blank_ok: bool = False) -> str:
    value = record.get(key)
    if not isinstance(value, str):
        raise _bad(line, f"{record.get('type')} field {key!r} must be a string")
    if not blank_ok and not value.strip():
        raise _bad(line, f"{record.get('type')} field {key!r} is empty")
    return value


def relation_type(memory_type: str) -> str:
    """The kg relation type of a memory ``relationType``: itself if valid; else each run of other
    characters as ``_`` (``"works at"`` -> ``"works_at"``), ``_`` first before a digit or ``-``,
    at most 255 characters.
    """
    if _TYPE_RE.match(memory_type):
        return memory_type
    text = _NOT_TYPE_CHARS.sub("_", memory_type.strip())
    if not text or not (text[0].isalpha() or text[0] == "_"):
        text = "_" + text
    return text[:255]


def parse_memory_jsonl(text: str) -> MemoryGraph:
    """Read and check a memory file; O(records).

    Raises
    ------
    kg.errors.InvalidInput
        ``"line N: ..."`` (``details["line"]``): not a JSON object, a ``type`` neither
        ``entity`` nor ``relation``, a field missing or mistyped, a name without a letter or
        digit, an entity named twice, a relation naming no entity of the file.
    """
    graph = MemoryGraph()
    seen: dict[str, int] = {}
    pending: list[dict[str, Any]] = []
    for number, raw in enumerate(text.split("\n"), start=1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise _bad(number, f"not JSON ({exc.msg} at column {exc.colno})") from exc
        except RecursionError as exc:
            raise _bad(number, "not JSON kg can read (nested too deeply)") from exc
        if not isinstance(record, dict):
            raise _bad(number, "a record must be a JSON object")
        kind = record.get("type")
        if kind == "entity":
            name = _string(record, "name", number)
            entity_type = _string(record, "entityType", number, blank_ok=True)
            observations = record.get("observations")
            if not isinstance(observations, list) or not all(isinstance(o, str) for o in observations):
                raise _bad(number, "entity field 'observations' must be a list of strings")
            if not entity_slug(name):
                raise _bad(number, f"entity name {name!r} has no letter or digit to make a path of")
            if name in seen:
                raise _bad(number, f"entity {name!r} is named twice (first on line {seen[name]})")
            seen[name] = number
            graph.entities.append({"line": number, "name": name, "entity_type": entity_type,
                                   "observations": list(observations)})
        elif kind == "relation":
            memory_type = _string(record, "relationType", number)
            pending.append({"line": number, "from": _string(record, "from", number),
                            "to": _string(record, "to", number), "type": relation_type(memory_type),
                            "memory_type": memory_type})
        else:
            raise _bad(number, f"unknown record type {kind!r} (expected 'entity' or 'relation')")
    keys = set()
    for rel in pending:
        for end in ("from", "to"):
            if rel[end] not in seen:
                raise _bad(rel["line"], f"relation {end} {rel[end]!r} names no entity of the file")
        key = (rel["from"], rel["to"], rel["type"])
        if key not in keys:
            keys.add(key)
            graph.relations.append(rel)
    return graph


def _entity_paths(session: Session, view: BranchView, workspace: str, graph: MemoryGraph) -> dict[str, str]:
    """The path of each entity name: its slug, or slug plus a name hash when another name holds it."""
    paths: dict[str, str] = {}
    claimed: dict[str, str] = {}  # path -> name, this file
    for entity in graph.entities:
        name = entity["name"]
        path = f"{ENTITY_ROOT}/{entity_slug(name)}"
        existing = find_node(session, view, workspace, path)
        holder = claimed.get(path) or (existing.properties.get("name") if existing is not None else None)
        if holder is not None and holder != name:
            digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
            path = f"{path}-{digest}"
        claimed[path] = name
        paths[name] = path
    return paths


def import_memory_jsonl(uow: UnitOfWork, repo: str, branch: str, text: str, *,
                        workspace: str = DEFAULT_WORKSPACE, create: bool = True) -> MemoryImport:
    """Import a memory file into ``workspace`` of a branch as one revision, or none when the branch
    holds it all (``revision`` null, ``unchanged``); the file is checked whole first, then what
    differs is written by :func:`kg.ops.nodes.write_graph`. ``create``: a missing repository and
    workspace are made.

    Raises
    ------
    kg.errors.InvalidInput
        A malformed record (``"line N: ..."``).
    kg.errors.Conflict
        A node that is not a ``kg:Entity`` is at an entity's path.
    """
    graph = parse_memory_jsonl(text)
    ensure_repo_workspace(uow, repo, workspace, create=create)
    counts = {"nodes": 0, "relations": 0}

    def plan(session: Session, view: BranchView) -> GraphWrite | None:
        todo = GraphWrite()
        paths = _entity_paths(session, view, workspace, graph)
        ids: dict[str, str | None] = {}
        for entity in graph.entities:
            path = paths[entity["name"]]
            existing = find_node(session, view, workspace, path)
            if existing is not None and existing.node_type != ENTITY_NODE_TYPE:
                raise Conflict(f"line {entity['line']}: {workspace}:{path} is a {existing.node_type}, "
                               f"not a {ENTITY_NODE_TYPE}", details={"line": entity["line"], "path": path})
            properties = dict(existing.properties) if existing is not None else {}
            properties.update({"name": entity["name"], "entity_type": entity["entity_type"],
                               "observations": entity["observations"], "title": entity["name"],
                               "content": "\n".join(entity["observations"])})
            if not entity["observations"]:
                del properties["content"]
            ids[entity["name"]] = existing.node_id if existing is not None else None
            if existing is None or existing.properties != properties:
                todo.upserts.append({"workspace": workspace, "path": path, "node_type": ENTITY_NODE_TYPE,
                                     "properties": properties})
        for rel in graph.relations:
            props = {"memory_relation_type": rel["memory_type"]} if rel["memory_type"] != rel["type"] else {}
            source, target = ids[rel["from"]], ids[rel["to"]]
            if source is not None and target is not None:
                edge = find_relation(session, view, source, target, rel["type"])
                if edge is not None and not edge.deleted and (edge.properties or {}) == props:
                    continue
            todo.relations.append({"from": f"{workspace}:{paths[rel['from']]}",
                                   "to": f"{workspace}:{paths[rel['to']]}", "type": rel["type"],
                                   "properties": props})
        counts["nodes"], counts["relations"] = len(todo.upserts), len(todo.relations)
        return todo if todo.upserts or todo.relations else None

    written = write_graph(uow, repo, branch, plan, message=f"import memory-jsonl into {workspace}")
    return MemoryImport(revision=written.revision if written is not None else None,
                        entities=len(graph.entities), relations=len(graph.relations),
                        nodes_written=counts["nodes"], relations_written=counts["relations"], unchanged=written is None)
