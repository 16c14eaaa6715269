"""LangChain over kg: :class:`KGRetriever` (a ``BaseRetriever`` over kg's search) and
:func:`kg_tools` (the MCP server's tools as LangChain tools), through :mod:`kg.client`.

Needs the ``langchain`` extra (``pip install 'kg[langchain]'``: langchain-core). See
docs/guides/frameworks.md.
"""

from __future__ import annotations

import inspect
import json
import typing
from collections.abc import Callable
from typing import Any

__all__ = [
    "KGRetriever", "args_schema", "document", "function_args_schema", "kg_tools", "tool_error",
    "validation_error",
]

try:
    from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.tools import StructuredTool, ToolException
except ImportError as exc:  # pragma: no cover - exercised by simulating the missing package
    raise ImportError("kg.adapters.langchain needs langchain-core: pip install 'kg[langchain]'") from exc

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, model_validator

from kg.adapters.hits import Hit, SearchOptions, asearch, search
from kg.client import AsyncClient, Client
from kg.client import operations as ops
from kg.errors import InvalidInput, KGError, error_body
from kg.types.functions import InvokeAsk, InvokeBody, InvokeGraphContext, invoke_input


def document(hit: Hit) -> Document:
    """A LangChain document of a hit: the passage's text, :func:`kg.adapters.hits.citation` as metadata."""
    return Document(id=hit.id, page_content=hit.text, metadata=hit.metadata)


class KGRetriever(BaseRetriever, SearchOptions):
    """A LangChain retriever over kg's search of one repository and branch.

    Documents come in the order and with the scores of ``POST .../search``; each one's
    ``page_content`` is the passage and its ``metadata`` the citation handles
    (:func:`kg.adapters.hits.citation`: workspace, path, chunk_index, node_id, branch, title,
    score, the legs' ranks, graph context).

    Parameters
    ----------
    client : kg.client.Client, optional
        Sends the synchronous searches (``invoke``).
    async_client : kg.client.AsyncClient, optional
        Sends the asynchronous ones (``ainvoke``); without it ``ainvoke`` runs the sync path in a
        thread. At least one of the two.
    repo, branch, workspaces, k, mode, granularity, path_prefix, node_type, where, context, at_revision, titles
        :class:`kg.adapters.hits.SearchOptions`.

    Raises
    ------
    kg.errors.KGError
        From ``invoke`` / ``ainvoke``: the server's refusal (``NotFound``, ``Forbidden``,
        ``InvalidInput``...).

    Examples
    --------
    >>> from kg.client import Client
    >>> KGRetriever(client=Client("http://127.0.0.1:8765"), repo="peps", k=3).k
    3
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    client: Client | None = None
    async_client: AsyncClient | None = None

    @model_validator(mode="after")
    def _a_client(self) -> KGRetriever:
        if self.client is None and self.async_client is None:
            raise ValueError("KGRetriever needs a client or an async_client")
        return self

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        if self.client is None:
            raise ValueError("KGRetriever has only an async_client: use ainvoke, or give it a client")
        return [document(hit) for hit in search(self.client, self, query)]

    async def _aget_relevant_documents(self, query: str, *,
                                       run_manager: AsyncCallbackManagerForRetrieverRun) -> list[Document]:
        if self.async_client is None:
            return await super()._aget_relevant_documents(query, run_manager=run_manager)
        return [document(hit) for hit in await asearch(self.async_client, self, query)]


# -- tools ------------------------------------------------------------------------------------


#: Descriptions of the client's parameters as the tools show them to a model.
_DESCRIPTIONS = {
    "query": "What to look for.", "k": "Results (1..1000).", "mode": "hybrid (BM25 + vector), vector or fulltext.",
    "granularity": "chunk: one result per passage; node: one per node.",
    "workspaces": "Only these workspaces (default: all).", "path_prefix": "Only paths under this (whole segments).",
    "node_type": "Only nodes of this type.",
    "where": "Node property conditions: a value (equality) or operators, e.g. {\"status\": {\"$in\": [\"Final\"]}} "
             "($eq $ne $in $nin $gt $gte $lt $lte $exists).",
    "context": "Graph context of each hit: {\"parent\": true, \"siblings\": 1} attaches its parent and neighbouring "
               "sections.",
    "branch": "The branch (default: the tool set's).", "at_revision": "Read the branch as of this revision.",
    "name": "The new branch, e.g. agent/session-1.", "from_branch": "Its parent (default: the tool set's branch).",
    "workspace": "The node's workspace.", "path": "The node's path, e.g. /notes/a.",
    "properties": "The node's JSON properties (its text in 'content' or 'body').",
    "order": "Place among siblings.", "parents": "Create missing parents.", "message": "Kept in the revision log.",
    "if_revision": "Refuse the write if the node changed since this revision.",
}


def args_schema(build: Callable[..., Any], name: str, *, drop: tuple[str, ...] = (),
                rename: dict[str, str] | None = None, defaults: dict[str, Any] | None = None,
                describe: dict[str, str] | None = None) -> type[BaseModel]:
    """A tool's argument model derived from a client operation's parameters.

    Parameters
    ----------
    build : callable
        The operation's builder (:mod:`kg.client.operations`): its parameters' names, types and
        defaults become the model's fields.
    name : str
        The model's name.
    drop : tuple of str
        Parameters the tool set binds (``repo``) or does not offer.
    rename : dict, optional
        Parameter name -> field name (``ws`` -> ``workspace``).
    defaults : dict, optional
        Field defaults replacing the builder's (``branch``: the tool set's branch).
    describe : dict, optional
        Field descriptions of this tool, over the shared ones.

    Returns
    -------
    type of pydantic.BaseModel
        Fields in the builder's order; unknown arguments refused.
    """
    hints = typing.get_type_hints(build)
    rename, defaults, descriptions = rename or {}, defaults or {}, {**_DESCRIPTIONS, **(describe or {})}
    fields: dict[str, Any] = {}
    for param in inspect.signature(build).parameters.values():
        if param.name in drop:
            continue
        field = rename.get(param.name, param.name)
        default = defaults.get(field, ... if param.default is inspect.Parameter.empty else param.default)
        fields[field] = (hints[param.name], Field(default=default, description=descriptions.get(field)))
    model: type[BaseModel] = create_model(name, __config__=ConfigDict(extra="forbid"), **fields)
    return model


def function_args_schema(body: type[InvokeBody], name: str, *, branch: str) -> type[BaseModel]:
    """A function tool's argument model, from the function's invocation body.

    Parameters
    ----------
    body : type of kg.types.InvokeBody
        The function's body (:data:`kg.types.functions.INVOKE_BODIES`: ``InvokeAsk``,
        ``InvokeGraphContext``).
    name : str
        The model's name.
    branch : str
        The default of its ``branch`` (the tool set's).

    Returns
    -------
    type of pydantic.BaseModel
        The fields of the function's input model (:func:`kg.types.functions.invoke_input`:
        names, types, constraints, defaults) and the body's ``branch``; unknown arguments
        refused. The input model's rules across fields stay the function's to check (a model's
        tool schema is an object with properties, no ``anyOf`` at its top).
    """
    given = body.model_fields["branch"]
    fields: dict[str, Any] = {"branch": (given.annotation, Field(
        default=branch, description=_DESCRIPTIONS["branch"], json_schema_extra=given.json_schema_extra))}
    made: type[BaseModel] = create_model(name, __base__=invoke_input(body), **fields)
    made.model_config["json_schema_extra"] = None
    made.model_rebuild(force=True)
    return made


def _dump(value: Any) -> Any:
    """A result model as JSON values (a ``RootModel``'s root)."""
    if isinstance(value, BaseModel):
        dumped = value.model_dump(mode="json", by_alias=True, exclude_unset=True)
        return dumped.get("root", dumped) if set(dumped) == {"root"} else dumped
    return value


def tool_error(exc: KGError) -> ToolException:
    """A kg error as a LangChain tool error whose text is the API's error shape."""
    return ToolException(json.dumps(error_body(exc.code, exc.message, exc.details), default=str))


def validation_error(exc: ValidationError) -> str:
    """Arguments the tool's schema refused, as the API's error shape (``invalid_input``, as the
    server answers a request whose fields are wrong)."""
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first["loc"])
    return json.dumps(error_body(InvalidInput.code, f"{where}: {first['msg']}" if where else first["msg"],
                                 {"errors": exc.errors(include_url=False, include_context=False)}), default=str)


Adapt = Callable[..., tuple[tuple[Any, ...], dict[str, Any]]]
"""A tool's arguments (every field of its schema) -> the client method's positional and keyword arguments."""


def _tool(name: str, description: str, schema: type[BaseModel], method: str, adapt: Adapt,
          client: Client | None, async_client: AsyncClient | None) -> StructuredTool:
    """A structured tool calling ``method`` of the clients; kg errors become tool errors
    (``ToolException``, shown to the agent as the API's error shape)."""

    def arguments(given: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        # LangChain passes the arguments given; the schema's defaults (the tool set's branch) fill the rest.
        checked = schema.model_validate(given)
        return adapt(**{field: getattr(checked, field) for field in type(checked).model_fields})

    def func(**given: Any) -> Any:
        if client is None:
            raise ToolException(f"{name}: this tool set has only an async client; use ainvoke")
        args, kwargs = arguments(given)
        try:
            return _dump(getattr(client, method)(*args, **kwargs))
        except KGError as exc:
            raise tool_error(exc) from exc

    async def coroutine(**given: Any) -> Any:
        assert async_client is not None
        args, kwargs = arguments(given)
        try:
            return _dump(await getattr(async_client, method)(*args, **kwargs))
        except KGError as exc:
            raise tool_error(exc) from exc

    # Without an async client, ainvoke runs func in a thread (StructuredTool's own fallback).
    return StructuredTool.from_function(func=func, coroutine=coroutine if async_client is not None else None,
                                        name=name, description=description, args_schema=schema,
                                        handle_tool_error=True,
                                        handle_validation_error=validation_error)


def kg_tools(repo: str, *, client: Client | None = None, async_client: AsyncClient | None = None,
             branch: str = "main") -> list[StructuredTool]:
    """The MCP server's tools as LangChain tools on one repository: ``kg_search``, ``kg_ask``,
    ``kg_graph_context``, ``kg_create_branch``, ``kg_put_node``.

    Parameters
    ----------
    repo : str
        The repository the tools work on.
    client, async_client : kg.client.Client, kg.client.AsyncClient
        Send ``invoke`` / ``ainvoke`` (without ``async_client``, ``ainvoke`` runs ``invoke`` in a
        thread). At least one.
    branch : str
        The default ``branch`` of every tool (and the parent of ``kg_create_branch``).

    Returns
    -------
    list of langchain_core.tools.StructuredTool
        Argument schemas derived from the client's operations (:func:`args_schema`); each
        answers the operation's result as JSON values. A kg refusal (``NotFound``,
        ``Forbidden``, ``InvalidInput``...) is a tool error whose text is the API's error shape
        ``{"error": {"code", "message", "details"}}``; so are arguments the schema refuses.
    """
    if client is None and async_client is None:
        raise ValueError("kg_tools needs a client or an async_client")
    mine = {"branch": branch}

    def search_args(query: str, **kw: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (repo, query), kw

    def function_args(name: str, body: type[InvokeBody]) -> Callable[..., tuple[tuple[Any, ...], dict[str, Any]]]:
        def adapt(branch: str = branch, **kw: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
            given = invoke_input(body)(**kw).model_dump(mode="json", exclude_defaults=True)
            return (repo, name, given), {"branch": branch}
        return adapt

    def branch_args(name: str, from_branch: str = branch, at_revision: int | None = None
                    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (repo, name), {"from_": from_branch, "at_revision": at_revision}

    def node_args(workspace: str, path: str, **kw: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (repo, workspace, path), kw

    both = (client, async_client)
    return [
        _tool("kg_search", "Search the repository's documents (hybrid BM25 + vector rank fusion by default). Each "
                           "result is a passage with its citation handles: workspace, path, chunk_index, node_id, "
                           "score and each leg's rank.",
              args_schema(ops.search, "KgSearch", drop=("repo",), defaults=mine), "search", search_args, *both),
        _tool("kg_ask", "Answer a question from the repository's documents only, with numbered citations; "
                        "'grounded' is false when the documents do not cover it.",
              function_args_schema(InvokeAsk, "KgAsk", branch=branch), "invoke_function",
              function_args("ask", InvokeAsk), *both),
        _tool("kg_graph_context", "The relations around the nodes a query finds (or given seeds): nodes with "
                                  "hop, via, score.",
              function_args_schema(InvokeGraphContext, "KgGraphContext", branch=branch), "invoke_function",
              function_args("graph-context", InvokeGraphContext), *both),
        _tool("kg_create_branch", "Open a new branch from this one (nothing is copied); write on it, then merge.",
              args_schema(ops.create_branch, "KgCreateBranch", drop=("repo",), rename={"from_": "from_branch"},
                          defaults={"from_branch": branch}), "create_branch", branch_args, *both),
        _tool("kg_put_node", "Create or replace a node (its text is chunked and embedded).",
              args_schema(ops.put_node, "KgPutNode", drop=("repo", "actor"), rename={"ws": "workspace"},
                          defaults=mine, describe={"node_type": "The node's type, e.g. kb:Note."}),
              "put_node", node_args, *both),
    ]
