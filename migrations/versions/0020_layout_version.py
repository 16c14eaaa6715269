"""Repositories count the changes to their layout (branches, workspaces)

``repositories.layout_version`` is bumped by every write that changes what a branch view holds
apart from a new revision: a branch created, deleted or reset, a workspace created. With
``head_revision`` (bumped by every revision) it keys the process's cache of branch views
(:class:`kg.store.repos.ViewCache`): one indexed read of the repository's row tells whether a
cached view is still the database's.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-05 08:00:00.000000
"""

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("repositories") as batch:
        batch.add_column(sa.Column("layout_version", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("repositories") as batch:
        batch.drop_column("layout_version")
