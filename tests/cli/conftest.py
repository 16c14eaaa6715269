"""Fixtures of this folder: the Weaviate test server and URL (tests/weaviate_fixtures.py)."""

from tests.weaviate_fixtures import weaviate_server, weaviate_test_server, weaviate_url  # noqa: F401
