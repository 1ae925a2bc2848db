"""Checks on the raw JSON body of a chat or completions request, before the request models see it.

`check_request` runs them in order, cheapest first, and returns the request model (validated
once, normalized) or a `Problem` (HTTP status, a one-line reason naming the field, the field):

1. the body itself (`parse_body`): strict JSON (no NaN/Infinity, no lone UTF-16 surrogates), an
   object;
2. the request's whole cost (`check_cost`), before anything walks the body field by field:
   how many prompts or messages, how many bytes of text across all of them, how many token ids
   (`deployments.http.limits`, `serve.max_*`);
3. the one validation into specflip's request models (`deployments.http.openai_models`): known
   fields only, JSON types strictly, nulls as defaults, integral floats as integers;
4. what fits the model (`check_chat_body`, `check_completion_body`): the messages no longer than
   the context can hold by their size alone (a prompt's size was checked with the cost), token
   ids within the vocabulary, `min_tokens` within `max_tokens`, `chat_template_kwargs` that do not
   collide with the template call's own arguments (tools and the other structured-output fields:
   `deployments.http.structured`).
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal, cast

from deployments.http.limits import ModelLimits
from deployments.http.openai_models import (
    ChatCompletionRequest,
    CompletionRequest,
    OpenAIRequest,
    validate_request,
)
from deployments.http.openai_types import Problem, Refused

__all__ = [
    "CHAT_TEMPLATE_RESERVED",
    "Problem",
    "check_request",
    "check_chat_body",
    "check_completion_body",
    "check_cost",
    "parse_body",
]

Endpoint = Literal["chat", "completions"]

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
# a lone surrogate can only come from a \uD800-\uDFFF escape (UTF-8 cannot encode one)
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


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
    where = _lone_surrogate(body, "") if _SURROGATE_ESCAPE.search(raw) else None
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
            stack.extend(
                (child, f"{where}[{i}]") for i, child in enumerate(item) if not isinstance(child, int)
            )
    return None


# -- 2. the whole request's cost, on the body as parsed (any types) ----------------------------
def _string_bytes(value: Any) -> int:
    """UTF-8 bytes of every string in a JSON value (keys too)."""
    total, stack = 0, [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item.encode("utf-8"))
        elif isinstance(item, dict):
            total += sum(len(k.encode("utf-8")) for k in item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(v for v in item if isinstance(v, str | list | dict))
    return total


def _is_ids(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(t, int | float) and not isinstance(t, bool) for t in value
    )


def check_cost(endpoint: Endpoint, body: dict[str, Any], limits: ModelLimits) -> Problem | None:
    """Why the request as a whole costs more than one request may (serve.max_*), or None. Runs
    on the body as parsed, before the schema walks it: O(prompts or messages) plus the bytes of
    their text, so a body of megabytes is answered in milliseconds."""
    if endpoint == "chat":
        messages = body.get("messages")
        if isinstance(messages, list):
            reason = limits.too_many_messages(len(messages))
            if reason is not None:
                return _bad(reason, "messages")
        reason = limits.input_too_large(
            "messages and tools", _string_bytes(messages) + _string_bytes(body.get("tools"))
        )
        return None if reason is None else _bad(reason, "messages", 413)
    prompt = body.get("prompt")
    if not isinstance(prompt, list) or _is_ids(prompt):
        prompts = [prompt]
    else:
        prompts = prompt
        reason = limits.too_many_prompts(len(prompts))
        if reason is not None:
            return _bad(reason, "prompt")
        kinds = {str if isinstance(p, str) else list if isinstance(p, list) else None for p in prompts}
        if None in kinds or len(kinds) > 1:
            return _bad("prompt must be texts or token id lists, not a mix", "prompt")
    sizes = [len(p.encode("utf-8")) if isinstance(p, str) else 0 for p in prompts]
    for i, size in enumerate(sizes):  # one prompt beyond the context says so, before the total
        field = "prompt" if len(prompts) == 1 else f"prompt[{i}]"
        reason = limits.too_long(field, size)
        if reason is not None:
            return _bad(reason, field, 413)
    reason = limits.input_too_large("prompt", sum(sizes))
    if reason is not None:
        return _bad(reason, "prompt", 413)
    ids = sum(len(p) for p in prompts if isinstance(p, list))
    reason = limits.too_many_token_ids("prompt", ids)
    return None if reason is None else _bad(reason, "prompt", 413)


# -- 4. what fits the model, on the validated request -------------------------------------------
def _check_common(request: OpenAIRequest, limits: ModelLimits) -> Problem | None:
    context = limits.context_tokens
    tops = {
        "max_tokens": request.max_tokens,
        "max_completion_tokens": getattr(request, "max_completion_tokens", None),
    }
    for name, top in tops.items():
        if top is not None and context is not None and top > context:
            return _bad(f"{name} {top} exceeds the model's context length {context}", name)
    if request.stop_token_ids is not None:  # SGLang indexes a vocabulary-sized tensor with them
        problem = _check_ids("stop_token_ids", request.stop_token_ids, limits, as_prompt=False)
        if problem is not None:
            return problem
    min_tokens = request.min_tokens
    if min_tokens is not None and context is not None and min_tokens > context:  # an int32 tensor in SGLang
        return _bad(f"min_tokens {min_tokens} exceeds the model's context length {context}", "min_tokens")
    if min_tokens is not None:
        for name, top in tops.items():
            if top is not None and min_tokens > top:
                return _bad(f"min_tokens {min_tokens} is more than {name} {top}", "min_tokens")
    return None


def check_chat_body(request: ChatCompletionRequest, limits: ModelLimits) -> Problem | None:
    """Why a validated chat request cannot be served by this model, or None."""
    total = sum(len(cast(str, m.content).encode("utf-8")) for m in request.messages)  # validated: one string
    reason = limits.too_long("messages", total)
    if reason is not None:
        return _bad(reason, "messages", 413)
    kwargs = request.chat_template_kwargs
    if kwargs is not None:
        reserved = sorted(CHAT_TEMPLATE_RESERVED & set(kwargs))
        if reserved:
            return _bad(
                f"chat_template_kwargs.{reserved[0]} is not allowed: it is an argument of the template call "
                "itself, not a template variable",
                f"chat_template_kwargs.{reserved[0]}",
            )
    return _check_common(request, limits)


def _check_ids(field: str, ids: list[int], limits: ModelLimits, as_prompt: bool = True) -> Problem | None:
    top = limits.vocab_size
    if top is not None and ids and max(ids) >= top:
        j = next(j for j, t in enumerate(ids) if t >= top)
        return _bad(f"{field}[{j}] is not a token id: {ids[j]} (valid: [0, {top}))", field)
    context = limits.context_tokens
    if context is not None and len(ids) >= context and as_prompt:
        return _bad(f"{field} has {len(ids)} tokens, the context holds {context}", field)
    return None


def check_completion_body(request: CompletionRequest, limits: ModelLimits) -> Problem | None:
    """Why a validated completions request cannot be served by this model, or None.
    `prompt` is a text, a list of texts, a list of token ids, or a list of such lists."""
    prompt = request.prompt
    single = isinstance(prompt, str) or (bool(prompt) and isinstance(prompt[0], int))  # type: ignore[index]
    prompts: list[Any] = [prompt] if single else prompt  # type: ignore[assignment]
    for i, p in enumerate(prompts):  # a text's size against the context was checked with the cost
        if not isinstance(p, str):
            problem = _check_ids("prompt" if single else f"prompt[{i}]", p, limits)
            if problem is not None:
                return problem
    return _check_common(request, limits)


def check_request(
    endpoint: Endpoint, body: dict[str, Any], limits: ModelLimits, *, model_id: str | None = None
) -> OpenAIRequest | Problem:
    """A parsed body checked (cost, then the one validation into the request model, then model
    fit), or why it is refused."""
    problem = check_cost(endpoint, body, limits)
    if problem is not None:
        return problem
    try:
        request = validate_request(endpoint, body, model_id=model_id, document_start=limits.document_start)
    except Refused as refused:
        return refused.problem
    if isinstance(request, ChatCompletionRequest):
        return check_chat_body(request, limits) or request
    return check_completion_body(request, limits) or request
