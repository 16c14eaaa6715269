"""A typed Python client of kg's HTTP API: :class:`Client` (sync) and :class:`AsyncClient` (async).

One method per operation of the OpenAPI document, taking the API's fields as keywords and
answering the result models of :mod:`kg.types`; refusals raise the classes of :mod:`kg.errors`.
See docs/guides/client.md.
"""

from __future__ import annotations

from kg.client.calls import DEFAULT_URL, Call
from kg.client.client import AsyncClient, Client, Operations

__all__ = ["DEFAULT_URL", "AsyncClient", "Call", "Client", "Operations"]
