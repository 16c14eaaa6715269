"""Index job progress: chunks done / total and when embedding started

A large text is embedded in bounded steps across indexer passes (small jobs interleave);
``index/status`` shows each such job's progress and an estimate from these columns.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-01 18:20:00.000000
"""

import sqlalchemy as sa
from alembic import op

revision = '0013'
down_revision = '0012'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('index_jobs') as batch:
        batch.add_column(sa.Column('chunks_done', sa.Integer(), nullable=True))
        batch.add_column(sa.Column('chunks_total', sa.Integer(), nullable=True))
        batch.add_column(sa.Column('started_at', sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('index_jobs') as batch:
        batch.drop_column('started_at')
        batch.drop_column('chunks_total')
        batch.drop_column('chunks_done')
