"""index job priority: writes' texts are embedded before a re-embed's backlog

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-30 06:10:00.000000
"""

import sqlalchemy as sa
from alembic import op

revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('index_jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('priority', sa.Integer(), server_default='0', nullable=False))
        batch_op.create_index('ix_index_jobs_claim', ['status', 'priority', 'id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('index_jobs', schema=None) as batch_op:
        batch_op.drop_index('ix_index_jobs_claim')
        batch_op.drop_column('priority')
