"""Greedy output of the real engine on CPU (fp32): plain == HF transformers; EAGLE-3 == plain.

The EAGLE-3 engines use the trained draft, so these runs accept several tokens per verify
(asserted): the equality covers both accepted and rejected drafts. A last test injects a
broken verify op and checks that the same comparison catches it.
"""

from __future__ import annotations

import os

import pytest

from tests.patched_worker.helpers import NEW_TOKENS, first_mismatch, greedy, reset_on

pytestmark = pytest.mark.engine


def test_plain_engine_matches_hf_transformers_greedy(model_pair, prompts, reference):
    import torch
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(model_pair.target, torch_dtype=torch.float32).eval()
    hf = []
    with torch.no_grad():
        for ids in prompts:
            out = model.generate(
                torch.tensor([ids]),
                max_new_tokens=NEW_TOKENS,
                min_new_tokens=NEW_TOKENS,
                do_sample=False,
                pad_token_id=model.config.pad_token_id,
            )
            hf.append(out[0, len(ids) :].tolist())
    assert all(len(x) == NEW_TOKENS for x in reference)
    assert first_mismatch(reference, hf) is None, first_mismatch(reference, hf)


@pytest.mark.parametrize(("topk", "steps", "draft_tokens"), [(1, 3, 4), (4, 3, 8)])
def test_eagle3_greedy_equals_plain_batched(engines, prompts, reference, topk, steps, draft_tokens):
    engine = engines.spec(topk, steps, draft_tokens)
    reset_on(engine)  # the shared engine as configured, whatever the tests before this one left
    outs = engine.generate(input_ids=prompts, sampling_params=greedy(NEW_TOKENS))
    ids = [o["output_ids"] for o in outs]
    assert first_mismatch(ids, reference) is None, first_mismatch(ids, reference)
    accepted = sum(o["meta_info"]["completion_tokens"] - 1 for o in outs)
    verifies = sum(o["meta_info"]["spec_verify_ct"] for o in outs)
    assert accepted / verifies > 1.8, f"the trained draft should be accepted: {accepted / verifies:.2f}"


def test_broken_verify_is_caught(engines, model_pair, prompts, reference):
    """FAILURE INJECTION: a verify that accepts every draft must make the comparison fail."""
    from patched_worker.cpu.ops import FAULT_ENV
    from patched_worker.engine import SpecFlipEngine, cpu_engine_kwargs

    shared = engines.spec(1, 3, 4)  # running in this process while the broken one starts and stops
    os.environ[FAULT_ENV] = "accept_all_drafts"  # read by the ops in the spawned scheduler
    try:
        engine = SpecFlipEngine(**cpu_engine_kwargs(model_pair.target, model_pair.draft))
    finally:
        del os.environ[FAULT_ENV]
    try:
        outs = engine.generate(input_ids=prompts, sampling_params=greedy(NEW_TOKENS))
    finally:
        engine.shutdown()
    # its shutdown stopped only its own processes: the engines shared by the session still answer
    again = shared.generate(input_ids=prompts[:2], sampling_params=greedy(NEW_TOKENS))
    assert [o["output_ids"] for o in again] == reference[:2]
    ids = [o["output_ids"] for o in outs]
    differing = sum(a != b for a, b in zip(ids, reference, strict=True))
    assert first_mismatch(ids, reference) is not None
    assert differing >= len(prompts) // 2, f"only {differing} outputs changed"
