"""Content keys: the canonical JSON they hash is the same whichever encoder writes it, for every
character (a different key would embed every stored text again)."""

from __future__ import annotations

import hashlib
import json

import pytest

from kg.errors import InvalidInput
from kg.text.hashing import content_key


def _reference(fields: dict[str, str], chunking: str, model: str) -> str:
    document = {"chunking": chunking, "fields": fields, "model": model}
    text = json.dumps(document, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_every_character_hashes_as_the_canonical_json_of_the_standard_library():
    chars = [chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    for start in range(0, len(chars), 4096):
        text = "".join(chars[start:start + 4096])
        fields = {"content": text, "é title": 'a"b\\c/d\n', text[:3]: "x"}
        assert content_key(fields, chunking="words:150:0", model="m") == _reference(fields, "words:150:0", "m")


def test_a_lone_surrogate_is_refused():
    with pytest.raises(InvalidInput):
        content_key({"content": "a\ud800"}, chunking="words:150:0", model="m")
