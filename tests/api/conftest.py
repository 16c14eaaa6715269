"""Fixtures of this folder: the Weaviate test server and URL (tests/weaviate_fixtures.py), and
the check that response models leave every body as the route built it."""

from __future__ import annotations

from typing import Any

import fastapi.routing
import pytest
from pydantic import BaseModel, TypeAdapter

from tests.weaviate_fixtures import weaviate_server, weaviate_test_server, weaviate_url  # noqa: F401

_AS_BUILT = TypeAdapter(Any)


@pytest.fixture(autouse=True)
def bodies_are_as_the_routes_built_them(monkeypatch):
    """Every 2xx body in every API test is, byte for byte, the JSON of what its route returned:
    a dict as it is, which is what the route answered before it had a response model (``-> dict``),
    or the :mod:`kg.types` model a use case answered as that model's JSON (by alias, the keys it
    left out left out): the response model drops, adds, reorders and converts nothing. A
    mismatch fails the test at teardown, with the route and both bodies."""
    original = fastapi.routing.serialize_response
    mismatches: list[str] = []

    async def checked(*, field=None, response_content: Any, dump_json: bool = False, **kwargs: Any) -> Any:
        out = await original(field=field, response_content=response_content, dump_json=dump_json, **kwargs)
        if field is not None:
            built = response_content.model_dump(mode="json", by_alias=True, exclude_unset=True) \
                if isinstance(response_content, BaseModel) else response_content
            as_built = _AS_BUILT.dump_json(built) if dump_json else _AS_BUILT.dump_python(built, mode="json")
            if out != as_built:
                route = kwargs.get("endpoint_ctx") or {}
                mismatches.append(f"{route.get('function', field.name)}:\n  as built: {as_built!r}\n"
                                  f"  answered: {out!r}")
        return out

    monkeypatch.setattr(fastapi.routing, "serialize_response", checked)
    yield
    assert not mismatches, "response models changed bodies:\n" + "\n".join(mismatches)
