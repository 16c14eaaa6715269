"""OllamaEmbedder and OllamaLLM: models served by an Ollama server, through the ``ollama`` client.

Both talk to ``KG_OLLAMA_HOST`` (default ``http://127.0.0.1:11434``) with the official
``ollama`` Python client (``Client.embed`` -> ``POST /api/embed``, ``Client.chat`` ->
``POST /api/chat`` with ``stream: false``), imported on first use. Everything the server
answers is checked before it is used, and every failure becomes one of kg's errors at this
boundary, ``raise ... from exc``:

==============================================  =============================  ===========
what happened                                   kg error                       ``reason``
==============================================  =============================  ===========
connection refused, unknown host, no connect    BackendUnavailable             unreachable
no answer within ``timeout_s``                  ProviderError                  timeout
HTTP 404 (``model "x" not found``)              ProviderError                  model_not_found
other HTTP error (after retries for 5xx, 429)   ProviderError                  http_error
connection reset / closed (after retries)       ProviderError                  connection_broken
body that is not the documented shape           ProviderError                  malformed
missing, extra, empty or wrong-length vectors,  ProviderError (names the text) bad_vectors
NaN / inf, all-zero vectors
an empty chat reply                             ProviderError                  empty_reply
==============================================  =============================  ===========

``reason`` is in the error's ``details``, with ``model`` and ``host``. Only transient
failures are retried (connection reset or closed, HTTP 5xx and 429), ``retries`` times with
exponential back-off; a refused connection, a timeout or a 4xx fails at once.
"""

from __future__ import annotations

import functools
import json
import math
import re
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

import numpy as np
import pydantic
from numpy.typing import NDArray

from kg.errors import BackendUnavailable, InvalidInput, KGError, ProviderError
from kg.providers.base import check_embedding_dim
from kg.providers.llm import ToolCall, ToolReply
from kg.providers.local import LocalEmbedder

__all__ = [
    "DEFAULT_OLLAMA_HOST",
    "OllamaEmbedder",
    "OllamaLLM",
    "canonical_ollama_model",
    "default_max_tokens",
]

#: The Ollama server of ``Settings.ollama_host``'s default.
DEFAULT_OLLAMA_HOST = "http://127.0.0.1:11434"

#: Context, in tokens, assumed for known embedding models (base name, without tag); kept at
#: or under 2,048 (Ollama's long-standing default ``num_ctx``) even where the model has more.
_MAX_TOKENS: dict[str, int] = {
    "nomic-embed-text": 2048,
    "mxbai-embed-large": 512,
    "all-minilm": 256,
    "snowflake-arctic-embed": 512,
    "snowflake-arctic-embed2": 2048,
    "bge-m3": 2048,
    "bge-large": 512,
    "granite-embedding": 512,
    "embeddinggemma": 2048,
}
_UNKNOWN_MAX_TOKENS = 512
_TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})
_CONNECT_TIMEOUT_S = 10.0
_SURROGATE_RE = re.compile("[\ud800-\udfff]")
_MISSING_CLIENT = (
    "the Ollama provider needs the 'ollama' package, which is missing: "
    "reinstall kg's dependencies (pip install 'ollama>=0.4')"
)

T = TypeVar("T")


def canonical_ollama_model(model: str) -> str:
    """The Ollama model name with its tag: ``nomic-embed-text`` -> ``nomic-embed-text:latest``.

    Ollama reads a name without a tag as ``:latest``; kg names the model the same way, so
    that both spellings lock a workspace to one model. A namespace or registry host
    (``hf.co/org/model:Q4``, ``host:5000/ns/model``) is kept as it is.

    Raises
    ------
    kg.errors.InvalidInput
        An empty or blank model name, or one with whitespace.
    """
    if not isinstance(model, str) or not model.strip() or any(c.isspace() for c in model):
        raise InvalidInput(f"bad Ollama model name {model!r}", details={"model": repr(model)})
    last = model.rsplit("/", 1)[-1]
    if not last or last.startswith(":"):
        raise InvalidInput(f"bad Ollama model name {model!r}", details={"model": model})
    if ":" not in last:
        return f"{model}:latest"
    if last.endswith(":"):
        raise InvalidInput(f"bad Ollama model name {model!r}: empty tag", details={"model": model})
    return model


def default_max_tokens(model: str) -> int:
    """The context assumed for an Ollama embedding model: 2,048 for nomic-embed-text, 512 if unknown."""
    base = model.rsplit("/", 1)[-1].split(":", 1)[0].lower()
    return _MAX_TOKENS.get(base, _UNKNOWN_MAX_TOKENS)


class _OllamaBase:
    """The client, the retries and the error translation shared by the embedder and the LLM."""

    name: str
    model: str

    def __init__(self, model: str, *, host: str, retries: int, retry_wait_s: float,
                 keep_alive: float | str | None) -> None:
        if not isinstance(host, str) or not host.strip():
            raise InvalidInput("the Ollama host is empty", details={"host": repr(host)})
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise InvalidInput(f"retries must be an integer >= 0, got {retries!r}")
        if not _is_number(retry_wait_s) or retry_wait_s < 0:
            raise InvalidInput(f"retry_wait_s must be a number >= 0, got {retry_wait_s!r}")
        self.model = model
        self.host = host.strip()
        self.retries = retries
        self.retry_wait_s = float(retry_wait_s)
        self.keep_alive = keep_alive
        self._clients: dict[float, Any] = {}
        self._clients_lock = threading.Lock()

    def close(self) -> None:
        """Close the HTTP connections (the object stays usable: they reopen on demand)."""
        with self._clients_lock:
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            client.close()

    def _client(self, timeout_s: float) -> Any:
        """The ``ollama.Client`` of ``timeout_s``, made once."""
        if not _is_number(timeout_s) or timeout_s <= 0:
            raise InvalidInput(f"timeout_s must be a number > 0, got {timeout_s!r}")
        with self._clients_lock:
            client = self._clients.get(float(timeout_s))
            if client is None:
                client = _make_client(self.host, float(timeout_s))
                self._clients[float(timeout_s)] = client
            return client

    def _call(self, what: str, timeout_s: float, fn: Callable[[], T]) -> T:
        """Run ``fn`` (one client request), retrying transient failures, translating errors."""
        from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential, wait_none

        vendor = _vendor_errors()
        retrying = Retrying(
            stop=stop_after_attempt(self.retries + 1),
            wait=(wait_exponential(multiplier=self.retry_wait_s, max=8 * self.retry_wait_s)
                  if self.retry_wait_s > 0 else wait_none()),
            retry=retry_if_exception(_is_transient),
            reraise=True,
        )
        try:
            return retrying(fn)
        except vendor as exc:
            raise self._translate(exc, what, timeout_s) from exc

    def _translate(self, exc: BaseException, what: str, timeout_s: float) -> KGError:
        """The kg error of a vendor exception."""
        import httpx
        import ollama

        where = f"{self.name} at {self.host}"
        details: dict[str, Any] = {"model": self.name, "host": self.host}
        if isinstance(exc, httpx.ConnectTimeout) or type(exc) is ConnectionError or isinstance(
            exc, httpx.ConnectError
        ):
            cause = exc.__context__ if type(exc) is ConnectionError and exc.__context__ else exc
            return BackendUnavailable(
                f"cannot reach the Ollama server at {self.host} ({cause}); is it running, and is "
                "KG_OLLAMA_HOST right?",
                details={**details, "reason": "unreachable"},
            )
        if isinstance(exc, httpx.TimeoutException):
            return ProviderError(
                f"{where} did not answer {what} within {timeout_s:g} s",
                details={**details, "reason": "timeout", "timeout_s": timeout_s},
            )
        if isinstance(exc, ollama.ResponseError):
            status = exc.status_code
            details["status"] = status
            if status == 404:
                return ProviderError(
                    f"the Ollama server at {self.host} has no model {self.model!r} ({exc.error}); "
                    f"pull it first: ollama pull {self.model}",
                    details={**details, "reason": "model_not_found"},
                )
            retried = f" after {self.retries + 1} attempts" if status in _TRANSIENT_STATUS else ""
            return ProviderError(
                f"{where} failed {what}{retried}: HTTP {status}: {exc.error}",
                details={**details, "reason": "http_error"},
            )
        if isinstance(exc, (httpx.TransportError, ConnectionError)):
            retried = f" after {self.retries + 1} attempts" if _is_transient(exc) else ""
            return ProviderError(
                f"the connection to {where} broke during {what}{retried}: "
                f"{type(exc).__name__}: {exc}",
                details={**details, "reason": "connection_broken"},
            )
        if isinstance(exc, ollama.RequestError):
            return ProviderError(f"{where} refused {what}: {exc.error}",
                                 details={**details, "reason": "http_error"})
        return ProviderError(
            f"{where} answered {what} with a body that is not Ollama's documented shape: "
            f"{type(exc).__name__}: {_first_line(exc)}",
            details={**details, "reason": "malformed"},
        )


class OllamaEmbedder(_OllamaBase):
    """Embeddings of a model served by Ollama (``POST /api/embed``).

    Parameters
    ----------
    model : str
        The Ollama model name (``nomic-embed-text:latest``); a name without a tag gets
        ``:latest``, as Ollama reads it.
    host : str
        The server, ``KG_OLLAMA_HOST`` (``http://127.0.0.1:11434``; ``host:port`` works).
    batch_size : int
        Texts per request, > 0.
    max_tokens : int, optional
        The model's context in tokens, as :meth:`count_tokens` counts them; default
        :func:`default_max_tokens` (2,048 for nomic-embed-text, 512 for a model it does not
        know). The caller splits longer texts.
    dim : int, optional
        The vector length the model must answer; default: learnt from the first answer.
    timeout_s : float
        Seconds to wait for one request (a batch), > 0. Connecting waits at most 10 s.
    retries : int
        Extra attempts after a transient failure (connection reset, HTTP 5xx or 429), >= 0.
    retry_wait_s : float
        First back-off, doubled on each retry (at most 8x); 0 retries at once.
    truncate : bool
        Sent as Ollama's ``truncate``. False (the default) makes the server refuse a text
        past the model's context (ProviderError) instead of silently embedding its start.
    keep_alive : float or str, optional
        How long the server keeps the model loaded (``"5m"``); default the server's.

    Attributes
    ----------
    name : str
        ``"ollama:<model>"`` (``ollama:nomic-embed-text:latest``).
    dim : int
        The vector length: the ``dim`` given, else 0 until the first answer, whose length
        it records and then enforces on every later answer. (A plain attribute, not a
        property that asks the server: ``isinstance(x, Embedder)`` reads it.)
    max_tokens : int

    Raises
    ------
    kg.errors.InvalidInput
        A bad model name, batch size, dim, timeout, retry setting or host.

    Notes
    -----
    :meth:`count_tokens` counts WordPiece tokens with kg's packaged uncased BERT tokenizer
    (``kg/data/tokenizer.json``, the one of :class:`~kg.providers.local.LocalEmbedder`).
    It is exact for the BERT-family models Ollama serves for embeddings (nomic-embed-text,
    mxbai-embed-large, all-minilm, snowflake-arctic-embed use this vocabulary) and a proxy
    for others; WordPiece splits every punctuation mark and every CJK character into a
    token of its own, so the count errs high, never low, against byte-level BPE models.
    With ``truncate=False`` a text the count let through that still does not fit fails
    loudly rather than being cut.
    """

    def __init__(
        self,
        model: str,
        *,
        host: str = DEFAULT_OLLAMA_HOST,
        batch_size: int = 32,
        max_tokens: int | None = None,
        dim: int | None = None,
        timeout_s: float = 120.0,
        retries: int = 2,
        retry_wait_s: float = 0.5,
        truncate: bool = False,
        keep_alive: float | str | None = None,
    ) -> None:
        model = canonical_ollama_model(model)
        super().__init__(model, host=host, retries=retries, retry_wait_s=retry_wait_s,
                         keep_alive=keep_alive)
        for label, value in (("batch size", batch_size), ("max_tokens", max_tokens), ("dim", dim)):
            if value is not None and not _is_positive_int(value):
                raise InvalidInput(f"embedding {label} must be a positive integer, got {value!r}",
                                   details={label: value})
        if not _is_number(timeout_s) or timeout_s <= 0:
            raise InvalidInput(f"timeout_s must be a number > 0, got {timeout_s!r}")
        self.name = f"ollama:{model}"
        self.batch_size = batch_size
        self.max_tokens = max_tokens if max_tokens is not None else default_max_tokens(model)
        self.timeout_s = float(timeout_s)
        self.truncate = truncate
        self.dim: int = dim or 0
        self._dim_lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts``, ``batch_size`` per request.

        Parameters
        ----------
        texts : sequence of str, length n
            Texts that are not empty or only whitespace and hold no lone surrogate.

        Returns
        -------
        ndarray, shape (n, dim), float32, L2-normalised rows
            Row ``i`` is the vector of ``texts[i]``; ``(0, dim)`` for no texts (``(0, 0)``
            while the dimension is not known yet), without a request.

        Raises
        ------
        kg.errors.InvalidInput
            ``texts`` is one string, or a text is not a string, is blank or holds a lone
            surrogate (``details["index"]``); no request is made.
        kg.errors.BackendUnavailable
            The server cannot be reached.
        kg.errors.ProviderError
            The server failed, timed out, has no such model, or answered something unusable:
            no ``embeddings``, fewer or more vectors than texts, a vector of the wrong length,
            NaN / inf values or an all-zero vector. The message and ``details["index"]``
            name the first bad text; nothing of the call is returned.

        Notes
        -----
        One request per ``batch_size`` texts, in order; a failed batch fails the call. The
        answer is normalised here whatever the model does (Ollama's ``/api/embed`` already
        normalises), in float64 after scaling by the largest component, so huge finite
        values do not overflow.
        """
        _check_texts(texts)
        if not texts:
            return np.empty((0, self.dim), dtype=np.float32)
        client = self._client(self.timeout_s)
        parts = []
        for begin in range(0, len(texts), self.batch_size):
            batch = [str(text) for text in texts[begin : begin + self.batch_size]]
            response = self._call(
                f"an embedding request for texts {begin}..{begin + len(batch) - 1}",
                self.timeout_s,
                functools.partial(client.embed, model=self.model, input=batch,
                                  truncate=self.truncate, keep_alive=self.keep_alive),
            )
            parts.append(self._vectors(getattr(response, "embeddings", None), begin, texts))
        return np.vstack(parts)

    def count_tokens(self, text: str) -> int:
        """WordPiece tokens in ``text`` (see Notes of the class), without special tokens.

        Raises
        ------
        kg.errors.InvalidInput
            The text holds a lone surrogate.
        kg.errors.ProviderError
            kg's packaged tokenizer file is missing or damaged.
        """
        return _wordpiece().count_tokens(text)

    def token_counter(self) -> Callable[[str], int]:
        """:meth:`count_tokens`, to pass to a chunker as ``length``."""
        return self.count_tokens

    def _vectors(self, raw: Any, begin: int, texts: Sequence[str]) -> np.ndarray:
        """Check one batch's answer and return it normalised, float32."""
        count = min(self.batch_size, len(texts) - begin)
        last = begin + count - 1
        details: dict[str, Any] = {"model": self.name, "host": self.host, "reason": "bad_vectors"}
        if raw is None or isinstance(raw, (str, bytes)) or not isinstance(raw, Sequence):
            raise ProviderError(f"{self.name} answered no embeddings for texts {begin}..{last}",
                                details={**details, "index": begin})
        got = len(raw)
        if got != count:
            index = begin + min(got, count)
            what = f"text {index} has none" if got < count else "more vectors than texts"
            raise ProviderError(
                f"{self.name} answered {got} vectors for {count} texts ({begin}..{last}): {what}; "
                "refused rather than risk misaligned vectors",
                details={**details, "index": index, "expected": count, "got": got},
            )
        dim = self.dim
        for offset, vector in enumerate(raw):
            length = len(vector)
            if not dim and length:
                check_embedding_dim(length, self.name)
                dim = length
            if length == 0 or length != dim:
                index = begin + offset
                raise ProviderError(
                    f"{self.name} answered a vector of length {length} for text {index} "
                    f"{_excerpt(texts[index])}, expected {dim or 'a non-empty vector'}",
                    details={**details, "index": index, "length": length, "expected": dim},
                )
        matrix = np.asarray(raw, dtype=np.float64).reshape(count, dim)
        finite = cast(NDArray[np.bool_], np.isfinite(matrix).all(axis=1))
        scale = np.where(np.isfinite(matrix), np.abs(matrix), 0.0).max(axis=1)
        bad = np.flatnonzero(~finite | (scale == 0))
        if bad.size:
            index = begin + int(bad[0])
            what = "non-finite values (NaN or inf)" if not finite[bad[0]] else "an all-zero vector"
            raise ProviderError(
                f"{self.name} answered {what} for text {index} {_excerpt(texts[index])}",
                details={**details, "index": index},
            )
        matrix /= scale[:, None]
        matrix /= np.linalg.norm(matrix, axis=1)[:, None]
        if not self.dim:
            with self._dim_lock:
                if not self.dim:
                    self.dim = dim
        return matrix.astype(np.float32)


class OllamaLLM(_OllamaBase):
    """A chat model served by Ollama (``POST /api/chat``, not streamed).

    Parameters
    ----------
    model : str
        The Ollama model name (``qwen3:4b``).
    host : str
        The server, ``KG_OLLAMA_HOST``.
    retries, retry_wait_s, keep_alive
        As for :class:`OllamaEmbedder`.
    options : dict, optional
        Further Ollama model options sent with every request (``{"num_ctx": 8192}``);
        ``temperature`` is set per call.

    Attributes
    ----------
    name : str
        ``"ollama:<model>"``.
    """

    def __init__(
        self,
        model: str,
        *,
        host: str = DEFAULT_OLLAMA_HOST,
        retries: int = 2,
        retry_wait_s: float = 0.5,
        keep_alive: float | str | None = None,
        options: dict[str, Any] | None = None,
    ) -> None:
        model = canonical_ollama_model(model)
        super().__init__(model, host=host, retries=retries, retry_wait_s=retry_wait_s,
                         keep_alive=keep_alive)
        self.name = f"ollama:{model}"
        self.options = dict(options or {})

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
            ``{"role": str, "content": str}``, oldest first; not empty.
        json_schema : dict, optional
            Sent as Ollama's ``format``: the server constrains the reply to the schema. The
            reply must still be read with :func:`kg.providers.jsonreply.parse_json_reply`.
        temperature : float
            Sent in ``options``.
        timeout_s : float
            Seconds to wait for the reply, > 0 (the reply is not streamed, so this bounds
            the whole generation; connecting waits at most 10 s).

        Returns
        -------
        str
            ``message.content`` of the answer, not blank (a ``<think>`` block included).

        Raises
        ------
        kg.errors.InvalidInput
            ``messages`` is empty or not a list of ``{"role", "content"}`` strings.
        kg.errors.BackendUnavailable
            The server cannot be reached.
        kg.errors.ProviderError
            The server failed, timed out, has no such model, answered a malformed body or
            an empty reply (``details["reason"]``).
        """
        _check_messages(messages)
        if json_schema is not None and not isinstance(json_schema, dict):
            raise InvalidInput("json_schema must be a dict (a JSON Schema) or None")
        if not _is_number(temperature) or temperature < 0:
            raise InvalidInput(f"temperature must be a number >= 0, got {temperature!r}")
        client = self._client(timeout_s)
        options = {**self.options, "temperature": float(temperature)}
        payload = [{"role": m["role"], "content": m["content"]} for m in messages]
        response = self._call(
            "a chat request",
            timeout_s,
            lambda: client.chat(model=self.model, messages=payload, format=json_schema,
                                options=options, stream=False, keep_alive=self.keep_alive),
        )
        message = getattr(response, "message", None)
        content = getattr(message, "content", None)
        if not isinstance(content, str) or not content.strip():
            raise ProviderError(
                f"{self.name} at {self.host} answered an empty reply "
                f"(done_reason {getattr(response, 'done_reason', None)!r})",
                details={"model": self.name, "host": self.host, "reason": "empty_reply"},
            )
        return content


    def chat_tools(
        self,
        messages: list[dict],
        tools: list[dict],
        *,
        temperature: float = 0.0,
        timeout_s: float = 60,
    ) -> ToolReply:
        """Send ``messages`` with ``tools`` (Ollama's ``tools``); return the text and tool calls.

        Parameters
        ----------
        messages : list of dict
            ``{"role", "content"}``, oldest first, not empty; an assistant message may carry
            ``tool_calls``, a tool message ``tool_name`` (passed on as they are).
        tools : list of dict
            Ollama tool definitions ``{"type": "function", "function": {"name",
            "description", "parameters"}}``; empty: none.
        temperature : float
            Sent in ``options``.
        timeout_s : float
            Seconds to wait for the reply, > 0.

        Returns
        -------
        kg.providers.llm.ToolReply
            ``message.content`` (``""`` when absent) and ``message.tool_calls``.

        Raises
        ------
        kg.errors.InvalidInput
            ``messages`` is not a list of ``{"role", "content"}`` strings.
        kg.errors.BackendUnavailable
            The server cannot be reached.
        kg.errors.ProviderError
            As :meth:`chat` (an empty reply is not an error here: the caller decides);
            ``details["reason"] == "malformed_tool_call"`` when a tool call's arguments are
            not a JSON object.
        """
        _check_messages(messages)
        if not _is_number(temperature) or temperature < 0:
            raise InvalidInput(f"temperature must be a number >= 0, got {temperature!r}")
        client = self._client(timeout_s)
        options = {**self.options, "temperature": float(temperature)}
        keys = ("role", "content", "tool_calls", "tool_name")
        payload = [{k: m[k] for k in keys if k in m} for m in messages]
        try:
            response = self._call(
                "a chat request with tools",
                timeout_s,
                lambda: client.chat(model=self.model, messages=payload, tools=tools or None,
                                    options=options, stream=False, keep_alive=self.keep_alive),
            )
        except ProviderError as exc:
            cause = exc.__cause__
            if isinstance(cause, pydantic.ValidationError) and any(
                    "tool_calls" in error.get("loc", ()) for error in cause.errors()):
                raise ProviderError(
                    f"{self.name} at {self.host} answered a tool call whose arguments are not a "
                    "JSON object", details={"model": self.name, "host": self.host,
                                            "reason": "malformed_tool_call"}) from cause
            raise
        message = getattr(response, "message", None)
        content = getattr(message, "content", None)
        calls = tuple(ToolCall(name=str(call.function.name), arguments=dict(call.function.arguments))
                      for call in (getattr(message, "tool_calls", None) or ()))
        return ToolReply(content=content if isinstance(content, str) else "", tool_calls=calls)


_wordpiece_lock = threading.Lock()
_wordpiece_counter: Any = None


def _wordpiece() -> Any:
    """A LocalEmbedder used only for its tokenizer (the model itself is never loaded)."""
    global _wordpiece_counter
    with _wordpiece_lock:
        if _wordpiece_counter is None:
            _wordpiece_counter = LocalEmbedder()
        return _wordpiece_counter


def _make_client(host: str, timeout_s: float) -> Any:
    """A new ``ollama.Client`` for ``host``; the package is imported here, on first use."""
    try:
        import httpx
        import ollama
    except ImportError as exc:
        raise ProviderError(_MISSING_CLIENT, details={"missing": exc.name}) from exc
    timeout = httpx.Timeout(timeout_s, connect=min(timeout_s, _CONNECT_TIMEOUT_S))
    try:
        return ollama.Client(host=host, timeout=timeout)
    except (ValueError, TypeError) as exc:
        raise InvalidInput(f"bad Ollama host {host!r}: {exc}", details={"host": host}) from exc


def _vendor_errors() -> tuple[type[BaseException], ...]:
    """The exceptions a client call can raise that mean the server failed or misanswered."""
    import httpx
    import ollama

    return (
        ollama.ResponseError,
        ollama.RequestError,
        ConnectionError,  # the client turns httpx.ConnectError into the builtin
        httpx.HTTPError,
        pydantic.ValidationError,  # a body that is not the documented shape
        json.JSONDecodeError,  # a body that is not JSON
        TypeError,  # a JSON body that is not an object (``null``): cls(**None)
    )


def _is_transient(exc: BaseException) -> bool:
    """Worth another attempt: a reset or closed connection, HTTP 5xx or 429."""
    import httpx
    import ollama

    if isinstance(exc, ollama.ResponseError):
        return exc.status_code in _TRANSIENT_STATUS
    if isinstance(exc, (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError)):
        return True
    return isinstance(exc, (ConnectionResetError, BrokenPipeError, ConnectionAbortedError))


def _check_texts(texts: Sequence[str]) -> None:
    """Refuse a bare string and texts that are not strings, blank or hold lone surrogates."""
    if isinstance(texts, str):
        raise InvalidInput("embed() takes a sequence of texts, not one string")
    for index, text in enumerate(texts):
        if not isinstance(text, str) or not text.strip():
            raise InvalidInput(
                f"text {index} is empty or only whitespace; it must not be embedded",
                details={"index": index},
            )
        if _SURROGATE_RE.search(text):
            raise InvalidInput(f"text {index} holds a lone surrogate and cannot be sent",
                               details={"index": index})


def _check_messages(messages: Any) -> None:
    """Refuse anything but a non-empty list of {"role": str, "content": str}."""
    if not isinstance(messages, (list, tuple)) or not messages:
        raise InvalidInput("chat() needs a non-empty list of messages")
    for index, message in enumerate(messages):
        if (not isinstance(message, dict) or not isinstance(message.get("role"), str)
                or not isinstance(message.get("content"), str)):
            raise InvalidInput(f"message {index} is not {{'role': str, 'content': str}}",
                               details={"index": index})


def _excerpt(text: str) -> str:
    """The start of a text, for a message."""
    return repr(text[:60] + ("..." if len(text) > 60 else ""))


def _first_line(exc: BaseException) -> str:
    """The first line of an exception's message."""
    return (str(exc).strip().splitlines() or [""])[0][:300]


def _is_positive_int(value: object) -> bool:
    """True for an int > 0 that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _is_number(value: object) -> bool:
    """True for a finite int or float that is not a bool."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))
