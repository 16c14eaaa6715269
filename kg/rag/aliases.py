"""Where an entity's other spellings live: ``{alias slug: entity path}`` per branch state,
brought forward by the branch's changes instead of read whole for every extraction.

``extract-entities`` links a spelling that has no node of its own (``/entities/<slug>`` does
not exist) to the entity that lists it among its ``aliases``: a name ``resolve-entities``
merged away, or another spelling an extraction recorded. Reading every entity node of the
workspace for that costs O(n) per extraction, so O(n^2) for a corpus extracted document by
document (4,858 HotpotQA passages: ~30,000 entities, ~1 s per extraction at the end). The map
is therefore kept per branch state, as the networkx views are (:func:`kg.rag.graph.view_key`):
built once by one read, then brought forward by the node versions written on the branch since
(:func:`kg.store.relations.list_node_changes`, O(changes)), within the caller's transaction.

A branch's read chain is fixed from its fork on (a reset forks it again and so changes the
key); revisions only grow, so the versions written after the state's revision are exactly what
it lacks. A read behind the kept state (an older snapshot) is answered by a fresh read, not
kept.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from kg.store.nodes import nodes_by_id, visible_nodes
from kg.store.relations import list_node_changes
from kg.store.repos import BranchView, workspace_id
from kg.text.names import entity_slug

#: Where entity nodes live, and their node type (as :mod:`kg.rag.entities` writes them).
ENTITY_ROOT = "/entities"
ENTITY_NODE_TYPE = "kg:Entity"
#: Branch states kept (least recently used dropped first).
MAX_STATES = 64


def alias_slugs(path: str, node_type: str, properties: dict[str, Any]) -> frozenset[str]:
    """The slugs of an entity node's ``aliases`` other than its own path's slug.

    Parameters
    ----------
    path : str
        The node's path.
    node_type : str
    properties : dict

    Returns
    -------
    frozenset of str
        Empty for a node that is not an entity or lists no alias.

    Examples
    --------
    >>> sorted(alias_slugs("/entities/ahab", "kg:Entity", {"aliases": ["Captain Ahab", "AHAB", 3]}))
    ['captain-ahab']
    """
    stored = properties.get("aliases")
    if node_type != ENTITY_NODE_TYPE or not isinstance(stored, list):
        return frozenset()
    slugs = {entity_slug(a) for a in stored if isinstance(a, str)}
    return frozenset(s for s in slugs if s and f"{ENTITY_ROOT}/{s}" != path)


@dataclass
class AliasState:
    """The alias map of one workspace on one branch state, at ``revision``."""

    revision: int
    by_path: dict[str, frozenset[str]] = field(default_factory=dict)
    by_slug: dict[str, set[str]] = field(default_factory=dict)

    def set(self, path: str, slugs: frozenset[str]) -> None:
        """Record the alias slugs of the entity at ``path`` (empty: it has none, or is gone)."""
        for slug in self.by_path.pop(path, frozenset()):
            holders = self.by_slug[slug]
            holders.discard(path)
            if not holders:
                del self.by_slug[slug]
        if slugs:
            self.by_path[path] = slugs
            for slug in slugs:
                self.by_slug.setdefault(slug, set()).add(path)

    def lookup(self, slug: str) -> str | None:
        """The entity that lists ``slug`` as an alias; of several, the first in path order."""
        holders = self.by_slug.get(slug)
        return min(holders) if holders else None

    def as_dict(self) -> dict[str, str]:
        """``{slug: entity path}`` for every alias slug."""
        return {slug: min(paths) for slug, paths in self.by_slug.items()}


def _read(session: Any, view: BranchView, wid: int) -> AliasState:
    state = AliasState(view.revision)
    for node in visible_nodes(session, view, workspace_ids=[wid], path_prefix=ENTITY_ROOT):
        state.set(node.path, alias_slugs(node.path, node.node_type, node.properties))
    return state


def _bring_forward(session: Any, view: BranchView, wid: int, state: AliasState) -> None:
    changed = [
        (node_id, path, deleted)
        for node_id, w, path, deleted in list_node_changes(
            session, branch_id=view.branch.id, after=state.revision, upto=view.revision
        )
        if w == wid and path.startswith(ENTITY_ROOT + "/")
    ]
    live = nodes_by_id(session, view, {node_id for node_id, _, deleted in changed if not deleted})
    for node_id, path, _ in changed:
        node = live.get(node_id)
        state.set(path, alias_slugs(path, node.node_type, node.properties) if node is not None else frozenset())
    state.revision = view.revision


class AliasIndex:
    """The alias maps of recently read branch states (thread-safe; see the module's text).

    Parameters
    ----------
    max_states : int
        Branch states (repository, branch, read chain, workspace) kept.
    """

    def __init__(self, max_states: int = MAX_STATES) -> None:
        self.max_states = max_states
        self._states: OrderedDict[Hashable, AliasState] = OrderedDict()
        self._lock = threading.Lock()
        self.reads = 0  # whole reads made (a test and a benchmark count them)

    def lookup(self, session: Any, view: BranchView, workspace: str, slug: str) -> str | None:
        """The entity of ``workspace`` that lists ``slug`` among its aliases, as ``view`` sees it.

        Parameters
        ----------
        session : Session
            The caller's transaction (it reads what the kept state lacks).
        view : BranchView
        workspace : str
        slug : str
            A spelling's slug (:func:`kg.text.names.entity_slug`).

        Returns
        -------
        str or None
            The entity's path (of several, the first in path order), or None.

        Raises
        ------
        kg.errors.NotFound
            Unknown workspace.

        Notes
        -----
        A first read of a branch state: one read of the workspace's entity nodes, O(n). Then
        O(c) for the c node versions written on the branch since, plus one read of the changed
        entity nodes; O(1) when nothing changed. A view older than the kept state is read
        whole and not kept.
        """
        wid = workspace_id(view, workspace)
        key = (view.repo.uid, view.branch.id, view.chain[1:], wid)
        with self._lock:  # one thread reads or brings a state forward at a time
            state = self._states.get(key)
            if state is not None and state.revision > view.revision:
                self.reads += 1
                return _read(session, view, wid).lookup(slug)
            if state is None:
                self.reads += 1
                state = _read(session, view, wid)
                self._states[key] = state
                while len(self._states) > self.max_states:
                    self._states.popitem(last=False)
            elif state.revision < view.revision:
                _bring_forward(session, view, wid, state)
            self._states.move_to_end(key)
            return state.lookup(slug)

    def clear(self) -> None:
        """Forget every state."""
        with self._lock:
            self._states.clear()


#: The process's alias maps (keyed by repository uid, so databases never share a state).
ALIASES = AliasIndex()
