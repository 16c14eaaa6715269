"""Branch resolution in SQL: the version of each entity that a branch sees.

DESIGN.md: what a branch sees at revision r is, for each entity, the newest version on the
branch itself with revision <= r; failing that, the newest on its parent with revision <= the
branch's base, and so on up the chain. A tombstone hides the entity.

One window query does it: among the versions allowed by the chain, rank each entity's
versions by (chain position, revision desc) and keep the first.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, case, exists, false, func, or_, select
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import aliased
from sqlalchemy.sql.visitors import InternalTraversal

from kg.store.models import NodeVersion, RelationVersion
from kg.store.repos import BranchView


@dataclass(frozen=True)
class Chain:
    """Only a branch state's chain: what :func:`visible_select` reads of a view."""

    chain: tuple[tuple[int, int], ...]


class Unindexed(ColumnElement[Any]):
    """A column that SQLite must not use to bound an index range (``+column``); itself elsewhere.

    SQLite 3.40.1 (Debian 12's) answers a lookup such as ``branch_id = ? AND revision <= ? AND
    workspace_id = ? AND path IN (...)`` with a version past the bound once ``ANALYZE`` has
    written ``sqlite_stat1``: its seek-scan over the ``(branch_id, workspace_id, path,
    revision)`` index returns a row whose ``revision`` fails the range (3.51 answers right). A
    merge then read the fork's state with a later version in it. The unary ``+`` keeps the
    revision out of the index seek, so it is tested on each row; the lookup still seeks the index
    by its equality columns, and the window reads every version of those entities either way.
    Use it for the revision bound of any read that pairs an ``IN`` list with it.
    """

    inherit_cache = True
    _traverse_internals = [("column", InternalTraversal.dp_clauseelement)]  # in the statement cache's key

    def __init__(self, column: Any) -> None:
        self.column = column
        self.type = column.type


@compiles(Unindexed)
def _plain(element: Unindexed, compiler: Any, **kw: Any) -> str:
    return str(compiler.process(element.column, **kw))


@compiles(Unindexed, "sqlite")
def _unary_plus(element: Unindexed, compiler: Any, **kw: Any) -> str:
    return "+" + str(compiler.process(element.column, **kw))


@functools.lru_cache(maxsize=1024)
def _chain_filter(model: Any, chain: tuple[tuple[int, int], ...], lookup: bool = False) -> ColumnElement[bool]:
    """The versions ``chain`` allows; ``lookup``: the query also filters by entity (an ``IN``
    list), so the revision bound is kept out of SQLite's index seek (:class:`Unindexed`)."""
    revision = Unindexed(model.revision) if lookup else model.revision
    return or_(*(and_(model.branch_id == b, revision <= r) for b, r in chain)) if chain else false()


@functools.lru_cache(maxsize=1024)
def _priority(model: Any, chain: tuple[tuple[int, int], ...]) -> ColumnElement[Any]:
    if len(chain) == 1:
        return func.abs(0)
    return case({b: i for i, (b, _) in enumerate(chain)}, value=model.branch_id)


def visible_select(model: Any, view: BranchView | Chain, partition: Sequence[Any], *where: Any,
                   include_deleted: bool = False) -> tuple[Select[Any], Any]:
    """Select the versions of ``model`` that ``view`` sees: one per entity, its winner.

    A view with :attr:`~kg.store.repos.BranchView.readable` set reads only what its reader may
    read (:func:`reader_scope`), in this same query. The window runs over ids and key columns only
    (served by the version indexes); the winners' rows, with their possibly large properties, are
    read once, by primary key.

    Parameters
    ----------
    partition : sequence of columns
        What identifies one entity (``workspace_id, path`` for nodes by address, ``node_id``
        for nodes by id, ``from_node_id, rel_type, to_node_id`` for relations).
    *where : SQL expressions
        Filters on columns constant across an entity's versions (path, workspace, ids). Never
        filter here on a column that changes between versions (properties, type): that would
        pick an older version as the winner.
    include_deleted : bool
        Keep tombstones (for diff and history).

    Returns
    -------
    (Select, entity)
        ``select(model)`` of the winners, and the entity to add filters and ordering with.
    """
    where = (*where, *reader_scope(model, view))
    rn = func.row_number().over(
        partition_by=list(partition),
        order_by=(_priority(model, view.chain), model.revision.desc(), model.id.desc()),
    ).label("rn")
    ranked = select(model.id.label("vid"), rn).where(_chain_filter(model, view.chain, bool(where)), *where).subquery()
    stmt = select(model).join(ranked, model.id == ranked.c.vid).where(ranked.c.rn == 1)
    if not include_deleted:
        stmt = stmt.where(model.deleted == false())
    return stmt, model


def reader_scope(model: Any, view: BranchView | Chain) -> tuple[ColumnElement[bool], ...]:
    """The filters that keep a restricted reader inside the workspaces it may read (none for a
    :class:`Chain` or an unrestricted view).

    A node is in one workspace for life (its id is derived from it), so the filters are on columns
    constant across an entity's versions and may sit inside the window query. Nodes: the workspace
    is readable; relations: both endpoints are nodes of readable workspaces (an index probe of
    ``ix_node_versions_node_id`` per endpoint).
    """
    readable = view.readable if isinstance(view, BranchView) else None
    if readable is None:
        return ()
    wids = sorted(readable)
    if model is NodeVersion:
        return (NodeVersion.workspace_id.in_(wids),)
    if model is RelationVersion:
        branches = [b for b, _ in view.chain]
        return tuple(readable_node(column, readable, branches) for column in (model.from_node_id, model.to_node_id))
    return ()


def readable_node(column: Any, readable: Collection[int], branches: Sequence[int]) -> ColumnElement[bool]:
    """``EXISTS`` a version of the node id in ``column`` on ``branches`` in a workspace of
    ``readable`` (a node's id is derived from its workspace and path, so any version tells; one
    index probe per branch).
    """
    nv = aliased(NodeVersion)
    return exists().where(nv.branch_id.in_(list(branches)), nv.node_id == column,
                          nv.workspace_id.in_(sorted(readable)))
