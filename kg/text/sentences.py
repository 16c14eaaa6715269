"""Sentence splitting for extractive answers: whole sentences only, never a fragment.

Pure: no I/O, no model.
"""

from __future__ import annotations

import re

__all__ = ["split_sentences", "is_whole"]

#: Words that end with a full stop without ending a sentence (lower-cased, without the stop).
ABBREVIATIONS = frozenset({
    "mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "mt", "ft", "vs", "etc", "e.g", "i.e", "cf", "al",
    "inc", "ltd", "co", "corp", "no", "nos", "vol", "fig", "figs", "eq", "ed", "eds", "approx", "ca", "c",
    "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec", "gen", "gov", "sen",
    "rep", "rev", "hon", "capt", "col", "lt", "sgt", "u.s", "u.k", "a.m", "p.m", "op", "pp", "ch", "sec",
})
_CLOSERS = "\"')]}\u201d\u2019"
_OPENERS = {"(": ")", "[": "]", "{": "}"}
_HEADING_RE = re.compile(r"^\s*(#{1,6}\s|[=\-~^*]{3,}\s*$)")
_LIST_RE = re.compile(r"^\s*([-*+\u2022]|\d+[.)])\s+")
_WORD_RE = re.compile(r"[^\W\d_]+", re.UNICODE)


def _ends_sentence(text: str, i: int) -> bool:
    """Whether the ``.``/``!``/``?`` at ``i`` ends a sentence (not an abbreviation, initial or
    decimal point)."""
    if text[i] in "!?":
        return True
    j = i
    while j > 0 and not text[j - 1].isspace() and text[j - 1] not in "([{\"'":
        j -= 1
    word = text[j:i].lower()
    if word in ABBREVIATIONS:
        return False
    if len(word) == 1 and word.isalpha():  # an initial: "J. R. R. Tolkien"
        return False
    if re.fullmatch(r"(?:[a-z]\.)+[a-z]", word):  # "U.S", "e.g"
        return False
    return True


def _pieces(block: str) -> list[str]:
    """One paragraph or line split at sentence ends outside brackets."""
    out = []
    start = 0
    depth = 0
    stack: list[str] = []
    n = len(block)
    i = 0
    while i < n:
        ch = block[i]
        if ch in _OPENERS:
            stack.append(_OPENERS[ch])
            depth += 1
        elif stack and ch == stack[-1]:
            stack.pop()
            depth -= 1
        elif ch in ".!?" and depth == 0 and _ends_sentence(block, i):
            k = i + 1
            while k < n and block[k] in ".!?" + _CLOSERS:
                k += 1
            if k >= n:
                break
            if block[k].isspace():
                m = k
                while m < n and block[m].isspace():
                    m += 1
                nxt = block[m] if m < n else ""
                if not nxt or nxt.isupper() or nxt.isdigit() or nxt in "\"'([\u201c\u2018":
                    out.append(block[start:k])
                    start = m
                    i = m
                    continue
        i += 1
    out.append(block[start:])
    return out


def is_whole(sentence: str) -> bool:
    """Whether ``sentence`` reads as a whole sentence: it starts with a capital, a digit, a quote
    or an opening bracket, ends with ``.``, ``!`` or ``?`` (perhaps inside a closing quote or
    bracket), has balanced brackets and at least three words."""
    s = sentence.strip()
    if not s or len(_WORD_RE.findall(s)) < 3:
        return False
    first = s[0]
    if not (first.isupper() or first.isdigit() or first in "\"'([\u201c\u2018`*_"):
        return False
    if s.rstrip(_CLOSERS + "*_`")[-1:] not in (".", "!", "?"):
        return False
    return all(s.count(o) == s.count(c) for o, c in _OPENERS.items())


def split_sentences(text: str, *, whole_only: bool = True) -> list[str]:
    """Split ``text`` into sentences, in order, whitespace collapsed.

    A sentence ends at ``.``, ``!`` or ``?`` (with any closing quotes or brackets after it)
    followed by white space and a capital, digit, quote or opening bracket, never inside
    brackets, after a known abbreviation (``e.g.``, ``Dr.``, ``Inc.``) or after an initial
    (``J. R. R.``); a blank line, a heading line and a list item always end one.

    Parameters
    ----------
    text : str
        A passage (a chunk of a document: it may start or end mid-sentence).
    whole_only : bool
        Keep only whole sentences (:func:`is_whole`): the piece cut at a chunk boundary, a
        heading, a list label or a fragment of two words is dropped.

    Returns
    -------
    list of str

    Notes
    -----
    O(len(text)). The rules are those of rule-based splitters such as Punkt's orthographic
    heuristics without its trained parameters (Kiss and Strunk 2006, "Unsupervised
    Multilingual Sentence Boundary Detection", Computational Linguistics 32(4)), with a
    bracket-depth rule so that a parenthesis is never cut.
    """
    blocks: list[str] = []
    for paragraph in re.split(r"\n\s*\n", text):
        lines = paragraph.split("\n")
        current: list[str] = []
        for line in lines:
            if _HEADING_RE.match(line) or _LIST_RE.match(line):
                if current:
                    blocks.append(" ".join(current))
                current = [] if _HEADING_RE.match(line) else [_LIST_RE.sub("", line)]
                continue
            current.append(line)
        if current:
            blocks.append(" ".join(current))
    sentences = []
    for block in blocks:
        for piece in _pieces(" ".join(block.split())):
            piece = piece.strip()
            if piece and (not whole_only or is_whole(piece)):
                sentences.append(piece)
    return sentences
