"""``/docs`` and ``/redoc`` name only assets that kg serves itself (they were blank offline:
FastAPI's defaults load Swagger UI and ReDoc from a CDN)."""

from __future__ import annotations

import re

import pytest


def _urls(html: str) -> list[str]:
    return re.findall(r"""(?:src|href)=["']([^"']+)["']|url:\s*['"]([^'"]+)['"]""", html)


@pytest.mark.parametrize("page, scripts", [
    ("/docs", ["/static/docs/swagger-ui-bundle.js"]),
    ("/redoc", ["/static/docs/redoc.standalone.js"]),
])
def test_docs_pages_name_only_local_assets_and_they_answer(client, page, scripts):
    answer = client.get(page)
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/html")
    html = answer.text
    assert "http://" not in html and "https://" not in html and "//cdn" not in html
    named = [a or b for a, b in _urls(html)]
    assert named and all(u.startswith("/") and not u.startswith("//") for u in named), named
    assert [u for u in named if u.endswith(".js")] == scripts
    for url in named:
        if url == "/openapi.json":
            continue
        asset = client.get(url)
        assert asset.status_code == 200, url
        if url.endswith(".js"):
            assert asset.headers["content-type"].split(";")[0] in ("text/javascript", "application/javascript")
            assert len(asset.content) > 100_000
        if url.endswith(".css"):
            assert asset.headers["content-type"].startswith("text/css")


def test_swagger_ui_oauth2_redirect_is_served(client):
    answer = client.get("/docs/oauth2-redirect")
    assert answer.status_code == 200 and "oauth2" in answer.text.lower()


def test_the_vendored_assets_carry_their_licences():
    from api.docs import ASSETS

    names = {p.name for p in ASSETS.iterdir()}
    assert {"swagger-ui.LICENSE", "swagger-ui.NOTICE", "redoc.LICENSE"} <= names
    assert "Apache License" in (ASSETS / "swagger-ui.LICENSE").read_text(encoding="utf-8")
    assert "MIT License" in (ASSETS / "redoc.LICENSE").read_text(encoding="utf-8")


def test_the_document_declares_the_bearer_scheme_and_the_operations_name_it(client):
    """``components.securitySchemes`` holds the API key as an HTTP bearer scheme (so ``/docs``
    offers "Authorize"); every ``/api`` operation needs it, the liveness probes do not."""
    document = client.get("/openapi.json").json()
    scheme = document["components"]["securitySchemes"]["bearer"]
    assert (scheme["type"], scheme["scheme"], scheme["bearerFormat"]) == ("http", "bearer", "kg_<id>_<secret>")
    operations = {(method.upper(), path): op for path, item in document["paths"].items() for method, op in item.items()}
    assert operations[("PUT", "/api/repos/{repo}/workspaces/{ws}/nodes/{path}")]["security"] == [{"bearer": []}]
    unsecured = sorted(key for key, op in operations.items() if op.get("security") != [{"bearer": []}])
    assert unsecured == [("GET", "/api/health"), ("GET", "/health")]
