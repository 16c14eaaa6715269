"""node versions by (repository, revision): the feed of a scoped search index

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30 05:00:00.000000
"""

from alembic import op

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('node_versions', schema=None) as batch_op:
        batch_op.create_index('ix_node_versions_repo_revision', ['repo_id', 'revision', 'id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('node_versions', schema=None) as batch_op:
        batch_op.drop_index('ix_node_versions_repo_revision')
