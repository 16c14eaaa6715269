"""The research assistant's loop: a model calling kg's retrieval functions as tools, bounded.

:func:`kg.rag.functions.research_assistant` opens the session branch, binds the tools to it and
stores the answer; this module runs the conversation and keeps its record:

- :func:`run_tool_loop`: the model (a :class:`kg.providers.llm.ToolLLM`) is given the question
  and three tools, ``search-documents``, ``ask`` and ``graph-context``, and calls them until it
  answers. Every call is a step of the trace. A call that names no tool, whose arguments are
  not a JSON object of the tool's parameters, or that repeats an earlier call (same tool, same
  arguments) is not run: the step records why and the model is told. The loop ends when the
  model answers, after ``max_steps`` steps, after a second repeated call (a loop), or when the
  model fails; the model is then asked once, without tools, to answer from what it found. A
  model that answers before any retrieval succeeded (an early stop) is not believed: kg runs
  ``ask`` itself and that is the answer.
- :func:`run_fixed_plan`: without a model that calls tools, the same steps in a fixed order:
  ``search-documents``, ``graph-context``, then ``ask`` (extractive without an LLM).

Passages are numbered once for the whole session (:class:`PassageRegistry`), so ``[3]`` in any
tool result and in the answer names one passage. What the model reads of a tool result is cut
at ``result_chars`` characters; the trace keeps a one-line summary of each.

References
----------
Yao et al. (2023), "ReAct: Synergizing reasoning and acting in language models" (a model
interleaving tool calls with its answer).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kg.errors import InvalidInput, KGError, ProviderError
from kg.providers.llm import ToolLLM
from kg.tracing import traced

__all__ = ["TOOLS", "LoopResult", "PassageRegistry", "check_arguments", "run_fixed_plan", "run_tool_loop",
           "tool_definitions"]

#: The tools, their descriptions and their parameters (JSON Schema), as the model sees them.
TOOLS: dict[str, dict[str, Any]] = {
    "search-documents": {
        "description": "Hybrid search of the documents. Returns numbered passages [n] with their path; "
                       "cite a passage by its number.",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string", "description": "What to look for, in the documents' words."},
            "k": {"type": "integer", "minimum": 1, "maximum": 20, "description": "How many passages (5)."}},
            "required": ["query"], "additionalProperties": False},
    },
    "ask": {
        "description": "Answers a question from the documents only, with numbered citations; says so when "
                       "the documents do not cover it.",
        "parameters": {"type": "object", "properties": {
            "question": {"type": "string", "description": "The question."}},
            "required": ["question"], "additionalProperties": False},
    },
    "graph-context": {
        "description": "Finds the nodes a query is about, then the nodes related to them (hop, relation "
                       "type). Use it to learn how things are connected.",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string", "description": "What to seed the walk with."},
            "seeds": {"type": "array", "items": {"type": "string"},
                      "description": "Node addresses workspace:/path to start from."},
            "hops": {"type": "integer", "minimum": 0, "maximum": 3, "description": "How far to walk (2)."}},
            "additionalProperties": False},
    },
}

SYSTEM_PROMPT = (
    "You are a research assistant over a knowledge base. Search before answering: call the tools to find "
    "passages, then answer from those passages only. Cite every claim with the passage number in brackets, "
    "like [1]. If the passages do not cover the question, say plainly: The documents do not cover this. "
    "When you have what you need, answer without calling a tool."
)
ANSWER_NOW = ("Answer now, without calling a tool, from the numbered passages above only, citing them like "
              "[1]. If they do not cover the question, say: The documents do not cover this.")
MAX_REPEATS = 2            # a second repeated call ends the loop
TRACE_ARGUMENT_CHARS = 1_000
SUMMARY_CHARS = 300
_MARKER_RE = re.compile(r"\[(\d+)\]")

ToolRunner = Callable[[str, dict[str, Any]], dict[str, Any]]
"""Runs a kg function by tool name with checked arguments on the session branch."""


def tool_definitions() -> list[dict[str, Any]]:
    """The tools in Ollama's (and OpenAI's) shape: ``{"type": "function", "function": {...}}``.

    Returns
    -------
    list of dict
        One per entry of :data:`TOOLS`, in its order.
    """
    return [{"type": "function", "function": {"name": name, **spec}} for name, spec in TOOLS.items()]


def _check_string(tool: str, key: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(f"{tool}: {key!r} must be a non-empty string")
    return value


def _check_int(tool: str, key: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidInput(f"{tool}: {key!r} must be an integer from {low} to {high}")
    return value


def check_arguments(tool: str, arguments: Any) -> dict[str, Any]:
    """The arguments of a tool call, checked against the tool's parameters.

    Parameters
    ----------
    tool : str
        A name of :data:`TOOLS`.
    arguments : object
        What the model sent: a dict, or a string holding a JSON object.

    Returns
    -------
    dict
        The arguments, unchanged.

    Raises
    ------
    kg.errors.InvalidInput
        Not a JSON object, an unknown or missing parameter, or a value of the wrong type or
        out of range (the message says which).
    """
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError as exc:
            raise InvalidInput(f"{tool}: the arguments are not JSON") from exc
    if not isinstance(arguments, dict):
        raise InvalidInput(f"{tool}: the arguments must be a JSON object")
    schema = TOOLS[tool]["parameters"]
    unknown = sorted(set(arguments) - set(schema["properties"]))
    if unknown:
        raise InvalidInput(f"{tool}: unknown parameter(s) {', '.join(unknown)}; it takes "
                           f"{', '.join(schema['properties'])}")
    missing = [k for k in schema.get("required", ()) if k not in arguments]
    if missing:
        raise InvalidInput(f"{tool}: missing parameter(s) {', '.join(missing)}")
    for key, value in arguments.items():
        spec = schema["properties"][key]
        if spec["type"] == "string":
            _check_string(tool, key, value)
        elif spec["type"] == "integer":
            _check_int(tool, key, value, spec["minimum"], spec["maximum"])
        elif not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
            raise InvalidInput(f"{tool}: {key!r} must be a non-empty list of strings")
    if tool == "graph-context" and "query" not in arguments and "seeds" not in arguments:
        raise InvalidInput("graph-context: give 'query' or 'seeds'")
    return arguments


@dataclass
class PassageRegistry:
    """The passages of one session, numbered once: ``[n]`` means the same passage everywhere.

    Attributes
    ----------
    entries : list of dict
        ``{"marker", "workspace", "path", "node_id", "chunk_index", "text", "text_is_exact"}``
        in the order first seen; ``text`` is None for a passage known only by an ``ask``
        citation.
    """

    entries: list[dict[str, Any]] = field(default_factory=list)
    _by_key: dict[tuple[Any, ...], dict[str, Any]] = field(default_factory=dict)

    def add(self, passage: dict[str, Any]) -> int:
        """Number ``passage`` (its number if seen already; a text learnt later is kept).

        Parameters
        ----------
        passage : dict
            With ``workspace``, ``path``, ``node_id``, ``chunk_index`` and optionally ``text``
            and ``text_is_exact``.

        Returns
        -------
        int
            Its marker, from 1.
        """
        key = (passage["workspace"], passage["path"], passage.get("chunk_index"))
        entry = self._by_key.get(key)
        if entry is None:
            entry = {"marker": len(self.entries) + 1, "workspace": passage["workspace"], "path": passage["path"],
                     "node_id": passage["node_id"], "chunk_index": passage.get("chunk_index"),
                     "text": passage.get("text"), "text_is_exact": passage.get("text_is_exact", True)}
            self.entries.append(entry)
            self._by_key[key] = entry
        elif entry["text"] is None and passage.get("text") is not None:
            entry["text"] = passage["text"]
        marker: int = entry["marker"]
        return marker

    def citations(self, text: str) -> tuple[str, list[dict[str, Any]]]:
        """The citations of an answer: its markers that name a passage, in order.

        Parameters
        ----------
        text : str
            The answer, with ``[n]`` markers.

        Returns
        -------
        (str, list of dict)
            The answer with markers that name no passage removed (whitespace folded), and
            ``{"marker", "workspace", "path", "node_id", "chunk_index", "text_is_exact"}`` per
            cited passage.
        """
        known = {e["marker"]: e for e in self.entries}
        cited = [known[m] for m in dict.fromkeys(int(x) for x in _MARKER_RE.findall(text)) if m in known]
        cleaned = _MARKER_RE.sub(lambda m: m.group(0) if int(m.group(1)) in known else "", text)
        return " ".join(cleaned.split()), [
            {k: e[k] for k in ("marker", "workspace", "path", "node_id", "chunk_index", "text_is_exact")}
            for e in cited]


@dataclass
class LoopResult:
    """What a run of the loop or the fixed plan gives.

    Attributes
    ----------
    trace : list of dict
        The steps: ``{"step", "by", "tool", "arguments", "result"?, "passages"?, "error"?}``;
        ``by`` is ``"model"``, ``"plan"`` or ``"kg"`` (a call kg made itself); ``tool`` is null
        for an entry that is no call (the model's answer, its failure).
    registry : PassageRegistry
    answer : str or None
        The final answer text, with session markers; None when there is none to use.
    stopped : str
        ``answered``, ``max_steps``, ``loop``, ``early_stop``, ``model_error`` or ``plan``.
    steps : int
        Tool calls made or refused (at most ``max_steps`` of the model's).
    """

    trace: list[dict[str, Any]] = field(default_factory=list)
    registry: PassageRegistry = field(default_factory=PassageRegistry)
    answer: str | None = None
    stopped: str = "answered"
    steps: int = 0


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit].rstrip() + " [...cut]"


def _json_safe(arguments: Any) -> Any:
    """The arguments as the trace keeps them: JSON as given, or its start as a string."""
    try:
        text = json.dumps(arguments, ensure_ascii=False)
    except (TypeError, ValueError):
        return _cut(repr(arguments), TRACE_ARGUMENT_CHARS)
    return arguments if len(text) <= TRACE_ARGUMENT_CHARS else _cut(text, TRACE_ARGUMENT_CHARS)


class _Session:
    """One run's tools, trace and passages."""

    def __init__(self, run_tool: ToolRunner, result_chars: int) -> None:
        self.run_tool = run_tool
        self.result_chars = result_chars
        self.out = LoopResult()
        self.seen: dict[tuple[str, str], int] = {}
        self.repeats = 0
        self.ran = False  # a tool call ran (whatever it found)
        self.retrieved = False  # a tool call found something
        self.last_ask_answer: str | None = None  # the last ask answer, whole, in session markers

    def note(self, by: str, *, result: str | None = None, error: str | None = None) -> None:
        """Record an entry that is not a tool call."""
        entry: dict[str, Any] = {"step": len(self.out.trace) + 1, "by": by, "tool": None, "arguments": None,
                                 "result": result}
        if error is not None:
            entry["error"] = error
        self.out.trace.append(entry)

    def call(self, by: str, tool: str, arguments: Any, *, again: bool = False) -> str:
        """Run one tool call (or refuse it); record the step; return what the model reads.

        ``again``: run it even if it repeats an earlier call (kg's own fallback).
        """
        self.out.steps += 1
        step: dict[str, Any] = {"step": len(self.out.trace) + 1, "by": by, "tool": tool,
                                "arguments": _json_safe(arguments), "result": None}
        self.out.trace.append(step)
        if tool not in TOOLS:
            step["error"] = f"unknown tool {tool!r}; the tools are {', '.join(TOOLS)}"
            return f"error: {step['error']}"
        try:
            checked = check_arguments(tool, arguments)
        except InvalidInput as exc:
            step["error"] = f"malformed arguments: {exc.message}"
            return f"error: {step['error']}. Parameters: {json.dumps(TOOLS[tool]['parameters']['properties'])}"
        key = (tool, json.dumps(checked, sort_keys=True))
        if key in self.seen and not again:
            self.repeats += 1
            step["error"] = f"repeated call: the same as step {self.seen[key]}; not run again"
            return f"error: {step['error']}. Its result is above: answer, or call something else."
        self.seen[key] = step["step"]
        try:
            output = self.run_tool(tool, checked)
        except KGError as exc:
            step["error"] = f"{exc.code}: {exc.message}"
            return f"error: {step['error']}"
        text, summary, passages = self._read(tool, output)
        step["result"] = _cut(summary, SUMMARY_CHARS)
        step["passages"] = passages
        self.ran = True
        if passages or (tool == "graph-context" and output.get("nodes")):
            self.retrieved = True
        return _cut(text, self.result_chars)

    def _read(self, tool: str, output: dict[str, Any]) -> tuple[str, str, int]:
        """What the model reads of a tool's output, its summary, and how many passages it gave."""
        registry = self.out.registry
        if tool == "search-documents":
            lines, names = [], []
            for p in output.get("passages", []):
                marker = registry.add(p)
                lines.append(f"[{marker}] {p['workspace']}:{p['path']} (chunk {p['chunk_index']}): {p['text']}")
                names.append(f"[{marker}] {p['path']}")
            n = len(lines)
            return ("\n\n".join(lines) or "no passages found",
                    f"{n} passage(s)" + (f": {', '.join(names[:5])}" if names else ""), n)
        if tool == "ask":
            local = {c["marker"]: registry.add(c) for c in output.get("citations", [])}
            answer = _MARKER_RE.sub(lambda m: f"[{local[int(m.group(1))]}]" if int(m.group(1)) in local else "",
                                    output.get("answer", ""))
            answer = " ".join(answer.split())
            self.last_ask_answer = answer
            grounded = bool(output.get("grounded"))
            cited = ", ".join(f"[{m}]" for m in local.values())
            return (f"grounded: {str(grounded).lower()}\n{answer}",
                    f"grounded {str(grounded).lower()}, {len(local)} citation(s) {cited}: {answer}".strip(),
                    len(local))
        nodes = output.get("nodes", [])
        lines = [f"{n['workspace']}:{n['path']} hop {n['hop']}" + (f" via {n['via']} from {n['from']}" if n.get("via")
                                                                     else "")
                 + (f" title {n['title']!r}" if n.get("title") else "") for n in nodes]
        truncated = " (truncated)" if output.get("truncated") else ""
        return ("\n".join(lines) or "no nodes found", f"{len(nodes)} node(s){truncated}", 0)

    def fallback_ask(self, question: str) -> None:
        """kg runs ``ask`` itself; its whole answer (in session markers) is the answer."""
        self.call("kg", "ask", {"question": question}, again=True)
        self.out.answer = self.last_ask_answer if "error" not in self.out.trace[-1] else None


def run_fixed_plan(question: str, run_tool: ToolRunner, *, result_chars: int) -> LoopResult:
    """The plan without a tool-calling model: search, graph-context, then ask.

    Parameters
    ----------
    question : str
    run_tool : callable(tool, arguments) -> dict
        Runs a kg function on the session branch.
    result_chars : int
        Cap of each tool result as a model would read it.

    Returns
    -------
    LoopResult
        ``stopped`` is ``"plan"``; ``answer`` is ask's (None when ask failed).
    """
    session = _Session(run_tool, result_chars)
    session.call("plan", "search-documents", {"query": question, "k": 8})
    session.call("plan", "graph-context", {"query": question, "hops": 1})
    session.call("plan", "ask", {"question": question})
    session.out.answer = session.last_ask_answer if "error" not in session.out.trace[-1] else None
    session.out.stopped = "plan"
    return session.out


def _echo(calls: Any) -> list[dict[str, Any]]:
    """The assistant message's tool calls as sent back to the model (object arguments only)."""
    return [{"function": {"name": c.name, "arguments": c.arguments}} for c in calls if isinstance(c.arguments, dict)]


def run_tool_loop(llm: ToolLLM, question: str, run_tool: ToolRunner, *, max_steps: int, result_chars: int,
                  timeout_s: float = 120) -> LoopResult:
    """The bounded tool-calling conversation (see the module docstring).

    Parameters
    ----------
    llm : kg.providers.llm.ToolLLM
    question : str
    run_tool : callable(tool, arguments) -> dict
        Runs a kg function on the session branch.
    max_steps : int
        Most tool calls of the model (made or refused); the model is called at most
        ``max_steps + 1`` times, plus once to answer without tools.
    result_chars : int
        Cap of each tool result the model reads, in characters.
    timeout_s : float
        Per model call, in seconds.

    Returns
    -------
    LoopResult

    Notes
    -----
    Never raises for what the model does: a model failure ends the loop (``model_error``).
    The errors of ``run_tool`` that are :class:`kg.errors.KGError` are steps; others propagate.
    """
    session = _Session(run_tool, result_chars)
    out = session.out
    tools = tool_definitions()
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM_PROMPT},
                                      {"role": "user", "content": question}]
    final: str | None = None
    turns = 0
    while True:
        if out.steps >= max_steps:
            out.stopped = "max_steps"
            break
        if session.repeats >= MAX_REPEATS:
            out.stopped = "loop"
            break
        turns += 1
        try:
            reply = traced("kg.llm.call", llm.chat_tools)(messages, tools, timeout_s=timeout_s)
        except ProviderError as exc:
            if exc.details.get("reason") == "malformed_tool_call" and turns <= max_steps:
                out.steps += 1
                out.trace.append({"step": len(out.trace) + 1, "by": "model", "tool": None, "arguments": None,
                                  "result": None, "error": f"malformed arguments: {exc.message}"})
                messages.append({"role": "user", "content": "Your last tool call's arguments were not a JSON "
                                 "object. Call the tool again with a JSON object of its parameters, or answer."})
                continue
            session.note("model", error=f"{exc.code}: {exc.message}")
            out.stopped = "model_error"
            break
        except KGError as exc:
            session.note("model", error=f"{exc.code}: {exc.message}")
            out.stopped = "model_error"
            break
        if not reply.tool_calls:
            text = reply.content.strip()
            if not session.ran:
                session.note("model", result=_cut(text, SUMMARY_CHARS) or None,
                             error="early stop: the model answered before any tool call ran; kg ran ask itself")
                out.stopped = "early_stop"
                session.fallback_ask(question)
                return out
            session.note("model", result=_cut(text, SUMMARY_CHARS) or None,
                         error=None if text else "the model stopped with an empty answer")
            final = text or None
            out.stopped = "answered" if text else "model_error"
            break
        messages.append({"role": "assistant", "content": reply.content, "tool_calls": _echo(reply.tool_calls)})
        for call in reply.tool_calls:
            if out.steps >= max_steps:
                break
            content = session.call("model", call.name, call.arguments)
            messages.append({"role": "tool", "tool_name": call.name, "content": content})
    if final is None and out.stopped in ("max_steps", "loop") and session.retrieved:
        messages.append({"role": "user", "content": ANSWER_NOW})
        try:
            reply = traced("kg.llm.call", llm.chat_tools)(messages, [], timeout_s=timeout_s)
            text = reply.content.strip()
            session.note("model", result=_cut(text, SUMMARY_CHARS) or None,
                         error=None if text and not reply.tool_calls else "no answer when asked to answer")
            final = text if text and not reply.tool_calls else None
        except KGError as exc:
            session.note("model", error=f"{exc.code}: {exc.message}")
    if final is None and not session.retrieved:
        session.fallback_ask(question)
        return out
    out.answer = final
    return out
