"""The request-schema language (deployments.http.schema): JSON types strictly, integral numbers as
integers, null as "the default", unknown fields refused by name, `Served` restrictions, OneOf by
type then tag; and the JSON Schema it writes for the OpenAPI document."""

from __future__ import annotations

from typing import Any

import pytest

from deployments.http.json_schema import json_schema
from deployments.http.schema import (
    Array,
    Boolean,
    Const,
    Integer,
    Never,
    Number,
    Object,
    OneOf,
    Prop,
    Refused,
    Served,
    Text,
    conform,
)

PART = Object({"type": Prop(Text(enum=("text",)), required=True), "text": Prop(Text(), required=True)})
IMAGE = Object({"type": Prop(Text(enum=("image",)), required=True), "url": Prop(Text(), required=True)})
BODY = Object(
    props={
        "model": Prop(Text(), required=True),
        "max_tokens": Prop(Integer(minimum=1), nullable=True),
        "temperature": Prop(Number(minimum=0, maximum=2), nullable=True),
        "penalty": Prop(Number(minimum=0, maximum=2, exclusive_minimum=True)),
        "stream": Prop(Boolean(), nullable=True),
        "n": Prop(Served(Integer(minimum=1, maximum=128), Const(1), "one choice"), nullable=True),
        "audio": Prop(Served(Object(open=True), Never(), "text only"), nullable=True),
        "name": Prop(Text(pattern=r"[a-z]{1,3}")),
        "stop": Prop(OneOf((Text(), Array(Text(), max_items=2))), nullable=True),
        "parts": Prop(Array(Served(OneOf((PART, IMAGE), tag="type"), PART, "text only"), min_items=1)),
        "ids": Prop(Array(Integer(minimum=0))),
        "bias": Prop(Object(values=Number(), keys=Text(pattern=r"[0-9]+"))),
        "store": Prop(Boolean(), nullable=True, ignored=True),
        "content": Prop(Text(), nullable=True, null_means=""),
    },
    hints={"tools": "tools need chat"},
)
OK = {"model": "m"}


@pytest.mark.parametrize(
    ("extra", "normalized"),
    [
        ({"max_tokens": 4.0}, {"max_tokens": 4}),  # JSON Schema: 4.0 is an integer
        ({"max_tokens": None, "stream": None, "n": None, "audio": None}, {}),  # null: the default
        ({"temperature": 0}, {"temperature": 0}),
        ({"stop": "x"}, {"stop": "x"}),
        ({"stop": ["x", "y"]}, {"stop": ["x", "y"]}),
        ({"ids": [1, 2.0, 3]}, {"ids": [1, 2, 3]}),
        ({"bias": {"12": -1.5}}, {"bias": {"12": -1.5}}),
        ({"store": True}, {}),  # accepted, then dropped: no effect
        ({"content": None}, {"content": ""}),
        ({"parts": [{"type": "text", "text": "a"}]}, {"parts": [{"type": "text", "text": "a"}]}),
    ],
)
def test_valid_values_come_out_normalized(extra: dict[str, Any], normalized: dict[str, Any]) -> None:
    assert conform(BODY, {**OK, **extra}) == {**OK, **normalized}


@pytest.mark.parametrize(
    ("extra", "param", "fragment"),
    [
        ({"stream": "yes"}, "stream", 'must be true or false, got "yes"'),
        ({"stream": 1}, "stream", "must be true or false"),
        ({"max_tokens": "5"}, "max_tokens", "must be an integer, got a string"),
        ({"max_tokens": True}, "max_tokens", "must be an integer, got a boolean"),
        ({"max_tokens": 2.5}, "max_tokens", "must be an integer, got 2.5"),
        ({"max_tokens": 0}, "max_tokens", "must be >= 1, got 0"),
        ({"temperature": 2.5}, "temperature", "must be in [0, 2], got 2.5"),
        ({"penalty": 0}, "penalty", "must be in (0, 2], got 0"),
        ({"temperature": False}, "temperature", "must be a number, got a boolean"),
        ({"n": 2}, "n", "n 2 is not supported: one choice"),
        ({"n": 0}, "n", "must be in [1, 128]"),  # OpenAI's range first, then what is served
        ({"audio": {}}, "audio", "is not supported: text only"),
        ({"name": "abcd"}, "name", "must match"),
        ({"stop": ["a", "b", "c"]}, "stop", "at most 2"),
        ({"stop": 5}, "stop", "must be a string or a list, got an integer"),
        ({"parts": []}, "parts", "must not be empty"),
        ({"parts": [{"type": "image", "url": "u"}]}, "parts[0]", "is not supported: text only"),
        ({"parts": [{"type": "video"}]}, "parts[0].type", "must be one of 'text', 'image'"),
        ({"parts": [{"text": "a"}]}, "parts[0].type", "is required"),
        ({"parts": [{"type": "text"}]}, "parts[0].text", "is required"),
        ({"parts": [{"type": "text", "text": "a", "x": 1}]}, "parts[0].x", "is not a field"),
        ({"ids": [1, -1]}, "ids[1]", "must be >= 0"),
        ({"bias": {"a": 1}}, "bias.a", "must match"),
        ({"stream": None, "tools": []}, "tools", "is not a field of this request: tools need chat"),
        ({"foo": 1}, "foo", "is not a field of this request"),
        ({"model": None}, "model", "must be a string, got null"),
        ({"penalty": None}, "penalty", "got null"),  # not nullable
    ],
)
def test_invalid_values_are_refused_naming_the_field(
    extra: dict[str, Any], param: str, fragment: str
) -> None:
    with pytest.raises(Refused) as refused:
        conform(BODY, {**OK, **extra})
    problem = refused.value.problem
    assert problem.status == 400 and problem.param == param and fragment in problem.message, problem


def test_a_missing_required_field_is_named() -> None:
    with pytest.raises(Refused) as refused:
        conform(BODY, {})
    assert refused.value.problem.param == "model" and "is required" in refused.value.problem.message


def test_the_json_schema_describes_what_is_accepted() -> None:
    schema = json_schema(BODY)
    props = schema["properties"]
    assert schema["required"] == ["model"] and schema["additionalProperties"] is False
    assert props["max_tokens"] == {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "null"}]}
    assert props["n"]["anyOf"][0] == {"const": 1} and props["n"]["description"] == "one choice"
    assert props["audio"]["anyOf"][0] == {"not": {}}  # only null is accepted
    assert props["penalty"] == {"type": "number", "exclusiveMinimum": 0, "maximum": 2}
    assert props["name"]["pattern"] == "^[a-z]{1,3}$"
    assert props["parts"]["items"]["properties"]["type"] == {"type": "string", "enum": ["text"]}
    assert props["bias"]["propertyNames"]["pattern"] == "^[0-9]+$"
    assert "no effect" in props["store"]["description"]


def test_a_long_token_id_list_is_checked_in_one_pass() -> None:
    ids = list(range(200_000))
    assert conform(Array(Integer(minimum=0)), ids) is ids  # the fast path hands the list back as is
