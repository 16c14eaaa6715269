"""Slugs: the path segment of a name (entity names, imported memory entities). Pure."""

from __future__ import annotations

import unicodedata
from typing import Any

__all__ = ["MAX_SLUG_CHARS", "slugify"]

MAX_SLUG_CHARS = 120
"""Longest slug, in characters."""


def slugify(name: Any) -> str:
    """The path segment of an entity name: case, spacing, accents and punctuation folded.

    NFKC normalisation, case folding, accents removed (NFKD without combining marks), then
    every run of characters that are not letters or digits becomes one ``-``, trimmed at
    both ends, at most 120 characters.

    Parameters
    ----------
    name : str

    Returns
    -------
    str
        ``"Guido van Rossum"``, ``"guido  van rossum."`` -> ``"guido-van-rossum"``;
        ``"AC/DC"`` -> ``"ac-dc"``; ``""``, ``".."`` or a non-string -> ``""`` (no entity).
        Letters of any script are kept (``"東京"`` stays ``"東京"``), so the slug is always a
        single safe path segment: no ``/``, no ``.``, no whitespace, no control character.
    """
    if not isinstance(name, str):
        return ""
    text = unicodedata.normalize("NFKC", name).casefold()
    text = "".join(ch for ch in unicodedata.normalize("NFKD", text) if not unicodedata.combining(ch))
    text = unicodedata.normalize("NFC", text)
    out: list[str] = []
    dash = False
    for ch in text:
        if ch.isalnum():
            out.append(ch)
            dash = False
        elif not dash:
            out.append("-")
            dash = True
    slug = "".join(out).strip("-")
    if len(slug) > MAX_SLUG_CHARS:
        slug = slug[:MAX_SLUG_CHARS].rstrip("-")
    return slug
