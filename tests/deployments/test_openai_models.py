"""The request models' own rules (deployments.http.openai_models, openai_types): JSON types strictly,
integral numbers as integers, null as "the default" only where OpenAI makes a field nullable,
unknown fields refused by name, values served in part, unions told apart by JSON kind then tag,
pydantic's errors in the app's words naming the field; and the JSON schema /openapi.json serves.
(What OpenAI-valid bodies become, and the refusals of OpenAI's own fields: test_openai_request.py.)"""

from __future__ import annotations

from typing import Any

import pytest

from deployments.http.openai_models import (
    ChatCompletionRequest,
    CompletionRequest,
    _integral_ids,
    validate_request,
)
from deployments.http.openai_types import Refused

USER = [{"role": "user", "content": "hi"}]
CHAT = {"model": "m", "messages": USER}
TEXT = {"model": "m", "prompt": "hi"}
PART = {"type": "text", "text": "a"}


@pytest.mark.parametrize(
    ("endpoint", "extra", "normalized"),
    [
        ("completions", {"max_tokens": 4.0}, {"max_tokens": 4}),  # JSON Schema: 4.0 is an integer
        ("completions", {"max_tokens": None, "stream": None, "n": None, "echo": None}, {}),  # the default
        ("completions", {"temperature": 0}, {"temperature": 0}),
        ("completions", {"stop": "x"}, {"stop": "x"}),
        ("completions", {"stop": ["x", "y"]}, {"stop": ["x", "y"]}),
        ("completions", {"stop_token_ids": [1, 2.0, 3]}, {"stop_token_ids": [1, 2, 3]}),
        ("completions", {"logit_bias": {"12": -1.5}}, {"logit_bias": {"12": -1.5}}),
        ("completions", {"user": "u"}, {}),  # accepted, then dropped: no effect
        ("chat", {"messages": [{"role": "user", "content": [PART]}]}, {"messages": [{"role": "user", "content": "a"}]}),
    ],
)  # fmt: skip
def test_valid_values_come_out_normalized(
    endpoint: str, extra: dict[str, Any], normalized: dict[str, Any]
) -> None:
    base = CHAT if endpoint == "chat" else TEXT
    assert validate_request(endpoint, {**base, **extra}).normalized() == {**base, **normalized}  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("endpoint", "extra", "param", "fragment"),
    [
        ("completions", {"stream": "yes"}, "stream", 'must be true or false, got "yes"'),
        ("completions", {"stream": 1}, "stream", "must be true or false"),
        ("completions", {"max_tokens": "5"}, "max_tokens", "must be an integer, got a string"),
        ("completions", {"max_tokens": True}, "max_tokens", "must be an integer, got a boolean"),
        ("completions", {"max_tokens": 2.5}, "max_tokens", "must be an integer, got 2.5"),
        ("chat", {"max_tokens": 0}, "max_tokens", "must be >= 1, got 0"),
        ("completions", {"temperature": 2.5}, "temperature", "must be in [0, 2], got 2.5"),
        ("completions", {"repetition_penalty": 0}, "repetition_penalty", "must be in (0, 2], got 0"),
        ("completions", {"temperature": False}, "temperature", "must be a number, got a boolean"),
        ("completions", {"n": 2}, "n", "n 2 is not supported: this app generates one choice"),
        ("completions", {"n": 0}, "n", "must be in [1, 128]"),  # OpenAI's range first, then what is served
        ("chat", {"audio": {"voice": "v", "format": "mp3"}}, "audio", "is not supported: this model answers in text only"),
        ("chat", {"audio": {}}, "audio.voice", "is required"),  # OpenAI's schema first
        ("chat", {"tools": [{"type": "function", "function": {"name": "abc d"}}]}, "tools[0].function.name", "must match"),
        ("completions", {"stop": 5}, "stop", "must be a string or a list, got an integer"),
        ("chat", {"messages": [{"role": "user", "content": [{"type": "video"}]}]}, "messages[0].content[0].type", "must be one of 'text', 'image_url'"),
        ("chat", {"messages": [{"role": "user", "content": [{"text": "a"}]}]}, "messages[0].content[0].type", "is required"),
        ("chat", {"messages": [{"role": "user", "content": [{"type": "text"}]}]}, "messages[0].content[0].text", "is required"),
        ("chat", {"messages": [{"role": "user", "content": [{**PART, "x": 1}]}]}, "messages[0].content[0].x", "is not a field"),
        ("chat", {"messages": [{"role": "user", "content": "x", "name": None}]}, "messages[0].name", "must be a string, got null"),  # not nullable
        ("chat", {"messages": [{"role": {}, "content": "x"}]}, "messages[0].role", "must be one of"),
        ("completions", {"stop_token_ids": [1, -1]}, "stop_token_ids[1]", "must be >= 0"),
        ("completions", {"logit_bias": {"a": 1}}, "logit_bias.a", "must match"),
        ("completions", {"stream": None, "tools": []}, "tools", "is not a field of this request: tool calls need"),
        ("completions", {"~x": 1}, "~x", "is not a field of this request"),  # a key, whatever it looks like
        ("completions", {"user": None}, "user", "got null"),  # not nullable
        ("chat", {"stream_options": {"include_usage": True}, "stream": False}, "stream_options", "only allowed with stream"),
    ],
)  # fmt: skip
def test_invalid_values_are_refused_naming_the_field(
    endpoint: str, extra: dict[str, Any], param: str, fragment: str
) -> None:
    with pytest.raises(Refused) as refused:
        validate_request(endpoint, {**(CHAT if endpoint == "chat" else TEXT), **extra})  # type: ignore[arg-type]
    problem = refused.value.problem
    assert problem.status == 400 and problem.param == param and fragment in problem.message, problem


def test_a_wrong_value_is_named_before_a_missing_field() -> None:
    with pytest.raises(Refused) as refused:
        validate_request(
            "chat", {"model": "m", "response_format": {"type": "json_schema", "schema": []}, "messages": USER}
        )
    assert refused.value.problem.param == "response_format.schema"  # not the missing json_schema


def test_the_json_schema_describes_what_is_served() -> None:
    schema = ChatCompletionRequest.model_json_schema()
    props, defs = schema["properties"], schema["$defs"]
    assert schema["required"] == ["model", "messages"] and schema["additionalProperties"] is False
    assert props["max_tokens"]["anyOf"] == [{"type": "integer", "minimum": 1}, {"type": "null"}]
    n = props["n"]["anyOf"][0]
    assert n["const"] == 1 and "one choice" in n["description"]
    assert n["x-openai"] == {"type": "integer", "minimum": 1, "maximum": 128}  # what OpenAI allows
    assert "not" in props["audio"]["anyOf"][0]  # only null is served
    assert props["repetition_penalty"]["anyOf"][0] == {"type": "number", "exclusiveMinimum": 0, "maximum": 2}
    assert props["repetition_penalty"]["x-sglang"] is True and "x-sglang" not in props["temperature"]
    assert defs["FunctionDefinition"]["properties"]["name"]["pattern"] == "^[a-zA-Z0-9_-]{1,64}$"
    assert defs["TextPart"]["properties"]["type"]["const"] == "text"
    assert props["logit_bias"]["anyOf"][0]["additionalProperties"] is False
    assert "no effect" in props["store"]["description"]
    user_parts = defs["UserMessage"]["properties"]["content"]["oneOf"][1]["items"]
    assert user_parts["$ref"].endswith("/TextPart") and len(user_parts["x-openai"]["oneOf"]) == 4
    assert CompletionRequest.model_json_schema()["required"] == ["model"]


def test_a_long_token_id_list_is_checked_in_one_pass() -> None:
    ids = list(range(200_000))
    assert _integral_ids(ids) is ids  # integers already: no copy, no per-item Python call
    assert validate_request("completions", {"model": "m", "prompt": ids}).prompt == ids  # type: ignore[union-attr]
