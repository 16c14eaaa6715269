"""The LangChain and LlamaIndex retrievers against a real ``kg serve`` (SQLite and PostgreSQL):
the same passages, order and scores as ``POST .../search`` through the client, sync and async;
filters, path prefix and graph context change the results as the search does; refusals raise
kg's errors."""

from __future__ import annotations

from typing import Any

import pytest
from llama_index.core.schema import MetadataMode

from kg.adapters import langchain as lc
from kg.adapters import llamaindex as li
from kg.client import AsyncClient, Client
from kg.errors import InvalidInput, NotFound
from kg.types import SearchResponse
from tests.client.conftest import Server

pytestmark = pytest.mark.anyio

QUESTIONS = ["What is the Zen of Python?", "What is a build backend?", "How are version specifiers compared?",
             "Where is project metadata declared in pyproject.toml?"]
#: The citation handles of a hit that the search answers (the adapters add repo, branch and title).
HANDLES = ("workspace", "path", "node_id", "node_type", "chunk_index", "score", "vector_rank", "fulltext_rank",
           "vector_distance")


def expected(answer: SearchResponse) -> list[dict[str, Any]]:
    """What each hit's metadata must hold, in order: the search's own row."""
    return [{key: getattr(row, key) for key in HANDLES} for row in answer.results]


def handles(metadata: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{key: m[key] for key in HANDLES} for m in metadata]


def search(server: Server, query: str, **options: Any) -> SearchResponse:
    with Client(server.url, api_key=server.admin_key) as kg:
        return kg.search("peps", query, **options)


@pytest.mark.parametrize("question", QUESTIONS)
def test_langchain_answers_the_search_passages_in_order(server: Server, question: str) -> None:
    answer = search(server, question, k=5)
    assert len(answer.results) == 5
    with Client(server.url, api_key=server.admin_key) as kg:
        docs = lc.KGRetriever(client=kg, repo="peps", k=5).invoke(question)
    assert handles([d.metadata for d in docs]) == expected(answer)
    assert [d.page_content for d in docs] == [row.chunk_text for row in answer.results]
    assert [d.id for d in docs] == [f"{row.node_id}#{row.chunk_index}" for row in answer.results]
    assert {(d.metadata["repo"], d.metadata["branch"], d.metadata["at_revision"]) for d in docs} == {
        ("peps", "main", None)}


@pytest.mark.parametrize("question", QUESTIONS)
def test_llamaindex_answers_the_search_passages_in_order(server: Server, question: str) -> None:
    answer = search(server, question, k=5)
    with Client(server.url, api_key=server.admin_key) as kg:
        nodes = li.KGRetriever("peps", client=kg, k=5).retrieve(question)
    assert handles([n.node.metadata for n in nodes]) == expected(answer)
    assert [n.score for n in nodes] == [row.score for row in answer.results]
    assert [n.node.get_content() for n in nodes] == [row.chunk_text for row in answer.results]
    assert [n.node.node_id for n in nodes] == [f"{row.node_id}#{row.chunk_index}" for row in answer.results]


def test_the_answers_are_about_the_question(server: Server) -> None:
    """The top passages come from the PEP that answers (BM25 and rank fusion, not the fake vectors alone)."""
    with Client(server.url, api_key=server.admin_key) as kg:
        retriever = lc.KGRetriever(client=kg, repo="peps", k=3)
        assert retriever.invoke("What is a build backend?")[0].metadata["path"] == "/pep-0517"
        assert retriever.invoke("How are version specifiers compared?")[0].metadata["path"] == "/pep-0440"
        top = retriever.invoke("inline script metadata")[0]
    assert (top.metadata["path"], top.metadata["title"]) == ("/pep-0723", "Inline script metadata")


def test_the_title_is_the_nodes(server: Server) -> None:
    with Client(server.url, api_key=server.admin_key) as kg:
        docs = lc.KGRetriever(client=kg, repo="peps", k=5).invoke("build backend")
        titles = {d.metadata["path"]: kg.get_node("peps", d.metadata["workspace"], d.metadata["path"])
                  .properties["title"] for d in docs}
        assert [d.metadata["title"] for d in docs] == [titles[d.metadata["path"]] for d in docs]
        untitled = lc.KGRetriever(client=kg, repo="peps", k=5, titles=False).invoke("build backend")
    assert [d.metadata["title"] for d in untitled] == [None] * 5
    assert handles([d.metadata for d in untitled]) == handles([d.metadata for d in docs])


@pytest.mark.parametrize("options", [
    {"mode": "fulltext"},
    {"mode": "vector"},
    {"where": {"status": "Final"}},
    {"where": {"status": {"$ne": "Final"}}},
    {"path_prefix": "/guide"},
    {"node_type": "kb:Section", "workspaces": ["notes"]},
    {"workspaces": ["peps"], "granularity": "node"},
], ids=lambda o: ",".join(o))
def test_options_filter_as_the_search_does(server: Server, options: dict[str, Any]) -> None:
    question = "How do I install and build a package?"
    answer = search(server, question, k=6, **options)
    everything = search(server, question, k=6)
    assert answer.results and expected(answer) != expected(everything)
    with Client(server.url, api_key=server.admin_key) as kg:
        docs = lc.KGRetriever(client=kg, repo="peps", k=6, **options).invoke(question)
        nodes = li.KGRetriever("peps", client=kg, k=6, **options).retrieve(question)
        statuses = {d.metadata["path"]: kg.get_node("peps", d.metadata["workspace"], d.metadata["path"])
                    .properties.get("status") for d in docs}
    assert handles([d.metadata for d in docs]) == expected(answer)
    assert handles([n.node.metadata for n in nodes]) == expected(answer)
    if "where" in options:
        final = options["where"] == {"status": "Final"}
        assert all((status == "Final") is final for status in statuses.values())
    if "path_prefix" in options:
        assert all(d.metadata["path"] == "/guide" or d.metadata["path"].startswith("/guide/") for d in docs)
    if "node_type" in options:
        assert {d.metadata["node_type"] for d in docs} == {"kb:Section"}
    if options.get("granularity") == "node":
        assert len({d.metadata["path"] for d in docs}) == len(docs)


def test_graph_context_attaches_the_parent_and_the_neighbouring_sections(server: Server) -> None:
    context = {"parent": True, "siblings": 1}
    answer = search(server, "run the migrations", k=3, workspaces=["notes"], context=context)
    with Client(server.url, api_key=server.admin_key) as kg:
        plain = lc.KGRetriever(client=kg, repo="peps", k=3, workspaces=["notes"]).invoke("run the migrations")
        docs = lc.KGRetriever(client=kg, repo="peps", k=3, workspaces=["notes"],
                              context=context).invoke("run the migrations")
        nodes = li.KGRetriever("peps", client=kg, k=3, workspaces=["notes"], context=context).retrieve(
            "run the migrations")
    assert all("context" not in d.metadata for d in plain)
    wanted = [row.context.model_dump(mode="json", exclude_unset=True) for row in answer.results]
    assert [d.metadata["context"] for d in docs] == wanted
    assert [n.node.metadata["context"] for n in nodes] == wanted
    upgrade = next(d for d in docs if d.metadata["path"] == "/guide/upgrade")
    ctx = upgrade.metadata["context"]
    assert ctx["parent"]["path"] == "/guide"
    assert [n["path"] for n in ctx["before"]] == ["/guide/configure"]
    assert [n["path"] for n in ctx["after"]] == ["/guide/backup"]
    # The model reads the passage with its title and path, not the ids, ranks or context.
    text = nodes[0].node.get_content(metadata_mode=MetadataMode.LLM)
    assert "path: /guide/" in text and "node_id" not in text and "fulltext_rank" not in text


def test_at_revision_reads_the_branch_as_it_was(server: Server) -> None:
    with Client(server.url, api_key=server.admin_key) as kg:
        before = kg.get_branch("peps", "main").head_revision
        node = kg.put_node("peps", "notes", "/guide/restore", node_type="kb:Section", order=9.0,
                           properties={"title": "Restore", "content": "Restore a snapshot of the tarpaulin."})
        try:
            now = lc.KGRetriever(client=kg, repo="peps", mode="fulltext").invoke("tarpaulin")
            then = lc.KGRetriever(client=kg, repo="peps", mode="fulltext", at_revision=before).invoke("tarpaulin")
        finally:
            kg.delete_node("peps", "notes", "/guide/restore")
    assert [d.metadata["path"] for d in now] == ["/guide/restore"]
    assert now[0].metadata["node_id"] == node.id
    assert then == []


async def test_async_paths_answer_as_the_sync_ones(server: Server) -> None:
    question = "What is a build backend?"
    answer = search(server, question, k=5, context={"parent": True, "siblings": 0})
    async with AsyncClient(server.url, api_key=server.admin_key) as kg:
        docs = await lc.KGRetriever(async_client=kg, repo="peps", k=5,
                                    context={"parent": True, "siblings": 0}).ainvoke(question)
        nodes = await li.KGRetriever("peps", async_client=kg, k=5,
                                     context={"parent": True, "siblings": 0}).aretrieve(question)
    assert handles([d.metadata for d in docs]) == expected(answer)
    assert handles([n.node.metadata for n in nodes]) == expected(answer)
    assert [n.score for n in nodes] == [row.score for row in answer.results]
    assert docs[0].metadata["title"] and docs[0].metadata["title"] == nodes[0].node.metadata["title"]
    with Client(server.url, api_key=server.admin_key) as kg:  # ainvoke without an async client: a thread
        threaded = await lc.KGRetriever(client=kg, repo="peps", k=5).ainvoke(question)
    assert handles([d.metadata for d in threaded]) == handles([d.metadata for d in docs])


@pytest.mark.parametrize("kind", ["langchain", "llamaindex"])
def test_refusals_raise_kg_errors(server: Server, kind: str) -> None:
    with Client(server.url, api_key=server.admin_key) as kg:
        def run(repo: str, **options: Any) -> Any:
            if kind == "langchain":
                return lc.KGRetriever(client=kg, repo=repo, **options).invoke("build backend")
            return li.KGRetriever(repo, client=kg, **options).retrieve("build backend")

        with pytest.raises(NotFound) as missing:
            run("no-such-repo")
        assert missing.value.code == "not_found"
        with pytest.raises(InvalidInput) as invalid:
            run("peps", context={"parent": False, "siblings": 0})
        assert "context asks for nothing" in invalid.value.message
        with pytest.raises(InvalidInput):
            run("peps", where={"status": {"$regex": "F.*"}})


def test_a_retriever_needs_a_client() -> None:
    with pytest.raises(ValueError, match="needs a client"):
        lc.KGRetriever(repo="peps")
    with pytest.raises(ValueError, match="needs a client"):
        li.KGRetriever("peps")


async def test_async_refusals_raise_kg_errors(server: Server) -> None:
    async with AsyncClient(server.url, api_key=server.admin_key) as kg:
        with pytest.raises(NotFound):
            await lc.KGRetriever(async_client=kg, repo="no-such-repo").ainvoke("build backend")
        with pytest.raises(NotFound):
            await li.KGRetriever("peps", async_client=kg, branch="no-such-branch").aretrieve("build backend")
