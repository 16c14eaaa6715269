"""Relation writes: RELATE and UNRELATE, one revision at most each."""

from __future__ import annotations

from typing import Any

from kg.context import UnitOfWork
from kg.store import relations as relation_store


def relate(uow: UnitOfWork, repo: str, branch: str, from_: str, to: str, rel_type: str, *,
           weight: float | None = None, properties: dict[str, Any] | None = None,
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
    message, actor : str or None
        Recorded with the revision.

    Returns
    -------
    relation : dict
        ``{"from", "to", "type", "weight", "properties", "revision"}``.
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
    """
    uow.authorize_relation(repo, branch, from_, to)
    ctx = uow.begin(repo, branch, message=message, actor=actor)
    version, created = relation_store.relate(uow.session, ctx, from_, to, rel_type,
                                             weight=weight, properties=properties)
    return {"from": from_, "to": to, "type": version.rel_type, "weight": version.weight,
            "properties": version.properties, "revision": ctx.revision}, created


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
