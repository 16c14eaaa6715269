"""A node's text, planned and stored: its content key, its chunks, its embedding job.

The lower half of the one text-writing path (:func:`kg.ops.texts.write_node`), without the
lineage refresh that path adds: the text is planned under the workspace's embedding settings
as the transaction sees them (its content key); chunks embedded before the transaction
(:func:`prepare_chunks`, the slow part, done outside any lock) are stored only if that key
still holds; the node version is put; the embedding job is queued in the same transaction
(none when the chunks exist); and the unit of work indexes the queued text once it has
committed. :mod:`kg.ops.lineage` writes through :func:`put_text` (its own writes derive
nothing), everything else through :func:`kg.ops.texts.write_node`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from kg.context import Resources, UnitOfWork
from kg.indexing.chunks import (
    ChunkRow,
    TextPlan,
    embed_plans,
    existing_content_keys,
    plan_pieces,
    plan_text,
    store_chunks,
)
from kg.indexing.config import workspace_embedding
from kg.indexing.index_jobs import enqueue
from kg.providers.base import Embedder
from kg.store import nodes as node_store
from kg.store.models import NodeVersion, Repository
from kg.store.nodes import NodeWrite
from kg.store.repos import WriteContext, get_repository, get_workspace


@dataclass(frozen=True)
class EmbeddedText:
    """A node's text as planned (and embedded) before its write transaction.

    Attributes
    ----------
    plan : TextPlan
        The text plan under the settings read when it was made.
    chunks : list of ChunkRow
        The chunks of ``plan.content_key`` embedded for it; empty when they were stored
        already or nothing was embedded (``prepare_chunks(..., embed=False)``).
    """

    plan: TextPlan
    chunks: list[ChunkRow] = field(default_factory=list)


def _plan(services: Resources, session: Session, repo: Repository, workspace_name: str,
          properties: dict[str, Any]) -> tuple[TextPlan, Embedder]:
    """The text plan of ``properties`` and the embedder of the workspace's settings."""
    # A workspace's settings are read once per transaction (a write holds the repository lock,
    # which re-embedding takes too, so they cannot change under it).
    memo = session.info.setdefault("kg_workspace_embedding", {})
    key = (repo.id, workspace_name)
    if key not in memo:
        workspace = get_workspace(session, repo, workspace_name)
        config = workspace_embedding(workspace.config, default_model=services.settings.embedding_model)
        memo[key] = (config, services.embedder(config.model))
    config, embedder = memo[key]
    return plan_text(properties, config, embedder), embedder


def plan_for(services: Resources, session: Session, repo: Repository, workspace_name: str,
             properties: dict[str, Any]) -> TextPlan:
    """The text plan (content key) of properties in a workspace; no model call.

    Parameters
    ----------
    services : kg.context.Resources
        The process's resources (store, index, embedders).
    session : Session
        The transaction whose view of the workspace's settings counts.
    repo : Repository
        The repository.
    workspace_name : str
        The workspace whose embedding settings apply.
    properties : dict
        The node's JSON properties (validated).

    Returns
    -------
    TextPlan
        The text's chunking plan and content key (None: no text).

    Raises
    ------
    kg.errors.NotFound
        Unknown workspace.
    """
    return _plan(services, session, repo, workspace_name, properties)[0]


def chunk_hashes(services: Resources, session: Session, repo: Repository, workspace_name: str,
                 properties: dict[str, Any]) -> list[str]:
    """sha256 (hex) of each chunk of a node's text, in chunk-index order; no model call.

    What a stored answer's citation records of the passage it cites, and what lineage compares
    it with when the node changes (:mod:`kg.ops.lineage`).

    Parameters
    ----------
    services : kg.context.Resources
        The process's resources (the workspace's embedder counts tokens).
    session : Session
        The transaction whose view of the workspace's settings counts.
    repo : Repository
        The repository.
    workspace_name : str
        The node's workspace.
    properties : dict
        The node's JSON properties.

    Returns
    -------
    list of str
        Empty for a node without text.

    Raises
    ------
    kg.errors.NotFound
        Unknown workspace.
    """
    plan, embedder = _plan(services, session, repo, workspace_name, properties)
    return [hashlib.sha256(p.text.encode("utf-8", "surrogatepass")).hexdigest() for p in plan_pieces(plan, embedder)]


def prepare_chunks(services: Resources, repo_name: str, items: Sequence[tuple[str, dict[str, Any]]], *,
                   embed: bool = True, progress: Callable[[int], None] | None = None) -> list[EmbeddedText]:
    """Plan and embed, outside any transaction, the text of ``(workspace, properties)`` items
    whose chunks are not stored yet (the ``embedded`` of :func:`put_text` and
    :func:`kg.ops.texts.write_node`).

    Parameters
    ----------
    services : kg.context.Resources
        The process's resources (store, index, embedders).
    repo_name : str
        The repository's name.
    items : sequence of (str, dict)
        Workspace name and properties of each node to write.
    embed : bool
        False: plan only, embed nothing (the indexer embeds the texts after their writes).
    progress : callable(int), optional
        Called with the number of passages embedded after each embedder call.

    Returns
    -------
    list of EmbeddedText
        One per item, in order; items of one text share its chunks.

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
        keys = {p.content_key for p, _ in planned if p.content_key} if embed else set()
        stored = existing_content_keys(session, repo.id, keys)
    rows: dict[str, list[ChunkRow]] = {}
    by_embedder: dict[str, tuple[Embedder, list[TextPlan]]] = {}
    for plan, embedder in planned:
        if plan.content_key in keys and plan.content_key not in stored:
            by_embedder.setdefault(embedder.name, (embedder, []))[1].append(plan)
    for embedder, plans in by_embedder.values():
        rows.update(embed_plans(plans, embedder, batch_size=services.settings.embed_batch_size,
                                progress=progress))
    return [EmbeddedText(plan, rows.get(plan.content_key or "", [])) for plan, _ in planned]


def put_text(uow: UnitOfWork, ctx: WriteContext, workspace: str, path: str, *, node_type: str,
               properties: dict[str, Any], order: float | None = None, parents: bool = False,
               if_revision: int | None = None,
               embedded: EmbeddedText | None = None) -> tuple[NodeVersion, bool]:
    """Write a node with its text in the unit of work, deriving nothing (no lineage refresh).

    Validates the input, plans the text under the workspace's embedding settings as this
    transaction sees them, puts the node version (refused if it changed after
    ``if_revision``), stores the chunks of ``embedded`` if they were embedded under those same
    settings (else the indexer embeds the text anew), queues the text's embedding job unless
    its chunks are stored, and has the unit of work index it once committed.

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
        The text as planned and embedded before the transaction (:func:`prepare_chunks`).

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
    node_store.validate_node_input(node_type, properties, order)
    session = uow.session
    plan = plan_for(uow.services, session, ctx.repo, workspace, properties)
    key = plan.content_key
    version, created = node_store.put_node(session, ctx, workspace, path,
                                           NodeWrite(node_type, properties, order, key),
                                           parents=parents, if_revision=if_revision, validated=True)
    if key is not None and embedded is not None and embedded.chunks and embedded.plan.content_key == key:
        store_chunks(session, ctx.repo.id, embedded.chunks)
    if key is not None and enqueue(session, repo_id=ctx.repo.id, workspace_id=version.workspace_id,
                                   content_key=key, node_version_id=version.id):
        uow.index_after_commit(ctx.repo.id, [key])
    return version, created
