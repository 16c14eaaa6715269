"""Rerankers (:class:`kg.providers.base.Reranker`): Ollama chat models, and :func:`make_reranker`.

No registry package ships the weights of a small cross-encoder (searched for issue 15:
``flashrank``, ``rerankers``, ``fastretrieval``, ``rag-reranker``, ``inranker``,
``small-hybrid-reranker``, ``tinyintent``, ``gatrag-context-classifier``: their wheels download
their models at run time or hold none), so kg has no local reranker. The stage is pluggable:
``KG_RERANK_MODEL=ollama:<model>`` scores passages with a chat model served by Ollama, and a
local ONNX cross-encoder can be added behind the same protocol when one can be shipped.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from kg.errors import InvalidInput, ProviderError
from kg.providers.base import Reranker
from kg.providers.fake import FakeReranker
from kg.providers.jsonreply import parse_json_reply
from kg.providers.ollama import DEFAULT_OLLAMA_HOST, OllamaLLM

__all__ = ["OllamaReranker", "make_reranker"]

_SYSTEM = (
    "You judge search results. For each numbered passage, rate how relevant it is to the query: "
    "0 = unrelated, 10 = it answers the query or states exactly what it asks about. "
    'Reply with JSON only: {"scores": [s1, s2, ...]}, one number per passage, in the given order.'
)


class OllamaReranker:
    """Listwise relevance scores from a chat model served by Ollama.

    The passages go to the model in groups of ``batch``, numbered, with the query; the model
    answers one 0..10 score per passage as JSON constrained by a schema (Ollama's ``format``).
    This is an LLM used as a pointwise judge in listwise batches (Sun et al. 2023, "Is ChatGPT
    good at search? Investigating large language models as re-ranking agents", EMNLP), not a
    trained cross-encoder.

    Parameters
    ----------
    model : str
        The Ollama model (``qwen3:4b``).
    host : str
        The server, ``KG_OLLAMA_HOST``.
    batch : int
        Passages per request, >= 1.
    passage_chars : int
        Each passage is cut to this many characters, >= 50.
    timeout_s : float
        Seconds per request.
    retry_wait_s : float
        First back-off of a retried request (:class:`~kg.providers.ollama.OllamaLLM`).

    Attributes
    ----------
    name : str
        ``"ollama:<model>"``.
    """

    def __init__(self, model: str, *, host: str = DEFAULT_OLLAMA_HOST, batch: int = 10,
                 passage_chars: int = 1200, timeout_s: float = 60.0, retry_wait_s: float = 0.5) -> None:
        if batch < 1 or passage_chars < 50:
            raise InvalidInput("a reranker needs batch >= 1 and passage_chars >= 50")
        self._llm = OllamaLLM(model, host=host, retry_wait_s=retry_wait_s)
        self.name = self._llm.name
        self.batch = batch
        self.passage_chars = passage_chars
        self.timeout_s = timeout_s

    def score(self, query: str, passages: Sequence[str]) -> np.ndarray:
        """Relevance of each passage, 0..10 as the model judged it.

        Parameters
        ----------
        query : str
        passages : sequence of str, length n >= 1

        Returns
        -------
        ndarray, shape (n,), float64

        Raises
        ------
        kg.errors.ProviderError
            The server failed, or a reply is not one number per passage in 0..10
            (``details["reason"]`` ``"bad_scores"``).
        kg.errors.BackendUnavailable
            The server cannot be reached.
        """
        if not passages:
            return np.zeros(0, dtype=np.float64)
        out: list[float] = []
        for start in range(0, len(passages), self.batch):
            out.extend(self._score_batch(query, list(passages[start:start + self.batch])))
        return np.asarray(out, dtype=np.float64)

    def _score_batch(self, query: str, passages: list[str]) -> list[float]:
        """One request: the scores of up to ``batch`` passages."""
        n = len(passages)
        schema: dict[str, Any] = {
            "type": "object",
            "properties": {"scores": {"type": "array", "items": {"type": "number"},
                                      "minItems": n, "maxItems": n}},
            "required": ["scores"],
        }
        listed = "\n\n".join(f"[{i}] {' '.join(p.split())[:self.passage_chars]}"
                             for i, p in enumerate(passages, start=1))
        reply = self._llm.chat(
            [{"role": "system", "content": _SYSTEM},
             {"role": "user", "content": f"Query: {query}\n\nPassages:\n\n{listed}\n\n"
                                         f"Scores for the {n} passages, in order:"}],
            json_schema=schema, temperature=0.0, timeout_s=self.timeout_s)
        parsed = parse_json_reply(reply)
        scores = parsed.get("scores") if isinstance(parsed, dict) else parsed
        if (not isinstance(scores, list) or len(scores) != n
                or not all(isinstance(s, int | float) and not isinstance(s, bool) and 0 <= s <= 10
                           for s in scores)):
            raise ProviderError(
                f"{self.name} did not answer {n} scores between 0 and 10",
                details={"model": self.name, "reason": "bad_scores", "excerpt": reply[:200]},
            )
        return [float(s) for s in scores]


def make_reranker(name: str | None, *, host: str = DEFAULT_OLLAMA_HOST,
                  allow_fake: bool = False) -> Reranker | None:
    """The reranker of a model name, or None for none.

    Parameters
    ----------
    name : str or None
        ``"none"``, ``""`` or None: no reranker; ``ollama:<model>``: :class:`OllamaReranker`;
        ``fake:overlap``: :class:`~kg.providers.fake.FakeReranker` (only with ``allow_fake``).
    host : str
        The Ollama server (``KG_OLLAMA_HOST``).
    allow_fake : bool
        ``KG_ALLOW_FAKE_EMBEDDER`` (tests only).

    Returns
    -------
    Reranker or None
        No request is made here.

    Raises
    ------
    kg.errors.InvalidInput
        An unknown provider, or ``fake:`` without ``allow_fake``.
    """
    if name is None or not name.strip() or name.strip().lower() == "none":
        return None
    provider, has_provider, model = name.strip().partition(":")
    if has_provider and provider == "fake":
        if not allow_fake:
            raise InvalidInput("the fake reranker is for tests only (KG_ALLOW_FAKE_EMBEDDER)")
        return FakeReranker(name.strip())
    if has_provider and provider == "ollama" and model.strip():
        return OllamaReranker(model.strip(), host=host)
    raise InvalidInput(f"unknown reranker {name!r}: use none or ollama:<model>",
                       details={"model": name})
