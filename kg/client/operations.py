"""Every operation of the HTTP API as a :class:`~kg.client.calls.Call` builder, written once.

A builder takes the operation's path parameters positionally and its query parameters and body
fields as keywords named like the API's fields (``from_`` for ``from``); ``None`` leaves a field
to the server's default. The body's keys are the request model's (:mod:`kg.types`), by alias.
:class:`kg.client.Client` and :class:`kg.client.AsyncClient` expose each builder as a method of
the same name and signature that sends the call and answers its result model.
"""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import datetime
from typing import Any, Literal, TypeVar

from pydantic import BaseModel

from kg import types as t
from kg.client.calls import Call, Decoder, returns, returns_by_status, returns_bytes, returns_nothing
from kg.types.bulk import MEDIA_TYPES

T = TypeVar("T")
JSON = dict[str, Any]

#: The fields of a search request (``kg.rag.search.SearchRequest``, which the server validates).
SEARCH_FIELDS = ("query", "k", "mode", "granularity", "workspaces", "path_prefix", "path_prefix_mode", "node_type",
                 "where", "fulltext_weight", "vector_weight", "max_distance", "max_per_node", "fusion", "fusion_type",
                 "rerank", "context")


def _call(method: str, template: str, decode: Decoder[T], args: dict[str, Any],
          body: type[BaseModel] | tuple[str, ...] | None = None) -> Call[T]:
    """The call of an operation from its builder's arguments (``locals()``): the template's names
    are path parameters, the body model's fields (or ``body``'s names) the JSON body, the rest the
    query (a trailing ``_`` dropped: ``from_`` is ``from``)."""
    in_path = set(re.findall(r"\{(\w+)\}", template))
    if isinstance(body, tuple):
        names = {name: name for name in body}
    elif body is not None:
        names = {name: info.alias or name for name, info in body.model_fields.items()}
    else:
        names = {}
    return Call(method, template, decode,
                path_params={name: str(args[name]) for name in in_path},
                query={name.rstrip("_"): value for name, value in args.items()
                       if name not in in_path and name not in names and value is not None},
                body={names[name]: value for name, value in args.items() if name in names}
                if body is not None else None)


# t.Health


def health() -> Call[t.Health]:
    """Liveness: ``{"status": "ok", "version"}`` (``GET /health`` answers the same)."""
    return _call("GET", "/api/health", returns(t.Health), locals())


# Repositories and workspaces


def create_repo(name: str) -> Call[t.Repo]:
    """Create a repository; it starts with the branch ``main``."""
    return _call("POST", "/api/repos", returns(t.Repo), locals(), t.RepoCreate)


def list_repos(*, limit: int | None = None, cursor: str | None = None) -> Call[t.RepoList]:
    """One page of the repositories the caller may see, by name (``iter_repos``: all of them)."""
    return _call("GET", "/api/repos", returns(t.RepoList), locals())


def get_repo(repo: str) -> Call[t.Repo]:
    """One repository."""
    return _call("GET", "/api/repos/{repo}", returns(t.Repo), locals())


def delete_repo(repo: str) -> Call[None]:
    """Delete a repository with everything in it."""
    return _call("DELETE", "/api/repos/{repo}", returns_nothing, locals())


def create_workspace(repo: str, name: str, *, embedding: JSON | None = None) -> Call[t.Workspace]:
    """Create a workspace, optionally with its embedding model and chunking settings."""
    return _call("POST", "/api/repos/{repo}/workspaces", returns(t.Workspace), locals(), t.WorkspaceCreate)


def list_workspaces(repo: str) -> Call[t.WorkspaceList]:
    """The workspaces of a repository."""
    return _call("GET", "/api/repos/{repo}/workspaces", returns(t.WorkspaceList), locals())


def get_workspace(repo: str, ws: str) -> Call[t.Workspace]:
    """One workspace."""
    return _call("GET", "/api/repos/{repo}/workspaces/{ws}", returns(t.Workspace), locals())


def patch_workspace(repo: str, ws: str, *, embedding: JSON, reembed: bool | None = None) -> Call[t.EmbeddingChange]:
    """Change a workspace's embedding model or chunking (``reembed`` to re-embed its texts)."""
    return _call("PATCH", "/api/repos/{repo}/workspaces/{ws}", returns(t.EmbeddingChange), locals(), t.WorkspacePatch)


# History


def log(repo: str, *, branch: str | None = None, at_revision: int | None = None, limit: int | None = None,
        before: int | None = None, changes: int | None = None) -> Call[t.RevisionLog]:
    """One page of the branch's revisions, newest first (``iter_log``: all of them)."""
    return _call("GET", "/api/repos/{repo}/log", returns(t.RevisionLog), locals())


def batch(repo: str, *, upserts: list[JSON] | None = None, deletes: list[JSON] | None = None,
          parents: bool | None = None, message: str | None = None, actor: str | None = None,
          branch: str | None = None) -> Call[t.BatchResult]:
    """Deletes then upserts as one revision: all or nothing."""
    return _call("POST", "/api/repos/{repo}/nodes:batch", returns(t.BatchResult), locals(), t.BatchBody)


def diff(repo: str, branch: str, *, against: str | None = None) -> Call[t.Diff]:
    """What the branch changed since its merge base with ``against`` (default: its parent)."""
    return _call("GET", "/api/repos/{repo}/branches/{branch}/diff", returns(t.Diff), locals())


def merge(repo: str, branch: str, *, into: str | None = None, dry_run: bool | None = None,
          resolutions: list[JSON] | None = None, if_plan: str | None = None, message: str | None = None,
          actor: str | None = None) -> Call[t.MergeResult]:
    """Merge the branch into ``into`` (default: its parent); ``dry_run`` plans without writing."""
    return _call("POST", "/api/repos/{repo}/branches/{branch}/merge", returns(t.MergeResult), locals(), t.MergeBody)


def reset_branch(repo: str, branch: str) -> Call[t.BranchReset]:
    """Drop what was written on the branch and fork it again from its parent's head."""
    return _call("POST", "/api/repos/{repo}/branches/{branch}/reset", returns(t.BranchReset), locals())


# Branches


def create_branch(repo: str, name: str, *, from_: str | None = None,
                  at_revision: int | None = None) -> Call[t.Branch]:
    """Create a branch from ``from_`` (default ``main``) at ``at_revision`` (default now)."""
    return _call("POST", "/api/repos/{repo}/branches", returns(t.Branch), locals(), t.BranchCreate)


def list_branches(repo: str) -> Call[t.BranchList]:
    """Every branch of the repository."""
    return _call("GET", "/api/repos/{repo}/branches", returns(t.BranchList), locals())


def get_branch(repo: str, branch: str) -> Call[t.Branch]:
    """One branch (its name may contain ``/``)."""
    return _call("GET", "/api/repos/{repo}/branches/{branch}", returns(t.Branch), locals())


def delete_branch(repo: str, branch: str) -> Call[None]:
    """Delete a branch and what was written on it."""
    return _call("DELETE", "/api/repos/{repo}/branches/{branch}", returns_nothing, locals())


# Nodes


def put_node(repo: str, ws: str, path: str, *, properties: JSON | None = None, node_type: str | None = None,
             order: float | None = None, if_revision: int | None = None, message: str | None = None,
             actor: str | None = None, branch: str | None = None, parents: bool | None = None) -> Call[t.Node]:
    """Create (201) or replace (200) the node at ``path``; its text is chunked and embedded."""
    return _call("PUT", "/api/repos/{repo}/workspaces/{ws}/nodes/{path}", returns(t.Node), locals(), t.NodePut)


def patch_node(repo: str, ws: str, path: str, *, properties: JSON | None = None, node_type: str | None = None,
               order: float | None = None, if_revision: int | None = None, message: str | None = None,
               actor: str | None = None, branch: str | None = None) -> Call[t.Node]:
    """Merge ``properties`` into the node (a ``None`` value removes the key)."""
    return _call("PATCH", "/api/repos/{repo}/workspaces/{ws}/nodes/{path}", returns(t.Node), locals(), t.NodePatch)


def get_node(repo: str, ws: str, path: str, *, branch: str | None = None,
             at_revision: int | None = None) -> Call[t.Node]:
    """The node at ``path`` on the branch."""
    return _call("GET", "/api/repos/{repo}/workspaces/{ws}/nodes/{path}", returns(t.Node), locals())


def delete_node(repo: str, ws: str, path: str, *, branch: str | None = None, recursive: bool | None = None,
                message: str | None = None, actor: str | None = None,
                if_revision: int | None = None) -> Call[t.NodesDeleted]:
    """Delete the node (with its children only when ``recursive``)."""
    return _call("DELETE", "/api/repos/{repo}/workspaces/{ws}/nodes/{path}", returns(t.NodesDeleted), locals())


def list_nodes(repo: str, ws: str, *, parent: str | None = None, prefix: str | None = None,
               branch: str | None = None, at_revision: int | None = None, order_by: str | None = None,
               direction: Literal["asc", "desc"] | None = None, node_type: str | None = None,
               prefix_mode: Literal["segments", "raw"] | None = None, limit: int | None = None,
               cursor: str | None = None) -> Call[t.NodeList]:
    """One page of the children of ``parent`` or the nodes under ``prefix`` (``iter_nodes``: all)."""
    return _call("GET", "/api/repos/{repo}/workspaces/{ws}/nodes", returns(t.NodeList), locals())


def lineage(repo: str, ws: str, path: str, *, branch: str | None = None,
            at_revision: int | None = None) -> Call[t.Lineage]:
    """What was derived from the node at ``path``, and what it was derived from."""
    return _call("GET", "/api/repos/{repo}/workspaces/{ws}/lineage/{path}", returns(t.Lineage), locals())


def references(repo: str, target: str, *, branch: str | None = None, at_revision: int | None = None,
               limit: int | None = None) -> Call[t.ReferenceList]:
    """The nodes whose properties hold a reference to ``target`` (``workspace:/path``)."""
    return _call("GET", "/api/repos/{repo}/references", returns(t.ReferenceList), locals())


# Search and the index


def search(repo: str, query: str, *, k: int | None = None,
           mode: Literal["vector", "fulltext", "hybrid"] | None = None,
           granularity: Literal["chunk", "node"] | None = None, workspaces: list[str] | None = None,
           path_prefix: str | None = None, path_prefix_mode: Literal["segments", "raw"] | None = None,
           node_type: str | None = None, where: JSON | None = None, fulltext_weight: float | None = None,
           vector_weight: float | None = None, max_distance: float | None = None, max_per_node: int | None = None,
           fusion: Literal["kg", "index"] | None = None, fusion_type: Literal["ranked", "relative_score"] | None = None,
           rerank: bool | None = None, context: JSON | None = None, branch: str | None = None,
           at_revision: int | None = None) -> Call[t.SearchResponse]:
    """Search the chunks of the nodes the branch sees: vector KNN, BM25 or hybrid rank fusion."""
    return _call("POST", "/api/repos/{repo}/search", returns(t.SearchResponse), locals(), SEARCH_FIELDS)


def export(repo: str, *, branch: str | None = None, at_revision: int | None = None, with_chunks: bool | None = None,
           format: Literal["ndjson", "parquet"] | None = None) -> Call[bytes]:
    """A branch's content as one file of records (``kg-ndjson`` lines, or with ``format="parquet"``
    a ``kg-parquet`` file), as bytes; ``kg import`` reads it back."""
    return _call("GET", "/api/repos/{repo}/export", returns_bytes, locals())


def import_file(repo: str, data: bytes, *, branch: str | None = None,
                format: Literal["ndjson", "parquet"] | None = None, batch_size: int | None = None,
                create: bool | None = None, message: str | None = None) -> Call[t.NdjsonImport]:
    """Import a file of records (what :func:`export` answers: ``kg-ndjson`` bytes, or with
    ``format="parquet"`` a ``kg-parquet`` file) into ``branch``, as ``kg import`` does: every
    record checked first, nothing written on a refusal; one revision, or one per ``batch_size``
    records. ``create``: the repository and its missing workspaces (default true)."""
    query = {name: value for name, value in locals().items() if name != "data"}
    call = _call("POST", "/api/repos/{repo}/import", returns(t.NdjsonImport), query)
    return replace(call, content=bytes(data), content_type=MEDIA_TYPES[format or "ndjson"])


def index_status(repo: str) -> Call[t.IndexStatus]:
    """What the indexer has pending, running and failed for the repository."""
    return _call("GET", "/api/repos/{repo}/index/status", returns(t.IndexStatus), locals())


def retry_failed(repo: str) -> Call[t.IndexRetried]:
    """Embed the repository's failed texts again (admin)."""
    return _call("POST", "/api/repos/{repo}/index/retry-failed", returns(t.IndexRetried), locals())


# Relations


def relate(repo: str, from_: str, to: str, type: str, *, weight: float | None = None,
           properties: JSON | None = None, valid_from: datetime | None = None, valid_to: datetime | None = None,
           message: str | None = None, actor: str | None = None, branch: str | None = None) -> Call[t.Relation]:
    """Assert a typed, weighted edge ``from_ -> to`` (201 new, 200 re-asserted)."""
    return _call("POST", "/api/repos/{repo}/relations", returns(t.Relation), locals(), t.RelationCreate)


def unrelate(repo: str, from_: str, to: str, *, type: str | None = None, branch: str | None = None,
             message: str | None = None, actor: str | None = None) -> Call[t.RelationsDeleted]:
    """Remove the edges ``from_ -> to`` (of ``type``, or all types)."""
    return _call("DELETE", "/api/repos/{repo}/relations", returns(t.RelationsDeleted), locals())


def neighbors(repo: str, node: str, *, branch: str | None = None, at_revision: int | None = None,
              direction: Literal["OUT", "IN", "BOTH"] | None = None, type: str | list[str] | None = None,
              limit: int | None = None, as_of: datetime | None = None,
              include_invalid: bool | None = None) -> Call[t.NeighborList]:
    """The edges around ``node`` (``workspace:/path``), one hop, in a stable order."""
    return _call("GET", "/api/repos/{repo}/neighbors", returns(t.NeighborList), locals())


def traverse(repo: str, seeds: list[str], *, hops: int | None = None,
             direction: Literal["OUT", "IN", "BOTH"] | None = None, types: list[str] | None = None,
             max_nodes: int | None = None, fan_out: int | None = None, as_of: datetime | None = None,
             include_invalid: bool | None = None, branch: str | None = None,
             at_revision: int | None = None) -> Call[t.Traversal]:
    """Breadth-first walk from ``seeds``, bounded by ``hops``, ``max_nodes`` and ``fan_out``."""
    return _call("POST", "/api/repos/{repo}/traverse", returns(t.Traversal), locals(), t.TraverseBody)


def invalidate(repo: str, ws: str, from_: str, to: str, type: str, *, valid_to: datetime | None = None,
               invalidated_by: str | None = None, message: str | None = None, actor: str | None = None,
               branch: str | None = None) -> Call[t.Relation]:
    """Close a relation's validity at ``valid_to`` (default now)."""
    return _call("POST", "/api/repos/{repo}/workspaces/{ws}/relations/invalidate", returns(t.Relation), locals(),
                 t.RelationInvalidate)


def get_relation_types(repo: str, ws: str) -> Call[t.RelationTypes]:
    """The relation types declared single-valued in the workspace."""
    return _call("GET", "/api/repos/{repo}/workspaces/{ws}/relation-types", returns(t.RelationTypes), locals())


def put_relation_types(repo: str, ws: str, single_valued: list[str]) -> Call[t.RelationTypes]:
    """Declare the workspace's single-valued relation types (replaced whole; admin)."""
    return _call("PUT", "/api/repos/{repo}/workspaces/{ws}/relation-types", returns(t.RelationTypes), locals(),
                 t.RelationTypesPut)


# The RAG node, functions and jobs


def rag(config: JSON, input: Any, *, branch: str | None = None) -> Call[t.RagAnswer]:
    """The RAG node: ingest the input's file blocks, answer the context."""
    return _call("POST", "/api/rag", returns(t.RagAnswer), locals(), t.RagBody)


def sql(repo: str, branch: str, sql: str, *, params: list[Any] | None = None) -> Call[t.SqlResponse]:
    """Run ``;``-separated SQL statements on a branch (``$1``, ``$2``... bound to ``params``)."""
    return _call("POST", "/api/sql/{repo}/{branch}", returns(t.SqlResponse), locals(), t.SqlRequest)


def invoke_function(repo: str, name: str, input: JSON, *, branch: str | None = None,
                    wait_for_completion: bool | None = None) -> Call[t.FunctionOutput | t.JobAccepted]:
    """Invoke an agent function: its output (200), or with ``wait_for_completion=False`` the queued job (202)."""
    return _call("POST", "/api/functions/{repo}/{name}/invoke",
                 returns_by_status({202: t.JobAccepted}, t.FunctionOutput), locals(), t.InvokeBody)


def get_job(job_id: str) -> Call[t.Job]:
    """A function job's state and its output or error."""
    return _call("GET", "/api/jobs/{job_id}", returns(t.Job), locals())


# API keys


def create_key(name: str, *, grants: list[t.GrantBody | JSON] | None = None, admin: bool | None = None,
               expires_in_s: int | None = None) -> Call[t.ApiKeyCreated]:
    """Create an API key; its token (``key``) is in this answer only."""
    return _call("POST", "/api/keys", returns(t.ApiKeyCreated), locals(), t.KeyCreate)


def list_keys() -> Call[t.ApiKeyList]:
    """Every key, without secrets."""
    return _call("GET", "/api/keys", returns(t.ApiKeyList), locals())


def revoke_key(key_id: str) -> Call[t.ApiKeyInfo]:
    """Revoke a key."""
    return _call("DELETE", "/api/keys/{key_id}", returns(t.ApiKeyInfo), locals())


# The change feed and webhooks


def changes(repo: str, *, branch: str | None = None, after: str | None = None, limit: int | None = None,
            changes: int | None = None) -> Call[t.ChangePage]:
    """One JSON page of the repository's change feed after the cursor ``after`` (``iter_changes``:
    every event up to now, page by page)."""
    return _call("GET", "/api/repos/{repo}/changes", returns(t.ChangePage), locals())


def add_webhook(repo: str, *, url: str, branches: list[str] | None = None,
                events: list[str] | None = None) -> Call[t.WebhookCreated]:
    """Register a webhook; its signing ``secret`` is in this answer only."""
    return _call("POST", "/api/repos/{repo}/webhooks", returns(t.WebhookCreated), locals(), t.WebhookCreate)


def list_webhooks(repo: str) -> Call[t.WebhookList]:
    """The repository's webhooks, without their secrets."""
    return _call("GET", "/api/repos/{repo}/webhooks", returns(t.WebhookList), locals())


def remove_webhook(repo: str, webhook_id: str) -> Call[None]:
    """Delete a webhook and its delivery log."""
    return _call("DELETE", "/api/repos/{repo}/webhooks/{webhook_id}", returns_nothing, locals())


def webhook_deliveries(repo: str, webhook_id: str, *, limit: int | None = None) -> Call[t.DeliveryList]:
    """A webhook's delivery log, newest first."""
    return _call("GET", "/api/repos/{repo}/webhooks/{webhook_id}/deliveries", returns(t.DeliveryList), locals())
