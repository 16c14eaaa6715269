"""References: node properties that point at other nodes, indexed in SQL.

A property value of the form ``{"kg:ref": "/path", "kg:workspace": "ws"}`` is a *reference*
(API.md, "Nodes"). Where it is recognised:

- a top-level property value (``{"author": {"kg:ref": "/people/dana", "kg:workspace": "lib"}}``);
- an item of a top-level list (``{"sources": [{"kg:ref": "/a"}, {"kg:ref": "/b"}]}``).

Deeper values are not references (they are stored, but not indexed). ``kg:workspace`` may be
left out: the reference then points into the node's own workspace. Other keys next to
``kg:ref`` are allowed and ignored. A malformed reference (``kg:ref`` not a valid path, a bad
workspace name) is refused with the write.

References are not relations (the seed guide, "Relations are not references"): a reference is
part of a node's content (an author field, a hero image), lives in its properties and changes
with them; a relation is an assertion about two nodes, typed and weighted, in the relation
index. So they have their own table: one row per reference of each node version
(:class:`kg.store.models.Reference`), written with the version (``index_references``, called by
``kg.store.nodes``), and ``list_references`` joins the versions a branch sees with their rows.
A reference is by address: its target need not exist.

The arrow points ``kg.store.nodes -> kg.store.references`` only: what both need (a version's
API shape, :func:`kg.store.models.node_dict`; a workspace's id in a view,
:func:`kg.store.repos.workspace_id`) lives below both.
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
    """The references in a node's properties: (property key, target workspace, target path), in
    property order, each once; ``workspace`` is the target's when a reference names none.

    O(k + l) for k top-level keys and l items of top-level lists; deeper values are not read.

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
    """Write the reference rows of a node version just flushed (none for a tombstone); returns how
    many.

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
    """The nodes whose visible version references ``target`` (``workspace:/path``, which need not
    exist), at most ``limit`` (1 to 10,000).

    Through the index, never by reading properties: the reference rows of the target
    (``ix_node_references_target``) name candidate nodes; their visible versions are resolved
    (``visible_select`` by node id) and kept when they are the very versions that hold the
    reference (``source_version_id``). O(r log r) for r reference rows of the target on the
    branch's chain.

    Returns
    -------
    (rows, truncated)
        The API node shape plus ``property_key`` (one row per property that holds the reference),
        ordered by workspace name, path, then key; ``truncated`` when more exist.

    Raises
    ------
    kg.errors.InvalidInput
        A bad address or limit.
    kg.errors.NotFound
        An unknown workspace.
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
