"""Prompts and reference runs shared by the engine tests."""

from __future__ import annotations

import asyncio
import random

__all__ = [
    "accept_after_reenable",
    "LENGTHS",
    "NEW_TOKENS",
    "first_mismatch",
    "greedy",
    "mixed_prompts",
    "prefill_off_then_reenable",
    "random_schedule",
    "reset_on",
    "run_staggered",
    "submit_staggered",
]

LENGTHS = [3, 7, 12, 20, 33, 48, 70, 101]  # prompt lengths in tokens, batched together
NEW_TOKENS = 48


def greedy(n: int) -> dict:
    return {"max_new_tokens": n, "temperature": 0, "ignore_eos": True}


def mixed_prompts(pair, lengths=LENGTHS) -> list[list[int]]:
    """Held-out prompts (never trained on) of the given token lengths."""
    from transformers import AutoTokenizer

    from loadtests.models.corpus import held_out_prompts

    tok = AutoTokenizer.from_pretrained(pair.target)
    return [held_out_prompts(tok, 1, n, seed=1000 + 7 * i + n)[0] for i, n in enumerate(lengths)]


def run_staggered(
    engine, prompts: list[list[int]], max_new: list[int], delays: list[float]
) -> list[list[int]]:
    """Submit each prompt after its delay (seconds) so requests join and leave a running batch."""
    requests = [
        {"input_ids": ids, "sampling_params": greedy(n)} for ids, n in zip(prompts, max_new, strict=True)
    ]
    return [out["output_ids"] for out in submit_staggered(engine, requests, delays)]


def submit_staggered(engine, requests: list[dict], delays: list[float]) -> list[dict]:
    """`engine.async_generate(**request)` for each request after its delay; the outputs in request order."""

    async def one(request, delay):
        await asyncio.sleep(delay)
        return await engine.async_generate(**request)

    async def all_():
        return await asyncio.gather(*(one(r, d) for r, d in zip(requests, delays, strict=True)))

    return engine.loop.run_until_complete(all_())


def first_mismatch(got: list[list[int]], want: list[list[int]]) -> str | None:
    """None if every output equals its reference exactly (same tokens, same length), else where they part.

    A shorter output is a mismatch too: an engine that stops early or returns nothing must fail."""
    if len(got) != len(want):
        return f"{len(got)} outputs for {len(want)} requests"
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        if g != w:
            at = next((k for k, (a, b) in enumerate(zip(g, w, strict=False)) if a != b), min(len(g), len(w)))
            return (
                f"request {i}: token {at} differs ({g[at : at + 4]} vs {w[at : at + 4]}; "
                f"lengths {len(g)} vs {len(w)})"
            )
    return None


def random_schedule(rng: random.Random, horizon: int = 30) -> list[int]:
    """Flip points (decode steps from now) for one run: 3-10 flips at random iterations."""
    return sorted(rng.sample(range(1, horizon), k=rng.randint(3, 10)))


def reset_on(engine, strategy=None) -> None:
    """A shared speculative engine back to ON with no scheduled flip (and `strategy`, warm_kv by
    default): the state every test of it starts from, whatever the tests before it left."""
    from patched_worker.state import Strategy

    engine.schedule_flips([])  # a flip left over from an earlier schedule must not fire here
    engine.set_strategy(strategy or Strategy.WARM_KV)
    engine.set_speculation(True)
    engine.generate(input_ids=[[1, 2, 3]], sampling_params=greedy(2))  # applies the pending mode


def prefill_off_then_reenable(engine, prompts, mode, strategy=None, on_at=6, window=6):
    """Prefill every prompt while OFF, decode `on_at` steps OFF, re-enable: (outputs, OFF prefills run,
    mean accept length of the first `window` verify steps after the resync). `mode` is an OffPrefill;
    `strategy` the OFF strategy (warm_kv by default)."""
    from patched_worker.state import OffPrefill, Strategy

    engine.schedule_flips([])
    engine.set_strategy(strategy or Strategy.WARM_KV)
    engine.set_off_prefill(mode)
    engine.set_speculation(False)  # a pending OFF takes effect at the next step, here the prompts' prefill
    before = engine.get_speculation_state()
    engine.schedule_flips([on_at])
    got = run_staggered(engine, prompts, [NEW_TOKENS] * len(prompts), [0.0] * len(prompts))
    after = engine.get_speculation_state()
    engine.set_off_prefill(OffPrefill.KV_WRITE)
    return got, after.off_prefills - before.off_prefills, accept_after_reenable(after.trace, window)


def accept_after_reenable(trace, window: int) -> float:
    """Mean accept length of the first `window` verify steps after the trace's last OFF (or resync) step."""
    last_off = max(i for i, t in enumerate(trace) if t[1] in ("off", "resync"))
    ons = [t[3] for t in trace[last_off + 1 :] if t[1] == "on"][:window]
    assert len(ons) == window, "the run should have re-enabled speculation and verified drafts"
    return sum(ons) / len(ons)
