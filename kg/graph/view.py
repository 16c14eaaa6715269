"""The networkx view of one branch's relations, kept current by applying newer versions.

A :class:`GraphView` holds what a branch sees at one revision: a
``networkx.MultiDiGraph`` with one node per live node id and one edge per live relation, keyed
by relation type, with ``weight`` and ``properties`` attributes. It is built once from SQL and
then brought forward by :meth:`GraphView.apply` with the node and relation versions written on
the branch since (``revision > view.revision``); it is never rebuilt per request. Pure: the
caller reads the rows (``kg.store.relations``) and passes them in.

Rules kept here, the same as SQL visibility (``kg.store.relations.visible_relations``):

- an edge is live when its newest visible version is not a tombstone and both endpoints are
  live nodes; a live relation with a deleted endpoint is kept aside (*dormant*) and comes back
  if the node does (a merge can revive a node id);
- a node id is bound to one ``(workspace, path)`` for its whole life (a new node at the same
  path gets a new id), so addresses never change under an edge.

Memory: the edge attribute dicts of edges with no properties are shared per weight value (they
are never mutated: an update replaces the dict), which roughly halves the size of a graph of
plain weighted edges.

Reads: each node keeps its out-edges and its in-edges apart (networkx's ``succ`` and ``pred``),
and the first read of one direction of a node sorts that direction's edges once, in the stable
order, into a list of plain tuples (:data:`~kg.graph.neighbors.Edge`: a
:class:`~kg.graph.neighbors.Neighbor`'s fields) kept for the next reads (updated in place by
:meth:`GraphView.apply`). An edge without properties holds None there, so its tuple holds no
container and the cyclic collector stops tracking it (it untracks exact tuples only, not named
tuples): a million tracked entries would make every full collection walk them. A walk in one
direction reads only that direction's edges and makes no object per edge; NEIGHBORS with a
limit reads ``limit + 1`` of them; ``BOTH`` merges the two sorted lists lazily. The lists are
bounded by ``max_sorted_entries`` and evicted least-recently-used.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from operator import eq, itemgetter
from typing import Any, Literal

import networkx as nx

from kg.graph.neighbors import Direction, Edge, Neighbor, SortKey
from kg.graph.rows import Validity
from kg.graph.validity import ValidAt, valid_at

#: The estimate of a view's memory (:attr:`GraphView.estimated_bytes`), measured with
#: ``tracemalloc``: an empty view (its graph, dicts and lock) about 1.4 kB,
#: a node with relations (adjacency dicts, address, id) about 950 B, a plain edge about 200 B
#: (a million edges between 100,000 nodes: about 350 MB, as ``bench/graph.py`` measures), an
#: edge in a node's sorted list (its 5-tuple, its slot, the list and key of each node and
#: direction) about 110 B at ten edges per list.
VIEW_BYTES = 2_000
NODE_BYTES = 1_000
EDGE_BYTES = 250
SORTED_ENTRY_BYTES = 110
#: An edge's weight (:data:`~kg.graph.neighbors.Edge`'s third field), read in C.
_WEIGHT = itemgetter(2)
#: Two sorted lists together at most this long (``BOTH`` on a node of small degree) are merged
#: by sorting their concatenation (:meth:`GraphView._merged`) or, for NEIGHBORS, by a merge of
#: their heads that compares weights first (:meth:`GraphView._merged_located`); longer ones by
#: binary search of the shorter's edges in the longer.
SMALL_MERGE = 64

EdgeKey = tuple[str, str, str]  # (from node id, relation type, to node id)
#: A node's sorted list of one direction: ``(node id, "OUT" or "IN")``.
ListKey = tuple[str, str]


@dataclass(frozen=True, slots=True)
class NodeAddress:
    """Where a node lives: workspace name, path, and ``workspace:path``."""

    workspace: str
    path: str
    address: str


@dataclass(frozen=True, slots=True)
class EdgeRow:
    """One relation version: its key, weight, properties and whether it is a tombstone."""

    from_id: str
    rel_type: str
    to_id: str
    weight: float | None
    properties: dict[str, Any] | None
    deleted: bool = False
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    invalidated_by: str | None = None



@dataclass(frozen=True, slots=True)
class NodeRow:
    """One node version, reduced to what the graph needs."""

    node_id: str
    workspace: str
    path: str
    deleted: bool = False


class GraphView:
    """What one branch's relations look like at :attr:`revision`, in memory.

    Parameters
    ----------
    revision : int
        The revision the rows given to :meth:`load` were read at.
    max_sorted_entries : int
        Budget of the nodes' sorted edge lists (entries, across every node and direction of
        this view).

    Attributes
    ----------
    graph : networkx.MultiDiGraph
        Live nodes (ids) and live edges. Read it only while holding :attr:`lock`.
    revision : int
    lock : threading.RLock
        Held by whoever brings the view forward or reads it.
    """

    def __init__(self, revision: int, *, max_sorted_entries: int = 1_000_000) -> None:
        self.graph = nx.MultiDiGraph()
        self.revision = revision
        self.lock = threading.RLock()
        self.max_sorted_entries = max_sorted_entries
        self._addresses: dict[str, NodeAddress] = {}
        self._by_address: dict[tuple[str, str], str] = {}
        self._dormant: dict[EdgeKey, tuple[float | None, dict | None]] = {}
        self._dormant_by_node: dict[str, set[EdgeKey]] = {}
        self._sorted: OrderedDict[ListKey, list[Edge]] = OrderedDict()
        # The other node's address of the first edges of a kept sorted list, as far as NEIGHBORS
        # has read them (:meth:`edges_located`): a change to the list cuts it at the change.
        self._where: dict[ListKey, list[NodeAddress]] = {}
        self._sorted_entries = 0
        self._shared_attrs: dict[float | None, dict] = {}
        self._ids: dict[str, str] = {}
        self.edge_count = 0
        # (valid_from, valid_to, invalidated_by) of the edges (live or dormant) that carry a
        # validity: most edges carry none, and a view without any reads as fast as before
        # (issue 17).
        self._validity: dict[EdgeKey, Validity] = {}

    # -- size ------------------------------------------------------------------------------

    @property
    def cost(self) -> int:
        """Edges held (live and dormant): what the cache's budget counts."""
        return self.edge_count + len(self._dormant)

    @property
    def estimated_bytes(self) -> int:
        """An estimate of the memory the view holds, in bytes: what the cache's budget counts.

        ``VIEW_BYTES + NODE_BYTES * nodes + EDGE_BYTES * (edges + dormant)
        + SORTED_ENTRY_BYTES * sorted entries``;
        a view without edges still costs ``VIEW_BYTES``. O(1).
        """
        return (VIEW_BYTES + NODE_BYTES * len(self._ids) + EDGE_BYTES * self.cost
                + SORTED_ENTRY_BYTES * self._sorted_entries)

    @property
    def node_count(self) -> int:
        """Live nodes that have at least one relation (live or dormant)."""
        return len(self._addresses)

    # -- lookups ---------------------------------------------------------------------------

    def node_id(self, workspace: str, path: str) -> str | None:
        """The id of the live node at ``workspace:path`` if it has relations, else None (the
        caller asks SQL: the node may exist without edges)."""
        return self._by_address.get((workspace, path))

    def address(self, node_id: Hashable) -> NodeAddress:
        """The address of a live node of the view."""
        return self._addresses[node_id]  # type: ignore[index]

    def iter_neighbors(self, node_id: Hashable, *, direction: Direction = "BOTH",
                       types: Collection[str] | None = None,
                       workspaces: Collection[str] | None = None, at: ValidAt = None) -> Iterator[Edge]:
        """The edges around ``node_id`` in the stable order, lazily.

        Parameters
        ----------
        node_id : hashable
        direction : {"OUT", "IN", "BOTH"}
        types : collection of str, optional
            Only these relation types.
        workspaces : collection of str, optional
            Only edges to nodes of these workspaces (a restricted reader's scope); None: all.
        at : datetime or None, optional
            Only edges valid at this world time (:func:`kg.graph.validity.valid_at`); None:
            every edge, whatever its validity.

        Returns
        -------
        iterator of Edge
            The view's own tuples, in :class:`~kg.graph.neighbors.Neighbor`'s field order (read
            them by index or unpacking; :meth:`neighbors` answers Neighbor objects):
            ``properties`` is the edge's own dict (never mutate it), or None when it has none.

        Notes
        -----
        A direction's sorted list is made on its first read, O(d log d) for d edges in that
        direction, and kept: a later read of k edges costs O(k) plus the edges skipped by the
        type, workspace and validity filters. ``OUT`` and ``IN`` read only their own edges;
        ``BOTH`` merges the two lists lazily (:meth:`_merged`).
        """
        if node_id not in self.graph._node:  # networkx's node dict: no call of its __contains__
            return iter(())
        edges: Iterable[Edge]
        if direction == "BOTH":
            edges = self._merged(self._sorted_list(node_id, "IN"), self._sorted_list(node_id, "OUT"))  # type: ignore[arg-type]
        else:
            edges = self._sorted_list(node_id, direction)  # type: ignore[arg-type]
        validity = self._validity if at is not None and self._validity else None
        if types is None and workspaces is None and validity is None:
            return iter(edges)
        return self._filtered(edges, node_id, types, workspaces, validity, at)  # type: ignore[arg-type]

    def lookup(self, *, direction: Direction = "BOTH", types: Collection[str] | None = None,
               workspaces: Collection[str] | None = None,
               at: ValidAt = None) -> Callable[[Hashable], Iterable[Edge]]:
        """A walk's neighbor lookup (:func:`kg.graph.traverse.reach`): :meth:`iter_neighbors`
        with these arguments, decided once for every node the walk expands.

        Parameters
        ----------
        direction, types, workspaces, at
            As :meth:`iter_neighbors`.

        Returns
        -------
        callable(node id) -> iterable of Edge
            The edges around a node in the stable order. In one direction with no filter to
            apply (no types, no workspaces, no validity held or asked), the node's sorted list
            itself (never mutate it; it is changed only by :meth:`apply`, under :attr:`lock`),
            which a walk reads by slices; otherwise :meth:`iter_neighbors`'s iterator.
        """
        validity = at is not None and bool(self._validity)
        if direction == "BOTH" or types is not None or workspaces is not None or validity:
            def filtered(node_id: Hashable) -> Iterable[Edge]:
                return self.iter_neighbors(node_id, direction=direction, types=types, workspaces=workspaces, at=at)
            return filtered
        nodes, sorted_list, one = self.graph._node, self._sorted_list, direction
        kept, use = self._sorted.get, self._sorted.move_to_end

        def listed(node_id: Hashable) -> Iterable[Edge]:
            key = (node_id, one)
            found = kept(key)  # type: ignore[arg-type]
            if found is not None:  # kept from an earlier read: _sorted_list's first answer, inlined
                use(key)  # type: ignore[arg-type]
                return found
            return sorted_list(node_id, one) if node_id in nodes else ()  # type: ignore[arg-type]
        return listed

    def _filtered(self, edges: Iterable[Edge], node_id: str, types: Collection[str] | None,
                  workspaces: Collection[str] | None, validity: dict[EdgeKey, Validity] | None,
                  at: ValidAt) -> Iterator[Edge]:
        addresses = self._addresses
        for edge in edges:
            other, rel_type = edge[0], edge[1]
            if types is not None and rel_type not in types:
                continue
            if workspaces is not None and addresses[other].workspace not in workspaces:  # type: ignore[index]
                continue
            if validity is not None:
                interval = validity.get((node_id, rel_type, other) if edge[3] == "OUT"  # type: ignore[arg-type]
                                        else (other, rel_type, node_id))
                if interval is not None and not valid_at(interval[0], interval[1], at):
                    continue
            yield edge

    def neighbors(self, node_id: Hashable, *, direction: Direction = "BOTH",
                  types: Collection[str] | None = None, limit: int,
                  workspaces: Collection[str] | None = None, at: ValidAt = None) -> tuple[list[Neighbor], bool]:
        """At most ``limit`` edges around ``node_id`` in the stable order, and whether more
        matched (reads ``limit + 1`` of a node's sorted edges, not its degree); ``workspaces``
        and ``at`` as in :meth:`iter_neighbors`: the filters apply before the cut. As
        :meth:`edges`, each made a :class:`~kg.graph.neighbors.Neighbor`."""
        found, more = self.edges(node_id, direction=direction, types=types, limit=limit, workspaces=workspaces,
                                 at=at)
        # tuple.__new__ in C: a Neighbor per edge without a Python call per edge (Neighbor._make is one)
        made: list[Neighbor] = list(map(tuple.__new__, itertools.repeat(Neighbor), found))
        return made, more

    def edges(self, node_id: Hashable, *, direction: Direction = "BOTH",
              types: Collection[str] | None = None, limit: int,
              workspaces: Collection[str] | None = None, at: ValidAt = None) -> tuple[list[Edge], bool]:
        """:meth:`neighbors` as the view's own tuples (:data:`~kg.graph.neighbors.Edge`): nothing
        is made per edge (a slice of a node's sorted list when no filter applies)."""
        if node_id not in self.graph._node:
            return [], False
        found: list[Edge]
        if (types is not None or workspaces is not None or (at is not None and self._validity)):
            found = list(itertools.islice(self.iter_neighbors(
                node_id, direction=direction, types=types, workspaces=workspaces, at=at), limit + 1))
        elif direction == "BOTH":
            incoming = self._sorted_list(node_id, "IN", first=limit + 1)  # type: ignore[arg-type]
            outgoing = self._sorted_list(node_id, "OUT", first=limit + 1)  # type: ignore[arg-type]
            found = list(itertools.islice(self._merged(incoming[:limit + 1], outgoing[:limit + 1]), limit + 1))
        else:
            found = self._sorted_list(node_id, direction, first=limit + 1)[:limit + 1]  # type: ignore[arg-type]
        return found[:limit], len(found) > limit

    def edges_located(self, node_id: Hashable, *, direction: Direction = "BOTH",
                      types: Collection[str] | None = None, limit: int, workspaces: Collection[str] | None = None,
                      at: ValidAt = None) -> tuple[list[Edge], list[NodeAddress], bool]:
        """:meth:`edges` and the other node's address of each edge, in the same order.

        Without a filter (types, workspaces, a validity to check), the addresses of a kept
        sorted list's first edges are kept with it as far as they were read (a change to the
        list cuts them at the change; they go with the list): a hub's first 10,000 edges are
        then a slice of each, no lookup per edge. Otherwise one lookup per edge
        (:meth:`addresses_of`).
        """
        if node_id not in self.graph._node:
            return [], [], False
        if types is not None or workspaces is not None or (at is not None and self._validity):
            found, more = self.edges(node_id, direction=direction, types=types, limit=limit, workspaces=workspaces,
                                     at=at)
            return found, self.addresses_of(map(itemgetter(0), found)), more
        first = limit + 1
        if direction != "BOTH":
            edges = self._sorted_list(node_id, direction, first=first)  # type: ignore[arg-type]
            found = edges[:first]
            where = self._located((node_id, direction), edges, len(found))  # type: ignore[arg-type]
        else:
            incoming = self._sorted_list(node_id, "IN", first=first)  # type: ignore[arg-type]
            in_where = self._located((node_id, "IN"), incoming, min(first, len(incoming)))  # type: ignore[arg-type]
            outgoing = self._sorted_list(node_id, "OUT", first=first)  # type: ignore[arg-type]
            out_where = self._located((node_id, "OUT"), outgoing, min(first, len(outgoing)))  # type: ignore[arg-type]
            found, where = self._merged_located(incoming[:first], in_where, outgoing[:first], out_where, first)
        return found[:limit], where[:min(limit, len(found))], len(found) > limit

    def _located(self, key: ListKey, edges: list[Edge], count: int) -> list[NodeAddress]:
        """The addresses of the first ``count`` edges of a node's sorted list ``edges`` (or more,
        aligned with it): kept with the list when it is kept, else looked up."""
        if self._sorted.get(key) is not edges:  # too long to keep: sorted for this read only
            return self.addresses_of(map(itemgetter(0), edges[:count]))
        where = self._where.get(key)
        if where is None:
            where = self._where[key] = []
        if len(where) < count:
            where += map(self._addresses.__getitem__, map(itemgetter(0), edges[len(where):count]))
        return where

    def _merged_located(self, a: list[Edge], a_where: list[NodeAddress], b: list[Edge], b_where: list[NodeAddress],
                        first: int) -> tuple[list[Edge], list[NodeAddress]]:
        """The first ``first`` edges of two sorted lists (each at most that long) in the
        stable order, and their addresses (aligned lists, each at least as long as its edges):
        :meth:`_merged`, eager, carrying the addresses along by slices."""
        if not a or not b:
            edges, where = (b, b_where) if not a else (a, a_where)
            return edges, where[:len(edges)]
        key = self._order_key
        if len(a) + len(b) <= SMALL_MERGE:
            # a merge of the two heads up to ``first``: weights decide unless equal or null,
            # the whole key (address, type, direction) then
            edges, where = [], []
            i = j = 0
            na, nb, last = len(a), len(b), min(first, len(a) + len(b))
            while i < na and j < nb and i + j < last:
                x, y = a[i], b[j]
                wx, wy = x[2], y[2]
                if wx is not None and wy is not None and wx != wy:
                    x_first = wx > wy
                else:
                    x_first = key(x) < key(y)
                if x_first:
                    edges.append(x)
                    where.append(a_where[i])
                    i += 1
                else:
                    edges.append(y)
                    where.append(b_where[j])
                    j += 1
            if i + j < last:  # one list is spent: the rest of the other follows
                edges += a[i:] if i < na else b[j:]
                where += a_where[i:na] if i < na else b_where[j:nb]
            return edges[:first], where[:first]
        if len(a) > len(b):
            a, a_where, b, b_where = b, b_where, a, a_where
        edges, where = [], []
        at = 0
        for i, edge in enumerate(a):  # the shorter placed into the longer by binary search
            to = bisect.bisect_left(b, key(edge), lo=at, key=key)
            edges += b[at:to]
            where += b_where[at:to]
            edges.append(edge)
            where.append(a_where[i])
            at = to
            if len(edges) >= first:
                break
        else:
            edges += b[at:]
            where += b_where[at:len(b)]
        return edges[:first], where[:first]

    @property
    def holds_validity(self) -> bool:
        """Whether any edge (live or dormant) carries a validity; when none does, every edge
        is valid always and :meth:`validity` answers ``(None, None, None)``. O(1)."""
        return bool(self._validity)

    def validity(self, from_id: str, rel_type: str, to_id: str) -> Validity:
        """The world-time validity of one edge: ``(valid_from, valid_to, invalidated_by)``,
        each None when unset (an edge without any is valid always). O(1)."""
        return self._validity.get((from_id, rel_type, to_id), (None, None, None))

    def addresses_of(self, node_ids: Iterable[Hashable]) -> list[NodeAddress]:
        """The addresses of live nodes of the view, in the given order (a KeyError for any
        other). One lookup per id, made in C: no object per node."""
        return list(map(self._addresses.__getitem__, node_ids))  # type: ignore[arg-type]

    def validities(self, node_id: Hashable, edges: Iterable[Edge]) -> list[Validity] | None:
        """:meth:`validity` of each of the edges around ``node_id`` (as :meth:`edges` answers
        them), in their order; None when no edge of the view carries a validity (every edge
        then answers ``(None, None, None)``)."""
        if not self._validity:
            return None
        get, unset = self._validity.get, (None, None, None)
        return [get((node_id, rel_type, other) if d == "OUT" else (other, rel_type, node_id), unset)  # type: ignore[arg-type]
                for other, rel_type, _, d, _ in edges]

    # -- loading and applying versions -----------------------------------------------------

    def release(self, *, slice_size: int = 20_000) -> None:
        """Empty this view a slice of entries at a time, handing the interpreter lock to the
        other threads between slices; only for a view no one else reads (a build given up).

        Dropping a view of millions of edges at once frees every container it holds in one
        go with the interpreter lock held: a build that gave up at the 2,000,000-edge budget
        made a NEIGHBORS call of another thread wait 1.95 s (``bench/scale.py`` at 1M nodes).

        Parameters
        ----------
        slice_size : int
            Entries freed between two hand-overs of the lock.
        """
        tables: list[Any] = [self.graph._succ, self.graph._pred, self.graph._node, self._addresses,
                             self._by_address, self._ids, self._sorted, self._where, self._validity, self._dormant,
                             self._dormant_by_node, self._shared_attrs]
        for table in tables:
            while table:
                for key in list(itertools.islice(iter(table), slice_size)):
                    del table[key]
                time.sleep(0)  # let a thread waiting for the interpreter lock take it
        self.edge_count = 0
        self._sorted_entries = 0

    def load(self, edges: Iterable[EdgeRow], resolve: Callable[[set[str]], Mapping[str, NodeAddress]],
             *, max_edges: int | None = None) -> bool:
        """Fill an empty view with the visible live relations of the branch.

        Parameters
        ----------
        edges : iterable of EdgeRow
            The visible, not deleted relation versions (their endpoints may be deleted).
        resolve : callable(set of node ids) -> {node id: NodeAddress}
            The live nodes among the given ids, at :attr:`revision`.
        max_edges : int, optional
            Give up (return False) as soon as more relations than this are read.

        Returns
        -------
        bool
            False when ``max_edges`` was exceeded: the view is then partial, to be dropped.

        Notes
        -----
        One pass over the rows, each added straight into networkx's adjacency dicts (what
        ``MultiDiGraph.add_edge`` does, without its per-call overhead), then one ``resolve`` of
        every endpoint; edges of endpoints that are not live are moved aside. O(m) for m rows;
        the rows are not kept.
        """
        succ, pred, node = self.graph._succ, self.graph._pred, self.graph._node
        ids = self._ids
        count = 0
        for row in edges:
            count += 1
            if max_edges is not None and count > max_edges:
                return False
            f = ids.setdefault(row.from_id, row.from_id)
            to = ids.setdefault(row.to_id, row.to_id)
            if f not in succ:
                succ[f], pred[f], node[f] = {}, {}, {}
            if to not in succ:
                succ[to], pred[to], node[to] = {}, {}, {}
            keyed = succ[f].get(to)
            if keyed is None:
                keyed = succ[f][to] = pred[to][f] = {}
            keyed[row.rel_type] = self._attrs(row.weight, row.properties or None)
            if row.valid_from is not None or row.valid_to is not None or row.invalidated_by is not None:
                self._validity[(f, row.rel_type, to)] = (row.valid_from, row.valid_to, row.invalidated_by)
        self.edge_count = count
        for node_id, where in resolve(set(succ)).items():
            self._set_address(self._id(node_id), where)
        for dead in [n for n in succ if n not in self._addresses]:
            edges_of = [(dead, t, to, data) for to, keyed in succ[dead].items() for t, data in keyed.items()]
            edges_of += [(f, t, dead, data) for f, keyed in pred[dead].items() for t, data in keyed.items()
                         if f != dead]
            for f, t, to, data in edges_of:
                self.graph.remove_edge(f, to, key=t)
                self.edge_count -= 1
                self._put_edge((f, t, to), data["weight"], data["properties"])  # dormant: an end is dead
            self.graph.remove_node(dead)
        return True

    def apply(self, nodes: Iterable[NodeRow], edges: Iterable[EdgeRow],
              resolve: Callable[[set[str]], Mapping[str, NodeAddress]], *, revision: int) -> None:
        """Bring the view forward to ``revision``.

        Parameters
        ----------
        nodes, edges : iterables of NodeRow, EdgeRow
            Every node and relation version written on the branch with
            ``self.revision < revision <= revision``, oldest first (the last version of an
            entity wins).
        resolve : callable(set of node ids) -> {node id: NodeAddress}
            The live nodes among ids the view does not track, at ``revision``.
        revision : int

        Notes
        -----
        O(c log d) for c changed versions touching hubs of degree d (sorted lists are updated
        in place), plus one ``resolve`` call for endpoints the view has not seen.
        """
        last_node: dict[str, NodeRow] = {}
        for row in nodes:
            last_node[self._id(row.node_id)] = row
        last_edge: dict[EdgeKey, EdgeRow] = {}
        for erow in edges:
            last_edge[(self._id(erow.from_id), erow.rel_type, self._id(erow.to_id))] = erow
        for node_id, row in last_node.items():
            if row.deleted:
                self._kill(node_id)
        for node_id, row in last_node.items():
            # Only nodes the view tracks: a node without relations is looked up when one comes.
            if not row.deleted and (node_id in self._addresses or node_id in self._dormant_by_node):
                self._revive(node_id, NodeAddress(row.workspace, row.path, f"{row.workspace}:{row.path}"))
        needed = {end for key, row in last_edge.items() if not row.deleted for end in (key[0], key[2])
                  if end not in self._addresses}
        unknown: set[str] = set()
        for end in needed:
            found = last_node.get(end)
            if found is None:
                unknown.add(end)
            elif not found.deleted:
                self._set_address(end, NodeAddress(found.workspace, found.path, f"{found.workspace}:{found.path}"))
        if unknown:
            for node_id, where in resolve(unknown).items():
                self._set_address(self._id(node_id), where)
        for key, erow in last_edge.items():
            self._remove_edge(key)
            self._validity.pop(key, None)
            if not erow.deleted:
                self._put_edge(key, erow.weight, erow.properties)
                if erow.valid_from is not None or erow.valid_to is not None or erow.invalidated_by is not None:
                    self._validity[key] = (erow.valid_from, erow.valid_to, erow.invalidated_by)
        self.revision = revision

    # -- internals -------------------------------------------------------------------------

    def _id(self, node_id: str) -> str:
        """One string object per node id, shared by every structure that holds it."""
        return self._ids.setdefault(node_id, node_id)

    def _set_address(self, node_id: str, where: NodeAddress) -> None:
        self._addresses[node_id] = where
        self._by_address[(where.workspace, where.path)] = node_id

    def _attrs(self, weight: float | None, properties: dict | None) -> dict:
        if properties:
            return {"weight": weight, "properties": properties}
        shared = self._shared_attrs.get(weight)
        if shared is None:
            shared = self._shared_attrs[weight] = {"weight": weight, "properties": None}
        return shared

    def _order_key(self, edge: Edge) -> SortKey:
        """The stable-order key of an edge of a node's sorted list (:mod:`kg.graph.neighbors`)."""
        w = edge[2]
        return (w is None, -w if w is not None else 0.0, self._addresses[edge[0]].address,  # type: ignore[index]
                edge[1], edge[3])

    def _put_edge(self, key: EdgeKey, weight: float | None, properties: dict | None) -> None:
        f, t, to = key
        if f in self._addresses and to in self._addresses:
            self.graph.add_edge(f, to, key=t)
            # networkx's own adjacency dict (succ and pred share it): swap in the shared attrs.
            self.graph._succ[f][to][t] = self._attrs(weight, properties or None)
            self.edge_count += 1
            shown = properties or None
            self._sorted_insert((f, "OUT"), (to, t, weight, "OUT", shown))
            self._sorted_insert((to, "IN"), (f, t, weight, "IN", shown))
        else:
            self._dormant[key] = (weight, properties or None)
            for end in (f, to):
                self._dormant_by_node.setdefault(end, set()).add(key)

    def _remove_edge(self, key: EdgeKey) -> None:
        f, t, to = key
        keyed = self.graph._succ.get(f, {}).get(to)
        if keyed is not None and t in keyed:
            weight = keyed[t]["weight"]
            self._sorted_delete((f, "OUT"), (to, t, weight, "OUT", None))
            self._sorted_delete((to, "IN"), (f, t, weight, "IN", None))
            self.graph.remove_edge(f, to, key=t)
            self.edge_count -= 1
        elif self._dormant.pop(key, None) is not None:
            for end in (f, to):
                keys = self._dormant_by_node.get(end)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del self._dormant_by_node[end]

    def _kill(self, node_id: str) -> None:
        """A node was deleted: its live edges become dormant, its address is forgotten."""
        if node_id not in self._addresses:
            return
        if node_id in self.graph:
            live = [(node_id, t, to, data) for to, keyed in self.graph._succ[node_id].items()
                    for t, data in keyed.items()]
            live += [(f, t, node_id, data) for f, keyed in self.graph._pred[node_id].items()
                     for t, data in keyed.items() if f != node_id]
            for f, t, to, _data in live:
                self._remove_edge((f, t, to))
            where = self._addresses.pop(node_id)
            for f, t, to, data in live:
                self._put_edge((f, t, to), data["weight"], data["properties"])
            self.graph.remove_node(node_id)
        else:
            where = self._addresses.pop(node_id)
        if self._by_address.get((where.workspace, where.path)) == node_id:
            del self._by_address[(where.workspace, where.path)]
        for d in ("OUT", "IN"):
            dropped = self._sorted.pop((node_id, d), None)
            self._where.pop((node_id, d), None)
            if dropped is not None:
                self._sorted_entries -= len(dropped)

    def _revive(self, node_id: str, where: NodeAddress) -> None:
        """A node version is live: record its address; its dormant edges may come back."""
        self._set_address(node_id, where)
        for key in list(self._dormant_by_node.get(node_id, ())):
            other = key[2] if key[0] == node_id else key[0]
            if other in self._addresses:
                weight, properties = self._dormant[key]
                self._remove_edge(key)
                self._put_edge(key, weight, properties)

    def _sorted_list(self, node_id: str, direction: Literal["OUT", "IN"], *,
                     first: int | None = None) -> list[Edge]:
        """The edges of one direction of ``node_id`` in the stable order: kept from an earlier
        read, or sorted now and kept (within ``max_sorted_entries``, least-recently-used).

        ``first``: only the first this many are needed; a list too long to keep is then cut
        with a bounded heap (O(d log first)) instead of sorted whole.
        """
        key = (node_id, direction)
        cached = self._sorted.get(key)
        if cached is not None:
            self._sorted.move_to_end(key)
            return cached
        adjacency = (self.graph._succ if direction == "OUT" else self.graph._pred)[node_id]
        edges: list[Edge] = [(other, t, data["weight"], direction, data["properties"] or None)
                             for other, keyed in adjacency.items() for t, data in keyed.items()]
        if len(edges) <= self.max_sorted_entries:
            edges = self._ordered(edges)
        else:  # never kept: the whole key, and only what is asked for
            where = self._addresses
            items = [(w is None, -w if w is not None else 0.0, where[edge[0]].address, edge[1], edge)  # type: ignore[index]
                     for edge in edges for w in (edge[2],)]
            if first is not None and first < len(items):
                return [item[4] for item in heapq.nsmallest(first, items)]
            items.sort()  # (address, type) is unique within a direction: the edge is never compared
            return [item[4] for item in items]
        self._sorted[key] = edges
        self._sorted_entries += len(edges)
        while self._sorted_entries > self.max_sorted_entries:
            evicted, dropped = self._sorted.popitem(last=False)
            self._where.pop(evicted, None)
            self._sorted_entries -= len(dropped)
        return edges

    def _ordered(self, edges: list[Edge]) -> list[Edge]:
        """The edges of one direction of a node in the stable order: sorted by weight alone
        (descending; a float key sorts in C, no key tuple per edge), then each run of equal
        weights, and the edges without a weight (last), by the other node's address and the
        type. Addresses are read only for those: most weights of a node differ."""
        weights = list(map(_WEIGHT, edges))
        nulls: list[Edge] = []
        if None in weights:
            nulls = sorted((e for e in edges if e[2] is None), key=self._address_type)
            edges = [e for e in edges if e[2] is not None]
            weights = list(map(_WEIGHT, edges))
        if len(set(weights)) < len(weights):  # ties: sorted by weight, then each run of them
            edges.sort(key=_WEIGHT, reverse=True)  # stable; equal weights (0.0 and -0.0, 1 and 1.0) lie together
            weights = list(map(_WEIGHT, edges))
            tied = itertools.compress(range(len(weights) - 1), map(eq, weights, itertools.islice(weights, 1, None)))
            start = end = -2
            for i in itertools.chain(tied, (-2,)):  # i: weights[i] == weights[i + 1]; -2 closes the last run
                if i != end + 1:
                    if start >= 0:
                        edges[start:end + 2] = sorted(edges[start:end + 2], key=self._address_type)
                    start = i
                end = i
        else:
            edges.sort(key=_WEIGHT, reverse=True)
        return edges + nulls if nulls else edges

    def _address_type(self, edge: Edge) -> tuple[str, str]:
        """The stable order's key among edges of one direction and weight: address, then type."""
        return self._addresses[edge[0]].address, edge[1]  # type: ignore[index]

    def _merged(self, a: Sequence[Edge], b: Sequence[Edge]) -> Iterable[Edge]:
        """Two sorted lists of a node (its in- and out-edges) as one, in the stable order.

        Small lists are sorted together; otherwise each edge of the shorter list is placed into
        the longer by binary search, O(s log l) key computations, lazily (a hub's first k
        edges cost O(min(s, k) log l), not its degree).
        """
        if not a:
            return b
        if not b:
            return a
        key = self._order_key
        if len(a) + len(b) <= SMALL_MERGE:
            return sorted(itertools.chain(a, b), key=key)
        if len(a) > len(b):
            a, b = b, a
        return self._merging(a, b, key)

    @staticmethod
    def _merging(short: Sequence[Edge], long: Sequence[Edge],
                 key: Callable[[Edge], SortKey]) -> Iterator[Edge]:
        at = 0
        for edge in short:
            to = bisect.bisect_left(long, key(edge), lo=at, key=key)
            if to > at:
                yield from itertools.islice(long, at, to)
            yield edge
            at = to
        yield from itertools.islice(long, at, None)

    def _sorted_insert(self, key: ListKey, edge: Edge) -> None:
        edges = self._sorted.get(key)
        if edges is not None:
            i = bisect.bisect_right(edges, self._order_key(edge), key=self._order_key)
            edges.insert(i, edge)
            self._sorted_entries += 1
            self._cut_where(key, i)

    def _cut_where(self, key: ListKey, at: int) -> None:
        """The sorted list of ``key`` changed at index ``at``: its addresses hold from there no more."""
        where = self._where.get(key)
        if where is not None and len(where) > at:
            del where[at:]

    def _sorted_delete(self, key: ListKey, edge: Edge) -> None:
        """Remove the edge of ``edge``'s other node and type (its weight as held: the key)."""
        edges = self._sorted.get(key)
        if edges is not None:
            i = bisect.bisect_left(edges, self._order_key(edge), key=self._order_key)
            if i < len(edges) and edges[i][0] == edge[0] and edges[i][1] == edge[1]:
                del edges[i]
                self._sorted_entries -= 1
                self._cut_where(key, i)
