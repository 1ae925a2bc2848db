"""The request bodies this app accepts on /v1/chat/completions and /v1/completions, as strict
pydantic models (`deployments.http.openai_types`, messages and tools in
`deployments.http.openai_messages`): OpenAI's fields with their types, nullability and ranges, what
of each this app serves, and the SGLang extras it serves (marked `x-sglang` in /openapi.json).

`validate_request` is the one validation of a request: it returns the model, normalized, or raises
`Refused` naming the field:

- `null` where OpenAI's schema allows it means the default (dropped from `normalized()`);
- integral numbers for integers (`max_tokens: 4.0`) are integers;
- unknown fields and wrong types (`"stream": "yes"`) are refused, as OpenAI refuses them;
  `model` is required (OpenAI: 400);
- accepted fields with no effect on the answer (`store`, `metadata`, `user`, `prediction`, ...)
  are left out of `normalized()` (`service_tier` and SGLang's `priority` stay: class routing
  reads them);
- messages: roles in lower case, content as one string (`deployments.http.openai_messages`);
- completions: no prompt, a null prompt or an empty text means the start of a document (OpenAI's
  default prompt is its tokenizer's document separator; here the model's BOS token);
- `top_p: 0` (OpenAI: the most likely token only; SGLang refuses 0) is sent as the smallest
  top_p, which keeps the same single token;
- `stream_options` only with `stream: true`.

What the app refuses by design (a 400 naming the field) is each `Served` field's reason; the
list is in docs/structured_output.md ("Refused by design").
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, Union

from pydantic import (
    BeforeValidator,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from deployments.http.openai_messages import (
    CACHE_HINT,
    ChatMessage,
    FunctionDefinition,
    ResponseFormat,
    TextContent,
    Tool,
    ToolChoice,
)
from deployments.http.openai_types import (
    INT64,
    Int,
    Num,
    Problem,
    Refused,
    Served,
    Strict,
    Tagged,
    first_error,
    problem_of,
    unset,
)

__all__ = [
    "DEFAULT_PROMPT",
    "TOP_K_MAX",
    "TOP_P_ZERO",
    "ChatCompletionRequest",
    "CompletionRequest",
    "OpenAIRequest",
    "validate_request",
]

DEFAULT_PROMPT = "<|endoftext|>"  # OpenAI's, for a model whose BOS token is unknown
TOP_K_MAX = 2**30  # SGLang's TOP_K_ALL: -1 becomes it
TOP_P_ZERO = 1e-9  # keeps exactly the most likely token (its probability is at least 1/vocab)
_SGLANG: dict[str, Any] = {"x-sglang": True}  # an SGLang extra, not a field of OpenAI's schema
_NO_EFFECT = "Accepted; no effect on the answer."
_TIER = Literal["auto", "default", "flex", "scale", "priority", "fast"]
_PENALTY = Annotated[float, Num(-2, 2)]
_INT64 = Annotated[int, Int(*INT64)]
_TEXTS = list[str]
_CHAT_ONLY_HINT = "tool calls need /v1/chat/completions"


def _integral_ids(value: Any) -> Any:
    """Token ids: integral numbers as integers, in one pass (a prompt may hold 100k ids)."""
    if isinstance(value, list) and any(type(v) is float for v in value):
        return [int(v) if type(v) is float and v.is_integer() else v for v in value]
    return value


_IDS = Annotated[list[Annotated[int, Field(ge=0)]], BeforeValidator(_integral_ids)]
_TOKEN_IDS = Annotated[_IDS, Field(min_length=1)]


def _prompt_kind(prompt: Any) -> str | None:
    if isinstance(prompt, str):
        return "~str"
    if not isinstance(prompt, list):
        return None
    first = prompt[0] if prompt else ""
    if isinstance(first, list):
        return "~lists"
    return "~ids" if isinstance(first, int | float) and not isinstance(first, bool) else "~texts"


_Prompt = Annotated[
    Union[  # noqa: UP007 - a runtime union of the branches
        Annotated[str, Tag("~str")],
        Annotated[Annotated[list[str], Field(min_length=1)], Tag("~texts")],
        Annotated[_TOKEN_IDS, Tag("~ids")],
        Annotated[Annotated[list[_TOKEN_IDS], Field(min_length=1)], Tag("~lists")],
    ],
    Discriminator(_prompt_kind, custom_error_type="tagged||a string or a list", custom_error_message="none"),
]


class _Named(Strict):
    name: str


class _Voice(Strict):
    voice: str
    format: str


class _Prediction(Strict):
    type: Literal["content"]
    content: TextContent


_FUNCTION_CALL = Annotated[Literal["none", "auto"] | _Named, Tagged()]


class _ModerationMode(Strict):
    mode: Literal["score", "block"]


class _ModerationPolicy(Strict):
    input: _ModerationMode | None = None
    output: _ModerationMode | None = None


class _Moderation(Strict):
    model: str
    policy: _ModerationPolicy | None = None


class _CacheOptions(Strict):
    mode: Literal["implicit", "explicit"] = unset()
    ttl: Literal["30m"] = unset()


_BIAS = Annotated[float, Num(-100, 100)]
_LOGIT_BIAS = Annotated[
    dict[Annotated[str, Field(pattern=r"^[0-9]+$")], _BIAS],
    WithJsonSchema(
        {
            "type": "object",
            "patternProperties": {"^[0-9]+$": {"type": "number", "minimum": -100, "maximum": 100}},
            "additionalProperties": False,
        }
    ),
]


class _StreamOptions(Strict):
    include_usage: bool | None = None
    include_obfuscation: bool | None = Field(None, exclude=True, description=_NO_EFFECT)


class _Request(Strict):
    """The fields both endpoints share, and SGLang's sampling extras."""

    HINTS: ClassVar[dict[str, str]] = {}
    model: str
    frequency_penalty: _PENALTY | None = None
    presence_penalty: _PENALTY | None = None
    logit_bias: _LOGIT_BIAS | None = None
    n: Annotated[int, Int(1, 128), Served.only(1, "this app generates one choice per request")] | None = None
    seed: _INT64 | None = None
    stop: Annotated[str | Annotated[_TEXTS, Field(max_length=4)], Tagged()] | None = None
    stream: bool | None = None
    stream_options: _StreamOptions | None = Field(None, description="Only with stream: true.")
    temperature: Annotated[float, Num(0, 2)] | None = None
    top_p: Annotated[float, Num(0, 1)] | None = Field(None, description="0 keeps the most likely token only.")
    user: str = unset(exclude=True, description=_NO_EFFECT)
    # SGLang's sampling extras (deployments.replica.generate); SGLang keeps top_k and min_tokens in
    # int32 tensors: a top_k of 2**31 killed the replica's scheduler (min_tokens: up to the context)
    top_k: Annotated[int, Int(-1, TOP_K_MAX)] | None = Field(None, json_schema_extra=_SGLANG)
    min_p: Annotated[float, Num(0, 1)] | None = Field(None, json_schema_extra=_SGLANG)
    min_tokens: Annotated[int, Int(0)] | None = Field(None, json_schema_extra=_SGLANG)
    repetition_penalty: Annotated[float, Num(0, 2, exclusive_low=True)] | None = Field(
        None, json_schema_extra=_SGLANG
    )
    stop_token_ids: _IDS | None = Field(None, json_schema_extra=_SGLANG)
    no_stop_trim: bool | None = Field(None, json_schema_extra=_SGLANG)
    ignore_eos: bool | None = Field(None, json_schema_extra=_SGLANG)
    skip_special_tokens: bool | None = Field(None, json_schema_extra=_SGLANG)
    # structured output (deployments.http.structured)
    regex: str | None = Field(None, json_schema_extra=_SGLANG)
    ebnf: str | None = Field(None, json_schema_extra=_SGLANG)
    stop_regex: Annotated[str | _TEXTS, Tagged()] | None = Field(None, json_schema_extra=_SGLANG)
    # read by class routing (docs/routing.md): < 0 interactive, > 0 batch
    priority: _INT64 | None = Field(None, json_schema_extra=_SGLANG)

    @field_validator("top_p")
    @classmethod
    def _top_p_zero(cls, value: float | None) -> float | None:
        return TOP_P_ZERO if value == 0 else value

    def normalized(self) -> dict[str, Any]:
        """The request as the engine takes it: no nulls, no fields without effect."""
        return self.model_dump(mode="python", by_alias=True, exclude_none=True)


class ChatCompletionRequest(_Request):
    HINTS: ClassVar[dict[str, str]] = {
        "json_schema": 'it is a /v1/completions field: use response_format {"type": "json_schema", ...}'
    }
    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    logprobs: Annotated[bool, Served.only(False, "this app returns no logprobs")] | None = None
    top_logprobs: Annotated[int, Int(0, 20), Served.only(0, "this app returns no logprobs")] | None = None
    max_tokens: Annotated[int, Int(1)] | None = None
    max_completion_tokens: Annotated[int, Int(1)] | None = None
    modalities: (
        Annotated[
            list[Literal["text", "audio"]],
            Served(
                lambda v: set(v) <= {"text"},
                "this model answers in text only",
                {"type": "array", "items": {"enum": ["text"], "type": "string"}},
            ),
        ]
        | None
    ) = None
    audio: Annotated[_Voice, Served(None, "this model answers in text only")] | None = None
    prediction: _Prediction | None = Field(None, exclude=True, description=_NO_EFFECT)
    response_format: ResponseFormat | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    functions: (
        Annotated[
            list[FunctionDefinition],
            Field(min_length=1, max_length=128),
            Served(None, "deprecated: send tools"),
        ]
        | None
    ) = None
    function_call: Annotated[_FUNCTION_CALL, Served(None, "deprecated: send tool_choice")] | None = None
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"] | None = Field(
        None, description="Passed to the chat template."
    )
    verbosity: (
        Annotated[Literal["low", "medium", "high"], Served(None, "this model has no verbosity setting")]
        | None
    ) = None
    web_search_options: Annotated[dict[str, Any], Served(None, "this app does not search the web")] | None = (
        None
    )
    store: bool | None = Field(None, exclude=True, description=_NO_EFFECT)
    metadata: dict[str, Annotated[str, Field(max_length=512)]] | None = Field(
        None, exclude=True, description=_NO_EFFECT
    )
    service_tier: _TIER | None = Field(None, description="Read by class routing (docs/routing.md).")
    moderation: Annotated[_Moderation, Served(None, "this app runs no moderation model")] | None = None
    safety_identifier: str | None = Field(None, exclude=True, description=_NO_EFFECT)
    prompt_cache_key: str | None = Field(None, exclude=True, description=CACHE_HINT)
    prompt_cache_options: _CacheOptions = unset(exclude=True, description=CACHE_HINT)
    # "in_memory" is OpenAI's spelling; "in-memory" (its reference's, earlier) stays accepted
    prompt_cache_retention: Literal["in_memory", "in-memory", "24h"] | None = Field(
        None, exclude=True, description=CACHE_HINT
    )
    chat_template_kwargs: dict[str, Any] | None = Field(None, json_schema_extra=_SGLANG)

    @field_validator("messages", mode="before")
    @classmethod
    def _roles_in_lower_case(cls, messages: Any) -> Any:  # roles are case-insensitive (SGLang's rule)
        if not isinstance(messages, list):
            return messages
        return [
            {**m, "role": m["role"].lower()} if isinstance(m, dict) and isinstance(m.get("role"), str) else m
            for m in messages
        ]


class CompletionRequest(_Request):
    HINTS: ClassVar[dict[str, str]] = {
        "tools": _CHAT_ONLY_HINT,
        "tool_choice": _CHAT_ONLY_HINT,
        "parallel_tool_calls": _CHAT_ONLY_HINT,
    }
    prompt: _Prompt | None = Field(
        None, description="No prompt, null or an empty text: the start of a document."
    )
    best_of: Annotated[int, Int(0, 20), Served.only(1, "one candidate per prompt")] | None = None
    echo: Annotated[bool, Served.only(False, "this app does not echo the prompt")] | None = None
    logprobs: Annotated[int, Int(0, 5), Served(None, "this app returns no logprobs")] | None = None
    max_tokens: (
        Annotated[
            int,
            Int(0),
            Served(
                lambda v: v >= 1,
                "0 generates nothing: this app does not echo the prompt",
                {"type": "integer", "minimum": 1},
            ),
        ]
        | None
    ) = None
    suffix: Annotated[str, Served.only("", "this app does not insert text (no suffix)")] | None = None
    json_schema: str | None = Field(None, json_schema_extra=_SGLANG)
    response_format: ResponseFormat | None = Field(None, json_schema_extra=_SGLANG)
    service_tier: _TIER | None = Field(
        None, description="Read by class routing (docs/routing.md).", json_schema_extra=_SGLANG
    )

    @model_validator(mode="after")
    def _document_start(self, info: ValidationInfo) -> CompletionRequest:
        context = info.context if isinstance(info.context, dict) else {}
        start = context.get("document_start") or DEFAULT_PROMPT
        if self.prompt is None or self.prompt == "":
            self.prompt = start
        elif isinstance(self.prompt, list) and "" in self.prompt:
            texts: Any = [p if p != "" else start for p in self.prompt]
            self.prompt = texts
        return self


OpenAIRequest = ChatCompletionRequest | CompletionRequest


def validate_request(
    endpoint: Literal["chat", "completions"],
    body: dict[str, Any],
    *,
    model_id: str | None = None,
    document_start: str | None = None,
) -> OpenAIRequest:
    """`body` (parsed JSON) validated into the endpoint's model and normalized; raises Refused
    naming the field (the first of pydantic's errors, in the app's words: openai_types.problem_of)."""
    if body.get("model") is None:
        served_here = f": this app serves {model_id!r}" if model_id else ""
        raise Refused(Problem(400, f"model is required{served_here}", "model"))
    model_cls: type[OpenAIRequest] = ChatCompletionRequest if endpoint == "chat" else CompletionRequest
    try:
        request = model_cls.model_validate(body, context={"document_start": document_start})
    except ValidationError as err:
        raise Refused(problem_of(first_error(err), model_cls.HINTS)) from None
    if request.stream_options is not None and not request.stream:
        raise Refused(Problem(400, "stream_options is only allowed with stream: true", "stream_options"))
    return request
