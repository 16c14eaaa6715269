"""merges and history indexes

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29 22:00:36.025966
"""

import sqlalchemy as sa
from alembic import op

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('merges',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('repo_id', sa.Integer(), nullable=False),
    sa.Column('source_branch_id', sa.Integer(), nullable=False),
    sa.Column('target_branch_id', sa.Integer(), nullable=False),
    sa.Column('source_revision', sa.Integer(), nullable=False),
    sa.Column('target_revision', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['repo_id'], ['repositories.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['source_branch_id'], ['branches.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['target_branch_id'], ['branches.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('merges', schema=None) as batch_op:
        batch_op.create_index('ix_merges_pair', ['source_branch_id', 'target_branch_id', 'target_revision'],
                              unique=False)

    with op.batch_alter_table('node_versions', schema=None) as batch_op:
        batch_op.create_index('ix_node_versions_branch_revision', ['branch_id', 'revision'], unique=False)

    with op.batch_alter_table('relation_versions', schema=None) as batch_op:
        batch_op.create_index('ix_relation_versions_branch_revision', ['branch_id', 'revision'], unique=False)

    with op.batch_alter_table('revisions', schema=None) as batch_op:
        batch_op.create_index('ix_revisions_branch_number', ['branch_id', 'number'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('revisions', schema=None) as batch_op:
        batch_op.drop_index('ix_revisions_branch_number')

    with op.batch_alter_table('relation_versions', schema=None) as batch_op:
        batch_op.drop_index('ix_relation_versions_branch_revision')

    with op.batch_alter_table('node_versions', schema=None) as batch_op:
        batch_op.drop_index('ix_node_versions_branch_revision')

    with op.batch_alter_table('merges', schema=None) as batch_op:
        batch_op.drop_index('ix_merges_pair')

    op.drop_table('merges')
