"""The project stands on its own: nothing it ships refers to files outside the repository.

Code, tests, benchmarks, migrations, settings and docs once cited design notes and datasets
kept beside the checkout. A reader of this repository has neither, so a reference to them is a
dead end (and a benchmark defaulting to such a path fails on any other machine): what a reader
needs lives in ``docs/``, and datasets and caches are arguments (``DATASETS/...``,
``$KG_BENCH_CACHE``).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: A reference a reader of the repository cannot follow, and why.
OUTSIDE = {
    r"\b(?:API|DESIGN|CASES|STYLE)\.md\b": "a design note outside the repository",
    r"\.\./shared\b": "a path outside the repository",
    r"/work/": "a path outside the repository",
    r"\b[Ss]eed 00\d\b": "a source document outside the repository",
    r"\b[Tt]he workflow tool\b": "a product the reader does not know",
}

#: Files that name the patterns in order to check them.
CHECKERS = {"tests/unit/test_standalone.py", "tests/docs/test_site.py"}


def _tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [f for f in out.splitlines()
            if f not in CHECKERS and not f.startswith("fixtures/")
            and (f.endswith((".py", ".toml", ".yml", ".yaml", ".cfg", ".ini", ".sh", ".md", ".txt", ".html"))
                 or Path(f).name in {"Makefile", "Dockerfile", "run"})]


def test_nothing_refers_outside_the_repository():
    found = []
    for name in _tracked():
        path = ROOT / name
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        for pattern, why in OUTSIDE.items():
            for m in re.finditer(pattern, text):
                found.append(f"{name}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)!r} ({why})")
    assert found == []


def test_the_check_catches_each_kind():
    for sample in ["(API.md, \"Errors\")", "as DESIGN.md says", "CASES.md #4", "STYLE.md", "../shared/datasets",
                   "/work/cache/cv", "seed 001, \"Store the answer\"", "the workflow tool's node"]:
        assert any(re.search(p, sample) for p in OUTSIDE), sample
    for fine in ["docs/concepts/branches.md", "a traverse's seeds", "random seed 0", "workflows", "DATASETS/scifact",
                 "docs/api.md of ollama/ollama"]:
        assert not any(re.search(p, fine) for p in OUTSIDE), fine
