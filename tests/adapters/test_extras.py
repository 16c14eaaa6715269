"""The adapters without their framework (a one-line ImportError naming the extra), the package
importing no framework, and the retrievers offline: with every connection but the server's
refused and empty NLTK / tiktoken / LlamaIndex caches, they answer and nothing is fetched."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.client.conftest import Server

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("module, package, extra", [
    ("kg.adapters.langchain", "langchain_core", "langchain"),
    ("kg.adapters.llamaindex", "llama_index", "llamaindex"),
])
def test_a_missing_framework_names_the_extra(monkeypatch: pytest.MonkeyPatch, module: str, package: str,
                                             extra: str) -> None:
    for name in [name for name in sys.modules if name == package or name.startswith(package + ".")] + [package]:
        monkeypatch.setitem(sys.modules, name, None)  # None: "import" raises ImportError
    monkeypatch.delitem(sys.modules, module, raising=False)
    with pytest.raises(ImportError) as missing:
        importlib.import_module(module)
    message = str(missing.value)
    assert message == f"{module} needs {package.replace('_', '-').replace('llama-index', 'llama-index-core')}: " \
                      f"pip install 'kg[{extra}]'"
    assert "\n" not in message


def test_the_package_imports_no_framework() -> None:
    script = ("import sys, kg.adapters, kg.adapters.hits; "
              "print([m for m in ('langchain_core', 'llama_index') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


OFFLINE = textwrap.dedent("""
    import asyncio, json, os, socket, sys

    allowed = os.environ["ALLOWED_PORT"]
    refused = []
    connect = socket.socket.connect

    def only_the_server(self, address):
        if not (isinstance(address, tuple) and address[0] == "127.0.0.1" and str(address[1]) == allowed):
            refused.append(repr(address))
            raise OSError("network refused by the test")
        return connect(self, address)

    socket.socket.connect = only_the_server

    from kg.adapters import langchain as lc
    from kg.adapters import llamaindex as li
    from kg.client import AsyncClient, Client

    async def main():
        with Client() as kg:
            docs = lc.KGRetriever(client=kg, repo="peps", k=3).invoke("What is a build backend?")
            nodes = li.KGRetriever("peps", client=kg, k=3).retrieve("What is a build backend?")
            text = nodes[0].node.get_content(metadata_mode="llm")
        async with AsyncClient() as akg:
            anodes = await li.KGRetriever("peps", async_client=akg, k=3).aretrieve("What is a build backend?")
        print(json.dumps({"docs": [d.metadata["path"] for d in docs], "nodes": [n.node.metadata["path"] for n in nodes],
                          "anodes": [n.node.metadata["path"] for n in anodes], "text": text, "refused": refused}))

    asyncio.run(main())
""")


def test_the_retrievers_need_no_network_and_fetch_nothing(server: Server, tmp_path: Path) -> None:
    caches = {name: tmp_path / name for name in ("NLTK_DATA", "TIKTOKEN_CACHE_DIR", "LLAMA_INDEX_CACHE_DIR",
                                                 "XDG_CACHE_HOME")}
    for folder in caches.values():
        folder.mkdir()
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("KG_")},
           **{name: str(folder) for name, folder in caches.items()},
           "KG_URL": server.url, "KG_API_KEY": server.admin_key, "ALLOWED_PORT": server.url.rsplit(":", 1)[1]}
    run = subprocess.run([sys.executable, "-c", OFFLINE], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["docs"] == out["nodes"] == out["anodes"] and out["docs"][0] == "/pep-0517"
    assert out["refused"] == []
    assert out["text"].startswith("workspace: peps\npath: /pep-0517\ntitle: A build-system independent")
    assert {name: sorted(p.name for p in folder.rglob("*")) for name, folder in caches.items()} == {
        name: [] for name in caches}
