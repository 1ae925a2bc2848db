"""Diagnostics: profile a window of OFF steps inside the scheduler (SPECFLIP_PROFILE_OFF=path).

Writes torch.profiler tables (by CPU time, and the sync-like ops) for OFF steps
`start..start+count` to `path`. Only installed when the variable is set.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

__all__ = ["maybe_wrap"]


@dataclass
class _Window:
    """OFF steps counted so far, and the profiler while the window is open."""

    n: int = 0
    prof: torch.profiler.profile | None = None


def maybe_wrap(switch_cls) -> None:
    path = os.environ.get("SPECFLIP_PROFILE_OFF")
    if not path:
        return
    start, count = 30, 20
    original = switch_cls.decode_step
    state = _Window()

    def decode_step(self, upstream, batch, on_publish, grammar_barrier):
        off = not (self.enabled and self.requested)
        if off:
            state.n += 1
        n = state.n
        if off and n == start:
            acts = [torch.profiler.ProfilerActivity.CPU]
            if torch.cuda.is_available():
                acts.append(torch.profiler.ProfilerActivity.CUDA)
            state.prof = torch.profiler.profile(activities=acts)
            state.prof.__enter__()
        result = original(self, upstream, batch, on_publish, grammar_barrier)
        if off and n == start + count and state.prof is not None:
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            prof, state.prof = state.prof, None
            prof.__exit__(None, None, None)
            ka = prof.key_averages()
            with open(path, "a") as f:
                f.write(
                    f"== {count} OFF steps, strategy {self.config.strategy.value}, batch {len(batch.seq_lens)}\n"
                )
                f.write(ka.table(sort_by="self_cpu_time_total", row_limit=35) + "\n")
            state.n = 0
        return result

    switch_cls.decode_step = decode_step
