"""The SQL screen: a textarea of statements, run on a branch as the signed-in key, each result
as a table. It calls :func:`kg.sql.execute.run_sql`, as ``POST /api/sql/{repo}/{branch}`` does;
running is a POST with the session's CSRF token (a statement may write). A refused statement is
shown on the page with the API's status, code, message and position."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from fastapi.responses import Response

from api.errors import status_for
from api.ui.core import Console, action, page
from kg.errors import KGError
from kg.sql.execute import run_sql
from kg.types.sql import HYBRID_EXAMPLE

router = APIRouter(prefix="/ui/r/{repo}")
PageDep = Annotated[Console, Depends(page)]
ActionDep = Annotated[Console, Depends(action)]


@router.get("/sql")
def sql_form(repo: str, console: PageDep, branch: str | None = None) -> Response:
    """The SQL form, filled with a hybrid search."""
    return console.render("sql.html", section="sql", repo=repo, branch=console.home_branch(repo, branch),
                          sql=HYBRID_EXAMPLE, results=None, error=None)


@router.post("/sql")
def sql_run(repo: str, console: ActionDep) -> Response:
    """Run the form's statements (CSRF checked first): the results, or the refusal."""
    text = console.field("sql", required=True)
    assert text is not None
    branch = console.home_branch(repo, console.field("branch"))
    try:
        results = run_sql(console.services, console.caller, repo, branch, text).results
    except KGError as exc:
        return console.render("sql.html", status=status_for(exc), section="sql", repo=repo, branch=branch,
                              sql=text, results=None,
                              error={"status": status_for(exc), "code": exc.code, "message": exc.message})
    return console.render("sql.html", section="sql", repo=repo, branch=branch, sql=text, results=results,
                          error=None)
