"""Every example of the manual runs: a real ``kg serve`` on a temporary data directory with five
PEPs ingested, and each page's ``bash`` and ``python`` blocks run in the navigation's order
against it (``$KG_URL``), each exiting 0 and printing what the page shows after it."""

from __future__ import annotations

import doctest
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.docs.pages import ROOT, Example, examples, nav_pages, run_by
from tests.serve import start_server, stop_server

#: The fixture: five PEPs of fixtures/peps (PEP 440 and four that replace or cite others).
PEPS = ("pep-0440", "pep-0449", "pep-0464", "pep-0503", "pep-0566")
PAGES = [page for page in nav_pages() if examples(page) and run_by(page) is None]
_CHECKER = doctest.OutputChecker()
_FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory):
    """(the environment the examples run in, their working folder): a server and a ``kg`` on PATH,
    both with a key pepper (so that the access page can make keys; ``KG_AUTH`` stays off)."""
    base = tmp_path_factory.mktemp("docs-examples")
    work, data, bin_dir = base / "work", base / "data", base / "bin"
    for folder in (work, bin_dir, base / "peps"):
        folder.mkdir()
    for pep in PEPS:
        shutil.copy(ROOT / "fixtures" / "peps" / "docs" / f"{pep}.rst", base / "peps")
    kg = bin_dir / "kg"  # the checkout's kg, whatever the venv's entry point was installed from
    kg.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m kg.cli "$@"\n')
    kg.chmod(kg.stat().st_mode | stat.S_IEXEC)
    env = {key: value for key, value in os.environ.items() if not key.startswith("KG_")}
    env.update(KG_DATA_DIR=str(data), PYTHONPATH=str(ROOT), PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
               KG_INDEX_FLUSH_INTERVAL_S="0", KG_KEY_PEPPER="a pepper for the manual's examples only",
               KG_ENTITY_NER="off")  # the outputs the pages show are the deterministic extractor's
    subprocess.run([sys.executable, "-m", "kg.cli", "ingest", str(base / "peps"), "--repo", "peps",
                    "--workspace", "peps", "--format", "pep"], env=env, cwd=ROOT, check=True,
                   capture_output=True, timeout=600)
    proc, url = start_server(env)
    try:
        yield {**env, "KG_URL": url}, work
    finally:
        stop_server(proc)


def _run(example: Example, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    command = ["bash", "-eo", "pipefail", "-c", example.code] if example.lang == "bash" \
        else [sys.executable, "-c", example.code]
    return subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("page", PAGES)
def test_the_examples_of_the_page_run(site, page: str):
    env, work = site
    for example in examples(page):
        done = _run(example, env, work)
        where = f"docs/{page}:{example.line}"
        assert done.returncode == 0, f"{where} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
        if example.output is not None:
            assert _CHECKER.check_output(example.output, done.stdout, _FLAGS), \
                f"{where} printed:\n{done.stdout}\nthe page shows:\n{example.output}"


def test_the_convention_finds_the_examples():
    """The agent loop's page holds examples with outputs, and no example names the port."""
    loop = examples("guides/agent-loop.md")
    assert len(loop) >= 10 and sum(e.output is not None for e in loop) >= 5
    for page in nav_pages():
        for example in examples(page):
            assert ":8765" not in example.code, f"docs/{page}:{example.line} names the port: use $KG_URL"


def test_pages_left_to_another_suite_name_a_test_that_runs_them():
    """A page marked ``<!-- examples: tests/x.py -->`` names a test file that reads that page."""
    marked = {page: run_by(page) for page in nav_pages() if run_by(page) is not None}
    assert set(marked) == {"guides/client.md", "guides/frameworks.md"}
    for page, test in marked.items():
        assert page in (ROOT / test).read_text(encoding="utf-8"), f"{test} does not read docs/{page}"


def test_the_readme_tour_runs(site):
    """The README's tour, its address taken from the test's server and each curl failing on a 4xx/5xx."""
    env, work = site
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    tour = readme.split("\n## A ten-line tour\n", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    assert tour.startswith("export KG_URL=http://127.0.0.1:8765\n")
    script = tour.split("\n", 1)[1].replace("curl -s ", "curl -sf ")
    assert script.count("curl -sf ") == 7
    done = subprocess.run(["bash", "-eo", "pipefail", "-c", script], env=env, cwd=work, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert '"path":"/pep-0440"' in done.stdout
    merged = httpx.get(f"{env['KG_URL']}/api/repos/peps/workspaces/peps/nodes/answers")  # the branch's node, on main
    assert merged.status_code == 200 and merged.json()["properties"]["content"] == "Use ~= for compatible releases."
