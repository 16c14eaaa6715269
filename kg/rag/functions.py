"""The functions agents call (API.md, "Functions"; seed 001, "Ready-made: the built-in RAG
functions"): ``search-documents`` and ``ask``.

``ask`` retrieves, grades the passages against the question, rewrites the query once in the
documents' own vocabulary when they fall short (two retrievals at most), then answers from the
passages only, with numbered citations. With an LLM configured it grades, rewrites and answers
with the model; without one it stays useful and says so (``"mode": "extractive"``): the grade is
a lexical-coverage check, the rewrite pseudo-relevance feedback, the answer the best-supported
sentences of the passages, each with its marker. When nothing relevant is retrieved the answer
is ``grounded: false`` and no model is called.

References
----------
Rocchio (1971), "Relevance feedback in information retrieval" (pseudo-relevance feedback).
Asai et al. (2023), "Self-RAG"; Yan et al. (2024), "Corrective Retrieval Augmented Generation"
(grade, rewrite, retrieve again).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Any

from kg.errors import InvalidInput, KGError, NotFound
from kg.index.tokenize import analyze
from kg.providers.jsonreply import parse_json_reply
from kg.rag.search import SearchRequest, search
from kg.store.repos import branch_view

MAX_PASSAGES = 8
MAX_DISTANCE = 0.65          # cosine distance beyond which a vector-only hit is not relevant
COVERAGE_SUFFICIENT = 0.5    # share of the question's terms the passages must contain
_SENTENCE_RE = re.compile(r"(?<=[.!?])\s+|\n{2,}")
_MARKER_RE = re.compile(r"\[(\d+)\]")
NOT_COVERED = "The documents do not cover this."


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
    value = raw.get("k", default)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 100:
        raise InvalidInput("input.k must be an integer between 1 and 100", details={"k": value})
    return value


def _passages(services, repo: str, branch: str, query: str, k: int, workspaces, *, relevant_only: bool):
    with services.db.read() as session:
        view = branch_view(session, repo, branch)
        rows, _ = search(session, services, view, SearchRequest(
            query=query, k=k, mode="hybrid", granularity="chunk", workspaces=workspaces))
    if relevant_only:
        rows = [r for r in rows if r.fulltext_rank is not None
                or (r.vector_distance is not None and r.vector_distance <= MAX_DISTANCE)]
    return [{"workspace": r.workspace, "path": r.path, "node_id": r.node_id, "chunk_index": r.chunk_index,
             "text": r.chunk_text, "score": r.score, "text_is_exact": True} for r in rows]


def search_documents(services, repo: str, branch: str, raw: Any) -> dict[str, Any]:
    """Hybrid search at chunk granularity: passages with their citation handles.

    Raises
    ------
    kg.errors.InvalidInput, kg.errors.NotFound
    """
    query = _input(raw, "query")
    passages = _passages(services, repo, branch, query, _k(raw, 10), _workspaces(raw), relevant_only=False)
    return {"passages": passages}


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


def feedback_query(question: str, passages: list[dict], *, extra_terms: int = 6) -> str:
    """Pseudo-relevance feedback: the question plus the top passages' most telling terms."""
    asked = set(analyze(question))
    counts: Counter[str] = Counter()
    docs: Counter[str] = Counter()
    top = passages[:3]
    for p in top:
        terms = analyze(p["text"])
        counts.update(terms)
        docs.update(set(terms))
    scored = sorted(((c * (1 + math.log(len(top) / docs[t] + 1)), t) for t, c in counts.items()
                     if t not in asked and len(t) > 2 and not t.isdigit()), reverse=True)
    return " ".join([question] + [t for _, t in scored[:extra_terms]])


def extractive_answer(question: str, passages: list[dict], *, max_sentences: int = 3) -> tuple[str, list[int]]:
    """The sentences of the passages that share the most question terms, each with its marker.

    Returns
    -------
    (answer, markers)
        Markers are 1-based passage numbers, in the order cited.
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
    if not chosen and sentences:
        chosen = [(0, sentences[0][0], 0, sentences[0][1])]
    parts = [f"{sentence} [{number}]" for _, number, _, sentence in chosen]
    return " ".join(parts), list(dict.fromkeys(number for _, number, _, _ in chosen))


def _llm_grade(llm, question: str, passages: list[dict]) -> bool:
    """Ask the model whether the passages answer the question; any failure counts as yes."""
    schema = {"type": "object", "properties": {"sufficient": {"type": "boolean"}}, "required": ["sufficient"]}
    context = "\n\n".join(f"[{i}] {p['text']}" for i, p in enumerate(passages, start=1))
    try:
        reply = llm.chat([
            {"role": "system", "content": "You grade retrieval. Answer with JSON only."},
            {"role": "user", "content": f"Question: {question}\n\nPassages:\n{context}\n\n"
                                        "Do the passages contain the answer? {\"sufficient\": true|false}"},
        ], json_schema=schema, timeout_s=30)
        return bool(parse_json_reply(reply, schema=schema).get("sufficient", True))
    except KGError:
        return True


def _llm_rewrite(llm, question: str, passages: list[dict]) -> str | None:
    schema = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}
    sample = "\n".join(p["text"][:300] for p in passages[:3])
    try:
        reply = llm.chat([
            {"role": "system", "content": "Rewrite search queries in the vocabulary of the documents. JSON only."},
            {"role": "user", "content": f"Question: {question}\n\nDocument excerpts:\n{sample}\n\n"
                                        "Give one search query: {\"query\": \"...\"}"},
        ], json_schema=schema, timeout_s=30)
        query = parse_json_reply(reply, schema=schema).get("query")
        return query.strip() if isinstance(query, str) and query.strip() else None
    except KGError:
        return None


def ask(services, repo: str, branch: str, raw: Any) -> dict[str, Any]:
    """Answer a question from the documents only, with citations (API.md ``ask``).

    Returns
    -------
    dict
        ``{"answer", "grounded", "citations": [{"marker", "path", "workspace", "node_id",
        "chunk_index", "text_is_exact"}], "attempts": [{"query", "passages"}], "mode"}``;
        ``mode`` is ``"llm"`` or ``"extractive"``.

    Raises
    ------
    kg.errors.InvalidInput, kg.errors.NotFound
    kg.errors.ProviderError
        The model failed while answering (grading and rewriting failures are tolerated).
    """
    question = _input(raw, "question")
    workspaces = _workspaces(raw)
    if raw.get("use_graph"):
        raise InvalidInput("use_graph is not available yet: graph-context is not built in this version")
    llm = services.llm
    has_llm = getattr(llm, "name", "none") != "none"
    attempts = []
    passages = _passages(services, repo, branch, question, MAX_PASSAGES, workspaces, relevant_only=True)
    attempts.append({"query": question, "passages": len(passages)})
    sufficient = bool(passages) and (
        _llm_grade(llm, question, passages) if has_llm else coverage(question, passages) >= COVERAGE_SUFFICIENT)
    if passages and not sufficient:
        # Nothing relevant at all: no model is called (CASES #24), the answer is ungrounded.
        rewritten = (_llm_rewrite(llm, question, passages) if has_llm else None) or feedback_query(question, passages)
        if rewritten and rewritten != question:
            again = _passages(services, repo, branch, rewritten, MAX_PASSAGES, workspaces, relevant_only=True)
            attempts.append({"query": rewritten, "passages": len(again)})
            if again:
                passages = again
    mode = "llm" if has_llm else "extractive"
    if not passages:
        return {"answer": NOT_COVERED, "grounded": False, "citations": [], "attempts": attempts, "mode": mode}
    if has_llm:
        context = "\n\n".join(f"[{i}] {p['text']}" for i, p in enumerate(passages, start=1))
        reply = llm.chat([
            {"role": "system", "content": "Answer only from the numbered passages. Cite every claim with its "
                                          "passage number in brackets, like [1]. If the passages do not "
                                          f"answer the question, say: {NOT_COVERED}"},
            {"role": "user", "content": f"Passages:\n\n{context}\n\nQuestion: {question}"},
        ], timeout_s=120)
        cited = [int(m) for m in _MARKER_RE.findall(reply)]
        valid = [m for m in dict.fromkeys(cited) if 1 <= m <= len(passages)]
        answer = _MARKER_RE.sub(lambda m: m.group(0) if 1 <= int(m.group(1)) <= len(passages) else "", reply)
        answer = " ".join(answer.split())
    else:
        answer, valid = extractive_answer(question, passages)
    citations = [{"marker": m, "workspace": passages[m - 1]["workspace"], "path": passages[m - 1]["path"],
                  "node_id": passages[m - 1]["node_id"], "chunk_index": passages[m - 1]["chunk_index"],
                  "text_is_exact": True} for m in valid]
    return {"answer": answer, "grounded": bool(citations), "citations": citations, "attempts": attempts,
            "mode": mode}


FUNCTIONS = {"search-documents": search_documents, "ask": ask}


def invoke(services, repo: str, name: str, raw: Any, *, branch: str = "main") -> dict[str, Any]:
    """Run the function ``name`` on a branch.

    Raises
    ------
    kg.errors.NotFound
        Unknown function.
    """
    function = FUNCTIONS.get(name)
    if function is None:
        raise NotFound(f"function {name!r} not found; available: {', '.join(sorted(FUNCTIONS))}",
                       details={"function": name})
    return function(services, repo, branch, raw)
