"""Question analysis and the answer-type check of ``ask``'s extractive answer. Pure.

A question is read for three things (the classic pipeline of factoid question answering:
Moldovan et al. 2000, Li and Roth 2002, Jurafsky and Martin, *Speech and Language Processing*,
3rd ed., ch. 14 "Question Answering"):

- its **answer type**, from the wh-word and what follows it (:func:`analyze_question`): ``who``
  / ``whom`` / ``whose`` ask for a person, ``when`` / "what year" for a date, "how many" / "how
  much" for a number, "what is X" / "what does X mean" / "what does X stand for" for a
  definition, "which/what <noun>" and "what <verb>" for a name, a question opening with an
  auxiliary for yes or no;
- its **focus**: the quoted or code-marked term it asks about (``~=``, "wheel"), else, for a
  definition, the words between the copula and the end;
- the **named mentions** it holds ("PEP 386", "RFC-2119", a capitalised name), candidates for
  a node of the graph (:func:`mentions_in`).

:func:`answers_type` then checks a candidate sentence: it must hold the focus (a quoted term
literally), name the question's numbered mentions ("PEP 241": an answer about another PEP is not
one about this one), and hold something of the answer type that the question itself does not hold: a date
pattern for a date, a number for a number, a capitalised name for a person or a name, the
focus followed by a definitional verb ("is", "means", "refers to", ...) or set off by a colon or
dash for a definition (Hearst 1992-style lexico-syntactic patterns; Klavans and Muresan 2001,
"Evaluation of the DEFINDER system").

References
----------
Moldovan, Harabagiu, Pasca et al. (2000), "The structure and performance of an open-domain
question answering system", ACL. Li and Roth (2002), "Learning question classifiers", COLING.
Hearst (1992), "Automatic acquisition of hyponyms from large text corpora", COLING.
Klavans and Muresan (2001), "Evaluation of the DEFINDER system for fully automatic glossary
construction", AMIA.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from typing import Literal

from kg.text.names import name_key

__all__ = ["ALL_CHECKS", "NO_CHECKS", "ROLE_WORDS", "AnswerType", "Question", "TypeChecks",
           "analyze_question", "answers_type", "event_words", "expands", "has_code_term", "has_date", "has_number",
           "holds_focus", "holds_named_mentions", "holds_numbered_mentions", "holds_numbers", "holds_roles",
           "mentions_in", "slot_words", "strip_references"]

AnswerType = Literal["person", "date", "number", "definition", "name", "yes_no", "choice", "other"]

AUXILIARIES = frozenset("is are was were do does did can could will would should shall may might must has have had"
                        .split())
_WH = frozenset("what which who whom whose when where why how".split())
_DETERMINERS = frozenset("a an the this that these those".split())
#: Words before a number that do not make it a name ("in 1991", "over 60", "top 10").
_PREPOSITIONS = frozenset("""in on at by of from to since until till before after around about than over under
    between during for with within without into onto per via and or but nearly almost roughly some top""".split())
_NUMBER_WORDS = frozenset("""zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen
    fifteen sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety hundred
    thousand million billion dozen""".split())
_MONTHS = (r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|jun(?:e)?|jul(?:y)?|aug(?:ust)?"
           r"|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)")
#: A calendar date or a year: "18-Mar-2013", "18 March 2013", "March 18, 2013", "2013-03-18",
#: "March 2013", "in 1998", "1990s".
DATE_RE = re.compile(
    rf"\b\d{{1,2}}[-\s/]{_MONTHS}\.?[-\s/,]+\d{{2,4}}\b"
    rf"|\b{_MONTHS}\.?\s+\d{{1,2}}(?:st|nd|rd|th)?,?\s+\d{{4}}\b"
    rf"|\b{_MONTHS}\.?,?\s+\d{{4}}\b"
    r"|\b\d{4}-\d{2}-\d{2}\b|\b\d{1,2}/\d{1,2}/\d{2,4}\b"
    r"|\b(?:1[0-9]|20)\d{2}s?\b",
    re.IGNORECASE)
_NUMBER_RE = re.compile(r"\b\d+(?:[.,]\d+)*\b")
#: A number as a question states it: digits with their decimals and an ordinal suffix ("17th").
_ANY_NUMBER_RE = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)*(?:st|nd|rd|th)?(?![\w])", re.IGNORECASE)
#: A named mention: a capitalised word or an acronym followed by a number ("PEP 386", "PEP-386",
#: "RFC 2119", "pep 0386"), or a run of capitalised words ("Carl Meyer", "Python Packaging
#: Authority").
_NUMBERED_RE = re.compile(r"\b([A-Za-z][A-Za-z]*)[\s\-_]?(\d{1,6})\b")
_CAPITALISED_RE = re.compile(r"\b[A-Z][\w'\u2019.+#-]*(?:\s+(?:of|the|de|van|von|la|le|du|del|for|and)?\s*"
                             r"[A-Z][\w'\u2019.+#-]*)*")
_QUOTED_RE = re.compile(r"``(.+?)``|`(.+?)`|\"(.+?)\"|\u201c(.+?)\u201d|'([^'\s][^']*?)'(?!\w)")
_DEFINITION_CUES = (r"(?:is|are|was|were|means?|meant|refers?\s+to|denotes?|stands?\s+for|represents?"
                    r"|indicates?|specifies|defines?|describes?|signals?|(?:is\s+)?(?:called|known\s+as|defined\s+as))")
#: Cues that define whatever the term's form ("X means ...", "X is called ..."): not a copula nor
#: a loose verb ("indicates", "describes").
_STRONG_CUE_RE = re.compile(
    r"means?|meant|refers?\s+to|denotes?|stands?\s+for|(?:is\s+)?(?:called|known\s+as|defined\s+as)", re.IGNORECASE)
#: What follows a copula that defines ("is a ...", "is the ...", "is called ..."), not describes.
_NOUN_PHRASE_RE = re.compile(r"\s+(?:a|an|the|one|any|some|two|three|called|known|defined)\b|\s*[`'\"\u201c]",
                             re.IGNORECASE)
_WORD_RE = re.compile(r"[\w~=!<>+#*^@|&%$-]+|[^\w\s]+")


_NOT_NAMES = _WH | AUXILIARIES | _DETERMINERS | _PREPOSITIONS
#: Head nouns of a wh-phrase or of "what is the X of" that ask for a person or a quantity (Li
#: and Roth 2002's HUM:ind and NUM classes are told by the question's head noun).
_PERSON_NOUNS = frozenset("""person people man woman director actor actress singer songwriter singer-songwriter
    author writer novelist poet composer musician player athlete president founder inventor designer architect
    artist producer host presenter politician scientist engineer maintainer creator""".split())
_QUANTITY_NOUNS = frozenset("""population budget capacity size length height width depth weight area number count
    amount cost price level age distance speed percentage rate total score salary revenue duration""".split())
#: Head nouns that ask for a term of code or of a file system ("what *file* marks ...", "which
#: *attribute* holds ...", "what is the *directory* ... called"): such a name is written as code
#: (``__pycache__``, ``py.typed``, ``RECORD``), not as a capitalised word ("Python's").
_CODE_NOUNS = frozenset("""file files filename directory directories folder attribute attributes method methods
    function functions module modules package packages decorator decorators class classes operator operators
    prefix suffix extension extensions keyword keywords variable variables field fields key keys table tables
    header headers command commands option options flag flags marker markers tag tags identifier identifiers
    literal literals statement builtin dunder""".split())
#: RFC 2119 keywords: capitals that are not a term ("MUST", "SHOULD").
_RFC_2119 = frozenset("MUST SHOULD SHALL MAY NOT REQUIRED RECOMMENDED OPTIONAL".split())
#: A term written as code: marked (``x``, `x`), or a token with an inner ``_ . / @ : + =`` next
#: to a letter (``py.typed``, ``__qualname__``, ``@override``), or a word in capitals of four
#: letters or more (``RECORD``, ``EXTERNALLY-MANAGED``) that is not an RFC 2119 keyword.
_CODE_MARKED_RE = re.compile(r"``[^`]+``|`[^`\s][^`]*`")
_CODE_TOKEN_RE = re.compile(r"(?:[A-Za-z0-9]*[_./@:+=])+[A-Za-z0-9][\w./@:+=-]*|@[A-Za-z_]\w*")
_CAPITALS_RE = re.compile(r"\b[A-Z][A-Z0-9]*(?:[-_][A-Z0-9]+)*\b")
#: A choice between the question's own options ("Which film came out first, A or B?"): a quote
#: does not compare.
_CHOICE_RE = re.compile(r",\s*[^,?]+\s+or\s+[^,?]+\?\s*$")


@dataclass(frozen=True)
class Question:
    """What a question asks for (:func:`analyze_question`).

    Attributes
    ----------
    text : str
    wh : str or None
        The wh-word (``what``, ``who``, ...), or the opening auxiliary of a yes/no question.
    answer_type : AnswerType
    focus : tuple of str
        The quoted or code-marked terms it asks about (a sentence must hold one literally);
        for a definition without quotes, the words of the defined term.
    quoted : bool
        The focus was quoted (``~=``, "wheel"): matched literally, not as words.
    predicate : tuple of str
        The question's content words outside its mentions, lower-cased ("replaced", "created",
        "author"): what is asked of the mention.
    mentions : tuple of str
        The named mentions (:func:`mentions_in`), in order.
    """

    text: str
    wh: str | None
    answer_type: AnswerType
    focus: tuple[str, ...] = ()
    quoted: bool = False
    predicate: tuple[str, ...] = ()
    mentions: tuple[str, ...] = field(default=())
    head: str | None = None
    countable: bool = False


@dataclass(frozen=True)
class TypeChecks:
    """Optional parts of :func:`answers_type`, each the setting ``KG_ASK_<FIELD>``
    (:func:`kg.rag.functions.type_checks`), chosen by cross-validation on the answer sets.

    Attributes
    ----------
    code_names : bool
        A name asked with a head noun of code or of a file system (:data:`_CODE_NOUNS`: "what
        *file*", "which *attribute*", "what is the *directory* ... called") must be a term
        written as code (:func:`has_code_term`), not any capitalised word.
    definition_article : bool
        A term asked with an indefinite article ("What is *a* wheel?", a common noun) is
        defined by a copula only with a determiner before it ("A wheel is a ZIP-format
        archive"); the bare "Wheel is an installation format" speaks of Wheel, the format's
        name, and describes it. The other definitional patterns ("means", "refers to",
        "called", a colon, an apposition) are unchanged.
    named_mentions : bool
        The quoted sentence, with its document's title, names each of the question's named
        mentions that is not numbered (every word of it: :func:`holds_named_mentions`): a
        sentence about the entity beside it does not answer a question about this one.
    reference_values : bool
        A number of a numbered name ("PEP 480", ":pep:`480`", "RFC 2119") is not the value of
        a number or a date (:func:`strip_references`): "What is the maximum length of a
        project name?" is not answered by a sentence citing :pep:`480`.
    name_meanings : bool
        "What does X mean?" of a proper name (capitalised, not an acronym, not quoted) is
        answered only by a sentence saying what the name means ("means", "meaning",
        "literally", "named after", "translates"), not by one saying what X is ("Ganzhou is a
        prefecture-level city").
    acronym_expansions : bool
        "What does X stand for?" (or "mean", "is X short for") of an acronym is answered only
        by a sentence holding its expansion next to it ("The Update Framework (TUF)", "TUF
        (The Update Framework)", "TUF stands for ..."), found by Schwartz and Hearst's
        algorithm (:func:`expands`), not by one that only uses it ("files called TUF
        metadata").
    mixed_case_mentions : bool
        A word with a capital after its first letter ("tvOS", "iPadOS", "eBay") counts as a
        named mention for :attr:`named_mentions` (:func:`mentions_in` reads capitalised words
        only): iOS's sentence does not answer a question about tvOS.
    literal_roles : bool
        A person asked by the role they had ("Who *composed* ...", "Who *produced* ...": the
        answer slot is a word of a role of :data:`ROLE_WORDS`) is answered only by a sentence
        saying that role in one of its forms ("composer", "composed": :func:`holds_roles`),
        never by one whose words are near it in meaning ("written", "directed").
    event_words : bool
        A date is answered only by a quote (the sentence with its document's title) holding
        every word of what the question asks of its mentions (:func:`event_words`, by
        Snowball stem or lemma, never excused by similarity: :func:`kg.rag.functions.holds_event_words`):
        a sentence dates several events ("Construction began in 1825 and was completed in
        1845"), and its date answers "When did the canal *close*?" only if it says the canal
        closed. A date belongs to the event it is anchored to (TimeML's anchoring of times to
        events: Pustejovsky et al. 2003).
    """

    code_names: bool = True
    definition_article: bool = True
    named_mentions: bool = True
    reference_values: bool = True
    name_meanings: bool = True
    acronym_expansions: bool = True
    mixed_case_mentions: bool = True
    literal_roles: bool = True
    event_words: bool = True


#: Head nouns of a date question ("in what *year*"): the answer's form, not its event.
_DATE_NOUNS = frozenset("year years date day month century decade time".split())


#: Every optional check on (the default) / off (:func:`answers_type` as before they existed).
ALL_CHECKS = TypeChecks()
NO_CHECKS = TypeChecks(**{f.name: False for f in fields(TypeChecks)})


def _head_noun(words: list[str], wh: str | None) -> str | None:
    """The noun a wh-word asks about: "which director" -> director, "what is the population of"
    -> population, "what marker file" -> marker (skipping a determiner and adjectives is beyond
    a rule; the next word or the word after "is the"); only the nouns of a person, a quantity
    or a term of code (:data:`_CODE_NOUNS`)."""
    if wh not in ("what", "which") or wh not in words:
        return None
    rest = words[words.index(wh) + 1:]
    if rest and rest[0] in ("is", "was", "are", "were"):
        rest = rest[1:]
    while rest and rest[0] in _DETERMINERS:
        rest = rest[1:]
    window: list[str] = []
    for word in rest[:3]:  # "which american film director", "what british singer-songwriter"
        if word in AUXILIARIES or word in _PREPOSITIONS:
            break
        window.append(word)
    # a person or a quantity first ("what file size": a number), then a term of code
    return (next((w for w in window if w in _PERSON_NOUNS or w in _QUANTITY_NOUNS), None)
            or next((w for w in window if w in _CODE_NOUNS), None))


def _words(text: str) -> list[str]:
    return [w.lower() for w in re.findall(r"[A-Za-z][A-Za-z'\-]*", text)]


def mentions_in(text: str) -> list[str]:
    """The named mentions of a question: numbered names ("PEP 386", "pep-0386", "RFC 2119"), then
    runs of capitalised words that do not open the question (a wh-word or auxiliary does).

    Examples
    --------
    >>> mentions_in("What replaced PEP 386?")
    ['PEP 386']
    >>> mentions_in("who is the author of pep-0008 and Carl Meyer?")
    ['pep-0008', 'Carl Meyer']
    >>> mentions_in("In 1991 it was bought by a chain with over 60 shops in March 2013")
    []
    """
    found: list[str] = []
    for m in _NUMBERED_RE.finditer(text):
        if m.group(1).lower() in _NOT_NAMES or re.fullmatch(_MONTHS, m.group(1), re.IGNORECASE):
            continue
        found.append(m.group(0))
    covered = " ".join(found)
    for m in _CAPITALISED_RE.finditer(text):
        span = m.group(0).strip(" .")
        words = span.split()
        while words and words[0].lower() in _NOT_NAMES:
            words = words[1:]
        span = " ".join(words)
        if re.fullmatch(_MONTHS, span, re.IGNORECASE):
            continue
        if span and name_key(span) not in name_key(covered) and not span.isdigit():
            found.append(span)
    return found


def _quoted(text: str) -> list[str]:
    return [next(g for g in m.groups() if g) for m in _QUOTED_RE.finditer(text)]


def analyze_question(text: str) -> Question:
    """The answer type, focus, predicate and mentions of a question.

    Parameters
    ----------
    text : str
        A question in English.

    Returns
    -------
    Question

    Notes
    -----
    Rules, first match wins (Li and Roth 2002's coarse classes, reduced to what an extractive
    answer can check): ``who``/``whom``/``whose`` -> person; ``when``, "what/which year, date,
    day, month, century" -> date; "how many/much/long/old/far/big" -> number; "what does X
    mean", "what does X stand for", "what is/are X" without "of" (an attribute) -> definition;
    ``what``/``which``/``where`` otherwise -> name; an opening auxiliary -> yes_no; else other.

    Examples
    --------
    >>> q = analyze_question("What does `~=` mean?")
    >>> q.answer_type, q.focus, q.quoted
    ('definition', ('~=',), True)
    >>> q = analyze_question("When was PEP 440 created?")
    >>> q.answer_type, q.predicate, q.mentions
    ('date', ('created',), ('PEP 440',))
    >>> analyze_question("What replaced PEP 386?").answer_type
    'name'
    >>> analyze_question("How many PEPs does PEP 440 replace?").answer_type
    'number'
    """
    words = _words(text)
    first = words[0] if words else None
    second = words[1] if len(words) > 1 else ""
    quoted = _quoted(text)
    mentions = mentions_in(text)
    mention_words = {w for m in mentions for w in _words(m)}
    answer_type: AnswerType
    wh = next((w for w in words[:3] if w in _WH), None) if first not in AUXILIARIES else first
    if wh is None:  # "... in a movie directed by who?": the wh-word where the answer goes
        wh = next((w for w in reversed(words) if w in _WH), None)
    lowered = " ".join(words)
    head = _head_noun(words, wh)
    if _CHOICE_RE.search(text) and wh in ("which", "who", "what", "whom"):
        answer_type = "choice"
    elif wh in ("who", "whom", "whose") or (wh in ("what", "which") and head in _PERSON_NOUNS):
        answer_type = "person"
    elif wh == "when" or re.search(r"\b(what|which|in what|in which)\s+(year|date|day|month|century|decade)\b",
                                    lowered):
        answer_type = "date"
    elif (wh == "how" and second in ("many", "much", "long", "old", "far", "big", "large", "often")) \
            or (wh in ("what", "which") and head in _QUANTITY_NOUNS):
        answer_type = "number"
    elif wh == "what" and (re.search(r"\b(mean|means|meaning|stand for|stands for|defined as|definition)\b", lowered)
                           or (second in ("is", "are") and " of " not in f" {lowered} "
                               and len(words) <= 8 and not mentions)):
        answer_type = "definition"
    elif wh in ("what", "which", "where"):
        answer_type = "name"
    elif first in AUXILIARIES:
        answer_type = "yes_no"
    else:
        answer_type = "other"
    focus: tuple[str, ...] = tuple(quoted)
    countable = False
    if not focus and answer_type == "definition":
        countable = bool(re.match(r"^\s*what\s+(?:is|are|does|do|did)\s+(?:a|an)\s", text, flags=re.IGNORECASE))
        rest = re.sub(r"^\s*what\s+(?:is|are|does|do|did)\s+(?:a|an|the)?\s*", "", text, flags=re.IGNORECASE)
        rest = re.sub(r"\s+(?:mean|means|stand\s+for|refer\s+to)\s*\??\s*$", "", rest, flags=re.IGNORECASE)
        focus = (rest.strip(" ?.!"),) if rest.strip(" ?.!") else ()
    skip = _WH | AUXILIARIES | _DETERMINERS | {"of", "to", "in", "on", "for", "by", "with", "and", "or", "at",
                                               "from", "it", "its", "that", "s"}
    quoted_words = {w for q in quoted for w in _words(q)}
    predicate = tuple(w for w in words if w not in skip and w not in mention_words and w not in quoted_words)
    return Question(text=text, wh=wh, answer_type=answer_type, focus=focus, quoted=bool(quoted),
                    predicate=predicate, mentions=tuple(mentions), head=head, countable=countable)


def has_date(text: str, *, besides: str = "") -> bool:
    """Whether ``text`` holds a date or a year that ``besides`` (the question) does not.

    >>> has_date("Created: 18-Mar-2013"), has_date("It was accepted in 2014."), has_date("PEP 440")
    (True, True, False)
    """
    asked = {m.group(0).lower() for m in DATE_RE.finditer(besides)}
    return any(m.group(0).lower() not in asked for m in DATE_RE.finditer(text))


def has_number(text: str, *, besides: str = "") -> bool:
    """Whether ``text`` holds a number (digits or a number word) that ``besides`` does not.

    >>> has_number("It lists three operators."), has_number("See PEP 440.", besides="PEP 440?")
    (True, False)
    """
    asked = {m.group(0) for m in _NUMBER_RE.finditer(besides)} | (set(_words(besides)) & _NUMBER_WORDS)
    if any(m.group(0) not in asked for m in _NUMBER_RE.finditer(text)):
        return True
    return bool((set(_words(text)) & _NUMBER_WORDS) - asked)


def has_code_term(text: str, *, besides: str = "") -> bool:
    """Whether ``text`` holds a term written as code that ``besides`` (the question) does not: a
    marked literal (````__pycache__````), a token such as ``py.typed``, ``__qualname__`` or
    ``@override``, or a word in capitals of four letters or more (``RECORD``) other than an RFC
    2119 keyword.

    >>> has_code_term("This directory will be called ``__pycache__``."), has_code_term("Python's import machinery.")
    (True, False)
    >>> has_code_term("Files MUST be listed in RECORD."), has_code_term("It MUST NOT be used.")
    (True, False)
    """
    asked = besides.lower()
    for m in _CODE_MARKED_RE.finditer(text):
        if m.group(0).strip("`").lower() not in asked:
            return True
    for m in _CODE_TOKEN_RE.finditer(text):
        token = m.group(0).rstrip(".:")
        if re.fullmatch(r"(?:[A-Za-z]\.)+[A-Za-z]?", token):  # "e.g", "i.e.": abbreviations
            continue
        if any(c.isalpha() for c in token) and re.search(r"[_./@:+=]", token) and token.lower() not in asked:
            return True
    for m in _CAPITALS_RE.finditer(text):
        word = m.group(0)
        if sum(c.isalpha() for c in word) >= 4 and word not in _RFC_2119 and word.lower() not in asked:
            return True
    return False


def _has_name(text: str, question: str, *, person: bool) -> bool:
    """Whether ``text`` holds a name the question does not: a capitalised word past the
    sentence's first word, an acronym, a numbered name ("PEP 440"), a code literal or a value (a
    number: "what dividend" is answered by "40 cents"); for a person, two capitalised words in a
    row (or an e-mail address)."""
    asked = set(name_key(question).split())
    if person:
        if re.search(r"[\w.+-]+@[\w-]+\.[\w.]+", text):
            return True
        runs = re.findall(r"\b[A-Z][\w'\u2019.-]+(?:\s+(?:van|von|de|del|da|der|la|le)?\s*[A-Z][\w'\u2019.-]+)+", text)
        for run in runs:
            words = run.split()
            while words and words[0].lower() in _NOT_NAMES:  # "This PEP", "The Python ..."
                words = words[1:]
            if len(words) >= 2 and set(name_key(" ".join(words)).split()) - asked:
                return True
        return False
    for m in _NUMBERED_RE.finditer(text):
        if m.group(1)[0].isupper() and name_key(m.group(0)) not in name_key(question):
            return True
    if has_number(text, besides=question):  # "what dividend": an instance may be a value ("40 cents")
        return True
    tokens = re.findall(r"\S+", text)
    for i, token in enumerate(tokens):
        word = token.strip("\"'`()[]{},.;:!?*")
        if not word or word.lower() in asked or word.lower() in _NOT_NAMES:
            continue
        if word.startswith("`") or token.startswith("``"):
            return True
        if word[0].isupper() and (i > 0 or word.isupper() and len(word) > 1):
            return True
    return False


def _defines(text: str, term: str, *, article: bool = False) -> bool:
    """Whether ``text`` defines ``term``: the term followed (within a few words) by a
    definitional verb, or set off by a colon or dash, or a parenthesis; "X, a/the ..."; "called
    X"; or a noun phrase naming it in apposition ("the compatible release operator ``~=``").
    With ``article`` (the term was asked as "a/an X"), a copula defines only a term with a
    determiner before it ("A wheel is a ...", not "Wheel is an installation format").

    >>> _defines("A clause consists of the compatible release operator ``~=`` and a version.", "~=")
    True
    >>> _defines("This operator MUST NOT be used with ``~=1``.", "~=")
    False
    """
    escaped = re.escape(term)
    cue = rf"{escaped}[`'\"\u201d*_]*\s*(?:\)|,)?\s*(?:\S+\s+){{0,3}}?(?P<cue>{_DEFINITION_CUES})\b"
    for m in re.finditer(cue, text, re.IGNORECASE):
        # a term asked as "a/an X" is the subject of a copula or of a loose cue ("indicates",
        # "describes") only with its determiner: "A wheel is ...", not "Wheel is an installation
        # format" nor "A single wheel archive can indicate ..."; "X means / refers to / is
        # called ..." define as they stand
        if article and not _STRONG_CUE_RE.fullmatch(m.group("cue")) and not re.search(
                r"\b(?:a|an|the|each|every|any)\s+[`'\"\u201c*_]*$", text[:m.start()], re.IGNORECASE):
            continue
        # "X is a / the / one ...": a copula defines with a noun phrase after it ("Wheel is
        # lossless" describes, it does not define); the other cues define by themselves
        if not re.search(r"(?:is|are|was|were)\s*$", m.group(0), re.IGNORECASE):
            return True
        if _NOUN_PHRASE_RE.match(text[m.end():]):
            return True
    set_off = rf"{escaped}[`'\"\u201d*_]*\s*(?::|\u2013|\u2014|--|\s-\s|\(|,\s+(?:a|an|the)\s)"
    if re.search(set_off, text, re.IGNORECASE):
        return True
    if re.search(rf"(?:called|named|known\s+as|termed)\s+[`'\"\u201c*_]*{escaped}", text, re.IGNORECASE):
        return True
    # apposition naming the term: "the compatible release operator ``~=``"
    return bool(re.search(rf"\b(?:the|a|an)\s+(?:[A-Za-z][\w-]*\s+){{1,4}}[`'\"\u201c*_(]+{escaped}(?![\w.~=<>!])",
                          text, re.IGNORECASE))


def holds_focus(question: Question, text: str) -> bool:
    """Whether ``text`` holds the question's focus: a quoted focus literally (``~=`` is not
    ``!=``), a definition's unquoted term by its words (case-insensitive); True without a focus.

    >>> holds_focus(analyze_question("What does `~=` mean?"), "The ``!=`` operator excludes.")
    False
    """
    if not question.focus:
        return True
    if question.quoted:
        return any(f.lower() in text.lower() for f in question.focus)
    haystack = f" {name_key(text)} "
    return any(f" {name_key(f)} " in haystack for f in question.focus if name_key(f))


def holds_numbered_mentions(question: Question, text: str) -> bool:
    """Whether ``text`` names every numbered mention of the question ("PEP 241", "RFC 2119"),
    numbers compared by value (":pep:`241`", "PEP 0241"): an answer about another PEP does
    not answer a question about this one.

    >>> q = analyze_question("Which PEP superseded PEP 241?")
    >>> holds_numbered_mentions(q, "PEP 566: supersedes :pep:`241`."), holds_numbered_mentions(q, "PEP 649 ...")
    (True, False)
    """
    def key(value: str) -> str:
        return " ".join(str(int(t)) if t.isdigit() else t for t in name_key(value).split())

    haystack = f" {key(text)} "
    return all(f" {key(m)} " in haystack for m in question.mentions if _NUMBERED_RE.fullmatch(m))


_SLOT_SKIP = _DETERMINERS | AUXILIARIES | _PREPOSITIONS | _WH | frozenset(
    "name names named kind type sort one ones it its they their there s many much long old far big large often"
    .split())


def slot_words(question: Question) -> tuple[str, ...]:
    """The words around the question's answer slot: the content word before the wh-word ("a
    movie *directed* by who", "the league cup *known* as what") and the first after it ("what
    *campaign*", "which *director*", "where did X *study*"), mentions and function words
    skipped. A sentence that answers says what the slot is (Moldovan et al. 2000's answer
    window around the question's keywords; Jurafsky and Martin ch. 14's question-focus
    alignment), not only the rest of the question.

    >>> slot_words(analyze_question("Jamie Harris is known for a movie directed by who?"))
    ('directed',)
    >>> slot_words(analyze_question("Both Truth in Science and Discovery embrace what campaign?"))
    ('embrace', 'campaign')
    """
    words = _words(question.text)
    named = {w for m in question.mentions for w in _words(m)} | {w for q in question.focus for w in _words(q)}
    if question.wh is None or question.wh not in words:
        return ()
    at = words.index(question.wh) if question.wh in words[:3] else len(words) - 1 - words[::-1].index(question.wh)
    out: list[str] = []
    for side in (reversed(words[:at]), words[at + 1:]):
        for word in side:
            if word in _SLOT_SKIP or len(word) < 3:
                continue
            if word not in named:
                out.append(word)
            break
    return tuple(out)


def holds_numbers(question: Question, text: str) -> bool:
    """Whether ``text`` holds every number the question states ("in 2024", "the 17th awards",
    "Python 3.13"): a constraint of what is asked, which an answer about another year or
    edition does not meet.

    >>> q = analyze_question("Who hosted the 17th Annual Young Hollywood Awards?")
    >>> holds_numbers(q, "The 16th Annual Young Hollywood Awards were hosted by Kelly Osbourne.")
    False
    """
    haystack = {m.group(0).lower() for m in _ANY_NUMBER_RE.finditer(text)}
    return all(m.group(0).lower() in haystack for m in _ANY_NUMBER_RE.finditer(question.text))


#: A numbered name as a sentence cites it: a reST role (":pep:`480`", ":rfc:`2119`") or the
#: acronym of a numbered series before a number ("PEP 480", "PEP-0480", "RFC 2119").
_REFERENCE_RE = re.compile(r":[a-z]+:`[^`]*\d[^`]*`"
                           r"|\b(?:PEP|RFC|ISO|ECMA|IEEE|CVE|BPO|GH|ISSUE|bpo|gh)[\s\-_]?\d{1,6}\b")
#: What says a name's meaning: "X means ...", "meaning ...", "literally ...", "named after",
#: "translates as", "stands for", "short for".
_MEANING_RE = re.compile(r"\b(?:means?|meant|meaning|literally|named\s+(?:after|for)|translat\w*|stands?\s+for"
                         r"|short\s+for|derived\s+from|comes?\s+from|etymolog\w*)\b", re.IGNORECASE)


def strip_references(text: str) -> str:
    """``text`` without its citations of numbered names (:data:`_REFERENCE_RE`): their numbers
    are names, not values.

    >>> strip_references("Names are normalised as in :pep:`503` and PEP 426, up to 64 characters.")
    'Names are normalised as in  and , up to 64 characters.'
    """
    return _REFERENCE_RE.sub("", text)


def holds_named_mentions(question: Question, text: str) -> bool:
    """Whether ``text`` (a sentence with its document's title) names each of the question's
    named mentions that is not numbered (those: :func:`holds_numbered_mentions`): every word of
    the mention of three letters or more that is not a function word, compared as
    :func:`kg.text.names.name_key` writes them. A sentence that names its subject by a shorter
    form ("Bishop Gorman") holds it through its document's title.

    >>> q = analyze_question("How many students attend Bishop Gorman High School?")
    >>> holds_named_mentions(q, "Faith Lutheran High School: It has 1,600 students.")
    False
    >>> holds_named_mentions(q, "Bishop Gorman High School: The school has 1,400 students.")
    True
    """
    haystack = f" {name_key(text)} "
    for mention in question.mentions:
        if _NUMBERED_RE.fullmatch(mention):
            continue
        if any(f" {w} " not in haystack for w in name_key(mention).split() if len(w) > 2 and w not in _NOT_NAMES):
            return False
    return True


def _holds_mixed_case(question: Question, text: str) -> bool:
    """Whether ``text`` holds each word of the question with a capital past its first letter
    ("tvOS"), compared without case."""
    lowered = f" {name_key(text)} "
    return all(f" {name_key(w)} " in lowered for w in _MIXED_CASE_RE.findall(question.text))


def _asks_name_meaning(question: Question) -> bool:
    """Whether the question asks what a proper name means ("What does Ganzhou mean?"): a
    definition asked with "mean", its focus unquoted, capitalised and not an acronym."""
    if question.answer_type != "definition" or question.quoted or len(question.focus) != 1:
        return False
    if not re.search(r"\b(?:mean|means|meaning)\b", question.text, re.IGNORECASE):
        return False
    focus = question.focus[0].strip()  # "Ganzhou", not "PyPA", "NumPy" nor "API"
    return len(focus) > 1 and focus[0].isupper() and focus[1:].islower() and " " not in focus


#: What a person did to a work or an organisation, each role with the words that say it: a
#: question asking who had the role is answered only by a sentence saying that role
#: (:attr:`TypeChecks.literal_roles`), not one naming a role near it in meaning.
ROLE_WORDS: tuple[frozenset[str], ...] = tuple(frozenset(words.split()) for words in (
    "compose composed composes composing composer composers composition",
    "write wrote written writes writing writer writers author authored co-wrote co-written",
    "direct directed directs directing director directors",
    "produce produced produces producing producer producers",
    "design designed designs designing designer designers",
    "found founded founds founding founder founders co-founded co-founder cofounded cofounder",
    "create created creates creating creator creators co-created",
    "invent invented invents inventing inventor inventors",
    "develop developed develops developing developer developers",
    "paint painted paints painting painter",
    "sing sang sung sings singing singer singers vocalist",
    "narrate narrated narrates narrating narrator",
    "illustrate illustrated illustrates illustrating illustrator",
    "edit edited edits editing editor",
    "publish published publishes publishing publisher",
    "coach coached coaches coaching",
    "own owned owns owner owners",
    "star starred stars starring",
    "host hosted hosts hosting",
    "translate translated translates translating translator",
))
#: A word with a capital past its first letter: "tvOS", "iPadOS", "eBay" (not "McDonald", whose
#: first letter is a capital already, nor "API", all capitals).
_MIXED_CASE_RE = re.compile(r"\b[a-z]+[A-Z][A-Za-z0-9]*\b")
#: An acronym asked about: two or more capitals, with lower-case letters or digits between
#: ("TUF", "PyPA", "PEP", "W3C").
_ACRONYM_RE = re.compile(r"^(?=(?:.*[A-Z]){2})[A-Za-z][A-Za-z0-9&.-]{1,11}$")


def _long_form_matches(short: str, long: str) -> bool:
    """Schwartz and Hearst's test (2003, "A simple algorithm for identifying abbreviation
    definitions in biomedical text", PSB): every letter or digit of ``short``, from its last,
    is found in ``long`` from its end backwards, the first one at the start of a word of
    ``long``."""
    s, i = len(short) - 1, len(long) - 1
    while s >= 0:
        c = short[s].lower()
        if not c.isalnum():
            s -= 1
            continue
        while i >= 0 and (long[i].lower() != c or (s == 0 and i > 0 and long[i - 1].isalnum())):
            i -= 1
        if i < 0:
            return False
        i -= 1
        s -= 1
    return True


def expands(text: str, acronym: str) -> bool:
    """Whether ``text`` holds the expansion of ``acronym`` next to it: "long form (ACRONYM)",
    "ACRONYM (long form)", or "ACRONYM stands for / is short for / means / is (the) long form", the long
    form at most min(n + 5, 2n) words for an acronym of n letters (Schwartz and Hearst 2003),
    its first word starting with the acronym's first letter.

    >>> expands("PEP 458 proposes The Update Framework (TUF) for PyPI.", "TUF")
    True
    >>> expands("These extra repository files are called TUF metadata.", "TUF")
    False
    >>> expands("The Python Packaging Authority (PyPA) maintains pip.", "PyPA")
    True
    >>> expands("PEP stands for Python Enhancement Proposal.", "PEP")
    True
    >>> expands("PyPA is the Python Packaging Authority.", "PyPA"), expands("TUF is a framework.", "TUF")
    (True, False)
    """
    letters = sum(c.isalnum() for c in acronym)
    window = min(letters + 5, 2 * letters)
    escaped = re.escape(acronym)
    for m in re.finditer(rf"(?<![\w-]){escaped}(?![\w-])", text):
        before = text[:m.start()].rstrip()
        if before.endswith("("):  # "long form (ACRONYM)"
            words = before[:-1].split()[-window:]
            for start in range(len(words)):
                candidate = " ".join(words[start:]).strip(" ,;:\"'")
                if (candidate and candidate[0].lower() == acronym[0].lower()
                        and acronym.lower() not in candidate.lower() and _long_form_matches(acronym, candidate)):
                    return True
        after = text[m.end():]
        inside = re.match(r"\s*\(([^()]+)\)", after) or re.match(
            r"\s*(?:,\s*)?(?:stands\s+for|is\s+short\s+for|short\s+for|means|is\s+an\s+acronym\s+for|"
            r"is\s+an\s+abbreviation\s+(?:of|for)|(?:is|was|are)(?:\s+(?:the|an?))?)\s+[\"'`]*([^.;:()]+)", after,
            re.IGNORECASE)
        if inside:
            words = inside.group(1).split()[:window]
            for end in range(len(words), 0, -1):
                candidate = " ".join(words[:end]).strip(" ,;:\"'`")
                if candidate and candidate[0].lower() == acronym[0].lower() and _long_form_matches(acronym, candidate):
                    return True
    return False


def _asks_expansion(question: Question) -> str | None:
    """The acronym a question asks the expansion of ("What does TUF stand for?", "What is PEP
    short for?", "What does PyPA mean?"), or None."""
    if question.answer_type != "definition" or len(question.focus) != 1:
        return None
    if not re.search(r"\b(?:stand|stands|short|mean|means|abbreviation|acronym)\b", question.text, re.IGNORECASE):
        return None
    focus = question.focus[0].strip().strip("`'\"")
    return focus if _ACRONYM_RE.match(focus) else None


def _asked_roles(question: Question) -> list[frozenset[str]]:
    """The roles (:data:`ROLE_WORDS`) a person question asks by its answer slot's words."""
    if question.answer_type != "person":
        return []
    slot = set(slot_words(question))
    return [family for family in ROLE_WORDS if slot & family]


def event_words(question: Question) -> tuple[str, ...]:
    """The words a date question asks of its mentions, which the quote must hold
    (:attr:`TypeChecks.event_words`): its predicate without the date's own nouns ("year",
    "date"); empty for a question of another type.

    >>> event_words(analyze_question("When did the Miami and Erie Canal close?"))
    ('close',)
    >>> event_words(analyze_question("In what year was the Carondelet Canal filled in?"))
    ('filled',)
    >>> event_words(analyze_question("Who closed the canal?"))
    ()
    """
    if question.answer_type != "date":
        return ()
    return tuple(w for w in question.predicate if w not in _DATE_NOUNS)


def holds_roles(question: Question, text: str) -> bool:
    """Whether ``text`` says each role the question asks a person by: one of the role's words
    (:data:`ROLE_WORDS`), in any of its forms ("composer" for "composed").

    >>> q = analyze_question("Who composed the music for This Is Elvis?")
    >>> holds_roles(q, "This Is Elvis is a 1981 documentary film written and directed by Andrew Solt.")
    False
    >>> holds_roles(q, "The score was composed by Walter Scharf."), holds_roles(
    ...     analyze_question("Who is the author of PEP 440?"), "Nick Coghlan wrote it.")
    (True, True)
    """
    words = set(_words(text))
    return all(words & family for family in _asked_roles(question))


def answers_type(question: Question, text: str, *, context: str = "", checks: TypeChecks = ALL_CHECKS) -> bool:
    """Whether a candidate sentence holds what the question asks for (its focus and its answer
    type); the check of :func:`kg.rag.functions.ask`'s extractive answer.

    Parameters
    ----------
    question : Question
    text : str
        The candidate sentence.
    context : str, optional
        What the answer quotes with it (its document's title): it may hold the focus and the
        numbered mentions, never the answer's value (a title's "PEP 784" is not the number asked
        for, nor its capitalised words a name).
    checks : TypeChecks, optional
        The optional checks (all on by default; :data:`NO_CHECKS` turns them off).

    Returns
    -------
    bool
        False when the sentence lacks the focus or the answer type: no date for "when", no number
        for "how many", no name besides the question's for "who" / "which" (a person: two
        capitalised words that are not a determiner's run, "This PEP"), no definitional pattern
        around the focus for a definition (a copula followed by a noun phrase: "X is a ...").
        ``yes_no`` and ``other`` check the focus only.

    Examples
    --------
    >>> q = analyze_question("What does `~=` mean?")
    >>> answers_type(q, "``~=``: Compatible release clause"), answers_type(q, "``!=``: Version exclusion clause")
    (True, False)
    >>> answers_type(analyze_question("When was PEP 440 created?"), "PEP 440 describes a scheme.")
    False
    >>> answers_type(analyze_question("How many levels does PEP 784 define?"), "Zstandard is fast.",
    ...              context="PEP 784 \u2013 Adding Zstandard")
    False
    """
    quoted = f"{context}: {text}" if context else text
    if not holds_focus(question, quoted) or not holds_numbered_mentions(question, quoted):
        return False
    if not holds_numbers(question, quoted):
        return False
    if checks.named_mentions and not holds_named_mentions(question, quoted):
        return False
    if checks.mixed_case_mentions and not _holds_mixed_case(question, quoted):
        return False
    kind = question.answer_type
    if kind == "choice":
        return False
    value = strip_references(text) if checks.reference_values else text
    if kind == "date":
        return has_date(value, besides=question.text)
    if kind == "number":
        return has_number(value, besides=question.text)
    if kind == "person":
        if checks.literal_roles and not holds_roles(question, quoted):
            return False
        return _has_name(text, question.text, person=True)
    if kind == "name":
        if checks.code_names and question.head in _CODE_NOUNS:
            return has_code_term(text, besides=question.text)
        return _has_name(text, question.text, person=False)
    if kind == "definition":
        acronym = _asks_expansion(question) if checks.acronym_expansions else None
        if acronym is not None:  # its expansion, not a use of it
            return expands(text, acronym)
        if checks.name_meanings and _asks_name_meaning(question):  # its meaning, not what it is
            return holds_focus(question, text) and _MEANING_RE.search(text) is not None
        article = checks.definition_article and question.countable
        return any(_defines(text, f, article=article) for f in question.focus) if question.focus else True
    return True
