"""node ids by address: a node's id is derived from (repository, workspace, path)

A node's identity across branches is its address (docs/concepts/branches.md): two branches that create one path
made one node. Ids were random until now, so one path could hold several ids (one per branch
that created it, one per re-creation), and relations keyed by the losing id were hidden after a
merge. This migration rewrites every node id to ``kg.store.nodes.node_uid`` of its address (in
node versions, relation endpoints and references), renames extraction records
(``/kg/extractions/<document id>``) to their document's new id, and writes the edge tombstones
that deleting a node now writes (an edge never outlives its endpoint), so that an edge hidden
by a deleted endpoint stays hidden when a node is created again at that path.

What a reader sees is unchanged, except edges that a merge had hidden by replacing a node's id
(the bug this fixes): they are visible again. A Weaviate index keys its objects by node id:
run ``kg reindex --index weaviate`` after this upgrade.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01 09:30:00.000000
"""

import uuid

import sqlalchemy as sa
from alembic import op

revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None

# kg.store.nodes.NODE_ID_NAMESPACE and node_uid, frozen here (a migration never imports the app).
NODE_ID_NAMESPACE = uuid.UUID("6f1c9f0e-4d0b-5b8e-9a51-2f7e0c3d9b11")
EXTRACTIONS = "/kg/extractions/"
BATCH = 5_000


def node_uid(repo_uid: str, workspace_id: int, path: str) -> str:
    return str(uuid.uuid5(NODE_ID_NAMESPACE, f"{repo_uid}\x1f{workspace_id}\x1f{path}"))


def _tables():
    meta = sa.MetaData()
    nv = sa.Table('node_versions', meta, sa.Column('id', sa.BigInteger), sa.Column('repo_id', sa.Integer),
                  sa.Column('branch_id', sa.Integer), sa.Column('workspace_id', sa.Integer),
                  sa.Column('revision', sa.Integer), sa.Column('node_id', sa.String(36)),
                  sa.Column('path', sa.String(1024)), sa.Column('name', sa.String(255)),
                  sa.Column('deleted', sa.Boolean))
    rv = sa.Table('relation_versions', meta, sa.Column('id', sa.BigInteger), sa.Column('repo_id', sa.Integer),
                  sa.Column('branch_id', sa.Integer), sa.Column('revision', sa.Integer),
                  sa.Column('from_node_id', sa.String(36)), sa.Column('to_node_id', sa.String(36)),
                  sa.Column('rel_type', sa.String(255)), sa.Column('weight', sa.Float),
                  sa.Column('properties', sa.JSON), sa.Column('deleted', sa.Boolean),
                  sa.Column('created_at', sa.DateTime(timezone=True)))
    refs = sa.Table('node_references', meta, sa.Column('id', sa.BigInteger),
                    sa.Column('source_node_id', sa.String(36)))
    repos = sa.Table('repositories', meta, sa.Column('id', sa.Integer), sa.Column('uid', sa.String(36)))
    branches = sa.Table('branches', meta, sa.Column('id', sa.Integer), sa.Column('repo_id', sa.Integer),
                        sa.Column('parent_id', sa.Integer), sa.Column('base_revision', sa.Integer))
    return nv, rv, refs, repos, branches


def _remap(bind, mapping, columns):
    """Rewrite node ids ``old -> new`` in ``columns`` (``(table, column)`` pairs): one UPDATE per
    column through a mapping table keyed by the old id, so each table is read once (an UPDATE
    per id would scan the table per id: node ids are not the leading column of any index)."""
    pairs = [{'old': old, 'new': new} for old, new in mapping.items() if old != new]
    if not pairs:
        return
    meta = sa.MetaData()
    id_map = sa.Table('kg_migration_0008_ids', meta, sa.Column('old', sa.String(36), primary_key=True),
                      sa.Column('new', sa.String(36), nullable=False))
    id_map.create(bind)
    try:
        for start in range(0, len(pairs), BATCH):
            bind.execute(sa.insert(id_map), pairs[start:start + BATCH])
        for table, column in columns:
            col = table.c[column]
            new = sa.select(id_map.c.new).where(id_map.c.old == col).scalar_subquery()
            bind.execute(sa.update(table).where(col.in_(sa.select(id_map.c.old))).values({column: new}))
    finally:
        id_map.drop(bind)


def upgrade() -> None:
    bind = op.get_bind()
    nv, rv, refs, repos, branches = _tables()
    uids = dict(bind.execute(sa.select(repos.c.id, repos.c.uid)).all())
    addresses = {}   # old node id -> (repo uid, workspace id, path)
    for node_id, repo_id, wid, path in bind.execute(
            sa.select(nv.c.node_id, nv.c.repo_id, nv.c.workspace_id, nv.c.path).distinct()):
        addresses.setdefault(node_id, (uids[repo_id], wid, path))
    # 1. extraction records are named by their document's id: rename them to its new id
    renames = {}
    for node_id, (_repo_uid, _wid, path) in addresses.items():
        if path.startswith(EXTRACTIONS):
            old_doc = path[len(EXTRACTIONS):]
            if old_doc in addresses:
                doc_uid, doc_wid, doc_path = addresses[old_doc]
                new_name = node_uid(doc_uid, doc_wid, doc_path)
                if new_name != old_doc:
                    renames[node_id] = (path, EXTRACTIONS + new_name, new_name)
    for node_id, (old_path, new_path, new_name) in renames.items():
        bind.execute(sa.update(nv).where(nv.c.node_id == node_id, nv.c.path == old_path)
                     .values(path=new_path, name=new_name))
        repo_uid, wid, _ = addresses[node_id]
        addresses[node_id] = (repo_uid, wid, new_path)
    # 2. every id becomes its address's
    mapping = {old: node_uid(*address) for old, address in addresses.items()}
    _remap(bind, mapping, [(nv, 'node_id'), (rv, 'from_node_id'), (rv, 'to_node_id'),
                           (refs, 'source_node_id')])
    # 3. a delete removes its node's edges: write the tombstones old deletes did not
    chains = {}
    for branch_id, repo_id, parent_id, base in bind.execute(
            sa.select(branches.c.id, branches.c.repo_id, branches.c.parent_id, branches.c.base_revision)):
        chains[branch_id] = (repo_id, parent_id, base or 0)
    live_at = set(bind.execute(
        sa.select(nv.c.branch_id, nv.c.revision, nv.c.workspace_id, nv.c.path).where(nv.c.deleted == sa.false())
    ).all())
    tombstones = bind.execute(
        sa.select(nv.c.repo_id, nv.c.branch_id, nv.c.revision, nv.c.workspace_id, nv.c.path, nv.c.node_id)
        .where(nv.c.deleted == sa.true()).order_by(nv.c.id)).all()
    written = set()
    for repo_id, branch_id, rev, wid, path, node_id in tombstones:
        if (branch_id, rev, wid, path) in live_at:
            continue  # a merge replaced the node's id at this revision: not a delete
        chain, cap, current = [], rev, branch_id
        while current is not None:
            chain.append((current, cap))
            _, parent, base = chains[current]
            cap = min(cap, base)
            current = parent
        on_chain = sa.or_(*(sa.and_(rv.c.branch_id == b, rv.c.revision <= r) for b, r in chain))
        rows = bind.execute(
            sa.select(rv.c.from_node_id, rv.c.rel_type, rv.c.to_node_id, rv.c.branch_id, rv.c.revision,
                      rv.c.weight, rv.c.deleted, rv.c.id)
            .where(on_chain, sa.or_(rv.c.from_node_id == node_id, rv.c.to_node_id == node_id))).all()
        winners = {}
        rank = {b: i for i, (b, _) in enumerate(chain)}
        same_revision = set()
        for f, t, to, b, r, w, deleted, vid in rows:
            key = (f, t, to)
            if b == branch_id and r == rev:
                same_revision.add(key)
            order = (rank[b], -r, -vid)
            if key not in winners or order < winners[key][0]:
                winners[key] = (order, deleted, w)
        for key, (_, deleted, weight) in winners.items():
            if deleted or key in same_revision or (branch_id, rev, key) in written:
                continue
            written.add((branch_id, rev, key))
            bind.execute(sa.insert(rv).values(
                repo_id=repo_id, branch_id=branch_id, revision=rev, from_node_id=key[0], rel_type=key[1],
                to_node_id=key[2], weight=weight, properties={}, deleted=True,
                created_at=sa.func.current_timestamp()))


def downgrade() -> None:
    # Ids by address are valid ids of the old schema too (any unique string was): nothing to undo.
    pass
