"""Screen 1, branches: the tree of branches with parent, ahead/behind, last revision and the
protected badge; ``agent/*`` branches grouped and sortable by staleness; reset and delete."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query
from fastapi.responses import Response

from api.ui.core import Console, action, page, ui_url
from kg.context import run
from kg.ops import branches as branch_ops

router = APIRouter(prefix="/ui/r/{repo}")
PageDep = Annotated[Console, Depends(page)]
ActionDep = Annotated[Console, Depends(action)]
#: Branches grouped apart from the tree, as agents name theirs.
AGENT_PREFIXES = ("agent/", "research/", "proposals/")
Sort = Literal["stale", "fresh", "name", "ahead"]


def tree_order(branches: list[dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
    """The branches depth-first from the roots, each with its depth (children by name).

    Parameters
    ----------
    branches : list of dict
        ``{"name", "parent", ...}``; a parent not in the list makes a root.

    Returns
    -------
    list of (int, dict)

    Examples
    --------
    >>> [(d, b["name"]) for d, b in tree_order([{"name": "b", "parent": "main"},
    ...     {"name": "main", "parent": None}, {"name": "a", "parent": "main"}])]
    [(0, 'main'), (1, 'a'), (1, 'b')]
    """
    by_name = {b["name"]: b for b in branches}
    children: dict[str | None, list[dict[str, Any]]] = {}
    for b in branches:
        parent = b.get("parent") if b.get("parent") in by_name else None
        children.setdefault(parent, []).append(b)
    out: list[tuple[int, dict[str, Any]]] = []
    roots = sorted(children.get(None, []), key=lambda b: (b["name"] != "main", b["name"]), reverse=True)
    stack = [(0, b) for b in roots]
    while stack:
        depth, b = stack.pop()
        out.append((depth, b))
        stack.extend((depth + 1, c) for c in sorted(children.get(b["name"], []), key=lambda c: c["name"], reverse=True))
    return out


def _last_time(b: dict[str, Any]) -> str:
    last = b.get("last_revision")
    return str(last["created_at"]) if last else str(b["created_at"])


def sort_agents(branches: list[dict[str, Any]], sort: Sort) -> list[dict[str, Any]]:
    """Agent branches in the order asked: ``stale`` (longest untouched first), ``fresh``,
    ``name`` or ``ahead`` (most revisions to review first)."""
    if sort == "name":
        return sorted(branches, key=lambda b: b["name"])
    if sort == "ahead":
        return sorted(branches, key=lambda b: (-(b.get("ahead") or 0), b["name"]))
    return sorted(branches, key=lambda b: (_last_time(b), b["name"]), reverse=sort == "fresh")


@router.get("/branches")
def branches(repo: str, console: PageDep, sort: Annotated[Sort, Query()] = "stale",
             done: str | None = None) -> Response:
    """The repository's branches."""
    every = [b.as_json() for b in branch_ops.branch_overview(console.services, console.caller, repo)]
    agents = [b for b in every if b["name"].startswith(AGENT_PREFIXES)]
    others = [b for b in every if not b["name"].startswith(AGENT_PREFIXES)]
    return console.render("branches.html", section="branches", repo=repo, tree=tree_order(others),
                          agents=sort_agents(agents, sort), sort=sort, done=console.flashed(done),
                          can=lambda a, b: console.may(a, repo, b))


@router.post("/branches/reset")
def reset(repo: str, console: ActionDep) -> Response:
    """Drop what was written on a branch and fork it again from its parent's head."""
    name = console.field("branch", required=True)
    assert name is not None
    out = run(console.services, console.caller, branch_ops.reset_branch, repo, name)
    return console.redirect(ui_url(f"/r/{repo}/branches",
                                   done=console.flash(f"reset {name}: it now forks at revision "
                                                      f"{out.base_revision}")))


@router.post("/branches/delete")
def delete(repo: str, console: ActionDep) -> Response:
    """Delete a branch and what was written on it."""
    name = console.field("branch", required=True)
    assert name is not None
    run(console.services, console.caller, branch_ops.delete_branch, repo, name)
    return console.redirect(ui_url(f"/r/{repo}/branches", done=console.flash(f"deleted {name}")))
