"""The RAG node over kg (docs/guides/rag-node.md): ingest the file blocks of the
node's markdown input into a collection, then retrieve the chunks closest to its query.

A collection is a workspace of the repository ``settings.rag_repo`` named by its class name
(``rag_collection`` -> ``Ragcollection``); the workspace records the collection's original
name, so two collection names that map to one class are refused, never merged. Each file is a
node holding its text and the sha256 of its bytes. The lifecycle of a file holds:

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

Collections belong to the caller's grants (:mod:`kg.access`). The repository is reserved: a
key reaches it only through a grant naming it literally (``repo=rag``, never ``repo=*``), on
``POST /api/rag`` and on every ordinary route alike, and nobody creates it through
``POST /api/repos`` (this module makes it on the first call). A collection is the workspace of
its class name, so a key holds the collections whose class names its grant's workspace globs
match: ``repo=rag,branches=main,workspaces=Teama*,actions=read+write`` reads and writes
``teama_docs`` (class ``Teamadocs``) on ``main`` and nothing else. Reading a collection needs
``read`` there; ingesting into it, creating it or changing its model or chunking needs
``write``. A collection outside the caller's grants answers 404 ``collection ... not found``,
the answer a collection that does not exist gets, whether or not it exists: it can be neither
read, overwritten, re-embedded nor squatted. Two names collide (409) only when the caller
can see both collections: one whose class differs only by case from a collection outside the
caller's grants is a collection of its own. With ``KG_AUTH`` off the anonymous caller, like the
operator and an administrator key, reaches every collection.
"""

from __future__ import annotations

import hashlib
import time
import urllib.parse
from typing import Any

from kg.access import can_see
from kg.context import Actor, UnitOfWork, permit, reading, run, throttle
from kg.errors import Conflict, InvalidInput, NotFound
from kg.indexing.config import NEXT, parse_embedding_config
from kg.indexing.reembed import complete_reembed, reembed_workspace
from kg.ops.formats import FileNode
from kg.ops.ingest import FilePlan, ingest_files, plan_file
from kg.ops.text_store import EmbeddedText, prepare_chunks
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
from kg.ragnode.weaviate import check_weaviate_url_allowed, run_rag_node_weaviate
from kg.store import nodes as node_store
from kg.store.ingest_records import split_value
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
        raise InvalidInput(f"file name {name!r} cannot be stored", details={"field": "input", "file": name}) from exc


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
        The collection name maps to a class another collection the caller can see holds (a
        collection outside its grants never collides: its class differs by case only, and kg
        keeps both).
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
    # Names collide (rag-collection, RAG_collection) only among the collections the caller can
    # see: one it cannot see is not there for it, so its existence never shows as a 409.
    existing = {w.name.lower(): w for w in list_workspaces(session, repo)
                if can_see(uow.actor, repo_name, branch, w.name)}
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
    if _settings_differ((workspace.config or {}).get("embedding"), wanted, config.model):
        uow.authorize("write", repo_name, branch, workspace.name)
        workspace.config = {**(workspace.config or {}), "embedding": wanted}
        session.flush()
    return workspace.name, False


def _settings_differ(stored: Any, wanted: dict[str, Any], model: str) -> bool:
    """Whether a collection's stored embedding settings differ from the node's, compared as
    parsed settings (a re-embed stores them with their defaults, ``indexed_properties``)."""
    if not isinstance(stored, dict):
        return True
    try:
        return (parse_embedding_config(stored, default_model=model).model_dump()
                != parse_embedding_config(wanted, default_model=model).model_dump())
    except InvalidInput:
        return True


def collection_not_found(config: RagConfig, branch: str) -> NotFound:
    """The one answer for a collection the caller cannot see, whether or not it exists."""
    return NotFound(f"collection {config.collection_name!r} not found on branch {branch!r}",
                    details={"collection": config.collection_name, "branch": branch})


def authorize_collection(services, caller: Actor, config: RagConfig, branch: str, *,
                         write: bool = False) -> None:
    """Check that ``caller`` may read (and ``write``) the collection of ``config`` on ``branch``.

    The collection is the workspace ``config.class_name`` of the reserved repository
    ``settings.rag_repo``; the grant decides through :func:`kg.context.permit`, before anything
    is looked up, so the answer does not depend on whether the collection exists.

    Parameters
    ----------
    services : kg.services.Services
        For the settings.
    caller : kg.context.Actor
        Who calls.
    config : RagConfig
        The node's validated configuration (its collection).
    branch : str
        The branch of the RAG repository.
    write : bool
        Also ``write`` (an ingest, a new collection, a model or chunking change).

    Raises
    ------
    kg.errors.NotFound
        No grant of the caller reaches the collection: ``collection ... not found``, the
        answer a collection that does not exist gets.
    kg.errors.Forbidden
        ``write`` asked and no grant allows it (``main`` is protected: a grant naming it).
    kg.errors.Unauthenticated
        An anonymous caller while ``KG_AUTH`` is on.
    """
    repo = services.settings.rag_repo
    try:
        permit(services, caller, "read", repo, branch, config.class_name)
    except NotFound as exc:
        raise collection_not_found(config, branch) from exc
    if write:
        permit(services, caller, "write", repo, branch, config.class_name)


def rag_repository(uow: UnitOfWork) -> str:
    """Make the RAG node's reserved repository (``settings.rag_repo``) if it does not exist.

    The only way the reserved repository comes to be (``POST /api/repos`` refuses its name); the
    caller was authorized for its collection first (:func:`authorize_collection`).

    Parameters
    ----------
    uow : kg.context.UnitOfWork
        The write transaction.

    Returns
    -------
    str
        The repository's name.
    """
    name = uow.services.settings.rag_repo
    try:
        get_repository(uow.session, name, lock=True)
    except NotFound:
        create_repository(uow.session, name=name)
    return name


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
        The node's configuration, validated exactly as its JSON Schema says.
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
    kg.errors.NotFound
        The collection is outside the caller's grants (the module's docstring): the answer of
        a collection that does not exist, whether or not it does; nothing is read or written.
    kg.errors.Forbidden
        The caller may read the collection but not write it (an ingest, a new collection, a
        model or chunking change; a write on ``main`` needs a grant naming ``main``).
    kg.errors.ProviderError, kg.errors.BackendUnavailable
        The embedding model failed; nothing was written.
    kg.errors.RateLimited
        More calls than the caller's rate limit allows (``KG_RATE_EXPENSIVE_PER_MIN``; a call
        is charged once its configuration and input are checked, before anything is embedded).
    """
    if not isinstance(text, str):
        raise InvalidInput("input must be a string")
    config = validate_rag_config(config_raw)
    query, files = parse_rag_input(text)
    authorize_collection(services, caller, config, branch, write=bool(files))
    if config.weaviate_url.strip().lower() != "embedded":
        # The collection lives in the named Weaviate instance, in the spec's schema; its
        # branches are those of the RAG repository, made on the first ingest on main.
        check_weaviate_url_allowed(config.weaviate_url, services.settings.rag_weaviate_urls)
        throttle(services, caller, "rag")  # once the URL is allowed: a refused one is not charged
        if files and branch == "main":
            run(services, caller, rag_repository)
        return run_rag_node_weaviate(services, config, text, branch=branch)
    for name, _ in files:
        file_path(name)
    check_chunk_budget(files, config, services.settings.max_chunks_per_request)
    if config.top_k > 1000:
        raise InvalidInput("topK must be at most 1000", details={"topK": config.top_k})
    throttle(services, caller, "rag")  # once the input is checked: a refused one is not charged
    embedder = services.embedder(config.model)  # an unknown model is refused before any write
    try:
        with reading(services, caller, services.settings.rag_repo, branch) as (_, view):
            known = {name.lower() for name in view.workspaces.values()
                     if can_see(caller, services.settings.rag_repo, branch, name)}
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
    ingestion: dict[str, Any] = {"inserted": [], "skipped": [], "replaced": []}
    if model_changed:
        ingestion["reembedded"] = _reembed(services, caller, repo_name, workspace, branch, config)
    if files:
        _ingest(services, caller, repo_name, workspace, branch, files, ingestion)
    results: list[dict[str, Any]] = []
    if query.strip():
        permit(services, caller, "read", repo_name, branch, workspace)
        with reading(services, caller, repo_name, branch) as (session, view):
            rows, _ = search(session, services, view, SearchRequest(
                query=query, k=config.top_k, mode="vector", granularity="chunk", workspaces=[workspace],
                max_distance=services.settings.rag_max_distance))
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
    input's files are ingested ("model changed: collection re-embedded"; the contract
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
            files: list[tuple[str, str]], ingestion: dict[str, Any]) -> None:
    """Embed the input's new and changed files, then write them in one unit of work.

    The lifecycle is ``kg ingest``'s (:func:`kg.ops.ingest.plan_file`): a file whose hash the
    collection's last ingest of it recorded is skipped, whatever happened to its node since; a
    changed one is merged with people's edits of its node, a property both changed keeping the
    person's value (listed in ``kept_edits``, a key the answer holds only then).
    """
    nodes = [FileNode(file_path(name), FILE_TYPE,
                      {"content": content, "source_file": name,
                       "sha256": hashlib.sha256(content.encode("utf-8")).hexdigest()}, source=name)
             for name, content in files]
    with reading(services, caller, repo_name, branch) as (session, view):
        planned = [plan_file(session, view, workspace, node) for node in nodes]
    todo = [p for p in planned if p.action != "skip"]
    ingestion["skipped"] += [p.node.source for p in planned if p.action == "skip"]
    writes = [p for p in todo if p.value is not None and p.action in ("insert", "write")]
    embedded = prepare_chunks(services, repo_name, [(workspace, split_value(p.value)[1]) for p in writes
                                                    if p.value is not None])
    texts = {id(p.node): text for p, text in zip(writes, embedded, strict=True)}
    if not todo:
        return
    done = run(services, caller, write_files, repo_name, branch, workspace,
               [(p.node, texts.get(id(p.node))) for p in todo])
    for plan in done:
        {"insert": ingestion["inserted"], "write": ingestion["replaced"]}.get(
            plan.action, ingestion["skipped"]).append(plan.node.source)
        if plan.kept:
            ingestion.setdefault("kept_edits", []).extend(
                {"file": plan.node.source, "key": k.key, "kept": k.kept, "file_value": k.file}
                for k in plan.kept)


def write_files(uow: UnitOfWork, repo_name: str, branch: str, workspace: str,
                files: list[tuple[FileNode, EmbeddedText | None]]) -> list[FilePlan]:
    """Write the RAG node's files as ``rag:File`` nodes, in one revision, keeping people's edits.

    Parameters
    ----------
    uow : kg.context.UnitOfWork
        The write transaction and its caller.
    repo_name, branch : str
        The collection's repository and branch.
    workspace : str
        The collection's workspace.
    files : list of (FileNode, EmbeddedText or None)
        Each file's node (``rag:File`` at its path; properties ``content``, ``source_file``,
        ``sha256``) and its text as embedded before the transaction
        (:func:`kg.ops.text_store.prepare_chunks`).

    Returns
    -------
    list of FilePlan
        What was done to each file (:func:`kg.ops.ingest.ingest_files`).

    Raises
    ------
    kg.errors.NotFound
        Unknown repository, branch or workspace, or one the caller cannot see.
    kg.errors.Forbidden
        The caller may not write the collection's workspace on ``branch``.
    """
    uow.authorize("write", repo_name, branch, workspace)
    return ingest_files(uow, repo_name, branch, workspace, files, message="rag node ingest")


_REEMBED_WAIT_S = 300.0
"""How long a RAG-node call waits for its collection's re-embed to complete, in seconds."""


def _switched(services, workspace_id: int) -> bool:
    """Whether the workspace has no re-embed under way (another pass switched it)."""
    with services.db.read() as session:
        ws = session.get(Workspace, workspace_id)
        return ws is None or NEXT not in (ws.config or {})
