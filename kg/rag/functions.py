"""The functions agents call: ``search-documents``, ``ask``, ``graph-context``, ``extract-entities``
(:mod:`kg.rag.entities`) and ``research-assistant`` (the loop is :mod:`kg.rag.research`). Each
runs on one branch and sees exactly that branch, except ``research-assistant``, which opens a
session branch of its own from the request's branch and works there only.

``ask`` retrieves, grades the passages against the question, rewrites the query once in the
documents' own vocabulary when they fall short (two retrievals at most), then answers from the
passages only, with numbered citations. With an LLM configured it grades, rewrites and answers
with the model; without one it stays useful and says so (``"mode": "extractive"``): the grade is
semantic (the cosine similarity of the question to each whole sentence of the passages, by the
passages' own embedding model, against ``KG_ASK_MIN_SIMILARITY``, calibrated by
cross-validation on HotpotQA), the rewrite takes its words from the best-matching sentences of
the best vector-leg passages (:func:`vocabulary_rewrite`), and the answer is the sentences that
pass the grade and lie within a margin of the best one, at most three, whole
(:mod:`kg.text.sentences`), in document order, each passage's group named by its document and
followed by its marker. When no sentence passes, the answer is "The documents do not cover
this." Stored answers (``kb:Answer``) are found by search but are never ``ask``'s evidence.
When nothing relevant is retrieved the answer is ``grounded: false`` and no model is called.

``graph-context`` seeds from hybrid search (the passages of one node are one seed, in the order
of their best passage) or from given node addresses, then walks the branch's relations
breadth-first within the hop, node and fan-out budgets (:func:`kg.rag.graph.traverse_from`),
or, with ``follow: "subjects"``, follows mentions to subjects: the entities each seed mentions,
then the documents ``about`` them (:func:`kg.rag.graph.follow_subjects`).

``ask`` with ``use_graph: true`` adds a second leg: first the documents about the entities the
five best retrieved documents mention (the page of a bridge entity: HotpotQA's second hop, Yang et
al. 2018), then the walk from the nodes of the retrieved passages, two hops out (one through a
direct link between documents, two through a shared entity node); the passage of each reached
node that shares most terms with the question is appended, at most three, marked
``"via": "graph"``. The leg can never fail the answer: an
error is logged and recorded in ``attempts``. With ``store_answer`` the answer is written as a
``kb:Answer`` node with ``cites`` relations to the nodes it cites, on the request's branch.

References
----------
Rocchio (1971), "Relevance feedback in information retrieval" (pseudo-relevance feedback).
Reimers and Gurevych (2019), "Sentence-BERT" (sentence embeddings compared by cosine: the
semantic grade); Kiss and Strunk (2006), "Unsupervised Multilingual Sentence Boundary Detection"
(the sentence splitting rules of :mod:`kg.text.sentences`).
Asai et al. (2023), "Self-RAG"; Yan et al. (2024), "Corrective Retrieval Augmented Generation"
(grade, rewrite, retrieve again).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import math
import re
import uuid
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass, fields
from typing import Any, Literal, cast

from rapidfuzz import fuzz, process
from sqlalchemy import select
from sqlalchemy.orm import Session

from kg.context import Actor, Resources, permit, reading, run, throttle
from kg.errors import Conflict, InvalidInput, KGError, NotFound
from kg.graph.neighbors import check_direction
from kg.graph.validity import ValidAt, maybe_aware, read_time
from kg.index.tokenize import analyze, stem
from kg.indexing.config import TEXT_FIELDS, workspace_embedding
from kg.ops.branches import create_branch
from kg.ops.nodes import GraphWrite, write_graph
from kg.ops.text_store import chunk_hashes
from kg.providers.jsonreply import parse_json_reply
from kg.providers.llm import ToolLLM
from kg.rag.entities import extract_entities, slugify
from kg.rag.graph import follow_subjects, spread_activation, traverse_from
from kg.rag.graph_answer import graph_answer
from kg.rag.research import run_fixed_plan, run_tool_loop
from kg.rag.resolve import resolve_entities
from kg.rag.search import SearchRequest, search
from kg.store.models import Chunk, Workspace
from kg.store.nodes import NodeHead, find_node, nodes_by_id, visible_node_heads
from kg.store.numbers import integral
from kg.store.paths import parse_address, validate_path
from kg.store.repos import BranchView, workspace_id
from kg.text.questions import (
    ALL_CHECKS,
    Question,
    TypeChecks,
    analyze_question,
    answers_type,
    event_words,
    slot_words,
)
from kg.text.sentences import split_sentences
from kg.tracing import traced
from kg.types.functions import (
    AskOutput,
    ExtractEntitiesOutput,
    GraphContextOutput,
    Passage,
    ResearchAssistantOutput,
    ResolveEntitiesOutput,
    SearchDocumentsOutput,
    StoredAnswer,
)

__all__ = [
    "ANSWER_NODE_TYPE", "ANSWER_SLACK", "CITES", "COVERAGE_SUFFICIENT", "EXPENSIVE_FUNCTIONS", "FOCUS_PASSAGES",
    "FOLLOWS", "FRAME_WORDS", "FUNCTIONS", "GRAPH_FAN_OUT", "GRAPH_HOPS", "GRAPH_MAX_NODES", "GRAPH_PASSAGES",
    "GRAPH_PASSAGE_CHARS", "GRAPH_SUBJECT_FAN_OUT", "GRAPH_SUBJECT_SEEDS", "INPUT_KEYS", "MAX_DISTANCE", "MAX_LEADS",
    "MAX_PASSAGES", "MAX_SEEDS", "MAX_SENTENCES", "NOT_COVERED", "NOT_SAID", "QUESTION_WORDS",
    "RESEARCH_BRANCH_PREFIX", "RESEARCH_TOOLS", "REWRITE_PASSAGES", "REWRITE_TERMS", "SALIENT_PIECES",
    "SENTENCE_MARGIN", "SPELLING_RATIO", "ScoredSentence", "absent_terms", "answer_coverage", "ask", "compose_answer",
    "coverage", "document_label", "extractive_answer", "focus_passages", "graph_context", "graph_passages",
    "holds_event_words", "invoke", "leads", "lemmas", "misspelt_words", "nearest_words", "not_said",
    "research_assistant", "salient_words", "score_sentences", "search_documents", "select_sentences", "store_answer",
    "type_checks", "vocabulary_rewrite",
]

#: What a function answers (:data:`FUNCTIONS`): one of :class:`kg.types.functions.FunctionOutput`'s models.
FunctionResult = (SearchDocumentsOutput | AskOutput | GraphContextOutput | ExtractEntitiesOutput
                  | ResearchAssistantOutput | ResolveEntitiesOutput)

log = logging.getLogger(__name__)

MAX_PASSAGES = 8
MAX_DISTANCE = 0.65          # cosine distance beyond which a vector-only hit is not relevant
COVERAGE_SUFFICIENT = 0.5    # share of the question's terms the passages must contain
_SENTENCE_RE = re.compile(r"(?<=[.!?])\s+|\n{2,}")
_MARKER_RE = re.compile(r"\[(\d+)\]")
#: A footnote reference inside a source sentence: "[2]_" (reStructuredText), "[2]", "[#]_".
_FOOTNOTE_RE = re.compile(r"\s?\[(?:\d+|#\w*|\*)\]_?")
NOT_COVERED = "The documents do not cover this."
#: The answer when sentences pass the semantic grade but none holds what the question asks for
#: (:func:`kg.text.questions.answers_type`): the nearest passages follow as ``leads``.
NOT_SAID = 'The documents do not say what is asked: "{question}"'
FOCUS_PASSAGES = 8           # most passages read for a quoted focus the index cannot search
MAX_LEADS = 3                # nearest passages given as leads of an answer that is not grounded
MAX_SENTENCES = 3            # most sentences of an extractive answer
SENTENCE_MARGIN = 0.3        # a sentence further than this below the best one is left out (2-fold CV, bench)
REWRITE_PASSAGES = 2         # vector-leg passages that lend their words to the rewrite
REWRITE_TERMS = 6            # most terms the rewrite adds
ANSWER_SLACK = 4             # passages searched beyond the wanted ones: stored answers are not evidence
GRAPH_HOPS = 2               # ask's graph leg: document -> entity -> document
GRAPH_MAX_NODES = 30
GRAPH_FAN_OUT = 10
GRAPH_PASSAGES = 3           # most passages the graph leg adds
GRAPH_SUBJECT_SEEDS = 5      # retrieved documents whose subjects come first (bench/cv_graph.py: chosen on 5 of 5 folds)
GRAPH_SUBJECT_FAN_OUT = 50   # entities followed per seed document, documents per entity
GRAPH_PASSAGE_CHARS = 1_500  # a fallback passage (text fields, no chunks yet) is cut here
ANSWER_NODE_TYPE = "kb:Answer"
CITES = "cites"
MAX_SEEDS = 1_000


def _input(raw: Any, key: str) -> str:
    if not isinstance(raw, dict):
        raise InvalidInput("input must be an object")
    value = raw.get(key)
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(f"input.{key} must be a non-empty string", details={"field": key})
    return value


def _workspaces(raw: dict) -> list[str] | None:
    value = raw.get("workspaces")
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(w, str) for w in value):
        raise InvalidInput("input.workspaces must be a list of names")
    return value


def _k(raw: dict, default: int) -> int:
    value = integral(raw.get("k", default))  # 5.0 is the integer 5, as in JSON Schema
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 100:
        raise InvalidInput("input.k must be an integer between 1 and 100", details={"k": value})
    return value


def _search_passages(session: Session, services: Resources, view: BranchView, query: str, k: int, workspaces, *,
                     relevant_only: bool, mode: Literal["vector", "fulltext", "hybrid"] = "hybrid"):
    """Hybrid chunk search on one branch view, as passages.

    ``relevant_only`` keeps passages with evidence of their own (a BM25 match, or a vector
    within MAX_DISTANCE), which needs each leg's ranks: kg fuses those searches itself (an
    index's own hybrid query, Weaviate's, answers fused scores without them). Each passage also
    carries ``node_type``, ``is_answer`` (a stored ``kb:Answer``) and, for ``ask``, the private
    keys ``_title`` (the node's title) and ``_model`` (its workspace's embedding model).
    """
    rows, _ = search(session, services, view, SearchRequest(
        query=query, k=k, mode=mode, granularity="chunk", workspaces=workspaces,
        fusion="kg" if relevant_only and mode == "hybrid" else None))
    if relevant_only:
        rows = [r for r in rows if r.fulltext_rank is not None
                or (r.vector_distance is not None and r.vector_distance <= MAX_DISTANCE)]
    models = _workspace_models(session, services, view)
    return [{"workspace": r.workspace, "path": r.path, "node_id": r.node_id, "chunk_index": r.chunk_index,
             "text": r.chunk_text, "score": r.score, "text_is_exact": True, "node_type": r.node_type,
             "is_answer": r.node_type == ANSWER_NODE_TYPE,
             "_title": document_label(r.properties),
             "_model": models.get(r.workspace, services.settings.embedding_model)} for r in rows]


def document_label(properties: dict[str, Any]) -> str | None:
    """How an extractive answer names a passage's document: its ``title`` (a PEP, as kg's PEP
    format stores it with its number in ``pep``, is "PEP 440 – <title>"); None without a title.
    """
    title = properties.get("title")
    if not isinstance(title, str) or not title.strip():
        return None
    title = " ".join(title.split())
    number = properties.get("pep")
    if isinstance(number, int) and not isinstance(number, bool) and f"pep {number}" not in title.lower():
        return f"PEP {number} \u2013 {title}"
    return title


def _workspace_models(session: Session, services: Resources, view: BranchView) -> dict[str, str]:
    """The embedding model of each workspace of the view, by name."""
    rows = session.execute(select(Workspace.name, Workspace.config).where(Workspace.repo_id == view.repo.id)).all()
    return {name: workspace_embedding(config, default_model=services.settings.embedding_model).model
            for name, config in rows}


def _public(passages: list[dict]) -> list[dict]:
    """Passages without their private keys."""
    return [{k: v for k, v in p.items() if not k.startswith("_")} for p in passages]


def _passages(services: Resources, caller: Actor, repo: str, branch: str, query: str, k: int, workspaces, *,
              relevant_only: bool, mode: Literal["vector", "fulltext", "hybrid"] = "hybrid",
              at_revision: int | None = None):
    with reading(services, caller, repo, branch, at_revision) as (session, view):
        return _search_passages(session, services, view, query, k, workspaces, relevant_only=relevant_only,
                                mode=mode)


def search_documents(services: Resources, caller: Actor, repo: str, branch: str, raw: Any) -> SearchDocumentsOutput:
    """Hybrid search at chunk granularity: passages with their citation handles.

    Raises
    ------
    kg.errors.InvalidInput, kg.errors.NotFound
    """
    query = _input(raw, "query")
    passages = _passages(services, caller, repo, branch, query, _k(raw, 10), _workspaces(raw), relevant_only=False)
    return SearchDocumentsOutput(passages=[Passage.model_validate(p) for p in _public(passages)])


# -- ask ------------------------------------------------------------------------------------


def coverage(question: str, passages: list[dict]) -> float:
    """Share of the question's content terms that occur in the passages (0..1)."""
    terms = set(analyze(question))
    if not terms:
        return 0.0
    seen = set()
    for p in passages:
        seen.update(analyze(p["text"]))
    return len(terms & seen) / len(terms)


def extractive_answer(question: str, passages: list[dict], *, max_sentences: int = 3) -> tuple[str, list[int]]:
    """The sentences of the passages that share the most question terms, each with its marker.

    Returns
    -------
    (answer, markers)
        Markers are 1-based passage numbers, in the order cited; ``("", [])`` when no sentence
        shares a term with the question.
    """
    terms = set(analyze(question))
    df: Counter[str] = Counter()
    sentences = []
    for number, p in enumerate(passages, start=1):
        for sentence in _SENTENCE_RE.split(p["text"]):
            sentence = " ".join(sentence.split())
            if len(sentence) < 12:
                continue
            words = set(analyze(sentence))
            df.update(words & terms)
            sentences.append((number, sentence, words))
    n = max(1, len(sentences))
    scored = []
    for order, (number, sentence, words) in enumerate(sentences):
        score = sum(math.log(1 + n / (1 + df[t])) for t in words & terms)
        if score > 0:
            scored.append((-score, number, order, sentence))
    scored.sort()
    chosen = sorted(scored[:max_sentences], key=lambda s: (s[1], s[2]))
    parts = [f"{sentence} [{number}]" for _, number, _, sentence in chosen]
    return " ".join(parts), list(dict.fromkeys(number for _, number, _, _ in chosen))


QUESTION_WORDS = frozenset("""
    what which who whom whose when where why how whether does did do done doing has have had having
    can could would should shall may might must been being were about from than also any all some
    each many much more most other same its his her hers him she he you your yours our ours we us
    them those i me my mine one ones very just only both either neither get gets got getting out off up
    over before after during while until since within without between among through across against
    along around behind below beneath beside beyond near toward towards upon via per
    """.split())
"""Words of a question's form, not of its subject (interrogatives, auxiliaries, pronouns,
quantifiers, prepositions and particles): not counted by :func:`absent_terms` (BM25's stop
words are not either)."""


def _content_words(text: str) -> list[str]:
    """The words of ``text`` (lower-cased, unstemmed) that the coverage check weighs: BM25 terms
    of three characters or more, or numbers, and none of :data:`QUESTION_WORDS`."""
    return [w for w in analyze(text, stem_words=False)
            if (len(w) >= 3 or w.isdigit()) and w not in QUESTION_WORDS]


def absent_terms(services: Resources, caller: Actor, repo: str, branch: str, question: str,
                 workspaces: list[str] | None, at_revision: int | None = None) -> tuple[list[str], int]:
    """The question's content words that no searchable passage holds, and how many it has.

    A content word is one of the question's BM25 terms (:func:`kg.index.tokenize.analyze`: no
    stop word) of at least three characters, or a number, and none of :data:`QUESTION_WORDS`;
    words of one stem count once. Each
    is looked up by a BM25 search of the branch as the caller reads it (its workspaces, the
    request's ``workspaces``; as of ``at_revision`` when given), so what it may not read counts
    as absent; a stored answer (``kb:Answer``) is not a document that holds it.

    Returns
    -------
    (list of str, int)
        The absent words as the question writes them (lower-cased), in question order, and
        the number of content words.

    Notes
    -----
    One BM25 search a content word. A question whose own words the documents never use (an
    entity, a number, a subject) is most often about something they do not hold: the share of
    such words is ``ask``'s lexical answerability check beside the semantic grade, the query
    term coverage used as a query-performance predictor (Cronen-Townsend, Zhou and Croft 2002,
    "Predicting query performance"; a query term missing from the collection has the largest
    clarity cost), its threshold chosen by cross-validation (``bench/extractive_ask.py``).
    """
    words: dict[str, str] = {}
    for word in _content_words(question):
        words.setdefault(stem(word), word)
    if not words:
        return [], 0
    with reading(services, caller, repo, branch, at_revision) as (session, view):
        absent = [word for word in words.values()
                  if not _evidence(_search_passages(session, services, view, word, 5, workspaces,
                                                    relevant_only=False, mode="fulltext"))]
    return absent, len(words)


def nearest_words(services: Resources, words: list[str], sentences: list[ScoredSentence],
                  passages: list[dict]) -> dict[str, tuple[str, float]]:
    """For each of ``words``, the content word of ``sentences`` nearest in meaning and their
    cosine similarity (one embedding call: the words and the sentences' words, by the embedder
    of the first sentence's passage); empty without words or sentences.

    A question's word that no document uses may still be answered in other words ("eviction"
    by "landlord", "warning" by "notice": MiniLM 0.57 and 0.52), where a subject the documents
    do not hold is near none of the quoted words ("quantum" 0.31 at best, "tesla" 0.26).
    """
    if not words or not sentences:
        return {}
    theirs = list(dict.fromkeys(w for s in sentences for w in _content_words(s.text)))
    if not theirs:
        return {}
    model = passages[sentences[0].marker - 1].get("_model") or services.settings.embedding_model
    vectors = services.embedder(model).embed(list(words) + theirs)
    similarity = vectors[len(words):] @ vectors[:len(words)].T  # (their words, words)
    best = similarity.argmax(axis=0)
    return {word: (theirs[int(best[i])], round(float(similarity[best[i], i]), 4)) for i, word in enumerate(words)}


SPELLING_RATIO = 85.0
"""A question's word that no passage holds is taken for a misspelling of a quoted word when
their normalised Levenshtein similarity (rapidfuzz's ``fuzz.ratio``) reaches this: one edit in
seven characters ("hal" / "hall" 85.7, "supernatrual" / "supernatural" 91.7)."""


SALIENT_PIECES = 3
"""A word the embedder's tokenizer splits into this many pieces or more is a rare one (a name,
a technical term: "nginx" 3, "quantum" 1, "replaced" 1)."""


def salient_words(services: Resources, words: list[str], question: str) -> list[str]:
    """The words of ``words`` that name the question's subject rather than say something about
    it: a word holding a digit, one the question capitalises past its first word (a name), or a
    rare one (:data:`SALIENT_PIECES` or more pieces of the default embedder's tokenizer).

    A common word the documents do not use (a verb, "replaced" where they say "supersedes")
    is most often said in other words; a name or a number they never use is most often a subject
    they do not hold. Which words the coverage check counts ("salient" or "all",
    ``KG_ASK_ABSENT_WORDS``) was chosen by cross-validation (``bench/extractive_ask.py``).
    """
    capitalised = {m.group(0).lower() for m in re.finditer(r"\w+", question)
                   if m.start() > 0 and m.group(0)[:1].isupper()}
    embedder = services.embedder(services.settings.embedding_model)
    return [w for w in words if any(c.isdigit() for c in w) or w in capitalised
            or embedder.count_tokens(w) >= SALIENT_PIECES]


def misspelt_words(words: list[str], sentences: list[ScoredSentence]) -> dict[str, str]:
    """``{word: the quoted word it misspells}`` for each of ``words`` (numbers excepted) within
    :data:`SPELLING_RATIO` of a content word of ``sentences``.

    References
    ----------
    V. I. Levenshtein, "Binary codes capable of correcting deletions, insertions and
    reversals", Soviet Physics Doklady 10(8), 1966, pp. 707-710 (the edit distance behind
    rapidfuzz's ``fuzz.ratio``, the Indel similarity normalised to 0..100).
    """
    theirs = list(dict.fromkeys(w for s in sentences for w in analyze(s.text, stem_words=False) if len(w) >= 3))
    found: dict[str, str] = {}
    for word in words:
        if word.isdigit() or not theirs:
            continue
        match = process.extractOne(word, theirs, scorer=fuzz.ratio, score_cutoff=SPELLING_RATIO)
        if match is not None:
            found[word] = match[0]
    return found


@dataclass(frozen=True)
class ScoredSentence:
    """A whole sentence of a passage and its cosine similarity to the question."""

    marker: int       # 1-based number of its passage
    position: int     # its order in the passage
    text: str
    similarity: float


def score_sentences(services: Resources, question: str, passages: list[dict]) -> list[ScoredSentence]:
    """The whole sentences of the passages, each with its cosine similarity to the question.

    Parameters
    ----------
    services : kg.context.Resources
        Gives the embedder of each passage's workspace (the passage's ``_model``, else
        ``KG_EMBEDDING_MODEL``): the question is embedded once per model.
    question : str
    passages : list of dict
        With ``text``; numbered from 1 in this order.

    Returns
    -------
    list of ScoredSentence
        In passage order, then sentence order; a sentence repeated in several passages (chunk
        overlap) is kept once, in its first passage. Sentences come from
        :func:`kg.text.sentences.split_sentences` (whole sentences only).

    Raises
    ------
    kg.errors.ProviderError
        The embedder failed.

    Notes
    -----
    One embedding call per model over the question and every sentence: O(sentences) model
    work. Similarity is the dot product of L2-normalised vectors, i.e. the cosine, the
    dense-retrieval relevance of Karpukhin et al. (2020), "Dense Passage Retrieval for
    Open-Domain Question Answering", applied to sentences as in Reimers and Gurevych (2019),
    "Sentence-BERT".
    """
    by_model: dict[str, list[tuple[int, int, str]]] = {}
    seen: set[str] = set()
    for number, p in enumerate(passages, start=1):
        for position, sentence in enumerate(split_sentences(p["text"])):
            if sentence in seen:
                continue
            seen.add(sentence)
            model = p.get("_model") or services.settings.embedding_model
            by_model.setdefault(model, []).append((number, position, sentence))
    out: list[ScoredSentence] = []
    for model, items in by_model.items():
        vectors = services.embedder(model).embed([question] + [text for _, _, text in items])
        sims = vectors[1:] @ vectors[0]
        out.extend(ScoredSentence(n, pos, text, float(sim)) for (n, pos, text), sim in zip(items, sims, strict=True))
    out.sort(key=lambda s: (s.marker, s.position))
    return out


def select_sentences(scored: list[ScoredSentence], *, threshold: float, margin: float = SENTENCE_MARGIN,
                     max_sentences: int = MAX_SENTENCES) -> list[ScoredSentence]:
    """The sentences that answer: above ``threshold``, within ``margin`` of the best, at most
    ``max_sentences`` of them (most similar first), returned in document order.

    Parameters
    ----------
    scored : list of ScoredSentence
    threshold : float
        Cosine similarity a sentence must reach (the semantic grade, ``KG_ASK_MIN_SIMILARITY``).
    margin : float
        A sentence less similar than the best one by more than this is left out (it is about
        something else than the best-answering sentence).
    max_sentences : int

    Returns
    -------
    list of ScoredSentence
        Ordered by passage number, then position; empty when no sentence passes the grade.
    """
    passing = [s for s in scored if s.similarity >= threshold]
    if not passing:
        return []
    best = max(s.similarity for s in passing)
    kept = sorted((s for s in passing if s.similarity >= best - margin), key=lambda s: -s.similarity)
    return sorted(kept[:max_sentences], key=lambda s: (s.marker, s.position))


def compose_answer(chosen: list[ScoredSentence], passages: list[dict]) -> tuple[str, list[int]]:
    """The extractive answer: the chosen sentences in document order, each passage's group
    followed by its marker, prefixed by the document's title when the sentences do not name it.

    Returns
    -------
    (answer, markers)
        The answer's citations are numbered 1, 2, 3 in the order cited; ``markers[i]`` is the
        1-based number of the passage that citation ``i + 1`` stands for.
    """
    groups: dict[int, list[str]] = {}
    for s in chosen:
        # A quoted sentence's own footnote references ("[2]_" in reStructuredText, "[2]") would
        # read as the answer's citations: dropped from the quote.
        text = " ".join(_FOOTNOTE_RE.sub("", s.text).split())
        groups.setdefault(s.marker, []).append(text)
    parts = []
    for number, (marker, texts) in enumerate(groups.items(), start=1):
        body = " ".join(texts)
        title = passages[marker - 1].get("_title")
        if isinstance(title, str) and title.strip() and " ".join(title.split()).lower() not in body.lower():
            body = f"{' '.join(title.split())}: {body}"
        parts.append(f"{body} [{number}]")
    return " ".join(parts), list(groups)


def vocabulary_rewrite(services: Resources, caller: Actor, repo: str, branch: str, question: str,
                       workspaces: list[str] | None, *, passages: int = REWRITE_PASSAGES,
                       extra_terms: int = REWRITE_TERMS, at_revision: int | None = None) -> str | None:
    """The question rewritten in the vocabulary of its best vector-leg passages.

    The vector leg alone (KNN, no distance cut) retrieves ``passages`` passages; from each, the
    sentence most similar to the question is taken, and its content terms that the question
    lacks (in sentence order, most similar sentence first) are appended to the question, at most
    ``extra_terms``. Only the best-matching sentences of the best vector hits lend words, not
    every top passage: a lexical match of an unrelated document cannot steer the rewrite.

    Returns
    -------
    str or None
        None when the vector leg finds nothing or lends no new term.

    Notes
    -----
    A form of pseudo-relevance feedback (Rocchio 1971; Lavrenko and Croft 2001, "Relevance-based
    language models") restricted to dense-retrieval hits, as in Wang et al. (2021), "Pseudo-
    relevance feedback for multiple representation dense retrieval" (ColBERT-PRF).
    """
    hits = _passages(services, caller, repo, branch, question, passages + ANSWER_SLACK, workspaces,
                     relevant_only=False, mode="vector", at_revision=at_revision)
    hits = _evidence(hits)[:passages]
    if not hits:
        return None
    scored = score_sentences(services, question, hits)
    best: dict[int, ScoredSentence] = {}
    for s in scored:
        if s.marker not in best or s.similarity > best[s.marker].similarity:
            best[s.marker] = s
    asked = {stem(w) for w in analyze(question, stem_words=False)}
    terms: list[str] = []
    for s in sorted(best.values(), key=lambda s: -s.similarity):
        for word in analyze(s.text, stem_words=False):
            term = stem(word)
            if term in asked or len(word) < 3 or word.isdigit():
                continue
            asked.add(term)
            terms.append(word)
    if not terms:
        return None
    return " ".join([question] + terms[:extra_terms])


def _evidence(passages: list[dict]) -> list[dict]:
    """The passages ``ask`` may answer from: stored answers (``kb:Answer``) are not evidence."""
    return [p for p in passages if not p.get("is_answer")]


def _llm_grade(llm, question: str, passages: list[dict]) -> bool:
    """Ask the model whether the passages answer the question; any failure counts as yes."""
    schema = {"type": "object", "properties": {"sufficient": {"type": "boolean"}}, "required": ["sufficient"]}
    context = "\n\n".join(f"[{i}] {p['text']}" for i, p in enumerate(passages, start=1))
    try:
        reply = traced("kg.llm.call", llm.chat)([
            {"role": "system", "content": "You grade retrieval. Answer with JSON only."},
            {"role": "user", "content": f"Question: {question}\n\nPassages:\n{context}\n\n"
                                        "Do the passages contain the answer? {\"sufficient\": true|false}"},
        ], json_schema=schema, timeout_s=30)
        return bool(cast(dict[str, Any], parse_json_reply(reply, schema=schema)).get("sufficient", True))
    except KGError:
        return True


def _llm_rewrite(llm, question: str, passages: list[dict]) -> str | None:
    schema = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}
    sample = "\n".join(p["text"][:300] for p in passages[:3])
    try:
        reply = traced("kg.llm.call", llm.chat)([
            {"role": "system", "content": "Rewrite search queries in the vocabulary of the documents. JSON only."},
            {"role": "user", "content": f"Question: {question}\n\nDocument excerpts:\n{sample}\n\n"
                                        "Give one search query: {\"query\": \"...\"}"},
        ], json_schema=schema, timeout_s=30)
        query = cast(dict[str, Any], parse_json_reply(reply, schema=schema)).get("query")
        return query.strip() if isinstance(query, str) and query.strip() else None
    except KGError:
        return None


def ask(services: Resources, caller: Actor, repo: str, branch: str, raw: Any) -> AskOutput:
    """Answer a question from the documents only, with citations.

    Parameters
    ----------
    raw : dict
        ``{"question", "workspaces"?, "use_graph"?: bool, "store_answer"?: {"workspace",
        "path"?}, "as_of"?: ISO 8601 time with a zone, "include_invalid"?: bool}``. ``use_graph``
        adds the graph leg (:func:`graph_passages`) after retrieval, over the relations current
        now (or valid at ``as_of``; all with ``include_invalid``);
        ``store_answer`` writes the answer as a ``kb:Answer`` node on this branch
        (:func:`store_answer`; default path ``/answers/{question slug}-{sha256 prefix}``, so
        asking again replaces the earlier answer with a new version).

    Returns
    -------
    kg.types.functions.AskOutput
        ``answer``, ``grounded``, ``citations``, ``attempts``, ``mode`` (``"llm"`` or
        ``"extractive"``), ``leads`` and ``stored`` when there are.
        The graph leg's attempt has ``"leg": "graph"`` (and ``error`` when it failed), its
        citations ``"via": "graph"``; without an LLM, once a sentence passed the semantic
        grade, an attempt ``"leg": "coverage"`` with ``terms`` (the question's content words),
        ``absent_terms`` (those no passage holds: :func:`absent_terms`), ``nearest`` (each
        one's nearest quoted word and similarity: :func:`nearest_words`), ``misspelt`` (those
        that misspell a quoted word: :func:`misspelt_words`) and ``uncovered`` (absent, not
        misspelt, and below ``KG_ASK_WORD_SIMILARITY``); ``passages`` is 0 when more than
        ``KG_ASK_MAX_ABSENT_SHARE`` of the words are uncovered (the answer is then not
        covered); ``stored`` is ``{"workspace", "path", "node_id", "revision"}``.

    Raises
    ------
    kg.errors.InvalidInput, kg.errors.NotFound
    kg.errors.Conflict
        ``store_answer`` names a node that is not a ``kb:Answer`` (checked before any work).
    kg.errors.ProviderError
        The model failed while answering (grading and rewriting failures are tolerated).
    """
    question = _input(raw, "question")
    workspaces = _workspaces(raw)
    use_graph = raw.get("use_graph", False)
    if not isinstance(use_graph, bool):
        raise InvalidInput("input.use_graph must be true or false", details={"use_graph": use_graph})
    at = _valid_at(raw)
    revision = raw.get("revision")
    if revision is not None and (isinstance(revision, bool) or not isinstance(revision, int) or revision < 0):
        raise InvalidInput("input.revision must be a revision number", details={"revision": revision})
    target = _answer_target(services, caller, repo, branch, raw, question)
    llm = services.llm
    has_llm = getattr(llm, "name", "none") != "none"
    attempts: list[dict[str, Any]] = []
    analysed = analyze_question(question)
    if not has_llm:
        # A relation or a property of a named node: answered from the graph, cited as the edge
        # or the property (kg.rag.graph_answer), under the caller's grants, at the revision asked.
        fact = graph_answer(services, caller, repo, branch, question, workspaces, at, revision)
        if fact is not None:
            attempts.append({"query": question, "leg": "facts", "passages": len(fact["citations"])})
            result = {"answer": fact["answer"], "grounded": True, "citations": fact["citations"],
                      "attempts": attempts, "mode": "extractive"}
            if target is not None:
                result["stored"] = store_answer(services, caller, repo, branch, *target, question, result)
            return AskOutput.model_validate(result)
    threshold = services.settings.ask_min_similarity
    coverage = services.settings.ask_answer_coverage
    checks = type_checks(services)
    passages = _evidence(_passages(services, caller, repo, branch, question, MAX_PASSAGES + ANSWER_SLACK,
                                   workspaces, relevant_only=True, at_revision=revision))[:MAX_PASSAGES]
    attempts.append({"query": question, "passages": len(passages)})
    scored: list[ScoredSentence] = []
    if has_llm:
        sufficient = bool(passages) and _llm_grade(llm, question, passages)
    else:
        scored = score_sentences(services, question, passages) if passages else []
        # sufficient: a sentence passes the semantic grade and holds what the question asks for
        sufficient = _grade(analysed, scored, passages, coverage, checks)[0] >= threshold
    rewritten: str | None = None
    if has_llm and passages and not sufficient:
        # Nothing relevant at all: no model is called (CASES #24), the answer is ungrounded.
        rewritten = (_llm_rewrite(llm, question, passages)
                     or vocabulary_rewrite(services, caller, repo, branch, question, workspaces,
                                           at_revision=revision))
    elif not has_llm and not sufficient:
        rewritten = vocabulary_rewrite(services, caller, repo, branch, question, workspaces, at_revision=revision)
    if rewritten and rewritten != question:
        again = _evidence(_passages(services, caller, repo, branch, rewritten, MAX_PASSAGES + ANSWER_SLACK,
                                    workspaces, relevant_only=True, at_revision=revision))[:MAX_PASSAGES]
        attempts.append({"query": rewritten, "passages": len(again)})
        if again and has_llm:
            passages = again
        elif again:
            # Graded against the question itself, never against the rewrite.
            scored_again = score_sentences(services, question, again)
            if (_grade(analysed, scored_again, again, coverage, checks)
                    > _grade(analysed, scored, passages, coverage, checks)):
                passages, scored = again, scored_again
    if not has_llm and analysed.quoted and _grade(analysed, scored, passages, coverage, checks)[0] < threshold:
        # A quoted focus ("`~=`") BM25 does not index and KNN does not tell from its neighbours
        # ("!="): the passages holding it literally are read and graded as well.
        extra = focus_passages(services, caller, repo, branch, analysed.focus, workspaces, revision)
        seen = {(p["workspace"], p["path"], p["chunk_index"]) for p in passages}
        extra = [p for p in extra if (p["workspace"], p["path"], p["chunk_index"]) not in seen]
        attempts.append({"query": " ".join(analysed.focus), "leg": "focus", "passages": len(extra)})
        if extra:
            passages = passages + extra
            scored = score_sentences(services, question, passages)
    mode = "llm" if has_llm else "extractive"
    retrieved, retrieved_scores = passages, scored
    excused: list[str] = []
    paraphrased: list[str] | None = None
    if not has_llm and any(s.similarity >= threshold for s in scored):
        # The semantic grade passed: the documents must also use enough of the question's own
        # words, or words near them in meaning; else the sentences are about something near
        # the question, not its subject. KG_ASK_MAX_ABSENT_SHARE 1: reported, never declined.
        absent, asked = absent_terms(services, caller, repo, branch, question, workspaces, revision)
        quoted = select_sentences(scored, threshold=threshold)
        nearest = nearest_words(services, absent, quoted, passages)
        misspelt = misspelt_words(absent, quoted)
        word_similarity = services.settings.ask_word_similarity
        uncovered = [w for w in absent if w not in misspelt and (w not in nearest or nearest[w][1] < word_similarity)]
        if services.settings.ask_absent_words == "salient":
            uncovered = salient_words(services, uncovered, question)
        # the words no document uses that the check does not count (said in other words,
        # misspelt, or not naming the subject) are excused from the answer's own coverage
        excused = [w for w in absent if w not in uncovered]
        # the answer slot's word is said only in other words near enough, or misspelt
        slot_floor = services.settings.ask_slot_similarity
        if slot_floor > -1.0:
            paraphrased = [w for w in absent if w in misspelt or (w in nearest and nearest[w][1] >= slot_floor)]
        if asked and len(uncovered) / asked > services.settings.ask_max_absent_share:
            passages, scored = [], []
        attempts.append({"query": question, "leg": "coverage", "passages": len(passages), "absent_terms": absent,
                         "nearest": {w: {"word": n, "similarity": sim} for w, (n, sim) in nearest.items()},
                         "misspelt": misspelt, "uncovered": uncovered, "terms": asked})
    if use_graph and passages:
        # the last retrieval's query (the rewrite's when one was made), not the coverage check's
        searched = [a for a in attempts if "leg" not in a][-1]["query"]
        leg: dict[str, Any] = {"query": searched, "leg": "graph"}
        try:
            extra = graph_passages(services, caller, repo, branch, question, passages, workspaces, at,
                                   at_revision=revision)
        except Exception as exc:  # the graph leg never fails the answer
            log.warning("ask: the graph leg failed on %s/%s: %s", repo, branch, exc, exc_info=True)
            extra = []
            leg["error"] = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
        leg["passages"] = len(extra)
        attempts.append(leg)
        if extra:
            passages = passages + extra
            if not has_llm:
                scored = score_sentences(services, question, passages)
    if not passages:
        result = {"answer": NOT_COVERED, "grounded": False, "citations": [], "attempts": attempts, "mode": mode}
        if retrieved and not has_llm:
            result["leads"] = leads(retrieved, retrieved_scores)
        if target is not None:
            result["stored"] = store_answer(services, caller, repo, branch, *target, question, result)
        return AskOutput.model_validate(result)
    if has_llm:
        context = "\n\n".join(f"[{i}] {p['text']}" for i, p in enumerate(passages, start=1))
        reply = traced("kg.llm.call", llm.chat)([
            {"role": "system", "content": "Answer only from the numbered passages. Cite every claim with its "
                                          "passage number in brackets, like [1]. If the passages do not "
                                          f"answer the question, say: {NOT_COVERED}"},
            {"role": "user", "content": f"Passages:\n\n{context}\n\nQuestion: {question}"},
        ], timeout_s=120)
        cited = [int(m) for m in _MARKER_RE.findall(reply)]
        valid = [m for m in dict.fromkeys(cited) if 1 <= m <= len(passages)]
        # The model cites passages of the context, most of which it leaves out: its markers
        # become the citations' numbers, 1, 2, 3 in the order first cited (an answer opening
        # with [5] reads as if four citations were missing); one out of range is dropped.
        renumbered = {m: i for i, m in enumerate(valid, start=1)}
        answer = _MARKER_RE.sub(lambda m: f"[{renumbered[int(m.group(1))]}]" if int(m.group(1)) in renumbered
                                else "",
                                reply)
        answer = " ".join(answer.split())
    else:
        # Without a model a sentence is quoted only when it passes the semantic grade: no
        # passing sentence is the not-covered answer, never unrelated sentences.
        # and only when it holds what the question asks for (its focus and answer type).
        typed = [s for s in scored if _answers(analysed, s, passages, coverage, excused, paraphrased, checks=checks)]
        answer, valid = compose_answer(select_sentences(typed, threshold=threshold), passages)
        if not valid:
            passed = any(s.similarity >= threshold for s in scored)
            answer = not_said(analysed) if passed else NOT_COVERED
            result = {"answer": answer, "grounded": False, "citations": [], "attempts": attempts, "mode": mode,
                      "leads": leads(passages, scored)}
            if target is not None:
                result["stored"] = store_answer(services, caller, repo, branch, *target, question, result)
            return AskOutput.model_validate(result)
    citations = []
    for number, m in enumerate(valid, start=1):
        p = passages[m - 1]
        citation = {"marker": number, "workspace": p["workspace"], "path": p["path"], "node_id": p["node_id"],
                    "chunk_index": p["chunk_index"], "text_is_exact": p["text_is_exact"]}
        if p.get("via") == "graph":
            citation["via"] = "graph"
        citations.append(citation)
    result = {"answer": answer, "grounded": bool(citations), "citations": citations, "attempts": attempts,
              "mode": mode}
    if target is not None:
        result["stored"] = store_answer(services, caller, repo, branch, *target, question, result)
    return AskOutput.model_validate(result)


def focus_passages(services: Resources, caller: Actor, repo: str, branch: str, focus: tuple[str, ...],
                   workspaces: list[str] | None, at_revision: int | None = None, *,
                   most: int = FOCUS_PASSAGES) -> list[dict[str, Any]]:
    """The passages (chunks) of the nodes the caller reads that hold a quoted focus literally,
    first ones first, at most ``most``: a substring match in SQL (``LIKE``, escaped), for terms
    the BM25 analyzer drops (operators such as ``~=``)."""
    with reading(services, caller, repo, branch, at_revision) as (session, view):
        wanted = [wid for wid, name in view.workspaces.items() if view.can_read(wid)
                  and (workspaces is None or name in workspaces)]
        heads = {h.content_key: h for h in visible_node_heads(session, view, workspace_ids=wanted) if h.content_key}
        found: list[tuple[NodeHead, int, str]] = []
        for term in focus:
            if not term.strip():
                continue
            rows = session.execute(
                select(Chunk.content_key, Chunk.chunk_index, Chunk.text)
                .where(Chunk.repo_id == view.repo.id, Chunk.text.contains(term, autoescape=True))
                .order_by(Chunk.seq).limit(50 * most)).all()
            found += [(heads[key], index, text) for key, index, text in rows if key in heads]
        found = found[:most]
        nodes = nodes_by_id(session, view, [h.node_id for h, _, _ in found])
        models = _workspace_models(session, services, view)
        out = []
        for head, index, text in found:
            ws = view.workspaces[head.workspace_id]
            node = nodes.get(head.node_id)
            out.append({"workspace": ws, "path": head.path, "node_id": head.node_id, "chunk_index": index,
                        "text": text, "score": 0.0, "text_is_exact": True, "node_type": head.node_type,
                        "is_answer": head.node_type == ANSWER_NODE_TYPE,
                        "_title": document_label(node.properties) if node is not None else None,
                        "_model": models.get(ws, services.settings.embedding_model)})
        return [p for p in out if not p["is_answer"]]


def type_checks(services: Resources) -> TypeChecks:
    """The optional answer-type checks the settings turn on: each field ``f`` of
    :class:`~kg.text.questions.TypeChecks` is the setting ``ask_f`` (``KG_ASK_CODE_NAMES``,
    ``KG_ASK_NAMED_MENTIONS``, ...)."""
    return TypeChecks(**{f.name: getattr(services.settings, f"ask_{f.name}") for f in fields(TypeChecks)})


def _grade(asked: Question, scored: list[ScoredSentence], passages: list[dict],
           coverage: float, checks: TypeChecks = ALL_CHECKS) -> tuple[float, float]:
    """(best similarity of a sentence that holds what ``asked`` asks for, best similarity of any
    sentence); -1.0 for none: retrievals are compared by it, the first part first."""
    # before the coverage leg has looked for them in other words, a word no passage holds is
    # excused here (the leg declines a question with too many; the answer's check then excuses
    # only those the quoted sentences say in other words)
    excused = _unheld(asked.text, passages) if coverage > 0 and scored else []
    typed = max((s.similarity for s in scored if _answers(asked, s, passages, coverage, excused, checks=checks)),
                default=-1.0)
    return typed, max((s.similarity for s in scored), default=-1.0)


#: Words of a question's frame that an answer need not repeat ("what does X mean": "X: ...").
FRAME_WORDS = frozenset("mean means meaning meant stand stands refer refers called".split())


def answer_coverage(question: str, quoted: str, excused: Collection[str] = ()) -> float:
    """The share of the question's content words (:func:`_content_words`, by their BM25 stems)
    that ``quoted`` holds, the words of ``excused`` counting as held (words no document uses
    that the quoted sentences say in other words: :func:`nearest_words`); 1.0 for a question
    without any.

    A sentence that answers a factoid question shares its words beside the answer (the
    keyword window of Moldovan et al. 2000, "The structure and performance of an open-domain
    question answering system", ACL; Jurafsky and Martin, ch. 14, answer-passage features):
    "Who hosted the 18th Independent Spirit Awards?" is answered by "It was hosted by John
    Waters" under that title, not by "The 2002 Independent Spirit Awards were announced on
    March 22, 2003".

    >>> answer_coverage("Who hosted the awards in 2002?", "The awards: It was hosted by John Waters.")
    0.6666666666666666
    """
    asked = set(analyze(" ".join(w for w in _content_words(question) if w not in FRAME_WORDS)))
    if not asked:
        return 1.0
    held = set(analyze(quoted)) | set(analyze(" ".join(excused)))
    return len(asked & held) / len(asked)


def _answers(asked: Question, sentence: ScoredSentence, passages: list[dict], coverage: float,
             excused: Collection[str], paraphrased: Collection[str] | None = None, *,
             checks: TypeChecks = ALL_CHECKS) -> bool:
    """Whether ``sentence`` answers ``asked`` as quoted: it holds the answer type
    (:func:`kg.text.questions.answers_type`, its value in the sentence, not the title), and,
    with its title, at least ``coverage`` of the question's content words
    (:func:`answer_coverage`; ``excused`` words count as held), one of them a word of its
    predicate (what it asks of its mentions) and one of its answer slot's words when it has
    any (:func:`kg.text.questions.slot_words`; a slot word no document uses counts only when it
    is in ``paraphrased``, said in other words or misspelt; ``None``: whenever it is excused); a
    definition is checked by its focus and pattern
    instead. A yes/no question is never answered by a quote: a sentence does not say yes or
    no; nor is a choice between the question's own options (``choice``). ``checks``: the
    optional parts of the answer-type check (:func:`type_checks`)."""
    if asked.answer_type == "yes_no":
        return False
    title = _title_context(sentence, passages)
    if not answers_type(asked, sentence.text, context=title, checks=checks):
        return False
    quoted = _quoted_text(sentence, passages)
    if not holds_event_words(asked, quoted, checks):
        return False
    if asked.answer_type == "definition":  # its focus and a definitional pattern are the check
        return True
    if coverage <= 0:
        return True
    # what is asked of the mentions: one of the question's own words for it must be there
    # ("Which PEP superseded PEP 241?" is not answered by a sentence naming PEP 241 and 314)
    predicate = set(analyze(" ".join(w for w in asked.predicate if w not in QUESTION_WORDS and w not in FRAME_WORDS)))
    held = set(analyze(quoted)) | set(analyze(" ".join(excused)))
    if predicate and not predicate & held:
        return False
    slot = set(analyze(" ".join(slot_words(asked))))
    said = held if paraphrased is None else set(analyze(quoted)) | set(analyze(" ".join(paraphrased)))
    if slot and not slot & said:  # the sentence must say what the answer's slot is
        return False
    return answer_coverage(asked.text, quoted, excused) >= coverage


def holds_event_words(asked: Question, quoted: str, checks: TypeChecks = ALL_CHECKS) -> bool:
    """Whether ``quoted`` (a sentence with its title) holds, by Snowball stem or by lemma
    (:func:`lemmas`), every event word of a date question (:func:`kg.text.questions.event_words`)
    when ``checks.event_words`` is on. No word is excused as said in other words: "opened" is
    near "closed" in meaning.

    >>> q = analyze_question("When did the Miami and Erie Canal close?")
    >>> holds_event_words(q, "Construction began in 1825 and was completed in 1845.")
    False
    >>> holds_event_words(q, "The canal was closed to traffic in 1913.")
    True
    >>> holds_event_words(analyze_question("When was Zstandard first released?"),
    ...                   "Zstandard v1.4.5 was released in May of 2020.")
    False
    >>> holds_event_words(analyze_question("When did construction of the canal begin?"),
    ...                   "Construction on the canal began in 1825.")
    True
    """
    wanted = event_words(asked) if checks.event_words else ()
    if not wanted:
        return True
    stems = set(analyze(quoted))
    missing = [w for w in wanted if not set(analyze(w)) <= stems]
    if not missing:
        return True
    # a stem does not join an irregular verb's forms ("began" / "begin"): their lemmas do
    said = {lemma for word in analyze(quoted, stem_words=False) for lemma in lemmas(word)}
    return all(lemmas(w) & said for w in missing)


@functools.lru_cache(maxsize=65_536)
def lemmas(word: str) -> frozenset[str]:
    """Every lemma of a lower-case English word, of any part of speech, by lemminflect's
    lookup tables (the word itself when it has none): "began" -> {"begin"}.

    >>> sorted(lemmas("began")), sorted(lemmas("found")), sorted(lemmas("kg"))
    (['begin'], ['find', 'found'], ['kg'])
    """
    from lemminflect import getAllLemmas  # its tables load in 0.7 s: only when a date is checked

    found = {lemma.lower() for forms in getAllLemmas(word).values() for lemma in forms}
    return frozenset(found or {word})


def _unheld(question: str, passages: list[dict]) -> list[str]:
    """The question's content words that none of ``passages`` (text or title) holds."""
    held = set(analyze(" ".join(f"{p['text']} {p.get('_title') or ''}" for p in passages)))
    return [w for w in _content_words(question) if not set(analyze(w)) & held]


def _title_context(sentence: ScoredSentence, passages: list[dict]) -> str:
    """The document title the answer quotes before ``sentence``, or "" when the sentence names it."""
    title = passages[sentence.marker - 1].get("_title")
    if isinstance(title, str) and title.strip() and " ".join(title.split()).lower() not in sentence.text.lower():
        return " ".join(title.split())
    return ""


def _quoted_text(sentence: ScoredSentence, passages: list[dict]) -> str:
    """A sentence as the answer would quote it: prefixed by its document's title when it does
    not name it (:func:`compose_answer`), so that "What replaced PEP 386?" is answered by a
    sentence of PEP 440 that says "This PEP supersedes PEP 386"."""
    title = _title_context(sentence, passages)
    return f"{title}: {sentence.text}" if title else sentence.text


def not_said(question: Question) -> str:
    """The answer when no sentence holds what ``question`` asks for: "The documents do not say
    ..." with the question.

    >>> not_said(analyze_question("What does `~=` mean?"))
    'The documents do not say what is asked: "What does `~=` mean?"'
    """
    return NOT_SAID.format(question=" ".join(question.text.split()))


def leads(passages: list[dict], scored: list[ScoredSentence], *, most: int = MAX_LEADS) -> list[dict[str, Any]]:
    """The nearest passages of an answer that is not grounded, as passage citations, most
    similar first (by their best sentence's similarity to the question; retrieval order
    without scores)."""
    best: dict[int, float] = {}
    for s in scored:
        best[s.marker] = max(best.get(s.marker, -1.0), s.similarity)
    order = sorted(range(1, len(passages) + 1), key=lambda m: (-best.get(m, -1.0), m))[:most]
    out = []
    for number, m in enumerate(order, start=1):
        p = passages[m - 1]
        out.append({"marker": number, "workspace": p["workspace"], "path": p["path"], "node_id": p["node_id"],
                    "chunk_index": p["chunk_index"], "text_is_exact": p["text_is_exact"]})
    return out


# -- graph-context ---------------------------------------------------------------------------


def _valid_at(raw: dict) -> ValidAt:
    """The world time relations are read at: ``input.as_of`` (ISO 8601 with a zone) or now;
    None with ``input.include_invalid: true`` (every relation)."""
    include_invalid = raw.get("include_invalid", False)
    if not isinstance(include_invalid, bool):
        raise InvalidInput("input.include_invalid must be true or false",
                           details={"include_invalid": include_invalid})
    as_of = raw.get("as_of")
    if as_of is not None and not isinstance(as_of, str):
        raise InvalidInput("input.as_of must be an ISO 8601 time with a zone", details={"as_of": as_of})
    return read_time(maybe_aware(as_of, "as_of"), include_invalid)


def _int_option(raw: dict, key: str, default: int, low: int, high: int) -> int:
    value = integral(raw.get(key, default))  # 5.0 is the integer 5, as in JSON Schema
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidInput(f"input.{key} must be an integer between {low} and {high}", details={key: value})
    return value


def _relation_types(raw: dict) -> list[str] | None:
    value = raw.get("types")
    if value is None:
        return None
    if not isinstance(value, list) or not value or not all(isinstance(t, str) for t in value):
        raise InvalidInput("input.types must be null (every type) or a non-empty list of relation types",
                           details={"types": value})
    return value


def _seed_addresses(raw: dict) -> list[tuple[str, str]]:
    value = raw.get("seeds")
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
        raise InvalidInput("input.seeds must be a list of node addresses 'workspace:/path'",
                           details={"seeds": value if isinstance(value, (list, str)) else None})
    if len(value) > MAX_SEEDS:
        raise InvalidInput(f"input.seeds holds at most {MAX_SEEDS} addresses", details={"seeds": len(value)})
    return list(dict.fromkeys(parse_address(a) for a in value))


FOLLOWS = ("walk", "subjects")


def _follow(raw: dict) -> str:
    """graph-context's ``follow``: ``"walk"`` (default) or ``"subjects"``, which takes neither
    ``types`` nor ``direction`` (its two hops have fixed types) and at most 2 hops."""
    follow = raw.get("follow", "walk")
    if follow not in FOLLOWS:
        raise InvalidInput("input.follow must be 'walk' (every relation, breadth-first) or 'subjects' "
                           "(mentioned entities, then the documents about them)", details={"follow": follow})
    if follow == "subjects":
        given = [key for key in ("types", "direction") if raw.get(key) is not None]
        if given:
            raise InvalidInput(f"input.{' and input.'.join(given)} apply to follow 'walk'; follow 'subjects' "
                               "follows mentioned_in edges into the seeds, then about edges into the entities",
                               details={"follow": follow, "unexpected": given})
        hops = integral(raw.get("hops", 2))
        if isinstance(hops, bool) or not isinstance(hops, int) or not 0 <= hops <= 2:
            raise InvalidInput("input.hops must be an integer between 0 and 2 with follow 'subjects' "
                               "(1: the seeds' entities, 2: and the documents about them)", details={"hops": hops})
    return str(follow)


def _title(properties: dict) -> str | None:
    for key in ("title", "name"):
        if isinstance(properties.get(key), str) and properties[key].strip():
            return properties[key]
    return None


def graph_context(services: Resources, caller: Actor, repo: str, branch: str, raw: Any) -> GraphContextOutput:
    """Seeds by meaning (or given), then the relations around them.

    Parameters
    ----------
    raw : dict
        ``{"query"?: str, "seeds"?: ["workspace:/path", ...], "hops"?: 0..4 (2),
        "max_nodes"?: 1..1,000 (50), "fan_out"?: 1..1,000 (20), "types"?: [str],
        "direction"?: "OUT" | "IN" | "BOTH" ("BOTH"), "workspaces"?: [str], "k"?: 1..100 (5)}``;
        ``query``, ``seeds`` or both. ``k`` passages are searched for ``query`` and only
        relevant ones seed (a full-text match, or a vector hit within cosine distance 0.65);
        ``workspaces`` restricts that search, not the walk (relations may cross workspaces).
        ``follow``: ``"walk"`` (default) walks every relation of ``types`` breadth-first;
        ``"subjects"`` follows mentions to subjects (:func:`kg.rag.graph.follow_subjects`):
        hop 1 the entities each seed mentions, hop 2 the documents ``about`` them, seed by
        seed; it takes ``hops`` 0..2 and neither ``types`` nor ``direction``. The walk follows
        the relations current now, or valid at ``as_of`` (ISO 8601 with a zone), or every
        relation with ``include_invalid: true`` (:mod:`kg.graph.validity`).

    Returns
    -------
    dict
        ``{"seeds": [{"workspace", "path", "node_id", "score", "source"}], "nodes":
        [{"workspace", "path", "node_id", "hop", "via", "weight", "from", "score", "node_type",
        "title"?}], "truncated"}``. Given seeds come first (``source: "seeds"``), then search
        seeds in the order of their best passage (``source: "search"``; several passages of
        one node are one seed). ``nodes`` holds the seeds at hop 0 and every node reached, once,
        at its shortest hop; ``via``, ``weight`` and ``from`` describe the edge that reached it;
        ``title`` is the node's ``title`` (an entity's ``name``) when it has one. ``score`` is
        the node's relevance to the seeds (:func:`kg.rag.graph.spread_activation`: seed mass
        1 / (60 + seed rank), normalised to 1, spread over ``hops`` steps split by degree);
        null when the branch's graph is too large to hold in memory. With ``follow:
        "subjects"`` nodes are in the order they were reached (by seed, then the stable edge
        order); a document's ``from`` is the entity it is about, whose ``from`` is the seed
        that mentions it, and its ``score`` is that seed's mass; when no seed mentions an
        entity, ``warnings`` holds ``{"code": "no_mentions", "message"}`` (extract-entities
        not run on the branch, most likely). A query that finds nothing relevant gives no
        seeds and no nodes.

    Raises
    ------
    kg.errors.InvalidInput
        Neither query nor seeds, or an option out of range.
    kg.errors.NotFound
        Unknown repository, branch, workspace or seed node.

    Notes
    -----
    One read transaction: the search and the walk see the same revision of the branch. The
    walk costs O(max_nodes * fan_out) edge reads (:func:`kg.rag.graph.traverse_from`).
    """
    if not isinstance(raw, dict):
        raise InvalidInput("input must be an object")
    query = raw.get("query")
    if query is not None and (not isinstance(query, str) or not query.strip()):
        raise InvalidInput("input.query must be a non-empty string", details={"field": "query"})
    given = _seed_addresses(raw)
    if query is None and not given:
        raise InvalidInput("graph-context needs input.query or input.seeds (or both)")
    follow = _follow(raw)
    hops = _int_option(raw, "hops", 2, 0, 4 if follow == "walk" else 2)
    max_nodes = _int_option(raw, "max_nodes", 50, 1, 1000)
    fan_out = _int_option(raw, "fan_out", 20, 1, 1000)
    direction = check_direction(raw.get("direction") or "BOTH")  # null: the default, as for types
    types = _relation_types(raw)
    workspaces = _workspaces(raw)
    k = _k(raw, 5)
    at = _valid_at(raw)
    with reading(services, caller, repo, branch) as (session, view):
        seeds: dict[tuple[str, str], dict[str, Any]] = {}
        for workspace, path in given:
            seeds[(workspace, path)] = {"workspace": workspace, "path": path, "node_id": None, "score": None,
                                        "source": "seeds"}
        if query is not None:
            for p in _search_passages(session, services, view, query, k, workspaces, relevant_only=True):
                seeds.setdefault((p["workspace"], p["path"]), {
                    "workspace": p["workspace"], "path": p["path"], "node_id": p["node_id"],
                    "score": p["score"], "source": "search"})
        if not seeds:
            return GraphContextOutput(seeds=[], nodes=[], truncated=False)
        addresses = [f"{w}:{p}" for w, p in seeds]
        if follow == "subjects":
            walk = follow_subjects(session, services, view, addresses, hops=hops, max_nodes=max_nodes,
                                   fan_out=fan_out, at=at)
        else:
            walk = traverse_from(session, services, view, addresses, hops=hops,
                                 direction=direction, types=types, max_nodes=max_nodes, fan_out=fan_out, at=at)
        versions = nodes_by_id(session, view, [n["node_id"] for n in walk["nodes"]])
        # Seed mass: given seeds and search seeds by rank, 1 / (60 + rank), as in the fusion.
        mass = {}
        by_address = {(n["workspace"], n["path"]): n["node_id"] for n in walk["nodes"] if n["hop"] == 0}
        for rank, key in enumerate(seeds, start=1):
            if key in by_address:
                mass[by_address[key]] = 1.0 / (60 + rank)
        total = sum(mass.values()) or 1.0
        scores: dict[str, float] | None
        if follow == "subjects":
            # a node's relevance is its seed's: the order is the seeds' order
            seed_ids = {f"{n['workspace']}:{n['path']}": n["node_id"] for n in walk["nodes"] if n["hop"] == 0}
            scores = {n["node_id"]: mass.get(seed_ids.get(n["seed"], ""), 0.0) / total for n in walk["nodes"]}
        else:
            scores = spread_activation(session, services, view, walk["nodes"],
                                       {node_id: m / total for node_id, m in mass.items()},
                                       hops=hops, direction=direction, types=types, at=at)
    for node in walk["nodes"]:
        node["score"] = None if scores is None else round(scores.get(node["node_id"], 0.0), 6)
        version = versions.get(node["node_id"])
        node["node_type"] = version.node_type if version is not None else None
        title = _title(version.properties) if version is not None else None
        if title is not None:
            node["title"] = title
        node.pop("seed", None)  # follow_subjects' own; the seed is the "from" of the entity that reached it
        seed = seeds.get((node["workspace"], node["path"]))
        if seed is not None and seed["node_id"] is None:
            seed["node_id"] = node["node_id"]
    result = {"seeds": list(seeds.values()), "nodes": walk["nodes"], "truncated": walk["truncated"]}
    if follow == "subjects" and hops > 0 and not walk["truncated"] and not any(n["hop"] > 0 for n in walk["nodes"]):
        # Not an error (a seed may mention nothing), but a caller who never extracted would
        # read the bare seeds as the graph's answer.
        result["warnings"] = [{
            "code": "no_mentions",
            "message": "no seed mentions an entity on this branch: follow 'subjects' walks the "
                       "mentioned_in relations that extract-entities writes (run it on the branch, "
                       "or follow 'walk' for every relation)"}]
    return GraphContextOutput.model_validate(result)


# -- ask's graph leg and stored answers ------------------------------------------------------


def _best_passage(session, repo_id: int, version, terms: set[str]) -> dict[str, Any] | None:
    """The chunk of a node version sharing most question terms (ties: one that is more than the
    node's title, then the first), or, before its chunks are stored, its text fields (cut at
    GRAPH_PASSAGE_CHARS)."""
    if version.content_key:
        rows = session.execute(
            select(Chunk.chunk_index, Chunk.text)
            .where(Chunk.repo_id == repo_id, Chunk.content_key == version.content_key)
            .order_by(Chunk.chunk_index).limit(64)).all()
        if rows:
            title = version.properties.get("title")
            bare = " ".join(title.split()) if isinstance(title, str) else None
            index, text = max(rows, key=lambda r: (len(terms & set(analyze(r[1]))),
                                                   " ".join(r[1].split()) != bare, -r[0]))
            return {"chunk_index": index, "text": text, "text_is_exact": True}
    parts = [v for k in TEXT_FIELDS if isinstance(v := version.properties.get(k), str) and v.strip()]
    if not parts:
        return None
    text = "\n\n".join(parts)
    return {"chunk_index": None, "text": text[:GRAPH_PASSAGE_CHARS],
            "text_is_exact": len(text) <= GRAPH_PASSAGE_CHARS}


def graph_passages(services: Resources, caller: Actor, repo: str, branch: str, question: str, passages: list[dict],
                   workspaces: list[str] | None, at: ValidAt = None, *,
                   at_revision: int | None = None) -> list[dict[str, Any]]:
    """Passages of the nodes around the retrieved ones: ``ask``'s graph leg.

    First the subjects (:func:`kg.rag.graph.follow_subjects`): from the first
    ``GRAPH_SUBJECT_SEEDS`` (5) retrieved documents, the documents ``about`` the entities they
    mention, ordered by the seed's rank, then by shared question terms (their relevance where
    the search did not rank them), then the edge order: the page of the bridge entity, which a
    second-hop question names only through the first passage (HotpotQA, Yang et al. 2018).
    Then the walk: ``GRAPH_HOPS`` (2) hops from the nodes of ``passages`` (fan-out 10, at most
    30 nodes beyond the seeds), ranked by shared question terms, then hop, then walk order.
    Only nodes with text that are not already retrieved (and in ``workspaces`` when given) are
    kept; the best passage of up to ``GRAPH_PASSAGES`` (3) of them is returned, subjects first.
    The branch is read as of ``at_revision`` when given (``ask``'s ``revision``).

    Returns
    -------
    list of dict
        Passages like the retrieved ones, plus ``"via": "graph"``, ``"relation"`` (the type of
        the edge that reached the node: ``"about"`` for a subject), ``"hop"`` and ``"from"``.

    References
    ----------
    .. [1] Y. Feldman and R. El-Yaniv, "Multi-hop paragraph retrieval for open-domain question
       answering", ACL 2019; A. Asai et al., "Learning to retrieve reasoning paths over
       Wikipedia graph for question answering", ICLR 2020 (entity link to the entity's page).

    Raises
    ------
    kg.errors.KGError
        Whatever the walk raises; ``ask`` catches every error of this leg.
    """
    seeds = list(dict.fromkeys(f"{p['workspace']}:{p['path']}" for p in passages))
    have = {p["node_id"] for p in passages}
    terms = set(analyze(question))

    def wanted(node: dict[str, Any]) -> bool:
        return (node["hop"] > 0 and node["node_id"] not in have
                and (workspaces is None or node["workspace"] in workspaces))

    with reading(services, caller, repo, branch, at_revision) as (session, view):
        followed = follow_subjects(session, services, view, seeds[:GRAPH_SUBJECT_SEEDS], hops=2,
                                   max_nodes=10_000, fan_out=GRAPH_SUBJECT_FAN_OUT, at=at)
        subjects = [n for n in followed["nodes"] if n["hop"] == 2 and wanted(n)]
        walk = traverse_from(session, services, view, seeds, hops=GRAPH_HOPS,
                             max_nodes=len(seeds) + GRAPH_MAX_NODES, fan_out=GRAPH_FAN_OUT, at=at)
        reached = [n for n in walk["nodes"] if wanted(n)]
        versions = nodes_by_id(session, view, [n["node_id"] for n in subjects + reached])
        seed_rank = {address: rank for rank, address in enumerate(seeds)}
        first: list[tuple[Any, ...]] = []
        ranked: list[tuple[Any, ...]] = []
        for subject, nodes in ((True, subjects), (False, reached)):
            for order, node in enumerate(nodes):
                version = versions.get(node["node_id"])
                passage = _best_passage(session, view.repo.id, version, terms) if version is not None else None
                if passage is None:
                    continue
                shared = len(terms & set(analyze(passage["text"])))
                row = {"workspace": node["workspace"], "path": node["path"], "node_id": node["node_id"], **passage,
                       "score": None, "via": "graph", "relation": node["via"], "hop": node["hop"],
                       "from": node["from"]}
                if subject:
                    first.append((seed_rank.get(node["seed"], len(seeds)), -shared, order, row))
                else:
                    ranked.append((-shared, node["hop"], order, row))
    first.sort(key=lambda r: r[:3])
    ranked.sort(key=lambda r: r[:3])
    out: dict[str, dict[str, Any]] = {}
    for r in first + ranked:
        out.setdefault(r[3]["node_id"], r[3])
    return list(out.values())[:GRAPH_PASSAGES]


def _answer_target(services: Resources, caller: Actor, repo: str, branch: str, raw: dict,
                   question: str) -> tuple[str, str] | None:
    """The (workspace, path) ``store_answer`` names, checked before any work."""
    value = raw.get("store_answer")
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InvalidInput('input.store_answer must be an object {"workspace", "path"?}')
    unknown = sorted(set(value) - {"workspace", "path"})
    if unknown:
        raise InvalidInput(f"input.store_answer has unknown field(s): {', '.join(unknown)}",
                           details={"unknown": unknown})
    workspace = value.get("workspace")
    if not isinstance(workspace, str) or not workspace:
        raise InvalidInput("input.store_answer.workspace must be a workspace name")
    path = value.get("path")
    if path is None:
        slug = slugify(question)[:80].rstrip("-") or "answer"
        path = f"/answers/{slug}-{hashlib.sha256(question.encode('utf-8', 'surrogatepass')).hexdigest()[:10]}"
    elif not isinstance(path, str):
        raise InvalidInput("input.store_answer.path must be a node path")
    validate_path(path)
    with reading(services, caller, repo, branch) as (session, view):
        workspace_id(view, workspace)
        _check_answer_slot(find_node(session, view, workspace, path), workspace, path)
    return workspace, path


def _check_answer_slot(existing, workspace: str, path: str) -> None:
    if existing is not None and existing.node_type != ANSWER_NODE_TYPE:
        raise Conflict(f"node {workspace}:{path} is a {existing.node_type}, not a {ANSWER_NODE_TYPE}: "
                       "an answer never replaces it", details={"workspace": workspace, "path": path})


def store_answer(services: Resources, caller: Actor, repo: str, branch: str, workspace: str, path: str, question: str,
                 result: dict[str, Any], *, actor: str | None = "ask", by: str = "ask") -> StoredAnswer:
    """Write an answer as a ``kb:Answer`` node with ``cites`` relations, as one revision.

    ``actor`` is the revision's actor (None: the caller's name); a key records its own name
    whatever ``actor`` says (it may not state another); ``by`` names the function in the
    revision's message (``"ask: store answer ws:/path"``).

    The node's properties are ``question``, ``answer``, ``grounded``, ``mode``, ``citations``
    and ``sources`` (the cited paths). ``question`` and ``answer`` are
    indexed by default (a workspace's ``embedding.indexed_properties``), so search finds the
    answer next time, marked as one (``node_type`` ``kb:Answer``; ``is_answer`` in
    ``search-documents``); ``ask`` never takes a stored answer as evidence, so an answer is never
    grounded by itself or by an earlier answer, only by the documents. Each cited node gets one
    ``cites`` relation with the ``markers`` and ``chunk_indexes`` that cite it; relations of an
    earlier answer at the same path to nodes no longer cited are removed. Cited nodes deleted meanwhile are skipped.
    Each stored citation (and its ``cites`` edge) records its lineage: the cited node's
    ``source_revision`` and the cited passage's ``chunk_sha256``; a later change of that
    passage marks the answer ``stale`` (:mod:`kg.ops.lineage`).

    Returns
    -------
    dict
        ``{"workspace", "path", "node_id", "revision"}``.

    Raises
    ------
    kg.errors.Conflict
        A node of another type is at ``path``.
    kg.errors.NotFound
        Unknown workspace or branch.
    """
    cited: dict[tuple[str, str], dict[str, Any]] = {}
    for c in result["citations"]:
        entry = cited.setdefault((c["workspace"], c["path"]), {"markers": [], "chunk_indexes": []})
        entry["markers"].append(c["marker"])
        entry["chunk_indexes"].append(c["chunk_index"])
    address = f"{workspace}:{path}"

    def plan(session, view) -> GraphWrite:
        existing = find_node(session, view, workspace, path)
        _check_answer_slot(existing, workspace, path)
        # Lineage: each citation records its source's revision and the sha256 of the passage.
        sources = {key: find_node(session, view, *key) for key in cited}
        hashes = {key: chunk_hashes(services, session, view.repo, key[0], found.properties)
                  for key, found in sources.items() if found is not None}
        citations = []
        for c in result["citations"]:
            cited_at = (c["workspace"], c["path"])
            found, held = sources.get(cited_at), hashes.get(cited_at) or []
            index = c["chunk_index"]
            citations.append({**c, "source_revision": found.revision if found is not None else None,
                              "chunk_sha256": held[index] if isinstance(index, int) and 0 <= index < len(held)
                              else None})
            if found is not None:
                cited[cited_at]["source_revision"] = found.revision
                cited[cited_at].setdefault("chunk_sha256", []).append(citations[-1]["chunk_sha256"])
        todo = GraphWrite(upserts=[{"workspace": workspace, "path": path, "node_type": ANSWER_NODE_TYPE,
                                    "properties": {"question": question, "answer": result["answer"],
                                                   "grounded": result["grounded"], "mode": result["mode"],
                                                   "citations": citations,
                                                   "sources": list(dict.fromkeys(
                                                       c["path"] for c in result["citations"]))}}])
        for old in (existing.properties.get("citations") or []) if existing is not None else []:
            key = (old.get("workspace"), old.get("path")) if isinstance(old, dict) else None
            if (key and key not in cited and isinstance(key[0], str) and isinstance(key[1], str)
                    and find_node(session, view, key[0], key[1]) is not None):
                todo.unrelations.append({"from": address, "to": f"{key[0]}:{key[1]}", "type": CITES})
        for (ws, p), info in cited.items():
            if find_node(session, view, ws, p) is not None:
                todo.relations.append({"from": address, "to": f"{ws}:{p}", "type": CITES, "properties": info})
        return todo

    written = run(services, caller, write_graph, repo, branch, plan, message=f"{by}: store answer {address}",
                  actor=actor if caller.unrestricted else None)
    assert written is not None  # plan always writes the answer node
    node = written.upserted[-1]
    return StoredAnswer(workspace=workspace, path=path, node_id=node.id, revision=written.revision)


# -- the research assistant ----------------------------------------------------------------

RESEARCH_BRANCH_PREFIX = "research/"
RESEARCH_TOOLS: dict[str, Callable[..., FunctionResult]] = {
    "search-documents": search_documents, "ask": ask, "graph-context": graph_context}


def _tool_json(answer: FunctionResult) -> dict[str, Any]:
    """A research tool's answer as the model reads it: the JSON every surface answers."""
    return answer.model_dump(mode="json", by_alias=True, exclude_unset=True)


def _answer_workspace(services: Resources, caller: Actor, repo: str, branch: str, given: str | None,
                      citations: list[dict[str, Any]], workspaces: list[str] | None) -> str:
    """Where the research answer is stored: the given workspace, else the first cited passage's,
    else the first of ``workspaces``, else the branch's first readable workspace by name."""
    if given is not None:
        return given
    if citations:
        return str(citations[0]["workspace"])
    if workspaces:
        return workspaces[0]
    with reading(services, caller, repo, branch) as (_, view):
        readable = sorted(name for wid, name in view.workspaces.items()
                          if view.readable is None or wid in view.readable)
    if not readable:
        raise NotFound(f"repository {repo!r} has no workspace to store the answer in",
                       details={"repo": repo})
    return readable[0]


def _extractive_from(question: str, entries: list[dict[str, Any]], trace: list[dict[str, Any]]) -> str | None:
    """When the model gave no answer: the best-supported sentences of the passages found (as
    ``ask`` answers without a model), in session markers, noted in the trace; None when the
    passages do not cover the question."""
    passages = [e for e in entries if e["text"]]
    if not passages or coverage(question, passages) < COVERAGE_SUFFICIENT:
        return None
    text, markers = extractive_answer(question, passages)
    if not markers:
        return None
    trace.append({"step": len(trace) + 1, "by": "kg", "tool": None, "arguments": None,
                  "result": "the model gave no answer: kg answered from the passages found, extractively"})
    return _MARKER_RE.sub(lambda m: f"[{passages[int(m.group(1)) - 1]['marker']}]", text)


def research_assistant(services: Resources, caller: Actor, repo: str, branch: str,
                       raw: Any) -> ResearchAssistantOutput:
    """Research a question on a session branch of its own, with the model calling kg's tools.

    Opens the branch ``research/<12 hex digits>`` from ``branch``, then runs
    :func:`kg.rag.research.run_tool_loop` with the configured LLM over ``search-documents``,
    ``ask`` and ``graph-context`` (each run as ``caller``, reading the session branch), or,
    without a model that calls tools, :func:`kg.rag.research.run_fixed_plan` (search,
    graph-context, extractive ask; ``"mode": "fixed-plan"``). The answer is stored on the
    session branch only, as a ``kb:Answer`` node with ``cites`` relations (:func:`store_answer`);
    a person reviews the branch (diff) and merges it, or drops it.

    Parameters
    ----------
    raw : dict
        ``{"question": str, "workspaces"?: [str], "max_steps"?: int, "workspace"?: str}``.
        ``workspaces`` restricts every search of the session; ``max_steps`` (1 to
        ``KG_RESEARCH_MAX_STEPS``, the default) bounds the model's tool calls; ``workspace``
        is where the answer is stored (default: the first cited passage's workspace, else the
        first of ``workspaces``, else the first workspace by name).

    Returns
    -------
    kg.types.functions.ResearchAssistantOutput
        The answer, its citations, the trace, the session ``branch`` and where the answer is
        ``stored``; ``mode`` is ``"llm"`` or ``"fixed-plan"``. ``grounded`` is true exactly
        when the answer cites a passage; with nothing found the answer is "The documents do not
        cover this." ``stopped`` says how the loop ended:
        ``answered``, ``max_steps``, ``loop`` (a call repeated twice), ``early_stop`` (the model
        answered before any tool call ran: the answer is then kg's own ``ask``),
        ``model_error``, or ``plan``.

    Raises
    ------
    kg.errors.InvalidInput
        A bad input.
    kg.errors.NotFound
        Unknown repository, branch or workspace (or one the caller cannot see).
    kg.errors.Forbidden
        The caller may not read ``branch``, or may not create, read or write the session branch
        (``branch:create``, ``read`` and ``write`` on ``research/...``); checked before the
        branch is created.

    Notes
    -----
    At most ``max_steps`` tool calls and ``max_steps + 2`` model calls (each tool result the
    model reads is cut at ``KG_RESEARCH_RESULT_CHARS``). What the model does wrong (an unknown
    tool, malformed arguments, a repeated call, an early stop, a failure) is a step of the trace,
    never an error of the function.
    """
    question = _input(raw, "question")
    workspaces = _workspaces(raw)
    settings = services.settings
    max_steps = _int_option(raw, "max_steps", settings.research_max_steps, 1, settings.research_max_steps)
    given = raw.get("workspace")
    if given is not None and (not isinstance(given, str) or not given):
        raise InvalidInput("input.workspace must be a workspace name", details={"workspace": given})
    session_branch = f"{RESEARCH_BRANCH_PREFIX}{uuid.uuid4().hex[:12]}"
    permit(services, caller, "read", repo, branch)
    permit(services, caller, "branch:create", repo, session_branch)
    permit(services, caller, "write", repo, session_branch, given)
    permit(services, caller, "read", repo, session_branch)
    if given is not None:
        with reading(services, caller, repo, branch) as (_, view):
            workspace_id(view, given)
    created = run(services, caller, create_branch, repo, name=session_branch, from_branch=branch)

    def run_tool(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        scoped = {**arguments, "workspaces": workspaces} if workspaces else arguments
        return _tool_json(RESEARCH_TOOLS[tool](services, caller, repo, session_branch, scoped))

    llm = services.llm
    if isinstance(llm, ToolLLM) and getattr(llm, "name", "none") != "none":
        mode = "llm"
        loop = run_tool_loop(llm, question, run_tool, max_steps=max_steps,
                             result_chars=settings.research_result_chars)
    else:
        mode = "fixed-plan"
        loop = run_fixed_plan(question, run_tool, result_chars=settings.research_result_chars)
    if loop.answer is None:
        loop.answer = _extractive_from(question, loop.registry.entries, loop.trace)
    answer, citations = loop.registry.citations(loop.answer or "")
    if not citations:
        # Nothing cited: an answer from the model's own weights is not passed off as research.
        answer = NOT_COVERED if not loop.registry.entries or not answer else answer
    result: dict[str, Any] = {"answer": answer, "grounded": bool(citations), "citations": citations,
                              "trace": loop.trace, "mode": mode, "stopped": loop.stopped, "steps": loop.steps,
                              "max_steps": max_steps, "branch": created.name, "from": branch}
    workspace = _answer_workspace(services, caller, repo, session_branch, given, citations, workspaces)
    path = f"/answers/{slugify(question)[:60].rstrip('-') or 'answer'}-{session_branch.rsplit('/', 1)[1]}"
    result["stored"] = store_answer(services, caller, repo, session_branch, workspace, path, question, result,
                                    actor=None, by="research-assistant")
    return ResearchAssistantOutput.model_validate(result)


FUNCTIONS: dict[str, Callable[..., FunctionResult]] = {
    "search-documents": search_documents, "ask": ask, "graph-context": graph_context,
    "extract-entities": extract_entities, "research-assistant": research_assistant,
    "resolve-entities": resolve_entities}

#: The functions charged to the caller's token bucket (:func:`kg.context.throttle`): the ones
#: that may call a language model. ``search-documents`` and ``graph-context`` cost one search,
#: as ``POST .../search`` does, and are not limited.
EXPENSIVE_FUNCTIONS = frozenset({"ask", "extract-entities", "research-assistant", "resolve-entities"})

#: The input keys each function reads; any other key is refused (a typo must not be ignored).
INPUT_KEYS: dict[str, frozenset[str]] = {
    "search-documents": frozenset({"query", "k", "workspaces"}),
    "ask": frozenset({"question", "workspaces", "use_graph", "store_answer", "as_of", "include_invalid",
                              "revision"}),
    "graph-context": frozenset({"query", "seeds", "hops", "max_nodes", "fan_out", "types", "direction",
                                "workspaces", "k", "follow", "as_of", "include_invalid"}),
    "extract-entities": frozenset({"path", "workspace", "force", "max_chars"}),
    "research-assistant": frozenset({"question", "workspaces", "max_steps", "workspace"}),
    "resolve-entities": frozenset({"workspace", "threshold", "dry_run", "use_embeddings"}),
}


def invoke(services: Resources, caller: Actor, repo: str, name: str, raw: Any, *,
           branch: str = "main", charged: bool = False) -> FunctionResult:
    """Run the function ``name`` on a branch for ``caller``.

    The functions are orchestrations, not units of work: they read, may call a language model
    (seconds, with no write lock held), then write what they keep through
    :func:`kg.context.run` (one unit of work per write).

    Parameters
    ----------
    services : kg.context.Resources
    caller : kg.context.Actor
        Who invokes it; its reads and writes are made as this caller.
    repo, name : str
        The repository, and the function (``search-documents``, ``ask``, ``graph-context``,
        ``extract-entities``, ``research-assistant``).
    raw : dict
        The function's input.
    branch : str
        Read (and written) on this branch only.
    charged : bool
        The call was charged to the caller's bucket already (a queued job is charged when it
        is submitted, :func:`kg.rag.function_jobs.submit`); else an expensive function
        (:data:`EXPENSIVE_FUNCTIONS`) is charged here, once its input and the caller's read
        access are checked.

    Returns
    -------
    FunctionResult
        The function's output: the model of :class:`kg.types.functions.FunctionOutput` it answers.

    Raises
    ------
    kg.errors.NotFound
        Unknown function, or a repository or branch the caller cannot see.
    kg.errors.InvalidInput
        An input key the function does not read, or what the function itself refuses.
    kg.errors.RateLimited
        An expensive function beyond the caller's rate limit (``KG_RATE_EXPENSIVE_PER_MIN``).
    """
    function = FUNCTIONS.get(name)
    if function is None:
        raise NotFound(f"function {name!r} not found; available: {', '.join(sorted(FUNCTIONS))}",
                       details={"function": name})
    accepted = INPUT_KEYS.get(name)
    if accepted is not None and isinstance(raw, dict):
        unknown = sorted(set(raw) - accepted)
        if unknown:
            raise InvalidInput(
                f"{name} does not take input.{', input.'.join(unknown)}; it takes "
                f"{', '.join(sorted(accepted))}",
                details={"unknown": unknown, "accepted": sorted(accepted)})
    if name in EXPENSIVE_FUNCTIONS and not charged:
        permit(services, caller, "read", repo, branch)  # a caller that may not read is not charged
        throttle(services, caller, name)
    return function(services, caller, repo, branch, raw)
