"""Merging branches: plan, apply as one revision, queue the merged texts for indexing.

A property-level merge can make a text neither side had (ours changed the title, theirs the
body): its content key is computed in the merge transaction and its chunks queued as for any
write.
"""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from kg.context import Actor, Resources, UnitOfWork, permit
from kg.errors import Conflict, InvalidInput, MergeConflict, NotFound
from kg.indexing.index_jobs import enqueue
from kg.ops.changes import record_branch_event
from kg.ops.lineage import view_before
from kg.ops.merge_lineage import DerivedPlan, apply_derived, plan_derived, plan_digest, split_resolutions
from kg.ops.text_store import plan_for
from kg.store import history
from kg.store import nodes as node_store
from kg.store.models import Branch, NodeVersion, Repository
from kg.store.repos import WriteContext, branch_view, get_branch, get_repository, parent_name
from kg.types.branches import MergeResult


def preview_merge(services: Resources, caller: Actor, repo_name: str, source: str, into: str | None, *,
                  resolutions: list[dict[str, Any]] | None = None, if_plan: str | None = None) -> MergeResult:
    """The dry run of :func:`merge_branch`, writing nothing; its ``plan`` is the token to pass back
    as ``if_plan`` so the merge applies exactly what this said.

    Raises
    ------
    kg.errors.MergeConflict
        Unresolved conflicts, in ``details["conflicts"]`` (with ``details["plan"]``).
    kg.errors.Conflict
        ``if_plan`` is stale (``details["reason"] = "stale_plan"``).
    kg.errors.InvalidInput, kg.errors.NotFound
        As :func:`merge_branch`.
    """
    permit(services, caller, "read", repo_name, source)
    rest, decided = split_resolutions(resolutions)
    with services.db.read() as session:
        repo = get_repository(session, repo_name)
        target = _target(session, repo, source, into)
        permit(services, caller, "read", repo_name, target)
        token = plan_token(session, repo, source, target)
        wanted = _check_plan(token, if_plan, source, target)
        plan = history.plan_merge(session, repo, source, target, resolutions=rest)
        if not caller.unrestricted:
            # A dry run tells what the merge would change, conflicts included: the caller
            # reads each workspace it touches, on both branches, before anything is told.
            writes, reads = _touched(session, repo, plan)
            for branch in (source, target):
                for workspace in dict.fromkeys(writes + reads):
                    try:
                        permit(services, caller, "read", repo_name, branch, workspace)
                    except NotFound:  # found by kg, not named by the caller: its name is not told
                        raise NotFound("this merge touches a workspace this key cannot see") from None
        # lineage is planned on a plan without conflicts: the merged texts must be known
        _raise_conflicts(plan, token=token)
        derived = plan_derived(services, session, branch_view(session, repo_name, target), plan, decided)
        if not caller.unrestricted:  # lineage's writes and decisions name what they touch
            for workspace in dict.fromkeys(_derived_workspaces(derived)):
                try:
                    permit(services, caller, "read", repo_name, target, workspace)
                except NotFound:
                    raise NotFound("this merge touches a workspace this key cannot see") from None
    _raise_conflicts(plan, derived, token)
    applied = plan.preview()
    full = _with_digest(token, applied, derived)
    _check_digest(full, if_plan, wanted, source, target)
    return MergeResult.model_validate({"revision": None, "dry_run": True, "fast_forward": plan.fast_forward,
                                       "applied": applied, "base": _base(plan), "derived": derived.counts(),
                                       "derived_writes": derived.writes, "plan": full})


def merge_branch(uow: UnitOfWork, repo_name: str, source: str, into: str | None, *,
                 resolutions: list[dict[str, Any]] | None = None,
                 message: str | None = None, actor: str | None = None,
                 if_plan: str | None = None) -> MergeResult:
    """Merge ``source`` into ``into`` (None: its parent) as one revision (message by default
    ``merge <source> into <into>``); ``resolutions`` as
    :func:`kg.store.history.plan_merge` takes them. With nothing to apply no revision is made
    (``revision`` None), but the merge point is recorded. ``if_plan``, the dry run's token,
    refuses the merge when either branch changed since or the writes differ (a reviewer never
    merges what they did not see); checked under the lock.

    Raises
    ------
    kg.errors.MergeConflict
        Unresolved conflicts, in ``details["conflicts"]``; nothing is written.
    kg.errors.Conflict
        No ``into`` and ``source`` is ``main``; or ``if_plan`` is stale (``stale_plan``).
    kg.errors.Forbidden
        No ``read`` on ``source`` or ``merge`` on ``into``.
    """
    session = uow.session
    uow.authorize("read", repo_name, source)
    rest, decided = split_resolutions(resolutions)
    into = _target(session, get_repository(session, repo_name), source, into)
    ctx = uow.begin(repo_name, into, message=message or f"merge {source} into {into}", actor=actor,
                    action="merge")
    token = plan_token(session, ctx.repo, source, into)  # under the write lock: nothing moves now
    wanted = _check_plan(token, if_plan, source, into)
    plan = history.plan_merge(session, ctx.repo, source, into, resolutions=rest,
                              writing_revision=ctx.pending_revision)
    _authorize_changes(uow, repo_name, into, ctx, plan)  # before a conflict tells anything
    _raise_conflicts(plan, token=token)
    # Lineage's writes, planned from the target as it stands, as the dry run planned them.
    derived = plan_derived(uow.services, session, view_before(ctx.view, ctx.pending_revision), plan, decided)
    if not uow.actor.unrestricted:  # lineage's writes and decisions name what they touch
        uow.authorize_workspaces("read", repo_name, into, _derived_workspaces(derived), unnamed="this merge")
    _raise_conflicts(plan, derived, token)
    preview = plan.preview()
    _check_digest(_with_digest(token, preview, derived), if_plan, wanted, source, into)
    if not plan.node_changes and not plan.relation_changes:
        # No revision for an empty merge; only its point is recorded.
        history.record_merge(session, ctx.repo, plan, ctx.branch.head_revision)
        return MergeResult.model_validate({"revision": None, "dry_run": False, "fast_forward": plan.fast_forward,
                                           "applied": preview, "base": _base(plan), "up_to_date": True,
                                           "derived": derived.counts(), "derived_writes": derived.writes})
    names = plan.workspaces
    keys: dict[tuple[int, str], str | None] = {}
    for change in plan.node_changes:
        if change.needs_content and change.value is not None:
            text = plan_for(uow.services, session, ctx.repo, names[change.key[0]], change.value["properties"])
            keys[(change.key[0], history.canonical(change.value["properties"]))] = text.content_key
    applied = history.apply_merge(session, ctx, plan, keys)
    counts = apply_derived(uow, ctx, derived)
    record_branch_event(session, ctx.repo.id, ctx.revision, into, "merge", uow.actor.name, source=source,
                        source_revision=plan.source_revision)
    queued: list[str] = []
    texts = {k for k in keys.values() if k}
    if texts:
        written = session.execute(select(NodeVersion.id, NodeVersion.workspace_id, NodeVersion.content_key)
                                  .where(NodeVersion.branch_id == ctx.branch.id,
                                         NodeVersion.revision == ctx.revision,
                                         NodeVersion.content_key.in_(texts))).all()
        for version_id, wid, key in written:
            if key is not None and enqueue(session, repo_id=ctx.repo.id, workspace_id=wid, content_key=key,
                                           node_version_id=version_id):
                queued.append(key)
    uow.index_after_commit(ctx.repo.id, queued)
    return MergeResult.model_validate({"revision": ctx.revision, "dry_run": False, "fast_forward": plan.fast_forward,
                                       "applied": applied, "base": _base(plan), "derived": counts,
                                       "derived_writes": derived.writes})


def _authorize_changes(uow: UnitOfWork, repo: str, into: str, ctx: WriteContext, plan: history.MergePlan) -> None:
    """A merge writes every workspace it changes on the target: the caller must be allowed to write
    each (changed and conflicting nodes, relations' sources) and read the relations' targets.
    """
    if uow.actor.unrestricted:
        return
    writes, reads = _touched(uow.session, ctx.repo, plan)
    uow.authorize_workspaces("write", repo, into, writes, unnamed="this merge")
    uow.authorize_workspaces("read", repo, into, reads, unnamed="this merge")


def _derived_workspaces(derived: DerivedPlan) -> list[str]:
    """The workspaces lineage's writes and decisions name, in order."""
    out: list[str] = []
    for item in derived.writes + derived.decisions:
        if "workspace" in item:
            out.append(item["workspace"])
        for end in ("from", "to"):
            if end in item:
                out.append(item[end].partition(":")[0])
    return out


def _touched(session: Session, repo: Repository, plan: history.MergePlan) -> tuple[list[str], list[str]]:
    """The workspaces a merge plan writes (nodes, relations' sources) and reads (their targets)."""
    names = plan.workspaces
    sources = [c.key[0] for c in plan.relation_changes]
    targets = [c.key[2] for c in plan.relation_changes]
    branches = list(session.scalars(select(Branch.id).where(Branch.repo_id == repo.id)))
    where = node_store.node_workspaces(session, branches, sources + targets)
    writes = [names[c.key[0]] for c in plan.node_changes] + [names[where[n]] for n in sources if n in where]
    reads = [names[where[n]] for n in targets if n in where]
    for conflict in plan.conflicts:
        if conflict["kind"] == "node":
            writes += [conflict["workspace"]] if conflict.get("workspace") else []
        else:
            writes += [conflict["from"].partition(":")[0]] if conflict.get("from") else []
            reads += [conflict["to"].partition(":")[0]] if conflict.get("to") else []
    return writes, reads


def plan_token(session: Session, repo: Repository, source: str, target: str) -> str:
    """An opaque token of what a merge of ``source`` into ``target`` is planned from: both branches'
    head and fork revisions. Equal tokens, equal plans; any write, reset or merge on either
    changes it.
    """
    parts = []
    for name in (source, target):
        b = get_branch(session, repo, name)
        parts.append(f"{b.id}.{b.head_revision}.{b.base_revision or 0}")
    return "-".join(parts)


_PLAN_TOKEN = re.compile(r"((\d+)\.\d+\.\d+-(\d+)\.\d+\.\d+)(?:\.([0-9a-f]{12}))?")


def _with_digest(token: str, applied: dict[str, Any], derived: DerivedPlan) -> str:
    """The token of a conflict-free plan: the heads and the digest of its writes
    (:func:`kg.ops.merge_lineage.plan_digest`).
    """
    return f"{token}.{plan_digest(applied, derived)}"


def _check_plan(token: str, expected: str | None, source: str, target: str) -> str | None:
    """Refuse a merge planned from other contents than ``expected``: these branches at other
    revisions are a 409 (``stale_plan``), anything else a 422; the digest ``expected`` carries.
    """
    if expected is None:
        return None
    shape = _PLAN_TOKEN.fullmatch(expected) if isinstance(expected, str) else None
    ours = _PLAN_TOKEN.fullmatch(token)
    if shape is None or ours is None or shape.group(2, 3) != ours.group(2, 3):
        raise InvalidInput(f"if_plan {str(expected)[:80]!r} is not the plan token of a merge of {source} into "
                           f"{target}: pass the 'plan' of that merge's dry run",
                           details={"field": "if_plan", "if_plan": str(expected)[:200], "plan": token})
    if shape.group(1) != token:
        raise Conflict(f"{source} or {target} changed since the dry run this merge was asked from: "
                       "review the branch again (nothing was written)",
                       details={"reason": "stale_plan", "plan": token, "expected": expected})
    return shape.group(4)


def _check_digest(full: str, expected: str | None, wanted: str | None, source: str, target: str) -> None:
    """Refuse a merge whose writes differ from the dry run's, the branches unchanged (other
    resolutions or configuration): 409, ``stale_plan``.
    """
    if wanted is not None and full.rpartition(".")[2] != wanted:
        raise Conflict(f"merging {source} into {target} would not write what the dry run this merge was "
                       "asked from showed (other resolutions, or lineage decides otherwise now): run the dry "
                       "run again (nothing was written)",
                       details={"reason": "stale_plan", "plan": full, "expected": expected})


def _target(session: Session, repo: Repository, source: str, into: str | None) -> str:
    """``into``, or ``source``'s parent when ``into`` is None."""
    if into is not None:
        return into
    parent = parent_name(session, get_branch(session, repo, source))
    if parent is None:
        raise Conflict("main has no parent: say where to merge with 'into'", details={"branch": source})
    return parent


def _base(plan: history.MergePlan) -> dict[str, Any]:
    return plan.base.report()


def _raise_conflicts(plan: history.MergePlan, derived: DerivedPlan | None = None, token: str | None = None) -> None:
    """Refuse a plan with conflicts: the merge's own, then the lineage decisions it leaves."""
    conflicts = plan.conflicts + (derived.decisions if derived is not None else [])
    if conflicts:
        raise MergeConflict(
            f"merging {plan.source} into {plan.target} has {len(conflicts)} conflict(s); "
            "resolve them with 'resolutions'",
            details={"conflicts": conflicts, **({"plan": token} if token else {})},
        )
