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

__all__ = ["DONE", "SseDecoder", "StreamChunk", "parse_chunk"]

DONE = b"[DONE]"


class SseDecoder:
    """Incremental SSE decoder: `feed(bytes) -> list of complete data payloads` (bytes).

    The common case — events of one `data:` line separated by a blank line, no CR — is split
    with one `bytes.split` per piece; anything else (CRLF, comments, event fields, multi-line
    data) goes line by line.
    """

    def __init__(self) -> None:
        self._buf = b""
        self._data: list[bytes] = []

    def feed(self, piece: bytes) -> list[bytes]:
        buf = self._buf + piece if self._buf else piece
        out: list[bytes] = []
        if b"\r" in buf or self._data:
            self._buf = self._lines(buf, out)
            return out
        events = buf.split(b"\n\n")
        self._buf = events.pop()
        for event in events:
            if event.startswith(b"data: ") and b"\n" not in event:
                out.append(event[6:])
            else:
                self._lines(event + b"\n\n", out)  # whole event: no remainder
        return out

    def close(self) -> list[bytes]:
        """Flush at end of stream (a last event without its blank line still counts)."""
        out: list[bytes] = []
        if self._buf:
            self._lines(self._buf + b"\n", out)
            self._buf = b""
        self._line(b"", out)
        return out

    def _lines(self, buf: bytes, out: list[bytes]) -> bytes:
        """Decode the complete lines of `buf` (LF or CRLF ended); returns the unfinished rest."""
        start = 0
        while True:
            nl = buf.find(b"\n", start)
            if nl < 0:
                return buf[start:]
            self._line(buf[start:nl].rstrip(b"\r"), out)
            start = nl + 1

    def _line(self, line: bytes, out: list[bytes]) -> None:
        if line == b"":
            if self._data:
                out.append(b"\n".join(self._data))
                self._data = []
            return
        if line.startswith(b":"):
            return  # comment / keep-alive
        field, _, value = line.partition(b":")
        if field == b"data":
            self._data.append(value[1:] if value.startswith(b" ") else value)


@dataclass(frozen=True)
class StreamChunk:
    """What one SSE payload said, reduced to what the metrics need."""

    done: bool = False
    is_token: bool = False
    finish_reason: str | None = None
    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    error: str | None = None


_TOKEN = StreamChunk(is_token=True)
_STRING_CONTENT = (b'"content":"', b'"content": "', b'"text":"', b'"text": "')
_NOT_PLAIN = (b'"role"', b'"usage":{', b'"usage": {', b'"error"')
_NO_FINISH = (b'"finish_reason":null', b'"finish_reason": null')


def _plain_token(payload: bytes) -> bool:
    """A mid-stream content chunk (string content, no finish, no role/usage/error): the hot case,
    told apart by byte search without parsing the JSON. Anything else is parsed."""
    return (
        any(m in payload for m in _NO_FINISH)
        and any(m in payload for m in _STRING_CONTENT)
        and not any(m in payload for m in _NOT_PLAIN)
    )


def parse_chunk(payload: bytes | str) -> StreamChunk:
    """Parse one `data:` payload of a chat or completions stream."""
    raw = payload.encode() if isinstance(payload, str) else payload
    if _plain_token(raw):
        return _TOKEN
    if raw.strip() == DONE:
        return StreamChunk(done=True)
    try:
        obj = json.loads(raw)
    except ValueError:
        return StreamChunk(error=f"malformed SSE payload: {raw[:120]!r}")
    if not isinstance(obj, dict):
        return StreamChunk(error=f"unexpected SSE payload: {raw[:120]!r}")
    if "error" in obj:
        err = obj["error"]
        msg = err.get("message", str(err)) if isinstance(err, dict) else str(err)
        return StreamChunk(error=str(msg))
    usage = obj.get("usage") or {}
    completion = usage.get("completion_tokens") if isinstance(usage, dict) else None
    prompt = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    is_token, finish = False, None
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
            is_token = content != "" or (not role_only and finish is None)
    return StreamChunk(
        is_token=is_token,
        finish_reason=finish,
        completion_tokens=int(completion) if completion is not None else None,
        prompt_tokens=int(prompt) if prompt is not None else None,
    )
