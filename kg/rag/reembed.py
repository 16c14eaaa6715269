"""The model lock of a workspace, and re-embedding it under a new model or chunking.

A workspace (a collection, in the RAG node's words) records the embedding model and chunking
its chunks were made with. Its vectors are only comparable with query vectors of that model, so
a request to change the model is refused (409 ``model_locked``, naming the locked model) unless
it asks to re-embed. Re-embedding rebuilds the whole workspace from SQL: in one transaction the
configuration changes, every node version of the workspace (every branch, all history) points at
the content key of its text under the new settings, and one indexing job per new key is queued.
Chunks of the old model stay in SQL, unreferenced; they are never searched again, because a
search reads only the chunks of the content keys its visible nodes point at, and the vector leg
only vectors of the workspace's model. So old and new vectors never mix, and until the queue has
embedded a node its text is found by nothing but BM25 over the already-stored passages, which
``GET /api/repos/{repo}/index/status`` reports as pending.

The models are compared by canonical name (``nomic-embed-text`` is
``ollama:nomic-embed-text:latest``), never by dimension: two models of one dimension are
still different spaces (seed 000, "embedding model changed").
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete, select, update

from kg.errors import Conflict, InvalidInput
from kg.providers.registry import canonical_model_name
from kg.rag.config import EmbeddingConfig, parse_embedding_config, workspace_embedding
from kg.rag.indexer import enqueue
from kg.rag.indexing import plan_text
from kg.store.models import IndexJob, NodeVersion
from kg.store.repos import get_repository, get_workspace


class ModelLocked(Conflict):
    """A workspace's embedding model (or chunking) cannot change without re-embedding."""

    code = "model_locked"


def _requested(raw: Any, current: EmbeddingConfig) -> EmbeddingConfig:
    if not isinstance(raw, dict):
        raise InvalidInput("embedding must be a JSON object")
    merged = {"model": current.model, "chunking": current.chunking.model_dump(), **raw}
    return parse_embedding_config(merged, default_model=current.model)


def set_workspace_embedding(services: Any, repo: str, workspace: str, raw: Any, *,
                            reembed: bool = False) -> dict[str, Any]:
    """The route's view of :func:`reembed_workspace`: its answer without the queued keys."""
    answer, _ = reembed_workspace(services, repo, workspace, raw, reembed=reembed)
    return answer


def reembed_workspace(services: Any, repo: str, workspace: str, raw: Any, *,
                      reembed: bool = False) -> tuple[dict[str, Any], list[str]]:
    """Change a workspace's embedding model or chunking; with ``reembed``, rebuild it.

    Parameters
    ----------
    services : kg.services.Services
    repo, workspace : str
    raw : dict
        The new ``embedding`` object (``{"model"?, "chunking"?}``); omitted keys keep their
        current value.
    reembed : bool
        Rebuild the workspace under the new settings. Without it, any change is refused.

    Returns
    -------
    (dict, list of str)
        ``{"workspace", "embedding", "reembedded": bool, "node_versions": int, "queued": int}``
        (the versions re-pointed and the texts queued for embedding, 0 and 0 when nothing
        changed), and the content keys queued.

    Raises
    ------
    ModelLocked
        The settings differ and ``reembed`` is false (the message names the locked model).
    kg.errors.InvalidInput
        A bad embedding object or model name.
    kg.errors.NotFound
        Unknown repository or workspace.
    kg.errors.ProviderError, kg.errors.BackendUnavailable
        The new model cannot be loaded (nothing is changed).
    """
    default = services.settings.embedding_model
    with services.db.read() as session:
        ws = get_workspace(session, get_repository(session, repo), workspace)
        current = workspace_embedding(ws.config, default_model=default)
    wanted = _requested(raw, current)
    same_model = canonical_model_name(wanted.model) == canonical_model_name(current.model)
    if same_model and wanted.chunking == current.chunking:
        return {"workspace": workspace, "embedding": current.model_dump(), "reembedded": False,
                "node_versions": 0, "queued": 0}, []
    if not reembed:
        what = (f"is locked to embedding model {current.model!r}" if not same_model
                else f"is chunked with {current.chunking.model_dump()}")
        raise ModelLocked(
            f"workspace {workspace!r} {what}; changing it rebuilds every vector: "
            "send reembed: true to re-embed the workspace",
            details={"locked_model": current.model, "requested_model": wanted.model},
        )
    # Refuse a model that cannot embed before anything changes: a name the registry does not
    # know, or a server that is down (an Ollama name resolves without contacting the server).
    embedder = services.embedder(wanted.model)
    embedder.embed(["kg re-embedding probe"])
    queued: dict[str, int] = {}
    with services.db.write() as session:
        r = get_repository(session, repo, lock=True)
        ws = get_workspace(session, r, workspace)
        config = dict(ws.config or {})
        config["embedding"] = wanted.model_dump()
        ws.config = config
        session.execute(delete(IndexJob).where(IndexJob.workspace_id == ws.id))
        rows = session.execute(
            select(NodeVersion.id, NodeVersion.properties)
            .where(NodeVersion.workspace_id == ws.id, NodeVersion.content_key.is_not(None))
        ).all()
        updates = []
        for version_id, properties in rows:
            key = plan_text(properties, wanted, embedder).content_key
            updates.append({"id": version_id, "content_key": key})
            if key is not None:
                queued.setdefault(key, version_id)
        if updates:
            session.execute(update(NodeVersion), updates)
        pending = [key for key, version_id in queued.items()
                   if enqueue(session, repo_id=r.id, workspace_id=ws.id, content_key=key,
                              node_version_id=version_id)]
        repo_id = r.id
    services.search_cache.clear()
    services.after_write(repo_id, pending)
    return {"workspace": workspace, "embedding": wanted.model_dump(), "reembedded": True,
            "node_versions": len(rows), "queued": len(pending)}, pending
