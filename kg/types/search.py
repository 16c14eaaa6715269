"""Search results (per-leg ranks, fusion, rerank) and the index's status and queue."""

from __future__ import annotations

from pydantic import ConfigDict, Field

from kg.types.common import (
    Number,
    Schema,
    Timestamp,
    absent,
)
from kg.types.nodes import Node

# -- search ---------------------------------------------------------------------------------


class HitContextNodes(Schema):
    """What surrounds a hit (searches with ``context``): its parent and its neighbouring siblings
    of its node type, in the children's order."""

    parent: Node | None = absent("With context.parent: the hit's parent node (null at the top level).")
    before: list[Node] = absent("With context.siblings: the siblings before the hit, the nearest last.")
    after: list[Node] = absent("With context.siblings: the siblings after the hit, the nearest first.")


class SearchRow(Schema):
    """One search result: a passage of a node, with each leg's rank (null: that leg did not rank it)."""

    workspace: str
    path: str
    node_id: str
    node_type: str
    title: str | None = Field(description="The node's `title` property (null: it has none, or not a string).")
    chunk_index: int
    chunk_text: str
    score: Number
    vector_distance: Number | None
    vector_rank: int | None
    fulltext_rank: int | None
    rerank_score: Number = absent("Reranked searches: the reranker's score of the row (higher is "
                                  "more relevant).")
    context: HitContextNodes = absent("Searches with context: the hit's parent and neighbouring sections.")


class FusionWeights(Schema):
    """The legs' weights in kg's fusion."""

    vector: Number
    fulltext: Number


class Fusion(Schema):
    """How a hybrid search was fused: by kg (``method``, ``k``, ``weights``) or by the index's
    own hybrid query (``alpha``, ``fusion_type``)."""

    engine: str = Field(description="kg, or the index engine (weaviate).")
    method: str = absent("kg's fusion: rrf.")
    k: int = absent("kg's fusion: the reciprocal rank fusion constant.")
    weights: FusionWeights = absent("kg's fusion: the legs' weights.")
    alpha: Number | None = absent("The index's fusion: the vector share.")
    fusion_type: str | None = absent("The index's fusion: ranked or relative_score.")


class RerankInfo(Schema):
    """The reranking of a search's first candidates."""

    model: str
    depth: int
    took_ms: Number


class SearchWarning(Schema):
    """A vector leg left out because its model could not embed the query."""

    code: str
    leg: str
    model: str
    message: str


class SearchResponse(Schema):
    """``POST .../search``: results best first."""

    results: list[SearchRow]
    took_ms: Number
    fusion: Fusion = absent("Hybrid searches: how the legs were fused.")
    rerank: RerankInfo = absent("Reranked searches: the reranker, how many candidates it reordered "
                                "and its time.")
    warnings: list[SearchWarning] = absent("Present when a vector leg was left out.")


class IndexJobProblem(Schema):
    """A failed index job, or a pending one waiting to be retried (its model could not be
    reached, or its indexer stopped while embedding it)."""

    content_key: str
    error: str
    attempts: int
    workspace: str | None
    path: str | None
    updated_at: Timestamp


class PlacementMarks(Schema):
    """How far a scoped index has placed the chunk feed."""

    seq: int
    version: int


class IndexCollection(Schema):
    """A collection of a scoped index."""

    name: str
    model: str
    workspace_id: int | None
    branch_id: int | None
    objects: int
    workspace: str | None
    branch: str | None


class IndexUnavailable(Schema):
    """Why the index could not report (the queue is still shown)."""

    code: str
    message: str


class IndexStats(Schema):
    """What the search index holds for the repository, as its backend reports it (backends may
    report more; ``error`` when it could not answer)."""

    model_config = ConfigDict(extra="allow")
    chunks: int = absent("Chunks (objects) held.")
    models: dict[str, int] = absent("Chunks by embedding model.")
    dims: dict[str, int | None] = absent("Vector dimension by embedding model.")
    watermark: int = absent("Content-addressed index: the newest chunk seq it holds.")
    stored: int = absent("The newest chunk seq stored in SQL: a content-addressed index has placed every "
                         "stored chunk when its watermark reaches it (a bulk import's are placed in the background).")
    placed: PlacementMarks = absent("Scoped index: placement marks.")
    collections: list[IndexCollection] = absent("Scoped index: its collections.")
    error: IndexUnavailable = absent("The index could not be asked.")


class IndexJobProgress(Schema):
    """A running job of a large text embedded in steps: chunks done of its total, an estimate."""

    content_key: str
    workspace: str | None
    path: str | None
    chunks_done: int
    chunks_total: int
    started_at: Timestamp | None
    elapsed_s: Number | None
    eta_s: Number | None = Field(description="Seconds left at the rate so far; null before the first chunk.")


class IndexJobAhead(Schema):
    """The job being embedded that the oldest pending job waits behind."""

    content_key: str
    workspace: str | None
    path: str | None
    chars: int | None = Field(description="Characters of its text.")
    chunks_done: int | None = Field(description="Chunks embedded so far (a large text embedded in steps).")
    chunks_total: int | None
    elapsed_s: Number | None = Field(description="Seconds since its claim began embedding it.")


class IndexJobNext(Schema):
    """The oldest pending job of the repository and what it waits behind."""

    content_key: str
    workspace: str | None
    path: str | None
    chars: int | None = Field(description="Characters of its text.")
    waiting_s: Number = Field(description="Seconds since it was queued.")
    retry_at: Timestamp | None = Field(
        description="End of its retry backoff (its indexer stopped while embedding it); null: claimable now.")
    alone: bool = Field(description="Whether it will be embedded by itself (its indexer stopped while embedding it).")
    reason: str | None = Field(description="Why it last went back to the queue.")
    behind: IndexJobAhead | None = Field(
        description="The repository's job being embedded that it waits for (its own workspace's first); "
                    "null: none runs (it waits for the next pass, other repositories' jobs or its backoff).")


class IndexRetried(Schema):
    """``POST .../index/retry-failed``: failed texts queued again."""

    retried: int = Field(description="Failed jobs set back to pending.")


class IndexStatus(Schema):
    """``GET .../index/status``: the indexer's queue for the repository, and the index."""

    pending: int
    running: int
    failed: int
    failures: list[IndexJobProblem] = Field(description="Failed jobs (at most 100).")
    waiting: list[IndexJobProblem] = Field(description="Pending jobs whose model could not be reached (at most 100).")
    progress: list[IndexJobProgress] = Field(
        description="Running jobs of large texts embedded in steps (at most 100), with chunks done / total.")
    next: IndexJobNext | None = Field(description="The oldest pending job and what it waits behind; null: none.")
    index: IndexStats


