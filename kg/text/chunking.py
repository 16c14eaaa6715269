"""Chunkers: split a text into passages whose spans slice the source exactly.

Five splitters share one :class:`Chunk` type and one set of guarantees:

- ``chunk.text == source[chunk.start:chunk.end]``, always;
- no chunk is empty or whitespace-only, and a text of only whitespace gives ``[]``;
- chunks come in order (non-decreasing ``start`` and ``end``), and every non-whitespace
  character of the source lies inside some chunk's span;
- every chunk measures at most ``chunk_size`` units (characters, tokens or words);
- every call ends: settings that could loop (``overlap >= chunk_size``, ``chunk_size <= 0``,
  ``overlap < 0``) are refused before any work, and every splitter has a hard character
  split to fall back on.

:func:`recursive_split` is the recursive character splitter (paragraphs, lines, sentences,
words, then characters); :func:`fixed_size_split` slides a window of ``chunk_size`` units;
:func:`markdown_split` cuts at ATX headings, never inside a fenced code block;
:func:`code_split` cuts at top-level definitions, then nested ones, then blank lines;
:func:`word_split` counts whitespace-separated words (the RAG node's word mode).
:class:`ChunkingConfig` holds the settings of a workspace (an overlap is a count or a
percentage, :class:`Overlap`) and dispatches.

Pure code: no I/O, no session.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

from kg.errors import InvalidInput

__all__ = [
    "DEFAULT_SEPARATORS",
    "Chunk",
    "ChunkingConfig",
    "Overlap",
    "check_chunking_settings",
    "code_split",
    "count_words",
    "fixed_size_split",
    "markdown_split",
    "recursive_split",
    "resolve_overlap",
    "word_chunk_count",
    "word_split",
]

#: Separators tried in order by :func:`recursive_split`: paragraph, line, sentence, word,
#: character. The final hard character split happens even when ``""`` is not listed.
DEFAULT_SEPARATORS: tuple[str, ...] = ("\n\n", "\n", ". ", " ", "")

#: Version of each splitting algorithm, part of :meth:`ChunkingConfig.fingerprint`: bump a
#: splitter's version when a change would cut the same text differently, so content keys
#: change with it (and only for that splitter).
_SPLITTER_VERSIONS: dict[str, int] = {
    "recursive": 1,
    "fixed_size": 1,
    "markdown": 1,
    "code": 1,
    "words": 1,
}

# CJK ideographs and kana: scripts written without spaces, where each character counts as
# one word in word mode (as BERT's tokenizer does for ideographs).
_CJK_CHARS = (
    "\u3040-\u30ff"  # Hiragana, Katakana
    "\u3400-\u4dbf"  # CJK Unified Ideographs Extension A
    "\u4e00-\u9fff"  # CJK Unified Ideographs
    "\uf900-\ufaff"  # CJK Compatibility Ideographs
    "\U00020000-\U0002fa1f"  # Extensions B-F and Compatibility Supplement
)
_WORD_RE = re.compile(f"[{_CJK_CHARS}]|[^\\s{_CJK_CHARS}]+")


@dataclass(frozen=True, slots=True)
class Chunk:
    """One passage of a source text.

    Attributes
    ----------
    index : int
        Position of the chunk in the list, from 0.
    text : str
        The passage, always ``source[start:end]``; never empty or whitespace-only.
    start : int
        Offset of the first character in the source, in code points.
    end : int
        Offset one past the last character in the source, in code points.
    """

    index: int
    text: str
    start: int
    end: int


def check_chunking_settings(chunk_size: int, overlap: int) -> None:
    """Refuse chunk settings that cannot give a finite, sensible split.

    Parameters
    ----------
    chunk_size : int
        Largest chunk, in the splitter's unit (characters, tokens or words); must be > 0.
    overlap : int
        Units shared by consecutive chunks; must satisfy ``0 <= overlap < chunk_size``.

    Raises
    ------
    kg.errors.InvalidInput
        The settings break a rule. The message names both settings; ``details`` holds
        ``{"chunk_size": ..., "overlap": ...}``.
    """
    problem = _settings_problem(chunk_size, overlap)
    if problem is not None:
        raise InvalidInput(problem, details={"chunk_size": chunk_size, "overlap": overlap})


def recursive_split(
    text: str,
    *,
    chunk_size: int,
    overlap: int,
    length: Callable[[str], int] | None = None,
    separators: Sequence[str] = DEFAULT_SEPARATORS,
) -> list[Chunk]:
    """Split ``text`` recursively at the coarsest separator that yields small enough pieces.

    The text is cut at the first separator of ``separators`` that occurs in it (each piece
    keeps its separator at its end). Pieces that fit in ``chunk_size`` are merged greedily
    into chunks; a piece that is too long is split again with the remaining, finer
    separators, and when none is left (or ``""`` is reached) it is cut into windows of at
    most ``chunk_size`` units. Consecutive chunks of one merge share about ``overlap`` units:
    whole pieces taken from the end of the previous chunk. Chunks are stripped of leading
    and trailing whitespace (by moving their spans).

    Parameters
    ----------
    text : str
        The source.
    chunk_size : int
        Largest chunk, in units of ``length``; > 0.
    overlap : int
        Units shared by consecutive chunks, ``0 <= overlap < chunk_size``.
    length : callable str -> int, optional
        Measures a text: ``None`` counts characters (code points); pass a token counter
        (e.g. :meth:`kg.providers.local.LocalEmbedder.count_tokens`) for token units.
    separators : sequence of str
        Literal separators, coarsest first (default paragraph, line, sentence, word,
        character).

    Returns
    -------
    list of Chunk
        In source order, ``[]`` for a text that is empty or only whitespace.

    Raises
    ------
    kg.errors.InvalidInput
        ``chunk_size <= 0``, ``overlap < 0``, ``overlap >= chunk_size`` (checked before any
        work), or ``separators`` is a single string or holds a non-string.

    Notes
    -----
    Every chunk measures at most ``chunk_size``. For a ``length`` that is not additive over
    pieces (token counters), each merged chunk is measured again and shrunk until it fits.
    The only exception: a single character that alone measures more than ``chunk_size``
    becomes a chunk of its own. Window cuts avoid splitting a combining mark, an emoji
    modifier or a zero-width-joiner sequence from its base character when the window has
    room to back off.

    Each level measures each of its pieces once, so the cost is
    O(n * (len(separators) + 1)) calls' worth of ``length`` over n characters, plus
    O(log chunk) calls per window of a hard split.

    References
    ----------
    .. [1] LangChain, ``RecursiveCharacterTextSplitter``,
       https://python.langchain.com/docs/how_to/recursive_text_splitter/
    """
    check_chunking_settings(chunk_size, overlap)
    seps = _check_separators(separators)
    if not text or text.isspace():
        return []
    splitter = _Splitter(text, chunk_size, overlap, length)
    splitter.split(0, len(text), seps)
    return splitter.chunks()


def fixed_size_split(
    text: str,
    *,
    chunk_size: int,
    overlap: int,
    length: Callable[[str], int] | None = None,
) -> list[Chunk]:
    """Slide a window of ``chunk_size`` units over ``text``, stepping back ``overlap`` units.

    Parameters
    ----------
    text : str
        The source.
    chunk_size : int
        Largest chunk, in units of ``length``; > 0.
    overlap : int
        Units shared by consecutive windows, ``0 <= overlap < chunk_size``.
    length : callable str -> int, optional
        Measures a text; ``None`` counts characters (code points).

    Returns
    -------
    list of Chunk
        In source order, ``[]`` for a text that is empty or only whitespace. Windows are
        stripped of surrounding whitespace; a window that adds nothing but whitespace is
        dropped.

    Raises
    ------
    kg.errors.InvalidInput
        ``chunk_size <= 0``, ``overlap < 0`` or ``overlap >= chunk_size``, checked before
        any work.

    Notes
    -----
    In characters, windows are ``[k * (chunk_size - overlap), ... + chunk_size)``. With
    another ``length`` each window's end is found by galloping then binary search, and the
    next window starts at the earliest offset whose suffix of the window measures at most
    ``overlap``: O(log chunk) calls of ``length`` per window. Windows cut words; use
    :func:`recursive_split` for natural boundaries.
    """
    check_chunking_settings(chunk_size, overlap)
    if not text or text.isspace():
        return []
    splitter = _Splitter(text, chunk_size, overlap, length)
    splitter.windows(0, len(text))
    return splitter.chunks()


def word_split(text: str, *, chunk_size: int, overlap: int) -> list[Chunk]:
    """Split ``text`` into windows of ``chunk_size`` words that step ``chunk_size - overlap``.

    A word is a maximal run of non-whitespace characters, except that each CJK ideograph or
    kana character is a word of its own (these scripts are written without spaces, so a
    Chinese or Japanese text falls back to a character split). A chunk's span runs from its
    first word's start to its last word's end.

    Parameters
    ----------
    text : str
        The source.
    chunk_size : int
        Words per chunk; > 0.
    overlap : int
        Words shared by consecutive chunks, ``0 <= overlap < chunk_size``.

    Returns
    -------
    list of Chunk
        The last window is the first that reaches the last word: no trailing window repeats
        only overlap. ``[]`` when the text has no word.

    Raises
    ------
    kg.errors.InvalidInput
        ``chunk_size <= 0``, ``overlap < 0`` or ``overlap >= chunk_size``, checked before
        any work.

    Notes
    -----
    A single word is never cut, however many characters it has (a long URL or a base64
    blob stays whole), so a chunk may exceed an embedder's context: the embedder truncates.
    O(n) in the length of the text.

    Examples
    --------
    >>> [c.text for c in word_split("w1 w2 w3 w4 w5 w6 w7", chunk_size=5, overlap=2)]
    ['w1 w2 w3 w4 w5', 'w4 w5 w6 w7']
    """
    check_chunking_settings(chunk_size, overlap)
    words = [match.span() for match in _WORD_RE.finditer(text)]
    chunks: list[Chunk] = []
    step = chunk_size - overlap
    first = 0
    while first < len(words):
        last = min(first + chunk_size, len(words)) - 1
        start, end = words[first][0], words[last][1]
        chunks.append(Chunk(len(chunks), text[start:end], start, end))
        if last == len(words) - 1:
            break
        first += step
    return chunks


def count_words(text: str) -> int:
    """Number of words in ``text``, as :func:`word_split` counts them.

    Parameters
    ----------
    text : str
        Any text.

    Returns
    -------
    int
        Maximal runs of non-whitespace characters, each CJK ideograph or kana counting as a
        word of its own; 0 for a text of only whitespace.
    """
    return sum(1 for _ in _WORD_RE.finditer(text))


def word_chunk_count(text: str, *, chunk_size: int, overlap: int) -> int:
    """Number of chunks :func:`word_split` makes of ``text``, without making them.

    Parameters
    ----------
    text, chunk_size, overlap
        As :func:`word_split` takes them.

    Returns
    -------
    int
        ``len(word_split(text, chunk_size=chunk_size, overlap=overlap))``: 0 for no word, 1 for
        at most ``chunk_size`` words, else ``1 + ceil((n - chunk_size) / (chunk_size - overlap))``.

    Raises
    ------
    kg.errors.InvalidInput
        Bad chunk settings, as :func:`word_split`.

    Notes
    -----
    O(n) in the length of the text, with O(1) memory: a bound on the chunks of a request is
    checked before any chunk exists.
    """
    check_chunking_settings(chunk_size, overlap)
    words = count_words(text)
    if words <= chunk_size:
        return 1 if words else 0
    step = chunk_size - overlap
    return 1 + -(-(words - chunk_size) // step)


def markdown_split(
    text: str,
    *,
    chunk_size: int,
    overlap: int,
    length: Callable[[str], int] | None = None,
) -> list[Chunk]:
    r"""Split a Markdown text into its sections, splitting further only sections too long.

    A section starts at each ATX heading (a line of one to six ``#`` after at most three
    spaces, then a space, a tab or the end of the line) and runs to the next one; the text
    before the first heading is a section of its own. A line inside a fenced code block
    (opened by three or more backticks or tildes, with an optional info string, and closed
    by a line of at least as many of the same character) is never a heading, and an
    unclosed fence runs to the end of the text, as in CommonMark. A section that fits in
    ``chunk_size`` is one chunk; sections are never merged and never overlap each other. A
    longer section is split like :func:`recursive_split` into paragraphs, lines, sentences,
    words and characters, except that a fenced block is kept whole as one piece when it fits,
    and is split by lines (then words, then characters) only when it alone is too long.

    Parameters
    ----------
    text : str
        The Markdown source.
    chunk_size : int
        Largest chunk, in units of ``length``; > 0.
    overlap : int
        Units shared by consecutive chunks of one section, ``0 <= overlap < chunk_size``.
    length : callable str -> int, optional
        Measures a text; ``None`` counts characters (code points).

    Returns
    -------
    list of Chunk
        In source order, ``[]`` for a text that is empty or only whitespace. Chunks carry no
        added heading prefix: ``chunk.text == text[chunk.start:chunk.end]``.

    Raises
    ------
    kg.errors.InvalidInput
        ``chunk_size <= 0``, ``overlap < 0`` or ``overlap >= chunk_size``, checked before
        any work.

    Notes
    -----
    Only ``"\n"`` ends a line (a ``"\r"`` before it is ignored when matching). Setext
    headings (underlined with ``===``) are not section breaks. One pass over the lines finds
    sections and fences, O(n); splitting a long section costs what :func:`recursive_split`
    costs on it.

    References
    ----------
    .. [1] CommonMark Spec 0.31.2, sections 4.2 (ATX headings) and 4.5 (fenced code blocks),
       https://spec.commonmark.org/0.31.2/

    Examples
    --------
    >>> doc = "# Title\nintro\n```\n# not a heading\n```\n## Part 2\nbody"
    >>> [c.text for c in markdown_split(doc, chunk_size=100, overlap=0)]
    ['# Title\nintro\n```\n# not a heading\n```', '## Part 2\nbody']
    """
    check_chunking_settings(chunk_size, overlap)
    if not text or text.isspace():
        return []
    splitter = _Splitter(text, chunk_size, overlap, length)
    for lo, hi, fences in _markdown_sections(text):
        first, last = _strip_span(text, lo, hi)
        if first >= last:
            continue
        if splitter.fits(first, last):
            splitter.emit(first, last, first)
            continue
        pieces: list[tuple[int, int, tuple[_Separator, ...]]] = []
        pos = lo
        for fence_lo, fence_hi in [*fences, (hi, hi)]:
            pieces.extend(
                (start, end, _MARKDOWN_PROSE_FINER)
                for start, end in _pieces(text, pos, fence_lo, "\n\n")
            )
            if fence_lo < fence_hi:
                pieces.append((fence_lo, fence_hi, _MARKDOWN_FENCE_FINER))
            pos = fence_hi
        splitter.split_pieces(pieces)
    return splitter.chunks()


def code_split(
    text: str,
    *,
    chunk_size: int,
    overlap: int,
    length: Callable[[str], int] | None = None,
    language: str | None = None,
) -> list[Chunk]:
    """Split source code at top-level definitions, then nested ones, then blank lines.

    The separators, coarsest first: the start of each top-level definition (a line at column
    0 opening a class, function, type, ... of ``language``), moved up over the decorator,
    attribute and comment lines right above it; the start of each indented definition
    (methods); runs of blank lines; line ends; spaces; then a hard character split. Pieces
    that fit are merged greedily as in :func:`recursive_split`, so small definitions share a
    chunk and a large one is split inside.

    Parameters
    ----------
    text : str
        The source code.
    chunk_size : int
        Largest chunk, in units of ``length``; > 0.
    overlap : int
        Units shared by consecutive chunks, ``0 <= overlap < chunk_size``.
    length : callable str -> int, optional
        Measures a text; ``None`` counts characters (code points).
    language : str, optional
        ``"python"``, ``"javascript"``, ``"typescript"``, ``"go"``, ``"rust"`` or ``"java"``
        (also ``py``, ``js``, ``ts``, ``golang``, ``rs``; any case). ``None`` recognises the
        definition keywords of all of them.

    Returns
    -------
    list of Chunk
        In source order, ``[]`` for a text that is empty or only whitespace. Chunks are
        stripped of surrounding whitespace, so a method's chunk starts at its ``def``, not at
        its indentation.

    Raises
    ------
    kg.errors.InvalidInput
        ``chunk_size <= 0``, ``overlap < 0``, ``overlap >= chunk_size`` or an unknown
        ``language`` (the message lists the known ones), checked before any work.

    Notes
    -----
    Definitions are found by line patterns, not by parsing, so a keyword at the start of a
    line inside a multi-line string also cuts there; that only moves a chunk boundary. Cost
    as :func:`recursive_split`, plus one regular-expression scan per level.

    References
    ----------
    .. [1] LangChain, ``RecursiveCharacterTextSplitter.from_language``,
       https://python.langchain.com/docs/how_to/code_splitter/
    """
    check_chunking_settings(chunk_size, overlap)
    separators = _code_separators(language)
    if not text or text.isspace():
        return []
    splitter = _Splitter(text, chunk_size, overlap, length)
    splitter.split(0, len(text), separators)
    return splitter.chunks()


#: Finer separators of Markdown prose and of a fenced block too long to keep whole.
_MARKDOWN_PROSE_FINER: tuple[_Separator, ...] = ("\n", ". ", " ", "")
_MARKDOWN_FENCE_FINER: tuple[_Separator, ...] = ("\n", " ", "")

_ATX_HEADING = re.compile(r" {0,3}#{1,6}(?:[ \t]|$)")
_FENCE_OPEN = re.compile(r" {0,3}(`{3,}|~{3,})(.*)$")
_FENCE_CLOSE = re.compile(r" {0,3}(`{3,}|~{3,})[ \t]*$")


def _markdown_sections(text: str) -> list[tuple[int, int, list[tuple[int, int]]]]:
    """Sections ``(start, end, fences)`` of a Markdown text; fences are ``(start, end)``
    spans from the opening line's start to the closing line's end (or the text's end)."""
    sections: list[tuple[int, int, list[tuple[int, int]]]] = []
    section_start = 0
    fences: list[tuple[int, int]] = []
    fence: tuple[str, int, int] | None = None  # (character, length, start) of an open fence
    pos = 0
    while pos < len(text):
        newline = text.find("\n", pos)
        line_end = len(text) if newline == -1 else newline
        line = text[pos:line_end].removesuffix("\r")
        if fence is not None:
            close = _FENCE_CLOSE.match(line)
            if close and close.group(1)[0] == fence[0] and len(close.group(1)) >= fence[1]:
                fences.append((fence[2], pos + len(line)))
                fence = None
        elif _ATX_HEADING.match(line):
            if pos > section_start:
                sections.append((section_start, pos, fences))
            section_start, fences = pos, []
        elif (opening := _FENCE_OPEN.match(line)) and not (
            opening.group(1)[0] == "`" and "`" in opening.group(2)
        ):
            fence = (opening.group(1)[0], len(opening.group(1)), pos)
        pos = line_end + 1
    if fence is not None:
        fences.append((fence[2], len(text)))
    sections.append((section_start, len(text), fences))
    return sections


def _strip_span(text: str, lo: int, hi: int) -> tuple[int, int]:
    """``[lo, hi)`` without its leading and trailing whitespace (empty: ``lo >= hi``)."""
    window = text[lo:hi]
    stripped = window.lstrip()
    if not stripped:
        return hi, hi
    return lo + len(window) - len(stripped), hi - (len(window) - len(window.rstrip()))


#: Definition openers per language (matched after a line's indentation).
_CODE_DEFINITIONS: dict[str, str] = {
    "python": r"(?:async[ \t]+)?def\b|class\b",
    "javascript": (
        r"(?:export[ \t]+(?:default[ \t]+)?)?(?:async[ \t]+)?"
        r"(?:function\b|class\b|const\b|let\b|var\b)"
    ),
    "typescript": (
        r"(?:export[ \t]+(?:default[ \t]+)?)?(?:declare[ \t]+)?(?:abstract[ \t]+)?(?:async[ \t]+)?"
        r"(?:function\b|class\b|const\b|let\b|var\b|interface\b|type\b|enum\b|namespace\b)"
    ),
    "go": r"func\b|type\b|var\b|const\b",
    "rust": (
        r"(?:pub(?:\([^)\n]*\))?[ \t]+)?(?:(?:async|unsafe|const|extern)[ \t]+"
        r"(?:\"[^\"\n]*\"[ \t]+)?)*"
        r"(?:fn\b|struct\b|enum\b|impl\b|trait\b|mod\b|type\b|static\b|const\b|union\b"
        r"|macro_rules!)"
    ),
    "java": (
        r"(?:(?:public|protected|private|static|final|abstract|sealed|non-sealed|strictfp)[ \t]+)*"
        r"(?:class\b|interface\b|enum\b|record\b|@interface\b)"
    ),
}
#: Lines that belong to the definition below them: decorators, attributes, comments.
_CODE_ATTACHED: dict[str, str] = {
    "python": r"[@#]",
    "javascript": r"//|/\*|\*|@",
    "typescript": r"//|/\*|\*|@",
    "go": r"//|/\*|\*",
    "rust": r"//|/\*|\*|#",
    "java": r"//|/\*|\*|@",
}
_CODE_ALIASES: dict[str, str] = {
    "py": "python",
    "js": "javascript",
    "ts": "typescript",
    "golang": "go",
    "rs": "rust",
}
_BLANK_LINES = re.compile(r"\n(?:[ \t]*\r?\n)+")
_code_separator_cache: dict[str | None, tuple[_Separator, ...]] = {}


def _code_separators(language: str | None) -> tuple[_Separator, ...]:
    """The separators of :func:`code_split` for ``language`` (None: every language)."""
    if language is not None:
        if not isinstance(language, str):
            raise InvalidInput(
                "the code language must be a string", details={"language": repr(language)}
            )
        key: str | None = _CODE_ALIASES.get(language.lower(), language.lower())
        if key not in _CODE_DEFINITIONS:
            known = sorted([*_CODE_DEFINITIONS, *_CODE_ALIASES])
            raise InvalidInput(
                f"unknown code language {language!r}; known: {', '.join(known)}",
                details={"language": language, "known": known},
            )
    else:
        key = None
    cached = _code_separator_cache.get(key)
    if cached is not None:
        return cached
    if key is None:
        definitions = "|".join(f"(?:{pattern})" for pattern in _CODE_DEFINITIONS.values())
        attached = "|".join(dict.fromkeys(_CODE_ATTACHED.values()))
    else:
        definitions, attached = _CODE_DEFINITIONS[key], _CODE_ATTACHED[key]
    separators: tuple[_Separator, ...] = (
        _Cut(
            re.compile(f"^(?:{definitions})", re.MULTILINE),
            attach=re.compile(f"(?:{attached})"),
        ),
        _Cut(
            re.compile(f"^[ \\t]+(?:{definitions})", re.MULTILINE),
            attach=re.compile(f"[ \\t]*(?:{attached})"),
        ),
        _Cut(_BLANK_LINES, at_end=True),
        "\n",
        " ",
        "",
    )
    _code_separator_cache[key] = separators
    return separators


class Overlap(BaseModel):
    """An overlap written as an object: a count, or a fraction of the chunk size.

    Attributes
    ----------
    type : {"Tokens", "Percentage"}
        ``"Tokens"``: ``value`` is a count in the configuration's unit (tokens, characters
        or words, whatever ``unit`` says); ``"Percentage"``: ``value`` is a fraction of
        ``chunk_size`` from 0.0 to 0.5, and the overlap is ``floor(chunk_size * value)``.
    value : int or float
        The count or the fraction; booleans and strings are refused.

    Examples
    --------
    >>> Overlap(type="Percentage", value=0.125).count(512)
    64
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: Literal["Tokens", "Percentage"]
    value: int | float

    @field_validator("value", mode="before")
    @classmethod
    def _number(cls, value: object) -> object:
        """Refuse booleans and strings, which pydantic would otherwise coerce."""
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"chunk overlap value must be a number, got {value!r}")
        return value

    def count(self, chunk_size: int) -> int:
        """The overlap in units for chunks of ``chunk_size`` units (no range check)."""
        if self.type == "Tokens":
            return int(self.value)
        return math.floor(Decimal(repr(float(self.value))) * chunk_size)


def resolve_overlap(chunk_size: int, overlap: int | Overlap | Mapping[str, object]) -> int:
    """The overlap count of a setting given as a count or as ``{"type", "value"}``.

    Parameters
    ----------
    chunk_size : int
        Largest chunk, in units; > 0.
    overlap : int, Overlap or mapping
        A count, or ``{"type": "Tokens", "value": n}`` (a count), or
        ``{"type": "Percentage", "value": p}`` with ``0.0 <= p <= 0.5`` (``floor(size * p)``).

    Returns
    -------
    int
        The overlap in units, ``0 <= overlap < chunk_size``.

    Raises
    ------
    kg.errors.InvalidInput
        A malformed overlap object, a percentage outside [0.0, 0.5], or settings that
        :func:`check_chunking_settings` refuses. The message names both settings.
    """
    count = overlap
    if isinstance(overlap, Mapping | Overlap):
        try:
            spec = (
                overlap if isinstance(overlap, Overlap) else Overlap.model_validate(dict(overlap))
            )
        except ValidationError as exc:
            raise InvalidInput(
                f"chunk overlap must be a count or {{type: Tokens|Percentage, value}} "
                f"(chunk size is {chunk_size!r}): {exc.errors()[0]['msg']}",
                details={"chunk_size": chunk_size, "overlap": repr(overlap)},
            ) from exc
        problem = _overlap_spec_problem(chunk_size, spec)
        if problem is not None:
            raise InvalidInput(
                problem, details={"chunk_size": chunk_size, "overlap": spec.model_dump()}
            )
        count = spec.count(chunk_size)
    check_chunking_settings(chunk_size, count)  # type: ignore[arg-type]
    return count  # type: ignore[return-value]


class ChunkingConfig(BaseModel):
    """The chunking settings of a workspace.

    Attributes
    ----------
    splitter : {"recursive", "fixed_size", "markdown", "code", "words"}
        :func:`recursive_split`, :func:`fixed_size_split`, :func:`markdown_split`,
        :func:`code_split` (any language) or :func:`word_split` (the RAG node's word mode).
    chunk_size : int
        Largest chunk in ``unit``; > 0.
    overlap : int or Overlap
        Units shared by consecutive chunks: a count, or ``{"type": "Tokens", "value": n}``
        (stored as the count ``n``), or ``{"type": "Percentage", "value": p}`` with
        ``0.0 <= p <= 0.5`` (kept as given; :attr:`overlap_units` resolves it). The
        resolved count must satisfy ``0 <= overlap < chunk_size``.
    unit : {"tokens", "chars", "words"}
        ``"tokens"`` measures with the embedder's token counter, ``"chars"`` counts code
        points, ``"words"`` counts words as :func:`word_split` does. The ``"words"``
        splitter implies ``"words"`` (the default when the splitter is ``"words"``) and
        refuses any other unit.

    Raises
    ------
    pydantic.ValidationError
        On construction, for settings :func:`check_chunking_settings` refuses, a percentage
        outside [0.0, 0.5], or the ``"words"`` splitter with another unit; the message names
        both size settings.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    splitter: Literal["recursive", "fixed_size", "markdown", "code", "words"] = "recursive"
    chunk_size: int = 512
    overlap: int | Overlap = 64
    unit: Literal["tokens", "chars", "words"] = "tokens"

    @model_validator(mode="before")
    @classmethod
    def _normalise(cls, data: Any) -> Any:
        """Store a ``Tokens`` overlap as its count; give the words splitter word units."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        overlap = data.get("overlap")
        if isinstance(overlap, Overlap):
            overlap = overlap.model_dump()
        if isinstance(overlap, dict):
            if overlap.get("type") == "Tokens" and set(overlap) == {"type", "value"}:
                value = overlap["value"]
                if isinstance(value, bool) or not isinstance(value, int | float):
                    raise ValueError(
                        f"chunk overlap value must be a number, got {value!r} "
                        f"(chunk size is {data.get('chunk_size', 512)!r})"
                    )
                data["overlap"] = value
            else:
                data["overlap"] = overlap
        if data.get("splitter") == "words" and "unit" not in data:
            data["unit"] = "words"
        return data

    @model_validator(mode="after")
    def _check_sizes(self) -> ChunkingConfig:
        """Apply :func:`resolve_overlap`'s rules (as a ValueError for pydantic)."""
        problem = None
        if isinstance(self.overlap, Overlap):
            problem = _overlap_spec_problem(self.chunk_size, self.overlap)
        if problem is None:
            problem = _settings_problem(self.chunk_size, self.overlap_units)
        if problem is not None:
            raise ValueError(problem)
        if self.splitter == "words" and self.unit != "words":
            raise ValueError(
                f"the words splitter counts words: unit must be 'words', not {self.unit!r}"
            )
        return self

    @property
    def overlap_units(self) -> int:
        """The overlap as a count of units (a percentage resolved against ``chunk_size``)."""
        if isinstance(self.overlap, Overlap):
            return self.overlap.count(self.chunk_size)
        return self.overlap

    def capped(self, max_size: int) -> ChunkingConfig:
        """These settings with ``chunk_size`` at most ``max_size`` (e.g. a model's context).

        Parameters
        ----------
        max_size : int
            Largest allowed chunk size, in ``unit``; > 0.

        Returns
        -------
        ChunkingConfig
            ``self`` when it fits; else a copy of size ``max_size`` whose overlap is the same
            percentage, or the count capped at ``max_size // 2``.
        """
        if self.chunk_size <= max_size:
            return self
        overlap: int | Overlap = self.overlap
        if not isinstance(overlap, Overlap):
            overlap = min(overlap, max_size // 2)
        return ChunkingConfig(
            splitter=self.splitter, chunk_size=max_size, overlap=overlap, unit=self.unit
        )

    def chunk(self, text: str, token_counter: Callable[[str], int] | None = None) -> list[Chunk]:
        """Split ``text`` with these settings.

        Parameters
        ----------
        text : str
            The source.
        token_counter : callable str -> int, optional
            The embedder's token counter (``embedder.count_tokens``); required when
            ``unit == "tokens"``, ignored otherwise.

        Returns
        -------
        list of Chunk

        Raises
        ------
        kg.errors.InvalidInput
            Token units without a ``token_counter``.
        """
        size, overlap = self.chunk_size, self.overlap_units
        if self.splitter == "words":
            return word_split(text, chunk_size=size, overlap=overlap)
        length: Callable[[str], int] | None
        if self.unit == "tokens":
            if token_counter is None:
                raise InvalidInput(
                    "chunking in tokens needs the embedder's token counter",
                    details={"unit": self.unit},
                )
            length = token_counter
        elif self.unit == "words":
            length = count_words
        else:
            length = None
        if self.splitter == "recursive":
            return recursive_split(text, chunk_size=size, overlap=overlap, length=length)
        if self.splitter == "fixed_size":
            return fixed_size_split(text, chunk_size=size, overlap=overlap, length=length)
        if self.splitter == "markdown":
            return markdown_split(text, chunk_size=size, overlap=overlap, length=length)
        return code_split(text, chunk_size=size, overlap=overlap, length=length)

    def fingerprint(self) -> str:
        """A stable string of the settings, part of a chunk's content key.

        Returns
        -------
        str
            ``"<splitter>/v<splitter version>/<unit>/size=<chunk_size>/overlap=<count>"``,
            e.g. ``"recursive/v1/tokens/size=512/overlap=64"``. The overlap is the resolved
            count, so a percentage that gives the same count as a count gives the same
            chunks and the same fingerprint.
        """
        return (
            f"{self.splitter}/v{_SPLITTER_VERSIONS[self.splitter]}/{self.unit}"
            f"/size={self.chunk_size}/overlap={self.overlap_units}"
        )


def _overlap_spec_problem(chunk_size: object, spec: Overlap) -> str | None:
    """Describe what is wrong with an overlap object (naming both settings), or None."""
    value = spec.value
    if spec.type == "Percentage":
        if not 0.0 <= value <= 0.5:  # also refuses NaN
            return (
                f"chunk overlap percentage ({value!r}) must be between 0.0 and 0.5 "
                f"(chunk size is {chunk_size!r})"
            )
        return None
    if isinstance(value, float) and not value.is_integer():
        return f"chunk overlap ({value!r}) must be a whole count (chunk size is {chunk_size!r})"
    return None


def _settings_problem(chunk_size: object, overlap: object) -> str | None:
    """Describe what is wrong with the settings (naming both), or None."""
    if (
        not isinstance(chunk_size, int)
        or not isinstance(overlap, int)
        or isinstance(chunk_size, bool)
        or isinstance(overlap, bool)
    ):
        return f"chunk size ({chunk_size!r}) and chunk overlap ({overlap!r}) must be integers"
    if chunk_size <= 0:
        return f"chunk size ({chunk_size}) must be positive (chunk overlap is {overlap})"
    if overlap < 0:
        return f"chunk overlap ({overlap}) must not be negative (chunk size is {chunk_size})"
    if overlap >= chunk_size:
        return f"chunk overlap ({overlap}) must be smaller than chunk size ({chunk_size})"
    return None


def _check_separators(separators: Sequence[str]) -> tuple[str, ...]:
    """Return the separators as a tuple, refusing a bare string or non-strings."""
    if isinstance(separators, str) or not all(isinstance(sep, str) for sep in separators):
        raise InvalidInput(
            "separators must be a sequence of strings", details={"separators": repr(separators)}
        )
    return tuple(separators)


def _pieces(text: str, lo: int, hi: int, sep: str) -> list[tuple[int, int]]:
    """Spans of ``text[lo:hi]`` cut after each occurrence of the non-empty ``sep``."""
    spans = []
    pos = lo
    while (found := text.find(sep, pos, hi)) != -1:
        end = found + len(sep)
        spans.append((pos, end))
        pos = end
    if pos < hi:
        spans.append((pos, hi))
    return spans


def _continues_cluster(text: str, i: int) -> bool:
    """True when ``text[i]`` belongs to the character cluster started before it."""
    char, prev = text[i], text[i - 1]
    code = ord(char)
    return (
        unicodedata.category(char) in ("Mn", "Mc", "Me")
        or 0x1F3FB <= code <= 0x1F3FF  # emoji skin-tone modifiers
        or 0xFE00 <= code <= 0xFE0F  # variation selectors
        or 0xE0020 <= code <= 0xE007F  # emoji tag characters
        or code == 0x200D  # zero-width joiner
        or prev == "\u200d"
        or (prev == "\r" and char == "\n")
    )


class _Cut:
    """A separator given by a pattern: cut at each match's start (or end) in a span.

    ``attach`` (a pattern matched at a line's start) moves a start-cut up over the lines
    just before it that belong to what follows (decorators, doc comments, attributes).
    """

    __slots__ = ("attach", "at_end", "pattern")

    def __init__(
        self,
        pattern: re.Pattern[str],
        *,
        at_end: bool = False,
        attach: re.Pattern[str] | None = None,
    ) -> None:
        self.pattern = pattern
        self.at_end = at_end
        self.attach = attach

    def cut(self, text: str, lo: int, hi: int) -> list[tuple[int, int]] | None:
        """Spans of ``text[lo:hi]`` between the cuts, or None when nothing cuts it."""
        cuts: list[int] = []
        for match in self.pattern.finditer(text, lo, hi):
            pos = match.end() if self.at_end else self._attached_start(text, lo, match.start())
            if lo < pos < hi and (not cuts or pos > cuts[-1]):
                cuts.append(pos)
        if not cuts:
            return None
        bounds = [lo, *cuts, hi]
        return list(zip(bounds, bounds[1:], strict=False))

    def _attached_start(self, text: str, lo: int, pos: int) -> int:
        """Move ``pos`` (a line start) up over the attached lines just above it."""
        if self.attach is None:
            return pos
        while pos > lo and text[pos - 1] == "\n":
            above = max(lo, text.rfind("\n", lo, pos - 1) + 1)
            if not self.attach.match(text, above, pos - 1):
                break
            pos = above
        return pos


#: A separator of :class:`_Splitter`: a literal (cut after each occurrence) or a pattern.
_Separator = str | _Cut


class _Splitter:
    """State of one split: the source, the settings and the spans emitted so far."""

    def __init__(
        self, text: str, size: int, overlap: int, length: Callable[[str], int] | None
    ) -> None:
        self.text = text
        self.size = size
        self.overlap = overlap
        self.length = length
        self.spans: list[tuple[int, int]] = []
        self.width_hint = 0  # characters of the last window found by _search_end
        self.overlap_hint = 0  # characters of the last overlap found by _overlap_start

    def chunks(self) -> list[Chunk]:
        """The emitted spans as chunks."""
        return [
            Chunk(index, self.text[start:end], start, end)
            for index, (start, end) in enumerate(self.spans)
        ]

    def measure(self, lo: int, hi: int) -> int:
        """Size of ``text[lo:hi]`` in units."""
        if self.length is None:
            return hi - lo
        return self.length(self.text[lo:hi])

    def fits(self, lo: int, hi: int) -> bool:
        """True when ``text[lo:hi]`` is at most ``size`` units."""
        return self.measure(lo, hi) <= self.size

    def stripped_fits(self, lo: int, hi: int) -> bool:
        """True when ``text[lo:hi]`` without surrounding whitespace is at most ``size``."""
        if self.length is None:
            return hi - lo <= self.size
        return self.length(self.text[lo:hi].strip()) <= self.size

    def emit(self, lo: int, hi: int, fresh: int) -> None:
        """Add ``[lo, hi)`` stripped, unless its new part ``[fresh, hi)`` is only whitespace."""
        text = self.text
        if fresh >= hi or text[fresh:hi].isspace():
            return
        window = text[lo:hi]
        lo += len(window) - len(window.lstrip())
        hi -= len(window) - len(window.rstrip())
        self.spans.append((lo, hi))

    def split(self, lo: int, hi: int, separators: tuple[_Separator, ...]) -> None:
        """Split ``[lo, hi)`` at the first separator found, recursing into long pieces."""
        spans, finer = self._choose(lo, hi, separators)
        if spans is None:
            self.windows(lo, hi)
            return
        self.split_pieces([(start, end, finer) for start, end in spans])

    def split_pieces(self, pieces: Sequence[tuple[int, int, tuple[_Separator, ...]]]) -> None:
        """Merge consecutive fitting pieces ``(start, end, finer)``; split the others with
        their own finer separators."""
        good: list[tuple[int, int, int]] = []
        for start, end, finer in pieces:
            units = self.measure(start, end)
            if units <= self.size:
                good.append((start, end, units))
                continue
            if good:
                self.merge(good)
                good = []
            self.split(start, end, finer)
        if good:
            self.merge(good)

    def _choose(
        self, lo: int, hi: int, separators: tuple[_Separator, ...]
    ) -> tuple[list[tuple[int, int]] | None, tuple[_Separator, ...]]:
        """The pieces cut by the first separator occurring in ``[lo, hi)``, and the finer
        separators after it."""
        for i, sep in enumerate(separators):
            if isinstance(sep, str):
                if sep == "":
                    break
                if self.text.find(sep, lo, hi) != -1:
                    return _pieces(self.text, lo, hi, sep), separators[i + 1 :]
            elif (spans := sep.cut(self.text, lo, hi)) is not None:
                return spans, separators[i + 1 :]
        return None, ()

    def merge(self, pieces: list[tuple[int, int, int]]) -> None:
        """Merge fitting pieces ``(start, end, units)`` into chunks with whole-piece overlap."""
        count = len(pieces)
        first = 0  # first piece of the current chunk
        fresh = 0  # first piece not yet in any chunk
        while fresh < count:
            total = sum(units for _, _, units in pieces[first:fresh])
            last = fresh  # one past the last piece of the current chunk
            while last < count and (last == fresh or total + pieces[last][2] <= self.size):
                total += pieces[last][2]
                last += 1
            if self.length is not None:
                # Token counts are not additive: measure the real chunk and shrink it,
                # first dropping new pieces (keeping one), then the overlap.
                while not self.stripped_fits(pieces[first][0], pieces[last - 1][1]):
                    if last - 1 > fresh:
                        last -= 1
                    elif first < fresh:
                        first += 1
                    else:
                        break
            self.emit(pieces[first][0], pieces[last - 1][1], pieces[fresh][0])
            fresh = last
            if fresh == count:
                break
            # The next chunk starts with whole pieces from the end of this one: about
            # `overlap` units, leaving room for the next new piece.
            room = self.size - pieces[fresh][2]
            carried = 0
            start = last
            while start - 1 > first and carried + pieces[start - 1][2] <= min(self.overlap, room):
                start -= 1
                carried += pieces[start][2]
            first = start

    def windows(self, lo: int, hi: int) -> None:
        """Cut ``[lo, hi)`` into windows of at most ``size`` units overlapping by ``overlap``."""
        start = lo
        fresh = lo
        while True:
            end = self._fit_end(start, hi)
            if end <= fresh:  # the overlap left no room for new text: restart without it
                start = fresh
                end = self._fit_end(start, hi)
            self.emit(start, end, fresh)
            if end >= hi:
                return
            fresh = end
            start = self._overlap_start(start, end)

    def _fit_end(self, start: int, hi: int) -> int:
        """An end ``> start`` with ``text[start:end]`` fitting ``size`` (one char at least)."""
        if self.length is None:
            end = min(hi, start + self.size)
        else:
            end = self._search_end(start, hi)
        if end < hi and _continues_cluster(self.text, end):
            back = end - 1  # back off to the start of the cluster that `end` would cut
            while back > start and _continues_cluster(self.text, back):
                back -= 1
            if back > start and (self.length is None or self.fits(start, back)):
                end = back
        return end

    def _search_end(self, start: int, hi: int) -> int:
        """The furthest end whose window fits ``size``, searched near the last width."""
        if not self.fits(start, start + 1):
            return start + 1  # one character alone measures more than size: it goes alone
        width = _last_true(
            1, hi - start, lambda width: self.fits(start, start + width), self.width_hint
        )
        self.width_hint = width
        return start + width

    def _overlap_start(self, start: int, end: int) -> int:
        """The earliest start in ``(start, end]`` whose window up to ``end`` is <= overlap."""
        if self.overlap == 0:
            return end
        if self.length is None:
            width = min(self.overlap, end - start - 1)
        else:
            width = _last_true(
                0,
                end - start - 1,
                lambda width: self.measure(end - width, end) <= self.overlap,
                self.overlap_hint,
            )
            self.overlap_hint = width
        begin = end - width
        while begin < end and _continues_cluster(self.text, begin):
            begin += 1
        return begin


def _last_true(lo: int, hi: int, ok: Callable[[int], bool], guess: int) -> int:
    """Largest x in [lo, hi] with ok(x), for ok(lo) true and ok roughly true-then-false.

    Gallops from ``guess`` (up if it holds, down if not) with steps doubling from a
    sixteenth of it, then bisects: O(log) calls, few when ``guess`` is close.
    """
    good, bad = lo, hi + 1  # ok(good) holds; bad == hi + 1 means no failing x known
    step = max(1, guess // 16)
    if lo < guess <= hi:
        if ok(guess):
            good = guess
        else:
            bad = guess
    if bad == hi + 1:
        while True:
            probe = good + step
            if probe >= hi:
                if ok(hi):
                    return hi
                bad = hi
                break
            if not ok(probe):
                bad = probe
                break
            good = probe
            step *= 2
    else:
        while (probe := bad - step) > good:
            if ok(probe):
                good = probe
                break
            bad = probe
            step *= 2
    while bad - good > 1:
        mid = (good + bad) // 2
        if ok(mid):
            good = mid
        else:
            bad = mid
    return good
