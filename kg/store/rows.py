"""Rows written in bulk: columns bound once and sent by the driver's bulk path.

Shared by the writes that store many rows at once (``kg import ndjson``, a batch of node
upserts): an executemany (SQLite), a ``COPY`` (PostgreSQL), no ORM object and no flush per row.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import JSON, Table, func, insert, select, text
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from kg.errors import KGError
from kg.store.models import Base, NodeVersion

__all__ = ["execute_rows", "insert_node_versions", "insert_rows"]


def insert_rows(session: Session, table: Any, columns: Mapping[str, Sequence[Any]], *,
                 conflict: tuple[str, ...] | None = None, **constant: Any) -> None:
    """Insert rows given as ``columns`` (equal lengths; plus the ``constant`` columns) into
    ``table`` by the driver's bulk path; with ``conflict``, rows whose key exists are skipped.

    Values are bound by each column's bind processor, a column at a time, then written by one
    ``cursor.executemany`` on SQLite, one ``COPY ... FROM STDIN`` (psycopg) on PostgreSQL,
    SQLAlchemy's executemany elsewhere (and for ``conflict`` on PostgreSQL, which COPY cannot
    skip): the per-row parameter handling of a compiled statement is spared (and on PostgreSQL
    a protocol round per row: 100,000 relations took 7.1 s through psycopg's executemany
    pipeline); the stored values are the same.

    Raises
    ------
    kg.errors.KGError
        The connection was closed under the write (PostgreSQL).
    """
    n = len(next(iter(columns.values())))
    if not n:
        return
    connection = session.connection()
    dialect = connection.dialect
    names = [c.name for c in table.c if c.name in columns or c.name in constant]
    if dialect.name not in ("sqlite", "postgresql") or (conflict and dialect.name == "postgresql"):
        stmt = insert(table) if not conflict else _conflict_insert(dialect.name, table.name, conflict)
        session.execute(stmt, [{name: constant[name] if name in constant else columns[name][i] for name in names}
                               for i in range(n)])
        return
    bound: list[Sequence[Any]] = []
    for name in names:
        values: Sequence[Any] = [constant[name]] * n if name in constant else columns[name]
        process = table.c[name].type.dialect_impl(dialect).bind_processor(dialect)
        if process is not None and isinstance(table.c[name].type, JSON):
            # An empty JSON object, the usual relation properties, binds as the text "{}" always.
            empty = process({})
            values = [None if v is None else empty if v == {} else process(v) for v in values]
        elif process is not None:
            # Timestamps, flags and numbers repeat (one import time for every row): bound once each.
            memo: dict[Any, Any] = {}
            values = [None if v is None else memo[v] if v in memo else memo.setdefault(v, process(v))
                      for v in values]
        bound.append(values)
    quote = dialect.identifier_preparer.quote
    listed = ", ".join(quote(n) for n in names)
    if dialect.name == "postgresql":
        driver = connection.connection.driver_connection  # psycopg's, inside this transaction
        if driver is None:
            raise KGError("the database connection is closed")
        with driver.cursor() as cursor, cursor.copy(f"COPY {quote(table.name)} ({listed}) FROM STDIN") as copy:
            for row in zip(*bound, strict=True):
                copy.write_row(row)
        return
    skip = f" ON CONFLICT ({', '.join(quote(c) for c in conflict)}) DO NOTHING" if conflict else ""
    sql = f"INSERT INTO {quote(table.name)} ({listed}) VALUES ({', '.join('?' * len(names))}){skip}"
    connection.exec_driver_sql(sql, list(zip(*bound, strict=True)))


@functools.lru_cache(maxsize=8)
def _conflict_insert(dialect: str, table: str, conflict: tuple[str, ...]) -> Any:
    """An insert into ``table`` that skips the rows whose ``conflict`` key exists."""
    make = pg_insert if dialect == "postgresql" else sqlite_insert
    return make(Base.metadata.tables[table]).on_conflict_do_nothing(index_elements=list(conflict))


@functools.lru_cache(maxsize=4)
def _returning_insert(dialect: str) -> Any:
    """The node-version insert returning ids in parameter order (batched ``INSERT ... RETURNING``)."""
    table: Table = NodeVersion.__table__  # type: ignore[assignment]
    return insert(table).returning(table.c.id, sort_by_parameter_order=True)


def insert_node_versions(session: Session, columns: dict[str, list[Any]], revision: int, **constant: Any) -> list[int]:
    """Insert node versions (columns, plus the ``constant`` ones) at ``revision``; their ids, in order.

    SQLite has no ordered ``RETURNING`` for many rows, so the ids are given: the transaction holds
    the write lock (``BEGIN IMMEDIATE``) and a rowid table without AUTOINCREMENT gives a new row
    the largest id plus one. PostgreSQL's come from the sequence in one statement, then the rows
    are copied in.
    """
    n = len(columns["node_id"])
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        ids = list(session.scalars(text("SELECT nextval(pg_get_serial_sequence('node_versions', 'id')) "
                                        "FROM generate_series(1, :n)"), {"n": n}))
    elif dialect == "sqlite":
        top = session.scalar(select(func.max(NodeVersion.id))) or 0
        ids = list(range(top + 1, top + 1 + n))
    else:
        rows = [{**{name: column[i] for name, column in columns.items()}, **constant, "revision": revision}
                for i in range(n)]
        return list(session.execute(_returning_insert(dialect), rows).scalars())
    insert_rows(session, NodeVersion.__table__, {**columns, "id": ids}, revision=revision, **constant)
    return ids



def execute_rows(session: Session, stmt: Any, rows: Sequence[Mapping[str, Any]]) -> None:
    """Execute ``stmt`` (a Core statement built once, its values named bound parameters) for each
    of ``rows`` by one ``cursor.executemany`` of the driver: compiled once per dialect, each value
    bound by its parameter's type, a parameter not in a row taking the statement's own value. What
    SQLAlchemy's executemany does, without its parameter handling per row (20 us a row: a small
    write's 100 embedding jobs). Not for expanding (``IN``) parameters.

    Raises
    ------
    ValueError
        A statement leaving a column's default to Python, or returning rows; rows without a
        value the statement does not hold (it would be NULL, not the column's default).
    """
    if not rows:
        return
    connection = session.connection()
    sql, names, constants, processors = _compiled(stmt, connection.dialect)
    missing = sorted(name for name in names if name not in rows[0] and constants[name] is _REQUIRED)
    if missing:
        raise ValueError(f"execute_rows takes rows that name every value the statement does not: {missing}")
    bound = []
    for row in rows:
        values = [row[name] if name in row else constants[name] for name in names]
        bound.append([value if process is None or value is None else process(value)
                      for value, process in zip(values, processors, strict=True)])
    if connection.dialect.paramstyle in ("qmark", "numeric", "format"):
        connection.exec_driver_sql(sql, [tuple(values) for values in bound])
    else:
        connection.exec_driver_sql(sql, [dict(zip(names, values, strict=True)) for values in bound])


_REQUIRED: Any = object()  # a parameter without a value in the statement: each row must give it


@functools.lru_cache(maxsize=32)
def _compiled(stmt: Any, dialect: Any) -> tuple[str, list[str], dict[str, Any], list[Any]]:
    """``stmt`` compiled for ``dialect``: its SQL, its parameters' names (in position order where
    the driver's style is positional), their values in the statement, their bind processors."""
    compiled = stmt.compile(dialect=dialect, for_executemany=True)  # no implicit RETURNING
    if compiled.insert_prefetch or compiled.update_prefetch or compiled.implicit_returning:
        raise ValueError("execute_rows takes statements that name every value and return nothing: a column "
                         "default computed in Python at execution would not be applied")
    binds = {name: bind for bind, name in compiled.bind_names.items()}
    names = list(compiled.positiontup) if compiled.positiontup is not None else list(binds)
    constants = {name: _REQUIRED if binds[name].required else binds[name].value for name in names}
    processors = [binds[name].type.dialect_impl(dialect).bind_processor(dialect) for name in names]
    return str(compiled), names, constants, processors
