"""The :class:`LLM` contract, :class:`NoLLM` (no model configured) and :class:`ScriptedLLM`;
:class:`ToolLLM`, a chat model that may call tools (:class:`ToolCall`, :class:`ToolReply`).

The Ollama implementation is :class:`kg.providers.ollama.OllamaLLM`; build one from its name
with :func:`kg.providers.registry.make_llm`. Replies that must be JSON are read with
:func:`kg.providers.jsonreply.parse_json_reply`.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from kg.errors import ProviderError

__all__ = ["LLM", "NoLLM", "ScriptedLLM", "ScriptedReply", "ToolCall", "ToolLLM", "ToolReply"]


@runtime_checkable
class LLM(Protocol):
    """A chat model that answers a list of messages with one reply text.

    Attributes
    ----------
    name : str
        Full model name, ``<provider>:<model>`` (``ollama:qwen3:4b``), or ``"none"``.
    """

    name: str

    def chat(
        self,
        messages: list[dict],
        *,
        json_schema: dict | None = None,
        temperature: float = 0.0,
        timeout_s: float = 60,
    ) -> str:
        """Send ``messages`` and return the reply text.

        Parameters
        ----------
        messages : list of dict
            ``{"role": "system" | "user" | "assistant", "content": str}``, oldest first.
        json_schema : dict, optional
            A JSON Schema the reply should follow; the model is asked to (Ollama constrains
            its output with it), but the caller must still parse and check the reply with
            :func:`kg.providers.jsonreply.parse_json_reply`.
        temperature : float
            Sampling temperature; 0 is (nearly) deterministic.
        timeout_s : float
            Seconds to wait for the whole reply.

        Returns
        -------
        str
            The reply text, not empty.

        Raises
        ------
        kg.errors.ProviderError
            No model, the model failed, timed out or answered nothing.
        kg.errors.BackendUnavailable
            The model's server cannot be reached.
        """
        ...


@dataclass(frozen=True)
class ToolCall:
    """One tool call of a model's reply.

    Attributes
    ----------
    name : str
        The tool's name, as the model wrote it (it may name no tool).
    arguments : object
        The arguments as the server gave them: a dict when the model wrote a JSON object; a
        string or anything else is the model's mistake, for the caller to refuse.
    """

    name: str
    arguments: Any


@dataclass(frozen=True)
class ToolReply:
    """A reply of :meth:`ToolLLM.chat_tools`: text, tool calls, or both.

    Attributes
    ----------
    content : str
        The reply text (may be empty, when the model only calls tools, or stopped).
    tool_calls : tuple of ToolCall
        The calls it asks for, in order (empty: it answered or stopped).
    """

    content: str
    tool_calls: tuple[ToolCall, ...] = ()


@runtime_checkable
class ToolLLM(Protocol):
    """A chat model that may answer with tool calls (Ollama's ``tools``).

    Attributes
    ----------
    name : str
        Full model name, ``<provider>:<model>``.
    """

    name: str

    def chat_tools(
        self,
        messages: list[dict],
        tools: list[dict],
        *,
        temperature: float = 0.0,
        timeout_s: float = 60,
    ) -> ToolReply:
        """Send ``messages`` with the ``tools`` the model may call; return its reply.

        Parameters
        ----------
        messages : list of dict
            ``{"role": "system" | "user" | "assistant" | "tool", "content": str}``, oldest
            first; an assistant message may carry ``tool_calls`` (``[{"function": {"name",
            "arguments"}}]``), a tool message ``tool_name``.
        tools : list of dict
            ``{"type": "function", "function": {"name", "description", "parameters"}}``, the
            parameters a JSON Schema; empty: the model may only answer.
        temperature : float
            Sampling temperature.
        timeout_s : float
            Seconds to wait for the whole reply.

        Returns
        -------
        ToolReply

        Raises
        ------
        kg.errors.ProviderError
            The model failed or timed out; ``details["reason"] == "malformed_tool_call"`` when
            a tool call of its reply was not of the documented shape (arguments that are not a
            JSON object).
        kg.errors.BackendUnavailable
            The model's server cannot be reached.
        """
        ...


class NoLLM:
    """The LLM of a deployment without one: every :meth:`chat` raises ProviderError.

    Callers check ``llm.name == "none"`` (or catch the error) and fall back to their
    extractive or deterministic mode.
    """

    name: str = "none"

    def chat(
        self,
        messages: list[dict],
        *,
        json_schema: dict | None = None,
        temperature: float = 0.0,
        timeout_s: float = 60,
    ) -> str:
        """Refuse.

        Raises
        ------
        kg.errors.ProviderError
            Always: ``"no LLM configured"``.
        """
        raise ProviderError(
            "no LLM configured: name an Ollama chat model (ollama:<model>) to use one",
            details={"model": "none"},
        )


#: One scripted reply: the text, an exception to raise, or a function of the call.
ScriptedReply = str | BaseException | Callable[[list[dict], "dict | None"], str]


class ScriptedLLM:
    """A deterministic LLM for tests: answers each call with the next scripted reply.

    Parameters
    ----------
    replies : iterable of str, exception or callable
        Used in order, one per :meth:`chat` call. A string is returned as it is (so tests
        can script ``<think>`` blocks, fenced JSON, an echoed schema or garbage); an
        exception instance is raised (``ProviderError("timed out")`` to simulate a timeout);
        a callable gets ``(messages, json_schema)`` and returns the reply.
    default : str or callable, optional
        The reply once ``replies`` is used up; without one, such a call raises ProviderError.
    name : str
        The model name; default ``"scripted:test"``.

    Attributes
    ----------
    calls : list of dict
        One per :meth:`chat` call, refused ones included: ``messages`` (a copy),
        ``json_schema``, ``temperature``, ``timeout_s``.
    """

    def __init__(
        self,
        replies: Iterable[ScriptedReply] = (),
        *,
        default: str | Callable[[list[dict], dict | None], str] | None = None,
        name: str = "scripted:test",
    ) -> None:
        self.name = name
        self.calls: list[dict[str, Any]] = []
        self._replies: deque[ScriptedReply] = deque(replies)
        self._default = default
        self._lock = threading.Lock()

    @property
    def remaining(self) -> int:
        """Scripted replies not used yet."""
        with self._lock:
            return len(self._replies)

    def add(self, *replies: ScriptedReply) -> None:
        """Append replies to the script."""
        with self._lock:
            self._replies.extend(replies)

    def chat(
        self,
        messages: list[dict],
        *,
        json_schema: dict | None = None,
        temperature: float = 0.0,
        timeout_s: float = 60,
    ) -> str:
        """Record the call and answer with the next scripted reply.

        Raises
        ------
        kg.errors.ProviderError
            The script is used up and there is no default.
        BaseException
            Whatever exception the script holds for this call.
        """
        with self._lock:
            self.calls.append({
                "messages": [dict(message) for message in messages],
                "json_schema": json_schema,
                "temperature": temperature,
                "timeout_s": timeout_s,
            })
            reply: ScriptedReply | None = self._replies.popleft() if self._replies else self._default
        if reply is None:
            raise ProviderError(
                f"scripted LLM {self.name!r} has no reply left for call {len(self.calls)}",
                details={"call": len(self.calls)},
            )
        if isinstance(reply, BaseException):
            raise reply
        if callable(reply):
            return reply(messages, json_schema)
        return reply
