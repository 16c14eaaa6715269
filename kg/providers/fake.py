"""FakeEmbedder: a deterministic bag-of-words embedder for tests, with no model."""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Callable, Sequence

import numpy as np

from kg.errors import InvalidInput

__all__ = ["FakeEmbedder", "FakeReranker"]

_WORD_RE = re.compile(r"\w+")


class FakeEmbedder:
    r"""Feature-hashing embedder: texts that share words get similar vectors.

    Each lowercase word (regex ``\w+``) is hashed with BLAKE2b into one of ``dim`` buckets
    with a sign; a text's vector is the signed count per bucket, L2-normalised. Cosine
    similarity therefore grows with shared words, so search tests are meaningful, and the
    same text always gives the same vector, in any process.

    Parameters
    ----------
    dim : int
        Vector length, > 0.
    name : str, optional
        Model name; default ``"fake:hash-<dim>"``.

    Attributes
    ----------
    name : str
    dim : int
    max_tokens : int
        8192: the fake has no real context limit.
    calls : int
        Number of :meth:`embed` calls so far, refused ones included.
    texts_embedded : int
        Number of texts embedded so far.

    Raises
    ------
    kg.errors.InvalidInput
        ``dim`` is not a positive integer.

    References
    ----------
    .. [1] Weinberger, Dasgupta, Langford, Smola and Attenberg, "Feature Hashing for Large
       Scale Multitask Learning", ICML 2009.
    """

    max_tokens: int = 8192

    def __init__(self, dim: int = 64, name: str | None = None) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int) or dim <= 0:
            raise InvalidInput(f"embedding dim must be a positive integer, got {dim!r}")
        self.dim = dim
        self.name = name if name is not None else f"fake:hash-{dim}"
        self.calls = 0
        self.texts_embedded = 0
        self._lock = threading.Lock()
        # The vector of a text without words: fixed, unit length.
        self._no_words = np.full(dim, 1.0 / np.sqrt(dim), dtype=np.float32)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        r"""Embed ``texts``.

        Parameters
        ----------
        texts : sequence of str, length n
            Texts that are not empty or only whitespace.

        Returns
        -------
        ndarray, shape (n, dim), float32, L2-normalised rows
            A text without any ``\w+`` word (``"?!"``) gets a fixed unit vector.

        Raises
        ------
        kg.errors.InvalidInput
            ``texts`` is a single string, or one of them is not a string or is empty or
            only whitespace (callers must not send those; the index is in ``details``).
        """
        with self._lock:
            self.calls += 1
        if isinstance(texts, str):
            raise InvalidInput("embed() takes a sequence of texts, not one string")
        for index, text in enumerate(texts):
            if not isinstance(text, str) or not text.strip():
                raise InvalidInput(
                    f"text {index} is empty or only whitespace; it must not be embedded",
                    details={"index": index},
                )
        vectors = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in _WORD_RE.findall(text.lower()):
                bucket, sign = self._hash(word)
                vectors[row, bucket] += sign
            norm = float(np.linalg.norm(vectors[row]))
            if norm == 0.0:
                vectors[row] = self._no_words
            else:
                vectors[row] /= norm
        with self._lock:
            self.texts_embedded += len(texts)
        return vectors

    def count_tokens(self, text: str) -> int:
        r"""Number of ``\w+`` words in ``text``."""
        return len(_WORD_RE.findall(text))

    def token_counter(self) -> Callable[[str], int]:
        """The token counter, usable as a chunker's ``length``."""
        return self.count_tokens

    def _hash(self, word: str) -> tuple[int, float]:
        """Bucket and sign of one word."""
        digest = hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest()
        value = int.from_bytes(digest, "little")
        return value % self.dim, 1.0 if (value >> 63) & 1 == 0 else -1.0


class FakeReranker:
    """Deterministic reranker for tests: the share of the query's words a passage holds.

    Parameters
    ----------
    name : str, optional
        Default ``"fake:overlap"``.

    Attributes
    ----------
    calls : int
        Number of :meth:`score` calls.
    """

    def __init__(self, name: str = "fake:overlap") -> None:
        self.name = name
        self.calls = 0

    def score(self, query: str, passages: Sequence[str]) -> np.ndarray:
        """Per passage, distinct query words it holds / distinct query words (lowercase
        ``\\w+``), minus a tiny length penalty so that shorter passages win ties."""
        self.calls += 1
        words = set(re.findall(r"\w+", query.lower()))
        out = np.zeros(len(passages), dtype=np.float64)
        for i, passage in enumerate(passages):
            held = set(re.findall(r"\w+", passage.lower()))
            out[i] = len(words & held) / max(1, len(words)) - 1e-6 * len(passage)
        return out
