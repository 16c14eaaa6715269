"""Node writes with their text indexed: plan, embed outside the transaction, then store.

Each function is one write transaction (one revision), all or nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from kg.errors import InvalidInput
from kg.rag.config import workspace_embedding
from kg.rag.indexing import TextPlan, embed_plans, existing_content_keys, plan_text, store_chunks
from kg.store import nodes as node_store
from kg.store.repos import begin_write, branch_view, get_repository, get_workspace
from kg.store.nodes import NodeWrite, merge_properties, node_dict


@dataclass(frozen=True)
class NodeUpsert:
    """One node to create or replace (a full write) or patch (``patch=True``)."""

    workspace: str
    path: str
    node_type: str | None = None
    properties: dict[str, Any] | None = None
    order: float | None = None
    patch: bool = False


def _plan(services, session, repo, workspace_name: str, properties: dict[str, Any]) -> tuple[TextPlan, Any]:
    workspace = get_workspace(session, repo, workspace_name)
    config = workspace_embedding(workspace.config, default_model=services.settings.embedding_model)
    embedder = services.embedder(config.model)
    return plan_text(properties, config, embedder), embedder


def prepare_chunks(services, repo_name: str, items: Sequence[tuple[str, dict[str, Any]]], *, progress=None):
    """Embed the text of ``(workspace, properties)`` items whose chunks are not stored yet.

    Returns
    -------
    (plans, rows)
        A TextPlan per item and the new chunk rows by content key.

    Raises
    ------
    kg.errors.NotFound
        Unknown repository or workspace.
    kg.errors.ProviderError
        The embedder failed.
    """
    with services.db.read() as session:
        repo = get_repository(session, repo_name)
        planned = [_plan(services, session, repo, ws, props) for ws, props in items]
        keys = [p.content_key for p, _ in planned if p.content_key]
        stored = existing_content_keys(session, repo.id, keys)
    rows: dict[str, list] = {}
    by_embedder: dict[str, list[TextPlan]] = {}
    embedders = {}
    for plan, embedder in planned:
        if plan.content_key and plan.content_key not in stored:
            by_embedder.setdefault(embedder.name, []).append(plan)
            embedders[embedder.name] = embedder
    for name, plans in by_embedder.items():
        rows.update(embed_plans(plans, embedders[name], batch_size=services.settings.embed_batch_size,
                                progress=progress))
    return [p for p, _ in planned], rows


def put_node(services, repo_name: str, branch: str, workspace: str, path: str, *, node_type: str,
             properties: dict[str, Any], order: float | None = None, parents: bool = False,
             message: str | None = None, actor: str | None = None) -> tuple[dict[str, Any], bool]:
    """Create or replace a node and index its text.

    Returns
    -------
    (node, created)
        The API shape of the stored node; ``created`` False when it replaced one.

    Raises
    ------
    kg.errors.NotFound, kg.errors.InvalidInput, kg.errors.ProviderError
    """
    node_store.validate_node_input(node_type, properties, order)
    (plan,), rows = prepare_chunks(services, repo_name, [(workspace, properties)])
    with services.db.write() as session:
        ctx = begin_write(session, repo_name, branch, message=message, actor=actor)
        for chunk_rows in rows.values():
            store_chunks(session, ctx.repo.id, chunk_rows)
        version, created = node_store.put_node(
            session, ctx, workspace, path,
            NodeWrite(node_type, properties, order, plan.content_key), parents=parents,
        )
        return node_dict(version, workspace), created


def patch_node(services, repo_name: str, branch: str, workspace: str, path: str, *,
               properties: dict[str, Any], node_type: str | None = None, order: float | None = None,
               message: str | None = None, actor: str | None = None) -> dict[str, Any]:
    """Merge ``properties`` into a node (a ``None`` value removes the key) and re-index.

    Raises
    ------
    kg.errors.NotFound, kg.errors.InvalidInput, kg.errors.ProviderError
    """
    if not isinstance(properties, dict):
        raise InvalidInput("properties must be a JSON object")
    for _ in range(3):
        with services.db.read() as session:
            view = branch_view(session, repo_name, branch)
            current = node_store.get_node(session, view, workspace, path)
            seen_revision = current.revision
            merged = merge_properties(current.properties, properties)
            new_type = node_type if node_type is not None else current.node_type
            new_order = order if order is not None else current.order
        node_store.validate_node_input(new_type, merged, new_order)
        (plan,), rows = prepare_chunks(services, repo_name, [(workspace, merged)])
        with services.db.write() as session:
            ctx = begin_write(session, repo_name, branch, message=message, actor=actor)
            latest = node_store.get_node(session, ctx.view, workspace, path)
            if latest.revision != seen_revision:
                session.rollback()
                continue  # a concurrent write changed the node: merge again on the new value
            for chunk_rows in rows.values():
                store_chunks(session, ctx.repo.id, chunk_rows)
            version, _ = node_store.put_node(
                session, ctx, workspace, path, NodeWrite(new_type, merged, new_order, plan.content_key)
            )
            return node_dict(version, workspace)
    from kg.errors import Conflict

    raise Conflict(f"node {workspace}:{path} kept changing; retry the patch")
