"""Structured-output request handling, pure (no engine): what SGLang gets per field, the 400s and
their messages, tool-call answers. The HTTP behaviour on the real app is in
test_serve_structured.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from deployments.http import structured
from deployments.http.openai_models import ChatCompletionRequest, CompletionRequest
from deployments.http.structured import check_structured, sampling_params

MSG = [{"role": "user", "content": "hi"}]
TOOL = {"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}}


def chat(**fields: Any) -> Any:
    return ChatCompletionRequest.model_validate({"model": "m", "messages": MSG, **fields})


def text(**fields: Any) -> Any:
    return CompletionRequest.model_validate({"model": "m", "prompt": "x", **fields})


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        (text(regex="a+"), {"regex": "a+"}),
        (text(ebnf='root ::= "a"'), {"ebnf": 'root ::= "a"'}),
        (text(json_schema=json.dumps(SCHEMA)), {"json_schema": json.dumps(SCHEMA)}),
        (chat(response_format={"type": "json_object"}), {"json_schema": '{"type": "object"}'}),
        (
            chat(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA}}),
            {"json_schema": json.dumps(SCHEMA)},
        ),
        (chat(response_format={"type": "text"}), {}),
        (chat(logit_bias={"5": 10}), {"logit_bias": {"5": 10}}),
        (chat(stop_regex="ab+"), {"stop_regex": "ab+"}),
        (chat(tools=[TOOL], tool_choice="none"), {}),
    ],
    ids=lambda v: "" if isinstance(v, dict) else None,
)
def test_each_field_reaches_sglang_as_its_sampling_param(request_: Any, expected: dict[str, Any]) -> None:
    assert sampling_params(request_) == expected


def test_tool_calls_are_constrained_to_sglangs_json_array_and_parsed_back() -> None:
    request = chat(tools=[TOOL], tool_choice="required", parallel_tool_calls=False)
    schema = json.loads(sampling_params(request)["json_schema"])
    assert schema["type"] == "array" and schema["maxItems"] == 1
    assert schema["items"]["anyOf"][0]["properties"]["name"]["enum"] == ["add"]
    calls = structured.parse_tool_calls('[{"name": "add", "parameters": {"a": 1}}]')
    message, finish = structured.tool_call_message("...", "stop", calls)
    assert finish == "tool_calls" and message["content"] is None
    assert message["tool_calls"][0]["function"] == {"name": "add", "arguments": '{"a": 1}'}
    # cut off at max_tokens: the text comes back as content, no tool_calls
    message, finish = structured.tool_call_message('[{"name": "ad', "length", None)
    assert finish == "length" and message == {"role": "assistant", "content": '[{"name": "ad'}


@pytest.mark.parametrize(
    ("request_", "words"),
    [
        (text(regex="a", json_schema="{}"), "regex and json_schema"),
        (chat(tools=[TOOL]), "send tool_choice 'required'"),  # "auto": what to send instead
        (chat(tools=[TOOL], tool_choice="auto"), "send tool_choice 'required'"),
        (chat(tool_choice="required"), "tool_choice requires tools"),
        (chat(logit_bias={"5000": 1}), "logit_bias token id 5000 is outside the vocabulary"),
        (text(stop_regex="("), "stop_regex '(' is not a valid"),
        (text(json_schema="[]"), "json_schema must be a JSON schema"),
    ],
)
def test_what_cannot_be_honoured_is_refused_naming_the_field(request_: Any, words: str) -> None:
    reason = check_structured(request_, vocab_size=1000)
    assert reason is not None and words in reason, reason


@pytest.mark.parametrize(
    "request_",
    [
        chat(tools=[TOOL], tool_choice="required"),
        chat(tools=[TOOL], tool_choice={"type": "function", "function": {"name": "add"}}),
        chat(tools=[TOOL], tool_choice="none"),
    ],
)
def test_tool_choices_the_replica_answers_as_a_json_array_pass(request_: Any) -> None:
    assert check_structured(request_) is None


@pytest.mark.parametrize(
    ("bias", "param", "words"),
    [({"x": 1}, "logit_bias.x", "must match"), ({"5": 101}, "logit_bias.5", "must be in [-100, 100]")],
)
def test_logit_bias_keys_and_values_are_the_request_models_to_refuse(
    bias: dict[str, Any], param: str, words: str
) -> None:
    from deployments.http.openai_models import validate_request
    from deployments.http.openai_types import Refused

    with pytest.raises(Refused) as refused:
        validate_request("chat", {"model": "m", "messages": MSG, "logit_bias": bias})
    problem = refused.value.problem
    assert problem.param == param and words in problem.message, problem
