"""Server-sent events of the OpenAI streaming API, from raw bytes to typed chunks.

`SseDecoder` turns the byte pieces a socket hands us (split anywhere, even in the
middle of a UTF-8 character or a `\\r\\n`) into complete `data:` payloads.
`parse_chunk` turns one payload into a `StreamChunk`.

Which chunks count as a token (an "emission" with a timestamp for TTFT/ITL):
a choice whose `delta.content` (chat) or `text` (completions) is a string, except
- a role announcement with empty content (vLLM's first chunk: `{"role": "assistant",
  "content": ""}`) — no token has been generated yet;
- an empty-content chunk that only carries `finish_reason` (SGLang's native server
  sends one) — it closes the stream, it is not a token.
An empty string anywhere else is a token whose text is empty: Ray's SGLang server
emits one when a token decodes to nothing yet (partial UTF-8). One chunk may carry
several tokens (speculative decoding accepts several per step), which is why output
tokens come from `usage` when the server sends it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from deployments.sse import SseDecoder  # the one SSE decoder, shared with the ingress

__all__ = ["DONE", "SseDecoder", "StreamChunk", "parse_chunk"]

DONE = "[DONE]"


@dataclass(frozen=True)
class StreamChunk:
    """What one SSE payload said, reduced to what the metrics need."""

    done: bool = False
    is_token: bool = False
    text: str = ""
    finish_reason: str | None = None
    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    error: str | None = None


def parse_chunk(payload: str) -> StreamChunk:
    """Parse one `data:` payload of a chat or completions stream."""
    if payload.strip() == DONE:
        return StreamChunk(done=True)
    try:
        obj = json.loads(payload)
    except json.JSONDecodeError:
        return StreamChunk(error=f"malformed SSE payload: {payload[:120]!r}")
    if not isinstance(obj, dict):
        return StreamChunk(error=f"unexpected SSE payload: {payload[:120]!r}")
    if "error" in obj:
        err = obj["error"]
        msg = err.get("message", str(err)) if isinstance(err, dict) else str(err)
        return StreamChunk(error=str(msg))
    usage = obj.get("usage") or {}
    completion = usage.get("completion_tokens") if isinstance(usage, dict) else None
    prompt = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    is_token, text, finish = False, "", None
    choices = obj.get("choices") or []
    if choices and isinstance(choices[0], dict):
        choice = choices[0]
        finish = choice.get("finish_reason")
        delta = choice.get("delta")
        if isinstance(delta, dict):
            content, role_only = delta.get("content"), "role" in delta
        else:
            content, role_only = choice.get("text"), False
        if isinstance(content, str):
            text = content
            is_token = content != "" or (not role_only and finish is None)
    return StreamChunk(
        is_token=is_token,
        text=text,
        finish_reason=finish,
        completion_tokens=int(completion) if completion is not None else None,
        prompt_tokens=int(prompt) if prompt is not None else None,
    )
