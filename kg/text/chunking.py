"""Chunkers: split a text into passages whose spans slice the source exactly.

Three splitters share one :class:`Chunk` type and one set of guarantees:

- ``chunk.text == source[chunk.start:chunk.end]``, always;
- no chunk is empty or whitespace-only, and a text of only whitespace gives ``[]``;
- chunks come in order (non-decreasing ``start`` and ``end``), and every non-whitespace
  character of the source lies inside some chunk's span;
- every chunk measures at most ``chunk_size`` units (characters, tokens or words);
- every call ends: settings that could loop (``overlap >= chunk_size``, ``chunk_size <= 0``,
  ``overlap < 0``) are refused before any work, and the recursive splitter always has a hard
  character split to fall back on.

:func:`recursive_split` is the recursive character splitter (paragraphs, lines, sentences,
words, then characters); :func:`fixed_size_split` slides a window of ``chunk_size`` units;
:func:`word_split` counts whitespace-separated words (the RAG node's word mode).
:class:`ChunkingConfig` holds the settings of a workspace and dispatches.

Pure code: no I/O, no session.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, model_validator

from kg.errors import InvalidInput

__all__ = [
    "DEFAULT_SEPARATORS",
    "Chunk",
    "ChunkingConfig",
    "check_chunking_settings",
    "fixed_size_split",
    "recursive_split",
    "word_split",
]

#: Separators tried in order by :func:`recursive_split`: paragraph, line, sentence, word,
#: character. The final hard character split happens even when ``""`` is not listed.
DEFAULT_SEPARATORS: tuple[str, ...] = ("\n\n", "\n", ". ", " ", "")

#: Version of the splitting algorithms, part of :meth:`ChunkingConfig.fingerprint`: bump it
#: when a change would cut the same text differently, so content keys change with it.
_ALGORITHM_VERSION = 1

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


class ChunkingConfig(BaseModel):
    """The chunking settings of a workspace.

    Attributes
    ----------
    splitter : {"recursive", "fixed_size"}
        :func:`recursive_split` or :func:`fixed_size_split`.
    chunk_size : int
        Largest chunk in ``unit``; > 0.
    overlap : int
        Units shared by consecutive chunks, ``0 <= overlap < chunk_size``.
    unit : {"tokens", "chars"}
        ``"tokens"`` measures with the embedder's token counter, ``"chars"`` counts code
        points.

    Raises
    ------
    pydantic.ValidationError
        On construction, for settings :func:`check_chunking_settings` refuses; the message
        names both settings.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    splitter: Literal["recursive", "fixed_size"] = "recursive"
    chunk_size: int = 512
    overlap: int = 64
    unit: Literal["tokens", "chars"] = "tokens"

    @model_validator(mode="after")
    def _check_sizes(self) -> ChunkingConfig:
        """Apply :func:`check_chunking_settings` (as a ValueError for pydantic)."""
        problem = _settings_problem(self.chunk_size, self.overlap)
        if problem is not None:
            raise ValueError(problem)
        return self

    def chunk(self, text: str, token_counter: Callable[[str], int] | None = None) -> list[Chunk]:
        """Split ``text`` with these settings.

        Parameters
        ----------
        text : str
            The source.
        token_counter : callable str -> int, optional
            The embedder's token counter (``embedder.count_tokens``); required when
            ``unit == "tokens"``, ignored for ``"chars"``.

        Returns
        -------
        list of Chunk

        Raises
        ------
        kg.errors.InvalidInput
            Token units without a ``token_counter``.
        """
        if self.unit == "tokens":
            if token_counter is None:
                raise InvalidInput(
                    "chunking in tokens needs the embedder's token counter",
                    details={"unit": self.unit},
                )
            length: Callable[[str], int] | None = token_counter
        else:
            length = None
        if self.splitter == "recursive":
            return recursive_split(
                text, chunk_size=self.chunk_size, overlap=self.overlap, length=length
            )
        return fixed_size_split(
            text, chunk_size=self.chunk_size, overlap=self.overlap, length=length
        )

    def fingerprint(self) -> str:
        """A stable string of the settings, part of a chunk's content key.

        Returns
        -------
        str
            ``"<splitter>/v<algorithm version>/<unit>/size=<chunk_size>/overlap=<overlap>"``,
            e.g. ``"recursive/v1/tokens/size=512/overlap=64"``.
        """
        return (
            f"{self.splitter}/v{_ALGORITHM_VERSION}/{self.unit}"
            f"/size={self.chunk_size}/overlap={self.overlap}"
        )


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

    def split(self, lo: int, hi: int, separators: tuple[str, ...]) -> None:
        """Split ``[lo, hi)`` at the first separator found, recursing into long pieces."""
        sep, finer = self._choose(lo, hi, separators)
        if sep is None:
            self.windows(lo, hi)
            return
        good: list[tuple[int, int, int]] = []
        for start, end in _pieces(self.text, lo, hi, sep):
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
        self, lo: int, hi: int, separators: tuple[str, ...]
    ) -> tuple[str | None, tuple[str, ...]]:
        """The first separator occurring in ``[lo, hi)`` and the finer ones after it."""
        for i, sep in enumerate(separators):
            if sep == "":
                break
            if self.text.find(sep, lo, hi) != -1:
                return sep, separators[i + 1 :]
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
