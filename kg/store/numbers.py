"""JSON integers as JSON Schema counts them: ``60`` and ``60.0`` are the same integer.

JSON has one number type; JSON Schema's ``integer`` is any number with a zero fractional part,
so a client (or a JSON encoder that writes every number as a float) may send ``60.0`` where an
integer is asked. Request models are strict (nothing else is coerced): :data:`Integer` takes a
float with no fraction as the integer it is, and still refuses ``60.5``, ``"60"`` and ``true``.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator


def integral(value: Any) -> Any:
    """``int(value)`` for a finite float equal to an integer, else ``value`` unchanged (for the
    strict ``int`` validation that follows).
    """
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


#: A request field's integer: an ``int``, or a float with no fraction (``60.0``), as JSON
#: Schema's ``integer`` admits; a fraction, a string or a boolean is refused.
Integer = Annotated[int, BeforeValidator(integral)]

__all__ = ["Integer", "integral"]
