"""A replica's warm-up: every path a request will take runs once before the replica takes traffic.

On a fresh GPU host kernels are compiled on first use (flashinfer JIT, Triton); a replica that
skips this makes its first requests in a mode wait seconds for their first token. The warm-up
runs, on the replica's own engine: a speculative (ON) batch and an OFF batch, then at every
power-of-two batch size up to the engine's `max_running_requests` two rounds, one from each mode: a
batch prefilled and decoding in that mode, switched to the other while it decodes and back (the
re-enable resync among the flips); it leaves the engine in the mode the replica starts in. The
batch sizes matter: SGLang's speculative path launches Triton kernels outside its CUDA graphs whose
block size is a compile-time constant of `next_power_of_2(batch)` (sglang 0.5.17: after every
verify, srt/speculative/spec_utils.py:732 launches `assign_extend_cache_locs`, whose `bs_upper` is a
`tl.constexpr`, kernels/ops/speculative/cache_locs.py:330), so the first ON step
in each power-of-two bucket compiles a kernel, and with it the scheduler stops. Prompts are plain
token ids, so it needs no tokenizer or chat template.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

__all__ = ["batch_buckets", "flip_round", "warm_up"]

_PROMPT = list(range(10, 74))  # 64 token ids every vocabulary has
_NEW_TOKENS = 12
_ROUND_TOKENS = 32  # room for the steps before, between and after a round's two flips
_DONE = 1 << 30  # a finished stream's chunk count: it satisfies every wait


def batch_buckets(max_batch: int) -> list[int]:
    """1, 2, 4, ... up to max_batch, and max_batch itself: one batch size per power-of-two bucket."""
    sizes = [1 << i for i in range(max(1, max_batch).bit_length()) if 1 << i <= max_batch]
    return sizes if sizes[-1] == max_batch else [*sizes, max_batch]


async def _generate(engine: Any, prompt_len: int) -> None:
    params = {"max_new_tokens": _NEW_TOKENS, "temperature": 0.0, "ignore_eos": True}
    await engine.async_generate(input_ids=_PROMPT[:prompt_len], sampling_params=params)


async def flip_round(engine: Any, start_on: bool, batch: int) -> None:
    """`batch` requests prefilled and decoding in one mode, switched to the other once each has its
    first chunk, and back once each has two more: prefill, both decode steps, both flips (the resync
    among them) at this batch size. A request that ends early stops holding the flips back."""
    params = {"max_new_tokens": _ROUND_TOKENS, "temperature": 0.0, "ignore_eos": True}
    chunks = [0] * batch
    moved = asyncio.Event()

    async def one(i: int) -> None:
        stream = await engine.async_generate(input_ids=_PROMPT[:24], sampling_params=params, stream=True)
        async for _ in stream:
            chunks[i] += 1
            moved.set()
        chunks[i] = _DONE
        moved.set()

    async def until(ready) -> None:
        while not ready():
            moved.clear()
            await moved.wait()

    async def flips() -> None:
        await until(lambda: min(chunks) >= 1)
        await _set(engine, not start_on)
        mark = list(chunks)
        await until(lambda: all(c >= m + 2 for c, m in zip(chunks, mark, strict=True)))
        await _set(engine, start_on)

    await _set(engine, start_on)
    if start_on:  # ON takes effect at a decode step (the resync): one request's, so the batch prefills ON
        await _generate(engine, 7)
    await asyncio.gather(flips(), *(one(i) for i in range(batch)))


async def _set(engine: Any, enabled: bool) -> None:
    """A blocking round trip to the scheduler: in a thread, off the replica's event loop (which also
    runs the engine's tokenizer manager and Serve's health checks)."""
    await asyncio.to_thread(engine.set_speculation, enabled)


async def warm_up(engine: Any, start_enabled: bool, max_batch: int = 2) -> float:
    """Run the warm-up; seconds it took. The engine ends in `start_enabled`'s mode. max_batch: the
    largest decode batch the engine will run (its max_running_requests)."""
    started = time.monotonic()
    for enabled in (True, False):
        await _set(engine, enabled)
        await asyncio.gather(_generate(engine, 64), _generate(engine, 7))
    for batch in batch_buckets(max_batch):
        for start_on in (False, True):
            await flip_round(engine, start_on, batch)
    await _set(engine, start_enabled)
    return time.monotonic() - started
