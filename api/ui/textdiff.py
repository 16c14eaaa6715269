"""Readable values for the console: a word-level diff of two strings, side by side, and long values cut
to a readable size.

Every piece of store text is escaped here (:func:`markupsafe.escape` on each token) and the
answer is :class:`markupsafe.Markup`, so templates print it as is. The filters are registered on
the console's Jinja environment when this module is imported (``textdiff_sides``, ``clip``).
"""

from __future__ import annotations

import re
from difflib import SequenceMatcher
from typing import Any

from markupsafe import Markup, escape

from api.ui.core import ENV, pretty

#: Unchanged stretches longer than this many words are collapsed to "… N words …".
COLLAPSE_WORDS = 40
#: Words kept on each side of a change when an unchanged stretch is collapsed.
CONTEXT_WORDS = 12
#: Most characters of one deleted or inserted stretch shown (the rest is counted).
MAX_RUN_CHARS = 20_000
#: Most tokens each side the word matcher compares after the common start and end are taken
#: out; beyond it the changed middle is shown as one deletion and one insertion.
MAX_MATCH_TOKENS = 20_000
#: How much of a long value is shown before it is cut.
CLIP_CHARS = 2_000

_TOKEN = re.compile(r"\s+|\w+|[^\w\s]")


def _words(tokens: list[str]) -> int:
    return sum(1 for t in tokens if not t.isspace())


def _keep(tokens: list[str], words: int, from_end: bool = False) -> int:
    """How many tokens (from the start, or from the end) hold ``words`` words."""
    seen = 0
    order = range(len(tokens) - 1, -1, -1) if from_end else range(len(tokens))
    for n, i in enumerate(order, 1):
        if not tokens[i].isspace():
            seen += 1
            if seen > words:
                return n - 1
    return len(tokens)


def _equal(tokens: list[str], first: bool, last: bool) -> str:
    """An unchanged stretch, collapsed when long (context kept next to the changes)."""
    if _words(tokens) <= COLLAPSE_WORDS:
        return str(escape("".join(tokens)))
    head = 0 if first else _keep(tokens, CONTEXT_WORDS)
    tail = 0 if last else _keep(tokens, CONTEXT_WORDS, from_end=True)
    middle = tokens[head:len(tokens) - tail]
    return (str(escape("".join(tokens[:head])))
            + f'<span class="skip">… {_words(middle):,} words …</span>'
            + str(escape("".join(tokens[len(tokens) - tail:]))))


def _run(tag: str, cls: str, tokens: list[str]) -> str:
    text = "".join(tokens)
    if not text:
        return ""
    more = ""
    if len(text) > MAX_RUN_CHARS:
        more = f'<span class="skip">… {len(text) - MAX_RUN_CHARS:,} more characters …</span>'
        text = text[:MAX_RUN_CHARS]
    return f'<{tag} class="{cls}">{escape(text)}{more}</{tag}>'


def _diff_ops(old: str, new: str) -> list[tuple[str, list[str], list[str]]]:
    """Word-level opcodes (``equal`` with the tokens once, else the old and the new tokens)."""
    a, b = _TOKEN.findall(old), _TOKEN.findall(new)
    start = 0
    while start < len(a) and start < len(b) and a[start] == b[start]:
        start += 1
    end = 0
    while end < len(a) - start and end < len(b) - start and a[-1 - end] == b[-1 - end]:
        end += 1
    mid_a, mid_b = a[start:len(a) - end], b[start:len(b) - end]
    ops: list[tuple[str, list[str], list[str]]] = []
    if start:
        ops.append(("equal", a[:start], []))
    if len(mid_a) > MAX_MATCH_TOKENS or len(mid_b) > MAX_MATCH_TOKENS:
        ops.append(("replace", mid_a, mid_b))
    else:
        matcher = SequenceMatcher(None, mid_a, mid_b, autojunk=False)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            ops.append((tag, mid_a[i1:i2], mid_b[j1:j2]))
    if end:
        ops.append(("equal", a[len(a) - end:], []))
    return ops


def _render(ops: list[tuple[str, list[str], list[str]]], old: bool, new: bool) -> Markup:
    parts = []
    for n, (op, left, right) in enumerate(ops):
        if op == "equal":
            parts.append(_equal(left, first=n == 0, last=n == len(ops) - 1))
        else:
            parts.append((_run("del", "old", left) if old else "") + (_run("ins", "new", right) if new else ""))
    return Markup("".join(parts))


def text_diff_sides(old: str, new: str) -> tuple[Markup, Markup]:
    """A word-level diff of two strings for an old and a new column: the old text with its
    deletions in ``<del class="old">``, the new text with its insertions in
    ``<ins class="new">``, the same long unchanged stretches collapsed to ``… N words …`` on
    both; for a container with ``white-space: pre-wrap`` (newlines stay line breaks). Every
    token is escaped.

    Parameters
    ----------
    old, new : str

    Returns
    -------
    tuple of Markup
        ``(old side, new side)``.

    Notes
    -----
    Python's :class:`difflib.SequenceMatcher` over word, space and punctuation tokens (the
    Ratcliff-Obershelp algorithm), after the common start and end are taken out.

    Examples
    --------
    >>> [str(side) for side in text_diff_sides("the quick fox", "the slow fox")]
    ['the <del class="old">quick</del> fox', 'the <ins class="new">slow</ins> fox']
    >>> str(text_diff_sides("a <b>", "a <i>")[1])
    'a &lt;<ins class="new">i</ins>&gt;'
    >>> long = " ".join(f"w{i}" for i in range(100))
    >>> all("… 88 words …" in side for side in text_diff_sides(long + " end", long + " END"))
    True
    """
    ops = _diff_ops(old, new)
    return _render(ops, old=True, new=False), _render(ops, old=False, new=True)


def clip(value: Any, cls: str = "", limit: int = CLIP_CHARS) -> Markup:
    """A value as indented JSON in a ``<pre>``; when longer than ``limit`` characters, its start
    and the whole value in a ``<details>``.

    Examples
    --------
    >>> str(clip({"a": 1}))
    '<pre>{\\n  &#34;a&#34;: 1\\n}</pre>'
    >>> "<details" in clip("x" * 3000)
    True
    """
    text = pretty(value)
    attr = f' class="{escape(cls)}"' if cls else ""
    if len(text) <= limit:
        return Markup(f"<pre{attr}>{escape(text)}</pre>")
    return Markup(f'<pre class="clipped {escape(cls)}">{escape(text[:limit])}<span class="skip">…</span></pre>'
                  f'<details class="whole"><summary>the whole value ({len(text):,} characters)</summary>'
                  f"<pre>{escape(text)}</pre></details>")


ENV.filters["textdiff_sides"] = text_diff_sides
ENV.filters["clip"] = clip
