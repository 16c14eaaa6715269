"""The documentation site builds, offline and strict, and its pages speak to a reader who is not on
the team: no issue numbers, no team words, no paths outside the repository, no hard-coded port."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.pages import DOCS, ROOT, nav_pages

#: What a reader outside the team cannot follow, and why.
FORBIDDEN = {
    r"\bissue\s*#?\d+": "an issue number",
    r"(?<![\w/&])#\d+\b": "an issue number",
    r"\bthe seeds?\b(?!\s+nodes?)": "the seeds (team words)",
    r"\bthe guide\b": "the guide (team words)",
    r"\bthe workflow tool\b": "the workflow tool (team words)",
    r"\.\./shared\b": "a path outside the repository",
    r"/work/": "a path outside the repository",
    r"localhost:8765": "a hard-coded address: use $KG_URL",
}


def _pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md")) + [ROOT / "README.md", ROOT / "CHANGELOG.md"]


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_page_names_what_a_reader_cannot_follow(page: Path):
    text = page.read_text(encoding="utf-8")
    found = [(text.count("\n", 0, m.start()) + 1, m.group(0), why)
             for pattern, why in FORBIDDEN.items() for m in re.finditer(pattern, text, re.IGNORECASE)]
    assert found == [], f"{page.relative_to(ROOT)}: {found}"


def test_the_checker_catches_each_kind():
    samples = ["see issue 12", "fixed in #12", "as the seeds say", "the guide's loop", "the workflow tool",
               "../shared/datasets", "/work/cache", "curl localhost:8765/api"]
    for sample in samples:
        assert any(re.search(p, sample, re.IGNORECASE) for p in FORBIDDEN), sample
    for fine in ["seed nodes: the seed node's mass", "`#!/bin/sh`", "a traverse's seeds", "&#34;"]:
        assert not any(re.search(p, fine, re.IGNORECASE) for p in FORBIDDEN), fine


def test_the_readme_is_short_and_keeps_the_two_commands():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.encode()) <= 10 * 1024
    assert "make run" in readme and "make test" in readme
    assert "127.0.0.1:8765" in readme  # where make run serves


def test_every_page_in_docs_is_in_the_navigation():
    listed = set(nav_pages())
    pages = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert pages - listed == set()


def test_the_site_builds_strict_and_offline(tmp_path: Path):
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert not re.search(r"^WARNING\b", done.stderr, re.MULTILINE), done.stderr
    settings = (site / "reference" / "settings.html").read_text(encoding="utf-8")
    assert "KG_DATABASE_URL" in settings and "KG_UI_SESSION_S" in settings
    cli = (site / "reference" / "cli.html").read_text(encoding="utf-8")
    assert "kg ingest" in cli and "--conflicts" in cli
    mcp = (site / "reference" / "mcp-tools.html").read_text(encoding="utf-8")
    assert "research_assistant" in mcp and "include_invalid" in mcp
    errors = (site / "reference" / "error-codes.html").read_text(encoding="utf-8")
    assert "merge_conflict" in errors and "409" in errors
    classes = (site / "reference" / "errors.html").read_text(encoding="utf-8")  # mkdocstrings: ::: kg.errors
    assert "A merge found changes on both sides that it will not resolve silently" in classes
    search = (site / "reference" / "http" / "search.html").read_text(encoding="utf-8")
    assert "/api/repos/{repo}/search" in search
    assert (site / "changelog.html").exists()
    for page in site.rglob("*.html"):  # nothing loaded from elsewhere: no fonts, scripts or styles
        html = page.read_text(encoding="utf-8")
        assert not re.search(r"<(?:script|link|img)[^>]+(?:src|href)=\"(?:https?:)?//", html), page
