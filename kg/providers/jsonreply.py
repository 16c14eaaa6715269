"""Read the JSON value out of an LLM reply that was asked for JSON (CASES #18).

Models asked for JSON answer, in the field, with a ``<think>`` block first, the JSON in a
fenced ````` ```json ````` block, prose before or after it, the JSON Schema echoed back
instead of an answer, or garbage. :func:`parse_json_reply` takes the first of these apart
and refuses the rest with a :class:`~kg.errors.ProviderError` whose ``details["reason"]``
says why, so that the caller records a failure instead of writing half a graph.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from kg.errors import ProviderError

__all__ = ["parse_json_reply", "REASONS"]

#: The values of ``details["reason"]`` of a refused reply.
REASONS = ("not_text", "empty", "no_json", "echoed_schema", "schema_mismatch")

_THINK_BLOCK_RE = re.compile(r"<(think|thinking)\b[^>]*>.*?</\1\s*>", re.IGNORECASE | re.DOTALL)
_THINK_CLOSE_RE = re.compile(r"</(?:think|thinking)\s*>", re.IGNORECASE)
_THINK_OPEN_RE = re.compile(r"<(?:think|thinking)\b[^>]*>", re.IGNORECASE)
# A fenced block, optionally labelled json; an unclosed fence runs to the end of the text.
_FENCE_RE = re.compile(r"```[ \t]*(?:json5?|jsonc|JSON)?[ \t]*\r?\n?(.*?)(?:```|\Z)", re.DOTALL)
_MAX_STARTS = 1000  # candidate '{' / '[' positions tried; bounds the work on garbage
_EXCERPT = 200
_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
}
_SCHEMA_KEYWORDS = frozenset({
    "$schema", "$id", "$defs", "definitions", "properties", "required", "additionalProperties",
    "items", "type", "enum", "title", "description",
})


def parse_json_reply(text: str, *, schema: dict | None = None) -> dict | list:
    """The JSON object or array an LLM reply holds.

    Parameters
    ----------
    text : str
        The reply, as :meth:`kg.providers.llm.LLM.chat` returned it.
    schema : dict, optional
        The JSON Schema the reply was asked to follow. When given, a candidate must pass
        the checks below, and one that is the schema itself (or another JSON Schema) is
        refused as echoed.

    Returns
    -------
    dict or list
        The first candidate that passes, in this order: the whole text; each fenced
        block (````` ```json ... ``` `````, also an unclosed one); each balanced top-level
        ``{...}`` or ``[...]`` in the text, left to right.

    Raises
    ------
    kg.errors.ProviderError
        Nothing usable; ``details["reason"]`` is one of :data:`REASONS`: ``"not_text"``,
        ``"empty"`` (nothing left once ``<think>`` is removed), ``"no_json"`` (garbage),
        ``"echoed_schema"``, ``"schema_mismatch"`` (``details["errors"]`` lists the first
        failures). ``details["excerpt"]`` holds the start of the reply. Never raises
        anything else.

    Notes
    -----
    ``<think>...</think>`` (and ``<thinking>``) blocks are removed first; a closing tag
    without its opening one (the template opened it) drops everything before it; an
    opening tag that is never closed (the model stopped while thinking, or forgot) is
    removed and the candidates are then tried from the *last* one back, since drafts come
    before the answer.

    The schema checks are deliberately shallow: the type of the root, its ``required``
    keys, and the ``type`` and ``enum`` of each top-level property present. Unknown keys
    are kept. Checking items (a relation to an entity not in the list, say) is the
    caller's job. ``NaN`` and ``Infinity`` literals are not JSON and are refused.

    Cost: O(n) for a well-formed reply; at most 1,000 candidate starts are tried, each
    O(n), on a reply of n characters.
    """
    try:
        return _parse(text, schema)
    except ProviderError:
        raise
    except Exception as exc:  # a guard: this function must only ever raise ProviderError
        raise _refuse("no_json", f"unreadable reply ({type(exc).__name__}: {exc})", text) from exc


def _parse(text: Any, schema: dict | None) -> dict | list:
    """parse_json_reply without the guard."""
    if not isinstance(text, str):
        raise _refuse("not_text", f"the reply is a {type(text).__name__}, not text", None)
    body, from_end = _strip_think(text)
    if not body.strip():
        raise _refuse("empty", "the reply is empty once its <think> block is removed", text)
    if not isinstance(schema, dict):
        schema = None
    candidates = list(_candidates(body))
    if not candidates:
        raise _refuse("no_json", "the reply holds no JSON object or array", text)
    if from_end:
        candidates.reverse()
    echoed = False
    first_errors: list[str] = []
    for value in candidates:
        if _is_echo(value, schema):
            echoed = True
            continue
        if schema is not None:
            errors = _check(value, schema)
            if errors:
                first_errors = first_errors or errors
                continue
        return value
    if echoed and not first_errors:
        raise _refuse("echoed_schema", "the reply echoes the JSON Schema instead of answering", text)
    raise _refuse(
        "schema_mismatch",
        f"the reply does not follow the schema: {'; '.join(first_errors[:5])}",
        text,
        errors=first_errors[:20],
    )


def _refuse(reason: str, message: str, text: str | None, **extra: Any) -> ProviderError:
    """The ProviderError of a refused reply."""
    details: dict[str, Any] = {"reason": reason, **extra}
    if text is not None:
        details["excerpt"] = text[:_EXCERPT]
    return ProviderError(f"unusable LLM reply: {message}", details=details)


def _strip_think(text: str) -> tuple[str, bool]:
    """Remove <think> blocks; True when an unclosed one means 'prefer the last candidate'."""
    body = _THINK_BLOCK_RE.sub(" ", text)
    closes = list(_THINK_CLOSE_RE.finditer(body))
    if closes:
        body = body[closes[-1].end():]
    opened = _THINK_OPEN_RE.search(body)
    if opened:
        return body[: opened.start()] + " " + body[opened.end():], True
    return body, False


def _candidates(body: str) -> Iterator[dict | list]:
    """JSON objects and arrays in ``body``: whole, fenced blocks, then balanced spans."""
    seen: set[str] = set()

    def emit(value: Any) -> Iterator[dict | list]:
        if isinstance(value, (dict, list)):
            key = json.dumps(value, sort_keys=True)
            if key not in seen:
                seen.add(key)
                yield value

    whole = _loads(body.strip())
    if whole is not _NOTHING:
        yield from emit(whole)
        return
    for match in _FENCE_RE.finditer(body):
        block = match.group(1).strip()
        value = _loads(block)
        if value is not _NOTHING:
            yield from emit(value)
        else:
            for value in _balanced(block):
                yield from emit(value)
    for value in _balanced(body):
        yield from emit(value)


def _balanced(text: str) -> Iterator[Any]:
    """Each top-level JSON object or array in ``text``, left to right.

    A ``{`` or ``[`` opens a candidate only at bracket depth 0, so the inner objects of a
    cut-off reply (``{"entities": [{"name": "A"}, {"na``) are not taken for the answer.
    """
    decoder = json.JSONDecoder(parse_constant=_no_constant)
    depth, starts, index, size = 0, 0, 0, len(text)
    in_string = escaped = False
    while index < size:
        char = text[index]
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char in "{[":
            if depth == 0:
                if starts >= _MAX_STARTS:
                    return
                starts += 1
                try:
                    value, end = decoder.raw_decode(text, index)
                except (ValueError, RecursionError):
                    pass
                else:
                    yield value
                    index = end
                    continue
            depth += 1
        elif char in "}]":
            depth = max(0, depth - 1)
        elif char == '"' and depth > 0:
            in_string = True
        index += 1


class _Nothing:
    """Marker of a text that is not JSON."""


_NOTHING = _Nothing()


def _loads(text: str) -> Any:
    """The JSON value of ``text``, or _NOTHING."""
    if not text or text[0] not in "{[":
        return _NOTHING
    try:
        return json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        return _NOTHING


def _no_constant(name: str) -> Any:
    """Refuse NaN, Infinity and -Infinity, which are not JSON."""
    raise ValueError(f"{name} is not JSON")


def _is_echo(value: Any, schema: dict | None) -> bool:
    """True for the schema given, for a "$schema" document, or for an object that looks
    like a JSON Schema and does not pass the checks of the one given."""
    if not isinstance(value, dict):
        return False
    if (schema is not None and value == schema) or "$schema" in value:
        return True
    if not _looks_like_schema(value, schema):
        return False
    return schema is None or bool(_check(value, schema))


def _looks_like_schema(value: dict, schema: dict | None) -> bool:
    """True for an object of JSON Schema keywords whose ``properties`` describe fields."""
    properties = value.get("properties")
    if not isinstance(properties, dict) or value.get("type") not in ("object", None):
        return False
    if not set(value) <= _SCHEMA_KEYWORDS:
        return False
    if schema is not None and isinstance(schema.get("properties"), dict):
        if set(properties) & set(schema["properties"]):
            return True
    return bool(properties) and all(
        isinstance(sub, dict) and ("type" in sub or "$ref" in sub or "enum" in sub)
        for sub in properties.values()
    )


def _check(value: Any, schema: dict) -> list[str]:
    """Failures of ``value`` against the root type, required keys and top-level fields."""
    errors: list[str] = []
    if not _type_ok(value, schema.get("type")):
        return [f"the reply is {_type_name(value)}, expected {schema.get('type')}"]
    if not isinstance(value, dict):
        return errors
    required = schema.get("required")
    if isinstance(required, list):
        errors.extend(f"missing key {key!r}" for key in required if key not in value)
    properties = schema.get("properties")
    if isinstance(properties, dict):
        for key, sub in properties.items():
            if key not in value or not isinstance(sub, dict):
                continue
            if not _type_ok(value[key], sub.get("type")):
                errors.append(f"{key!r} is {_type_name(value[key])}, expected {sub.get('type')}")
            elif isinstance(sub.get("enum"), list) and value[key] not in sub["enum"]:
                errors.append(f"{key!r} is {value[key]!r}, not one of {sub['enum']}")
    return errors


def _type_ok(value: Any, expected: Any) -> bool:
    """Whether ``value`` has the JSON type(s) ``expected`` (None or unknown: any)."""
    if expected is None:
        return True
    names = expected if isinstance(expected, list) else [expected]
    known = [name for name in names if name in _JSON_TYPES]
    if not known:
        return True
    for name in known:
        if isinstance(value, bool) and name not in ("boolean",):
            continue
        if name == "integer" and isinstance(value, float):
            if value.is_integer():
                return True
            continue
        if isinstance(value, _JSON_TYPES[name]):
            return True
    return False


def _type_name(value: Any) -> str:
    """The JSON type name of a parsed value."""
    for name in ("boolean", "null", "object", "array", "string", "integer", "number"):
        if name == "integer" and isinstance(value, float):
            continue
        if name not in ("boolean",) and isinstance(value, bool):
            continue
        if isinstance(value, _JSON_TYPES[name]):
            return name
    return type(value).__name__
