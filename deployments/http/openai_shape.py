"""Response bodies in OpenAI's schema: the dicts Ray's `SGLangServer` and SGLang's response models
dump (`model_dump()`, or the JSON of an SSE chunk) turned into what OpenAI's response schema
allows, for the HTTP edge to send.

What SGLang's models dump and OpenAI's schema does not allow:

- `null` where OpenAI's schema has no null: `message.tool_calls`, `message.role`,
  `usage.prompt_tokens_details`, a tool call's `index` outside a stream, a stream delta's `role`
  and `tool_calls`; SGLang's own fields when null (`reasoning_content`, `matched_stop`,
  `hidden_states`, `token_ids`, `prompt_token_ids`, `meta_info`, `metadata`, `sglext`, ...) are
  dropped too (they carry nothing);
- fields OpenAI requires that may be missing: `message.refusal` (null: this model does not
  refuse), `message.content` (null), a choice's `logprobs` (null), a stream choice's
  `finish_reason` (null until the last chunk), `message.role` ("assistant").

SGLang's fields with a value (`matched_stop`, `reasoning_tokens`, ...) stay: OpenAI's schema
allows more properties than it names, and clients ignore them. Pure functions: dicts in, new
dicts out (the input is not changed).
"""

from __future__ import annotations

from typing import Any

__all__ = ["shape_chat_chunk", "shape_chat_response", "shape_completion_chunk", "shape_completion_response"]

# properties OpenAI's response schemas make nullable (kept as null); every other null is dropped
_NULLABLE_RESPONSE = frozenset({"service_tier", "system_fingerprint"})
_NULLABLE_CHUNK = frozenset({"service_tier", "system_fingerprint", "usage"})
_NULLABLE_CHOICE = frozenset({"logprobs", "finish_reason"})
_NULLABLE_MESSAGE = frozenset({"content", "refusal", "audio"})
_NULLABLE_DELTA = frozenset({"content", "refusal"})


def _compact(d: dict[str, Any], nullable: frozenset[str]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None or k in nullable}


def _usage(usage: Any) -> Any:
    if not isinstance(usage, dict):
        return usage
    out = _compact(usage, frozenset())
    for key in ("prompt_tokens_details", "completion_tokens_details"):
        if isinstance(out.get(key), dict):
            out[key] = _compact(out[key], frozenset())
    return out


def _tool_call(call: Any, *, streamed: bool) -> Any:
    if not isinstance(call, dict):
        return call
    out = _compact(call, frozenset())
    if isinstance(out.get("function"), dict):
        out["function"] = _compact(out["function"], frozenset())
    if not streamed:
        out.pop("index", None)  # a streamed call's position; no field of a message's tool call
    return out


def _tool_calls(message: dict[str, Any], *, streamed: bool) -> None:
    calls = message.get("tool_calls")
    if calls:
        message["tool_calls"] = [_tool_call(c, streamed=streamed) for c in calls]
    else:
        message.pop("tool_calls", None)  # OpenAI: absent when there are none, never null or []


def _message(message: Any) -> Any:
    if not isinstance(message, dict):
        return message
    out = _compact(message, _NULLABLE_MESSAGE)
    out["role"] = out.get("role") or "assistant"
    out.setdefault("content", None)
    out.setdefault("refusal", None)
    _tool_calls(out, streamed=False)
    return out


def _delta(delta: Any) -> Any:
    if not isinstance(delta, dict):
        return delta
    out = _compact(delta, _NULLABLE_DELTA)
    _tool_calls(out, streamed=True)
    return out


def _choices(d: dict[str, Any], shape_choice: Any) -> None:
    if isinstance(d.get("choices"), list):
        d["choices"] = [shape_choice(c) if isinstance(c, dict) else c for c in d["choices"]]
    if "usage" in d:
        d["usage"] = _usage(d["usage"])


def _chat_choice(choice: dict[str, Any]) -> dict[str, Any]:
    out = _compact(choice, _NULLABLE_CHOICE)
    out.setdefault("logprobs", None)
    out["message"] = _message(out.get("message"))
    return out


def _chunk_choice(choice: dict[str, Any]) -> dict[str, Any]:
    out = _compact(choice, _NULLABLE_CHOICE)
    out.setdefault("finish_reason", None)
    out["delta"] = _delta(out.get("delta", {}))
    return out


def _text_choice(choice: dict[str, Any]) -> dict[str, Any]:
    out = _compact(choice, _NULLABLE_CHOICE)
    out.setdefault("logprobs", None)
    return out


def shape_chat_response(d: dict[str, Any]) -> dict[str, Any]:
    """A chat completion (`object: chat.completion`) as OpenAI's schema has it."""
    out = _compact(d, _NULLABLE_RESPONSE)
    _choices(out, _chat_choice)
    return out


def shape_chat_chunk(d: dict[str, Any]) -> dict[str, Any]:
    """A chat stream chunk (`object: chat.completion.chunk`, the final usage chunk included)."""
    out = _compact(d, _NULLABLE_CHUNK)
    _choices(out, _chunk_choice)
    return out


def shape_completion_response(d: dict[str, Any]) -> dict[str, Any]:
    """A completion (`object: text_completion`) as OpenAI's schema has it."""
    out = _compact(d, _NULLABLE_RESPONSE)
    _choices(out, _text_choice)
    return out


def shape_completion_chunk(d: dict[str, Any]) -> dict[str, Any]:
    """A completions stream chunk: OpenAI streams the completion object itself, chunk by chunk."""
    out = _compact(d, _NULLABLE_CHUNK)
    _choices(out, lambda c: {**_text_choice(c), "finish_reason": c.get("finish_reason")})
    return out
