"""Issue 17's language-model legs through the real ``ollama`` client (kg's OllamaLLM) against
the Ollama-compatible test server, not a scripted stand-in: resolve-entities' confirmation of
each pair, extract-entities' invalidations, and lineage's re-extraction job after an edit. A
failing model writes nothing. Both databases."""

from __future__ import annotations

import json

import pytest

from kg.providers.ollama import OllamaLLM
from tests.api.test_graph_functions import extract, neighbors, put
from tests.api.test_resolve_entities import EXPECTED, crew, entity, resolve  # noqa: F401 - crew: a fixture
from tests.ollama_server import OllamaTestServer

API = "/api/repos/acme"


@pytest.fixture
def ollama(services):
    with OllamaTestServer() as server:
        services.llm = OllamaLLM("llama3.2", host=server.url, retry_wait_s=0)
        yield server


def _asked(server, words: str) -> list[dict]:
    """The chat requests whose last message holds ``words``."""
    return [r.body for r in server.recorded("/api/chat") if words in r.body["messages"][-1]["content"]]


@pytest.mark.usefixtures("crew")
def test_resolve_entities_asks_the_model_for_each_pair_and_keeps_only_confirmed_merges(client, ollama):
    entity(client, "moby-dick", "Moby Dick", "work")
    entity(client, "moby-dick-novel", "Moby-Dick", "work")

    def same(request: dict) -> str:
        prompt = request["messages"][-1]["content"]
        return json.dumps({"same": "Ahab" in prompt})  # the two Moby Dicks are refused

    ollama.default_chat_reply = same
    out = resolve(client)
    assert out["merges"] == [{**EXPECTED[0], "reasons": ["llm_confirmed", "same_name"]}]
    assert len(_asked(ollama, "A: ")) == 2  # one question per blocked pair at or above the threshold
    assert len(_asked(ollama, "Moby")) == 1
    branches = [b["name"] for b in client.get(f"{API}/branches").json()["branches"]]
    assert branches == ["main", out["branch"]]


@pytest.mark.usefixtures("crew")
def test_resolve_entities_with_a_failing_model_is_a_502_and_writes_no_branch(client, ollama):
    ollama.fail_next("status", path="/api/chat", times=10, status=500, message="model crashed")
    r = client.post("/api/functions/acme/resolve-entities/invoke", json={"input": {"workspace": "knowledge"}})
    assert r.status_code == 502, r.text
    assert r.json()["error"]["code"] == "provider_error" and "nothing was written" in r.json()["error"]["message"]
    assert [b["name"] for b in client.get(f"{API}/branches").json()["branches"]] == ["main"]


def test_extract_entities_applies_the_models_invalidations(client, repo, ollama):
    people = [{"name": "Dana Weber", "type": "person"}, {"name": "Acme Marine", "type": "organization"},
              {"name": "Globex", "type": "organization"}]
    ollama.script_chat(
        json.dumps({"entities": people[:2], "relations": [{"from": "Dana Weber", "type": "works_at",
                                                           "to": "Acme Marine"}]}),
        json.dumps({"entities": people, "relations": [{"from": "Dana Weber", "type": "works_at", "to": "Globex"}],
                    "invalidates": [{"from": "Dana Weber", "type": "works_at", "to": "Acme Marine"}]}),
    )
    put(client, "/hired", "Dana Weber works at Acme Marine.")
    put(client, "/moved", "Dana Weber left Acme Marine and joined Globex.")
    assert extract(client, "/hired").json()["extractor"] == "llm:ollama:llama3.2:latest"
    second = extract(client, "/moved").json()
    assert second["invalidated"] == [{"from": "/entities/dana-weber", "type": "works_at",
                                      "to": "/entities/acme-marine"}]
    rows = neighbors(client, "knowledge:/entities/dana-weber", direction="OUT", type="works_at",
                     include_invalid="true")
    closed = {n["path"]: n["invalidated_by"] for n in rows}
    assert closed == {"/entities/acme-marine": "knowledge:/moved", "/entities/globex": None}
    assert len(ollama.recorded("/api/chat")) == 2


def test_an_edit_of_an_extracted_text_queues_a_reextraction_that_asks_the_model(client, repo, ollama, services):
    people = [{"name": "Dana Weber", "type": "person"}, {"name": "Acme Marine", "type": "organization"}]
    ollama.script_chat(json.dumps({"entities": people, "relations": []}),
                       json.dumps({"entities": people[:1], "relations": []}))
    put(client, "/bio", "Dana Weber works at Acme Marine.")
    extract(client, "/bio")
    put(client, "/bio", "Dana Weber retired.")  # lineage queues extract-entities (inline: after the commit)
    assert len(ollama.recorded("/api/chat")) == 2
    assert "Dana Weber retired." in ollama.recorded("/api/chat")[1].body["messages"][-1]["content"]
    rows = client.get(f"{API}/neighbors", params={"node": "knowledge:/bio", "direction": "IN",
                                                  "type": "mentioned_in"}).json()["neighbors"]
    assert [n["path"] for n in rows] == ["/entities/dana-weber"]
