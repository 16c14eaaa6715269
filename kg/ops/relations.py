"""Relation writes: RELATE, UNRELATE and INVALIDATE, one revision at most each, and the
workspace's declaration of single-valued relation types (issue 17)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from kg.context import Actor, Resources, UnitOfWork, permit
from kg.errors import InvalidInput
from kg.graph.validity import aware, check_interval, iso, maybe_aware
from kg.store import relations as relation_store
from kg.store import repos as repo_store
from kg.store.models import RelationVersion, utcnow

#: Longest ``invalidated_by`` accepted.
MAX_INVALIDATED_BY = 2000


def relation_dict(from_: str, to: str, version: RelationVersion, revision: int) -> dict[str, Any]:
    """The API shape of a written relation version.

    Parameters
    ----------
    from_, to : str
        The endpoints' addresses as the caller named them.
    version : RelationVersion
        The version written.
    revision : int
        The revision that wrote it.

    Returns
    -------
    dict
        ``{"from", "to", "type", "weight", "properties", "valid_from", "valid_to",
        "invalidated_by", "revision"}``, times in ISO 8601 (UTC) or null.
    """
    return {"from": from_, "to": to, "type": version.rel_type, "weight": version.weight,
            "properties": version.properties, "valid_from": iso(version.valid_from),
            "valid_to": iso(version.valid_to), "invalidated_by": version.invalidated_by, "revision": revision}


def relate(uow: UnitOfWork, repo: str, branch: str, from_: str, to: str, rel_type: str, *,
           weight: float | None = None, properties: dict[str, Any] | None = None,
           valid_from: datetime | str | None = None, valid_to: datetime | str | None = None,
           message: str | None = None, actor: str | None = None) -> tuple[dict[str, Any], bool]:
    """Assert a typed, weighted edge between two node addresses, as one revision.

    Parameters
    ----------
    uow : kg.context.UnitOfWork
        The write transaction and its caller.
    repo, branch : str
        Where the edge is written.
    from_, to : str
        The nodes' addresses (``workspace:/path``).
    rel_type : str
        The relation type.
    weight : float or None
        The edge's weight; ``None``: unweighted.
    properties : dict or None
        The edge's JSON properties.
    valid_from, valid_to : datetime, str or None
        The world-time interval the fact holds in (timezone-aware, or ISO 8601 with a zone);
        None: unbounded. When the type is single-valued in the source's workspace
        (:func:`set_relation_types`), the source's other current relation of that type is
        invalidated at ``valid_from`` (or now) in this same revision.
    message, actor : str or None
        Recorded with the revision.

    Returns
    -------
    relation : dict
        :func:`relation_dict`.
    created : bool
        Whether the edge is new (else re-asserted: weight and properties replaced).

    Raises
    ------
    kg.errors.NotFound
        The repository, branch or either node does not exist (or is in a workspace the
        caller cannot see).
    kg.errors.Forbidden
        The caller may not write the source node's workspace, or read the target's.
    kg.errors.InvalidInput
        Also a time without a zone, or ``valid_to`` earlier than ``valid_from``.
    """
    start, end = maybe_aware(valid_from, "valid_from"), maybe_aware(valid_to, "valid_to")
    check_interval(start, end)
    uow.authorize_relation(repo, branch, from_, to)
    ctx = uow.begin(repo, branch, message=message, actor=actor)
    version, created = relation_store.relate(uow.session, ctx, from_, to, rel_type,
                                             weight=weight, properties=properties, valid_from=start, valid_to=end)
    return relation_dict(from_, to, version, ctx.revision), created


def invalidate(uow: UnitOfWork, repo: str, branch: str, from_: str, to: str, rel_type: str, *,
               valid_to: datetime | str | None = None, invalidated_by: str | None = None,
               message: str | None = None, actor: str | None = None) -> dict[str, Any]:
    """Close a relation's validity at ``valid_to`` (default now), as one revision.

    Parameters
    ----------
    uow : kg.context.UnitOfWork
        The write transaction and its caller.
    repo, branch : str
        Where the edge is.
    from_, to : str
        The nodes' addresses (``workspace:/path``).
    rel_type : str
        The relation type.
    valid_to : datetime, str or None
        When the fact stopped holding (timezone-aware, or ISO 8601 with a zone); None: now.
    invalidated_by : str or None
        What superseded it (e.g. ``from|type|to`` of the new relation); at most 2,000 characters.
    message, actor : str or None
        Recorded with the revision.

    Returns
    -------
    dict
        :func:`relation_dict` of the new version.

    Raises
    ------
    kg.errors.InvalidInput
        A bad address or type, a time without a zone, ``valid_to`` earlier than the relation's
        ``valid_from`` (nothing is written).
    kg.errors.NotFound
        No such relation (or node) on the branch.
    kg.errors.Forbidden
        As :func:`relate`.
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
    return relation_dict(from_, to, version, ctx.revision)


def get_relation_types(services: Resources, caller: Actor, repo: str, workspace: str) -> dict[str, Any]:
    """The relation types declared single-valued per source in a workspace.

    Parameters
    ----------
    services : kg.context.Resources
        The process's resources.
    caller : kg.context.Actor
        Who reads (``read`` on the workspace).
    repo, workspace : str
        The repository and the workspace's name.

    Returns
    -------
    dict
        ``{"workspace", "single_valued": [str, ...]}``, sorted.

    Raises
    ------
    kg.errors.NotFound
        Unknown repository or workspace (or one the caller cannot see).
    """
    permit(services, caller, "read", repo, workspace=workspace)
    with services.db.read() as session:
        ws = repo_store.get_workspace(session, repo_store.get_repository(session, repo), workspace)
        return {"workspace": ws.name, "single_valued": sorted(relation_store.single_valued_types(session, ws.id))}


def set_relation_types(uow: UnitOfWork, repo: str, workspace: str, single_valued: Any) -> dict[str, Any]:
    """Declare which relation types are single-valued per source in a workspace (replaced whole).

    A relation of a single-valued type asserted from a source that already has a current one
    to another target invalidates the old one in the same revision (:func:`relate`). The
    declaration is workspace configuration: it holds on every branch and is not versioned.

    Parameters
    ----------
    uow : kg.context.UnitOfWork
        The write transaction and its caller (``admin`` on the workspace).
    repo, workspace : str
        The repository and the workspace's name.
    single_valued : list of str
        Relation types (:func:`kg.store.relations.validate_relation_type`), at most 1,000.

    Returns
    -------
    dict
        As :func:`get_relation_types`.

    Raises
    ------
    kg.errors.InvalidInput
        Not a list of valid relation types.
    kg.errors.NotFound, kg.errors.Forbidden
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
    return {"workspace": ws.name, "single_valued": types}


def unrelate(uow: UnitOfWork, repo: str, branch: str, from_: str, to: str, rel_type: str | None = None, *,
             message: str | None = None, actor: str | None = None) -> dict[str, Any]:
    """Remove the edges from ``from_`` to ``to`` (of ``rel_type``, or of every type).

    Parameters
    ----------
    uow : kg.context.UnitOfWork
        The write transaction and its caller.
    repo, branch : str
        Where the edges are removed.
    from_, to : str
        The nodes' addresses (``workspace:/path``).
    rel_type : str or None
        Only edges of this type; ``None``: all types.
    message, actor : str or None
        Recorded with the revision.

    Returns
    -------
    dict
        ``{"revision", "deleted"}``; when there was no edge, no revision is made
        (``revision`` is ``None``, ``deleted`` 0).

    Raises
    ------
    kg.errors.NotFound
    kg.errors.Forbidden
        As :func:`relate`.
    kg.errors.InvalidInput
    """
    uow.authorize_relation(repo, branch, from_, to)
    ctx = uow.begin(repo, branch, message=message, actor=actor)
    deleted = relation_store.unrelate(uow.session, ctx, from_, to, rel_type)
    return {"revision": ctx.revision_if_written, "deleted": deleted}
