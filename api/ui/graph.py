"""Screen 4, the neighbourhood graph: a node's relations 1 to 3 hops out, capped per node, drawn
with cytoscape.js (``static/graph.js``); edge colour by relation type, width by weight, what the
branch wrote against its parent highlighted, a truncated badge when a budget cut the walk, and a
click on a node opening its node page.

``/graph`` is the page; ``/graph/elements`` answers the cytoscape elements as JSON, from
:func:`kg.rag.graph.neighborhood` called as the signed-in key (which decides what it reads).
"""

from __future__ import annotations

import zlib
from typing import Annotated, Any

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse, Response

from api.ui.core import Console, page, ui_url
from kg.errors import InvalidInput
from kg.ops.repos import list_workspaces
from kg.rag.graph import neighborhood

router = APIRouter(prefix="/ui/r/{repo}")
PageDep = Annotated[Console, Depends(page)]

#: Hops the screen offers (the walk itself allows up to 10).
MAX_GRAPH_HOPS = 3
#: The per-node cap (edges followed from one node) by default, and its most.
DEFAULT_CAP = 25
MAX_CAP = 200
#: Most nodes drawn, seed included.
MAX_GRAPH_NODES = 500
#: Edge colours, picked by a stable hash of the relation type (colour-blind friendly: Okabe-Ito
#: and Tol's bright scheme).
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#882255", "#44AA99",
           "#999933", "#AA4499", "#332288", "#661100")


def type_colour(rel_type: str) -> str:
    """The colour of a relation type: the same type has the same colour on every page and run.

    Parameters
    ----------
    rel_type : str

    Returns
    -------
    str
        A CSS hex colour from :data:`PALETTE`.

    Examples
    --------
    >>> type_colour("cites") == type_colour("cites")
    True
    """
    return PALETTE[zlib.crc32(rel_type.encode("utf-8")) % len(PALETTE)]


def edge_width(weight: float | None) -> float:
    """An edge's width in pixels: 1.5 without a weight, else 1 to 7 with the weight's size
    (clipped to 0..1).

    Examples
    --------
    >>> edge_width(None), edge_width(0.5), edge_width(3.0)
    (1.5, 4.0, 7.0)
    """
    if weight is None:
        return 1.5
    return round(1.0 + 6.0 * min(max(abs(weight), 0.0), 1.0), 2)


def _bounded(name: str, raw: str | None, default: int, low: int, high: int) -> int:
    """An integer query parameter in ``low..high`` (InvalidInput, a 422, otherwise)."""
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidInput(f"{name} must be an integer between {low} and {high}", details={name: raw}) from None
    if not low <= value <= high:
        raise InvalidInput(f"{name} must be an integer between {low} and {high}", details={name: value})
    return value


def _label(node: dict[str, Any]) -> str:
    if node.get("title"):
        return str(node["title"])
    return node["path"].rstrip("/").rsplit("/", 1)[-1] or node["path"]


def elements(repo: str, drawn: dict[str, Any], seed: str) -> dict[str, Any]:
    """Cytoscape elements of a :func:`kg.rag.graph.neighborhood` answer.

    Parameters
    ----------
    repo : str
    drawn : dict
        The neighborhood: ``nodes``, ``edges``, ``truncated``, ``branch``, ``parent``.
    seed : str
        The start node's address.

    Returns
    -------
    dict
        ``{"elements": {"nodes": [{"data": {"id", "label", "workspace", "path", "hop",
        "change", "href", "seed"}, "classes"}], "edges": [{"data": {"id", "source", "target",
        "type", "weight", "colour", "width", "change", "valid_from", "valid_to", "invalidated_by",
        "current"}, "classes"}]}, "truncated", "legend": [{"type", "colour"}], "branch", "parent",
        "seed", "invalid": n}``; ``classes`` holds ``seed`` and ``added`` or ``changed``, and
        ``invalid`` for a relation not valid now (drawn only when invalid ones are asked for).
        Node ids are addresses ``workspace:/path``.
    """
    branch = drawn["branch"]
    nodes = []
    for n in drawn["nodes"]:
        address = f"{n['workspace']}:{n['path']}"
        classes = [c for c in ("seed" if address == seed else None, n["change"]) if c]
        nodes.append({"data": {"id": address, "label": _label(n), "workspace": n["workspace"], "path": n["path"],
                               "node_type": n["node_type"], "hop": n["hop"], "change": n["change"],
                               "seed": address == seed,
                               "href": ui_url(f"/r/{repo}/node", branch=branch, workspace=n["workspace"],
                                              path=n["path"])},
                      "classes": " ".join(classes)})
    edges = []
    for e in drawn["edges"]:
        classes = [c for c in (e["change"], None if e.get("current", True) else "invalid") if c]
        edges.append({"data": {"id": f"{e['from']}|{e['type']}|{e['to']}", "source": e["from"], "target": e["to"],
                               "type": e["type"], "weight": e["weight"], "colour": type_colour(e["type"]),
                               "width": edge_width(e["weight"]), "change": e["change"],
                               "valid_from": e.get("valid_from"), "valid_to": e.get("valid_to"),
                               "invalidated_by": e.get("invalidated_by"), "current": e.get("current", True)},
                      "classes": " ".join(classes)})
    types = sorted({e["type"] for e in drawn["edges"]})
    return {"elements": {"nodes": nodes, "edges": edges}, "truncated": drawn["truncated"],
            "legend": [{"type": t, "colour": type_colour(t)} for t in types],
            "branch": branch, "parent": drawn["parent"], "seed": seed,
            "invalid": sum(1 for e in drawn["edges"] if not e.get("current", True))}


def _walk(console: Console, repo: str, branch: str, workspace: str, path: str, hops: int, cap: int,
          invalid: bool = False) -> dict[str, Any]:
    seed = f"{workspace}:{path}"
    drawn = neighborhood(console.services, console.caller, repo, branch, [seed], hops=hops, fan_out=cap,
                         max_nodes=MAX_GRAPH_NODES, include_invalid=invalid)
    return elements(repo, drawn, seed)


def _flag(name: str, raw: str | None) -> bool:
    """A checkbox: absent or empty is off, ``1``/``on``/``true`` is on; anything else a 422."""
    if raw in (None, "", "0", "off", "false"):
        return False
    if raw in ("1", "on", "true"):
        return True
    raise InvalidInput(f"{name} must be 1 or 0", details={name: raw})


@router.get("/graph")
def graph(repo: str, console: PageDep, branch: str | None = None, workspace: str | None = None,
          path: str | None = None, hops: str | None = None, cap: str | None = None,
          invalid: str | None = None) -> Response:
    """The neighbourhood graph of a node (without ``path``: the form to pick one): its current
    relations, or with ``invalid=1`` every relation, the ones no longer valid drawn dotted."""
    branch = console.home_branch(repo, branch)
    n_hops = _bounded("hops", hops, 1, 1, MAX_GRAPH_HOPS)
    n_cap = _bounded("cap", cap, DEFAULT_CAP, 1, MAX_CAP)
    with_invalid = _flag("invalid", invalid)
    workspaces = [w.name for w in list_workspaces(console.services, console.caller, repo).workspaces]
    workspace = workspace or None
    path = path or None
    drawn = None
    if path is not None:
        if workspace is None:
            if len(workspaces) != 1:
                raise InvalidInput("workspace is required with path (the repository has several)")
            workspace = workspaces[0]
        drawn = _walk(console, repo, branch, workspace, path, n_hops, n_cap, with_invalid)  # errors as a page
    elements_url = (ui_url(f"/r/{repo}/graph/elements", branch=branch, workspace=workspace, path=path, hops=n_hops,
                           cap=n_cap, invalid=1 if with_invalid else None) if drawn is not None else None)
    return console.render("graph.html", section="graph", repo=repo, branch=branch, workspace=workspace,
                          path=path, hops=n_hops, cap=n_cap, invalid=with_invalid, workspaces=workspaces, drawn=drawn,
                          elements_url=elements_url, max_hops=MAX_GRAPH_HOPS, max_cap=MAX_CAP)


@router.get("/graph/elements")
def graph_elements(repo: str, console: PageDep, workspace: str, path: str, branch: str = "main",
                   hops: str | None = None, cap: str | None = None, invalid: str | None = None) -> Response:
    """The cytoscape elements of a node's neighbourhood, as JSON."""
    drawn = _walk(console, repo, branch, workspace, path, _bounded("hops", hops, 1, 1, MAX_GRAPH_HOPS),
                  _bounded("cap", cap, DEFAULT_CAP, 1, MAX_CAP), _flag("invalid", invalid))
    response = JSONResponse(drawn)
    console.keep(response)
    return response
