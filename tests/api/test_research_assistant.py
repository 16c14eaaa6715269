"""The research assistant (issue 13): a bounded tool-calling loop on a session branch of its own,
against the Ollama protocol test server with scripted tool calls, over SQLite and PostgreSQL."""

from __future__ import annotations

from collections import deque

import pytest

from kg.context import OPERATOR, run
from kg.ops.merge import merge_branch
from kg.providers.ollama import OllamaLLM
from kg.rag.research import SYSTEM_PROMPT
from tests.api.test_graph_functions import rigging  # noqa: F401 - a fixture: /rigging, /tropics, see_also
from tests.api.test_nodes import assert_error
from tests.ollama_server import OllamaTestServer, tool_call

API = "/api/repos/acme"
NODES = f"{API}/workspaces/knowledge/nodes"
QUESTION = "How often must standing rigging be replaced?"
ANSWER = "Standing rigging must be replaced every ten years [1]."

pytestmark = pytest.mark.usefixtures("rigging")


class Model:
    """The scripted model behind the Ollama test server: the research loop's turns come from
    ``turns`` (then a plain answer); ask's own calls (grade, rewrite, answer) are answered apart."""

    def __init__(self, server: OllamaTestServer) -> None:
        self.server = server
        self.turns: deque = deque()
        self.after = "I have nothing more to add."
        server.default_chat_reply = self.reply

    def script(self, *turns) -> None:
        self.turns.extend(turns)

    def reply(self, request: dict):
        system = request["messages"][0]["content"]
        if system == SYSTEM_PROMPT:
            return self.turns.popleft() if self.turns else self.after
        if system.startswith("You grade retrieval"):
            return '{"sufficient": true}'
        if system.startswith("Rewrite search queries"):
            return '{"query": "standing rigging replaced"}'
        return ANSWER  # ask's answer from its numbered passages

    def loop_requests(self) -> list[dict]:
        return [r.body for r in self.server.recorded("/api/chat") if r.body["messages"][0]["content"] == SYSTEM_PROMPT]


@pytest.fixture
def model(services):
    with OllamaTestServer() as server:
        services.llm = OllamaLLM("llama3.2", host=server.url, retry_wait_s=0)
        yield Model(server)


def research(client, payload, **body):
    return client.post("/api/functions/acme/research-assistant/invoke", json={"input": payload, **body})


def head(client, branch="main"):
    return client.get(f"{API}/branches/{branch}").json()["head_revision"]


def ok(response) -> dict:
    assert response.status_code == 200, response.text
    return response.json()


def assert_stored_on_its_branch_only(client, body) -> None:
    stored, branch = body["stored"], body["branch"]
    path = stored["path"].lstrip("/")
    node = client.get(f"{API}/workspaces/{stored['workspace']}/nodes/{path}", params={"branch": branch})
    assert node.status_code == 200, node.text
    assert node.json()["node_type"] == "kb:Answer"
    assert node.json()["properties"]["answer"] == body["answer"]
    assert client.get(f"{API}/workspaces/{stored['workspace']}/nodes/{path}").status_code == 404


def test_a_normal_run_searches_then_answers_on_its_own_branch(client, model, services):
    model.script(tool_call("search-documents", {"query": "standing rigging replaced"}),
                 {"content": "Standing rigging is replaced every ten years [1]."})
    main_head = head(client)
    body = ok(research(client, {"question": QUESTION}))
    assert body["mode"] == "llm" and body["stopped"] == "answered"
    assert body["grounded"] is True and body["answer"] == "Standing rigging is replaced every ten years [1]."
    assert [c["path"] for c in body["citations"]] == ["/rigging"]
    assert body["branch"].startswith("research/") and body["from"] == "main"
    assert body["steps"] == 1 and body["max_steps"] == 6
    first = body["trace"][0]
    assert (first["by"], first["tool"], first["arguments"]) == ("model", "search-documents",
                                                                {"query": "standing rigging replaced"})
    assert first["passages"] >= 1 and first["result"].startswith(f"{first['passages']} passage(s): [1] /rigging")
    assert body["trace"][-1]["tool"] is None and "error" not in body["trace"][-1]
    # The model was offered exactly the three tools, and read the passages it found.
    first_request, second_request = model.loop_requests()
    assert [t["function"]["name"] for t in first_request["tools"]] == ["search-documents", "ask", "graph-context"]
    tool_message = second_request["messages"][-1]
    assert tool_message["role"] == "tool" and tool_message["tool_name"] == "search-documents"
    assert tool_message["content"].startswith("[1] knowledge:/rigging (chunk 0): Standing rigging")

    # On its own branch only: main is unchanged until the merge.
    assert_stored_on_its_branch_only(client, body)
    assert head(client) == main_head
    diff = client.get(f"{API}/branches/{body['branch']}/diff", params={"against": "main"}).json()
    assert [n["path"] for n in diff["nodes"]["added"]] == ["/answers", body["stored"]["path"]]
    cites = client.get(f"{API}/neighbors", params={"node": f"knowledge:{body['stored']['path']}",
                                                   "branch": body["branch"], "direction": "OUT"}).json()
    assert [(n["path"], n["relation_type"]) for n in cites["neighbors"]] == [("/rigging", "cites")]
    merged = run(services, OPERATOR, merge_branch, "acme", body["branch"], "main")
    assert merged.revision is not None
    on_main = client.get(f"{NODES}{body['stored']['path']}").json()
    assert on_main["properties"]["answer"] == body["answer"] and on_main["properties"]["grounded"] is True


def test_an_unknown_tool_is_a_step_and_the_model_is_told(client, model):
    model.script(tool_call("web-search", {"query": "rigging"}),
                 tool_call("search-documents", {"query": "standing rigging"}),
                 {"content": "Every ten years [1]."})
    body = ok(research(client, {"question": QUESTION}))
    unknown = body["trace"][0]
    assert unknown["tool"] == "web-search" and unknown["result"] is None
    assert unknown["error"] == "unknown tool 'web-search'; the tools are search-documents, ask, graph-context"
    assert "error" not in body["trace"][1] and body["steps"] == 2
    assert body["grounded"] is True and body["stopped"] == "answered"
    told = model.loop_requests()[1]["messages"][-1]
    assert told["role"] == "tool" and told["content"].startswith("error: unknown tool 'web-search'")


def test_a_looping_model_is_stopped_and_answers_from_what_it_found(client, model):
    same = tool_call("search-documents", {"query": "standing rigging"})
    model.script(same, same, same, {"content": "Ten years [1]."})
    body = ok(research(client, {"question": QUESTION}))
    assert body["stopped"] == "loop" and body["steps"] == 3
    assert [s.get("error", "")[:13] for s in body["trace"][:3]] == ["", "repeated call", "repeated call"]
    assert body["trace"][1]["error"] == "repeated call: the same as step 1; not run again"
    # Three turns, then one call without tools to answer: bounded.
    requests = model.loop_requests()
    assert len(requests) == 4 and not requests[-1].get("tools")
    assert body["answer"] == "Ten years [1]." and body["grounded"] is True


def test_max_steps_bounds_the_loop(client, model):
    model.script(*[tool_call("search-documents", {"query": f"rigging {i}"}) for i in range(3)],
                 {"content": "Ten years [1]."})
    body = ok(research(client, {"question": QUESTION, "max_steps": 3}))
    assert body["stopped"] == "max_steps" and body["steps"] == 3 and body["max_steps"] == 3
    assert [s["tool"] for s in body["trace"]] == ["search-documents"] * 3 + [None]
    assert len(model.loop_requests()) == 4  # three turns and the answer without tools
    assert body["answer"] == "Ten years [1]." and body["grounded"] is True


def test_a_model_that_will_not_answer_gets_kgs_extractive_answer(client, model):
    model.script(*[tool_call("search-documents", {"query": f"rigging {i}"}) for i in range(10)])
    body = ok(research(client, {"question": QUESTION, "max_steps": 2}))
    assert body["stopped"] == "max_steps" and body["steps"] == 2
    refused, fallback = body["trace"][-2:]
    assert refused["error"] == "no answer when asked to answer"
    assert fallback["by"] == "kg" and fallback["result"].startswith("the model gave no answer")
    assert body["grounded"] is True and "ten years" in body["answer"]
    assert body["citations"][0]["path"] == "/rigging"


def test_several_calls_in_one_turn_count_each_and_stop_at_the_bound(client, model):
    many = {"content": "", "tool_calls": [{"function": {"name": "search-documents", "arguments": {"query": f"q{i}"}}}
                                          for i in range(5)]}
    model.script(many, {"content": "Ten years [1]."})
    body = ok(research(client, {"question": QUESTION, "max_steps": 2}))
    assert body["steps"] == 2 and [s["tool"] for s in body["trace"]][:2] == ["search-documents"] * 2
    assert body["stopped"] == "max_steps"


@pytest.mark.parametrize(("arguments", "error"), [
    ({"query": 42}, "malformed arguments: search-documents: 'query' must be a non-empty string"),
    ({"q": "rigging"}, "malformed arguments: search-documents: unknown parameter(s) q; it takes query, k"),
    ({"query": "rigging", "k": "ten"}, "malformed arguments: search-documents: 'k' must be an integer from 1 to 20"),
    ({}, "malformed arguments: search-documents: missing parameter(s) query"),
    ("{not json", "malformed arguments: ollama:llama3.2:latest at "),
    ('{"query": "a JSON string, not an object"}', "malformed arguments: ollama:llama3.2:latest at "),
])
def test_malformed_arguments_are_a_step_and_the_loop_goes_on(client, model, arguments, error):
    model.script(tool_call("search-documents", arguments),
                 tool_call("search-documents", {"query": "standing rigging"}),
                 {"content": "Ten years [1]."})
    body = ok(research(client, {"question": QUESTION}))
    assert body["trace"][0]["error"].startswith(error), body["trace"][0]
    assert "error" not in body["trace"][1] and body["trace"][1]["passages"] >= 1
    assert body["stopped"] == "answered" and body["steps"] == 2 and body["grounded"] is True


def test_an_early_stop_is_not_believed_kg_asks_itself(client, model):
    model.script({"content": "Rigging lasts forever, trust me."})
    body = ok(research(client, {"question": QUESTION}))
    assert body["stopped"] == "early_stop"
    stop, asked = body["trace"]
    assert stop["tool"] is None and stop["error"].startswith("early stop")
    assert stop["result"] == "Rigging lasts forever, trust me."
    assert (asked["by"], asked["tool"]) == ("kg", "ask")
    assert body["answer"] == ANSWER and body["grounded"] is True
    assert [c["path"] for c in body["citations"]] == ["/rigging"]
    assert_stored_on_its_branch_only(client, body)


def test_an_early_stop_on_an_uncovered_question_is_an_honest_not_covered(client, model):
    model.script({"content": ""})
    body = ok(research(client, {"question": "Who won the 1954 chess olympiad?"}))
    assert body["stopped"] == "early_stop"
    assert body["answer"] == "The documents do not cover this." and body["grounded"] is False
    assert body["citations"] == []
    assert_stored_on_its_branch_only(client, body)


def test_a_model_that_found_nothing_and_answers_anyway_gets_not_covered(client, model):
    uncovered = "Who won the 1954 chess olympiad?"
    model.script(tool_call("ask", {"question": uncovered}), {"content": "The Soviet Union won it."})
    body = ok(research(client, {"question": uncovered}))
    assert body["stopped"] == "answered" and body["steps"] == 1
    assert body["trace"][0]["result"].startswith("grounded false, 0 citation(s)")
    assert body["trace"][-1]["result"] == "The Soviet Union won it."  # kept in the trace, not passed off
    assert body["answer"] == "The documents do not cover this." and body["grounded"] is False


def test_an_answer_citing_nothing_is_not_grounded(client, model):
    model.script(tool_call("search-documents", {"query": "standing rigging"}),
                 {"content": "Probably every few years [7]."})
    body = ok(research(client, {"question": QUESTION}))
    assert body["grounded"] is False and body["citations"] == []
    assert body["answer"] == "Probably every few years ."


def test_a_failing_model_is_a_step_never_a_500(client, model):
    model.server.fail_next("status", path="/api/chat", times=10, status=400, message="bad request")
    body = ok(research(client, {"question": QUESTION}))
    assert body["stopped"] == "model_error"
    assert any("provider_error" in (s.get("error") or "") for s in body["trace"])
    assert body["grounded"] is False and body["answer"] == "The documents do not cover this."
    assert_stored_on_its_branch_only(client, body)


def test_without_an_llm_the_fixed_plan_runs_and_says_so(client):
    body = ok(research(client, {"question": QUESTION}))
    assert body["mode"] == "fixed-plan" and body["stopped"] == "plan"
    assert [(s["by"], s["tool"]) for s in body["trace"]] == [
        ("plan", "search-documents"), ("plan", "graph-context"), ("plan", "ask")]
    assert body["trace"][0]["arguments"] == {"query": QUESTION, "k": 8}
    assert body["grounded"] is True and body["citations"][0]["path"] == "/rigging"
    assert "ten years" in body["answer"]
    assert_stored_on_its_branch_only(client, body)
    stored = client.get(f"{NODES}{body['stored']['path']}", params={"branch": body["branch"]}).json()
    assert stored["properties"]["mode"] == "fixed-plan"


def test_the_fixed_plan_on_an_uncovered_question_is_not_grounded(client):
    body = ok(research(client, {"question": "Who won the 1954 chess olympiad?"}))
    assert body["answer"] == "The documents do not cover this." and body["grounded"] is False


def test_workspaces_scope_every_search_and_the_answer_goes_to_the_given_workspace(client):
    assert client.post(f"{API}/workspaces", json={"name": "notes"}).status_code == 201
    body = ok(research(client, {"question": QUESTION, "workspaces": ["notes"], "workspace": "notes"}))
    assert body["grounded"] is False and body["stored"]["workspace"] == "notes"
    assert body["trace"][0]["passages"] == 0


def test_each_run_has_its_own_branch_from_the_requests_branch(client):
    assert client.post(f"{API}/branches", json={"name": "review/base"}).status_code == 201
    one = ok(research(client, {"question": QUESTION}, branch="review/base"))
    two = ok(research(client, {"question": QUESTION}, branch="review/base"))
    assert one["branch"] != two["branch"]
    got = client.get(f"{API}/branches/{one['branch']}").json()
    assert got["parent"] == "review/base"


def test_as_a_job(client):
    accepted = research(client, {"question": QUESTION}, wait_for_completion=False)
    assert accepted.status_code == 202, accepted.text
    job = client.get(f"/api/jobs/{accepted.json()['job_id']}").json()
    assert job["state"] == "succeeded", job
    assert job["output"]["branch"].startswith("research/") and job["output"]["grounded"] is True


@pytest.mark.parametrize(("payload", "status"), [
    ({}, 422),
    ({"question": "  "}, 422),
    ({"question": QUESTION, "max_steps": 0}, 422),
    ({"question": QUESTION, "max_steps": 7}, 422),
    ({"question": QUESTION, "steps": 3}, 422),
    ({"question": QUESTION, "workspace": "nope"}, 404),
])
def test_bad_input_is_refused_before_a_branch_is_made(client, payload, status):
    before = client.get(f"{API}/branches").json()["branches"]
    assert_error(research(client, payload), status)
    assert client.get(f"{API}/branches").json()["branches"] == before
