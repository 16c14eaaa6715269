"""references: the index of node properties that point at other nodes

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-29 22:39:23.236769

(The file was planned as the third migration; the index job queue took revision 0003 first.)
"""

import sqlalchemy as sa
from alembic import op

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('node_references',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('repo_id', sa.Integer(), nullable=False),
    sa.Column('branch_id', sa.Integer(), nullable=False),
    sa.Column('revision', sa.Integer(), nullable=False),
    sa.Column('source_node_id', sa.String(length=36), nullable=False),
    sa.Column('source_version_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('property_key', sa.Text(), nullable=False),
    sa.Column('target_workspace', sa.String(length=255), nullable=False),
    sa.Column('target_path', sa.String(length=1024), nullable=False),
    sa.ForeignKeyConstraint(['branch_id'], ['branches.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['repo_id'], ['repositories.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['source_version_id'], ['node_versions.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('node_references', schema=None) as batch_op:
        batch_op.create_index('ix_node_references_source_version', ['source_version_id'], unique=False)
        batch_op.create_index('ix_node_references_target',
                              ['repo_id', 'target_workspace', 'target_path', 'branch_id', 'revision'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('node_references', schema=None) as batch_op:
        batch_op.drop_index('ix_node_references_target')
        batch_op.drop_index('ix_node_references_source_version')

    op.drop_table('node_references')
