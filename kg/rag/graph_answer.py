"""``ask``'s answers from the graph: a question about a relation or a property of a named node
("What replaced PEP 386?", "When was PEP 440 created?", "Who is the author of PEP 405?") is
answered from the node's relations and properties, cited as the edge or the property.

The algorithm (:func:`graph_answer`), over the branch the caller reads (its grants' workspaces
only, as of the request's revision, relations valid at its world time):

1. **Question analysis** (:func:`kg.text.questions.analyze_question`): the answer type, the
   named mentions, the predicate words (the content words outside the mentions).
2. **Named-node resolution** (:func:`resolve_mention`): a mention names the nodes whose path's
   last segment, ``title`` or ``name`` property has its key (:func:`kg.text.names.name_key`, with
   each number compared by value: "PEP 386", "pep 386", "PEP-386" and ``/pep-0386`` are one key).
   Candidates come from the mention's slug as a path (its numbers as written and zero-padded to
   four digits) in each readable workspace, then from a full-text search of the mention at node
   granularity; only candidates whose key equals the mention's are kept.
3. **Predicate matching** (:func:`match_predicate`): a predicate word matches a relation type or
   a property name when their Snowball stems meet, directly or through :data:`LEXICON` (small
   groups of words for one relation: "replace" / "supersede" / "obsolete", "author" / "write" /
   "maintain", ...). The candidates are the relation types of the node's edges and the node's
   property names: nothing is read from a fixed list of a corpus's fields. A property must also
   hold the answer type (a date for "when", a name for "who", a number for "how many").
   A question with more than :data:`MAX_PREDICATE_WORDS` content words beside its mentions
   asks about something else, which the mention only situates: not a graph question. A
   property that mirrors a relation type of the node's edges is never the answer to a
   question about that relation.
4. **Direction**: the mention before the matched verb and no "by" after it ("What does PEP 440
   replace?") makes it the subject: its outgoing edges answer; otherwise ("What replaced PEP
   386?", "What is PEP 386 replaced by?") it is the object: its incoming edges answer. A type
   ending in ``_by`` (``superseded_by``) is passive: the roles swap.
5. **Through a relation**: when the question's other predicate words name a property of the
   node at the edge's other end ("*Who wrote* the PEP that replaced PEP 438?", "*When* was the
   PEP that replaced PEP 722 *created*?"), that property answers, cited as the edge [1] and the
   property [2]. A question asking a person, a date or a number is never answered by the edge
   alone (its other end is a node), nor by a property of the mentioned node: without the
   related node's property the graph does not answer and the passages are read.

References
----------
Jurafsky and Martin, *Speech and Language Processing* (3rd ed.), ch. 14, "Knowledge-based
question answering" (entity linking, then relation mapping from question words to a knowledge
base's relations); Berant et al. (2013), "Semantic Parsing on Freebase from Question-Answer
Pairs", EMNLP (a lexicon mapping phrases to KB predicates); Porter (1980) / Snowball (the stems).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from sqlalchemy.orm import Session

from kg.context import Actor, Resources, reading
from kg.graph.validity import ValidAt
from kg.index.tokenize import stem
from kg.rag.graph import neighbors_of, readable_names
from kg.rag.search import SearchRequest, search
from kg.store.models import NodeVersion
from kg.store.nodes import find_node, nodes_by_id
from kg.store.repos import BranchView
from kg.text.names import name_tokens
from kg.text.questions import Question, analyze_question, has_date, has_number
from kg.text.slugs import slugify

__all__ = ["LEXICON", "graph_answer", "match_predicate", "mention_key", "resolve_mention"]

#: Words that name one relation or property, by their stems: a predicate word matches a relation
#: type or a property name when one of its stems meets one of theirs through a group.
LEXICON: tuple[frozenset[str], ...] = tuple(frozenset(stem(w) for w in group.split()) for group in (
    "replace replaces replaced supersede supersedes superseded obsolete obsoletes obsoleted succeed succeeds "
    "successor replacement",
    "require requires required depend depends dependency dependencies need needs prerequisite",
    "author authors authored write wrote written writer maintain maintains maintained maintainer maintainers "
    "owner owns",
    "create created creation date",
    "status state",
    "type kind category",
    "title name called",
))
#: Properties never quoted as an answer: the text itself and kg's own bookkeeping.
SKIPPED_PROPERTIES = frozenset({"body", "text", "content", "aliases", "in_corpus"})
MAX_EDGES = 10
#: Most content words a question about a node's relation or property has beside the mention:
#: the relation or property word and one modifier ("What python version does PEP 8 require?").
MAX_PREDICATE_WORDS = 2


def mention_key(text: str) -> tuple[str, ...]:
    """A mention's or a name's key: its tokens (:func:`kg.text.names.name_tokens`), each
    number by value, so "PEP 0386", "pep-386" and "PEP 386" are one key.

    >>> mention_key("PEP-0386") == mention_key("pep 386") == mention_key("pep-0386")
    True
    """
    return tuple(str(int(t)) if t.isdigit() else t for t in name_tokens(text))


def _path_guesses(mention: str) -> list[str]:
    slug = slugify(mention)
    padded = re.sub(r"\d+", lambda m: m.group(0).zfill(4), slug)
    unpadded = re.sub(r"\d+", lambda m: str(int(m.group(0))), slug)
    return list(dict.fromkeys(f"/{s}" for s in (slug, padded, unpadded) if s))


def _node_keys(node: NodeVersion) -> set[tuple[str, ...]]:
    keys = {mention_key(node.path.rsplit("/", 1)[-1])}
    for prop in ("title", "name"):
        value = node.properties.get(prop)
        if isinstance(value, str):
            keys.add(mention_key(value))
    return keys


def resolve_mention(session: Session, services: Resources, view: BranchView, mention: str,
                    workspaces: list[str] | None) -> list[NodeVersion]:
    """The nodes a mention names, among the workspaces the view reads (and ``workspaces``).

    Parameters
    ----------
    session, services, view
        A read of the branch as the caller sees it (:func:`kg.context.reading`).
    mention : str
        "PEP 386", "pep-0386", "Carl Meyer".
    workspaces : list of str or None
        The request's workspaces (None: all the view reads).

    Returns
    -------
    list of NodeVersion
        The nodes whose path slug, ``title`` or ``name`` has the mention's key
        (:func:`mention_key`), path guesses first, at most one per address.
    """
    key = mention_key(mention)
    if not key:
        return []
    scope = readable_names(view)
    names = [n for n in view.workspaces.values() if (scope is None or n in scope)
             and (workspaces is None or n in workspaces)]
    found: dict[tuple[int, str], NodeVersion] = {}
    for ws in sorted(names):
        for path in _path_guesses(mention):
            node = find_node(session, view, ws, path)
            if node is not None and key in _node_keys(node):
                found[(node.workspace_id, node.path)] = node
    if not found:
        rows, _ = search(session, services, view, SearchRequest(query=mention, k=10, mode="fulltext",
                                                                granularity="node", workspaces=names or None))
        ids = [r.node_id for r in rows]
        for node in nodes_by_id(session, view, ids).values():
            if key in _node_keys(node):
                found[(node.workspace_id, node.path)] = node
    return list(found.values())


def _stems(words: Any) -> set[str]:
    return {stem(w) for w in words if w}


def _expand(stems: set[str]) -> set[str]:
    out = set(stems)
    for group in LEXICON:
        if stems & group:
            out |= group
    return out


def match_predicate(predicate: tuple[str, ...], name: str) -> str | None:
    """The predicate word that names the relation type or property ``name``, or None.

    >>> match_predicate(("replaced",), "replaces"), match_predicate(("maintains",), "author")
    ('replaced', 'maintains')
    >>> match_predicate(("replaced",), "superseded_by"), match_predicate(("created",), "status")
    ('replaced', None)
    """
    tokens = [t for t in re.split(r"[^a-z0-9]+", name.lower().rsplit(":", 1)[-1]) if t and t != "by"]
    named = _stems(tokens)
    for word in predicate:
        if _expand({stem(word)}) & named:
            return word
    return None


def _fits(question: Question, value: Any) -> bool:
    """Whether a property's value is of the answer type the question asks for."""
    if isinstance(value, (dict, list)) or value is None or value == "":
        return False
    text = str(value)
    if question.answer_type == "date":
        return has_date(text)
    if question.answer_type == "number":
        return has_number(text) or isinstance(value, (int, float))
    if question.answer_type == "person":
        return bool(re.search(r"[A-Za-z]", text))
    return question.answer_type in ("name", "other", "definition")


def _label(node: NodeVersion | None, fallback: str) -> str:
    if node is None:
        return fallback
    title = node.properties.get("title") or node.properties.get("name")
    number = node.properties.get("pep")
    slug = node.path.rsplit("/", 1)[-1]
    if isinstance(title, str) and title.strip():
        title = " ".join(title.split())
        if isinstance(number, int) and f"pep {number}" not in title.lower():
            return f"PEP {number} \u2013 {title} ({slug})"
        return f"{title} ({slug})"
    if isinstance(number, int) and not isinstance(number, bool):
        return f"PEP {number} ({slug})"
    return slug


def _subject_role(question: Question, mention: str, word: str) -> bool:
    """Whether the mention is the subject of the matched verb (it comes first, no "by" after)."""
    text = question.text.lower()
    at_mention, at_word = text.find(mention.lower()), text.find(word)
    if at_mention < 0 or at_word < 0:
        return False
    after = text[at_word + len(word):].split()
    return at_mention < at_word and not (after and after[0].strip("?.,!") == "by")


def graph_answer(services: Resources, caller: Actor, repo: str, branch: str, question: str,
                 workspaces: list[str] | None, at: ValidAt, at_revision: int | None = None,
                 ) -> dict[str, Any] | None:
    """The answer from the graph to a question about a relation or property of a named node.

    Parameters
    ----------
    services, caller, repo, branch
        Read as :func:`kg.context.reading` lets ``caller`` read (a scoped key resolves no node
        outside its grants and follows no edge to one).
    question : str
    workspaces : list of str or None
        The request's workspaces.
    at : datetime or None
        The world time relations are read at (None: all).
    at_revision : int or None
        The branch as of this revision.

    Returns
    -------
    dict or None
        ``{"answer", "citations"}``, each citation ``{"kind": "relation", "marker", "workspace",
        "path", "node_id", "chunk_index": None, "text_is_exact": True, "from", "to", "type"}`` or
        ``{"kind": "property", ..., "property", "value"}``; None when no mention resolves or no
        relation type or property of the node matches the question (the passages then answer).

    Notes
    -----
    One path lookup per workspace and guess, at most one node-granularity search, one
    NEIGHBORS read per resolved node (at most :data:`MAX_EDGES` answer edges).
    """
    q = analyze_question(question)
    if not q.mentions or q.answer_type in ("yes_no", "definition") or len(q.predicate) > MAX_PREDICATE_WORDS:
        # a longer predicate asks about something the mention only situates ("What must a
        # lock file be named under PEP 751?"): the passages answer it
        return None
    with reading(services, caller, repo, branch, at_revision) as (session, view):
        for mention in q.mentions:
            nodes = resolve_mention(session, services, view, mention, workspaces)
            for node in nodes:
                ws = view.workspaces[node.workspace_id]
                edges = neighbors_of(session, services, view, f"{ws}:{node.path}", direction="BOTH",
                                     limit=1_000, at=at)["neighbors"]
                found = _relation_answer(session, view, q, mention, node, ws, edges)
                if found is _NOT_ANSWERED:  # a relation matched, but what is asked of it is not held
                    return None
                if found is None:
                    # a property that mirrors a relation type of the node ("replaces: 386") is
                    # not an answer: the question asked the edge, in the other direction
                    mirrored = {e["relation_type"] for e in edges if match_predicate(q.predicate, e["relation_type"])}
                    found = _property_answer(q, node, ws, mirrored)
                if found is not None:
                    return found
    return None


#: :func:`_relation_answer`'s answer when a relation of the node matched the question but what the
#: question asks of the related node (its author, its date) is not in the graph: the graph does not
#: answer, and no property of the mentioned node may answer instead.
_NOT_ANSWERED: dict[str, Any] = {}


def _relation_answer(session: Session, view: BranchView, q: Question, mention: str, node: NodeVersion, ws: str,
                     edges: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The answer from the node's edges that the question's relation word names: the edges
    themselves ("What replaced PEP 386?"), or, when the question asks something of the node at
    the other end ("Who wrote the PEP that replaced PEP 438?", "When was the PEP that replaced
    PEP 722 created?": its other predicate words name a property of that node), that property,
    cited as the edge and the property. A question whose answer is a person, a date or a number
    is never answered by the edge alone (its other end is a node): without the property it is
    :data:`_NOT_ANSWERED`."""
    chosen, words = [], set()
    for edge in edges:
        word = match_predicate(q.predicate, edge["relation_type"])
        if word is None:
            continue
        subject = _subject_role(q, mention, word)
        if edge["relation_type"].lower().endswith("_by"):
            subject = not subject
        # The mention as subject: its outgoing edges answer; as object, its incoming ones.
        if (edge["direction"] == "OUT") == subject:
            chosen.append(edge)
            words.add(word)
    if not chosen:
        return None
    chosen = chosen[:MAX_EDGES]
    others = nodes_by_id(session, view, [e["node_id"] for e in chosen])
    rest = tuple(w for w in q.predicate if w not in words)
    if rest:  # asked of the node at the other end: one of its properties
        asked = dataclasses.replace(q, predicate=rest)
        for edge in chosen:
            other = others.get(edge["node_id"])
            found = None if other is None else _property_answer(asked, other, edge["workspace"], set())
            if found is not None:
                return _chained(node, ws, edge, other, found)  # type: ignore[arg-type]
    if q.answer_type in ("person", "date", "number") and (rest or q.answer_type != "person"):
        return _NOT_ANSWERED
    parts, citations = [], []
    for marker, edge in enumerate(chosen, start=1):
        sentence, citation = _edge_cited(node, ws, edge, others.get(edge["node_id"]), marker)
        parts.append(sentence)
        citations.append(citation)
    return {"answer": " ".join(parts), "citations": citations}


def _edge_cited(node: NodeVersion, ws: str, edge: dict[str, Any], other: NodeVersion | None,
                marker: int) -> tuple[str, dict[str, Any]]:
    """The sentence "<from> <type> <to> [marker]." of an edge of ``node`` and its relation
    citation (``other``: the node at its other end, None when the view does not hold it)."""
    here, there = (node, ws), (other, edge["workspace"])
    src, dst = (here, there) if edge["direction"] == "OUT" else (there, here)
    src_path = src[0].path if src[0] is not None else edge["path"]
    dst_path = dst[0].path if dst[0] is not None else edge["path"]
    src_label = _label(src[0], src_path.rsplit("/", 1)[-1])
    dst_label = _label(dst[0], dst_path.rsplit("/", 1)[-1])
    verb = edge["relation_type"].rsplit(":", 1)[-1].replace("_", " ")
    citation: dict[str, Any] = {
        "marker": marker, "workspace": src[1], "path": src_path,
        "node_id": src[0].node_id if src[0] is not None else edge["node_id"], "chunk_index": None,
        "text_is_exact": True, "kind": "relation", "from": src_path, "to": dst_path}
    if dst[1] != src[1]:
        citation["to_workspace"] = dst[1]
    citation["type"] = edge["relation_type"]
    return f"{src_label} {verb} {dst_label} [{marker}].", citation


def _chained(node: NodeVersion, ws: str, edge: dict[str, Any], other: NodeVersion,
             found: dict[str, Any]) -> dict[str, Any]:
    """The edge from ``node`` to ``other`` and ``other``'s property ``found`` answers, as one
    answer with two citations: the relation [1], the property [2]."""
    sentence, relation = _edge_cited(node, ws, edge, other, 1)
    (cited,) = found["citations"]
    return {"answer": f"{sentence} " + found["answer"].replace("[1]", "[2]"),
            "citations": [relation, {**cited, "marker": 2}]}


def _asked_already(question: Question, value: str) -> bool:
    """Whether the question holds ``value`` itself (by name key, :func:`mention_key`): the
    property named the node the question is about, so it does not answer it ("What was the EFL
    Cup historically called?" is not answered by its ``title``, "EFL Cup").

    >>> q = analyze_question("What was the EFL Cup historically called?")
    >>> _asked_already(q, "EFL Cup"), _asked_already(q, "League Cup")
    (True, False)
    """
    key, asked = mention_key(value), mention_key(question.text)
    return bool(key) and any(asked[i:i + len(key)] == key for i in range(len(asked) - len(key) + 1))


def _property_answer(q: Question, node: NodeVersion, ws: str, mirrored: set[str]) -> dict[str, Any] | None:
    for name, value in node.properties.items():
        if name in SKIPPED_PROPERTIES or name.startswith("_") or name in mirrored:
            continue
        if match_predicate(q.predicate, name) is None or not _fits(q, value):
            continue
        shown = " ".join(str(value).split())
        if _asked_already(q, shown):
            continue
        label = _label(node, node.path.rsplit("/", 1)[-1])
        return {"answer": f"{label}: {name.replace('_', ' ')} {shown} [1].",
                "citations": [{"marker": 1, "workspace": ws, "path": node.path, "node_id": node.node_id,
                               "chunk_index": None, "text_is_exact": True, "kind": "property",
                               "property": name, "value": value}]}
    return None
