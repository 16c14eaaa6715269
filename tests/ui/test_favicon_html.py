"""The console's favicon: every page names it, and it is served (no /favicon.ico 404 per page)."""

from __future__ import annotations

LINK = '<link rel="icon" href="/ui/static/favicon.svg" type="image/svg+xml">'


def test_every_page_names_the_svg_favicon_and_it_is_served(console):
    for url in ("/ui/repos", "/ui/login", "/ui/r/nope/branches"):  # a page, the sign-in form, an error page
        r = console.get(url)
        assert LINK in r.text.split("</head>")[0], url
    icon = console.get("/ui/static/favicon.svg")
    assert icon.status_code == 200
    assert icon.headers["content-type"].startswith("image/svg+xml")
    assert icon.text.startswith("<svg") and "<script" not in icon.text
