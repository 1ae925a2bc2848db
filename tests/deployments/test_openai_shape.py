"""Non-streamed answers turned into OpenAI's schema (deployments.http.openai_shape): what SGLang's
response models dump, checked against OpenAI's response schemas written here from
its API reference's field lists (required, nullable, enums), before and after shaping."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match
from sglang.srt.entrypoints.openai.protocol import (
    ChatCompletionResponse,
    CompletionResponse,
)

from deployments.http.openai_shape import (
    shape_chat_response,
    shape_completion_response,
)
from deployments.http.structured import tool_call, tool_call_message

# -- a few words of JSON Schema, checked by `jsonschema` ----------------------------------------
Node = dict[str, Any]


def Text(enum: tuple[str, ...] | None = None) -> Node:
    return {"type": "string", "enum": list(enum)} if enum else {"type": "string"}


def Integer() -> Node:
    return {"type": "integer"}


def Array(items: Node) -> Node:
    return {"type": "array", "items": items}


def AnyJson() -> Node:
    return {}


@dataclasses.dataclass(frozen=True)
class Prop:
    node: Node
    required: bool = False
    nullable: bool = False


def Object(props: dict[str, Prop] | None = None, open: bool = False) -> Node:
    """An object of these properties only (`open`: any object); a null only where nullable."""
    if open:
        return {"type": "object"}
    properties = {
        k: {"anyOf": [p.node, {"type": "null"}]} if p.nullable else {**p.node, "not": {"type": "null"}}
        for k, p in (props or {}).items()
    }
    required = [k for k, p in (props or {}).items() if p.required]
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


# -- OpenAI's response schemas: required (R), nullable (N); other fields any non-null value ------
_OPEN = Object(open=True)
_SGLANG_EXTRAS = (
    "matched_stop",
    "reasoning_tokens",
    "reasoning_content",
    "meta_info",
    "metadata",
    "sglext",
    "hidden_states",
    "token_ids",
    "prompt_token_ids",
)


def _schema(required: dict[str, Node], optional: dict[str, Node], nullable: set[str]) -> Node:
    props = {k: Prop(n, required=True, nullable=k in nullable) for k, n in required.items()}
    props |= {k: Prop(n, nullable=k in nullable) for k, n in optional.items()}
    props |= {k: Prop(AnyJson()) for k in _SGLANG_EXTRAS if k not in props}  # SGLang's, never null
    return Object(props=props)


USAGE = _schema(
    {"prompt_tokens": Integer(), "completion_tokens": Integer(), "total_tokens": Integer()},
    {
        "prompt_tokens_details": Object({"cached_tokens": Prop(Integer()), "audio_tokens": Prop(Integer())}),
        "completion_tokens_details": _OPEN,
    },
    set(),
)
TOOL_CALL = Object(
    {
        "id": Prop(Text(), required=True),
        "type": Prop(Text(enum=("function",)), required=True),
        "function": Prop(
            Object({"name": Prop(Text(), required=True), "arguments": Prop(Text(), required=True)}),
            required=True,
        ),
    }
)
MESSAGE = _schema(
    {"role": Text(enum=("assistant",)), "content": Text(), "refusal": Text()},
    {"tool_calls": Array(TOOL_CALL), "annotations": Array(_OPEN), "function_call": _OPEN, "audio": _OPEN},
    {"content", "refusal", "audio"},
)
_FINISH = Text(enum=("stop", "length", "tool_calls", "content_filter", "function_call"))
_TOP = {"id": Text(), "created": Integer(), "model": Text()}
_TOP_OPTIONAL = {"service_tier": Text(), "system_fingerprint": Text()}
CHAT = _schema(
    {
        **_TOP,
        "object": Text(enum=("chat.completion",)),
        "choices": Array(
            _schema(
                {"index": Integer(), "message": MESSAGE, "finish_reason": _FINISH, "logprobs": _OPEN},
                {},
                {"logprobs"},
            )
        ),
    },
    {"usage": USAGE, **_TOP_OPTIONAL},
    {"service_tier"},
)


def _completion() -> Node:
    choice = _schema(
        {
            "index": Integer(),
            "text": Text(),
            "logprobs": _OPEN,
            "finish_reason": Text(enum=("stop", "length", "content_filter")),
        },
        {},
        {"logprobs"},
    )
    return _schema(
        {**_TOP, "object": Text(enum=("text_completion",)), "choices": Array(choice)},
        {"usage": USAGE, "system_fingerprint": Text()},
        set(),
    )


COMPLETION = _completion()


def _valid(schema: Node, body: dict[str, Any]) -> str | None:
    """Why `body` is not valid against the schema (the first field at fault), else None."""
    error = best_match(Draft202012Validator(schema).iter_errors(json.loads(json.dumps(body))))
    return None if error is None else f"{error.json_path}: {error.message}"


# -- what SGLang's models and Ray's SGLangServer dump --------------------------------------------
_USAGE = {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
TEXT_ANSWER = ChatCompletionResponse(
    id="a",
    model="m",
    choices=[{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
    usage=_USAGE,
).model_dump()
_calls_message, _ = tool_call_message('[{"name": "f", "parameters": {}}]', "stop", [tool_call("f", "{}")])
TOOL_ANSWER = ChatCompletionResponse(
    id="b",
    model="m",
    choices=[{"index": 0, "message": _calls_message, "finish_reason": "tool_calls"}],
    usage={**_USAGE, "prompt_tokens_details": {"cached_tokens": 2}},
).model_dump()
TEXT_COMPLETION = CompletionResponse(
    id="f",
    model="m",
    choices=[{"index": 0, "text": "x", "logprobs": None, "finish_reason": "length"}],
    usage=_USAGE,
).model_dump()

CASES = [
    ("a text answer", shape_chat_response, CHAT, TEXT_ANSWER),
    ("a tool-call answer", shape_chat_response, CHAT, TOOL_ANSWER),
    ("a completion", shape_completion_response, COMPLETION, TEXT_COMPLETION),
]


@pytest.mark.parametrize(("case", "shape", "schema", "dumped"), CASES, ids=[c[0] for c in CASES])
def test_shaped_bodies_are_valid_against_openais_response_schema(
    case: str, shape: Any, schema: Object, dumped: dict[str, Any]
) -> None:
    before = json.dumps(dumped)
    assert _valid(schema, shape(dumped)) is None
    assert json.dumps(dumped) == before  # the input is left as it was


@pytest.mark.parametrize(
    ("dumped", "where", "fault"),
    [
        (
            TEXT_ANSWER,
            ("choices", 0, "message", "tool_calls"),
            None,
        ),  # null, where OpenAI has an array or nothing
        (TOOL_ANSWER, ("choices", 0, "message", "refusal"), "absent"),  # required (nullable)
        (TEXT_COMPLETION, ("choices", 0, "matched_stop"), None),
    ],
)
def test_what_sglang_dumps_is_not_valid_unshaped(
    dumped: dict[str, Any], where: tuple[Any, ...], fault: Any
) -> None:
    """The deviations the reliability report found (what shaping fixes): each is in the dump, and the dump
    fails OpenAI's schema."""
    schema = {"chat.completion": CHAT, "text_completion": COMPLETION}[dumped["object"]]
    holder: Any = dumped
    for key in where[:-1]:
        holder = holder[key]
    assert holder.get(where[-1], "absent") == fault
    assert _valid(schema, dumped) is not None


def test_shaping_keeps_values_and_adds_only_what_openai_requires() -> None:
    shaped = shape_chat_response(TOOL_ANSWER)
    message = shaped["choices"][0]["message"]
    assert message == {
        "role": "assistant",
        "content": None,
        "refusal": None,
        "tool_calls": message["tool_calls"],
    }
    assert [c["function"] for c in message["tool_calls"]] == [{"name": "f", "arguments": "{}"}]
    assert "index" not in message["tool_calls"][0]  # a stream's field
    assert shaped["usage"]["prompt_tokens_details"] == {"cached_tokens": 2}
    assert shaped["choices"][0]["logprobs"] is None and shaped["choices"][0]["finish_reason"] == "tool_calls"
