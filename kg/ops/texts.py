"""The one path that writes a node with its text: plan, store, queue, index after commit, and
refresh what was derived from the node it replaced. Every use case writing node content calls
:func:`write_node` in its unit of work; the text is :mod:`kg.ops.text_store`'s, the lineage
:mod:`kg.ops.lineage`'s (which writes through ``put_text``, deriving nothing).
"""

from __future__ import annotations

from typing import Any

from kg.context import UnitOfWork
from kg.ops.lineage import Changed, refresh_derived
from kg.ops.text_store import EmbeddedText, put_text
from kg.store.models import NodeVersion
from kg.store.repos import WriteContext

__all__ = ["write_node"]


def write_node(uow: UnitOfWork, ctx: WriteContext, workspace: str, path: str, *, node_type: str,
               properties: dict[str, Any], order: float | None = None, parents: bool = False,
               if_revision: int | None = None, embedded: EmbeddedText | None = None,
               jobs: list[tuple[int, str | None, int]] | None = None) -> tuple[NodeVersion, bool]:
    """Write a node with its text (:func:`kg.ops.text_store.put_text`), then refresh what was derived
    from a node it replaced, in the same transaction (:func:`kg.ops.lineage.refresh_derived`);
    ``jobs`` as :func:`~kg.ops.text_store.put_text`'s.

    Raises
    ------
    kg.errors.InvalidInput, kg.errors.NotFound, kg.errors.Conflict
        As :func:`kg.ops.text_store.put_text`.
    """
    version, created = put_text(uow, ctx, workspace, path, node_type=node_type, properties=properties, order=order,
                                parents=parents, if_revision=if_revision, embedded=embedded, jobs=jobs)
    if not created:  # nothing is derived from a node just created
        refresh_derived(uow, ctx, [Changed(workspace, version.path, version.node_id, properties)])
    return version, created
