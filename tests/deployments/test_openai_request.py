"""The request models the body guard validates chat and completions bodies into
(deployments.http.openai_models): OpenAI-valid bodies come out normalized to what the request models
and the engine take, everything else is refused naming the field. Its field lists are checked
against the OpenAI Python SDK's request types (an independent transcription of OpenAI's
schema). What the real app answers to generated requests: test_openai_conformance.py."""

from __future__ import annotations

import typing
from typing import Any

import pytest
from openai.types import completion_create_params as completion_params
from openai.types.chat import (
    ChatCompletionAssistantMessageParam,
    ChatCompletionDeveloperMessageParam,
    ChatCompletionFunctionMessageParam,
    ChatCompletionSystemMessageParam,
    ChatCompletionToolMessageParam,
    ChatCompletionUserMessageParam,
)
from openai.types.chat import completion_create_params as chat_params
from pydantic import BaseModel

from deployments.http.openai_messages import ChatMessage
from deployments.http.openai_models import (
    TOP_P_ZERO,
    ChatCompletionRequest,
    CompletionRequest,
    validate_request,
)
from deployments.http.openai_types import Refused

# the message models by role, read from the ChatMessage union (one model per role)
MESSAGES = {
    typing.get_args(m.model_fields["role"].annotation)[0]: m
    for m in typing.get_args(typing.get_args(ChatMessage)[0])
}


def conform_chat(body: dict[str, Any], *, model_id: str | None = None) -> dict[str, Any]:
    return validate_request("chat", body, model_id=model_id).normalized()


def conform_completion(
    body: dict[str, Any], *, model_id: str | None = None, document_start: str | None = None
) -> dict[str, Any]:
    return validate_request(
        "completions", body, model_id=model_id, document_start=document_start
    ).normalized()


USER = [{"role": "user", "content": "hi"}]
CHAT = {"model": "m", "messages": USER}
TEXT = {"model": "m", "prompt": "hi"}

# fields OpenAI's API reference has that this SDK release (openai 2.6) does not type yet (the
# SDK of OpenAI's spec of 2026-08-21 has them)
NEWER_THAN_THE_SDK = {"prompt_cache_retention", "moderation", "prompt_cache_options"}


def _keys(typed_dict: Any) -> set[str]:
    return set(typed_dict.__required_keys__ | typed_dict.__optional_keys__)


def _required(typed_dict: Any) -> set[str]:
    hints = typing.get_type_hints(typed_dict, include_extras=True)
    return {k for k, hint in hints.items() if typing.get_origin(hint) is typing.Required}


def _openai_fields(model: type[BaseModel]) -> set[str]:
    """The model's fields by their JSON names, without SGLang's extras (marked `x-sglang`)."""
    return {
        field.alias or name
        for name, field in model.model_fields.items()
        if not (isinstance(field.json_schema_extra, dict) and field.json_schema_extra.get("x-sglang"))
    }


@pytest.mark.parametrize(
    ("schema", "sdk"),
    [
        (ChatCompletionRequest, _keys(chat_params.CompletionCreateParamsStreaming)),
        (CompletionRequest, _keys(completion_params.CompletionCreateParamsStreaming)),
    ],
    ids=["chat", "completions"],
)
def test_every_openai_request_field_is_known_and_extras_are_marked(
    schema: type[BaseModel], sdk: set[str]
) -> None:
    assert _openai_fields(schema) - NEWER_THAN_THE_SDK == sdk


@pytest.mark.parametrize(
    "message_type",
    [
        ChatCompletionSystemMessageParam,
        ChatCompletionDeveloperMessageParam,
        ChatCompletionUserMessageParam,
        ChatCompletionAssistantMessageParam,
        ChatCompletionToolMessageParam,
        ChatCompletionFunctionMessageParam,
    ],
)
def test_every_message_role_has_openais_fields(message_type: Any) -> None:
    role = typing.get_args(typing.get_type_hints(message_type)["role"])[0]
    branch = MESSAGES[role]
    assert _openai_fields(branch) == _keys(message_type)
    assert {k for k, f in branch.model_fields.items() if f.is_required()} == _required(message_type)


CHAT_SERVED: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    (
        "nulls are defaults",
        {
            "n": None,
            "stream": None,
            "frequency_penalty": None,
            "presence_penalty": None,
            "logprobs": None,
            "parallel_tool_calls": None,
            "temperature": None,
            "tool_choice": None,
            "stop": None,
        },
        {},
    ),
    ("integral floats are integers", {"max_tokens": 4.0, "seed": 7.0}, {"max_tokens": 4, "seed": 7}),
    ("top_p 0 keeps the most likely token", {"top_p": 0}, {"top_p": TOP_P_ZERO}),
    ("fields with no effect are dropped", {"store": True, "metadata": {"a": "b"}, "user": "u"}, {}),
    (
        "prompt-cache hints (OpenAI's spec of 2026-08-21) are accepted and dropped",
        {
            "messages": [
                {
                    "role": "system",
                    "content": [
                        {"type": "text", "text": "s", "prompt_cache_breakpoint": {"mode": "explicit"}}
                    ],
                },
                *USER,
            ],
            "prompt_cache_key": None,
            "safety_identifier": None,
            "prompt_cache_retention": "in_memory",
            "prompt_cache_options": {"mode": "explicit", "ttl": "30m"},
            "moderation": None,
        },
        {"messages": [{"role": "system", "content": "s"}, *USER]},
    ),
    (
        "the older retention spelling too",
        {"prompt_cache_retention": "in-memory", "prompt_cache_key": "k"},
        {},
    ),
    (
        "the newer enum values",
        {"reasoning_effort": "max", "service_tier": "fast"},
        {"reasoning_effort": "max", "service_tier": "fast"},
    ),
    (
        "the served values",
        {"n": 1, "logprobs": False, "top_logprobs": 0},
        {"n": 1, "logprobs": False, "top_logprobs": 0},
    ),
    (
        "a function message without content",
        {"messages": [{"role": "function", "name": "f", "content": None}]},
        {"messages": [{"role": "function", "name": "f", "content": ""}]},
    ),
    (
        "an assistant message without content",
        {"messages": [*USER, {"role": "assistant"}]},
        {"messages": [*USER, {"role": "assistant", "content": ""}]},
    ),
    (
        "refusal parts and the refusal field are what the assistant said",
        {
            "messages": [
                {
                    "role": "assistant",
                    "content": [{"type": "refusal", "refusal": "no"}, {"type": "text", "text": "."}],
                },
                {"role": "assistant", "content": None, "refusal": "I can't"},
            ]
        },
        {"messages": [{"role": "assistant", "content": "no ."}, {"role": "assistant", "content": "I can't"}]},
    ),
    (
        "text parts become one string, roles lower case",
        {
            "messages": [
                {"role": "User", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
            ]
        },
        {"messages": [{"role": "user", "content": "a b"}]},
    ),
    (
        "a deprecated function_call is a tool call",
        {
            "messages": [
                {"role": "assistant", "content": None, "function_call": {"name": "f", "arguments": "{}"}}
            ]
        },
        {
            "messages": [
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {"id": "call_f", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                    ],
                }
            ]
        },
    ),
    (
        "a json_schema format without a schema: any JSON",
        {"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
        {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}},
    ),
]


@pytest.mark.parametrize(("case", "extra", "changed"), CHAT_SERVED, ids=[c[0] for c in CHAT_SERVED])
def test_openai_valid_chat_bodies_are_normalized(
    case: str, extra: dict[str, Any], changed: dict[str, Any]
) -> None:
    assert conform_chat({**CHAT, **extra}) == {**CHAT, **changed}


TEXT_SERVED: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("no prompt: the start of a document", {"prompt": None}, {"prompt": "<s>"}),
    ("an empty text too", {"prompt": ["a", ""]}, {"prompt": ["a", "<s>"]}),
    (
        "nulls are defaults",
        {"echo": None, "stream": None, "max_tokens": None, "n": None, "temperature": None, "top_p": None},
        {},
    ),
    ("integral floats in token ids", {"prompt": [1.0, 2]}, {"prompt": [1, 2]}),
    (
        "the served values",
        {"echo": False, "best_of": 1, "suffix": ""},
        {"echo": False, "best_of": 1, "suffix": ""},
    ),
]


@pytest.mark.parametrize(("case", "extra", "changed"), TEXT_SERVED, ids=[c[0] for c in TEXT_SERVED])
def test_openai_valid_completion_bodies_are_normalized(
    case: str, extra: dict[str, Any], changed: dict[str, Any]
) -> None:
    assert conform_completion({**TEXT, **extra}, document_start="<s>") == {**TEXT, **changed}


def test_without_a_known_bos_token_the_default_prompt_is_openais() -> None:
    assert conform_completion({"model": "m"})["prompt"] == "<|endoftext|>"


REFUSED: list[tuple[str, str, dict[str, Any], str, str]] = [
    ("no model", "chat", {"model": None}, "model", "model is required: this app serves 'm'"),
    ("stream yes", "chat", {"stream": "yes"}, "stream", "must be true or false"),
    ("unknown field", "chat", {"foo": 1}, "foo", "is not a field of this request"),
    (
        "an SGLang field the app does not serve",
        "chat",
        {"return_hidden_states": True},
        "return_hidden_states",
        "not a field",
    ),
    ("unknown message field", "chat", {"messages": [{**USER[0], "x": 1}]}, "messages[0].x", "not a field"),
    ("json_schema on chat", "chat", {"json_schema": "{}"}, "json_schema", "use response_format"),
    ("n 2", "chat", {"n": 2}, "n", "one choice per request"),
    ("logprobs", "chat", {"logprobs": True}, "logprobs", "no logprobs"),
    (
        "an image",
        "chat",
        {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u"}}]}]},
        "messages[0].content[0]",
        "text only",
    ),
    ("audio out", "chat", {"modalities": ["text", "audio"]}, "modalities", "text only"),
    (
        "moderation",
        "chat",
        {"moderation": {"model": "omni-moderation-latest", "policy": {"input": {"mode": "block"}}}},
        "moderation",
        "runs no moderation model",
    ),
    (
        "a cache ttl OpenAI does not offer",
        "chat",
        {"prompt_cache_options": {"ttl": "1h"}},
        "prompt_cache_options.ttl",
        "'30m'",
    ),
    (
        "a tool message without its call id",
        "chat",
        {"messages": [{"role": "tool", "content": "x"}]},
        "messages[0].tool_call_id",
        "is required",
    ),
    (
        "an empty content list",
        "chat",
        {"messages": [{"role": "user", "content": []}]},
        "messages[0].content",
        "must not be empty",
    ),
    ("a bad role", "chat", {"messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role", "'user'"),
    (
        "stream_options without stream",
        "chat",
        {"stream_options": {"include_usage": True}},
        "stream_options",
        "only allowed with stream",
    ),
    (
        "allowed_tools",
        "chat",
        {"tool_choice": {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": []}}},
        "tool_choice",
        "not supported",
    ),
    (
        "json_schema without its object",
        "chat",
        {"response_format": {"type": "json_schema"}},
        "response_format.json_schema",
        "is required",
    ),
    (
        "a bad function name",
        "chat",
        {"tools": [{"type": "function", "function": {"name": "a b"}}]},
        "tools[0].function.name",
        "must match",
    ),
    ("5 stops", "completions", {"stop": ["a", "b", "c", "d", "e"]}, "stop", "at most 4"),
    ("echo", "completions", {"echo": True}, "echo", "does not echo"),
    ("logprobs 0 (the sampled tokens' logprobs)", "completions", {"logprobs": 0}, "logprobs", "no logprobs"),
    ("suffix", "completions", {"suffix": "x"}, "suffix", "no suffix"),
    ("best_of 2", "completions", {"best_of": 2}, "best_of", "one candidate"),
    ("tools on completions", "completions", {"tools": []}, "tools", "need /v1/chat/completions"),
    ("max_tokens 2.5", "completions", {"max_tokens": 2.5}, "max_tokens", "must be an integer"),
    ("max_tokens 0", "completions", {"max_tokens": 0}, "max_tokens", "generates nothing"),
    ("temperature 3", "completions", {"temperature": 3}, "temperature", "[0, 2]"),
    ("an empty token-id list", "completions", {"prompt": [[1], []]}, "prompt[1]", "not be empty"),
]


@pytest.mark.parametrize(
    ("case", "endpoint", "extra", "param", "fragment"), REFUSED, ids=[c[0] for c in REFUSED]
)
def test_refused_bodies_name_the_field(
    case: str, endpoint: str, extra: dict[str, Any], param: str, fragment: str
) -> None:
    body = {**(CHAT if endpoint == "chat" else TEXT), **extra}
    if body.get("model") is None:
        body.pop("model")
    with pytest.raises(Refused) as refused:
        (conform_chat if endpoint == "chat" else conform_completion)(body, model_id="m")
    problem = refused.value.problem
    assert problem.status == 400 and fragment in problem.message and problem.param == param, problem


def test_every_refusal_by_design_is_listed_in_the_docs() -> None:
    """Each value OpenAI allows and this app refuses (a field served in part) is in
    docs/structured_output.md's "Refused by design" table, under its field's name."""
    import pathlib
    import re

    from tests.deployments.openai_gen import CHAT_SCHEMA, COMPLETION_SCHEMA, _served_paths

    doc = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "structured_output.md").read_text()
    table = doc.split("**Refused by design**", 1)[1].split("\n\n", 2)[1]
    listed = set(re.findall(r"`([a-z_\[\].]+)`", table))
    for schema in (CHAT_SCHEMA, COMPLETION_SCHEMA):
        for path, _ in _served_paths(schema):
            name = re.sub(r"\[0\]", "[]", path)
            assert name in listed, (name, sorted(listed))
