"""Merging branches with the merged text indexed.

A property-level merge can produce a text that neither side had (ours changed the title,
theirs the body); its chunks are embedded before the write transaction, like any node write.
"""

from __future__ import annotations

from typing import Any

from kg.errors import Conflict, MergeConflict
from kg.rag.indexing import store_chunks
from kg.rag.writes import prepare_chunks
from kg.store import history
from kg.store.repos import begin_write, get_repository


def merge_branch(services, repo_name: str, source: str, into: str, *, resolutions: list[dict] | None = None,
                 dry_run: bool = False, message: str | None = None, actor: str | None = None) -> dict[str, Any]:
    """Merge ``source`` into ``into`` as one revision on ``into``.

    Parameters
    ----------
    resolutions : list of dict, optional
        See :func:`kg.store.history.plan_merge`.
    dry_run : bool
        Only say what the merge would do.

    Returns
    -------
    dict
        ``{"revision", "fast_forward", "applied", "base", "dry_run"}``; ``revision`` is None
        when there was nothing to merge (no revision is made).

    Raises
    ------
    kg.errors.MergeConflict
        Unresolved conflicts, listed in ``details["conflicts"]``; nothing is written.
    kg.errors.InvalidInput, kg.errors.NotFound
    """
    for _ in range(5):
        with services.db.read() as session:
            repo = get_repository(session, repo_name)
            plan = history.plan_merge(session, repo, source, into, resolutions=resolutions)
        _raise_conflicts(plan)
        base = {"kind": plan.base.kind, "branch": plan.base.view.branch.name, "revision": plan.base.view.revision}
        if dry_run:
            return {"revision": None, "dry_run": True, "fast_forward": plan.fast_forward,
                    "applied": plan.preview(), "base": base}
        if not plan.node_changes and not plan.relation_changes:
            with services.db.write() as session:
                repo = get_repository(session, repo_name, lock=True)
                again = history.plan_merge(session, repo, source, into, resolutions=resolutions)
                _raise_conflicts(again)
                if again.node_changes or again.relation_changes:
                    continue  # something changed meanwhile: merge for real
                history.record_merge(session, repo, again,
                                     history.get_branch(session, repo, into).head_revision)
            return {"revision": None, "dry_run": False, "fast_forward": plan.fast_forward,
                    "applied": plan.preview(), "base": base, "up_to_date": True}
        needed = [c for c in plan.node_changes if c.needs_content]
        names = plan.workspaces
        plans, rows = prepare_chunks(services, repo_name,
                                     [(names[c.key[0]], c.value["properties"]) for c in needed])
        keys = {(c.key[0], history.canonical(c.value["properties"])): p.content_key for c, p in zip(needed, plans)}
        with services.db.write() as session:
            ctx = begin_write(session, repo_name, into,
                              message=message or f"merge {source} into {into}", actor=actor)
            again = history.plan_merge(session, ctx.repo, source, into, resolutions=resolutions,
                                       writing_revision=ctx.revision)
            _raise_conflicts(again)
            if any(c.needs_content and (c.key[0], history.canonical(c.value["properties"])) not in keys
                   for c in again.node_changes):
                session.rollback()
                continue  # the branches moved while the merged text was embedded: plan again
            for chunk_rows in rows.values():
                store_chunks(session, ctx.repo.id, chunk_rows)
            applied = history.apply_merge(session, ctx, again, keys)
            return {"revision": ctx.revision, "dry_run": False, "fast_forward": again.fast_forward,
                    "applied": applied, "base": base}
    raise Conflict("the branches kept changing during the merge; retry")


def _raise_conflicts(plan: history.MergePlan) -> None:
    if plan.conflicts:
        raise MergeConflict(
            f"merging {plan.source} into {plan.target} has {len(plan.conflicts)} conflict(s); "
            "resolve them with 'resolutions'",
            details={"conflicts": plan.conflicts},
        )
