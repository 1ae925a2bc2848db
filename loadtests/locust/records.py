"""One record per request: timestamps in, TTFT/TPOT/ITL/tokens out, JSONL on disk.

Definitions (seconds; the same as vLLM's and SGLang's serving benchmarks):
- TTFT = first token chunk - request start;
- ITL  = gaps between consecutive token chunks (one per chunk, not per token);
- TPOT = (last token chunk - first token chunk) / (output_tokens - 1), None when
  fewer than 2 output tokens;
- output_tokens = `usage.completion_tokens` when the server sent usage; else
  `max_tokens` when it stopped for `length` (exact); else the number of token
  chunks (an undercount when a chunk carries several tokens). `token_source`
  says which one was used.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal, TextIO

from loadtests.locust.sse import StreamChunk

__all__ = ["RequestRecord", "StreamAccumulator", "TokenSource", "read_records", "write_record"]

TokenSource = Literal["usage", "length", "chunks"]


@dataclass(frozen=True)
class RequestRecord:
    """A finished (or failed, or cancelled) request, times in epoch seconds."""

    start: float
    end: float
    ok: bool
    status: int
    output_tokens: int
    ttft: float | None = None
    tpot: float | None = None
    itl: tuple[float, ...] = ()
    prompt_tokens: int | None = None
    token_source: TokenSource = "chunks"
    chunks: int = 0
    error: str = ""
    api: str = "chat"
    users: int = 0
    # class routing: the class the user sent, and the replica and mode the response headers named
    request_class: str = ""
    replica: str = ""
    mode: str = ""

    @property
    def e2e(self) -> float:
        return self.end - self.start

    @property
    def first_token_at(self) -> float | None:
        return None if self.ttft is None else self.start + self.ttft

    def token_times(self) -> list[float]:
        """Epoch times of the token chunks (first token, then each ITL gap)."""
        if self.ttft is None:
            return []
        times = [self.start + self.ttft]
        for gap in self.itl:
            times.append(times[-1] + gap)
        return times

    def to_json(self) -> str:
        d = asdict(self)
        d["itl"] = [round(x, 6) for x in self.itl]
        return json.dumps(d, separators=(",", ":"))

    @classmethod
    def from_json(cls, line: str) -> RequestRecord:
        d = json.loads(line)
        d["itl"] = tuple(d.get("itl") or ())
        return cls(**d)


@dataclass
class StreamAccumulator:
    """Collects the chunks of one streaming response with their arrival times."""

    start: float
    max_tokens: int | None = None
    token_times: list[float] = field(default_factory=list)
    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    finish_reason: str | None = None
    done: bool = False
    error: str = ""
    http_status: int = 0  # set once the response headers arrive (0: no response yet)
    done_at: float | None = None  # when [DONE] arrived

    def add(self, chunk: StreamChunk, now: float) -> None:
        if chunk.error:
            self.error = chunk.error
        if chunk.done and not self.done:
            self.done, self.done_at = True, now
        if chunk.is_token:
            self.token_times.append(now)
        if chunk.finish_reason is not None:
            self.finish_reason = chunk.finish_reason
        if chunk.completion_tokens is not None:
            self.completion_tokens = chunk.completion_tokens
        if chunk.prompt_tokens is not None:
            self.prompt_tokens = chunk.prompt_tokens

    def output_tokens(self) -> tuple[int, TokenSource]:
        if self.completion_tokens is not None:
            return self.completion_tokens, "usage"
        if self.finish_reason == "length" and self.max_tokens is not None:
            return self.max_tokens, "length"
        return len(self.token_times), "chunks"

    def finish(
        self,
        end: float,
        status: int,
        *,
        error: str = "",
        api: str = "chat",
        users: int = 0,
        streamed: bool = True,
    ) -> RequestRecord:
        """The record of this request; ok only with HTTP 200, no error and a [DONE] or finish_reason
        (and, when streamed, at least one token chunk)."""
        err = error or self.error
        if not err and status == 200 and not (self.done or self.finish_reason):
            err = "stream ended without [DONE] or finish_reason"
        ok = status == 200 and not err
        n, source = self.output_tokens()
        times = self.token_times
        ttft = times[0] - self.start if times else None
        itl = tuple(b - a for a, b in zip(times, times[1:], strict=False))
        tpot = (times[-1] - times[0]) / (n - 1) if times and n > 1 else None
        if ok and streamed and not times:
            err, ok = "no token in a successful stream", False
        return RequestRecord(
            start=self.start,
            end=end,
            ok=ok,
            status=status,
            output_tokens=n,
            ttft=ttft,
            tpot=tpot,
            itl=itl,
            prompt_tokens=self.prompt_tokens,
            token_source=source,
            chunks=len(times),
            error=err,
            api=api,
            users=users,
        )


def write_record(fh: TextIO, record: RequestRecord) -> None:
    """Append one record as a JSON line and flush (a killed run keeps what it wrote)."""
    fh.write(record.to_json() + "\n")
    fh.flush()


def read_records(paths: Path | Iterable[Path]) -> Iterator[RequestRecord]:
    """Read records from one or more JSONL files; a torn last line is skipped."""
    for p in [paths] if isinstance(paths, Path) else paths:
        if not p.exists():
            continue
        for line in p.read_text().splitlines():
            if not line.strip():
                continue
            try:
                yield RequestRecord.from_json(line)
            except (json.JSONDecodeError, TypeError):
                continue
