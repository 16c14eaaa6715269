"""Chunkers: exact values of known failures and property tests of the invariants every splitter keeps."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from kg.errors import InvalidInput
from kg.text.chunking import (
    DEFAULT_SEPARATORS,
    Chunk,
    ChunkingConfig,
    Overlap,
    check_chunking_settings,
    count_words,
    fixed_size_split,
    recursive_split,
    resolve_overlap,
    word_split,
)

# --- helpers ------------------------------------------------------------------------------


def toy_tokens(text: str) -> int:
    """A WordPiece-like counter: 4-letter groups of ASCII letters, any other non-space char."""
    return len(re.findall(r"[A-Za-z]{1,4}|[^\sA-Za-z]", text))


def squared_length(text: str) -> int:
    """A counter that is not additive over pieces (the sum of parts underestimates)."""
    return len(text) ** 2


def never_called(text: str) -> int:
    """A length that fails the test if the chunker measures anything."""
    raise AssertionError("the chunker did work before validating its settings")


def rebuild(text: str, chunks: list[Chunk]) -> str:
    """Concatenate the chunks, dropping each chunk's overlap with the previous one."""
    out = []
    end = 0
    for chunk in chunks:
        out.append(text[max(end, chunk.start) : chunk.end])
        end = max(end, chunk.end)
    return "".join(out)


def assert_invariants(
    text: str, chunks: list[Chunk], chunk_size: int, measure: Callable[[str], int]
) -> None:
    """Check every guarantee of the module docstring."""
    if not text or text.isspace():
        assert chunks == []
        return
    covered = [False] * len(text)
    previous: Chunk | None = None
    for i, chunk in enumerate(chunks):
        assert chunk.index == i
        assert 0 <= chunk.start < chunk.end <= len(text)
        assert chunk.text == text[chunk.start : chunk.end]
        assert chunk.text.strip(), chunk
        assert measure(chunk.text) <= chunk_size, chunk
        assert "\ufffd" not in chunk.text or "\ufffd" in text
        if previous is not None:
            assert chunk.start >= previous.start
            assert chunk.end >= previous.end
            assert (chunk.start, chunk.end) != (previous.start, previous.end)
        for j in range(chunk.start, chunk.end):
            covered[j] = True
        previous = chunk
    missing = [j for j, char in enumerate(text) if not char.isspace() and not covered[j]]
    assert missing == [], f"characters at {missing[:10]} are in no chunk"


FRAGMENTS = [
    "a",
    "word",
    "Python",
    "naïve",
    "e\u0301",  # e + combining acute accent
    "猫",
    "人工智能技术发展迅速",
    "👋🏻",  # emoji + skin-tone modifier
    "👍🏽",
    "👨\u200d👩\u200d👧",  # zero-width-joiner family
    "🇫🇷",
    " ",
    "  ",
    "\n",
    "\n\n",
    "\r\n",
    ". ",
    "\t",
    "\u3000",
    "。",
    "x" * 40,
    "=" * 30,
    "https://example.org/a/very/long/path?query=1",
]

texts = st.one_of(
    st.lists(st.sampled_from(FRAGMENTS), max_size=60).map("".join),
    st.text(max_size=300),
    st.text(alphabet=st.sampled_from("猫人工智能👋🏻e\u0301 \n."), max_size=200),
)


@st.composite
def size_and_overlap(draw: st.DrawFn, max_size: int = 60) -> tuple[int, int]:
    """A valid (chunk_size, overlap) pair."""
    size = draw(st.integers(min_value=1, max_value=max_size))
    return size, draw(st.integers(min_value=0, max_value=size - 1))


# --- settings (a splitter that never ends) ------------------------------------

BAD_SETTINGS = [(5, 5), (5, 6), (0, 0), (0, 2), (5, -1), (-3, 0)]


@pytest.mark.parametrize(("chunk_size", "overlap"), BAD_SETTINGS)
@pytest.mark.parametrize(
    "split",
    [
        lambda text, **kw: recursive_split(text, length=never_called, **kw),
        lambda text, **kw: recursive_split(text, **kw),
        lambda text, **kw: fixed_size_split(text, length=never_called, **kw),
        lambda text, **kw: fixed_size_split(text, **kw),
        word_split,
    ],
    ids=["recursive-tokens", "recursive-chars", "fixed-tokens", "fixed-chars", "words"],
)
def test_case1_bad_settings_refused_before_any_work_in_every_unit(
    split: Callable[..., list[Chunk]], chunk_size: int, overlap: int
) -> None:
    with pytest.raises(InvalidInput) as info:
        split("w1 w2 w3 w4 w5 w6 w7 " * 100, chunk_size=chunk_size, overlap=overlap)
    message = info.value.message
    assert "chunk size" in message and "chunk overlap" in message
    assert str(chunk_size) in message and str(overlap) in message
    assert info.value.details == {"chunk_size": chunk_size, "overlap": overlap}


def test_case1_overlap_equal_to_size_message() -> None:
    with pytest.raises(InvalidInput) as info:
        check_chunking_settings(64, 64)
    assert info.value.message == "chunk overlap (64) must be smaller than chunk size (64)"


@pytest.mark.parametrize(("chunk_size", "overlap"), [(5.0, 1), (5, True), ("5", 1)])
def test_non_integer_settings_refused(chunk_size: object, overlap: object) -> None:
    with pytest.raises(InvalidInput, match="chunk size .* chunk overlap"):
        check_chunking_settings(chunk_size, overlap)  # type: ignore[arg-type]


def test_case1_word_mode_seven_words_size5_overlap2() -> None:
    text = "w1 w2 w3 w4 w5 w6 w7"
    chunks = word_split(text, chunk_size=5, overlap=2)
    assert [c.text for c in chunks] == ["w1 w2 w3 w4 w5", "w4 w5 w6 w7"]
    assert [(c.start, c.end) for c in chunks] == [(0, 14), (9, 20)]


@pytest.mark.parametrize(("chunk_size", "overlap"), BAD_SETTINGS)
def test_case1_config_refuses_bad_settings_naming_both(chunk_size: int, overlap: int) -> None:
    with pytest.raises(ValidationError) as info:
        ChunkingConfig(chunk_size=chunk_size, overlap=overlap)
    text = str(info.value)
    assert "chunk size" in text and "chunk overlap" in text


# --- unbounded recursion -------------------------------------------------------


@pytest.mark.parametrize(("overlap", "n_chunks"), [(0, 100), (10, 111), (99, 9901)])
def test_case2_no_whitespace_with_paragraph_separator_only_terminates(
    overlap: int, n_chunks: int
) -> None:
    text = "".join(chr(ord("a") + i % 26) for i in range(10_000))
    chunks = recursive_split(text, chunk_size=100, overlap=overlap, separators=("\n\n",))
    assert len(chunks) == n_chunks
    assert all(len(c.text) <= 100 for c in chunks)
    assert all(len(c.text) == 100 for c in chunks[:-1])
    assert chunks[0].start == 0 and chunks[-1].end == 10_000
    assert rebuild(text, chunks) == text
    assert_invariants(text, chunks, 100, len)


def test_case2_same_in_tokens() -> None:
    text = "ab=" * 3_000
    chunks = recursive_split(
        text, chunk_size=100, overlap=10, length=toy_tokens, separators=("\n\n",)
    )
    assert rebuild(text, chunks) == text
    assert_invariants(text, chunks, 100, toy_tokens)


def test_separators_without_empty_string_still_hard_split() -> None:
    text = "abcdefghij" * 3
    chunks = recursive_split(text, chunk_size=10, overlap=0, separators=())
    assert [c.text for c in chunks] == ["abcdefghij"] * 3


def test_separators_must_be_a_sequence_of_strings() -> None:
    with pytest.raises(InvalidInput):
        recursive_split("a b", chunk_size=2, overlap=0, separators=" ")  # type: ignore[arg-type]


# --- a character cut in half ---------------------------------------------------


def test_case3_token_mode_size2_mixed_scripts() -> None:
    text = "猫猫猫 👋🏻 naïve"
    chunks = recursive_split(text, chunk_size=2, overlap=0, length=toy_tokens)
    assert_invariants(text, chunks, 2, toy_tokens)
    assert all("\ufffd" not in c.text for c in chunks)


def test_case3_word_mode_spaceless_cjk_falls_back_to_characters() -> None:
    text = "人工智能技术发展迅速"
    chunks = word_split(text, chunk_size=5, overlap=2)
    assert [c.text for c in chunks] == ["人工智能技", "能技术发展", "发展迅速"]
    assert [(c.start, c.end) for c in chunks] == [(0, 5), (3, 8), (6, 10)]


def test_case3_cjk_mixed_with_latin_words() -> None:
    chunks = word_split("Python 是 一种语言 ok", chunk_size=3, overlap=0)
    assert [c.text for c in chunks] == ["Python 是 一", "种语言", "ok"]


def test_case3_hard_split_keeps_emoji_modifiers_and_combining_marks() -> None:
    text = "👋🏻👋🏻e\u0301e\u0301👨\u200d👩\u200d👧"
    chunks = recursive_split(text, chunk_size=5, overlap=0)
    assert [c.text for c in chunks] == ["👋🏻👋🏻", "e\u0301e\u0301", "👨\u200d👩\u200d👧"]


def test_case3_cluster_longer_than_size_is_cut_at_code_points() -> None:
    chunks = fixed_size_split("👋🏻", chunk_size=1, overlap=0)
    assert [c.text for c in chunks] == ["👋", "🏻"]


# --- structure-aware markdown comes with the markdown splitter ----------------

# --- a document of only whitespace --------------------------------------------


@pytest.mark.parametrize("text", ["", " ", "   \n\t \n\n", "\u3000\u00a0\r\n"])
def test_case15_whitespace_only_gives_no_chunk(text: str) -> None:
    assert recursive_split(text, chunk_size=4, overlap=1) == []
    assert recursive_split(text, chunk_size=4, overlap=1, length=toy_tokens) == []
    assert fixed_size_split(text, chunk_size=4, overlap=1) == []
    assert word_split(text, chunk_size=4, overlap=1) == []
    assert ChunkingConfig(chunk_size=4, overlap=1).chunk(text, toy_tokens) == []


# --- recursive splitter behaviour -----------------------------------------------------------


def test_short_text_is_one_chunk() -> None:
    assert recursive_split("  Hello world.  ", chunk_size=50, overlap=5) == [
        Chunk(0, "Hello world.", 2, 14)
    ]


def test_paragraphs_kept_whole_when_they_fit() -> None:
    text = "First paragraph here.\n\nSecond paragraph here.\n\nThird one."
    chunks = recursive_split(text, chunk_size=25, overlap=0)
    assert [c.text for c in chunks] == [
        "First paragraph here.",
        "Second paragraph here.",
        "Third one.",
    ]


def test_sentences_then_words_for_a_long_paragraph() -> None:
    text = "One two three. Four five six. Seven eight nine ten eleven twelve."
    chunks = recursive_split(text, chunk_size=30, overlap=0)
    assert [c.text for c in chunks] == [
        "One two three. Four five six.",
        "Seven eight nine ten eleven",
        "twelve.",
    ]


def test_overlap_is_whole_trailing_pieces() -> None:
    text = "aa bb cc dd ee ff gg hh"
    chunks = recursive_split(text, chunk_size=9, overlap=3)
    assert [c.text for c in chunks] == ["aa bb cc", "cc dd ee", "ee ff gg", "gg hh"]


def test_sentence_separator_stays_with_its_sentence() -> None:
    chunks = recursive_split("Alpha beta. Gamma delta.", chunk_size=12, overlap=0)
    assert [c.text for c in chunks] == ["Alpha beta.", "Gamma delta."]


def test_token_mode_non_additive_counter_still_fits() -> None:
    text = "ab cd ef gh ij kl mn op"
    chunks = recursive_split(text, chunk_size=30, overlap=9, length=squared_length)
    assert_invariants(text, chunks, 30, squared_length)


# --- fixed-size splitter --------------------------------------------------------------------


def test_fixed_size_windows_in_characters() -> None:
    chunks = fixed_size_split("abcdefghij", chunk_size=4, overlap=1)
    assert [(c.text, c.start, c.end) for c in chunks] == [
        ("abcd", 0, 4),
        ("defg", 3, 7),
        ("ghij", 6, 10),
    ]


def test_fixed_size_windows_in_tokens() -> None:
    text = "alphabeta gamma delta epsilon"
    chunks = fixed_size_split(text, chunk_size=3, overlap=1, length=toy_tokens)
    assert_invariants(text, chunks, 3, toy_tokens)
    assert rebuild(text, chunks).replace(" ", "") == text.replace(" ", "")


def test_fixed_size_drops_window_adding_only_whitespace() -> None:
    chunks = fixed_size_split("abcd      ", chunk_size=4, overlap=1)
    assert [c.text for c in chunks] == ["abcd"]


# --- ChunkingConfig -------------------------------------------------------------------------


def test_config_defaults_and_fingerprint() -> None:
    config = ChunkingConfig()
    assert (config.splitter, config.chunk_size, config.overlap, config.unit) == (
        "recursive",
        512,
        64,
        "tokens",
    )
    assert config.fingerprint() == "recursive/v1/tokens/size=512/overlap=64"
    fixed = ChunkingConfig(unit="chars", splitter="fixed_size", chunk_size=100, overlap=0)
    assert fixed.fingerprint() == "fixed_size/v1/chars/size=100/overlap=0"


def test_config_fingerprint_changes_with_every_setting() -> None:
    variants = [
        ChunkingConfig(),
        ChunkingConfig(splitter="fixed_size"),
        ChunkingConfig(chunk_size=256),
        ChunkingConfig(overlap=32),
        ChunkingConfig(unit="chars"),
    ]
    assert len({v.fingerprint() for v in variants}) == len(variants)


def test_config_is_frozen_and_strict_about_fields() -> None:
    config = ChunkingConfig()
    with pytest.raises(ValidationError):
        config.chunk_size = 5  # type: ignore[misc]
    with pytest.raises(ValidationError):
        ChunkingConfig(size=5)  # type: ignore[call-arg]
    with pytest.raises(ValidationError):
        ChunkingConfig(unit="bytes")  # type: ignore[arg-type]


def test_config_dispatches() -> None:
    text = "aa bb cc dd ee ff gg hh"
    chars = ChunkingConfig(unit="chars", chunk_size=9, overlap=3)
    assert chars.chunk(text) == recursive_split(text, chunk_size=9, overlap=3)
    fixed = ChunkingConfig(unit="chars", splitter="fixed_size", chunk_size=9, overlap=3)
    assert fixed.chunk(text) == fixed_size_split(text, chunk_size=9, overlap=3)
    tokens = ChunkingConfig(chunk_size=3, overlap=1)
    assert tokens.chunk(text, toy_tokens) == recursive_split(
        text, chunk_size=3, overlap=1, length=toy_tokens
    )


def test_config_tokens_need_a_counter() -> None:
    with pytest.raises(InvalidInput, match="token counter"):
        ChunkingConfig().chunk("some text")


# --- properties -----------------------------------------------------------------------------

PROPERTY_SETTINGS = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@PROPERTY_SETTINGS
@given(text=texts, sizes=size_and_overlap())
def test_recursive_chars_invariants(text: str, sizes: tuple[int, int]) -> None:
    chunks = recursive_split(text, chunk_size=sizes[0], overlap=sizes[1])
    assert_invariants(text, chunks, sizes[0], len)


@PROPERTY_SETTINGS
@given(text=texts, sizes=size_and_overlap(max_size=20))
def test_recursive_tokens_invariants(text: str, sizes: tuple[int, int]) -> None:
    chunks = recursive_split(text, chunk_size=sizes[0], overlap=sizes[1], length=toy_tokens)
    assert_invariants(text, chunks, sizes[0], toy_tokens)


@PROPERTY_SETTINGS
@given(text=texts, sizes=size_and_overlap(max_size=40))
def test_recursive_non_additive_length_invariants(text: str, sizes: tuple[int, int]) -> None:
    chunks = recursive_split(text, chunk_size=sizes[0], overlap=sizes[1], length=squared_length)
    assert_invariants(text, chunks, sizes[0], squared_length)


@PROPERTY_SETTINGS
@given(
    text=texts,
    sizes=size_and_overlap(),
    separators=st.lists(st.sampled_from(DEFAULT_SEPARATORS + ("。", "x")), max_size=4),
)
def test_recursive_any_separators_invariants(
    text: str, sizes: tuple[int, int], separators: list[str]
) -> None:
    chunks = recursive_split(
        text, chunk_size=sizes[0], overlap=sizes[1], separators=tuple(separators)
    )
    assert_invariants(text, chunks, sizes[0], len)


@PROPERTY_SETTINGS
@given(
    text=st.text(alphabet=st.characters(blacklist_categories=["Z", "Cc", "Cs"]), max_size=400),
    sizes=size_and_overlap(),
)
def test_no_whitespace_rebuilds_exactly(text: str, sizes: tuple[int, int]) -> None:
    for chunks in (
        recursive_split(text, chunk_size=sizes[0], overlap=sizes[1]),
        fixed_size_split(text, chunk_size=sizes[0], overlap=sizes[1]),
    ):
        assert rebuild(text, chunks) == text
        assert_invariants(text, chunks, sizes[0], len)


@PROPERTY_SETTINGS
@given(text=texts, sizes=size_and_overlap())
def test_fixed_size_chars_invariants(text: str, sizes: tuple[int, int]) -> None:
    chunks = fixed_size_split(text, chunk_size=sizes[0], overlap=sizes[1])
    assert_invariants(text, chunks, sizes[0], len)


@PROPERTY_SETTINGS
@given(text=texts, sizes=size_and_overlap(max_size=20))
def test_fixed_size_tokens_invariants(text: str, sizes: tuple[int, int]) -> None:
    chunks = fixed_size_split(text, chunk_size=sizes[0], overlap=sizes[1], length=toy_tokens)
    assert_invariants(text, chunks, sizes[0], toy_tokens)


@PROPERTY_SETTINGS
@given(text=texts, sizes=size_and_overlap(max_size=12))
def test_word_split_invariants(text: str, sizes: tuple[int, int]) -> None:
    chunk_size, overlap = sizes
    chunks = word_split(text, chunk_size=chunk_size, overlap=overlap)
    assert_invariants(text, chunks, 10**9, len)
    words = word_split(text, chunk_size=1, overlap=0)  # one chunk per word
    n_words = len(words)
    step = chunk_size - overlap
    expected = 0 if n_words == 0 else 1 + max(0, -(-(n_words - chunk_size) // step))
    assert len(chunks) == expected
    for k, chunk in enumerate(chunks):
        first = k * step
        last = min(first + chunk_size, n_words) - 1
        assert (chunk.start, chunk.end) == (words[first].start, words[last].end)
    if chunks:
        assert chunks[-1].end == words[-1].end


# --- a splitter that never ends, in every unit and splitter, through the configuration ---------------------

ALL_SPLITTERS = ["recursive", "fixed_size", "markdown", "code", "words"]


@pytest.mark.parametrize(("chunk_size", "overlap"), BAD_SETTINGS)
@pytest.mark.parametrize("unit", ["tokens", "chars", "words"])
@pytest.mark.parametrize("splitter", ALL_SPLITTERS)
def test_case1_config_refuses_bad_settings_in_every_unit_and_splitter(
    splitter: str, unit: str, chunk_size: int, overlap: int
) -> None:
    with pytest.raises(ValidationError) as info:
        ChunkingConfig(splitter=splitter, unit=unit, chunk_size=chunk_size, overlap=overlap)
    text = str(info.value)
    assert "chunk size" in text and "chunk overlap" in text
    assert str(chunk_size) in text and str(overlap) in text


@pytest.mark.parametrize(("chunk_size", "overlap"), [(5, 5), (5, 6), (0, 0), (5, -1)])
def test_case1_word_mode_config_refuses_naming_both(chunk_size: int, overlap: int) -> None:
    with pytest.raises(ValidationError, match=r"chunk (size|overlap) .*chunk (size|overlap)"):
        ChunkingConfig(splitter="words", chunk_size=chunk_size, overlap=overlap)
    with pytest.raises(ValidationError, match=r"chunk (size|overlap) .*chunk (size|overlap)"):
        ChunkingConfig(
            splitter="words", chunk_size=chunk_size, overlap={"type": "Tokens", "value": overlap}
        )


def test_case1_word_mode_config_seven_words_size5_overlap2() -> None:
    config = ChunkingConfig(splitter="words", chunk_size=5, overlap=2)
    assert config.unit == "words"
    chunks = config.chunk("w1 w2 w3 w4 w5 w6 w7")
    assert [c.text for c in chunks] == ["w1 w2 w3 w4 w5", "w4 w5 w6 w7"]
    assert [(c.start, c.end) for c in chunks] == [(0, 14), (9, 20)]


def test_case1_edge_in_chars_and_tokens_units() -> None:
    text = "w1 w2 w3 w4 w5 w6 w7"
    chars = ChunkingConfig(splitter="fixed_size", unit="chars", chunk_size=5, overlap=2)
    assert [c.text for c in chars.chunk(text)] == [
        "w1 w2",
        "w2 w3",
        "w3 w4",
        "w4 w5",
        "w5 w6",
        "w6 w7",
    ]
    tokens = ChunkingConfig(splitter="recursive", chunk_size=5, overlap=2)
    chunks = tokens.chunk(text, toy_tokens)
    assert_invariants(text, chunks, 5, toy_tokens)


def test_words_unit_with_the_recursive_splitter_counts_words() -> None:
    text = "one two three four five six seven eight nine ten"
    config = ChunkingConfig(splitter="recursive", unit="words", chunk_size=4, overlap=1)
    chunks = config.chunk(text)
    assert [c.text for c in chunks] == [
        "one two three four",
        "four five six seven",
        "seven eight nine ten",
    ]


def test_words_splitter_refuses_another_unit() -> None:
    with pytest.raises(ValidationError, match="words splitter counts words"):
        ChunkingConfig(splitter="words", unit="chars", chunk_size=5, overlap=1)


# --- overlap as a count or a percentage ------------------------------------------------------


@pytest.mark.parametrize(
    ("chunk_size", "overlap", "expected"),
    [
        (512, {"type": "Tokens", "value": 64}, 64),
        (512, {"type": "Percentage", "value": 0.125}, 64),
        (512, {"type": "Percentage", "value": 0.1}, 51),
        (100, {"type": "Percentage", "value": 0.29}, 29),  # not 28: no float rounding error
        (10, {"type": "Percentage", "value": 0.5}, 5),
        (1, {"type": "Percentage", "value": 0.5}, 0),
        (7, {"type": "Percentage", "value": 0}, 0),
        (7, {"type": "Percentage", "value": 0.0}, 0),
        (7, 3, 3),
    ],
)
def test_overlap_count_or_percentage(chunk_size: int, overlap: object, expected: int) -> None:
    config = ChunkingConfig(unit="chars", chunk_size=chunk_size, overlap=overlap)
    assert config.overlap_units == expected
    assert resolve_overlap(chunk_size, overlap) == expected  # type: ignore[arg-type]


def test_tokens_overlap_object_is_stored_as_its_count() -> None:
    config = ChunkingConfig(overlap={"type": "Tokens", "value": 64})
    assert config.overlap == 64
    assert config == ChunkingConfig(overlap=64)
    assert ChunkingConfig(overlap=Overlap(type="Tokens", value=32)).overlap == 32


def test_percentage_overlap_round_trips_and_splits_like_its_count() -> None:
    config = ChunkingConfig(
        unit="chars", chunk_size=10, overlap={"type": "Percentage", "value": 0.3}
    )
    assert config.model_dump()["overlap"] == {"type": "Percentage", "value": 0.3}
    assert ChunkingConfig.model_validate(config.model_dump()) == config
    text = "abcdefghijklmnopqrstuvwxyz"
    assert config.chunk(text) == recursive_split(text, chunk_size=10, overlap=3)
    count = ChunkingConfig(unit="chars", chunk_size=10, overlap=3)
    assert config.fingerprint() == count.fingerprint()


@pytest.mark.parametrize("value", [0.51, 0.7, 1, -0.1, float("nan"), float("inf")])
def test_percentage_outside_range_refused_naming_both(value: float) -> None:
    overlap = {"type": "Percentage", "value": value}
    with pytest.raises(ValidationError) as info:
        ChunkingConfig(chunk_size=512, overlap=overlap)
    text = str(info.value)
    assert "chunk overlap percentage" in text and "chunk size is 512" in text
    with pytest.raises(InvalidInput) as error:
        resolve_overlap(512, overlap)
    assert "chunk overlap" in error.value.message and "chunk size" in error.value.message


@pytest.mark.parametrize(
    "overlap",
    [
        {"type": "Percentage", "value": True},
        {"type": "Percentage", "value": "0.1"},
        {"type": "Percent", "value": 0.1},
        {"type": "Tokens"},
        {"type": "Tokens", "value": 64, "extra": 1},
        {"type": "Tokens", "value": 6.5},
        {"type": "Tokens", "value": True},
        {"value": 0.1},
    ],
)
def test_malformed_overlap_objects_refused(overlap: dict) -> None:
    with pytest.raises(ValidationError):
        ChunkingConfig(chunk_size=512, overlap=overlap)
    with pytest.raises(InvalidInput, match="chunk overlap"):
        resolve_overlap(512, overlap)


def test_tokens_overlap_object_still_checked_against_size() -> None:
    with pytest.raises(
        ValidationError, match=r"chunk overlap \(512\) must be smaller than chunk size \(512\)"
    ):
        ChunkingConfig(chunk_size=512, overlap={"type": "Tokens", "value": 512})


# --- fingerprints and capping ---------------------------------------------------------------


def test_fingerprints_of_existing_configs_are_unchanged() -> None:
    assert ChunkingConfig().fingerprint() == "recursive/v1/tokens/size=512/overlap=64"
    assert (
        ChunkingConfig(unit="chars", splitter="fixed_size", chunk_size=100, overlap=0).fingerprint()
        == "fixed_size/v1/chars/size=100/overlap=0"
    )


def test_fingerprints_of_new_options_are_distinct() -> None:
    variants = [
        ChunkingConfig(),
        ChunkingConfig(splitter="markdown"),
        ChunkingConfig(splitter="code"),
        ChunkingConfig(splitter="words"),
        ChunkingConfig(unit="words"),
        ChunkingConfig(overlap={"type": "Percentage", "value": 0.25}),
    ]
    assert len({v.fingerprint() for v in variants}) == len(variants)
    assert ChunkingConfig(splitter="words").fingerprint() == "words/v1/words/size=512/overlap=64"


def test_capped_keeps_a_percentage_and_halves_a_count() -> None:
    pct = ChunkingConfig(chunk_size=512, overlap={"type": "Percentage", "value": 0.25})
    capped = pct.capped(254)
    assert (capped.chunk_size, capped.overlap_units) == (254, 63)
    count = ChunkingConfig(chunk_size=512, overlap=200).capped(254)
    assert (count.chunk_size, count.overlap_units) == (254, 127)
    small = ChunkingConfig(chunk_size=100, overlap=10)
    assert small.capped(254) is small


# --- every splitter through the config keeps the invariants --------------------------------


@PROPERTY_SETTINGS
@given(
    text=texts,
    splitter=st.sampled_from(ALL_SPLITTERS),
    unit=st.sampled_from(["tokens", "chars", "words"]),
    size=st.integers(min_value=1, max_value=30),
    pct=st.sampled_from([0.0, 0.1, 0.25, 0.5]),
)
def test_config_invariants_every_splitter_unit_and_percentage(
    text: str, splitter: str, unit: str, size: int, pct: float
) -> None:
    if splitter == "words":
        unit = "words"
    config = ChunkingConfig(
        splitter=splitter, unit=unit, chunk_size=size, overlap={"type": "Percentage", "value": pct}
    )
    measure = {"tokens": toy_tokens, "chars": len, "words": count_words}[unit]
    chunks = config.chunk(text, toy_tokens)
    # a single word is never cut in word mode, so only its count is bounded
    assert_invariants(text, chunks, size if splitter != "words" else 10**9, measure)
    if splitter == "words":
        assert all(count_words(c.text) <= size for c in chunks)


@pytest.mark.parametrize("size, overlap", [(1, 0), (3, 1), (5, 2), (8, 7), (10, 0)])
def test_word_chunk_count_is_the_length_of_word_split(size, overlap):
    from kg.text.chunking import word_chunk_count

    for n in (0, 1, 2, 5, 9, 10, 11, 23):
        text = " ".join(f"w{i}" for i in range(n)) + " 漢字"
        assert word_chunk_count(text, chunk_size=size, overlap=overlap) == \
            len(word_split(text, chunk_size=size, overlap=overlap))
