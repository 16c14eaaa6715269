"""Pytest fixtures for the Weaviate backend, imported by the conftest of each folder that needs them.

- ``weaviate_server`` (session): one :class:`~tests.weaviate_server.WeaviateTestServer` for the
  whole run, however many folders import these fixtures (shared, stopped after the last user).
- ``weaviate_test_server``: the same server emptied for one test, for tests that read its state
  or use its hooks (call counts, refusals, faults).
- ``weaviate_url`` (session): where the Weaviate tests run -- ``KG_TEST_WEAVIATE_URL`` when set (a
  real Weaviate, see docs/guides/scale-out.md), else the test server.

While a server is up, the client's best-effort PyPI version check
(``weaviate.connect.v4.PYPI_PACKAGE_URL``) is pointed at the test server, so no test reaches the
internet and no connect waits on it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

import pytest

from tests.weaviate_server import WeaviateTestServer

REAL_WEAVIATE_URL = os.environ.get("KG_TEST_WEAVIATE_URL") or None

_lock = threading.Lock()
_server: WeaviateTestServer | None = None
_users = 0
_saved_pypi_url: str | None = None


def _acquire() -> WeaviateTestServer:
    global _server, _users, _saved_pypi_url
    with _lock:
        if _server is None:
            import weaviate.connect.v4 as connection

            _server = WeaviateTestServer().start()
            _saved_pypi_url = connection.PYPI_PACKAGE_URL
            connection.PYPI_PACKAGE_URL = _server.pypi_url
        _users += 1
        return _server


def _release() -> None:
    global _server, _users
    with _lock:
        _users -= 1
        if _users or _server is None:
            return
        import weaviate.connect.v4 as connection

        connection.PYPI_PACKAGE_URL = _saved_pypi_url
        server, _server = _server, None
    server.stop()
    leftover = [t.name for t in threading.enumerate() if t.name.startswith("weaviate-test")]
    assert not leftover, f"the Weaviate test server left threads running: {leftover}"


@pytest.fixture(scope="session")
def weaviate_server() -> Iterator[WeaviateTestServer]:
    """The session's Weaviate test server (state shared between tests: use unique names)."""
    server = _acquire()
    try:
        yield server
    finally:
        _release()


@pytest.fixture
def weaviate_test_server(weaviate_server: WeaviateTestServer) -> Iterator[WeaviateTestServer]:
    """The test server, empty and without hooks, emptied again afterwards."""
    weaviate_server.reset()
    yield weaviate_server
    weaviate_server.reset()


@pytest.fixture(scope="session")
def weaviate_url(weaviate_server: WeaviateTestServer) -> str:
    """``KG_TEST_WEAVIATE_URL`` if set, else the test server's URL (``http://...?grpc_port=N``)."""
    return REAL_WEAVIATE_URL or weaviate_server.url
