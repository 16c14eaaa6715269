"""References: node properties that point at other nodes, indexed in SQL.

A property value ``{"kg:ref": "/path", "kg:workspace": "ws"}``, at the top
level or an item of a top-level list, is a *reference* (deeper ones are not indexed); without
``kg:workspace`` it points into the node's workspace; a malformed one fails the write. It is
part of a node's content, unlike a relation (a typed, weighted assertion about two nodes: the
seed guide), and by address (the target need not exist). One row per reference of each node
version (:class:`kg.store.models.Reference`), written with it by :mod:`kg.store.nodes` (the
import's only direction), read by joining the versions a branch sees.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import SQLColumnExpression, and_, insert, or_, select
from sqlalchemy.orm import Session

from kg.errors import InvalidInput
from kg.store.models import NodeVersion, Reference, Workspace, node_dict
from kg.store.paths import parse_address, validate_name, validate_path
from kg.store.repos import BranchView, workspace_id
from kg.store.visibility import visible_select

REF_KEY = "kg:ref"
WORKSPACE_KEY = "kg:workspace"
MAX_LIMIT = 10_000


def _target(key: str, value: dict[str, Any], workspace: str) -> tuple[str, str]:
    path = value[REF_KEY]
    target_ws = value.get(WORKSPACE_KEY, workspace)
    try:
        if not isinstance(path, str):
            raise InvalidInput(f"{REF_KEY} must be a node path string")
        path = validate_path(path)
        validate_name("workspace", target_ws)
    except InvalidInput as exc:
        raise InvalidInput(f"invalid reference in property {key!r}: {exc.message}",
                           details={"property": key, "reference": value}) from exc
    return target_ws, path


def extract_references(properties: dict[str, Any], *, workspace: str) -> list[tuple[str, str, str]]:
    """The ``(property key, target workspace, target path)`` references in a node's properties, in
    order, each once; O(top-level keys and list items).

    Raises
    ------
    kg.errors.InvalidInput
        A malformed reference (``kg:ref`` not a valid path, a bad ``kg:workspace``).
    """
    found: dict[tuple[str, str, str], None] = {}
    for key, value in properties.items():
        for item in value if isinstance(value, list) else (value,):
            if isinstance(item, dict) and REF_KEY in item:
                found[(key, *_target(key, item, workspace))] = None
    return list(found)


def index_references(session: Session, version: NodeVersion, *, workspace: str) -> int:
    """Write the reference rows of a node version just flushed; how many.

    Raises
    ------
    kg.errors.InvalidInput
        A malformed reference: the caller's write fails as a whole.
    """
    if version.deleted or not version.properties:
        return 0
    refs = extract_references(version.properties, workspace=workspace)
    if refs:
        session.execute(insert(Reference), [
            {"repo_id": version.repo_id, "branch_id": version.branch_id, "revision": version.revision,
             "source_node_id": version.node_id, "source_version_id": version.id, "property_key": key,
             "target_workspace": ws, "target_path": path}
            for key, ws, path in refs
        ])
    return len(refs)


def list_references(session: Session, view: BranchView, target: str, *, limit: int = 1000,
                    ) -> tuple[list[dict[str, Any]], bool]:
    """The nodes whose visible version references ``target`` (which need not exist): ``(rows,
    truncated)``, rows the API node shape plus ``property_key``, by workspace, path, key.

    Through the index, never by reading properties: the target's reference rows
    (``ix_node_references_target``) name candidates, kept when their visible version is the one
    holding the reference. O(r log r) for r reference rows of the target on the chain.

    Raises
    ------
    kg.errors.InvalidInput
        A bad address or limit (1 to 10,000).
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidInput(f"limit must be between 1 and {MAX_LIMIT}", details={"limit": limit})
    ws, path = parse_address(target)
    workspace_id(view, ws)
    on_target = and_(Reference.repo_id == view.repo.id, Reference.target_workspace == ws,
                     Reference.target_path == path)
    on_chain = or_(*(and_(Reference.branch_id == b, Reference.revision <= r) for b, r in view.chain))
    sources = select(Reference.source_node_id).where(on_target, on_chain)
    stmt, alias = visible_select(NodeVersion, view, (NodeVersion.node_id,), NodeVersion.node_id.in_(sources))
    name: SQLColumnExpression[str] = Workspace.name
    node_path: SQLColumnExpression[str] = alias.path
    key: SQLColumnExpression[str] = Reference.property_key
    if session.get_bind().dialect.name == "postgresql":
        name, node_path, key = name.collate("C"), node_path.collate("C"), key.collate("C")
    stmt = (stmt.add_columns(Workspace.name, Reference.property_key)
            .join(Reference, and_(Reference.source_version_id == alias.id, on_target))
            .join(Workspace, Workspace.id == alias.workspace_id)
            .order_by(name, node_path, key)
            .limit(limit + 1))
    rows = [{**node_dict(version, ws_name), "property_key": prop} for version, ws_name, prop in session.execute(stmt)]
    return rows[:limit], len(rows) > limit
