"""The ``Services`` container: store, index, embedders and graph cache, built in one place.

``create_app(settings)`` and the CLI build one from :class:`kg.settings.Settings`; tests hand
their own (a fake embedder, a temporary data folder).

This module is the composition root: it builds the indexer (:mod:`kg.indexing`) and the
function-job runner (:mod:`kg.rag.function_jobs`), so it sits above the use-case layer, just
below the surfaces (``api``, :mod:`kg.cli`) that build it. Use cases receive it as the
:class:`kg.context.Resources` it implements and never import this module, so every arrow still
points down (``[tool.importlinter]`` in ``pyproject.toml``; ``tests/unit/test_layers.py``).
What runs after a write commits is the unit of work's business (:mod:`kg.context`), not this
container's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kg.access import KeyCache
from kg.delivery import WebhookWorker
from kg.errors import InvalidInput
from kg.graph.cache import GraphCache
from kg.index.base import SearchIndex
from kg.index.embedded import AnnConfig, EmbeddedVectorIndex
from kg.index.weaviate import ClientPool, WeaviateVectorIndex
from kg.indexing.indexer import Indexer
from kg.lru import LRUCache
from kg.providers.base import Embedder, Reranker
from kg.providers.llm import LLM, NoLLM
from kg.providers.registry import make_embedder, make_llm
from kg.providers.rerank import make_reranker
from kg.rag.function_jobs import JobRunner
from kg.ratelimit import RateLimiter
from kg.settings import Settings
from kg.store.db import Database
from kg.store.repos import ViewCache

__all__ = ["SEARCH_CACHE_NODES", "Services", "build_index"]

#: Nodes the cached searchable sets may hold together (a state at its head is held twice: as
#: itself and as its branch's last state); the newest is kept whatever it holds.
SEARCH_CACHE_NODES = 4_000_000


@dataclass
class Services:
    """Everything a request needs, shared by the whole process.

    Attributes
    ----------
    settings : Settings
    db : Database
    index : SearchIndex
        The configured engine (:mod:`kg.index.base`); callers use the protocol alone.
    embedder_factory : callable(str) -> Embedder
        Makes the embedder named ``<provider>:<model>``.
    graphs : GraphCache
    indexer : kg.indexing.indexer.Indexer
        Drains the queue of texts to embed.
    jobs : kg.rag.function_jobs.JobRunner
        Runs asynchronous function invocations.
    webhooks : kg.delivery.WebhookWorker
        Queues and delivers webhook events.
    reranker : Reranker or None
        The reranker of search (``KG_RERANK_MODEL``), None without one.
    views : kg.store.repos.ViewCache
        Branch views of the repositories read lately, checked against the database per read.
    weaviate_clients : kg.index.weaviate.ClientPool
        The RAG node's Weaviate connections, reused across requests.
    rate_limiter : kg.ratelimit.RateLimiter
    key_cache : kg.access.KeyCache
        Keys authenticated in the last ``KG_KEY_CACHE_S`` seconds.
        The token buckets of expensive calls (``KG_RATE_EXPENSIVE_*``), made from the settings
        (a test may replace it, with a clock of its own).
    """

    settings: Settings
    db: Database
    index: SearchIndex
    embedder_factory: Callable[[str], Embedder]
    graphs: GraphCache = field(default_factory=GraphCache)
    indexer: Indexer = field(init=False)
    jobs: JobRunner = field(init=False)
    webhooks: WebhookWorker = field(init=False)
    llm: LLM = field(default_factory=NoLLM)
    reranker: Reranker | None = None
    # Searchable sets of branch states, bounded by their nodes (a million-node state is ~100 MB).
    search_cache: LRUCache[Any] = field(default_factory=lambda: LRUCache(32, max_weight=SEARCH_CACHE_NODES, weigh=len))
    # Branch views (repository, branches, workspaces), checked by one read of the repository's row.
    views: ViewCache = field(default_factory=ViewCache)
    weaviate_clients: ClientPool = field(default_factory=ClientPool)
    rate_limiter: RateLimiter = field(init=False)
    key_cache: KeyCache = field(init=False)
    _embedders: dict[str, Embedder] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def from_settings(cls, settings: Settings) -> Services:
        """Build the services: the configured database and index (``KG_INDEX``)."""
        db = Database(settings.resolved_database_url(), busy_timeout_s=settings.sqlite_busy_timeout_s,
                      checkpoint=settings.sqlite_checkpoint)
        index = build_index(settings)
        graphs = GraphCache(settings.graph_max_edges, max_bytes=settings.graph_max_bytes,
                            max_views=settings.graph_max_views)
        return cls(settings=settings, db=db, index=index, graphs=graphs,
                   embedder_factory=lambda name: make_embedder(name, batch_size=settings.embed_batch_size,
                                                               local_batch_size=settings.embed_local_batch_size,
                                                               host=settings.ollama_host,
                                                               allow_fake=settings.allow_fake_embedder),
                   llm=make_llm(settings.llm_model, host=settings.ollama_host),
                   reranker=make_reranker(settings.rerank_model, host=settings.ollama_host,
                                          allow_fake=settings.allow_fake_embedder))

    def __post_init__(self) -> None:
        self.indexer = Indexer(self, poll_s=self.settings.index_poll_s,
                               step_chunks=self.settings.index_step_chunks)
        self.jobs = JobRunner(self, poll_s=self.settings.index_poll_s)
        self.webhooks = WebhookWorker(self, poll_s=self.settings.changes_poll_s)
        self.rate_limiter = RateLimiter(self.settings.rate_expensive_per_min, self.settings.rate_expensive_burst)
        self.key_cache = KeyCache(self.settings.key_cache_s)

    def embedder(self, name: str) -> Embedder:
        """The embedder called ``name``, made once per process."""
        with self._lock:
            embedder = self._embedders.get(name)
            if embedder is None:
                embedder = self.embedder_factory(name)
                self._embedders[name] = embedder
            return embedder

    def close(self) -> None:
        """Stop the indexer and the job runner (their queue claims go back), and release the
        database pool."""
        if self.indexer is not None:
            self.indexer.close()
        if self.jobs is not None:
            self.jobs.close()
        self.webhooks.close()
        self.graphs.join_builds(timeout_s=5.0)  # a view built in the background reads the database
        self.db.dispose()
        self.index.close()  # a remote index's connection
        self.weaviate_clients.close()  # the RAG node's Weaviate connections


def build_index(settings: Settings, kind: str | None = None) -> SearchIndex:
    """The search index ``kind`` (default ``settings.index``) configured by ``settings``.

    Parameters
    ----------
    settings : Settings
    kind : {"embedded", "weaviate"}, optional

    Returns
    -------
    SearchIndex
        :class:`~kg.index.embedded.EmbeddedVectorIndex` over ``settings.data_dir``, or
        :class:`~kg.index.weaviate.WeaviateVectorIndex`
        at ``settings.weaviate_url`` (which connects on first use).

    Raises
    ------
    kg.errors.InvalidInput
        An unknown kind, or ``weaviate`` without ``KG_WEAVIATE_URL``.
    kg.errors.BackendUnavailable
        ``weaviate`` without the ``kg[weaviate]`` extra: never a fallback to the embedded index.
    """
    kind = kind or settings.index
    if kind == "embedded":
        ann = AnnConfig(min_rows=settings.index_ann_min_rows, m=settings.index_ann_m,
                        ef_construction=settings.index_ann_ef_construction,
                        ef_search=settings.index_ann_ef_search,
                        background_rows=settings.index_ann_background_rows,
                        build_threads=settings.index_ann_build_threads)
        budget = settings.index_memory_budget_mb * 2**20 or None
        return EmbeddedVectorIndex(settings.data_dir, ann=ann, memory_budget_bytes=budget,
                                   flush_interval_s=settings.index_flush_interval_s)
    if kind == "weaviate":
        if not settings.weaviate_url:
            raise InvalidInput("the Weaviate index needs KG_WEAVIATE_URL (e.g. http://localhost:8080)")
        key = settings.weaviate_api_key.get_secret_value() if settings.weaviate_api_key else None
        return WeaviateVectorIndex(settings.weaviate_url, api_key=key,
                                   timeout_s=settings.weaviate_timeout_s)
    raise InvalidInput(f"unknown index {kind!r}: use embedded or weaviate", details={"index": kind})
