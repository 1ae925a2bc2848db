"""Prompts and reference runs shared by the engine tests."""

from __future__ import annotations

import asyncio
import random

__all__ = ["LENGTHS", "NEW_TOKENS", "greedy", "mixed_prompts", "run_staggered", "first_mismatch"]

LENGTHS = [3, 7, 12, 20, 33, 48, 70, 101]  # prompt lengths in tokens, batched together
NEW_TOKENS = 48


def greedy(n: int) -> dict:
    return {"max_new_tokens": n, "temperature": 0, "ignore_eos": True}


def mixed_prompts(pair, lengths=LENGTHS) -> list[list[int]]:
    """Held-out prompts (never trained on) of the given token lengths."""
    from transformers import AutoTokenizer

    from patched_worker.models.corpus import held_out_prompts

    tok = AutoTokenizer.from_pretrained(pair.target)
    return [held_out_prompts(tok, 1, n, seed=1000 + 7 * i + n)[0] for i, n in enumerate(lengths)]


def run_staggered(engine, prompts: list[list[int]], max_new: list[int], delays: list[float]) -> list[list[int]]:
    """Submit each prompt after its delay (seconds) so requests join and leave a running batch."""

    async def one(ids, n, delay):
        await asyncio.sleep(delay)
        out = await engine.async_generate(input_ids=ids, sampling_params=greedy(n))
        return out["output_ids"]

    async def all_():
        return await asyncio.gather(*(one(p, n, d) for p, n, d in zip(prompts, max_new, delays, strict=True)))

    return engine.loop.run_until_complete(all_())


def first_mismatch(got: list[list[int]], want: list[list[int]]) -> str | None:
    """None if every output equals the reference prefix of its length, else where they part."""
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        if g != w[: len(g)]:
            at = next((k for k, (a, b) in enumerate(zip(g, w, strict=False)) if a != b), len(g))
            return f"request {i}: token {at} differs ({g[at: at + 4]} vs {w[at: at + 4]})"
    return None


def random_schedule(rng: random.Random, horizon: int = 30) -> list[int]:
    """Flip points (decode steps from now) for one run: 3-10 flips at random iterations."""
    return sorted(rng.sample(range(1, horizon), k=rng.randint(3, 10)))
