"""Checks on the raw JSON body of a chat or completions request, before the request models see it.

Pure functions over the parsed JSON: each returns a `Problem` (HTTP status, a one-line reason
naming the field, the field) or None. They catch what the request models would either crash on
(500), coerce, or let through to a replica where it costs a tokenization or fails there:

- the body itself: strict JSON (no NaN/Infinity, no lone UTF-16 surrogates), an object;
- messages: each an object with a known role and content of the right shape;
- prompts: text, a list of texts, token ids or lists of token ids, and no longer than the context
  can hold, judged by size alone (`deployments.limits`);
- fields SGLang's request models call methods on before validating them (`response_format`),
  `chat_template_kwargs` that would collide with the template call's own arguments, `seed` in
  the 64-bit range, `min_tokens` within `max_tokens` (tools and the other structured-output
  fields: `deployments.structured`).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from deployments.limits import ModelLimits
from deployments.validation import MESSAGE_ROLES, check_json_fields

__all__ = ["CHAT_TEMPLATE_RESERVED", "Problem", "check_chat_body", "check_completion_body", "parse_body"]

# apply_chat_template's own parameters (and what the app sets itself): passing any of them in
# chat_template_kwargs changes what the call returns or fails it
CHAT_TEMPLATE_RESERVED = frozenset(
    {
        "conversation",
        "messages",
        "tokenize",
        "add_generation_prompt",
        "continue_final_message",
        "chat_template",
        "tools",
        "documents",
        "padding",
        "truncation",
        "max_length",
        "return_tensors",
        "return_dict",
        "return_assistant_tokens_mask",
        "tokenizer_kwargs",
    }
)
_INT64 = (-(2**63), 2**63 - 1)
_TEXT_PART_TYPES = frozenset({"text"})


@dataclasses.dataclass(frozen=True)
class Problem:
    status: int
    message: str
    param: str | None = None


def _bad(message: str, param: str | None = None, status: int = 400) -> Problem:
    return Problem(status, message, param)


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON (numbers must be finite)")


def parse_body(raw: bytes) -> dict[str, Any] | Problem:
    """The body as a JSON object, or why not (strict JSON; strings without lone surrogates)."""
    if not raw.strip():
        return _bad("request body is empty: expected a JSON object")
    try:
        body = json.loads(raw, parse_constant=_no_constants)
    except (ValueError, UnicodeDecodeError) as err:
        return _bad(f"malformed JSON: {str(err)[:200]}")
    if not isinstance(body, dict):
        return _bad(f"request body must be a JSON object, got {type(body).__name__}")
    where = _lone_surrogate(body, "")
    if where is not None:
        return _bad(f"{where or 'body'} contains a lone UTF-16 surrogate (not valid Unicode text)", where)
    return body


def _lone_surrogate(value: Any, path: str) -> str | None:
    """Path of the first string (or key) holding an unpaired surrogate, else None."""
    stack = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return where
        elif isinstance(item, dict):
            for key, child in item.items():
                try:
                    key.encode("utf-8")
                except UnicodeEncodeError:
                    return where or "body"
                stack.append((child, f"{where}.{key}" if where else key))
        elif isinstance(item, list):
            stack.extend((child, f"{where}[{i}]") for i, child in enumerate(item))
    return None


def _check_common(body: dict[str, Any], limits: ModelLimits) -> Problem | None:
    reason = check_json_fields(body)
    if reason is not None:
        return _bad(reason, reason.split(" ", 1)[0])
    stop_ids = body.get("stop_token_ids")
    if stop_ids is not None:  # SGLang indexes a vocabulary-sized tensor with them
        if not isinstance(stop_ids, list):
            return _bad("stop_token_ids must be a list of token ids", "stop_token_ids")
        problem = _check_ids("stop_token_ids", stop_ids, limits, as_prompt=False)
        if problem is not None:
            return problem
    seed = body.get("seed")
    if seed is not None and not _INT64[0] <= seed <= _INT64[1]:
        return _bad(f"seed must be a 64-bit integer, got {seed}", "seed")
    min_tokens = body.get("min_tokens")
    if min_tokens is not None:
        if min_tokens < 0:
            return _bad(f"min_tokens must be >= 0, got {min_tokens}", "min_tokens")
        for name in ("max_tokens", "max_completion_tokens"):
            top = body.get(name)
            if isinstance(top, int) and min_tokens > top:
                return _bad(f"min_tokens {min_tokens} is more than {name} {top}", "min_tokens")
    return _check_response_format(body.get("response_format"))


def _check_response_format(value: Any) -> Problem | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        return _bad(
            f'response_format must be an object like {{"type": "json_object"}}, got {_kind(value)}',
            "response_format",
        )
    schema = value.get("schema")
    if schema is not None and not isinstance(schema, dict):
        return _bad(
            f"response_format.schema must be an object, got {_kind(schema)}", "response_format.schema"
        )
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if properties is not None and not (
        isinstance(properties, dict) and isinstance(properties.get("strict", {}), dict)
    ):
        return _bad(
            "response_format.schema.properties must be an object of schemas", "response_format.schema"
        )
    return None


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), "a number" if isinstance(value, int | float) else "null"
    )


def _text_bytes(content: Any) -> int:
    """UTF-8 bytes of a message content: a string, or the text of its parts."""
    if isinstance(content, str):
        return len(content.encode("utf-8"))
    if isinstance(content, list):
        return sum(_text_bytes(p.get("text")) for p in content if isinstance(p, dict))
    return 0


def _check_content(i: int, role: str, message: dict[str, Any]) -> Problem | None:
    field = f"messages[{i}].content"
    content = message.get("content")
    if content is None:
        if role == "assistant" and message.get("tool_calls"):
            return None
        if "content" not in message:
            return _bad(f"{field} is required for a {role} message", field)
        return None if role == "assistant" else _bad(f"{field} must be text for a {role} message", field)
    if isinstance(content, str):
        return None
    if not isinstance(content, list):
        return _bad(f"{field} must be a string or a list of content parts, got {_kind(content)}", field)
    for j, part in enumerate(content):
        where = f"{field}[{j}]"
        if not isinstance(part, dict):
            return _bad(f'{where} must be an object like {{"type": "text", "text": ...}}', where)
        kind = part.get("type")
        if kind not in _TEXT_PART_TYPES:
            return _bad(
                f"{where}.type {json.dumps(kind)[:40]} is not supported: this model takes text parts only",
                where,
            )
        if not isinstance(part.get("text"), str):
            return _bad(f"{where}.text must be a string", where)
    return None


def check_chat_body(body: dict[str, Any], limits: ModelLimits) -> Problem | None:
    """Why a chat completion body cannot be served, or None."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return _bad("messages must be a non-empty list of message objects", "messages")
    total = 0
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            return _bad(f"messages[{i}] must be an object with a role and content", f"messages[{i}]")
        role = message.get("role")
        if not isinstance(role, str) or role.lower() not in MESSAGE_ROLES:
            return _bad(
                f"messages[{i}].role must be one of {', '.join(sorted(MESSAGE_ROLES))}; got {json.dumps(role)[:40]}",
                f"messages[{i}].role",
            )
        problem = _check_content(i, role.lower(), message)
        if problem is not None:
            return problem
        total += _text_bytes(message.get("content"))
    reason = limits.too_long("messages", total)
    if reason is not None:
        return _bad(reason, "messages", 413)
    kwargs = body.get("chat_template_kwargs")
    if kwargs is not None:
        if not isinstance(kwargs, dict):
            return _bad(
                f"chat_template_kwargs must be an object, got {_kind(kwargs)}", "chat_template_kwargs"
            )
        reserved = sorted(CHAT_TEMPLATE_RESERVED & set(kwargs))
        if reserved:
            return _bad(
                f"chat_template_kwargs.{reserved[0]} is not allowed: it is an argument of the template call "
                "itself, not a template variable",
                f"chat_template_kwargs.{reserved[0]}",
            )
    return _check_common(body, limits)


def _check_ids(field: str, ids: list[Any], limits: ModelLimits, as_prompt: bool = True) -> Problem | None:
    if not ids and as_prompt:
        return _bad(f"{field} must not be empty", field)
    top = limits.vocab_size
    for j, token in enumerate(ids):
        if isinstance(token, bool) or not isinstance(token, int) or token < 0 or (top and token >= top):
            valid = f"[0, {top})" if top else "non-negative integers"
            return _bad(f"{field}[{j}] is not a token id: {json.dumps(token)[:40]} (valid: {valid})", field)
    context = limits.context_tokens
    if context is not None and len(ids) >= context and as_prompt:
        return _bad(f"{field} has {len(ids)} tokens, the context holds {context}", field)
    return None


def check_completion_body(body: dict[str, Any], limits: ModelLimits) -> Problem | None:
    """Why a completion body cannot be served, or None. `prompt` may be a text, a list of texts,
    a list of token ids, or a list of such lists (OpenAI's four forms)."""
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        prompts: list[Any] = [prompt]
    elif isinstance(prompt, list) and prompt:
        prompts = (
            prompt if not all(isinstance(p, int) and not isinstance(p, bool) for p in prompt) else [prompt]
        )
    else:
        return _bad("prompt must be a non-empty string, list of strings, or list of token ids", "prompt")
    kinds = {str if isinstance(p, str) else list if isinstance(p, list) else None for p in prompts}
    if None in kinds or len(kinds) > 1:
        return _bad("prompt must be texts or token id lists, not a mix", "prompt")
    for i, p in enumerate(prompts):
        field = "prompt" if len(prompts) == 1 else f"prompt[{i}]"
        if isinstance(p, str):
            if not p:
                return _bad(f"{field} must not be empty", field)
            reason = limits.too_long(field, len(p.encode("utf-8")))
            if reason is not None:
                return _bad(reason, field, 413)
        else:
            problem = _check_ids(field, p, limits)
            if problem is not None:
                return problem
    return _check_common(body, limits)
