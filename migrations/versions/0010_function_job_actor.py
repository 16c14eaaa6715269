"""function jobs remember who submitted them

A queued function job runs later, in another thread or process, as the caller that submitted
it: ``function_jobs.actor`` keeps that caller (``{"kind", "name"}``). Jobs stored before this
migration have none and run as kg's own work.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01 11:40:00.000000
"""

import sqlalchemy as sa
from alembic import op

revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('function_jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('actor', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('function_jobs', schema=None) as batch_op:
        batch_op.drop_column('actor')
