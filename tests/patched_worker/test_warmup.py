"""The replica warm-up (deployments.replica.warmup) runs every decode path once on a real engine: ON and OFF
batches, and at every power-of-two batch size up to the cap flips in both directions while a batch
decodes (the re-enable resync among them), and leaves the engine in the mode the replica starts in;
outputs afterwards still equal the plain engine's."""

from __future__ import annotations

import pytest

from deployments.replica.warmup import batch_buckets, warm_up
from tests.patched_worker.helpers import first_mismatch, greedy, mixed_prompts

pytestmark = pytest.mark.engine


@pytest.mark.parametrize("start_enabled", [False, True])
def test_warm_up_runs_every_path_and_leaves_the_start_mode(engines, model_pair, start_enabled):
    engine = engines.spec(1, 3, 4)
    engine.schedule_flips([])  # nothing scripted by an earlier test may fire during the warm-up
    before = engine.get_speculation_state()
    took = engine.loop.run_until_complete(warm_up(engine, start_enabled, max_batch=4))
    after = engine.get_speculation_state()
    assert took > 0
    assert after.on_steps > before.on_steps and after.off_steps > before.off_steps
    # two rounds per batch size (1, 2, 4), each flipping twice while its batch decodes, one resync each
    assert after.resyncs >= before.resyncs + 6
    assert after.toggles >= before.toggles + 12
    assert after.requested is start_enabled
    last = before.trace[-1][0] if before.trace else 0
    steps = [(kind, bs) for i, kind, bs, _ in after.trace if i > last]
    assert {bs for kind, bs in steps if kind == "resync"} == {1, 2, 4}  # the resync at every bucket
    assert {bs for kind, bs in steps if kind == "on"} >= {1, 2, 4}

    prompts = mixed_prompts(model_pair)[:3]
    got = [o["output_ids"] for o in engine.generate(input_ids=prompts, sampling_params=greedy(24))]
    want = [o["output_ids"] for o in engines.plain().generate(input_ids=prompts, sampling_params=greedy(24))]
    assert first_mismatch(got, want) is None
    engine.set_speculation(True)  # the shared engine's usual mode for the tests after this one


def test_batch_buckets_cover_every_power_of_two_up_to_the_cap() -> None:
    assert batch_buckets(1) == [1] and batch_buckets(2) == [1, 2]
    assert batch_buckets(256) == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert batch_buckets(100) == [1, 2, 4, 8, 16, 32, 64, 100]  # 100 stands for the 128 bucket
