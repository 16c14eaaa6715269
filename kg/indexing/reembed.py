"""The model lock of a workspace, and re-embedding it under a new model or chunking.

A workspace (a collection, in the RAG node's words) records the embedding model and chunking
its chunks were made with. Its vectors are only comparable with query vectors of that model, so
a request to change the model is refused (409 ``model_locked``, naming the locked model) unless
it asks to re-embed.

Re-embedding is blue/green: the request records the new settings as the workspace's
``embedding_next`` and queues one indexing job per text of the workspace (every node version,
every branch, all history) under them; searches and writes go on with the current model
meanwhile, so nothing becomes unsearchable. Once no job of the workspace is pending or running
(:func:`complete_reembed`, run by the indexer after each pass), one transaction re-points every
node version at its new content key and makes the new settings current; a text the new model
failed to embed is then unsearchable, and ``index/status`` lists its failure. More failures than
:data:`MAX_FAILED_TEXTS` (or 1 % of the texts) look like an outage of the new model, not bad
texts: the switch waits (``failed_texts`` on the workspace) until the same request is sent again
(which retries them) or the re-embed is cancelled. Versions written
during the re-embed are embedded under the current model by their write and under the new one
by the switch's check, which queues what is missing and waits for it. Chunks of the old model
stay in SQL, unreferenced; old and new vectors never mix, because a search reads only the chunks
of the content keys its visible nodes point at, and the vector leg only vectors of the
workspace's model.

The models are compared by canonical name (``nomic-embed-text`` is
``ollama:nomic-embed-text:latest``), never by dimension: two models of one dimension are
still different spaces (the RAG node's "embedding model changed").
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import func, select, update

from kg.context import SYSTEM, Actor, Resources, unit_of_work
from kg.errors import InvalidInput, KGError, ModelLocked
from kg.index.base import SearchIndex
from kg.indexing.chunks import existing_content_keys, plan_text, sync_index
from kg.indexing.config import HELD, NEXT, EmbeddingConfig, parse_embedding_config, workspace_embedding
from kg.indexing.index_jobs import REEMBED_PRIORITY, enqueue
from kg.providers.registry import canonical_model_name
from kg.store.models import Chunk, IndexJob, NodeVersion, Repository, Workspace
from kg.store.repos import get_repository, get_workspace

log = logging.getLogger(__name__)

MAX_FAILED_TEXTS = 5
"""Texts that may fail under a re-embed's model without holding the switch back (or 1 % of the
workspace's texts, whichever is more): beyond, it waits for a retry or a cancel."""


def _requested(raw: Any, current: EmbeddingConfig) -> EmbeddingConfig:
    if not isinstance(raw, dict):
        raise InvalidInput("embedding must be a JSON object")
    merged = {"model": current.model, "chunking": current.chunking.model_dump(),
              "indexed_properties": current.indexed_properties.model_dump(), **raw}
    return parse_embedding_config(merged, default_model=current.model)


def reembed_workspace(services: Resources, repo: str, workspace: str, raw: Any, *,
                      reembed: bool = False, caller: Actor = SYSTEM) -> tuple[dict[str, Any], list[str]]:
    """Change a workspace's embedding model or chunking (``raw``: ``{"model"?, "chunking"?}``,
    omitted keys kept); with ``reembed``, rebuild it, without it any change is refused
    (``ModelLocked``, naming the locked model).

    Reads the current settings, probes the new model with no write lock held (a model that
    cannot be loaded changes nothing), then writes the new settings and queues the texts as one
    unit of work (:func:`kg.context.unit_of_work`), whose commit wakes the indexer.

    Returns ``({"workspace", "embedding", "reembedded", "node_versions", "queued", "switched"},
    queued content keys)``: the requested settings, the versions to re-point, the texts queued
    and whether the new settings are current already (with inline indexing, or when every text
    had its chunks). Asking for the current settings while a re-embed is under way cancels it
    (``reembedded`` false).
    """
    default = services.settings.embedding_model
    with services.db.read() as session:
        ws = get_workspace(session, get_repository(session, repo), workspace)
        current = workspace_embedding(ws.config, default_model=default)
        under_way = (ws.config or {}).get(NEXT) is not None
    wanted = _requested(raw, current)
    same_model = canonical_model_name(wanted.model) == canonical_model_name(current.model)
    if same_model and wanted.chunking == current.chunking and wanted.indexed_properties == current.indexed_properties:
        if under_way:
            with unit_of_work(services, caller) as uow:
                ws = get_workspace(uow.session, get_repository(uow.session, repo, lock=True), workspace)
                ws.config = {k: v for k, v in (ws.config or {}).items() if k not in (NEXT, HELD)}
        return {"workspace": workspace, "embedding": current.model_dump(), "reembedded": False,
                "node_versions": 0, "queued": 0, "switched": False}, []
    if not reembed:
        what = (f"is locked to embedding model {current.model!r}" if not same_model
                else f"is chunked with {current.chunking.model_dump()}" if wanted.chunking != current.chunking
                else f"indexes the properties {current.indexed_properties.model_dump()}")
        raise ModelLocked(
            f"workspace {workspace!r} {what}; changing it rebuilds every vector: "
            "send reembed: true to re-embed the workspace",
            details={"locked_model": current.model, "requested_model": wanted.model},
        )
    # Refuse a model that cannot embed before anything changes: a name the registry does not
    # know, or a server that is down (an Ollama name resolves without contacting the server).
    embedder = services.embedder(wanted.model)
    embedder.embed(["kg re-embedding probe"])
    with unit_of_work(services, caller) as uow:
        session = uow.session
        r = get_repository(session, repo, lock=True)
        ws = get_workspace(session, r, workspace)
        ws.config = {**{k: v for k, v in (ws.config or {}).items() if k != HELD}, NEXT: wanted.model_dump()}
        versions = _next_keys(session, ws.id, wanted, embedder)
        first: dict[str, int] = {}
        for version_id, key in versions:
            if key is not None:
                first.setdefault(key, version_id)
        pending = [key for key, version_id in first.items()
                   if enqueue(session, repo_id=r.id, workspace_id=ws.id, content_key=key,
                              node_version_id=version_id, priority=REEMBED_PRIORITY)]
        repo_id, workspace_id = r.id, ws.id
        uow.index_after_commit(repo_id, pending)  # inline indexing switches in there already
    complete_reembed(services, repo_id, workspace_id)
    with services.db.read() as session:
        after = session.get(Workspace, workspace_id)
        switched = after is not None and NEXT not in (after.config or {})
    return {"workspace": workspace, "embedding": wanted.model_dump(), "reembedded": True,
            "node_versions": len(versions), "queued": len(pending), "switched": switched}, pending


def complete_reembed(services: Resources, repo_id: int, workspace_id: int) -> bool:
    """Make a workspace's ``embedding_next`` current once its texts are embedded under it: True
    when the switch happened now; False when no re-embed is under way, a job of the workspace
    is still pending or running, or texts were missing (queued here, for a later pass).

    Runs under the repository's lock, so no write slips between the check and the switch.
    A text whose job failed under the new model does not hold the switch back: after it, that
    text is unsearchable until written again, and ``index/status`` lists the failure.
    """
    with services.db.write() as session:
        repo_key = session.scalar(select(Repository.uid).where(Repository.id == repo_id).with_for_update())
        ws = session.get(Workspace, workspace_id)
        if repo_key is None or ws is None:
            return False  # deleted meanwhile
        raw_next = (ws.config or {}).get(NEXT)
        if raw_next is None:
            return False
        assert ws is not None  # raw_next was read from it
        busy = session.scalar(select(IndexJob.id).where(
            IndexJob.workspace_id == workspace_id, IndexJob.status.in_(("pending", "running"))).limit(1))
        if busy is not None:
            return False
        wanted = parse_embedding_config(raw_next, default_model=services.settings.embedding_model)
        embedder = services.embedder(wanted.model)
        versions = _next_keys(session, workspace_id, wanted, embedder)
        keys = {key for _, key in versions if key is not None}
        missing = keys - existing_content_keys(session, repo_id, keys)
        if missing:
            failed = set(session.scalars(select(IndexJob.content_key).where(
                IndexJob.repo_id == repo_id, IndexJob.status == "failed",
                IndexJob.content_key.in_(sorted(missing)))))
            queued = [key for version_id, key in versions
                      if key in missing and key not in failed
                      and enqueue(session, repo_id=repo_id, workspace_id=workspace_id, content_key=key,
                                  node_version_id=version_id, priority=REEMBED_PRIORITY)]
            if queued:
                return False
            if len(failed) > max(MAX_FAILED_TEXTS, len(keys) // 100):
                # More than a few texts failed: an outage of the new model, not a bad text.
                # The current model keeps answering; GET on the workspace says why it waits,
                # and the same PATCH again retries the failed texts.
                if (ws.config or {}).get(HELD) != len(failed):
                    ws.config = {**(ws.config or {}), HELD: len(failed)}
                return False
        lowest = _lowest_seq(session, repo_id, keys)
        if versions:
            session.execute(update(NodeVersion), [{"id": vid, "content_key": key} for vid, key in versions])
        config = {k: v for k, v in (ws.config or {}).items() if k != HELD}
        old_model = workspace_embedding(config, default_model=services.settings.embedding_model).model
        config["embedding"] = config.pop(NEXT)
        ws.config = config
    services.search_cache.clear()
    index: SearchIndex = services.index
    if lowest is not None:
        _replace(services, index, repo_id, repo_key, lowest)
    if canonical_model_name(old_model) != canonical_model_name(wanted.model):
        try:  # what the index holds apart for the old model is never read again
            index.drop_workspace_model(repo_key, workspace_id, old_model)
        except KGError as exc:
            log.warning("re-embed of workspace %s: the old model's collections stay: %s", workspace_id, exc.message)
    return True


def reembed_status(config: dict[str, Any] | None) -> dict[str, Any] | None:
    """The ``embedding`` a workspace is being re-embedded to, and ``failed_texts`` when that
    many failures hold the switch back; None when no re-embed is under way."""
    raw = (config or {}).get(NEXT)
    if raw is None:
        return None
    return {"embedding": raw, "failed_texts": (config or {}).get(HELD, 0)}


def _next_keys(session: Any, workspace_id: int, wanted: EmbeddingConfig, embedder: Any) -> list[tuple[int, str | None]]:
    """Every node version of the workspace with indexed text now or under ``wanted``, with its
    content key under ``wanted`` (a version whose text is no longer indexed gets None: a change
    of the indexed properties may add or remove text)."""
    rows = session.execute(
        select(NodeVersion.id, NodeVersion.properties, NodeVersion.content_key)
        .where(NodeVersion.workspace_id == workspace_id, NodeVersion.deleted.is_(False))
        .order_by(NodeVersion.id)
    ).all()
    out = []
    for vid, properties, current in rows:
        key = plan_text(properties or {}, wanted, embedder).content_key
        if key is not None or current is not None:
            out.append((vid, key))
    return out


def _lowest_seq(session: Any, repo_id: int, keys: set[str]) -> int | None:
    """The lowest chunk seq of these content keys, or None."""
    lowest = None
    ordered = sorted(keys)
    for start in range(0, len(ordered), 500):
        found = session.scalar(select(func.min(Chunk.seq)).where(
            Chunk.repo_id == repo_id, Chunk.content_key.in_(ordered[start:start + 500])))
        if found is not None and (lowest is None or found < lowest):
            lowest = found
    return lowest


def _replace(services: Resources, index: SearchIndex, repo_id: int, repo_key: str, lowest: int) -> None:
    """Catch the index up on the re-pointed versions now, if it needs to (it may have passed
    their new chunks while no version pointed at them yet: they were built beside the old)."""
    try:
        if not index.rewind(repo_key, lowest - 1):
            return
    except KGError as exc:
        log.error("re-embed switched with the index unreachable (%s): run `kg reindex --repo <repo> "
                  "--index weaviate` to place the re-embedded texts", exc.message)
        return
    try:
        with services.db.read() as session:
            sync_index(session, index, repo_id, repo_key)
    except KGError as exc:  # the rewound mark stays: the next search places them
        log.warning("re-embed: placing the re-pointed versions failed for now: %s", exc.message)
