"""Fixtures of the console's tests.

- ``console``: the app in process (TestClient) with ``KG_AUTH`` on, on SQLite and on PostgreSQL,
  an ``admin`` key, and :class:`Browser`-like helpers to sign in and post forms with the page's
  CSRF token (``tests/ui/test_*_html.py``).
- ``live`` and ``page``: a real ``kg serve`` process and a real Chromium driven by Playwright
  (Debian's ``chromium`` launched through ``executable_path``: browser downloads are impossible
  here). Screenshots go to ``tests/ui/screenshots/`` (ignored by git).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from kg.access import make_grant
from kg.context import OPERATOR, run
from kg.ops.keys import create_key
from kg.services import Services
from tests.conftest import ADAPTER_BACKENDS, FAKE_MODEL, db_url_on
from tests.conftest import database_url as fresh_database
from tests.serve import start_server, stop_server

#: The console's in-process tests: SQLite (tests/conftest.py, ADAPTER_BACKENDS).
db_url = db_url_on(ADAPTER_BACKENDS)

PEPPER = "console-tests-pepper-0123456789abcdef"
CHROMIUM = os.environ.get("KG_TEST_CHROMIUM", "/usr/bin/chromium")
SCREENSHOTS = Path(__file__).parent / "screenshots"
_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def csrf_of(html: str) -> str:
    """The CSRF token a console page carries in its forms."""
    match = _CSRF.search(html)
    assert match, "the page has no form with a CSRF token"
    return match.group(1)


@dataclass
class ConsoleClient:
    """A browser-like client of the in-process console: it keeps the session cookie and posts
    forms with the session's CSRF token."""

    http: TestClient
    services: Services
    csrf: str = ""

    def sign_in(self, token: str) -> None:
        """Sign in with ``token`` as a person would: open the form, post it."""
        form = self.http.get("/ui/login")
        assert form.status_code == 200, form.text
        r = self.http.post("/ui/login", data={"key": token, "next": "/ui", "csrf_token": csrf_of(form.text)},
                           follow_redirects=False)
        assert r.status_code == 303, r.text
        self.refresh_csrf()

    def refresh_csrf(self) -> None:
        """Read the session's CSRF token off a page (it changes with each sign-in)."""
        r = self.http.get("/ui/repos")
        assert r.status_code == 200, r.text
        self.csrf = csrf_of(r.text) if 'name="csrf_token"' in r.text else _header_csrf(r.text)

    def get(self, url: str, **kw) -> httpx.Response:
        return self.http.get(url, **kw)

    def post(self, url: str, data: dict | None = None, *, csrf: bool = True, **kw) -> httpx.Response:
        """POST a form; with the session's CSRF token unless ``csrf`` is False."""
        fields = dict(data or {})
        if csrf:
            fields.setdefault("csrf_token", self.csrf)
        return self.http.post(url, data=fields, follow_redirects=kw.pop("follow_redirects", False), **kw)


def _header_csrf(html: str) -> str:
    match = re.search(r'"X-CSRF-Token": "([^"]+)"', html)
    assert match, "the page carries no CSRF token"
    return match.group(1)


def new_key(services: Services, name: str, *grants: dict) -> str:
    """A key with ``grants`` (``{"repo", "branches", "workspaces", "actions"}`` each), made by the
    operator; returns its token."""
    made = run(services, OPERATOR, create_key, name=name,
               grants=[make_grant(g["repo"], g.get("branches", ("*",)), g.get("workspaces", ("*",)),
                                  g["actions"]) for g in grants])
    return made.key


@pytest.fixture
def console_services(db_url: str, tmp_path: Path) -> Iterator[Services]:
    """Services with ``KG_AUTH`` on (a pepper set), on the test database."""
    from kg.index.embedded import EmbeddedVectorIndex
    from kg.providers.registry import make_embedder
    from kg.settings import Settings
    from kg.store.db import Database

    settings = Settings(database_url=db_url, data_dir=tmp_path / "data", embedding_model=FAKE_MODEL,
                        index_inline=True, allow_fake_embedder=True, auth=True, key_pepper=PEPPER,
                        key_cache_s=0, ask_min_similarity=0.15, rag_max_distance=2.0)  # the fake embedder
    db = Database(settings.resolved_database_url())
    db.upgrade()
    svc = Services(settings=settings, db=db, index=EmbeddedVectorIndex(settings.data_dir),
                   embedder_factory=lambda name: make_embedder(name, allow_fake=True))
    yield svc
    svc.close()


@pytest.fixture
def console(console_services: Services) -> Iterator[ConsoleClient]:
    """A console client signed in with an admin key (``console.admin`` is its token); the same
    app answers ``/api`` with ``Authorization: Bearer <console.admin>``."""
    from api.app import create_app

    with TestClient(create_app(services=console_services), raise_server_exceptions=False) as http:
        c = ConsoleClient(http, console_services)
        token = new_key(console_services, "reviewer", {"repo": "*", "actions": ["admin"]})
        c.sign_in(token)
        c.admin = token  # type: ignore[attr-defined]
        yield c


def console_routes(app) -> set[tuple[str, str]]:
    """Every ``(method, path)`` the app serves under ``/ui`` (walking the included routers,
    which FastAPI keeps apart from the app's own list)."""
    from fastapi.routing import APIRoute

    def walk(routes, prefix: str):
        for route in routes:
            if isinstance(route, APIRoute):
                yield prefix + route.path, route
            elif hasattr(route, "original_router"):
                yield from walk(route.original_router.routes, prefix + (route.include_context.prefix or ""))

    return {(method, path) for path, route in walk(app.routes, "") if path.startswith("/ui")
            for method in route.methods}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


# --- the real server and the real browser -------------------------------------------------------

@dataclass
class Live:
    """A running ``kg serve``: its base URL, an admin token, and an httpx client with that token."""

    base: str
    admin: str
    api: httpx.Client
    env: dict[str, str]

    def key(self, name: str, *grants: dict) -> str:
        """A key made through ``POST /api/keys`` with the admin key; its token."""
        r = self.api.post("/api/keys", json={"name": name, "grants": list(grants)})
        assert r.status_code == 201, r.text
        return r.json()["key"]


@pytest.fixture(scope="module", params=ADAPTER_BACKENDS)
def live(request, tmp_path_factory) -> Iterator[Live]:
    """A real ``kg serve`` (auth on, the fake embedder, inline indexing) on a fresh database, and
    an admin key made with the CLI as an operator bootstraps one."""
    folder = tmp_path_factory.mktemp("live")
    with fresh_database(request.param, folder) as url:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KG_")}
        env.update({"KG_DATABASE_URL": url, "KG_DATA_DIR": str(folder / "data"), "KG_AUTH": "true",
                    "KG_KEY_PEPPER": PEPPER, "KG_ALLOW_FAKE_EMBEDDER": "true", "KG_EMBEDDING_MODEL": FAKE_MODEL,
                    "KG_INDEX_INLINE": "true", "KG_KEY_CACHE_S": "0", "OPENBLAS_NUM_THREADS": "1",
                    "KG_ASK_MIN_SIMILARITY": "0.15", "KG_RAG_MAX_DISTANCE": "2"})  # the fake embedder
        proc, base = start_server(env)
        try:
            made = subprocess.run([sys.executable, "-m", "kg.cli", "keys", "create", "--name", "admin", "--admin"],
                                  env=env, capture_output=True, text=True, check=False)
            assert made.returncode == 0, made.stderr
            token = next(w.strip('",') for w in made.stdout.split() if w.strip('",').startswith("kg_"))
            with httpx.Client(base_url=base, timeout=60, headers=bearer(token)) as api:
                yield Live(base, token, api, env)
        finally:
            stop_server(proc)


@pytest.fixture(scope="module")
def chromium():
    """Debian's Chromium under Playwright (``apt-get install chromium``; ``KG_TEST_CHROMIUM``
    names another binary). Per module: Playwright's sync API runs an event loop in the test
    thread while it is started, and ``asyncio.run`` in any later test (the MCP client's) would
    fail with "Already running asyncio in this thread" if it outlived the browser tests."""
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail(f"no Chromium at {CHROMIUM}: apt-get install -y chromium (or set KG_TEST_CHROMIUM)")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        yield browser
        browser.close()


@pytest.fixture
def page(chromium, live: Live):
    """A new browser page (its own cookies) on the live server, 1400x900."""
    context = chromium.new_context(base_url=live.base, viewport={"width": 1400, "height": 900})
    pg = context.new_page()
    pg.set_default_timeout(15_000)
    yield pg
    context.close()


def sign_in(page, token: str) -> None:
    """Sign in through the console's form, as a person does."""
    page.goto("/ui/login")
    page.fill("#key", token)
    page.click("button[type=submit]")
    page.wait_for_url(re.compile(r".*/ui/(repos|r/).*"))


def screenshot(page, name: str) -> Path:
    """Save the page as ``tests/ui/screenshots/<name>.png`` (full page) for review."""
    SCREENSHOTS.mkdir(exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
