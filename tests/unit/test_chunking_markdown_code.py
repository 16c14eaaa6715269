"""Structure-aware chunkers: the Markdown splitter (it must not drop text) and the code splitter.

Exact values for the cases, and property tests of the invariants every splitter keeps
(spans slice the source, no empty chunk, every non-space character covered, sizes kept),
plus the structural promises: no chunk crosses a heading, a fence that fits stays whole.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kg.errors import InvalidInput
from kg.text.chunking import (
    Chunk,
    ChunkingConfig,
    code_split,
    count_words,
    markdown_split,
    recursive_split,
)

# --- helpers ------------------------------------------------------------------------------


def toy_tokens(text: str) -> int:
    """A WordPiece-like counter: 4-letter groups of ASCII letters, any other non-space char."""
    return len(re.findall(r"[A-Za-z]{1,4}|[^\sA-Za-z]", text))


def squared_length(text: str) -> int:
    """A counter that is not additive over pieces."""
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
    """Check every guarantee of kg.text.chunking's module docstring."""
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
        if previous is not None:
            assert chunk.start >= previous.start
            assert chunk.end >= previous.end
            assert (chunk.start, chunk.end) != (previous.start, previous.end)
        for j in range(chunk.start, chunk.end):
            covered[j] = True
        previous = chunk
    missing = [j for j, char in enumerate(text) if not char.isspace() and not covered[j]]
    assert missing == [], f"characters at {missing[:10]} are in no chunk"


def texts_of(chunks: list[Chunk]) -> list[str]:
    return [c.text for c in chunks]


# --- a structure-aware splitter drops text ------------------------------------

CASE4 = "# Title\nintro\n```python\n# not a heading\nx = 1\n```\n## Part 2\nbody"
CASE4_UNCLOSED = "# Notes\nsetup:\n```bash\nmake install\n## Important\ncritical"


def test_case4_fenced_hash_line_is_not_a_heading() -> None:
    chunks = markdown_split(CASE4, chunk_size=1000, overlap=0)
    assert texts_of(chunks) == [
        "# Title\nintro\n```python\n# not a heading\nx = 1\n```",
        "## Part 2\nbody",
    ]
    assert [(c.start, c.end) for c in chunks] == [(0, 49), (50, 64)]
    assert "# not a heading" in chunks[0].text


@pytest.mark.parametrize(
    "config",
    [
        ChunkingConfig(splitter="markdown", unit="chars", chunk_size=1000, overlap=0),
        ChunkingConfig(splitter="markdown", unit="tokens", chunk_size=100, overlap=10),
        ChunkingConfig(splitter="markdown", unit="words", chunk_size=50, overlap=5),
    ],
    ids=["chars", "tokens", "words"],
)
def test_case4_two_sections_in_every_unit(config: ChunkingConfig) -> None:
    chunks = config.chunk(CASE4, toy_tokens)
    assert texts_of(chunks) == [
        "# Title\nintro\n```python\n# not a heading\nx = 1\n```",
        "## Part 2\nbody",
    ]


@pytest.mark.parametrize("chunk_size", [1, 3, 5, 8, 13, 20, 40, 1000])
@pytest.mark.parametrize("overlap_fraction", [0.0, 0.3, 0.5])
def test_case4_unclosed_fence_loses_nothing(chunk_size: int, overlap_fraction: float) -> None:
    overlap = min(chunk_size - 1, int(chunk_size * overlap_fraction))
    chunks = markdown_split(CASE4_UNCLOSED, chunk_size=chunk_size, overlap=overlap)
    assert_invariants(CASE4_UNCLOSED, chunks, chunk_size, len)
    assert any("critical" in c.text for c in chunks) or chunk_size < len("critical")


def test_case4_unclosed_fence_runs_to_the_end_as_in_commonmark() -> None:
    chunks = markdown_split(CASE4_UNCLOSED, chunk_size=1000, overlap=0)
    assert texts_of(chunks) == [CASE4_UNCLOSED]
    assert "critical" in chunks[0].text


def test_case4_unclosed_fence_in_small_chunks_keeps_critical_whole() -> None:
    chunks = markdown_split(CASE4_UNCLOSED, chunk_size=20, overlap=0)
    # the unclosed fence alone is too long: it is split by lines, and nothing is lost
    assert texts_of(chunks) == [
        "# Notes\nsetup:",
        "```bash",
        "make install",
        "## Important",
        "critical",
    ]


def test_case4_same_through_the_config_in_tokens() -> None:
    config = ChunkingConfig(splitter="markdown", chunk_size=4, overlap=1)
    chunks = config.chunk(CASE4_UNCLOSED, toy_tokens)
    assert_invariants(CASE4_UNCLOSED, chunks, 4, toy_tokens)
    assert any("critical" in c.text for c in chunks)


# --- Markdown: headings and fences ----------------------------------------------------------


def test_text_before_the_first_heading_is_its_own_section() -> None:
    text = "Preface line.\n\n# One\nfirst\n## Two\nsecond\n### Three\nthird"
    assert texts_of(markdown_split(text, chunk_size=500, overlap=0)) == [
        "Preface line.",
        "# One\nfirst",
        "## Two\nsecond",
        "### Three\nthird",
    ]


@pytest.mark.parametrize(
    ("line", "is_heading"),
    [
        ("# h", True),
        ("###### six", True),
        ("#", True),
        ("##\t tab", True),
        ("   ### three spaces", True),
        ("    # four spaces is indented code", False),
        ("####### seven", False),
        ("#hashtag", False),
        ("text # not at start", False),
    ],
)
def test_atx_heading_rule(line: str, is_heading: bool) -> None:
    text = f"before\n{line}\nafter"
    chunks = markdown_split(text, chunk_size=500, overlap=0)
    if is_heading:
        assert texts_of(chunks) == ["before", f"{line.strip()}\nafter"]
    else:
        assert texts_of(chunks) == [text]


@pytest.mark.parametrize(
    "fence",
    [
        "```\n# inside\n```",
        "```python title=\"a.py\"\n# inside\n```",
        "~~~\n# inside\n~~~",
        "~~~ruby {.class}\n# inside\n~~~~~",
        "````\n```\n# inside\n````",
        "   ```\n# inside\n   ```",
        "~~~\n```\n# inside\n~~~",
    ],
    ids=[
        "plain",
        "info-string",
        "tildes",
        "tildes-longer-close",
        "nested-shorter",
        "indented",
        "mixed",
    ],
)
def test_no_heading_inside_any_fence(fence: str) -> None:
    text = f"# Top\n{fence}\n## Next\nend"
    chunks = markdown_split(text, chunk_size=500, overlap=0)
    assert texts_of(chunks) == [f"# Top\n{fence}", "## Next\nend"]


def test_backtick_info_string_with_backtick_is_not_a_fence() -> None:
    text = "# A\n```inline ` code```\n# B\nb"
    assert texts_of(markdown_split(text, chunk_size=500, overlap=0)) == [
        "# A\n```inline ` code```",
        "# B\nb",
    ]


def test_closing_fence_must_match_character_and_length() -> None:
    text = "# A\n````\n```\n~~~~\n# still code\n````\n# B\nb"
    assert texts_of(markdown_split(text, chunk_size=500, overlap=0)) == [
        "# A\n````\n```\n~~~~\n# still code\n````",
        "# B\nb",
    ]


def test_crlf_line_endings() -> None:
    text = "# A\r\n```\r\n# code\r\n```\r\n# B\r\nb\r\n"
    assert texts_of(markdown_split(text, chunk_size=500, overlap=0)) == [
        "# A\r\n```\r\n# code\r\n```",
        "# B\r\nb",
    ]


def test_sections_are_not_merged_even_when_small() -> None:
    chunks = markdown_split("# a\nx\n# b\ny", chunk_size=1000, overlap=10)
    assert texts_of(chunks) == ["# a\nx", "# b\ny"]


def test_fence_that_fits_is_never_split_in_a_long_section() -> None:
    fence = "```\nline one\nline two\nline three\n```"
    prose = "Some prose before the code. " * 3
    text = f"# Section\n{prose}\n{fence}\nAfter the fence, more prose follows here."
    chunks = markdown_split(text, chunk_size=len(fence) + 5, overlap=0)
    assert_invariants(text, chunks, len(fence) + 5, len)
    assert fence in texts_of(chunks) or any(fence in c.text for c in chunks)
    start = text.index(fence)
    assert not any(start < c.start < start + len(fence) for c in chunks)
    assert not any(start < c.end < start + len(fence) for c in chunks)


def test_fence_too_long_is_split_by_lines() -> None:
    body = "\n".join(f"value_{i} = {i}" for i in range(10))
    text = f"# Code\n```python\n{body}\n```"
    chunks = markdown_split(text, chunk_size=40, overlap=0)
    assert_invariants(text, chunks, 40, len)
    for chunk in chunks:
        # every chunk is whole lines: it starts at a line start and ends at a line end
        assert chunk.start == 0 or text[chunk.start - 1] == "\n"
        assert chunk.end == len(text) or text[chunk.end] == "\n"


def test_long_section_keeps_overlap_inside_the_section_only() -> None:
    text = "# A\n" + "alpha beta gamma delta. " * 6 + "\n# B\nshort"
    chunks = markdown_split(text, chunk_size=30, overlap=10)
    assert_invariants(text, chunks, 30, len)
    b_start = text.index("# B")
    assert texts_of(chunks)[-1] == "# B\nshort"
    assert all(c.end <= b_start for c in chunks[:-1])


def test_markdown_whitespace_only_and_empty() -> None:
    assert markdown_split("", chunk_size=5, overlap=0) == []
    assert markdown_split(" \n\n\t", chunk_size=5, overlap=0) == []


def test_markdown_heading_only_sections() -> None:
    assert texts_of(markdown_split("#\n##\n###", chunk_size=10, overlap=0)) == ["#", "##", "###"]


# --- settings (a splitter that never ends) in the new splitters -------------------------------------------

BAD_SETTINGS = [(5, 5), (5, 6), (0, 0), (5, -1)]


@pytest.mark.parametrize(("chunk_size", "overlap"), BAD_SETTINGS)
@pytest.mark.parametrize(
    "split",
    [
        lambda text, **kw: markdown_split(text, length=never_called, **kw),
        lambda text, **kw: markdown_split(text, **kw),
        lambda text, **kw: code_split(text, length=never_called, **kw),
        lambda text, **kw: code_split(text, language="python", **kw),
    ],
    ids=["markdown-tokens", "markdown-chars", "code-tokens", "code-python"],
)
def test_case1_bad_settings_refused_before_any_work(
    split: Callable[..., list[Chunk]], chunk_size: int, overlap: int
) -> None:
    with pytest.raises(InvalidInput) as info:
        split("# a\n\ndef f():\n    pass\n" * 50, chunk_size=chunk_size, overlap=overlap)
    assert "chunk size" in info.value.message and "chunk overlap" in info.value.message
    assert info.value.details == {"chunk_size": chunk_size, "overlap": overlap}


# --- code splitter --------------------------------------------------------------------------

PYTHON = '''"""Module docstring."""

import os


@decorator
def first(x):
    return x + 1


# A comment about the class.
class Greeter:
    def hello(self):
        return "hello"

    @property
    def name(self):
        return "g"


async def last():
    pass
'''


def test_code_small_definitions_share_a_chunk() -> None:
    chunks = code_split(PYTHON, chunk_size=1000, overlap=0, language="python")
    assert texts_of(chunks) == [PYTHON.strip()]


def test_code_cuts_at_top_level_definitions_with_their_decorators_and_comments() -> None:
    chunks = code_split(PYTHON, chunk_size=120, overlap=0, language="python")
    assert texts_of(chunks) == [
        '"""Module docstring."""\n\nimport os\n\n\n@decorator\ndef first(x):\n    return x + 1',
        "# A comment about the class.\nclass Greeter:\n    def hello(self):\n"
        '        return "hello"',
        '@property\n    def name(self):\n        return "g"',
        "async def last():\n    pass",
    ]
    assert_invariants(PYTHON, chunks, 120, len)


def test_code_splits_a_large_class_at_its_methods() -> None:
    chunks = code_split(PYTHON, chunk_size=60, overlap=0, language="python")
    assert_invariants(PYTHON, chunks, 60, len)
    starts = [c.text.split("\n", 1)[0] for c in chunks]
    assert "def hello(self):" in starts
    assert "@property" in starts  # the decorator stays with the method below it
    assert "async def last():" in starts


def test_code_javascript_and_go_and_rust() -> None:
    js = (
        "import x from 'x';\n\n"
        "// Adds.\nexport function add(a, b) {\n  return a + b;\n}\nclass A {}\n"
    )
    assert texts_of(code_split(js, chunk_size=60, overlap=0, language="js")) == [
        "import x from 'x';",
        "// Adds.\nexport function add(a, b) {\n  return a + b;\n}",
        "class A {}",
    ]
    go = "package main\n\n// Main runs.\nfunc main() {\n\tprintln(1)\n}\ntype T struct{}\n"
    assert texts_of(code_split(go, chunk_size=45, overlap=0, language="go")) == [
        "package main",
        "// Main runs.\nfunc main() {\n\tprintln(1)\n}",
        "type T struct{}",
    ]
    rust = (
        "use std::io;\n#[derive(Debug)]\npub struct P { x: i32 }\n"
        "pub(crate) fn f() -> i32 { 1 }\n"
    )
    assert texts_of(code_split(rust, chunk_size=42, overlap=0, language="rust")) == [
        "use std::io;",
        "#[derive(Debug)]\npub struct P { x: i32 }",
        "pub(crate) fn f() -> i32 { 1 }",
    ]


def test_code_without_definitions_falls_back_to_blank_lines_then_lines() -> None:
    text = "a = 1\nb = 2\n\n   \nc = 3\nd = 4\n"
    assert texts_of(code_split(text, chunk_size=12, overlap=0)) == ["a = 1\nb = 2", "c = 3\nd = 4"]


def test_code_language_names() -> None:
    for name in ("python", "PY", "javascript", "ts", "golang", "rs", "java", None):
        assert code_split("def f(): pass", chunk_size=50, overlap=0, language=name)
    with pytest.raises(InvalidInput, match="unknown code language 'cobol'; known: .*python"):
        code_split("x", chunk_size=5, overlap=0, language="cobol")


def test_code_with_overlap_in_tokens() -> None:
    chunks = code_split(PYTHON, chunk_size=12, overlap=4, length=toy_tokens)
    assert_invariants(PYTHON, chunks, 12, toy_tokens)


def test_config_dispatches_to_the_new_splitters() -> None:
    md = ChunkingConfig(splitter="markdown", unit="chars", chunk_size=50, overlap=5)
    assert md.chunk(CASE4) == markdown_split(CASE4, chunk_size=50, overlap=5)
    code = ChunkingConfig(splitter="code", unit="chars", chunk_size=60, overlap=0)
    assert code.chunk(PYTHON) == code_split(PYTHON, chunk_size=60, overlap=0)
    words = ChunkingConfig(splitter="code", unit="words", chunk_size=6, overlap=2)
    assert words.chunk(PYTHON) == code_split(PYTHON, chunk_size=6, overlap=2, length=count_words)


# --- properties -----------------------------------------------------------------------------

PROPERTY_SETTINGS = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)

UNICODE_WORDS = ["naïve", "e\u0301", "猫", "人工智能技术", "👋🏻", "👨\u200d👩\u200d👧", "🇫🇷", "x" * 30]
PLAIN_WORDS = ["alpha", "beta", "Gamma.", "d", "=", "(x)", "a_b", *UNICODE_WORDS]


@st.composite
def size_and_overlap(draw: st.DrawFn, max_size: int = 60) -> tuple[int, int]:
    """A valid (chunk_size, overlap) pair."""
    size = draw(st.integers(min_value=1, max_value=max_size))
    return size, draw(st.integers(min_value=0, max_value=size - 1))


@dataclass
class MarkdownDoc:
    """A generated Markdown document and what its construction says about it."""

    text: str
    headings: list[int]  # offsets of the real headings
    fences: list[tuple[int, int]]  # closed fences: from the opening line to the closing line


_line = st.lists(st.sampled_from(PLAIN_WORDS + [" ", "  "]), min_size=1, max_size=8).map(" ".join)
_fence_body_line = st.one_of(
    _line,
    st.sampled_from(["# not a heading", "## deep", "    indented", "", "x = 1", "#"]),
)


@st.composite
def markdown_docs(draw: st.DrawFn) -> MarkdownDoc:
    """A document of headings, paragraphs and fences (the last one possibly unclosed)."""
    parts: list[str] = []
    headings: list[int] = []
    fences: list[tuple[int, int]] = []
    pos = 0
    in_unclosed = False
    n_blocks = draw(st.integers(min_value=0, max_value=10))
    for _ in range(n_blocks):
        kind = draw(st.sampled_from(["heading", "para", "para", "fence", "blank"]))
        if kind == "heading":
            marks = "#" * draw(st.integers(1, 6))
            title = draw(st.sampled_from(["", " ", " Title"]))
            block = marks + title + draw(st.sampled_from(["", " 猫", " 👋🏻 x"]))
            if not in_unclosed:
                headings.append(pos)
        elif kind == "para":
            block = "\n".join(draw(st.lists(_line, min_size=1, max_size=4)))
        elif kind == "blank":
            block = draw(st.sampled_from(["", "  ", "\t"]))
        else:
            mark = draw(st.sampled_from(["```", "~~~", "````"]))
            info = draw(st.sampled_from(["", "python", " js title=x"]))
            body = draw(st.lists(_fence_body_line, max_size=6))
            closed = draw(st.booleans())
            block = "\n".join([mark + info, *body] + ([mark] if closed else []))
            if closed and not in_unclosed:
                fences.append((pos, pos + len(block)))
            if not closed:
                in_unclosed = True
        parts.append(block)
        pos += len(block) + 1
    return MarkdownDoc("\n".join(parts), headings, fences)


markdown_texts = st.one_of(
    markdown_docs().map(lambda doc: doc.text),
    st.text(alphabet=st.sampled_from("#`~ \n\tab猫👋🏻e\u0301"), max_size=200),
    st.text(max_size=200),
)


@PROPERTY_SETTINGS
@given(doc=markdown_docs(), sizes=size_and_overlap(max_size=80))
def test_markdown_structure_properties(doc: MarkdownDoc, sizes: tuple[int, int]) -> None:
    chunk_size, overlap = sizes
    text = doc.text
    chunks = markdown_split(text, chunk_size=chunk_size, overlap=overlap)
    assert_invariants(text, chunks, chunk_size, len)
    for heading in doc.headings:  # no chunk crosses a real heading
        assert not any(c.start < heading < c.end for c in chunks), (heading, chunks)
    for lo, hi in doc.fences:  # a fence that fits is never cut
        if hi - lo <= chunk_size:
            assert not any(lo < c.start < hi or lo < c.end < hi for c in chunks), (lo, hi)
            assert any(c.start <= lo and hi <= c.end for c in chunks)


@PROPERTY_SETTINGS
@given(text=markdown_texts, sizes=size_and_overlap())
def test_markdown_chars_invariants(text: str, sizes: tuple[int, int]) -> None:
    chunks = markdown_split(text, chunk_size=sizes[0], overlap=sizes[1])
    assert_invariants(text, chunks, sizes[0], len)


@PROPERTY_SETTINGS
@given(text=markdown_texts, sizes=size_and_overlap(max_size=20))
def test_markdown_tokens_invariants(text: str, sizes: tuple[int, int]) -> None:
    chunks = markdown_split(text, chunk_size=sizes[0], overlap=sizes[1], length=toy_tokens)
    assert_invariants(text, chunks, sizes[0], toy_tokens)


@PROPERTY_SETTINGS
@given(text=markdown_texts, sizes=size_and_overlap(max_size=40))
def test_markdown_non_additive_length_invariants(text: str, sizes: tuple[int, int]) -> None:
    chunks = markdown_split(text, chunk_size=sizes[0], overlap=sizes[1], length=squared_length)
    assert_invariants(text, chunks, sizes[0], squared_length)


@PROPERTY_SETTINGS
@given(text=markdown_texts, sizes=size_and_overlap(max_size=12))
def test_markdown_words_invariants(text: str, sizes: tuple[int, int]) -> None:
    chunks = markdown_split(text, chunk_size=sizes[0], overlap=sizes[1], length=count_words)
    assert_invariants(text, chunks, sizes[0], count_words)


CODE_FRAGMENTS = [
    "def f(x):",
    "class A:",
    "    def m(self):",
    "async def g():",
    "@decorator",
    "    @property",
    "# comment",
    "// comment",
    "function h() {",
    "export class B {",
    "func main() {",
    "pub fn r() {",
    "#[derive(Debug)]",
    "    return x",
    "}",
    "",
    "   ",
    "x = 1",
    "s = '猫 👋🏻 e\u0301'",
    "y" * 50,
]

code_texts = st.one_of(
    st.lists(st.sampled_from(CODE_FRAGMENTS), max_size=40).map("\n".join),
    st.text(alphabet=st.sampled_from("def clas@#\n\t :()猫👋🏻e\u0301"), max_size=200),
    st.text(max_size=200),
)


@PROPERTY_SETTINGS
@given(
    text=code_texts,
    sizes=size_and_overlap(),
    language=st.sampled_from([None, "python", "javascript", "typescript", "go", "rust", "java"]),
)
def test_code_chars_invariants(text: str, sizes: tuple[int, int], language: str | None) -> None:
    chunks = code_split(text, chunk_size=sizes[0], overlap=sizes[1], language=language)
    assert_invariants(text, chunks, sizes[0], len)


@PROPERTY_SETTINGS
@given(text=code_texts, sizes=size_and_overlap(max_size=20))
def test_code_tokens_invariants(text: str, sizes: tuple[int, int]) -> None:
    chunks = code_split(text, chunk_size=sizes[0], overlap=sizes[1], length=toy_tokens)
    assert_invariants(text, chunks, sizes[0], toy_tokens)


@PROPERTY_SETTINGS
@given(text=code_texts, sizes=size_and_overlap(max_size=40))
def test_code_non_additive_length_invariants(text: str, sizes: tuple[int, int]) -> None:
    chunks = code_split(text, chunk_size=sizes[0], overlap=sizes[1], length=squared_length)
    assert_invariants(text, chunks, sizes[0], squared_length)


@PROPERTY_SETTINGS
@given(
    text=st.text(alphabet=st.characters(blacklist_categories=["Z", "Cc", "Cs"]), max_size=400),
    sizes=size_and_overlap(),
)
def test_no_whitespace_rebuilds_exactly(text: str, sizes: tuple[int, int]) -> None:
    for chunks in (
        markdown_split(text, chunk_size=sizes[0], overlap=sizes[1]),
        code_split(text, chunk_size=sizes[0], overlap=sizes[1]),
    ):
        assert rebuild(text, chunks) == text
        assert_invariants(text, chunks, sizes[0], len)


@PROPERTY_SETTINGS
@given(
    text=st.text(alphabet=st.sampled_from("ab猫👋🏻e\u0301#`~=."), max_size=300),
    sizes=size_and_overlap(),
)
def test_markdown_without_line_breaks_is_the_recursive_split(
    text: str, sizes: tuple[int, int]
) -> None:
    # one line and no fence closes: one section, split exactly like the recursive splitter
    chunks = markdown_split(text, chunk_size=sizes[0], overlap=sizes[1])
    if text.lstrip().startswith(("```", "~~~")):
        assert_invariants(text, chunks, sizes[0], len)
        return
    expected = recursive_split(text, chunk_size=sizes[0], overlap=sizes[1])
    assert [(c.start, c.end) for c in chunks] == [(c.start, c.end) for c in expected]
