"""What the framework retrievers share: the search options and the citation handles of a hit.

A retriever runs ``POST .../search`` through :class:`kg.client.Client` (or
:class:`kg.client.AsyncClient`) with :class:`SearchOptions`, and makes each result row a
:class:`Hit`: the passage's text, its score and its :func:`citation` metadata, in the search's
order. Neither framework is imported here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from kg.client import AsyncClient, Client
from kg.types import SearchResponse, SearchRow

__all__ = ["Hit", "MACHINE_KEYS", "SearchOptions", "asearch", "citation", "search"]

#: The metadata keys a language model does not need to read (ids, ranks, distances): the
#: LlamaIndex retriever leaves them out of the text it gives a model.
MACHINE_KEYS = ("repo", "branch", "node_id", "node_type", "chunk_index", "score", "vector_rank", "fulltext_rank",
                "vector_distance", "rerank_score", "at_revision", "context")


class SearchOptions(BaseModel):
    """Where a retriever searches and how: the fields of ``POST .../search`` it sends.

    Attributes
    ----------
    repo : str
        The repository searched.
    branch : str
        The branch read (default ``main``).
    workspaces : list of str, optional
        Only these workspaces (default: all).
    k : int
        Results (passages, or nodes at ``granularity="node"``), 1..1000.
    mode : {"hybrid", "vector", "fulltext"}
        Hybrid rank fusion of vector KNN and BM25, or one leg.
    granularity : {"chunk", "node"}
        One result per passage, or per node with its best passage.
    path_prefix : str, optional
        Only nodes under this path (whole segments).
    node_type : str, optional
        Only nodes of this type.
    where : dict, optional
        Node property conditions (a value, or operators ``$eq $ne $in $nin $gt $gte $lt $lte $exists``).
    context : dict, optional
        Graph context of each hit, the search's ``context``: ``{"parent": true, "siblings": 1,
        "order_by": null}`` attaches the hit's parent and its neighbouring siblings of its node
        type (metadata ``context``).
    at_revision : int, optional
        Read the branch as of this revision.
    titles : bool
        Put each hit's node ``title`` property in its metadata (the search's own ``title``: no
        node is read; off: ``title`` None).

    Notes
    -----
    The values are checked by the server, as any search request (a bad one raises
    :class:`kg.errors.InvalidInput`).
    """

    model_config = ConfigDict(extra="forbid")

    repo: str
    branch: str = "main"
    workspaces: list[str] | None = None
    k: int = 10
    mode: Literal["hybrid", "vector", "fulltext"] = "hybrid"
    granularity: Literal["chunk", "node"] = "chunk"
    path_prefix: str | None = None
    node_type: str | None = None
    where: dict[str, Any] | None = None
    context: dict[str, Any] | None = Field(default=None, description="The search's graph context: parent, "
                                                                      "siblings, order_by.")
    at_revision: int | None = None
    titles: bool = True

    def search_kwargs(self) -> dict[str, Any]:
        """The keywords of :meth:`kg.client.Client.search` after the repository and the query."""
        return {"branch": self.branch, "workspaces": self.workspaces, "k": self.k, "mode": self.mode,
                "granularity": self.granularity, "path_prefix": self.path_prefix, "node_type": self.node_type,
                "where": self.where, "context": self.context, "at_revision": self.at_revision}


@dataclass(frozen=True)
class Hit:
    """A search result as a retriever returns it.

    Attributes
    ----------
    id : str
        ``<node_id>#<chunk_index>``: the passage, stable across searches.
    text : str
        The passage (the chunk's text).
    score : float
        The search's score (rank fusion, one leg's, or the reranker's order).
    metadata : dict
        :func:`citation`.
    """

    id: str
    text: str
    score: float
    metadata: dict[str, Any]


def citation(row: SearchRow, options: SearchOptions) -> dict[str, Any]:
    """The citation handles of a search row.

    Parameters
    ----------
    row : kg.types.SearchRow
        One result of ``POST .../search``.
    options : SearchOptions
        The search's repository, branch and revision, and whether to cite the node's title.

    Returns
    -------
    dict
        ``repo``, ``branch``, ``at_revision`` (None: the head), ``workspace``, ``path``,
        ``node_id``, ``node_type``, ``chunk_index``, ``title``, ``score``, the legs' ranks
        ``vector_rank`` / ``fulltext_rank`` (None: that leg did not rank it),
        ``vector_distance``, ``rerank_score`` (reranked searches) and ``context`` (searches with
        graph context: ``parent``, ``before``, ``after`` as the API answers them).
    """
    out: dict[str, Any] = {
        "repo": options.repo, "branch": options.branch, "at_revision": options.at_revision,
        "workspace": row.workspace, "path": row.path, "node_id": row.node_id, "node_type": row.node_type,
        "chunk_index": row.chunk_index, "title": row.title if options.titles else None, "score": row.score,
        "vector_rank": row.vector_rank, "fulltext_rank": row.fulltext_rank, "vector_distance": row.vector_distance}
    if "rerank_score" in row.model_fields_set:
        out["rerank_score"] = row.rerank_score
    if "context" in row.model_fields_set:
        out["context"] = row.context.model_dump(mode="json", exclude_unset=True)
    return out


def _hits(answer: SearchResponse, options: SearchOptions) -> list[Hit]:
    return [Hit(f"{row.node_id}#{row.chunk_index}", row.chunk_text, float(row.score), citation(row, options))
            for row in answer.results]


def search(client: Client, options: SearchOptions, query: str) -> list[Hit]:
    """Search through ``client`` and answer the hits in the search's order.

    Raises
    ------
    kg.errors.KGError
        The server's refusal (``NotFound``, ``Forbidden``, ``InvalidInput``...).
    """
    return _hits(client.search(options.repo, query, **options.search_kwargs()), options)


async def asearch(client: AsyncClient, options: SearchOptions, query: str) -> list[Hit]:
    """:func:`search` through an :class:`kg.client.AsyncClient`."""
    return _hits(await client.search(options.repo, query, **options.search_kwargs()), options)
