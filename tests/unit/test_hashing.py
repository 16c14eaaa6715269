"""Content hashes: exact digests, canonical form, and sensitivity to every input."""

from __future__ import annotations

import hashlib
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kg.errors import InvalidInput
from kg.text.hashing import content_key, sha256_text


def test_sha256_text_known_values() -> None:
    assert sha256_text("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert sha256_text("abc") == (
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    )


def test_sha256_text_hashes_utf8_bytes() -> None:
    text = "naïve 猫 👋🏻"
    assert sha256_text(text) == hashlib.sha256(text.encode("utf-8")).hexdigest()
    assert sha256_text("e\u0301") != sha256_text("\u00e9")  # no normalisation


def test_sha256_text_lone_surrogate_is_invalid_input() -> None:
    with pytest.raises(InvalidInput):
        sha256_text("a\ud800b")


def test_content_key_is_sha256_of_canonical_json() -> None:
    key = content_key({"title": "Électrons", "body": "b"}, chunking="c1", model="m1")
    canonical = '{"chunking":"c1","fields":{"body":"b","title":"Électrons"},"model":"m1"}'
    assert key == hashlib.sha256(canonical.encode("utf-8")).hexdigest()
    assert json.loads(canonical)  # the canonical form is valid JSON


def test_content_key_ignores_field_order() -> None:
    a = content_key({"title": "T", "body": "B"}, chunking="c", model="m")
    b = content_key({"body": "B", "title": "T"}, chunking="c", model="m")
    assert a == b


def test_content_key_changes_with_each_input() -> None:
    base = content_key({"body": "text"}, chunking="c", model="m")
    assert content_key({"body": "text!"}, chunking="c", model="m") != base
    assert content_key({"text": "text"}, chunking="c", model="m") != base
    assert content_key({"body": "text"}, chunking="c2", model="m") != base
    assert content_key({"body": "text"}, chunking="c", model="m2") != base
    assert content_key({"body": "text", "title": ""}, chunking="c", model="m") != base


def test_content_key_has_no_ambiguous_concatenation() -> None:
    a = content_key({"a": "bc"}, chunking="c", model="m")
    b = content_key({"ab": "c"}, chunking="c", model="m")
    assert a != b


def test_content_key_refuses_non_strings() -> None:
    with pytest.raises(InvalidInput):
        content_key({"body": 1}, chunking="c", model="m")  # type: ignore[dict-item]
    with pytest.raises(InvalidInput):
        content_key({"body": "x"}, chunking=None, model="m")  # type: ignore[arg-type]


@given(
    fields=st.dictionaries(st.text(max_size=5), st.text(max_size=20), max_size=4),
    chunking=st.text(max_size=10),
    model=st.text(max_size=10),
)
def test_content_key_is_64_hex_and_deterministic(
    fields: dict[str, str], chunking: str, model: str
) -> None:
    key = content_key(fields, chunking=chunking, model=model)
    assert len(key) == 64 and set(key) <= set("0123456789abcdef")
    reordered = dict(reversed(list(fields.items())))
    assert content_key(reordered, chunking=chunking, model=model) == key
