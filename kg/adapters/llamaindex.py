"""LlamaIndex over kg: :class:`KGRetriever`, a ``BaseRetriever`` over kg's search, through
:mod:`kg.client`.

Needs the ``llamaindex`` extra (``pip install 'kg[llamaindex]'``: llama-index-core). The
retriever uses no tokenizer and no NLTK data: nothing is downloaded (docs/guides/frameworks.md).
"""

from __future__ import annotations

from typing import Any

__all__ = ["KGRetriever", "node_with_score"]

try:
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
except ImportError as exc:  # pragma: no cover - exercised by simulating the missing package
    raise ImportError("kg.adapters.llamaindex needs llama-index-core: pip install 'kg[llamaindex]'") from exc

from kg.adapters.hits import MACHINE_KEYS, Hit, SearchOptions, asearch, search
from kg.client import AsyncClient, Client


def node_with_score(hit: Hit) -> NodeWithScore:
    """A LlamaIndex node of a hit: the passage as a ``TextNode`` (id ``<node_id>#<chunk_index>``,
    :func:`kg.adapters.hits.citation` as metadata, the ids and ranks hidden from the model's
    text) and the search's score."""
    hidden = [key for key in MACHINE_KEYS if key in hit.metadata]
    node = TextNode(id_=hit.id, text=hit.text, metadata=hit.metadata, excluded_llm_metadata_keys=hidden,
                    excluded_embed_metadata_keys=hidden)
    return NodeWithScore(node=node, score=hit.score)


class KGRetriever(BaseRetriever):
    """A LlamaIndex retriever over kg's search of one repository and branch.

    Nodes come in the order and with the scores of ``POST .../search``; each one's text is the
    passage and its metadata the citation handles (:func:`kg.adapters.hits.citation`).

    Parameters
    ----------
    repo : str
        The repository searched.
    client : kg.client.Client, optional
        Sends ``retrieve``.
    async_client : kg.client.AsyncClient, optional
        Sends ``aretrieve``; without it ``aretrieve`` uses the sync client. At least one of the two.
    **options
        The rest of :class:`kg.adapters.hits.SearchOptions`: branch, workspaces, k, mode,
        granularity, path_prefix, node_type, where, context, at_revision, titles.

    Raises
    ------
    kg.errors.KGError
        From ``retrieve`` / ``aretrieve``: the server's refusal (``NotFound``, ``Forbidden``,
        ``InvalidInput``...).
    """

    def __init__(self, repo: str, *, client: Client | None = None, async_client: AsyncClient | None = None,
                 **options: Any) -> None:
        if client is None and async_client is None:
            raise ValueError("KGRetriever needs a client or an async_client")
        self.options = SearchOptions(repo=repo, **options)
        self.client, self.async_client = client, async_client
        super().__init__()

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        if self.client is None:
            raise ValueError("KGRetriever has only an async_client: use aretrieve, or give it a client")
        return [node_with_score(hit) for hit in search(self.client, self.options, query_bundle.query_str)]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        if self.async_client is None:
            return self._retrieve(query_bundle)
        return [node_with_score(hit) for hit in await asearch(self.async_client, self.options, query_bundle.query_str)]
