"""The SQL endpoint's request and result models (docs/guides/sql.md): one contract for HTTP, CLI and MCP."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

#: The longest SQL text kg parses (characters); longer is refused before tokenizing.
MAX_SQL_CHARS = 100_000
#: The most ``$n`` parameters a request binds.
MAX_SQL_PARAMS = 1000

HYBRID_EXAMPLE = ("SELECT path, score, fulltext_rank, vector_rank, chunk_text\n"
                  "FROM HYBRID_SEARCH('ERR_CONN_RESET during publish', 10,\n"
                  "                   workspaces => 'knowledge', granularity => 'chunk');")


class SqlRequest(BaseModel):
    """``POST /api/sql/{repo}/{branch}``: ``;``-separated statements and the values of their
    ``$1``, ``$2``... parameters (bound in the parsed tree, never pasted into the text)."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={
        "examples": [{"sql": HYBRID_EXAMPLE, "params": []},
                     {"sql": "SELECT path, chunk_text FROM HYBRID_SEARCH($1, 8, workspaces => 'knowledge', "
                             "granularity => 'chunk')", "params": ["how do I rotate an API key"]}]})

    sql: str = Field(min_length=1, max_length=MAX_SQL_CHARS,
                     description="One or more statements separated by ';' (docs/guides/sql.md).")
    params: list[Any] = Field(default_factory=list, max_length=MAX_SQL_PARAMS,
                              description="The values of $1, $2, ...: strings, numbers, booleans, null, JSON "
                                          "objects and arrays.")


class SqlStatementResult(BaseModel):
    """What one statement answered: its columns, its rows (one list per row, in the columns'
    order), how many rows, and how long it ran."""

    model_config = ConfigDict(extra="forbid")

    columns: list[str]
    rows: list[list[Any]]
    row_count: int
    execution_time_ms: float


class SqlResponse(BaseModel):
    """The answer to a request: one result per statement, in the order they ran."""

    model_config = ConfigDict(extra="forbid")

    results: list[SqlStatementResult]
