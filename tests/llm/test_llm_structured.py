"""Schema transforms, request options and reply parsing (pure functions)."""

from __future__ import annotations

import json
from typing import Literal

import pytest
from pydantic import BaseModel, Field

from workbench.errors import SchemaEchoError, StructuredOutputError
from workbench.llm.structured import (
    clean_reply,
    grammar_schema,
    inline_refs,
    looks_like_schema,
    model_schema,
    parse_reply,
    request_options,
    strict_schema,
    with_system_instruction,
)


class Entity(BaseModel):
    name: str = Field(min_length=1, max_length=200, description="the entity's name")
    kind: Literal["Person", "Place"] = "Person"
    importance: int = Field(default=3, ge=1, le=5)
    weight: float = Field(default=0.5, ge=0, le=1)
    year: int = Field(default=2000, ge=0, le=100000)


class ExtractedEntities(BaseModel):
    entities: list[Entity]


class Resolution(BaseModel):
    id: int
    duplicate_of: int


class NodeResolutions(BaseModel):
    entity_resolutions: list[Resolution]


def _walk(node):
    if isinstance(node, dict):
        yield node
        for v in node.values():
            yield from _walk(v)
    elif isinstance(node, list):
        for v in node:
            yield from _walk(v)


# --- schema transforms -----------------------------------------------------------------------
def test_inline_refs_removes_defs_and_refs():
    schema = inline_refs(ExtractedEntities.model_json_schema())
    assert "$defs" not in schema
    assert not [n for n in _walk(schema) if "$ref" in n]
    assert schema["properties"]["entities"]["items"]["properties"]["name"]["type"] == "string"


def test_inline_refs_rejects_recursion():
    schema = {
        "$defs": {"N": {"type": "object", "properties": {"next": {"$ref": "#/$defs/N"}}}},
        "$ref": "#/$defs/N",
    }
    with pytest.raises(ValueError, match="recursive"):
        inline_refs(schema)


def test_grammar_schema_is_grammar_friendly():
    schema = grammar_schema(model_schema(ExtractedEntities))
    item = schema["properties"]["entities"]["items"]["properties"]
    assert item["importance"]["enum"] == [1, 2, 3, 4, 5]
    assert "minimum" not in item["importance"] and "maximum" not in item["importance"]
    assert "minimum" not in item["weight"]
    assert "enum" not in item["year"] and "maximum" not in item["year"]  # too wide for an enum
    assert schema["properties"]["entities"]["maxItems"] == 64
    # llama.cpp's grammar compiler refuses string repetitions inside bounded arrays
    assert not [n for n in _walk(schema) if "maxLength" in n]
    assert item["name"]["minLength"] == 1  # a lower bound is a few rules: kept
    assert schema["additionalProperties"] is False
    assert schema["properties"]["entities"]["items"]["additionalProperties"] is False
    assert not [n for n in _walk(schema) if "default" in n or "$ref" in n]


def test_grammar_schema_bounds_are_optional():
    schema = grammar_schema(model_schema(ExtractedEntities), max_items=None)
    assert "maxItems" not in schema["properties"]["entities"]


def test_strict_schema_when_every_property_is_required():
    schema, strict = strict_schema(model_schema(NodeResolutions))
    assert strict is True
    assert schema["additionalProperties"] is False
    assert schema["properties"]["entity_resolutions"]["items"]["additionalProperties"] is False


def test_strict_schema_not_possible_with_optional_fields():
    schema, strict = strict_schema(model_schema(ExtractedEntities))
    assert strict is False
    assert "additionalProperties" not in schema


# --- requests ----------------------------------------------------------------------------------
MESSAGES = [
    {"role": "system", "content": "Stable instructions."},
    {"role": "user", "content": "Episode text."},
]


def test_json_schema_request():
    msgs, extra = request_options("json_schema", MESSAGES, NodeResolutions)
    assert msgs == MESSAGES
    fmt = extra["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["name"] == "NodeResolutions"
    assert fmt["json_schema"]["strict"] is True


def test_json_object_request_puts_the_schema_after_the_stable_prompt():
    msgs, extra = request_options("json_object", MESSAGES, NodeResolutions)
    schema = extra["response_format"]["schema"]
    assert extra["response_format"]["type"] == "json_object"
    assert schema["title"] == "NodeResolutions"
    assert msgs[0]["content"].startswith("Stable instructions.\n\n")
    assert json.dumps(schema, separators=(",", ":")) in msgs[0]["content"]
    assert msgs[1] == MESSAGES[1]
    assert MESSAGES[0]["content"] == "Stable instructions."  # input not mutated


def test_tool_request():
    msgs, extra = request_options("tool", MESSAGES, NodeResolutions)
    assert msgs == MESSAGES
    assert extra["tools"][0]["function"]["name"] == "NodeResolutions"
    assert extra["tools"][0]["function"]["parameters"]["required"] == ["entity_resolutions"]
    assert extra["tool_choice"]["function"]["name"] == "NodeResolutions"


def test_unknown_mode():
    with pytest.raises(ValueError, match="json_schema, json_object, tool"):
        request_options("grammar", MESSAGES, NodeResolutions)


def test_system_instruction_added_when_there_is_no_system_message():
    msgs = with_system_instruction([{"role": "user", "content": "hi"}], "Answer in JSON.")
    assert msgs[0] == {"role": "system", "content": "Answer in JSON."}


def test_system_instruction_appended_to_multipart_system():
    msgs = with_system_instruction(
        [{"role": "system", "content": [{"type": "text", "text": "A"}]}], "B"
    )
    assert msgs[0]["content"] == [{"type": "text", "text": "A"}, {"type": "text", "text": "B"}]


# --- replies -----------------------------------------------------------------------------------
GOOD = '{"entity_resolutions": [{"id": 0, "duplicate_of": -1}]}'


@pytest.mark.parametrize(
    "text",
    [
        GOOD,
        f"```json\n{GOOD}\n```",
        f"```\n{GOOD}\n```",
        f"<think>Let me see.\nThe ids...</think>\n{GOOD}",
        f"<think>reason</think>```json\n{GOOD}\n```",
        f"Reasoning without an opening tag</think>{GOOD}",
        f"Here is the JSON:\n```json\n{GOOD}\n```\nHope it helps",
        f"Here you go: {GOOD} done",
        '{"NodeResolutions": ' + GOOD + "}",
    ],
)
def test_parse_reply_accepts_the_usual_wrappings(text):
    result = parse_reply(text, NodeResolutions)
    assert result.entity_resolutions[0].duplicate_of == -1


def test_raw_newlines_inside_strings_are_accepted():
    result = parse_reply('{"entities": [{"name": "Line one\nline two"}]}', ExtractedEntities)
    assert result.entities[0].name == "Line one\nline two"


def test_clean_reply_leaves_plain_json():
    assert clean_reply("  {}  ") == "{}"


def test_schema_echo_is_detected():
    schema = json.dumps(NodeResolutions.model_json_schema())
    with pytest.raises(SchemaEchoError) as info:
        parse_reply(schema, NodeResolutions)
    assert str(info.value) == (
        "NodeResolutions: the reply is a JSON schema instead of data: the required field "
        "`entity_resolutions` of NodeResolutions is missing"
    )


class Optional_(BaseModel):
    entities: list[Entity] = Field(default_factory=list)


def test_schema_echo_of_a_model_whose_fields_all_have_defaults():
    schema = json.dumps(Optional_.model_json_schema())
    with pytest.raises(SchemaEchoError, match="the field `entities` of Optional_ is missing"):
        parse_reply(schema, Optional_)
    assert parse_reply("{}", Optional_).entities == []


def test_schema_like_reply_with_the_data_is_not_an_echo():
    assert not looks_like_schema({"entity_resolutions": []})
    parse_reply('{"entity_resolutions": [], "type": "object"}', NodeResolutions)


@pytest.mark.parametrize(
    ("text", "detail"),
    [
        ("", "the reply is empty"),
        ("Alice, Bob", "not valid JSON"),
        ('{"entity_resolutions": [{"id": "zero"}]}', "does not conform"),
        ('{"entities": []', "not valid JSON"),
        ("[1, 2]", "does not conform"),
    ],
)
def test_non_conforming_replies_name_the_structure(text, detail):
    with pytest.raises(StructuredOutputError) as info:
        parse_reply(text, NodeResolutions)
    assert type(info.value) is StructuredOutputError
    assert info.value.structure == "NodeResolutions"
    assert detail in info.value.detail


def test_validation_detail_lists_at_most_three_errors():
    bad = json.dumps({"entity_resolutions": [{"id": "a", "duplicate_of": "b"}] * 3})
    with pytest.raises(StructuredOutputError) as info:
        parse_reply(bad, NodeResolutions)
    assert "(+3 more)" in info.value.detail


def test_a_nul_character_in_a_reply_is_dropped_from_its_strings():
    # "\u0000" in the JSON decodes to a NUL, which PostgreSQL cannot store
    reply = '{"entities": [{"name": "Ali\\u0000ce", "kind": "Person"}]}'
    result = parse_reply(reply, ExtractedEntities)
    assert result.entities[0].name == "Alice"
