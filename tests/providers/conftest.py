"""Fixtures of the provider tests: an Ollama-compatible server on a loopback port."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.ollama_server import OllamaTestServer


@pytest.fixture
def ollama(request) -> Iterator[OllamaTestServer]:
    """A fresh Ollama-compatible test server (faults and chat script are per test)."""
    with OllamaTestServer() as server:
        yield server


@pytest.fixture
def ollama_server(ollama: OllamaTestServer) -> str:
    """The URL of the test server, ``http://127.0.0.1:<port>``."""
    return ollama.url
