"""Merging branches: plan, apply as one revision, and queue the merged texts for indexing.

A property-level merge can produce a text that neither side had (ours changed the title,
theirs the body): its content key is computed in the merge transaction and its chunks are
queued like any node write's.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from kg.errors import InvalidInput, MergeConflict
from kg.indexing.index_jobs import enqueue
from kg.ops.nodes import plan_for
from kg.store import history
from kg.store.models import NodeVersion
from kg.store.repos import begin_write, get_branch, get_repository, parent_name


def merge_branch(services, repo_name: str, source: str, into: str | None, *, resolutions: list[dict] | None = None,
                 dry_run: bool = False, message: str | None = None, actor: str | None = None) -> dict[str, Any]:
    """Merge ``source`` into ``into`` as one revision on ``into``.

    Parameters
    ----------
    into : str or None
        The target branch; ``None``: ``source``'s parent.
    resolutions : list of dict, optional
        See :func:`kg.store.history.plan_merge`.
    dry_run : bool
        Only say what the merge would do.

    Returns
    -------
    dict
        ``{"revision", "fast_forward", "applied", "base", "dry_run"}``; ``revision`` is None
        when there was nothing to apply (no revision is made, but the merge point is recorded).

    Raises
    ------
    kg.errors.MergeConflict
        Unresolved conflicts, listed in ``details["conflicts"]``; nothing is written.
    kg.errors.InvalidInput, kg.errors.NotFound
        ``into`` is ``None`` and ``source`` is ``main`` (it has no parent).
    """
    if into is None:
        with services.db.read() as session:
            into = parent_name(session, get_branch(session, get_repository(session, repo_name), source))
        if into is None:
            raise InvalidInput("main has no parent: say where to merge with 'into'")
    if dry_run:
        with services.db.read() as session:
            plan = history.plan_merge(session, get_repository(session, repo_name), source, into,
                                      resolutions=resolutions)
        _raise_conflicts(plan)
        return {"revision": None, "dry_run": True, "fast_forward": plan.fast_forward,
                "applied": plan.preview(), "base": _base(plan)}
    with services.db.write() as session:
        ctx = begin_write(session, repo_name, into, message=message or f"merge {source} into {into}",
                          actor=actor)
        plan = history.plan_merge(session, ctx.repo, source, into, resolutions=resolutions,
                                  writing_revision=ctx.revision)
        _raise_conflicts(plan)
        if not plan.node_changes and not plan.relation_changes:
            session.rollback()  # no revision for an empty merge; only its point is recorded
            repo = get_repository(session, repo_name, lock=True)
            history.record_merge(session, repo, plan, get_branch(session, repo, into).head_revision)
            return {"revision": None, "dry_run": False, "fast_forward": plan.fast_forward,
                    "applied": plan.preview(), "base": _base(plan), "up_to_date": True}
        names = plan.workspaces
        keys: dict[tuple[int, str], str | None] = {}
        for change in plan.node_changes:
            if change.needs_content:
                text = plan_for(services, session, ctx.repo, names[change.key[0]], change.value["properties"])
                keys[(change.key[0], history.canonical(change.value["properties"]))] = text.content_key
        applied = history.apply_merge(session, ctx, plan, keys)
        queued = []
        wanted = {k for k in keys.values() if k}
        if wanted:
            written = session.execute(select(NodeVersion.id, NodeVersion.workspace_id, NodeVersion.content_key)
                                      .where(NodeVersion.branch_id == ctx.branch.id,
                                             NodeVersion.revision == ctx.revision,
                                             NodeVersion.content_key.in_(wanted))).all()
            for version_id, wid, key in written:
                if enqueue(session, repo_id=ctx.repo.id, workspace_id=wid, content_key=key,
                           node_version_id=version_id):
                    queued.append(key)
        result = {"revision": ctx.revision, "dry_run": False, "fast_forward": plan.fast_forward,
                  "applied": applied, "base": _base(plan)}
    services.after_write(ctx.repo.id, queued)
    return result


def _base(plan: history.MergePlan) -> dict[str, Any]:
    return plan.base.report()


def _raise_conflicts(plan: history.MergePlan) -> None:
    if plan.conflicts:
        raise MergeConflict(
            f"merging {plan.source} into {plan.target} has {len(plan.conflicts)} conflict(s); "
            "resolve them with 'resolutions'",
            details={"conflicts": plan.conflicts},
        )
