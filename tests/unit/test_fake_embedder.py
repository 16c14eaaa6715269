"""FakeEmbedder and the registry's non-local names."""

from __future__ import annotations

import numpy as np
import pytest

from kg.errors import InvalidInput
from kg.providers.base import Embedder
from kg.providers.fake import FakeEmbedder
from kg.providers.registry import make_embedder


def test_fulfils_the_embedder_protocol() -> None:
    fake = FakeEmbedder()
    assert isinstance(fake, Embedder)
    assert (fake.name, fake.dim, fake.max_tokens) == ("fake:hash-64", 64, 8192)


def test_shape_dtype_unit_norm() -> None:
    vectors = FakeEmbedder(dim=32).embed(["alpha beta", "gamma", "?!"])
    assert vectors.shape == (3, 32)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-6)


def test_deterministic_across_instances() -> None:
    a = FakeEmbedder().embed(["the same text"])
    b = FakeEmbedder().embed(["the same text"])
    np.testing.assert_array_equal(a, b)


def test_known_vector_is_stable_across_processes() -> None:
    # blake2b is not salted per process (unlike hash()): pin one bucket to catch a change.
    vector = FakeEmbedder(dim=8).embed(["python"])[0]
    assert np.count_nonzero(vector) == 1
    assert abs(float(vector.sum())) == pytest.approx(1.0)


def test_case_insensitive_bag_of_words() -> None:
    fake = FakeEmbedder()
    a, b = fake.embed(["Pip installs packages", "packages INSTALLS pip!"])
    np.testing.assert_allclose(a, b, atol=1e-7)


def test_shared_words_are_closer() -> None:
    query, related, unrelated = FakeEmbedder(dim=256).embed(
        [
            "how to install a python package",
            "pip can install any python package from pypi",
            "the cat sat on the mat",
        ]
    )
    assert float(query @ related) > float(query @ unrelated)
    assert float(query @ related) > 0.2


def test_text_without_words_gets_a_fixed_unit_vector() -> None:
    a, b = FakeEmbedder().embed(["?!", "--- ..."])
    np.testing.assert_array_equal(a, b)
    assert np.linalg.norm(a) == pytest.approx(1.0)


@pytest.mark.parametrize("texts", [[""], ["ok", "  \n\t"], ["ok", None]])
def test_case15_blank_text_refused(texts: list[str]) -> None:
    fake = FakeEmbedder()
    with pytest.raises(InvalidInput) as info:
        fake.embed(texts)
    assert info.value.details == {"index": len(texts) - 1}
    assert fake.texts_embedded == 0


def test_single_string_refused() -> None:
    with pytest.raises(InvalidInput):
        FakeEmbedder().embed("not a list")


def test_counts_calls_and_texts() -> None:
    fake = FakeEmbedder()
    fake.embed(["a", "b"])
    fake.embed(["c"])
    fake.embed([])
    assert (fake.calls, fake.texts_embedded) == (3, 3)


def test_empty_batch() -> None:
    assert FakeEmbedder(dim=16).embed([]).shape == (0, 16)


def test_count_tokens_counts_words() -> None:
    fake = FakeEmbedder()
    assert fake.count_tokens("Hello, world! naïve 猫猫") == 4
    assert fake.count_tokens("   ") == 0
    assert fake.token_counter()("a b c") == 3


@pytest.mark.parametrize("dim", [0, -1, True, 2.5])
def test_bad_dim_refused(dim: object) -> None:
    with pytest.raises(InvalidInput):
        FakeEmbedder(dim=dim)  # type: ignore[arg-type]


# --- registry -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "dim"), [("fake:hash-64", 64), ("fake:hash-8", 8), ("fake:other", 64)]
)
def test_registry_fake_dimension_from_name(name: str, dim: int) -> None:
    embedder = make_embedder(name, allow_fake=True)
    assert isinstance(embedder, FakeEmbedder)
    assert (embedder.name, embedder.dim) == (name, dim)
    assert embedder.embed(["x"]).shape == (1, dim)


def test_registry_fake_instances_are_fresh() -> None:
    assert make_embedder("fake:hash-64", allow_fake=True) is not make_embedder("fake:hash-64", allow_fake=True)


def test_registry_unknown_local_model_lists_known_ones() -> None:
    with pytest.raises(InvalidInput) as info:
        make_embedder("local:bge-small")
    assert "local:all-MiniLM-L6-v2" in info.value.message
    assert info.value.details["known"] == ["local:all-MiniLM-L6-v2"]


@pytest.mark.parametrize("name", ["", "   ", "fake:hash-0"])
def test_registry_bad_names(name: str) -> None:
    with pytest.raises(InvalidInput):
        make_embedder(name, allow_fake=True)


def test_registry_fake_provider_is_off_unless_enabled() -> None:
    with pytest.raises(InvalidInput) as info:
        make_embedder("fake:hash-64")
    assert "KG_ALLOW_FAKE_EMBEDDER" in info.value.message


def test_registry_fake_dimension_is_bounded() -> None:
    from kg.providers.base import MAX_EMBEDDING_DIM

    assert make_embedder(f"fake:hash-{MAX_EMBEDDING_DIM}", allow_fake=True).dim == MAX_EMBEDDING_DIM
    with pytest.raises(InvalidInput) as info:
        make_embedder("fake:hash-10000000", allow_fake=True)
    assert str(MAX_EMBEDDING_DIM) in info.value.message
    assert info.value.details["max_dim"] == MAX_EMBEDDING_DIM
