"""Reads of a branch's nodes and history: what the adapters answer GETs with, in the API shapes
of :mod:`kg.types`, read through :func:`kg.context.reading`; search and graph walks are
:mod:`kg.rag`'s.
"""

from __future__ import annotations

from sqlalchemy import func, or_, select

from kg.access import authorize_whole_repository, can_see
from kg.context import Actor, Resources, permit, reading, scoped_view
from kg.errors import Conflict, Forbidden, InvalidInput, KGError, MergeConflict, NotFound
from kg.indexing import index_jobs
from kg.ops import branches as branch_ops
from kg.ops import merge as merge_ops
from kg.store import history
from kg.store import nodes as node_store
from kg.store.models import Branch, Chunk, IndexJob, NodeVersion, Revision, Workspace, node_dict
from kg.store.paths import validate_path
from kg.store.references import list_references
from kg.store.repos import branch_view, get_repository, parent_name, workspace_id
from kg.types.branches import BranchReview, Diff, MergeReview, MergeTarget, ReviewedBranch, RevisionLog
from kg.types.nodes import (
    Node,
    NodeChunk,
    NodeChunks,
    NodeHistoryEntry,
    NodeList,
    Reference,
    ReferenceList,
    TreeNode,
    TreePage,
)
from kg.types.search import IndexStatus

__all__ = [
    "DEFAULT_LOG_CHANGES", "MAX_LOG_CHANGES", "branch_review", "children_page", "diff", "get_node",
    "index_status", "list_children", "list_prefix", "merge_review", "node_chunks", "node_history",
    "references", "revision_log", "tree_page",
]


def get_node(services: Resources, caller: Actor, repo: str, branch: str, workspace: str, path: str, *,
             at_revision: int | None = None) -> Node:
    """The node at ``path`` as the branch sees it.

    Raises
    ------
    kg.errors.NotFound
        No node there.
    """
    permit(services, caller, "read", repo, branch, workspace)
    with reading(services, caller, repo, branch, at_revision) as (session, view):
        return Node.model_validate(node_dict(node_store.get_node(session, view, workspace, path), workspace))


def list_children(services: Resources, caller: Actor, repo: str, branch: str, workspace: str, parent: str, *,
                  at_revision: int | None = None, order_by: str | None = None, direction: str | None = None,
                  node_type: str | None = None) -> list[Node]:
    """The children of ``parent`` (``/``: top level) in their order: ``order_by`` ``order``
    (default), ``name`` or ``properties.<key>`` (:func:`kg.store.nodes.child_order`).

    Raises
    ------
    kg.errors.NotFound
        No parent node.
    kg.errors.InvalidInput
        A malformed ``order_by`` or ``direction``.
    """
    if parent != "/":
        parent = validate_path(parent)
    order = node_store.child_order(order_by, direction)
    permit(services, caller, "read", repo, branch, workspace)
    with reading(services, caller, repo, branch, at_revision) as (session, view):
        return [Node.model_validate(node_dict(v, workspace))
                for v in node_store.list_children(session, view, workspace, parent, order=order, node_type=node_type)]


def children_page(services: Resources, caller: Actor, repo: str, branch: str, workspace: str, parent: str, *,
                  limit: int = 100, cursor: str | None = None, at_revision: int | None = None,
                  order_by: str | None = None, direction: str | None = None,
                  node_type: str | None = None) -> NodeList:
    """One page of :func:`list_children`.

    Raises
    ------
    kg.errors.NotFound
        No parent node.
    kg.errors.InvalidInput
        A malformed cursor, limit, ``order_by`` or ``direction``; a cursor of another sort.
    """
    if parent != "/":
        parent = validate_path(parent)
    order = node_store.child_order(order_by, direction)
    permit(services, caller, "read", repo, branch, workspace)
    with reading(services, caller, repo, branch, at_revision) as (session, view):
        rows, next_cursor = node_store.list_children_page(session, view, workspace, parent, limit=limit,
                                                          cursor=cursor, order=order, node_type=node_type)
        return NodeList(nodes=[Node.model_validate(node_dict(v, workspace)) for v in rows], next_cursor=next_cursor)


def tree_page(services: Resources, caller: Actor, repo: str, branch: str, workspace: str, parent: str, *,
              limit: int = 100, cursor: str | None = None, at_revision: int | None = None) -> TreePage:
    """One page of :func:`list_children` in their order, each child with whether it has children
    (one more query: what a lazily expanded tree needs).

    Raises
    ------
    kg.errors.NotFound
        No parent node.
    kg.errors.InvalidInput
        A malformed cursor or limit.
    """
    if parent != "/":
        parent = validate_path(parent)
    permit(services, caller, "read", repo, branch, workspace)
    with reading(services, caller, repo, branch, at_revision) as (session, view):
        rows, next_cursor = node_store.list_children_page(session, view, workspace, parent, limit=limit,
                                                          cursor=cursor, order=node_store.child_order())
        parents = node_store.parents_with_children(session, view, workspace, [v.path for v in rows])
        return TreePage(nodes=[TreeNode.model_validate({**node_dict(v, workspace), "has_children": v.path in parents})
                               for v in rows], next_cursor=next_cursor)


def node_chunks(services: Resources, caller: Actor, repo: str, branch: str, workspace: str, path: str, *,
                at_revision: int | None = None) -> NodeChunks:
    """The passages the node's text was split into and embedded, ``content_key`` None without text,
    ``pending`` while the text waits in (or failed in) the index queue. Chunks are shared by
    content key: a branch that did not change the node shows its parent's.

    Raises
    ------
    kg.errors.NotFound
        No node there.
    """
    permit(services, caller, "read", repo, branch, workspace)
    with reading(services, caller, repo, branch, at_revision) as (session, view):
        version = node_store.get_node(session, view, workspace, path)
        key = version.content_key
        if key is None:
            return NodeChunks(content_key=None, pending=False, chunks=[])
        rows = session.scalars(select(Chunk).where(Chunk.repo_id == view.repo.id, Chunk.content_key == key)
                               .order_by(Chunk.chunk_index))
        chunks = [NodeChunk(chunk_index=c.chunk_index, field=c.field, text=c.text, char_start=c.char_start,
                            char_end=c.char_end, model=c.model, dim=c.dim) for c in rows]
        queued = session.scalar(select(IndexJob.id).where(IndexJob.repo_id == view.repo.id,
                                                          IndexJob.content_key == key).limit(1))
        return NodeChunks(content_key=key, pending=queued is not None, chunks=chunks)


def node_history(services: Resources, caller: Actor, repo: str, branch: str, workspace: str, path: str, *,
                 limit: int = 100, at_revision: int | None = None) -> list[NodeHistoryEntry]:
    """The revisions of the branch's history (with its ancestors' up to the fork, merges included)
    that wrote the node at ``path``, which need not exist now; newest first, ``op`` ``put`` or
    ``delete``. A query over ``ix_node_versions_path`` per chain entry.

    Raises
    ------
    kg.errors.InvalidInput
        ``limit`` outside 1..1000.
    """
    path = validate_path(path)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 1000:
        raise InvalidInput("limit must be between 1 and 1000", details={"limit": limit})
    permit(services, caller, "read", repo, branch, workspace)
    with reading(services, caller, repo, branch, at_revision) as (session, view):
        wid = workspace_id(view, workspace)
        on_chain = or_(*((NodeVersion.branch_id == b) & (NodeVersion.revision <= r) for b, r in view.chain))
        rows = session.execute(
            select(NodeVersion.revision, NodeVersion.deleted, Branch.name, Revision.actor, Revision.message,
                   Revision.created_at)
            .join(Revision, (Revision.repo_id == NodeVersion.repo_id) & (Revision.number == NodeVersion.revision))
            .join(Branch, Branch.id == NodeVersion.branch_id)
            .where(on_chain, NodeVersion.workspace_id == wid, NodeVersion.path == path)
            .order_by(NodeVersion.revision.desc(), NodeVersion.id.desc())
            .limit(limit)
        ).all()
        return [NodeHistoryEntry(revision=rev, branch=name, actor=actor, message=message,
                                 created_at=created.isoformat(), op="delete" if deleted else "put")
                for rev, deleted, name, actor, message, created in rows]


def list_prefix(services: Resources, caller: Actor, repo: str, branch: str, workspace: str, prefix: str, *,
                limit: int = 1000, cursor: str | None = None, at_revision: int | None = None,
                mode: str = "segments") -> NodeList:
    """A page of the nodes under ``prefix`` by path (:func:`kg.store.paths.path_has_prefix` in
    ``mode``).
    """
    permit(services, caller, "read", repo, branch, workspace)
    with reading(services, caller, repo, branch, at_revision) as (session, view):
        rows, next_cursor = node_store.list_prefix(session, view, workspace, prefix, limit=limit, cursor=cursor,
                                                   mode=mode)
        return NodeList(nodes=[Node.model_validate(node_dict(v, workspace)) for v in rows], next_cursor=next_cursor)


def references(services: Resources, caller: Actor, repo: str, branch: str, target: str, *, limit: int = 1000,
               at_revision: int | None = None) -> ReferenceList:
    """The nodes whose properties refer to ``target``, with the property key (at most ``limit``;
    ``truncated`` when more do)."""
    with reading(services, caller, repo, branch, at_revision) as (session, view):
        rows, truncated = list_references(session, view, target, limit=limit)
        return ReferenceList(references=[Reference.model_validate(r) for r in rows], truncated=truncated)


#: Changes the revision log lists per revision by default, and at most.
DEFAULT_LOG_CHANGES = history.DEFAULT_LOG_CHANGES
MAX_LOG_CHANGES = history.MAX_LOG_CHANGES


def revision_log(services: Resources, caller: Actor, repo: str, branch: str, *, limit: int = 100,
                 before: int | None = None, at_revision: int | None = None,
                 max_changes: int = DEFAULT_LOG_CHANGES) -> RevisionLog:
    """The branch's history, newest first, before ``before`` (:func:`kg.store.history.revision_log`;
    ``max_changes`` 0 to 10,000).
    """
    with reading(services, caller, repo, branch, at_revision) as (session, view):
        return RevisionLog.model_validate(
            {"revisions": history.revision_log(session, view, limit=limit, before=before, max_changes=max_changes)})


def diff(services: Resources, caller: Actor, repo: str, branch: str, against: str | None = None) -> Diff:
    """What ``branch`` changed since its merge base with ``against`` (default: its parent).

    Raises
    ------
    kg.errors.NotFound
        Unknown repository or branch.
    kg.errors.InvalidInput
        ``against`` is neither the branch's parent nor its child.
    kg.errors.Conflict
        No ``against`` and the branch (``main``) has no parent.
    """
    with reading(services, caller, repo, branch) as (session, view):
        compared = against if against is not None else parent_name(session, view.branch)
        if against is None and compared is not None and not can_see(caller, repo, compared):
            # its parent is a branch the caller cannot see: not even its name is told
            raise NotFound(f"branch {branch!r} has no parent you can read; name a branch with 'against'",
                           details={"branch": branch})
        if compared is not None:
            permit(services, caller, "read", repo, compared)
            # Changes the caller may read on both sides: a workspace readable on the branch but
            # not on the one compared shows nothing of the other's state.
            other = scoped_view(caller, branch_view(session, repo, compared))
            readable = _both(view.readable, other.readable)
        else:
            readable = view.readable
        return Diff.model_validate(history.diff_branches(session, view.repo, branch, against, readable=readable))


def _both(one: frozenset[int] | None, other: frozenset[int] | None) -> frozenset[int] | None:
    """The workspaces readable in two scopes (None: every workspace)."""
    if one is None or other is None:
        return other if one is None else one
    return one & other


def index_status(services: Resources, caller: Actor, repo: str) -> IndexStatus:
    """The indexer's queue for ``repo`` and what the search index holds; an index that cannot answer is reported as an
    ``error`` (the queue is in SQL and still worth seeing). Needs ``admin`` over every workspace
    and branch (it names them all: :func:`kg.access.authorize_whole_repository`).
    """
    permit(services, caller, "admin", repo)
    with services.db.read() as session:
        r = get_repository(session, repo)
        names = {
            "workspace": dict(session.execute(
                select(Workspace.id, Workspace.name).where(Workspace.repo_id == r.id)).all()),
            "branch": dict(session.execute(select(Branch.id, Branch.name).where(Branch.repo_id == r.id)).all()),
        }
        authorize_whole_repository(caller, "admin", repo, names["workspace"].values(), names["branch"].values())
        out = index_jobs.index_status(session, r)
        stored = session.scalar(select(func.max(Chunk.seq)).where(Chunk.repo_id == r.id)) or 0
    try:
        stats = {**services.index.stats(r.uid), "stored": stored}
    except KGError as exc:
        stats = {"error": {"code": exc.code, "message": exc.message}}
    for c in stats.get("collections") or []:
        if isinstance(c, dict):
            c["workspace"] = names["workspace"].get(c.get("workspace_id", -1))
            c["branch"] = names["branch"].get(c.get("branch_id", -1))
    out["index"] = stats
    return IndexStatus.model_validate(out)


def branch_review(services: Resources, caller: Actor, repo: str, branch: str,
                  against: str | None = None) -> BranchReview:
    """What a person reviews before merging ``branch`` into ``against`` (default: its parent): the
    branch (:func:`kg.ops.branches.get_branch`), the target, :func:`diff`, and ``plan``,
    :func:`kg.ops.merge.plan_token` read before the diff (for ``if_plan``: a merge of what the page
    showed, or none); ``into``, ``diff`` and ``plan`` are None for ``main`` without ``against``.

    Raises
    ------
    kg.errors.InvalidInput
        ``against`` is neither the branch's parent nor its child.
    """
    found = branch_ops.get_branch(services, caller, repo, branch)
    info = ReviewedBranch.model_validate({**found.model_dump(exclude_unset=True),
                                          "protected": branch_ops.is_protected(services, found.name)})
    compared = against if against is not None else info.parent
    if compared is None:
        return BranchReview(branch=info, into=None, diff=None, plan=None)
    # The token is read before the diff: a write between the two makes it older than what the
    # page shows, so the dry run asked from the page is refused rather than merging unseen work.
    with services.db.read() as session:
        token = merge_ops.plan_token(session, get_repository(session, repo), branch, compared)
    changes = diff(services, caller, repo, branch, compared)
    into = MergeTarget(name=changes.against, protected=branch_ops.is_protected(services, compared))
    return BranchReview(branch=info, into=into, diff=changes, plan=token)


def merge_review(services: Resources, caller: Actor, repo: str, branch: str,
                 into: str | None = None) -> MergeReview | None:
    """The dry run (:func:`kg.ops.merge.preview_merge`, no resolutions) of merging ``branch`` into
    ``into`` as the review page shows it: the ``plan`` token read first (before the page's diff),
    the lineage decisions, and how many other conflicts. None when there is no merge (``main`` without ``into``) or the
    caller may not dry-run it.
    """
    try:
        out = merge_ops.preview_merge(services, caller, repo, branch, into)
    except MergeConflict as exc:
        conflicts = list(exc.details.get("conflicts", []))
        decisions = [c for c in conflicts if c.get("kind") == "lineage"]
        return MergeReview(plan=exc.details.get("plan"), derived=None, derived_writes=[], decisions=decisions,
                           conflicts=len(conflicts) - len(decisions))
    except (Conflict, InvalidInput, NotFound, Forbidden):  # Conflict: main has no parent
        return None
    return MergeReview(plan=out.plan, derived=out.derived, derived_writes=out.derived_writes, decisions=[],
                       conflicts=0)
