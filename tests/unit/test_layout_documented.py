"""The development page's layout section matches the code: the tree names every package and module
of ``kg`` (and names none that is gone), and its import chain is the import-linter layers'."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _layout() -> tuple[str, str]:
    """(the tree block, the paragraph after it) of docs/development.md's ``## Layout`` section."""
    page = (ROOT / "docs" / "development.md").read_text()
    section = page.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    tree = section.split("```", 2)[1]
    return tree, section.split("```", 2)[2]


def test_the_tree_names_every_package_and_module_of_kg():
    tree, _ = _layout()
    missing = []
    for path in sorted((ROOT / "kg").iterdir()):
        if path.name.startswith("_") or path.name == "data":
            continue
        name = path.name + "/" if path.is_dir() else path.name
        if name not in tree:
            missing.append(name)
    for package in sorted(p for p in (ROOT / "kg").iterdir() if p.is_dir() and (p / "__init__.py").exists()):
        for module in sorted(package.rglob("*.py")):
            if module.name.startswith("_"):
                continue
            if module.stem not in tree:
                missing.append(str(module.relative_to(ROOT)))
    assert missing == [], missing


def test_every_module_the_tree_names_exists():
    tree, _ = _layout()
    kg_part = tree.split("\nmigrations/", 1)[0]
    named = set(re.findall(r"\b([a-z_]+\.py)\b", kg_part))
    existing = {p.name for folder in ("kg", "api") for p in (ROOT / folder).rglob("*.py")}
    assert named - existing == set()


def test_the_import_chain_is_the_layers_contract():
    _, after = _layout()
    chain = re.search(r"Imports point down only: `([^`]+)`", after.replace("\n", " ")).group(1)
    said = [[name.strip() for name in re.split(r"[|:]", step)] for step in chain.split("->")]
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (layers,) = [c["layers"] for c in config["tool"]["importlinter"]["contracts"] if c["id"] == "layers"]
    drawn = [[name.strip() for name in re.split(r"[|:]", layer)] for layer in layers]
    # The page leaves out kg.lru beside errors and settings; every other name is in both.
    drawn[-1] = [n for n in drawn[-1] if n != "kg.lru"]
    assert said == drawn
