"""The one path that writes a node with its text: plan, store, queue, index after commit,
and refresh what was derived from the node it replaced.

Every use case that writes a node's content (:mod:`kg.ops.nodes`, :mod:`kg.ops.ingest`,
:mod:`kg.ragnode.service`) calls :func:`write_node` inside its unit of work. Planning and
storing the text is :mod:`kg.ops.text_store`'s (:func:`~kg.ops.text_store.put_text`); the
lineage of derived records (entities' ``mentioned_in`` edges, stored answers' citations) is
:mod:`kg.ops.lineage`'s, which writes through ``put_text`` itself, so its writes derive nothing.
"""

from __future__ import annotations

from typing import Any

from kg.context import UnitOfWork
from kg.ops.lineage import Changed, refresh_derived
from kg.ops.text_store import EmbeddedText, put_text
from kg.store.models import NodeVersion
from kg.store.repos import WriteContext


def write_node(uow: UnitOfWork, ctx: WriteContext, workspace: str, path: str, *, node_type: str,
               properties: dict[str, Any], order: float | None = None, parents: bool = False,
               if_revision: int | None = None,
               embedded: EmbeddedText | None = None) -> tuple[NodeVersion, bool]:
    """Write a node with its text in the unit of work: the one text-writing path; returns
    ``(version, created)``.

    :func:`kg.ops.text_store.put_text` (validate, plan the text under the workspace's settings as
    this transaction sees them, put the node version, store ``embedded``'s chunks if still valid,
    queue the embedding job, index once committed), then, for a node it replaced, refresh what was
    derived from it in the same transaction (:func:`kg.ops.lineage.refresh_derived`).

    Raises
    ------
    kg.errors.InvalidInput
        Bad path, type, properties or order.
    kg.errors.NotFound
        Unknown workspace, or a missing parent without ``parents``.
    kg.errors.Conflict
        The node changed after ``if_revision``.
    """
    version, created = put_text(uow, ctx, workspace, path, node_type=node_type, properties=properties, order=order,
                                parents=parents, if_revision=if_revision, embedded=embedded)
    if not created:  # nothing is derived from a node just created
        refresh_derived(uow, ctx, [Changed(workspace, version.path, version.node_id, properties)])
    return version, created
