"""The RAG node's pure parts: input parsing, config validation, class names, output format."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kg.errors import InvalidInput
from kg.ragnode.spec import (
    KNOWN_PROVIDERS,
    RAG_CONFIG_SCHEMA,
    RagConfig,
    class_key,
    class_name,
    classes_collide,
    format_context,
    meta_class_name,
    normalise_model_name,
    parse_rag_input,
    validate_rag_config,
)

# --- input parsing --------------------------------------------------------------------------

SEED_INPUT = (
    "Using the attached document, answer:\n\n"
    "What are the main topics covered?\n\n"
    '### File name "my-document.txt"\n'
    "<file content here>\n"
)


def test_seed_example_parses_into_query_and_one_file() -> None:
    assert parse_rag_input(SEED_INPUT) == (
        "Using the attached document, answer:\n\nWhat are the main topics covered?",
        [("my-document.txt", "<file content here>")],
    )


@pytest.mark.parametrize(
    ("text", "query"),
    [
        ("What is kg?", "What is kg?"),
        ("  \n What is kg?\n\n", "What is kg?"),
        ("Line one\n\n### Not a file\nLine two", "Line one\n\n### Not a file\nLine two"),
        ("", ""),
        ("   \n", ""),
    ],
    ids=["plain", "whitespace-around", "other-heading", "empty", "blank"],
)
def test_query_only_input_has_no_files(text: str, query: str) -> None:
    assert parse_rag_input(text) == (query, [])


def test_files_only_input_has_an_empty_query() -> None:
    assert parse_rag_input('### File name "a.txt"\nalpha') == ("", [("a.txt", "alpha")])


def test_several_files_each_run_to_the_next_block() -> None:
    text = (
        "Compare them.\n\n"
        '### File name "a.md"\n# A\n\nalpha text\n### not a block header\n\n'
        '### File name "b.md"\n\nbeta text\n\n\n'
        '### File name "c.md"\ngamma'
    )
    assert parse_rag_input(text) == (
        "Compare them.",
        [
            ("a.md", "# A\n\nalpha text\n### not a block header"),
            ("b.md", "beta text"),
            ("c.md", "gamma"),
        ],
    )


@pytest.mark.parametrize(
    "name",
    [
        "my document.txt",
        'report "final" v2.txt',
        '"quoted"',
        "données 2024.csv",
        "文档.md",
        "emoji 📚.txt",
        "a/b/c.txt",
        " padded ",
        "x" * 300,
    ],
)
def test_file_names_with_spaces_quotes_and_unicode(name: str) -> None:
    text = f'Q?\n### File name "{name}"\ncontent of {name}.\n'
    assert parse_rag_input(text) == ("Q?", [(name, f"content of {name}.")])


def test_file_block_with_no_content_is_kept_empty() -> None:
    text = 'Q\n### File name "empty.txt"\n\n\n### File name "full.txt"\nx\n### File name "last.txt"'
    assert parse_rag_input(text) == ("Q", [("empty.txt", ""), ("full.txt", "x"), ("last.txt", "")])


def test_content_keeps_its_first_line_indentation_and_inner_blank_lines() -> None:
    text = '### File name "code.py"\n\n    indented()\n\n\nx = 1   \n\n'
    assert parse_rag_input(text) == ("", [("code.py", "    indented()\n\n\nx = 1")])


def test_crlf_input() -> None:
    text = 'Q?\r\n\r\n### File name "a.txt"\r\nalpha\r\nbeta\r\n'
    assert parse_rag_input(text) == ("Q?", [("a.txt", "alpha\r\nbeta")])


@pytest.mark.parametrize(
    "line",
    [
        ' ### File name "a.txt"',  # not at the start of the line
        '## File name "a.txt"',
        '### file name "a.txt"',
        '### File name a.txt',
        '### File name "a.txt" and more',
    ],
)
def test_lines_that_are_not_block_headers(line: str) -> None:
    text = f"Q\n{line}\nbody"
    assert parse_rag_input(text) == (text.strip(), [])


def test_duplicate_file_names_are_refused() -> None:
    text = 'Q\n### File name "a.txt"\none\n### File name "b.txt"\ntwo\n### File name "a.txt"\nthree'
    with pytest.raises(InvalidInput) as info:
        parse_rag_input(text)
    assert "'a.txt'" in info.value.message and "unique" in info.value.message
    assert info.value.details == {"field": "input", "name": "a.txt", "blocks": [1, 3]}


@pytest.mark.parametrize("name", ["", "   "])
def test_block_without_a_name_is_refused(name: str) -> None:
    with pytest.raises(InvalidInput, match="names no file"):
        parse_rag_input(f'Q\n### File name "{name}"\ncontent')


@pytest.mark.parametrize("value", [None, 42, b"bytes", ["a"]])
def test_input_must_be_a_string(value: Any) -> None:
    with pytest.raises(InvalidInput, match="must be a string"):
        parse_rag_input(value)


# --- configuration validation ---------------------------------------------------------------

VALID = {
    "embeddingModel": "nomic-embed-text:latest",
    "collectionName": "rag_collection",
    "chunkSize": 200,
    "chunkOverlap": 40,
    "topK": 4,
    "weaviateUrl": "http://localhost:8080",
    "weaviateApiKey": "",
}


def with_(**changes: Any) -> dict[str, Any]:
    """VALID with keys changed (a value of ... removes the key)."""
    config = copy.deepcopy(VALID)
    for key, value in changes.items():
        if value is ...:
            config.pop(key)
        else:
            config[key] = value
    return config


def test_valid_config() -> None:
    config = validate_rag_config(VALID)
    assert config == RagConfig(
        embedding_model="nomic-embed-text:latest",
        collection_name="rag_collection",
        chunk_size=200,
        chunk_overlap=40,
        top_k=4,
        weaviate_url="http://localhost:8080",
        weaviate_api_key="",
        class_name="Ragcollection",
        model="ollama:nomic-embed-text:latest",
    )
    chunking = config.chunking
    assert (chunking.splitter, chunking.unit, chunking.chunk_size, chunking.overlap) == (
        "words",
        "words",
        200,
        40,
    )


def test_api_key_is_optional() -> None:
    assert validate_rag_config(with_(weaviateApiKey=...)).weaviate_api_key == ""
    assert validate_rag_config(with_(weaviateApiKey="secret")).weaviate_api_key == "secret"


def test_the_embedded_url_is_valid() -> None:
    assert validate_rag_config(with_(weaviateUrl="embedded")).weaviate_url == "embedded"


def test_required_keys_are_the_schema_s() -> None:
    assert RAG_CONFIG_SCHEMA["required"] == [
        "embeddingModel",
        "collectionName",
        "chunkSize",
        "chunkOverlap",
        "topK",
        "weaviateUrl",
    ]
    assert RAG_CONFIG_SCHEMA["additionalProperties"] is False


INVALID_CASES = [
    # (changes, fields named in the error)
    ({"embeddingModel": ...}, ["embeddingModel"]),
    ({"collectionName": ...}, ["collectionName"]),
    ({"chunkSize": ...}, ["chunkSize"]),
    ({"chunkOverlap": ...}, ["chunkOverlap"]),
    ({"topK": ...}, ["topK"]),
    ({"weaviateUrl": ...}, ["weaviateUrl"]),
    ({"extra": 1}, ["extra"]),
    ({"chunk_size": 200}, ["chunk_size"]),
    ({"embeddingModel": 3}, ["embeddingModel"]),
    ({"embeddingModel": None}, ["embeddingModel"]),
    ({"collectionName": ["a"]}, ["collectionName"]),
    ({"weaviateUrl": {"host": "x"}}, ["weaviateUrl"]),
    ({"weaviateApiKey": None}, ["weaviateApiKey"]),
    ({"weaviateApiKey": 123}, ["weaviateApiKey"]),
    ({"chunkSize": "200"}, ["chunkSize"]),
    ({"chunkSize": 200.5}, ["chunkSize"]),
    ({"chunkSize": True}, ["chunkSize"]),
    ({"chunkSize": None}, ["chunkSize"]),
    ({"chunkSize": float("nan")}, ["chunkSize"]),
    ({"chunkSize": 0}, ["chunkSize"]),
    ({"chunkSize": -5}, ["chunkSize"]),
    ({"chunkOverlap": -1}, ["chunkOverlap"]),
    ({"chunkOverlap": False}, ["chunkOverlap"]),
    ({"chunkOverlap": "0"}, ["chunkOverlap"]),
    ({"chunkOverlap": 1.5}, ["chunkOverlap"]),
    ({"topK": 0}, ["topK"]),
    ({"topK": -1}, ["topK"]),
    ({"topK": True}, ["topK"]),
    ({"topK": 2.5}, ["topK"]),
    ({"chunkOverlap": 200}, ["chunkOverlap", "chunkSize"]),
    ({"chunkOverlap": 201}, ["chunkOverlap", "chunkSize"]),
    ({"chunkSize": 5, "chunkOverlap": 5}, ["chunkOverlap", "chunkSize"]),
    ({"chunkSize": 5, "chunkOverlap": 6}, ["chunkOverlap", "chunkSize"]),
    ({"embeddingModel": "  "}, ["embeddingModel"]),
    ({"embeddingModel": "nomic embed text"}, ["embeddingModel"]),
    ({"embeddingModel": "ollama:"}, ["embeddingModel"]),
    ({"weaviateUrl": ""}, ["weaviateUrl"]),
    ({"collectionName": ""}, ["collectionName"]),
    ({"collectionName": "2024_docs"}, ["collectionName"]),
    ({"collectionName": "données"}, ["collectionName"]),
]


@pytest.mark.parametrize(
    ("changes", "fields"), INVALID_CASES, ids=[str(c[0]) for c in INVALID_CASES]
)
def test_every_schema_rule(changes: dict[str, Any], fields: list[str]) -> None:
    with pytest.raises(InvalidInput) as info:
        validate_rag_config(with_(**changes))
    message = info.value.message
    assert message.startswith("invalid RAG config: ")
    for field in fields:
        assert field in message
    assert [e["field"] for e in info.value.details["errors"]] == [fields[0]]


def test_all_errors_are_reported_at_once() -> None:
    config = with_(chunkSize=0, topK="4", weaviateUrl=..., colour="red")
    with pytest.raises(InvalidInput) as info:
        validate_rag_config(config)
    fields = [e["field"] for e in info.value.details["errors"]]
    assert sorted(fields) == ["chunkSize", "colour", "topK", "weaviateUrl"]


def test_whole_floats_are_integers_as_in_json_schema() -> None:
    config = validate_rag_config(with_(chunkSize=200.0, chunkOverlap=0.0, topK=4.0))
    assert (config.chunk_size, config.chunk_overlap, config.top_k) == (200, 0, 4)
    assert all(type(v) is int for v in (config.chunk_size, config.chunk_overlap, config.top_k))


def test_overlap_zero_and_size_one_are_valid() -> None:
    config = validate_rag_config(with_(chunkSize=1, chunkOverlap=0, topK=1))
    assert (config.chunk_size, config.chunk_overlap, config.top_k) == (1, 0, 1)


def test_case1_overlap_message_names_both_settings() -> None:
    with pytest.raises(InvalidInput) as info:
        validate_rag_config(with_(chunkSize=5, chunkOverlap=5))
    assert info.value.message == (
        "invalid RAG config: chunkOverlap (5) must be smaller than chunkSize (5)"
    )


@pytest.mark.parametrize("value", [None, [], "config", 5])
def test_config_must_be_an_object(value: Any) -> None:
    with pytest.raises(InvalidInput, match="must be a JSON object"):
        validate_rag_config(value)


def test_case1_seven_words_through_the_node_chunking() -> None:
    config = validate_rag_config(with_(chunkSize=5, chunkOverlap=2))
    chunks = config.chunking.chunk("w1 w2 w3 w4 w5 w6 w7")
    assert [c.text for c in chunks] == ["w1 w2 w3 w4 w5", "w4 w5 w6 w7"]


# --- class names ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("collection", "expected"),
    [
        ("rag_collection", "Ragcollection"),
        ("rag-collection", "Ragcollection"),
        ("RAG_collection", "RAGcollection"),
        ("Ragcollection", "Ragcollection"),
        ("my docs 2", "Mydocs2"),
        ("a", "A"),
        ("x_1", "X1"),
        ("__private__", "Private"),
        ("docs 📚", "Docs"),
        ("v1.2.3", "V123"),
    ],
)
def test_class_name_rule(collection: str, expected: str) -> None:
    assert class_name(collection) == expected
    assert meta_class_name(collection) == expected + "Meta"


@pytest.mark.parametrize(
    ("collection", "reason"),
    [
        ("", "no letter or digit"),
        ("___", "no letter or digit"),
        ("📚", "no letter or digit"),
        ("2024_docs", "starts with a digit"),
        ("_1abc", "starts with a digit"),
        ("données", "non-ASCII"),
        ("文档", "non-ASCII"),
        ("docs٣", "non-ASCII"),  # an Arabic-Indic digit
    ],
)
def test_names_without_a_valid_class_are_refused(collection: str, reason: str) -> None:
    with pytest.raises(InvalidInput, match=reason):
        class_name(collection)
    with pytest.raises(InvalidInput):
        class_key(collection)


def test_class_name_requires_a_string() -> None:
    with pytest.raises(InvalidInput, match="must be a string"):
        class_name(None)  # type: ignore[arg-type]


def test_names_mapping_to_one_class_share_a_key() -> None:
    keys = {class_key(name) for name in ("rag_collection", "rag-collection", "RAG_collection")}
    assert keys == {"ragcollection"}
    assert class_key("other") != class_key("rag_collection")


@pytest.mark.parametrize(
    ("first", "second", "collide"),
    [
        ("rag_collection", "rag-collection", True),
        ("rag_collection", "RAG_collection", True),
        ("rag_collection", "ragcollection", True),
        ("docs", "docs_meta", True),  # Docsmeta vs the meta class DocsMeta
        ("docs", "docs", False),  # the same collection
        ("docs", "notes", False),
        ("docs", "docs2", False),
    ],
)
def test_classes_collide(first: str, second: str, collide: bool) -> None:
    assert classes_collide(first, second) is collide
    assert classes_collide(second, first) is collide


# --- output ---------------------------------------------------------------------------------


def test_context_format_exactly_as_the_seed_shows() -> None:
    context = format_context(
        [("my-document.txt", "...chunk content..."), ("my-document.txt", "...chunk content...")]
    )
    assert context == (
        "[1] (my-document.txt)\n...chunk content...\n\n[2] (my-document.txt)\n...chunk content..."
    )


def test_context_numbers_from_one_and_keeps_chunk_text() -> None:
    context = format_context([("a b.txt", "line 1\nline 2"), ("文档.md", "猫"), ("c", "x")])
    assert context == "[1] (a b.txt)\nline 1\nline 2\n\n[2] (文档.md)\n猫\n\n[3] (c)\nx"


def test_no_results_is_a_null_context() -> None:
    assert format_context([]) is None


# --- model names ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("nomic-embed-text:latest", "ollama:nomic-embed-text:latest"),
        ("nomic-embed-text", "ollama:nomic-embed-text:latest"),
        ("mxbai-embed-large:335m", "ollama:mxbai-embed-large:335m"),
        ("ollama:nomic-embed-text:latest", "ollama:nomic-embed-text:latest"),
        ("ollama:nomic-embed-text", "ollama:nomic-embed-text:latest"),
        ("local:all-MiniLM-L6-v2", "local:all-MiniLM-L6-v2"),
        ("fake:hash-64", "fake:hash-64"),
        ("hf.co/org/model:Q4", "ollama:hf.co/org/model:Q4"),
        ("Local:x", "ollama:Local:x"),
    ],
)
def test_normalise_model_name(name: str, expected: str) -> None:
    assert normalise_model_name(name) == expected
    assert normalise_model_name(expected) == expected  # idempotent


def test_known_providers() -> None:
    assert set(KNOWN_PROVIDERS) == {"local", "ollama", "fake"}


@pytest.mark.parametrize("name", ["", "   ", None, "ollama:", "nomic embed", "model:"])
def test_bad_model_names_are_refused(name: Any) -> None:
    with pytest.raises(InvalidInput):
        normalise_model_name(name)
