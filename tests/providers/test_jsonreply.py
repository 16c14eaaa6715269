"""parse_json_reply: CASES #18 (LLM JSON not as asked) and the whole kind around it."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kg.errors import ProviderError
from kg.providers.jsonreply import REASONS, parse_json_reply

SCHEMA = {
    "type": "object",
    "properties": {
        "entities": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "type": {"type": "string"}},
                "required": ["name", "type"],
            },
        },
        "relations": {"type": "array"},
    },
    "required": ["entities", "relations"],
}
ANSWER = {
    "entities": [{"name": "Ada Lovelace", "type": "person"}, {"name": "Analytical Engine",
                                                              "type": "product"}],
    "relations": [{"source": "Ada Lovelace", "target": "Analytical Engine", "type": "wrote_about"}],
}


def refused(text, schema=SCHEMA) -> ProviderError:
    with pytest.raises(ProviderError) as info:
        parse_json_reply(text, schema=schema)
    assert info.value.details["reason"] in REASONS
    return info.value


# --- CASES #18, exactly ------------------------------------------------------------------------


def test_think_block_then_fenced_json_is_parsed() -> None:
    reply = (
        "<think>\nThe user wants entities. Maybe {\"entities\": []}? No, there are two.\n</think>\n"
        f"```json\n{json.dumps(ANSWER, indent=2)}\n```"
    )
    assert parse_json_reply(reply, schema=SCHEMA) == ANSWER


def test_the_schema_echoed_back_is_a_failure() -> None:
    error = refused(json.dumps(SCHEMA))
    assert error.details["reason"] == "echoed_schema"
    assert "echoes the JSON Schema" in error.message


def test_relation_to_an_unknown_entity_is_the_callers_to_drop() -> None:
    answer = {"entities": [{"name": "Ada", "type": "person"}],
              "relations": [{"source": "Ada", "target": "Nobody", "type": "knows"}]}
    assert parse_json_reply(json.dumps(answer), schema=SCHEMA) == answer


@pytest.mark.parametrize(
    "garbage",
    ["I'm sorry, I can't help with that.", "{not json at all}", "entities: Ada, Babbage",
     "```json\n{\"entities\": [\n```", "<html>502</html>", "{'entities': [], 'relations': []}"],
)
def test_garbage_is_a_failure(garbage: str) -> None:
    assert refused(garbage).details["reason"] == "no_json"


# --- the kind around it ------------------------------------------------------------------------


def test_plain_json_is_parsed() -> None:
    assert parse_json_reply(json.dumps(ANSWER), schema=SCHEMA) == ANSWER


def test_prose_before_and_after_is_tolerated() -> None:
    reply = f"Sure! Here is the result: {json.dumps(ANSWER)} Let me know if you need more."
    assert parse_json_reply(reply, schema=SCHEMA) == ANSWER


def test_an_unlabelled_or_unclosed_fence_is_read() -> None:
    assert parse_json_reply(f"```\n{json.dumps(ANSWER)}\n```", schema=SCHEMA) == ANSWER
    assert parse_json_reply(f"Result:\n```json\n{json.dumps(ANSWER)}\n", schema=SCHEMA) == ANSWER


def test_a_closing_think_tag_without_its_opening_drops_what_precedes_it() -> None:
    # Templates that open <think> in the prompt leave only the closing tag in the reply.
    reply = 'Drafting {"entities": [], "relations": []}...\n</think>\n' + json.dumps(ANSWER)
    assert parse_json_reply(reply, schema=SCHEMA) == ANSWER


def test_an_unclosed_think_prefers_the_last_candidate() -> None:
    reply = ('<think>First draft: {"entities": [], "relations": []}. Better:\n'
             + json.dumps(ANSWER))
    assert parse_json_reply(reply, schema=SCHEMA) == ANSWER


def test_only_thinking_is_empty() -> None:
    assert refused("<think>I will answer in JSON.</think>\n  ").details["reason"] == "empty"
    assert refused("").details["reason"] == "empty"


def test_a_candidate_failing_the_schema_is_skipped_for_one_that_passes() -> None:
    reply = f'Example format: {{"entities": "..."}}\nAnswer: {json.dumps(ANSWER)}'
    assert parse_json_reply(reply, schema=SCHEMA) == ANSWER


def test_an_echo_before_the_answer_is_skipped() -> None:
    reply = f"Schema: {json.dumps(SCHEMA)}\nAnswer: {json.dumps(ANSWER)}"
    assert parse_json_reply(reply, schema=SCHEMA) == ANSWER


def test_a_schema_with_dollar_schema_is_an_echo_even_without_a_schema_given() -> None:
    echoed = {"$schema": "https://json-schema.org/draft/2020-12/schema", **SCHEMA}
    assert refused(json.dumps(echoed), schema=None).details["reason"] == "echoed_schema"
    assert refused(json.dumps(SCHEMA), schema=None).details["reason"] == "echoed_schema"


def test_an_echo_with_the_answer_under_properties_is_refused() -> None:
    confused = {"type": "object", "properties": ANSWER}
    assert refused(json.dumps(confused)).details["reason"] == "echoed_schema"


@pytest.mark.parametrize(
    ("reply", "says"),
    [
        ({"entities": []}, "missing key 'relations'"),
        ({"entities": "Ada", "relations": []}, "'entities' is string, expected array"),
        ([ANSWER], "the reply is array, expected object"),
    ],
)
def test_schema_mismatch_says_what_is_wrong(reply, says: str) -> None:
    error = refused(json.dumps(reply))
    assert error.details["reason"] == "schema_mismatch"
    assert says in error.message
    assert says in error.details["errors"]


def test_top_level_types_enums_and_booleans() -> None:
    schema = {"type": "object", "required": ["sufficient", "score", "label"],
              "properties": {"sufficient": {"type": "boolean"}, "score": {"type": "integer"},
                             "label": {"type": "string", "enum": ["yes", "no"]}}}
    good = {"sufficient": True, "score": 3, "label": "yes"}
    assert parse_json_reply(json.dumps(good), schema=schema) == good
    assert parse_json_reply('{"sufficient": false, "score": 3.0, "label": "no"}', schema=schema)
    assert "'score' is boolean" in refused('{"sufficient": true, "score": true, "label": "no"}',
                                           schema).message
    assert "'sufficient' is integer" in refused('{"sufficient": 1, "score": 1, "label": "no"}',
                                                schema).message
    assert "not one of" in refused('{"sufficient": true, "score": 1, "label": "maybe"}',
                                   schema).message


def test_without_a_schema_any_object_or_array_is_returned() -> None:
    assert parse_json_reply("[1, 2, 3]") == [1, 2, 3]
    assert parse_json_reply('ok: {"a": {"b": [1]}}') == {"a": {"b": [1]}}


def test_inner_objects_of_a_cut_off_reply_are_not_taken_for_the_answer() -> None:
    cut = '{"entities": [{"name": "Ada", "type": "person"}, {"name": "Bab'
    assert refused(cut, schema=None).details["reason"] == "no_json"


@pytest.mark.parametrize("text", ['{"score": NaN}', '{"score": Infinity}', "[-Infinity]"])
def test_nan_and_infinity_literals_are_not_json(text: str) -> None:
    assert refused(text, schema=None).details["reason"] == "no_json"


@pytest.mark.parametrize("text", ["[" * 100_000, "{" * 100_000, '{"a":' * 50_000, "{}" * 50_000])
def test_pathological_replies_end_with_a_provider_error_or_a_value(text: str) -> None:
    try:
        value = parse_json_reply(text, schema=SCHEMA)
    except ProviderError as exc:
        assert exc.details["reason"] in REASONS
    else:  # pragma: no cover - none of these is a valid answer
        pytest.fail(f"accepted {value!r}")


@pytest.mark.parametrize("text", [None, 42, b'{"a": 1}', {"entities": []}])
def test_a_reply_that_is_not_text_is_refused(text) -> None:
    assert refused(text).details["reason"] == "not_text"


def test_a_refusal_carries_an_excerpt_of_the_reply() -> None:
    error = refused("x" * 1000)
    assert error.details["excerpt"] == "x" * 200


@settings(max_examples=300, deadline=None)
@given(st.one_of(
    st.text(),
    st.text(alphabet='{}[]":,0123456789 abtrue<>/thinkfalsenul`\n\\'),
    st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                 lambda inner: st.lists(inner, max_size=3)
                 | st.dictionaries(st.text(max_size=5), inner, max_size=3)).map(json.dumps),
))
def test_never_raises_anything_but_provider_error(text: str) -> None:
    for schema in (None, SCHEMA):
        try:
            value = parse_json_reply(text, schema=schema)
        except ProviderError as exc:
            assert exc.details["reason"] in REASONS
        else:
            assert isinstance(value, (dict, list))
