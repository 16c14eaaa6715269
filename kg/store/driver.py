"""Statements a read runs on every request, executed on the database driver's own cursor.

A Core statement through SQLAlchemy costs 50-90 µs of Python on SQLite (an execution context,
parameter processing, a result object, a row processor per column), about what the statement
itself costs the database 20 times over: the few statements every search or NEIGHBORS runs (the
branch view's check, the hits' properties) are compiled once per dialect by SQLAlchemy and
executed on the DBAPI connection of the session's transaction (the same snapshot, the same
transaction), their rows read as plain tuples. Only columns whose driver values need no
conversion, or whose conversion the caller does (:func:`json_value`), are read this way.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from typing import Any, cast

import orjson
from sqlalchemy import Connection
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import Session
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.compiler import SQLCompiler


class DriverStatement:
    """A statement compiled once per dialect, run on the driver's cursor.

    Parameters
    ----------
    statement : ClauseElement
        A Core statement with named bind parameters (no expanding ``IN``: see
        :func:`in_list_statement`).

    Examples
    --------
    >>> from sqlalchemy import bindparam, create_engine, text
    >>> engine = create_engine("sqlite://")
    >>> statement = DriverStatement(text("select :a + 1, :b").bindparams(bindparam("a"), bindparam("b")))
    >>> with engine.connect() as connection:
    ...     statement.rows(connection, {"a": 41, "b": "x"})
    [(42, 'x')]
    """

    def __init__(self, statement: ClauseElement) -> None:
        self.statement = statement
        self._compiled: dict[str, tuple[str, tuple[str, ...] | None]] = {}
        self._lock = threading.Lock()

    def _sql_for(self, dialect: Dialect) -> tuple[str, tuple[str, ...] | None]:
        held = self._compiled.get(dialect.name)
        if held is None:
            compiled = cast(SQLCompiler, self.statement.compile(dialect=dialect))
            order = tuple(compiled.positiontup) if compiled.positional and compiled.positiontup else None
            held = (compiled.string, order)
            with self._lock:
                self._compiled[dialect.name] = held
        return held

    def rows(self, connection: Connection, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        """The statement's rows as the driver returns them, in ``connection``'s transaction."""
        return self._run(connection.connection.driver_connection, connection.dialect, params)

    def rows_in(self, session: Session, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        """The statement's rows in the read ``session``: on the connection its
        ``kg_driver()`` gives when it has one (:meth:`kg.store.db.Database.read_lazily`), else
        in its transaction."""
        driver = getattr(session, "kg_driver", None)
        if driver is None:
            return self.rows(session.connection(), params)
        connection, dialect = driver()
        return self._run(connection, dialect, params)

    def _run(self, driver: Any, dialect: Dialect, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        sql, order = self._sql_for(dialect)
        arguments: Any = tuple(params[name] for name in order) if order is not None else dict(params)
        cursor = driver.cursor()
        try:
            cursor.execute(sql, arguments)
            return list(cursor.fetchall())
        finally:
            cursor.close()


def in_list_statement(make: Any, cache: dict[int, DriverStatement], count: int) -> DriverStatement:
    """The :class:`DriverStatement` of ``make(names)`` for ``count`` bind parameters named ``i0``,
    ``i1``, ...: an ``IN`` list of a given length, compiled once per length."""
    held = cache.get(count)
    if held is None:
        held = cache[count] = DriverStatement(make([f"i{j}" for j in range(count)]))
    return held


#: orjson reads an integer past 64 bits as a float: a whole float this large is read again.
_LONG_FLOAT = 2.0**63


def json_value(value: Any) -> Any:
    """A JSON column's driver value decoded as SQLAlchemy's ``JSON`` type decodes it: PostgreSQL's
    driver hands back objects, SQLite's text (orjson; the standard library, SQLAlchemy's own
    decoder, for what orjson reads otherwise: an integer past 64 bits, ``NaN``).

    Examples
    --------
    >>> json_value('{"a": [1, 2.5, null]}'), json_value({"a": 1})
    ({'a': [1, 2.5, None]}, {'a': 1})
    >>> json_value('{"big": [123456789012345678901234567890]}')
    {'big': [123456789012345678901234567890]}
    """
    if isinstance(value, bytes):
        value = value.decode()
    if not isinstance(value, str):
        return value
    try:
        decoded = orjson.loads(value)
    except orjson.JSONDecodeError:
        return json.loads(value)
    return json.loads(value) if _long_float(decoded) else decoded


def _long_float(value: Any) -> bool:
    """Whether a decoded JSON value holds a whole float of magnitude 2**63 or more."""
    kind = type(value)
    if kind is float:
        return bool(abs(value) >= _LONG_FLOAT and value.is_integer())
    if kind is dict:
        value = value.values()
    elif kind is not list:
        return False
    for item in value:
        kind = type(item)
        if (kind is float or kind is dict or kind is list) and _long_float(item):
            return True
    return False


def in_params(values: Sequence[Any]) -> dict[str, Any]:
    """``{"i0": values[0], ...}``: the parameters of an :func:`in_list_statement`."""
    return {f"i{j}": value for j, value in enumerate(values)}
