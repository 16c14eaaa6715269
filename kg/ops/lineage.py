"""Lineage: what was derived from a node, and keeping it true when the node changes (issue 17).

Derived records say which source version they were made from, in their own properties:

- a ``mentioned_in`` edge (entity -> document, by ``extract-entities``) and the extraction
  record carry ``source_path`` and ``source_hash`` (:func:`source_hash`): a hash, not a
  revision, so one text extracted on two branches derives equal records and merges clean;
- a stored answer's ``citations`` and ``cites`` edges carry ``source_revision`` and
  ``chunk_sha256`` of each cited passage (:func:`kg.ops.text_store.chunk_hashes`);
- chunks are keyed by content already.

Every node write through the unit of work (PUT, PATCH, delete, batch, merge) calls
:func:`refresh_derived` with the nodes it replaced or deleted: one indexed query
(``ix_relation_versions_to``) reads the ``mentioned_in`` and ``cites`` edges that pointed at
them *before* the write (a node nothing was derived from costs that only). Then, in the same
transaction:

- without an LLM, an entity whose name and aliases no longer occur in the text
  (:func:`kg.text.names.mentions`, the extractor's own matching) loses its ``mentioned_in``
  edge, one still named has it restamped; with an LLM an ``extract-entities`` job is queued
  (:mod:`kg.rag.function_jobs`). A deleted source's edges go with it;
- an entity left with no edge is flagged ``orphan: true``, never deleted;
- an answer one of whose cited passages changed or went (or whose source was deleted) is
  marked ``stale: true`` with ``stale_citations`` (:func:`stale_citations`); an answer whose
  citations hold is not written.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import and_, func, or_, select

from kg.context import Actor, Resources, UnitOfWork, reading
from kg.indexing.config import TEXT_FIELDS
from kg.ops.text_store import chunk_hashes, put_text
from kg.store import nodes as node_store
from kg.store import relations as relation_store
from kg.store.models import Chunk, NodeVersion, RelationVersion
from kg.store.repos import BranchView, WriteContext, workspace_id
from kg.store.visibility import Unindexed
from kg.text.names import mentions
from kg.types.branches import DerivedRefresh
from kg.types.lineage import Lineage

__all__ = [
    "CITES", "Changed", "DERIVED_EDGE_TYPES", "DERIVED_LABELS", "EXTRACTION_ROOT", "MENTIONED_IN",
    "derived_edges", "describe_derived", "node_lineage", "refresh_derived", "source_hash", "source_text",
    "stale_citations", "view_before",
]

MENTIONED_IN = "mentioned_in"
CITES = "cites"
DERIVED_EDGE_TYPES = (MENTIONED_IN, CITES)
EXTRACTION_ROOT = "/kg/extractions"


def source_text(properties: dict[str, Any]) -> str:
    r"""A node's text fields (title, content, body, text), stripped, joined by blank lines; empty
    when it has none.

    >>> source_text({"title": " Ada ", "content": "A mathematician.", "year": 1815})
    'Ada\n\nA mathematician.'
    """
    parts = [v.strip() for k in TEXT_FIELDS if isinstance(v := properties.get(k), str) and v.strip()]
    return "\n\n".join(parts)


def source_hash(properties: dict[str, Any]) -> str:
    """sha256 of a node's text fields (:func:`source_text`, UTF-8, lone surrogates kept)."""
    return hashlib.sha256(source_text(properties).encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class Changed:
    """A node a write replaced (``properties``) or deleted (``properties`` None)."""

    workspace: str
    path: str
    node_id: str
    properties: dict[str, Any] | None


def view_before(view: BranchView, pending: int) -> BranchView:
    """The view of the branch just before the revision ``pending``."""
    (branch_id, _), *rest = view.chain
    return replace(view, revision=pending - 1, chain=((branch_id, pending - 1), *rest))


def _at(view: BranchView, pending: int) -> BranchView:
    """The view of the branch with the revision being written (as this transaction wrote it)."""
    (branch_id, _), *rest = view.chain
    return replace(view, revision=pending, chain=((branch_id, pending), *rest))


def derived_edges(session: Any, view: BranchView, node_ids: list[str]) -> list[RelationVersion]:
    """The live ``mentioned_in`` and ``cites`` edges pointing at ``node_ids`` (endpoints not
    checked). The write path's one lookup, kept plain: the versions' keys on the chain
    (``ix_relation_versions_to``), each edge's winner picked here as
    :func:`kg.store.visibility.visible_select` picks it, then the live winners loaded if any.
    """
    if not node_ids:
        return []
    rv = RelationVersion
    revision = Unindexed(rv.revision)  # beside an IN list (SQLite 3.40's seek-scan: kg.store.visibility)
    reach = [and_(rv.branch_id == branch_id, revision <= upto) for branch_id, upto in view.chain]
    stmt = select(rv.id, rv.from_node_id, rv.rel_type, rv.to_node_id, rv.branch_id, rv.revision, rv.deleted).where(
        # the branches listed too: SQLite seeks each, not every branch id (kg.store.visibility._chain_filter)
        rv.to_node_id.in_(node_ids), rv.rel_type.in_(DERIVED_EDGE_TYPES),
        rv.branch_id.in_([branch_id for branch_id, _ in view.chain]), or_(*reach)
    )
    rows = session.execute(stmt).all()
    if not rows:
        return []
    rank = {branch_id: n for n, (branch_id, _) in enumerate(view.chain)}
    best: dict[tuple[str, str, str], tuple[tuple[int, int, int], int, bool]] = {}
    for vid, src, rel, dst, branch_id, revision, deleted in rows:
        order = (rank[branch_id], -revision, -vid)
        held = best.get((src, rel, dst))
        if held is None or order < held[0]:
            best[(src, rel, dst)] = (order, vid, deleted)
    live = [vid for _, vid, deleted in best.values() if not deleted]
    if not live:
        return []
    return list(session.scalars(select(rv).where(rv.id.in_(live))))


def _address(view: BranchView, version: NodeVersion) -> str:
    return f"{view.workspaces[version.workspace_id]}:{version.path}"


#: How each count of :func:`refresh_derived` reads to a person, in the order they are told.
DERIVED_LABELS = (
    ("unlinked", "mention(s) unlinked"),
    ("restamped", "mention(s) restamped"),
    ("orphaned", "entity(ies) flagged orphan"),
    ("stale", "answer(s) marked stale"),
    ("queued", "text(s) queued for extract-entities"),
)


def describe_derived(derived: DerivedRefresh | dict[str, int] | None) -> str:
    """The non-zero counts of :func:`refresh_derived`, for a person (empty when nothing was done).

    >>> describe_derived(DerivedRefresh(unlinked=2, restamped=0, orphaned=1, stale=0, queued=0))
    '2 mention(s) unlinked, 1 entity(ies) flagged orphan'
    >>> describe_derived({"stale": 1}), describe_derived(None)
    ('1 answer(s) marked stale', '')
    """
    counts = derived.model_dump() if isinstance(derived, DerivedRefresh) else derived or {}
    return ", ".join(f"{counts[key]} {label}" for key, label in DERIVED_LABELS if counts.get(key))


def refresh_derived(
    uow: UnitOfWork, ctx: WriteContext, changed: list[Changed], *, recheck: bool = False, written: bool = False
) -> DerivedRefresh:
    """Recompute, flag or leave what was derived from the nodes this write (already written through
    ``ctx``) replaced or deleted; what it did, counted. One query when nothing was derived; else
    O(e) for e derived edges, and a chunking of each changed source an answer cites. Its own
    writes derive nothing (:func:`kg.ops.text_store.put_text`): no recursion.

    ``recheck``: read each edge again as the transaction sees it (a merge may have brought the
    recomputed edges); ``written``: read the edges as this transaction wrote them (a merge's pass
    over the sources it did not change, whose edges it brought).
    """
    counts = {"unlinked": 0, "restamped": 0, "orphaned": 0, "stale": 0, "queued": 0}
    session = uow.session
    if not changed:
        return DerivedRefresh(**counts)
    if written:
        session.flush()
    seen = _at(ctx.view, ctx.pending_revision) if written else view_before(ctx.view, ctx.pending_revision)
    edges = derived_edges(session, seen, [c.node_id for c in changed])
    if not edges:
        return DerivedRefresh(**counts)
    by_id = {c.node_id: c for c in changed}
    mentioned = [e for e in edges if e.rel_type == MENTIONED_IN]
    _refresh_mentions(uow, ctx, by_id, mentioned, counts, recheck)
    _refresh_answers(uow, ctx, by_id, [e for e in edges if e.rel_type == CITES], counts)
    return DerivedRefresh(**counts)


def _write_props(uow: UnitOfWork, ctx: WriteContext, version: NodeVersion, properties: dict[str, Any]) -> None:
    put_text(  # a lineage write derives nothing: it never refreshes in turn
        uow,
        ctx,
        ctx.view.workspaces[version.workspace_id],
        version.path,
        node_type=version.node_type,
        properties=properties,
        order=version.order,
    )


def _refresh_mentions(
    uow: UnitOfWork,
    ctx: WriteContext,
    by_id: dict[str, Changed],
    edges: list[RelationVersion],
    counts: dict[str, int],
    recheck: bool,
) -> None:
    if not edges:
        return
    session, view = uow.session, ctx.view
    llm = getattr(uow.services.llm, "name", "none") != "none"
    entities = node_store.nodes_by_id(session, view, {e.from_node_id for e in edges})
    touched: set[str] = set()
    queued: set[str] = set()
    for edge in edges:
        source = by_id[edge.to_node_id]
        entity = entities.get(edge.from_node_id)
        if entity is None:
            continue
        if source.properties is None:  # deleted: its edges went with it
            touched.add(entity.node_id)
            continue
        if llm:
            if source.node_id not in queued:
                _queue_extraction(uow, view.repo.name, view.branch.name, source)
                queued.add(source.node_id)
                counts["queued"] += 1
            continue
        props = entity.properties
        names = [n for n in [props.get("name"), *(props.get("aliases") or [])] if isinstance(n, str)]
        names = names or [entity.name]
        address = f"{source.workspace}:{source.path}"
        # The edge as this transaction sees it: a merge may have changed it already; any other
        # write has not touched it since the lookup.
        now = (
            relation_store.find_relation(session, view, entity.node_id, source.node_id, MENTIONED_IN)
            if recheck
            else edge
        )
        if now is None:
            touched.add(entity.node_id)
            continue
        if mentions(source_text(source.properties), names):
            digest = source_hash(source.properties)
            if (now.properties or {}).get("source_hash") != digest:
                relation_store.restamp_relation(
                    session,
                    ctx,
                    now,
                    {
                        **(now.properties or {}),
                        "source_path": source.path,
                        "source_hash": digest,
                    },
                )
                counts["restamped"] += 1
            continue
        relation_store.unrelate(session, ctx, _address(view, entity), address, MENTIONED_IN)
        counts["unlinked"] += 1
        touched.add(entity.node_id)
    for entity_id in sorted(touched):
        entity = entities[entity_id]
        if entity.properties.get("orphan") is True:
            continue
        if relation_store.visible_relations(session, view, node_ids=[entity_id]):
            continue
        _write_props(uow, ctx, entity, {**entity.properties, "orphan": True})
        counts["orphaned"] += 1


def _queue_extraction(uow: UnitOfWork, repo: str, branch: str, source: Changed) -> None:
    """Queue ``extract-entities`` of a changed document on kg's own account, through the job
    runner's port.
    """
    uow.services.jobs.queue_own(uow, repo, "extract-entities", {"workspace": source.workspace, "path": source.path},
                                branch)


def _refresh_answers(
    uow: UnitOfWork, ctx: WriteContext, by_id: dict[str, Changed], edges: list[RelationVersion], counts: dict[str, int]
) -> None:
    if not edges:
        return
    session, view = uow.session, ctx.view
    answers = node_store.nodes_by_id(session, view, {e.from_node_id for e in edges})
    hashes: dict[str, list[str] | None] = {}
    for source in {e.to_node_id: by_id[e.to_node_id] for e in edges}.values():
        hashes[source.node_id] = (
            None
            if source.properties is None
            else chunk_hashes(uow.services, session, view.repo, source.workspace, source.properties)
        )
    for answer_id in sorted({e.from_node_id for e in edges}):
        answer = answers.get(answer_id)
        if answer is None:
            continue
        stale = [dict(s) for s in answer.properties.get("stale_citations") or [] if isinstance(s, dict)]
        known = {(s.get("marker"), s.get("path")) for s in stale}
        for source_id in {e.to_node_id for e in edges if e.from_node_id == answer_id}:
            source = by_id[source_id]
            stale += [{**s, "revision": ctx.revision} for s in stale_citations(
                answer.properties, source.workspace, source.path, hashes[source_id], known)]
        if len(stale) != len(answer.properties.get("stale_citations") or []):
            _write_props(uow, ctx, answer, {**answer.properties, "stale": True, "stale_citations": stale})
            counts["stale"] += 1


def stale_citations(answer: dict[str, Any], workspace: str, path: str, now: list[str] | None,
                    known: set[tuple[Any, Any]]) -> list[dict[str, Any]]:
    """The citations of ``workspace:path`` in ``answer`` newly stale: ``{"marker", "workspace",
    "path", "chunk_index", "reason"}``, reason ``source_deleted`` (``now`` None) or
    ``chunk_changed`` (the cited chunk's hash in ``now`` is not its ``chunk_sha256``, or is gone).
    ``known`` holds the ``(marker, path)`` already stale, and gets these. A citation without a
    hash (stored before lineage) is stale only for a deleted source.
    """
    listed: list[dict[str, Any]] = []
    for citation in answer.get("citations") or []:
        if not isinstance(citation, dict) or (citation.get("workspace"), citation.get("path")) != (workspace, path):
            continue
        index, recorded = citation.get("chunk_index"), citation.get("chunk_sha256")
        if now is None:
            reason = "source_deleted"
        elif recorded is None or not isinstance(index, int):
            continue  # an answer stored before lineage: nothing to compare with
        elif index >= len(now) or now[index] != recorded:
            reason = "chunk_changed"
        else:
            continue
        if (citation.get("marker"), path) in known:
            continue
        known.add((citation.get("marker"), path))
        listed.append({"marker": citation.get("marker"), "workspace": workspace, "path": path,
                       "chunk_index": index, "reason": reason})
    return listed


# -- reading lineage --------------------------------------------------------------------------


def node_lineage(
    services: Resources,
    caller: Actor,
    repo: str,
    branch: str,
    workspace: str,
    path: str,
    *,
    at_revision: int | None = None,
) -> Lineage:
    """What was derived from a node and what it was derived from (docs/concepts/lineage.md), as
    far as the caller may read. ``derived`` rows: ``chunks``, ``mention`` (``current`` when its
    ``source_hash`` is this text's; ``orphan``), ``extraction``, ``answer`` (``stale``,
    ``stale_citations``); ``derived_from`` rows: ``mentioned_in``, ``extraction_of``, ``cites``.

    Raises
    ------
    kg.errors.NotFound
        No node there.
    """
    with reading(services, caller, repo, branch, at_revision=at_revision) as (session, view):
        node = node_store.get_node(session, view, workspace, path)
        digest = source_hash(node.properties)
        derived: list[dict[str, Any]] = []
        if node.content_key:
            count = session.scalar(
                select(func.count())
                .select_from(Chunk)
                .where(Chunk.repo_id == view.repo.id, Chunk.content_key == node.content_key)
            )
            derived.append({"kind": "chunks", "content_key": node.content_key, "count": int(count or 0)})
        edges = relation_store.visible_relations(session, view, node_ids=[node.node_id])
        ends = node_store.nodes_by_id(session, view, {e.from_node_id for e in edges} | {e.to_node_id for e in edges})
        hashes: list[str] | None = None
        for edge in sorted(edges, key=lambda e: (e.rel_type, e.from_node_id, e.to_node_id)):
            props = edge.properties or {}
            if edge.to_node_id == node.node_id and edge.rel_type == MENTIONED_IN:
                entity = ends[edge.from_node_id]
                derived.append(
                    {
                        "kind": "mention",
                        "workspace": view.workspaces[entity.workspace_id],
                        "path": entity.path,
                        "source_hash": props.get("source_hash"),
                        "current": props.get("source_hash") == digest,
                        "orphan": entity.properties.get("orphan") is True,
                    }
                )
            elif edge.to_node_id == node.node_id and edge.rel_type == CITES:
                answer = ends[edge.from_node_id]
                if hashes is None:
                    hashes = chunk_hashes(services, session, view.repo, workspace, node.properties)
                held = [
                    c
                    for c in answer.properties.get("citations") or []
                    if isinstance(c, dict) and (c.get("workspace"), c.get("path")) == (workspace, node.path)
                ]
                current = all(
                    isinstance(c.get("chunk_index"), int)
                    and c["chunk_index"] < len(hashes)
                    and hashes[c["chunk_index"]] == c.get("chunk_sha256")
                    for c in held
                )
                derived.append(
                    {
                        "kind": "answer",
                        "workspace": view.workspaces[answer.workspace_id],
                        "path": answer.path,
                        "source_revision": props.get("source_revision"),
                        "current": current,
                        "stale": answer.properties.get("stale") is True,
                        "stale_citations": answer.properties.get("stale_citations") or [],
                    }
                )
            elif edge.from_node_id == node.node_id and edge.rel_type in DERIVED_EDGE_TYPES:
                target = ends[edge.to_node_id]
                derived_from = {
                    "kind": edge.rel_type,
                    "workspace": view.workspaces[target.workspace_id],
                    "path": target.path,
                    **(
                        {"source_hash": props.get("source_hash")}
                        if edge.rel_type == MENTIONED_IN
                        else {"source_revision": props.get("source_revision")}
                    ),
                }
                if edge.rel_type == MENTIONED_IN:
                    derived_from["current"] = props.get("source_hash") == source_hash(target.properties)
                else:
                    derived_from["current"] = node.properties.get("stale") is not True
                derived.append({"_from": derived_from})
        record = node_store.find_node(session, view, workspace, f"{EXTRACTION_ROOT}/{node.node_id}")
        if record is not None:
            derived.append(
                {
                    "kind": "extraction",
                    "workspace": workspace,
                    "path": record.path,
                    "source_hash": record.properties.get("source_hash"),
                    "current": record.properties.get("source_hash") == digest,
                }
            )
        derived_from_rows = [d.pop("_from") for d in derived if "_from" in d]
        derived = [d for d in derived if d]
        source_ref = node.properties.get("source") if node.path.startswith(EXTRACTION_ROOT + "/") else None
        if isinstance(source_ref, dict) and isinstance(source_ref.get("kg:ref"), str):
            ws = source_ref.get("kg:workspace") or workspace
            found = (
                node_store.find_node(session, view, ws, source_ref["kg:ref"])
                if ws in view.workspaces.values() and view.can_read(workspace_id(view, ws))
                else None
            )
            derived_from_rows.append(
                {
                    "kind": "extraction_of",
                    "workspace": ws,
                    "path": source_ref["kg:ref"],
                    "source_hash": node.properties.get("source_hash"),
                    "current": found is not None
                    and node.properties.get("source_hash") == source_hash(found.properties),
                }
            )
        return Lineage(workspace=workspace, path=node.path, node_id=node.node_id, node_type=node.node_type,
                       revision=node.revision, source_hash=digest, derived=derived, derived_from=derived_from_rows)
