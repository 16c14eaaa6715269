"""Alembic migrations of kg's store: the only code that creates or alters tables."""
