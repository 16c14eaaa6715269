"""Run SQL text: parse it, compile every statement, then run them in order.

Every statement is parsed and compiled, and the caller's permission for each write checked,
before the first one runs, so a text with a statement kg cannot run, or that the key may not
run, runs nothing. Each statement then runs as the use cases it compiled to, a write
in a unit of work of its own (committed when it ends); a statement that fails stops the run,
and its error says which statement it was and how many ran before it (docs/guides/sql.md).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from kg.context import Actor, Resources, permit
from kg.errors import Forbidden, InvalidInput, KGError
from kg.sql.parse import parse
from kg.sql.plan import Plan, Target, plan
from kg.types.sql import MAX_SQL_PARAMS, SqlResponse, SqlStatementResult

#: What ``EXPLAIN`` answers.
EXPLAIN_COLUMNS = ["step", "use_case", "access", "arguments"]


def compile_sql(services: Resources, caller: Actor, repo: str, branch: str, sql: str,
                params: Sequence[Any] = ()) -> list[Plan]:
    """Parse ``sql`` and compile each statement (nothing is read or written).

    Parameters
    ----------
    services : kg.context.Resources
    caller : kg.context.Actor
        Who runs it.
    repo, branch : str
        Where it runs.
    sql : str
        ``;``-separated statements.
    params : sequence
        The values of ``$1``, ``$2``, ...

    Returns
    -------
    list of kg.sql.plan.Plan

    Raises
    ------
    kg.errors.InvalidInput
        A statement kg cannot parse or does not run (the details name the construct, its
        ``line`` and ``column``, and the ``statement``).
    kg.errors.TooLarge
        A text longer than :data:`kg.types.sql.MAX_SQL_CHARS`.
    """
    if len(params) > MAX_SQL_PARAMS:
        raise InvalidInput(f"{len(params)} params, more than {MAX_SQL_PARAMS}", details={"construct": "params"})
    target = Target(services, caller, repo, branch)
    return [plan(target, statement, params) for statement in parse(sql)]


def run_sql(services: Resources, caller: Actor, repo: str, branch: str, sql: str,
            params: Sequence[Any] = (), *, read_only: bool = False) -> SqlResponse:
    """Run ``sql`` on ``branch`` of ``repo`` for ``caller``: the SQL endpoint's use case.

    Parameters
    ----------
    services : kg.context.Resources
    caller : kg.context.Actor
        Who runs it: its key decides what it may read and write, as over HTTP.
    repo, branch : str
        Where it runs.
    sql : str
        ``;``-separated statements (docs/guides/sql.md).
    params : sequence
        The values of ``$1``, ``$2``, ... (bound in the parsed tree).
    read_only : bool
        Refuse every write statement, before anything runs (a read-only MCP server).

    Returns
    -------
    kg.types.sql.SqlResponse
        One result per statement, in order.

    Raises
    ------
    kg.errors.InvalidInput
        A statement kg cannot parse or does not run; nothing ran.
    kg.errors.Forbidden, kg.errors.NotFound
        A write statement while ``read_only``, or one the caller may not make (or a branch or
        workspace it cannot see); nothing ran.
    kg.errors.KGError
        What a statement's use case raised (``details["statement"]`` is its number and
        ``details["statements_run"]`` how many ran before it, each committed).
    """
    plans = compile_sql(services, caller, repo, branch, sql, params)
    for compiled in plans:
        if not compiled.statement.explain:
            for action, on_branch, workspace in compiled.checks:
                try:
                    permit(services, caller, action, repo, on_branch, workspace)
                except KGError as exc:
                    exc.details = {**exc.details, "statement": compiled.statement.index, "statements_run": 0}
                    raise
    if read_only:
        for compiled in plans:
            if compiled.writes and not compiled.statement.explain:
                raise Forbidden(f"statement {compiled.statement.index} writes, and this endpoint is read-only",
                                details={"statement": compiled.statement.index, "statements_run": 0})
    results: list[SqlStatementResult] = []
    for done, compiled in enumerate(plans):
        started = time.perf_counter()
        if compiled.statement.explain:
            columns = EXPLAIN_COLUMNS
            rows = [[i, s.use_case, "write" if s.write else "read", json.dumps(s.arguments, default=str)]
                    for i, s in enumerate(compiled.steps, start=1)]
        else:
            try:
                columns, rows = compiled.execute()
            except KGError as exc:
                exc.details = {**exc.details, "statement": compiled.statement.index, "statements_run": done}
                raise
        # Built here from checked parts: constructed, not validated again (the route's response
        # model checks the answer once, as every route's does).
        results.append(SqlStatementResult.model_construct(
            columns=columns, rows=rows, row_count=len(rows),
            execution_time_ms=round((time.perf_counter() - started) * 1000, 3)))
    return SqlResponse.model_construct(results=results)
