"""Ingest records: the file hash and merge base of each node's last ingest, per branch

``ingest_records`` holds one row per node written (or recorded) by ``kg ingest``, at the
ingest's revision on its branch: the sha256 of the file's bytes, the file's name below the
ingested folder, the relations the file asserted and, when the node written differs from the
file's parse (people's edits kept by a three-way merge), the patch that turns the written node
back into the parse. A branch
sees the rows of its chain, as it sees node versions. Nodes ingested before this migration have
no row: ``docs/guides/ingest.md`` says how their first ingest after the upgrade treats them.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-05 01:40:00.000000
"""

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ingest_records",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("repo_id", sa.Integer(), nullable=False),
        sa.Column("branch_id", sa.Integer(), nullable=False),
        sa.Column("workspace_id", sa.Integer(), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("path", sa.String(length=1024), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("base_patch", sa.JSON(), nullable=True),
        sa.Column("relations", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["branch_id"], ["branches.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["repo_id"], ["repositories.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["workspace_id"], ["workspaces.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("ingest_records", schema=None) as batch_op:
        batch_op.create_index("ix_ingest_records_path", ["branch_id", "workspace_id", "path", "revision"],
                              unique=False)
        batch_op.create_index("ix_ingest_records_branch_revision", ["branch_id", "revision"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("ingest_records", schema=None) as batch_op:
        batch_op.drop_index("ix_ingest_records_branch_revision")
        batch_op.drop_index("ix_ingest_records_path")
    op.drop_table("ingest_records")
