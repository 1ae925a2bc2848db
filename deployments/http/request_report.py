"""What a response tells its user about how it was generated: `usage.specflip`.

`Tally` holds one request's counts while a replica serves it: token counts summed over its prompts
(a completions request may send several), the engine's decode steps, and the replica's speculation
mode sampled at arrival, at every streamed chunk and at the end (no engine call: the mode is the
control loop's last state read, refreshed once per `replicas.tick_s`; a flip is the loop's applied
flip counter moving). `Report` is what it comes to, as OpenAI `usage` carries it (the usage schema
allows properties it does not name):

    "usage": {"prompt_tokens": ..., "completion_tokens": ..., "total_tokens": ...,
              "specflip": {"modes": ["on"], "accept_length": 2.9, "flipped": false}}

accept_length is tokens per decode step: completion tokens after each prompt's first (made by its
prefill, not by a decode step) over SGLang's `spec_verify_ct`, which the patched engine counts for
OFF steps too (a plain decode, one token). So it is 1.0 for a request decoded OFF throughout, the
speculative accept length for one decoded ON, and in between for one that ran in both modes; null
when no decode step ran (one token, or an engine without speculation).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Report", "Tally", "chunk_id"]

_ID_START = 'data: {"id": "'  # the replica's SSE chunks (deployments.replica.generate) start with the id


@dataclass(frozen=True)
class Report:
    modes: tuple[str, ...]  # sorted: ("on",), ("off",), ("off", "on"); "unknown" before the first state read
    accept_length: float | None
    flipped: bool

    @property
    def modes_label(self) -> str:
        """The metric label: "on" | "off" | "both" | "unknown"."""
        if set(self.modes) >= {"on", "off"}:
            return "both"
        return self.modes[0] if len(self.modes) == 1 else "unknown"

    def as_json(self) -> dict[str, Any]:
        return {"modes": list(self.modes), "accept_length": self.accept_length, "flipped": self.flipped}


@dataclass
class Tally:
    """One request's counts while it is served (mutable: it accumulates over chunks and prompts)."""

    mode: str  # the replica's mode at arrival
    flips: int  # the control loop's applied flips at arrival
    prompt_tokens: int = 0
    completion_tokens: int = 0
    decode_tokens: int = 0  # completion tokens made by decode steps (each prompt's first is its prefill's)
    decode_steps: int = 0  # SGLang's spec_verify_ct: verify steps ON, plain decode steps OFF
    modes: set[str] = field(default_factory=set)
    flipped: bool = False

    def __post_init__(self) -> None:
        self.modes.add(self.mode)

    def add_output(self, meta: dict[str, Any]) -> None:
        """A finished prompt's meta_info (its last chunk's, streamed): counts are the prompt's own."""
        completion = int(meta.get("completion_tokens", 0))
        self.prompt_tokens += int(meta.get("prompt_tokens", 0))
        self.completion_tokens += completion
        self.decode_tokens += max(0, completion - 1)
        self.decode_steps += int(meta.get("spec_verify_ct", 0) or 0)

    def see(self, mode: str, flips: int) -> None:
        """The replica's mode and flip count now (cheap: attributes the control loop keeps)."""
        self.modes.add(mode)
        self.flipped = self.flipped or flips != self.flips

    def report(self) -> Report:
        modes = self.modes | {"on", "off"} if self.flipped else self.modes  # a flip: both modes ran
        if len(modes) > 1:
            modes = modes - {"unknown"}
        accept = round(self.decode_tokens / self.decode_steps, 3) if self.decode_steps else None
        return Report(tuple(sorted(modes)), accept, self.flipped)

    def usage(self, report: Report | None) -> dict[str, Any]:
        """The OpenAI usage object of a stream's usage chunk, with `specflip` unless report is None."""
        usage: dict[str, Any] = {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        }
        if report is not None:
            usage["specflip"] = report.as_json()
        return usage


def chunk_id(chunk: str) -> str | None:
    """The id of a stream's SSE chunk, read off its start (no JSON parse per chunk): the usage
    chunk reuses it, so every chunk of a stream has one id."""
    if not chunk.startswith(_ID_START):
        return None
    end = chunk.find('"', len(_ID_START))
    return chunk[len(_ID_START) : end] if end > 0 else None
