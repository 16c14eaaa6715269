"""``resolve-entities``: find duplicate entity nodes and propose their merges on a new branch.

The candidates are pairs of entity nodes (``kg:Entity`` under ``/entities``, the nodes
``extract-entities`` writes) of one workspace. Blocking: two nodes are compared only when
their normalised names share a token (the titles, honorifics and articles that lead a name,
such as "Captain", "Dr" or "The", are stripped first, so "Ahab" and "Captain Ahab" share
``ahab``). A pair is never merged when the numbers in the names differ (digits, ordinals, Roman
numerals: "1972 Italian Open" and "1976 Italian Open", "Henry VII" and "Henry VIII") or when
both have an ``entity_type`` and the types differ. The score is the fuzzy similarity of the
normalised names (the mean of rapidfuzz's ``token_set_ratio`` and ``token_sort_ratio`` / 100,
Bachmann et al. 2021-2025, the Indel distance of Levenshtein 1966), averaged with the cosine
similarity of the entities' mention contexts (the name and the titles of the documents that
mention it, by the workspace's embedder) when ``use_embeddings`` is on. A pair at or above
``threshold`` (same normalised name always qualifies) is a match; with an LLM configured each
such pair is also put to the model, which may refuse it. Merges are made from the matches by
center clustering (:func:`cluster`): a kept node and the nodes matched with it, never a chain;
the kept node is one with children, then the one with most edges, then the oldest, then the
shortest path.

The merges are written on a new branch ``proposals/entities-<UTC timestamp>`` made from the
request's branch: every relation of a merged node is copied whole (every column of its row,
so columns added later carry over) onto the kept node; two edges that become one keep the
larger weight and the union of their properties (the kept edge's values win); a relation
between two nodes of one cluster is dropped. The merged names join the kept node's
``aliases``; the merged nodes are deleted on the branch. A person reviews the branch's diff and
merges or deletes it. ``dry_run`` answers the merges without writing.

References
----------
Fellegi and Sunter (1969), "A Theory for Record Linkage" (pairwise match decisions);
Christen (2012), "Data Matching" (blocking by tokens); Haveliwala, Gionis and Indyk (2000),
"Scalable Techniques for Clustering the Web" (center clustering); Hassanzadeh et al. (2009),
"Framework for Evaluating Clustering Algorithms in Duplicate Detection".
"""

from __future__ import annotations

import html
import re
import unicodedata
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
from rapidfuzz import fuzz

from kg.context import Actor, Resources, UnitOfWork, permit, reading, run
from kg.errors import InvalidInput, ProviderError
from kg.indexing.config import workspace_embedding
from kg.ops.branches import create_branch
from kg.ops.texts import write_node
from kg.providers.jsonreply import parse_json_reply
from kg.rag.entities import ENTITY_NODE_TYPE, ENTITY_ROOT, MENTIONED_IN
from kg.store import nodes as node_store
from kg.store.models import RelationVersion, Workspace, utcnow
from kg.store.nodes import nodes_by_id, visible_nodes
from kg.store.relations import find_relation, visible_relations
from kg.store.repos import BranchView, workspace_id
from kg.tracing import traced
from kg.types.functions import ResolveEntitiesOutput

PROPOSAL_PREFIX = "proposals/entities-"
DEFAULT_THRESHOLD = 0.8  # between the cross-validated thresholds of FEBRL1 (0.756) and HotpotQA (0.798)
MAX_BLOCK = 200  # a token shared by more names than this does not block (too common)
MAX_ENTITIES = 50_000  # 23,927 HotpotQA entities: 56 s and 552 MB with the embedding leg
MAX_ALIASES = 50

TITLES = frozenset(
    {
        "captain",
        "capt",
        "mr",
        "mrs",
        "ms",
        "miss",
        "dr",
        "doctor",
        "sir",
        "dame",
        "lord",
        "lady",
        "prof",
        "professor",
        "rev",
        "reverend",
        "saint",
        "st",
        "king",
        "queen",
        "prince",
        "princess",
        "president",
        "general",
        "gen",
        "colonel",
        "col",
        "major",
        "admiral",
        "lieutenant",
        "lt",
        "sergeant",
        "sgt",
        "the",
        "mister",
        "madam",
        "madame",
        "uncle",
        "aunt",
        "father",
        "brother",
        "sister",
    }
)
_ARTICLES = frozenset({"a", "an"})  # "the" is among the titles
#: Leading honorifics that say a gender: "Mr. Olympia" and "Ms. Olympia" are two contests, and
#: "Lord X" and "Lady X" two people, though the rest of their names is the same.
_MALE_TITLES = frozenset({"mr", "mister", "sir", "lord", "king", "prince", "father", "brother", "uncle"})
_FEMALE_TITLES = frozenset({"mrs", "ms", "miss", "madam", "madame", "dame", "lady", "queen", "princess",
                            "sister", "aunt"})
_ORDINAL_WORDS = {
    "first": 1,
    "second": 2,
    "third": 3,
    "fourth": 4,
    "fifth": 5,
    "sixth": 6,
    "seventh": 7,
    "eighth": 8,
    "ninth": 9,
    "tenth": 10,
    "eleventh": 11,
    "twelfth": 12,
}
_ROMAN_RE = re.compile(r"^(?=[ivxlc]+$)(c{0,3})(xc|xl|l?x{0,3})(ix|iv|v?i{0,3})$")
_ROMAN = {"i": 1, "v": 5, "x": 10, "l": 50, "c": 100}
_ORDINAL_RE = re.compile(r"^(\d+)(st|nd|rd|th)$")
_TOKEN_RE = re.compile(r"[^\W_]+", re.UNICODE)


def _fold(text: str) -> str:
    text = unicodedata.normalize("NFKD", html.unescape(text))  # "&amp;" is "&" (scraped names)
    return "".join(c for c in text if not unicodedata.combining(c)).casefold()


def _roman(token: str) -> int | None:
    if not token or not _ROMAN_RE.match(token):
        return None
    total, last = 0, 0
    for c in reversed(token):
        value = _ROMAN[c]
        total = total - value if value < last else total + value
        last = max(last, value)
    return total


def name_tokens(name: str) -> list[str]:
    """The lower-cased, accent-free word tokens of a name, the titles, honorifics and articles
    that lead it removed ("Captain Ahab" -> ``ahab``; one inside a name stays: "1991 Mr.
    Olympia" and "1991 Ms. Olympia" differ), unless nothing else is left ("The Queen" ->
    ``queen``, "Doctor" -> ``doctor``)."""
    tokens = _TOKEN_RE.findall(_fold(name))
    start = 0
    while start < len(tokens) and (tokens[start] in TITLES or tokens[start] in _ARTICLES):
        start += 1
    return tokens[start:] or [t for t in tokens if t != "the"] or tokens


def leading_genders(name: str) -> frozenset[str]:
    """The genders the leading honorifics of a name say (``{"male"}`` for "Mr. Olympia",
    empty for "Captain Ahab" or "Olympia").

    Examples
    --------
    >>> sorted(leading_genders("Ms. Olympia")), sorted(leading_genders("Captain Ahab"))
    (['female'], [])
    """
    out: set[str] = set()
    for token in _TOKEN_RE.findall(_fold(name)):
        if token not in TITLES and token not in _ARTICLES:
            break
        if token in _MALE_TITLES:
            out.add("male")
        elif token in _FEMALE_TITLES:
            out.add("female")
    return frozenset(out)


def numbers_of(name: str) -> frozenset[int]:
    """The numbers a name states: digits, also inside a word ("SHA2", "Python3"), ordinals
    ("3rd", "third") and Roman numerals after the first word ("Henry VIII"; a lone "I" or "V"
    as the first word is a word). Two names whose numbers differ are never merged: "PEP 458"
    and "PEP 480", "Python 2" and "Python 3" are two things however alike the rest is.

    >>> sorted(numbers_of("SHA2-256")), sorted(numbers_of("Python 3")) == sorted(numbers_of("Python3"))
    ([2, 256], True)
    """
    out: set[int] = set()
    tokens = _TOKEN_RE.findall(_fold(name))
    for position, token in enumerate(tokens):
        if token.isdigit():
            out.add(int(token))
        elif (m := _ORDINAL_RE.match(token)) is not None:
            out.add(int(m.group(1)))
        elif token in _ORDINAL_WORDS:
            out.add(_ORDINAL_WORDS[token])
        elif position > 0 and (value := _roman(token)) is not None:
            out.add(value)
        else:  # digits inside a word: "SHA2-256" and "SHA3-256", "Python3" and "Python 3"
            out.update(int(run) for run in re.findall(r"\d+", token))
    return frozenset(out)


def normalised(name: str) -> str:
    """A name as compared: :func:`name_tokens` joined by one space."""
    return " ".join(name_tokens(name))


@dataclass(frozen=True)
class Candidate:
    """An entity as resolution sees it."""

    node_id: str
    path: str
    name: str
    entity_type: str | None = None
    edges: int = 0
    created: str = ""
    context: str = ""
    has_children: bool = False


@dataclass
class PairScore:
    """How alike two entities are, and why (``score`` None: never merged)."""

    score: float | None
    reasons: list[str] = field(default_factory=list)


def score_pair(a: Candidate, b: Candidate, *, similarity: float | None = None) -> PairScore:
    """Score two entities for a merge.

    Parameters
    ----------
    a, b : Candidate
    similarity : float or None
        The cosine similarity of their mention contexts, when embeddings are used.

    Returns
    -------
    PairScore
        ``score`` None with the blocking reason (``numbers_differ``, ``types_differ``,
        ``titles_differ``: leading honorifics of two genders, "Mr." and "Ms.") when the pair
        must never merge; else 1.0 for the same normalised name (``same_name``), otherwise
        the mean of rapidfuzz's ``token_set_ratio`` and ``token_sort_ratio`` of the normalised
        names / 100 (``fuzzy:<x>``), averaged with ``similarity`` (``embedding:<x>``) when
        given. ``token_set_ratio`` alone is 1.0 whenever one name's words are a subset of the
        other's ("Academy Award" and "Academy Award for Best Actor"); ``token_sort_ratio``
        counts the words one name adds, so a longer name that contains a shorter one scores
        by how much it adds ("Abraham Maslow" / "Abraham Harold Maslow": 0.9).
    """
    if numbers_of(a.name) != numbers_of(b.name):
        return PairScore(None, ["numbers_differ"])
    if a.entity_type and b.entity_type and a.entity_type != b.entity_type:
        return PairScore(None, ["types_differ"])
    ga, gb = leading_genders(a.name), leading_genders(b.name)
    if ga and gb and ga != gb:
        return PairScore(None, ["titles_differ"])
    na, nb = normalised(a.name), normalised(b.name)
    if na == nb:
        return PairScore(1.0, ["same_name"])
    fuzzy = (fuzz.token_set_ratio(na, nb) + fuzz.token_sort_ratio(na, nb)) / 200.0
    reasons = [f"fuzzy:{fuzzy:.3f}"]
    score = fuzzy
    if similarity is not None:
        reasons.append(f"embedding:{similarity:.3f}")
        score = (fuzzy + max(0.0, similarity)) / 2
    return PairScore(round(score, 4), reasons)


def candidate_pairs(entities: list[Candidate]) -> list[tuple[int, int]]:
    """The pairs (i < j) whose normalised names share a token (blocking; a token shared by
    more than :data:`MAX_BLOCK` names is skipped)."""
    blocks: dict[str, list[int]] = {}
    for i, e in enumerate(entities):
        for token in set(name_tokens(e.name)):
            blocks.setdefault(token, []).append(i)
    pairs: set[tuple[int, int]] = set()
    for members in blocks.values():
        if len(members) > MAX_BLOCK:
            continue
        for x, i in enumerate(members):
            for j in members[x + 1 :]:
                pairs.add((min(i, j), max(i, j)))
    return sorted(pairs)


def _preference(c: Candidate) -> tuple[bool, int, str, int, str]:
    return (not c.has_children, -c.edges, c.created, len(c.path), c.path)


def canonical(members: list[Candidate]) -> Candidate:
    """The node a cluster keeps: one with children first (a merged node is deleted, and a node
    with children is not deleted without them), then most edges, oldest, shortest path, path."""
    return min(members, key=_preference)


def cluster(entities: list[Candidate], accepted: list[tuple[int, int, float, list[str]]]) -> list[dict[str, Any]]:
    """The merges of the accepted pairs by center clustering: each merge is one kept node and
    the nodes it was itself matched with, never a chain.

    The entities are taken in the order a cluster's kept node is chosen by (:func:`canonical`);
    one not yet in a merge becomes a center, and every entity not yet in a merge that forms an
    accepted pair with it joins its merge. A chain A ~ B ~ C where A and C were not matched is
    two decisions, not one: C never joins A's merge through B (connected components would
    chain "Academy Award" through hundreds of award names into one node). Center clustering:
    Haveliwala, Gionis and Indyk (2000), "Scalable Techniques for Clustering the Web"; compared
    for duplicate detection by Hassanzadeh, Chiang, Lee and Miller (2009), "Framework for
    Evaluating Clustering Algorithms in Duplicate Detection" (PVLDB 2(1)).

    Returns
    -------
    list of dict
        ``{"kept": Candidate, "merged": [Candidate], "score": min pair score, "reasons": [...]}``,
        ordered by the kept node's path, and ``"held_back": [Candidate]`` when members other
        than the kept one have children (they are not merged: a person decides; a merge left
        with nothing to merge is none).

    Notes
    -----
    O(n log n + p) for n entities and p accepted pairs.
    """
    linked: dict[int, dict[int, tuple[float, list[str]]]] = {}
    for i, j, score, reasons in accepted:
        linked.setdefault(i, {})[j] = (score, reasons)
        linked.setdefault(j, {})[i] = (score, reasons)
    placed: set[int] = set()
    out: list[dict[str, Any]] = []
    for centre in sorted(linked, key=lambda i: _preference(entities[i])):
        if centre in placed:
            continue
        members = sorted((m for m in linked[centre] if m not in placed), key=lambda m: entities[m].path)
        if not members:
            continue
        placed.add(centre)
        placed.update(members)
        merged = [entities[m] for m in members if not entities[m].has_children]
        held = [entities[m] for m in members if entities[m].has_children]
        if not merged:
            continue
        pairs = [linked[centre][m] for m in members if not entities[m].has_children]
        merge: dict[str, Any] = {
            "kept": entities[centre],
            "merged": merged,
            "score": min(score for score, _ in pairs),
            "reasons": sorted({reason for _, reasons in pairs for reason in reasons}),
        }
        if held:
            merge["held_back"] = held
        out.append(merge)
    out.sort(key=lambda m: str(m["kept"].path))
    return out


# -- the function ----------------------------------------------------------------------------


def _options(raw: Any) -> tuple[str, float, bool, bool]:
    if not isinstance(raw, dict):
        raise InvalidInput("input must be an object")
    ws = raw.get("workspace")
    if not isinstance(ws, str) or not ws.strip():
        raise InvalidInput("input.workspace must be a non-empty string", details={"field": "workspace"})
    threshold = raw.get("threshold", DEFAULT_THRESHOLD)
    if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not 0.5 <= threshold <= 1.0:
        raise InvalidInput("input.threshold must be a number between 0.5 and 1", details={"threshold": threshold})
    flags = {}
    for key, default in (("dry_run", False), ("use_embeddings", True)):
        value = raw.get(key, default)
        if not isinstance(value, bool):
            raise InvalidInput(f"input.{key} must be true or false", details={key: value})
        flags[key] = value
    return ws, float(threshold), flags["dry_run"], flags["use_embeddings"]


def load_candidates(session: Any, view: BranchView, workspace: str) -> list[Candidate]:
    """The workspace's entity nodes with their edge counts and mention contexts."""
    wid = workspace_id(view, workspace)
    under = visible_nodes(session, view, workspace_ids=[wid], path_prefix=ENTITY_ROOT)
    parents = {n.path.rsplit("/", 1)[0] for n in under}
    nodes = [n for n in under if n.node_type == ENTITY_NODE_TYPE and isinstance(n.properties.get("name"), str)]
    if len(nodes) > MAX_ENTITIES:
        raise InvalidInput(
            f"the workspace has {len(nodes)} entities; resolve-entities takes at most {MAX_ENTITIES}",
            details={"entities": len(nodes)},
        )
    ids = [n.node_id for n in nodes]
    edges: dict[str, int] = dict.fromkeys(ids, 0)
    mentions: dict[str, list[str]] = {i: [] for i in ids}
    relations = visible_relations(session, view, node_ids=ids)
    docs = nodes_by_id(session, view, {r.to_node_id for r in relations if r.rel_type == MENTIONED_IN})
    for r in relations:
        for end in (r.from_node_id, r.to_node_id):
            if end in edges:
                edges[end] += 1
        if r.rel_type == MENTIONED_IN and r.from_node_id in mentions and r.to_node_id in docs:
            title = docs[r.to_node_id].properties.get("title")
            if isinstance(title, str):
                mentions[r.from_node_id].append(title)
    out = []
    for n in nodes:
        kind = n.properties.get("entity_type")
        name = n.properties["name"]
        context = "; ".join([name, *sorted(mentions[n.node_id])[:10]])
        out.append(
            Candidate(
                n.node_id,
                n.path,
                name,
                kind if isinstance(kind, str) else None,
                edges[n.node_id],
                n.created_at.isoformat() if n.created_at else "",
                context,
                n.path in parents,
            )
        )
    out.sort(key=lambda c: c.path)
    return out


_CONFIRM = (
    'Do these two names refer to the same real-world entity? Answer JSON {{"same": true|false}} only.\nA: {a}\nB: {b}'
)


def _llm_confirms(llm: Any, a: Candidate, b: Candidate) -> bool:
    reply = traced("kg.llm.call", llm.chat)(
        [{"role": "user", "content": _CONFIRM.format(a=a.context or a.name, b=b.context or b.name)}], timeout_s=60
    )
    parsed = parse_json_reply(reply)
    return isinstance(parsed, dict) and parsed.get("same") is True


def find_merges(
    services: Resources,
    entities: list[Candidate],
    *,
    threshold: float,
    model: str | None,
) -> list[dict[str, Any]]:
    """Score the blocked pairs of ``entities`` and cluster those at or above ``threshold``.

    Parameters
    ----------
    services : kg.context.Resources
        Its embedder (when ``model`` is given) and its LLM (when one is configured: each
        accepted pair is confirmed by it).
    entities : list of Candidate
    threshold : float
    model : str or None
        The embedding model of the mention contexts; None: names only.

    Returns
    -------
    list of dict
        As :func:`cluster`.

    Raises
    ------
    kg.errors.ProviderError
        The embedder or the model failed.
    """
    pairs = candidate_pairs(entities)
    sims: dict[tuple[int, int], float] = {}
    if model is not None and pairs:
        used = sorted({i for p in pairs for i in p})
        vectors = services.embedder(model).embed([entities[i].context for i in used])
        row = {i: k for k, i in enumerate(used)}
        for i, j in pairs:
            sims[(i, j)] = float(np.dot(vectors[row[i]], vectors[row[j]]))
    llm = services.llm if getattr(services.llm, "name", "none") != "none" else None
    accepted = []
    for i, j in pairs:
        scored = score_pair(entities[i], entities[j], similarity=sims.get((i, j)))
        if scored.score is None or scored.score < threshold:
            continue
        reasons = list(scored.reasons)
        if llm is not None:
            if not _llm_confirms(llm, entities[i], entities[j]):
                continue
            reasons.append("llm_confirmed")
        accepted.append((i, j, scored.score, reasons))
    return cluster(entities, accepted)


def _copy_row(edge: RelationVersion, **changes: Any) -> dict[str, Any]:
    """Every column of a relation row but its id, with ``changes`` applied."""
    row = {c.key: getattr(edge, c.key) for c in RelationVersion.__mapper__.column_attrs if c.key != "id"}
    row.update(changes)
    return row


def apply_merges(
    uow: UnitOfWork, repo: str, branch: str, workspace: str, merges: list[dict[str, Any]], *, message: str | None = None
) -> dict[str, Any]:
    """Write ``merges`` on ``branch`` as one revision (the use case behind ``resolve-entities``).

    Parameters
    ----------
    uow : kg.context.UnitOfWork
    repo, branch, workspace : str
    merges : list of dict
        ``{"kept": path, "merged": [path]}``.
    message : str or None

    Returns
    -------
    dict
        ``{"revision", "repointed": edges copied, "combined": edges folded into an existing
        one, "dropped": edges inside a cluster}``.

    Raises
    ------
    kg.errors.Forbidden, kg.errors.NotFound
    """
    uow.authorize("write", repo, branch, workspace)
    ctx = uow.begin(repo, branch, message=message or "resolve-entities", actor=None)
    session = uow.session
    view = ctx.view
    repointed = combined = dropped = 0
    for merge in merges:
        kept = node_store.get_node(session, view, workspace, merge["kept"])
        kept_address = f"{workspace}:{kept.path}"
        others = [node_store.get_node(session, view, workspace, p) for p in merge["merged"]]
        cluster_ids = {kept.node_id, *(o.node_id for o in others)}
        other_ids = {o.node_id for o in others}
        rows: dict[tuple[str, str, str], dict[str, Any]] = {}
        for edge in visible_relations(session, view, node_ids=sorted(other_ids)):
            src = kept.node_id if edge.from_node_id in other_ids else edge.from_node_id
            dst = kept.node_id if edge.to_node_id in other_ids else edge.to_node_id
            if src in cluster_ids and dst in cluster_ids:
                dropped += 1
                continue
            changes: dict[str, Any] = {
                "branch_id": ctx.branch.id,
                "revision": ctx.revision,
                "created_at": utcnow(),
                "from_node_id": src,
                "to_node_id": dst,
            }
            if src == kept.node_id:
                changes["from_address"] = kept_address
            if dst == kept.node_id:
                changes["to_address"] = kept_address
            key = (src, edge.rel_type, dst)
            row = _copy_row(edge, **changes)
            current = rows.get(key)
            if current is None:
                existing = find_relation(session, view, src, dst, edge.rel_type)
                current = (
                    _copy_row(existing, **{k: changes[k] for k in ("branch_id", "revision", "created_at")})
                    if existing is not None
                    else None
                )
                if current is not None:
                    combined += 1
            elif current is not None:
                combined += 1
            if current is not None:
                weights = [w for w in (current.get("weight"), row.get("weight")) if w is not None]
                row = {
                    **row,
                    **current,
                    "weight": max(weights) if weights else None,
                    "properties": {**(row.get("properties") or {}), **(current.get("properties") or {})},
                }
            rows[key] = row
        for row in rows.values():
            session.add(RelationVersion(**row))
        repointed += len(rows)
        props = dict(kept.properties)
        stored = props.get("aliases")
        aliases = [a for a in stored if isinstance(a, str)] if isinstance(stored, list) else []
        for o in others:
            for spelling in [o.properties.get("name"), *(o.properties.get("aliases") or [])]:
                if (
                    isinstance(spelling, str)
                    and spelling != props.get("name")
                    and spelling not in aliases
                    and len(aliases) < MAX_ALIASES
                ):
                    aliases.append(spelling)
        props["aliases"] = aliases
        props["merged_from"] = sorted({*(props.get("merged_from") or []), *(o.path for o in others)})
        session.flush()
        for o in others:
            node_store.delete_node(session, ctx, workspace, o.path)
        write_node(uow, ctx, workspace, kept.path, node_type=kept.node_type, properties=props)
    session.flush()
    return {"revision": ctx.revision, "repointed": repointed, "combined": combined, "dropped": dropped}


def resolve_entities(services: Resources, caller: Actor, repo: str, branch: str, raw: Any) -> ResolveEntitiesOutput:
    """Find duplicate entities of a workspace and propose their merges.

    Parameters
    ----------
    services : kg.context.Resources
    caller : kg.context.Actor
        Reads ``branch``; to write a proposal it needs ``branch:create`` and ``write`` on
        ``proposals/entities-...``.
    repo, branch : str
        The source branch (never written).
    raw : dict
        ``{"workspace", "threshold"?: 0.5..1 (0.8), "dry_run"?: bool, "use_embeddings"?: bool
        (true)}``.

    Returns
    -------
    kg.types.functions.ResolveEntitiesOutput
        The merges, and the proposal ``branch`` holding them (null for a dry run). A
        duplicate with children is kept rather than merged; when two of a cluster have
        children, those not kept are held back (left for a person), never a 409.

    Raises
    ------
    kg.errors.InvalidInput
        Bad input.
    kg.errors.NotFound
        Unknown repository, branch or workspace.
    kg.errors.Forbidden
        The caller may not read ``branch`` or create and write the proposal branch (checked
        before anything is written).
    kg.errors.ProviderError
        The embedder or the model failed; nothing was written.

    Notes
    -----
    O(n) reads for n entities, O(p) pair scores for the p blocked pairs, one embedding call
    over the entities in a pair, one model call per accepted pair with an LLM, one branch and
    one revision.
    """
    workspace, threshold, dry_run, use_embeddings = _options(raw)
    with reading(services, caller, repo, branch) as (session, view):
        workspace_id(view, workspace)
        entities = load_candidates(session, view, workspace)
        config = (
            session.query(Workspace.config)
            .filter(Workspace.repo_id == view.repo.id, Workspace.name == workspace)
            .scalar()
        )
    model = (
        workspace_embedding(config, default_model=services.settings.embedding_model).model if use_embeddings else None
    )
    proposal = f"{PROPOSAL_PREFIX}{datetime.now(UTC).strftime('%Y%m%dT%H%M%S%fZ')}"
    if not dry_run:
        permit(services, caller, "branch:create", repo, proposal)
        permit(services, caller, "write", repo, proposal, workspace)
    try:
        merges = find_merges(services, entities, threshold=threshold, model=model)
    except ProviderError as exc:
        raise ProviderError(f"resolve-entities: {exc.message}; nothing was written", details=exc.details) from exc
    out = [
        {
            "kept": m["kept"].path,
            "kept_name": m["kept"].name,
            "merged": [c.path for c in m["merged"]],
            "names": [c.name for c in m["merged"]],
            "score": m["score"],
            "reasons": m["reasons"],
            **(
                {"held_back": [{"path": c.path, "reason": "has_children"} for c in m["held_back"]]}
                if m.get("held_back")
                else {}
            ),
        }
        for m in merges
    ]
    base = {"workspace": workspace, "from": branch, "merges": out, "entities": len(entities), "dry_run": dry_run}
    if dry_run or not out:
        return ResolveEntitiesOutput.model_validate({**base, "branch": None, "revision": None})
    run(services, caller, create_branch, repo, name=proposal, from_branch=branch)
    written = run(
        services,
        caller,
        apply_merges,
        repo,
        proposal,
        workspace,
        [{"kept": m["kept"], "merged": m["merged"]} for m in out],
        message=f"resolve-entities {workspace}: {len(out)} merge(s)",
    )
    return ResolveEntitiesOutput.model_validate({
        **base,
        "branch": proposal,
        "revision": written["revision"],
        "edges": {k: written[k] for k in ("repointed", "combined", "dropped")},
    })


__all__ = [
    "resolve_entities",
    "leading_genders",
    "load_candidates",
    "apply_merges",
    "find_merges",
    "score_pair",
    "candidate_pairs",
    "numbers_of",
    "name_tokens",
    "normalised",
    "canonical",
    "cluster",
    "Candidate",
    "PairScore",
]
