"""Build an :class:`~kg.providers.base.Embedder` from its model name."""

from __future__ import annotations

import threading

from kg.errors import InvalidInput, ProviderError
from kg.providers.base import Embedder
from kg.providers.fake import FakeEmbedder
from kg.providers.local import MODEL_NAME as LOCAL_MINILM
from kg.providers.local import LocalEmbedder

__all__ = ["LOCAL_MODELS", "make_embedder"]

#: The models of the ``local:`` provider.
LOCAL_MODELS: tuple[str, ...] = (LOCAL_MINILM,)

_FAKE_DEFAULT_DIM = 64
_local_cache: dict[tuple[str, int], LocalEmbedder] = {}
_local_lock = threading.Lock()


def make_embedder(name: str, *, batch_size: int = 32) -> Embedder:
    """The embedder of a model name ``<provider>:<model>``.

    Parameters
    ----------
    name : str
        ``local:all-MiniLM-L6-v2``: in-process ONNX model; ``fake:<anything>``: the
        deterministic :class:`~kg.providers.fake.FakeEmbedder`, of dimension given by a
        numeric suffix after the last ``-`` (``fake:hash-64``; default 64); ``ollama:<model>``
        and names without a known provider (Ollama model names such as
        ``nomic-embed-text:v1.5``): not available yet.
    batch_size : int
        Texts per model run of a local model, > 0 (ignored by the fake).

    Returns
    -------
    Embedder
        Local embedders are cached per (name, batch size) for the life of the process, since
        loading one costs about half a second; each call for a fake gives a new instance,
        with its own counters.

    Raises
    ------
    kg.errors.InvalidInput
        An empty name, an unknown ``local:`` model (the message lists the known ones), a bad
        fake dimension or batch size.
    kg.errors.ProviderError
        An Ollama model or an unknown provider: not available yet.
    """
    if not isinstance(name, str) or not name.strip():
        raise InvalidInput("the embedding model name is empty", details={"model": repr(name)})
    provider, has_provider, model = name.partition(":")
    if has_provider and provider == "local":
        if name not in LOCAL_MODELS:
            raise InvalidInput(
                f"unknown local embedding model {name!r}; known: {', '.join(LOCAL_MODELS)}",
                details={"model": name, "known": list(LOCAL_MODELS)},
            )
        return _cached_local(name, batch_size)
    if has_provider and provider == "fake":
        suffix = model.rsplit("-", 1)[-1]
        dim = int(suffix) if suffix.isascii() and suffix.isdigit() else _FAKE_DEFAULT_DIM
        return FakeEmbedder(dim=dim, name=name)
    raise ProviderError(
        f"Ollama embedders are not available yet: cannot use {name!r}; "
        f"use one of {', '.join(LOCAL_MODELS)} or fake:hash-<dim>",
        details={"model": name},
    )


def _cached_local(name: str, batch_size: int) -> LocalEmbedder:
    """The process-wide LocalEmbedder of (name, batch_size), created once."""
    with _local_lock:
        embedder = _local_cache.get((name, batch_size))
        if embedder is None:
            embedder = LocalEmbedder(batch_size=batch_size)
            _local_cache[(name, batch_size)] = embedder
        return embedder
