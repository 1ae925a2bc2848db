"""Checks on validated OpenAI request models that the replica's API runs before anything reaches an
engine: pure functions over the request's fields, returning the reason for a 400 (None: fine).

The body guard (`deployments.http.body`) has checked the raw body against the request schema by
then (types, ranges, unknown fields, what the app does not serve); these hold whatever
request model (SGLang's or vLLM's) the app validates into, so a request that reaches a
replica without the guard (a deployment handle, a test) is held to the same rules.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["MESSAGE_ROLES", "check_chat", "check_completion"]

MESSAGE_ROLES = frozenset({"system", "user", "assistant", "tool", "developer", "function"})


def _check_common(body: Any, max_tokens_limit: int | None) -> str | None:
    for name in ("max_tokens", "max_completion_tokens"):
        value = getattr(body, name, None)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            return f"{name} must be a positive integer, got {value!r}"
        if max_tokens_limit is not None and value > max_tokens_limit:
            return f"{name} {value} exceeds the model's context length {max_tokens_limit}"
    n = getattr(body, "n", 1)
    if n != 1:
        return f"n must be 1 (one choice per request), got {n!r}"
    temperature = getattr(body, "temperature", None)
    if temperature is not None and (not math.isfinite(temperature) or not 0 <= temperature <= 2):
        return f"temperature must be between 0 and 2, got {temperature!r}"
    top_p = getattr(body, "top_p", None)
    if top_p is not None and (not math.isfinite(top_p) or not 0 < top_p <= 1):
        return f"top_p must be in (0, 1], got {top_p!r}"
    best_of = getattr(body, "best_of", None)
    if best_of not in (None, 1):
        return f"best_of is not supported (got {best_of!r})"
    if getattr(body, "logprobs", None) not in (None, False) or getattr(body, "top_logprobs", None):
        return "logprobs are not supported by this server"
    if getattr(body, "stream_options", None) is not None and not getattr(body, "stream", False):
        return "stream_options is only allowed with stream: true"
    return None


def check_chat(body: Any, max_tokens_limit: int | None = None) -> str | None:
    """Reason a chat completion request cannot be served, or None."""
    messages = getattr(body, "messages", None)
    if not messages:
        return "messages must be a non-empty list"
    for i, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else getattr(message, "role", None)
        if role not in MESSAGE_ROLES:
            return f"messages[{i}].role must be one of {sorted(MESSAGE_ROLES)}, got {role!r}"
    return _check_common(body, max_tokens_limit)


def check_completion(body: Any, max_tokens_limit: int | None = None) -> str | None:
    """Reason a completion request cannot be served, or None."""
    prompt = getattr(body, "prompt", None)
    if prompt is None or prompt == "" or prompt == []:
        return "prompt must be a non-empty string or list"
    if isinstance(prompt, list) and any(p == "" or p == [] for p in prompt):
        return "prompt list must not contain empty prompts"
    if getattr(body, "echo", False):
        return "echo is not supported by this server"
    if getattr(body, "suffix", None):
        return "suffix is not supported by this server"
    return _check_common(body, max_tokens_limit)
