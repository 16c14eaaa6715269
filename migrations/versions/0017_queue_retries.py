"""Durable queues tell a worker's death from a job's failure

``index_jobs`` and ``function_jobs`` get ``failures`` (deaths of a job run alone: what the
attempt cap counts), ``alone`` (the job was held when its worker died, beside others or for the
first time: its next claim runs it alone) and ``not_before`` (a retried job waits until then:
its backoff).

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-05 01:40:00.000000
"""

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

TABLES = ("index_jobs", "function_jobs")


def upgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("failures", sa.Integer(), nullable=False, server_default="0"))
            batch.add_column(sa.Column("alone", sa.Boolean(), nullable=False, server_default=sa.false()))
            batch.add_column(sa.Column("not_before", sa.DateTime(timezone=True), nullable=True))
    op.create_index("ix_index_jobs_alone", "index_jobs", ["status", "alone", "priority", "id"])
    op.create_index("ix_function_jobs_alone", "function_jobs", ["state", "alone", "created_at", "id"])


def downgrade() -> None:
    op.drop_index("ix_function_jobs_alone", "function_jobs")
    op.drop_index("ix_index_jobs_alone", "index_jobs")
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.drop_column("not_before")
            batch.drop_column("alone")
            batch.drop_column("failures")
