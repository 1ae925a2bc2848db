"""On a CUDA GPU (bf16, triton, CUDA graphs on, overlap scheduler on, radix cache off, topk 1, one static
batch): toggled greedy output == plain, whole lengths included, up to near-ties (tests/patched_worker/
gpu_checks.py). Run on a GPU host with `pytest -m gpu tests/patched_worker/test_gpu.py`; the production
configuration (flashinfer, radix cache, topk 4, staggered arrivals, structured output) is in
test_gpu_production.py.
"""

from __future__ import annotations

import random

import pytest

from tests.patched_worker.gpu_checks import compare
from tests.patched_worker.helpers import NEW_TOKENS, greedy, mixed_prompts, random_schedule

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run on the GPU host)"),
]


def gpu_kwargs(pair, draft: bool, **extra) -> dict:
    kw = dict(
        model_path=pair.target,
        dtype="bfloat16",
        attention_backend="triton",
        disable_radix_cache=True,
        max_running_requests=64,
        cuda_graph_max_bs_decode=64,
        mem_fraction_static=0.3,
        log_level="error",
    )
    if draft:
        kw.update(
            speculative_algorithm="EAGLE3",
            speculative_draft_model_path=pair.draft,
            speculative_num_steps=3,
            speculative_eagle_topk=1,
            speculative_num_draft_tokens=4,
        )
    kw.update(extra)
    return kw


@pytest.fixture(scope="module")
def plain_run(model_pair):
    import sglang

    prompts = mixed_prompts(model_pair)
    engine = sglang.Engine(**gpu_kwargs(model_pair, draft=False))
    try:
        outs = engine.generate(
            input_ids=prompts, sampling_params=greedy(NEW_TOKENS), return_logprob=True, top_logprobs_num=5
        )
    finally:
        engine.shutdown()
    return prompts, [o["output_ids"] for o in outs], [o["meta_info"]["output_top_logprobs"] for o in outs]


def test_toggled_speculation_matches_plain_up_to_near_ties_with_cuda_graphs(model_pair, plain_run):
    from patched_worker.engine import SpecFlipEngine
    from patched_worker.state import Strategy

    prompts, plain, top = plain_run
    engine = SpecFlipEngine(**gpu_kwargs(model_pair, draft=True))
    report = []
    try:
        state = engine.get_speculation_state()
        assert state.off_cuda_graphs, (
            f"OFF steps must replay plain decode graphs: {state.off_cuda_graphs_note}"
        )
        for strategy in (Strategy.WARM_KV, Strategy.FULL_EXTEND):
            engine.set_strategy(strategy)
            for seed in range(5):
                engine.schedule_flips(random_schedule(random.Random(f"gpu-{strategy.value}-{seed}")))
                got = [
                    o["output_ids"]
                    for o in engine.generate(input_ids=prompts, sampling_params=greedy(NEW_TOKENS))
                ]
                report.append((strategy.value, seed, compare(got, plain, top)))
        state = engine.get_speculation_state()
    finally:
        engine.shutdown()
    print("divergences (strategy, seed, [Divergence]):", report)
    bad = [(s, seed, d) for s, seed, ds in report for d in ds if not d.near_tie]
    assert not bad, f"divergences that are not near-ties: {bad}"
    assert state.toggles >= 10 and state.resyncs >= 5
