"""OllamaEmbedder through the real ``ollama`` client against the Ollama-compatible test server.

CASES #15 (a provider that answers nothing, or too little, with 200) and #17 (NaN, inf,
zero vectors): every misbehaviour is a ProviderError that names the text, never a
misaligned or non-finite vector.
"""

from __future__ import annotations

import socket

import numpy as np
import pytest

from kg.errors import BackendUnavailable, InvalidInput, ProviderError
from kg.providers.base import Embedder
from kg.providers.local import LocalEmbedder
from kg.providers.ollama import OllamaEmbedder, canonical_ollama_model, default_max_tokens
from kg.providers.registry import canonical_model_name, make_embedder
from tests.ollama_server import OllamaTestServer

TEXTS = [
    "Graph databases store nodes and the relations between them.",
    "The cat sat on the mat.",
    "Reciprocal rank fusion merges the ranks of several retrievers.",
    "naïve café — 猫猫猫 👋🏻",
    "Ollama serves models over HTTP on port 11434.",
]


def embedder(server: OllamaTestServer, model: str = "fake-embed", **kwargs) -> OllamaEmbedder:
    kwargs.setdefault("retry_wait_s", 0)
    return OllamaEmbedder(model, host=server.url, **kwargs)


def closed_port_url() -> str:
    """A loopback URL on which nothing listens."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


# --- the happy path -------------------------------------------------------------------------


def test_embeddings_equal_the_local_embedders_through_the_real_client(ollama) -> None:
    remote = embedder(ollama, "nomic-embed-text:latest").embed(TEXTS)
    local = LocalEmbedder().embed(TEXTS)
    assert remote.shape == local.shape == (len(TEXTS), 384)
    assert remote.dtype == np.float32
    cosines = np.sum(remote * local, axis=1)
    assert np.all(cosines > 0.999), cosines


def test_vectors_are_l2_normalised_and_finite(ollama) -> None:
    vectors = embedder(ollama, "all-minilm").embed(TEXTS)
    assert np.all(np.isfinite(vectors))
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-6)


def test_embed_sends_batch_size_texts_per_request_in_order(ollama) -> None:
    model = embedder(ollama, batch_size=2)
    together = model.embed(TEXTS)
    bodies = [r.body for r in ollama.recorded("/api/embed")]
    assert [b["input"] for b in bodies] == [TEXTS[0:2], TEXTS[2:4], TEXTS[4:5]]
    assert all(b["model"] == "fake-embed:latest" for b in bodies)
    assert all(b["truncate"] is False for b in bodies)
    one_by_one = np.vstack([model.embed([text]) for text in TEXTS])
    np.testing.assert_array_equal(together, one_by_one)


def test_dim_is_learnt_from_the_first_answer(ollama) -> None:
    model = embedder(ollama)
    assert model.dim == 0
    assert isinstance(model, Embedder)  # reading ``dim`` must not call the server
    assert ollama.recorded("/api/embed") == []
    model.embed(["one"])
    assert model.dim == 16


def test_a_dim_given_is_enforced(ollama) -> None:
    with pytest.raises(ProviderError) as info:
        embedder(ollama, dim=32).embed(["one"])
    assert "length 16" in info.value.message and "expected 32" in info.value.message
    assert info.value.details["index"] == 0


def test_a_later_answer_of_another_length_is_refused(ollama) -> None:
    model = embedder(ollama)
    model.embed(["one"])
    ollama.fail_next("short_vector")
    with pytest.raises(ProviderError, match="length 15 for text 0"):
        model.embed(["two"])


def test_no_texts_make_no_request(ollama) -> None:
    assert embedder(ollama).embed([]).shape == (0, 0)
    assert ollama.recorded("/api/embed") == []


@pytest.mark.parametrize("texts", [["fine", "   "], ["fine", ""], "a string", ["ok", "\ud800"]])
def test_blank_or_bad_texts_are_refused_before_any_request(ollama, texts) -> None:
    with pytest.raises(InvalidInput):
        embedder(ollama).embed(texts)
    assert ollama.recorded("/api/embed") == []


# --- names, context, tokens ----------------------------------------------------------------


def test_name_max_tokens_and_token_count() -> None:
    nomic = OllamaEmbedder("nomic-embed-text")
    assert nomic.name == "ollama:nomic-embed-text:latest"
    assert nomic.max_tokens == 2048
    assert OllamaEmbedder("some-new-model:v2").max_tokens == 512
    assert OllamaEmbedder("mxbai-embed-large", max_tokens=300).max_tokens == 300
    assert default_max_tokens("hf.co/org/all-minilm:Q8_0") == 256
    # WordPiece count, as kg's packaged tokenizer gives it; punctuation errs high.
    text = "Hello, world! 猫猫猫"
    assert nomic.count_tokens(text) == LocalEmbedder().count_tokens(text) == 7
    assert nomic.count_tokens("=" * 10_000) == 10_000
    assert nomic.token_counter()("two words") == 2


@pytest.mark.parametrize(
    ("model", "canonical"),
    [
        ("nomic-embed-text", "nomic-embed-text:latest"),
        ("nomic-embed-text:v1.5", "nomic-embed-text:v1.5"),
        ("hf.co/org/repo:Q4_K_M", "hf.co/org/repo:Q4_K_M"),
        ("registry.local:5000/ns/model", "registry.local:5000/ns/model:latest"),
    ],
)
def test_canonical_ollama_model(model: str, canonical: str) -> None:
    assert canonical_ollama_model(model) == canonical


@pytest.mark.parametrize("model", ["", "  ", "a b", "x:", ":tag", "ns/"])
def test_bad_ollama_model_names_are_refused(model: str) -> None:
    with pytest.raises(InvalidInput):
        OllamaEmbedder(model)


@pytest.mark.parametrize(
    "kwargs",
    [{"batch_size": 0}, {"max_tokens": -1}, {"dim": 0}, {"timeout_s": 0}, {"retries": -1},
     {"retry_wait_s": -1}, {"batch_size": True}],
)
def test_bad_settings_are_refused(kwargs: dict) -> None:
    with pytest.raises(InvalidInput):
        OllamaEmbedder("nomic-embed-text", **kwargs)


def test_a_text_past_the_context_fails_instead_of_being_truncated(ollama) -> None:
    model = embedder(ollama, "all-minilm")  # the server's model has 256 tokens
    with pytest.raises(ProviderError) as info:
        model.embed(["fits", "word " * 300])
    assert "exceeds the context length" in info.value.message
    assert info.value.details["status"] == 400
    assert len(ollama.recorded("/api/embed")) == 1  # a 4xx is not retried


# --- CASES #15 and #17: answers that must be refused ------------------------------------------


@pytest.mark.parametrize(
    ("fault", "reason", "index", "says"),
    [
        ("empty_embeddings", "bad_vectors", 0, "0 vectors for 3 texts"),
        ("drop_last", "bad_vectors", 2, "2 vectors for 3 texts"),
        ("extra", "bad_vectors", 3, "4 vectors for 3 texts"),
        ("short_vector", "bad_vectors", 1, "length 15 for text 1"),
        ("empty_vector", "bad_vectors", 1, "length 0 for text 1"),
        ("nan", "bad_vectors", 1, "non-finite values (NaN or inf) for text 1"),
        ("inf", "bad_vectors", 1, "non-finite values (NaN or inf) for text 1"),
        ("zero", "bad_vectors", 1, "an all-zero vector for text 1"),
        ("null_embeddings", "malformed", None, "not Ollama's documented shape"),
        ("no_embeddings", "malformed", None, "not Ollama's documented shape"),
        ("null_body", "malformed", None, "not Ollama's documented shape"),
        ("not_json", "malformed", None, "not Ollama's documented shape"),
    ],
)
def test_every_bad_answer_is_a_provider_error_naming_the_text(
    ollama, fault: str, reason: str, index: int | None, says: str
) -> None:
    ollama.fail_next(fault, index=1)
    with pytest.raises(ProviderError) as info:
        embedder(ollama).embed(["alpha", "beta", "gamma"])
    assert says in info.value.message
    assert info.value.details["reason"] == reason
    assert info.value.details["model"] == "ollama:fake-embed:latest"
    if index is not None:
        assert info.value.details["index"] == index
    assert len(ollama.recorded("/api/embed")) == 1  # a bad 200 is not retried


def test_a_bad_vector_in_a_later_batch_names_its_index_in_the_call(ollama) -> None:
    ollama.fail_next("nan", index=1, after=1)
    with pytest.raises(ProviderError, match="for text 3 'delta'") as info:
        embedder(ollama, batch_size=2).embed(["alpha", "beta", "gamma", "delta"])
    assert info.value.details["index"] == 3


def test_huge_finite_values_are_normalised_without_overflow(ollama) -> None:
    ollama.fail_next("huge", index=0)
    vectors = embedder(ollama).embed(["alpha", "beta"])
    assert np.all(np.isfinite(vectors))
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-6)


# --- transport failures -------------------------------------------------------------------------


@pytest.mark.parametrize("status", [500, 502, 503, 504, 429])
def test_a_transient_status_is_retried(ollama, status: int) -> None:
    ollama.fail_next("status", status=status, times=2)
    vectors = embedder(ollama, retries=2).embed(["alpha"])
    assert vectors.shape == (1, 16)
    assert len(ollama.recorded("/api/embed")) == 3


def test_retries_are_bounded(ollama) -> None:
    ollama.fail_next("status", status=500, times=10)
    with pytest.raises(ProviderError) as info:
        embedder(ollama, retries=2).embed(["alpha"])
    assert "after 3 attempts: HTTP 500" in info.value.message
    assert "llama runner process has terminated" in info.value.message
    assert (info.value.details["reason"], info.value.details["status"]) == ("http_error", 500)
    assert len(ollama.recorded("/api/embed")) == 3
    assert isinstance(info.value.__cause__, Exception)  # raised from the vendor error


def test_a_connection_reset_is_retried(ollama) -> None:
    ollama.fail_next("reset")
    assert embedder(ollama).embed(["alpha"]).shape == (1, 16)
    assert len(ollama.recorded("/api/embed")) == 2


def test_a_connection_reset_every_time_is_a_provider_error(ollama) -> None:
    ollama.fail_next("reset", times=10)
    with pytest.raises(ProviderError) as info:
        embedder(ollama, retries=1).embed(["alpha"])
    assert info.value.details["reason"] == "connection_broken"
    assert len(ollama.recorded("/api/embed")) == 2


def test_an_unknown_model_says_to_pull_it(ollama) -> None:
    with pytest.raises(ProviderError) as info:
        embedder(ollama, "no-such-model").embed(["alpha"])
    assert info.value.details["reason"] == "model_not_found"
    assert "ollama pull no-such-model:latest" in info.value.message
    assert len(ollama.recorded("/api/embed")) == 1


def test_a_slow_server_times_out_without_retry(ollama) -> None:
    ollama.fail_next("slow", delay_s=10)
    with pytest.raises(ProviderError) as info:
        embedder(ollama, timeout_s=0.3).embed(["alpha"])
    assert info.value.details["reason"] == "timeout"
    assert "within 0.3 s" in info.value.message
    assert len(ollama.recorded("/api/embed")) == 1


def test_an_unreachable_host_is_backend_unavailable() -> None:
    host = closed_port_url()
    with pytest.raises(BackendUnavailable) as info:
        OllamaEmbedder("nomic-embed-text", host=host, retry_wait_s=0).embed(["alpha"])
    assert info.value.details["reason"] == "unreachable"
    assert host in info.value.message and "KG_OLLAMA_HOST" in info.value.message
    assert info.value.__cause__ is not None


# --- the registry -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "canonical"),
    [
        ("nomic-embed-text:latest", "ollama:nomic-embed-text:latest"),
        ("nomic-embed-text", "ollama:nomic-embed-text:latest"),
        ("ollama:nomic-embed-text", "ollama:nomic-embed-text:latest"),
        ("ollama:nomic-embed-text:v1.5", "ollama:nomic-embed-text:v1.5"),
        ("mxbai:v1", "ollama:mxbai:v1"),
        ("local:all-MiniLM-L6-v2", "local:all-MiniLM-L6-v2"),
        ("fake:hash-64", "fake:hash-64"),
    ],
)
def test_canonical_model_name(name: str, canonical: str) -> None:
    assert canonical_model_name(name) == canonical


def test_registry_makes_ollama_embedders_for_ollama_and_bare_names(ollama) -> None:
    bare = make_embedder("fake-embed:latest", host=ollama.url, batch_size=4)
    assert isinstance(bare, OllamaEmbedder)
    assert (bare.name, bare.host, bare.batch_size) == ("ollama:fake-embed:latest", ollama.url, 4)
    assert make_embedder("ollama:fake-embed", host=ollama.url, batch_size=4) is bare
    assert make_embedder("fake-embed", host=ollama.url, batch_size=8) is not bare
    assert bare.embed(["alpha"]).shape == (1, 16)


@pytest.mark.parametrize("name", ["ollama:", "ollama: x", "ollama:x:", ""])
def test_registry_refuses_bad_ollama_names(name: str) -> None:
    with pytest.raises(InvalidInput):
        make_embedder(name)


# --- the test server itself ---------------------------------------------------------------------


def test_the_test_server_speaks_ollamas_model_endpoints(ollama_server: str, ollama) -> None:
    import ollama as ollama_client

    assert ollama_server == ollama.url and ollama_server.startswith("http://127.0.0.1:")
    client = ollama_client.Client(host=ollama_server)
    names = {model.model for model in client.list().models}
    assert {"nomic-embed-text:latest", "llama3.2:latest"} <= names
    shown = client.show("nomic-embed-text")
    assert shown.modelinfo["bert.embedding_length"] == 384
    with pytest.raises(ollama_client.ResponseError) as info:
        client.show("missing")
    assert info.value.status_code == 404
    assert len(client.embeddings(model="all-minilm", prompt="hello").embedding) == 384
    client.close()


def test_an_ollama_model_answering_vectors_over_the_dimension_bound_is_refused() -> None:
    from kg.providers.base import MAX_EMBEDDING_DIM
    from kg.providers.fake import FakeEmbedder
    from tests.ollama_server import OllamaTestServer

    with OllamaTestServer(embedders={"huge:latest": FakeEmbedder(dim=MAX_EMBEDDING_DIM + 1)}) as server:
        embedder = make_embedder("huge:latest", host=server.url)
        with pytest.raises(InvalidInput) as info:
            embedder.embed(["alpha"])
    assert str(MAX_EMBEDDING_DIM) in info.value.message
    assert info.value.details["max_dim"] == MAX_EMBEDDING_DIM
    assert embedder.dim == 0  # not learnt
