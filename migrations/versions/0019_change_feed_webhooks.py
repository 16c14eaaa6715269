"""The change feed's branch events, webhooks and their deliveries

``branch_events`` records branches created, reset and deleted, and merges (the feed tells
them beside revisions); ``webhooks`` the receivers registered per repository; ``webhook_deliveries`` one
event to deliver to one hook, a job of the durable queue and a line of the hook's delivery log.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-05 05:40:00.000000
"""

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

_TIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "branch_events",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("repo_id", sa.Integer(), nullable=False),
        sa.Column("branch", sa.String(length=255), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("actor", sa.String(length=255), nullable=True),
        sa.Column("source_branch", sa.String(length=255), nullable=True),
        sa.Column("source_revision", sa.Integer(), nullable=True),
        sa.Column("created_at", _TIME, nullable=False),
        sa.ForeignKeyConstraint(["repo_id"], ["repositories.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_branch_events_repo", "branch_events", ["repo_id", "id"])
    op.create_table(
        "webhooks",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("repo_id", sa.Integer(), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("secret", sa.String(length=128), nullable=False),
        sa.Column("branches", sa.JSON(), nullable=False),
        sa.Column("events", sa.JSON(), nullable=False),
        sa.Column("created_by", sa.String(length=255), nullable=True),
        sa.Column("after_revision", sa.Integer(), nullable=False),
        sa.Column("after_event", sa.Integer(), nullable=False),
        sa.Column("created_at", _TIME, nullable=False),
        sa.ForeignKeyConstraint(["repo_id"], ["repositories.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("repo_id", sa.Integer(), nullable=False),
        sa.Column("webhook_id", sa.String(length=32), nullable=False),
        sa.Column("event_id", sa.String(length=64), nullable=False),
        sa.Column("event", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("claimed_by", sa.String(length=32), nullable=True),
        sa.Column("failures", sa.Integer(), server_default="0", nullable=False),
        sa.Column("alone", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("not_before", _TIME, nullable=True),
        sa.Column("lease_until", _TIME, nullable=True),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", _TIME, nullable=False),
        sa.Column("last_attempt_at", _TIME, nullable=True),
        sa.Column("delivered_at", _TIME, nullable=True),
        sa.ForeignKeyConstraint(["repo_id"], ["repositories.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["webhook_id"], ["webhooks.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_webhook_deliveries_lane", "webhook_deliveries", ["state", "webhook_id", "id"])
    op.create_index("ix_webhook_deliveries_alone", "webhook_deliveries", ["state", "alone", "id"])
    op.create_index("ix_webhook_deliveries_hook", "webhook_deliveries", ["webhook_id", "id"])


def downgrade() -> None:
    op.drop_table("webhook_deliveries")
    op.drop_table("webhooks")
    op.drop_index("ix_branch_events_repo", table_name="branch_events")
    op.drop_table("branch_events")
