"""The manual's pages and their examples, as the docs tests read them.

The convention (docs/development.md): a fenced ``bash`` or ``python`` block is an example and is
run, in page order, against a real ``kg serve`` whose address is ``$KG_URL``; a ``text`` block
right after one is its output, matched as a doctest matches (``...`` stands for anything).
Blocks of any other language (``sh``, ``console``, ``json``, ``yaml``) are shown, not run.
A page whose examples need a server of their own (auth on, keys made by the example) says which
test runs them in a comment ``<!-- examples: tests/... -->``; the docs suite leaves that page to it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
RUNNABLE = ("bash", "python")
_FENCE = re.compile(r"^```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class Example:
    """One runnable block: its page, its line, its language, its code and its shown output."""

    page: str
    line: int
    lang: str
    code: str
    output: str | None


def nav_pages() -> list[str]:
    """The pages of ``mkdocs.yml``'s navigation that are files in ``docs/``, in order."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    found: list[str] = []

    def walk(items: object) -> None:
        if isinstance(items, str):
            found.append(items)
        elif isinstance(items, list):
            for item in items:
                walk(item)
        elif isinstance(items, dict):
            for value in items.values():
                walk(value)

    walk(config["nav"])
    return [page for page in found if (DOCS / page).is_file()]


_RUN_BY = re.compile(r"<!-- examples: (?P<test>tests/[\w/]+\.py) -->")


def run_by(page: str) -> str | None:
    """The test file that runs ``docs/<page>``'s examples, when it is not the docs suite."""
    found = _RUN_BY.search((DOCS / page).read_text(encoding="utf-8"))
    return found["test"] if found else None


def examples(page: str) -> list[Example]:
    """The runnable blocks of ``docs/<page>``, each with the ``text`` block that follows it."""
    text = (DOCS / page).read_text(encoding="utf-8")
    blocks = list(_FENCE.finditer(text))
    found = []
    for i, block in enumerate(blocks):
        if block["lang"] not in RUNNABLE:
            continue
        output = None
        if i + 1 < len(blocks):
            after = blocks[i + 1]
            if after["lang"] == "text" and not text[block.end():after.start()].strip():
                output = after["body"]
        found.append(Example(page, text.count("\n", 0, block.start()) + 1, block["lang"], block["body"], output))
    return found
