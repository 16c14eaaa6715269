"""Screens 5 and 6, the playgrounds: search (mode, k, leg weights, max_distance, path prefix,
granularity; each hit's score, fulltext rank, vector rank, distance and passage; the same query
on two branches side by side) and ask (the answer, its citations linking to node pages, the
attempts).

Both are GET forms, so a query is a URL to share. They call the same functions as ``POST
/api/repos/{repo}/search`` (:func:`kg.rag.search.search_branch`) and ``POST
/api/functions/{repo}/ask/invoke`` (:func:`kg.rag.functions.invoke`, which charges ``ask`` to
the caller's rate limit) as the signed-in key; a bad parameter is the use case's 422.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any

from fastapi import APIRouter, Depends
from fastapi.responses import Response
from markupsafe import Markup, escape

from api.ui.core import ENV, Console, action, page
from kg.errors import InvalidInput
from kg.rag.functions import invoke
from kg.rag.search import MAX_K, SearchRequest, search_branch

router = APIRouter(prefix="/ui/r/{repo}")
PageDep = Annotated[Console, Depends(page)]
ActionDep = Annotated[Console, Depends(action)]

MODES = ("hybrid", "vector", "fulltext")
GRANULARITIES = ("chunk", "node")


_WORD = re.compile(r"\w+")


def highlight(text: str, query: str) -> Markup:
    """``text`` escaped, with the words that start with one of ``query``'s words (two letters
    or more, any case) in ``<mark>``.

    Parameters
    ----------
    text : str
        A passage.
    query : str
        The search's query.

    Returns
    -------
    markupsafe.Markup
        Safe HTML: everything from ``text`` escaped.

    Examples
    --------
    >>> str(highlight("Rotate <b>keys</b> now", "rotating key"))
    'Rotate &lt;b&gt;<mark>keys</mark>&lt;/b&gt; now'
    """
    terms = sorted({w.lower() for w in _WORD.findall(query) if len(w) >= 2}, key=len, reverse=True)
    if not terms:
        return escape(text)
    pattern = re.compile(r"\b(?:" + "|".join(re.escape(t) for t in terms) + r")\w*", re.IGNORECASE)
    out: list[str] = []
    last = 0
    for match in pattern.finditer(text):
        out.append(str(escape(text[last:match.start()])))
        out.append(f"<mark>{escape(match.group())}</mark>")
        last = match.end()
    out.append(str(escape(text[last:])))
    return Markup("".join(out))


ENV.filters["highlight"] = highlight


def _number(name: str, raw: str | None, kind: type[int] | type[float]) -> int | float | None:
    """A numeric query parameter as ``kind`` (None when blank); InvalidInput (422) otherwise."""
    if raw is None or not raw.strip():
        return None
    try:
        value = kind(raw.strip())
    except ValueError:
        noun = "an integer" if kind is int else "a number"
        raise InvalidInput(f"{name} must be {noun}", details={name: raw}) from None
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidInput(f"{name} must be a finite number", details={name: raw})
    return value


def search_request(q: str, *, mode: str | None = None, k: str | None = None, fulltext_weight: str | None = None,
                   vector_weight: str | None = None, max_distance: str | None = None,
                   path_prefix: str | None = None, granularity: str | None = None) -> SearchRequest:
    """The :class:`kg.rag.search.SearchRequest` of the playground's form fields (text, as a URL
    carries them); blank fields take the request's defaults.

    Parameters
    ----------
    q : str
        The query.
    mode, granularity : str, optional
    k : str, optional
        An integer, 1..1000.
    fulltext_weight, vector_weight, max_distance : str, optional
        Numbers.
    path_prefix : str, optional

    Returns
    -------
    SearchRequest

    Raises
    ------
    kg.errors.InvalidInput
        A field that is not a number where one is needed, or any rule of the request
        (:meth:`SearchRequest.parse`, with its message).
    """
    raw: dict[str, Any] = {"query": q}
    for name, value in (("mode", mode), ("granularity", granularity), ("path_prefix", path_prefix)):
        if value is not None and value.strip():
            raw[name] = value.strip()
    for name, text, kind in (("k", k, int), ("fulltext_weight", fulltext_weight, float),
                             ("vector_weight", vector_weight, float), ("max_distance", max_distance, float)):
        number = _number(name, text, kind)
        if number is not None:
            raw[name] = number
    return SearchRequest.parse(raw)


@router.get("/search")
def search(repo: str, console: PageDep, q: str | None = None, branch: str | None = None, compare: str | None = None,
           mode: str | None = None, k: str | None = None, fulltext_weight: str | None = None,
           vector_weight: str | None = None, max_distance: str | None = None, path_prefix: str | None = None,
           granularity: str | None = None) -> Response:
    """The search playground: the form and, with ``q``, the hits on ``branch`` (and on
    ``compare``, side by side)."""
    branch = console.home_branch(repo, branch)
    compare = compare.strip() if compare and compare.strip() else None
    form = {"q": q or "", "branch": branch, "compare": compare or "", "mode": mode or "hybrid", "k": k or "",
            "fulltext_weight": fulltext_weight or "", "vector_weight": vector_weight or "",
            "max_distance": max_distance or "", "path_prefix": path_prefix or "",
            "granularity": granularity or "chunk"}
    columns: list[dict[str, Any]] = []
    if q is not None and q.strip():
        request = search_request(q, mode=mode, k=k, fulltext_weight=fulltext_weight, vector_weight=vector_weight,
                                 max_distance=max_distance, path_prefix=path_prefix, granularity=granularity)
        for name in [branch] + ([compare] if compare else []):
            answer = search_branch(console.services, console.caller, repo, name, request).as_dict()
            columns.append({"branch": name, "results": answer["results"], "took_ms": answer["took_ms"],
                            "fusion": answer.get("fusion"), "warnings": answer.get("warnings", [])})
    return console.render("search.html", section="search", repo=repo, branch=branch, form=form, columns=columns,
                          modes=MODES, granularities=GRANULARITIES, max_k=MAX_K)


@router.get("/ask")
def ask_form(repo: str, console: PageDep, q: str | None = None, branch: str | None = None) -> Response:
    """The ask playground's form (``q`` fills it in). Asking is a POST: ``ask`` is charged to
    the caller's rate limit, and a GET any page can make (an ``<img>``) must spend nothing."""
    return console.render("ask.html", section="ask", repo=repo, branch=console.home_branch(repo, branch), q=q or "",
                          result=None)


@router.post("/ask")
def ask(repo: str, console: ActionDep) -> Response:
    """Ask (the form's CSRF token checked first): the answer, its citations and attempts."""
    q = console.field("q", required=True)
    assert q is not None
    branch = console.home_branch(repo, console.field("branch"))
    answer = invoke(console.services, console.caller, repo, "ask", {"question": q}, branch=branch)
    # The page reads the answer as the API answers it: a key left out is undefined to the template.
    result = answer.model_dump(mode="json", by_alias=True, exclude_unset=True)
    return console.render("ask.html", section="ask", repo=repo, branch=branch, q=q, result=result)
