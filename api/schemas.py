"""Response bodies (pydantic): what every route answers on success, as the OpenAPI document
describes it (API.md is the contract; these models are its 2xx half).

Each model describes exactly the dict that the library builds today; FastAPI validates the
route's return value against it (``response_model``) and serialises it in field order, which is
the order of the library's dicts. The rules that keep a body byte for byte what it was:

- Models refuse unknown fields (:class:`Schema`): a key the library adds and no model declares is
  a 500 in every test that reaches it, never a key that silently vanishes.
- Models are strict: nothing is coerced on the way out (``1`` stays ``1``; see :data:`Number`).
- A key that some answers leave out is declared with :func:`absent` and the route is registered
  with ``response_model_exclude_unset=True``: left out stays left out, ``null`` stays ``null``.
- Open JSON (node properties, error details, a stored job output) is ``dict[str, Any]``;
  :class:`IndexStats` alone allows extra keys (what an index backend reports of itself).

``tests/api/conftest.py`` holds every API test to it: each serialised body must equal, byte for
byte, the JSON of the dict the route returned.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel, WithJsonSchema

from api.models import ErrorInfo

#: A JSON number kept as it came: an int stays an int, a float a float (a ``float`` field would
#: turn ``1`` into ``1.0``, and a node's ``order`` or a relation's ``weight`` may be either).
Number = Annotated[int | float, WithJsonSchema({"type": "number"})]
#: An ISO 8601 timestamp, as ``datetime.isoformat`` writes it.
Timestamp = Annotated[str, Field(description="ISO 8601 timestamp.")]
#: Node properties, relation properties and other user JSON: any object.
JSONObject = dict[str, Any]


def _drop_default(schema: dict[str, Any]) -> None:
    """No ``"default": null`` in the document for a key that is left out rather than null."""
    schema.pop("default", None)


def absent(description: str, **kwargs: Any) -> Any:
    """A field that some answers leave out (and never answer as ``null`` unless typed so).

    Parameters
    ----------
    description : str
        When the key is present, for the OpenAPI document.
    **kwargs
        Further :func:`pydantic.Field` arguments (``alias``).

    Returns
    -------
    pydantic.fields.FieldInfo
        Not required, default None. The route serialises with ``exclude_unset``, so a key its
        dict did not hold is left out of the body again.
    """
    return Field(default=None, description=description, json_schema_extra=_drop_default, **kwargs)


class Schema(BaseModel):
    """Base of the response models: unknown keys refused, nothing coerced."""

    model_config = ConfigDict(extra="forbid", strict=True)


# -- health, repositories, workspaces -------------------------------------------------------


class Health(Schema):
    """``GET /health``: the service answers."""

    status: Literal["ok"]
    version: str = Field(description="kg's version.")


class Repo(Schema):
    """A repository."""

    name: str
    created_at: Timestamp
    head_revision: int = Field(description="The newest revision of the repository (0: none yet).")


class RepoList(Schema):
    """A page of the repositories, by name."""

    repos: list[Repo]
    next_cursor: str | None = Field(default=None, description="The cursor of the next page, null on the last.")


class ChunkOverlap(Schema):
    """An overlap given as ``{"type", "value"}``: a count, or a fraction of the chunk size."""

    type: Literal["Tokens", "Percentage"]
    value: Number


class ChunkingSettings(Schema):
    """How a workspace's body fields are chunked."""

    splitter: str = Field(description="recursive, fixed_size, markdown, code or words.")
    chunk_size: int
    overlap: int | ChunkOverlap = Field(description="Units shared by consecutive chunks.")
    unit: str = Field(description="tokens, chars or words.")


class IndexedPropertiesSettings(Schema):
    """Which properties a workspace indexes."""

    short: list[str] = Field(description="Indexed as one passage each (never chunked).")
    body: list[str] = Field(description="Chunked with the workspace's chunking.")


class EmbeddingSettings(Schema):
    """A workspace's embedding model, chunking and indexed properties."""

    model: str = Field(description="``<provider>:<model>``.")
    chunking: ChunkingSettings
    indexed_properties: IndexedPropertiesSettings


class Reembedding(Schema):
    """A re-embed under way: the settings it builds, and the failures holding its switch back."""

    embedding: EmbeddingSettings
    failed_texts: int


class Workspace(Schema):
    """A workspace and its embedding settings."""

    name: str
    created_at: Timestamp
    embedding: EmbeddingSettings
    reembedding: Reembedding | None = Field(description="null when no re-embed is under way.")


class WorkspaceList(Schema):
    """The workspaces of a repository."""

    workspaces: list[Workspace]


class EmbeddingChange(Schema):
    """``PATCH .../workspaces/{ws}``: the requested settings and what re-embedding them queued."""

    workspace: str
    embedding: EmbeddingSettings
    reembedded: bool = Field(description="false when the settings were current (a re-embed under way is "
                                         "cancelled).")
    node_versions: int = Field(description="Node versions to re-point at their text under the new settings.")
    queued: int = Field(description="Texts queued for embedding.")
    switched: bool = Field(description="Whether the new settings are current already.")


# -- branches and history -------------------------------------------------------------------


class Branch(Schema):
    """A branch: its parent, the parent's revision it forked at, and its newest revision."""

    name: str
    parent: str | None = Field(description="null for main.")
    base_revision: int | None
    head_revision: int
    created_at: Timestamp
    ahead: int = absent("Revisions on the branch since its merge base with its parent "
                        "(listing and reading a branch).")
    behind: int = absent("Revisions on the parent since that merge base (listing and reading a branch).")


class BranchList(Schema):
    """Every branch of a repository."""

    branches: list[Branch]


class BranchReset(Schema):
    """``POST .../reset``: the branch forked again from its parent's head."""

    name: str
    parent: str | None
    base_revision: int | None
    head_revision: int


class NodeChangeEntry(Schema):
    """A node version a revision wrote."""

    kind: Literal["node"]
    op: Literal["put", "delete"]
    workspace: str | None
    path: str


class RelationChangeEntry(Schema):
    """A relation version a revision wrote (addresses ``workspace:/path``)."""

    kind: Literal["relation"]
    op: Literal["put", "delete"]
    from_: str | None = Field(alias="from")
    type: str
    to: str | None


class Revision(Schema):
    """One revision of the log, with what it changed."""

    revision: int
    branch: str | None
    created_at: Timestamp
    message: str | None
    actor: str | None
    changes: list[Annotated[NodeChangeEntry | RelationChangeEntry, Field(discriminator="kind")]] = Field(
        description="The first `changes` (query parameter, default 100) writes of the revision: nodes, then "
                    "relations, in write order.")
    change_count: int = Field(description="How many writes the revision made (those the caller may read).")


class RevisionLog(Schema):
    """``GET .../log``: revisions newest first."""

    revisions: list[Revision]


class MergePoint(Schema):
    """The merge base: a fork point or the last merge between the two branches."""

    kind: Literal["fork", "merge"]
    branch: str
    revision: int


class PropertyChange(Schema):
    """A property's value before and after (null: absent)."""

    old: Any
    new: Any


class DiffNode(Schema):
    """A node the branch added or deleted (its state after, or before)."""

    workspace: str | None
    path: str
    node_id: str | None
    node_type: str | None
    properties: JSONObject | None


class DiffModifiedNode(DiffNode):
    """A node the branch changed: per property, the old and new value."""

    changes: dict[str, PropertyChange]


class DiffNodes(Schema):
    """Nodes by what happened to them."""

    added: list[DiffNode]
    modified: list[DiffModifiedNode]
    deleted: list[DiffNode]


class RelationValue(Schema):
    """A relation's weight, properties and validity."""

    weight: Number | None
    properties: JSONObject
    valid_from: str | None = None
    valid_to: str | None = None
    invalidated_by: str | None = None


class DiffRelation(Schema):
    """A relation the branch added or removed."""

    from_: str | None = Field(alias="from")
    to: str | None
    type: str
    weight: Number | None
    properties: JSONObject
    valid_from: str | None = None
    valid_to: str | None = None
    invalidated_by: str | None = None


class DiffModifiedRelation(Schema):
    """A relation the branch re-weighted or whose properties it changed."""

    from_: str | None = Field(alias="from")
    to: str | None
    type: str
    old: RelationValue
    new: RelationValue


class DiffRelations(Schema):
    """Relations by what happened to them."""

    added: list[DiffRelation]
    removed: list[DiffRelation]
    modified: list[DiffModifiedRelation]


class Diff(Schema):
    """``GET .../diff``: what the branch changed since its merge base with ``against``."""

    branch: str
    against: str
    base: MergePoint
    nodes: DiffNodes
    relations: DiffRelations


class NodeAddress(Schema):
    """A node by workspace and path."""

    workspace: str | None
    path: str


class MergedNodes(Schema):
    """The nodes a merge wrote on the target (or would write: a dry run), as a reader of the
    target sees them change."""

    added: list[NodeAddress]
    modified: list[NodeAddress]
    deleted: list[NodeAddress]
    kept: list[NodeAddress] = Field(description="Conflicts resolved 'ours': the target's value, "
                                                "re-asserted (recorded, unchanged for a reader).")


class MergedRelations(Schema):
    """How many relations a merge wrote on the target, as a reader of the target sees them change."""

    upserted: int
    removed: int
    kept: int = Field(description="Relation conflicts resolved 'ours' that keep the target's edge "
                                  "(recorded, unchanged for a reader).")


class MergeApplied(Schema):
    """What a merge applied."""

    nodes: MergedNodes
    relations: MergedRelations


class DerivedRefresh(Schema):
    """What lineage did, in the same revision, to the records derived from the nodes a write
    changed (docs/concepts/lineage.md)."""

    unlinked: int = Field(description="``mentioned_in`` edges removed: the entity is no longer named in the text.")
    restamped: int = Field(description="``mentioned_in`` edges kept and stamped with the text's new hash.")
    orphaned: int = Field(description="Entities left with no edge, flagged ``orphan`` (not deleted).")
    stale: int = Field(description="Stored answers marked ``stale``: a cited passage changed or was deleted.")
    queued: int = Field(description="Texts queued for ``extract-entities`` again (with an LLM configured).")


class MergeResult(Schema):
    """``POST .../merge``: the revision it made on the target (null: nothing to apply, or a dry run)."""

    revision: int | None
    dry_run: bool
    fast_forward: bool
    applied: MergeApplied
    base: MergePoint
    up_to_date: bool = absent("true when there was nothing to merge (no revision was made).")
    derived: DerivedRefresh = absent("What lineage does to the records derived from the merged changes, "
                                     "in the merge's revision: the counts of ``derived_writes`` (a dry run "
                                     "says what the merge will do).")
    derived_writes: list[JSONObject] = absent(
        "Lineage's writes, in the order applied (docs/concepts/lineage.md, \"Branches and merges\"): ``kind`` "
        "``unlinked`` / ``restamped`` (``from``, ``type``, ``to``; a restamp's ``source_hash``), "
        "``orphaned`` / ``queued`` (``workspace``, ``path``), ``stale`` (``workspace``, ``path``, "
        "``stale_citations``). The merge writes exactly the list of the dry run it was asked from.")
    plan: str = absent("A dry run's token of what it planned from: send it as ``if_plan`` with the merge.")


# -- nodes ----------------------------------------------------------------------------------


class Node(Schema):
    """A node (API.md, "Nodes")."""

    id: str = Field(description="The node's id: derived from its workspace and path, the same on "
                                "every branch and after a delete and re-creation.")
    workspace: str
    path: str
    name: str = Field(description="The last segment of the path.")
    parent_path: str | None
    node_type: str
    properties: JSONObject
    order: Number | None
    revision: int = Field(description="The revision that wrote this version.")
    created_at: Timestamp | None
    updated_at: Timestamp | None


class NodeList(Schema):
    """Children in order, or a page of the nodes under a prefix."""

    nodes: list[Node]
    next_cursor: str | None = absent("The cursor of the next page, null on the last.")


class NodesDeleted(Schema):
    """``DELETE`` of a node: the revision made and how many nodes it tombstoned."""

    revision: int
    deleted: int


class BatchResult(Schema):
    """``POST .../nodes:batch``: one revision for the whole batch."""

    revision: int
    upserted: list[Node]
    deleted: int


class Reference(Node):
    """A node whose properties reference the target, with the property that does."""

    property_key: str


class ReferenceList(Schema):
    """``GET .../references``."""

    references: list[Reference]
    truncated: bool = Field(description="More references exist than ``limit``.")


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


# -- relations and the graph ----------------------------------------------------------------


class Relation(Schema):
    """A relation as asserted, and the revision that wrote it."""

    from_: str = Field(alias="from")
    to: str
    type: str
    weight: Number | None
    properties: JSONObject
    valid_from: str | None = None
    valid_to: str | None = None
    invalidated_by: str | None = None
    revision: int


class RelationTypes(Schema):
    """A workspace's single-valued relation types."""

    workspace: str
    single_valued: list[str]


class RelationsDeleted(Schema):
    """``DELETE .../relations``: null revision when there was no such edge."""

    revision: int | None
    deleted: int


class Neighbor(Schema):
    """An edge seen from the node: the node at the other end."""

    workspace: str
    path: str
    node_id: str
    relation_type: str
    weight: Number | None
    direction: Literal["OUT", "IN"]
    properties: JSONObject
    valid_from: str | None = Field(description="World time the relation starts holding (ISO 8601, UTC); "
                                               "null: always had.")
    valid_to: str | None = Field(description="World time it stops holding; null: still holds.")
    invalidated_by: str | None = Field(description="What superseded it (``from|type|to`` of the "
                                                   "relation that replaced it, or free text).")


class NeighborList(Schema):
    """``GET .../neighbors`` in the stable order."""

    neighbors: list[Neighbor]
    truncated: bool = Field(description="More edges matched than ``limit``.")


class TraversedNode(Schema):
    """A node a walk reached, once, at its shortest hop; ``via``, ``weight`` and ``from``
    describe the edge that reached it (null for a seed)."""

    workspace: str
    path: str
    node_id: str
    hop: int
    via: str | None
    weight: Number | None
    from_: str | None = Field(alias="from")


class Traversal(Schema):
    """``POST .../traverse``."""

    nodes: list[TraversedNode]
    truncated: bool = Field(description="A budget left nodes unvisited.")


# -- the RAG node ---------------------------------------------------------------------------


class RagResult(Schema):
    """A retrieved chunk (embedded index: with its node ``path``; Weaviate: with its ``branch``
    and ``class``)."""

    file: Any = Field(description="The file name: a string as the RAG node writes it (embedded index: the "
                                  "node's ``source_file`` property as stored, else its path without the "
                                  "leading ``/``).")
    chunk_index: int
    content: str
    distance: Number | None
    path: str = absent("Embedded index: the file's node path.")
    branch: str = absent("Weaviate: the kg branch whose class held the chunk.")
    class_: str = absent("Weaviate: the chunks class.", alias="class")


class RagKeptEdit(Schema):
    """A property of a file's node both a person and the file changed: the person's value is kept."""

    file: str = Field(description="The input's file.")
    key: str = Field(description="The property (``kg:node_type`` for the node's type).")
    kept: Any = Field(description="The value kept: the person's (null: they removed it).")
    file_value: Any = Field(description="The file's value (null: the file has none).")


class RagIngestion(Schema):
    """The input's files by what ingesting them did."""

    inserted: list[str]
    skipped: list[str]
    replaced: list[str]
    reembedded: list[str] = absent("Embedded index: files re-embedded because the model changed.")
    kept_edits: list[RagKeptEdit] = absent(
        "Embedded index: properties of a file's node that a person edited and the file changed too "
        "since its last ingest: the person's value is kept (present only when there are some).")


class RagCollection(Schema):
    """The collection the node used."""

    name: str
    class_: str = Field(alias="class")
    meta_class: str = absent("Weaviate: the meta class.")
    embedding_model: str
    model_changed: bool
    weaviate_url: str = absent("Weaviate: the instance.")


class RagAnswer(Schema):
    """``POST /api/rag``: the context string the node injects (null: nothing relevant)."""

    context: str | None
    results: list[RagResult]
    ingestion: RagIngestion
    collection: RagCollection


# -- functions and jobs ---------------------------------------------------------------------


class Passage(Schema):
    """A passage of ``search-documents``."""

    workspace: str
    path: str
    node_id: str
    chunk_index: int
    text: str
    score: Number
    text_is_exact: bool
    node_type: str
    is_answer: bool = Field(description="The passage is a stored answer (a ``kb:Answer`` node), not a source.")


class SearchDocumentsOutput(Schema):
    """``search-documents``."""

    passages: list[Passage]


class Citation(Schema):
    """A cited passage of an ``ask`` answer."""

    marker: int
    workspace: str
    path: str
    node_id: str
    chunk_index: int | None
    text_is_exact: bool
    via: Literal["graph"] = absent("The graph leg found the passage.")


class NearestWord(Schema):
    """The quoted word nearest in meaning to a question's word that no passage holds."""

    word: str
    similarity: float


class AskAttempt(Schema):
    """A retrieval ``ask`` made (the graph leg's with ``leg``, and ``error`` when it failed), or
    its check that the documents use the question's words (``leg: "coverage"``)."""

    query: str
    leg: Literal["graph", "coverage"] = absent("The graph leg, or the coverage check of the question's words.")
    error: str = absent("Why the graph leg failed (the answer did not).")
    passages: int
    absent_terms: list[str] = absent("Coverage check: the question's content words no searchable passage holds.")
    nearest: dict[str, NearestWord] = absent("Coverage check: each absent word's nearest quoted word.")
    misspelt: dict[str, str] = absent("Coverage check: absent words taken for misspellings of a quoted word.")
    uncovered: list[str] = absent("Coverage check: the absent words near no quoted word in meaning.")
    terms: int = absent("Coverage check: the question's content words.")


class StoredAnswer(Schema):
    """Where ``store_answer`` wrote the answer."""

    workspace: str
    path: str
    node_id: str
    revision: int


class AskOutput(Schema):
    """``ask``: the answer from the documents only, with citations."""

    answer: str
    grounded: bool
    citations: list[Citation]
    attempts: list[AskAttempt]
    mode: Literal["llm", "extractive"]
    stored: StoredAnswer = absent("With ``store_answer``.")


class GraphSeed(Schema):
    """A seed of ``graph-context``: given, or found by search."""

    workspace: str
    path: str
    node_id: str | None
    score: Number | None
    source: Literal["seeds", "search"]


class GraphContextNode(TraversedNode):
    """A node of ``graph-context``: the walk's node with its relevance and type."""

    score: Number | None
    node_type: str | None
    title: str = absent("The node's title (an entity's name).")


class GraphContextWarning(Schema):
    """Why a walk found less than it might have (``no_mentions``: follow ``subjects`` on a
    branch whose seeds mention no entity)."""

    code: str
    message: str


class GraphContextOutput(Schema):
    """``graph-context``."""

    seeds: list[GraphSeed]
    nodes: list[GraphContextNode]
    truncated: bool
    warnings: list[GraphContextWarning] | None = None


class ExtractedEntity(Schema):
    """An entity node ``extract-entities`` wrote or recorded."""

    path: str
    name: str
    type: str


class ExtractedRelation(Schema):
    """A relation between two extracted entities (entity paths)."""

    from_: str = Field(alias="from")
    type: str
    to: str


class DroppedCandidate(Schema):
    """A candidate the extraction dropped, and why."""

    name: str
    reason: str = Field(description="heading, fragment, no_usable_name, limit, relation_to_unknown_entity "
                                    "or relation_to_unwritten_entity.")


class ExtractionDropped(Schema):
    """What the extraction could not write, and why."""

    entities: int
    relations: int
    reasons: list[DroppedCandidate]


class ExtractEntitiesOutput(Schema):
    """``extract-entities``."""

    workspace: str
    source: str = Field(description="The source node's path.")
    extractor: str
    entities: list[ExtractedEntity]
    relations: list[ExtractedRelation]
    skipped: bool = Field(description="The recorded fingerprint matched: the lists are the recorded ones.")
    fingerprint: str | None
    revision: int | None
    dropped: ExtractionDropped
    reason: str = absent("Why nothing was extracted.")
    invalidated: list[ExtractedRelation] = absent(
        "Relations the model said no longer hold (those current were invalidated now, by this document).")


class ResearchStep(Schema):
    """One step of the research assistant's trace: a tool call (made or refused) or, with
    ``tool`` null, the model's answer or failure."""

    step: int
    by: Literal["model", "plan", "kg"] = Field(description="Who made it: the model, the fixed plan, or kg "
                                                           "itself (its own ask after an early stop).")
    tool: str | None
    arguments: Any = Field(description="The arguments as the model sent them.")
    result: str | None = Field(description="A summary of the result.")
    passages: int = absent("Passages the call gave.")
    error: str = absent("Why the call was not run or failed (unknown tool, malformed arguments, "
                        "repeated call, early stop, a kg error).")


class ResearchAssistantOutput(Schema):
    """``research-assistant``: the answer, its citations, the trace, and the session branch."""

    answer: str
    grounded: bool
    citations: list[Citation]
    trace: list[ResearchStep]
    mode: Literal["llm", "fixed-plan"]
    stopped: Literal["answered", "max_steps", "loop", "early_stop", "model_error", "plan"]
    steps: int
    max_steps: int
    branch: str = Field(description="The session branch holding the answer: review it with its diff, merge it.")
    from_: str = Field(alias="from", description="The branch it was opened from.")
    stored: StoredAnswer


class HeldBack(Schema):
    """A duplicate ``resolve-entities`` found but did not merge."""

    path: str
    reason: Literal["has_children"]


class EntityMerge(Schema):
    """One proposed merge of ``resolve-entities``: the node kept and the nodes folded into it."""

    kept: str = Field(description="The kept entity's path.")
    kept_name: str
    merged: list[str] = Field(description="The paths of the entities merged into it (deleted on the branch).")
    names: list[str] = Field(description="Their names, now aliases of the kept node.")
    score: float
    reasons: list[str]
    held_back: list[HeldBack] = absent("Duplicates of the cluster not merged: they have children (a merged "
                                       "node is deleted); left for a person.")


class MergeEdges(Schema):
    """What the proposal did with the merged nodes' relations."""

    repointed: int
    combined: int
    dropped: int


class ResolveEntitiesOutput(Schema):
    """``resolve-entities``: the merges, and the proposal branch holding them (null for a dry
    run or no merge)."""

    workspace: str
    from_: str = Field(alias="from", description="The source branch (never written).")
    merges: list[EntityMerge]
    entities: int
    dry_run: bool
    branch: str | None = Field(description="The proposal branch: review its diff, merge or delete it.")
    revision: int | None
    edges: MergeEdges = absent("How the relations were re-pointed.")


class FunctionOutput(RootModel[SearchDocumentsOutput | AskOutput | GraphContextOutput | ExtractEntitiesOutput
                               | ResearchAssistantOutput | ResolveEntitiesOutput]):
    """The output of the function invoked: ``search-documents``, ``ask``, ``graph-context``,
    ``extract-entities``, ``research-assistant`` or ``resolve-entities`` (each model refuses the
    others' keys, so exactly one matches)."""

    model_config = ConfigDict(strict=True)


class JobAccepted(Schema):
    """202: the job was queued; follow it at ``GET /api/jobs/{job_id}`` (the ``Location``)."""

    job_id: str
    state: str


class Job(Schema):
    """An asynchronous invocation: its state, and its output or error once finished."""

    job_id: str
    repo: str
    function: str
    branch: str
    state: str = Field(description="queued, running, succeeded or failed.")
    output: JSONObject | None = Field(description="The function's output, as ``invoke`` answers it "
                                                  "(stored when the job finished).")
    error: ErrorInfo | None = Field(description="The API error shape of a failed job.")
    created_at: Timestamp
    started_at: Timestamp | None
    finished_at: Timestamp | None
    attempts: int


# -- API keys ---------------------------------------------------------------------------------


class KeyGrant(Schema):
    """One grant of a key."""

    repo: str
    branches: list[str]
    workspaces: list[str]
    actions: list[str]


class ApiKeyInfo(Schema):
    """An API key as listed: never its secret."""

    id: str = Field(description="The key's id (the <id> of kg_<id>_<secret>).")
    name: str = Field(description="The actor of the key's revisions.")
    state: Literal["active", "revoked", "expired"]
    created_by: str | None
    created_at: Timestamp
    expires_at: Timestamp | None
    revoked_at: Timestamp | None
    last_used_at: Timestamp | None = Field(description="Written at most every KG_KEY_TOUCH_S seconds.")
    grants: list[KeyGrant]


class ApiKeyCreated(ApiKeyInfo):
    """A new key: the token is in this answer and never again."""

    key: str = Field(description="The bearer token kg_<id>_<secret>: shown once.")
    warnings: list[str] = Field(description="One line per grant that is '*' everywhere.")


class ApiKeyList(Schema):
    """Every key, revoked and expired ones included."""

    keys: list[ApiKeyInfo]


# -- lineage --------------------------------------------------------------------------------


class Lineage(Schema):
    """``GET .../lineage/{path}``: what was derived from a node and what it was derived from
    (docs/concepts/lineage.md)."""

    workspace: str
    path: str
    node_id: str
    node_type: str
    revision: int
    source_hash: str = Field(description="sha256 of the node's text fields, as derived records record it.")
    derived: list[dict[str, Any]] = Field(
        description="Records derived from the node: ``chunks``, ``mention`` (entities with a ``mentioned_in`` "
                    "edge here), ``extraction`` (the extraction record), ``answer`` (stored answers citing it), "
                    "each with what it read (``source_hash`` of the text for mentions and extraction records, "
                    "``source_revision`` for answers) and ``current``.")
    derived_from: list[dict[str, Any]] = Field(
        description="What the node was derived from: ``mentioned_in``, ``cites``, ``extraction_of`` rows.")
