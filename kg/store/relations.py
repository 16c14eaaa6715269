"""Relations: typed, weighted edges between nodes, versioned per branch.

A relation is unique per (from node, to node, type) on a branch; re-asserting it replaces its
weight and properties. Endpoints are node ids, so an edge follows its node through updates and
disappears with it: a node deleted on a branch hides its edges there.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Iterable

from sqlalchemy import or_
from sqlalchemy.orm import Session

from kg.errors import InvalidInput, NotFound
from kg.store.models import RelationVersion, utcnow
from kg.store.nodes import get_node, nodes_by_id
from kg.store.paths import parse_address
from kg.store.repos import BranchView, WriteContext
from kg.store.visibility import visible_select

_TYPE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_:\-.]{0,254}$")
_KEY = (RelationVersion.from_node_id, RelationVersion.rel_type, RelationVersion.to_node_id)


def validate_relation_type(rel_type: Any) -> str:
    """Check a relation type: a letter or ``_`` first, then letters, digits, ``_:-.``.

    Raises
    ------
    kg.errors.InvalidInput
    """
    if not isinstance(rel_type, str) or not _TYPE_RE.match(rel_type):
        raise InvalidInput(
            f"invalid relation type {rel_type!r}: start with a letter or '_', then letters, "
            "digits, '_', ':', '-', '.'",
            details={"type": rel_type},
        )
    return rel_type


def _validate_weight(weight: Any) -> float | None:
    if weight is None:
        return None
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight):
        raise InvalidInput("weight must be a finite number or null", details={"weight": weight})
    return float(weight)


def relate(
    session: Session,
    ctx: WriteContext,
    source: str,
    target: str,
    rel_type: str,
    *,
    weight: float | None = None,
    properties: dict[str, Any] | None = None,
) -> tuple[RelationVersion, bool]:
    """Assert the edge ``source -[rel_type]-> target`` on the context's branch.

    Parameters
    ----------
    source, target : str
        Node addresses ``workspace:/path``.
    rel_type : str
    weight : float, optional
    properties : dict, optional

    Returns
    -------
    (RelationVersion, created)
        ``created`` is False when the edge existed and its weight and properties were replaced.

    Raises
    ------
    kg.errors.InvalidInput
        Bad address, type, weight or properties.
    kg.errors.NotFound
        An endpoint does not exist on the branch.
    """
    validate_relation_type(rel_type)
    weight = _validate_weight(weight)
    properties = properties or {}
    if not isinstance(properties, dict):
        raise InvalidInput("relation properties must be a JSON object")
    try:
        json.dumps(properties, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"relation properties must be plain JSON: {exc}") from exc
    src = get_node(session, ctx.view, *parse_address(source))
    dst = get_node(session, ctx.view, *parse_address(target))
    existing = find_relation(session, ctx.view, src.node_id, dst.node_id, rel_type)
    version = RelationVersion(
        repo_id=ctx.repo.id, branch_id=ctx.branch.id, revision=ctx.revision,
        from_node_id=src.node_id, to_node_id=dst.node_id, rel_type=rel_type, weight=weight,
        properties=properties, deleted=False, created_at=utcnow(),
    )
    session.add(version)
    session.flush()
    return version, existing is None


def find_relation(session: Session, view: BranchView, from_id: str, to_id: str,
                  rel_type: str) -> RelationVersion | None:
    """The visible version of one edge, or None."""
    stmt, _ = visible_select(
        RelationVersion, view, _KEY,
        RelationVersion.from_node_id == from_id, RelationVersion.to_node_id == to_id,
        RelationVersion.rel_type == rel_type,
    )
    return session.scalar(stmt)


def unrelate(session: Session, ctx: WriteContext, source: str, target: str,
             rel_type: str | None = None) -> int:
    """Remove the edges from ``source`` to ``target`` (of ``rel_type``, or of every type).

    Returns
    -------
    int
        How many edges were removed (tombstoned on the branch).

    Raises
    ------
    kg.errors.InvalidInput
    kg.errors.NotFound
        An endpoint does not exist.
    """
    if rel_type is not None:
        validate_relation_type(rel_type)
    src = get_node(session, ctx.view, *parse_address(source))
    dst = get_node(session, ctx.view, *parse_address(target))
    where = [RelationVersion.from_node_id == src.node_id, RelationVersion.to_node_id == dst.node_id]
    if rel_type is not None:
        where.append(RelationVersion.rel_type == rel_type)
    stmt, _ = visible_select(RelationVersion, ctx.view, _KEY, *where)
    removed = 0
    for edge in session.scalars(stmt).all():
        session.add(RelationVersion(
            repo_id=ctx.repo.id, branch_id=ctx.branch.id, revision=ctx.revision,
            from_node_id=edge.from_node_id, to_node_id=edge.to_node_id, rel_type=edge.rel_type,
            weight=edge.weight, properties={}, deleted=True, created_at=utcnow(),
        ))
        removed += 1
    session.flush()
    return removed


def visible_relations(session: Session, view: BranchView, *, node_ids: Iterable[str] | None = None,
                      ) -> list[RelationVersion]:
    """Visible edges (touching ``node_ids`` when given) whose endpoints are both visible."""
    where = []
    if node_ids is not None:
        ids = list(node_ids)
        if not ids:
            return []
        where.append(or_(RelationVersion.from_node_id.in_(ids), RelationVersion.to_node_id.in_(ids)))
    stmt, _ = visible_select(RelationVersion, view, _KEY, *where)
    edges = list(session.scalars(stmt))
    endpoints = {e.from_node_id for e in edges} | {e.to_node_id for e in edges}
    alive = nodes_by_id(session, view, endpoints)
    return [e for e in edges if e.from_node_id in alive and e.to_node_id in alive]


def require_node(session: Session, view: BranchView, address: str):
    """The node at an address ``workspace:/path``.

    Raises
    ------
    kg.errors.InvalidInput, kg.errors.NotFound
    """
    try:
        return get_node(session, view, *parse_address(address))
    except NotFound:
        raise
