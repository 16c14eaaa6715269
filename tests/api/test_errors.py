"""The one error tree (kg/errors.py) and the one error mapper (api/errors.py): every error class
of kg is drawn in the tree under its real parent, has its own code and an explicit status, and
every refusal, the request guard's included, is answered through the mapper."""

from __future__ import annotations

import importlib
import pkgutil
import re

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

import api
import kg
from api import errors as api_errors
from kg import errors


def _all_error_classes() -> list[type[errors.KGError]]:
    """KGError and every subclass defined anywhere in kg or api (every module imported but
    ``api.main``, the ASGI entry point, which builds an app on the default database when
    imported)."""
    for package in (kg, api):
        for module in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            if module.name != "api.main":
                importlib.import_module(module.name)
    found: list[type[errors.KGError]] = [errors.KGError]
    for cls in found:
        found.extend(sub for sub in cls.__subclasses__() if sub not in found)
    return found


def _drawn_tree() -> dict[str, str | None]:
    """Class name -> parent name, read from the drawing in kg/errors.py's docstring."""
    block = errors.__doc__.split("::", 1)[1].split("\n\n")[1]
    parents: dict[str, str | None] = {}
    stack: list[tuple[int, str]] = []
    for line in block.splitlines():
        match = re.match(r"^(\s*(?:[│ ]   )*(?:[├└]── )?)(\w+)", line)
        assert match, f"not a line of the tree: {line!r}"
        depth = len(match.group(1))
        while stack and stack[-1][0] >= depth:
            stack.pop()
        parents[match.group(2)] = stack[-1][1] if stack else None
        stack.append((depth, match.group(2)))
    return parents


ERROR_CLASSES = _all_error_classes()


def test_every_error_class_is_in_kg_errors_and_drawn_under_its_parent():
    drawn = _drawn_tree()
    assert drawn["KGError"] is None
    real = {cls.__name__: (cls.__bases__[0].__name__ if cls is not errors.KGError else None)
            for cls in ERROR_CLASSES}
    assert drawn == real
    for cls in ERROR_CLASSES:
        assert cls.__module__ == "kg.errors", f"{cls.__name__} is defined outside the one tree"
        assert len(cls.__bases__) == 1


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda c: c.__name__)
def test_every_error_class_has_its_own_code_and_an_explicit_status(cls):
    assert "code" in vars(cls), f"{cls.__name__} inherits its code"
    assert re.fullmatch(r"[a-z]+(_[a-z]+)*", cls.code)
    assert cls in api_errors.STATUS, f"{cls.__name__} has no status in api/errors.py"
    status = api_errors.STATUS[cls]
    assert 400 <= status < 600
    assert api_errors.status_for(cls("x")) == status
    if cls is not errors.KGError:
        assert status != 500, "a 500 says the service is broken, not the request"


def test_error_codes_are_unique():
    codes = [cls.code for cls in ERROR_CLASSES]
    assert len(codes) == len(set(codes))


def _raising_app() -> FastAPI:
    app = FastAPI()
    api_errors.install(app)
    by_name = {cls.__name__: cls for cls in ERROR_CLASSES}

    @app.get("/raise/{name}")
    def _raise(name: str) -> None:
        raise by_name[name]("it went wrong", details={"why": name})

    return app


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda c: c.__name__)
def test_every_error_class_answers_its_status_code_and_the_error_shape(cls):
    with TestClient(_raising_app(), raise_server_exceptions=False) as client:
        r = client.get(f"/raise/{cls.__name__}")
    assert r.status_code == api_errors.STATUS[cls]
    assert r.json() == {"error": {"code": cls.code, "message": "it went wrong", "details": {"why": cls.__name__}}}


@pytest.mark.parametrize(("request_args", "cls"), [
    ({"method": "GET", "url": "/api/repos/a%00b"}, errors.InvalidInput),
    ({"method": "GET", "url": "/api/repos?x=%ED%A0%80"}, errors.InvalidInput),
    ({"method": "POST", "url": "/api/repos", "content": b'{"name": NaN}',
      "headers": {"content-type": "application/json"}}, errors.MalformedInput),
    ({"method": "POST", "url": "/api/repos", "content": b"[" * 70 + b"]" * 70,
      "headers": {"content-type": "application/json"}}, errors.MalformedInput),
])
def test_the_request_guard_answers_through_the_error_mapper(client, monkeypatch, request_args, cls):
    """The guard runs before the routes (outside the exception handlers) and still answers with
    api/errors.py's status for its error class: change the mapping and its answer follows."""
    before = client.request(**request_args)
    assert before.status_code == api_errors.STATUS[cls]
    assert before.json()["error"]["code"] == cls.code
    monkeypatch.setitem(api_errors.STATUS, cls, 418)
    after = client.request(**request_args)
    assert after.status_code == 418 and after.json() == before.json()


def _templates(routes, found=None) -> dict[str, set[str]]:
    """Path template -> the methods its routes serve, over every route of the app."""
    found = {} if found is None else found
    for route in routes:
        included = getattr(route, "original_router", None)
        if included is not None:
            _templates(included.routes, found)
        elif getattr(route, "methods", None):
            found.setdefault(route.path, set()).update(route.methods)
    return found


def test_options_names_the_methods_of_every_route(client):
    """OPTIONS (not served: a 405) names in ``Allow`` the methods of the resource at the path.
    ``/branches/{branch}/diff``, ``/merge`` and ``/reset`` named GET and DELETE too: those of
    ``/branches/{branch:path}``, whose template matches the same path."""
    templates = _templates(client.app.router.routes)
    assert len(templates) > 40
    for template, methods in templates.items():
        path = re.sub(r"\{\w+\}", "x", re.sub(r"\{\w+:path\}", "a/b", template))
        r = client.options(path)
        assert r.status_code == 405, template
        if not template.startswith("/ui"):  # the console answers its HTML page
            assert r.json()["error"]["code"] == "method_not_allowed", template
        order = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
        assert r.headers["allow"] == ", ".join(m for m in order if m in methods), template
    merge = client.options("/api/repos/acme/branches/feature/x/merge")
    assert merge.headers["allow"] == "POST"
    assert client.options("/api/repos/acme/branches/feature/x/diff").headers["allow"] == "GET"
    assert client.options("/api/repos/acme/branches/feature/x").headers["allow"] == "GET, DELETE"


def test_the_mcp_endpoints_401_and_403_answer_the_api_error_shape():
    """The SDK's bearer middleware answers an OAuth body (``{"error": "insufficient_scope",
    "error_description": ...}``); ``/mcp`` answers the API's error shape through the mapper,
    keeping the SDK's ``WWW-Authenticate``."""
    from starlette.responses import JSONResponse

    from api.mcp import _KgAuthErrors

    async def sdk(scope, receive, send):
        status = 403 if scope["path"].endswith("/scoped") else 401
        error = "insufficient_scope" if status == 403 else "invalid_token"
        description = "Required scope: admin" if status == 403 else "Authentication required"
        response = JSONResponse({"error": error, "error_description": description}, status_code=status,
                                headers={"WWW-Authenticate": f'Bearer error="{error}", '
                                                             f'error_description="{description}"'})
        await response(scope, receive, send)

    client = TestClient(_KgAuthErrors(sdk))  # no lifespan: the SDK app here answers HTTP only
    scoped = client.post("/acme/main/scoped", headers={"Authorization": "Bearer kg_x"})
    missing = client.post("/acme/main")
    assert scoped.status_code == 403 and scoped.headers["content-type"] == "application/json"
    assert scoped.json() == {"error": {"code": "forbidden", "message": "Required scope: admin", "details": {}}}
    assert scoped.headers["www-authenticate"].startswith('Bearer error="insufficient_scope"')
    assert missing.status_code == 401
    assert missing.json() == {"error": {"code": "unauthenticated", "details": {},
                                        "message": "an API key is required: Authorization: Bearer kg_<id>_<secret>"}}
