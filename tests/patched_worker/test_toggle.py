"""Speculation toggled at random iterations keeps greedy output token-identical (real engine, CPU).

Each run: 8 requests of different prompt lengths and output lengths arrive at staggered
times (so requests join and finish mid-schedule, some while OFF) while the switch flips at
random decode steps (scripted in the scheduler, seeded, reproducible). 24 schedules in all
over {warm_kv, full_extend} x {topk 1, topk 4}, 6 more under SGLang's overlap scheduler
(the GPU default); plus flips sent through the control RPC at random wall-clock times, a
`cold` run, and the edge cases: idle flips, requests waiting for memory, logprobs.
Outputs are compared whole (tokens and lengths) with the plain engine's.
"""

from __future__ import annotations

import random
import threading
import time

import pytest

from patched_worker.state import Strategy
from tests.patched_worker.helpers import (
    LENGTHS,
    NEW_TOKENS,
    accept_after_reenable,
    first_mismatch,
    greedy,
    mixed_prompts,
    random_schedule,
    reset_on,
    run_staggered,
)

pytestmark = pytest.mark.engine

CONFIGS = {1: (1, 3, 4), 4: (4, 3, 8)}  # topk -> (topk, steps, draft tokens)


def _toggle_runs(engine, prompts, reference, label: str, seeds: int = 6) -> None:
    for seed in range(seeds):
        rng = random.Random(f"{label}-{seed}")
        max_new = [rng.randint(8, NEW_TOKENS) for _ in prompts]
        delays = [rng.choice([0.0, 0.0, 0.1, 0.3, 0.6]) for _ in prompts]
        engine.schedule_flips(random_schedule(rng))
        got = run_staggered(engine, prompts, max_new, delays)
        want = [
            ref[:n] for ref, n in zip(reference, max_new, strict=True)
        ]  # greedy: a prefix of the long run
        assert first_mismatch(got, want) is None, f"seed {seed}: {first_mismatch(got, want)}"


def _assert_toggled(before, after) -> None:
    assert after.toggles - before.toggles >= 12, "the schedules should have flipped the engine"
    assert after.resyncs > before.resyncs
    assert after.off_steps > before.off_steps and after.on_steps > before.on_steps
    # every resync is timed (on CPU it has finished when the step returns) and the totals add up
    assert (
        after.resyncs_timed == after.resyncs and after.last_resync_ms is not None and after.last_resync_ms > 0
    )
    assert after.resync_ms_total > before.resync_ms_total


@pytest.mark.parametrize("topk", [1, 4])
@pytest.mark.parametrize("strategy", [Strategy.WARM_KV, Strategy.FULL_EXTEND])
def test_random_toggle_schedules_match_plain(engines, prompts, reference, strategy, topk):
    engine = engines.spec(*CONFIGS[topk])
    reset_on(engine, strategy)
    before = engine.get_speculation_state()
    _toggle_runs(engine, prompts, reference, f"{strategy.value}-{topk}")
    after = engine.get_speculation_state()
    _assert_toggled(before, after)
    assert (
        after.strategy is strategy and after.strategy_configured is strategy and after.strategy_fallback == ""
    )
    assert not after.off_cuda_graphs and after.off_cuda_graphs_note == "cuda graphs disabled"


def test_random_toggle_schedules_match_plain_under_the_overlap_scheduler(engines, prompts, reference):
    """The GPU default: results processed one step late, spec state relayed through SGLang's FutureMap."""
    engine = engines.spec_overlap(4, 3, 8)
    reset_on(engine, Strategy.WARM_KV)
    before = engine.get_speculation_state()
    _toggle_runs(engine, prompts, reference, "overlap")
    _assert_toggled(before, engine.get_speculation_state())


def test_flips_through_the_control_rpc_at_random_times(engines, prompts, reference):
    engine = engines.spec(*CONFIGS[1])
    reset_on(engine, Strategy.WARM_KV)
    stop = threading.Event()
    rng = random.Random(7)

    def flipper():
        while not stop.is_set():
            engine.set_speculation(rng.random() < 0.5)
            time.sleep(rng.uniform(0.01, 0.15))

    thread = threading.Thread(target=flipper)
    thread.start()
    try:
        got = run_staggered(engine, prompts, [NEW_TOKENS] * len(prompts), [0.0, 0.2] * (len(prompts) // 2))
    finally:
        stop.set()
        thread.join()
    assert first_mismatch(got, reference) is None, first_mismatch(got, reference)
    assert engine.get_speculation_state().toggles > 0


def _accept_after_reenable(engine, prompts, strategy: Strategy, off_steps: int = 12, window: int = 6):
    """Mean accept length over the first `window` verify steps after an OFF stretch."""
    reset_on(engine, strategy)
    engine.schedule_flips([3, 3 + off_steps])
    got = run_staggered(engine, prompts, [NEW_TOKENS] * len(prompts), [0.0] * len(prompts))
    return got, accept_after_reenable(engine.get_speculation_state().trace, window)


def test_cold_stays_correct_but_loses_acceptance(engines, prompts, reference):
    engine = engines.spec(*CONFIGS[1])
    got_warm, warm = _accept_after_reenable(engine, prompts, Strategy.WARM_KV)
    got_cold, cold = _accept_after_reenable(engine, prompts, Strategy.COLD)
    assert first_mismatch(got_warm, reference) is None
    assert first_mismatch(got_cold, reference) is None, (
        "cold re-enable must stay correct (the target verifies)"
    )
    assert cold < warm - 0.3, f"stale draft KV should cost acceptance: cold {cold:.2f} vs warm_kv {warm:.2f}"


def test_flip_on_an_idle_engine_is_harmless_and_idempotent(engines, prompts, reference):
    engine = engines.spec(*CONFIGS[4])
    reset_on(engine, Strategy.WARM_KV)
    for enabled in (False, False, True, True, False):
        engine.set_speculation(enabled)
    state = engine.get_speculation_state()
    assert state.requested is False and state.enabled is True  # applied at the next decode step only
    got = engine.generate(input_ids=prompts, sampling_params=greedy(NEW_TOKENS))
    assert first_mismatch([o["output_ids"] for o in got], reference) is None
    state = engine.get_speculation_state()
    assert state.enabled is False and state.on_steps >= 0
    # decode-step throughput counters the replica reports to the goodput rule
    assert state.decode_steps > 0 and state.decode_seconds > 0 and state.decode_tokens >= state.decode_steps


def test_flip_while_requests_wait_for_memory(engines, model_pair):
    """More requests than the KV cache holds at once: some wait in the queue across flips."""
    engine = engines.spec(*CONFIGS[1])
    reset_on(engine, Strategy.WARM_KV)
    many = mixed_prompts(model_pair, [101] * 48 + LENGTHS)
    want = engines.plain().generate(input_ids=many, sampling_params=greedy(24))
    seen_waiting = []
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            seen_waiting.append(engine.get_speculation_state().waiting)
            time.sleep(0.05)

    thread = threading.Thread(target=watch)
    thread.start()
    engine.schedule_flips([2, 5, 9, 14, 20, 27, 35, 44])
    try:
        got = engine.generate(input_ids=many, sampling_params=greedy(24))
    finally:
        stop.set()
        thread.join()
    assert [o["output_ids"] for o in got] == [o["output_ids"] for o in want]
    assert max(seen_waiting) > 0, "the test should have had requests waiting"


def _logprobs(outs) -> tuple[list[list[int]], list[list[float]], list[list[list[int]]]]:
    ids = [o["output_ids"] for o in outs]
    chosen = [[lp for lp, _, _ in o["meta_info"]["output_token_logprobs"]] for o in outs]
    top = [[[tid for _, tid, _ in step] for step in o["meta_info"]["output_top_logprobs"]] for o in outs]
    return ids, chosen, top


def test_logprobs_match_plain_with_speculation_on_off_and_toggled(engines, prompts):
    """The OFF step computes logprobs itself (in the spec layout): same numbers as the plain engine."""
    args = {
        "input_ids": prompts[:4],
        "sampling_params": greedy(20),
        "return_logprob": True,
        "top_logprobs_num": 3,
    }
    want_ids, want_lp, want_top = _logprobs(engines.plain().generate(**args))
    assert all(len(steps) == 20 and all(len(s) == 3 for s in steps) for steps in want_top)
    engine = engines.spec(*CONFIGS[1])
    for label, flips in (("off", None), ("on", None), ("toggled", [2, 5, 6, 9, 13])):
        reset_on(engine, Strategy.WARM_KV)
        before = engine.get_speculation_state()
        if flips:
            engine.schedule_flips(flips)
        else:
            engine.set_speculation(label == "on")  # applied at the first decode step
        ids, lp, top = _logprobs(engine.generate(**args))
        assert first_mismatch(ids, want_ids) is None, (label, first_mismatch(ids, want_ids))
        assert [len(x) for x in lp] == [len(x) for x in want_lp], label
        worst = max(
            abs(a - b) for got, ref in zip(lp, want_lp, strict=True) for a, b in zip(got, ref, strict=True)
        )
        assert worst < 1e-4, f"{label}: logprob differs by {worst:.2e}"
        assert top == want_top, label
        after = engine.get_speculation_state()
        if label != "on":
            assert after.off_steps > before.off_steps, label  # the OFF path really produced tokens
