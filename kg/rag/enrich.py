"""The enrichment loop of RAG patterns as a search option: each hit with its parent and neighbouring sections.

The second seed's step 4 ("Enrich with hierarchy context") fetches, after retrieval, the parent
document of each hit and the sections next to it, in their order, so that a prompt can be
assembled from continuous text rather than isolated passages. :func:`attach_context` does this
inside the search, on the same branch state and under the same reader scope, so a caller that
asks for ``context`` gets it in one round trip and never sees a node its key cannot read.

Siblings are the hit's siblings *of its own node type* (a section's neighbouring sections, not
the notes filed beside them), in the children's order (:func:`kg.store.nodes.child_order`:
``order`` then name by default, or a property such as ``properties.position``).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator
from sqlalchemy.orm import Session

from kg.errors import InvalidInput, NotFound
from kg.store.models import NodeVersion, node_dict
from kg.store.nodes import ORDER_BY_PATTERN, ChildOrder, child_order, find_node, list_children
from kg.store.numbers import Integer
from kg.store.paths import parent_of
from kg.store.repos import BranchView

MAX_SIBLINGS = 10
"""Most neighbouring sections asked for on each side of a hit."""


class HitContext(BaseModel):
    """What a search attaches to each hit (the ``context`` field of a search request).

    Attributes
    ----------
    parent : bool
        Attach the hit's parent node (null for a top-level node).
    siblings : int
        Attach up to this many siblings of the hit's node type on each side, 0..10.
    order_by : str or None
        The siblings' order, as the children listing takes it (``order``, ``name``,
        ``properties.<key>``, ``-`` for descending); None: ``order``, then name.

    Raises
    ------
    kg.errors.InvalidInput
        On construction: siblings out of range, a malformed ``order_by``, or nothing asked.

    Examples
    --------
    >>> HitContext(siblings=2, order_by="properties.position").siblings
    2
    """

    # The document states the rules that :meth:`_rules` checks: something asked, the bounds.
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, json_schema_extra={"not": {
        "required": ["parent", "siblings"], "properties": {"parent": {"const": False}, "siblings": {"const": 0}}}})

    parent: bool = Field(default=True, description="Attach the hit's parent node.")
    siblings: Integer = Field(default=1, description=f"Siblings of the hit's node type on each side, "
                                                     f"0..{MAX_SIBLINGS}.",
                              json_schema_extra={"minimum": 0, "maximum": MAX_SIBLINGS})
    order_by: str | None = Field(default=None, description="The siblings' order: order (default), name "
                                                           "or properties.<key>, '-' for descending.",
                                 json_schema_extra={"pattern": ORDER_BY_PATTERN})

    @model_validator(mode="after")
    def _rules(self) -> HitContext:
        if not 0 <= self.siblings <= MAX_SIBLINGS:
            raise InvalidInput(f"context.siblings must be between 0 and {MAX_SIBLINGS}",
                               details={"siblings": self.siblings})
        if not self.parent and self.siblings == 0:
            raise InvalidInput("context asks for nothing: set parent true or siblings above 0")
        try:
            child_order(self.order_by)
        except InvalidInput as exc:
            raise InvalidInput(f"context.{exc.message}", details=exc.details) from None
        return self

    @property
    def order(self) -> ChildOrder:
        """The parsed sibling order."""
        return child_order(self.order_by)


def attach_context(session: Session, view: BranchView, hits: list[Any], spec: HitContext) -> None:
    """Set ``hit.context`` on each search hit: its parent and neighbouring siblings.

    Parameters
    ----------
    session : Session
        The search's read session.
    view : BranchView
        The branch state searched, with the caller's reader scope.
    hits : list of kg.rag.search.SearchResult
        The rows returned (each has ``workspace``, ``path`` and ``node_type``); changed in place.
    spec : HitContext
        What to attach.

    Notes
    -----
    ``hit.context`` becomes ``{"parent": node or None, "before": [...], "after": [...]}``: node
    API shapes (:func:`kg.store.models.node_dict`), ``before`` in document order ending next to
    the hit, ``after`` starting next to it. One query per distinct parent and one per distinct
    (parent, node type) sibling list, so k hits from one document cost two queries; reading a
    sibling list sorts every child of that parent (O(n log n) for n children).
    """
    parents: dict[tuple[str, str], dict[str, Any] | None] = {}
    siblings: dict[tuple[str, str, str], list[NodeVersion]] = {}
    order = spec.order
    for hit in hits:
        parent_path = parent_of(hit.path)
        place = (hit.workspace, parent_path)
        context: dict[str, Any] = {}
        if spec.parent:
            if place not in parents:
                found = None if parent_path == "/" else find_node(session, view, hit.workspace, parent_path)
                parents[place] = None if found is None else node_dict(found, hit.workspace)
            context["parent"] = parents[place]
        if spec.siblings:
            group = (hit.workspace, parent_path, hit.node_type)
            if group not in siblings:
                try:
                    siblings[group] = list_children(session, view, hit.workspace, parent_path, order=order,
                                                    node_type=hit.node_type)
                except NotFound:  # a parent deleted under a stale index row: no siblings
                    siblings[group] = []
            rows = siblings[group]
            at = next((i for i, v in enumerate(rows) if v.path == hit.path), None)
            if at is None:
                context["before"], context["after"] = [], []
            else:
                context["before"] = [node_dict(v, hit.workspace) for v in rows[max(0, at - spec.siblings):at]]
                context["after"] = [node_dict(v, hit.workspace) for v in rows[at + 1:at + 1 + spec.siblings]]
        hit.context = context
