"""Graph reads on a branch: NEIGHBORS and traversal, through the networkx view or through SQL.

Which path answers:

- The branch's :class:`~kg.graph.view.GraphView` when the process holds one: it is brought
  forward first by applying the node and relation versions written on the branch since its
  revision (never rebuilt per request), then read under its lock. NEIGHBORS reads ``limit + 1``
  edges of a hub's sorted list.
- A traversal of a branch's head builds the view when there is none, unless the branch holds
  more relations than the cache's budget (``GraphCache.max_edges``): in the request for a
  small branch, in a background thread for a large one (``GraphCache.inline_build_max``
  relation versions), while requests are answered from SQL.
- Otherwise SQL: NEIGHBORS with ``ORDER BY ... LIMIT`` (a hub's edges are never all fetched),
  and a traversal asks SQL for each node it expands, ``fan_out + 1`` edges at a time. This is
  the path of time travel behind the view (``at_revision``), of cold NEIGHBORS (a NEIGHBORS
  request never builds a view: on a cold cache it would load a whole branch to answer 100
  rows), and of branches over budget.

Both paths give the same answers in the same order; ``tests/api/test_graph.py`` holds them to it.
"""

from __future__ import annotations

import bisect
import gc
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from operator import attrgetter
from typing import Any

from sqlalchemy.orm import Session

from kg import collector
from kg.context import Actor, Resources, reading
from kg.errors import InvalidInput
from kg.graph.neighbors import (
    DEFAULT_LIMIT,
    Direction,
    Neighbor,
    check_direction,
    check_limit,
    check_types,
)
from kg.graph.rows import NeighborRows
from kg.graph.traverse import Reached, check_walk_bounds, reach
from kg.graph.validity import ValidAt, iso, read_time, valid_at
from kg.graph.view import EdgeRow, GraphView, NodeAddress, NodeRow
from kg.rag.entities import ABOUT, MENTIONED_IN
from kg.store import relations as store
from kg.store.models import Branch, NodeVersion, RelationVersion
from kg.store.nodes import get_node, nodes_by_id
from kg.store.paths import parse_address
from kg.store.relations import validate_relation_type
from kg.store.repos import BranchView
from kg.store.visibility import Chain, visible_select

__all__ = [
    "FREEZE_EVERY", "SUBJECT_HOPS", "current_graph", "follow_subjects", "load_view", "neighborhood",
    "neighbors", "neighbors_of", "readable_names", "spread_activation", "traverse_from", "view_key", "walk",
    "warm_graph",
]

#: A node's ``workspace:path`` (:class:`~kg.graph.view.NodeAddress`), read in C.
_ADDRESS = attrgetter("address")

#: What identifies one relation across its versions.


def view_key(view: BranchView) -> tuple[Hashable, ...]:
    """The cache key of a branch's graph: repository, branch, and the rest of its read chain
    (fixed from the fork on; a reset re-forks and so changes it)."""
    return (view.repo.id, view.chain[0][0], view.chain[1:])  # the chain's first entry is the branch's own id


def _resolver(session: Session, view: BranchView):
    names = view.workspaces

    def resolve(ids: set[str]) -> dict[str, NodeAddress]:
        found = store.read_node_addresses(session, view, ids)
        return {nid: NodeAddress(names[wid], path, f"{names[wid]}:{path}") for nid, (wid, path) in found.items()}

    return resolve


#: A background build collects and freezes (``gc.freeze``) what it has built every this many
#: relations: the view's objects then leave the cyclic collector's generations.
FREEZE_EVERY = 200_000


def _collect_and_freeze() -> None:
    """Collect the cyclic garbage of every thread, then move every object still tracked to the
    collector's permanent generation, which its passes skip."""
    gc.collect()
    gc.freeze()


def _freezing(rows: Iterable[EdgeRow], every: int) -> Iterator[EdgeRow]:
    """Yield ``rows``, collecting and freezing after each ``every`` of them."""
    for count, row in enumerate(rows, start=1):
        yield row
        if count % every == 0:
            _collect_and_freeze()


def load_view(graph: GraphView, rows: Iterable[EdgeRow], resolve: Callable[[set[str]], Mapping[str, NodeAddress]],
              *, max_edges: int | None = None, freeze_every: int | None = None, release: bool = True) -> bool:
    """Fill an empty view (:meth:`GraphView.load`) with the cyclic garbage collector held, and
    freeze what a large view builds so that the collector never walks it again.

    Parameters
    ----------
    graph : kg.graph.view.GraphView
        The empty view.
    rows : iterable of EdgeRow
        The branch's visible live relations.
    resolve : callable(set of str) -> {str: NodeAddress}
        The live nodes among the given ids.
    max_edges : int, optional
        Give up (return False) past this many relations.
    freeze_every : int or None, optional
        None: the collector is held for the load and given back as it was (a small view,
        built in a request). An int: every ``freeze_every`` relations, and once at the end, a
        collection of every generation (cyclic garbage of any thread) and :func:`gc.freeze`
        (a large view, built in a background thread).
    release : bool, default True
        When the load gives up past ``max_edges``, empty the view a slice at a time
        (:meth:`GraphView.release`) instead of leaving it to be dropped in one pause.

    Returns
    -------
    bool
        As :meth:`GraphView.load`: False when ``max_edges`` was exceeded.

    Notes
    -----
    A view of m relations holds about 3 m containers the cyclic collector tracks. Held for the
    load, they all land in its youngest generation; given back, the next passes walk every one
    of them (gen 0, then 1, then 2), and a full pass recurs whenever the oldest generation has
    grown by a quarter: at 1,000,000 edges a full pass took 0.9 s, at 5,000,000 several
    seconds, with the interpreter lock held, so every other request of the process waited.
    That was the 2 s NEIGHBORS measured while a cold 5M-edge view was built (docs/benchmarks/scale.md).
    Frozen objects are skipped by every later pass. A view holds no reference cycle, so a view
    dropped from the cache is still freed by reference counting (tested). Each freeze also
    moves whatever else the process holds at that moment, which is harmless for objects that
    die by reference counting; cyclic garbage of other threads is collected just before, and
    the collector is held only between freezes, so at most one increment's worth of
    another thread's cycles (the SQL statements of the requests in flight) is ever frozen.
    Each increment's collection walks what the increment built: about 0.2 s at 200,000
    relations (``bench/view_build_pause.py``).

    References
    ----------
    ``gc.freeze``, CPython 3.7 (bpo-31558), in the Python documentation's "gc: Garbage
    Collector interface".
    """
    if freeze_every is not None:
        _collect_and_freeze()
        rows = _freezing(rows, freeze_every)
    with collector.held():  # millions of new long-lived objects: a cyclic collection every 700 is waste
        loaded = graph.load(rows, resolve, max_edges=max_edges)
        if loaded and freeze_every is not None:
            _collect_and_freeze()
    if not loaded and release:
        graph.release()  # given up: free what was built a slice at a time, not in one pause
    return loaded


def _build(session: Session, view: BranchView, max_edges: int, *, freeze: bool = False) -> GraphView | None:
    """Read the branch's graph from SQL; None when it holds more than ``max_edges`` relations.
    ``freeze``: a large view built in the background (:func:`load_view`)."""
    graph = GraphView(view.revision)
    rows = (EdgeRow(f, t, to, w, p, False, vf, vt, inv)
            for f, t, to, w, p, vf, vt, inv in store.stream_visible_edges(session, view))
    loaded = load_view(graph, rows, _resolver(session, view), max_edges=max_edges,
                       freeze_every=FREEZE_EVERY if freeze else None)
    return graph if loaded else None


def _catch_up(session: Session, view: BranchView, graph: GraphView) -> None:
    """Apply the versions written on the branch since the view's revision."""
    names = view.workspaces
    branch_id = view.branch.id
    nodes = [NodeRow(nid, names[wid], path, deleted) for nid, wid, path, deleted in
             store.list_node_changes(session, branch_id=branch_id, after=graph.revision, upto=view.revision)]
    edges = [EdgeRow(*row) for row in
             store.list_relation_changes(session, branch_id=branch_id, after=graph.revision, upto=view.revision)]
    graph.apply(nodes, edges, _resolver(session, view), revision=view.revision)


@contextmanager
def current_graph(session: Session, services: Resources, view: BranchView, *,
                  build: bool, wait: bool = False) -> Iterator[GraphView | None]:
    """The branch's networkx view at exactly ``view.revision``, locked for the caller, or None.

    Parameters
    ----------
    build : bool
        Build the view when the process has none (only for a read of the branch's head, and
        only when the branch fits the cache's edge budget). A branch of more relation versions
        than ``GraphCache.inline_build_max`` is built by a background thread: this call then
        yields None (answer from SQL), as do the calls that come while it builds.
    wait : bool
        Build in this call whatever the branch's size (:func:`warm_graph`).

    Yields
    ------
    GraphView or None
        The whole branch's graph, whoever reads (callers apply the reader's workspace scope
        with :func:`readable_names`). None means: answer from SQL (no view and ``build`` is
        False, a view being built in the background, time travel behind the view, or a branch
        over budget).

    Notes
    -----
    A request never waits for the build of a large branch: the first traverse of a cold
    5,000,000-edge branch starts the build and is answered from SQL, like every request until
    the view is held.
    """
    cache = services.graphs
    key = view_key(view)
    # The view held in memory is the branch's whole graph, shared by every reader: built and
    # brought forward unrestricted; a restricted reader's scope applies when it is read.
    if view.readable is not None:
        view = view.scoped(None)
    graph = cache.get(key)
    if graph is None:
        if not build or view.revision != view.branch.head_revision or cache.too_big(key):
            yield None
            return
        if not wait and (cache.building(key) or store.count_relation_versions(
                session, view, at_most=cache.inline_build_max) > cache.inline_build_max):
            cache.start_build(key, lambda: _build_in_background(services, view, key))
            yield None
            return
        with cache.key_lock(key):
            graph = cache.get(key)
            if graph is None:
                graph = _build(session, view, cache.max_edges)
                if graph is None:
                    cache.mark_too_big(key)
                else:
                    cache.put(key, graph)
        if graph is None:
            yield None
            return
    with graph.lock:
        behind = graph.revision > view.revision
        grew = not behind and graph.revision < view.revision
        if grew:
            try:
                _catch_up(session, view, graph)
            except BaseException:
                cache.discard(key)  # half brought forward: the next read builds afresh
                raise
        if not behind:
            yield graph
    if behind:  # time travel behind the view: SQL, without holding the view's lock
        yield None
    if grew:
        cache.shrink()


def _build_in_background(services: Resources, view: BranchView, key: Hashable) -> None:
    """Build the view of ``view``'s branch state in a read of its own and hold it (a
    background thread: :meth:`GraphCache.start_build`); the next read brings it forward."""
    cache = services.graphs
    if cache.get(key) is not None:
        return
    with services.db.read() as session:
        graph = _build(session, view, cache.max_edges, freeze=True)
    if graph is None:
        cache.mark_too_big(key)
    else:
        cache.put(key, graph)


def warm_graph(session: Session, services: Resources, view: BranchView) -> bool:
    """Build (or bring forward) the branch's view now, in this call; False when it does not
    fit the budget."""
    with current_graph(session, services, view, build=True, wait=True) as graph:
        return graph is not None


def readable_names(view: BranchView) -> frozenset[str] | None:
    """The names of the workspaces ``view``'s reader may read (None: all), for the graph view.

    Parameters
    ----------
    view : BranchView

    Returns
    -------
    frozenset of str or None
    """
    if view.readable is None:
        return None
    return frozenset(view.workspaces[w] for w in view.readable if w in view.workspaces)


def _node_id(session: Session, view: BranchView, graph: GraphView | None, address: str) -> tuple[str, str, str]:
    """(node id, workspace, path) of an address: from the view when it holds the node (its
    addresses are valid by construction) and the reader may read its workspace, else validated
    and read from SQL."""
    scope = readable_names(view)
    if graph is not None and isinstance(address, str):
        workspace, _, path = address.partition(":")
        found = graph.node_id(workspace, path) if scope is None or workspace in scope else None
        if found is not None:
            return found, workspace, path
    workspace, path = parse_address(address)
    return get_node(session, view, workspace, path).node_id, workspace, path


def _check_types(types: Sequence[str] | None) -> frozenset[str] | None:
    wanted = check_types(types)
    for rel_type in wanted or ():
        validate_relation_type(rel_type)
    return wanted


def neighbors(services: Resources, caller: Actor, repo: str, branch: str, address: str, *,
              direction: str = "BOTH", types: Sequence[str] | None = None, limit: int = DEFAULT_LIMIT,
              at_revision: int | None = None, as_of: datetime | None = None,
              include_invalid: bool = False) -> dict[str, Any]:
    """NEIGHBORS of a node on ``branch`` (as of ``at_revision``): :func:`neighbors_of` in a read
    of its own, over the relations current now, valid at ``as_of``, or all (``include_invalid``).

    Parameters
    ----------
    services : kg.context.Resources
    caller : kg.context.Actor
        Who reads.
    repo, branch, address : str
    direction : {"OUT", "IN", "BOTH"}
    types : sequence of str, optional
    limit : int, 1..10,000
    at_revision : int or None
    as_of : datetime or None
        World time (timezone-aware): the relations valid then; None: now.
    include_invalid : bool
        Every relation, whatever its validity.

    Returns
    -------
    dict
        As :func:`neighbors_of`.

    Raises
    ------
    kg.errors.NotFound, kg.errors.InvalidInput
    """
    at = read_time(as_of, include_invalid)
    with reading(services, caller, repo, branch, at_revision) as (session, view):
        return neighbors_of(session, services, view, address, direction=check_direction(direction), types=types,
                            limit=limit, at=at)


def neighbors_of(session: Session, services: Resources, view: BranchView, address: str, *,
                 direction: Direction = "BOTH", types: Sequence[str] | None = None,
                 limit: int = DEFAULT_LIMIT, at: ValidAt = None) -> dict[str, Any]:
    """NEIGHBORS of the node at ``address`` (``workspace:/path``) in the API shape.

    Parameters
    ----------
    address : str
    direction : {"OUT", "IN", "BOTH"}
    types : sequence of str, optional
        Relation types to keep (None: all).
    limit : int, 1..10,000
        Most rows returned.
    at : datetime or None
        Only relations valid at this world time (:mod:`kg.graph.validity`), filtered inside
        the view's or SQL's read, before ``limit``; None: every relation.

    Returns
    -------
    dict
        ``{"neighbors": [{"workspace", "path", "node_id", "relation_type", "weight",
        "direction", "properties", "valid_from", "valid_to", "invalidated_by"}], "truncated":
        bool}`` in the stable order (weight desc with null last, address, type, direction);
        ``truncated`` when more edges matched. The validity keys are ISO 8601 times in UTC or
        null (unbounded), ``invalidated_by`` the reference of what superseded the relation.
        ``neighbors`` is a :class:`~kg.graph.rows.NeighborRows`: a read-only sequence whose
        row dicts are made when read (equal to the list of them; ``tolist()`` gives that list,
        for a JSON encoder or pydantic).

    Raises
    ------
    kg.errors.InvalidInput
        A bad address, direction, type or limit.
    kg.errors.NotFound
        Unknown workspace, or no such node on the branch.

    Notes
    -----
    From the view: O(limit) once a node's sorted edges are held (the first read of a direction
    of d edges sorts them, O(d log d)), no SQL, and no object per edge: the answer holds a slice
    of the node's sorted edge tuples, the other nodes' addresses and (when the view holds any)
    the edges' validity, read under the view's lock. From SQL (no view held): one statement
    returning at most ``limit + 1`` rows.
    """
    direction = check_direction(direction)
    wanted = _check_types(types)
    check_limit(limit)
    held = services.graphs.current(view_key(view), view.revision)
    if held is not None:  # at the read's revision: what current_graph would yield, without its machinery
        with held.lock:
            if held.revision == view.revision:
                return _neighbors_in(session, view, held, address, direction, wanted, limit, at)
    with current_graph(session, services, view, build=False) as graph:
        if graph is not None:
            return _neighbors_in(session, view, graph, address, direction, wanted, limit, at)
        node_id, _, _ = _node_id(session, view, None, address)
    page = store.list_neighbors(session, view, node_id, direction=direction, types=wanted, limit=limit + 1, at=at)
    shown = page[:limit]
    return {
        "neighbors": NeighborRows([(r.node_id, r.relation_type, r.weight, r.direction, r.properties) for r in shown],
                                  shown, [(r.valid_from, r.valid_to, r.invalidated_by) for r in shown]),
        "truncated": len(page) > limit,
    }


def _neighbors_in(session: Session, view: BranchView, graph: GraphView, address: str, direction: Direction,
                  wanted: frozenset[str] | None, limit: int, at: ValidAt) -> dict[str, Any]:
    """:func:`neighbors_of` from ``graph``, the branch's view at ``view.revision``, its lock held."""
    node_id, _, _ = _node_id(session, view, graph, address)
    found, where, truncated = graph.edges_located(node_id, direction=direction, types=wanted, limit=limit,
                                                  workspaces=readable_names(view), at=at)
    # the columns read under the view's lock: a node deleted after it is released keeps its row
    return {"neighbors": NeighborRows(found, where, graph.validities(node_id, found)), "truncated": truncated}


def _validity_fields(valid_from: datetime | None, valid_to: datetime | None,
                     invalidated_by: str | None) -> dict[str, Any]:
    """A NEIGHBORS row's validity keys: ISO 8601 in UTC, or null when unbounded / unset."""
    return {"valid_from": iso(valid_from), "valid_to": iso(valid_to), "invalidated_by": invalidated_by}


def _sql_lookup(session: Session, view: BranchView, direction: Direction, types: frozenset[str] | None,
                fan_out: int, addresses: dict[str, tuple[str, str]], at: ValidAt = None):
    """A neighbor lookup over SQL: pages of ``fan_out + 1`` edges, then growing pages."""

    def lookup(node_id: Hashable) -> Iterator[Neighbor]:
        offset, size = 0, fan_out + 1
        while True:
            rows = store.list_neighbors(session, view, node_id, direction=direction, types=types,  # type: ignore[arg-type]
                                       limit=size + 1, offset=offset, at=at)
            for r in rows[:size]:
                addresses[r.node_id] = (r.workspace, r.path)
                yield Neighbor(r.node_id, r.relation_type, r.weight, r.direction, r.properties)  # type: ignore[arg-type]
            if len(rows) <= size:
                return
            offset += size
            size = min(size * 4, 10_000)

    return lookup


def walk(services: Resources, caller: Actor, repo: str, branch: str, seeds: Sequence[str], *,
         hops: int = 2, direction: str = "BOTH", types: Sequence[str] | None = None,
         max_nodes: int = 200, fan_out: int = 50, at_revision: int | None = None,
         as_of: datetime | None = None, include_invalid: bool = False) -> dict[str, Any]:
    """A bounded breadth-first walk on ``branch`` (as of ``at_revision``): :func:`traverse_from`
    in a read of its own.

    Parameters
    ----------
    services : kg.context.Resources
    caller : kg.context.Actor
        Who reads.
    repo, branch : str
    seeds : sequence of str
        Node addresses, hop 0.
    hops, max_nodes, fan_out : int
        The bounds (:func:`traverse_from`).
    direction : {"OUT", "IN", "BOTH"}
    types : sequence of str, optional
    at_revision : int or None
    as_of, include_invalid
        As :func:`neighbors`: the world time the relations walked are valid at.

    Returns
    -------
    dict
        As :func:`traverse_from`.

    Raises
    ------
    kg.errors.NotFound, kg.errors.InvalidInput
    """
    at = read_time(as_of, include_invalid)
    with reading(services, caller, repo, branch, at_revision) as (session, view):
        return traverse_from(session, services, view, seeds, hops=hops, direction=check_direction(direction),
                             types=types,
                             max_nodes=max_nodes, fan_out=fan_out, at=at)


def traverse_from(session: Session, services: Resources, view: BranchView, seeds: Sequence[str], *,
                  hops: int = 2, direction: Direction = "BOTH", types: Sequence[str] | None = None,
                  max_nodes: int = 200, fan_out: int = 50, at: ValidAt = None) -> dict[str, Any]:
    """Walk the branch's relations breadth-first from ``seeds`` (:func:`kg.graph.traverse.traverse`).

    Parameters
    ----------
    seeds : sequence of str
        Node addresses ``workspace:/path``, hop 0, in this order (at least one).
    hops : int, 0..10
    direction : {"OUT", "IN", "BOTH"}
    types : sequence of str, optional
        Relation types to follow (None: all).
    max_nodes : int, 1..10,000
        Most nodes in the answer, seeds included.
    fan_out : int, 1..10,000
        Most edges followed from one node, in the stable order.
    at : datetime or None
        Follow only relations valid at this world time; None: every relation.

    Returns
    -------
    dict
        ``{"nodes": [{"workspace", "path", "node_id", "hop", "via", "weight", "from"}],
        "truncated": bool}``; ``from`` is the address of the node that reached this one
        (``via``, ``weight``: that edge), all three null for a seed.

    Raises
    ------
    kg.errors.InvalidInput
        A bound out of range, an unknown direction, a bad type or address, no seeds.
    kg.errors.NotFound
        An unknown workspace or seed node.

    Notes
    -----
    On the view: O(max_nodes * fan_out) edge reads, no SQL once the view is current, and no
    object per edge or per node before the answer's rows: the walk keeps columns
    (:func:`kg.graph.traverse.reach`), the reached nodes' addresses are read from the view under
    its lock, and each row is made once. On SQL: one statement per expanded node.
    """
    check_walk_bounds(hops, max_nodes, fan_out)
    direction = check_direction(direction)
    wanted = _check_types(types)
    if isinstance(seeds, str) or not seeds:
        raise InvalidInput("seeds must be a non-empty list of node addresses 'workspace:/path'")
    for seed in seeds:
        parse_address(seed)  # every address checked (422) before any is looked up (404)
    held = services.graphs.current(view_key(view), view.revision)
    walk: tuple[Reached, list[NodeAddress]] | None = None
    if held is not None:  # at the read's revision: what current_graph would yield, without its machinery
        with held.lock:
            if held.revision == view.revision:
                walk = _walk_in(session, view, held, seeds, direction, wanted, hops, max_nodes, fan_out, at)
    if walk is None:
        with current_graph(session, services, view, build=True) as graph:
            walk = _walk_in(session, view, graph, seeds, direction, wanted, hops, max_nodes, fan_out, at)
    walked, where = walk
    # each row's ``from``: its parent's address, looked up in C (a seed has none)
    seeds_count = bisect.bisect_right(walked.hops, 0)
    froms: list[str | None] = [None] * seeds_count
    froms += map(_ADDRESS, map(where.__getitem__, walked.parents[seeds_count:]))
    return {"nodes": [{"workspace": located.workspace, "path": located.path, "node_id": node_id, "hop": hop,
                       "via": via, "weight": weight, "from": parent}
                      for node_id, hop, via, weight, parent, located in zip(
                          walked.node_ids, walked.hops, walked.vias, walked.weights, froms, where, strict=True)],
            "truncated": walked.truncated}


def _walk_in(session: Session, view: BranchView, graph: GraphView | None, seeds: Sequence[str], direction: Direction,
             wanted: frozenset[str] | None, hops: int, max_nodes: int, fan_out: int,
             at: ValidAt) -> tuple[Reached, list[NodeAddress]]:
    """:func:`traverse_from`'s walk on ``graph`` (the branch's view at ``view.revision``, its
    lock held) or, when None, on SQL: the reached columns and each node's address."""
    addresses: dict[str, tuple[str, str]] = {}
    seeds_at: list[NodeAddress] = []
    ids = []
    for seed in seeds:
        node_id, workspace, path = _node_id(session, view, graph, seed)
        addresses[node_id] = (workspace, path)
        seeds_at.append(NodeAddress(workspace, path, f"{workspace}:{path}"))
        ids.append(node_id)
    if graph is None:
        walked = reach(ids, _sql_lookup(session, view, direction, wanted, fan_out, addresses, at),
                       hops=hops, max_nodes=max_nodes, fan_out=fan_out)
        return walked, [NodeAddress(w, p, f"{w}:{p}")
                        for w, p in map(addresses.__getitem__, walked.node_ids)]  # type: ignore[arg-type]
    walked = reach(ids, graph.lookup(direction=direction, types=wanted, workspaces=readable_names(view), at=at),
                   hops=hops, max_nodes=max_nodes, fan_out=fan_out)
    # the seeds first (hop 0, in the order given, repeats dropped): a seed without
    # relations is not in the view; the others' addresses read under the view's lock
    first = bisect.bisect_right(walked.hops, 0)
    by_seed = dict(zip(ids, seeds_at, strict=True))
    where = [by_seed[n] for n in walked.node_ids[:first]]  # type: ignore[index]
    where += graph.addresses_of(walked.node_ids[first:])
    return walked, where


#: The two hops of :func:`follow_subjects`: a document's entities (their ``mentioned_in``
#: edges into it), then the documents ``about`` those entities (their edges into the entity).
SUBJECT_HOPS: tuple[tuple[str, Direction], ...] = ((MENTIONED_IN, "IN"), (ABOUT, "IN"))


def follow_subjects(session: Session, services: Resources, view: BranchView, seeds: Sequence[str], *,
                    hops: int = 2, max_nodes: int = 200, fan_out: int = 50, at: ValidAt = None) -> dict[str, Any]:
    """From documents to the entities they mention, then to the documents about those entities.

    Hop 1 is every entity with a ``mentioned_in`` edge into a seed; hop 2 every document with an
    ``about`` edge into such an entity (:mod:`kg.rag.entities`: a document is about the entity
    its title names). Seeds are expanded one after the other, in the given order, each entity's
    subject documents right after it, so the answer is ordered by the seed that first reached a
    node, then by the stable edge order (weight, address). Unlike a breadth-first walk over all
    relations (:func:`traverse_from`), which reaches every passage sharing an entity with a
    seed, this reaches the passage *about* the entity: the entity's page, the second hop of a
    bridge question.

    Parameters
    ----------
    seeds : sequence of str
        Node addresses ``workspace:/path``, hop 0, in this order (at least one).
    hops : int, 0..2
        0: the seeds only; 1: and their entities; 2: and the documents about those.
    max_nodes : int, 1..10,000
        Most nodes in the answer, seeds included.
    fan_out : int, 1..10,000
        Most edges followed from one node (entities of a seed, documents of an entity), in the
        stable order.
    at : datetime or None
        Follow only relations valid at this world time; None: every relation.

    Returns
    -------
    dict
        ``{"nodes": [{"workspace", "path", "node_id", "hop", "via", "weight", "from",
        "seed"}], "truncated": bool}`` as :func:`traverse_from`, each node once at its first
        reach; ``seed`` is the address of the seed it was reached from (its own address for a
        seed). ``truncated`` when ``max_nodes`` left a node out or a node had more than
        ``fan_out`` edges of the hop's type.

    Raises
    ------
    kg.errors.InvalidInput
        A bound out of range, a bad address, no seeds.
    kg.errors.NotFound
        An unknown workspace or seed node.

    Notes
    -----
    At most ``fan_out`` entities per seed and ``fan_out`` documents per entity are read:
    O(s * f * f) edge reads for s seeds, bounded by ``max_nodes``; on the view no SQL, on SQL
    one statement per expanded node. A node in a workspace the reader may not read is never
    reached (the view filters by :func:`readable_names`, SQL by the view's scope), nor is
    anything beyond it.

    References
    ----------
    .. [1] Z. Yang et al., "HotpotQA: A dataset for diverse, explainable multi-hop question
       answering", EMNLP 2018 (bridge entities).
    .. [2] Y. Feldman and R. El-Yaniv, "Multi-hop paragraph retrieval for open-domain question
       answering", ACL 2019; A. Asai et al., "Learning to retrieve reasoning paths over
       Wikipedia graph for question answering", ICLR 2020 (the second hop follows the link to
       the linked entity's page).
    """
    if isinstance(hops, bool) or not isinstance(hops, int) or not 0 <= hops <= len(SUBJECT_HOPS):
        raise InvalidInput(f"hops must be an integer between 0 and {len(SUBJECT_HOPS)} when following "
                           "subjects", details={"hops": hops})
    check_walk_bounds(hops, max_nodes, fan_out)
    if isinstance(seeds, str) or not seeds:
        raise InvalidInput("seeds must be a non-empty list of node addresses 'workspace:/path'")
    for seed in seeds:
        parse_address(seed)
    nodes: list[dict[str, Any]] = []
    seen: set[Hashable] = set()
    truncated = False
    with current_graph(session, services, view, build=True) as graph:
        scope = readable_names(view)

        def edges(node_id: Hashable, rel_type: str, direction: Direction) -> tuple[list[tuple[Any, ...]], bool]:
            """Up to ``fan_out`` edges (other id, workspace, path, weight) and whether more exist."""
            wanted = frozenset({rel_type})
            found: list[tuple[Any, ...]] = []
            if graph is not None:
                for edge in graph.iter_neighbors(node_id, direction=direction, types=wanted, workspaces=scope,
                                                 at=at):
                    if len(found) == fan_out:
                        return found, True
                    other, weight = edge[0], edge[2]
                    where = graph.address(other)
                    found.append((other, where.workspace, where.path, weight))
                return found, False
            rows = store.list_neighbors(session, view, node_id, direction=direction,  # type: ignore[arg-type]
                                        types=wanted, limit=fan_out + 1, at=at)
            return [(r.node_id, r.workspace, r.path, r.weight) for r in rows[:fan_out]], len(rows) > fan_out

        def add(node_id: Hashable, workspace: str, path: str, hop: int, via: str | None, weight: float | None,
                parent: str | None, seed: str) -> bool:
            nonlocal truncated
            if node_id in seen:
                return False
            if len(nodes) >= max_nodes:
                truncated = True
                return False
            seen.add(node_id)
            nodes.append({"workspace": workspace, "path": path, "node_id": node_id, "hop": hop, "via": via,
                          "weight": weight, "from": parent, "seed": seed})
            return True

        starts = []
        for seed in seeds:
            node_id, workspace, path = _node_id(session, view, graph, seed)
            address = f"{workspace}:{path}"
            if add(node_id, workspace, path, 0, None, None, None, address):
                starts.append((node_id, address))
        (mention, mention_direction), (subject, subject_direction) = SUBJECT_HOPS
        expanded: set[Hashable] = set()
        for node_id, address in starts:
            if hops < 1:
                break
            entities, more = edges(node_id, mention, mention_direction)
            truncated = truncated or more
            for entity, workspace, path, weight in entities:
                add(entity, workspace, path, 1, mention, weight, address, address)
                if hops < 2 or entity not in seen or entity in expanded:
                    continue  # cut by the budget, or its documents were added already
                expanded.add(entity)
                pages, more = edges(entity, subject, subject_direction)
                truncated = truncated or more
                for page, page_workspace, page_path, page_weight in pages:
                    add(page, page_workspace, page_path, 2, subject, page_weight, f"{workspace}:{path}", address)
    return {"nodes": nodes, "truncated": truncated}


def spread_activation(session: Session, services: Resources, view: BranchView, nodes: Sequence[dict[str, Any]],
                      seed_mass: dict[str, float], *, hops: int, direction: Direction = "BOTH",
                      types: Sequence[str] | None = None, max_degree: int = 100_000,
                      at: ValidAt = None) -> dict[str, float] | None:
    """Relevance of the nodes a walk reached: seed mass spread along the relations, split by degree.

    Each seed starts with its mass; at every step each node passes its mass on in equal shares
    over all its relations (of ``types``, in ``direction``), and the shares that land on a node
    of the walk are added up over ``hops`` steps. A node reached from several seeds, or over
    rare relations, scores higher than one reached once through a hub: a hub entity mentioned by
    thousands of documents gives each of them a thousandth, an entity two documents share gives
    the other one half. This is personalised PageRank truncated to ``hops`` steps, without
    restart, restricted to the walked subgraph.

    Parameters
    ----------
    nodes : sequence of dict
        The walk's nodes (:func:`traverse_from`), each with ``node_id``.
    seed_mass : dict of str to float
        Starting mass by seed node id (>= 0).
    hops : int
    direction, types
        As in the walk.
    max_degree : int
        A node with more relations than this counts as having exactly this many (its
        relations are not all read).
    at : datetime or None
        Spread only over relations valid at this world time; None: every relation.

    Returns
    -------
    dict of str to float, or None
        Score by node id, for every node of ``nodes`` (seeds include their own mass); None
        when the branch's graph is not held in memory (the walk ran on SQL): no scores then.

    References
    ----------
    .. [1] T. H. Haveliwala, "Topic-sensitive PageRank", WWW 2002 (personalised PageRank).
    .. [2] B. J. Gutiérrez et al., "HippoRAG: Neurobiologically inspired long-term memory for
       large language models", NeurIPS 2024 (PPR over an entity graph for multi-hop retrieval).
    """
    wanted = _check_types(types)
    scope = readable_names(view)
    members = {n["node_id"] for n in nodes}
    with current_graph(session, services, view, build=True) as graph:
        if graph is None:
            return None
        score = {node_id: seed_mass.get(node_id, 0.0) for node_id in members}
        current = {node_id: mass for node_id, mass in seed_mass.items() if node_id in members and mass > 0}
        for _ in range(hops):
            passed: dict[str, float] = {}
            for node_id, mass in current.items():
                degree = 0
                inside: list[Any] = []  # node ids of members: str
                for edge in graph.iter_neighbors(node_id, direction=direction, types=wanted,
                                                 workspaces=scope, at=at):
                    degree += 1
                    if edge[0] in members:
                        inside.append(edge[0])
                    if degree >= max_degree:
                        break
                for other in inside:
                    passed[other] = passed.get(other, 0.0) + mass / degree
            for node_id, mass in passed.items():
                score[node_id] += mass
            current = passed
    return score


def neighborhood(services: Resources, caller: Actor, repo: str, branch: str, seeds: Sequence[str], *,
                 hops: int = 1, direction: str = "BOTH", types: Sequence[str] | None = None,
                 max_nodes: int = 200, fan_out: int = 50, as_of: datetime | None = None,
                 include_invalid: bool = False) -> dict[str, Any]:
    """The subgraph around ``seeds`` on ``branch``'s head, for drawing: the bounded walk's nodes,
    every relation between them, and what the branch changed against its parent.

    The nodes are those of :func:`traverse_from` (hop-bounded, at most ``fan_out`` edges
    followed from a node, at most ``max_nodes`` nodes); the edges are all the live relations
    whose two endpoints are among them (of ``types``), so an edge between two reached nodes
    is drawn even when the walk reached them by other edges. Everything is read as ``caller``:
    a node in a workspace it may not read is neither walked to nor returned, nor any edge to it.

    Parameters
    ----------
    services : kg.context.Resources
    caller : kg.context.Actor
        Who reads.
    repo, branch : str
    seeds : sequence of str
        Node addresses ``workspace:/path``, hop 0.
    hops : int, 0..10
    direction : {"OUT", "IN", "BOTH"}
        Which edges the walk follows (the edges returned are all those between its nodes).
    types : sequence of str, optional
        Relation types followed and returned (None: all).
    max_nodes, fan_out : int, 1..10,000
        The walk's budgets.
    as_of : datetime or None
        World time (timezone-aware): walk and draw the relations valid then; None: now.
    include_invalid : bool
        Walk and draw every relation, whatever its validity (``as_of`` is then ignored).

    Returns
    -------
    dict
        ``{"nodes": [{"workspace", "path", "node_id", "node_type", "title", "hop", "change"}],
        "edges": [{"from", "to", "from_id", "to_id", "type", "weight", "change", "valid_from",
        "valid_to", "invalidated_by", "current"}],
        "truncated": bool, "branch", "parent"}``. ``change`` is ``"added"`` for what the
        branch wrote and its parent (as of the fork) does not have, ``"changed"`` for what
        the branch rewrote, and None for what it reads from its ancestors unchanged (always
        None on a branch without a parent). ``truncated`` is the walk's: a budget left nodes
        unvisited. Edges are in a stable order (from, type, to); ``current`` says whether an
        edge is valid now (only ``include_invalid`` or a past ``as_of`` draws one that is not).

    Raises
    ------
    kg.errors.InvalidInput
        A bound out of range, a bad direction, type or address.
    kg.errors.NotFound
        An unknown repository, branch, workspace or seed node, or one ``caller`` may not read.

    Notes
    -----
    The walk's cost (:func:`traverse_from`), then one window query for the n nodes' versions
    (per 500), one for the relations between them, and on a branch with a parent, two more
    for the ancestors' versions of what the branch wrote.
    """
    at = read_time(as_of, include_invalid)
    now = read_time()
    with reading(services, caller, repo, branch) as (session, view):
        walked = traverse_from(session, services, view, seeds, hops=hops, direction=check_direction(direction),
                               types=types, max_nodes=max_nodes, fan_out=fan_out, at=at)
        wanted = _check_types(types)
        ids = [n["node_id"] for n in walked["nodes"]]
        versions = nodes_by_id(session, view, ids)
        edges: list[Any] = []
        for start in range(0, len(ids), 500):
            part = ids[start:start + 500]
            stmt, _ = visible_select(RelationVersion, view, store.RELATION_KEY, RelationVersion.from_node_id.in_(part),
                                     RelationVersion.to_node_id.in_(ids))
            edges.extend(e for e in session.scalars(stmt) if (wanted is None or e.rel_type in wanted)
                         and valid_at(e.valid_from, e.valid_to, at))
        own = view.branch.id
        parents = Chain(view.chain[1:])
        mine_nodes = [nid for nid, v in versions.items() if v.branch_id == own]
        mine_edges = [e for e in edges if e.branch_id == own]
        before_nodes: set[str] = set()
        before_edges: set[tuple[str, str, str]] = set()
        if parents.chain and mine_nodes:
            stmt, _ = visible_select(NodeVersion, parents, (NodeVersion.node_id,),
                                     NodeVersion.node_id.in_(mine_nodes))
            before_nodes = {v.node_id for v in session.scalars(stmt)}
        if parents.chain and mine_edges:
            froms = sorted({e.from_node_id for e in mine_edges})
            stmt, _ = visible_select(RelationVersion, parents, store.RELATION_KEY,
                                     RelationVersion.from_node_id.in_(froms))
            before_edges = {(e.from_node_id, e.rel_type, e.to_node_id) for e in session.scalars(stmt)}
        parent_id = view.branch.parent_id
        parent_row = session.get(Branch, parent_id) if parent_id is not None else None
        parent = parent_row.name if parent_row is not None else None

    def change(written_here: bool, existed: bool) -> str | None:
        if not written_here or not parents.chain:
            return None
        return "changed" if existed else "added"

    address = {n["node_id"]: f"{n['workspace']}:{n['path']}" for n in walked["nodes"]}
    nodes = []
    for n in walked["nodes"]:
        version = versions.get(n["node_id"])
        properties = version.properties if version is not None else {}
        title = properties.get("title") if isinstance(properties, dict) else None
        nodes.append({"workspace": n["workspace"], "path": n["path"], "node_id": n["node_id"],
                      "node_type": version.node_type if version is not None else None,
                      "title": title if isinstance(title, str) else None, "hop": n["hop"],
                      "change": change(version is not None and version.branch_id == own,
                                       n["node_id"] in before_nodes)})
    drawn = [{"from": address[e.from_node_id], "to": address[e.to_node_id], "from_id": e.from_node_id,
              "to_id": e.to_node_id, "type": e.rel_type, "weight": e.weight,
              "change": change(e.branch_id == own, (e.from_node_id, e.rel_type, e.to_node_id) in before_edges),
              **_validity_fields(e.valid_from, e.valid_to, e.invalidated_by),
              "current": valid_at(e.valid_from, e.valid_to, now)}
             for e in edges if e.from_node_id in address and e.to_node_id in address]
    drawn.sort(key=lambda e: (e["from"], e["type"], e["to"]))
    return {"nodes": nodes, "edges": drawn, "truncated": walked["truncated"], "branch": branch, "parent": parent}
