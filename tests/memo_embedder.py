"""An embedder that remembers the vectors of the texts it embedded, for the whole test process.

A module whose every test ingests the same documents with the real local model spends most of
its time embedding them again (two PEPs: 27 s of each test's setup on 2 cores). The model is
deterministic, so a text's vector is the same every time: answering it from memory changes no
result, only the time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from kg.providers.base import Embedder
from kg.providers.registry import make_embedder

#: (model name, text) -> its vector, shared by every MemoEmbedder of the process.
_VECTORS: dict[tuple[str, str], np.ndarray] = {}


class MemoEmbedder:
    """``inner``'s vectors, each text embedded once per process (:class:`kg.providers.base.Embedder`)."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.name, self.dim, self.max_tokens = inner.name, inner.dim, inner.max_tokens

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        missing = list(dict.fromkeys(t for t in texts if (self.name, t) not in _VECTORS))
        if missing:
            for text, vector in zip(missing, self.inner.embed(missing), strict=True):
                _VECTORS[(self.name, text)] = vector
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([_VECTORS[(self.name, t)] for t in texts]).astype(np.float32, copy=False)

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)

    def __getattr__(self, name: str) -> Any:  # anything else the inner embedder offers
        return getattr(self.inner, name)


def memo_embedder_factory(allow_fake: bool = True):
    """An ``embedder_factory`` for :class:`kg.services.Services`: :func:`make_embedder`'s
    embedders, each wrapped in a :class:`MemoEmbedder`."""
    made: dict[str, MemoEmbedder] = {}

    def factory(name: str) -> MemoEmbedder:
        if name not in made:
            made[name] = MemoEmbedder(make_embedder(name, allow_fake=allow_fake))
        return made[name]

    return factory
