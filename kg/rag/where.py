"""The ``where`` filter of a search: node property conditions, equality or comparison.

A ``where`` maps property names to conditions. A plain JSON value is equality
(:func:`json_equal`: a boolean never equals a number, objects and arrays compare
as JSON). An object whose keys all start with ``$`` is a set of operators, all of which must
hold, in the MongoDB query language's spelling that vector databases and agents use
(Chroma, LanceDB, pgvector filters): ``$eq``, ``$ne``, ``$in``, ``$nin``, ``$gt``, ``$gte``,
``$lt``, ``$lte``, ``$exists``.

Every condition is checked when the request is made: an unknown operator, an object that mixes
operators with plain keys, or an operand of the wrong kind is an :class:`kg.errors.InvalidInput`
(422), never a filter that silently matches nothing.

References
----------
MongoDB manual, "Query and Projection Operators: Comparison" (the operators' names and
meaning); JSON's value model (RFC 8259) for equality.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from kg.errors import InvalidInput

#: The operators, each with what its operand must be.
OPERATORS: dict[str, str] = {
    "$eq": "any JSON value",
    "$ne": "any JSON value",
    "$in": "an array",
    "$nin": "an array",
    "$gt": "a number or a string",
    "$gte": "a number or a string",
    "$lt": "a number or a string",
    "$lte": "a number or a string",
    "$exists": "true or false",
}

_ORDERED = {"$gt", "$gte", "$lt", "$lte"}


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_operators(value: Any) -> bool:
    return isinstance(value, dict) and bool(value) and any(
        isinstance(k, str) and k.startswith("$") for k in value)


def json_equal(a: Any, b: Any) -> bool:
    """Whether two JSON values are equal as JSON: a boolean never equals a number.

    Python's ``==`` has ``True == 1`` and ``False == 0.0``; JSON (and a ``where`` filter) does
    not. Numbers compare by value (``1 == 1.0``), arrays element-wise, objects key-wise.

    Parameters
    ----------
    a, b : Any
        Values parsed from JSON (None, bool, int, float, str, list, dict).

    Returns
    -------
    bool
        True when equal.

    Examples
    --------
    >>> json_equal(True, 1), json_equal(1, 1.0), json_equal([True], [1])
    (False, True, False)
    """
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a is b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, dict)) or isinstance(b, (list, dict)):
        return False
    return bool(a == b)


def validate_where(where: Mapping[str, Any] | None) -> None:
    """Check every condition of a ``where`` filter.

    Parameters
    ----------
    where : mapping of str to JSON value, optional
        Property name -> a plain value (equality) or an operator object.

    Raises
    ------
    kg.errors.InvalidInput
        A property name that is empty or starts with ``$`` (logical operators such as ``$or``
        are not supported), an object mixing operators with plain keys, an unknown operator,
        or an operand of the wrong kind (``$in`` with a non-array, ``$gt`` with an object or a
        non-finite number, ``$exists`` with a non-boolean). ``details`` names the property.

    Examples
    --------
    >>> validate_where({"status": {"$in": ["draft", "published"]}, "year": {"$gte": 2020}})
    >>> try:
    ...     validate_where({"status": {"$regex": "^pub"}})
    ... except InvalidInput as exc:
    ...     print(exc.message[:40])
    where.status: unknown operator '$regex';
    """
    for name, condition in (where or {}).items():
        if not isinstance(name, str) or not name:
            raise InvalidInput("where: a property name must be a non-empty string",
                               details={"property": repr(name)})
        if name.startswith("$"):
            raise InvalidInput(
                f"where: {name!r} is not a property name; logical operators ($and, $or, $not) are not "
                "supported: the conditions of a where all hold, and a property's operators go in an "
                "object under its name", details={"property": name})
        if not _is_operators(condition):
            continue
        plain = [k for k in condition if not (isinstance(k, str) and k.startswith("$"))]
        if plain:
            raise InvalidInput(f"where.{name}: an object mixes operators with plain keys {plain!r}; "
                               "to match an object value exactly, use {\"$eq\": {...}}",
                               details={"property": name})
        for op, operand in condition.items():
            _check_operand(name, op, operand)


def _check_operand(name: str, op: str, operand: Any) -> None:
    if op not in OPERATORS:
        raise InvalidInput(f"where.{name}: unknown operator {op!r}; the operators are "
                           f"{', '.join(OPERATORS)}", details={"property": name, "operator": op})
    wrong = False
    if op in ("$in", "$nin"):
        wrong = not isinstance(operand, list)
    elif op in _ORDERED:
        # An int of any size is exact (Python compares it with a float exactly); a float must
        # be finite. math.isfinite of a 300-digit int overflows, so ints never reach it.
        wrong = not (isinstance(operand, str) or (isinstance(operand, int) and not isinstance(operand, bool))
                     or (isinstance(operand, float) and math.isfinite(operand)))
    elif op == "$exists":
        wrong = not isinstance(operand, bool)
    if wrong:
        raise InvalidInput(f"where.{name}: {op} takes {OPERATORS[op]}, not {operand!r}",
                           details={"property": name, "operator": op})


def matches(properties: Mapping[str, Any], where: Mapping[str, Any] | None) -> bool:
    """Whether a node's properties meet every condition of a (validated) ``where``.

    Parameters
    ----------
    properties : mapping of str to JSON value
        The node's properties.
    where : mapping, optional
        Checked by :func:`validate_where`; None or empty matches everything.

    Returns
    -------
    bool
        A missing property is ``null`` for equality and ``$ne``/``$nin`` (so ``{"$ne": "x"}``
        matches a node without the property) and matches no order comparison. An order
        comparison holds between two numbers or two strings (code-point order), never across
        kinds. ``$in`` holds when the value equals one element.

    Examples
    --------
    >>> node = {"status": "published", "year": 2021, "draft": False}
    >>> matches(node, {"status": {"$in": ["published", "archived"]}, "year": {"$gte": 2020}})
    True
    >>> matches(node, {"year": {"$lt": "2022"}}), matches(node, {"owner": {"$exists": False}})
    (False, True)
    >>> matches(node, {"draft": 0}), matches(node, {"draft": {"$ne": 0}})
    (False, True)
    """
    for name, condition in (where or {}).items():
        present = name in properties
        value = properties.get(name)
        if not _is_operators(condition):
            if not json_equal(value, condition):
                return False
            continue
        for op, operand in condition.items():
            if not _holds(op, operand, value, present):
                return False
    return True


def _holds(op: str, operand: Any, value: Any, present: bool) -> bool:
    if op == "$eq":
        return bool(json_equal(value, operand))
    if op == "$ne":
        return not json_equal(value, operand)
    if op == "$in":
        return any(json_equal(value, item) for item in operand)
    if op == "$nin":
        return not any(json_equal(value, item) for item in operand)
    if op == "$exists":
        return present is operand
    if _is_number(operand) and _is_number(value):
        pass
    elif not (isinstance(operand, str) and isinstance(value, str)):
        return False
    if op == "$gt":
        return bool(value > operand)
    if op == "$gte":
        return bool(value >= operand)
    if op == "$lt":
        return bool(value < operand)
    return bool(value <= operand)


__all__ = ["OPERATORS", "json_equal", "matches", "validate_where"]
