"""Build an :class:`~kg.providers.base.Embedder` or an :class:`~kg.providers.llm.LLM` from its name.

A model is named ``<provider>:<model>`` (``local:all-MiniLM-L6-v2``,
``ollama:nomic-embed-text:latest``); a name whose first part is no known provider is an
Ollama model name (``nomic-embed-text:latest``), as in the RAG node.
"""

from __future__ import annotations

import threading

from kg.errors import InvalidInput
from kg.providers.base import Embedder, check_embedding_dim
from kg.providers.fake import FakeEmbedder
from kg.providers.llm import LLM, NoLLM
from kg.providers.local import DEFAULT_BATCH_SIZE, LocalEmbedder
from kg.providers.local import MODEL_NAME as LOCAL_MINILM
from kg.providers.ollama import DEFAULT_OLLAMA_HOST, OllamaEmbedder, OllamaLLM, canonical_ollama_model

__all__ = ["LOCAL_MODELS", "PROVIDERS", "canonical_model_name", "make_embedder", "make_llm"]

#: The models of the ``local:`` provider.
LOCAL_MODELS: tuple[str, ...] = (LOCAL_MINILM,)
#: The providers a model name may start with; any other first part is an Ollama model name.
PROVIDERS: tuple[str, ...] = ("local", "fake", "ollama")

_FAKE_DEFAULT_DIM = 64
#: Longest model name (as :func:`canonical_model_name` spells it) the store can record.
MAX_MODEL_NAME = 255
_local_cache: dict[tuple[str, int], LocalEmbedder] = {}
_local_lock = threading.Lock()
_ollama_cache: dict[tuple[str, str, int], OllamaEmbedder] = {}


def canonical_model_name(name: str) -> str:
    """The name :func:`make_embedder` gives the embedder of ``name``, without building it.

    ``nomic-embed-text``, ``nomic-embed-text:latest`` and ``ollama:nomic-embed-text`` are all
    ``ollama:nomic-embed-text:latest``; ``local:`` and ``fake:`` names are unchanged. Compare
    these, not the names as typed, to tell whether two requests mean one model.

    Raises
    ------
    kg.errors.InvalidInput
        An empty name, a bad Ollama model name, or a name longer than :data:`MAX_MODEL_NAME`.
    """
    if not isinstance(name, str) or not name.strip():
        raise InvalidInput("the embedding model name is empty", details={"model": repr(name)})
    provider, has_provider, model = name.partition(":")
    if has_provider and provider in ("local", "fake"):
        canonical = name
    elif has_provider and provider == "ollama":
        canonical = f"ollama:{canonical_ollama_model(model)}"
    else:
        canonical = f"ollama:{canonical_ollama_model(name)}"
    if len(canonical) > MAX_MODEL_NAME:
        # The store keeps it with every chunk (a 255-character column): a longer name would
        # be accepted here and then fail every indexing of the workspace.
        raise InvalidInput(f"the embedding model name is longer than {MAX_MODEL_NAME} characters",
                           details={"model": name[:100] + "...", "length": len(canonical)})
    return canonical


def make_embedder(name: str, *, batch_size: int = 32, host: str = DEFAULT_OLLAMA_HOST,
                  allow_fake: bool = False, local_batch_size: int = DEFAULT_BATCH_SIZE) -> Embedder:
    """The embedder of a model name ``<provider>:<model>``.

    Parameters
    ----------
    name : str
        ``local:all-MiniLM-L6-v2``: in-process ONNX model; ``fake:<anything>``: the
        deterministic :class:`~kg.providers.fake.FakeEmbedder`, of dimension given by a
        numeric suffix after the last ``-`` (``fake:hash-64``; default 64);
        ``ollama:<model>`` and any name whose first part is no known provider
        (``nomic-embed-text:v1.5``): :class:`~kg.providers.ollama.OllamaEmbedder`, named
        :func:`canonical_model_name` (a missing tag reads ``:latest``).
    batch_size : int
        Texts per request (Ollama), > 0 (ignored by the local model and the fake).
    local_batch_size : int
        Texts per model run of the local model, ``Settings.embed_local_batch_size``
        (``KG_EMBED_LOCAL_BATCH_SIZE``, default 1: it embeds fastest in small batches,
        ``bench/embedder_runtime.py``); a call with more texts runs several batches.
    host : str
        The Ollama server, ``Settings.ollama_host`` (``KG_OLLAMA_HOST``); Ollama models only.
    allow_fake : bool
        Whether ``fake:`` names are allowed, ``Settings.allow_fake_embedder``
        (``KG_ALLOW_FAKE_EMBEDDER``, tests only). Default off: a client cannot name the fake.

    Returns
    -------
    Embedder
        Local and Ollama embedders are cached for the life of the process, per (name, batch
        size) and per (name, host, batch size): loading a local model costs about half a
        second, and an Ollama embedder keeps the dimension it learnt. No request is made
        here. Each call for a fake gives a new instance, with its own counters.

    Raises
    ------
    kg.errors.InvalidInput
        An empty name, an unknown ``local:`` model (the message lists the known ones), a bad
        Ollama model name, a bad fake dimension or batch size; a ``fake:`` name without
        ``allow_fake``; a fake dimension over :data:`kg.providers.base.MAX_EMBEDDING_DIM`
        (an Ollama model's is checked on its first answer).
    """
    canonical = canonical_model_name(name)
    provider, _, model = canonical.partition(":")
    if provider == "local":
        if name not in LOCAL_MODELS:
            raise InvalidInput(
                f"unknown local embedding model {name!r}; known: {', '.join(LOCAL_MODELS)}",
                details={"model": name, "known": list(LOCAL_MODELS)},
            )
        return _cached_local(name, local_batch_size)
    if provider == "fake":
        if not allow_fake:
            raise InvalidInput(
                f"the fake: embedding provider is for tests only ({name!r}); this server does not "
                "allow it (KG_ALLOW_FAKE_EMBEDDER)",
                details={"model": name, "setting": "KG_ALLOW_FAKE_EMBEDDER"},
            )
        suffix = model.rsplit("-", 1)[-1]
        dim = int(suffix) if suffix.isascii() and suffix.isdigit() else _FAKE_DEFAULT_DIM
        check_embedding_dim(dim, name)
        return FakeEmbedder(dim=dim, name=name)
    key = (canonical, host, batch_size)
    with _local_lock:
        embedder = _ollama_cache.get(key)
        if embedder is None:
            embedder = OllamaEmbedder(model, host=host, batch_size=batch_size)
            _ollama_cache[key] = embedder
        return embedder


def make_llm(name: str | None, *, host: str = DEFAULT_OLLAMA_HOST) -> LLM:
    """The LLM of a model name.

    Parameters
    ----------
    name : str or None
        ``"none"``, ``""`` or None: :class:`~kg.providers.llm.NoLLM` (callers use their
        extractive or deterministic mode); ``ollama:<model>`` or a name whose first part is
        no known provider (``qwen3:4b``): :class:`~kg.providers.ollama.OllamaLLM`.
    host : str
        The Ollama server, ``Settings.ollama_host`` (``KG_OLLAMA_HOST``).

    Returns
    -------
    LLM
        A new instance; no request is made here.

    Raises
    ------
    kg.errors.InvalidInput
        A ``local:`` or ``fake:`` name (those providers have no chat model) or a bad Ollama
        model name.
    """
    if name is None or not name.strip() or name.strip().lower() == "none":
        return NoLLM()
    provider, has_provider, model = name.strip().partition(":")
    if has_provider and provider in ("local", "fake"):
        raise InvalidInput(
            f"the {provider!r} provider has no chat model: use ollama:<model> or none",
            details={"model": name},
        )
    return OllamaLLM(model if has_provider and provider == "ollama" else name.strip(), host=host)


def _cached_local(name: str, batch_size: int) -> LocalEmbedder:
    """The process-wide LocalEmbedder of (name, batch_size), created once."""
    with _local_lock:
        embedder = _local_cache.get((name, batch_size))
        if embedder is None:
            embedder = LocalEmbedder(batch_size=batch_size)
            _local_cache[(name, batch_size)] = embedder
        return embedder
