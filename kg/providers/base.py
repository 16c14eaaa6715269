"""The provider contracts: :class:`Embedder` and :class:`Reranker` (``LLM`` is in :mod:`kg.providers.llm`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from kg.errors import InvalidInput

MAX_EMBEDDING_DIM = 4096
"""Longest vector any embedding model may give (the largest common models give 4096): a client
names the model, so its dimension is what one stored chunk costs in memory and on disk."""


def check_embedding_dim(dim: int, model: str) -> None:
    """Refuse a model whose vectors are longer than :data:`MAX_EMBEDDING_DIM`.

    Parameters
    ----------
    dim : int
        The model's vector length.
    model : str
        Its name, for the message.

    Raises
    ------
    kg.errors.InvalidInput
        ``dim > MAX_EMBEDDING_DIM`` (422, naming the bound).
    """
    if dim > MAX_EMBEDDING_DIM:
        raise InvalidInput(
            f"embedding model {model!r} gives vectors of {dim} dimensions; at most "
            f"{MAX_EMBEDDING_DIM} are allowed",
            details={"model": model, "dim": dim, "max_dim": MAX_EMBEDDING_DIM},
        )


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into L2-normalised vectors.

    Attributes
    ----------
    name : str
        Full model name, ``<provider>:<model>`` (``local:all-MiniLM-L6-v2``).
    dim : int
        Length of every vector.
    max_tokens : int
        The model's context, in its own tokens; longer input must be split by the caller.
    """

    name: str
    dim: int
    max_tokens: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts``.

        Parameters
        ----------
        texts : sequence of str, length n
            Non-empty texts.

        Returns
        -------
        ndarray, shape (n, dim), float32, L2-normalised rows

        Raises
        ------
        kg.errors.ProviderError
            The model failed or answered something unusable.
        """
        ...

    def count_tokens(self, text: str) -> int:
        """Number of model tokens in ``text`` (without special tokens)."""
        ...


@runtime_checkable
class Reranker(Protocol):
    """Scores passages against a query, to reorder a search's fused candidates.

    A cross-encoder reads the query and each passage together, so it can judge relevance that
    neither a bi-encoder's vectors nor BM25's term statistics see (Nogueira and Cho 2019,
    "Passage Re-ranking with BERT", arXiv:1901.04085).

    Attributes
    ----------
    name : str
        ``<provider>:<model>`` (``ollama:qwen3:4b``).
    """

    name: str

    def score(self, query: str, passages: Sequence[str]) -> np.ndarray:
        """Relevance of each passage to ``query``.

        Parameters
        ----------
        query : str
            Non-empty.
        passages : sequence of str, length n
            The candidates, n >= 1.

        Returns
        -------
        ndarray, shape (n,), float64
            Higher is more relevant; only the order within one call is meaningful.

        Raises
        ------
        kg.errors.ProviderError
            The model failed or answered something unusable.
        kg.errors.BackendUnavailable
            The model's server cannot be reached.
        """
        ...
