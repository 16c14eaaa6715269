"""Functions (search-documents, ask, graph-context, extract-entities, research-assistant,
resolve-entities): their invocation, outputs and jobs."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, RootModel, create_model
from pydantic.config import JsonDict

from kg.store.paths import MAX_PATH_CHARS, NAME_PATTERN, NON_BLANK_PATTERN, PATH_PATTERN
from kg.types.common import (
    BRANCH_RULE,
    Address,
    ErrorInfo,
    JSONObject,
    Number,
    RelationType,
    Schema,
    Strict,
    Timestamp,
    _drop_default,
    absent,
    shaped,
)
from kg.types.relations import TraversedNode

# -- functions and jobs ---------------------------------------------------------------------


# -- requests ----------------------------------------------------------------------


class InvokeBody(Strict):
    input: dict[str, Any]
    branch: str = Field(default="main", min_length=1, max_length=255, json_schema_extra=BRANCH_RULE)
    wait_for_completion: bool = True


# Each function's input, as the document states it (the function checks it and says why it
# refuses: kg.rag.functions.INPUT_KEYS and each function's own checks).

#: A non-blank text (a query, a question).
NonBlank = Annotated[str, Field(min_length=1, json_schema_extra={"pattern": NON_BLANK_PATTERN})]
#: A workspace name.
WorkspaceName = Annotated[str, Field(max_length=128, json_schema_extra={"pattern": NAME_PATTERN})]
#: A node path.
NodePath = Annotated[str, Field(max_length=MAX_PATH_CHARS, json_schema_extra={"pattern": PATH_PATTERN})]
#: A world time (ISO 8601 with a zone).
WorldTime = Annotated[str, Field(json_schema_extra={"format": "date-time"},
                                 description="ISO 8601 time with a zone: read the relations valid then.")]
#: The workspaces searched (default: all).
Workspaces = Annotated[list[WorkspaceName] | None, Field(description="The workspaces searched (default: all).")]
#: At most this many passages (``k``).
PassageCount = Annotated[int, Field(ge=1, le=100)]


class SearchDocumentsInput(Strict):
    """``search-documents``: the passages of a hybrid search."""

    query: NonBlank
    k: PassageCount = 10
    workspaces: Workspaces = None


class StoreAnswer(Strict):
    """Where ``ask`` stores its answer (a ``kb:Answer`` node): a workspace of the repository, and a
    path (default: ``/answers/<slug of the question>``)."""

    workspace: WorkspaceName
    path: NodePath | None = Field(default=None, description="The answer node's path.")


class AskInput(Strict):
    """``ask``: a grounded answer from the documents, with citations."""

    question: NonBlank
    workspaces: Workspaces = None
    use_graph: bool = False
    store_answer: StoreAnswer | None = None
    as_of: WorldTime | None = None
    include_invalid: bool = False


#: graph-context starts from a query or from seeds (or both); ``follow: subjects`` takes neither
#: ``types`` nor ``direction``, and at most 2 hops.
_GRAPH_RULES: JsonDict = {"anyOf": [{"required": ["query"], "properties": {"query": {"type": "string"}}},
                                    {"required": ["seeds"], "properties": {"seeds": {"type": "array", "minItems": 1}}}],
                          "if": {"required": ["follow"], "properties": {"follow": {"const": "subjects"}}},
                          "then": {"properties": {"types": {"type": "null"}, "direction": {"type": "null"},
                                                  "hops": {"maximum": 2}}}}


class GraphContextInput(Strict):
    """``graph-context``: the nodes around a query's hits or given seeds, by relevance."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra=_GRAPH_RULES)
    query: NonBlank | None = None
    seeds: list[Address] | None = Field(default=None, max_length=1000)
    hops: int = Field(default=2, ge=0, le=4)
    max_nodes: int = Field(default=50, ge=1, le=1000)
    fan_out: int = Field(default=20, ge=1, le=1000)
    types: list[RelationType] | None = Field(default=None, min_length=1)
    direction: Literal["OUT", "IN", "BOTH"] | None = None
    workspaces: Workspaces = None
    k: PassageCount = 5
    follow: Literal["walk", "subjects"] = "walk"
    as_of: WorldTime | None = None
    include_invalid: bool = False


class ExtractEntitiesInput(Strict):
    """``extract-entities``: the entities and relations of a document node (not of an entity
    under ``/entities`` nor of an extraction record under ``/kg/extractions``: 422)."""

    workspace: WorkspaceName
    path: NodePath
    force: bool = False
    max_chars: int = Field(default=8_000, ge=1, le=100_000)


class ResearchAssistantInput(Strict):
    """``research-assistant``: a multi-step answer on a session branch."""

    question: NonBlank
    workspaces: Workspaces = None
    max_steps: int = Field(default=6, ge=1, description="At most KG_RESEARCH_MAX_STEPS (the server's).",
                           json_schema_extra=_drop_default)
    workspace: WorkspaceName | None = Field(default=None, description="Where the answer is stored.")


class ResolveEntitiesInput(Strict):
    """``resolve-entities``: duplicate entities merged on a proposal branch."""

    workspace: WorkspaceName
    threshold: float = Field(default=0.8, ge=0.5, le=1.0)
    dry_run: bool = False
    use_embeddings: bool = True


#: Each function's input model, by the function's name (kg.rag.functions.FUNCTIONS).
FUNCTION_INPUTS: dict[str, type[Strict]] = {
    "search-documents": SearchDocumentsInput, "ask": AskInput, "graph-context": GraphContextInput,
    "extract-entities": ExtractEntitiesInput, "research-assistant": ResearchAssistantInput,
    "resolve-entities": ResolveEntitiesInput,
}


def _invoke_body(name: str) -> type[InvokeBody]:
    """The body of ``POST /api/functions/{repo}/<name>/invoke``: its ``input`` documented as the
    function's input model (:data:`FUNCTION_INPUTS`), checked by the function itself."""
    title = "".join(part.capitalize() for part in name.split("-"))
    body: type[InvokeBody] = create_model(f"Invoke{title}", __base__=InvokeBody,
                                          input=(Annotated[JSONObject, shaped(FUNCTION_INPUTS[name])], ...))
    return body


#: Each function's invocation body, by the function's name (``InvokeAsk``, ``InvokeGraphContext``, ...).
INVOKE_BODIES: dict[str, type[InvokeBody]] = {name: _invoke_body(name) for name in FUNCTION_INPUTS}
InvokeAsk = INVOKE_BODIES["ask"]
InvokeGraphContext = INVOKE_BODIES["graph-context"]


def invoke_input(body: type[InvokeBody]) -> type[Strict]:
    """The input model of a function's invocation body.

    Parameters
    ----------
    body : type of InvokeBody
        One of :data:`INVOKE_BODIES`.

    Returns
    -------
    type of Strict
        The model its ``input`` is documented as.

    Examples
    --------
    >>> invoke_input(InvokeAsk) is AskInput
    True
    """
    (name,) = [name for name, made in INVOKE_BODIES.items() if made is body]
    return FUNCTION_INPUTS[name]



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


class EntitySpan(Schema):
    """Where the document names an entity: ``node[field][start:end] == quote``."""

    field: str = Field(description="The node's text field (title, content, body, text).")
    start: int = Field(description="Offset of the first character in the field, in code points.")
    end: int = Field(description="Offset one past the last character.")
    quote: str
    chunk: int | None = Field(description="The index of the indexing's chunk that holds the start.")


class ExtractedEntity(Schema):
    """An entity node ``extract-entities`` wrote or recorded."""

    path: str
    name: str
    type: str
    spans: list[EntitySpan] = absent("Where the document names it (at most 10).")


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


