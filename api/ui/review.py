"""Screen 2, branch review: the diff grouped by workspace and path, conflicts with a pick or an
edit each, and the merge.

The merge panel (``id="merge"``) posts to ``/review/merge``: a dry run first (``dry_run=1``),
which answers what the merge would apply or the conflicts, each with base / ours / theirs and
a pick; then the merge with a message. A pick travels as form fields ``res`` (its index,
repeated) and ``res-<i>-kind`` (``node`` | ``relation``), ``res-<i>-workspace`` and
``res-<i>-path`` (a node) or ``res-<i>-from``, ``res-<i>-to``, ``res-<i>-type`` (a relation),
``res-<i>-take`` (``ours`` | ``theirs`` | ``edit``) and ``res-<i>-value`` (the edited
properties as a JSON object). htmx swaps the panel; without JavaScript the same forms answer
a whole page.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Depends
from fastapi.responses import Response

from api.ui import textdiff  # noqa: F401  (registers the textdiff and clip filters)
from api.ui.core import Console, action, page, pretty
from kg.context import run
from kg.errors import Conflict, InvalidInput, MergeConflict
from kg.ops import merge as merge_ops
from kg.ops import queries
from kg.ops.lineage import describe_derived

router = APIRouter(prefix="/ui/r/{repo}")
PageDep = Annotated[Console, Depends(page)]
ActionDep = Annotated[Console, Depends(action)]
#: A pick's choices on the form, and what :func:`kg.store.history.plan_merge` calls them.
TAKES = {"ours": "ours", "theirs": "theirs", "edit": "value"}
#: A lineage decision's choices (:mod:`kg.ops.merge_lineage`): keep the mention or drop it.
LINEAGE_TAKES = ("keep", "drop")


def _split(address: str | None) -> tuple[str, str]:
    """``("ws", "/path")`` of ``"ws:/path"`` (``("?", address)`` when it has no workspace)."""
    workspace, sep, path = (address or "").partition(":")
    return (workspace, path) if sep else ("?", address or "?")


def group_diff(diff: dict[str, Any]) -> list[dict[str, Any]]:
    """The diff by workspace, then by path: each path's node change and the relation changes
    that start at it.

    Parameters
    ----------
    diff : dict
        :func:`kg.ops.queries.diff`'s answer.

    Returns
    -------
    list of dict
        ``[{"workspace", "paths": [{"path", "node", "relations"}]}]``, workspaces and paths
        sorted. ``node`` is None (only relations changed there) or ``{"kind": "added" |
        "modified" | "deleted", "node_type", "changes": [{"key", "old", "new"}]}`` (an added
        node's properties as new values, a deleted node's as old ones). Each relation is
        ``{"kind": "added" | "removed" | "reweighted" | "modified", "from", "to", "type",
        "old", "new"}`` with ``old`` and ``new`` its ``{"weight", "properties"}`` (None for the
        side it is absent on).

    Examples
    --------
    >>> d = {"nodes": {"added": [{"workspace": "kb", "path": "/b", "node_type": "Doc",
    ...                           "properties": {"t": 1}}], "modified": [], "deleted": []},
    ...      "relations": {"added": [], "removed": [], "modified": [{"from": "kb:/a", "to": "kb:/b",
    ...          "type": "cites", "old": {"weight": 1.0, "properties": {}},
    ...          "new": {"weight": 2.0, "properties": {}}}]}}
    >>> [(g["workspace"], p["path"], p["node"] and p["node"]["kind"], [r["kind"] for r in p["relations"]])
    ...  for g in group_diff(d) for p in g["paths"]]
    [('kb', '/a', None, ['reweighted']), ('kb', '/b', 'added', [])]
    """
    spaces: dict[str, dict[str, dict[str, Any]]] = {}

    def at(workspace: str, path: str) -> dict[str, Any]:
        return spaces.setdefault(workspace, {}).setdefault(path, {"path": path, "node": None, "relations": []})

    nodes = diff.get("nodes", {})
    for kind in ("added", "modified", "deleted"):
        for entry in nodes.get(kind, []):
            if kind == "modified":
                changes = [{"key": k, "old": v["old"], "new": v["new"]} for k, v in entry["changes"].items()]
            else:
                props = entry.get("properties") or {}
                changes = [{"key": k, "old": None if kind == "added" else v, "new": v if kind == "added" else None}
                           for k, v in sorted(props.items())]
            at(entry["workspace"], entry["path"])["node"] = {"kind": kind, "node_type": entry.get("node_type"),
                                                            "changes": changes}
    rels = diff.get("relations", {})
    for kind in ("added", "removed", "modified"):
        for rel in rels.get(kind, []):
            value: dict[str, Any] = {"weight": rel.get("weight"), "properties": rel.get("properties") or {}}
            old: dict[str, Any] | None = None if kind == "added" else value
            new: dict[str, Any] | None = None if kind == "removed" else value
            shown = kind
            if kind == "modified":
                old, new = rel["old"], rel["new"]
                shown = "reweighted" if rel["old"]["weight"] != rel["new"]["weight"] else "modified"
            at(*_split(rel["from"]))["relations"].append(
                {"kind": shown, "from": rel["from"], "to": rel["to"], "type": rel["type"], "old": old, "new": new})
    out = []
    for workspace in sorted(spaces):
        paths = [spaces[workspace][p] for p in sorted(spaces[workspace])]
        for entry in paths:
            entry["relations"].sort(key=lambda r: (r["type"], r["to"] or ""))
        out.append({"workspace": workspace, "paths": paths})
    return out


def conflict_id(item: dict[str, Any]) -> str:
    """One conflict's (or one pick's) identity as a string.

    Parameters
    ----------
    item : dict
        A conflict of :class:`kg.errors.MergeConflict`'s ``details["conflicts"]``, or a pick
        of :func:`read_picks`.

    Returns
    -------
    str
        ``"node <workspace> <path>"``, ``"relation <from> <type> <to>"`` or ``"lineage <from>
        <type> <to>"`` (a lineage decision).

    Examples
    --------
    >>> conflict_id({"kind": "node", "workspace": "kb", "path": "/a"})
    'node kb /a'
    """
    if item.get("kind") in ("relation", "lineage"):
        return f"{item.get('kind')} {item.get('from')} {item.get('type')} {item.get('to')}"
    return f"node {item.get('workspace')} {item.get('path')}"


def read_picks(console: Console) -> list[dict[str, str]]:
    """The conflict picks a form carries (``res``, ``res-<i>-*``), as they were typed.

    Parameters
    ----------
    console : Console
        A POST's console (its form read).

    Returns
    -------
    list of dict of str to str
        ``{"kind", "take", "value"}`` and ``workspace``, ``path`` (a node) or ``from``, ``to``,
        ``type`` (a relation), in the form's order; ``take`` is ``""`` when nothing was picked.

    Raises
    ------
    kg.errors.InvalidInput
        A pick of no known kind.
    """
    picks = []
    for i in console.values("res"):
        def f(name: str, i: str = i) -> str:
            return console.form.get(f"res-{i}-{name}", "")
        kind = f("kind")
        pick = {"kind": kind, "take": f("take").strip(), "value": f("value")}
        if kind == "node":
            pick.update(workspace=f("workspace"), path=f("path"))
        elif kind in ("relation", "lineage"):
            pick.update({"from": f("from"), "to": f("to"), "type": f("type")})
        else:
            raise InvalidInput(f"conflict pick {i}: 'kind' is 'node', 'relation' or 'lineage'",
                               details={"field": f"res-{i}-kind"})
        picks.append(pick)
    return picks


def resolutions_of(picks: list[dict[str, str]]) -> list[dict[str, Any]]:
    """The resolutions of :func:`kg.store.history.plan_merge` that the picks make (a conflict
    not picked yet makes none).

    Parameters
    ----------
    picks : list of dict
        :func:`read_picks`.

    Returns
    -------
    list of dict

    Raises
    ------
    kg.errors.InvalidInput
        An unknown choice, or an edit that is not a JSON object (nothing is written).

    Examples
    --------
    >>> resolutions_of([{"kind": "node", "workspace": "kb", "path": "/a", "take": "edit",
    ...                  "value": '{"title": "both"}'}])
    [{'workspace': 'kb', 'path': '/a', 'take': 'value', 'value': {'title': 'both'}}]
    """
    out: list[dict[str, Any]] = []
    for pick in picks:
        take = pick["take"]
        if not take:
            continue
        if pick["kind"] == "lineage":
            if take not in LINEAGE_TAKES:
                raise InvalidInput(f"the pick for {conflict_id(pick)} is 'keep' or 'drop'", details={"take": take})
            out.append({"from": pick["from"], "to": pick["to"], "type": pick["type"], "take": take})
            continue
        if take not in TAKES or (take == "edit" and pick["kind"] != "node"):
            raise InvalidInput(f"the pick for {conflict_id(pick)} is 'ours', 'theirs'"
                               + (" or 'edit'" if pick["kind"] == "node" else ""), details={"take": take})
        if pick["kind"] == "node":
            resolution: dict[str, Any] = {"workspace": pick["workspace"], "path": pick["path"], "take": TAKES[take]}
        else:
            resolution = {"from": pick["from"], "to": pick["to"], "type": pick["type"], "take": take}
        if take == "edit":
            try:
                value = json.loads(pick["value"])
            except json.JSONDecodeError as exc:
                raise InvalidInput(f"the edit of {pick['workspace']}:{pick['path']} is not valid JSON: {exc.msg} "
                                   f"(line {exc.lineno}, column {exc.colno})",
                                   details={"workspace": pick["workspace"], "path": pick["path"]}) from exc
            if not isinstance(value, dict):
                raise InvalidInput(f"the edit of {pick['workspace']}:{pick['path']} must be a JSON object "
                                   "(the node's properties)",
                                   details={"workspace": pick["workspace"], "path": pick["path"]})
            resolution["value"] = value
        out.append(resolution)
    return out


def conflict_rows(conflicts: list[dict[str, Any]], picks: list[dict[str, str]],
                  left: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Each conflict with what the person picked so far and the text its edit box starts with.

    Parameters
    ----------
    conflicts : list of dict
        Every conflict of the merge (before any pick).
    picks : list of dict
        :func:`read_picks`.
    left : list of dict or None
        The conflicts the last attempt left unresolved; None: all of them.

    Returns
    -------
    list of dict
        ``{"conflict", "take", "value", "open"}`` per conflict: the pick (``""`` for none), the
        edit box's text (what was typed, else theirs' properties as JSON, failing that ours'
        or the base's), and whether it is still unresolved.
    """
    by_id = {conflict_id(p): p for p in picks}
    still = None if left is None else {conflict_id(c) for c in left}
    rows = []
    for c in conflicts:
        pick = by_id.get(conflict_id(c))
        side = next((v for v in (c.get("theirs"), c.get("ours"), c.get("base")) if v), None)
        start = pretty(side.get("properties", {}) if side else {})
        rows.append({"conflict": c, "take": pick["take"] if pick else "",
                     "value": pick["value"] if pick and pick["value"].strip() else start,
                     "open": still is None or conflict_id(c) in still})
    return rows


def _open_conflicts(console: Console, repo: str, branch: str, into: str | None) -> list[dict[str, Any]]:
    """The merge's conflicts before any pick ([] when it has none)."""
    try:
        merge_ops.preview_merge(console.services, console.caller, repo, branch, into)
    except MergeConflict as exc:
        return list(exc.details.get("conflicts", []))
    return []


@router.get("/review")
def review(repo: str, console: PageDep, branch: str, into: str | None = None) -> Response:
    """A branch's diff against its parent (or ``into``), what lineage would write on merging it,
    and the merge panel."""
    if into == branch:  # a diff against itself is empty, but the page is a merge's review
        raise InvalidInput(f"branch {branch!r} is not merged into itself: choose another target",
                           details={"field": "into", "into": into})
    review = queries.merge_review(console.services, console.caller, repo, branch, into)
    merging = review.as_json() if review is not None else None
    seen = queries.branch_review(console.services, console.caller, repo, branch, into).as_json()
    target = seen["into"]["name"] if seen["into"] else None
    # The dry run's token was read before the diff: what the page shows is no older than it.
    plan = merging["plan"] if merging is not None and merging["plan"] else seen.get("plan")
    return console.render("review.html", section="branches", repo=repo, branch=branch, info=seen["branch"],
                          into=seen["into"], diff=seen["diff"], plan=plan, merging=merging,
                          groups=group_diff(seen["diff"]) if seen["diff"] else [],
                          can_merge=target is not None and console.may("merge", repo, target))


@router.post("/review/merge")
def merge(repo: str, console: ActionDep) -> Response:
    """The dry run (``dry_run=1``) or the merge, with the conflict picks on the form."""
    branch = console.field("branch", required=True)
    assert branch is not None
    into = console.field("into")
    dry_run = console.field("dry_run") == "1"
    message = console.field("message")
    picks = read_picks(console)
    # What the reviewer saw (the review page's, then each dry run's plan token): the dry run
    # and the merge are refused if either branch changed since, so nothing unseen is merged.
    seen = console.field("plan")
    context: dict[str, Any] = {"repo": repo, "branch": branch, "target": into, "message": message or "",
                               "picks": picks, "can_merge": into is not None and console.may("merge", repo, into),
                               "plan": seen}
    try:
        resolutions = resolutions_of(picks) or None
        if dry_run:
            out = merge_ops.preview_merge(console.services, console.caller, repo, branch, into,
                                          resolutions=resolutions, if_plan=seen)
        else:
            out = run(console.services, console.caller, merge_ops.merge_branch, repo, branch, into,
                      resolutions=resolutions, message=message, if_plan=seen)
        shown = out.as_json()
    except MergeConflict as exc:  # a Conflict: before the stale-plan clause
        left = list(exc.details.get("conflicts", []))
        context["plan"] = exc.details.get("plan", seen)
        every = _open_conflicts(console, repo, branch, into) if picks else left
        # lineage decisions show once the merge's own conflicts are resolved: listed after them
        listed = {conflict_id(c) for c in every}
        every = every + [c for c in left if conflict_id(c) not in listed]
        problem = (f"{len(left)} conflict(s) to resolve before merging: pick ours, theirs or an edit for each"
                   if not picks else f"{len(left)} conflict(s) left unresolved")
        return _panel(console, "conflicts", 409, context, rows=conflict_rows(every or left, picks, left),
                      problem=problem)
    except Conflict as exc:
        if exc.details.get("reason") != "stale_plan":
            raise
        return _panel(console, "stale", 409, context, problem=exc.message)
    except InvalidInput as exc:
        every = _open_conflicts(console, repo, branch, into)
        if not every:
            raise
        return _panel(console, "conflicts", 422, context, rows=conflict_rows(every, picks), problem=exc.message)
    if dry_run:
        context["plan"] = shown.get("plan", seen)
    return _panel(console, "preview" if dry_run else "result", 200, context, out=shown,
                  lineage=describe_derived(shown.get("derived")))


def _panel(console: Console, state: str, status: int, context: dict[str, Any], **more: Any) -> Response:
    """The merge panel in ``state`` (``preview``, ``conflicts``, ``result``): the fragment for
    htmx, else a whole page."""
    template = "_merge_panel.html" if console.htmx else "merge.html"
    return console.render(template, status=status, section="branches", state=state, code=status, **context, **more)
