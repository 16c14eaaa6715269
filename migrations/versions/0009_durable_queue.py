"""durable queue: claim owners, queue workers, fair-claim indexes

Index jobs and function jobs are claimed through one queue (kg.indexing.queue): a claim names the worker
holding it (``claimed_by``), workers register in ``queue_workers`` (so a process that starts
knows which claims are held by processes that are gone), and each table gets the index of its
fair claim (the lanes with queued jobs, and each lane's head).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01 09:00:00.000000
"""

import sqlalchemy as sa
from alembic import op

revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('queue_workers',
    sa.Column('id', sa.String(length=32), nullable=False),
    sa.Column('queue', sa.String(length=32), nullable=False),
    sa.Column('host', sa.String(length=255), nullable=False),
    sa.Column('pid', sa.Integer(), nullable=False),
    sa.Column('process_start', sa.String(length=128), nullable=False),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('heartbeat_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('index_jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('claimed_by', sa.String(length=32), nullable=True))
        batch_op.create_index('ix_index_jobs_lane', ['status', 'workspace_id', 'priority', 'id'], unique=False)
    with op.batch_alter_table('function_jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('claimed_by', sa.String(length=32), nullable=True))
        batch_op.create_index('ix_function_jobs_lane', ['state', 'repo_id', 'created_at', 'id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('function_jobs', schema=None) as batch_op:
        batch_op.drop_index('ix_function_jobs_lane')
        batch_op.drop_column('claimed_by')
    with op.batch_alter_table('index_jobs', schema=None) as batch_op:
        batch_op.drop_index('ix_index_jobs_lane')
        batch_op.drop_column('claimed_by')
    op.drop_table('queue_workers')
