"""paths in Unicode normal form C: nodes written before paths were normalised join their address

Since issue 15 the store keys nodes by the NFC spelling of their path, on write and on read
(``kg.store.paths.validate_path``), so ``/caf\u00e9`` and ``/cafe\u0301`` address one node. Versions
written before that kept their path as sent: an NFD path can no longer be read (a read looks
up the NFC spelling) and its node id was derived from the NFD spelling. This migration rewrites
every stored path, parent path and name to NFC, every node id derived from a rewritten path to
the id of its NFC address (``kg.store.nodes.node_uid``: in node versions, relation endpoints and
references), each reference's target path to NFC, and renames an extraction record
(``/kg/extractions/<document id>``) whose document's id changed.

Where a branch held both spellings of one path as two nodes, they become one node with both
histories: the latest version wins, as for any two writes of one path, and the relations of
both now meet at the one node. A Weaviate index keys its objects by node id: run
``kg reindex --index weaviate`` after this upgrade when a database held NFD paths.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-02 04:10:00.000000
"""

import unicodedata
import uuid

import sqlalchemy as sa
from alembic import op

revision = '0014'
down_revision = '0013'
branch_labels = None
depends_on = None

# kg.store.nodes.NODE_ID_NAMESPACE and node_uid, frozen here (a migration never imports the app).
NODE_ID_NAMESPACE = uuid.UUID("6f1c9f0e-4d0b-5b8e-9a51-2f7e0c3d9b11")
EXTRACTIONS = "/kg/extractions/"
BATCH = 5_000


def node_uid(repo_uid: str, workspace_id: int, path: str) -> str:
    return str(uuid.uuid5(NODE_ID_NAMESPACE, f"{repo_uid}\x1f{workspace_id}\x1f{path}"))


def nfc(text: str) -> str:
    return unicodedata.normalize("NFC", text)


def _tables():
    meta = sa.MetaData()
    nv = sa.Table('node_versions', meta, sa.Column('id', sa.BigInteger), sa.Column('repo_id', sa.Integer),
                  sa.Column('workspace_id', sa.Integer), sa.Column('node_id', sa.String(36)),
                  sa.Column('path', sa.String(1024)), sa.Column('parent_path', sa.String(1024)),
                  sa.Column('name', sa.String(255)))
    rv = sa.Table('relation_versions', meta, sa.Column('id', sa.BigInteger),
                  sa.Column('from_node_id', sa.String(36)), sa.Column('to_node_id', sa.String(36)))
    refs = sa.Table('node_references', meta, sa.Column('id', sa.BigInteger),
                    sa.Column('source_node_id', sa.String(36)), sa.Column('target_path', sa.String(1024)))
    repos = sa.Table('repositories', meta, sa.Column('id', sa.Integer), sa.Column('uid', sa.String(36)))
    return nv, rv, refs, repos


def _remap(bind, mapping, columns):
    """Rewrite node ids ``old -> new`` in ``columns`` through a mapping table (as 0008 does)."""
    pairs = [{'old': old, 'new': new} for old, new in mapping.items() if old != new]
    if not pairs:
        return
    meta = sa.MetaData()
    id_map = sa.Table('kg_migration_0014_ids', meta, sa.Column('old', sa.String(36), primary_key=True),
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
    nv, rv, refs, repos = _tables()
    uids = dict(bind.execute(sa.select(repos.c.id, repos.c.uid)).all())
    columns = (nv.c.id, nv.c.repo_id, nv.c.workspace_id, nv.c.node_id, nv.c.path, nv.c.parent_path, nv.c.name)
    # one streamed pass over the versions; only those to rewrite are kept
    stale = [row for row in bind.execute(sa.select(*columns).execution_options(yield_per=BATCH))
             if (row.path, row.parent_path, row.name) != (nfc(row.path), nfc(row.parent_path), nfc(row.name))]
    if not stale:
        _references(bind, refs)
        return
    # old id -> new id, for every node whose id was derived from a path that is not NFC
    mapping = {}
    for row in stale:
        if nfc(row.path) != row.path and row.node_id == node_uid(uids[row.repo_id], row.workspace_id, row.path):
            mapping[row.node_id] = node_uid(uids[row.repo_id], row.workspace_id, nfc(row.path))
    for row in stale:
        bind.execute(sa.update(nv).where(nv.c.id == row.id).values(
            path=nfc(row.path), parent_path=nfc(row.parent_path), name=nfc(row.name)))
    # an extraction record is named by its document's id: follow the document's new id
    if mapping:
        records = bind.execute(sa.select(*columns).where(nv.c.path.like(EXTRACTIONS + '%'))).all()
        for row in records:
            if row.path.startswith(EXTRACTIONS) and row.path[len(EXTRACTIONS):] in mapping:
                new_name = mapping[row.path[len(EXTRACTIONS):]]
                new_path = EXTRACTIONS + new_name
                bind.execute(sa.update(nv).where(nv.c.id == row.id).values(path=new_path, name=new_name))
                mapping[row.node_id] = node_uid(uids[row.repo_id], row.workspace_id, new_path)
    _remap(bind, mapping, [(nv, 'node_id'), (rv, 'from_node_id'), (rv, 'to_node_id'),
                           (refs, 'source_node_id')])
    _references(bind, refs)


def _references(bind, refs):
    """Each reference's target path in NFC."""
    targets = [(ref_id, target) for ref_id, target in
               bind.execute(sa.select(refs.c.id, refs.c.target_path).execution_options(yield_per=BATCH))
               if target != nfc(target)]
    for ref_id, target in targets:
        bind.execute(sa.update(refs).where(refs.c.id == ref_id).values(target_path=nfc(target)))


def downgrade() -> None:
    # NFC paths and the ids of their addresses are valid in the old schema too: nothing to undo.
    pass
