"""Content hashes: the keys that decide whether a text must be chunked and embedded again.

A node's chunks and vectors depend on its text fields, the chunking settings and the
embedding model, and on nothing else; :func:`content_key` hashes exactly those, so an
unchanged node (same bytes, same settings, same model) is never embedded twice, and any
change to one of the three gives a new key.

Pure code: no I/O.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

import orjson

from kg.errors import InvalidInput

__all__ = ["content_key", "sha256_text"]


def sha256_text(text: str) -> str:
    r"""SHA-256 of a text's UTF-8 bytes.

    Parameters
    ----------
    text : str
        Any text without lone surrogates.

    Returns
    -------
    str
        64 lowercase hex digits.

    Raises
    ------
    kg.errors.InvalidInput
        The text holds a lone surrogate (``"\ud800"``), which has no UTF-8 encoding.

    Examples
    --------
    >>> sha256_text("")
    'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855'
    """
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInput(
            "text holds a lone surrogate and has no UTF-8 encoding",
            details={"offset": exc.start},
        ) from exc
    return hashlib.sha256(data).hexdigest()


def content_key(fields: Mapping[str, str], *, chunking: str, model: str) -> str:
    """Key of a node's embeddable content: its text fields, chunking settings and model.

    Parameters
    ----------
    fields : mapping of str to str
        Text field name -> text (``{"title": ..., "body": ...}``); the order is irrelevant.
    chunking : str
        The chunking fingerprint (:meth:`kg.text.chunking.ChunkingConfig.fingerprint`).
    model : str
        The embedding model name, ``<provider>:<model>``.

    Returns
    -------
    str
        64 lowercase hex digits: SHA-256 of the canonical JSON (keys sorted, no whitespace,
        UTF-8, non-ASCII unescaped) of ``{"chunking": ..., "fields": {...}, "model": ...}``.

    Raises
    ------
    kg.errors.InvalidInput
        A field name or value, ``chunking`` or ``model`` is not a string, or holds a lone
        surrogate.

    Examples
    --------
    >>> key = content_key({"title": "A", "body": "b"}, chunking="words:150:0", model="fake:hash-64")
    >>> key
    '9949fd6d825b95c4e345ee59ce072ddc5ec8df283f2e8ab0d1e43ae7b7b8ee57'
    >>> key == content_key({"body": "b", "title": "A"}, chunking="words:150:0", model="fake:hash-64")
    True
    >>> key == content_key({"title": "A", "body": "b"}, chunking="words:150:0", model="fake:other-64")
    False
    """
    for name, value in fields.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise InvalidInput(
                "text fields must map strings to strings",
                details={"field": repr(name), "type": type(value).__name__},
            )
    if not isinstance(chunking, str) or not isinstance(model, str):
        raise InvalidInput("chunking and model must be strings")
    document = {
        "chunking": chunking,
        "fields": {name: fields[name] for name in sorted(fields)},
        "model": model,
    }
    try:  # orjson writes that canonical JSON byte for byte (tests/unit/test_content_key.py), faster
        return hashlib.sha256(orjson.dumps(document, option=orjson.OPT_SORT_KEYS)).hexdigest()
    except orjson.JSONEncodeError:  # a lone surrogate: refused below as every text is
        pass
    canonical = json.dumps(document, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return sha256_text(canonical)
