"""Screen 3, nodes: the node tree of a workspace (children in their order, loaded lazily and
paged) and the node page (properties, chunks, references, relations in and out, the revision
history, the node as of any revision), with edit and delete on branches the key may write."""

from __future__ import annotations

import json
from typing import Annotated, Any
from urllib.parse import quote, quote_plus, urlencode

from fastapi import APIRouter, Depends, Query
from fastapi.responses import Response

from api.deps import MAX_REVISION
from api.ui.core import MAX_FIELD_CHARS, Console, action, page, pretty, ui_url
from kg.context import run
from kg.errors import InvalidInput, MalformedInput
from kg.ops import branches as branch_ops
from kg.ops import nodes as node_ops
from kg.ops import queries
from kg.ops import repos as repo_ops
from kg.rag.graph import neighbors as graph_neighbors
from kg.store.paths import validate_path
from kg.store.references import extract_references
from kg.text.storable import MAX_DEPTH, check_json
from kg.types.nodes import Node

router = APIRouter(prefix="/ui/r/{repo}")
PageDep = Annotated[Console, Depends(page)]
ActionDep = Annotated[Console, Depends(action)]
RevisionQ = Annotated[int | None, Query(ge=0, le=MAX_REVISION)]
#: Children shown per page of the tree (a "more" link loads the next page).
CHILDREN_PER_PAGE = 100
#: Relations shown per direction on a node page.
RELATIONS_SHOWN = 200
#: Revisions shown in a node's history.
HISTORY_SHOWN = 100
#: Characters of one property's value (as JSON) shown on a node page; the rest is in the API.
VALUE_SHOWN = 2_000
#: Chunks listed on a node page.
CHUNKS_SHOWN = 100
#: The most bytes of one form field Starlette's form parser reads (its ``max_part_size``): an
#: edit whose properties, form-encoded, are longer cannot be posted.
FORM_PART_BYTES = 1024 * 1024


def api_node_url(repo: str, workspace: str, path: str, branch: str, at_revision: int | None = None) -> str:
    """The API's URL of a node (``GET`` reads it whole, ``PUT`` replaces it).

    Examples
    --------
    >>> api_node_url("acme", "kb", "/a b", "agent/s1")
    '/api/repos/acme/workspaces/kb/nodes/a%20b?branch=agent%2Fs1'
    """
    query = urlencode([(k, v) for k, v in (("branch", branch), ("at_revision", at_revision)) if v is not None])
    return f"/api/repos/{quote(repo, safe='')}/workspaces/{quote(workspace, safe='')}/nodes{quote(path)}?{query}"


def shown_properties(properties: dict[str, Any], limit: int = VALUE_SHOWN) -> list[dict[str, Any]]:
    """Each property as the node page shows it: its JSON cut at ``limit`` characters.

    Returns
    -------
    list of dict
        ``{"key", "text", "cut", "size"}`` by key; ``size`` is the value's length in characters
        (a string's own, else its JSON's), ``cut`` whether ``text`` is only its start.

    Examples
    --------
    >>> [(p["key"], p["cut"], p["size"]) for p in shown_properties({"b": "x" * 5000, "a": 1})]
    [('a', False, 1), ('b', True, 5000)]
    """
    out = []
    for key in sorted(properties):
        value = properties[key]
        text = pretty(value)
        out.append({"key": key, "text": text[:limit], "cut": len(text) > limit,
                    "size": len(value) if isinstance(value, str) else len(text)})
    return out


def too_large_to_edit(properties_json: str) -> bool:
    """Whether the edit form could not post these properties: longer than
    :data:`api.ui.core.MAX_FIELD_CHARS`, or over the form parser's part size once form-encoded."""
    return len(properties_json) > MAX_FIELD_CHARS or len(quote_plus(properties_json)) > FORM_PART_BYTES


def _workspaces(console: Console, repo: str) -> list[str]:
    return [w.name for w in repo_ops.list_workspaces(console.services, console.caller, repo).workspaces]


def _branches(console: Console, repo: str) -> list[str]:
    return branch_ops.branch_names(console.services, console.caller, repo)


def _children(console: Console, repo: str, branch: str, workspace: str, parent: str,
              cursor: str | None, limit: int) -> dict[str, Any]:
    """The context of ``_tree_children.html``: one page of ``parent``'s children."""
    page = queries.tree_page(console.services, console.caller, repo, branch, workspace, parent, limit=limit,
                             cursor=cursor)
    return {"nodes": page.nodes, "next_cursor": page.next_cursor, "parent": parent, "workspace": workspace,
            "branch": branch, "repo": repo, "limit": limit}


@router.get("/tree")
def tree(repo: str, console: PageDep, branch: str | None = None, workspace: str | None = None,
         cursor: str | None = None, limit: Annotated[int, Query(ge=1, le=1000)] = CHILDREN_PER_PAGE,
         done: str | None = None) -> Response:
    """The workspaces of the repository and the top of the chosen one's tree.

    Parameters
    ----------
    repo : str
        The repository.
    console : Console
        The request.
    branch : str or None
        The branch read (default ``main``, or the first branch the key may read without it).
    workspace : str or None
        The workspace shown; None: the first the key may read.
    cursor : str or None
        A page of the top level after the first (the "more" link's cursor).
    limit : int
        Top-level nodes per page.
    done : str or None
        A message of the action that led here.

    Returns
    -------
    Response
        The HTML page.

    Raises
    ------
    kg.errors.NotFound
        Unknown repository, branch or workspace, or one the key may not read.
    kg.errors.InvalidInput
        A malformed cursor.
    """
    branch = console.home_branch(repo, branch)
    workspaces = _workspaces(console, repo)
    chosen = workspace if workspace is not None else (workspaces[0] if workspaces else None)
    children = (_children(console, repo, branch, chosen, "/", cursor, limit) if chosen is not None else None)
    return console.render("tree.html", section="tree", repo=repo, branch=branch, workspace=chosen,
                          workspaces=workspaces, branches=_branches(console, repo), children=children,
                          done=console.flashed(done))


@router.get("/tree/children")
def tree_children(repo: str, workspace: str, console: PageDep, branch: str = "main", parent: str = "/",
                  cursor: str | None = None,
                  limit: Annotated[int, Query(ge=1, le=1000)] = CHILDREN_PER_PAGE) -> Response:
    """A fragment: one page of a node's children (the ``<li>`` items, then a "more" item).

    Parameters
    ----------
    repo, workspace : str
        The repository. The workspace.
    console : Console
        The request.
    branch : str
        The branch read.
    parent : str
        ``/`` or the path of the node whose children are listed.
    cursor : str or None
        The previous page's cursor.
    limit : int
        Children per page.

    Returns
    -------
    Response
        The HTML fragment.

    Raises
    ------
    kg.errors.NotFound
        Unknown repository, branch, workspace or parent, or one the key may not read.
    kg.errors.InvalidInput
        A malformed parent or cursor.
    """
    return console.render("_tree_children.html", **_children(console, repo, branch, workspace, parent, cursor, limit))


def _outgoing(node: Node) -> list[dict[str, str]]:
    """The references the node's own properties hold (property key, target workspace and path)."""
    try:
        found = extract_references(node.properties, workspace=node.workspace)
    except InvalidInput:
        return []
    return [{"property_key": key, "workspace": ws, "path": path} for key, ws, path in found]


@router.get("/node")
def node(repo: str, workspace: str, path: str, console: PageDep, branch: str = "main",
         at_revision: RevisionQ = None, done: str | None = None) -> Response:
    """One node: type, properties, chunks, references, relations, history; edit and delete.

    Parameters
    ----------
    repo, workspace, path : str
        The node's repository, workspace and path.
    console : Console
        The request.
    branch : str
        The branch read.
    at_revision : int or None
        Show the node as of this revision (read-only).
    done : str or None
        A message of the action that led here.

    Returns
    -------
    Response
        The HTML page.

    Raises
    ------
    kg.errors.NotFound
        Unknown repository, branch, workspace or node, or one the key may not read.
    kg.errors.InvalidInput
        A malformed path, or a revision not written yet.
    """
    path = validate_path(path)
    services, caller = console.services, console.caller
    found = queries.get_node(services, caller, repo, branch, workspace, path, at_revision=at_revision)
    chunks = queries.node_chunks(services, caller, repo, branch, workspace, path, at_revision=at_revision)
    address = f"{workspace}:{path}"
    incoming = queries.references(services, caller, repo, branch, address, limit=RELATIONS_SHOWN,
                                  at_revision=at_revision)
    relations = {d: graph_neighbors(services, caller, repo, branch, address, direction=d, limit=RELATIONS_SHOWN,
                                    at_revision=at_revision) for d in ("OUT", "IN")}
    history = queries.node_history(services, caller, repo, branch, workspace, path, limit=HISTORY_SHOWN,
                                   at_revision=at_revision)
    writable = at_revision is None and console.may("write", repo, branch, workspace)
    properties_json = json.dumps(found.properties, indent=2, sort_keys=True, ensure_ascii=False)
    too_large = too_large_to_edit(properties_json)
    return console.render(
        "node.html", section="tree", repo=repo, branch=branch, workspace=workspace, node=found,
        at_revision=at_revision, chunks=chunks, chunks_shown=CHUNKS_SHOWN, references_in=incoming.references,
        references_truncated=incoming.truncated, references_out=_outgoing(found), relations=relations,
        history=history, writable=writable, branches=_branches(console, repo), done=console.flashed(done),
        shown=shown_properties(found.properties), too_large=too_large,
        properties_size=len(properties_json), properties_json="" if too_large else properties_json,
        max_field_chars=MAX_FIELD_CHARS, api_url=api_node_url(repo, workspace, path, branch, at_revision))


def _target(console: Console) -> tuple[str, str, str]:
    """The branch, workspace and path a node form names."""
    branch = console.field("branch", "main")
    workspace = console.field("workspace", required=True)
    path = console.field("path", required=True)
    assert branch is not None and workspace is not None and path is not None
    return branch, workspace, validate_path(path)


def _no_constant(name: str) -> Any:
    """Refuse NaN and Infinity, which JSON does not have."""
    raise ValueError(f"{name} is not a JSON value")


def _properties(raw: str | None) -> dict[str, Any]:
    """The edit form's properties: a JSON object, else a clear 422."""
    try:
        value = json.loads(raw or "{}", parse_constant=_no_constant)
    except RecursionError as exc:
        raise InvalidInput(f"properties are nested deeper than {MAX_DEPTH} levels",
                           details={"field": "properties"}) from exc
    except ValueError as exc:
        raise InvalidInput(f"properties are not valid JSON: {exc}", details={"field": "properties"}) from exc
    if not isinstance(value, dict):
        raise InvalidInput("properties must be a JSON object ({...}), not "
                           f"{type(value).__name__}", details={"field": "properties"})
    try:
        check_json(value, "the properties")
    except MalformedInput as exc:  # too deep: a 422 of the form's field, as its other refusals
        raise InvalidInput(exc.message, details={"field": "properties"}) from None
    return value


def _revision(raw: str | None) -> int | None:
    """The form's ``if_revision`` (the revision of the node the person edited)."""
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError as exc:
        raise InvalidInput("if_revision must be an integer", details={"field": "if_revision"}) from exc
    if not 0 <= value <= MAX_REVISION:
        raise InvalidInput("if_revision is out of range", details={"field": "if_revision"})
    return value


@router.post("/node/edit")
def edit(repo: str, console: ActionDep) -> Response:
    """Replace the node's type and properties (its order kept) as one revision, then show it.

    Parameters
    ----------
    repo : str
        The repository.
    console : Console
        The request, its form: ``branch``, ``workspace``, ``path``, ``node_type``,
        ``properties`` (a JSON object), ``if_revision`` and ``message``.

    Returns
    -------
    Response
        A redirect to the node page.

    Raises
    ------
    kg.errors.InvalidInput
        Properties that are not a JSON object, a missing field; nothing is written.
    kg.errors.Forbidden
        A key that may not write there (a protected branch needs a grant naming it).
    kg.errors.NotFound
        Unknown node, or one the key may not read.
    kg.errors.Conflict
        The node changed after ``if_revision``.
    """
    branch, workspace, path = _target(console)
    node_type = console.field("node_type", required=True)
    assert node_type is not None
    properties = _properties(console.form.get("properties"))
    if_revision = _revision(console.field("if_revision"))
    current = queries.get_node(console.services, console.caller, repo, branch, workspace, path)
    stored, _ = run(console.services, console.caller, node_ops.put_node, repo, branch, workspace, path,
                    node_type=node_type, properties=properties, order=current.order,
                    message=console.field("message") or f"edited {workspace}:{path} in the console",
                    if_revision=if_revision)
    return console.redirect(ui_url(f"/r/{repo}/node", branch=branch, workspace=workspace, path=path,
                                   done=console.flash(f"saved: revision {stored.revision}")))


@router.post("/node/delete")
def delete(repo: str, console: ActionDep) -> Response:
    """Delete the node (with its descendants when asked) as one revision, then show the tree.

    Parameters
    ----------
    repo : str
        The repository.
    console : Console
        The request, its form: ``branch``, ``workspace``, ``path``, ``recursive`` and ``message``.

    Returns
    -------
    Response
        A redirect to the workspace's tree.

    Raises
    ------
    kg.errors.Forbidden
        A key that may not write there.
    kg.errors.NotFound
        Unknown node, or one the key may not read.
    kg.errors.Conflict
        A node with children and no ``recursive``.
    """
    branch, workspace, path = _target(console)
    recursive = console.field("recursive") in ("on", "true", "1")
    out = run(console.services, console.caller, node_ops.delete_node, repo, branch, workspace, path,
              recursive=recursive, message=console.field("message") or f"deleted {workspace}:{path} in the console")
    return console.redirect(ui_url(f"/r/{repo}/tree", branch=branch, workspace=workspace,
                                   done=console.flash(f"deleted {workspace}:{path} ({out.deleted} node"
                                                      f"{'' if out.deleted == 1 else 's'}): "
                                                      f"revision {out.revision}")))
