"""Merging branches: plan, apply as one revision, and queue the merged texts for indexing.

A property-level merge can produce a text that neither side had (ours changed the title,
theirs the body): its content key is computed in the merge transaction and its chunks are
queued like any node write's.
"""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from kg.context import Actor, Resources, UnitOfWork, permit
from kg.errors import Conflict, InvalidInput, MergeConflict, NotFound
from kg.indexing.index_jobs import enqueue
from kg.ops.lineage import view_before
from kg.ops.merge_lineage import DerivedPlan, apply_derived, plan_derived, plan_digest, split_resolutions
from kg.ops.text_store import plan_for
from kg.store import history
from kg.store import nodes as node_store
from kg.store.models import Branch, NodeVersion, Repository
from kg.store.repos import WriteContext, branch_view, get_branch, get_repository, parent_name


def preview_merge(services: Resources, caller: Actor, repo_name: str, source: str, into: str | None, *,
                  resolutions: list[dict[str, Any]] | None = None, if_plan: str | None = None) -> dict[str, Any]:
    """What merging ``source`` into ``into`` would do (a dry run): nothing is written.

    Parameters
    ----------
    services : kg.context.Resources
        The process's resources (store, index, embedders).
    caller : kg.context.Actor
        Who asks.
    repo_name : str
        The repository's name.
    source : str
        The branch merged.
    into : str or None
        The target branch; ``None``: ``source``'s parent.
    resolutions : list of dict, optional
        See :func:`kg.store.history.plan_merge`.
    if_plan : str, optional
        The :func:`plan_token` a reviewer saw: refused when either branch changed since.

    Returns
    -------
    dict
        ``{"revision": None, "dry_run": True, "fast_forward", "applied", "base", "plan"}``:
        ``plan`` is the :func:`plan_token` to pass to :func:`merge_branch` as ``if_plan``, so
        that the merge applies exactly what this dry run said.

    Raises
    ------
    kg.errors.MergeConflict
        Unresolved conflicts, listed in ``details["conflicts"]`` (with ``details["plan"]``).
    kg.errors.Conflict
        ``if_plan`` is not the branches' token now (``details["reason"] = "stale_plan"``).
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
    return {"revision": None, "dry_run": True, "fast_forward": plan.fast_forward,
            "applied": applied, "base": _base(plan), "derived": derived.counts(),
            "derived_writes": derived.writes, "plan": full}


def merge_branch(uow: UnitOfWork, repo_name: str, source: str, into: str | None, *,
                 resolutions: list[dict[str, Any]] | None = None,
                 message: str | None = None, actor: str | None = None,
                 if_plan: str | None = None) -> dict[str, Any]:
    """Merge ``source`` into ``into`` as one revision on ``into``.

    A merge with nothing to apply makes no revision but records its merge point (the base of
    the next merge); :func:`preview_merge` is the dry run.

    Parameters
    ----------
    uow : kg.context.UnitOfWork
        The write transaction and its caller.
    repo_name : str
        The repository's name.
    source : str
        The branch merged.
    into : str or None
        The target branch; ``None``: ``source``'s parent.
    resolutions : list of dict, optional
        See :func:`kg.store.history.plan_merge`.
    message, actor : str or None
        Recorded with the revision (default message ``merge <source> into <into>``).
    if_plan : str, optional
        The ``plan`` of the dry run this merge was asked from (:func:`preview_merge`): the merge
        is refused, nothing written, when either branch changed since (a reviewer never merges
        what they did not see). Checked under the repository's write lock.

    Returns
    -------
    dict
        ``{"revision", "fast_forward", "applied", "base", "dry_run", "derived"}``; ``revision``
        is None when there was nothing to apply (no revision is made, but the merge point is
        recorded, and there is no ``derived``). ``derived`` counts what lineage did to the
        records derived from the nodes the merge changed (:func:`kg.ops.lineage.refresh_derived`):
        ``{"unlinked", "restamped", "orphaned", "stale", "queued"}``.

    Raises
    ------
    kg.errors.MergeConflict
        Unresolved conflicts, listed in ``details["conflicts"]``; nothing is written.
    kg.errors.Conflict
        ``into`` is ``None`` and ``source`` is ``main`` (it has no parent).
    kg.errors.Forbidden
        The caller may not read ``source`` or may not ``merge`` into ``into``.
    kg.errors.Conflict
        ``if_plan`` is not the branches' :func:`plan_token` now (``details["reason"] =
        "stale_plan"``).
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
        return {"revision": None, "dry_run": False, "fast_forward": plan.fast_forward,
                "applied": preview, "base": _base(plan), "up_to_date": True,
                "derived": derived.counts(), "derived_writes": derived.writes}
    names = plan.workspaces
    keys: dict[tuple[int, str], str | None] = {}
    for change in plan.node_changes:
        if change.needs_content and change.value is not None:
            text = plan_for(uow.services, session, ctx.repo, names[change.key[0]], change.value["properties"])
            keys[(change.key[0], history.canonical(change.value["properties"]))] = text.content_key
    applied = history.apply_merge(session, ctx, plan, keys)
    counts = apply_derived(uow, ctx, derived)
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
    return {"revision": ctx.revision, "dry_run": False, "fast_forward": plan.fast_forward,
            "applied": applied, "base": _base(plan), "derived": counts, "derived_writes": derived.writes}


def _authorize_changes(uow: UnitOfWork, repo: str, into: str, ctx: WriteContext, plan: history.MergePlan) -> None:
    """A merge writes every workspace it changes on the target: the caller must be allowed to
    write each (the workspaces of the changed and conflicting nodes and of the changed and
    conflicting relations' sources) and to read the relations' targets, as for the writes
    themselves."""
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
    """The workspaces a merge plan writes (changed or conflicting nodes, changed or conflicting
    relations' sources) and those it reads (those relations' targets), in order."""
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
    """What a merge of ``source`` into ``target`` would be planned from, as an opaque token: the
    head and fork revisions of both branches. Equal tokens, equal plans (a merge is a function of
    what the two branches hold); a write, a reset or a merge on either branch changes it.

    Parameters
    ----------
    session : Session
        An open session.
    repo : Repository
        The repository of both branches.
    source, target : str
        The branch merged and the branch merged into.

    Returns
    -------
    str
        ``"<source id>.<head>.<base>-<target id>.<head>.<base>"``.

    Raises
    ------
    kg.errors.NotFound
        Unknown branch.
    """
    parts = []
    for name in (source, target):
        b = get_branch(session, repo, name)
        parts.append(f"{b.id}.{b.head_revision}.{b.base_revision or 0}")
    return "-".join(parts)


_PLAN_TOKEN = re.compile(r"((\d+)\.\d+\.\d+-(\d+)\.\d+\.\d+)(?:\.([0-9a-f]{12}))?")


def _with_digest(token: str, applied: dict[str, Any], derived: DerivedPlan) -> str:
    """The plan token of a dry run or a merge without conflicts: the branches' heads and the
    digest of what it writes (:func:`kg.ops.merge_lineage.plan_digest`)."""
    return f"{token}.{plan_digest(applied, derived)}"


def _check_plan(token: str, expected: str | None, source: str, target: str) -> str | None:
    """Refuse a merge planned from other contents than the reviewer saw (``expected``): a
    token of these two branches at other revisions is a 409 (``stale_plan``); a string that
    is no :func:`plan_token`, or the token of other branches, is a client's mistake (422).
    Returns the digest ``expected`` carries (checked by :func:`_check_digest`), if any."""
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
    """Refuse a merge whose writes (its own and lineage's) differ from those of the dry run
    ``expected`` came from, the branches unchanged: other resolutions, or another
    configuration (409, ``stale_plan``)."""
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
    """Refuse a plan with conflicts: the merge's own, then the lineage decisions it leaves
    to the reviewer (:mod:`kg.ops.merge_lineage`)."""
    conflicts = plan.conflicts + (derived.decisions if derived is not None else [])
    if conflicts:
        raise MergeConflict(
            f"merging {plan.source} into {plan.target} has {len(conflicts)} conflict(s); "
            "resolve them with 'resolutions'",
            details={"conflicts": conflicts, **({"plan": token} if token else {})},
        )
