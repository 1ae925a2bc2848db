"""The request bodies this app accepts on /v1/chat/completions and /v1/completions, as schemas
(`deployments.http.schema`): OpenAI's fields with their types, nullability and ranges (written from
the field list of OpenAI's API reference and its Python SDK's request types), what of each this
app serves (`Served`), and the SGLang extras it serves (`extra=True`).

`conform_chat` / `conform_completion` check a parsed body against them and return it normalized
to the one form the request models and the engine take, or raise `Refused` naming the field:

- `null` where OpenAI's schema allows it means the default (the field is dropped);
- integral numbers for integers (`max_tokens: 4.0`) are integers;
- unknown fields and wrong types (`"stream": "yes"`) are refused, as OpenAI refuses them;
  `model` is required (OpenAI: 400), and must be the model served (Ray's 404 otherwise);
- accepted fields with no effect on the answer (`store`, `metadata`, `user`, `prediction`, ...)
  are dropped (`service_tier` and SGLang's `priority` stay: class routing reads them);
- messages: roles in lower case, text content parts (and an assistant's `refusal` parts or
  field) joined into one string (as SGLang does for string templates), a null or missing
  content as "" (what the template renders), a deprecated `function_call` as `tool_calls`;
- completions: no prompt, a null prompt or an empty text means the start of a document (OpenAI's
  default prompt is its tokenizer's document separator; here the model's BOS token);
- `top_p: 0` (OpenAI: the most likely token only; SGLang refuses 0) is sent as the smallest
  top_p, which keeps the same single token;
- a `json_schema` response format without a schema constrains to any JSON.

What the app refuses by design (a 400 naming the field) is each `Served` node's `why`; the
list is in docs/structured_output.md ("Refused by design").
"""

from __future__ import annotations

from typing import Any

from deployments.http.openai_parts import (
    CACHE_HINT,
    CUSTOM_TOOL,
    FUNCTION_DEFINITION,
    FUNCTION_TOOL,
    MESSAGE,
    RESPONSE_FORMAT,
    STRUCTURAL_TAG,
    TEXT,
    TEXT_CONTENT,
    TOOL_CHOICE,
    kind,
    obj,
    opt,
    req,
)
from deployments.http.schema import (
    Array,
    Boolean,
    Const,
    Integer,
    Never,
    Node,
    Number,
    Object,
    OneOf,
    Problem,
    Prop,
    Refused,
    Served,
    Text,
    conform,
)

__all__ = [
    "CHAT_REQUEST",
    "COMPLETION_REQUEST",
    "DEFAULT_PROMPT",
    "MESSAGE",
    "STRUCTURAL_TAG",
    "TOP_P_ZERO",
    "conform_chat",
    "conform_completion",
]

DEFAULT_PROMPT = "<|endoftext|>"  # OpenAI's, for a model whose BOS token is unknown
TOP_K_MAX = 2**30  # SGLang's TOP_K_ALL: -1 becomes it
TOP_P_ZERO = 1e-9  # keeps exactly the most likely token (its probability is at least 1/vocab)
INT64 = (-(2**63), 2**63 - 1)


# -- fields both endpoints share ----------------------------------------------------------------
_STOP = OneOf((TEXT, Array(TEXT, max_items=4)))
_SERVICE_TIER = Text(enum=("auto", "default", "flex", "scale", "priority", "fast"))
_PENALTY = Number(minimum=-2, maximum=2)
_ONE_CHOICE = Served(Integer(minimum=1, maximum=128), Const(1), "this app generates one choice per request")
_SHARED: dict[str, Prop] = {
    "model": req(TEXT),
    "frequency_penalty": opt(_PENALTY),
    "presence_penalty": opt(_PENALTY),
    "logit_bias": opt(Object(values=Number(minimum=-100, maximum=100), keys=Text(pattern=r"[0-9]+"))),
    "n": opt(_ONE_CHOICE),
    "seed": opt(Integer(minimum=INT64[0], maximum=INT64[1])),
    "stop": opt(_STOP),
    "stream": opt(Boolean()),
    "stream_options": opt(
        obj({"include_usage": opt(Boolean()), "include_obfuscation": opt(Boolean(), ignored=True)}),
        "Only with stream: true.",
    ),
    "temperature": opt(Number(minimum=0, maximum=2)),
    "top_p": opt(Number(minimum=0, maximum=1), "0 keeps the most likely token only."),
    "user": Prop(TEXT, ignored=True),
}
# SGLang sampling extras the replica passes on (deployments.replica.server) and structured output
# (deployments.http.structured)
_EXTRA_NODES: dict[str, Node] = {
    # SGLang keeps top_k in an int32 tensor: 2**31 killed the replica's scheduler; -1 and any
    # value up to 2**30 (SGLang's own "whole vocabulary") are served
    "top_k": Integer(minimum=-1, maximum=TOP_K_MAX),
    "min_p": Number(minimum=0, maximum=1),
    "min_tokens": Integer(minimum=0),
    "repetition_penalty": Number(minimum=0, maximum=2, exclusive_minimum=True),
    "stop_token_ids": Array(Integer(minimum=0)),
    "no_stop_trim": Boolean(),
    "ignore_eos": Boolean(),
    "skip_special_tokens": Boolean(),
    "regex": TEXT,
    "ebnf": TEXT,
    "stop_regex": OneOf((TEXT, Array(TEXT))),
    # read by class routing (docs/routing.md): < 0 interactive, > 0 batch
    "priority": Integer(minimum=INT64[0], maximum=INT64[1]),
}
_MODE = obj({"mode": kind("score", "block")})  # a moderation policy's
_EXTRAS = {name: opt(node, extra=True) for name, node in _EXTRA_NODES.items()}
_CHAT_ONLY_HINT = "tool calls need /v1/chat/completions"
_COMPLETION_HINTS = {
    "tools": _CHAT_ONLY_HINT,
    "tool_choice": _CHAT_ONLY_HINT,
    "parallel_tool_calls": _CHAT_ONLY_HINT,
}
_CHAT_HINTS = {
    "json_schema": 'it is a /v1/completions field: use response_format {"type": "json_schema", ...}'
}

CHAT_REQUEST = Object(
    props={
        "messages": req(Array(MESSAGE, min_items=1)),
        **_SHARED,
        "logprobs": opt(Served(Boolean(), Const(False), "this app returns no logprobs")),
        "top_logprobs": opt(Served(Integer(minimum=0, maximum=20), Const(0), "this app returns no logprobs")),
        "max_tokens": opt(Integer(minimum=1)),
        "max_completion_tokens": opt(Integer(minimum=1)),
        "modalities": opt(
            Served(
                Array(Text(enum=("text", "audio"))),
                Array(Text(enum=("text",))),
                "this model answers in text only",
            )
        ),
        "audio": opt(
            Served(
                obj({"voice": req(TEXT), "format": req(TEXT)}),
                Never(),
                "this model answers in text only",
            )
        ),
        "prediction": opt(obj({"type": kind("content"), "content": req(TEXT_CONTENT)}), ignored=True),
        "response_format": opt(RESPONSE_FORMAT),
        "tools": opt(
            Array(
                Served(
                    OneOf((FUNCTION_TOOL, CUSTOM_TOOL), tag="type"),
                    FUNCTION_TOOL,
                    "custom tools are not supported: send function tools",
                )
            )
        ),
        "tool_choice": opt(TOOL_CHOICE),
        "parallel_tool_calls": opt(Boolean()),
        "functions": opt(
            Served(Array(FUNCTION_DEFINITION, min_items=1, max_items=128), Never(), "deprecated: send tools")
        ),
        "function_call": opt(
            Served(
                OneOf((Text(enum=("none", "auto")), obj({"name": req(TEXT)}))),
                Never(),
                "deprecated: send tool_choice",
            )
        ),
        "reasoning_effort": opt(
            Text(enum=("none", "minimal", "low", "medium", "high", "xhigh", "max")),
            "Passed to the chat template.",
        ),
        "verbosity": opt(
            Served(Text(enum=("low", "medium", "high")), Never(), "this model has no verbosity setting")
        ),
        "web_search_options": opt(Served(Object(open=True), Never(), "this app does not search the web")),
        "store": opt(Boolean(), ignored=True),
        "metadata": opt(Object(values=Text(max_length=512)), ignored=True),
        "service_tier": opt(_SERVICE_TIER, "Read by class routing (docs/routing.md)."),
        "moderation": opt(
            Served(
                obj({"model": req(TEXT), "policy": opt(obj({"input": opt(_MODE), "output": opt(_MODE)}))}),
                Never(),
                "this app runs no moderation model",
            )
        ),
        "safety_identifier": opt(TEXT, ignored=True),
        "prompt_cache_key": opt(TEXT, CACHE_HINT, ignored=True),
        "prompt_cache_options": Prop(
            obj({"mode": Prop(Text(enum=("implicit", "explicit"))), "ttl": Prop(Text(enum=("30m",)))}),
            ignored=True,
            doc=CACHE_HINT,
        ),
        # "in_memory" is OpenAI's spelling; "in-memory" (its reference's, earlier) stays accepted
        "prompt_cache_retention": opt(Text(enum=("in_memory", "in-memory", "24h")), CACHE_HINT, ignored=True),
        **_EXTRAS,
        "chat_template_kwargs": opt(Object(open=True), extra=True),
    },
    hints=_CHAT_HINTS,
)

_TOKEN_IDS = Array(Integer(minimum=0), min_items=1)
PROMPT = OneOf((TEXT, Array(TEXT, min_items=1), _TOKEN_IDS, Array(_TOKEN_IDS, min_items=1)))
COMPLETION_REQUEST = Object(
    props={
        "prompt": opt(PROMPT, "No prompt, null or an empty text: the start of a document."),
        **_SHARED,
        "best_of": opt(Served(Integer(minimum=0, maximum=20), Const(1), "one candidate per prompt")),
        "echo": opt(Served(Boolean(), Const(False), "this app does not echo the prompt")),
        "logprobs": opt(Served(Integer(minimum=0, maximum=5), Never(), "this app returns no logprobs")),
        "max_tokens": opt(
            Served(
                Integer(minimum=0),
                Integer(minimum=1),
                "0 generates nothing: this app does not echo the prompt",
            )
        ),
        "suffix": opt(Served(TEXT, Const(""), "this app does not insert text (no suffix)")),
        **_EXTRAS,
        "json_schema": opt(TEXT, extra=True),
        "response_format": opt(RESPONSE_FORMAT, extra=True),
        "service_tier": opt(_SERVICE_TIER, "Read by class routing (docs/routing.md).", extra=True),
    },
    hints=_COMPLETION_HINTS,
)


# -- normalizing --------------------------------------------------------------------------------
def _missing_model(body: dict[str, Any], model_id: str | None) -> None:
    if "model" not in body or body["model"] is None:
        served = f": this app serves {model_id!r}" if model_id else ""
        raise Refused(Problem(400, f"model is required{served}", "model"))


def _shared(body: dict[str, Any]) -> dict[str, Any]:
    if body.get("top_p") == 0:
        body["top_p"] = TOP_P_ZERO
    if "stream_options" in body and not body.get("stream"):
        raise Refused(Problem(400, "stream_options is only allowed with stream: true", "stream_options"))
    fmt = body.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        fmt["json_schema"].setdefault("schema", {})  # no schema: any JSON
    return body


def _text_of(content: Any) -> str:
    """A message's content as one string: text and refusal parts joined (SGLang's join)."""
    if isinstance(content, str):
        return content
    return " ".join(p.get("text", p.get("refusal", "")) for p in content)


def _message(message: dict[str, Any]) -> dict[str, Any]:
    out = dict(message)
    refusal = out.pop("refusal", None)
    if "content" in out or out["role"] == "assistant":
        out["content"] = _text_of(out.get("content", ""))
    if out["role"] == "assistant":
        out["content"] = out["content"] or refusal or ""
        call = out.pop("function_call", None)
        if call is not None and not out.get("tool_calls"):
            out["tool_calls"] = [{"id": f"call_{call['name']}", "type": "function", "function": call}]
    return out


def conform_chat(body: dict[str, Any], *, model_id: str | None = None) -> dict[str, Any]:
    """A chat body checked and normalized (see the module docstring); raises Refused."""
    _missing_model(body, model_id)
    messages = body.get("messages")
    if isinstance(messages, list):  # roles are case-insensitive (SGLang's rule)
        body = {
            **body,
            "messages": [
                {**m, "role": m["role"].lower()}
                if isinstance(m, dict) and isinstance(m.get("role"), str)
                else m
                for m in messages
            ],
        }
    out = _shared(conform(CHAT_REQUEST, body))
    out["messages"] = [_message(m) for m in out["messages"]]
    return out


def conform_completion(
    body: dict[str, Any],
    *,
    model_id: str | None = None,
    document_start: str | None = None,
) -> dict[str, Any]:
    """A completions body checked and normalized (see the module docstring); raises Refused."""
    _missing_model(body, model_id)
    out = _shared(conform(COMPLETION_REQUEST, body))
    start = document_start or DEFAULT_PROMPT
    prompt = out.get("prompt", "")
    if prompt == "":
        out["prompt"] = start
    elif isinstance(prompt, list) and "" in prompt:
        out["prompt"] = [p if p != "" else start for p in prompt]
    return out
