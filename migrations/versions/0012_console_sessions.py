"""Sign-ins to the review console (issue 14)

The cookie carries a random session id; the table keeps its SHA-256, the key it signed in with,
and when it expires or ended (signed out), so that signing out ends every copy of the cookie.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-01 18:40:00.000000
"""

import sqlalchemy as sa
from alembic import op

revision = '0012'
down_revision = '0011'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('console_sessions',
    sa.Column('id_hash', sa.String(length=64), nullable=False),
    sa.Column('key_id', sa.String(length=32), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('expires_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('ended_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['key_id'], ['api_keys.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id_hash')
    )
    with op.batch_alter_table('console_sessions', schema=None) as batch_op:
        batch_op.create_index('ix_console_sessions_key', ['key_id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('console_sessions', schema=None) as batch_op:
        batch_op.drop_index('ix_console_sessions_key')
    op.drop_table('console_sessions')
