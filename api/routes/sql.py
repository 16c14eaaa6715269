"""SQL: the content-database guide's statements, compiled to kg's use cases (docs/guides/sql.md)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from api.deps import BranchP, CallerDep, RepoP, ServicesDep
from api.guard import GuardedRoute
from kg.sql.execute import run_sql
from kg.types import ErrorBody
from kg.types.sql import SqlRequest, SqlResponse

router = APIRouter(route_class=GuardedRoute, prefix="/api/sql", tags=["sql"])

_REFUSALS: dict[int | str, dict[str, Any]] = {
    403: {"model": ErrorBody, "description": "A statement the key may not run (a write with a read-only key)."},
    422: {"model": ErrorBody, "description": "A statement kg cannot parse or does not run: `details` names the "
                                             "`construct`, its `line` and `column`, and the `statement`."},
}


@router.post("/{repo}/{branch:path}", response_model=SqlResponse, responses=_REFUSALS, summary="Run SQL statements")
def sql_route(repo: RepoP, branch: BranchP, body: SqlRequest, services: ServicesDep, caller: CallerDep) -> dict:
    """Run `;`-separated statements on the branch, in order: one result per statement,
    `{"results": [{"columns", "rows", "row_count", "execution_time_ms"}]}`. Every statement is
    checked before the first runs; each runs as the use cases the HTTP routes call (docs/guides/sql.md)."""
    return run_sql(services, caller, repo, branch, body.sql, body.params).model_dump()
