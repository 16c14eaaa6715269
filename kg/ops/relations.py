"""Relation writes, RELATE, UNRELATE and INVALIDATE, one revision at most each; and a workspace's
single-valued relation types.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from kg.context import Actor, Resources, UnitOfWork, permit
from kg.errors import InvalidInput
from kg.graph.validity import aware, check_interval, iso, maybe_aware
from kg.store import relations as relation_store
from kg.store import repos as repo_store
from kg.store.models import RelationVersion, utcnow
from kg.types.relations import Relation, RelationsDeleted, RelationTypes

__all__ = [
    "MAX_INVALIDATED_BY", "get_relation_types", "invalidate", "relate", "set_relation_types", "unrelate",
]

#: Longest ``invalidated_by`` accepted.
MAX_INVALIDATED_BY = 2000


def _relation(from_: str, to: str, version: RelationVersion, revision: int) -> Relation:
    """A written relation version, endpoints as the caller named them."""
    return Relation.model_validate({"from": from_, "to": to, "type": version.rel_type, "weight": version.weight,
            "properties": version.properties, "valid_from": iso(version.valid_from),
            "valid_to": iso(version.valid_to), "invalidated_by": version.invalidated_by, "revision": revision})


def relate(uow: UnitOfWork, repo: str, branch: str, from_: str, to: str, rel_type: str, *,
           weight: float | None = None, properties: dict[str, Any] | None = None,
           valid_from: datetime | str | None = None, valid_to: datetime | str | None = None,
           message: str | None = None, actor: str | None = None) -> tuple[Relation, bool]:
    """Assert a typed, weighted edge between two addresses as one revision: ``(relation, created)``,
    a re-assertion replacing weight and properties. Needs ``write`` on the source's workspace and
    ``read`` on the target's. ``valid_from``/``valid_to`` (timezone-aware or ISO 8601 with a zone;
    None: unbounded) bound the fact in world time; a type single-valued in the source's workspace
    (:func:`set_relation_types`) invalidates the source's other current one at ``valid_from`` (or
    now) in the same revision.

    Raises
    ------
    kg.errors.NotFound
        Either node does not exist.
    kg.errors.InvalidInput
        A bad type, weight or properties, a time without a zone, ``valid_to`` before
        ``valid_from``.
    """
    start, end = maybe_aware(valid_from, "valid_from"), maybe_aware(valid_to, "valid_to")
    check_interval(start, end)
    uow.authorize_relation(repo, branch, from_, to)
    ctx = uow.begin(repo, branch, message=message, actor=actor)
    version, created = relation_store.relate(uow.session, ctx, from_, to, rel_type,
                                             weight=weight, properties=properties, valid_from=start, valid_to=end)
    return _relation(from_, to, version, ctx.revision), created


def invalidate(uow: UnitOfWork, repo: str, branch: str, from_: str, to: str, rel_type: str, *,
               valid_to: datetime | str | None = None, invalidated_by: str | None = None,
               message: str | None = None, actor: str | None = None) -> Relation:
    """Close a relation's validity at ``valid_to`` (None: now), as one revision; ``invalidated_by``
    (at most 2,000 characters) says what superseded it, e.g. the new relation's ``from|type|to``.

    Raises
    ------
    kg.errors.InvalidInput
        A bad type, a time without a zone, ``valid_to`` before the relation's ``valid_from``.
    kg.errors.NotFound
        No such relation (or node) on the branch.
    """
    end = aware(valid_to, "valid_to") if valid_to is not None else utcnow()
    if invalidated_by is not None and (not isinstance(invalidated_by, str) or not invalidated_by
                                       or len(invalidated_by) > MAX_INVALIDATED_BY):
        raise InvalidInput(f"invalidated_by must be a non-empty string of at most {MAX_INVALIDATED_BY} characters",
                           details={"field": "invalidated_by"})
    uow.authorize_relation(repo, branch, from_, to)
    ctx = uow.begin(repo, branch, message=message, actor=actor)
    version = relation_store.invalidate(uow.session, ctx, from_, to, rel_type, valid_to=end,
                                        invalidated_by=invalidated_by)
    return _relation(from_, to, version, ctx.revision)


def get_relation_types(services: Resources, caller: Actor, repo: str, workspace: str) -> RelationTypes:
    """A workspace's single-valued relation types, sorted."""
    permit(services, caller, "read", repo, workspace=workspace)
    with services.db.read() as session:
        ws = repo_store.get_workspace(session, repo_store.get_repository(session, repo), workspace)
        return RelationTypes(workspace=ws.name,
                             single_valued=sorted(relation_store.single_valued_types(session, ws.id)))


def set_relation_types(uow: UnitOfWork, repo: str, workspace: str, single_valued: Any) -> RelationTypes:
    """Declare a workspace's single-valued relation types (at most 1,000, replaced whole; ``admin``):
    a relation of such a type from a source with a current one to another target invalidates it
    in the same revision (:func:`relate`). Workspace configuration: on every branch, unversioned.

    Raises
    ------
    kg.errors.InvalidInput
        Not a list of valid relation types.
    """
    if not isinstance(single_valued, list) or len(single_valued) > 1000:
        raise InvalidInput("single_valued must be a list of at most 1000 relation types",
                           details={"field": "single_valued"})
    types = sorted({relation_store.validate_relation_type(t) for t in single_valued})
    uow.authorize("admin", repo, workspace=workspace)
    session = uow.session
    ws = repo_store.get_workspace(session, repo_store.get_repository(session, repo, lock=True), workspace)
    ws.config = {**(ws.config or {}), relation_store.SINGLE_VALUED_KEY: types}
    session.flush()
    return RelationTypes(workspace=ws.name, single_valued=types)


def unrelate(uow: UnitOfWork, repo: str, branch: str, from_: str, to: str, rel_type: str | None = None, *,
             message: str | None = None, actor: str | None = None) -> RelationsDeleted:
    """Remove the edges from ``from_`` to ``to`` of ``rel_type`` (None: every type): the revision
    (None when there was no such edge) and how many were removed.

    Raises
    ------
    kg.errors.NotFound
        No such node.
    """
    uow.authorize_relation(repo, branch, from_, to)
    ctx = uow.begin(repo, branch, message=message, actor=actor)
    deleted = relation_store.unrelate(uow.session, ctx, from_, to, rel_type)
    return RelationsDeleted(revision=ctx.revision_if_written, deleted=deleted)
