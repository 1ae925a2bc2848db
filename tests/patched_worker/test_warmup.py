"""The replica warm-up (deployments.replica.warmup) runs every decode path once on a real engine: ON and OFF
batches and flips in both directions while a request decodes (the re-enable resync), and leaves the
engine in the mode the replica starts in; outputs afterwards still equal the plain engine's."""

from __future__ import annotations

import pytest

from deployments.replica.warmup import warm_up
from tests.patched_worker.helpers import first_mismatch, greedy, mixed_prompts

pytestmark = pytest.mark.engine


@pytest.mark.parametrize("start_enabled", [False, True])
def test_warm_up_runs_every_path_and_leaves_the_start_mode(engines, model_pair, start_enabled):
    engine = engines.spec(1, 3, 4)
    engine.schedule_flips([])  # nothing scripted by an earlier test may fire during the warm-up
    before = engine.get_speculation_state()
    took = engine.loop.run_until_complete(warm_up(engine, start_enabled))
    after = engine.get_speculation_state()
    assert took > 0
    assert after.on_steps > before.on_steps and after.off_steps > before.off_steps
    assert after.resyncs >= before.resyncs + 1  # speculation came back while a request decoded
    assert after.toggles >= before.toggles + 3  # ON -> OFF, OFF -> ON mid-request, ON -> OFF mid-request
    assert after.requested is start_enabled

    prompts = mixed_prompts(model_pair)[:3]
    got = [o["output_ids"] for o in engine.generate(input_ids=prompts, sampling_params=greedy(24))]
    want = [o["output_ids"] for o in engines.plain().generate(input_ids=prompts, sampling_params=greedy(24))]
    assert first_mismatch(got, want) is None
    engine.set_speculation(True)  # the shared engine's usual mode for the tests after this one
