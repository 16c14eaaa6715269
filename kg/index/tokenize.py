"""The BM25 analyzer: text to index terms.

One analyzer serves both sides of full-text search (documents at index time, queries at search
time), so a query term matches exactly the document terms it should:

1. Unicode NFKC normalisation and case folding (full-width ``ＰＥＰ`` and ``PEP`` are ``pep``;
   ``Straße`` and ``STRASSE`` are ``strasse``), as ICU's ``nfkc_cf`` does.
2. Word tokens: maximal runs of ``\\w`` (Unicode letters, digits, underscore), continued by
   combining marks, which Python's ``\\w`` leaves out (without them ``हिन्दी`` would fall apart
   into ``ह``, ``न``, ``द``). Punctuation and spaces separate tokens, so ``PEP 440`` and
   ``PEP-440`` are ``pep``, ``440``; numbers are kept; ``pep440`` stays one token.
3. CJK runs (Han, Hiragana, Katakana, Hangul), which carry no spaces between words, become
   overlapping character bigrams (``人工智能`` -> ``人工``, ``工智``, ``智能``); a lone CJK
   character stays a unigram. A word mixing scripts (``python编程``) is split at the boundary.
4. The English stop words of Lucene's ``EnglishAnalyzer`` (also Elasticsearch's ``_english_``
   list) are dropped.
5. Words of ASCII letters are stemmed with the Snowball English stemmer ("Porter2", the
   ``snowballstemmer`` package), as Lucene's ``EnglishAnalyzer`` stems with Porter:
   ``versions``, ``versioning`` and ``version`` are one term, ``version``. Measured on SciFact
   (``bench/beir.py``): BM25 nDCG@10 0.623 without stemming, 0.663 with it. ``stem=False``
   keeps the surface words (for showing terms to people or to a model).

A query of only stop words or punctuation analyzes to ``[]``; callers treat that as "no
full-text leg".
"""

from __future__ import annotations

import functools
import itertools
import re
import unicodedata
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["STOP_WORDS", "TermNumbering", "analyze", "analyze_numbered", "stem"]

STOP_WORDS: frozenset[str] = frozenset(
    {
        "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into",
        "is", "it", "no", "not", "of", "on", "or", "such", "that", "the", "their", "then",
        "there", "these", "they", "this", "to", "was", "will", "with",
    }
)  # fmt: skip
"""Lucene's ``EnglishAnalyzer.ENGLISH_STOP_WORDS_SET`` (33 words)."""

# Code points of the four CJK scripts that are word characters (``\w``): Han (with the
# ideographic iteration and number marks), Hiragana, Katakana (with the prolonged sound mark and
# phonetic extensions; half-width forms are folded to full width by NFKC) and Hangul.
_CJK = (
    "\u3005\u3007\u3021-\u3029\u3038-\u303b"  # 々 〇 Suzhou numerals, iteration marks
    "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"  # Han: Ext A, URO, compatibility
    "\U00020000-\U0003134f"  # Han: Ext B-G (supplementary planes)
    "\u3041-\u3096\u309d-\u309f"  # Hiragana, without the combining (semi-)voiced marks
    "\u30a1-\u30ff\u31f0-\u31ff"  # Katakana (incl. ー), phonetic extensions
    "\u1100-\u11ff\u3131-\u318e\ua960-\ua97f\uac00-\ud7af\ud7b0-\ud7ff"  # Hangul
)


_ASCII_WORD = re.compile(r"[a-z0-9_]+")  # \w on lowercased ASCII text
_ASCII_WORD_OR_NUL = re.compile(_ASCII_WORD.pattern + r"|\x00")  # the words of texts joined by NUL, and the joins
_CJK_RUN = re.compile(f"([{_CJK}]+)")


@functools.cache
def _word_re() -> re.Pattern[str]:
    """A word: ``\\w`` characters, continued by combining marks (built once, ~30 ms)."""
    marks = [c for c in range(0x300, 0x20000) if unicodedata.category(chr(c))[0] == "M"]
    marks.extend(range(0xE0100, 0xE01F0))  # variation selectors: the only marks above U+1FFFF
    return re.compile(rf"\w+(?:[{_char_class(marks)}]+\w*)*")


def _char_class(code_points: list[int]) -> str:
    """A regex character-class body for ascending code points, consecutive runs as ``a-b``."""
    items = []
    for _, run in itertools.groupby(enumerate(code_points), lambda pair: pair[1] - pair[0]):
        first, *rest = (c for _, c in run)
        last = rest[-1] if rest else first
        items.append(re.escape(chr(first)) + (f"-{re.escape(chr(last))}" if last > first else ""))
    return "".join(items)


@functools.lru_cache(maxsize=1)
def _stemmer() -> Any:
    # snowballstemmer hands out PyStemmer's C build of the same Snowball algorithms when it is
    # installed (a dependency of kg): 19x faster, the same stems (tests/unit/test_tokenize.py).
    import snowballstemmer

    return snowballstemmer.stemmer("english")


#: Longest word that is stemmed; longer ones are kept as written. English words are far shorter,
#: and the Snowball stemmer's suffix replacement is quadratic in a word's length: one 400,000
#: letter "yyyy..." word took 16 s, and a 5 MB one would have held the indexer for most of an hour.
MAX_STEM_CHARS = 64


def stem(word: str) -> str:
    """The Snowball English stem of a lower-case word of ASCII letters; other words unchanged.

    Returns
    -------
    str
        Unchanged for a word of other characters or longer than :data:`MAX_STEM_CHARS`.

    References
    ----------
    M. F. Porter, "The English (Porter2) stemming algorithm", snowballstem.org.
    """
    if len(word) > MAX_STEM_CHARS:
        return word
    return _stem(word)


@functools.lru_cache(maxsize=200_000)
def _stem(word: str) -> str:
    if word.isascii() and word.isalpha():
        return str(_stemmer().stemWord(word))
    return word


def analyze(text: str, *, stem_words: bool = True) -> list[str]:
    """Turn text into BM25 terms.

    Parameters
    ----------
    text : str
        A document passage or a query, in any language.
    stem_words : bool
        Stem words of ASCII letters (step 5); False keeps them as written (lower-cased).

    Returns
    -------
    list of str
        Terms in text order, repeats kept (term frequency matters). Empty when ``text`` holds
        nothing but stop words, punctuation or spaces.

    Notes
    -----
    O(len(text)) time. ASCII text takes a fast path (lowercase, one scan for ``[a-z0-9_]+``);
    other text is normalised, scanned for words, and only words holding CJK characters are
    split further. The non-ASCII word pattern is built once per process, on first use (about
    30 ms: it collects Unicode's combining marks).

    The CJK handling follows Lucene's ``CJKBigramFilter`` (bigrams over adjacent Han, Hiragana,
    Katakana and Hangul characters, a lone character kept as a unigram); the stop words are
    applied to non-CJK tokens only.

    Examples
    --------
    >>> analyze("The PEP 440 versioning schemes")
    ['pep', '440', 'version', 'scheme']
    >>> analyze("The PEP 440 versioning schemes", stem_words=False)
    ['pep', '440', 'versioning', 'schemes']
    >>> analyze("人工智能")
    ['人工', '工智', '智能']
    >>> analyze("the of and ?!")
    []
    """
    terms = _terms(text)
    if not stem_words:
        return terms
    # One C-level dict lookup per term, not a Python frame or a cache call: 1.5M terms a
    # 10,000-node import (0.8 s as a list comprehension around the cached stem()).
    return list(map(_STEMS.__getitem__, terms))


def analyze_numbered(texts: Sequence[str]) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """The terms of many texts as :func:`analyze` makes them, numbered, for an index's postings.

    Parameters
    ----------
    texts : sequence of str
        Document passages.

    Returns
    -------
    vocabulary : list of str
        The distinct terms, by number.
    terms : ndarray, shape (m,), int64
        A number into ``vocabulary`` for each term occurrence of the texts.
    documents : ndarray, shape (m,), int64
        The position in ``texts`` of each occurrence's text.
    lengths : ndarray, shape (len(texts),), int32
        Each text's number of terms (``len(analyze(text))``).

    Notes
    -----
    Each text's terms, counted, are exactly :func:`analyze`'s (``tests/unit/test_tokenize.py``);
    the order of occurrences is not kept. The ASCII texts are analysed together: joined by NUL
    (no text of the store holds one; a batch that does is analysed text by text), lowered and
    scanned once, each distinct word looked up once in the stop words and the stems, and the
    occurrences mapped to terms and split into texts by arrays: one regex scan and C-level
    lookups for the batch instead of Python calls per text. BM25's ``add_many`` of the 20,000
    passages of a 10,000-node ``bench/scale.py`` import (analysis and postings): 1.08 s of CPU
    text by text, 0.87 s batched (median of 5, alternated). What is left is mostly hashing each
    occurrence's word once. Other texts go through :func:`analyze`.
    """
    numbering = TermNumbering()
    term_parts: list[np.ndarray] = []
    doc_parts: list[np.ndarray] = []
    lengths = np.zeros(len(texts), np.int32)
    ascii_docs = [i for i, text in enumerate(texts) if text.isascii()]
    joined = "\x00".join(texts[i] for i in ascii_docs).lower()
    if ascii_docs and joined.count("\x00") != len(ascii_docs) - 1:
        ascii_docs = []  # a text holds a NUL itself
    if ascii_docs:
        words = TermNumbering()
        tokens = _ASCII_WORD_OR_NUL.findall(joined)
        word_ids = np.fromiter(map(words.__getitem__, tokens), np.int64, count=len(tokens))
        term_of_word = np.fromiter(
            (-1 if word == "\x00" or word in STOP_WORDS else numbering[_STEMS[word]]
             for word in words), np.int64, count=len(words))
        # the i-th ASCII text's words follow the i-th NUL
        nth = np.cumsum(word_ids == words["\x00"]) if "\x00" in words else np.zeros(len(tokens), np.int64)
        terms = term_of_word[word_ids]
        kept = terms >= 0
        term_parts.append(terms[kept])
        doc_parts.append(np.asarray(ascii_docs, np.int64)[nth[kept]])
        lengths[ascii_docs] = np.bincount(nth[kept], minlength=len(ascii_docs))
    done = set(ascii_docs)
    for i, text in enumerate(texts):
        if i in done:
            continue
        own = np.fromiter(map(numbering.__getitem__, analyze(text)), np.int64)
        term_parts.append(own)
        doc_parts.append(np.full(len(own), i, np.int64))
        lengths[i] = len(own)
    if not term_parts:
        return [], np.zeros(0, np.int64), np.zeros(0, np.int64), lengths
    return list(numbering), np.concatenate(term_parts), np.concatenate(doc_parts), lengths


class TermNumbering(dict[str, int]):
    """Term -> a dense number, the next one on first sight (one C-level lookup per term)."""

    def __missing__(self, term: str) -> int:
        number = self[term] = len(self)
        return number


class _StemCache(dict[str, str]):
    """Term -> :func:`stem` of it, computed on first sight; emptied at :data:`_STEM_CACHE_MAX`
    terms (a corpus's vocabulary, not its every token)."""

    def __missing__(self, term: str) -> str:
        stemmed = stem(term)
        if len(self) >= _STEM_CACHE_MAX:
            self.clear()
        self[term] = stemmed
        return stemmed


_STEM_CACHE_MAX = 500_000
_STEMS = _StemCache()


def _terms(text: str) -> list[str]:
    if text.isascii():
        return list(itertools.filterfalse(STOP_WORDS.__contains__, _ASCII_WORD.findall(text.lower())))
    folded = unicodedata.normalize("NFKC", text).casefold()
    word_re = _word_re()
    terms: list[str] = []
    for word in word_re.findall(folded):
        if word.isascii() or not _CJK_RUN.search(word):
            if word not in STOP_WORDS:
                terms.append(word)
            continue
        # Split at script boundaries: odd parts are CJK runs, even parts the words between.
        for i, part in enumerate(_CJK_RUN.split(word)):
            if i % 2 == 0:
                terms.extend(w for w in word_re.findall(part) if w not in STOP_WORDS)
            elif len(part) == 1:
                terms.append(part)
            else:
                terms.extend(part[j : j + 2] for j in range(len(part) - 1))
    return terms
