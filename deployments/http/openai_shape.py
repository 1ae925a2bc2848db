"""Non-streamed answers in OpenAI's schema: the dicts SGLang's response models dump (`model_dump()`)
turned into what OpenAI's response schema allows (a replica builds its stream chunks in OpenAI's
shape itself: `deployments.replica.generate`).

What SGLang's models dump and OpenAI's schema does not allow:

- `null` where OpenAI's schema has no null: `message.tool_calls`, `message.role`,
  `usage.prompt_tokens_details`, a tool call's `index` (a stream's field); SGLang's own fields when
  null (`reasoning_content`, `matched_stop`, `hidden_states`, `token_ids`, `prompt_token_ids`,
  `meta_info`, `metadata`, `sglext`, ...) are dropped too (they carry nothing);
- fields OpenAI requires that may be missing: `message.refusal` (null: this model does not
  refuse), `message.content` (null), a choice's `logprobs` (null), `message.role` ("assistant").

SGLang's fields with a value (`matched_stop`, `reasoning_tokens`, ...) stay: OpenAI's schema
allows more properties than it names, and clients ignore them. Pure functions: dicts in, new
dicts out (the input is not changed).
"""

from __future__ import annotations

from typing import Any

__all__ = ["shape_chat_response", "shape_completion_response"]

# properties OpenAI's response schemas make nullable (kept as null); every other null is dropped
_NULLABLE_RESPONSE = frozenset({"service_tier", "system_fingerprint"})
_NULLABLE_CHOICE = frozenset({"logprobs", "finish_reason"})
_NULLABLE_MESSAGE = frozenset({"content", "refusal", "audio"})


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


def _tool_call(call: Any) -> Any:
    if not isinstance(call, dict):
        return call
    out = _compact(call, frozenset())
    if isinstance(out.get("function"), dict):
        out["function"] = _compact(out["function"], frozenset())
    out.pop("index", None)  # a streamed call's position; no field of a message's tool call
    return out


def _message(message: Any) -> Any:
    if not isinstance(message, dict):
        return message
    out = _compact(message, _NULLABLE_MESSAGE)
    out["role"] = out.get("role") or "assistant"
    out.setdefault("content", None)
    out.setdefault("refusal", None)
    if out.get("tool_calls"):
        out["tool_calls"] = [_tool_call(c) for c in out["tool_calls"]]
    else:
        out.pop("tool_calls", None)  # OpenAI: absent when there are none, never null or []
    return out


def _shaped(d: dict[str, Any], shape_choice: Any) -> dict[str, Any]:
    out = _compact(d, _NULLABLE_RESPONSE)
    if isinstance(out.get("choices"), list):
        out["choices"] = [shape_choice(c) if isinstance(c, dict) else c for c in out["choices"]]
    if "usage" in out:
        out["usage"] = _usage(out["usage"])
    return out


def _text_choice(choice: dict[str, Any]) -> dict[str, Any]:
    out = _compact(choice, _NULLABLE_CHOICE)
    out.setdefault("logprobs", None)
    return out


def _chat_choice(choice: dict[str, Any]) -> dict[str, Any]:
    out = _text_choice(choice)
    out["message"] = _message(out.get("message"))
    return out


def shape_chat_response(d: dict[str, Any]) -> dict[str, Any]:
    """A chat completion (`object: chat.completion`) as OpenAI's schema has it."""
    return _shaped(d, _chat_choice)


def shape_completion_response(d: dict[str, Any]) -> dict[str, Any]:
    """A completion (`object: text_completion`) as OpenAI's schema has it."""
    return _shaped(d, _text_choice)
