"""Branch-aware search over node chunks: vector KNN, BM25 and hybrid rank fusion.

The branch decides what is searchable: the chunks of exactly the node versions it sees.
Filters (workspaces, path prefix, node type, property ``where``) select those node versions
first; each leg then ranks only their chunks, so a filter never truncates a top-k afterwards.
"""

from __future__ import annotations

import json
import math
import time
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from kg import collector
from kg.context import Actor, Resources, reading
from kg.errors import BackendUnavailable, InvalidInput, KGError, ProviderError, invalid_fields
from kg.index.base import CollectionScope, IndexHit, KeySet, SearchIndex, SearchScope, version_key
from kg.indexing.chunks import sync_index
from kg.indexing.config import workspace_embedding
from kg.lru import LRUCache
from kg.providers.base import Reranker
from kg.rag.enrich import HitContext, attach_context
from kg.rag.fusion import Item, certain_prefix, reciprocal_rank_fusion, relative_score_fusion
from kg.rag.where import matches as where_matches
from kg.rag.where import validate_where
from kg.store.models import Branch, Workspace
from kg.store.nodes import (
    NodeHead,
    node_heads_by_id,
    node_properties_by_id,
    version_properties,
    visible_node_heads,
    visible_nodes,
)
from kg.store.numbers import Integer
from kg.store.paths import MAX_PATH_CHARS, NON_BLANK_PATTERN, PREFIX_PATTERN, path_has_prefix, validate_prefix
from kg.store.relations import list_node_changes
from kg.store.repos import BranchView, workspace_id
from kg.tracing import span

__all__ = [
    "DEPTH_PER_HIT", "FORWARD_MAX_SHARE", "FORWARD_MIN_CHANGES", "FUSION_WINDOW", "MAX_DEPTH", "MAX_K",
    "RRF_K", "SearchAnswer", "SearchRequest", "SearchResult", "search", "search_answer", "search_branch",
    "with_default_weights",
]

Mode = Literal["vector", "fulltext", "hybrid"]
Granularity = Literal["chunk", "node"]
Fusion = Literal["kg", "index"]
FusionType = Literal["ranked", "relative_score"]
PrefixMode = Literal["segments", "raw"]
RRF_K = 60
"""The default rank constant of kg's fusion (``KG_SEARCH_RRF_K``; see docs/benchmarks/retrieval.md)."""
MAX_K = 1000
#: kg's fusion scores each leg's first this many items only (RRF's ranks, relative score
#: fusion's normalisation; :mod:`kg.rag.fusion`), at both granularities: what a k = 10 node
#: search read per leg before, so its figures hold. A larger k reads deeper without changing
#: how the first hits are scored, and one chunk per node ranks alike at both granularities.
FUSION_WINDOW = 80
#: Rows a leg reads per hit asked for, per granularity (at least the window); a search reads
#: deeper, four times at a time, until its first k rows are certain (:func:`_first_stage`).
DEPTH_PER_HIT = {"node": 8, "chunk": 3}
#: Most chunks a leg reads for one search: past it the rows are returned as fused, certain or not.
MAX_DEPTH = MAX_K * 4


#: The rules across fields, for the OpenAPI document (:meth:`SearchRequest._rules` checks them):
#: a hybrid search (the default mode) keeps a weight above 0; fusion and fusion_type are for
#: hybrid searches only. Bounds of single fields are on the fields; ``where`` is checked by
#: :func:`kg.rag.where.validate_where`, which the document does not describe.
_RULES: dict[str, Any] = {"allOf": [
    {"not": {"required": ["fulltext_weight", "vector_weight"],
             "properties": {"mode": {"const": "hybrid"}, "fulltext_weight": {"const": 0},
                            "vector_weight": {"const": 0}}}},
    {"if": {"required": ["mode"], "properties": {"mode": {"enum": ["vector", "fulltext"]}}},
     "then": {"properties": {"fusion": {"type": "null"}, "fusion_type": {"type": "null"}}}},
]}


class SearchRequest(BaseModel):
    """A search: the one model of a search request.

    The HTTP route takes it as its body, the agent functions, the RAG node and the CLI build
    it; it is validated once, when it is made, and cannot change afterwards (frozen). Types
    are checked strictly (no coercion) and unknown fields refused; then the rules below, whose
    violations raise :class:`kg.errors.InvalidInput` (422) with their own message.

    Attributes
    ----------
    query : str
        Non-empty.
    k : int
        Rows to return, 1..1000.
    mode : {"vector", "fulltext", "hybrid"}
    granularity : {"chunk", "node"}
        One row per passage, or one row per node with its best passage.
    workspaces : list of str, optional
    path_prefix, node_type : str, optional
        ``path_prefix``: ``/answers`` is ``/answers`` and ``/answers/...``, never ``/answers-old``
        (whole segments; a trailing ``/``: only what is below).
    path_prefix_mode : {"segments", "raw"}
        ``raw``: ``path_prefix`` is a plain string prefix (``/answers`` matches ``/answers-old``).
    where : dict, optional
        Node property conditions, all of which must hold: a plain value is equality, an object
        of operators (``$eq``, ``$ne``, ``$in``, ``$nin``, ``$gt``, ``$gte``, ``$lt``,
        ``$lte``, ``$exists``) compares (:mod:`kg.rag.where`). Checked on construction.
    fulltext_weight, vector_weight : float
        Weights of the legs in the fusion, finite and >= 0; 0 turns a leg off (not both). A
        weight the request does not name is the setting's (``KG_SEARCH_FULLTEXT_WEIGHT``,
        ``KG_SEARCH_VECTOR_WEIGHT``; :func:`with_default_weights`), applied when it runs.
    max_distance : float, optional
        Drop vector hits farther than this cosine distance (0..2). With the index's own hybrid
        query (Weaviate's ``max_vector_distance``) a farther object leaves the answer
        altogether, BM25 match or not.
    max_per_node : int, optional
        At chunk granularity, at most this many passages of one node (1..100); ignored at node
        granularity, which returns one row per node.
    fusion : {"kg", "index"}, optional
        Who fuses the hybrid legs: kg (weighted RRF over the legs it ran, with per-leg ranks),
        or the index's own hybrid query (Weaviate: ``alpha = vector_weight / (vector_weight +
        fulltext_weight)``; per-leg ranks are then unknown, null). Default: the index's own
        when it has one and the searched workspaces share one model, else kg. Hybrid only.
    fusion_type : {"ranked", "relative_score"}, optional
        The fusion function, whoever fuses: ``ranked`` (reciprocal rank fusion; the index's
        ``rankedFusion``) or ``relative_score`` (a convex combination of min-max normalised
        scores, :func:`kg.rag.fusion.relative_score_fusion`; Weaviate's ``relativeScoreFusion``),
        with ``alpha = vector_weight / (vector_weight + fulltext_weight)``. Default:
        ``KG_SEARCH_FUSION_TYPE``. Hybrid only.
    rerank : bool, optional
        Reorder the first ``KG_RERANK_DEPTH`` candidates with the configured reranker
        (``KG_RERANK_MODEL``). Default: on when a reranker is configured; ``true`` without
        one is refused.
    context : kg.rag.enrich.HitContext, optional
        Attach to each hit its parent node and its neighbouring siblings of the same node type,
        in order (the enrichment loop of RAG patterns; :func:`kg.rag.enrich.attach_context`).

    Raises
    ------
    kg.errors.InvalidInput
        On construction, for a request that breaks a rule.
    pydantic.ValidationError
        On construction, for a wrong type or an unknown field (:meth:`parse` raises
        :class:`kg.errors.InvalidInput` instead).
    """

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, json_schema_extra=_RULES)

    query: str = Field(description="What to look for (non-empty).", json_schema_extra={"pattern": NON_BLANK_PATTERN})
    k: Integer = Field(default=10, description=f"Rows to return, 1..{MAX_K}.",
                       json_schema_extra={"minimum": 1, "maximum": MAX_K})
    mode: Mode = "hybrid"
    granularity: Granularity = Field(default="chunk", description="chunk: one row per passage; node: one row "
                                                                  "per node, its best passage attached.")
    workspaces: list[str] | None = Field(default=None, description="Workspaces searched (default: all).")
    path_prefix: str | None = Field(default=None, description="Only paths under this: whole segments "
                                    "(/answers is /answers and /answers/..., not /answers-old).",
                                    json_schema_extra={"pattern": PREFIX_PATTERN, "maxLength": MAX_PATH_CHARS})
    path_prefix_mode: PrefixMode = Field(default="segments", description="segments, or raw: path_prefix "
                                         "as a plain string prefix.")
    node_type: str | None = None
    where: dict[str, Any] | None = Field(default=None, description="Node property conditions, all of which "
                                         "hold: a value (equality) or operators ($eq, $ne, $in, $nin, "
                                         "$gt, $gte, $lt, $lte, $exists).")
    fulltext_weight: float = Field(default=1.0, description="Weight of the BM25 leg (0 turns it off; default "
                                                            "KG_SEARCH_FULLTEXT_WEIGHT).",
                                   json_schema_extra={"minimum": 0})
    vector_weight: float = Field(default=1.0, description="Weight of the vector leg (0 turns it off; default "
                                                          "KG_SEARCH_VECTOR_WEIGHT).",
                                 json_schema_extra={"minimum": 0})
    max_distance: float | None = Field(default=None, description="Drop vector hits farther than this cosine "
                                                                 "distance (0..2).",
                                       json_schema_extra={"minimum": 0, "maximum": 2})
    max_per_node: Integer | None = Field(default=None, description="Chunk granularity: most passages of one "
                                                                   "node (1..100).",
                                         json_schema_extra={"minimum": 1, "maximum": 100})
    fusion: Fusion | None = Field(default=None, description="Who fuses a hybrid search: kg or the index.")
    fusion_type: FusionType | None = Field(default=None, description="The fusion function: ranked (RRF) or "
                                           "relative_score (normalised scores); default KG_SEARCH_FUSION_TYPE.")
    rerank: bool | None = Field(default=None, description="Rerank the top candidates with the configured "
                                                          "reranker (default: when one is configured).")
    context: HitContext | None = Field(default=None, description="Attach each hit's parent and neighbouring "
                                                                 "sections, in order.")

    @field_validator("path_prefix")
    @classmethod
    def _nfc_prefix(cls, value: str | None) -> str | None:
        """The prefix in NFC, as paths are stored (:func:`kg.store.paths.validate_path`)."""
        return unicodedata.normalize("NFC", value) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _rules(self) -> SearchRequest:
        """Apply the rules beyond types (raises :class:`kg.errors.InvalidInput`, which pydantic
        lets through unchanged)."""
        if not self.query.strip():
            raise InvalidInput("query must be a non-empty string", details={"query": self.query})
        if not 1 <= self.k <= MAX_K:
            raise InvalidInput(f"k must be between 1 and {MAX_K}", details={"k": self.k})
        for name in ("fulltext_weight", "vector_weight"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise InvalidInput(f"{name} must be a finite number >= 0")
        if self.mode == "hybrid" and self.fulltext_weight == 0 and self.vector_weight == 0:
            raise InvalidInput("at least one of fulltext_weight and vector_weight must be > 0")
        if self.path_prefix is not None:
            validate_prefix(self.path_prefix)
        validate_where(self.where)
        if self.max_distance is not None and not 0 <= self.max_distance <= 2:
            raise InvalidInput("max_distance must be between 0 and 2")
        if (self.fusion is not None or self.fusion_type is not None) and self.mode != "hybrid":
            raise InvalidInput("fusion and fusion_type apply to hybrid search only",
                               details={"mode": self.mode})
        if self.max_per_node is not None and not 1 <= self.max_per_node <= 100:
            raise InvalidInput("max_per_node must be an integer between 1 and 100",
                               details={"max_per_node": self.max_per_node})
        return self

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> SearchRequest:
        """A request from plain data (parsed JSON, CLI options), every problem as a kg error.

        Parameters
        ----------
        raw : mapping
            The request's fields.

        Returns
        -------
        SearchRequest

        Raises
        ------
        kg.errors.InvalidInput
            A wrong type or an unknown field (the message names the first, as the HTTP API's
            does: ``"k: Input should be a valid integer"``), or a broken rule.
        """
        if not isinstance(raw, Mapping):
            raise InvalidInput("a search request must be an object")
        try:
            return cls.model_validate(dict(raw))
        except ValidationError as exc:
            raise invalid_fields(exc) from exc


@dataclass
class SearchResult:
    """One row of a search answer."""

    workspace: str
    path: str
    node_id: str
    node_type: str
    chunk_index: int
    chunk_text: str
    score: float
    vector_distance: float | None
    vector_rank: int | None
    fulltext_rank: int | None
    properties: dict[str, Any] = field(default_factory=dict, repr=False)
    title: str | None = None
    rerank_score: float | None = None
    context: dict[str, Any] | None = field(default=None, repr=False)

    def as_dict(self) -> dict[str, Any]:
        """The API shape."""
        return {
            "workspace": self.workspace, "path": self.path, "node_id": self.node_id,
            "node_type": self.node_type, "title": self.title, "chunk_index": self.chunk_index,
            "chunk_text": self.chunk_text, "score": self.score,
            "vector_distance": self.vector_distance, "vector_rank": self.vector_rank,
            "fulltext_rank": self.fulltext_rank,
        } | ({} if self.rerank_score is None else {"rerank_score": self.rerank_score}) \
          | ({} if self.context is None else {"context": self.context})


@dataclass
class SearchAnswer:
    """What :func:`search_answer` returns.

    Attributes
    ----------
    results : list of SearchResult
        Best first.
    took_ms : float
    fusion : dict or None
        How a hybrid search was fused, echoed in the response: ``{"engine": "kg", "method":
        "rrf", "k": 60, "weights": {...}}`` or ``{"engine": "weaviate", "alpha", "fusion_type"}``;
        None for a single-leg search.
    warnings : list of dict
        ``{"code", "leg", "model", "message"}`` for each embedding model whose vector leg was
        left out because it could not embed the query (the other legs answered), and for a
        reranker that failed (``leg`` ``"rerank"``; the fused order was kept).
    rerank : dict or None
        ``{"model", "depth", "took_ms"}`` when the results were reranked.
    """

    results: list[SearchResult]
    took_ms: float
    fusion: dict[str, Any] | None = None
    warnings: list[dict[str, Any]] = field(default_factory=list)
    rerank: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        """The API answer: ``{"results", "took_ms"}`` and, when they apply, ``"fusion"`` and
        ``"warnings"``."""
        out: dict[str, Any] = {"results": [r.as_dict() for r in self.results], "took_ms": self.took_ms}
        if self.fusion is not None:
            out["fusion"] = self.fusion
        if self.warnings:
            out["warnings"] = self.warnings
        if self.rerank is not None:
            out["rerank"] = self.rerank
        return out


def search(session: Session, services: Resources, view: BranchView,
           request: SearchRequest) -> tuple[list[SearchResult], float]:
    """Run a search on a branch: :func:`search_answer` without the fusion description.

    Returns
    -------
    (results, took_ms)
    """
    answer = search_answer(session, services, view, request)
    return answer.results, answer.took_ms


def search_branch(services: Resources, caller: Actor, repo: str, branch: str, request: SearchRequest, *,
                  at_revision: int | None = None) -> SearchAnswer:
    """Search the chunks of the nodes ``branch`` sees (as of ``at_revision``).

    Parameters
    ----------
    services : kg.context.Resources
    caller : kg.context.Actor
        Who searches.
    repo, branch : str
    request : SearchRequest
    at_revision : int or None

    Returns
    -------
    SearchAnswer
        Its :meth:`SearchAnswer.as_dict` is the API answer.

    Raises
    ------
    kg.errors.NotFound, kg.errors.InvalidInput, kg.errors.ProviderError
        As :func:`search_answer`.
    """
    with reading(services, caller, repo, branch, at_revision) as (session, view):
        return search_answer(session, services, view, request)


def search_answer(session: Session, services: Resources, view: BranchView, request: SearchRequest) -> SearchAnswer:
    """Run a search on a branch, then rerank its first candidates when asked (or by default
    when a reranker is configured).

    Parameters
    ----------
    session : Session
    services : kg.services.Services
        Index and embedders.
    view : BranchView
        The branch (and revision) searched.
    request : SearchRequest
        Validated when it was made.

    Returns
    -------
    SearchAnswer
        Results best first: by cosine similarity (vector), BM25 score (fulltext) or the fused
        score (hybrid: weighted reciprocal rank fusion by kg, or the index's own hybrid).

    Raises
    ------
    kg.errors.InvalidInput
        Index fusion asked of an index without a hybrid query of its own, or of workspaces
        of several models; ``rerank: true`` without a configured reranker.
    kg.errors.NotFound
        An unknown workspace.
    kg.errors.ProviderError
        The query could not be embedded.

    References
    ----------
    Cormack, Clarke and Buettcher (2009), "Reciprocal rank fusion outperforms Condorcet and
    individual rank learning methods", SIGIR. Robertson and Zaragoza (2009), "The Probabilistic
    Relevance Framework: BM25 and Beyond". Nogueira and Cho (2019), "Passage Re-ranking with
    BERT" (reranking the first candidates of a first-stage ranking).
    """
    started = time.perf_counter()
    if request.mode == "hybrid":  # only a fusion reads the legs' weights
        request = with_default_weights(request, services.settings)
    reranker = services.reranker
    if request.rerank and reranker is None:
        raise InvalidInput("rerank: no reranker is configured (KG_RERANK_MODEL)", details={"rerank": True})
    if reranker is None or request.rerank is False:
        answer = _first_stage(session, services, view, request, started)
    else:
        depth = services.settings.rerank_depth
        wide = request.model_copy(update={"k": max(request.k, depth)}) if depth > request.k else request
        answer = _reranked(_first_stage(session, services, view, wide, started), reranker, request, depth, started)
    if request.context is not None:
        attach_context(session, view, answer.results, request.context)
        answer.took_ms = _ms(started)
    return answer


def with_default_weights(request: SearchRequest, settings: Any) -> SearchRequest:
    """The request with the legs' weights it did not name set from the settings.

    Parameters
    ----------
    request : SearchRequest
    settings : kg.settings.Settings
        ``search_vector_weight`` and ``search_fulltext_weight`` (``KG_SEARCH_VECTOR_WEIGHT``,
        ``KG_SEARCH_FULLTEXT_WEIGHT``).

    Returns
    -------
    SearchRequest
        ``request`` itself when it named both weights.

    Raises
    ------
    kg.errors.InvalidInput
        A hybrid search whose weights, once completed, are both 0.
    """
    unset = {"vector_weight", "fulltext_weight"} - request.model_fields_set
    if not unset:
        return request
    resolved = request.model_copy(update={name: float(getattr(settings, f"search_{name}")) for name in unset})
    if resolved.mode == "hybrid" and resolved.fulltext_weight == 0 and resolved.vector_weight == 0:
        raise InvalidInput("at least one of fulltext_weight and vector_weight must be > 0 (the unset one "
                           "defaults to KG_SEARCH_VECTOR_WEIGHT / KG_SEARCH_FULLTEXT_WEIGHT, which is 0)")
    return resolved


def _reranked(answer: SearchAnswer, reranker: Reranker, request: SearchRequest, depth: int,
              started: float) -> SearchAnswer:
    """The first ``depth`` rows reordered by the reranker's scores (stable on ties), the rest
    after them, cut to ``request.k``. A failed reranker keeps the fused order, with a warning."""
    head, tail = answer.results[:depth], answer.results[depth:]
    if not head:
        answer.results = []
        return answer
    rerank_started = time.perf_counter()
    try:
        with span("kg.search.rerank", model=reranker.name, count=len(head)):
            scores = reranker.score(request.query, [_rerank_text(r) for r in head])
        if len(scores) != len(head) or not all(math.isfinite(float(x)) for x in scores):
            raise ProviderError(f"{reranker.name} answered {len(scores)} scores for {len(head)} passages",
                                details={"model": reranker.name, "reason": "bad_scores"})
    except (BackendUnavailable, ProviderError) as exc:
        answer.warnings.append({"code": exc.code, "leg": "rerank", "model": reranker.name,
                                "message": f"the results were not reranked: {exc.message}"})
        answer.results = answer.results[:request.k]
        answer.took_ms = _ms(started)
        return answer
    order = sorted(range(len(head)), key=lambda i: (-float(scores[i]), i))
    for i in order:
        head[i].rerank_score = float(scores[i])
    answer.results = ([head[i] for i in order] + tail)[:request.k]
    answer.rerank = {"model": reranker.name, "depth": len(head), "took_ms": _ms(rerank_started)}
    answer.took_ms = _ms(started)
    return answer


def _rerank_text(row: SearchResult) -> str:
    """What the reranker reads of a row: its passage, after the node's title when the passage
    is not the title itself."""
    title = row.properties.get("title")
    if isinstance(title, str) and title.strip() and title.strip() != row.chunk_text.strip():
        return f"{title.strip()}\n{row.chunk_text}"
    return row.chunk_text


def _first_stage(session: Session, services: Resources, view: BranchView, request: SearchRequest,
                 started: float) -> SearchAnswer:
    """The search without reranking (the legs and their fusion)."""
    if request.workspaces is not None:
        wids = [workspace_id(view, name) for name in request.workspaces]
    else:
        wids = view.readable_ids()
    rrf_k = services.settings.search_rrf_k
    method = request.fusion_type or services.settings.search_fusion_type
    fusion = _kg_fusion(request, method, rrf_k)
    fusing = _native_fusion(services, request)
    if not wids:  # nothing to search: the answer still says how it would have been fused
        return SearchAnswer([], _ms(started), fusion if fusing is None else None)
    searchable = _searchable(session, services, view, wids, request)
    by_key = searchable.by_key
    if not by_key:
        return SearchAnswer([], _ms(started), fusion if fusing is None else None)

    repo_key = view.repo.uid
    sync_index(session, services.index, view.repo.id, repo_key)
    window = FUSION_WINDOW
    use_vector = request.mode == "vector" or (request.mode == "hybrid" and request.vector_weight > 0)
    use_fulltext = request.mode == "fulltext" or (request.mode == "hybrid" and request.fulltext_weight > 0)
    depth = min(MAX_DEPTH, _first_depth(request, fused=fusing is not None or (use_vector and use_fulltext),
                                             window=window))

    if fusing is not None:
        with span("kg.search.fusion", mode=request.mode):
            native = _native_hybrid(fusing, services, view, searchable, request, depth)
        if native is not None:
            results, fusion = native
            return SearchAnswer(_with_properties(session, view, results, searchable), _ms(started), fusion)

    while True:
        warnings: list[dict[str, Any]] = []
        vector_hits: list[IndexHit] = []
        fulltext_hits: list[IndexHit] = []
        if use_vector:
            with span("kg.search.knn", k=depth):
                vector_hits = _vector_leg(services, view, searchable, request, depth, warnings)
        if use_fulltext:
            with span("kg.search.bm25", k=depth):
                fulltext_hits = _fulltext_leg(services, repo_key, searchable, request, depth)
        # A leg that returned `depth` hits may hold more: its unread part can still change the
        # fused order past what the window decides (kg.rag.fusion.certain_prefix), and at node
        # granularity a few long documents filling a leg's top chunks leave fewer than k nodes.
        cut = {name for name, hits in (("vector", vector_hits), ("fulltext", fulltext_hits)) if len(hits) >= depth}
        last = depth >= MAX_DEPTH
        with span("kg.search.fusion", mode=request.mode):
            if request.granularity == "chunk":
                results = _rank_chunks(view, by_key, vector_hits, fulltext_hits, request, rrf_k, method,
                                       cut=set() if last else cut, window=window)
            else:
                results = _rank_nodes(view, by_key, vector_hits, fulltext_hits, request, rrf_k, method,
                                      cut=set() if last else cut, window=window)
        # Only certain rows were kept: the first n rows are those of any larger k (n <= k).
        if len(results) >= request.k or not cut or last:
            break
        depth = min(depth * 4, MAX_DEPTH)
    return SearchAnswer(_with_properties(session, view, results, searchable), _ms(started), fusion, warnings)


def _first_depth(request: SearchRequest, *, fused: bool, window: int) -> int:
    """How many hits a leg reads first. Two legs fused: at least the fusion's window (what it
    scores). One leg at chunk granularity with no per-node cap: ``k`` (every hit is at least one
    row, and a leg's first n hits are those of any deeper read). Otherwise ``k`` times
    :data:`DEPTH_PER_HIT` (several hits of one node make one row); :func:`_first_stage` reads
    deeper until its first ``k`` rows are certain."""
    if fused:
        return max(request.k * DEPTH_PER_HIT[request.granularity], window)
    if request.granularity == "chunk" and request.max_per_node is None:
        return request.k
    return request.k * DEPTH_PER_HIT[request.granularity]


def _kg_fusion(request: SearchRequest, method: str, rrf_k: int) -> dict[str, Any] | None:
    """How kg fuses a hybrid search, as the answer describes it (None for one leg)."""
    if request.mode != "hybrid":
        return None
    weights = {"vector": request.vector_weight, "fulltext": request.fulltext_weight}
    if method == "ranked":
        return {"engine": "kg", "method": "rrf", "k": rrf_k, "weights": weights}
    return {"engine": "kg", "method": "relative_score", "weights": weights}


def _fulltext_leg(services: Resources, repo_key: str, searchable: _Searchable, request: SearchRequest,
                  depth: int) -> list[IndexHit]:
    """The BM25 leg. At node granularity a node is scored over all its text (BM25F over its
    fields, the title weighted by ``KG_SEARCH_TITLE_WEIGHT``: the embedded index's, or
    Weaviate's over its documents collections), one hit per text carrying its best passage; at
    chunk granularity passages are ranked and a node takes its best passage's rank."""
    index: SearchIndex = services.index
    if request.granularity == "node":
        return index.bm25_documents(repo_key, request.query, depth, scope=searchable.scope,
                                    field_weights={"title": services.settings.search_title_weight})
    return index.bm25(repo_key, request.query, depth, scope=searchable.scope)


def _native_fusion(services: Resources, request: SearchRequest) -> SearchIndex | None:
    """The index whose own hybrid query fuses this search, or None (kg fuses it)."""
    if request.mode != "hybrid" or request.fusion == "kg":
        return None
    index: SearchIndex = services.index
    if not index.native_hybrid:
        if request.fusion == "index":
            raise InvalidInput("this index has no hybrid query of its own: use fusion 'kg' (the default)")
        return None
    return index if request.vector_weight > 0 and request.fulltext_weight > 0 else None


def _native_hybrid(index: SearchIndex, services: Resources, view, searchable: _Searchable, request, depth):
    """The index's own hybrid query (one model only), as rows and the fusion it used; None
    when the searched workspaces use several models (kg fuses those)."""
    keys_by_model = searchable.keys_by_model
    by_key = searchable.by_key
    if len(keys_by_model) != 1:
        if request.fusion == "index":
            raise InvalidInput("the index's own hybrid query searches one embedding model; these "
                               "workspaces use several: use fusion 'kg'")
        return None
    (model, keys), = keys_by_model.items()
    embedder = services.embedder(model)
    vector = embedder.embed([request.query])[0]
    alpha = request.vector_weight / (request.vector_weight + request.fulltext_weight)
    answer = index.hybrid(view.repo.uid, request.query, vector, depth, model=embedder.name,
                          scope=searchable.scope_of(model), alpha=alpha,
                          fusion_type=request.fusion_type or services.settings.search_fusion_type,
                          max_vector_distance=request.max_distance)
    names = view.workspaces
    per_node: Counter[str] = Counter()
    results: list[SearchResult] = []
    for hit in answer.hits:
        for node in sorted(by_key[hit.content_key], key=lambda n: (names[n.workspace_id], n.path)):
            limit = 1 if request.granularity == "node" else request.max_per_node
            if limit is not None and per_node[node.node_id] >= limit:
                continue
            per_node[node.node_id] += 1
            results.append(_row(view, node, hit, hit.score, None, None, None, None))
            if len(results) >= request.k:
                break
        if len(results) >= request.k:
            break
    return results, {"engine": index.engine, "alpha": answer.alpha, "fusion_type": answer.fusion_type}


def _row(view: BranchView, node: Any, hit: IndexHit, score: float, v: IndexHit | None,
         f: IndexHit | None, vector_rank: int | None, fulltext_rank: int | None) -> SearchResult:
    return SearchResult(
        workspace=view.workspaces[node.workspace_id], path=node.path, node_id=node.node_id,
        node_type=node.node_type, chunk_index=hit.chunk_index, chunk_text=hit.text,
        score=float(score), vector_distance=None if v is None else float(cast(float, v.distance)),
        vector_rank=vector_rank, fulltext_rank=fulltext_rank,
    )


def _fuse(vector: Mapping[Item, IndexHit], fulltext: Mapping[Item, IndexHit], request: SearchRequest,
          rrf_k: int, method: str, *, cut: set[str], window: int) -> list[tuple[Item, float]]:
    """The hybrid ranking of two legs (items best first, each with its hit): weighted RRF on
    their ranks, or relative score fusion on their scores, each over the legs' first ``window``
    items; only its certain prefix (:func:`kg.rag.fusion.certain_prefix`) given the legs in
    ``cut`` (read to their depth, not whole)."""
    weights = {"vector": request.vector_weight, "fulltext": request.fulltext_weight}
    if method == "relative_score":
        fused = relative_score_fusion({"vector": [(i, h.score) for i, h in vector.items()],
                                       "fulltext": [(i, h.score) for i, h in fulltext.items()]}, weights=weights,
                                      window=window)
    else:
        fused = reciprocal_rank_fusion({"vector": list(vector), "fulltext": list(fulltext)}, weights=weights,
                                       k=rrf_k, window=window)
    weighted = {name for name, weight in weights.items() if weight > 0}
    certain = certain_prefix(fused, {"vector": len(vector), "fulltext": len(fulltext)}, cut & weighted, window)
    return [(item, score) for item, score, _ in fused[:certain]]


def _rank_chunks(view: BranchView, by_key: dict[str, list], vector_hits: list[IndexHit],
                 fulltext_hits: list[IndexHit], request: SearchRequest, rrf_k: int,
                 method: str = "ranked", *, cut: set[str] | None = None,
                 window: int = FUSION_WINDOW) -> list[SearchResult]:
    """One row per passage (and per node holding it), at most ``max_per_node`` per node; a
    hybrid search's rows are its fusion's certain prefix given the legs in ``cut``."""
    if request.mode != "hybrid" and request.max_per_node is None:
        return _one_leg_rows(view, by_key, vector_hits if request.mode == "vector" else fulltext_hits,
                             request.mode == "vector", request.k)
    hits: dict[tuple[str, int], IndexHit] = {}
    for hit in fulltext_hits + vector_hits:
        hits[(hit.content_key, hit.chunk_index)] = hit
    vector_by = {(h.content_key, h.chunk_index): h for h in vector_hits}
    fulltext_by = {(h.content_key, h.chunk_index): h for h in fulltext_hits}
    if request.mode == "vector":
        ranked = [((h.content_key, h.chunk_index), h.score) for h in vector_hits]
    elif request.mode == "fulltext":
        ranked = [((h.content_key, h.chunk_index), h.score) for h in fulltext_hits]
    else:
        ranked = _fuse(vector_by, fulltext_by, request, rrf_k, method, cut=cut or set(), window=window)
    names = view.workspaces
    per_node: Counter[str] = Counter()
    results: list[SearchResult] = []
    for key, score in ranked:
        v, f = vector_by.get(key), fulltext_by.get(key)
        for node in sorted(by_key[key[0]], key=lambda n: (names[n.workspace_id], n.path)):
            if request.max_per_node is not None and per_node[node.node_id] >= request.max_per_node:
                continue
            per_node[node.node_id] += 1
            results.append(_row(view, node, hits[key], score, v, f,
                                None if v is None else v.rank, None if f is None else f.rank))
            if len(results) >= request.k:
                return results
    return results


def _one_leg_rows(view: BranchView, by_key: dict[str, list], hits: list[IndexHit], vector: bool,
                  k: int) -> list[SearchResult]:
    """:func:`_rank_chunks` of one leg with no per-node cap: each hit in the leg's order (a
    passage is one hit of a leg), a row per node holding it, by workspace and path; its leg's
    rank and score."""
    names = view.workspaces
    results: list[SearchResult] = []
    for hit in hits:
        nodes = by_key[hit.content_key]
        if len(nodes) > 1:
            nodes = sorted(nodes, key=lambda n: (names[n.workspace_id], n.path))
        for node in nodes:
            results.append(_row(view, node, hit, hit.score, hit, None, hit.rank, None) if vector else
                           _row(view, node, hit, hit.score, None, hit, None, hit.rank))
            if len(results) >= k:
                return results
    return results


def _node_leg(view: BranchView, by_key: dict[str, list], hits: list[IndexHit]) -> dict[str, IndexHit]:
    """A leg's node ranking: each node at the rank of its best passage (ordered dict, best first)."""
    names = view.workspaces
    best: dict[str, IndexHit] = {}
    for hit in hits:
        for node in sorted(by_key[hit.content_key], key=lambda n: (names[n.workspace_id], n.path)):
            best.setdefault(node.node_id, hit)
    return best


def _rank_nodes(view: BranchView, by_key: dict[str, list], vector_hits: list[IndexHit],
                fulltext_hits: list[IndexHit], request: SearchRequest, rrf_k: int,
                method: str = "ranked", *, cut: set[str] | None = None,
                window: int = FUSION_WINDOW) -> list[SearchResult]:
    """One row per node. Each leg ranks nodes by their best passage; hybrid fuses the node
    rankings (so a node whose title leads one leg and whose body leads the other gets both
    legs' credit), and the row carries the node's best passage and its per-leg node ranks.
    The chunks are collapsed to nodes before the fusion and the cut, and a hybrid search's
    rows are the fusion's certain prefix given the legs in ``cut``."""
    nodes = {n.node_id: n for group in by_key.values() for n in group}
    vector_best = _node_leg(view, by_key, vector_hits)
    fulltext_best = _node_leg(view, by_key, fulltext_hits)
    vector_rank = {nid: rank for rank, nid in enumerate(vector_best, start=1)}
    fulltext_rank = {nid: rank for rank, nid in enumerate(fulltext_best, start=1)}
    if request.mode == "vector":
        ranked = [(nid, hit.score) for nid, hit in vector_best.items()]
    elif request.mode == "fulltext":
        ranked = [(nid, hit.score) for nid, hit in fulltext_best.items()]
    else:
        ranked = _fuse(vector_best, fulltext_best, request, rrf_k, method, cut=cut or set(), window=window)
    results = []
    for nid, score in ranked[:request.k]:
        v, f = vector_best.get(nid), fulltext_best.get(nid)
        if request.mode == "fulltext" or v is None:
            hit = f
        elif request.mode == "vector" or f is None:
            hit = v
        else:  # the passage the stronger leg put first for this node, over the legs' windows
            # only, then the better rank: what a deeper read of the legs does not change
            vr, fr = vector_rank[nid], fulltext_rank[nid]
            if vr <= window and fr <= window:
                hit = v if request.vector_weight / (rrf_k + vr) >= request.fulltext_weight / (rrf_k + fr) else f
            elif vr <= window or fr <= window:
                hit = v if vr <= window else f
            else:
                hit = v if vr <= fr else f
        assert hit is not None  # a ranked node is in at least one leg
        results.append(_row(view, nodes[nid], hit, score, v, f, vector_rank.get(nid) if v else None,
                            fulltext_rank.get(nid) if f else None))
    return results


def _with_properties(session: Session, view: BranchView, results: list[SearchResult],
                     searchable: _Searchable) -> list[SearchResult]:
    """Attach each result node's properties and title, loaded for the returned rows only: the versions the
    searchable set holds (the ones ``view`` sees) read by primary key in one statement of two
    columns, or taken from the set itself when it holds whole versions (a ``where`` filter's)."""
    if not results:
        return results
    versions: dict[str, Any] = {}
    by_key, node_key = searchable.by_key, searchable.node_key
    for r in results:
        key = node_key.get(r.node_id)
        for node in by_key.get(key, ()) if key else ():
            if node.node_id == r.node_id:
                versions[r.node_id] = node
                break
    found: dict[str, dict[str, Any]] = {}
    by_version = {n.id: node_id for node_id, n in versions.items() if isinstance(n, NodeHead)}
    for version_id, properties in version_properties(session, by_version).items():
        found[by_version[version_id]] = properties
    found.update({node_id: n.properties for node_id, n in versions.items() if not isinstance(n, NodeHead)})
    missing = {r.node_id: None for r in results if r.node_id not in found}
    if missing:  # not in the set (never, as the legs rank its keys): by the view's window query
        found.update(node_properties_by_id(session, view, missing))
    for r in results:
        if r.node_id in found:
            r.properties = found[r.node_id]
            title = r.properties.get("title")
            r.title = title if isinstance(title, str) else None
    return results


#: A brought-forward state re-reads whole when more nodes changed than this share of its nodes
#: (a bulk write) and than FORWARD_MIN_CHANGES: reading them by id then costs about what one
#: read of all does.
FORWARD_MAX_SHARE = 0.25
FORWARD_MIN_CHANGES = 1000


@dataclass(frozen=True)
class _Searchable:
    """The nodes a search may return, grouped as the legs need them.

    Attributes
    ----------
    by_key : dict of str to list
        Content key -> the visible nodes (after filters) whose text it is.
    keys : KeySet
        The content keys (what the index may rank); one object per cached state, so an index
        can memoise its mask of them (and derive the next state's from it).
    keys_by_model : dict of str to KeySet
        The content keys by the embedding model of their workspace (``keys`` itself when one
        model covers them all).
    scope : SearchScope
        What the index may read: ``keys``, and per (model, workspace, branch) collection
        providing visible versions their version keys (made on an engine's first read of
        them), with the filters for the searched branch's own collections when it is read at
        its head.
    node_key : dict of str to str
        Node id -> its content key, for the nodes in ``by_key`` (what a change replaces).
    revision : int
        The branch state's revision.
    """

    by_key: dict[str, list]
    keys: KeySet
    keys_by_model: dict[str, KeySet]
    scope: SearchScope
    node_key: dict[str, str] = field(default_factory=dict)
    revision: int = 0

    def scope_of(self, model: str) -> SearchScope:
        """The scope of one embedding model."""
        return self.scope.of_model(model, self.keys_by_model[model])

    def __len__(self) -> int:
        """The searchable nodes (what the state weighs in the search cache)."""
        return len(self.node_key)


#: Built once: the compiled statements and their result columns are reused as they are.
_BRANCH_REVISIONS = select(Branch.base_revision, Branch.head_revision).where(Branch.id == bindparam("id"))
_WORKSPACE_CONFIGS = (select(Workspace.id, Workspace.config).where(Workspace.id.in_(bindparam("ids", expanding=True)))
                      .order_by(Workspace.id))


def _searchable(session: Session, services: Resources, view: BranchView, wids: list[int],
                request: SearchRequest) -> _Searchable:
    """The searchable nodes of a branch state after the filters; cached (a branch state never
    changes) unless a property ``where`` filter needs the properties.

    A state not cached is the last one cached on its branch (same read chain, filters and
    embedding settings) brought forward by the node versions written since, O(changes) reads
    and O(nodes) dict and set copies, or else one read of every visible node, O(nodes) rows.
    An agent's write then search pays the first. A branch's first state starts from its
    parent's state at the fork when that is cached (the branch's own versions are its changes),
    so an agent's new branch pays O(changes) too.
    """
    # Re-embedding a workspace re-points its node versions at new content keys without a new
    # revision, so the key includes the workspaces' embedding settings.
    models, configs = _embedding_settings(session, view, wids, services.settings.embedding_model)

    # Whether the state is the branch's head decides which filters the collections are sent.
    at_head = view.revision == view.branch.head_revision
    branch_id = view.branch.id

    def shaped(by_key: dict[str, list], node_key: dict[str, str], keys: KeySet,
               keys_by_model: dict[str, KeySet]) -> _Searchable:
        scope = SearchScope(keys, lambda: _collection_scopes(branch_id, by_key, models, request, at_head))
        return _Searchable(by_key, keys, keys_by_model, scope, node_key, view.revision)

    def build() -> _Searchable:
        # A row per visible node, all kept: the collector's passes over them are waste.
        with collector.held():
            return _build()

    def _build() -> _Searchable:
        # NodeVersion with properties for a where filter, else rows of the six columns search
        # needs (no ORM instance per node)
        nodes = cast(list[Any], visible_nodes(session, view, workspace_ids=wids, path_prefix=request.path_prefix,
                                              path_prefix_mode=request.path_prefix_mode) if request.where else
                     visible_node_heads(session, view, workspace_ids=wids, path_prefix=request.path_prefix,
                                        path_prefix_mode=request.path_prefix_mode))
        by_key: dict[str, list] = defaultdict(list)
        by_model: dict[str, set[str]] = defaultdict(set)
        node_key: dict[str, str] = {}
        for node in nodes:
            if not _searchable_node(node, request) or (
                    request.where and not where_matches(node.properties, request.where)):
                continue
            by_key[node.content_key].append(node)
            by_model[models[node.workspace_id]].add(node.content_key)
            node_key[node.node_id] = node.content_key
        keys = KeySet(by_key)
        return shaped(dict(by_key), node_key, keys,
                      {model: keys if len(by_model) == 1 else KeySet(model_keys)
                       for model, model_keys in by_model.items()})

    if request.where:
        return build()
    # A branch's read chain is fixed from its fork on (a reset forks it again: a new base
    # revision); its revisions only grow, so the versions written on it after a state's
    # revision are exactly what the state lacks.
    line = ("searchable", view.repo.id, view.branch.id, view.branch.base_revision, view.chain[1:], at_head,
            configs, request.path_prefix, request.path_prefix_mode, request.node_type)
    cache = services.search_cache

    def parent_at_fork() -> _Searchable | None:
        # A branch's first state: its parent's state at the fork has the read chain of the
        # branch's ancestors (``view.chain[1:]``), and every version on the branch itself is
        # above the fork, so that state brought forward by them is the branch's.
        if len(view.chain) < 2:
            return None
        parent_id, fork = view.chain[1]
        row = session.connection().execute(_BRANCH_REVISIONS, {"id": parent_id}).first()
        if row is None:
            return None
        revision = min(fork, row.head_revision)  # the parent's state read as of the fork
        for head in (True, False):
            parent_line = ("searchable", view.repo.id, parent_id, row.base_revision, view.chain[2:], head, *line[6:])
            for key in (("last", *parent_line), (*parent_line, revision)):
                held = cache.peek(key)
                if held is not None and held.revision == revision:
                    return held
        return None

    def build_or_bring_forward() -> _Searchable:
        last = cache.peek(("last", *line))
        start = last if last is not None else parent_at_fork()
        made = None
        if start is not None and start.revision <= view.revision:
            forward = _brought_forward(session, view, request, models, start)
            made = shaped(*forward) if forward is not None else None
        if made is None:
            made = build()
        if last is None or last.revision < made.revision:
            cache.put(("last", *line), made)
        return made

    return cache.get((*line, view.revision), build_or_bring_forward)


#: (id of a view's workspace configs, searched ids, default model) -> (configs, models, settings):
#: a cached view's configs never change (a change makes a new layout), so their parse is kept.
_EMBEDDING_MEMO: LRUCache[tuple[Any, dict[int, str], tuple[tuple[int, str], ...]]] = LRUCache(256)


def _embedding_settings(session: Session, view: BranchView, wids: list[int], default_model: str
                        ) -> tuple[dict[int, str], tuple[tuple[int, str], ...]]:
    """The embedding model of each searched workspace, and their embedding settings as a key
    (re-embedding a workspace re-points its versions at new content keys without a revision):
    from the view's workspace configs when it carries them, else one statement."""
    held = view.workspace_configs
    if held is None:
        rows = session.connection().execute(_WORKSPACE_CONFIGS, {"ids": wids}).all()
        return _parse_embedding(rows, default_model)
    memo_key = (id(held), tuple(wids), default_model)
    memo = _EMBEDDING_MEMO.peek(memo_key)
    if memo is not None and memo[0] is held:
        return memo[1], memo[2]
    models, configs = _parse_embedding([(wid, held.get(wid)) for wid in wids], default_model)
    _EMBEDDING_MEMO.put(memo_key, (held, models, configs))
    return models, configs


def _parse_embedding(rows: Iterable[Any], default_model: str) -> tuple[dict[int, str], tuple[tuple[int, str], ...]]:
    models: dict[int, str] = {}
    configs: list[tuple[int, str]] = []
    for wid, config in rows:
        models[wid] = workspace_embedding(config, default_model=default_model).model
        configs.append((wid, json.dumps((config or {}).get("embedding"), sort_keys=True)))
    return models, tuple(configs)


def _searchable_node(node: Any, request: SearchRequest) -> bool:
    """Whether a visible node version (in a searched workspace, under the path prefix) is one
    the search may return: it has text, and the type the request asks for."""
    return node.content_key is not None and (request.node_type is None or node.node_type == request.node_type)


def _brought_forward(session: Session, view: BranchView, request: SearchRequest, models: dict[int, str],
                     last: _Searchable) -> tuple[dict[str, list], dict[str, str], KeySet, dict[str, KeySet]] | None:
    """``last`` (a state of ``view``'s branch on the same read chain, at an earlier revision)
    with the node versions written on the branch since applied: ``(by_key, node_key, keys,
    keys_by_model)`` of ``view``'s state, or None when more nodes changed than a read by id
    pays for (:data:`FORWARD_MAX_SHARE`, :data:`FORWARD_MIN_CHANGES`).

    O(c) reads for c changed nodes (the branch / revision index, then the changed nodes by id)
    and O(n) dict and set copies at C speed for the state's n nodes; ``last`` is not changed
    (its lists are shared, a changed key gets a new one).
    """
    changed = {node_id for node_id, wid, _, _ in list_node_changes(
        session, branch_id=view.branch.id, after=last.revision, upto=view.revision) if wid in models}
    if len(changed) > max(FORWARD_MIN_CHANGES, FORWARD_MAX_SHARE * len(last.node_key)):
        return None
    live = node_heads_by_id(session, view, changed)
    by_key, node_key = dict(last.by_key), dict(last.node_key)
    touched: set[str] = set()
    for node_id in changed:
        old = node_key.pop(node_id, None)
        if old is not None:
            touched.add(old)
            others = [n for n in by_key[old] if n.node_id != node_id]  # lists are shared: a new one
            if others:
                by_key[old] = others
            else:
                del by_key[old]
        node = live.get(node_id)
        if node is None or not _searchable_node(node, request) or (  # the read by id filtered no path
                request.path_prefix is not None
                and not path_has_prefix(node.path, request.path_prefix, request.path_prefix_mode)):
            continue
        key = cast(str, node.content_key)  # not None: _searchable_node
        by_key[key] = [*by_key.get(key, ()), node]
        node_key[node_id] = key
        touched.add(key)
    keys = last.keys.derive(removed=touched - by_key.keys(), added=touched & by_key.keys())
    keys_by_model: dict[str, KeySet] = {}
    for model in set(models.values()):
        held = last.keys_by_model.get(model)
        having = {k for k in touched if any(models[n.workspace_id] == model for n in by_key.get(k, ()))}
        if held is None:
            model_keys = KeySet(having)
        elif held is last.keys and len(set(models.values())) == 1:
            model_keys = keys
        else:
            model_keys = held.derive(removed=touched - having, added=having)
        if model_keys:
            keys_by_model[model] = model_keys
    return by_key, node_key, keys, keys_by_model


def _collection_scopes(branch_id: int, by_key: dict[str, list], models: dict[int, str],
                       request: SearchRequest, at_head: bool) -> tuple[CollectionScope, ...]:
    """The (workspace, branch) collections an index of collections reads for these nodes: the branch's
    own and its ancestors' that provide visible versions, each with the version keys it may
    return. The request's filters go along only to the branch's own collections read at its
    head: an object holds the newest path and properties of its node there, which is what the
    head sees (an ancestor is read as of the fork, an older revision as of then)."""
    keys: dict[tuple[str, int, int], set[str]] = defaultdict(set)
    for content_key, nodes in by_key.items():
        for node in nodes:
            keys[(models[node.workspace_id], node.workspace_id, node.branch_id)].add(
                version_key(node.node_id, content_key))
    prefix = request.path_prefix
    if prefix is not None and ("*" in prefix or "?" in prefix):
        prefix = None  # Weaviate's Like cannot escape its wildcards: SQL alone filters this path
    filters: dict[str, Any] = {"path_prefix": prefix, "node_type": request.node_type, "where": request.where}
    sent = filters if at_head and any(v is not None for v in filters.values()) else None
    if sent is not None and prefix is not None:
        sent = {**sent, "path_prefix_mode": request.path_prefix_mode}
    return tuple(
        CollectionScope(model, wid, bid, frozenset(vkeys), sent if bid == branch_id else None)
        for (model, wid, bid), vkeys in sorted(keys.items())
    )


def _vector_leg(services: Resources, view, searchable: _Searchable, request, depth,
                warnings: list[dict[str, Any]]) -> list[IndexHit]:
    """KNN per embedding model of the searched workspaces, merged by distance.

    A model that cannot embed the query (its server down, say) is left out with a warning when
    other legs remain (another model, or BM25 in a hybrid search); alone, its error is raised.
    """
    keys_by_model = searchable.keys_by_model
    index: SearchIndex = services.index
    merged: list[IndexHit] = []
    failed: list[KGError] = []
    for model in keys_by_model:
        try:
            embedder = services.embedder(model)
            with span("kg.embed.batch", model=model, count=1):
                vector = embedder.embed([request.query])[0]
        except (BackendUnavailable, ProviderError) as exc:
            failed.append(exc)
            warnings.append({"code": exc.code, "leg": "vector", "model": model,
                             "message": f"the vector leg skipped model {model!r}: {exc.message}"})
            continue
        merged.extend(index.knn(view.repo.uid, vector, depth, model=embedder.name,
                                scope=searchable.scope_of(model), max_distance=request.max_distance))
    if failed and len(failed) == len(keys_by_model) and request.mode == "vector":
        raise failed[0]
    if len(keys_by_model) > 1:
        merged.sort(key=lambda h: (h.distance, h.seq))
        merged = [
            IndexHit(h.seq, h.content_key, h.chunk_index, h.text, h.score, rank, h.distance)
            for rank, h in enumerate(merged[:depth], start=1)
        ]
    return merged


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)
