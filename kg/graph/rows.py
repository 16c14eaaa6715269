"""NEIGHBORS rows made when read, from columns. Pure: no session, no I/O.

A NEIGHBORS answer of the view can hold 10,000 edges of a hub. Made as a list of row dicts, each
answer costs a dict of ten keys per edge (and an empty ``properties`` dict), all alive at once,
all tracked by the cyclic collector, most of them read once by a serialiser or a caller's loop.
:class:`NeighborRows` keeps the answer as the columns it is made of, the view's own edge tuples,
the other nodes' addresses and, when the view holds any, the edges' validity, and makes a row
dict when one is read: a loop over the rows holds one row at a time.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any, Protocol, overload

from kg.graph.neighbors import Edge

#: An edge's validity: (valid_from, valid_to, invalidated_by), each None when unset.
Validity = tuple[datetime | None, datetime | None, str | None]


class Located(Protocol):
    """Where the node at an edge's other end lives (a view's ``NodeAddress``, a SQL row)."""

    @property
    def workspace(self) -> str: ...

    @property
    def path(self) -> str: ...


class NeighborRows(Sequence[dict[str, Any]]):
    """NEIGHBORS rows in the API shape, a row dict made each time a row is read.

    Parameters
    ----------
    edges : sequence of Edge
        The edges seen from the node, in the answer's order: ``(other node id, relation type,
        weight, direction, properties or None)``, as the view holds them (never mutated).
    where : sequence of Located
        The other node's address of each edge (``.workspace``, ``.path``), in the same order.
    validity : sequence of Validity, optional
        Each edge's ``(valid_from, valid_to, invalidated_by)``; None: no edge carries one.

    Notes
    -----
    A row is ``{"workspace", "path", "node_id", "relation_type", "weight", "direction",
    "properties", "valid_from", "valid_to", "invalidated_by"}``: ``properties`` is the edge's
    own dict (not to be mutated), or a new empty dict for an edge without properties; the
    validity times are ISO 8601 text, each distinct time (and zone) formatted once per answer.
    Each read makes a new dict, so a caller that changes a row changes its own copy only.
    A read-only sequence: ``len``, indexing (a slice answers a list of rows), iteration,
    ``==`` with any sequence of rows (a list of dicts among them); :meth:`tolist` for a
    serialiser that wants a list (JSON, pydantic).
    """

    __slots__ = ("_edges", "_where", "_validity", "_times")

    def __init__(self, edges: Sequence[Edge], where: Sequence[Located],
                 validity: Sequence[Validity] | None = None) -> None:
        if len(where) != len(edges) or (validity is not None and len(validity) != len(edges)):
            raise ValueError("every column of NEIGHBORS rows has one entry per edge")
        self._edges = edges
        self._where = where
        self._validity = validity
        self._times: dict[tuple[datetime, Any], str] = {}  # by the time and its zone: equal instants may print apart

    def __len__(self) -> int:
        return len(self._edges)

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, index: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(index, slice):
            return [self._row(i) for i in range(*index.indices(len(self._edges)))]
        if index < 0:
            index += len(self._edges)
        if not 0 <= index < len(self._edges):
            raise IndexError("NEIGHBORS row index out of range")
        return self._row(index)

    def _row(self, i: int) -> dict[str, Any]:
        other, rel_type, weight, direction, properties = self._edges[i]
        where = self._where[i]
        valid_from, valid_to, invalidated_by = (None, None, None) if self._validity is None else self._validity[i]
        return {"workspace": where.workspace, "path": where.path, "node_id": other, "relation_type": rel_type,
                "weight": weight, "direction": direction, "properties": properties or {},
                "valid_from": self._text(valid_from), "valid_to": self._text(valid_to),
                "invalidated_by": invalidated_by}

    def _text(self, value: datetime | None) -> str | None:
        if value is None:
            return None
        key = (value, value.tzinfo)
        text = self._times.get(key)
        if text is None:
            text = self._times[key] = value.isoformat()
        return text

    def __iter__(self) -> Iterator[dict[str, Any]]:
        if self._validity is None:  # most views: no edge carries a validity
            for (other, rel_type, weight, direction, properties), where in zip(self._edges, self._where, strict=True):
                yield {"workspace": where.workspace, "path": where.path, "node_id": other,
                       "relation_type": rel_type, "weight": weight, "direction": direction,
                       "properties": properties or {}, "valid_from": None, "valid_to": None,
                       "invalidated_by": None}
            return
        text = self._text
        for (other, rel_type, weight, direction, properties), where, (valid_from, valid_to, invalidated_by) in zip(
                self._edges, self._where, self._validity, strict=True):
            yield {"workspace": where.workspace, "path": where.path, "node_id": other,
                   "relation_type": rel_type, "weight": weight, "direction": direction,
                   "properties": properties or {}, "valid_from": text(valid_from), "valid_to": text(valid_to),
                   "invalidated_by": invalidated_by}

    def tolist(self) -> list[dict[str, Any]]:
        """The rows as a list of dicts (what JSON encoders and pydantic take)."""
        return list(self)

    def __eq__(self, other: object) -> bool:
        if other is self:
            return True
        if not isinstance(other, Sequence) or isinstance(other, str | bytes):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]  # equal to a list of dicts, which is unhashable

    def __repr__(self) -> str:
        return f"NeighborRows({self.tolist()!r})"
