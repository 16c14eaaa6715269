"""The Weaviate search index, :class:`WeaviateVectorIndex`: a :class:`~kg.index.base.SearchIndex`.

Catch-up and placement (writes), searches (KNN, BM25 of passages, BM25F of node texts, Weaviate's own hybrid
query), the placement marks and the drops; :mod:`kg.index.weaviate` describes the layout and
the strategy for large allowed sets.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from kg.errors import BackendUnavailable, InvalidInput
from kg.index.base import (
    ChunkFeed,
    CollectionScope,
    HybridResult,
    IndexedChunk,
    IndexHit,
    Placement,
    SearchScope,
    checked_vectors,
    query_vector,
)
from kg.index.tokenize import analyze
from kg.index.weaviate.client import connect, parse_weaviate_url
from kg.index.weaviate.errors import import_weaviate, vendor_errors
from kg.index.weaviate.filters import translate_filters
from kg.index.weaviate.objects import check_vector_dimension, insert_objects, object_id, property_pair
from kg.index.weaviate.ranking import (
    _RETURNED,
    MAX_QUERY_RESULTS,
    _complete,
    _distinct,
    _hits,
    _merged,
    _Row,
    _row,
    _sorted,
)
from kg.index.weaviate.schema import (
    _STATE_SCHEMA,
    STATE_COLLECTION,
    _chunks_prefix,
    _chunks_schema,
    _description,
    _docs_name,
    _docs_prefix,
    _docs_schema,
    _legacy_watermark_id,
    _placement_state_ids,
    _short_hash,
    _terms_property_definition,
    terms_property,
)
from kg.providers.registry import canonical_model_name

__all__ = ["FUSION_TYPES", "WeaviateVectorIndex"]

log = logging.getLogger(__name__)


FUSION_TYPES: dict[str, str] = {"ranked": "RANKED", "relative_score": "RELATIVE_SCORE"}
"""kg's names of Weaviate's hybrid fusion types -> members of ``HybridFusion``."""

_INSERT_BATCH = 256

_DOC_RETURNED = ["contentKey", "chunkIndex", "seq", "versionKey"]
"""The properties a documents search returns."""

_BOOST_DENOMINATOR = 1000
"""Field weights are sent as integer boosts (Weaviate before 1.38 parses ``prop^w`` as an int):
each weight is rounded to a fraction of at most this denominator, and all are scaled by one
common factor."""


@dataclass(frozen=True, slots=True)
class _Held:
    """One chunks collection of a repository: the one of a (workspace, branch) and model."""

    name: str
    model: str
    dim: int
    workspace_id: int
    branch_id: int


class WeaviateVectorIndex:
    """The :class:`~kg.index.base.SearchIndex` contract over a Weaviate server: a collection per
    (workspace, branch) and model, searched through a scope's
    :attr:`~kg.index.base.SearchScope.collections`, filled by :meth:`catch_up` (:meth:`place`
    of the node versions written or re-pointed since the placement marks).

    Parameters
    ----------
    url : str
        The server, ``http://host:8080`` (see :func:`parse_weaviate_url`).
    api_key : str, optional
        Empty for an unauthenticated instance.
    timeout_s, init_timeout_s : float
        Query and connection-check timeouts, in seconds.
    client : weaviate.WeaviateClient, optional
        A connected client to use instead of connecting to ``url`` (tests); not closed by
        :meth:`close`.
    filter_batch_keys : int
        Most version keys in one ``ContainsAny`` filter (see the package notes).
    probe_depth : int
        Depth of the unfiltered probe query for large allowed sets.

    Notes
    -----
    Raises ``BackendUnavailable`` here when the ``weaviate`` extra is not installed, and from
    every call that reaches the server when it is unreachable or fails (contacted on first use).
    Thread-safe: one client, created on first use under a lock. Several processes may share a
    server: writes are idempotent (deterministic ids) and the placement marks only ever lag.
    """

    engine = "weaviate"
    native_hybrid = True  # Weaviate's own hybrid query (:meth:`hybrid`)
    eager_catch_up = True  # placing costs round trips: the indexer places right after storing

    def __init__(
        self,
        url: str | None = None,
        *,
        api_key: str | None = None,
        timeout_s: float = 30.0,
        init_timeout_s: float = 5.0,
        client: Any = None,
        filter_batch_keys: int = 1000,
        probe_depth: int = 1000,
    ) -> None:
        import_weaviate()
        if client is None and not url:
            raise InvalidInput("WeaviateVectorIndex needs a URL (KG_WEAVIATE_URL) or a client")
        if url:
            parse_weaviate_url(url)  # a malformed URL fails at start-up, not on first search
        self.url = url
        self._api_key = api_key or None
        self.timeout_s = timeout_s
        self.init_timeout_s = init_timeout_s
        self.filter_batch_keys = max(1, int(filter_batch_keys))
        self.probe_depth = max(1, min(int(probe_depth), MAX_QUERY_RESULTS))
        self._client = client
        self._owns_client = client is None
        self._lock = threading.Lock()

    # -- connection --------------------------------------------------------------------------

    @property
    def client(self) -> Any:
        """The connected client (connects on first use)."""
        if self._client is None:
            with self._lock:
                if self._client is None:
                    self._client = connect(
                        self.url or "", api_key=self._api_key, timeout_s=self.timeout_s,
                        init_timeout_s=self.init_timeout_s,
                    )
        return self._client

    def close(self) -> None:
        """Close the connection this index opened (a client handed in is left open)."""
        with self._lock:
            if self._client is not None and self._owns_client:
                try:
                    self._client.close()
                finally:
                    self._client = None

    # -- searches ------------------------------------------------------------------------------

    def knn(
        self,
        repo_key: str,
        vector: np.ndarray,
        k: int,
        *,
        model: str,
        scope: SearchScope,
        max_distance: float | None = None,
    ) -> list[IndexHit]:
        """Top ``k`` chunks of ``model`` by cosine similarity among the versions the scope's
        collections allow (:meth:`kg.index.base.SearchIndex.knn`).

        Each of the scope's collections of ``model`` is filtered by its version keys (and its
        ``filters``; see the package notes for large sets); a chunk held by several collections
        is returned once; a collection not created yet finds nothing. Raises
        ``BackendUnavailable`` when Weaviate is unreachable or failed (so do all searches).

        Notes
        -----
        Weaviate's ``nearVector`` over its HNSW index; with a filter that leaves fewer objects
        than the collection's ``flatSearchCutoff`` (40,000 by default) Weaviate scans them
        exactly, otherwise HNSW is approximate. Merging several collections by distance is
        exact.
        """
        query = query_vector(vector)
        if max_distance is not None and math.isnan(max_distance):
            raise InvalidInput("max_distance must be a number", details={"max_distance": None})
        targets = self._targets(repo_key, scope.collections, {model})
        if not targets:
            return []
        for held, _, _ in targets:
            check_vector_dimension(query, held.dim, what=f"model {model!r}")
        if k <= 0 or (max_distance is not None and max_distance < 0):
            return []
        from weaviate.classes.query import MetadataQuery

        # Weaviate compares in float32: ask with a hair of slack and cut exactly here.
        threshold = None if max_distance is None else float(max_distance) + 1e-6
        rows: list[_Row] = []
        for held, keys, base in targets:
            collection = self.client.collections.get(held.name)

            def run(filters: Any, limit: int, collection: Any = collection, held: _Held = held) -> list[_Row]:
                with vendor_errors(f"search {held.name} by vector"):
                    answer = collection.query.near_vector(
                        near_vector=query.tolist(), limit=limit, distance=threshold, filters=filters,
                        return_metadata=MetadataQuery(distance=True), return_properties=_RETURNED,
                    )
                out = []
                for obj in answer.objects:
                    distance = float(obj.metadata.distance)
                    out.append(_row(obj, 1.0 - distance, max(0.0, distance)))
                return out

            rows.extend(self._ranked(self._unless_dropped(run, held), k, keys, base=base))
        rows = _merged(rows)
        if max_distance is not None:
            rows = [r for r in rows if r.distance is not None and r.distance <= max_distance]
        return _hits(rows[:k])

    def bm25(
        self,
        repo_key: str,
        query: str,
        k: int,
        *,
        scope: SearchScope,
    ) -> list[IndexHit]:
        """Top ``k`` chunks by BM25 among the versions the scope's collections allow, every
        model's (filtered as :meth:`knn` filters).

        Notes
        -----
        Weaviate's BM25F over ``terms`` (k1 1.2, b 0.75, statistics of the whole collection).
        Hits of several collections (one per workspace, branch and model) are merged by score,
        each scored with its own collection's statistics, as a sharded engine scores each shard
        with its own (Elasticsearch's default ``query_then_fetch``).

        References
        ----------
        .. [1] S. Robertson and H. Zaragoza, "The Probabilistic Relevance Framework: BM25 and
           Beyond", Foundations and Trends in Information Retrieval 3(4), 2009, pp. 333-389.
        """
        terms = analyze(query) if isinstance(query, str) else []
        if k <= 0 or not terms:
            return []
        from weaviate.classes.query import MetadataQuery

        text = " ".join(terms)
        rows: list[_Row] = []
        for held, keys, base in self._targets(repo_key, scope.collections, None):
            collection = self.client.collections.get(held.name)

            def run(filters: Any, limit: int, collection: Any = collection, held: _Held = held) -> list[_Row]:
                with vendor_errors(f"search {held.name} by BM25"):
                    answer = collection.query.bm25(
                        query=text, query_properties=["terms"], limit=limit, filters=filters,
                        return_metadata=MetadataQuery(score=True), return_properties=_RETURNED,
                    )
                return [_row(obj, float(obj.metadata.score or 0.0), None) for obj in answer.objects]

            rows.extend(self._ranked(self._unless_dropped(run, held), k, keys, base=base))
        rows = [r for r in _merged(rows) if r.score > 0]
        return _hits(rows[:k])

    def bm25_documents(
        self,
        repo_key: str,
        query: str,
        k: int,
        *,
        scope: SearchScope,
        field_weights: Mapping[str, float] | None = None,
    ) -> list[IndexHit]:
        """Top ``k`` node texts (content keys) by Weaviate's BM25F over all their fields, each
        carrying its best passage (:meth:`kg.index.base.SearchIndex.bm25_documents`).

        Searches the documents collections beside the scope's chunks collections (every model),
        filtered as :meth:`bm25` filters; a field of weight 0 is not searched. Ties by ``seq``
        of the key's first chunk; the best passage is the one with the best passage-level BM25
        among the key's chunks in the collection that scored it (the lowest seq on a tie).

        Notes
        -----
        One BM25 query per documents collection with ``query_properties``
        ``["terms_<field>^<boost>", ...]``: Weaviate's BM25F [2]_ over the fields, with the
        statistics of the whole collection. Which BM25F depends on the server: from 1.30
        (BlockMax WAND) each field is scored with its own length normalisation and the
        boosted field scores are summed; before, the WAND searcher sums the boosted term
        frequencies and normalises by the summed lengths of the fields holding the term.
        Neither is the simple BM25F of Robertson and Zaragoza [1]_ that the embedded index
        computes (one saturation over the per-field normalised frequencies, statistics over
        the visible set), so the two rank alike but not always identically. Weights go out as
        integer boosts (every weight rounded to a fraction of denominator <= 1000, all scaled
        by the least common denominator; scores are divided back), as Weaviate before 1.38
        reads ``^1.5`` as a boost of 0: the ranking is exactly the weights' under BlockMax
        WAND, whose score is linear in the boosts.

        The best passage of each of the top ``k`` keys is a second BM25 query on the chunks
        collection, filtered to those keys' version keys (deepened until each key's best
        passage is certain). A scope whose (workspace, branch) was placed by an earlier kg
        has no documents collection until ``kg reindex``: its nodes are ranked there by their
        best passage (:meth:`bm25`'s score) meanwhile. Hits of several collections are merged
        by score, each scored with its own collection's statistics.

        References
        ----------
        .. [1] S. Robertson and H. Zaragoza, "The Probabilistic Relevance Framework: BM25 and
           Beyond", Foundations and Trends in Information Retrieval 3(4), 2009, section 3.7.
        .. [2] Weaviate, "Keyword (BM25) search": ``query_properties`` with ``property^boost``,
           https://weaviate.io/developers/weaviate/search/bm25 ; the searchers in
           weaviate/weaviate ``adapters/repos/db/inverted/bm25_searcher.go`` and
           ``bm25_searcher_block.go``.
        """
        weights = _checked_weights(field_weights)
        terms = analyze(query) if isinstance(query, str) else []
        if k <= 0 or not terms:
            return []
        from weaviate.classes.query import MetadataQuery

        text = " ".join(terms)
        docs = self._docs_collections(repo_key)
        found: list[tuple[_Row, _Held]] = []
        for held, keys, base in self._targets(repo_key, scope.collections, None):
            fields = docs.get(_docs_name(held.name))
            if fields is None:
                found.extend((row, held) for row in self._passage_documents(text, held, keys, base, k))
                continue
            boosts, scale = _integer_boosts({prop: weights.get(field, 1.0) for prop, field in fields.items()})
            searched = [f"{prop}^{boost}" for prop, boost in sorted(boosts.items()) if boost > 0]
            if not searched:
                continue
            target = dataclasses.replace(held, name=_docs_name(held.name))
            collection = self.client.collections.get(target.name)

            def run(filters: Any, limit: int, collection: Any = collection, target: _Held = target,
                    searched: list[str] = searched, scale: int = scale) -> list[_Row]:
                with vendor_errors(f"search {target.name} by BM25F"):
                    answer = collection.query.bm25(
                        query=text, query_properties=searched, limit=limit, filters=filters,
                        return_metadata=MetadataQuery(score=True), return_properties=_DOC_RETURNED,
                    )
                return [_row(obj, float(obj.metadata.score or 0.0) / scale, None) for obj in answer.objects]

            found.extend((row, held) for row in self._ranked(self._unless_dropped(run, target), k, keys, base=base))
        # One hit per content key (shown by several nodes, or held by several collections), at
        # its best score.
        best: dict[str, tuple[_Row, _Held]] = {}
        for row, held in found:
            held_row = best.get(row.content_key)
            if row.score > 0 and (held_row is None or row.score > held_row[0].score):
                best[row.content_key] = (row, held)
        top = sorted(best.values(), key=lambda t: (-t[0].score, t[0].seq))[:k]
        by_collection: dict[str, tuple[_Held, list[str]]] = {}
        for row, held in top:
            by_collection.setdefault(held.name, (held, []))[1].append(row.key)
        passages: dict[tuple[str, str], _Row] = {}
        for held, keys in by_collection.values():
            for key, found_passage in self._best_passages(text, held, keys).items():
                passages[held.name, key] = found_passage
        hits = []
        for rank, (row, held) in enumerate(top, start=1):
            # Without a passage holding a term (its chunks collection dropped meanwhile), the
            # document row stands for itself.
            passage = passages.get((held.name, row.key), row)
            hits.append(IndexHit(passage.seq, row.content_key, passage.chunk_index, passage.text,
                                 row.score, rank, None))
        return hits

    def hybrid(
        self,
        repo_key: str,
        query: str,
        vector: np.ndarray,
        k: int,
        *,
        model: str,
        scope: SearchScope,
        alpha: float = 0.5,
        fusion_type: str = "ranked",
        max_vector_distance: float | None = None,
    ) -> HybridResult:
        """Top ``k`` chunks by Weaviate's own hybrid query (BM25 and vector, fused in Weaviate)
        over the scope's collections of ``model``.

        ``alpha`` is always sent (never Weaviate's default); ``fusion_type`` is Weaviate's
        ``rankedFusion`` (reciprocal rank fusion) or ``relativeScoreFusion``;
        ``max_vector_distance`` bounds the vector leg only. Raises ``InvalidInput`` for an
        ``alpha`` outside [0, 1], an unknown fusion type or a bad query vector.

        Notes
        -----
        One query per collection (fused scores depend on the filtered set, package notes);
        several collections' answers are merged by fused score, which is Weaviate's exact
        answer only when one collection holds everything searched (``main``, or a branch
        that wrote nothing in the searched workspaces).

        References
        ----------
        .. [1] G. V. Cormack, C. L. A. Clarke and S. Buettcher, "Reciprocal rank fusion
           outperforms Condorcet and individual rank learning methods", SIGIR 2009.
        """
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 <= alpha <= 1:
            raise InvalidInput("alpha must be a number from 0 to 1", details={"alpha": repr(alpha)})
        if fusion_type not in FUSION_TYPES:
            raise InvalidInput(
                f"unknown fusion type {fusion_type!r}: use {' or '.join(FUSION_TYPES)}",
                details={"fusion_type": fusion_type},
            )
        if max_vector_distance is not None and not (
                isinstance(max_vector_distance, (int, float)) and math.isfinite(max_vector_distance)):
            raise InvalidInput("max_vector_distance must be a finite number",
                               details={"max_vector_distance": repr(max_vector_distance)})
        unit = query_vector(vector)
        result = HybridResult([], float(alpha), fusion_type)
        targets = self._targets(repo_key, scope.collections, {model})
        if not targets:
            return result
        for held, _, _ in targets:
            check_vector_dimension(unit, held.dim, what=f"model {model!r}")
        if k <= 0:
            return result
        from weaviate.classes.query import Filter, HybridFusion, MetadataQuery

        terms = analyze(query) if isinstance(query, str) else []
        fusion = getattr(HybridFusion, FUSION_TYPES[fusion_type])
        rows: list[_Row] = []
        for held, keys, base in targets:
            collection = self.client.collections.get(held.name)

            def run(filters: Any, limit: int, collection: Any = collection, held: _Held = held) -> list[_Row]:
                with vendor_errors(f"search {held.name} by hybrid query"):
                    answer = collection.query.hybrid(
                        query=" ".join(terms) if terms else None, vector=unit.tolist(),
                        alpha=float(alpha), fusion_type=fusion, query_properties=["terms"],
                        max_vector_distance=None if max_vector_distance is None else float(max_vector_distance),
                        limit=limit, filters=filters, return_metadata=MetadataQuery(score=True),
                        return_properties=_RETURNED,
                    )
                return [_row(obj, float(obj.metadata.score or 0.0), None) for obj in answer.objects]

            # One query over every allowed key: fused scores depend on the filtered set.
            filters = self._any_key_filter(keys)
            if base is not None:
                filters = Filter.all_of([base, filters])
            rows.extend(_complete(self._unless_dropped(run, held), filters, k))
        return HybridResult(_hits(_merged(rows)[:k]), float(alpha), fusion_type)

    def flush(self, repo_key: str) -> None:
        """Nothing to do: Weaviate persists every acknowledged write."""

    def drop(self, repo_key: str) -> None:
        """Delete every collection of the repository and its marks (also those an earlier kg's
        shared layout left, see the package notes); an unknown repository is a no-op.
        """
        held, legacy = self._listed(repo_key)
        names = [h.name for h in held] + legacy
        names += sorted(set(self._docs_collections(repo_key)) | {_docs_name(h.name) for h in held})
        with vendor_errors(f"drop the collections of repository {repo_key!r}"):
            if names:
                self.client.collections.delete(names)
            if self.client.collections.exists(STATE_COLLECTION):
                state = self.client.collections.get(STATE_COLLECTION)
                for uid in (_legacy_watermark_id(repo_key), *_placement_state_ids(repo_key)):
                    state.data.delete_by_id(uid)

    def drop_branch(self, repo_key: str, branch_id: int) -> list[str]:
        """Delete the collections of one branch (every workspace and model; chunks and documents),
        after SQL deleted the branch: its id is never reused. Returns the chunks collections'
        names.
        """
        names = [h.name for h in self._collections(repo_key) if h.branch_id == branch_id]
        if names:
            with vendor_errors(f"drop the collections of branch {branch_id}"):
                self.client.collections.delete(names + [_docs_name(n) for n in names])
        return names

    def drop_workspace_model(self, repo_key: str, workspace_id: int, model: str) -> list[str]:
        """Delete a workspace's collections of one model (every branch), once a re-embed made another
        model current; models compare by canonical name (``nomic-embed-text`` is
        ``ollama:nomic-embed-text:latest``). Returns the chunks collections' names.
        """
        wanted = canonical_model_name(model)
        names = [h.name for h in self._collections(repo_key)
                 if h.workspace_id == workspace_id and canonical_model_name(h.model) == wanted]
        if names:
            with vendor_errors(f"drop the {model!r} collections of workspace {workspace_id}"):
                self.client.collections.delete(names + [_docs_name(n) for n in names])
        return names

    def held_in_memory(self) -> tuple[int, int] | None:
        return None  # the vectors live in Weaviate

    def stats(self, repo_key: str) -> dict[str, Any]:
        """``{"chunks", "models": {model: objects}, "dims": {model: dim}, "placed": {"seq",
        "version"}, "collections": [{"name", "model", "workspace_id", "branch_id", "objects"}]}``.
        """
        counts: dict[str, int] = {}
        dims: dict[str, int] = {}
        listed = []
        for h in self._collections(repo_key):
            with vendor_errors(f"count the objects of {h.name}"):
                n = int(self.client.collections.get(h.name).aggregate.over_all(total_count=True).total_count
                        or 0)
            counts[h.model] = counts.get(h.model, 0) + n
            dims[h.model] = h.dim
            listed.append({"name": h.name, "model": h.model, "workspace_id": h.workspace_id,
                           "branch_id": h.branch_id, "objects": n})
        seq, version = self.placement_marks(repo_key)
        return {
            "chunks": sum(counts.values()),
            "models": counts,
            "dims": dims,
            "placed": {"seq": seq, "version": version},
            "collections": listed,
        }

    # -- catch-up and placement -------------------------------------------------------------------

    def catch_up_later(self, repo_key: str, open_feed: Callable[[], AbstractContextManager[ChunkFeed]]) -> None:
        """:meth:`catch_up` now (the indexer already catches a remote index up eagerly)."""
        with open_feed() as feed:
            self.catch_up(repo_key, feed)

    def catch_up(self, repo_key: str, feed: ChunkFeed) -> int:
        """Place every live node version's chunks in the collection of its (workspace, branch),
        from the placement marks on; returns the objects written.

        Raises
        ------
        kg.errors.BackendUnavailable
            Weaviate failed; the marks stay where they were and the next call redoes the work
            (placement is idempotent).

        Notes
        -----
        Two feeds (:class:`~kg.index.base.ChunkFeed`): node versions of revisions above the
        revision mark (writes, merges) whose chunks exist; and for chunks above the seq mark
        (embedded by the queue after their version was written, or by a re-embed that
        re-pointed versions in place) every version of a revision at or below the revision
        mark that points at their content keys. The marks advance to the heads read at the
        start, once all of it is placed; a call with nothing new reads two numbers. Tombstones
        and versions without text place nothing: the version keys of the searched branch
        state, decided in SQL, hide whatever they replaced. Collections of branches (or the
        whole repository) deleted in SQL meanwhile are dropped after placing, as their own
        drop may have run before this pass created them.
        """
        seq_mark, revision_mark = self.placement_marks(repo_key)
        top_seq, top_revision = feed.heads()
        if (top_seq, top_revision) == (seq_mark, revision_mark):
            return 0
        placed, placed_in = 0, set[int]()
        batches = [feed.versions(revision_mark, top_revision)]
        if top_seq > seq_mark and revision_mark > 0:
            batches.append(feed.versions_of_chunks(seq_mark, top_seq, revision_mark))
        for source in batches:
            for placements in source:
                placed_in.update(p.branch_id for p in placements)
                placed += self.place(repo_key, placements) if placements else 0
        if placed_in:
            gone = feed.deleted_branches(placed_in)
            if gone is None:
                self.drop(repo_key)
                return placed
            for branch_id in sorted(gone):
                self.drop_branch(repo_key, branch_id)
        self.advance_placement_marks(repo_key, max(top_seq, seq_mark), max(top_revision, revision_mark))
        return placed

    def rewind(self, repo_key: str, seq: int) -> bool:
        """:meth:`rewind_placement` to ``seq``: the re-pointed versions are placed again by the
        next :meth:`catch_up`, which a search needs (True)."""
        self.rewind_placement(repo_key, seq)
        return True

    def place(self, repo_key: str, placements: Sequence[Placement]) -> int:
        """Store node versions' chunks in the collections of their (workspace, branch): the objects
        written.

        ``placements`` are in version order: a later placement of the same node and content key
        overwrites an earlier one. A bad vector, or chunks of one placement from several content
        keys or models, raise ``InvalidInput`` for the whole call before anything is sent.

        Notes
        -----
        A collection is created on the first placement of its (workspace, branch, model):
        a new branch has none until it writes, and reads its ancestors' (the caller's
        scopes). Object ids are :func:`object_id` of ``(repo_key + "/w" + workspace_id,
        "b" + branch_id, version_key, chunk_index, model)``. Each version also gets one
        document object (for :meth:`bm25_documents`) in the documents collection beside its
        chunks collection, created with it, of id :func:`object_id` ``(..., version_key, -1,
        model)``; a field new to the collection adds its ``terms_<field>`` property first.
        The documents collection is created just before its chunks collection, so a chunks
        collection without one is an earlier kg's: its versions get no document objects
        (their nodes rank by their best passage) until ``kg reindex`` places them afresh. The
        document is written after the version's chunks, so a failed call leaves at worst
        chunks without a document, which the caller's redo completes (deterministic ids make it
        overwrite).
        """
        todo = [p for p in placements if p.chunks]
        if not todo:
            return 0
        unique: dict[int, IndexedChunk] = {}
        for p in todo:
            first = p.chunks[0]
            if any(c.content_key != first.content_key or c.model != first.model for c in p.chunks):
                raise InvalidInput(f"placement of node {p.node_id!r} mixes content keys or models",
                                   details={"node_id": p.node_id})
            for c in p.chunks:
                unique.setdefault(c.seq, c)
        chunks = list(unique.values())
        held = {(h.model, h.workspace_id, h.branch_id): h for h in self._collections(repo_key)}
        docs = self._docs_collections(repo_key)
        dims = {h.model: h.dim for h in held.values()}
        matrices = checked_vectors(chunks, dims)
        row_of: dict[int, np.ndarray] = {}
        positions: dict[str, int] = {}
        for c in chunks:
            i = positions.get(c.model, 0)
            row_of[c.seq] = matrices[c.model][i]
            positions[c.model] = i + 1
        groups: dict[tuple[str, int, int], list[Placement]] = {}
        for p in todo:
            groups.setdefault((p.chunks[0].model, p.workspace_id, p.branch_id), []).append(p)
        from weaviate.classes.data import DataObject

        written = 0
        for (model, wid, bid), members in groups.items():
            target = held.get((model, wid, bid))
            dim = len(row_of[members[0].chunks[0].seq])
            if target is None:
                # The documents collection first: a chunks collection without one beside it
                # is then always an earlier kg's (see bm25_documents), never a crash's.
                name = _chunks_prefix(repo_key) + _short_hash(model, 10) + f"_w{wid}_b{bid}"
                self._ensure_docs_collection(repo_key, _Held(name, model, dim, wid, bid), docs, ())
                target = self._create_chunks_collection(repo_key, model, dim, scope=(wid, bid))
            check_vector_dimension(np.zeros(dim), target.dim, what=target.name)
            collection = self.client.collections.get(target.name)
            # Last placement of a (node, key) wins: its path and properties are the newest.
            latest: dict[str, Placement] = {}
            for p in members:
                latest.pop(p.version_key, None)
                latest[p.version_key] = p
            objects, labels = [], []
            for p in latest.values():
                props = sorted({pair for name, value in (p.properties or {}).items()
                                if (pair := property_pair(str(name), value)) is not None})
                for c in p.chunks:
                    objects.append(DataObject(
                        properties={
                            "content": c.text, "terms": " ".join(analyze(c.text)),
                            "contentKey": c.content_key, "chunkIndex": c.chunk_index, "seq": c.seq,
                            "versionKey": p.version_key, "nodeId": p.node_id, "path": p.path,
                            "nodeType": p.node_type, "props": props,
                        },
                        uuid=object_id(f"{repo_key}/w{wid}", f"b{bid}", p.version_key,
                                       c.chunk_index, model),
                        vector=row_of[c.seq].tolist(),
                    ))
                    labels.append(f"node {p.node_id} chunk {c.chunk_index}")
            for start in range(0, len(objects), _INSERT_BATCH):
                insert_objects(collection, objects[start : start + _INSERT_BATCH],
                               labels[start : start + _INSERT_BATCH])
            written += len(objects)
            if _docs_name(target.name) in docs:
                self._place_documents(repo_key, target, list(latest.values()), docs)
            else:  # an earlier kg's collection: its nodes rank by their best passage until a reindex
                log.debug("no documents collection beside %s: node-level BM25F waits for a reindex",
                          target.name)
        return written

    def _place_documents(self, repo_key: str, held: _Held, placements: list[Placement],
                         docs: dict[str, dict[str, str]]) -> None:
        """Write one document object per placement into the documents collection beside
        ``held``: a ``terms_<field>`` property per field (its chunks' terms, in chunk order),
        the first chunk's seq and the version's key, path, type and property pairs."""
        from weaviate.classes.data import DataObject

        fields = {c.field for p in placements for c in p.chunks}
        self._ensure_docs_collection(repo_key, held, docs, fields)
        collection = self.client.collections.get(_docs_name(held.name))
        objects, labels = [], []
        for p in placements:
            by_field: dict[str, list[str]] = {}
            for c in sorted(p.chunks, key=lambda c: c.chunk_index):
                by_field.setdefault(c.field, []).extend(analyze(c.text))
            first = min(p.chunks, key=lambda c: c.chunk_index)
            props: dict[str, Any] = {terms_property(field): " ".join(words) for field, words in by_field.items()}
            props.update({
                "contentKey": first.content_key, "chunkIndex": first.chunk_index, "seq": first.seq,
                "versionKey": p.version_key, "nodeId": p.node_id, "path": p.path, "nodeType": p.node_type,
                "props": sorted({pair for name, value in (p.properties or {}).items()
                                 if (pair := property_pair(str(name), value)) is not None}),
                "fields": sorted(by_field),
            })
            objects.append(DataObject(properties=props, uuid=object_id(
                f"{repo_key}/w{held.workspace_id}", f"b{held.branch_id}", p.version_key, -1, held.model)))
            labels.append(f"node {p.node_id} document")
        for start in range(0, len(objects), _INSERT_BATCH):
            insert_objects(collection, objects[start : start + _INSERT_BATCH], labels[start : start + _INSERT_BATCH])

    def placement_marks(self, repo_key: str) -> tuple[int, int]:
        """How far :meth:`place` has been fed from SQL: (chunk seq, revision), both 0 at first."""
        marks = []
        with vendor_errors("read the index placement marks"):
            exists = self.client.collections.exists(STATE_COLLECTION)
            for uid in _placement_state_ids(repo_key):
                obj = (self.client.collections.get(STATE_COLLECTION).query.fetch_object_by_id(uid)
                       if exists else None)
                marks.append(0 if obj is None else int(obj.properties.get("watermark") or 0))
        return marks[0], marks[1]

    def advance_placement_marks(self, repo_key: str, seq: int, version: int) -> None:
        """Store the placement marks: chunks with seq ``<= seq`` and node versions of revisions
        ``<= version`` are placed (or lower marks, to place again: :meth:`rewind_placement`).
        """
        from weaviate.classes.data import DataObject

        self._ensure_state_collection()
        objects = [DataObject(properties={"repoKey": repo_key, "watermark": int(mark)}, uuid=uid)
                   for uid, mark in zip(_placement_state_ids(repo_key), (seq, version), strict=True)]
        insert_objects(self.client.collections.get(STATE_COLLECTION), objects,
                       [f"placed seq of {repo_key!r}", f"placed version of {repo_key!r}"])

    def rewind_placement(self, repo_key: str, seq: int) -> None:
        """Lower the placed-seq mark to ``seq``, so the next pass places again every version
        pointing at chunks above it (a re-embed re-points versions at chunks that may have
        been fed before any version pointed at them).
        """
        placed_seq, placed_revision = self.placement_marks(repo_key)
        if seq < placed_seq:
            self.advance_placement_marks(repo_key, max(0, int(seq)), placed_revision)

    # -- internals -------------------------------------------------------------------------------

    def _targets(self, repo_key: str, scopes: Sequence[CollectionScope],
                 models: set[str] | None) -> list[tuple[_Held, Collection[str], Any]]:
        """The collections a search reads, each with its allowed version keys and extra filter:
        the collection of each scope that exists (a scope not placed yet has nothing to find)
        of ``models`` (or all), its version keys and its translated filters."""
        held: dict[tuple[int, int], list[_Held]] = {}
        for h in self._collections(repo_key):
            if models is None or h.model in models:
                held.setdefault((h.workspace_id, h.branch_id), []).append(h)
        out: list[tuple[_Held, Collection[str], Any]] = []
        for scope in scopes:
            if not scope.version_keys:
                continue
            base = translate_filters(**scope.filters) if scope.filters else None
            # Every model's collection of the scope: version keys hold the content key, which
            # holds the model, so a collection of a model the versions no longer use finds nothing.
            for h in sorted(held.get((scope.workspace_id, scope.branch_id), []), key=lambda h: h.name):
                out.append((h, scope.version_keys, base))
        return out

    def _unless_dropped(self, run: Callable[[Any, int], list[_Row]],
                        held: _Held) -> Callable[[Any, int], list[_Row]]:
        """``run``, answering no rows when its collection was deleted after the search listed
        it (a branch reset or deleted, a reindex under way) instead of failing the search."""

        def guarded(filters: Any, limit: int) -> list[_Row]:
            try:
                return run(filters, limit)
            except BackendUnavailable:
                with vendor_errors(f"check collection {held.name}"):
                    gone = not self.client.collections.exists(held.name)
                if gone:
                    return []
                raise

        return guarded

    def _collections(self, repo_key: str) -> list[_Held]:
        """Every (workspace, branch) chunks collection of the repository, from the schema."""
        return self._listed(repo_key)[0]

    def _listed(self, repo_key: str) -> tuple[list[_Held], list[str]]:
        """The repository's (workspace, branch) chunks collections, and the names of those an
        earlier kg's shared layout left (no workspace and branch: never read, dropped by
        :meth:`drop`)."""
        if not isinstance(repo_key, str) or not repo_key:
            raise InvalidInput(f"invalid index repository key {repo_key!r}",
                               details={"repo_key": repr(repo_key)})
        prefix = _chunks_prefix(repo_key).lower()
        with vendor_errors("list collections"):
            schema = self.client.collections.list_all(simple=True)
        held: list[_Held] = []
        legacy: list[str] = []
        for name, config in schema.items():
            if not name.lower().startswith(prefix):
                continue
            meta = _description(getattr(config, "description", None))
            if meta.get("kg") != "chunks" or meta.get("repo") != repo_key:
                log.warning("ignoring collection %s: its description is not kg's", name)
                continue
            wid, bid = meta.get("workspace"), meta.get("branch")
            if wid is None or bid is None:
                legacy.append(name)
                continue
            held.append(_Held(name, str(meta["model"]), int(meta["dim"]), int(wid), int(bid)))
        return held, legacy

    def _create_chunks_collection(self, repo_key: str, model: str, dim: int,
                                  scope: tuple[int, int]) -> _Held:
        """Create the collection of (repository, model, workspace, branch); another process
        may win the race."""
        wid, bid = scope
        name = _chunks_prefix(repo_key) + _short_hash(model, 10) + f"_w{wid}_b{bid}"
        meta: dict[str, Any] = {"kg": "chunks", "format": 1, "repo": repo_key, "model": model,
                                "dim": dim, "workspace": wid, "branch": bid}
        description = json.dumps(meta, ensure_ascii=False)
        weaviate = import_weaviate()
        try:
            with vendor_errors(f"create collection {name}"):
                self.client.collections.create_from_dict(_chunks_schema(name, description))
        except BackendUnavailable as exc:
            if not isinstance(exc.__cause__, weaviate.exceptions.UnexpectedStatusCodeError):
                raise
            # Created meanwhile by another process?
            again = [h for h in self._collections(repo_key) if h.model == model
                     and (h.workspace_id, h.branch_id) == scope]
            if not again:
                raise
            check_vector_dimension(np.zeros(dim), again[0].dim, what=again[0].name)
            return again[0]
        return _Held(name, model, dim, wid, bid)

    def _passage_documents(self, text: str, held: _Held, keys: Collection[str], base: Any,
                           k: int) -> list[_Row]:
        """The best passage of each content key in a chunks collection that has no documents
        collection beside it (placed by an earlier kg): at least ``k`` keys when that many
        match, each at its passage's BM25 score."""
        from weaviate.classes.query import MetadataQuery

        collection = self.client.collections.get(held.name)

        def run(filters: Any, limit: int) -> list[_Row]:
            with vendor_errors(f"search {held.name} by BM25"):
                answer = collection.query.bm25(
                    query=text, query_properties=["terms"], limit=limit, filters=filters,
                    return_metadata=MetadataQuery(score=True), return_properties=_RETURNED,
                )
            return [_row(obj, float(obj.metadata.score or 0.0), None) for obj in answer.objects]

        depth = max(1, k)
        while True:
            rows = self._ranked(self._unless_dropped(run, held), depth, keys, base=base)
            first: dict[str, _Row] = {}
            for row in rows:
                first.setdefault(row.content_key, row)
            if len(first) >= k or len(rows) < depth or depth >= MAX_QUERY_RESULTS:
                return list(first.values())
            depth = min(MAX_QUERY_RESULTS, 4 * depth)

    def _best_passages(self, text: str, held: _Held, keys: Sequence[str]) -> dict[str, _Row]:
        """The passage of best BM25 (lowest seq on a tie) of each version key of ``keys`` in a
        chunks collection; a key without a matching passage is left out."""
        from weaviate.classes.query import MetadataQuery

        collection = self.client.collections.get(held.name)

        def run(filters: Any, limit: int) -> list[_Row]:
            with vendor_errors(f"search {held.name} by BM25"):
                answer = collection.query.bm25(
                    query=text, query_properties=["terms"], limit=limit, filters=filters,
                    return_metadata=MetadataQuery(score=True), return_properties=_RETURNED,
                )
            return [_row(obj, float(obj.metadata.score or 0.0), None) for obj in answer.objects]

        guarded = self._unless_dropped(run, held)
        best: dict[str, _Row] = {}
        remaining = list(dict.fromkeys(keys))
        while remaining:
            batch = remaining[: self.filter_batch_keys]
            wanted = set(batch)
            limit = min(MAX_QUERY_RESULTS, max(10, 4 * len(batch)))
            while True:
                rows = _sorted(guarded(translate_filters(version_keys=batch), limit))
                cut = len(rows) >= limit and limit < MAX_QUERY_RESULTS
                # Rows tied with the last one may have lower-seq twins beyond the cut.
                floor = rows[-1].score if cut else -math.inf
                got: dict[str, _Row] = {}
                for row in rows:
                    if row.key in wanted and row.key not in got and row.score > floor:
                        got[row.key] = row
                if got or not cut:
                    break
                limit = min(MAX_QUERY_RESULTS, 4 * limit)
            best.update(got)
            # Keys not got: none matching (not cut), or behind the cut: asked again.
            remaining = [key for key in remaining if key not in best and (cut or key not in wanted)]
        return best

    def _docs_collections(self, repo_key: str) -> dict[str, dict[str, str]]:
        """The repository's documents collections: name -> {terms property: field}."""
        prefix = _docs_prefix(repo_key).lower()
        with vendor_errors("list collections"):
            schema = self.client.collections.list_all(simple=True)
        out: dict[str, dict[str, str]] = {}
        for name, config in schema.items():
            if not name.lower().startswith(prefix):
                continue
            meta = _description(getattr(config, "description", None))
            if meta.get("kg") != "docs" or meta.get("repo") != repo_key:
                log.warning("ignoring collection %s: its description is not kg's", name)
                continue
            fields: dict[str, str] = {}
            for prop in getattr(config, "properties", None) or []:
                try:
                    about = json.loads(getattr(prop, "description", None) or "")
                except ValueError:
                    continue
                if isinstance(about, dict) and about.get("kg") == "terms" and isinstance(about.get("field"), str):
                    fields[prop.name] = about["field"]
            out[name] = fields
        return out

    def _ensure_docs_collection(self, repo_key: str, held: _Held, have: dict[str, dict[str, str]],
                                fields: Collection[str]) -> None:
        """Create the documents collection beside ``held`` unless it exists, and add the terms
        properties of ``fields`` it lacks (another process may win either race); ``have`` is
        :meth:`_docs_collections`' answer, updated."""
        from weaviate.classes.config import DataType, Property, Tokenization

        weaviate = import_weaviate()
        name = _docs_name(held.name)
        if name not in have:
            meta = {"kg": "docs", "format": 1, "repo": repo_key, "model": held.model, "dim": held.dim,
                    "workspace": held.workspace_id, "branch": held.branch_id}
            try:
                with vendor_errors(f"create collection {name}"):
                    self.client.collections.create_from_dict(
                        _docs_schema(name, json.dumps(meta, ensure_ascii=False)))
            except BackendUnavailable as exc:
                if not isinstance(exc.__cause__, weaviate.exceptions.UnexpectedStatusCodeError):
                    raise
                if name not in self._docs_collections(repo_key):
                    raise
            have[name] = dict(self._docs_collections(repo_key).get(name, {}))
        held_fields = set(have[name].values())
        for field in sorted(set(fields) - held_fields):
            definition = _terms_property_definition(field)
            prop = Property(name=definition["name"], data_type=DataType.TEXT,
                            tokenization=Tokenization.WHITESPACE, index_filterable=False,
                            index_searchable=True, description=definition["description"])
            try:
                with vendor_errors(f"add property {definition['name']} to {name}"):
                    self.client.collections.get(name).config.add_property(prop)
            except (BackendUnavailable, weaviate.exceptions.WeaviateInvalidInputError):
                # Added meanwhile by another process?
                if field not in self._docs_collections(repo_key).get(name, {}).values():
                    raise
            have[name][definition["name"]] = field

    def _ensure_state_collection(self) -> None:
        """Create ``KgIndexState`` unless it exists (another process may win the race)."""
        with vendor_errors("create the index state collection"):
            if not self.client.collections.exists(STATE_COLLECTION):
                try:
                    self.client.collections.create_from_dict(_STATE_SCHEMA)
                except import_weaviate().exceptions.UnexpectedStatusCodeError:
                    if not self.client.collections.exists(STATE_COLLECTION):
                        raise

    def _any_key_filter(self, keys: Collection[str]) -> Any:
        """One filter admitting exactly the version ``keys``: a ``ContainsAny`` per batch of
        ``filter_batch_keys`` keys, joined with ``Or`` when there are several."""
        from weaviate.classes.query import Filter

        unique = list(dict.fromkeys(keys))
        parts = [translate_filters(version_keys=unique[start : start + self.filter_batch_keys])
                 for start in range(0, len(unique), self.filter_batch_keys)]
        return parts[0] if len(parts) == 1 else Filter.any_of(parts)

    def _ranked(self, run: Callable[[Any, int], list[_Row]], k: int, keys: Collection[str], *,
                base: Any = None) -> list[_Row]:
        """The best rows (score descending, ties by seq) among the version ``keys`` that also
        pass ``base``: at least the top ``k`` when that many exist; see the package notes for
        the strategy."""
        unique = list(dict.fromkeys(keys))

        def allowing(batch: list[str]) -> Any:
            only = translate_filters(version_keys=batch)
            if base is None:
                return only
            from weaviate.classes.query import Filter

            return Filter.all_of([base, only])

        if len(unique) <= self.filter_batch_keys:
            return _complete(run, allowing(unique), k)
        allowed = set(unique)
        depth = min(max(self.probe_depth, 4 * k), MAX_QUERY_RESULTS)
        probed = _sorted(run(base, depth))
        kept = _distinct([r for r in probed if r.key in allowed])
        if len(probed) < depth or (len(kept) >= k and kept[k - 1].score > probed[-1].score):
            return kept
        merged: dict[int, _Row] = {}
        for start in range(0, len(unique), self.filter_batch_keys):
            for row in _complete(run, allowing(unique[start : start + self.filter_batch_keys]), k):
                merged[row.seq] = row
        return _sorted(list(merged.values()))


def _checked_weights(field_weights: Mapping[str, float] | None) -> dict[str, float]:
    """Field weights as floats, refusing a negative or non-finite one."""
    out: dict[str, float] = {}
    for name, weight in (field_weights or {}).items():
        if isinstance(weight, bool) or not isinstance(weight, int | float) or not math.isfinite(weight) \
                or weight < 0:
            raise InvalidInput(f"field weight of {name!r} must be a finite number >= 0",
                               details={"field": name, "weight": weight})
        out[str(name)] = float(weight)
    return out


def _integer_boosts(weights: Mapping[str, float]) -> tuple[dict[str, int], int]:
    """Weights as integer boosts and the common factor they were scaled by: each weight is
    rounded to a fraction of denominator <= 1000, all are multiplied by the least common
    multiple of the denominators (``{"a": 1.5, "b": 1.0}`` -> ``({"a": 3, "b": 2}, 2)``)."""
    fractions = {name: Fraction(weight).limit_denominator(_BOOST_DENOMINATOR) for name, weight in weights.items()}
    scale = math.lcm(*(f.denominator for f in fractions.values())) if fractions else 1
    return {name: int(f * scale) for name, f in fractions.items()}, scale
