"""LocalEmbedder's runtime settings: batch size, threads and order never change a vector."""

from __future__ import annotations

import random

import numpy as np
import pytest

from kg.errors import InvalidInput
from kg.providers.local import DEFAULT_BATCH_SIZE, DEFAULT_THREADS, LocalEmbedder
from kg.settings import Settings

# Texts of very different lengths (2 to 256+ tokens), so every batch pads its short rows.
TEXTS = [
    "pip",
    "How do I install a Python package?",
    "Version specifiers: ~= is the compatible release clause, == pins one version. " * 3,
    "Wheels are the standard built-package format for Python.",
    "The cat sat on the mat",
    "python package index wheel install " * 80,  # 400 tokens: truncated at 256
    "猫猫猫 👋🏻 naïve",
    "A lock file records the exact versions of every dependency, with hashes, " * 6,
    "Type hints: PEP 484 introduced them; PEP 604 allows writing X | Y for unions.",
    "metadata",
    "Entry points let a package advertise objects to other packages at run time. " * 2,
]


@pytest.fixture(scope="module")
def alone() -> np.ndarray:
    """Each text embedded by itself (batch 1, no padding at all)."""
    embedder = LocalEmbedder(batch_size=1)
    return np.vstack([embedder.embed([text]) for text in TEXTS])


@pytest.mark.parametrize("batch_size", [1, 2, 3, 8, 32])
def test_vectors_do_not_depend_on_batch_size(alone: np.ndarray, batch_size: int) -> None:
    vectors = LocalEmbedder(batch_size=batch_size).embed(TEXTS)
    np.testing.assert_allclose(vectors, alone, atol=1e-5, rtol=0)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_vectors_do_not_depend_on_order(alone: np.ndarray, seed: int) -> None:
    order = list(range(len(TEXTS)))
    random.Random(seed).shuffle(order)
    vectors = LocalEmbedder(batch_size=4).embed([TEXTS[i] for i in order])
    np.testing.assert_allclose(vectors, alone[order], atol=1e-5, rtol=0)


def test_padding_next_to_a_long_text_does_not_change_a_short_one(alone: np.ndarray) -> None:
    # "pip" (3 positions) padded to 258 positions in the same run as the truncated text.
    short, long = LocalEmbedder(batch_size=2).embed([TEXTS[0], TEXTS[5]])
    np.testing.assert_allclose(short, alone[0], atol=1e-5, rtol=0)
    np.testing.assert_allclose(long, alone[5], atol=1e-5, rtol=0)


@pytest.mark.parametrize("threads, spinning", [(1, False), (2, False), (2, True)])
def test_vectors_do_not_depend_on_threads(alone: np.ndarray, threads: int, spinning: bool) -> None:
    embedder = LocalEmbedder(batch_size=8, intra_op_num_threads=threads, allow_spinning=spinning)
    np.testing.assert_allclose(embedder.embed(TEXTS), alone, atol=1e-5, rtol=0)


def test_defaults_are_the_measured_ones() -> None:
    # bench/embedder_runtime.py, 2026-12-04: one text per run, onnxruntime's threads, no spinning
    assert (DEFAULT_BATCH_SIZE, DEFAULT_THREADS) == (1, None)
    embedder = LocalEmbedder()
    assert (embedder.batch_size, embedder.intra_op_num_threads, embedder.allow_spinning) == (
        DEFAULT_BATCH_SIZE, DEFAULT_THREADS, False)
    # make_embedder builds the local embedder with KG_EMBED_LOCAL_BATCH_SIZE: same default;
    # KG_EMBED_BATCH_SIZE (texts per call, per Ollama request) stays 32.
    assert Settings().embed_local_batch_size == DEFAULT_BATCH_SIZE
    assert Settings().embed_batch_size == 32
    from kg.providers.registry import make_embedder

    assert make_embedder("local:all-MiniLM-L6-v2", batch_size=32).batch_size == DEFAULT_BATCH_SIZE
    assert make_embedder("local:all-MiniLM-L6-v2", local_batch_size=3).batch_size == 3


def test_session_gets_the_runtime_options() -> None:
    import onnxruntime

    embedder = LocalEmbedder(intra_op_num_threads=1)
    options = embedder._get_session().get_session_options()
    assert options.intra_op_num_threads == 1
    assert options.inter_op_num_threads == 1
    assert options.execution_mode == onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    assert options.graph_optimization_level == onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"


@pytest.mark.parametrize("kwargs", [{"batch_size": 0}, {"batch_size": True}, {"intra_op_num_threads": 0},
                                    {"intra_op_num_threads": 1.5}])
def test_bad_runtime_settings_refused(kwargs: dict) -> None:
    with pytest.raises(InvalidInput):
        LocalEmbedder(**kwargs)
