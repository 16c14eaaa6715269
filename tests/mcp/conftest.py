"""The MCP tests run on SQLite (tests/conftest.py, ADAPTER_BACKENDS): the tools are adapters over
the use cases the API tests run on both databases."""

from __future__ import annotations

from tests.conftest import ADAPTER_BACKENDS, db_url_on

db_url = db_url_on(ADAPTER_BACKENDS)
