"""The python examples of docs/guides/client.md run, in order, against a real ``kg serve`` (the address
from ``KG_URL``, the administrator's key from ``KG_API_KEY``), and print what the page says."""

from __future__ import annotations

import contextlib
import io
import re

import pytest

from tests.client.conftest import Server
from tests.serve import ROOT


def blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "guides" / "client.md").read_text(), re.S)


def test_the_page_has_an_example_of_each_section() -> None:
    assert len(blocks()) == 5


def test_the_examples_run_against_a_real_server(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KG_URL", server.url)
    monkeypatch.setenv("KG_API_KEY", server.admin_key)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for block in blocks():
            exec(compile(block, "docs/guides/client.md", "exec"), {"__name__": "docs"})
    lines = out.getvalue().splitlines()
    assert lines[0] == __import__("kg").__version__
    assert lines[1].startswith("/docs/keys ")
    assert lines[3] == "['/docs/billing']"
    assert lines[5] == "[('/docs/billing', 'see_also')]"
    assert lines[6].startswith("not_found ")
    assert lines[7] == "{'repo': 'acme'}"
    assert lines[8].startswith("refused: ")
    assert lines[10] == "['/docs', '/docs/billing', '/docs/keys']"
    assert lines[-1] == "Keys ['/docs/billing'] ['acme']"
