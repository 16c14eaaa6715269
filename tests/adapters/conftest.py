"""A real ``kg serve`` per database backend for the framework adapters' tests: auth on, the fake
embedder, PEPs of the fixture corpus ingested through the library (repository ``peps``,
workspace ``peps``) and a small guide of ordered sections (workspace ``notes``, two ``requires`` relations) for
the graph context, written through the client."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from kg.client import Client
from kg.context import OPERATOR
from kg.ops.ingest import ingest_path
from kg.services import Services
from kg.settings import Settings
from tests.client.conftest import PEPPER, Server, admin_key, serve_env
from tests.conftest import ADAPTER_BACKENDS, FAKE_MODEL, database_url, db_url_on
from tests.serve import start_server, stop_server

#: The adapters' in-process tests: SQLite (tests/conftest.py, ADAPTER_BACKENDS).
db_url = db_url_on(ADAPTER_BACKENDS)

PEPS = Path(__file__).resolve().parents[2] / "fixtures" / "peps" / "docs"
#: Build backends, version specifiers, dependency specifiers, pyproject metadata, inline script metadata.
SOME = ["pep-0440.rst", "pep-0508.rst", "pep-0517.rst", "pep-0518.rst", "pep-0621.rst", "pep-0723.rst"]
#: The guide: a folder and its sections in order (``order``), each with its text.
GUIDE = [("install", "Install the service with pip, then run the database migrations before the first start."),
         ("configure", "Configure the service with environment variables: the database URL and the data folder."),
         ("upgrade", "Upgrade the service: stop it, install the new release, run the migrations, start it."),
         ("backup", "Back up the database every night and keep the data folder's snapshots for a week.")]


def ingest(db_url: str, data: Path, corpus: Path) -> None:
    """The PEPs ingested through the library, embedded inline with the fake embedder."""
    settings = Settings(database_url=db_url, data_dir=data, embedding_model=FAKE_MODEL, allow_fake_embedder=True,
                        key_pepper=PEPPER, index_inline=True)
    services = Services.from_settings(settings)
    try:
        ingest_path(services, OPERATOR, corpus, repo="peps", workspace="peps", format_name="pep")
    finally:
        services.close()


def write_guide(kg: Client) -> None:
    kg.create_workspace("peps", "notes")
    kg.put_node("peps", "notes", "/guide", node_type="kb:Folder", properties={"title": "Operations guide"})
    for position, (name, text) in enumerate(GUIDE):
        kg.put_node("peps", "notes", f"/guide/{name}", node_type="kb:Section", order=float(position),
                    properties={"title": name.capitalize(), "content": text})
    # Upgrading needs the backup and the installation.
    kg.relate("peps", "notes:/guide/upgrade", "notes:/guide/backup", "requires")
    kg.relate("peps", "notes:/guide/upgrade", "notes:/guide/install", "requires")


@pytest.fixture(scope="module", params=ADAPTER_BACKENDS)
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A real ``kg serve`` on a fresh database of ``ADAPTER_BACKENDS``, the corpus in ``peps``."""
    folder = tmp_path_factory.mktemp(f"adapters-{request.param}")
    corpus = folder / "peps"
    corpus.mkdir()
    for name in SOME:
        shutil.copy(PEPS / name, corpus / name)
    with database_url(request.param, folder) as url:
        key = admin_key(serve_env(url, folder / "data"))
        ingest(url, folder / "data", corpus)
        proc, base = start_server(serve_env(url, folder / "data"))
        try:
            with Client(base, api_key=key) as kg:
                write_guide(kg)
            yield Server(base, key)
        finally:
            stop_server(proc)


@pytest.fixture
def anyio_backend() -> str:
    """The async tests run on asyncio (anyio's pytest plugin)."""
    return "asyncio"
