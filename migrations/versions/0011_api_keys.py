"""API keys and their grants (access control, issue 12)

A key's secret is stored only as its HMAC-SHA256 under the server's pepper. A grant names a
repository (or a glob), branch and workspace globs, and the actions it allows.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01 12:10:00.000000
"""

import sqlalchemy as sa
from alembic import op

revision = '0011'
down_revision = '0010'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('api_keys',
    sa.Column('id', sa.String(length=32), nullable=False),
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.Column('secret_hash', sa.String(length=64), nullable=False),
    sa.Column('created_by', sa.String(length=255), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('expires_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('revoked_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('last_used_at', sa.DateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('name')
    )
    op.create_table('api_key_grants',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('key_id', sa.String(length=32), nullable=False),
    sa.Column('repo', sa.String(length=255), nullable=False),
    sa.Column('branches', sa.JSON(), nullable=False),
    sa.Column('workspaces', sa.JSON(), nullable=False),
    sa.Column('actions', sa.JSON(), nullable=False),
    sa.ForeignKeyConstraint(['key_id'], ['api_keys.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('api_key_grants', schema=None) as batch_op:
        batch_op.create_index('ix_api_key_grants_key', ['key_id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('api_key_grants', schema=None) as batch_op:
        batch_op.drop_index('ix_api_key_grants_key')
    op.drop_table('api_key_grants')
    op.drop_table('api_keys')
