"""``kg.client`` against a real ``kg serve`` (SQLite and PostgreSQL, auth on): the tour through the
sync and the async client (one script; :func:`ready` awaits what the async client answers),
pagination across pages, a scoped key's 403, 404s, 409s with details, and 429 with Retry-After."""

from __future__ import annotations

import inspect
import uuid
from typing import Any

import pytest

from kg.client import AsyncClient, Client
from kg.errors import Conflict, Forbidden, InvalidInput, MergeConflict, NotFound, RateLimited, Unauthenticated
from kg.types import (
    ApiKeyCreated,
    Branch,
    Diff,
    FunctionOutput,
    Job,
    JobAccepted,
    MergeResult,
    NdjsonImport,
    NeighborList,
    Node,
    Relation,
    Repo,
    SearchResponse,
)
from tests.client.conftest import Server

pytestmark = pytest.mark.anyio


async def ready(value: Any) -> Any:
    """What a method answered: the value (sync client), or what its coroutine gives (async client)."""
    return await value if inspect.isawaitable(value) else value


async def collect(items: Any) -> list[Any]:
    """Every item of an ``iter_*`` iterator, sync or async."""
    if hasattr(items, "__aiter__"):
        return [item async for item in items]
    return list(items)


def clients(server: Server, **kwargs: Any) -> list[Client | AsyncClient]:
    return [Client(server.url, api_key=server.admin_key, **kwargs),
            AsyncClient(server.url, api_key=server.admin_key, **kwargs)]


async def close(kg: Client | AsyncClient) -> None:
    await ready(kg.aclose() if isinstance(kg, AsyncClient) else kg.close())


@pytest.fixture(params=["sync", "async"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def client_of(kind: str, server: Server, key: str | None = None, **kwargs: Any) -> Client | AsyncClient:
    cls = Client if kind == "sync" else AsyncClient
    return cls(server.url, api_key=key or server.admin_key, **kwargs)


async def tour(kg: Client | AsyncClient, server: Server, kind: str) -> None:
    """The tour of docs/guides/client.md: one script for both clients."""
    name = f"tour-{uuid.uuid4().hex[:8]}"
    repo = await ready(kg.create_repo(name))
    assert isinstance(repo, Repo) and repo.name == name
    assert (await ready(kg.create_workspace(name, "kb"))).name == "kb"
    folder = await ready(kg.put_node(name, "kb", "/docs", node_type="kg:Folder", properties={"title": "Docs"}))
    assert isinstance(folder, Node) and (folder.path, folder.node_type) == ("/docs", "kg:Folder")
    keys = await ready(kg.put_node(name, "kb", "docs/keys", properties={
        "title": "Keys", "content": "To rotate an API key, create a new key, then revoke the old key."}))
    assert (keys.path, keys.parent_path, keys.properties["title"]) == ("/docs/keys", "/docs", "Keys")
    patched = await ready(kg.patch_node(name, "kb", "/docs/keys", properties={"owner": "ops"}))
    assert patched.properties["owner"] == "ops" and patched.revision > keys.revision

    found = await ready(kg.search(name, "rotate the key", mode="fulltext", k=5))
    assert isinstance(found, SearchResponse) and found.results[0].path == "/docs/keys"

    # invoke: the output (200), or the queued job (202) to read at get_job.
    output = await ready(kg.invoke_function(name, "search-documents", {"query": "rotate the key"}))
    assert isinstance(output, FunctionOutput) and output.root.passages[0].path == "/docs/keys"
    accepted = await ready(kg.invoke_function(name, "search-documents", {"query": "rotate"},
                                              wait_for_completion=False))
    assert isinstance(accepted, JobAccepted) and accepted.state in ("queued", "running", "succeeded")
    job = await ready(kg.get_job(accepted.job_id))
    assert isinstance(job, Job) and (job.job_id, job.function) == (accepted.job_id, "search-documents")

    branch = await ready(kg.create_branch(name, "feature/billing"))
    assert isinstance(branch, Branch) and (branch.name, branch.parent) == ("feature/billing", "main")
    await ready(kg.put_node(name, "kb", "/docs/billing", branch="feature/billing",
                            properties={"title": "Billing", "content": "Invoices go out monthly."}))
    with pytest.raises(NotFound) as missing:
        await ready(kg.get_node(name, "kb", "/docs/billing"))  # not on main yet
    assert missing.value.code == "not_found" and "billing" in missing.value.message
    changed = await ready(kg.diff(name, "feature/billing"))
    assert isinstance(changed, Diff) and [n.path for n in changed.nodes.added] == ["/docs/billing"]

    plan = await ready(kg.merge(name, "feature/billing", dry_run=True))
    assert isinstance(plan, MergeResult) and plan.dry_run and plan.revision is None and plan.plan
    merged = await ready(kg.merge(name, "feature/billing", if_plan=plan.plan, message="billing"))
    assert not merged.dry_run and merged.revision is not None
    assert [a.path for a in merged.applied.nodes.added] == ["/docs/billing"]
    assert (await ready(kg.get_node(name, "kb", "/docs/billing"))).properties["title"] == "Billing"
    # The same read through SQL: the merged node, $1 bound as a value.
    answer = await ready(kg.sql(name, "main", "SELECT path, properties->>'title' AS title FROM 'kb' WHERE path = $1",
                                params=["/docs/billing"]))
    assert [(r.columns, r.rows) for r in answer.results] == [(["path", "title"], [["/docs/billing", "Billing"]])]

    relation = await ready(kg.relate(name, "kb:/docs/keys", "kb:/docs/billing", "see_also", weight=0.5))
    assert isinstance(relation, Relation) and (relation.from_, relation.to, relation.weight) == (
        "kb:/docs/keys", "kb:/docs/billing", 0.5)
    around = await ready(kg.neighbors(name, "kb:/docs/keys"))
    assert isinstance(around, NeighborList)
    assert [(n.path, n.relation_type, n.direction) for n in around.neighbors] == [("/docs/billing", "see_also", "OUT")]

    # 409s keep their details: an existing repository, then a merge both sides changed.
    with pytest.raises(Conflict) as exists:
        await ready(kg.create_repo(name))
    assert type(exists.value) is Conflict and exists.value.details == {"repo": name}
    await ready(kg.create_branch(name, "edit"))
    await ready(kg.patch_node(name, "kb", "/docs/keys", branch="edit", properties={"title": "Keys (edit)"}))
    await ready(kg.patch_node(name, "kb", "/docs/keys", properties={"title": "Keys (main)"}))
    with pytest.raises(MergeConflict) as clash:
        await ready(kg.merge(name, "edit"))
    assert [c["path"] for c in clash.value.details["conflicts"]] == ["/docs/keys"]
    with pytest.raises(InvalidInput):
        await ready(kg.search(name, "x", k=0))

    # Keys: a reader of this repository may read, not write (403), and not once revoked (401).
    created = await ready(kg.create_key(f"reader-{kind}", grants=[{"repo": name, "actions": ["read"]}]))
    assert isinstance(created, ApiKeyCreated) and created.key.startswith("kg_")
    reader = client_of(kind, server, created.key)
    try:
        assert (await ready(reader.get_repo(name))).name == name
        with pytest.raises(Forbidden) as refused:
            await ready(reader.put_node(name, "kb", "/docs/x", properties={}))
        assert refused.value.code == "forbidden"
        assert created.id in [k.id for k in (await ready(kg.list_keys())).keys]
        assert (await ready(kg.revoke_key(created.id))).state == "revoked"
        with pytest.raises(Unauthenticated):
            await ready(reader.get_repo(name))
    finally:
        await close(reader)

    # The branch as a file of records, imported into another repository over HTTP.
    exported = await ready(kg.export(name, with_chunks=True))
    copy = f"{name}-copy"
    imported = await ready(kg.import_file(copy, exported, message="copied"))
    assert isinstance(imported, NdjsonImport) and imported.created_repository
    assert (imported.nodes, imported.relations, imported.queued) == (3, 1, 0)
    assert (await ready(kg.get_node(copy, "kb", "/docs/billing"))).properties["title"] == "Billing"
    with pytest.raises(InvalidInput) as bad:
        await ready(kg.import_file(copy, exported[:exported.index(b"\n") + 1] + b"{\n"))
    assert bad.value.message.startswith("line 2: ") and bad.value.details["line"] == 2
    assert await ready(kg.delete_repo(copy)) is None

    assert await ready(kg.delete_repo(name)) is None
    with pytest.raises(NotFound):
        await ready(kg.get_repo(name))


async def test_the_tour(server: Server, kind: str) -> None:
    kg = client_of(kind, server)
    try:
        await tour(kg, server, kind)
    finally:
        await close(kg)


async def test_listings_are_walked_across_pages(server: Server, kind: str) -> None:
    kg = client_of(kind, server)
    prefix = f"pages-{uuid.uuid4().hex[:8]}"
    try:
        names = [f"{prefix}-{i}" for i in range(5)]
        for name in names:
            await ready(kg.create_repo(name))
        first = await ready(kg.list_repos(limit=2))
        assert len(first.repos) == 2 and first.next_cursor
        listed = [r.name for r in await collect(kg.iter_repos(limit=2)) if r.name.startswith(prefix)]
        assert listed == names
        await ready(kg.create_workspace(names[0], "kb"))
        await ready(kg.batch(names[0], upserts=[{"workspace": "kb", "path": f"/n{i}", "properties": {"i": i}}
                                                for i in range(5)]))
        nodes = await collect(kg.iter_nodes(names[0], "kb", prefix="/", limit=2))
        assert [n.path for n in nodes] == [f"/n{i}" for i in range(5)]
        for i in range(3):
            await ready(kg.put_node(names[0], "kb", f"/n{i}", properties={"i": i, "again": True}))
        revisions = await collect(kg.iter_log(names[0], limit=2))
        numbers = [r.revision for r in revisions]
        assert len(numbers) == 4 and numbers == sorted(numbers, reverse=True)
    finally:
        await close(kg)


async def test_a_429_is_sent_again_after_retry_after(server: Server, kind: str) -> None:
    """The server allows one ``ask`` a second per key (tests/client/conftest.py): the second call
    in a row is a 429 with ``Retry-After: 1``; the client waits that long (the injected sleep
    really waits: the server's bucket refills in real time) and answers the output."""
    kg = client_of(kind, server)
    name = f"rate-{uuid.uuid4().hex[:8]}"
    waits: list[float] = []
    try:
        await ready(kg.create_repo(name))
        await ready(kg.create_workspace(name, "kb"))
        await ready(kg.put_node(name, "kb", "/a", properties={"content": "Keys are rotated every month."}))
        created = await ready(kg.create_key(f"asker-{kind}", grants=[{"repo": name, "actions": ["read"]}]))

        if kind == "sync":
            import time

            def sleep(seconds: float) -> None:
                waits.append(seconds)
                time.sleep(seconds)
        else:
            import anyio

            async def sleep(seconds: float) -> None:
                waits.append(seconds)
                await anyio.sleep(seconds)

        asker = client_of(kind, server, created.key, sleep=sleep)
        try:
            for _ in range(2):
                out = await ready(asker.invoke_function(name, "ask", {"question": "When are keys rotated?"}))
                assert isinstance(out, FunctionOutput) and out.root.answer
        finally:
            await close(asker)
        assert waits == [1.0]

        # Bounded: with no retry left the 429 is raised, with its Retry-After.
        waits.clear()
        impatient = client_of(kind, server, created.key, sleep=sleep, max_retries=0)
        try:
            with pytest.raises(RateLimited) as limited:
                await ready(impatient.invoke_function(name, "ask", {"question": "When are keys rotated?"}))
        finally:
            await close(impatient)
        assert waits == [] and limited.value.retry_after_s == 1.0 and limited.value.details["retry_after_s"] > 0
    finally:
        await ready(kg.delete_repo(name))
        await close(kg)


async def test_without_a_key_the_server_answers_unauthenticated(server: Server, kind: str,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KG_API_KEY", raising=False)
    monkeypatch.setenv("KG_URL", server.url)
    kg = Client() if kind == "sync" else AsyncClient()
    try:
        assert (await ready(kg.health())).status == "ok"
        with pytest.raises(Unauthenticated) as refused:
            await ready(kg.list_repos())
        assert refused.value.code == "unauthenticated"
    finally:
        await close(kg)
