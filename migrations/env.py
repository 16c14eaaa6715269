"""Alembic environment: runs against the connection kg hands over, or the configured URL."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from kg.store.models import Base

config = context.config
target_metadata = Base.metadata


def _run(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Migrate through ``config.attributes['connection']`` if given, else the URL."""
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = create_engine(config.get_main_option("sqlalchemy.url"))
    with engine.begin() as conn:
        _run(conn)
    engine.dispose()


if context.is_offline_mode():  # pragma: no cover - kg only migrates online
    raise SystemExit("kg migrations run online only")
run_migrations_online()
