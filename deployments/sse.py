"""Server-sent events from raw bytes: the one SSE decoder.

`SseDecoder` turns the byte pieces a socket hands us (split anywhere, even in the middle of a
UTF-8 character or a `\\r\\n`) into complete `data:` payloads. The ingress reads the replicas'
stream packets with it (deployments.metrics); the load generator reads the app's streams with it
(loadtests.sse, which also classifies the payloads as OpenAI chunks).
"""

from __future__ import annotations

__all__ = ["SseDecoder"]


class SseDecoder:
    """Incremental SSE decoder: `feed(bytes) -> list of complete data payloads`."""

    def __init__(self) -> None:
        self._buf = b""
        self._data: list[str] = []

    def feed(self, piece: bytes) -> list[str]:
        self._buf += piece
        out: list[str] = []
        while True:
            nl = self._buf.find(b"\n")
            if nl < 0:
                break
            raw, self._buf = self._buf[:nl], self._buf[nl + 1 :]
            self._line(raw.rstrip(b"\r").decode("utf-8", errors="replace"), out)
        return out

    def close(self) -> list[str]:
        """Flush at end of stream (a last event without its blank line still counts)."""
        out: list[str] = []
        if self._buf:
            self._line(self._buf.rstrip(b"\r").decode("utf-8", errors="replace"), out)
            self._buf = b""
        self._line("", out)
        return out

    def _line(self, line: str, out: list[str]) -> None:
        if line == "":
            if self._data:
                out.append("\n".join(self._data))
                self._data = []
            return
        if line.startswith(":"):
            return  # comment / keep-alive
        field, _, value = line.partition(":")
        if field == "data":
            self._data.append(value[1:] if value.startswith(" ") else value)
