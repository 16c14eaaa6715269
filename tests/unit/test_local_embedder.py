"""LocalEmbedder on the real all-MiniLM-L6-v2 int8 model (a handful of texts: fast)."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from kg.errors import InvalidInput, ProviderError
from kg.providers.base import Embedder
from kg.providers.local import TOKENIZER_SHA256, LocalEmbedder
from kg.providers.registry import make_embedder
from kg.text.chunking import ChunkingConfig, recursive_split

TOKENIZER = Path(__file__).resolve().parents[2] / "kg" / "data" / "tokenizer.json"

SENTENCES = [
    "How do I install a Python package?",
    "pip installs packages from PyPI",
    "The cat sat on the mat",
    "Wheels are the standard built-package format for Python.",
    "猫猫猫 👋🏻 naïve",
]


@pytest.fixture(scope="module")
def embedder() -> LocalEmbedder:
    return LocalEmbedder(batch_size=2)


def test_fulfils_the_embedder_protocol(embedder: LocalEmbedder) -> None:
    assert isinstance(embedder, Embedder)
    assert (embedder.name, embedder.dim, embedder.max_tokens) == (
        "local:all-MiniLM-L6-v2",
        384,
        256,
    )


def test_shape_dtype_unit_norm(embedder: LocalEmbedder) -> None:
    vectors = embedder.embed(SENTENCES)
    assert vectors.shape == (len(SENTENCES), 384)
    assert vectors.dtype == np.float32
    assert np.all(np.isfinite(vectors))
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_related_texts_are_closer(embedder: LocalEmbedder) -> None:
    query, pip, cat = embedder.embed(SENTENCES[:3])
    assert float(query @ pip) > float(query @ cat) + 0.2


def test_identical_texts_identical_vectors(embedder: LocalEmbedder) -> None:
    a, b = embedder.embed([SENTENCES[0], SENTENCES[0]])
    np.testing.assert_array_equal(a, b)


def test_batches_keep_input_order(embedder: LocalEmbedder) -> None:
    # batch_size 2 with texts of different lengths: sorted, padded, run in 3 batches.
    together = embedder.embed(SENTENCES)
    alone = np.vstack([embedder.embed([text]) for text in SENTENCES])
    np.testing.assert_allclose(together, alone, atol=1e-5)


def test_long_text_truncated_at_max_tokens(embedder: LocalEmbedder) -> None:
    words = ("python package index wheel install " * 400).split()  # 2000 one-token words
    assert embedder.count_tokens(" ".join(words)) == 2000
    long_vector, head_vector = embedder.embed([" ".join(words), " ".join(words[:256])])
    np.testing.assert_allclose(long_vector, head_vector, atol=1e-5)


def test_case16_chunk_of_equals_signs(embedder: LocalEmbedder) -> None:
    text = "=" * 10_000
    assert embedder.count_tokens(text) == 10_000
    chunks = recursive_split(text, chunk_size=256, overlap=0, length=embedder.count_tokens)
    assert [len(c.text) for c in chunks] == [256] * 39 + [16]
    assert embedder.embed([text]).shape == (1, 384)


def test_count_tokens_excludes_special_tokens(embedder: LocalEmbedder) -> None:
    assert embedder.count_tokens("hello world") == 2
    assert embedder.count_tokens("") == 0
    assert embedder.token_counter()("hello world") == 2


def test_case3_token_mode_size2_on_mixed_scripts(embedder: LocalEmbedder) -> None:
    text = "猫猫猫 👋🏻 naïve"
    chunks = ChunkingConfig(chunk_size=2, overlap=0).chunk(text, embedder.count_tokens)
    assert [(c.text, c.start, c.end) for c in chunks] == [
        ("猫猫", 0, 2),
        ("猫", 2, 3),
        ("👋🏻 naïve", 4, 12),
    ]
    assert all(c.text == text[c.start : c.end] and "\ufffd" not in c.text for c in chunks)
    assert all(embedder.count_tokens(c.text) <= 2 for c in chunks)


@pytest.mark.parametrize("texts", [[""], ["ok", "   \n"], ["ok", "a\ud800"]])
def test_case15_blank_or_unencodable_text_refused(
    embedder: LocalEmbedder, texts: list[str]
) -> None:
    with pytest.raises(InvalidInput) as info:
        embedder.embed(texts)
    assert info.value.details == {"index": len(texts) - 1}


def test_single_string_refused(embedder: LocalEmbedder) -> None:
    with pytest.raises(InvalidInput):
        embedder.embed("How do I install a Python package?")


def test_empty_batch(embedder: LocalEmbedder) -> None:
    assert embedder.embed([]).shape == (0, 384)


def test_tokenizer_sha256_checked(tmp_path: Path) -> None:
    import hashlib

    assert hashlib.sha256(TOKENIZER.read_bytes()).hexdigest() == TOKENIZER_SHA256
    tampered = tmp_path / "tokenizer.json"
    tampered.write_bytes(TOKENIZER.read_bytes().replace(b'"[UNK]"', b'"[UNKNOWN]"', 1))
    broken = LocalEmbedder(tokenizer_path=tampered)
    with pytest.raises(ProviderError, match="sha256") as info:
        broken.count_tokens("hello")
    assert info.value.details["expected"] == TOKENIZER_SHA256
    with pytest.raises(ProviderError, match="sha256"):
        broken.embed(["hello"])


def test_missing_model_file(tmp_path: Path) -> None:
    with pytest.raises(ProviderError, match="cannot load"):
        LocalEmbedder(model_path=tmp_path / "absent.onnx").embed(["hello"])


def test_missing_dependency_names_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(ProviderError, match="pip install kg"):
        LocalEmbedder().embed(["hello"])


class _NaNSession:
    """A stand-in model run that answers NaN for the second row of a batch."""

    def run(self, names: list[str], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        batch, width = feeds["input_ids"].shape
        hidden = np.ones((batch, width, 384), dtype=np.float32)
        if batch > 1:
            hidden[1, 0, 7] = np.nan
        return [hidden]


def test_case17_non_finite_vector_refused_naming_the_text(embedder: LocalEmbedder) -> None:
    stub = LocalEmbedder(batch_size=8)
    stub._tokenizer = embedder._get_tokenizer()
    stub._cls_id, stub._sep_id = embedder._cls_id, embedder._sep_id
    stub._session = _NaNSession()
    stub._input_names = frozenset({"input_ids", "attention_mask"})
    stub._output_name = "last_hidden_state"
    # Sorted by length, "a b c d" is the second row of the batch; it is input 0.
    with pytest.raises(ProviderError, match="non-finite vector for text 0") as info:
        stub.embed(["a b c d", "a"])
    assert info.value.details == {"index": 0}


def test_concurrent_first_use_loads_once() -> None:
    fresh = LocalEmbedder()
    results: list[np.ndarray] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            results.append(fresh.embed([SENTENCES[1]]))
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    for vector in results[1:]:
        np.testing.assert_allclose(vector, results[0], atol=1e-6)


@pytest.mark.parametrize("batch_size", [0, -1, True])
def test_bad_batch_size(batch_size: int) -> None:
    with pytest.raises(InvalidInput):
        LocalEmbedder(batch_size=batch_size)


def test_registry_caches_the_local_model() -> None:
    first = make_embedder("local:all-MiniLM-L6-v2")
    assert isinstance(first, LocalEmbedder)
    assert make_embedder("local:all-MiniLM-L6-v2") is first
    assert make_embedder("local:all-MiniLM-L6-v2", batch_size=8) is first  # texts per call: not the model's
    other = make_embedder("local:all-MiniLM-L6-v2", local_batch_size=8)
    assert other is not first and other.batch_size == 8
