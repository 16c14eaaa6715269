"""The one path that writes a node with its text: plan, store, queue, index after commit, and
refresh what was derived from the node it replaced. Every use case writing node content calls
:func:`write_node` in its unit of work; the text is :mod:`kg.ops.text_store`'s, the lineage
:mod:`kg.ops.lineage`'s (which writes through ``put_text``, deriving nothing).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kg.context import UnitOfWork
from kg.ops.lineage import Changed, refresh_derived
from kg.ops.text_store import EmbeddedText, content_keyer_for, put_text, queue_jobs
from kg.store import nodes as node_store
from kg.store.models import NodeVersion
from kg.store.nodes import NodePut, NodeWrite
from kg.store.repos import WriteContext

__all__ = ["write_node", "write_nodes"]


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


def write_nodes(uow: UnitOfWork, ctx: WriteContext, items: Sequence[Mapping[str, Any]], *,
                parents: bool = False, validated: bool = False) -> list[NodePut]:
    """Write many nodes with their text, as :func:`write_node` one after the other, ancestors first
    (a batch, a graph write): the versions written, in the order of ``items``.

    ``items`` are ``{"workspace", "path", "node_type"?, "properties"?, "order"?}`` with their paths
    validated (NFC) and each address named once; ``validated``: their inputs were checked
    (:func:`kg.store.nodes.validate_node_input`) already.

    The rows are those of the calls one by one: each content key computed once (the settings'
    part once per workspace), the versions stored by :func:`kg.store.nodes.put_nodes` (a lookup
    and an insert for all of them), what was derived from the nodes replaced refreshed in one
    call, the embedding jobs queued in one statement (each naming the first version written
    with its text).

    Raises
    ------
    kg.errors.NotFound
        A missing parent without ``parents``, or an unknown workspace.
    kg.errors.InvalidInput
        Bad type, properties or order, or a malformed reference.
    """
    session, services = uow.session, uow.services
    writes = []
    keyers: dict[str, Callable[[dict[str, Any]], str | None]] = {}
    for item in items:
        workspace, properties = item["workspace"], item.get("properties", {})
        if not validated:
            node_store.validate_node_input(item.get("node_type", "kg:Node"), properties, item.get("order"))
        keyer = keyers.get(workspace)
        if keyer is None:
            keyer = keyers[workspace] = content_keyer_for(services, session, ctx.repo, workspace)
        key = keyer(properties)
        writes.append((workspace, item["path"], NodeWrite(item.get("node_type", "kg:Node"), properties,
                                                          item.get("order"), key)))
    put = node_store.put_nodes(session, ctx, writes, parents=parents)
    in_write_order = sorted(put, key=lambda p: p.version_id)
    refresh_derived(uow, ctx, [Changed(p.workspace, p.path, p.node_id, p.properties)
                               for p in in_write_order if not p.created])
    queue_jobs(uow, ctx, [(p.workspace_id, p.content_key, p.version_id) for p in in_write_order
                          if p.content_key is not None])
    return put
