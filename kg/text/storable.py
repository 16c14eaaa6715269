"""Text the store cannot hold: NUL characters (PostgreSQL text cannot hold them) and unpaired
UTF-16 surrogates (not encodable as UTF-8), and JSON nested too deep. Checked on every way in:
HTTP requests (:mod:`api.guard`), console forms, and ``kg import`` files (:mod:`kg.ops.bulk`)."""

from __future__ import annotations

import re
from typing import Any

from kg.errors import InvalidInput, MalformedInput

_BAD_CHARS = re.compile("[\x00\ud800-\udfff]")
MAX_DEPTH = 64


def check_text(value: str, where: str) -> None:
    """Refuse a string with a NUL or a lone surrogate.

    Parameters
    ----------
    value : str
    where : str
        What the string is, for the message (``"the path"``).

    Raises
    ------
    kg.errors.InvalidInput
        The string holds a NUL character or an unpaired UTF-16 surrogate.
    """
    match = _BAD_CHARS.search(value)
    if match:
        what = "a NUL character" if match.group() == "\x00" else "an unpaired UTF-16 surrogate"
        raise InvalidInput(f"{where} contains {what}, which cannot be stored")


def check_json(value: Any, where: str = "the request body", depth: int = 0) -> None:
    """Refuse parsed JSON nested deeper than :data:`MAX_DEPTH`, or holding text the store cannot
    hold (:func:`check_text`), in any key or string.

    Parameters
    ----------
    value : Any
        Parsed JSON.
    where : str
        What it is, for the messages (``"the properties"``).
    depth : int
        How deep ``value`` already is.

    Raises
    ------
    kg.errors.MalformedInput
        Nested deeper than :data:`MAX_DEPTH`.
    kg.errors.InvalidInput
        A NUL character or a lone surrogate.
    """
    if depth > MAX_DEPTH:
        raise MalformedInput(f"JSON nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, str):
        check_text(value, f"a string of {where}")
    elif isinstance(value, dict):
        for key, item in value.items():
            check_text(key, f"a key of {where}")
            check_json(item, where, depth + 1)
    elif isinstance(value, list):
        for item in value:
            check_json(item, where, depth + 1)


__all__ = ["MAX_DEPTH", "check_json", "check_text"]
