"""docs/guides/frameworks.md's python blocks run, in order, against a real ``kg serve`` (``KG_URL``,
``KG_API_KEY``) and print what the page says they print."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.client.conftest import Server

PAGE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "frameworks.md"


def blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)


def test_the_page_has_its_examples() -> None:
    assert len(blocks()) == 5


def test_the_pages_python_blocks_run_against_the_server(server: Server, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("KG_URL", server.url)
    monkeypatch.setenv("KG_API_KEY", server.admin_key)
    namespace: dict[str, object] = {"__name__": "frameworks_md"}
    try:
        for block in blocks():
            exec(compile(block, str(PAGE), "exec"), namespace)  # noqa: S102 (the page's own examples)
    finally:
        kg = namespace.get("kg")
        if kg is not None:
            kg.close()  # type: ignore[attr-defined]
    lines = capsys.readouterr().out.splitlines()
    # The retriever: three passages, the best from PEP 517 with its title.
    assert re.fullmatch(r"\d\.\d{4} peps:/pep-0517#\d+ 'A build-system independent format for source trees'",
                        lines[0]), lines
    # Final PEPs only, each with the PEPs after it.
    assert all(line.startswith("/pep-") and " after: ['/pep-" in line for line in lines[3:6]), lines[3:6]
    assert "'/pep-0440'" in lines[6]  # async
    assert lines[7].startswith("True ['/pep-0517'")  # kg_ask
    assert lines[8] == "not_found"  # the tool error's code
    assert re.fullmatch(r"\d\.\d{4} /pep-0440#\d+", lines[9]), lines[9]  # LlamaIndex
