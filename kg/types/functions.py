"""Functions (search-documents, ask, graph-context, extract-entities, research-assistant,
resolve-entities): their invocation, outputs and jobs."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, RootModel

from kg.types.common import (
    ErrorInfo,
    JSONObject,
    Number,
    Schema,
    Strict,
    Timestamp,
    absent,
)
from kg.types.relations import TraversedNode

# -- functions and jobs ---------------------------------------------------------------------


# -- requests ----------------------------------------------------------------------


class InvokeBody(Strict):
    input: dict[str, Any]
    branch: str = Field(default="main", min_length=1, max_length=255)
    wait_for_completion: bool = True



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
    """What an ``ask`` answer cites: a passage (no ``kind``), or, for a question about a relation
    or a property of a named node, the edge (``kind: "relation"``: ``from``, ``to``, ``type``;
    ``path`` and ``node_id`` are the edge's source node) or the property (``kind: "property"``:
    ``property``, ``value``; ``path`` and ``node_id`` its node). Edges and properties have no
    chunk: their ``chunk_index`` is null."""

    marker: int
    workspace: str
    path: str
    node_id: str
    chunk_index: int | None
    text_is_exact: bool
    via: Literal["graph"] = absent("The graph leg found the passage.")
    kind: Literal["relation", "property"] = absent("An edge or a property of the graph, not a passage.")
    from_: str = absent("Relation: the source node's path.", alias="from")
    to: str = absent("Relation: the target node's path.")
    to_workspace: str = absent("Relation: the target's workspace, when not ``workspace``.")
    type: str = absent("Relation: its type.")
    property: str = absent("Property: its name.")
    value: Any = absent("Property: its value, as stored.")


class NearestWord(Schema):
    """The quoted word nearest in meaning to a question's word that no passage holds."""

    word: str
    similarity: float


class AskAttempt(Schema):
    """A retrieval ``ask`` made (the graph leg's with ``leg``, and ``error`` when it failed), or
    its check that the documents use the question's words (``leg: "coverage"``)."""

    query: str
    leg: Literal["graph", "coverage", "facts", "focus"] = absent(
        "The graph leg, the coverage check of the question's words, ``facts`` (the answer from the named "
        "node's relations and properties) or ``focus`` (the passages holding the question's quoted term).")
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
    leads: list[Citation] = absent("Not grounded, passages retrieved: the nearest passages, most similar first.")
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


