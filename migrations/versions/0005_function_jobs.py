"""function jobs: asynchronous function invocations (wait_for_completion: false)

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30 10:00:00.000000
"""

import sqlalchemy as sa
from alembic import op

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('function_jobs',
    sa.Column('id', sa.String(length=32), nullable=False),
    sa.Column('repo_id', sa.Integer(), nullable=False),
    sa.Column('function', sa.String(length=128), nullable=False),
    sa.Column('branch', sa.String(length=255), nullable=False),
    sa.Column('input', sa.JSON(), nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('output', sa.JSON(), nullable=True),
    sa.Column('error', sa.JSON(), nullable=True),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('lease_until', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['repo_id'], ['repositories.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('function_jobs', schema=None) as batch_op:
        batch_op.create_index('ix_function_jobs_state', ['state', 'created_at'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('function_jobs', schema=None) as batch_op:
        batch_op.drop_index('ix_function_jobs_state')

    op.drop_table('function_jobs')
