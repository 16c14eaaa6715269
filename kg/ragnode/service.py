"""The RAG node over kg (API.md, "The RAG node"; seed 000): ingest the file blocks of the
node's markdown input into a collection, then retrieve the chunks closest to its query.

A collection is a workspace of the repository ``settings.rag_repo`` named by its class name
(``rag_collection`` -> ``Ragcollection``); the workspace records the collection's original
name, so two collection names that map to one class are refused, never merged. Each file is a
node holding its text and the sha256 of its bytes. The lifecycle table of the seed holds:

========================  =====================================================
file new                  chunked (words), embedded and inserted
file unchanged            skipped: no embedding call
file changed              its node replaced: old chunks no longer searchable
file removed from input   kept (other workflows may use it)
embedding model changed   every file it holds re-embedded from SQL (the new model must
                          answer first, else nothing changes), then the input's files
query only                retrieval over what the collection holds
========================  =====================================================

Embedding happens before any write, so a failing model leaves the collection as it was.
"""

from __future__ import annotations

import hashlib
import time
import urllib.parse
from typing import Any

from kg.context import Actor, UnitOfWork, permit, reading, run
from kg.errors import Conflict, InvalidInput, NotFound
from kg.indexing.config import NEXT
from kg.indexing.reembed import complete_reembed, reembed_workspace
from kg.ops.texts import EmbeddedText, prepare_chunks, write_node
from kg.rag.search import SearchRequest, search
from kg.ragnode.spec import (
    RagConfig,
    check_chunk_budget,
    class_key,
    format_context,
    no_rag_branch,
    parse_rag_input,
    validate_rag_config,
)
from kg.ragnode.weaviate import run_rag_node_weaviate
from kg.store import nodes as node_store
from kg.store.models import Workspace
from kg.store.repos import (
    create_repository,
    create_workspace,
    get_repository,
    get_workspace,
    list_workspaces,
)

FILE_TYPE = "rag:File"


def file_path(name: str) -> str:
    """The node path of a file name (percent-encoded into one safe path segment).

    Raises
    ------
    kg.errors.InvalidInput
        A name that cannot be a path segment (``.`` or ``..``).
    """
    segment = urllib.parse.quote(name, safe=" -_.()[]{}@,;=+~!$&'")
    path = "/" + segment.strip() if segment.strip() else "/"
    try:
        return node_store.validate_path(path)
    except InvalidInput as exc:
        raise InvalidInput(f"file name {name!r} cannot be stored", details={"file": name}) from exc


def collection_workspace(uow: UnitOfWork, config: RagConfig, branch: str = "main") -> tuple[str, bool]:
    """Create or check the collection's workspace (and the RAG repository); say whether its
    model changed.

    A collection belongs to the caller's grants: the caller must see the RAG repository, the
    branch and the collection's workspace (``read``), and may create the collection or change
    its settings only with ``write`` there; nothing is created for anyone else.

    Parameters
    ----------
    uow : kg.context.UnitOfWork
        The write transaction and its caller.
    config : RagConfig
        The node's validated configuration.
    branch : str
        The branch of the RAG repository the node reads and writes.

    Returns
    -------
    (workspace, model_changed)
        The workspace's name; whether the collection's embedding model differs from
        ``config``'s (its settings are then left for :func:`reembed_workspace` to change).

    Raises
    ------
    kg.errors.Conflict
        The collection name maps to a class another collection holds.
    kg.errors.NotFound
        The caller cannot see the RAG repository, the branch or the collection.
    kg.errors.Forbidden
        It sees them but may not write there, and the collection is new or its settings change.
    """
    session = uow.session
    repo_name = uow.services.settings.rag_repo
    name = config.class_name
    wanted = {"model": config.model, "chunking": config.chunking.model_dump()}
    uow.authorize("read", repo_name, branch, name)
    try:
        repo = get_repository(session, repo_name, lock=True)
    except NotFound:
        uow.authorize("write", repo_name, branch, name)
        repo = create_repository(session, name=repo_name)
    existing = {w.name.lower(): w for w in list_workspaces(session, repo)}
    workspace = existing.get(class_key(config.collection_name))
    if workspace is None:
        uow.authorize("write", repo_name, branch, name)
        create_workspace(session, repo, name=name, config={
            "embedding": wanted, "rag": {"original_name": config.collection_name,
                                         "class_name": name}})
        return name, False
    original = (workspace.config or {}).get("rag", {}).get("original_name")
    if original != config.collection_name:
        raise Conflict(
            f"collection {config.collection_name!r} maps to class {name!r}, which already "
            f"holds collection {original!r}; use another name",
            details={"collection": config.collection_name, "class": name, "existing": original},
        )
    old_model = (workspace.config or {}).get("embedding", {}).get("model")
    if old_model != config.model:
        # Re-embedded by the caller (set_workspace_embedding), which changes the settings
        # only once the new model has answered.
        uow.authorize("write", repo_name, branch, workspace.name)
        return workspace.name, True
    if (workspace.config or {}).get("embedding") != wanted:
        uow.authorize("write", repo_name, branch, workspace.name)
        workspace.config = {**(workspace.config or {}), "embedding": wanted}
        session.flush()
    return workspace.name, False


def run_rag_node(services, caller: Actor, config_raw: Any, text: Any, *, branch: str = "main") -> dict[str, Any]:
    """Ingest the input's files, then retrieve for its query.

    An orchestration: the collection's workspace is made or checked in one unit of work, the
    input's files are embedded outside any transaction, then written in one unit of work
    (:func:`write_files`), all through :func:`kg.context.run`.

    Parameters
    ----------
    services : kg.services.Services
    caller : kg.context.Actor
        Who calls (the HTTP caller).
    config_raw : dict
        The node's configuration, validated exactly as the seed's JSON Schema says.
    text : str
        The node's markdown input: a query, then ``### File name "..."`` blocks.
    branch : str
        The branch of the RAG repository to ingest into and retrieve from.

    Returns
    -------
    dict
        ``{"context": str | None, "results": [...], "ingestion": {"inserted", "skipped",
        "replaced"}, "collection": {...}}``.

    Raises
    ------
    kg.errors.InvalidInput
        A configuration or input that breaks the spec (422), a ``weaviateUrl`` not listed in
        ``KG_RAG_WEAVIATE_URLS`` (422, never contacted).
    kg.errors.TooLarge
        The input's files make more chunks than ``KG_MAX_CHUNKS_PER_REQUEST`` (413); nothing
        is embedded or written.
    kg.errors.UpstreamUnavailable
        A ``weaviateUrl`` other than ``embedded`` that cannot be reached or used (502): never a
        silent fallback. Such a URL is served by :mod:`kg.ragnode.weaviate`.
    kg.errors.Conflict
        The collection name maps to a class another collection holds.
    kg.errors.ProviderError, kg.errors.BackendUnavailable
        The embedding model failed; nothing was written.
    kg.errors.NotFound
        The caller cannot see the RAG repository, the branch or the collection.
    kg.errors.Forbidden
        It sees them but may not write there, and the call would ingest or create.
    """
    if not isinstance(text, str):
        raise InvalidInput("input must be a string")
    config = validate_rag_config(config_raw)
    query, files = parse_rag_input(text)
    if config.weaviate_url.strip().lower() != "embedded":
        # The collection lives in the named Weaviate instance, in the spec's schema; it belongs
        # to the caller's grants on the RAG repository (its branch, the collection's class) as
        # an embedded one does: read to retrieve, write to ingest.
        permit(services, caller, "read", services.settings.rag_repo, branch, config.class_name)
        if files:
            permit(services, caller, "write", services.settings.rag_repo, branch, config.class_name)
        return run_rag_node_weaviate(services, config, text, branch=branch)
    for name, _ in files:
        file_path(name)
    check_chunk_budget(files, config, services.settings.max_chunks_per_request)
    if config.top_k > 1000:
        raise InvalidInput("topK must be at most 1000", details={"topK": config.top_k})
    embedder = services.embedder(config.model)  # an unknown model is refused before any write
    try:
        with reading(services, caller, services.settings.rag_repo, branch) as (_, view):
            known = {name.lower() for name in view.workspaces.values()}
    except NotFound as exc:
        if branch != "main":
            raise no_rag_branch(services, branch, exc) from exc
        known = set()
    if files and class_key(config.collection_name) not in known:
        # A new collection is created only once its model answers: a failing model leaves
        # nothing behind (existing collections embed before any write anyway).
        embedder.embed(["kg"])
    workspace, model_changed = run(services, caller, collection_workspace, config, branch)
    repo_name = services.settings.rag_repo
    ingestion: dict[str, list[str]] = {"inserted": [], "skipped": [], "replaced": []}
    if model_changed:
        ingestion["reembedded"] = _reembed(services, caller, repo_name, workspace, branch, config)
    if files:
        _ingest(services, caller, repo_name, workspace, branch, files, ingestion)
    results: list[dict[str, Any]] = []
    if query.strip():
        with reading(services, caller, repo_name, branch) as (session, view):
            rows, _ = search(session, services, view, SearchRequest(
                query=query, k=config.top_k, mode="vector", granularity="chunk", workspaces=[workspace]))
        results = [{"file": r.properties.get("source_file", r.path[1:]), "chunk_index": r.chunk_index,
                    "content": r.chunk_text, "distance": r.vector_distance, "path": r.path}
                   for r in rows]
    return {
        "context": format_context([(r["file"], r["content"]) for r in results]),
        "results": results,
        "ingestion": ingestion,
        "collection": {"name": config.collection_name, "class": config.class_name,
                       "embedding_model": config.model, "model_changed": model_changed},
    }


def _reembed(services, caller: Actor, repo_name: str, workspace: str, branch: str,
             config: RagConfig) -> list[str]:
    """The collection's model changed: re-embed every file it holds, from SQL, before the
    input's files are ingested (the issue's "model changed: collection re-embedded"; the seed
    drops the class and re-ingests only the input's files, which would lose the files other
    workflows stored). The new model must answer first: if it does not, nothing changes.

    Returns
    -------
    list of str
        The file names re-embedded.
    """
    answer, queued = reembed_workspace(services, repo_name, workspace,
                                       {"model": config.model, "chunking": config.chunking.model_dump()},
                                       reembed=True)
    with services.db.read() as session:
        repo = get_repository(session, repo_name)
        repo_id, workspace_id = repo.id, get_workspace(session, repo, workspace).id
    # The node answers with its context now, so this collection's texts (and no other
    # collection's backlog) are embedded, and the new model made current, before it answers.
    switched = answer["switched"]
    deadline = time.monotonic() + _REEMBED_WAIT_S
    while not switched and time.monotonic() < deadline:
        if not services.indexer.run_pending(repo_id=repo_id, content_keys=queued).done:
            time.sleep(0.05)  # the rest is being embedded by the background indexer
        switched = complete_reembed(services, repo_id, workspace_id) or _switched(services, workspace_id)
    with reading(services, caller, repo_name, branch) as (session, view):
        held = node_store.visible_nodes(session, view, workspace_ids=[
            wid for wid, name in view.workspaces.items() if name == workspace])
    return sorted(v.properties.get("source_file", v.path[1:]) for v in held if v.node_type == FILE_TYPE)


def _ingest(services, caller: Actor, repo_name: str, workspace: str, branch: str,
            files: list[tuple[str, str]], ingestion: dict[str, list[str]]) -> None:
    """Embed the input's new and changed files, then write them in one unit of work."""
    nodes = []
    for name, content in files:
        props = {"content": content, "source_file": name,
                 "sha256": hashlib.sha256(content.encode("utf-8")).hexdigest()}
        nodes.append((file_path(name), name, props))
    with reading(services, caller, repo_name, branch) as (session, view):
        current = {path: node_store.find_node(session, view, workspace, path) for path, _, _ in nodes}
    embedded = prepare_chunks(services, repo_name, [(workspace, props) for _, _, props in nodes])
    todo = []
    for (path, name, props), text in zip(nodes, embedded, strict=True):
        existing = current.get(path)
        if existing is not None and existing.properties.get("sha256") == props["sha256"] \
                and existing.content_key == text.plan.content_key:
            ingestion["skipped"].append(name)
            continue
        todo.append((path, props, text))
        ingestion["replaced" if existing is not None else "inserted"].append(name)
    if todo:
        run(services, caller, write_files, repo_name, branch, workspace, todo)


def write_files(uow: UnitOfWork, repo_name: str, branch: str, workspace: str,
                files: list[tuple[str, dict[str, Any], EmbeddedText]]) -> int:
    """Write the RAG node's files as ``rag:File`` nodes, in one revision.

    Parameters
    ----------
    uow : kg.context.UnitOfWork
        The write transaction and its caller.
    repo_name, branch, workspace : str
        The collection's repository, branch and workspace.
    files : list of (path, properties, EmbeddedText)
        Each file's node path, properties (``content``, ``source_file``, ``sha256``) and its
        text as embedded before the transaction (:func:`kg.ops.texts.prepare_chunks`).

    Returns
    -------
    int
        The revision written.

    Raises
    ------
    kg.errors.NotFound
        Unknown repository, branch or workspace.
    """
    ctx = uow.begin(repo_name, branch, message="rag node ingest")
    for path, props, text in files:
        write_node(uow, ctx, workspace, path, node_type=FILE_TYPE, properties=props, embedded=text)
    return ctx.revision


_REEMBED_WAIT_S = 300.0
"""How long a RAG-node call waits for its collection's re-embed to complete, in seconds."""


def _switched(services, workspace_id: int) -> bool:
    """Whether the workspace has no re-embed under way (another pass switched it)."""
    with services.db.read() as session:
        ws = session.get(Workspace, workspace_id)
        return ws is None or NEXT not in (ws.config or {})
