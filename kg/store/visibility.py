"""Branch resolution in SQL: the version of each entity that a branch sees.

DESIGN.md: what a branch sees at revision r is, for each entity, the newest version on the
branch itself with revision <= r; failing that, the newest on its parent with revision <= the
branch's base, and so on up the chain. A tombstone hides the entity.

One window query does it: among the versions allowed by the chain, rank each entity's
versions by (chain position, revision desc) and keep the first.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, case, false, func, or_, select

from kg.store.repos import BranchView


@dataclass(frozen=True)
class Chain:
    """Only a branch state's chain: what :func:`visible_select` reads of a view."""

    chain: tuple[tuple[int, int], ...]


@functools.lru_cache(maxsize=1024)
def _chain_filter(model: Any, chain: tuple[tuple[int, int], ...]) -> ColumnElement[bool]:
    return or_(*(and_(model.branch_id == b, model.revision <= r) for b, r in chain)) if chain else false()


@functools.lru_cache(maxsize=1024)
def _priority(model: Any, chain: tuple[tuple[int, int], ...]) -> ColumnElement[Any]:
    if len(chain) == 1:
        return func.abs(0)
    return case({b: i for i, (b, _) in enumerate(chain)}, value=model.branch_id)


def visible_select(model: Any, view: BranchView | Chain, partition: Sequence[Any], *where: Any,
                   include_deleted: bool = False) -> tuple[Select[Any], Any]:
    """Select the versions of ``model`` that ``view`` sees: one per entity, its winner.

    Parameters
    ----------
    model : NodeVersion or RelationVersion
        The versioned entity's model.
    view : BranchView or Chain
        The branch state read: only its ``chain`` is used.
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

    Notes
    -----
    The window runs over ids and key columns only (served by the version indexes); the
    winners' rows, with their possibly large properties, are read once, by primary key.
    """
    rn = func.row_number().over(
        partition_by=list(partition),
        order_by=(_priority(model, view.chain), model.revision.desc(), model.id.desc()),
    ).label("rn")
    ranked = select(model.id.label("vid"), rn).where(_chain_filter(model, view.chain), *where).subquery()
    stmt = select(model).join(ranked, model.id == ranked.c.vid).where(ranked.c.rn == 1)
    if not include_deleted:
        stmt = stmt.where(model.deleted == false())
    return stmt, model
