"""``/docs`` and ``/redoc`` render in a real browser with every request off the server refused
(no network: they were blank, their scripts came from a CDN)."""

from __future__ import annotations


def _offline(page, base: str) -> list[str]:
    """Abort every request that does not go to the live server; the list of those aborted."""
    refused: list[str] = []

    def route(r):
        if r.request.url.startswith(base) or r.request.url.startswith(("data:", "blob:")):
            r.continue_()
        else:
            refused.append(r.request.url)
            r.abort()

    page.route("**/*", route)
    return refused


def test_swagger_ui_renders_the_operations_offline(page, live):
    refused = _offline(page, live.base)
    page.goto("/docs")
    page.wait_for_selector(".opblock-summary-path", timeout=30_000)
    paths = page.locator(".opblock-summary-path").all_inner_texts()
    assert any("/api/repos" in p for p in paths)
    assert refused == []


def test_redoc_renders_the_operations_offline(page, live):
    refused = _offline(page, live.base)
    page.goto("/redoc")
    page.wait_for_selector("[data-section-id]", timeout=30_000)
    assert page.locator("[data-section-id]").count() > 10
    assert refused == []
