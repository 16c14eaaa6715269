"""Node writes with their text indexed: plan, embed outside the transaction, then store.

Each use case runs in the unit of work it is given (one revision at most), all or nothing;
the texts it queues are indexed once the unit of work has committed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from sqlalchemy.orm import Session

from kg.context import UnitOfWork
from kg.errors import Conflict, InvalidInput
from kg.indexing.config import workspace_embedding
from kg.indexing.index_jobs import enqueue
from kg.indexing.chunks import TextPlan, embed_plans, existing_content_keys, plan_text
from kg.store import nodes as node_store
from kg.store import relations as relation_store
from kg.store.repos import BranchView, WriteContext, get_repository, get_workspace
from kg.store.models import NodeVersion, node_dict
from kg.store.nodes import NodeWrite, merge_properties


def _plan(services, session, repo, workspace_name: str, properties: dict[str, Any]) -> tuple[TextPlan, Any]:
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


def prepare_chunks_plans_only(services, repo_name: str, items: Sequence[tuple[str, dict[str, Any]]]) -> list[TextPlan]:
    """The text plans of ``(workspace, properties)`` items, without embedding anything."""
    with services.db.read() as session:
        repo = get_repository(session, repo_name)
        return [_plan(services, session, repo, ws, props)[0] for ws, props in items]


def check_if_revision(current, if_revision: int | None, workspace: str, path: str) -> None:
    """Refuse a write based on a stale view of the node (optimistic concurrency).

    ``if_revision`` is the revision the writer read the node at: the write is refused when the
    node changed after it (or was deleted, or appeared when the writer saw none: ``0``).

    Raises
    ------
    kg.errors.Conflict
    """
    if if_revision is None:
        return
    if isinstance(if_revision, bool) or not isinstance(if_revision, int) or if_revision < 0:
        raise InvalidInput("if_revision must be an integer >= 0", details={"if_revision": if_revision})
    if current is None and if_revision > 0:
        raise Conflict(f"node {workspace}:{path} no longer exists (if_revision={if_revision})",
                       details={"workspace": workspace, "path": path, "if_revision": if_revision})
    if current is not None and current.revision > if_revision:
        raise Conflict(
            f"node {workspace}:{path} changed at revision {current.revision}, after {if_revision}",
            details={"workspace": workspace, "path": path, "if_revision": if_revision,
                     "revision": current.revision},
        )


def plan_for(services, session, repo, workspace_name: str, properties: dict[str, Any]) -> TextPlan:
    """The text plan (content key) of properties in a workspace; no model call."""
    return _plan(services, session, repo, workspace_name, properties)[0]


def _write_and_enqueue(session: Session, ctx: WriteContext, workspace: str, path: str, write: NodeWrite, *,
                       parents: bool = False) -> tuple[NodeVersion, bool, str | None]:
    version, created = node_store.put_node(session, ctx, workspace, path, write, parents=parents)
    queued = enqueue(session, repo_id=ctx.repo.id, workspace_id=version.workspace_id,
                     content_key=write.content_key, node_version_id=version.id)
    return version, created, write.content_key if queued else None


def put_node(uow: UnitOfWork, repo_name: str, branch: str, workspace: str, path: str, *, node_type: str,
             properties: dict[str, Any], order: float | None = None, parents: bool = False,
             message: str | None = None, actor: str | None = None,
             if_revision: int | None = None) -> tuple[dict[str, Any], bool]:
    """Create or replace a node; its text is queued for indexing in the same transaction.

    Parameters
    ----------
    uow : kg.context.UnitOfWork
        The write transaction and its caller.
    repo_name, branch, workspace : str
        Where the node is written.
    path : str
        Its path (``/a/b``, validated).
    node_type : str
        Its type (``kg:Node``, ``pep:PEP``...).
    properties : dict
        Its JSON properties; the text fields are chunked and embedded.
    order : float or None
        Its place among its siblings.
    parents : bool
        Create missing ancestors as ``kg:Folder`` nodes.
    message, actor : str or None
        Recorded with the revision.
    if_revision : int or None
        Refuse the write if the node changed after this revision (:func:`check_if_revision`).

    Returns
    -------
    (node, created)
        The API shape of the stored node; ``created`` False when it replaced one.

    Raises
    ------
    kg.errors.NotFound, kg.errors.InvalidInput, kg.errors.Conflict
    """
    node_store.validate_node_input(node_type, properties, order)
    session = uow.session
    ctx = uow.begin(repo_name, branch, message=message, actor=actor)
    check_if_revision(node_store.find_node(session, ctx.view, workspace, path), if_revision, workspace, path)
    plan = plan_for(uow.services, session, ctx.repo, workspace, properties)
    version, created, queued = _write_and_enqueue(
        session, ctx, workspace, path, NodeWrite(node_type, properties, order, plan.content_key),
        parents=parents)
    uow.index_after_commit(ctx.repo.id, [queued] if queued else [])
    return node_dict(version, workspace), created


def patch_node(uow: UnitOfWork, repo_name: str, branch: str, workspace: str, path: str, *,
               properties: dict[str, Any], node_type: str | None = None, order: float | None = None,
               message: str | None = None, actor: str | None = None,
               if_revision: int | None = None) -> dict[str, Any]:
    """Merge ``properties`` into a node (a ``None`` value removes the key) and queue its text.

    Parameters
    ----------
    uow : kg.context.UnitOfWork
        The write transaction and its caller.
    repo_name, branch, workspace, path : str
        The node.
    properties : dict
        Keys to set; a ``None`` value removes its key.
    node_type : str or None
        A new type; ``None`` keeps it.
    order : float or None
        A new place among its siblings; ``None`` keeps it.
    message, actor : str or None
        Recorded with the revision.
    if_revision : int or None
        Refuse the write if the node changed after this revision.

    Returns
    -------
    dict
        The API shape of the stored node.

    Raises
    ------
    kg.errors.NotFound, kg.errors.InvalidInput, kg.errors.Conflict
    """
    if not isinstance(properties, dict):
        raise InvalidInput("properties must be a JSON object")
    session = uow.session
    ctx = uow.begin(repo_name, branch, message=message, actor=actor)
    current = node_store.get_node(session, ctx.view, workspace, path)
    check_if_revision(current, if_revision, workspace, path)
    merged = merge_properties(current.properties, properties)
    new_type = node_type if node_type is not None else current.node_type
    new_order = order if order is not None else current.order
    node_store.validate_node_input(new_type, merged, new_order)
    plan = plan_for(uow.services, session, ctx.repo, workspace, merged)
    version, _, queued = _write_and_enqueue(session, ctx, workspace, path,
                                            NodeWrite(new_type, merged, new_order, plan.content_key))
    uow.index_after_commit(ctx.repo.id, [queued] if queued else [])
    return node_dict(version, workspace)


def delete_node(uow: UnitOfWork, repo_name: str, branch: str, workspace: str, path: str, *,
                recursive: bool = False, message: str | None = None, actor: str | None = None,
                if_revision: int | None = None) -> dict[str, Any]:
    """Tombstone a node (and with ``recursive`` its descendants) and their edges, as one revision.

    Parameters
    ----------
    uow : kg.context.UnitOfWork
        The write transaction and its caller.
    repo_name, branch, workspace, path : str
        The node.
    recursive : bool
        Also its descendants (else a node with children is refused).
    message, actor : str or None
        Recorded with the revision.
    if_revision : int or None
        Refuse the write if the node changed after this revision.

    Returns
    -------
    dict
        ``{"revision", "deleted"}``: the revision and how many nodes were tombstoned.

    Raises
    ------
    kg.errors.NotFound, kg.errors.Conflict
    """
    session = uow.session
    ctx = uow.begin(repo_name, branch, message=message, actor=actor)
    check_if_revision(node_store.find_node(session, ctx.view, workspace, path), if_revision, workspace, path)
    hidden = node_store.delete_node(session, ctx, workspace, path, recursive=recursive)
    return {"revision": ctx.revision, "deleted": len(hidden)}


_BATCH_KEYS = {"upserts": {"workspace", "path", "node_type", "properties", "order"},
               "deletes": {"workspace", "path", "recursive"}}


def _batch_item(raw: Any, kind: str, index: int) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise InvalidInput(f"{kind}[{index}] must be an object")
    unknown = sorted(set(raw) - _BATCH_KEYS[kind])
    if unknown:
        raise InvalidInput(f"{kind}[{index}] has unknown field(s): {', '.join(unknown)}",
                           details={"index": index, "unknown": unknown})
    if "recursive" in raw and not isinstance(raw["recursive"], bool):
        raise InvalidInput(f"{kind}[{index}].recursive must be true or false", details={"index": index})
    if "node_type" in raw and not isinstance(raw["node_type"], str):
        raise InvalidInput(f"{kind}[{index}].node_type must be a string", details={"index": index})
    if not isinstance(raw.get("workspace"), str) or not isinstance(raw.get("path"), str):
        raise InvalidInput(f"{kind}[{index}] needs 'workspace' and 'path'", details={"index": index})
    node_store.validate_path(raw["path"])
    return raw


def batch(uow: UnitOfWork, repo_name: str, branch: str, *, upserts: list[dict[str, Any]] | None = None,
          deletes: list[dict[str, Any]] | None = None, parents: bool = False, message: str | None = None,
          actor: str | None = None) -> dict[str, Any]:
    """Apply node deletes, then upserts, as one revision: all or nothing.

    Parameters
    ----------
    uow : kg.context.UnitOfWork
        The write transaction and its caller.
    repo_name, branch : str
        Where the nodes are written.
    upserts : list of dict
        ``{"workspace", "path", "node_type", "properties", "order"}``: create or replace.
    deletes : list of dict
        ``{"workspace", "path", "recursive"}``.
    parents : bool
        Create missing ancestors of the upserts as ``kg:Folder`` nodes.
    message, actor : str or None
        Recorded with the revision.

    Returns
    -------
    dict
        ``{"revision", "upserted": [...nodes], "deleted": N}``.

    Raises
    ------
    kg.errors.InvalidInput, kg.errors.NotFound, kg.errors.Conflict
        Any failing item fails the whole batch; nothing is written.
    """
    upserts = [_batch_item(u, "upserts", i) for i, u in enumerate(upserts or [])]
    deletes = [_batch_item(d, "deletes", i) for i, d in enumerate(deletes or [])]
    if not upserts and not deletes:
        raise InvalidInput("a batch needs at least one upsert or delete")
    if len(upserts) + len(deletes) > 10_000:
        raise InvalidInput("a batch holds at most 10000 items")
    for item in upserts:
        node_store.validate_node_input(item.get("node_type", "kg:Node"), item.get("properties", {}), item.get("order"))
    queued: list[str] = []
    session = uow.session
    ctx = uow.begin(repo_name, branch, message=message, actor=actor)
    deleted = 0
    for item in deletes:
        deleted += len(node_store.delete_node(session, ctx, item["workspace"], item["path"],
                                              recursive=bool(item.get("recursive", False))))
    out = []
    for item in upserts:
        props = item.get("properties", {})
        plan = plan_for(uow.services, session, ctx.repo, item["workspace"], props)
        version, _, key = _write_and_enqueue(
            session, ctx, item["workspace"], item["path"],
            NodeWrite(item.get("node_type", "kg:Node"), props, item.get("order"), plan.content_key),
            parents=parents)
        if key:
            queued.append(key)
        out.append(node_dict(version, item["workspace"]))
    if len(upserts) + len(deletes) >= 1000:
        uow.after_commit(uow.services.db.analyze)  # fresh planner statistics after a large write
    uow.index_after_commit(ctx.repo.id, queued)
    return {"revision": ctx.revision, "upserted": out, "deleted": deleted}


# -- nodes and relations in one revision ----------------------------------------------------


@dataclass
class GraphWrite:
    """Nodes and relations to write as one revision (:func:`write_graph`).

    Attributes
    ----------
    upserts : list of dict
        ``{"workspace", "path", "node_type", "properties", "order"?}``: create or replace, in
        this order (missing ancestors are created as ``kg:Folder`` nodes).
    relations : list of dict
        ``{"from", "to", "type", "weight"?, "properties"?}`` with ``workspace:/path``
        addresses, asserted after the upserts (so they may point at the nodes just written).
    unrelations : list of dict
        ``{"from", "to", "type"}``: edges to remove (one that does not exist is ignored).
    """

    upserts: list[dict[str, Any]] = field(default_factory=list)
    relations: list[dict[str, Any]] = field(default_factory=list)
    unrelations: list[dict[str, Any]] = field(default_factory=list)


def write_graph(uow: UnitOfWork, repo_name: str, branch: str,
                plan: Callable[[Session, BranchView], GraphWrite | None], *,
                message: str | None = None, actor: str | None = None) -> dict[str, Any] | None:
    """Write nodes and the relations between them as one revision: all or nothing.

    The batch write path with relations: each node's text is queued for indexing in the same
    transaction, as :func:`batch` does.

    Parameters
    ----------
    uow : kg.context.UnitOfWork
        The write transaction and its caller.
    repo_name, branch : str
        Where the graph is written.
    plan : callable(session, view) -> GraphWrite or None
        Called inside the write transaction, once the branch is locked, with a view that sees
        the branch's current head: what it reads cannot change before the commit (writers of
        a repository serialise). Returning None (nothing to write) writes nothing: no revision
        is made.
    message, actor : str or None
        Recorded with the revision.

    Returns
    -------
    dict or None
        ``{"revision", "upserted": [...nodes], "related": N, "unrelated": N}``, or None when
        ``plan`` returned None.

    Raises
    ------
    kg.errors.InvalidInput, kg.errors.NotFound, kg.errors.Conflict
        Any failing item fails the whole write; nothing is written.
    """
    queued: list[str] = []
    session = uow.session
    ctx = uow.begin(repo_name, branch, message=message, actor=actor)
    todo = plan(session, ctx.view)
    if todo is None:
        return None
    out = []
    for item in todo.upserts:
        props = item.get("properties", {})
        node_type = item.get("node_type", "kg:Node")
        node_store.validate_node_input(node_type, props, item.get("order"))
        plan_ = plan_for(uow.services, session, ctx.repo, item["workspace"], props)
        version, _, key = _write_and_enqueue(
            session, ctx, item["workspace"], item["path"],
            NodeWrite(node_type, props, item.get("order"), plan_.content_key), parents=True)
        if key:
            queued.append(key)
        out.append(node_dict(version, item["workspace"]))
    unrelated = sum(relation_store.unrelate(session, ctx, u["from"], u["to"], u["type"])
                    for u in todo.unrelations)
    for r in todo.relations:
        relation_store.relate(session, ctx, r["from"], r["to"], r["type"], weight=r.get("weight"),
                              properties=r.get("properties"))
    uow.index_after_commit(ctx.repo.id, queued)
    return {"revision": ctx.revision, "upserted": out, "related": len(todo.relations),
            "unrelated": unrelated}
