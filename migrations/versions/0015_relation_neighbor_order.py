"""Relations keep their endpoints' addresses, indexed in NEIGHBORS' order (issue 16)

``relation_versions.from_address`` and ``to_address`` (``workspace:path``; a node id is
derived from its address, so they never change) and two indexes, a node's outgoing and
incoming edge versions by weight descending, the other end's address, type: NEIGHBORS on a
hub reads its edges in the stable order and stops at the limit instead of ranking them all.
Existing versions are filled in from the node versions of their endpoints.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-02 04:00:00.000000
"""

import sqlalchemy as sa
from alembic import op

revision = '0015'
down_revision = '0014'
branch_labels = None
depends_on = None

_ADDRESS = sa.String(1300).with_variant(sa.String(1300, collation="C"), "postgresql")


def _fill(column: str, node_column: str) -> None:
    # One pass: every node id's address (any version: the id is derived from it), joined.
    op.execute(
        f"UPDATE relation_versions SET {column} = a.address FROM ("
        "SELECT nv.node_id AS node_id, MIN(w.name || ':' || nv.path) AS address "
        "FROM node_versions nv JOIN workspaces w ON w.id = nv.workspace_id GROUP BY nv.node_id) AS a "
        f"WHERE a.node_id = relation_versions.{node_column}"
    )


def upgrade() -> None:
    with op.batch_alter_table('relation_versions') as batch:
        batch.add_column(sa.Column('from_address', _ADDRESS, nullable=True))
        batch.add_column(sa.Column('to_address', _ADDRESS, nullable=True))
    _fill('from_address', 'from_node_id')
    _fill('to_address', 'to_node_id')
    op.create_index('ix_relation_versions_out', 'relation_versions',
                    ['from_node_id', sa.text('weight DESC'), 'to_address', 'rel_type'])
    op.create_index('ix_relation_versions_in', 'relation_versions',
                    ['to_node_id', sa.text('weight DESC'), 'from_address', 'rel_type'])


def downgrade() -> None:
    op.drop_index('ix_relation_versions_in', table_name='relation_versions')
    op.drop_index('ix_relation_versions_out', table_name='relation_versions')
    with op.batch_alter_table('relation_versions') as batch:
        batch.drop_column('to_address')
        batch.drop_column('from_address')
