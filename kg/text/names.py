"""Entity names: when two spellings name one entity, and when a text names it. Pure.

One rule, used by ``extract-entities`` (which spellings make one entity node,
:mod:`kg.rag.entities`) and by lineage (whether a changed text still names an entity,
:func:`kg.ops.lineage.refresh_derived`), so that an entity extracted from a text is always found in
that text again.

A name is read as a sequence of *tokens*: NFKC, case folded, accents removed (as
:func:`kg.text.slugs.slugify` folds them); letters, digits and marks of any script make
tokens; whitespace, hyphens and dashes, underscores, dots, slashes, quotes, brackets and other
punctuation only separate them. "ECMA-262", "ECMA 262" and "ecma_262" are the tokens
``ecma 262``. The characters in :data:`KEPT` are part of a token, because they change what a
name names: "C++" (``c++``) and "C#" (``c#``) are not "C" (``c``), and a text that says
"C++" does not name "C".
"""

from __future__ import annotations

import unicodedata
from typing import Any

from kg.text.slugs import slugify

__all__ = ["KEPT", "entity_slug", "mentions", "name_key", "name_tokens"]

KEPT = frozenset("+#\u266f")
"""Punctuation that is part of a name's token (``+``, ``#``, ``♯``): "C++", "C#", "C♯"."""

_SPELLED = {"+": " plus ", "#": " sharp ", "\u266f": " sharp "}


def _folded(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).casefold()
    text = "".join(ch for ch in unicodedata.normalize("NFKD", text) if not unicodedata.combining(ch))
    return unicodedata.normalize("NFC", text)


def name_tokens(text: Any) -> tuple[str, ...]:
    """The tokens of a name or a text (see the module's rule).

    Parameters
    ----------
    text : str
        A name or a document's text; anything else has no token.

    Returns
    -------
    tuple of str

    Examples
    --------
    >>> name_tokens("ECMA-262")
    ('ecma', '262')
    >>> name_tokens("Ada  LOVELACE's notes (C++)")
    ('ada', 'lovelace', 's', 'notes', 'c++')
    """
    if not isinstance(text, str):
        return ()
    tokens: list[str] = []
    word: list[str] = []
    for ch in _folded(text):
        if ch.isalnum() or ch in KEPT or unicodedata.category(ch).startswith("M"):
            word.append(ch)
        elif word:
            tokens.append("".join(word))
            word = []
    if word:
        tokens.append("".join(word))
    return tuple(tokens)


def name_key(name: Any) -> str:
    """How names are compared: their tokens joined by one space.

    Parameters
    ----------
    name : str

    Returns
    -------
    str
        Equal for spellings of one name; empty when the name has no letter or digit.

    Examples
    --------
    >>> name_key("ECMA-262") == name_key("ecma 262") == name_key("Ecma_262")
    True
    >>> name_key("C++") == name_key("C"), name_key("C#") == name_key("C++")
    (False, False)
    """
    return " ".join(name_tokens(name))


def mentions(text: str, names: list[str]) -> bool:
    """Whether ``text`` names one of ``names``: a name's tokens occur in the text's tokens, in
    a row (whole tokens: "Adalovelace" does not name "Ada", "C++" does not name "C").

    Parameters
    ----------
    text : str
        The document's text.
    names : list of str
        The entity's name and aliases.

    Returns
    -------
    bool
        True when the tokens of some name with tokens occur in the text.

    Examples
    --------
    >>> mentions("Standardised as ECMA-262 by Ecma.", ["ECMA 262"])
    True
    >>> mentions("Written in C++.", ["C"]), mentions("Written in C.", ["C"])
    (False, True)

    Notes
    -----
    O(len(text) + total length of the names): each name is one substring search in the
    text's tokens, joined and bounded by spaces.
    """
    haystack = f" {name_key(text)} "
    for name in names:
        needle = name_key(name)
        if needle and f" {needle} " in haystack:
            return True
    return False


def entity_slug(name: Any) -> str:
    """The path segment of an entity named ``name``: :func:`kg.text.slugs.slugify`, with the
    characters of :data:`KEPT` spelled out, so that names with other keys get other paths.

    Parameters
    ----------
    name : str

    Returns
    -------
    str
        ``"ECMA-262"`` and ``"ECMA 262"`` -> ``"ecma-262"``; ``"C"`` -> ``"c"``, ``"C++"`` ->
        ``"c-plus-plus"``, ``"C#"`` -> ``"c-sharp"``; ``""`` when the name has no token.

    Examples
    --------
    >>> entity_slug("Guido van Rossum"), entity_slug("C++"), entity_slug("F#")
    ('guido-van-rossum', 'c-plus-plus', 'f-sharp')
    """
    key = name_key(name)
    if not any(ch in KEPT for ch in key):
        return slugify(name)
    return slugify("".join(_SPELLED.get(ch, ch) for ch in key))
