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
    """Write a node with its text in the unit of work: the one text-writing path.

    Validates the input, plans the text under the workspace's embedding settings as this
    transaction sees them, puts the node version (refused if it changed after
    ``if_revision``), stores the chunks of ``embedded`` if they were embedded under those same
    settings (else the indexer embeds the text anew), queues the text's embedding job unless
    its chunks are stored, and has the unit of work index it once committed
    (:func:`kg.ops.text_store.put_text`). A node it replaced has what was derived from it
    refreshed in the same transaction (:func:`kg.ops.lineage.refresh_derived`).

    Parameters
    ----------
    uow : kg.context.UnitOfWork
        The write transaction and its caller.
    ctx : kg.store.repos.WriteContext
        The write opened by ``uow.begin`` on the node's branch.
    workspace : str
        The workspace's name.
    path : str
        The node's path (``/a/b``, validated).
    node_type : str
        Its type (at most 255 characters).
    properties : dict
        Its JSON properties (replaced whole); the text fields are chunked and embedded.
    order : float or None
        Its place among its siblings.
    parents : bool
        Create missing ancestors as ``kg:Folder`` nodes.
    if_revision : int or None
        Refuse the write if the node changed after this revision
        (:func:`kg.store.nodes.check_if_revision`).
    embedded : EmbeddedText or None
        The text as planned and embedded before the transaction (:func:`kg.ops.text_store.prepare_chunks`).

    Returns
    -------
    (NodeVersion, created)
        The stored version; ``created`` False when it replaced a node.

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
