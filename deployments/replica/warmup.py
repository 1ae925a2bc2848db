"""A replica's warm-up: every path a request will take runs once before the replica takes traffic.

On a fresh GPU host kernels are compiled on first use (flashinfer JIT, Triton); a replica that
skips this makes its first requests in a mode wait seconds for their first token. The warm-up
runs, on the replica's own engine: a speculative (ON) batch, an OFF batch, a request during
which speculation comes back ON (the re-enable resync) and one during which it goes OFF, then
leaves the engine in the mode the replica starts in. Prompts are plain token ids, so it needs
no tokenizer or chat template.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

__all__ = ["warm_up"]

_PROMPT = list(range(10, 74))  # 64 token ids every vocabulary has
_NEW_TOKENS = 12


async def _generate(engine: Any, prompt_len: int) -> None:
    params = {"max_new_tokens": _NEW_TOKENS, "temperature": 0.0, "ignore_eos": True}
    await engine.async_generate(input_ids=_PROMPT[:prompt_len], sampling_params=params)


async def _flip_midway(engine: Any, enabled: bool) -> None:
    """Stream one request and switch speculation once its first chunk arrived."""
    params = {"max_new_tokens": _NEW_TOKENS * 2, "temperature": 0.0, "ignore_eos": True}
    stream = await engine.async_generate(input_ids=_PROMPT[:24], sampling_params=params, stream=True)
    flipped = False
    async for _ in stream:
        if not flipped:
            await _set(engine, enabled)
            flipped = True


async def _set(engine: Any, enabled: bool) -> None:
    """A blocking round trip to the scheduler: in a thread, off the replica's event loop (which also
    runs the engine's tokenizer manager and Serve's health checks)."""
    await asyncio.to_thread(engine.set_speculation, enabled)


async def warm_up(engine: Any, start_enabled: bool) -> float:
    """Run the warm-up; seconds it took. The engine ends in `start_enabled`'s mode."""
    started = time.monotonic()
    for enabled in (True, False):
        await _set(engine, enabled)
        await asyncio.gather(_generate(engine, 64), _generate(engine, 7))
    await _flip_midway(engine, True)  # OFF -> ON while decoding: the resync
    await _flip_midway(engine, False)  # ON -> OFF while decoding
    await _set(engine, start_enabled)
    return time.monotonic() - started
