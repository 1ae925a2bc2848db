"""Server-sent events from raw bytes: the one SSE decoder.

`SseDecoder` turns the byte pieces a socket hands us (split anywhere, even in the middle of a
UTF-8 character or a `\\r\\n`) into complete `data:` payloads, as bytes. The ingress reads the
replicas' stream packets with it (deployments.metrics); the load generator reads the app's
streams with it (loadtests.sse, which also classifies the payloads as OpenAI chunks).
"""

from __future__ import annotations

__all__ = ["SseDecoder"]


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
