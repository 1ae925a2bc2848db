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

from deployments.http.schema import (
    Array,
    Boolean,
    Const,
    Context,
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
    "STRUCTURAL_TAG",
    "TOP_P_ZERO",
    "conform_chat",
    "conform_completion",
]

DEFAULT_PROMPT = "<|endoftext|>"  # OpenAI's, for a model whose BOS token is unknown
TOP_P_ZERO = 1e-9  # keeps exactly the most likely token (its probability is at least 1/vocab)
INT64 = (-(2**63), 2**63 - 1)

_NAME = Text(pattern=r"[a-zA-Z0-9_-]{1,64}")
_TEXT = Text()
_JSON_SCHEMA = Object(open=True)


def _kind(*names: str) -> Prop:
    return Prop(Text(enum=names), required=True)


def _obj(props: dict[str, Prop], **kw: Any) -> Object:
    return Object(props=props, **kw)


def _req(node: Node) -> Prop:
    return Prop(node, required=True)


def _opt(node: Node, doc: str = "", *, ignored: bool = False, extra: bool = False) -> Prop:
    """An optional field where null means the default."""
    return Prop(node, nullable=True, doc=doc, ignored=ignored, extra=extra)


def _ingress_only(node: Node, served: Node, why: str) -> Served:
    return Served(node, served, why, ingress_only=True)


# -- messages ---------------------------------------------------------------------------------
TEXT_PART = _obj({"type": _kind("text"), "text": _req(_TEXT)})
REFUSAL_PART = _obj({"type": _kind("refusal"), "refusal": _req(_TEXT)})
_IMAGE_PART = _obj(
    {
        "type": _kind("image_url"),
        "image_url": _req(_obj({"url": _req(_TEXT), "detail": Prop(Text(enum=("auto", "low", "high")))})),
    }
)
_AUDIO_PART = _obj(
    {
        "type": _kind("input_audio"),
        "input_audio": _req(_obj({"data": _req(_TEXT), "format": _req(Text(enum=("wav", "mp3")))})),
    }
)
_FILE_PART = _obj(
    {
        "type": _kind("file"),
        "file": _req(_obj({"file_data": Prop(_TEXT), "file_id": Prop(_TEXT), "filename": Prop(_TEXT)})),
    }
)
_TEXT_ONLY = "this model takes text only"
TEXT_CONTENT = OneOf((_TEXT, Array(OneOf((TEXT_PART,), tag="type"), min_items=1)))
USER_CONTENT = OneOf(
    (
        _TEXT,
        Array(
            Served(
                OneOf((TEXT_PART, _IMAGE_PART, _AUDIO_PART, _FILE_PART), tag="type"), TEXT_PART, _TEXT_ONLY
            ),
            min_items=1,
        ),
    )
)
ASSISTANT_CONTENT = OneOf((_TEXT, Array(OneOf((TEXT_PART, REFUSAL_PART), tag="type"), min_items=1)))

_CALL_FUNCTION = _obj({"name": _req(_TEXT), "arguments": _req(_TEXT)})
FUNCTION_TOOL_CALL = _obj({"id": _req(_TEXT), "type": _kind("function"), "function": _req(_CALL_FUNCTION)})
_CUSTOM_TOOL_CALL = _obj(
    {
        "id": _req(_TEXT),
        "type": _kind("custom"),
        "custom": _req(_obj({"name": _req(_TEXT), "input": _req(_TEXT)})),
    }
)
_NAMED = {"name": Prop(_TEXT)}

MESSAGE = OneOf(
    (
        _obj({"role": _kind("system"), "content": _req(TEXT_CONTENT), **_NAMED}),
        _obj({"role": _kind("developer"), "content": _req(TEXT_CONTENT), **_NAMED}),
        _obj({"role": _kind("user"), "content": _req(USER_CONTENT), **_NAMED}),
        _obj(
            {
                "role": _kind("assistant"),
                "content": _opt(ASSISTANT_CONTENT),
                "refusal": _opt(_TEXT),
                **_NAMED,
                "audio": _opt(Served(_obj({"id": _req(_TEXT)}), Never(), "this app keeps no audio answers")),
                "tool_calls": Prop(
                    Array(
                        Served(
                            OneOf((FUNCTION_TOOL_CALL, _CUSTOM_TOOL_CALL), tag="type"),
                            FUNCTION_TOOL_CALL,
                            "custom tool calls are not supported: this app calls function tools",
                        )
                    )
                ),
                "function_call": _opt(_CALL_FUNCTION, "Deprecated; taken as a tool call."),
                "reasoning_content": _opt(_TEXT, extra=True),
            }
        ),
        _obj({"role": _kind("tool"), "content": _req(TEXT_CONTENT), "tool_call_id": _req(_TEXT)}),
        _obj(
            {
                "role": _kind("function"),
                "content": Prop(_TEXT, required=True, nullable=True, null_means=""),
                "name": _req(_TEXT),
            }
        ),
    ),
    tag="role",
)

# -- tools ------------------------------------------------------------------------------------
FUNCTION_DEFINITION = _obj(
    {
        "name": _req(_NAME),
        "description": Prop(_TEXT),
        "parameters": Prop(_JSON_SCHEMA),
        "strict": _opt(Boolean()),
    }
)
FUNCTION_TOOL = _obj({"type": _kind("function"), "function": _req(FUNCTION_DEFINITION)})
_CUSTOM_TOOL = _obj(
    {
        "type": _kind("custom"),
        "custom": _req(
            _obj({"name": _req(_TEXT), "description": Prop(_TEXT), "format": Prop(Object(open=True))})
        ),
    }
)
NAMED_TOOL_CHOICE = _obj({"type": _kind("function"), "function": _req(_obj({"name": _req(_TEXT)}))})
_TOOL_MODES = Text(enum=("none", "auto", "required"))
TOOL_CHOICE = Served(
    OneOf(
        (
            _TOOL_MODES,
            NAMED_TOOL_CHOICE,
            _obj(
                {
                    "type": _kind("allowed_tools"),
                    "allowed_tools": _req(
                        _obj(
                            {
                                "mode": _req(Text(enum=("auto", "required"))),
                                "tools": _req(Array(Object(open=True))),
                            }
                        )
                    ),
                }
            ),
            _obj({"type": _kind("custom"), "custom": _req(_obj({"name": _req(_TEXT)}))}),
        ),
        tag="type",
    ),
    OneOf((_TOOL_MODES, NAMED_TOOL_CHOICE), tag="type"),
    "allowed_tools and custom tool choices are not supported: send 'none', 'required' or a named function",
)

# -- response formats (and SGLang's structural_tag) ------------------------------------------------
STRUCTURAL_TAG = Object(props={"type": _kind("structural_tag")}, open=True)  # SGLang's; not OpenAI's
RESPONSE_FORMAT = OneOf(
    (
        _obj({"type": _kind("text")}),
        _obj({"type": _kind("json_object")}),
        _obj(
            {
                "type": _kind("json_schema"),
                "json_schema": _req(
                    _obj(
                        {
                            "name": _req(_NAME),
                            "description": Prop(_TEXT),
                            "schema": Prop(_JSON_SCHEMA, doc="None: any JSON."),
                            "strict": _opt(Boolean()),
                        }
                    )
                ),
            }
        ),
        STRUCTURAL_TAG,
    ),
    tag="type",
)

# -- fields both endpoints share ----------------------------------------------------------------
_STOP = OneOf((_TEXT, Array(_TEXT, max_items=4)))
_SERVICE_TIER = Text(enum=("auto", "default", "flex", "scale", "priority"))
_PENALTY = Number(minimum=-2, maximum=2)
_ONE_CHOICE = _ingress_only(
    Integer(minimum=1, maximum=128), Const(1), "this app generates one choice per request"
)
_SHARED: dict[str, Prop] = {
    "model": _req(_TEXT),
    "frequency_penalty": _opt(_PENALTY),
    "presence_penalty": _opt(_PENALTY),
    "logit_bias": _opt(Object(values=Number(minimum=-100, maximum=100), keys=Text(pattern=r"[0-9]+"))),
    "n": _opt(_ONE_CHOICE),
    "seed": _opt(Integer(minimum=INT64[0], maximum=INT64[1])),
    "stop": _opt(_STOP),
    "stream": _opt(Boolean()),
    "stream_options": _opt(
        _obj({"include_usage": _opt(Boolean()), "include_obfuscation": _opt(Boolean(), ignored=True)}),
        "Only with stream: true.",
    ),
    "temperature": _opt(Number(minimum=0, maximum=2)),
    "top_p": _opt(Number(minimum=0, maximum=1), "0 keeps the most likely token only."),
    "user": Prop(_TEXT, ignored=True),
}
# SGLang sampling extras the replica passes on (deployments.replica.server) and structured output
# (deployments.http.structured)
_EXTRA_NODES: dict[str, Node] = {
    "top_k": Integer(minimum=-1),
    "min_p": Number(minimum=0, maximum=1),
    "min_tokens": Integer(minimum=0),
    "repetition_penalty": Number(minimum=0, maximum=2, exclusive_minimum=True),
    "stop_token_ids": Array(Integer(minimum=0)),
    "no_stop_trim": Boolean(),
    "ignore_eos": Boolean(),
    "skip_special_tokens": Boolean(),
    "regex": _TEXT,
    "ebnf": _TEXT,
    "stop_regex": OneOf((_TEXT, Array(_TEXT))),
    # read by class routing (docs/routing.md): < 0 interactive, > 0 batch
    "priority": Integer(minimum=INT64[0], maximum=INT64[1]),
}
_EXTRAS = {name: _opt(node, extra=True) for name, node in _EXTRA_NODES.items()}
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
        "messages": _req(Array(MESSAGE, min_items=1)),
        **_SHARED,
        "logprobs": _opt(_ingress_only(Boolean(), Const(False), "this app returns no logprobs")),
        "top_logprobs": _opt(
            _ingress_only(Integer(minimum=0, maximum=20), Const(0), "this app returns no logprobs")
        ),
        "max_tokens": _opt(Integer(minimum=1)),
        "max_completion_tokens": _opt(Integer(minimum=1)),
        "modalities": _opt(
            Served(
                Array(Text(enum=("text", "audio"))),
                Array(Text(enum=("text",))),
                "this model answers in text only",
            )
        ),
        "audio": _opt(
            Served(
                _obj({"voice": _req(_TEXT), "format": _req(_TEXT)}),
                Never(),
                "this model answers in text only",
            )
        ),
        "prediction": _opt(_obj({"type": _kind("content"), "content": _req(TEXT_CONTENT)}), ignored=True),
        "response_format": _opt(RESPONSE_FORMAT),
        "tools": _opt(
            Array(
                Served(
                    OneOf((FUNCTION_TOOL, _CUSTOM_TOOL), tag="type"),
                    FUNCTION_TOOL,
                    "custom tools are not supported: send function tools",
                )
            )
        ),
        "tool_choice": _opt(TOOL_CHOICE),
        "parallel_tool_calls": _opt(Boolean()),
        "functions": _opt(
            Served(Array(FUNCTION_DEFINITION, min_items=1, max_items=128), Never(), "deprecated: send tools")
        ),
        "function_call": _opt(
            Served(
                OneOf((Text(enum=("none", "auto")), _obj({"name": _req(_TEXT)}))),
                Never(),
                "deprecated: send tool_choice",
            )
        ),
        "reasoning_effort": _opt(
            Text(enum=("none", "minimal", "low", "medium", "high", "xhigh")), "Passed to the chat template."
        ),
        "verbosity": _opt(
            Served(Text(enum=("low", "medium", "high")), Never(), "this model has no verbosity setting")
        ),
        "web_search_options": _opt(Served(Object(open=True), Never(), "this app does not search the web")),
        "store": _opt(Boolean(), ignored=True),
        "metadata": _opt(Object(values=Text(max_length=512)), ignored=True),
        "service_tier": _opt(_SERVICE_TIER, "Read by class routing (docs/routing.md)."),
        "safety_identifier": Prop(_TEXT, ignored=True),
        "prompt_cache_key": Prop(_TEXT, ignored=True),
        "prompt_cache_retention": _opt(Text(enum=("in-memory", "24h")), ignored=True),
        **_EXTRAS,
        "chat_template_kwargs": _opt(Object(open=True), extra=True),
    },
    hints=_CHAT_HINTS,
)

_TOKEN_IDS = Array(Integer(minimum=0), min_items=1)
PROMPT = OneOf((_TEXT, Array(_TEXT, min_items=1), _TOKEN_IDS, Array(_TOKEN_IDS, min_items=1)))
COMPLETION_REQUEST = Object(
    props={
        "prompt": _opt(PROMPT, "No prompt, null or an empty text: the start of a document."),
        **_SHARED,
        "best_of": _opt(_ingress_only(Integer(minimum=0, maximum=20), Const(1), "one candidate per prompt")),
        "echo": _opt(_ingress_only(Boolean(), Const(False), "this app does not echo the prompt")),
        "logprobs": _opt(
            _ingress_only(Integer(minimum=0, maximum=5), Never(), "this app returns no logprobs")
        ),
        "max_tokens": _opt(
            Served(
                Integer(minimum=0),
                Integer(minimum=1),
                "0 generates nothing: this app does not echo the prompt",
            )
        ),
        "suffix": _opt(_ingress_only(_TEXT, Const(""), "this app does not insert text (no suffix)")),
        **_EXTRAS,
        "json_schema": _opt(_TEXT, extra=True),
        "response_format": _opt(RESPONSE_FORMAT, extra=True),
        "service_tier": _opt(_SERVICE_TIER, "Read by class routing (docs/routing.md).", extra=True),
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


def conform_chat(
    body: dict[str, Any], *, model_id: str | None = None, restrict: bool = True
) -> dict[str, Any]:
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
    out = _shared(conform(CHAT_REQUEST, body, "", Context(restrict=restrict)))
    out["messages"] = [_message(m) for m in out["messages"]]
    return out


def conform_completion(
    body: dict[str, Any],
    *,
    model_id: str | None = None,
    document_start: str | None = None,
    restrict: bool = True,
) -> dict[str, Any]:
    """A completions body checked and normalized (see the module docstring); raises Refused."""
    _missing_model(body, model_id)
    out = _shared(conform(COMPLETION_REQUEST, body, "", Context(restrict=restrict)))
    start = document_start or DEFAULT_PROMPT
    prompt = out.get("prompt", "")
    if prompt == "":
        out["prompt"] = start
    elif isinstance(prompt, list) and "" in prompt:
        out["prompt"] = [p if p != "" else start for p in prompt]
    return out
