"""A node's text, planned and stored: its content key, its chunks, its embedding job.

The lower half of the text-writing path (:func:`kg.ops.texts.write_node`), without its lineage
refresh: the text is planned under the workspace's settings as the transaction sees them (its
content key); chunks embedded before the transaction (:func:`prepare_chunks`, the slow part,
outside any lock) are stored only if that key still holds; the node version is put; the
embedding job is queued in the same transaction (none when chunks exist); the unit of work
indexes the text once committed. :mod:`kg.ops.lineage` writes through :func:`put_text` (its
writes derive nothing), all else through :func:`kg.ops.texts.write_node`.
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
    Piece,
    TextPlan,
    content_keyer,
    embed_plans,
    existing_content_keys,
    plan_pieces,
    plan_text,
    store_chunks,
)
from kg.indexing.config import workspace_embedding
from kg.indexing.index_jobs import enqueue, enqueue_many
from kg.providers.base import Embedder
from kg.store import nodes as node_store
from kg.store.models import NodeVersion, Repository
from kg.store.nodes import NodeWrite
from kg.store.repos import WriteContext, get_repository, get_workspace


@dataclass(frozen=True)
class EmbeddedText:
    """A node's text as planned (under the settings read then) and embedded before its write
    transaction; ``chunks`` empty when stored already or not embedded (``embed=False``).
    """

    plan: TextPlan
    chunks: list[ChunkRow] = field(default_factory=list)


def _plan(services: Resources, session: Session, repo: Repository, workspace_name: str,
          properties: dict[str, Any]) -> tuple[TextPlan, Embedder]:
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
    """The text plan (content key; None: no text) of properties under the workspace's settings as
    ``session`` sees them; no model call.
    """
    return _plan(services, session, repo, workspace_name, properties)[0]


def content_keyer_for(services: Resources, session: Session, repo: Repository,
                      workspace_name: str) -> Callable[[dict[str, Any]], str | None]:
    """The content key of properties (:func:`plan_for`'s, None: no text) under the workspace's
    settings as ``session`` sees them, as a function: the settings' part computed once for the
    many nodes of one write."""
    memo = session.info.setdefault("kg_content_keyer", {})
    key = (repo.id, workspace_name)
    if key not in memo:
        _plan(services, session, repo, workspace_name, {})  # the settings, read once per transaction
        config, embedder = session.info["kg_workspace_embedding"][key]
        memo[key] = content_keyer(config, embedder)
    keyer: Callable[[dict[str, Any]], str | None] = memo[key]
    return keyer


def chunk_hashes(services: Resources, session: Session, repo: Repository, workspace_name: str,
                 properties: dict[str, Any]) -> list[str]:
    """sha256 of each chunk of a node's text, by index: what a citation records of its passage and
    lineage compares with (:mod:`kg.ops.lineage`); no model call.
    """
    plan, embedder = _plan(services, session, repo, workspace_name, properties)
    return [hashlib.sha256(p.text.encode("utf-8", "surrogatepass")).hexdigest() for p in plan_pieces(plan, embedder)]


def chunk_pieces(services: Resources, session: Session, repo: Repository, workspace_name: str,
                 properties: dict[str, Any]) -> list[Piece]:
    """The chunks of a node's text as the indexing makes them (field, offsets, index); no model
    call."""
    plan, embedder = _plan(services, session, repo, workspace_name, properties)
    return plan_pieces(plan, embedder)


def prepare_chunks(services: Resources, repo_name: str, items: Sequence[tuple[str, dict[str, Any]]], *,
                   embed: bool = True, progress: Callable[[int], None] | None = None) -> list[EmbeddedText]:
    """Plan and embed, outside any transaction, the text of ``(workspace, properties)`` items whose
    chunks are not stored: one :class:`EmbeddedText` per item, items of one text sharing it.
    ``embed=False`` plans only; ``progress`` is told the passages embedded after each call.

    Raises
    ------
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
               if_revision: int | None = None, embedded: EmbeddedText | None = None,
               jobs: list[tuple[int, str | None, int]] | None = None) -> tuple[NodeVersion, bool]:
    """Write a node with its text, deriving nothing (the module's path): ``(version, created)``;
    ``embedded`` (:func:`prepare_chunks`) is stored if made under the same settings, else the
    indexer embeds the text anew. ``jobs``: the embedding job is appended there as ``(workspace
    id, content key, version id)``, for the caller to queue with the others of its write
    (:func:`queue_jobs`), instead of a chunk lookup and an insert for this node alone.

    Raises
    ------
    kg.errors.InvalidInput
        Bad type, properties or order.
    kg.errors.NotFound
        A missing parent without ``parents``.
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
    if key is not None and jobs is not None:
        jobs.append((version.workspace_id, key, version.id))
    elif key is not None and enqueue(session, repo_id=ctx.repo.id, workspace_id=version.workspace_id,
                                     content_key=key, node_version_id=version.id):
        uow.index_after_commit(ctx.repo.id, [key])
    return version, created


def queue_jobs(uow: UnitOfWork, ctx: WriteContext, jobs: list[tuple[int, str | None, int]]) -> None:
    """Queue the embedding jobs :func:`put_text` collected (``jobs``) in one statement, the texts
    whose chunks are stored left out (one lookup per 500 keys), and index them once committed:
    the rows :func:`kg.indexing.index_jobs.enqueue` makes node by node."""
    queued = enqueue_many(uow.session, repo_id=ctx.repo.id, jobs=jobs)
    uow.index_after_commit(ctx.repo.id, queued)
