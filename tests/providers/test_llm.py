"""The LLM contract: NoLLM, ScriptedLLM, and OllamaLLM through the real ``ollama`` client."""

from __future__ import annotations

import socket

import pytest

from kg.errors import BackendUnavailable, InvalidInput, ProviderError
from kg.providers.jsonreply import parse_json_reply
from kg.providers.llm import LLM, NoLLM, ScriptedLLM, ToolCall, ToolLLM, ToolReply
from kg.providers.ollama import OllamaLLM
from kg.providers.registry import make_llm
from tests.ollama_server import OllamaTestServer, tool_call

USER = [{"role": "user", "content": "Name the entities in: Ada Lovelace met Babbage."}]
SCHEMA = {
    "type": "object",
    "properties": {"entities": {"type": "array"}, "relations": {"type": "array"}},
    "required": ["entities", "relations"],
}


def llm(server: OllamaTestServer, model: str = "llama3.2", **kwargs) -> OllamaLLM:
    kwargs.setdefault("retry_wait_s", 0)
    return OllamaLLM(model, host=server.url, **kwargs)


# --- NoLLM and ScriptedLLM ----------------------------------------------------------------------


def test_no_llm_refuses_every_call() -> None:
    none = NoLLM()
    assert none.name == "none"
    assert isinstance(none, LLM)
    with pytest.raises(ProviderError, match="no LLM configured"):
        none.chat(USER)


def test_scripted_llm_answers_in_order_and_records_calls() -> None:
    scripted = ScriptedLLM(["first", lambda messages, schema: f"{len(messages)} {schema is None}"])
    assert isinstance(scripted, LLM)
    assert scripted.chat(USER, temperature=0.5) == "first"
    assert scripted.chat(USER + USER, json_schema=SCHEMA, timeout_s=5) == "2 False"
    assert scripted.remaining == 0
    assert [call["temperature"] for call in scripted.calls] == [0.5, 0.0]
    assert scripted.calls[1]["json_schema"] == SCHEMA
    assert scripted.calls[1]["timeout_s"] == 5
    assert scripted.calls[0]["messages"] == USER


def test_scripted_llm_raises_scripted_errors_and_when_used_up() -> None:
    scripted = ScriptedLLM([ProviderError("timed out")])
    with pytest.raises(ProviderError, match="timed out"):
        scripted.chat(USER)
    with pytest.raises(ProviderError, match="no reply left for call 2"):
        scripted.chat(USER)
    assert len(scripted.calls) == 2
    scripted.add("later")
    assert scripted.chat(USER) == "later"
    assert ScriptedLLM(default="always").chat(USER) == "always"


# --- OllamaLLM ----------------------------------------------------------------------------------


def test_chat_returns_the_reply_and_sends_ollamas_request_shape(ollama) -> None:
    ollama.script_chat("Ada Lovelace and Charles Babbage.")
    model = llm(ollama)
    assert isinstance(model, LLM)
    assert model.name == "ollama:llama3.2:latest"
    assert model.chat(USER, temperature=0.2) == "Ada Lovelace and Charles Babbage."
    (request,) = ollama.recorded("/api/chat")
    assert request.body["model"] == "llama3.2:latest"
    assert request.body["stream"] is False
    assert request.body["messages"] == USER
    assert request.body["options"] == {"temperature": 0.2}
    assert "format" not in request.body


def test_chat_sends_the_schema_as_format_and_the_reply_parses(ollama) -> None:
    ollama.script_chat(
        "<think>Two people; one relation.</think>\n```json\n"
        '{"entities": [{"name": "Ada Lovelace"}, {"name": "Charles Babbage"}],'
        ' "relations": [{"source": "Ada Lovelace", "target": "Charles Babbage", "type": "met"}]}'
        "\n```"
    )
    reply = llm(ollama, options={"num_ctx": 4096}).chat(USER, json_schema=SCHEMA)
    (request,) = ollama.recorded("/api/chat")
    assert request.body["format"] == SCHEMA
    assert request.body["options"] == {"num_ctx": 4096, "temperature": 0.0}
    parsed = parse_json_reply(reply, schema=SCHEMA)
    assert [e["name"] for e in parsed["entities"]] == ["Ada Lovelace", "Charles Babbage"]


def test_chat_reply_can_be_a_function_of_the_request(ollama) -> None:
    ollama.script_chat(lambda request: request["messages"][-1]["content"].upper())
    assert llm(ollama).chat([{"role": "user", "content": "shout"}]) == "SHOUT"


def test_chat_with_an_unknown_model_says_to_pull_it(ollama) -> None:
    with pytest.raises(ProviderError) as info:
        llm(ollama, "no-such-llm:7b").chat(USER)
    assert info.value.details["reason"] == "model_not_found"
    assert "ollama pull no-such-llm:7b" in info.value.message


def test_chat_retries_a_server_error_then_answers(ollama) -> None:
    ollama.script_chat("fine")
    ollama.fail_next("status", path="/api/chat", status=503, message="server busy")
    assert llm(ollama).chat(USER) == "fine"
    assert len(ollama.recorded("/api/chat")) == 2


def test_chat_client_error_is_not_retried(ollama) -> None:
    ollama.fail_next("status", path="/api/chat", status=400, message="invalid format schema")
    with pytest.raises(ProviderError, match="HTTP 400: invalid format schema"):
        llm(ollama).chat(USER, json_schema=SCHEMA)
    assert len(ollama.recorded("/api/chat")) == 1


def test_chat_timeout_is_per_call(ollama) -> None:
    model = llm(ollama)
    ollama.fail_next("slow", path="/api/chat", delay_s=10)
    with pytest.raises(ProviderError) as info:
        model.chat(USER, timeout_s=0.3)
    assert info.value.details["reason"] == "timeout"
    assert "within 0.3 s" in info.value.message
    ollama.script_chat("on time")
    assert model.chat(USER) == "on time"


@pytest.mark.parametrize(
    ("fault", "reason"),
    [("empty_content", "empty_reply"), ("no_message", "malformed"), ("null_body", "malformed"),
     ("not_json", "malformed")],
)
def test_chat_unusable_answers_are_provider_errors(ollama, fault: str, reason: str) -> None:
    ollama.fail_next(fault, path="/api/chat")
    with pytest.raises(ProviderError) as info:
        llm(ollama).chat(USER)
    assert info.value.details["reason"] == reason


def test_chat_against_an_unreachable_host_is_backend_unavailable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(BackendUnavailable) as info:
        OllamaLLM("llama3.2", host=f"127.0.0.1:{port}", retry_wait_s=0).chat(USER)
    assert info.value.details["reason"] == "unreachable"


@pytest.mark.parametrize(
    ("messages", "kwargs"),
    [([], {}), ([{"role": "user"}], {}), ("hello", {}), (USER, {"json_schema": "json"}),
     (USER, {"temperature": -1}), (USER, {"timeout_s": 0})],
)
def test_chat_refuses_bad_arguments_before_any_request(ollama, messages, kwargs) -> None:
    with pytest.raises(InvalidInput):
        llm(ollama).chat(messages, **kwargs)
    assert ollama.recorded("/api/chat") == []


# --- make_llm -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [None, "", "  ", "none", "None"])
def test_make_llm_none(name) -> None:
    assert isinstance(make_llm(name), NoLLM)


@pytest.mark.parametrize(
    ("name", "full"),
    [("ollama:llama3.2", "ollama:llama3.2:latest"), ("qwen3:4b", "ollama:qwen3:4b"),
     ("ollama:qwen3:4b", "ollama:qwen3:4b")],
)
def test_make_llm_ollama(ollama, name: str, full: str) -> None:
    model = make_llm(name, host=ollama.url)
    assert isinstance(model, OllamaLLM)
    assert (model.name, model.host) == (full, ollama.url)
    ollama.script_chat("hi")
    assert model.chat(USER) == "hi"


@pytest.mark.parametrize("name", ["local:all-MiniLM-L6-v2", "fake:chat", "ollama:", "ollama:a b"])
def test_make_llm_refuses_providers_without_chat_models(name: str) -> None:
    with pytest.raises(InvalidInput):
        make_llm(name)


# --- OllamaLLM.chat_tools -----------------------------------------------------------------------

TOOLS = [{"type": "function", "function": {"name": "search-documents", "description": "Search.",
                                           "parameters": {"type": "object", "properties": {"query": {"type": "string"}},
                                                          "required": ["query"]}}}]


def test_chat_tools_sends_the_tools_and_reads_the_tool_calls(ollama) -> None:
    ollama.script_chat(tool_call("search-documents", {"query": "rigging"}), "Ten years [1].")
    model = llm(ollama)
    assert isinstance(model, ToolLLM)
    reply = model.chat_tools(USER, TOOLS)
    assert reply == ToolReply(content="", tool_calls=(ToolCall("search-documents", {"query": "rigging"}),))
    history = USER + [{"role": "assistant", "content": "", "tool_calls": [
        {"function": {"name": "search-documents", "arguments": {"query": "rigging"}}}]},
        {"role": "tool", "tool_name": "search-documents", "content": "[1] ten years"}]
    assert model.chat_tools(history, TOOLS) == ToolReply(content="Ten years [1].")
    first, second = ollama.recorded("/api/chat")
    assert first.body["tools"] == TOOLS and first.body["stream"] is False
    assert second.body["messages"][-1] == {"role": "tool", "content": "[1] ten years", "tool_name": "search-documents"}
    assert second.body["messages"][-2]["tool_calls"] == [
        {"function": {"name": "search-documents", "arguments": {"query": "rigging"}}}]


def test_chat_tools_arguments_that_are_no_object_are_a_malformed_tool_call(ollama) -> None:
    ollama.script_chat(tool_call("search-documents", "{not json"))
    with pytest.raises(ProviderError, match="arguments are not a JSON object") as raised:
        llm(ollama).chat_tools(USER, TOOLS)
    assert raised.value.details["reason"] == "malformed_tool_call"


def test_no_llm_and_the_scripted_llm_call_no_tools() -> None:
    assert not isinstance(NoLLM(), ToolLLM) and not isinstance(ScriptedLLM(), ToolLLM)
