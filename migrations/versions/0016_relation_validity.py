"""Relations carry their validity in world time (issue 17)

``relation_versions.valid_from`` and ``valid_to`` (timezone-aware; null: unbounded) and
``invalidated_by`` (the ``from|type|to`` address of the relation that superseded this one). A
relation is current at time t when ``valid_from`` is null or <= t and ``valid_to`` is null or
> t; NEIGHBORS, traverse, graph-context and ask read current relations by default. The columns
are per version, like weight and properties: an invalidation is a new version of the edge.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-02 12:30:00.000000
"""

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("relation_versions") as batch:
        batch.add_column(sa.Column("valid_from", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("valid_to", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("invalidated_by", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("relation_versions") as batch:
        batch.drop_column("invalidated_by")
        batch.drop_column("valid_to")
        batch.drop_column("valid_from")
