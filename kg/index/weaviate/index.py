"""The Weaviate search index, :class:`WeaviateVectorIndex`: a :class:`~kg.index.base.ScopedIndex`.

Placement (writes), searches (KNN, BM25, Weaviate's own hybrid query), the placement marks and
the drops; :mod:`kg.index.weaviate` describes the layout and the strategy for large allowed
sets.
"""

from __future__ import annotations

import json
import logging
import math
import threading
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from kg.errors import BackendUnavailable, InvalidInput
from kg.index.base import (
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
    _legacy_watermark_id,
    _placement_state_ids,
    _short_hash,
)
from kg.providers.registry import canonical_model_name

__all__ = ["FUSION_TYPES", "WeaviateVectorIndex"]

log = logging.getLogger(__name__)


FUSION_TYPES: dict[str, str] = {"ranked": "RANKED", "relative_score": "RELATIVE_SCORE"}
"""kg's names of Weaviate's hybrid fusion types -> members of ``HybridFusion``."""

_INSERT_BATCH = 256


@dataclass(frozen=True, slots=True)
class _Held:
    """One chunks collection of a repository: the one of a (workspace, branch) and model."""

    name: str
    model: str
    dim: int
    workspace_id: int
    branch_id: int


class WeaviateVectorIndex:
    """The :class:`~kg.index.base.ScopedIndex` contract over a Weaviate server.

    ``engine = "weaviate"`` names it in a search answer's ``fusion`` when its own hybrid query
    fused the legs.

    Parameters
    ----------
    url : str
        The server, ``http://host:8080`` (see :func:`parse_weaviate_url`).
    api_key : str, optional
        Weaviate API key; empty for an unauthenticated instance.
    timeout_s : float
        Query timeout, in seconds.
    init_timeout_s : float
        Connection-check timeout, in seconds.
    client : weaviate.WeaviateClient, optional
        A connected client to use instead of connecting to ``url`` (tests); not closed by
        :meth:`close`.
    filter_batch_keys : int
        Most version keys in one ``ContainsAny`` filter (see the package notes).
    probe_depth : int
        Depth of the unfiltered probe query for large allowed sets.

    Raises
    ------
    kg.errors.BackendUnavailable
        The ``weaviate`` extra is not installed (checked here, at start-up); the server is
        contacted on first use.

    Notes
    -----
    Thread-safe: one client, created on first use under a lock. Several processes may share a
    server: writes are idempotent (deterministic ids) and the placement marks only ever lag.
    """

    engine = "weaviate"
    """The index's name in a search answer's ``fusion``."""

    layout: Literal["scoped"] = "scoped"
    """A collection per (workspace, branch) and model, searched through
    :class:`~kg.index.base.SearchScope` and filled with :meth:`place`
    (``kg.indexing.chunks.sync_placements``)."""

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
        scopes: Sequence[SearchScope],
        max_distance: float | None = None,
    ) -> list[IndexHit]:
        """Top ``k`` chunks by cosine similarity among the versions ``scopes`` allow, embedded
        by ``model``.

        Parameters
        ----------
        repo_key : str
        vector : ndarray, shape (dim,), float
            The query embedding; normalised here.
        k : int
            Maximum number of hits; ``k <= 0`` gives ``[]``.
        model : str
            Only collections of this model are searched.
        scopes : sequence of SearchScope
            Search the (workspace, branch) collections of these scopes (those of ``model``),
            each filtered by its version keys (and its ``filters``; see the package notes for
            large sets); hits of one chunk in several collections are returned once. A scope
            whose collection does not exist yet finds nothing.
        max_distance : float, optional
            Leave out chunks with cosine distance above this.

        Returns
        -------
        list of IndexHit
            By similarity descending, ties by ``seq``; ``score = 1 - distance``,
            ``distance >= 0``; ranks 1..len.

        Raises
        ------
        kg.errors.InvalidInput
            An unusable query vector (not 1-D, non-finite, zero), one whose dimension differs
            from the model's collection, or a NaN ``max_distance``.
        kg.errors.BackendUnavailable
            Weaviate is unreachable or failed.

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
        targets = self._targets(repo_key, scopes, {model})
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
        scopes: Sequence[SearchScope],
    ) -> list[IndexHit]:
        """Top ``k`` chunks by BM25 among the versions ``scopes`` allow, over every model's
        collection.

        Parameters
        ----------
        repo_key : str
        query : str
            Analyzed with :func:`kg.index.tokenize.analyze`, as the chunks' ``terms`` were.
        k : int
        scopes : sequence of SearchScope
            Search these (workspace, branch) collections (see :meth:`knn`).

        Returns
        -------
        list of IndexHit
            By BM25 score descending, ties by ``seq``; ``distance`` None. ``[]`` for a query
            without terms, no scope, or ``k <= 0``.

        Raises
        ------
        kg.errors.BackendUnavailable
            Weaviate is unreachable or failed.

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
        for held, keys, base in self._targets(repo_key, scopes, None):
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

    def hybrid(
        self,
        repo_key: str,
        query: str,
        vector: np.ndarray,
        k: int,
        *,
        model: str,
        scopes: Sequence[SearchScope],
        alpha: float = 0.5,
        fusion_type: str = "ranked",
        max_vector_distance: float | None = None,
    ) -> HybridResult:
        """Top ``k`` chunks by Weaviate's own hybrid query (BM25 and vector, fused in Weaviate).

        Parameters
        ----------
        repo_key : str
        query : str
            The full-text leg, analyzed like :meth:`bm25`'s.
        vector : ndarray, shape (dim,), float
            The vector leg, embedded by ``model``.
        k : int
        model : str
            The collections searched.
        scopes : sequence of SearchScope
            Search these (workspace, branch) collections (see :meth:`knn`).
        alpha : float
            0 (BM25 only) to 1 (vector only); sent explicitly, never Weaviate's default.
        fusion_type : {"ranked", "relative_score"}
            Weaviate's ``rankedFusion`` (reciprocal rank fusion) or ``relativeScoreFusion``.
        max_vector_distance : float, optional
            The vector leg keeps only objects within this cosine distance (Weaviate's
            ``max_vector_distance``); the BM25 leg is not bounded.

        Returns
        -------
        HybridResult
            The hits (fused score descending, ties by ``seq``) with the ``alpha`` and
            ``fusion_type`` used, to echo in a response.

        Raises
        ------
        kg.errors.InvalidInput
            ``alpha`` outside [0, 1], an unknown fusion type, or a bad query vector.
        kg.errors.BackendUnavailable
            Weaviate is unreachable or failed.

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
        targets = self._targets(repo_key, scopes, {model})
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
        """Nothing to do: Weaviate persists every acknowledged write.

        Parameters
        ----------
        repo_key : str
        """

    def drop(self, repo_key: str) -> None:
        """Delete every collection of the repository and its marks (also those an earlier kg's
        shared layout left, see the package notes).

        Parameters
        ----------
        repo_key : str
            An unknown one is a no-op.

        Raises
        ------
        kg.errors.BackendUnavailable
            Weaviate is unreachable or failed.
        """
        held, legacy = self._listed(repo_key)
        names = [h.name for h in held] + legacy
        with vendor_errors(f"drop the collections of repository {repo_key!r}"):
            if names:
                self.client.collections.delete(names)
            if self.client.collections.exists(STATE_COLLECTION):
                state = self.client.collections.get(STATE_COLLECTION)
                for uid in (_legacy_watermark_id(repo_key), *_placement_state_ids(repo_key)):
                    state.data.delete_by_id(uid)

    def drop_branch(self, repo_key: str, branch_id: int) -> list[str]:
        """Delete the collections of one branch (every workspace and model), after SQL deleted
        the branch; its id is never reused, so nothing else ever reads them.

        Parameters
        ----------
        repo_key : str
        branch_id : int

        Returns
        -------
        list of str
            The collections deleted.

        Raises
        ------
        kg.errors.BackendUnavailable
            Weaviate is unreachable or failed.
        """
        names = [h.name for h in self._collections(repo_key) if h.branch_id == branch_id]
        if names:
            with vendor_errors(f"drop the collections of branch {branch_id}"):
                self.client.collections.delete(names)
        return names

    def drop_workspace_model(self, repo_key: str, workspace_id: int, model: str) -> list[str]:
        """Delete a workspace's collections of one embedding model (every branch), once a
        re-embed made another model current: no version points at their chunks any more.

        Parameters
        ----------
        repo_key : str
        workspace_id : int
        model : str
            Compared by canonical name (``nomic-embed-text`` is ``ollama:nomic-embed-text:latest``).

        Returns
        -------
        list of str
            The collections deleted.

        Raises
        ------
        kg.errors.BackendUnavailable
        """
        wanted = canonical_model_name(model)
        names = [h.name for h in self._collections(repo_key)
                 if h.workspace_id == workspace_id and canonical_model_name(h.model) == wanted]
        if names:
            with vendor_errors(f"drop the {model!r} collections of workspace {workspace_id}"):
                self.client.collections.delete(names)
        return names

    def stats(self, repo_key: str) -> dict[str, Any]:
        """What the index holds for a repository, for a status route.

        Returns
        -------
        dict
            ``{"chunks": int, "models": {model: objects}, "dims": {model: dim},
            "placed": {"seq": int, "version": int},
            "collections": [{"name", "model", "workspace_id", "branch_id", "objects"}]}``.

        Raises
        ------
        kg.errors.BackendUnavailable
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

    # -- placement -----------------------------------------------------------------------------

    def place(self, repo_key: str, placements: Sequence[Placement]) -> int:
        """Store node versions' chunks in the collections of their (workspace, branch).

        Parameters
        ----------
        repo_key : str
        placements : sequence of Placement
            In version order: a later placement of the same node and content key overwrites
            an earlier one (its path and properties win). Placements without chunks are
            skipped.

        Returns
        -------
        int
            Objects written.

        Raises
        ------
        kg.errors.InvalidInput
            A bad vector, or chunks of one placement from several content keys or models:
            checked for the whole call before anything is sent.
        kg.errors.BackendUnavailable
            Weaviate is unreachable or refused objects (each named). Marks are advanced by the
            caller only after every call succeeded, so a failed pass is redone whole, and
            deterministic ids make the redo overwrite.

        Notes
        -----
        A collection is created on the first placement of its (workspace, branch, model):
        a new branch has none until it writes, and reads its ancestors' (the caller's
        scopes). Object ids are :func:`object_id` of ``(repo_key + "/w" + workspace_id,
        "b" + branch_id, version_key, chunk_index, model)``.
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
        return written

    def placement_marks(self, repo_key: str) -> tuple[int, int]:
        """How far :meth:`place` has been fed from SQL: (chunk seq, revision).

        Returns
        -------
        (int, int)
            Both 0 for a repository never placed.

        Raises
        ------
        kg.errors.BackendUnavailable
        """
        marks = []
        with vendor_errors("read the index placement marks"):
            exists = self.client.collections.exists(STATE_COLLECTION)
            for uid in _placement_state_ids(repo_key):
                obj = (self.client.collections.get(STATE_COLLECTION).query.fetch_object_by_id(uid)
                       if exists else None)
                marks.append(0 if obj is None else int(obj.properties.get("watermark") or 0))
        return marks[0], marks[1]

    def advance_placement_marks(self, repo_key: str, seq: int, version: int) -> None:
        """Store the placement marks (after every placement up to them succeeded; or lower, to
        place again, see :meth:`rewind_placement`).

        Parameters
        ----------
        repo_key : str
        seq : int
            Chunks with ``seq <= seq`` are placed wherever SQL's node versions point at them.
        version : int
            Node versions of revisions ``<= version`` are placed wherever their chunks exist.

        Raises
        ------
        kg.errors.BackendUnavailable
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

        Raises
        ------
        kg.errors.BackendUnavailable
        """
        placed_seq, placed_revision = self.placement_marks(repo_key)
        if seq < placed_seq:
            self.advance_placement_marks(repo_key, max(0, int(seq)), placed_revision)

    # -- internals -------------------------------------------------------------------------------

    def _targets(self, repo_key: str, scopes: Sequence[SearchScope],
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
