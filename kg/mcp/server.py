"""kg's MCP server: tools over the use cases, a node resource template, a tool list per caller.

One :class:`mcp.server.mcpserver.MCPServer` serves every connection; what a request is bound to
(:class:`Binding`: the repository, the branch and the caller) comes from its transport: the URL
``/mcp/{repo}/{branch}`` and the bearer key over streamable HTTP (:func:`http_binding`), the
command line over stdio (:func:`fixed_binding`).

The branch is explicit. A connection names one branch; every tool takes an optional ``branch``
that overrides it for that call, and every answer says which branch it read or wrote. A new
session branch (``branch_create``) is answered with its name and its own MCP path; nothing
switches branches behind the agent's back.

Every tool is one call to a use case with the binding's caller, run in a worker thread (the
use cases block on the database and the embedder). A :class:`kg.errors.KGError` comes back as a
tool error (``isError``) whose structured content is the HTTP API's error shape, ``{"error":
{"code", "message", "details"}}``; anything else is the SDK's generic tool error, logged, and the
session goes on.

Which tools a caller is offered (:func:`offered_tools`): the read tools always; the write tools
(``put_node``, ``relate``, ``unrelate``, ``extract_entities``) to a caller that may write somewhere
in the repository, ``branch_create`` to one that may create branches, ``merge`` to one that may
merge; none of those with ``KG_MCP_READ_ONLY`` (then they are not registered at all). The list
is a courtesy: a call is decided by the use case, whoever lists what.
"""

from __future__ import annotations

import inspect
import json
import typing
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import quote

import anyio.to_thread
import pydantic_core
from mcp import MCPError
from mcp.server.auth.settings import AuthSettings
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    CallToolResult,
    SubscribeRequestParams,
    TextContent,
    ToolAnnotations,
    UnsubscribeRequestParams,
)
from pydantic import AnyHttpUrl, BaseModel, ConfigDict, Field, ValidationError

import kg
from kg.access import OPERATOR, Action, Actor, may_somewhere
from kg.context import Resources, run
from kg.errors import BackendUnavailable, InvalidInput, KGError, ProviderError, error_body, invalid_fields
from kg.graph.neighbors import DEFAULT_LIMIT, MAX_LIMIT
from kg.graph.validity import maybe_aware
from kg.mcp.auth import KeyVerifier, caller_of_request
from kg.mcp.changes import CHANGES_URI_TEMPLATE, NO_SESSIONS, ChangeSubscriptions
from kg.ops import branches as branch_ops
from kg.ops import changes as change_ops
from kg.ops import merge as merge_ops
from kg.ops import nodes as node_ops
from kg.ops import queries
from kg.ops import relations as relation_ops
from kg.ops.lineage import node_lineage
from kg.rag.functions import FUNCTIONS, invoke
from kg.rag.graph import neighbors as graph_neighbors
from kg.rag.graph import walk
from kg.rag.search import SearchRequest, search_branch
from kg.sql.execute import run_sql
from kg.store.paths import validate_path
from kg.types.branches import BranchCreate, MergeBody
from kg.types.functions import (
    AskInput,
    ExtractEntitiesInput,
    GraphContextInput,
    ResearchAssistantInput,
    ResolveEntitiesInput,
)
from kg.types.nodes import NodePut
from kg.types.relations import RelationCreate, RelationInvalidate, TraverseBody

#: The route of the streamable HTTP endpoint inside its mount (``/mcp``): ``{branch}`` may hold ``/``.
HTTP_PATH = "/{repo}/{branch:path}"
#: The node resources: ``kg://acme/knowledge/docs/intro?branch=agent%2Fs1`` (path without its leading ``/``).
NODE_URI_TEMPLATE = "kg://{repo}/{workspace}/{+path}{?branch}"
#: The function of the research assistant (issue 13), offered as a tool once kg.rag has it.
RESEARCH_ASSISTANT = "research-assistant"

READ_TOOLS = ("search", "ask", "graph_context", "get_node", "neighbors", "traverse", "diff", "lineage", "sql")
#: Tool name -> the action a caller must hold somewhere in the repository to be offered it.
WRITE_TOOLS: dict[str, Action] = {
    "put_node": "write", "relate": "write", "invalidate_relation": "write", "unrelate": "write",
    "extract_entities": "write",
    "branch_create": "branch:create", "merge": "merge", "research_assistant": "branch:create",
    "resolve_entities": "branch:create",
}

_READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
_ADD = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)
_UPSERT = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)


@dataclass(frozen=True)
class Binding:
    """What one MCP request acts on, and for whom.

    Attributes
    ----------
    repo : str
        The repository.
    branch : str
        The connection's branch (a tool's ``branch`` argument overrides it for one call).
    caller : kg.access.Actor
        Who calls: every use case receives it.
    """

    repo: str
    branch: str
    caller: Actor

    def on(self, branch: str | None) -> str:
        """The branch one call acts on.

        Parameters
        ----------
        branch : str or None
            The tool's ``branch`` argument.

        Returns
        -------
        str
            ``branch``, or the connection's branch when it is None or empty.
        """
        return branch or self.branch


#: How a request is bound: from the transport's request object (a Starlette request over
#: streamable HTTP, None over stdio) to its :class:`Binding`.
Binder = Callable[[Any], Binding]


def http_binding(request: Any) -> Binding:
    """The binding of a streamable HTTP request: ``/mcp/{repo}/{branch}`` and its bearer key.

    Parameters
    ----------
    request : starlette.requests.Request or None
        The HTTP request that carried the MCP message.

    Returns
    -------
    Binding
        The URL's repository and branch; the caller of :func:`kg.mcp.auth.caller_of_request`.

    Raises
    ------
    kg.errors.InvalidInput
        A request without the repository and the branch in its URL.
    """
    params = getattr(request, "path_params", None) or {}
    repo, branch = params.get("repo"), params.get("branch")
    if not repo or not branch:
        raise InvalidInput("an MCP URL names the repository and the branch: /mcp/{repo}/{branch}")
    return Binding(repo, branch, caller_of_request())


def fixed_binding(repo: str, branch: str, caller: Actor = OPERATOR) -> Binder:
    """One binding for every request (stdio: the repository and branch of ``kg mcp``).

    Parameters
    ----------
    repo, branch : str
        What every request acts on.
    caller : kg.access.Actor
        Who calls; default the operator (the person at the machine that holds the data).

    Returns
    -------
    callable(request) -> Binding
        A binder that ignores its request.
    """
    binding = Binding(repo, branch, caller)
    return lambda _request: binding


def node_uri(repo: str, branch: str, workspace: str, path: str) -> str:
    """The resource URI of a node (its citation handle).

    Parameters
    ----------
    repo, branch, workspace : str
        Where the node is.
    path : str
        Its path, ``/a/b``.

    Returns
    -------
    str
        ``kg://{repo}/{workspace}/{path without its leading /}?branch={branch}``, each part
        percent-encoded (``/`` kept in the path).

    Examples
    --------
    >>> node_uri("acme", "agent/s1", "knowledge", "/docs/a b")
    'kg://acme/knowledge/docs/a%20b?branch=agent%2Fs1'
    """
    return (f"kg://{quote(repo, safe='')}/{quote(workspace, safe='')}/{quote(path.lstrip('/'), safe='/')}"
            f"?branch={quote(branch, safe='')}")


def offered_tools(binding: Binding, registered: Sequence[str]) -> list[str]:
    """The tools listed to ``binding``'s caller, among ``registered``.

    Parameters
    ----------
    binding : Binding
        The request's repository and caller.
    registered : sequence of str
        The server's tool names.

    Returns
    -------
    list of str
        The read tools, and each write tool whose action (:data:`WRITE_TOOLS`) one of the
        caller's grants holds in the repository (:func:`kg.access.may_somewhere`).
    """
    return [name for name in registered
            if name not in WRITE_TOOLS or may_somewhere(binding.caller, WRITE_TOOLS[name], binding.repo)]


def error_shape(exc: KGError) -> dict[str, Any]:
    """The HTTP API's error shape of a kg error.

    Parameters
    ----------
    exc : kg.errors.KGError
        The error a use case raised.

    Returns
    -------
    dict
        ``{"error": {"code", "message", "details"}}``, JSON-safe.
    """
    return error_body(exc.code, exc.message, pydantic_core.to_jsonable_python(exc.details, fallback=str))


def tool_result(data: Any) -> CallToolResult:
    """A tool's answer: ``data`` as structured content and as JSON text.

    Parameters
    ----------
    data : dict
        What the use case returned (datetimes and the like are made JSON-safe).

    Returns
    -------
    mcp.types.CallToolResult
        Not an error; the text is the JSON of the structured content.
    """
    safe = pydantic_core.to_jsonable_python(data, fallback=str)
    return CallToolResult(content=[TextContent(type="text", text=json.dumps(safe, ensure_ascii=False))],
                          structured_content=safe)


def tool_error(exc: KGError) -> CallToolResult:
    """A kg error as an MCP tool error carrying kg's code and message.

    Parameters
    ----------
    exc : kg.errors.KGError
        The error a use case raised.

    Returns
    -------
    mcp.types.CallToolResult
        ``isError`` true; the text is ``"<code>: <message>"``, or ``"<code> (<reason>):
        <message>"`` when the error's details name a ``reason`` (``stale_plan``, ...: a client
        that reads only the text still tells such errors apart); the structured content
        :func:`error_shape`.
    """
    shape = error_shape(exc)
    reason = exc.details.get("reason") if isinstance(exc.details, dict) else None
    code = f"{exc.code} ({reason})" if isinstance(reason, str) and reason else exc.code
    return CallToolResult(content=[TextContent(type="text", text=f"{code}: {exc.message}")],
                          structured_content=shape, is_error=True)


class KgTool(Tool):
    """A tool whose arguments, when its argument model refuses them (a wrong type, a missing or
    unknown argument), are a tool error in kg's shape (:func:`tool_error` of
    :func:`kg.errors.invalid_fields`: code ``invalid_input``, the message naming the argument),
    not the SDK's text of the pydantic error."""

    async def run(self, arguments: dict[str, Any], context: Any, convert_result: bool = False) -> Any:
        """Run the tool (:meth:`mcp.server.mcpserver.tools.Tool.run`).

        Parameters
        ----------
        arguments : dict
            The call's arguments, as the client sent them.
        context : mcp.server.mcpserver.Context
            The request's context.
        convert_result : bool
            Convert the answer to the SDK's content blocks.

        Returns
        -------
        Any
            The tool's answer; for arguments its model refuses, the tool error of
            :func:`kg.errors.invalid_fields` (:func:`tool_error`).
        """
        try:
            return await super().run(arguments, context, convert_result=convert_result)
        except ToolError as exc:
            if not isinstance(exc.__cause__, ValidationError):
                raise
            refused = tool_error(invalid_fields(exc.__cause__))
            return self.fn_metadata.convert_result(refused) if convert_result else refused


def compact_schema(schema: Any) -> Any:
    """A tool's JSON schema without what only costs tokens: titles, and the ``null`` arm of an
    optional argument (it is left out instead; the SDK still accepts an explicit null).

    Parameters
    ----------
    schema : dict
        A JSON schema as pydantic writes it.

    Returns
    -------
    dict
        The same constraints, shorter.

    Examples
    --------
    >>> compact_schema({"title": "A", "properties": {"title": {"title": "Title", "type": "string"},
    ...     "n": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None, "title": "N"}}})
    {'properties': {'title': {'type': 'string'}, 'n': {'type': 'integer'}}}
    """
    if isinstance(schema, list):
        return [compact_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in ("properties", "$defs") and isinstance(value, dict):
            out[key] = {name: compact_schema(item) for name, item in value.items()}
        else:
            out[key] = compact_schema(value)
    options = out.get("anyOf")
    if isinstance(options, list) and len(options) == 2 and {"type": "null"} in options \
            and "default" in out and out["default"] is None:
        kept = next(option for option in options if option != {"type": "null"})
        out = {**kept, **{k: v for k, v in out.items() if k not in ("anyOf", "default")}}
    return out


def answer_json(answer: BaseModel) -> dict[str, Any]:
    """A use case's answer as a tool's result: the JSON the HTTP API answers.

    Parameters
    ----------
    answer : pydantic.BaseModel
        The :mod:`kg.types` model a use case returned.

    Returns
    -------
    dict
        ``model_dump(mode="json")`` by alias, keys the use case left out left out.
    """
    return answer.model_dump(mode="json", by_alias=True, exclude_unset=True)


#: An argument left out: the use case's default applies.
_LEFT_OUT: Any = None


def model_arguments(model: type[BaseModel], fields: Sequence[str], *, names: Mapping[str, str] | None = None,
                    notes: Mapping[str, str] | None = None) -> list[inspect.Parameter]:
    """A tool's arguments typed by fields of a :mod:`kg.types` input model.

    Parameters
    ----------
    model : type of pydantic.BaseModel
        The use case's input model (:mod:`kg.types.functions`, or the body of an HTTP route).
    fields : sequence of str
        The fields the tool takes, in order.
    names : mapping of str to str, optional
        A field's argument name where the tool's differs from the model's (``from_`` is ``source``).
    notes : mapping of str to str, optional
        A field's description where its meaning differs over MCP (a default of the connection's
        branch): its type and bounds are still the model's.

    Returns
    -------
    list of inspect.Parameter
        Keyword-only, each with the field's type, constraints and description; a required field
        is required, an optional one defaults to None (left out, the use case's default applies,
        named in the description).
    """
    params = []
    for field in fields:
        info = model.model_fields[field]
        name = (names or {}).get(field, field)
        description = (notes or {}).get(field, info.description or "")
        default = info.get_default(call_default_factory=True)
        extra = info.json_schema_extra  # a dict or a function of the schema (NodeProperties: references)
        if not info.is_required() and default is not None and info.json_schema_extra is None:
            description = f"{description} Default: {json.dumps(default)}.".strip()
        annotation: Any = Annotated[(info.annotation, *info.metadata,
                                     Field(description=description or None, json_schema_extra=extra))]
        if info.is_required():
            params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation))
        else:
            nullable = type(None) in typing.get_args(info.annotation)  # not None twice, nested
            params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=_LEFT_OUT,
                                            annotation=annotation if nullable else annotation | None))
    return params


def typed_tool(name: str, model: type[BaseModel], fields: Sequence[str],
               run_tool: Callable[[Context, dict[str, Any], str | None], Awaitable[CallToolResult]],
               ) -> Callable[..., Awaitable[CallToolResult]]:
    """A tool function taking ``fields`` of ``model`` (:func:`model_arguments`) and ``branch``.

    Parameters
    ----------
    name : str
        The tool's name.
    model : type of pydantic.BaseModel
        The use case's input model.
    fields : sequence of str
        The fields the tool takes.
    run_tool : callable(ctx, input, branch)
        Runs the use case with the arguments given (left-out ones absent from ``input``).

    Returns
    -------
    callable
        An async function whose signature the SDK reads as the tool's input schema.
    """
    params = [inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Context),
              *model_arguments(model, fields),
              inspect.Parameter("branch", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=BranchArg)]

    async def tool_fn(ctx: Context, **arguments: Any) -> CallToolResult:
        branch = arguments.pop("branch", None)
        return await run_tool(ctx, {k: v for k, v in arguments.items() if v is not _LEFT_OUT}, branch)

    tool_fn.__name__ = tool_fn.__qualname__ = name
    tool_fn.__signature__ = inspect.Signature(params, return_annotation=CallToolResult)  # type: ignore[attr-defined]
    tool_fn.__annotations__ = {p.name: p.annotation for p in params} | {"return": CallToolResult}
    return tool_fn


def model_tool(model: type[BaseModel], fields: Sequence[str], *, names: Mapping[str, str] | None = None,
               notes: Mapping[str, str] | None = None,
               ) -> Callable[[Callable[..., Awaitable[CallToolResult]]], Callable[..., Awaitable[CallToolResult]]]:
    """Type a hand-written tool's ``**fields`` by fields of ``model`` (:func:`model_arguments`).

    The tool keeps its own arguments (the MCP-only ones: ``branch``, a node's ``workspace`` and
    ``path``); its ``**fields`` become the model's fields, so a field's type, bounds and description
    are the request model's (the HTTP route's body), written once.

    Parameters
    ----------
    model : type of pydantic.BaseModel
        The request model (:mod:`kg.types`).
    fields : sequence of str
        The model's fields the tool takes, in order.
    names, notes : mapping of str to str, optional
        As :func:`model_arguments`: an argument named apart from its field, a description of what
        differs over MCP.

    Returns
    -------
    callable(fn) -> callable
        Wraps ``fn(ctx, ..., **fields)``: its signature (which the SDK reads as the input schema) is
        ``ctx``, ``fn``'s required arguments, the model's fields, then ``fn``'s optional arguments;
        ``fn`` receives in ``fields`` the model's arguments given (a left-out or null one is absent:
        the use case's default applies), under the tool's argument names.
    """
    def wrap(fn: Callable[..., Awaitable[CallToolResult]]) -> Callable[..., Awaitable[CallToolResult]]:
        hints = typing.get_type_hints(fn, include_extras=True)
        own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY, annotation=hints[p.name])
               for p in list(inspect.signature(fn).parameters.values())[1:] if p.kind != p.VAR_KEYWORD]
        derived = model_arguments(model, fields, names=names, notes=notes)
        from_model = {p.name for p in derived}
        params = [inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Context),
                  *[p for p in own if p.default is p.empty], *derived, *[p for p in own if p.default is not p.empty]]

        async def tool_fn(ctx: Context, **arguments: Any) -> CallToolResult:
            given = {k: v for k, v in arguments.items() if k not in from_model or v is not _LEFT_OUT}
            return await fn(ctx, **given)

        tool_fn.__name__ = tool_fn.__qualname__ = fn.__name__
        tool_fn.__signature__ = inspect.Signature(params, return_annotation=CallToolResult)  # type: ignore[attr-defined]
        tool_fn.__annotations__ = {p.name: p.annotation for p in params} | {"return": CallToolResult}
        return tool_fn
    return wrap


def _request_of(ctx: Context) -> Any:
    """The transport's request of a tool or resource call (None over stdio)."""
    return ctx.request_context.request


# Argument types shared by several tools (JSON schema from the annotations; kg validates the rest).
BranchArg = Annotated[str | None, Field(description="Branch for this call; default: the connection's branch.")]
Workspace = Annotated[str, Field(description="Workspace name.")]
NodePath = Annotated[str, Field(description="Node path, '/a/b'.")]
Address = Annotated[str, Field(description="Node address 'workspace:/path'.")]
Direction = Annotated[str, Field(description="OUT, IN or BOTH.")]
Types = Annotated[list[str] | None, Field(description="Relation types; default: all.")]
Workspaces = Annotated[list[str] | None, Field(description="Limit to these workspaces; default: all.")]
#: Children listed by ``get_node``: by default, and at most per page.
DEFAULT_CHILDREN_PAGE = 100
MAX_CHILDREN_PAGE = 1_000
Message = Annotated[str | None, Field(description="Why: kept in the revision log.")]
AsOf = Annotated[str | None, Field(description="World time (ISO 8601 with a zone): relations valid then; "
                                               "default now.")]
IncludeInvalid = Annotated[bool, Field(description="Every relation, whatever its validity.")]
#: A relation's ends are ``source`` and ``target`` over MCP (``from`` and ``to`` over HTTP).
ENDS = {"from_": "source", "to": "target"}
ENDS_NOTES = {"from_": "The source node's address 'workspace:/path'.",
              "to": "The target node's address 'workspace:/path'."}


#: A tool's definition made once per process: its argument model and JSON schema depend on the
#: function's signature and description alone, and building them (pydantic models, schemas) cost
#: each app about 60 ms; a later server copies the definition with its own function.
_TOOL_DEFINITIONS: dict[tuple[str, str, str, str], Tool] = {}


def _kg_tool(fn: Callable[..., Any], description: str, annotations: ToolAnnotations) -> Tool:
    """The MCP tool of ``fn`` (a :class:`KgTool`): its arguments from its signature, an unknown
    one refused."""
    key = (fn.__qualname__, description, str(inspect.signature(fn)), repr(annotations))
    made = _TOOL_DEFINITIONS.get(key)
    if made is None:
        made = KgTool.from_function(fn, description=description, annotations=annotations, structured_output=False)
        # An argument the tool does not take is an error, as an unknown field is over HTTP: the
        # SDK's argument model ignores extras, so a misspelt filter ("wehre") ran unfiltered.
        loose = made.fn_metadata.arg_model
        made.fn_metadata.arg_model = type(loose.__name__, (loose,), {
            "model_config": ConfigDict(**{**loose.model_config, "extra": "forbid"})})
        made.parameters = compact_schema({**made.parameters, "additionalProperties": False})
        _TOOL_DEFINITIONS[key] = made
    return made.model_copy(update={"fn": fn})


def build_server(services: Resources, binder: Binder, *, read_only: bool = False,
                 token_verifier: KeyVerifier | None = None, auth: AuthSettings | None = None,
                 sessions: bool = True) -> MCPServer:
    """The MCP server of kg over ``services``.

    Parameters
    ----------
    services : kg.context.Resources
        The process's resources.
    binder : callable(request) -> Binding
        How a request is bound (:func:`http_binding`, :func:`fixed_binding`).
    read_only : bool
        Register only the read tools (``KG_MCP_READ_ONLY``).
    token_verifier : KeyVerifier, optional
        With ``auth``: every streamable HTTP request must carry a valid key.
    auth : mcp.server.auth.settings.AuthSettings, optional
        The SDK's resource-server settings, with ``token_verifier``.
    sessions : bool
        The transport keeps a session and can push (stdio; streamable HTTP with
        ``KG_MCP_SESSIONS``): ``resources/subscribe`` to a change feed is served and the
        capability ``resources.subscribe`` advertised (:class:`kg.mcp.changes.ChangeSubscriptions`).
        False: neither, and a subscribe is an MCP error saying why.

    Returns
    -------
    mcp.server.mcpserver.MCPServer
        Its tools are :data:`READ_TOOLS` and (unless ``read_only``) the write tools of
        :data:`WRITE_TOOLS` (``research_assistant`` when :mod:`kg.rag.functions` has it);
        its resource templates are :data:`kg.mcp.changes.CHANGES_URI_TEMPLATE` and
        :data:`NODE_URI_TEMPLATE`.
    """
    tools: list[Tool] = []

    async def call(ctx: Context, use_case: Callable[[Binding], Any]) -> CallToolResult:
        try:
            binding = binder(_request_of(ctx))
            return tool_result(await anyio.to_thread.run_sync(use_case, binding))
        except KGError as exc:
            return tool_error(exc)

    def tool(annotations: ToolAnnotations, description: str) -> Callable[[Callable[..., Any]], Any]:
        def register(fn: Callable[..., Any]) -> Any:
            tools.append(_kg_tool(fn, description, annotations))
            return fn
        return register

    # -- reads -------------------------------------------------------------------------------

    @tool(_READ, "Search the branch's documents (hybrid BM25 + vector by default). Each result is a passage "
                 "with its citation handle 'uri' (a kg:// resource).")
    async def search(ctx: Context, query: Annotated[str, Field(description="What to look for.")],
                     k: Annotated[int, Field(description="Results.")] = 5,
                     mode: Annotated[str, Field(description="hybrid, vector or fulltext.")] = "hybrid",
                     workspaces: Workspaces = None,
                     path_prefix: Annotated[str | None, Field(description="Only paths under this.")] = None,
                     path_prefix_mode: Annotated[str, Field(
                         description="segments: path_prefix matches whole segments (/a is /a and /a/..., "
                                     "not /ab); raw: a plain string prefix.")] = "segments",
                     node_type: Annotated[str | None, Field(description="Only nodes of this type.")] = None,
                     where: Annotated[dict[str, Any] | None, Field(
                         description="Node property conditions, all of which hold: a value (equality) or "
                                     "operators, e.g. {\"status\": {\"$in\": [\"draft\", \"published\"]}, "
                                     "\"year\": {\"$gte\": 2020}} ($eq $ne $in $nin $gt $gte $lt $lte "
                                     "$exists).")] = None,
                     context_siblings: Annotated[int | None, Field(
                         description="Attach each hit's parent and this many neighbouring sections of its "
                                     "type on each side, in order (0..10; 0: the parent only).")] = None,
                     branch: BranchArg = None) -> CallToolResult:
        def use_case(b: Binding) -> dict[str, Any]:
            raw: dict[str, Any] = {"query": query, "k": k, "mode": mode, "granularity": "chunk",
                                   "workspaces": workspaces, "path_prefix": path_prefix,
                                   "path_prefix_mode": path_prefix_mode, "node_type": node_type, "where": where}
            if context_siblings is not None:
                raw["context"] = {"parent": True, "siblings": context_siblings}
            request = SearchRequest.parse(raw)
            answer = search_branch(services, b.caller, b.repo, b.on(branch), request).as_dict()
            for row in answer["results"]:
                row["uri"] = node_uri(b.repo, b.on(branch), row["workspace"], row["path"])
                for node in [row.get("context", {}).get("parent")] + row.get("context", {}).get("before", []) \
                        + row.get("context", {}).get("after", []):
                    if node is not None:
                        node["uri"] = node_uri(b.repo, b.on(branch), node["workspace"], node["path"])
            return {"branch": b.on(branch), **answer}
        return await call(ctx, use_case)

    def function_tool(function: str, *, with_branch: bool = True) -> Callable[
            [Context, dict[str, Any], str | None], Awaitable[CallToolResult]]:
        """Run an agent function with a tool's arguments; its output as the HTTP API answers it,
        with the branch it ran on first when ``with_branch`` (the output names none)."""
        async def run_tool(ctx: Context, given: dict[str, Any], branch: str | None) -> CallToolResult:
            def use_case(b: Binding) -> dict[str, Any]:
                answer = answer_json(invoke(services, b.caller, b.repo, function, given, branch=b.on(branch)))
                return {"branch": b.on(branch), **answer} if with_branch else answer
            return await call(ctx, use_case)
        return run_tool

    # store_answer is a write: the read tool does not take it.
    tool(_READ, "Answer a question from the branch's documents only, with numbered citations; "
                "'grounded' is false when the documents do not cover it.")(
        typed_tool("ask", AskInput, [f for f in AskInput.model_fields if f != "store_answer"], function_tool("ask")))
    tool(_READ, "The relations around the nodes a query finds (or given seeds): nodes with hop, via, score.")(
        typed_tool("graph_context", GraphContextInput, list(GraphContextInput.model_fields),
                   function_tool("graph-context")))

    @tool(_READ, "A node with its parent and a page of its children in order ('next_cursor' for the next page).")
    async def get_node(ctx: Context, workspace: Workspace, path: NodePath, branch: BranchArg = None,
                       children_limit: Annotated[int, Field(ge=1, le=MAX_CHILDREN_PAGE, description=(
                           "Most children returned."))] = DEFAULT_CHILDREN_PAGE,
                       cursor: Annotated[str | None, Field(description=(
                           "The previous answer's next_cursor: the next page of children."))] = None,
                       ) -> CallToolResult:
        def use_case(b: Binding) -> dict[str, Any]:
            on, where = b.on(branch), validate_path(path)
            node = queries.get_node(services, b.caller, b.repo, on, workspace, where)
            parent = None
            if node.parent_path not in (None, "/"):
                parent = queries.get_node(services, b.caller, b.repo, on, workspace, node.parent_path)
            # A page, not every child: a folder of an imported corpus holds up to millions.
            children = queries.tree_page(services, b.caller, b.repo, on, workspace, where, limit=children_limit,
                                         cursor=cursor)
            return {"branch": on, "uri": node_uri(b.repo, on, workspace, where), "node": node.as_json(),
                    "parent": parent.as_json() if parent is not None else None,
                    "children": children.as_json()["nodes"], "next_cursor": children.next_cursor}
        return await call(ctx, use_case)

    @tool(_READ, "The edges around a node (NEIGHBORS), strongest first; 'truncated' when more exist.")
    async def neighbors(ctx: Context, node: Address, direction: Direction = "BOTH", types: Types = None,
                        limit: Annotated[int, Field(ge=1, le=MAX_LIMIT)] = DEFAULT_LIMIT,
                        as_of: AsOf = None, include_invalid: IncludeInvalid = False,
                        branch: BranchArg = None) -> CallToolResult:
        def use_case(b: Binding) -> dict[str, Any]:
            answer = graph_neighbors(services, b.caller, b.repo, b.on(branch), node, direction=direction,
                                     types=types, limit=limit, as_of=maybe_aware(as_of, "as_of"),
                                     include_invalid=include_invalid)
            return {"branch": b.on(branch), "neighbors": list(answer["neighbors"]), "truncated": answer["truncated"]}

        return await call(ctx, use_case)

    @tool(_READ, "A bounded breadth-first walk from seed nodes; each node once at its shortest hop.")
    @model_tool(TraverseBody, list(TraverseBody.model_fields))
    async def traverse(ctx: Context, branch: BranchArg = None, **fields: Any) -> CallToolResult:
        return await call(ctx, lambda b: {"branch": b.on(branch), **walk(
            services, b.caller, b.repo, b.on(branch), **fields)})

    @tool(_READ, "What a branch wrote since it forked: nodes and relations added, modified, deleted.")
    async def diff(ctx: Context, branch: BranchArg = None,
                   against: Annotated[str | None, Field(description="Compare with; default: the parent.")] = None,
                   ) -> CallToolResult:
        return await call(ctx, lambda b: {"branch": b.on(branch), "against": against,
                                          **queries.diff(services, b.caller, b.repo, b.on(branch), against).as_json()})

    @tool(_READ, "What was derived from a node (chunks, entity mentions, its extraction record, stored answers "
                 "citing it) with the source revision each recorded and whether it is current or stale, and "
                 "what the node was derived from.")
    async def lineage(ctx: Context, workspace: Workspace, path: NodePath, branch: BranchArg = None) -> CallToolResult:
        return await call(ctx, lambda b: {"branch": b.on(branch), **answer_json(node_lineage(
            services, b.caller, b.repo, b.on(branch), workspace, validate_path(path)))})

    @tool(_READ if read_only else _ADD,
          "Run SQL statements separated by ';' (RAG patterns: KNN, HYBRID_SEARCH, FULLTEXT_SEARCH, SELECT over a "
          "workspace with CHILD_OF / DESCENDANT_OF / PATH_STARTS_WITH, NEIGHBORS, REFERENCES"
          + ("" if read_only else ", INSERT, UPDATE, DELETE, RELATE, CREATE BRANCH, MERGE BRANCH")
          + "); one result per statement: columns, rows, row_count. $1, $2... take params.")
    async def sql(ctx: Context, sql: Annotated[str, Field(description="The statements.")],
                  params: Annotated[list[Any] | None, Field(description="The values of $1, $2, ...")] = None,
                  branch: BranchArg = None) -> CallToolResult:
        return await call(ctx, lambda b: {"branch": b.on(branch), **run_sql(
            services, b.caller, b.repo, b.on(branch), sql, params or [], read_only=read_only).model_dump()})

    if not read_only:
        _write_tools(services, call, tool, function_tool)
    names = [t.name for t in tools]
    server: MCPServer = MCPServer(
        # The SDK configures the root logger at construction: at WARNING, kg's own logs stay as they were.
        "kg", version=kg.__version__, token_verifier=token_verifier, auth=auth, log_level="WARNING", tools=tools,
        instructions=("kg: a knowledge graph with branches. The connection names a repository and a branch; "
                      "every tool acts there unless its 'branch' argument names another, and says which. "
                      "Write on a session branch (branch_create), never on main; a person reviews its diff."),
        middleware=[_tool_list_for(binder, registered=lambda: names), _subscriptions_need_sessions(sessions)],
    )
    _add_resources(server, services, binder)
    if sessions:
        def caller_of(request: Any) -> tuple[str, str, Actor]:
            binding = binder(request)
            return binding.repo, binding.branch, binding.caller

        follow = ChangeSubscriptions(services, caller_of)
        lowlevel = server._lowlevel_server  # noqa: SLF001 - MCPServer has no public way to add handlers
        lowlevel.add_request_handler("resources/subscribe", SubscribeRequestParams, follow.subscribe)
        lowlevel.add_request_handler("resources/unsubscribe", UnsubscribeRequestParams, follow.unsubscribe)
    return server


Caller = Callable[[Context, Callable[[Binding], Any]], Awaitable[CallToolResult]]
Register = Callable[[ToolAnnotations, str], Callable[[Callable[..., Any]], Any]]
FunctionTool = Callable[..., Callable[[Context, dict[str, Any], str | None], Awaitable[CallToolResult]]]


def _write_tools(services: Resources, call: Caller, tool: Register, function_tool: FunctionTool) -> None:
    """Define the write tools (none under ``KG_MCP_READ_ONLY``)."""


    @tool(_UPSERT, "Create or replace a node (its text is chunked and embedded).")
    @model_tool(NodePut, ["node_type", "properties", "order", "message"])
    async def put_node(ctx: Context, workspace: Workspace, path: NodePath,
                       parents: Annotated[bool, Field(description="Create missing parents.")] = False,
                       branch: BranchArg = None, **fields: Any) -> CallToolResult:
        # A type or properties left out: the request model's defaults (kg:Node, none).
        defaults = NodePut().model_dump(include={"node_type", "properties"})

        def use_case(b: Binding) -> dict[str, Any]:
            node, created = run(services, b.caller, node_ops.put_node, b.repo, b.on(branch), workspace,
                                validate_path(path), parents=parents, **{**defaults, **fields})
            return {"branch": b.on(branch), "created": created, "node": node.as_json()}
        return await call(ctx, use_case)

    @tool(_UPSERT, "Assert a typed edge between two nodes; the same (from, to, type) again replaces its weight.")
    @model_tool(RelationCreate, ["from_", "to", "type", "weight", "properties", "valid_from", "valid_to", "message"],
                names=ENDS, notes=ENDS_NOTES)
    async def relate(ctx: Context, branch: BranchArg = None, **fields: Any) -> CallToolResult:
        def use_case(b: Binding) -> dict[str, Any]:
            given = dict(fields)
            relation, created = run(services, b.caller, relation_ops.relate, b.repo, b.on(branch),
                                    given.pop("source"), given.pop("target"), given.pop("type"), **given)
            return {"branch": b.on(branch), "created": created, "relation": relation.as_json()}
        return await call(ctx, use_case)

    @tool(_UPSERT, "Mark a relation as no longer holding from valid_to (default now), naming what superseded "
                   "it; it stays readable with include_invalid or an earlier as_of.")
    @model_tool(RelationInvalidate, ["from_", "to", "type", "valid_to", "invalidated_by", "message"],
                names=ENDS, notes=ENDS_NOTES)
    async def invalidate_relation(ctx: Context, branch: BranchArg = None, **fields: Any) -> CallToolResult:
        given = dict(fields)
        source, target, rel_type = given.pop("source"), given.pop("target"), given.pop("type")
        return await call(ctx, lambda b: {"branch": b.on(branch), "relation": run(
            services, b.caller, relation_ops.invalidate, b.repo, b.on(branch), source, target, rel_type,
            **given).as_json()})

    @tool(_UPSERT, "Remove the edges from source to target (of one type, or all).")
    async def unrelate(ctx: Context, source: Address, target: Address,
                       type: Annotated[str | None, Field(description="Relation type; default: all.")] = None,
                       message: Message = None, branch: BranchArg = None) -> CallToolResult:
        return await call(ctx, lambda b: {"branch": b.on(branch), **run(
            services, b.caller, relation_ops.unrelate, b.repo, b.on(branch), source, target, type,
            message=message).as_json()})

    tool(_UPSERT, "Extract a document's entities and relations into the graph (skipped when unchanged).")(
        typed_tool("extract_entities", ExtractEntitiesInput, list(ExtractEntitiesInput.model_fields),
                   function_tool("extract-entities")))

    @tool(_ADD, "Open a new session branch from this one (nothing is copied). Answers its name and its MCP path.")
    @model_tool(BranchCreate, ["name", "from_"], names={"from_": "from_branch"},
                notes={"from_": "The parent; default: the connection's branch."})
    async def branch_create(ctx: Context, **fields: Any) -> CallToolResult:
        def use_case(b: Binding) -> dict[str, Any]:
            created = run(services, b.caller, branch_ops.create_branch, b.repo, name=fields["name"],
                          from_branch=b.on(fields.get("from_branch")))
            return {**created.as_json(), "mcp_path": f"/mcp/{quote(b.repo, safe='')}/{quote(created.name, safe='/')}"}
        return await call(ctx, use_case)

    @tool(_ADD, "Merge this branch into its parent (or 'into'); conflicts are reported and nothing is written. "
                "A dry run answers 'plan': pass it as 'if_plan' to merge exactly what the dry run showed.")
    @model_tool(MergeBody, ["into", "dry_run", "if_plan", "resolutions"])
    async def merge(ctx: Context, branch: BranchArg = None, **fields: Any) -> CallToolResult:
        def use_case(b: Binding) -> dict[str, Any]:
            into, given = fields.get("into"), {k: fields[k] for k in ("resolutions", "if_plan") if k in fields}
            if fields.get("dry_run"):
                return merge_ops.preview_merge(services, b.caller, b.repo, b.on(branch), into, **given).as_json()
            return run(services, b.caller, merge_ops.merge_branch, b.repo, b.on(branch), into, **given).as_json()
        return await call(ctx, lambda b: {"branch": b.on(branch), **use_case(b)})

    if RESEARCH_ASSISTANT in FUNCTIONS:  # the research assistant, once kg.rag has it
        tool(_ADD, "Research a question on a new session branch research/<id>: searches, reads the graph, "
                   "answers with citations stored on that branch; answers the branch for a person to review.")(
            typed_tool("research_assistant", ResearchAssistantInput, list(ResearchAssistantInput.model_fields),
                       function_tool(RESEARCH_ASSISTANT, with_branch=False)))

    tool(_ADD, "Find duplicate entity nodes of a workspace and propose their merges on a new branch "
               "proposals/entities-<timestamp> (dry_run: only list them); review its diff, then merge it.")(
        typed_tool("resolve_entities", ResolveEntitiesInput, list(ResolveEntitiesInput.model_fields),
                   function_tool("resolve-entities", with_branch=False)))


def _add_resources(server: MCPServer, services: Resources, binder: Binder) -> None:
    """Register the resource templates: a branch's change feed (first: ``kg://acme/changes`` is
    not a node) and :data:`NODE_URI_TEMPLATE`."""

    @server.resource(CHANGES_URI_TEMPLATE, name="changes", mime_type="application/json",
                     description="A branch's change feed (JSON, as GET /api/repos/{repo}/changes answers it): "
                                 "the latest page, or with 'after' the page after that cursor. Subscribe to be "
                                 "notified when a revision lands on the branch.")
    async def changes(repo: str, ctx: Context, branch: str | None = None, after: str | None = None) -> str:
        binding = binder(_request_of(ctx))
        on = branch or binding.branch

        def read() -> BaseModel:
            if after:
                return change_ops.changes(services, binding.caller, repo, branch=on, after=after)
            return change_ops.latest_changes(services, binding.caller, repo, branch=on)
        try:
            page = await anyio.to_thread.run_sync(read)
        except KGError as exc:
            code = INTERNAL_ERROR if isinstance(exc, BackendUnavailable | ProviderError) else INVALID_PARAMS
            raise MCPError(code=code, message=f"{exc.code}: {exc.message}",
                           data={"uri": f"kg://{repo}/changes", **error_shape(exc)}) from exc
        return json.dumps({"branch": on, **answer_json(page)}, ensure_ascii=False)

    @server.resource(NODE_URI_TEMPLATE, name="node", mime_type="application/json",
                     description="A node (JSON) by repository, workspace, path and branch (default: the "
                                 "connection's).")
    async def node(repo: str, workspace: str, path: str, ctx: Context, branch: str | None = None) -> str:
        binding = binder(_request_of(ctx))
        on = branch or binding.branch
        try:
            found = await anyio.to_thread.run_sync(
                lambda: queries.get_node(services, binding.caller, repo, on, workspace, validate_path("/" + path)))
        except KGError as exc:
            code = INTERNAL_ERROR if isinstance(exc, BackendUnavailable | ProviderError) else INVALID_PARAMS
            raise MCPError(code=code, message=f"{exc.code}: {exc.message}",
                           data={"uri": node_uri(repo, on, workspace, "/" + path), **error_shape(exc)}) from exc
        return json.dumps({"branch": on, **found.as_json()}, ensure_ascii=False)


def _tool_list_for(binder: Binder, registered: Callable[[], list[str]]) -> Any:
    """The server middleware that lists to each caller the tools :func:`offered_tools` gives it."""

    async def middleware(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        result = await call_next(ctx)
        if ctx.method == "tools/list" and isinstance(result, dict) and isinstance(result.get("tools"), list):
            try:
                offered = set(offered_tools(binder(ctx.request), registered()))
            except KGError as exc:
                raise MCPError(code=INVALID_PARAMS, message=f"{exc.code}: {exc.message}") from exc
            result = {**result, "tools": [t for t in result["tools"] if t.get("name") in offered]}
        return result

    return middleware


def _subscriptions_need_sessions(sessions: bool) -> Any:
    """The server middleware that answers a subscribe on a transport without sessions with
    :data:`kg.mcp.changes.NO_SESSIONS` (the SDK would say only "Method not found")."""

    async def middleware(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if not sessions and ctx.method in ("resources/subscribe", "resources/unsubscribe"):
            raise MCPError(code=METHOD_NOT_FOUND, message=NO_SESSIONS)
        return await call_next(ctx)

    return middleware


def http_server(services: Resources) -> MCPServer:
    """The server of the streamable HTTP transport, with the keys of ``KG_AUTH``.

    Parameters
    ----------
    services : kg.context.Resources
        The process's resources (its settings: ``auth``, ``mcp_read_only``, ``host``, ``port``).

    Returns
    -------
    mcp.server.mcpserver.MCPServer
        Bound by :func:`http_binding`. With ``KG_AUTH`` on, the SDK's bearer middleware refuses
        (401) a request without a valid key before any MCP message is read (:class:`KeyVerifier`);
        kg is then its own issuer of tokens (``kg keys create``), so no OAuth metadata is served.
    """
    settings = services.settings
    verifier, auth = None, None
    if settings.auth:
        verifier = KeyVerifier(services.db, settings, services.key_cache)
        auth = AuthSettings(issuer_url=AnyHttpUrl(f"http://{settings.host}:{settings.port}"), resource_server_url=None)
    return build_server(services, http_binding, read_only=settings.mcp_read_only, token_verifier=verifier, auth=auth,
                        sessions=settings.mcp_sessions)


def http_app(server: MCPServer, host: str, *, check_host: bool = True, sessions: bool = False) -> Any:
    """The streamable HTTP ASGI app of ``server``, to mount at ``/mcp``.

    Stateless (any worker of ``kg serve --workers N`` answers any request; no server-to-client
    stream is needed) and answered as plain JSON rather than an SSE stream (no tool sends
    progress; an SSE answer cost about 40 ms more per call, ``bench/mcp_latency.py``), at
    :data:`HTTP_PATH`. Its session manager must be run by the app that
    mounts it (``server.session_manager.run()`` in that app's lifespan).

    Parameters
    ----------
    server : mcp.server.mcpserver.MCPServer
        From :func:`http_server`.
    host : str
        The interface kg listens on: on a loopback one the SDK accepts only requests addressed to
        localhost (DNS-rebinding protection); on any other it checks no ``Host`` header.
    check_host : bool
        False: the SDK checks no ``Host`` or ``Origin`` header, whatever the interface (the app
        that mounts it checks them on every path, in its own error shape: api/guard.py while
        ``KG_AUTH`` is off).
    sessions : bool
        ``KG_MCP_SESSIONS``: with sessions and SSE answers instead, so that the server can push
        (``notifications/resources/updated`` of a change feed subscription) on the session's
        GET stream; a session lives in the process that opened it (sticky routing behind a
        load balancer).

    Returns
    -------
    starlette.applications.Starlette
        One route, :data:`HTTP_PATH`.
    """
    security = None if check_host else TransportSecuritySettings(enable_dns_rebinding_protection=False)
    return server.streamable_http_app(streamable_http_path=HTTP_PATH, stateless_http=not sessions,
                                      json_response=not sessions, host=host, transport_security=security)
